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

#define LZ_E4M3_MAX 448.0f

static inline float lz_e4m3_to_f32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    const float s = b & 0x80 ? -1.0f : 1.0f;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) return s * ldexpf((float)m, -9);      /* subnormal: m / 8 * 2^-6 */
    return s * ldexpf((float)(8 + m), e - 10);         /* (1 + m / 8) * 2^(e - 7) */
}

static inline uint8_t lz_f32_to_e4m3(float x)
{
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7f;
    const float a = fabsf(x);
    if (a >= LZ_E4M3_MAX) return sign | 0x7e;          /* saturate */
    if (a < 0.015625f) {                               /* below 2^-6: steps of 2^-9 (rint: to even) */
        const int m = (int)rintf(a * 512.0f);          /* 8 is 2^-6, the first normal: same bits */
        return sign | (uint8_t)m;
    }
    int e;
    frexpf(a, &e);                                     /* a = f * 2^e, f in [0.5, 1) */
    int m = (int)rintf((ldexpf(a, 1 - e) - 1.0f) * 8.0f), E = e - 1 + 7;
    if (m == 8) m = 0, E++;
    if (E > 15 || (E == 15 && m == 7)) return sign | 0x7e;
    return sign | (uint8_t)(E << 3 | m);
}

#endif /* LZ_FP8_H */
