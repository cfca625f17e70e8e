/* lz_prefill.h - attention for M query rows of one sequence over S cached
 * segments plus their own keys (causal): lazy (each K tile rotated by its
 * segment's offset R(p) after loading) and the non-lazy twin (keys already at
 * final positions). Also the ingest case: S = 0, M = document length.
 *
 * Legend: S = segments, KV = kv heads, H = query heads (KV*G), M = rows,
 * d = head_dim (64 or 128), T = segment cap, n_split = split-KV parts.
 *
 * Row m of the question sees every kept key of every segment and its own
 * keys 0..m. The lazy CUDA kernel applies the placement as q . R(p) K_j =
 * (R(-p) q) . K_j: it rotates the CTA's query fragments in registers once per
 * segment (cos/sin from p->rope_cs or built once per CTA) instead of every K tile; the
 * result equals rotating the keys (tests compare with the materialised twin). Queries come rotated at their final positions; k_self is rotated
 * at final positions (self_offset = 0) or, for the lazy kernel, at local
 * positions and placed at self_offset. An (h, m) with no visible key cannot
 * occur (the diagonal is always visible).
 *
 * fp8 segments (seg_fp8 = 1 and the descriptor's k8 set; lz_attn.h): the CUDA
 * kernels copy the e4m3 tile (half the bytes) into the lower half of the
 * shared slots its bf16 tile takes, and each thread turns the bytes it copied
 * into bf16 in place before the tile's barrier, so the tensor-core loop (wgmma
 * or mma.sync) reads the same bf16 tiles as for a bf16 segment. The values are
 * exact (e4m3 fits bf16); the segment's k_scale[h] multiplies the tile's
 * scores and v_scale[h] its probabilities (bf16 P keeps its relative precision
 * at any scale). The own keys (k_self, v_self) stay bf16. An e4m3 NaN byte
 * (S.1111.111) reads as +-480 in the CUDA kernels (NaN in the references).
 */
#ifndef LZ_PREFILL_H
#define LZ_PREFILL_H

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_PREFILL_BN 64  /* keys per tile; a tile never straddles two segments */
#define LZ_PREFILL_MAX_SEG 128 /* segments per call (cos/sin tables live in shared memory) */

typedef struct {
    lz_bf16 *o;                  /* (H, M, d) output, row (h, m) at o[(h*M + m)*d] */
    const lz_bf16 *q;            /* (H, M, d) queries, rotated at final positions */
    const lz_bf16 *k_self;       /* (KV, M, d) the rows' own keys */
    const lz_bf16 *v_self;       /* (KV, M, d) the rows' own values */
    int64_t self_offset;         /* lazy only: own keys are R(self_offset) * k_self */
    const lz_attn_segment *segs; /* (S) descriptors (device memory for the CUDA kernels) */
    const int32_t *seg_len;      /* (S, KV) kept keys of segment s, kv head h: seg_len[s*KV + h] (0 allowed) */
    const int32_t *seg_row;      /* optional (S, KV): the row of kv head h's first key in segment s,
                                    counted from its k / v (k8 / v8), seg_row[s*KV + h]: heads packed
                                    one after another (Ada-KV's unequal lengths take only their rows);
                                    NULL: h * cap (every head cap rows apart) */
    const float *inv_freq;       /* (d/2) rotary inverse frequencies incl. divisors (lz_rope_inv_freqs) */
    int64_t seg_keys;            /* sizing hint for n_split: sum over segments of the largest len (host-known) */
    int n_seg;                   /* S, 0..LZ_PREFILL_MAX_SEG */
    int n_rows;                  /* M >= 1; CUDA kernels: G*M / rows per CTA (64 or 128) <= 65535 */
    int n_heads;                 /* H */
    int n_kv_heads;              /* KV; H % KV == 0 */
    int head_dim;                /* d: 64 or 128 */
    int rope_layout;             /* LZ_ROPE_ADJACENT or LZ_ROPE_HALF (base/rope.h) */
    float scale;                 /* softmax scale, usually 1/sqrt(d) */
    int n_split;                 /* split-KV parts; 0 = choose (lz_prefill_splits) */
    int rows_per_warp;           /* CUDA kernel shape: 0 = choose, 16 or 32 (tests, tuning) */
    int rows_per_cta;            /* CUDA kernel shape: 0 = choose, 64 (16 rows a warp only) or 128 (GQA-packed rows) */
    int wgmma;                   /* CUDA tile loop: 0 = choose, 1 = mma.sync, 2 = wgmma (sm_90a; 64 rows a CTA) */
    const float *rope_cs;        /* lazy, optional: (S+1, d/2) (cos, sin) pairs of -offset * inv_freq,
                                    slot S = self_offset (lz_prefill_rope_table; the same for every
                                    layer of a forward pass; 16-byte aligned, device memory; used by
                                    the 16-rows-a-warp kernels); NULL = the kernel computes them */
    int no_pdl;                  /* CUDA, split-KV: 1 = launch the combine kernel plainly, not as a
                                    programmatic dependent of the split kernel (A/B; results equal) */
    float *work;                 /* split-KV scratch, lz_prefill_workspace() bytes; unused when 1 part */
    size_t work_bytes;
    int seg_fp8;                 /* 1: segments may be fp8 (lz_attn_segment.k8 set; the descriptors are
                                    device memory, so the host is told): the CUDA kernels built for fp8
                                    segments run, reading each descriptor's k8; 0: every segment is bf16
                                    and k8 is ignored (the kernels and the references alike) */
} lz_prefill_params;

/* Kernel shape (rows per CTA, rows per warp), split-KV parts and tile loop
 * (*wgmma 1 = wgmma) the CUDA kernels use for p on n_sm SMs (p's own choices
 * where set). */
void lz_prefill_plan(const lz_prefill_params *p, int n_sm, int *rows_per_cta, int *rows_per_warp,
                     int *n_split, int *wgmma);
/* Split-KV parts the CUDA kernels use for p (p->n_split if > 0) on n_sm SMs. */
int lz_prefill_splits(const lz_prefill_params *p, int n_sm);
/* The (cos, sin) table of p->rope_cs on the host: out[(s*(d/2) + i)*2 + {0,1}] =
 * cos/sin((float)(-off_s) * inv_freq[i]) for the n_seg offsets then self_offset
 * (n_seg + 1 slots); offsets and inv_freq in host memory. */
void lz_prefill_rope_table(float *out, const int64_t *seg_offsets, int n_seg, int64_t self_offset,
                           const float *inv_freq, int head_dim);

/* Bytes of p->work needed for n_split parts (0 when n_split == 1). */
size_t lz_prefill_workspace(const lz_prefill_params *p, int n_split);

/* CUDA kernels (kernels/lz_prefill.cu), asynchronous on stream (a
 * cudaStream_t, NULL = default). Return 0 or an lz_attn_status / cudaError_t. */
int lz_prefill_lazy(const lz_prefill_params *p, void *stream);
int lz_prefill(const lz_prefill_params *p, void *stream);

/* CPU references (kernels/lz_prefill_ref.c): same parameters in host memory,
 * fp32 math, bf16 output; stream is ignored. */
int lz_prefill_lazy_ref(const lz_prefill_params *p, void *stream);
int lz_prefill_ref(const lz_prefill_params *p, void *stream);

/* Argument checks shared by the kernels and the references. */
int lz_prefill_check(const lz_prefill_params *p);

#ifdef __cplusplus
}
#endif
#endif /* LZ_PREFILL_H */
