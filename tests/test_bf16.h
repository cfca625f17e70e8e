/* test_bf16.h - the CPU tests' comparison of bf16 outputs (tests/test_kernels_ref.c,
 * tests/test_fp8_attn.c): the normalised error ||a - b|| / ||b||. Header-only. */
#ifndef LZ_TEST_BF16_H
#define LZ_TEST_BF16_H

#include <math.h>
#include <stddef.h>

#include "base/half.h"

/* ||a - b|| / ||b|| over n bf16 values; a NaN in either gives +inf. */
static inline double lz_test_bf16_nerr(const uint16_t *a, const uint16_t *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = lz_bf16_to_f32(a[i]), y = lz_bf16_to_f32(b[i]);
        if (isnan(x) || isnan(y)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / (den > 0 ? den : 1));
}

#endif /* LZ_TEST_BF16_H */
