/* lz_kvmass_ref.c - the CPU reference of lz_kvmass (lz_kvmass.h): one
 * window row at a time, fp32 dot products over the bf16 keys, softmax with
 * expf over the keys the row saw. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_kvmass.h"
#include "base/half.h"

int lz_kvmass_check(const lz_kvmass_params *p)
{
    if (!p || !p->mass || !p->q || !p->k || p->L < 1 || p->KV < 1 || p->H < p->KV || p->H % p->KV ||
        p->H / p->KV > 32 || p->d < 2 || p->d > 128 || p->d % 2 || p->n < 1 || p->w < 1 || p->w > p->n ||
        p->m < 0 || p->m > p->n || p->k_stride < p->n || p->n_prefix < 0 || (p->n_prefix > 0 && !p->pk) ||
        (p->n_prefix > 0 && p->pk_stride < p->n_prefix))
        return LZ_ATTN_EARG;
    if ((p->m ? p->m : p->n - p->w) < 1) return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

int lz_kvmass_ref(const lz_kvmass_params *p, void *stream)
{
    (void)stream;
    int rc = lz_kvmass_check(p);
    if (rc) return rc;
    const int L = p->L, H = p->H, KV = p->KV, G = H / KV, d = p->d, n = p->n, w = p->w, s = p->n_prefix;
    const int m = p->m ? p->m : n - w, nk = s + n;
    const float scale = 1.0f / sqrtf((float)d);
    float *x = malloc((size_t)nk * sizeof(float));
    if (!x) return LZ_ATTN_EARG;
    memset(p->mass, 0, (size_t)L * KV * G * m * sizeof(float));
    for (int l = 0; l < L; l++)
        for (int g = 0; g < KV; g++)
            for (int hh = 0; hh < G; hh++)
                for (int t = 0; t < w; t++) {
                    const float *q = p->q + (((size_t)l * w + t) * H + g * G + hh) * d;
                    const int visible = s + n - w + t + 1;
                    float mx = -INFINITY, sum = 0;
                    for (int i = 0; i < visible; i++) {
                        const lz_bf16 *k = i < s ? p->pk + (((size_t)l * KV + g) * p->pk_stride + i) * d
                                                 : p->k + (((size_t)l * KV + g) * p->k_stride + (i - s)) * d;
                        float dot = 0;
                        for (int e = 0; e < d; e++) dot += q[e] * lz_bf16_to_f32(k[e]);
                        x[i] = dot * scale;
                        mx = x[i] > mx ? x[i] : mx;
                    }
                    for (int i = 0; i < visible; i++) sum += (x[i] = expf(x[i] - mx));
                    float *acc = p->mass + (((size_t)l * KV + g) * G + hh) * m;
                    for (int j = 0; j < m && s + j < visible; j++) acc[j] += x[s + j] / sum;
                }
    free(x);
    return LZ_ATTN_OK;
}
