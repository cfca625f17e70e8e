/* lz_decode_fp8.cu - the decode kernels (lz_decode.h) for calls whose blocks may
 * be fp8 (p.k_scales set), lazy and twin: the bf16 kernel's scheme
 * (kernels/lz_decode.cu: all G query heads of a kv head in one CTA, 4 warps of
 * 16 keys, a cp.async ring, split-KV merged by the last CTA) with a ring of
 * fp8-sized stages (64 keys of d bytes, K then V: 16 KiB at d = 128; 12 stages
 * at one CTA per SM, 5 at two). An fp8 block is one stage; a bf16 block is
 * one or two stages of 32 keys (warps 0-1 compute them). The loader writes
 * each stage's item (block word, scales) into shared memory for the compute.
 *
 * fp8 items are dequantised in registers: S = Q K^T and O += P V on fp16
 * mma.sync with the e4m3 bytes turned into fp16 (exact, times 2^-8) by shifts
 * and masks (lz_fp8_tile.cuh), so every load stays a 16-byte shared load:
 *  - keys: thread (g = lane/4, c = lane%4) reads row g (+8) of the warp's
 *    keys, bytes [16c, 16c+16) (and [16c+64, 16c+80) at d = 128); the bytes
 *    of each word feed the B fragments of one k-step as pairs (0, 2), (1, 3).
 *    The query's fp16 tile is written in the matching order (q8_col), so the
 *    products sum over the same d;
 *  - values: thread (g, c) reads keys 2c, 2c+1, 2c+8, 2c+9, bytes [g d/8,
 *    (g+1) d/8), and pairs the two keys' bytes with one byte permute; n-tile t,
 *    column n of the output is then element n d/8 + t, un-permuted when the
 *    warps merge. bf16 items use the same output order (their values read with
 *    16-byte loads and paired by byte permutes; keys by ldmatrix as in the
 *    bf16 kernel).
 * The key scale multiplies the block's scores; the value scale is folded into
 * the output's unit: o holds the output divided by the current block's value
 * scale (times 2^8 for fp8, 1 for bf16) and is multiplied by the ratio of the
 * old and new units with the softmax's rescale when they differ.
 *
 * Legend: B = sequences, KV = kv heads, G = query heads per kv head, d =
 * head_dim, NB = block words per (b, h), NS = split-KV parts.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_decode_fp8.cuh"
#include "kernels/lz_fp8_tile.cuh"
#include "kernels/lz_mma.cuh"
#include "base/rope.h"

namespace {

constexpr int THREADS = 128;
constexpr int BLK = LZ_DECODE_BLOCK, HALF = BLK / 2;
constexpr int STAGES_ONE = 12, STAGES_TWO = 5; /* one CTA per SM / two */

/* one ring stage's item, written by the loader (thread 0) */
struct Item {
    uint64_t w; /* block word (bf16 halves: rows and keys of the half; start bit on the first) */
    float ks;   /* key scale > 0: fp8; 0: bf16; -1: no more items */
    float vs;   /* value scale (fp8) */
};

/* ring (STAGES x 64 x d bytes, K then V), the items, 4 query tiles (16, d)
 * 16-bit (bf16 current/next, fp16 permuted current/next), the raw query rows */
template <int D, int STAGES> constexpr size_t smem_bytes()
{
    return (size_t)STAGES * 2 * BLK * D + STAGES * sizeof(Item) + 4 * 16 * D * 2 + 16 * D * 2;
}

/* Column of the fp16 query tile that holds element dd: the k index the key
 * fragments give element dd (see the file comment): bytes [16 lc, 16 lc + 16)
 * of a row belong to lane c = lc % 4 and k-steps 4 (lc / 4) + word; byte b of
 * a word is k index 2c + 8 (b & 1) + (b >> 1). */
template <int D> __device__ __forceinline__ int q8_col(int dd)
{
    const int lc = dd >> 4, c = lc & 3, ks = ((lc >> 2) << 2) | ((dd >> 2) & 3);
    return ks * 16 + 2 * c + 8 * (dd & 1) + ((dd >> 1) & 1);
}

/* The query tiles of one run: bf16 (natural order) and fp16 (q8_col order),
 * both swizzled like lz::swz, rows >= G untouched = the G rows of qsrc rotated
 * by R(-off) (copied when off == 0). No barrier inside. */
template <int D, int LAYOUT, bool LAZY>
__device__ __forceinline__ void build_query(unsigned char *qb, unsigned char *qh, const __nv_bfloat16 *qsrc,
                                            int64_t off, float inv_freq, int G, int tid)
{
    constexpr int PAIRS = D / 2, STEP = THREADS / PAIRS;
    const int i = tid % PAIRS;
    int a, bb;
    lz_rope_pair(LAYOUT, D, i, &a, &bb);
    const int ca = q8_col<D>(a), cb = q8_col<D>(bb);
    float2 cs = make_float2(1.f, 0.f);
    if (LAZY) cs = lz::rope_cos_sin((float)(-off) * inv_freq);
    for (int g = tid / PAIRS; g < G; g += STEP) {
        float x0 = __bfloat162float(qsrc[g * D + a]), x1 = __bfloat162float(qsrc[g * D + bb]);
        lz_rope_rotate_pair(&x0, &x1, cs.x, cs.y);
        __nv_bfloat16 *row = reinterpret_cast<__nv_bfloat16 *>(qb + g * D * 2);
        row[(((a >> 3) ^ (g & 7)) << 3) | (a & 7)] = __float2bfloat16_rn(x0);
        row[(((bb >> 3) ^ (g & 7)) << 3) | (bb & 7)] = __float2bfloat16_rn(x1);
        __half *rh = reinterpret_cast<__half *>(qh + g * D * 2);
        rh[(((ca >> 3) ^ (g & 7)) << 3) | (ca & 7)] = __float2half_rn(x0);
        rh[(((cb >> 3) ^ (g & 7)) << 3) | (cb & 7)] = __float2half_rn(x1);
    }
}

template <int D, int LAYOUT, bool LAZY, int STAGES, bool VROWS>
__global__ void __launch_bounds__(THREADS, STAGES <= STAGES_TWO ? 2 : 1)
    decode8_kernel(const __grid_constant__ lz_decode_params p, int n_split)
{
    static_assert(STAGES >= 3, "the next item's word is read one barrier after it was written");
    constexpr int STAGE_B = 2 * BLK * D, TILE_B = 16 * D * 2;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g4 = lane >> 2, c4 = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, sp = blockIdx.x;
    const int KV = p.n_kv_heads, G = p.n_heads / KV;
    unsigned char *ring = smem;
    Item *items = reinterpret_cast<Item *>(smem + (size_t)STAGES * STAGE_B);
    unsigned char *qs = reinterpret_cast<unsigned char *>(items + STAGES); /* tile (f8 * 2 + buf) */
    __nv_bfloat16 *qraw = reinterpret_cast<__nv_bfloat16 *>(qs + 4 * TILE_B);
    const uint32_t ring_u = lz::smem_u32(ring), qs_u = lz::smem_u32(qs);

    const size_t base = ((size_t)b * KV + h) * p.max_blocks;
    const int nb = p.n_blocks[(size_t)b * KV + h];
    const int i0 = (int)((int64_t)nb * sp / n_split), i1 = (int)((int64_t)nb * (sp + 1) / n_split);
    const uint64_t *words = p.blocks + base;
    const uint64_t *vrows = VROWS ? p.v_rows + base : nullptr;
    const float *kss = p.k_scales + base, *vss = p.v_scales + base;
    const __nv_bfloat16 *kp = reinterpret_cast<const __nv_bfloat16 *>(p.k_pool);
    const __nv_bfloat16 *vp = reinterpret_cast<const __nv_bfloat16 *>(p.v_pool);
    const __nv_bfloat16 *qg = reinterpret_cast<const __nv_bfloat16 *>(p.q) + ((size_t)b * p.n_heads + h * G) * D;

    /* the loader: the items of words [i0, i1) in order, one a call; then one end
     * mark. Word li's block word and scales are read one call ahead (lw, lks,
     * lvs, lvr), so that the copies need not wait for them. */
    int li = i0, lh = 0;
    bool ended = false;
    uint64_t lw = 0, lvr = 0;
    float lks = 0.f, lvs = 0.f;
    auto fetch = [&]() {
        if (li >= i1) return;
        lw = __ldg(words + li);
        lks = __ldg(kss + li);
        lvs = __ldg(vss + li);
        if (VROWS) lvr = __ldg(vrows + li);
    };
    fetch();
    auto load_next = [&](int stage) {
        if (li >= i1) {
            if (!ended && tid == 0) items[stage].ks = -1.f;
            ended = true;
            return;
        }
        const uint64_t w = lw;
        const float ks = lks;
        const uint64_t row = lz_decode_word_row(w), vrow = VROWS ? lvr : row;
        const int nk = lz_decode_word_keys(w);
        const uint32_t kd = ring_u + stage * STAGE_B, vd = kd + BLK * D;
        if (ks > 0.f) {
            lz::copy_tile_f8_dec<D, BLK, THREADS>(kd, p.k_pool8 + row * D, nk, tid);
            lz::copy_tile_f8_dec<D, BLK, THREADS>(vd, p.v_pool8 + vrow * D, nk, tid);
            if (tid == 0) items[stage] = Item{w, ks, lvs};
            li++;
            fetch();
        } else {
            const int k0 = lh * HALF, n = min(HALF, nk - k0);
            lz::copy_tile<D, HALF, THREADS>(kd, kp + (row + k0) * D, n, tid);
            lz::copy_tile<D, HALF, THREADS>(vd, vp + (vrow + k0) * D, n, tid);
            if (tid == 0)
                items[stage] = Item{lz_decode_word(row + k0, lz_decode_word_offset(w), n) |
                                        (lh ? 0ull : (w & LZ_DECODE_SEG_START)),
                                    0.f, 1.f};
            if (!lh && nk > HALF) {
                lh = 1;
            } else {
                lh = 0;
                li++;
                fetch();
            }
        }
    };
#pragma unroll 1
    for (int s = 0; s < STAGES - 1; s++) {
        load_next(s);
        lz::cp_async_commit();
    }

    for (int e = tid; e < G * D; e += THREADS) qraw[e] = qg[e]; /* read by later builds */
    const float my_inv_freq = p.inv_freq[tid % (D / 2)];
    auto build_q = [&](int buf, int64_t off, const __nv_bfloat16 *qsrc) {
        build_query<D, LAYOUT, LAZY>(qs + buf * TILE_B, qs + (2 + buf) * TILE_B, qsrc, off, my_inv_freq, G, tid);
    };
    for (int e = tid; e < 4 * 16 * D; e += THREADS) { /* rows >= G of the four tiles stay zero */
        const int g = (e / D) % 16;
        if (g >= G) reinterpret_cast<uint16_t *>(qs)[e] = 0;
    }
    build_q(0, (LAZY && i0 < i1) ? lz_decode_word_offset(__ldg(words + i0)) : 0, qg);

    uint32_t qa[D / 16][4];
    auto load_qa = [&](int buf, int f8) {
        const uint32_t t = qs_u + (f8 * 2 + buf) * TILE_B;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            int r = (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
            lz::ldsm_x4(t + lz::swz<D>(r, c), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
        }
    };
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    float unit = 1.f; /* o = output / unit */
    const float sl2 = p.scale * 1.4426950408889634f;

    /* one item's keys [16 warp, 16 warp + 16) of nk: S = Q K^T, online softmax, O += P V */
    auto item = [&](auto f8_c, uint32_t kd, int nk, float ks, float vs) {
        constexpr bool F8 = decltype(f8_c)::value;
        const uint32_t vd = kd + BLK * D;
        float s[2][4] = {}, s2[2][4] = {};
        if constexpr (F8) {
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int r = warp * 16 + nt * 8 + g4;
                uint32_t kw[D / 16];
                const uint4 x = lz::lds128(kd + lz::f8_off<D>(r, c4));
                kw[0] = x.x; kw[1] = x.y; kw[2] = x.z; kw[3] = x.w;
                if constexpr (D == 128) {
                    const uint4 y = lz::lds128(kd + lz::f8_off<D>(r, c4 + 4));
                    kw[4] = y.x; kw[5] = y.y; kw[6] = y.z; kw[7] = y.w;
                }
#pragma unroll
                for (int ks2 = 0; ks2 < D / 16; ks2++)
                    lz::mma16816_f16((ks2 & 1) ? s2[nt] : s[nt], qa[ks2], lz::e4m3_even_f16(kw[ks2]),
                                     lz::e4m3_odd_f16(kw[ks2]));
            }
        } else {
#pragma unroll
            for (int ks2 = 0; ks2 < D / 16; ks2++) {
                uint32_t b0, b1, b2, b3;
                int r = warp * 16 + (lane & 7) + (lane >> 4) * 8, c = ks2 * 2 + ((lane >> 3) & 1);
                lz::ldsm_x4(kd + lz::swz<D>(r, c), b0, b1, b2, b3);
                lz::mma16816((ks2 & 1) ? s2[0] : s[0], qa[ks2], b0, b1);
                lz::mma16816((ks2 & 1) ? s2[1] : s[1], qa[ks2], b2, b3);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] += s2[nt][e];
        /* fp8: the fp16 keys are the values times 2^-8 */
        const float sk = F8 ? sl2 * ks * 256.f : sl2;
        float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = warp * 16 + nt * 8 + 2 * c4 + (e & 1);
                float v = col < nk ? s[nt][e] * sk : -INFINITY;
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
            float p0 = exp2f(s[nt][0] - mu[0]), p1 = exp2f(s[nt][1] - mu[0]);
            float p2 = exp2f(s[nt][2] - mu[1]), p3 = exp2f(s[nt][3] - mu[1]);
            rs[0] += p0 + p1;
            rs[1] += p2 + p3;
            pa[nt * 2] = F8 ? lz::pack_f16(p0, p1) : lz::pack_bf16(p0, p1);
            pa[nt * 2 + 1] = F8 ? lz::pack_f16(p2, p3) : lz::pack_bf16(p2, p3);
        }
        lrow[0] = lrow[0] * alpha[0] + rs[0];
        lrow[1] = lrow[1] * alpha[1] + rs[1];
        /* the output's unit: the fp16 values are the values times 2^-8 */
        const float un = F8 ? vs * 256.f : 1.f;
        const float ratio = un == unit ? 1.f : __fdividef(unit, un);
        unit = un;
        alpha[0] *= ratio;
        alpha[1] *= ratio;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            o[nt][0] *= alpha[0]; o[nt][1] *= alpha[0];
            o[nt][2] *= alpha[1]; o[nt][3] *= alpha[1];
        }
        /* O += P V: keys 2c, 2c+1 (b0) and 2c+8, 2c+9 (b1) of the warp's 16, columns g d/8 + t of n-tile t */
        const int ra = warp * 16 + 2 * c4;
        if constexpr (F8) {
            constexpr int W = D / 32; /* words of a row's share */
            uint32_t va[W], vb[W], va2[W], vb2[W];
            if constexpr (D == 128) {
                const uint4 x0 = lz::lds128(vd + lz::f8_off<D>(ra, g4)), x1 = lz::lds128(vd + lz::f8_off<D>(ra + 1, g4));
                const uint4 x2 = lz::lds128(vd + lz::f8_off<D>(ra + 8, g4)), x3 = lz::lds128(vd + lz::f8_off<D>(ra + 9, g4));
                va[0] = x0.x; va[1] = x0.y; va[2] = x0.z; va[3] = x0.w;
                vb[0] = x1.x; vb[1] = x1.y; vb[2] = x1.z; vb[3] = x1.w;
                va2[0] = x2.x; va2[1] = x2.y; va2[2] = x2.z; va2[3] = x2.w;
                vb2[0] = x3.x; vb2[1] = x3.y; vb2[2] = x3.z; vb2[3] = x3.w;
            } else {
                const uint32_t half = (g4 & 1) * 8;
                const uint2 x0 = lz::lds64(vd + lz::f8_off<D>(ra, g4 >> 1) + half);
                const uint2 x1 = lz::lds64(vd + lz::f8_off<D>(ra + 1, g4 >> 1) + half);
                const uint2 x2 = lz::lds64(vd + lz::f8_off<D>(ra + 8, g4 >> 1) + half);
                const uint2 x3 = lz::lds64(vd + lz::f8_off<D>(ra + 9, g4 >> 1) + half);
                va[0] = x0.x; va[1] = x0.y; vb[0] = x1.x; vb[1] = x1.y;
                va2[0] = x2.x; va2[1] = x2.y; vb2[0] = x3.x; vb2[1] = x3.y;
            }
#pragma unroll
            for (int q = 0; q < W; q++) {
                lz::mma16816_f16(o[4 * q + 0], pa, lz::e4m3_cross_f16<0>(va[q], vb[q]), lz::e4m3_cross_f16<0>(va2[q], vb2[q]));
                lz::mma16816_f16(o[4 * q + 1], pa, lz::e4m3_cross_f16<1>(va[q], vb[q]), lz::e4m3_cross_f16<1>(va2[q], vb2[q]));
                lz::mma16816_f16(o[4 * q + 2], pa, lz::e4m3_cross_f16<2>(va[q], vb[q]), lz::e4m3_cross_f16<2>(va2[q], vb2[q]));
                lz::mma16816_f16(o[4 * q + 3], pa, lz::e4m3_cross_f16<3>(va[q], vb[q]), lz::e4m3_cross_f16<3>(va2[q], vb2[q]));
            }
        } else {
            constexpr int W = D / 16; /* words of a row's share: elements g d/8 .. g d/8 + d/8 - 1 */
            uint32_t va[W], vb[W], va2[W], vb2[W];
            auto load_row = [&](uint32_t (&dst)[W], int r) {
#pragma unroll
                for (int cc = 0; cc < D / 64; cc++) { /* bf16 chunks g d/64 + cc of 8 elements */
                    const uint4 x = lz::lds128(vd + lz::swz<D>(r, g4 * (D / 64) + cc));
                    dst[4 * cc] = x.x; dst[4 * cc + 1] = x.y; dst[4 * cc + 2] = x.z; dst[4 * cc + 3] = x.w;
                }
            };
            load_row(va, ra);
            load_row(vb, ra + 1);
            load_row(va2, ra + 8);
            load_row(vb2, ra + 9);
#pragma unroll
            for (int q = 0; q < W; q++) {
                lz::mma16816(o[2 * q], pa, __byte_perm(va[q], vb[q], 0x5410), __byte_perm(va2[q], vb2[q], 0x5410));
                lz::mma16816(o[2 * q + 1], pa, __byte_perm(va[q], vb[q], 0x7632), __byte_perm(va2[q], vb2[q], 0x7632));
            }
        }
    };

    /* items in order; a run of one segment shares one query (lazy: a new run at
     * each first block of a segment, its rotated query built into the other
     * buffer after the run's last item and published by the next barrier) */
    int cur_buf = 0, qkind = -1;
#pragma unroll 1
    for (int k = 0;;) {
        const int stage = k % STAGES;
        lz::cp_async_wait<STAGES - 2>();
        __syncthreads();
        load_next((k + STAGES - 1) % STAGES);
        lz::cp_async_commit();
        const Item it = items[stage];
        if (it.ks < 0.f) break;
        k++;
        const int f8 = it.ks > 0.f, nk = lz_decode_word_keys(it.w);
        if (f8 != qkind) {
            load_qa(cur_buf, f8);
            qkind = f8;
        }
        const uint32_t kd = ring_u + stage * STAGE_B;
        if (warp * 16 < nk) {
            if (f8) item(std::true_type{}, kd, nk, it.ks, it.vs);
            else item(std::false_type{}, kd, nk, 0.f, 1.f);
        }
        if (LAZY) {
            const Item nx = items[k % STAGES];
            if (nx.ks >= 0.f && (nx.w & LZ_DECODE_SEG_START)) {
                cur_buf ^= 1;
                build_q(cur_buf, lz_decode_word_offset(nx.w), qraw);
                qkind = -1;
            }
        }
    }
    lz::cp_async_wait<0>();
    __syncthreads();

    /* merge the 4 warps: red_o (4, 16, d) in fragment order (n-tile t, column n
     * at 8t + n = element n d/8 + t), red_m / red_l (4, 16) */
    float *red_o = reinterpret_cast<float *>(ring);
    float *red_m = red_o + 4 * 16 * D, *red_l = red_m + 4 * 16;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
    if (c4 == 0) {
        red_m[warp * 16 + g4] = mrow[0]; red_m[warp * 16 + g4 + 8] = mrow[1];
        red_l[warp * 16 + g4] = lrow[0]; red_l[warp * 16 + g4 + 8] = lrow[1];
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
        int col = nt * 8 + 2 * c4;
        *reinterpret_cast<float2 *>(&red_o[(warp * 16 + g4) * D + col]) = make_float2(o[nt][0] * unit, o[nt][1] * unit);
        *reinterpret_cast<float2 *>(&red_o[(warp * 16 + g4 + 8) * D + col]) = make_float2(o[nt][2] * unit, o[nt][3] * unit);
    }
    __syncthreads();
    const int rows = p.batch * p.n_heads;
    float *part = p.work, *lse = p.work + (size_t)rows * n_split * D;
    for (int e = tid; e < G * D; e += THREADS) {
        const int g = e / D, pos = e % D, k = (pos & 7) * (D / 8) + (pos >> 3);
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, red_m[w * 16 + g]);
        float L = 0.f, acc = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                float f = exp2f(red_m[w * 16 + g] - M);
                L += f * red_l[w * 16 + g];
                acc += f * red_o[(w * 16 + g) * D + pos];
            }
        }
        float val = L > 0.f ? acc / L : 0.f;
        size_t row = (size_t)b * p.n_heads + h * G + g;
        if (n_split == 1) {
            reinterpret_cast<__nv_bfloat16 *>(p.o)[row * D + k] = __float2bfloat16_rn(val);
        } else {
            part[(row * n_split + sp) * D + k] = val;
            if (pos == 0) lse[row * n_split + sp] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
    if (n_split == 1) return;
    /* split-KV: the last part of (b, h) to finish merges all parts; its counter goes back to zero */
    unsigned *count = reinterpret_cast<unsigned *>(lse + (size_t)rows * n_split) + (size_t)b * KV + h;
    __shared__ unsigned is_last;
    __threadfence();
    __syncthreads();
    if (tid == 0) is_last = atomicAdd(count, 1u) == (unsigned)n_split - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int g = warp; g < G; g += THREADS / 32) {
        const size_t row = (size_t)b * p.n_heads + h * G + g;
        lz::combine_row<D, true>(reinterpret_cast<__nv_bfloat16 *>(p.o) + row * D, part + row * n_split * D,
                                 lse + row * n_split, n_split, lane);
    }
    if (tid == 0) *count = 0;
}

template <int D, int LAYOUT, bool LAZY, int STAGES, bool VROWS>
int launch(const lz_decode_params *p, int ns, cudaStream_t st)
{
    auto kern = decode8_kernel<D, LAYOUT, LAZY, STAGES, VROWS>;
    static std::atomic<unsigned long long> attr_set{0};
    if (int e = lz::max_smem_once(kern, (int)smem_bytes<D, STAGES>(), attr_set)) return e;
    dim3 grid(ns, p->n_kv_heads, p->batch);
    kern<<<grid, THREADS, smem_bytes<D, STAGES>(), st>>>(*p, ns);
    return (int)cudaGetLastError();
}

/* the bf16 kernel's choices: parts by lz_decode_splits, one CTA per SM (12
 * stages) when the grid fits the SMs, else two (5 stages) */
template <int D, int LAYOUT, bool LAZY>
int launch(const lz_decode_params *p, cudaStream_t st)
{
    int n_sm, e = lz::sm_count(&n_sm);
    if (e) return e;
    const int ns = lz_decode_splits(p, n_sm);
    if (ns > 1 && (!p->work || p->work_bytes < lz_decode_workspace(p, ns))) return LZ_ATTN_EWORK;
    if (p->batch == 0) return LZ_ATTN_OK;
    const bool one = (long)p->batch * p->n_kv_heads * ns <= n_sm;
    if (p->v_rows)
        return one ? launch<D, LAYOUT, LAZY, STAGES_ONE, true>(p, ns, st)
                   : launch<D, LAYOUT, LAZY, STAGES_TWO, true>(p, ns, st);
    return one ? launch<D, LAYOUT, LAZY, STAGES_ONE, false>(p, ns, st)
               : launch<D, LAYOUT, LAZY, STAGES_TWO, false>(p, ns, st);
}

} /* namespace */

int lz_decode_fp8_launch(const lz_decode_params *p, int lazy, void *stream)
{
    return lz::with_shape(p->head_dim, p->rope_layout, [&](auto d, auto layout) {
        constexpr int D = decltype(d)::value, L = decltype(layout)::value;
        return lazy ? launch<D, L, true>(p, (cudaStream_t)stream) : launch<D, L, false>(p, (cudaStream_t)stream);
    });
}
