/* lz_gemv.h - matrix-vector products of one decode step (gpu/llama_cuda*.cu):
 * y = W x for up to three bf16 weight matrices that share the input x (q, k
 * and v, or gate and up, in one launch), fp32 accumulation and output. A
 * decode step is bound by reading the weights once; cuBLAS's GEMM at one
 * column reads them at ~half the HBM rate on an H200. The
 * CUDA launcher (kernels/lz_gemv.cu) and the CPU reference
 * (kernels/lz_gemv_ref.c) share the signature; tests/cuda/test_gemv.cu
 * compares them and times both against cuBLAS. Plain C.
 */
#ifndef LZ_GEMV_H
#define LZ_GEMV_H

#include <stdint.h>

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_GEMV_MAX_MATS 3
#define LZ_GEMV_MAX_IN 16384 /* x is staged in shared memory: 32 KB */

typedef struct {
    const lz_bf16 *w; /* (rows, in) row-major */
    float *y;         /* (rows) */
    int rows;
} lz_gemv_mat;

/* For each of the n_mats (1..LZ_GEMV_MAX_MATS) matrices: y = W x + beta * y
 * (beta 0: y is only written). x (in) bf16; in a multiple of 8, at most
 * LZ_GEMV_MAX_IN. Returns 0, LZ_ATTN_EARG, or a cudaError_t. */
int lz_gemv(const lz_gemv_mat *mats, int n_mats, const lz_bf16 *x, int in, float beta, void *stream);
int lz_gemv_ref(const lz_gemv_mat *mats, int n_mats, const lz_bf16 *x, int in, float beta, void *stream);

/* The same with x = lz_op_rmsnorm of one fp32 row x (in), weights norm_w
 * (in): the norm fused into the products that read it (q/k/v, gate/up, the
 * output head). The CUDA kernel computes x bit for bit as lz_op_rmsnorm. */
int lz_gemv_rmsnorm(const lz_gemv_mat *mats, int n_mats, const float *x, const float *norm_w, float eps, int in,
                    float beta, void *stream);
int lz_gemv_rmsnorm_ref(const lz_gemv_mat *mats, int n_mats, const float *x, const float *norm_w, float eps, int in,
                        float beta, void *stream);

/* The same with x = lz_op_silu_mul(gate, up) (in each, fp32): the FFN gate
 * fused into the down projection; bit for bit as lz_op_silu_mul. The engine's
 * decode step uses lz_gemv_rmsnorm_swiglu then lz_gemv instead (faster: the
 * gate is made once, not staged by every block); this form stays as the
 * benchmarks' earlier path (test_gemv --bench) and for fp32 gate/up rows. */
int lz_gemv_silu(const lz_gemv_mat *mats, int n_mats, const float *gate, const float *up, int in, float beta,
                 void *stream);
int lz_gemv_silu_ref(const lz_gemv_mat *mats, int n_mats, const float *gate, const float *up, int in, float beta,
                     void *stream);

/* The FFN's gate and up products with the silu gate in their epilogue: h (rows) bf16 =
 * bf16(lz_op_silu_mul(W_gate x', W_up x')), x' = lz_op_rmsnorm(x) as lz_gemv_rmsnorm's.
 * One warp computes gate row r and up row r together, so the down product reads h as a
 * plain bf16 x (lz_gemv) instead of every block staging silu(gate) * up from the fp32
 * rows; h is bit for bit what lz_gemv_rmsnorm's two rows then lz_op_silu_mul give.
 * w_gate, w_up (rows, in). Returns 0, LZ_ATTN_EARG, or a cudaError_t. */
int lz_gemv_rmsnorm_swiglu(const lz_bf16 *w_gate, const lz_bf16 *w_up, int rows, const float *x, const float *norm_w,
                           float eps, int in, lz_bf16 *h, void *stream);
int lz_gemv_rmsnorm_swiglu_ref(const lz_bf16 *w_gate, const lz_bf16 *w_up, int rows, const float *x, const float *norm_w,
                               float eps, int in, lz_bf16 *h, void *stream);
/* its argument check (0 or LZ_ATTN_EARG) */
int lz_gemv_swiglu_check(const lz_bf16 *w_gate, const lz_bf16 *w_up, int rows, const float *x, const float *norm_w,
                         int in, const lz_bf16 *h);

/* The attention's q, k, v products of one decode row with the rotary and the appends in their
 * epilogue: a warp computes the two rows of a rotary pair (base/rope.h: pair t of head h is rows
 * h d + a, h d + b of its matrix), so what lz_gemv_rmsnorm (wq, wk, wv) then lz_op_heads_own
 * (one row) write comes out of one launch, bit for bit: qh (H, d) and kh (KV, d) rotated at
 * position pos0 + *count, vh (KV, d) as is, and k and v also at row *count of each head of
 * own_k, own_v (KV, N, d). The fp32 rows are not written. */
typedef struct {
    const lz_bf16 *wq, *wk, *wv; /* (H d, in), (KV d, in), (KV d, in) */
    int H, KV, d;                /* d even, at most 512 */
    int layout;                  /* LZ_ROPE_ADJACENT or LZ_ROPE_HALF */
    const float *inv_freq;       /* (d / 2) */
    int64_t pos0;
    const int *count;            /* the tokens so far (device memory on the GPU) */
    lz_bf16 *qh, *kh, *vh;
    lz_bf16 *own_k, *own_v;
    int N;                       /* own rows a head */
} lz_gemv_rope;

/* Returns 0, LZ_ATTN_EARG, LZ_ATTN_EHEADDIM, or a cudaError_t. */
int lz_gemv_rmsnorm_rope(const lz_gemv_rope *p, const float *x, const float *norm_w, float eps, int in, void *stream);
int lz_gemv_rmsnorm_rope_ref(const lz_gemv_rope *p, const float *x, const float *norm_w, float eps, int in,
                             void *stream);
/* its argument check (0, LZ_ATTN_EARG or LZ_ATTN_EHEADDIM) */
int lz_gemv_rope_check(const lz_gemv_rope *p, const float *x, const float *norm_w, int in);

/* Launch tuning (benchmarks' A/B; the CUDA launcher only): persistent blocks
 * a SM for plain and rmsnorm inputs (0: the default, 4) and for the silu gate
 * (0: 2); a value past the rows' need gives one block per 16 rows, the grid
 * the products had before the persistent ones. */
void lz_gemv_tune(int blocks_per_sm, int silu_blocks_per_sm);

/* The argument check they share (0 or LZ_ATTN_EARG); x is the input's first array. */
int lz_gemv_check(const lz_gemv_mat *mats, int n_mats, const void *x, int in);

#ifdef __cplusplus
}
#endif
#endif /* LZ_GEMV_H */
