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
 * fused into the down projection; bit for bit as lz_op_silu_mul. */
int lz_gemv_silu(const lz_gemv_mat *mats, int n_mats, const float *gate, const float *up, int in, float beta,
                 void *stream);
int lz_gemv_silu_ref(const lz_gemv_mat *mats, int n_mats, const float *gate, const float *up, int in, float beta,
                     void *stream);

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
