/* lz_decode_group_plan.c - the items of a grouped decode step
 * (lz_decode_group.h): every placement of a document in the batch's rows,
 * sorted by the document's key so that equal keys (one copy of the rows) are
 * side by side, taken LZ_DECODE_GROUP_MAX (or 16 / G) at a time into items
 * whose first member reads, each segment cut into chunk-block ranges; then
 * each row's own rows as items of one member. And the tables a row brings to
 * it (lz_decode_group_tables). Host code, plain C.
 */
#include <stdlib.h>

#include "kernels/lz_decode_group.h"

typedef struct {
    uint64_t key;
    int b, seg, blocks;
} placement;

static int by_key(const void *x, const void *y)
{
    const placement *a = x, *c = y;
    if (a->key != c->key) return a->key < c->key ? -1 : 1;
    if (a->b != c->b) return a->b < c->b ? -1 : 1;
    return a->seg < c->seg ? -1 : a->seg > c->seg;
}

/* the most blocks of placements pl[0..n) */
static int most_blocks(const placement *pl, int n)
{
    int blocks = 0;
    for (int m = 0; m < n; m++) blocks = pl[m].blocks > blocks ? pl[m].blocks : blocks;
    return blocks;
}

/* appends the items of members pl[0..n) (one document, blocks at most) over its blocks: 0 or -1 (cap) */
static int add_items(const lz_decode_group_row *rows, const placement *pl, int n, int blocks, int chunk,
                     lz_decode_item *items, int cap, int *n_items, int32_t *n_parts)
{
    const lz_decode_group_row *rd = &rows[pl[0].b];
    for (int c = 0; c < blocks; c += chunk) {
        if (*n_items >= cap) return -1;
        lz_decode_item *it = &items[(*n_items)++];
        it->seg_first = rd->seg_first;
        it->n_seg = rd->n_seg;
        it->seg = pl[0].seg;
        it->reader = pl[0].b;
        it->first = c;
        it->last = c + chunk;
        it->n_members = n;
        for (int m = 0; m < LZ_DECODE_GROUP_MAX; m++) {
            const int in = m < n;
            it->member[m] = in ? pl[m].b : 0;
            it->offset[m] = in ? (pl[m].seg < rows[pl[m].b].n_seg - 1 ? rows[pl[m].b].offsets[pl[m].seg] : 0) : 0;
            it->part[m] = in ? n_parts[pl[m].b]++ : 0;
        }
    }
    return 0;
}

int lz_decode_group_plan(const lz_decode_group_row *rows, int B, int G, int chunk, lz_decode_item *items, int cap,
                         int32_t *n_parts, int *max_parts, int *reads, int *placements)
{
    if (!rows || B < 0 || G < 1 || G > 16 || chunk < 1 || (cap && !items) || !n_parts || !max_parts) return -1;
    size_t n = 0;
    for (int b = 0; b < B; b++) {
        if (rows[b].n_seg < 1 || !rows[b].blocks || (rows[b].n_seg > 1 && (!rows[b].keys || !rows[b].offsets)))
            return -1;
        n += (size_t)rows[b].n_seg - 1;
        n_parts[b] = 0;
    }
    placement *pl = malloc((n ? n : 1) * sizeof *pl);
    if (!pl) return -1;
    size_t k = 0;
    long doc_blocks = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s + 1 < rows[b].n_seg; s++) {
            pl[k++] = (placement){rows[b].keys[s], b, s, rows[b].blocks[s]};
            doc_blocks += rows[b].blocks[s];
        }
    qsort(pl, n, sizeof *pl, by_key);
    const int per = 16 / G < LZ_DECODE_GROUP_MAX ? 16 / G : LZ_DECODE_GROUP_MAX;
    int n_items = 0, rc = 0;
    long read_blocks = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i + 1;
        while (j < n && pl[j].key == pl[i].key) j++;
        for (size_t a = i; a < j && !rc; a += (size_t)per) {
            const int m = (int)(j - a < (size_t)per ? j - a : (size_t)per), blocks = most_blocks(pl + a, m);
            read_blocks += blocks;
            rc = add_items(rows, pl + a, m, blocks, chunk, items, cap, &n_items, n_parts);
        }
        i = j;
    }
    for (int b = 0; b < B && !rc; b++) { /* the own rows: one member, at offset 0 */
        const placement own = {0, b, rows[b].n_seg - 1, rows[b].blocks[rows[b].n_seg - 1]};
        rc = add_items(rows, &own, 1, own.blocks, chunk, items, cap, &n_items, n_parts);
    }
    free(pl);
    if (rc) return -1;
    int most = 1;
    for (int b = 0; b < B; b++) most = n_parts[b] > most ? n_parts[b] : most;
    *max_parts = most;
    if (reads) *reads = (int)read_blocks;
    if (placements) *placements = (int)doc_blocks;
    return n_items;
}

static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

int lz_decode_group_tables(const lz_attn_segment *hs, const int32_t *lens, const int32_t *rows, int L, int KV,
                           int n_seg, int32_t *seg_first, uint64_t *keys, int32_t *offsets, int32_t *blocks)
{
    if (!hs || !lens || !rows || L < 1 || KV < 1 || n_seg < 1 || !seg_first || (n_seg > 1 && (!keys || !offsets || !blocks)))
        return -1;
    const int W = n_seg, S = n_seg - 1, BL = LZ_DECODE_BLOCK;
    for (int i = 0; i < S; i++) {
        if (hs[i].offset < 0 || hs[i].offset > LZ_DECODE_MAX_OFFSET) return -1;
        uint64_t h = 0;
        int most = 0;
        for (int l = 0; l < L; l++) {
            const lz_attn_segment *sg = &hs[(size_t)l * W + i];
            h = mix(h, (uint64_t)(uintptr_t)sg->k);
            h = mix(h, (uint64_t)(uintptr_t)sg->v);
            h = mix(h, (uint64_t)(uintptr_t)sg->k8);
            h = mix(h, (uint64_t)(uintptr_t)sg->v8);
            for (int kv = 0; kv < KV; kv++) {
                const size_t at = ((size_t)l * W + i) * KV + kv;
                h = mix(h, ((uint64_t)(uint32_t)lens[at] << 32) | (uint32_t)rows[at]);
                const int nb = (lens[at] + BL - 1) / BL;
                most = nb > most ? nb : most;
            }
        }
        keys[i] = h;
        offsets[i] = (int32_t)hs[i].offset;
        blocks[i] = most;
    }
    for (int lh = 0; lh < L * KV; lh++) {
        const int l = lh / KV, kv = lh % KV;
        int n = 0;
        for (int i = 0; i <= S; i++) {
            seg_first[(size_t)lh * W + i] = n;
            if (i < S) n += (lens[((size_t)l * W + i) * KV + kv] + BL - 1) / BL;
        }
    }
    return 0;
}
