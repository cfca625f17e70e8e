/* weights.h - weight matrices as the model file stores them: fp32, or bf16 /
 * fp16 / Q8_0 used in place from the file's mapping (half, or for Q8_0 a
 * quarter, of the memory of an fp32 copy, and of the bytes a decode step
 * reads). The forward pass widens rows to fp32 as it reads them: widening is
 * exact (Q8_0: the fp16 scale times the int8, as dequantizing at load did),
 * so the products are those of an fp32 copy; only summation orders differ
 * (logits within 1e-6 of the model widened at load, tests/test_weights.c).
 *
 * Legend: a matrix is (rows, cols) row-major (GGUF ne[0] = cols); Q8_0 rows
 * are cols/32 blocks of 34 bytes (fp16 scale d, 32 int8 q: value d * q).
 */
#ifndef LZ_WEIGHTS_H
#define LZ_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { LZ_MAT_F32 = 0, LZ_MAT_BF16 = 1, LZ_MAT_F16 = 2, LZ_MAT_Q8_0 = 3 };

typedef struct {
    const void *data; /* NULL: absent */
    int type;         /* LZ_MAT_*; Q8_0 needs cols % 32 == 0 */
} lz_mat;

/* Whether loaders keep 16-bit and Q8_0 weights in place: 1 unless the
 * environment sets LAZY_F32_WEIGHTS to something other than "" or "0" (then
 * they widen them to fp32 copies at load, the engine's behaviour before);
 * read once with the other switches (base/env.h: lz_env_get). */
int lz_mat_in_place(void);

/* out[0..n) = elements [first, first + n) of m (row-major order), widened to fp32. */
void lz_mat_get_f32(lz_mat m, size_t first, size_t n, float *out);

/* An fp32 view of m's first n elements: m.data itself when fp32, else a
 * widened malloc'd copy also stored in *owned (the caller frees *owned,
 * which is NULL when nothing was allocated). NULL when out of memory. */
const float *lz_mat_f32(lz_mat m, size_t n, float **owned);

/* y[r] = beta * y[r] + (row r of m) . x for rows r0 <= r < r1 of a matrix
 * with cols columns that is not fp32 (beta 0 ignores y's old value, NaN
 * included). */
void lz_mat_gemv(float *y, lz_mat m, const float *x, int cols, int r0, int r1, float beta);

/* Tests and benchmarks: 0 makes lz_mat_gemv use its portable C loops even
 * where the AVX2 ones run (1, the default, lets it). Not thread-safe. */
void lz_mat_set_simd(int on);

#ifdef __cplusplus
}
#endif
#endif /* LZ_WEIGHTS_H */
