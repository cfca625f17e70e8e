/* rope.h - the one implementation of rotary position embedding (RoPE) math.
 *
 * Shared by the CPU engine (model/), the CPU references and the CUDA kernels
 * (kernels/): every function is __host__ __device__ under nvcc, plain static
 * inline under a C compiler. Nothing here allocates or reads files.
 *
 * Legend: d = head_dim (even), i = pair index in [0, d/2), pos = position.
 *
 * Which elements form pair i (the only difference between the two layouts):
 *
 *   LZ_ROPE_ADJACENT (GGUF / llama.cpp "NORMAL"), d=8 --> [c s c s c s c s]
 *       pair i = (2i, 2i+1)
 *   LZ_ROPE_HALF     (Hugging Face "rotate_half", NEOX), d=8 --> [c c c c s s s s]
 *       pair i = (i, i + d/2)
 *
 * Frequencies: inv_freq[i] = theta^(-2i/d) / divisor[i], where divisor is
 * GGUF rope_freqs.weight or what Llama-3.1 "llama3" scaling computes (see
 * lz_rope_llama3_divisors); linear scaling is divisor = factor for all i.
 * Angle = (float)pos * inv_freq[i], always in fp32, cos/sin in fp32 with full
 * range reduction (cosf/sinf; never the fast __cosf on the device).
 *
 * Rotation by R(a) then R(b) equals R(a+b) up to fp32 rounding of the angles;
 * lazy attention relies on this: a key stored rotated at local position j and
 * placed at offset p is R(p) * K_j.
 */
#ifndef LZ_ROPE_H
#define LZ_ROPE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LZ_HD __host__ __device__ __forceinline__
#else
#define LZ_HD static inline
#endif

typedef enum {
    LZ_ROPE_ADJACENT = 0, /* pairs (2i, 2i+1): GGUF llama weights */
    LZ_ROPE_HALF = 1      /* pairs (i, i+d/2): raw Hugging Face weights */
} lz_rope_layout;

/* Element indices of pair i for a head of dimension d. */
LZ_HD void lz_rope_pair(int layout, int d, int i, int *a, int *b)
{
    if (layout == LZ_ROPE_HALF) {
        *a = i;
        *b = i + d / 2;
    } else {
        *a = 2 * i;
        *b = 2 * i + 1;
    }
}

/* Base inverse frequency of pair i, computed as transformers and llama.cpp do
 * in fp32: 1 / theta^(2i/d). */
LZ_HD float lz_rope_base_inv_freq(float theta, int d, int i)
{
    return 1.0f / powf(theta, (float)(2 * i) / (float)d);
}

/* Fills inv_freq[d/2] for a head dim d; divisors may be NULL (none). */
LZ_HD void lz_rope_inv_freqs(float *inv_freq, int d, float theta, const float *divisors)
{
    for (int i = 0; i < d / 2; i++) {
        float f = lz_rope_base_inv_freq(theta, d, i);
        inv_freq[i] = divisors ? f / divisors[i] : f;
    }
}

/* Rotates one (x0, x1) pair by angle a: (x0 cos a - x1 sin a, x0 sin a + x1 cos a). */
LZ_HD void lz_rope_rotate_pair(float *x0, float *x1, float c, float s)
{
    float a = *x0, b = *x1;
    *x0 = a * c - b * s;
    *x1 = a * s + b * c;
}

/* Rotates one head vector x[d] in place by R(pos). pos may be negative
 * (rotating a query back by R(-p) is how lazy decode avoids touching keys). */
LZ_HD void lz_rope_apply(float *x, int d, int64_t pos, int layout, const float *inv_freq)
{
    for (int i = 0; i < d / 2; i++) {
        int a, b;
        lz_rope_pair(layout, d, i, &a, &b);
        float ang = (float)pos * inv_freq[i];
        lz_rope_rotate_pair(&x[a], &x[b], cosf(ang), sinf(ang));
    }
}

/* cos/sin of every pair's angle at pos, for rotating many vectors by the same
 * R(pos) (lz_rope_apply_cs gives bit-identical results to lz_rope_apply). */
LZ_HD void lz_rope_cos_sin(float *c, float *s, int d, int64_t pos, const float *inv_freq)
{
    for (int i = 0; i < d / 2; i++) {
        float ang = (float)pos * inv_freq[i];
        c[i] = cosf(ang);
        s[i] = sinf(ang);
    }
}

LZ_HD void lz_rope_apply_cs(float *x, int d, int layout, const float *c, const float *s)
{
    for (int i = 0; i < d / 2; i++) {
        int a, b;
        lz_rope_pair(layout, d, i, &a, &b);
        lz_rope_rotate_pair(&x[a], &x[b], c[i], s[i]);
    }
}

/* Llama-3.1 "llama3" frequency scaling as transformers'
 * _compute_llama3_parameters does it, expressed as divisors of the base
 * inverse frequencies (the same numbers GGUF stores in rope_freqs.weight):
 *   wavelen = 2 pi / inv_freq
 *   wavelen < L/high           -> inv_freq            (divisor 1)
 *   wavelen > L/low            -> inv_freq / factor   (divisor factor)
 *   otherwise s = (L/wavelen - low)/(high - low),
 *             (1-s) inv_freq/factor + s inv_freq
 * L = original_max_position_embeddings. Fills divisors[d/2]. */
LZ_HD void lz_rope_llama3_divisors(float *divisors, int d, float theta, float factor,
                                   float low_freq_factor, float high_freq_factor,
                                   float original_max_pos)
{
    const float pi = 3.14159265358979323846f;
    float low_wavelen = original_max_pos / low_freq_factor;
    float high_wavelen = original_max_pos / high_freq_factor;
    for (int i = 0; i < d / 2; i++) {
        float f = lz_rope_base_inv_freq(theta, d, i);
        float wavelen = 2.0f * pi / f;
        float scaled;
        if (wavelen < high_wavelen) {
            scaled = f;
        } else if (wavelen > low_wavelen) {
            scaled = f / factor;
        } else {
            float s = (original_max_pos / wavelen - low_freq_factor) /
                      (high_freq_factor - low_freq_factor);
            scaled = (1.0f - s) * f / factor + s * f;
        }
        divisors[i] = f / scaled;
    }
}

#endif /* LZ_ROPE_H */
