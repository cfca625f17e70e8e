/* fp8.h - the fp8 e4m3 format (1 sign, 4 exponent bits of bias 7, 3 mantissa
 * bits; largest finite 448, no infinities, S.1111.111 is NaN; the OCP / NVIDIA
 * "E4M3FN" that Hopper's tensor cores and cvt instructions read) <-> fp32 on the
 * host: exact decode, round-to-nearest-even encode saturating at +-448, NaN kept.
 * Header-only: the store codec, the engine and the kernels' CPU references share
 * one definition. */
#ifndef LZ_FP8_H
#define LZ_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define LZ_E4M3_MAX 448.0f

static inline float lz_e4m3_to_f32(uint8_t b)
{
    const uint32_t e = (b >> 3) & 15u, m = b & 7u, sign = (uint32_t)(b & 0x80) << 24;
    if (e == 15 && m == 7) return NAN;
    float f;
    if (e == 0) { /* subnormal: m / 8 * 2^-6, exact */
        f = (float)m * 0x1p-9f;
        return sign ? -f : f;
    }
    const uint32_t u = sign | ((e + 120u) << 23) | (m << 20); /* (1 + m / 8) * 2^(e - 7): fp32's fields */
    memcpy(&f, &u, 4);
    return f;
}

static inline uint8_t lz_f32_to_e4m3(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;        /* NaN */
    if (a >= 0x43e00000u) return sign | 0x7e;       /* 448 and beyond: saturate */
    if (a < 0x3c800000u) {                          /* below 2^-6: steps of 2^-9 (rint: to even; 8 is 2^-6) */
        float f;
        memcpy(&f, &a, 4);
        return sign | (uint8_t)(int)rintf(f * 512.0f);
    }
    /* exponent and the top 3 mantissa bits, rounded to nearest even (a carry moves the exponent) */
    const uint32_t r = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
    return sign | (uint8_t)(r > 0x7e ? 0x7e : r);
}

/* dst[i] = lz_f32_to_e4m3(src[i] * mul) for n values, the same bits, branch-free so that the
 * compiler vectorizes it (the payload encoder's loop). */
static inline void lz_f32_to_e4m3_n(uint8_t *dst, const float *src, size_t n, float mul)
{
#ifdef _OPENMP
#pragma omp simd
#endif
    for (size_t i = 0; i < n; i++) {
        const float x = src[i] * mul;
        uint32_t u;
        memcpy(&u, &x, 4);
        const uint32_t a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
        float f;
        memcpy(&f, &a, 4);
        /* below 2^-6: f * 512 rounded to nearest even by the 1.5 * 2^23 trick (|f * 512| < 8) */
        const uint32_t sub = (uint32_t)(int)((f * 512.0f + 12582912.0f) - 12582912.0f);
        const uint32_t nrm = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
        const uint32_t is_sub = 0u - (uint32_t)(a < 0x3c800000u), big = 0u - (uint32_t)(a >= 0x43e00000u);
        const uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
        uint32_t r = (sub & is_sub) | (nrm & ~is_sub);
        r = (0x7eu & big) | (r & ~big);        /* saturate (a normal below 448 never rounds past 0x7e) */
        r = (0x7fu & nan) | (r & ~nan);
        dst[i] = (uint8_t)(sign | r);
    }
}

#endif /* LZ_FP8_H */
