/* weights.c - 16-bit weight matrices (weights.h): widening and the decode
 * dot product, portable C and, on x86-64 CPUs that have them, AVX2 + FMA
 * (+ F16C) intrinsics chosen at run time. */
#include <stdlib.h>
#include <string.h>

#include "model/half.h"
#include "model/weights.h"

int lz_mat_keep_16bit(void)
{
    const char *e = getenv("LAZY_F32_WEIGHTS");
    return !(e && *e && strcmp(e, "0") != 0);
}

void lz_mat_get_f32(lz_mat m, size_t first, size_t n, float *out)
{
    if (m.type == LZ_MAT_F32) {
        memcpy(out, (const float *)m.data + first, n * sizeof(float));
    } else if (m.type == LZ_MAT_BF16) {
        const uint16_t *w = (const uint16_t *)m.data + first;
        for (size_t i = 0; i < n; i++) out[i] = lz_bf16_to_f32(w[i]);
    } else {
        const uint16_t *w = (const uint16_t *)m.data + first;
        for (size_t i = 0; i < n; i++) out[i] = lz_f16_to_f32(w[i]);
    }
}

const float *lz_mat_f32(lz_mat m, size_t n, float **owned)
{
    *owned = NULL;
    if (m.type == LZ_MAT_F32) return m.data;
    float *w = malloc((n ? n : 1) * sizeof(float));
    if (!w) return NULL;
    lz_mat_get_f32(m, 0, n, w);
    *owned = w;
    return w;
}

/* Portable dot products: 16 partial sums, so the compiler vectorises them
 * without reassociating. */
enum { LANES = 16 };

static float dot_bf16(const uint16_t *w, const float *x, int n)
{
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[i + j] * lz_bf16_to_f32(w[i + j]);
    float s = 0.f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < n; i++) s += x[i] * lz_bf16_to_f32(w[i]);
    return s;
}

/* fp16: widened a block at a time (lz_f16_to_f32 branches on subnormals) */
static float dot_f16(const uint16_t *w, const float *x, int n)
{
    float acc[LANES] = {0}, b[LANES];
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int j = 0; j < LANES; j++) b[j] = lz_f16_to_f32(w[i + j]);
        for (int j = 0; j < LANES; j++) acc[j] += x[i + j] * b[j];
    }
    float s = 0.f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < n; i++) s += x[i] * lz_f16_to_f32(w[i]);
    return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LZ_HAVE_AVX2_DOT 1
#define LZ_AVX2 __attribute__((target("avx2,fma,f16c")))

enum { ROWS = 8 };

/* AVX2 + FMA + F16C: ROWS rows at once, 8 weights of each an iteration
 * sharing one load of x, the next block of rows prefetched. One row
 * at a time read 7 GB/s from memory on one core, half of OpenBLAS sgemv's 14;
 * eight rows with prefetch read 12.3 (bench/RESULTS.md). out[k] = row k . x. */
LZ_AVX2 __attribute__((always_inline)) static inline void dotrows(const uint16_t *w, size_t stride, const float *x,
                                                                  int n, const int bf16, float out[ROWS])
{
    __m256 a[ROWS];
#pragma GCC unroll 8
    for (int k = 0; k < ROWS; k++) a[k] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        if ((i & 31) == 0) /* a new 64-byte line: the same line of the next block's rows (a hint: past the end is harmless) */
#pragma GCC unroll 8
            for (int k = 0; k < ROWS; k++) _mm_prefetch((const char *)(w + (ROWS + k) * stride + i), _MM_HINT_T0);
#pragma GCC unroll 8 /* a[] in registers; not unrolled, it lived on the stack (2x slower) */
        for (int k = 0; k < ROWS; k++) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(w + k * stride + i));
            const __m256 v = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                  : _mm256_cvtph_ps(h);
            a[k] = _mm256_fmadd_ps(v, xv, a[k]);
        }
    }
    for (int k = 0; k < ROWS; k++) {
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(a[k]), _mm256_extractf128_ps(a[k], 1));
        q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        q = _mm_add_ss(q, _mm_movehdup_ps(q));
        float s = _mm_cvtss_f32(q);
        for (int j = i; j < n; j++) {
            const uint16_t h = w[k * stride + j];
            s += x[j] * (bf16 ? lz_bf16_to_f32(h) : lz_f16_to_f32(h));
        }
        out[k] = s;
    }
}
LZ_AVX2 static void dotrows_bf16(const uint16_t *w, size_t stride, const float *x, int n, float out[ROWS])
{
    dotrows(w, stride, x, n, 1, out);
}
LZ_AVX2 static void dotrows_f16(const uint16_t *w, size_t stride, const float *x, int n, float out[ROWS])
{
    dotrows(w, stride, x, n, 0, out);
}
#endif

static int simd_allowed = 1;
void lz_mat_set_simd(int on) { simd_allowed = on; }

void lz_mat_gemv16(float *y, lz_mat m, const float *x, int cols, int r0, int r1, float beta)
{
    const uint16_t *w = m.data;
#ifdef LZ_HAVE_AVX2_DOT
    const int avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") && simd_allowed;
#endif
    int r = r0;
#ifdef LZ_HAVE_AVX2_DOT
    for (; avx2 && r + ROWS <= r1; r += ROWS) {
        float d[ROWS];
        if (m.type == LZ_MAT_BF16) dotrows_bf16(w + (size_t)r * cols, (size_t)cols, x, cols, d);
        else dotrows_f16(w + (size_t)r * cols, (size_t)cols, x, cols, d);
        for (int k = 0; k < ROWS; k++) y[r + k] = beta != 0.f ? beta * y[r + k] + d[k] : d[k];
    }
#endif
    for (; r < r1; r++) {
        const uint16_t *row = w + (size_t)r * cols;
        float d = m.type == LZ_MAT_BF16 ? dot_bf16(row, x, cols) : dot_f16(row, x, cols);
        y[r] = beta != 0.f ? beta * y[r] + d : d;
    }
}
