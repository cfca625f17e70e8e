/* lz_decode.cu - lazy decode attention and its non-lazy twin (lz_decode.h):
 * one query row per sequence, all G query heads of a kv head in one CTA (K/V
 * read once per group), 64-key blocks streamed by 16-byte cp.async through a
 * shared-memory ring (6 stages at one CTA per SM, 3 at two), QK^T and PV on mma.sync m16n8k16 (G heads padded to
 * 16 rows), split-KV over CTAs, merged by the last CTA of each (b, h) (an
 * atomic counter in the workspace; no second launch). The lazy kernel
 * walks runs of blocks of one segment (a run starts at a block marked as a
 * segment's first): the inner loop is the twin's plus one bit test, and the
 * next run's query, rotated by R(-p), is built into a second shared tile
 * between runs (published by the next block's barrier); keys are never
 * touched and memory traffic equals the twin's. Values at the keys' rows of
 * v_pool, or (VROWS) at rows of their own (p.v_rows, one more word a block).
 * Calls with fp8 blocks (p.k_scales set) go to kernels/lz_decode_fp8.cu.
 *
 * Legend: B = sequences, KV = kv heads, G = query heads per kv head, H =
 * KV*G, d = head_dim, NB = block words per (b, h), NS = split-KV parts.
 * Each of the 4 warps owns keys [16w, 16w+16) of every block and keeps its
 * own online-softmax state; warps merge in shared memory at the end.
 */
#include <math.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_decode_fp8.cuh"
#include "kernels/lz_mma.cuh"
#include "kernels/lz_ops.cuh"
#include "base/rope.h"

namespace {

constexpr int DEC_THREADS = 128;
constexpr int BLK = LZ_DECODE_BLOCK;

/* ring of K and V blocks, two bf16 query tiles of 16 rows (current, next),
 * the raw query rows (16, d) bf16. STAGES = 3 at 2 CTAs per SM, 6 at 1. */
template <int D, int STAGES> constexpr size_t dec_smem()
{
    return (size_t)STAGES * 2 * BLK * D * 2 + 3 * 16 * D * 2;
}

/* Writes the bf16 query tile qt (16 rows, swizzled) = the G rows of qsrc
 * rotated by R(-off) (copied when off == 0): pair tid % (d/2), rows tid / (d/2)
 * + k*step. No barrier inside: the caller's next barrier publishes it.
 * Inlined and cheap (lz::rope_cos_sin has no slow path): it runs in the main
 * loop once per segment change, and a call there cost the loop 1.5%. */
template <int D, int LAYOUT, bool LAZY>
__device__ __forceinline__ void build_query(unsigned char *qt, const __nv_bfloat16 *qsrc, int64_t off,
                                            float inv_freq, int G, int tid)
{
    constexpr int PAIRS = D / 2, STEP = DEC_THREADS / PAIRS;
    const int i = tid % PAIRS;
    int a, bb;
    lz_rope_pair(LAYOUT, D, i, &a, &bb);
    float2 cs = make_float2(1.f, 0.f);
    if (LAZY) cs = lz::rope_cos_sin((float)(-off) * inv_freq);
    for (int g = tid / PAIRS; g < G; g += STEP) {
        float x0 = __bfloat162float(qsrc[g * D + a]), x1 = __bfloat162float(qsrc[g * D + bb]);
        lz_rope_rotate_pair(&x0, &x1, cs.x, cs.y);
        __nv_bfloat16 *row = reinterpret_cast<__nv_bfloat16 *>(qt + g * D * 2);
        row[(((a >> 3) ^ (g & 7)) << 3) | (a & 7)] = __float2bfloat16_rn(x0);
        row[(((bb >> 3) ^ (g & 7)) << 3) | (bb & 7)] = __float2bfloat16_rn(x1);
    }
}

template <int D, int LAYOUT, bool LAZY, int DEC_STAGES, bool VROWS>
__global__ void __launch_bounds__(DEC_THREADS, DEC_STAGES <= 3 ? 2 : 1)
    decode_kernel(const __grid_constant__ lz_decode_params p, int n_split)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int b = blockIdx.z, h = blockIdx.y, sp = blockIdx.x;
    const int KV = p.n_kv_heads, G = p.n_heads / KV;
    unsigned char *ring = smem;
    unsigned char *qs = smem + (size_t)DEC_STAGES * 2 * BLK * D * 2; /* 2 x (16, d) bf16 swizzled */
    __nv_bfloat16 *qraw = reinterpret_cast<__nv_bfloat16 *>(qs + 2 * 16 * D * 2); /* (G, d) as given */
    const uint32_t ring_u = lz::smem_u32(ring), qs_u = lz::smem_u32(qs);

    const int nb = p.n_blocks[(size_t)b * KV + h];
    const int i0 = (int)((int64_t)nb * sp / n_split), i1 = (int)((int64_t)nb * (sp + 1) / n_split);
    const uint64_t *words = p.blocks + ((size_t)b * KV + h) * p.max_blocks;
    const uint64_t *vrows = VROWS ? p.v_rows + ((size_t)b * KV + h) * p.max_blocks : nullptr;
    const __nv_bfloat16 *kp = reinterpret_cast<const __nv_bfloat16 *>(p.k_pool);
    const __nv_bfloat16 *vp = reinterpret_cast<const __nv_bfloat16 *>(p.v_pool);
    const __nv_bfloat16 *qg = reinterpret_cast<const __nv_bfloat16 *>(p.q) + ((size_t)b * p.n_heads + h * G) * D;

    auto load_block = [&](int i, int stage) {
        const uint64_t w = words[i];
        const size_t row = lz_decode_word_row(w) * D, vrow = VROWS ? vrows[i] * D : row;
        const int nk = lz_decode_word_keys(w);
        const uint32_t kd = ring_u + stage * (2 * BLK * D * 2), vd = kd + BLK * D * 2;
        lz::copy_tile<D, BLK, DEC_THREADS>(kd, kp + row, nk, tid);
        lz::copy_tile<D, BLK, DEC_THREADS>(vd, vp + vrow, nk, tid);
    };
    /* a programmatic dependent (p.pdl) prefetches before the kernel before it is done, except
     * where its first blocks include (b, h)'s last, which that kernel may be writing */
    if (i1 == nb && nb - 1 < i0 + DEC_STAGES - 1) lz::pdl_wait();
#pragma unroll
    for (int s = 0; s < DEC_STAGES - 1; s++) {
        if (i0 + s < i1) load_block(i0 + s, s);
        lz::cp_async_commit();
    }
    lz::pdl_wait(); /* q, and the last block (loaded in the loop below): the kernel before wrote them */

    for (int e = tid; e < G * D; e += DEC_THREADS) qraw[e] = qg[e]; /* read by later builds */
    const float my_inv_freq = p.inv_freq[tid % (D / 2)];
    auto build_q = [&](int buf, int64_t off, const __nv_bfloat16 *qsrc) {
        build_query<D, LAYOUT, LAZY>(qs + buf * 16 * D * 2, qsrc, off, my_inv_freq, G, tid);
    };
    uint32_t qa[D / 16][4];
    auto load_qa = [&](int buf) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            int r = (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
            lz::ldsm_x4(qs_u + buf * 16 * D * 2 + lz::swz<D>(r, c), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
        }
    };
    /* rows >= G of both tiles stay zero; tile 0 gets the first block's rotation */
    for (int e = tid; e < 2 * 16 * D; e += DEC_THREADS) {
        int g = (e / D) % 16;
        if (g >= G) reinterpret_cast<__nv_bfloat16 *>(qs)[e] = __float2bfloat16_rn(0.f);
    }
    uint64_t wc = i0 < i1 ? words[i0] : 0, wn = i0 + 1 < i1 ? words[i0 + 1] : 0;
    int cur_buf = 0;
    build_q(0, (LAZY && i0 < i1) ? lz_decode_word_offset(wc) : 0, qg); /* later builds read the shared copy (published by the loop's barrier) */

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    const float sl2 = p.scale * 1.4426950408889634f;

    /* One block: wait for it, refill the ring, (first block of a run) load
     * the run's query fragments, S = Q K^T, online softmax, O += P V. */
    int i = i0;
    auto block = [&](auto first_c) {
        const int stage = (i - i0) % DEC_STAGES;
        lz::cp_async_wait<DEC_STAGES - 2>();
        __syncthreads();
        if (i + DEC_STAGES - 1 < i1) load_block(i + DEC_STAGES - 1, (i - i0 + DEC_STAGES - 1) % DEC_STAGES);
        lz::cp_async_commit();
        /* block words are software-pipelined two deep (wc = words[i], wn =
         * words[i+1] were loaded in earlier iterations): no load stalls here */
        const uint64_t w = wc;
        wc = wn;
        wn = i + 2 < i1 ? words[i + 2] : 0;
        const int nk = lz_decode_word_keys(w);
        if (decltype(first_c)::value) load_qa(cur_buf);
        const uint32_t kd = ring_u + stage * (2 * BLK * D * 2), vd = kd + BLK * D * 2;
        /* S = Q K^T for this warp's 16 keys: s[n-tile][4] */
        /* two accumulators per n-tile (even / odd k-steps): 4 independent mma chains */
        float s[2][4] = {}, s2[2][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t b0, b1, b2, b3;
            int r = warp * 16 + (lane & 7) + (lane >> 4) * 8, c = ks * 2 + ((lane >> 3) & 1);
            lz::ldsm_x4(kd + lz::swz<D>(r, c), b0, b1, b2, b3);
            lz::mma16816((ks & 1) ? s2[0] : s[0], qa[ks], b0, b1);
            lz::mma16816((ks & 1) ? s2[1] : s[1], qa[ks], b2, b3);
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] += s2[nt][e];
        /* mask keys past the block's count, online softmax on rows lane/4, +8 */
        float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = warp * 16 + nt * 8 + 2 * (lane & 3) + (e & 1);
                float v = col < nk ? s[nt][e] * sl2 : -INFINITY;
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
            pa[nt * 2] = lz::pack_bf16(p0, p1);
            pa[nt * 2 + 1] = lz::pack_bf16(p2, p3);
        }
        lrow[0] = lrow[0] * alpha[0] + rs[0];
        lrow[1] = lrow[1] * alpha[1] + rs[1];
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            o[nt][0] *= alpha[0]; o[nt][1] *= alpha[0];
            o[nt][2] *= alpha[1]; o[nt][3] *= alpha[1];
        }
        /* O += P V over this warp's 16 keys */
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b0, b1, b2, b3;
            int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = dp * 2 + (lane >> 4);
            lz::ldsm_x4_t(vd + lz::swz<D>(r, c), b0, b1, b2, b3);
            lz::mma16816(o[2 * dp], pa, b0, b1);
            lz::mma16816(o[2 * dp + 1], pa, b2, b3);
        }
        i++;
    };
    /* Runs of blocks that share one query: the whole range for the twin, one
     * segment for the lazy kernel (a new run at each LZ_DECODE_SEG_START). The
     * inner loop is the twin's plus one bit test; the next run's rotated query
     * is built between runs and published by the next block's barrier. */
    while (i < i1) {
        block(std::true_type{});
        while (i < i1 && !(LAZY && (wc & LZ_DECODE_SEG_START))) block(std::false_type{});
        if (LAZY && i < i1) {
            cur_buf ^= 1;
            build_q(cur_buf, lz_decode_word_offset(wc), qraw);
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
        int col = nt * 8 + 2 * (lane & 3);
        *reinterpret_cast<float2 *>(&red_o[(warp * 16 + r0) * D + col]) = make_float2(o[nt][0], o[nt][1]);
        *reinterpret_cast<float2 *>(&red_o[(warp * 16 + r0 + 8) * D + col]) = make_float2(o[nt][2], o[nt][3]);
    }
    __syncthreads();
    const int rows = p.batch * p.n_heads;
    float *part = p.work, *lse = p.work + (size_t)rows * n_split * D;
    for (int e = tid; e < G * D; e += DEC_THREADS) {
        int g = e / D, k = e % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, red_m[w * 16 + g]);
        float L = 0.f, acc = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                float f = exp2f(red_m[w * 16 + g] - M);
                L += f * red_l[w * 16 + g];
                acc += f * red_o[(w * 16 + g) * D + k];
            }
        }
        float val = L > 0.f ? acc / L : 0.f;
        size_t row = (size_t)b * p.n_heads + h * G + g;
        if (n_split == 1) {
            reinterpret_cast<__nv_bfloat16 *>(p.o)[row * D + k] = __float2bfloat16_rn(val);
        } else {
            part[(row * n_split + sp) * D + k] = val;
            if (k == 0) lse[row * n_split + sp] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
    if (n_split == 1) return;
    /* split-KV: the last part of (b, h) to finish merges all parts (no second
     * launch); its counter goes back to zero for the next call */
    unsigned *count = reinterpret_cast<unsigned *>(lse + (size_t)rows * n_split) + (size_t)b * KV + h;
    __shared__ unsigned is_last;
    __threadfence();
    __syncthreads();
    if (tid == 0) is_last = atomicAdd(count, 1u) == (unsigned)n_split - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int g = warp; g < G; g += DEC_THREADS / 32) {
        const size_t row = (size_t)b * p.n_heads + h * G + g;
        lz::combine_row<D, true>(reinterpret_cast<__nv_bfloat16 *>(p.o) + row * D, part + row * n_split * D,
                           lse + row * n_split, n_split, lane);
    }
    if (tid == 0) *count = 0;
}

template <int D, int LAYOUT, bool LAZY, int STAGES, bool VROWS>
int launch(const lz_decode_params *p, int ns, cudaStream_t st)
{
    auto kern = decode_kernel<D, LAYOUT, LAZY, STAGES, VROWS>;
    static std::atomic<unsigned long long> attr_set{0};
    if (int e = lz::max_smem_once(kern, (int)dec_smem<D, STAGES>(), attr_set)) return e;
    dim3 grid(ns, p->n_kv_heads, p->batch);
    return (int)lz::launch_pdl(kern, grid, dim3(DEC_THREADS), dec_smem<D, STAGES>(), st, p->pdl != 0, *p, ns);
}

/* 3 stages at 2 CTAs per SM when the grid has more CTAs than SMs, else 6
 * stages at one CTA per SM (more bytes in flight per SM). */
template <int D, int LAYOUT, bool LAZY>
int launch(const lz_decode_params *p, cudaStream_t st)
{
    int n_sm, e = lz::sm_count(&n_sm);
    if (e) return e;
    const int ns = lz_decode_splits(p, n_sm);
    if (ns > 1 && (!p->work || p->work_bytes < lz_decode_workspace(p, ns))) return LZ_ATTN_EWORK;
    if (p->batch == 0) return LZ_ATTN_OK;
    const bool one = (long)p->batch * p->n_kv_heads * ns <= n_sm;
    if (p->v_rows) return one ? launch<D, LAYOUT, LAZY, 6, true>(p, ns, st) : launch<D, LAYOUT, LAZY, 3, true>(p, ns, st);
    return one ? launch<D, LAYOUT, LAZY, 6, false>(p, ns, st) : launch<D, LAYOUT, LAZY, 3, false>(p, ns, st);
}

template <bool LAZY> int dispatch(const lz_decode_params *p, void *stream)
{
    if (p && p->k_scales) { /* fp8 blocks possible: kernels/lz_decode_fp8.cu */
        const int rc = lz_decode_check(p);
        return rc ? rc : lz_decode_fp8_launch(p, LAZY, stream);
    }
    return lz::checked_with_shape(lz_decode_check(p), p, [&](auto d, auto layout) {
        return launch<decltype(d)::value, decltype(layout)::value, LAZY>(p, (cudaStream_t)stream);
    });
}

} /* namespace */

extern "C" int lz_decode_lazy(const lz_decode_params *p, void *stream) { return dispatch<true>(p, stream); }
extern "C" int lz_decode(const lz_decode_params *p, void *stream) { return dispatch<false>(p, stream); }
