/* lz_batch_ops.cu - the CUDA launchers of lz_batch_ops.h: batch_words one CTA
 * a (layer, sequence, kv head) list, batch_heads one CTA a (row, head) with a
 * thread a rotary pair, batch_count a thread a sequence. */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels/lz_batch_ops.h"
#include "kernels/lz_decode.h"
#include "kernels/lz_ops.cuh"
#include "base/rope.h"

namespace {

__global__ void batch_words_kernel(uint64_t *words, uint64_t *vrows, int32_t *n_blocks, float *k_scales,
                                   float *v_scales, const lz_op_batch_seq *seq, int B, int KV, int NB)
{
    const int i = blockIdx.x, l = i / (B * KV), b = (i / KV) % B, h = i % KV, lh = l * KV + h;
    const lz_op_batch_seq &s = seq[b];
    const uint64_t rows = LZ_DECODE_MAX_ROW; /* the row field of a word */
    const uint64_t *sw = s.words + (size_t)lh * s.nb, *sv = s.vrows + (size_t)lh * s.nb;
    const float *sks = s.ksc ? s.ksc + (size_t)lh * s.nb : NULL, *svs = s.vsc ? s.vsc + (size_t)lh * s.nb : NULL;
    uint64_t *w = words + (size_t)i * NB, *vr = vrows + (size_t)i * NB;
    float *ks = k_scales ? k_scales + (size_t)i * NB : NULL, *vs = v_scales ? v_scales + (size_t)i * NB : NULL;
    const int nf = s.nf[lh];
    for (int j = threadIdx.x; j < nf; j += blockDim.x) {
        const uint64_t x = sw[j];
        const bool f8 = sks && sks[j] > 0;
        w[j] = (x & ~rows) | (lz_decode_word_row(x) + (uint64_t)(f8 ? s.dk8 : s.dk));
        vr[j] = sv[j] + (uint64_t)(f8 ? s.dv8 : s.dv);
        if (ks) ks[j] = f8 ? sks[j] : 0.f, vs[j] = f8 ? svs[j] : 0.f;
    }
    const int len = *s.count + 1, nob = (len + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
    const uint64_t kr = (uint64_t)s.own_k + (uint64_t)lh * s.N, vrr = (uint64_t)s.own_v + (uint64_t)lh * s.N;
    for (int j = threadIdx.x; j < nob; j += blockDim.x) {
        const int keys = len - j * LZ_DECODE_BLOCK < LZ_DECODE_BLOCK ? len - j * LZ_DECODE_BLOCK : LZ_DECODE_BLOCK;
        w[nf + j] = lz_decode_word(kr + (uint64_t)j * LZ_DECODE_BLOCK, 0, keys) | (j == 0 ? LZ_DECODE_SEG_START : 0);
        vr[nf + j] = vrr + (uint64_t)j * LZ_DECODE_BLOCK;
        if (ks) ks[nf + j] = 0.f, vs[nf + j] = 0.f;
    }
    if (threadIdx.x == 0) n_blocks[i] = nf + nob;
}

__global__ void batch_heads_kernel(__nv_bfloat16 *qh, const float *q, int ld, int H, int KV, int d, int l, int layout,
                                   const float *inv_freq, const lz_op_batch_seq *seq)
{
    lz::pdl_trigger(); /* the batched attention (lz_decode_params.pdl) starts its prefetch meanwhile */
    const int b = blockIdx.x, hh = blockIdx.y, t = threadIdx.x;
    const lz_op_batch_seq &s = seq[b];
    const int cnt = *s.count;
    const float *row = q + (size_t)b * ld;
    const float *src;
    __nv_bfloat16 *dst;
    int rotate = 1;
    if (hh < H) {
        src = row + (size_t)hh * d;
        dst = qh + ((size_t)b * H + hh) * d;
    } else {
        const int kvh = hh < H + KV ? hh - H : hh - H - KV;
        src = row + (size_t)(hh < H + KV ? H : H + KV) * d + (size_t)kvh * d;
        dst = reinterpret_cast<__nv_bfloat16 *>(hh < H + KV ? s.ok : s.ov) + (((size_t)l * KV + kvh) * s.N + cnt) * d;
        rotate = hh < H + KV;
    }
    int a, bb;
    lz_rope_pair(layout, d, t, &a, &bb);
    float x0 = src[a], x1 = src[bb];
    if (rotate) {
        const float ang = (float)(s.pos0 + cnt) * inv_freq[t];
        lz_rope_rotate_pair(&x0, &x1, cosf(ang), sinf(ang));
    }
    dst[a] = __float2bfloat16_rn(x0);
    dst[bb] = __float2bfloat16_rn(x1);
}

__global__ void batch_count_kernel(const lz_op_batch_seq *seq, int B)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B) *seq[b].count += 1;
}

} // namespace

extern "C" int lz_op_batch_words(uint64_t *words, uint64_t *vrows, int32_t *n_blocks, float *k_scales,
                                 float *v_scales, const lz_op_batch_seq *seq, int B, int L, int KV, int NB, void *stream)
{
    if (B < 0 || L < 0 || KV < 0 || NB < 0 || (B && !seq) || !k_scales != !v_scales) return LZ_ATTN_EARG;
    if (!L || !B || !KV) return LZ_ATTN_OK;
    batch_words_kernel<<<L * B * KV, 64, 0, (cudaStream_t)stream>>>(words, vrows, n_blocks, k_scales, v_scales, seq, B,
                                                                    KV, NB);
    return (int)cudaGetLastError();
}

extern "C" int lz_op_batch_heads(lz_bf16 *qh, const float *q, int ld, int H, int KV, int d, int l, int layout,
                                 const float *inv_freq, const lz_op_batch_seq *seq, int B, void *stream)
{
    if (d <= 0 || d % 2 || d > 512) return LZ_ATTN_EHEADDIM;
    if (B < 0 || (B && (!seq || !q || !qh || !inv_freq))) return LZ_ATTN_EARG;
    if (!B) return LZ_ATTN_OK;
    batch_heads_kernel<<<dim3(B, H + 2 * KV), d / 2, 0, (cudaStream_t)stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(qh), q, ld, H, KV, d, l, layout, inv_freq, seq);
    return (int)cudaGetLastError();
}

extern "C" int lz_op_batch_count(const lz_op_batch_seq *seq, int B, void *stream)
{
    if (B < 0 || (B && !seq)) return LZ_ATTN_EARG;
    if (!B) return LZ_ATTN_OK;
    batch_count_kernel<<<(B + 127) / 128, 128, 0, (cudaStream_t)stream>>>(seq, B);
    return (int)cudaGetLastError();
}
