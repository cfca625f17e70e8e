/* weights.c - weight matrices used in place (weights.h): widening and the
 * decode dot products, portable C and, on x86-64 CPUs that have them, AVX2 +
 * FMA + F16C intrinsics chosen at run time. */
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/half.h"
#include "formats/weights.h"

enum { QK = 32, QBYTES = 34 }; /* Q8_0: values a block, bytes a block */

int lz_mat_in_place(void) { return !lz_env_get()->f32_weights; /* LAZY_F32_WEIGHTS (base/env.h) */ }

static float q8_scale(const uint8_t *blk)
{
    uint16_t h;
    memcpy(&h, blk, 2);
    return lz_f16_to_f32(h);
}

void lz_mat_get_f32(lz_mat m, size_t first, size_t n, float *out)
{
    if (m.type == LZ_MAT_F32) {
        memcpy(out, (const float *)m.data + first, n * sizeof(float));
    } else if (m.type == LZ_MAT_BF16) {
        const uint16_t *w = (const uint16_t *)m.data + first;
        for (size_t i = 0; i < n; i++) out[i] = lz_bf16_to_f32(w[i]);
    } else if (m.type == LZ_MAT_F16) {
        const uint16_t *w = (const uint16_t *)m.data + first;
        for (size_t i = 0; i < n; i++) out[i] = lz_f16_to_f32(w[i]);
    } else { /* block by block from wherever first falls */
        for (size_t i = 0; i < n;) {
            const size_t e = first + i;
            const uint8_t *blk = (const uint8_t *)m.data + e / QK * QBYTES;
            const float d = q8_scale(blk);
            for (size_t j = e % QK; j < QK && i < n; j++, i++) out[i] = d * (float)(int8_t)blk[2 + j];
        }
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

/* Q8_0: the block's 32 products summed in 8 lanes, then times its scale */
static float dot_q8(const uint8_t *w, const float *x, int n)
{
    float s = 0.f;
    for (int b = 0; b < n / QK; b++, w += QBYTES, x += QK) {
        float acc[8] = {0};
        for (int i = 0; i < QK; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += x[i + j] * (float)(int8_t)w[2 + i + j];
        float bs = 0.f;
        for (int j = 0; j < 8; j++) bs += acc[j];
        s += q8_scale(w) * bs;
    }
    return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LZ_HAVE_AVX2_DOT 1
#define LZ_AVX2 __attribute__((target("avx2,fma,f16c")))

enum { ROWS = 8 };

LZ_AVX2 static inline float hsum(__m256 v)
{
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

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
        float s = hsum(a[k]);
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

/* Q8_0: a block (32 weights) of each of ROWS rows an iteration: the int8
 * widened 8 at a time against the block's 32 x values, then one FMA with
 * the broadcast scale; the same block of the next ROWS rows prefetched. */
LZ_AVX2 static void dotrows_q8(const uint8_t *w, size_t stride, const float *x, int n, float out[ROWS])
{
    __m256 a[ROWS];
#pragma GCC unroll 8
    for (int k = 0; k < ROWS; k++) a[k] = _mm256_setzero_ps();
    for (int b = 0; b < n / QK; b++) {
        const float *xb = x + (size_t)b * QK;
        const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8), x2 = _mm256_loadu_ps(xb + 16),
                     x3 = _mm256_loadu_ps(xb + 24);
#pragma GCC unroll 8
        for (int k = 0; k < ROWS; k++) {
            const uint8_t *blk = w + k * stride + (size_t)b * QBYTES;
            _mm_prefetch((const char *)(blk + ROWS * stride), _MM_HINT_T0);
#define LZ_Q8_8(o) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + (o)))))
            __m256 bs = _mm256_mul_ps(LZ_Q8_8(0), x0);
            bs = _mm256_fmadd_ps(LZ_Q8_8(8), x1, bs);
            bs = _mm256_fmadd_ps(LZ_Q8_8(16), x2, bs);
            bs = _mm256_fmadd_ps(LZ_Q8_8(24), x3, bs);
#undef LZ_Q8_8
            uint16_t h;
            memcpy(&h, blk, 2);
            a[k] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(h)), bs, a[k]);
        }
    }
    for (int k = 0; k < ROWS; k++) out[k] = hsum(a[k]);
}
#endif

static int simd_allowed = 1;
void lz_mat_set_simd(int on) { simd_allowed = on; }

/* Bytes of a row of cols values. */
static size_t row_bytes(int type, int cols)
{
    return type == LZ_MAT_Q8_0 ? (size_t)cols / QK * QBYTES : (size_t)cols * (type == LZ_MAT_F32 ? 4 : 2);
}

static float dot_row(lz_mat m, const uint8_t *row, const float *x, int cols)
{
    if (m.type == LZ_MAT_BF16) return dot_bf16((const uint16_t *)row, x, cols);
    if (m.type == LZ_MAT_F16) return dot_f16((const uint16_t *)row, x, cols);
    return dot_q8(row, x, cols);
}

void lz_mat_gemv(float *y, lz_mat m, const float *x, int cols, int r0, int r1, float beta)
{
    const uint8_t *w = m.data;
    const size_t rb = row_bytes(m.type, cols);
    int r = r0;
#ifdef LZ_HAVE_AVX2_DOT
    const int avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") && simd_allowed;
    for (; avx2 && r + ROWS <= r1; r += ROWS) {
        float d[ROWS];
        const uint8_t *row = w + (size_t)r * rb;
        if (m.type == LZ_MAT_BF16) dotrows_bf16((const uint16_t *)row, (size_t)cols, x, cols, d);
        else if (m.type == LZ_MAT_F16) dotrows_f16((const uint16_t *)row, (size_t)cols, x, cols, d);
        else dotrows_q8(row, rb, x, cols, d);
        for (int k = 0; k < ROWS; k++) y[r + k] = beta != 0.f ? beta * y[r + k] + d[k] : d[k];
    }
#endif
    for (; r < r1; r++) {
        float d = dot_row(m, w + (size_t)r * rb, x, cols);
        y[r] = beta != 0.f ? beta * y[r] + d : d;
    }
}
