/* lz_decode_group.h - decode attention grouped by document: the sequences of a
 * batched decode step that place the same cached document (one copy in the
 * pool, each sequence at its own offset) read its K/V once per step between
 * them, each query rotated by R(-p) for its own offset p. The lazy decode
 * (lz_decode.h) reads a document once per sequence placing it; block and
 * prefix caches cannot share at all, since their copies differ by position.
 *
 * Work is a list of items. An item is one segment of one sequence's block
 * lists (the reader's: lz_decode_params.blocks, (B, KV, NB)), or a range of
 * its blocks, and up to LZ_DECODE_GROUP_MAX members: the batch rows whose
 * queries attend to it, each with its offset and the index of the partial
 * result it writes. One CTA per (item, kv head) runs the members' G query
 * heads as the rows of one tensor-core tile (members x G <= 16): the K/V
 * bytes of a block serve them all. Every row then merges its partials
 * (log-sum-exp, as split-KV) in a second launch.
 *
 * Segments of a reader: seg_first (L, KV, n_seg) int32 gives, per (layer, kv
 * head) list, the index of each segment's first block word; segment s ends
 * where s + 1 starts, and the last one (the sequence's own rows) at n_blocks.
 * Per-head lengths may differ (Ada-KV): the item's range [first, last) is
 * relative to the segment's start and clipped to its end in each list.
 * Block words' offsets are ignored (the members carry theirs); their rows,
 * key counts, v_rows and fp8 blocks (k_scales > 0: rows of k_pool8 /
 * v_pool8, lz_decode.h) are used as lz_decode_lazy uses them. The CUDA kernel
 * lands an fp8 block's bytes in its shared-memory slots and converts them
 * there to exact bf16 (the prefill kernels' tiles), so the tensor-core loop is
 * the bf16 one; the key scale multiplies the block's scores and the value
 * scale its share of the output.
 *
 * Legend: B = rows of the batch, KV = kv heads, H = KV*G query heads, d =
 * head_dim, P = max_parts (partials a row, at most).
 */
#ifndef LZ_DECODE_GROUP_H
#define LZ_DECODE_GROUP_H

#include "kernels/lz_decode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_DECODE_GROUP_MAX 4 /* members an item, at most */

typedef struct {
    const int32_t *seg_first; /* the reader's (L, KV, n_seg) first block of each segment */
    int32_t n_seg;            /* its segments, the own rows last */
    int32_t seg;              /* the item's segment */
    int32_t reader;           /* the batch row whose lists hold it */
    int32_t first, last;      /* blocks [first, last) of the segment (clipped to its end) */
    int32_t n_members;        /* 1 .. LZ_DECODE_GROUP_MAX, n_members * G <= 16 */
    int32_t member[LZ_DECODE_GROUP_MAX]; /* batch rows */
    int32_t offset[LZ_DECODE_GROUP_MAX]; /* each one's position of the segment, 0 .. LZ_DECODE_MAX_OFFSET */
    int32_t part[LZ_DECODE_GROUP_MAX];   /* each one's partial, 0 .. n_parts[member) */
} lz_decode_item;

typedef struct {
    /* q, o, k_pool, v_pool, blocks, v_rows, n_blocks, inv_freq, max_blocks, batch, heads,
     * head_dim, rope_layout, scale, pdl and the fp8 fields (k_pool8, v_pool8, k_scales,
     * v_scales: all set, or k_scales NULL) as lz_decode_lazy; n_split and work unused */
    lz_decode_params dec;
    const lz_decode_item *items; /* n_items (device memory for the kernel) */
    int n_items;
    int layer;                   /* the items' seg_first tables are read at this layer */
    const int32_t *n_parts;      /* (B) partials of each row: every one written by one member */
    int max_parts;               /* P >= every n_parts */
    float *work;                 /* lz_decode_group_workspace() bytes: parts (B, H, P, d), lse (B, H, P) */
    size_t work_bytes;
} lz_decode_group_params;

size_t lz_decode_group_workspace(const lz_decode_group_params *p);
/* The arguments the kernel can check from the host: 0 or an lz_attn_status. */
int lz_decode_group_check(const lz_decode_group_params *p);

/* CUDA (kernels/lz_decode_group.cu): the items' partials then the merge, two
 * launches on stream (the first a programmatic dependent when dec.pdl). With
 * fp8 blocks possible (dec.k_scales) it takes values at rows of their own
 * (dec.v_rows, as the engine's): LZ_ATTN_EARG without. */
int lz_decode_group(const lz_decode_group_params *p, void *stream);
/* CPU reference (kernels/lz_decode_group_ref.c): host memory, the same
 * parameters; also checks every item (LZ_ATTN_EARG when one is out of range). */
int lz_decode_group_ref(const lz_decode_group_params *p, void *stream);

/* One row of a batch as lz_decode_group_plan sees it. */
typedef struct {
    const int32_t *seg_first; /* passed to its items (device memory) */
    int n_seg;                /* documents + 1 */
    const uint64_t *keys;     /* (n_seg - 1) the identity of each document's rows: equal keys, the
                                 same rows (and lengths) in every list */
    const int32_t *offsets;   /* (n_seg - 1) where it places each */
    const int32_t *blocks;    /* (n_seg) the most blocks of each segment over (layer, kv head); the
                                 last: its own rows' blocks this step */
} lz_decode_group_row;

/* Items for rows[0..B) with G query heads a kv head: each document's placements
 * grouped by key, LZ_DECODE_GROUP_MAX (or 16 / G) members an item, every
 * segment cut into ranges of chunk blocks; the own rows an item each. Writes
 * at most cap items, n_parts (B) and *max_parts; returns the items, or -1
 * (cap too small, a bad argument, out of memory). *reads (optional): the
 * document item-reads, against the placements a per-row decode reads. */
int lz_decode_group_plan(const lz_decode_group_row *rows, int B, int G, int chunk, lz_decode_item *items, int cap,
                         int32_t *n_parts, int *max_parts, int *reads, int *placements);

/* One row's grouping tables from its segments hs (L, n_seg; the last column its own rows) and
 * lens / rows (L, n_seg, KV): each kv head's kept length and first row in the segment (the
 * prefill descriptors' lengths and seg_row): seg_first (L, KV, n_seg) the first block of every
 * segment in each (layer, kv head) list, 64 keys a block; per document (n_seg - 1) its key (a
 * 64-bit hash of every layer's row pointers, bf16 and fp8, and every head's length and first
 * row: equal keys, the same rows), its offset and its most blocks over (layer, kv head).
 * 0, or -1 (an offset past LZ_DECODE_MAX_OFFSET, a bad argument). */
int lz_decode_group_tables(const lz_attn_segment *hs, const int32_t *lens, const int32_t *rows, int L, int KV,
                           int n_seg, int32_t *seg_first, uint64_t *keys, int32_t *offsets, int32_t *blocks);

#ifdef __cplusplus
}
#endif
#endif /* LZ_DECODE_GROUP_H */
