/* test_decode_group.c - decode attention grouped by document
 * (kernels/lz_decode_group.h) on the CPU: the plan's items (members per item,
 * every partial written once, reads saved where documents are shared, its
 * errors) and the grouped reference against the per-row lazy decode
 * reference (lz_decode_lazy_ref) on random batches (tests/decode_group_case.h):
 * both layouts, head_dim 64 and 128, GQA 1, 4, 8, Ada-KV-like per-head
 * lengths, offsets past 65,536, chunked ranges. Items out of range are
 * refused. A row's tables (lz_decode_group_tables): its segments' first
 * blocks, keys equal exactly for the same rows. */
#include "kernels/lz_decode_group.h"
#include "tests/decode_group_case.h"
#include "tests/test.h"

static double max_rel(const lz_bf16 *a, const lz_bf16 *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = lz_bf16_to_f32(a[i]), y = lz_bf16_to_f32(b[i]);
        if (isnan(x) || isnan(y)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* the plan's items for case c, checked; returns the count (items, n_parts, P filled) */
static int plan_checked(const dgc_case *c, int chunk, lz_decode_item *items, int cap, int32_t *n_parts, int *P,
                        int *reads, int *placed)
{
    const int n = lz_decode_group_plan(c->rows, c->B, c->G, chunk, items, cap, n_parts, P, reads, placed);
    CHECK(n > 0, "plan B=%d G=%d chunk=%d: %d", c->B, c->G, chunk, n);
    if (n <= 0) return n;
    /* every (row, part) written by exactly one member; members within 16 / G */
    int *seen = calloc((size_t)c->B * *P, sizeof(int)), bad_members = 0, bad_parts = 0;
    for (int t = 0; t < n; t++) {
        const lz_decode_item *it = &items[t];
        if (it->n_members < 1 || it->n_members * c->G > 16 || it->n_members > LZ_DECODE_GROUP_MAX) bad_members++;
        for (int m = 0; m < it->n_members; m++) {
            if (it->part[m] >= n_parts[it->member[m]]) bad_parts++;
            else seen[(size_t)it->member[m] * *P + it->part[m]]++;
        }
    }
    int once = 1;
    for (int b = 0; b < c->B; b++)
        for (int j = 0; j < n_parts[b]; j++) once = once && seen[(size_t)b * *P + j] == 1;
    CHECK(!bad_members && !bad_parts && once, "plan G=%d: members %d, parts out of range %d, each written once %d",
          c->G, bad_members, bad_parts, once);
    free(seen);
    return n;
}

static void test_equals_per_row(int d, int layout, int G, int KV, int B, int ND, int chunk, int fp8, uint64_t seed)
{
    dgc_case c;
    CHECK(dgc_make(&c, seed, B, KV, G, d, layout, ND, fp8) == 0, "case");
    const size_t on = (size_t)B * c.H * d;
    lz_bf16 *o1 = malloc(on * 2), *o2 = malloc(on * 2);
    lz_decode_params dp = dgc_params(&c, o1);
    CHECK(lz_decode_lazy_ref(&dp, NULL) == 0, "per-row reference");
    const int cap = 4096;
    lz_decode_item *items = malloc(sizeof *items * cap);
    int32_t n_parts[64];
    int P = 0, reads = 0, placed = 0;
    const int n = plan_checked(&c, chunk, items, cap, n_parts, &P, &reads, &placed);
    lz_decode_group_params gp = dgc_group_params(&c, o2, items, n, n_parts, P);
    for (size_t i = 0; i < on; i++) o2[i] = lz_f32_to_bf16(NAN);
    CHECK(lz_decode_group_ref(&gp, NULL) == 0, "grouped reference");
    const double e = max_rel(o2, o1, on);
    CHECK(e < 4e-3, "grouped == per-row d=%d layout=%d G=%d KV=%d B=%d chunk=%d fp8=%d: rel err %g", d, layout, G, KV,
          B, chunk, fp8, e);
    /* shared documents: fewer document blocks read than placed */
    CHECK(reads <= placed, "reads %d <= placements %d", reads, placed);
    /* 16+ rows over a few documents: reads near placements / members an item (4 at G <= 4, 2 at 8) */
    if (B >= 16 && ND <= 8)
        CHECK(G <= 4 ? reads * 2 < placed : reads * 5 < placed * 4, "16+ rows over %d documents, G=%d: reads %d, placed %d",
              ND, G, reads, placed);
    free(gp.work);
    free(items);
    free(o1);
    free(o2);
    dgc_free(&c);
}

static void test_plan_errors(void)
{
    dgc_case c;
    CHECK(dgc_make(&c, 7, 8, 2, 4, 64, LZ_ROPE_HALF, 3, 0) == 0, "case");
    lz_decode_item items[512];
    int32_t n_parts[64];
    int P = 0;
    CHECK(lz_decode_group_plan(c.rows, c.B, c.G, 4, items, 2, n_parts, &P, NULL, NULL) == -1, "cap too small: -1");
    CHECK(lz_decode_group_plan(c.rows, c.B, 17, 4, items, 512, n_parts, &P, NULL, NULL) == -1, "G 17: -1");
    CHECK(lz_decode_group_plan(c.rows, c.B, c.G, 0, items, 512, n_parts, &P, NULL, NULL) == -1, "chunk 0: -1");
    const int n = lz_decode_group_plan(c.rows, c.B, c.G, 4, items, 512, n_parts, &P, NULL, NULL);
    CHECK(n > 0, "plan");
    /* G = 4: at most 4 members; G = 8: 2 */
    int most = 0;
    for (int t = 0; t < n; t++) most = items[t].n_members > most ? items[t].n_members : most;
    CHECK(most <= 4, "G=4: members %d", most);
    lz_bf16 *o = malloc((size_t)c.B * c.H * c.d * 2);
    lz_decode_group_params gp = dgc_group_params(&c, o, items, n, n_parts, P);
    CHECK(lz_decode_group_ref(&gp, NULL) == 0, "valid items run");
    lz_decode_item keep = items[0];
    items[0].reader = c.B;
    CHECK(lz_decode_group_ref(&gp, NULL) == LZ_ATTN_EARG, "reader out of range refused");
    items[0] = keep;
    items[0].part[0] = n_parts[items[0].member[0]];
    CHECK(lz_decode_group_ref(&gp, NULL) == LZ_ATTN_EARG, "part out of range refused");
    items[0] = keep;
    items[0].n_members = 5;
    CHECK(lz_decode_group_ref(&gp, NULL) == LZ_ATTN_EARG, "5 members refused");
    items[0] = keep;
    items[0].offset[0] = LZ_DECODE_MAX_OFFSET + 1;
    CHECK(lz_decode_group_ref(&gp, NULL) == LZ_ATTN_EARG, "offset past the word's range refused");
    items[0] = keep;
    items[0].seg = items[0].n_seg;
    CHECK(lz_decode_group_ref(&gp, NULL) == LZ_ATTN_EARG, "segment out of range refused");
    items[0] = keep;
    gp.work_bytes--;
    CHECK(lz_decode_group_ref(&gp, NULL) == LZ_ATTN_EWORK, "short workspace refused");
    gp.work_bytes++;
    gp.dec.k_scales = (const float *)gp.work;
    CHECK(lz_decode_group_check(&gp) == LZ_ATTN_EARG, "k_scales without v_scales and fp8 pools refused");
    free(gp.work);
    free(o);
    dgc_free(&c);
}

/* lz_decode_group_tables: seg_first by the heads' lengths, keys equal exactly for the same rows */
static void test_tables(void)
{
    enum { L = 2, KV = 3, W = 4 }; /* 3 documents, then the own rows */
    lz_attn_segment hs[L * W];
    int32_t lens[L * W * KV], rows[L * W * KV];
    memset(hs, 0, sizeof hs);
    static lz_bf16 pool[4096];
    for (int l = 0; l < L; l++)
        for (int i = 0; i < W; i++) {
            /* documents 0 and 2 the same rows (the same pointers, lengths, head rows); 1 other rows */
            const int doc = i == 2 ? 0 : i;
            hs[l * W + i].k = pool + 100 * doc + 10 * l;
            hs[l * W + i].v = pool + 2000 + 100 * doc + 10 * l;
            hs[l * W + i].offset = 1000 * i + 7;
            for (int kv = 0; kv < KV; kv++) {
                lens[(l * W + i) * KV + kv] = 1 + 37 * (doc + 1) * (kv + 1) + 5 * l; /* per-head lengths */
                rows[(l * W + i) * KV + kv] = 300 * kv;
            }
        }
    int32_t sf[L * KV * W], off[W - 1], blk[W - 1];
    uint64_t key[W - 1];
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, W, sf, key, off, blk) == 0, "tables");
    CHECK(key[0] == key[2] && key[0] != key[1], "keys: the same rows equal (%d), other rows not (%d)", key[0] == key[2],
          key[0] != key[1]);
    int sums = 1, most = 1;
    for (int lh = 0; lh < L * KV; lh++) {
        const int l = lh / KV, kv = lh % KV;
        int n = 0;
        for (int i = 0; i < W; i++) {
            sums = sums && sf[lh * W + i] == n;
            if (i < W - 1) n += (lens[(l * W + i) * KV + kv] + 63) / 64;
        }
    }
    for (int i = 0; i < W - 1; i++) {
        int m = 0;
        for (int lh = 0; lh < L * KV; lh++) {
            const int b = (lens[((lh / KV) * W + i) * KV + lh % KV] + 63) / 64;
            m = b > m ? b : m;
        }
        most = most && blk[i] == m && off[i] == 1000 * i + 7;
    }
    CHECK(sums && most, "seg_first the blocks before each segment (%d); offsets and most blocks (%d)", sums, most);
    /* one head's length or first row changed: another key */
    lens[(1 * W + 2) * KV + 1]++;
    uint64_t key2[W - 1];
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, W, sf, key2, off, blk) == 0 && key2[2] != key[0] &&
              key2[0] == key[0],
          "a length differs: its key differs, the others stay");
    lens[(1 * W + 2) * KV + 1]--;
    rows[(0 * W + 2) * KV + 2] += 64;
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, W, sf, key2, off, blk) == 0 && key2[2] != key[0],
          "a head's first row differs: its key differs");
    rows[(0 * W + 2) * KV + 2] -= 64;
    hs[1 * W + 2].k8 = (const uint8_t *)pool; /* an fp8 copy beside: other rows */
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, W, sf, key2, off, blk) == 0 && key2[2] != key[0],
          "fp8 rows differ: its key differs");
    hs[1 * W + 2].k8 = NULL;
    hs[1].offset = LZ_DECODE_MAX_OFFSET + 1;
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, W, sf, key2, off, blk) == -1, "an offset past the words: -1");
    hs[1].offset = -1;
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, W, sf, key2, off, blk) == -1, "a negative offset: -1");
    CHECK(lz_decode_group_tables(hs, lens, rows, L, KV, 1, sf, NULL, NULL, NULL) == 0 && sf[0] == 0,
          "the own rows alone: no documents");
}

int main(void)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const int layouts[2] = {LZ_ROPE_ADJACENT, LZ_ROPE_HALF};
    for (int li = 0; li < 2; li++)
        for (int d = 64; d <= 128; d += 64)
            for (int gi = 0; gi < 3; gi++) {
                const int G = gi == 0 ? 1 : gi == 1 ? 4 : 8, KV = G == 8 ? 2 : 3;
                for (int fp8 = 0; fp8 <= 1; fp8++) { /* documents bf16, or e4m3 with the own rows bf16 */
                    test_equals_per_row(d, layouts[li], G, KV, 24, 6, 2, fp8, seed += 77);
                    test_equals_per_row(d, layouts[li], G, KV, 5, 40, 64, fp8, seed += 77);
                }
            }
    test_equals_per_row(128, LZ_ROPE_HALF, 4, 8, 40, 8, 8, 0, seed += 77); /* the 8B shape's heads */
    test_equals_per_row(128, LZ_ROPE_HALF, 4, 8, 40, 8, 8, 1, seed += 77);
    test_equals_per_row(128, LZ_ROPE_HALF, 4, 2, 1, 1, 1, 0, seed += 77);
    test_plan_errors();
    test_tables();
    printf("%d passed, %d failed\n", lz_test_passed, lz_test_failed);
    return lz_test_failed != 0;
}
