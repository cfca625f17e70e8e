/* lz_decode_group.cu - decode attention grouped by document (lz_decode_group.h).
 * One CTA per (item, kv head): the item's members' G query heads each rotated
 * by R(-p) for the member's own offset are the rows of one 16-row query tile,
 * built once; the item's 64-key blocks stream by 16-byte cp.async through a
 * shared-memory ring (6 stages at one CTA per SM, 3 at two) into QK^T and PV
 * on mma.sync m16n8k16, as lz_decode.cu's inner loop (which pads G heads to
 * 16 rows: here the padding holds the other members). Each member's heads
 * write a normalised partial and its log2-sum-exp into the workspace; a second
 * launch merges each row's partials (lz::combine_row), a programmatic
 * dependent of the first. With fp8 blocks possible (F8, dec.k_scales set) a
 * block whose key scale is > 0 lands its e4m3 bytes in the slots of the bf16
 * tile (lz::copy_tile_f8) and each thread converts its own chunks in place
 * after its copies' wait, before the barrier that publishes the tile
 * (lz::convert_tile_f8); its scores are multiplied by the key scale and the
 * output is kept in units of the value scale (o = output / unit, rescaled
 * when a block's unit differs).
 *
 * Legend: B = rows, KV = kv heads, G = query heads a kv head, H = KV*G, d =
 * head_dim, P = partials a row at most. Each of the 4 warps owns keys
 * [16w, 16w+16) of every block with its own online-softmax state; the warps
 * merge in shared memory at the end.
 */
#include <math.h>

#include "kernels/lz_decode_group.h"
#include "kernels/lz_fp8_tile.cuh"
#include "kernels/lz_mma.cuh"
#include "kernels/lz_ops.cuh"
#include "base/rope.h"

namespace {

constexpr int GR_THREADS = 128;
constexpr int BLK = LZ_DECODE_BLOCK;

template <int D, int STAGES> constexpr size_t group_smem()
{
    /* the ring, then one swizzled (16, d) bf16 query tile; the warps' merge reuses the ring */
    return (size_t)STAGES * 2 * BLK * D * 2 + 16 * D * 2;
}

template <int D, int LAYOUT, int STAGES, bool VROWS, bool F8>
__global__ void __launch_bounds__(GR_THREADS, STAGES <= 3 ? 2 : 1)
    group_kernel(const __grid_constant__ lz_decode_group_params gp)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const lz_decode_params &p = gp.dec;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.y, KV = p.n_kv_heads, H = p.n_heads, G = H / KV;
    const lz_decode_item &it = gp.items[blockIdx.x];
    unsigned char *ring = smem, *qs = smem + (size_t)STAGES * 2 * BLK * D * 2;
    const uint32_t ring_u = lz::smem_u32(ring), qs_u = lz::smem_u32(qs);

    const int reader = it.reader, seg = it.seg, n_seg = it.n_seg, n_mem = it.n_members;
    const bool own = seg == n_seg - 1; /* its last block may be the one the kernel before writes */
    const int32_t *sf = it.seg_first + ((size_t)gp.layer * KV + h) * n_seg;
    const int nb = p.n_blocks[(size_t)reader * KV + h];
    const int s0 = sf[seg], end = own ? nb : sf[seg + 1];
    const int i0 = min(s0 + it.first, end), i1 = min(s0 + it.last, end);
    const size_t list = ((size_t)reader * KV + h) * p.max_blocks;
    const uint64_t *words = p.blocks + list;
    const uint64_t *vrows = VROWS ? p.v_rows + list : nullptr;
    const __nv_bfloat16 *kp = reinterpret_cast<const __nv_bfloat16 *>(p.k_pool);
    const __nv_bfloat16 *vp = reinterpret_cast<const __nv_bfloat16 *>(p.v_pool);
    const float *kss = F8 ? p.k_scales + list : nullptr, *vss = F8 ? p.v_scales + list : nullptr;

    auto load_block = [&](int i, int stage) {
        const uint64_t w = words[i];
        const size_t row = lz_decode_word_row(w) * D, vrow = VROWS ? vrows[i] * D : row;
        const int nk = lz_decode_word_keys(w);
        const uint32_t kd = ring_u + stage * (2 * BLK * D * 2), vd = kd + BLK * D * 2;
        if (F8 && kss[i] > 0.f) {
            lz::copy_tile_f8<D, BLK, GR_THREADS, false>(kd, p.k_pool8 + row, nk, tid);
            lz::copy_tile_f8<D, BLK, GR_THREADS, false>(vd, p.v_pool8 + vrow, nk, tid);
        } else {
            lz::copy_tile<D, BLK, GR_THREADS>(kd, kp + row, nk, tid);
            lz::copy_tile<D, BLK, GR_THREADS>(vd, vp + vrow, nk, tid);
        }
    };
    /* a document's rows are no kernel's of this step: prefetched before the kernel before
     * finishes (it writes the queries and the own rows' last block) */
    if (own) lz::pdl_wait();
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (i0 + s < i1) load_block(i0 + s, s);
        lz::cp_async_commit();
    }
    lz::pdl_wait();

    /* the query tile: row r = member r / G, head r % G, rotated by R(-its offset); rows past
     * the members zero */
    {
        constexpr int PAIRS = D / 2, STEP = GR_THREADS / PAIRS;
        const int i = tid % PAIRS;
        int a, bb;
        lz_rope_pair(LAYOUT, D, i, &a, &bb);
        const float inv_freq = p.inv_freq[i];
        for (int r = tid / PAIRS; r < 16; r += STEP) {
            const int m = r / G, g = r % G;
            float x0 = 0.f, x1 = 0.f;
            if (m < n_mem) {
                const __nv_bfloat16 *qr =
                    reinterpret_cast<const __nv_bfloat16 *>(p.q) + ((size_t)it.member[m] * H + h * G + g) * D;
                x0 = __bfloat162float(qr[a]), x1 = __bfloat162float(qr[bb]);
                const float2 cs = lz::rope_cos_sin((float)(-it.offset[m]) * inv_freq);
                lz_rope_rotate_pair(&x0, &x1, cs.x, cs.y);
            }
            __nv_bfloat16 *row = reinterpret_cast<__nv_bfloat16 *>(qs + r * D * 2);
            row[(((a >> 3) ^ (r & 7)) << 3) | (a & 7)] = __float2bfloat16_rn(x0);
            row[(((bb >> 3) ^ (r & 7)) << 3) | (bb & 7)] = __float2bfloat16_rn(x1);
        }
    }
    uint32_t qa[D / 16][4];
    bool qa_loaded = false;

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    float unit = 1.f; /* o = output / unit (fp8 blocks: their value scale) */
    const float sl2 = p.scale * 1.4426950408889634f;

    for (int i = i0; i < i1; i++) {
        const int stage = (i - i0) % STAGES;
        lz::cp_async_wait<STAGES - 2>();
        const float ks = F8 ? kss[i] : 0.f, un = F8 && ks > 0.f ? vss[i] : 1.f;
        if (F8 && ks > 0.f) { /* this thread's fp8 chunks of the block to bf16, in place */
            const uint32_t kd = ring_u + stage * (2 * BLK * D * 2);
            lz::convert_tile_f8<D, BLK, GR_THREADS, false>(kd, tid);
            lz::convert_tile_f8<D, BLK, GR_THREADS, false>(kd + BLK * D * 2, tid);
        }
        __syncthreads(); /* publishes the block's tile (and the query tile, before the first block) */
        if (i + STAGES - 1 < i1) load_block(i + STAGES - 1, (i - i0 + STAGES - 1) % STAGES);
        lz::cp_async_commit();
        if (!qa_loaded) {
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                int r = (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
                lz::ldsm_x4(qs_u + lz::swz<D>(r, c), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
            }
            qa_loaded = true;
        }
        const int nk = lz_decode_word_keys(words[i]);
        const uint32_t kd = ring_u + stage * (2 * BLK * D * 2), vd = kd + BLK * D * 2;
        float s[2][4] = {}, s2[2][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t b0, b1, b2, b3;
            int r = warp * 16 + (lane & 7) + (lane >> 4) * 8, c = ks * 2 + ((lane >> 3) & 1);
            lz::ldsm_x4(kd + lz::swz<D>(r, c), b0, b1, b2, b3);
            lz::mma16816((ks & 1) ? s2[0] : s[0], qa[ks], b0, b1);
            lz::mma16816((ks & 1) ? s2[1] : s[1], qa[ks], b2, b3);
        }
        float mx[2] = {mrow[0], mrow[1]};
        const float sk = F8 && ks > 0.f ? sl2 * ks : sl2;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = warp * 16 + nt * 8 + 2 * (lane & 3) + (e & 1);
                const float v = col < nk ? (s[nt][e] + s2[nt][e]) * sk : -INFINITY;
                s[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2], mu[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            mu[r] = mx[r] == -INFINITY ? 0.f : mx[r];
            alpha[r] = exp2f(mrow[r] - mu[r]);
            mrow[r] = mx[r];
        }
        uint32_t pa[4];
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const float p0 = exp2f(s[nt][0] - mu[0]), p1 = exp2f(s[nt][1] - mu[0]);
            const float p2 = exp2f(s[nt][2] - mu[1]), p3 = exp2f(s[nt][3] - mu[1]);
            rs[0] += p0 + p1;
            rs[1] += p2 + p3;
            pa[nt * 2] = lz::pack_bf16(p0, p1);
            pa[nt * 2 + 1] = lz::pack_bf16(p2, p3);
        }
        lrow[0] = lrow[0] * alpha[0] + rs[0];
        lrow[1] = lrow[1] * alpha[1] + rs[1];
        if (F8 && un != unit) { /* the output's unit follows the block's value scale */
            const float ratio = __fdividef(unit, un);
            alpha[0] *= ratio;
            alpha[1] *= ratio;
            unit = un;
        }
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            o[nt][0] *= alpha[0]; o[nt][1] *= alpha[0];
            o[nt][2] *= alpha[1]; o[nt][3] *= alpha[1];
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b0, b1, b2, b3;
            int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = dp * 2 + (lane >> 4);
            lz::ldsm_x4_t(vd + lz::swz<D>(r, c), b0, b1, b2, b3);
            lz::mma16816(o[2 * dp], pa, b0, b1);
            lz::mma16816(o[2 * dp + 1], pa, b2, b3);
        }
    }
    lz::cp_async_wait<0>();
    __syncthreads();

    /* merge the 4 warps: red_o (4, 16, d), red_m / red_l (4, 16) */
    float *red_o = reinterpret_cast<float *>(ring);
    float *red_m = red_o + 4 * 16 * D, *red_l = red_m + 4 * 16;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
    const int r0 = lane >> 2;
    if ((lane & 3) == 0) {
        red_m[warp * 16 + r0] = mrow[0]; red_m[warp * 16 + r0 + 8] = mrow[1];
        red_l[warp * 16 + r0] = lrow[0]; red_l[warp * 16 + r0 + 8] = lrow[1];
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
        const int col = nt * 8 + 2 * (lane & 3);
        *reinterpret_cast<float2 *>(&red_o[(warp * 16 + r0) * D + col]) = make_float2(o[nt][0] * unit, o[nt][1] * unit);
        *reinterpret_cast<float2 *>(&red_o[(warp * 16 + r0 + 8) * D + col]) =
            make_float2(o[nt][2] * unit, o[nt][3] * unit);
    }
    __syncthreads();
    const int P = gp.max_parts;
    float *part = gp.work, *lse = gp.work + (size_t)p.batch * H * P * D;
    for (int e = tid; e < n_mem * G * D; e += GR_THREADS) {
        const int r = e / D, k = e % D, m = r / G, g = r % G;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, red_m[w * 16 + r]);
        float L = 0.f, acc = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float f = exp2f(red_m[w * 16 + r] - M);
                L += f * red_l[w * 16 + r];
                acc += f * red_o[(w * 16 + r) * D + k];
            }
        }
        const size_t at = ((size_t)it.member[m] * H + h * G + g) * P + it.part[m];
        part[at * D + k] = L > 0.f ? acc / L : 0.f;
        if (k == 0) lse[at] = L > 0.f ? M + log2f(L) : -INFINITY;
    }
}

/* every row (b, head): its n_parts[b] partials into o; a warp a row */
template <int D>
__global__ void group_merge(__nv_bfloat16 *__restrict__ out, const float *__restrict__ part,
                            const float *__restrict__ lse, const int32_t *__restrict__ n_parts, int rows, int H, int P)
{
    lz::pdl_wait();
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    lz::combine_row<D, false>(out + (size_t)row * D, part + (size_t)row * P * D, lse + (size_t)row * P,
                              n_parts[row / H], threadIdx.x & 31);
}

template <int D, int LAYOUT, int STAGES, bool VROWS, bool F8> int launch(const lz_decode_group_params *p, cudaStream_t st)
{
    auto kern = group_kernel<D, LAYOUT, STAGES, VROWS, F8>;
    static std::atomic<unsigned long long> attr_set{0};
    if (int e = lz::max_smem_once(kern, (int)group_smem<D, STAGES>(), attr_set)) return e;
    const dim3 grid(p->n_items, p->dec.n_kv_heads);
    if (cudaError_t e = lz::launch_pdl(kern, grid, dim3(GR_THREADS), group_smem<D, STAGES>(), st, p->dec.pdl != 0, *p))
        return (int)e;
    const int rows = p->dec.batch * p->dec.n_heads;
    return (int)lz::launch_pdl(group_merge<D>, dim3((rows + 7) / 8), dim3(256), 0, st, true,
                               reinterpret_cast<__nv_bfloat16 *>(p->dec.o), (const float *)p->work,
                               (const float *)(p->work + (size_t)rows * p->max_parts * D), p->n_parts, rows,
                               p->dec.n_heads, p->max_parts);
}

template <int D, int LAYOUT> int launch(const lz_decode_group_params *p, cudaStream_t st)
{
    int n_sm, e = lz::sm_count(&n_sm);
    if (e) return e;
    if (p->dec.batch == 0) return LZ_ATTN_OK;
    if (p->n_items == 0) return (int)cudaMemsetAsync(p->dec.o, 0, (size_t)p->dec.batch * p->dec.n_heads * D * 2, st);
    const bool one = (long)p->n_items * p->dec.n_kv_heads <= n_sm;
    if (p->dec.k_scales) { /* fp8 blocks possible: values at rows of their own (the engine's) */
        if (!p->dec.v_rows) return LZ_ATTN_EARG;
        return one ? launch<D, LAYOUT, 6, true, true>(p, st) : launch<D, LAYOUT, 3, true, true>(p, st);
    }
    if (p->dec.v_rows) return one ? launch<D, LAYOUT, 6, true, false>(p, st) : launch<D, LAYOUT, 3, true, false>(p, st);
    return one ? launch<D, LAYOUT, 6, false, false>(p, st) : launch<D, LAYOUT, 3, false, false>(p, st);
}

} /* namespace */

extern "C" int lz_decode_group(const lz_decode_group_params *p, void *stream)
{
    const int rc = lz_decode_group_check(p);
    if (rc) return rc;
    return lz::with_shape(p->dec.head_dim, p->dec.rope_layout, [&](auto d, auto layout) {
        return launch<decltype(d)::value, decltype(layout)::value>(p, (cudaStream_t)stream);
    });
}
