/* lz_prefill.cu - lazy prefill attention and its non-lazy twin
 * (lz_prefill.h), FlashAttention-2 style: a CTA owns BM query rows (GQA heads
 * of one kv head packed along the rows), streams 64-key tiles through a
 * cp.async ring, QK^T and PV on tensor cores (bf16, fp32 accumulate), online
 * softmax in registers (its running max moved, and the output rescaled, only
 * when a row's max grows by more than 2^8). Shapes (lz_prefill_plan): one warpgroup of 4 warps x
 * 16 rows (BM 64, Q in registers, 2 stages, 2 CTAs per SM) on wgmma
 * (lz_wgmma.cuh: K and V read from shared memory by the tensor cores; the
 * default for every shape) or mma.sync m16n8k16; 8 warps x 16 rows (BM 128,
 * 3 stages, 1 CTA per SM) and 4 warps x 32 rows (BM 128, 2 CTAs per SM, each
 * K/V fragment feeding two 16-row halves) on mma.sync, on request.
 * Tiles never straddle segments (the tile list: lz_prefill_cursor.cuh); a
 * tail of <= 32 keys runs a half-width copy
 * of the tile code. The lazy kernel uses q . R(p) K = (R(-p) q) . K: when the
 * tile's segment changes it reloads the query fragments from shared memory
 * and rotates them in registers by R(-p) (cos/sin tables: the caller's
 * p.rope_cs, copied by one bulk copy, or built once per CTA;
 * base/rope.h math); on
 * wgmma, during the P V of the tile before, in a copy of the tile code that
 * only those tiles run. (Rotating every K tile in shared memory after it
 * landed instead was 10-17% slower than the twin.) Split-KV over the tile
 * list plus a combine kernel when the rows alone cannot fill the GPU
 * (question prefill). Calls that allow fp8 segments (p.seg_fp8) run the F8
 * copy of each kernel. On wgmma an fp8 tile's bytes go from global memory to
 * registers at the start of the tile before it and are written as bf16 into
 * the tile's slots during that tile's P V (the tensor cores run it
 * asynchronously); on mma.sync they are copied as e4m3 bytes into the bf16
 * slots and turned into bf16 in place by the threads that copied them, right
 * before the tile's barrier (lz_fp8_tile.cuh). The tile's key scale
 * multiplies its scores, its value scale its probabilities.
 *
 * Legend: S = segments, KV = kv heads, G = H/KV, M = rows, R = G*M packed
 * rows per kv head (row r = head g = r / M, position m = r % M), d =
 * head_dim, BM = rows per CTA, BN = 64 keys per tile, NS = parts.
 */
#include <math.h>

#include "kernels/lz_fp8_tile.cuh"
#include "kernels/lz_mma.cuh"
#include "kernels/lz_wgmma.cuh"
#include "kernels/lz_prefill.h"
#include "kernels/lz_prefill_cursor.cuh"
#include "base/rope.h"

namespace {

using lz_pf::BN;
using lz_pf::Cursor;
using lz_pf::Tile;
constexpr float RESCALE_TAU = 8.f; /* the running max moves when a row's grows by more than 2^TAU (tile_step) */

/* Rotates this thread's query A fragments (rows lane/4, +8; elements
 * ks*16 + 8*r2 + 2*(lane&3) + {0,1}) by the cos/sin table cs (d/2 pairs).
 * The pairing is base/rope.h's: ADJACENT pairs (2i, 2i+1) sit in one
 * register; HALF pairs (i, i+d/2) sit in k-steps ks and ks + d/32. */
template <int D, int LAYOUT>
__device__ __forceinline__ void rotate_q(uint32_t (&qa)[D / 16][4], const float2 *cs, int lane)
{
    /* packed bf16x2 arithmetic on the fragments as they are (cos/sin rounded to
     * bf16): 3-4 instructions per register instead of 7 (unpack, 4 fp32 ops,
     * pack). Nsight Compute, 128 x 1536: the fp32 rotations made the lazy
     * kernel execute 14% more instructions than the twin. The query is bf16
     * either way; the rotation adds up to two more bf16 roundings. */
    if (LAYOUT == LZ_ROPE_ADJACENT) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
            for (int r2 = 0; r2 < 2; r2++) {
                const float2 c = cs[ks * 8 + 4 * r2 + (lane & 3)];
                const uint32_t cc = lz::pack_bf16(c.x, c.x), sn = lz::pack_bf16(-c.y, c.y);
#pragma unroll
                for (int rh = 0; rh < 2; rh++) {
                    uint32_t &u = qa[ks][2 * r2 + rh]; /* (x0, x1) -> (x0 c - x1 s, x1 c + x0 s) */
                    u = lz::bf16x2_fma(u, cc, lz::bf16x2_mul(__byte_perm(u, 0, 0x1032), sn));
                }
            }
    } else {
#pragma unroll
        for (int ks = 0; ks < D / 32; ks++)
#pragma unroll
            for (int r2 = 0; r2 < 2; r2++) {
                const int i = ks * 16 + 8 * r2 + 2 * (lane & 3);
                const float2 c0 = cs[i], c1 = cs[i + 1];
                const uint32_t c2 = lz::pack_bf16(c0.x, c1.x), s2 = lz::pack_bf16(c0.y, c1.y), ns2 = s2 ^ 0x80008000u;
#pragma unroll
                for (int rh = 0; rh < 2; rh++) { /* pairs (i, i + d/2): a c - b s, b c + a s */
                    uint32_t &ua = qa[ks][2 * r2 + rh], &ub = qa[ks + D / 32][2 * r2 + rh];
                    const uint32_t a = ua, b = ub;
                    ua = lz::bf16x2_fma(a, c2, lz::bf16x2_mul(b, ns2));
                    ub = lz::bf16x2_fma(b, c2, lz::bf16x2_mul(a, s2));
                }
            }
    }
}

/* Without the caller's table: the cos/sin of R(-p) for n_slots slots from
 * slot0 (offsets from shared memory or from p.segs). Not inlined: the
 * kernels that get a table never run it, and inline it sat in the middle of
 * their prologue's code. */
template <int D, int THREADS>
__device__ __noinline__ void build_cs(float2 *cstab, const int64_t *soff, const lz_prefill_params &p, int slot0,
                                      int n_slots, bool from_smem, int tid)
{
    for (int e = tid; e < n_slots * (D / 2); e += THREADS) {
        const int slot = slot0 + e / (D / 2), i = e % (D / 2);
        const int64_t off = from_smem ? soff[slot] : slot < p.n_seg ? p.segs[slot].offset : p.self_offset;
        const float ang = (float)(-off) * p.inv_freq[i];
        cstab[slot * (D / 2) + i] = fabsf(ang) < 1.6e7f ? lz::rope_cos_sin(ang) : make_float2(cosf(ang), sinf(ang));
    }
}

/* Kernel shapes: MT 16-row slices per warp, WARPS warps. (1, 8): 128 rows,
 * 3 stages, one CTA per SM; (1, 4): 64 rows, 2 stages, two CTAs per SM (more
 * row tiles, fewer split-KV parts); (2, 4): 128 rows, 2 stages, two per SM. */
template <int MT, int WARPS> struct Shape {
    static constexpr int THREADS = WARPS * 32;
    static constexpr int BM = 16 * MT * WARPS;
    static constexpr int STAGES = (MT == 1 && WARPS == 8) ? 3 : 2;
    static constexpr int MIN_CTAS = (MT == 1 && WARPS == 8) ? 1 : 2; /* per SM */
};
template <int D, int MT, int WARPS> constexpr size_t pf_smem_base()
{
    return (size_t)Shape<MT, WARPS>::BM * D * 2 + (size_t)Shape<MT, WARPS>::STAGES * 2 * BN * D * 2;
}

/* MT = 2 lazy: the shared Q tile (128 rows) = R(-p) q, read from global, with
 * cos/sin cs (d/2 pairs); unit = pairs 8u..8u+7 (ADJACENT: chunks 2u, 2u+1;
 * HALF: chunks u, u + d/16). Not inlined: keeps its registers out of the
 * main loop, where it runs only on a segment change. */
template <int D, int LAYOUT, int THREADS, int BM>
__device__ __noinline__ void rotate_q_tile(unsigned char *qsm, const __nv_bfloat16 *qg, const float2 *cs,
                                           int r0, int R, int h, int tid)
{
    constexpr int UNITS = D / 16, PER = BM * UNITS / THREADS;
    uint4 va[PER], vb[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) { /* all loads first: one global latency, not PER */
        const int e = tid + j * THREADS, r = e / UNITS, u = e % UNITS, rr = r0 + r;
        const int ca = LAYOUT == LZ_ROPE_HALF ? u : 2 * u, cb = LAYOUT == LZ_ROPE_HALF ? u + D / 16 : 2 * u + 1;
        va[j] = vb[j] = make_uint4(0, 0, 0, 0);
        if (rr < R) {
            const __nv_bfloat16 *src = qg + ((size_t)h * R + rr) * D; /* row (h*G + rr/M)*M + rr%M */
            va[j] = *reinterpret_cast<const uint4 *>(src + ca * 8);
            vb[j] = *reinterpret_cast<const uint4 *>(src + cb * 8);
        }
    }
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int e = tid + j * THREADS, r = e / UNITS, u = e % UNITS;
        const int ca = LAYOUT == LZ_ROPE_HALF ? u : 2 * u, cb = LAYOUT == LZ_ROPE_HALF ? u + D / 16 : 2 * u + 1;
        uint32_t w[8] = {va[j].x, va[j].y, va[j].z, va[j].w, vb[j].x, vb[j].y, vb[j].z, vb[j].w};
        float xs[16];
#pragma unroll
        for (int k = 0; k < 8; k++) { xs[2 * k] = lz::bf16_lo(w[k]); xs[2 * k + 1] = lz::bf16_hi(w[k]); }
#pragma unroll
        for (int t8 = 0; t8 < 8; t8++) {
            int a, b;
            lz_rope_pair(LAYOUT, 16, t8, &a, &b); /* local indices of pair 8u + t8 */
            float2 c = cs[8 * u + t8];
            lz_rope_rotate_pair(&xs[a], &xs[b], c.x, c.y);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = lz::pack_bf16(xs[2 * k], xs[2 * k + 1]);
        *reinterpret_cast<uint4 *>(qsm + lz::swz<D>(r, ca)) = make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4 *>(qsm + lz::swz<D>(r, cb)) = make_uint4(w[4], w[5], w[6], w[7]);
    }
}

/* MT = 1: 8 warps x 16 rows, Q fragments in registers (rotated there when lazy).
 * MT = 2: 4 warps x 32 rows, K/V fragments reused by both 16-row halves (half
 * the shared-memory traffic per mma), Q read from shared memory each k-step
 * (lazy: the shared tile is rewritten from global, rotated, on a segment change). */
template <int D, int LAYOUT, bool LAZY, int MT, int WARPS, bool WG, bool F8>
__global__ void __launch_bounds__(Shape<MT, WARPS>::THREADS, Shape<MT, WARPS>::MIN_CTAS)
    prefill_kernel(const __grid_constant__ lz_prefill_params p, int n_split)
{
    using SH = Shape<MT, WARPS>;
    constexpr int THREADS = SH::THREADS, STAGES = SH::STAGES, BM = SH::BM;
    static_assert(!WG || (MT == 1 && WARPS == 4), "wgmma: one warpgroup of 16-row warps");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    /* wgmma tiles need 1024-byte aligned atoms (the launch adds 1024 bytes) */
    unsigned char *smem = WG ? smem_raw + ((1024 - (lz::smem_u32(smem_raw) & 1023)) & 1023) : smem_raw;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int KV = p.n_kv_heads, G = p.n_heads / KV, M = p.n_rows, R = G * M;
    const int sp = blockIdx.z;
    /* grid (KV, row tiles, parts): the kv head without a division, so the
     * first loads (its segment lengths) go out at once. Which BM packed rows:
     * heaviest (latest rows) first when tiles stay in one head, row tile
     * lvl * G + g. Packed row rr of kv head h is row h*R + rr of q and o. */
    const int h = blockIdx.x;
    int r0;
    if (M % BM == 0) {
        const unsigned y = blockIdx.y, g = y % (unsigned)G, lvl = y / (unsigned)G;
        r0 = (int)g * M + (M / BM - 1 - (int)lvl) * BM;
    } else {
        r0 = blockIdx.y * BM;
    }
    const int rlast = min(r0 + BM, R) - 1;
    const int g_lo = (int)((unsigned)r0 / (unsigned)M), g_hi = (int)((unsigned)rlast / (unsigned)M);
    const int m_hi = g_lo != g_hi ? M - 1 : rlast - g_hi * M;
    const int m_lo = g_lo != g_hi ? 0 : r0 - g_lo * M;

    unsigned char *qsm = smem, *ring = smem + (size_t)BM * D * 2;
    float2 *cstab = reinterpret_cast<float2 *>(ring + (size_t)STAGES * 2 * BN * D * 2); /* (S+1, d/2) */
    int64_t *soff = reinterpret_cast<int64_t *>(cstab + (size_t)(p.n_seg + 1) * (D / 2)); /* lazy: (S+1) offsets */
    const uint32_t q_u = lz::smem_u32(qsm), ring_u = lz::smem_u32(ring);
    const __nv_bfloat16 *qg = reinterpret_cast<const __nv_bfloat16 *>(p.q);

    /* kv head h's segment lengths and the first 32 segments' descriptors,
     * read first: their latency overlaps Q's copy, and the part's first tiles
     * need no second read */
    int c_nt[Cursor::CH];
    Cursor::Descs dsc;
    Cursor::read_descs<F8>(p, h, lane, dsc);
    Cursor::read_tiles(p, h, lane, c_nt);
    /* Q tile (zero rows past R); MT = 2 lazy writes it rotated instead */
    if (!(LAZY && MT == 2)) {
#pragma unroll
        for (int j = 0; j < BM * D / 8 / THREADS; j++) {
            int idx = tid + j * THREADS, r = idx / (D / 8), c = idx % (D / 8);
            int rr = r0 + r, ok = rr < R;
            const __nv_bfloat16 *src = qg + ((size_t)h * R + (ok ? rr : 0)) * D + c * 8;
            lz::cp_async16(q_u + lz::swz<D>(r, c), src, ok ? 16 : 0);
        }
    }
    /* lazy, 16 rows a warp, with the caller's cos/sin table (no sin/cos
     * here): its slots by ONE bulk copy that thread 0 issues, completing on an
     * mbarrier (soff[0]: unused then), apart from the cp.async groups: every
     * slot now when S < 16 (it lands with Q), else the part's own once the
     * tile list is placed. As a cp.async per thread in Q's group it would land
     * with the first tile and delay the first rotation. */
    const bool cs_given = LAZY && MT == 1 && p.rope_cs != nullptr;
    const bool cs_all = cs_given && p.n_seg < 16;
    const uint32_t cs_bar = lz::smem_u32(soff);
    if (cs_given && tid == 0) {
        lz::mbar_init(cs_bar);
        if (cs_all) lz::bulk_copy(lz::smem_u32(cstab), p.rope_cs, (p.n_seg + 1) * (D / 2) * 8, cs_bar);
    }
    /* tile list and this part's share of it */
    const int self_tiles = m_hi / BN + 1;
    Cursor cur, ld;
    int t0, t1, s_last;
    cur.locate(p, self_tiles, lane, c_nt, sp, n_split, &t0, &t1, &s_last);
    /* lazy, many segments: the cos/sin of the slots this part touches (spelled
     * !tid: with tid == 0 the compiler schedules the kernel differently) */
    if (cs_given && !cs_all && t0 < t1 && !tid)
        lz::bulk_copy(lz::smem_u32(cstab) + cur.s * (D / 2) * 8, p.rope_cs + cur.s * D, (s_last - cur.s + 1) * (D / 2) * 8,
                      cs_bar);
    if (cs_all && t0 >= t1) lz::mbar_wait(cs_bar, 0); /* an empty part: no copy in flight at exit */
    /* Q's group (the twin's too) closes before the first tiles, so Q's fragments can be ready first */
    lz::cp_async_commit();

    /* F8: bit s set = stage s holds an fp8 tile, to be converted once it landed */
    [[maybe_unused]] uint32_t f8_stages = 0;
    /* F8 on wgmma: the next fp8 tile's K and V chunks of this thread, loaded at
     * the tile's start, stored as bf16 during the P V before it */
    constexpr int F8P = F8 && WG ? lz::f8_tile_passes<D, BN, THREADS>() : 1;
    [[maybe_unused]] uint4 k8r[F8P], v8r[F8P];
    auto load_tile = [&](const Tile &x, int stage) {
        const uint32_t kd = ring_u + stage * (2 * BN * D * 2), vd = kd + BN * D * 2;
        if constexpr (F8 && WG) {
            if (x.f8) {
                lz::load_tile_f8_regs<D, BN, THREADS>(k8r, reinterpret_cast<const uint8_t *>(x.k), x.n, tid);
                lz::load_tile_f8_regs<D, BN, THREADS>(v8r, reinterpret_cast<const uint8_t *>(x.v), x.n, tid);
                f8_stages |= 1u << stage;
                return;
            }
            f8_stages &= ~(1u << stage);
        } else if constexpr (F8) {
            if (x.f8) {
                lz::copy_tile_f8<D, BN, THREADS, WG>(kd, reinterpret_cast<const uint8_t *>(x.k), x.n, tid);
                lz::copy_tile_f8<D, BN, THREADS, WG>(vd, reinterpret_cast<const uint8_t *>(x.v), x.n, tid);
                f8_stages |= 1u << stage;
                return;
            }
            f8_stages &= ~(1u << stage);
        }
        if constexpr (MT == 1) {
            lz::copy_tile<D, BN, THREADS, WG>(kd, x.k, x.n, tid);
            lz::copy_tile<D, BN, THREADS, WG>(vd, x.v, x.n, tid);
        } else { /* 32 rows a warp: no registers to spare for the copy's hoisted offsets (they spill) */
#pragma unroll
            for (int j = 0; j < BN * D / 8 / THREADS; j++) {
                int idx = tid + j * THREADS, r = idx / (D / 8), c = idx % (D / 8);
                int ok = r < x.n;
                size_t off = (size_t)(ok ? r : 0) * D + c * 8;
                lz::cp_async16(kd + lz::swz<D>(r, c), x.k + off, ok ? 16 : 0);
                lz::cp_async16(vd + lz::swz<D>(r, c), x.v + off, ok ? 16 : 0);
            }
        }
    };
    /* ld walks the tiles being loaded; with 2 stages the tile computed next is
     * the one loaded last (pend), else cur walks them a second time (also for
     * 32 rows a warp: pend's registers would spill there) */
    constexpr bool PEND = STAGES == 2 && MT == 1;
    ld = cur;
    Tile pend;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (t0 + s < t1) {
            pend = ld.tile_pre<F8>(p, h, D, dsc);
            load_tile(pend, s);
            ld.next(p, h, self_tiles);
        }
        lz::cp_async_commit();
    }
    if constexpr (F8 && WG) /* the part's first tile, if fp8: to bf16 now (the loop's first barrier publishes it) */
        if (t0 < t1 && (f8_stages & 1)) {
            lz::store_tile_f8<D, BN, THREADS, WG>(ring_u, k8r, tid);
            lz::store_tile_f8<D, BN, THREADS, WG>(ring_u + BN * D * 2, v8r, tid);
        }
    /* Without the caller's table: cos/sin of R(-p) for the segments from this
     * part's first to the own keys (a superset of those it touches; no second
     * walk): the first segment's now, the others after the first query
     * rotation (published by the main loop's first barrier). Timed apart,
     * this prologue was most of the lazy overhead. */
    /* offsets of every slot into shared memory, all loads at once (one global
     * latency; a loop over p.segs in cs_entries waited for each in turn) */
    if (LAZY && !cs_given)
        for (int sl = tid; sl <= p.n_seg; sl += THREADS) soff[sl] = sl < p.n_seg ? p.segs[sl].offset : p.self_offset;
    auto cs_entries = [&](int slot0, int n_slots, bool from_smem) {
        build_cs<D, THREADS>(cstab, soff, p, slot0, n_slots, from_smem, tid);
    };
    if (LAZY && !cs_given && t0 < t1) cs_entries(cur.s, MT == 1 ? 1 : p.n_seg - cur.s + 1, false); /* MT = 2: all at once (registers) */
    /* rows of this thread: warp*16*MT + mt*16 + lane/4 (+8); causal position m */
    const int wr0 = warp * 16 * MT;
    auto row_pos = [&](int mt, int k) { /* causal position of a row; rows past R see everything */
        int rr = r0 + wr0 + mt * 16 + (lane >> 2) + 8 * k;
        return rr < R ? rr % M : 0x7fffffff;
    };
    uint32_t qa[MT == 1 ? D / 16 : 1][4];
    float o[MT][D / 8][4];
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < D / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
        mrow[mt][0] = mrow[mt][1] = -INFINITY;
        lrow[mt][0] = lrow[mt][1] = 0.f;
    }
    const float sl2 = p.scale * 1.4426950408889634f;
    /* query for the first tile's segment, prepared while the first tiles load;
     * R(0) = identity: own keys at their final positions need no rotation
     * (the engine's case) */
    const bool self_id = LAZY && p.self_offset == 0;
    int q_slot = cur.s;
    if (t0 < t1) {
        if constexpr (MT == 1) {
            lz::cp_async_wait<STAGES - 1>(); /* Q landed (tiles may still be in flight) */
            __syncthreads();                  /* ... for every thread; cos/sin table too */
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
                lz::ldsm_x4(q_u + lz::swz<D>(r, c), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
            }
            if (cs_given) lz::mbar_wait(cs_bar, 0); /* the cos/sin copy */
            if (LAZY && !(q_slot == p.n_seg && self_id)) rotate_q<D, LAYOUT>(qa, cstab + q_slot * (D / 2), lane);
        } else if (LAZY) {
            __syncthreads(); /* cos/sin table */
            rotate_q_tile<D, LAYOUT, THREADS, BM>(qsm, qg, cstab + q_slot * (D / 2), r0, R, h, tid); /* published by the loop's first barrier */
        }
        if (LAZY && MT == 1 && !cs_given) cs_entries(cur.s + 1, p.n_seg - cur.s, true); /* offsets published by the barrier above */
    }

    /* MT = 1: this warp's query fragments from the shared tile, rotated by R(-p) of slot */
    auto load_rotated_q = [&](int slot) {
        if constexpr (MT == 1) {
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
                lz::ldsm_x4(q_u + lz::swz<D>(r, c), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
            }
            if (!(slot == p.n_seg && self_id)) rotate_q<D, LAYOUT>(qa, cstab + slot * (D / 2), lane);
        }
    };
    for (int t = t0; t < t1; t++) {
        const int stage = (t - t0) % STAGES;
        lz::cp_async_wait<STAGES - 2>();
        if constexpr (F8 && !WG) { /* this thread's fp8 chunks of the tile, landed: to bf16 before the barrier */
            if ((f8_stages >> stage) & 1) {
                const uint32_t kd = ring_u + stage * (2 * BN * D * 2);
                lz::convert_tile_f8<D, BN, THREADS, WG>(kd, tid);
                lz::convert_tile_f8<D, BN, THREADS, WG>(kd + BN * D * 2, tid);
            }
        }
        if (WG) lz::fence_proxy_async(); /* this thread's copies, before wgmma reads them */
        __syncthreads();
        Tile x;
        if constexpr (PEND) x = pend;
        if (t + STAGES - 1 < t1) {
            pend = ld.tile<F8>(p, h, D);
            load_tile(pend, (t - t0 + STAGES - 1) % STAGES);
            ld.next(p, h, self_tiles);
        }
        lz::cp_async_commit();
        if constexpr (!PEND) {
            x = cur.tile<F8>(p, h, D);
            cur.next(p, h, self_tiles);
        }
        if (LAZY && !WG && x.slot != q_slot) { /* segment change (wgmma: done during the previous P V) */
            if constexpr (MT == 1) {
                load_rotated_q(x.slot);
            } else {
                rotate_q_tile<D, LAYOUT, THREADS, BM>(qsm, qg, cstab + x.slot * (D / 2), r0, R, h, tid);
                __syncthreads();
            }
            q_slot = x.slot;
        }
        const uint32_t kd = ring_u + stage * (2 * BN * D * 2), vd = kd + BN * D * 2;
        const int is_self = x.slot == p.n_seg;
        /* lazy wgmma: the next tile starts another segment (a tail's test; see the dispatch below) */
        const bool tail_change = LAZY && WG && t + 1 < t1 && pend.slot != q_slot;
        /* one tile: NB = BN, or BN/2 for a segment's tail of <= BN/2 keys (the
         * second copy of the code skips the empty half's MMAs; a runtime guard
         * inside the unrolled loops cost 30%) */
        auto tile_step = [&](auto nb_c, auto chg_c) {
        constexpr int NB = decltype(nb_c)::value;
        [[maybe_unused]] constexpr bool CHG = decltype(chg_c)::value; /* lazy wgmma: the next tile starts another segment */
        /* S = Q K^T: s[m-tile][n-tile][4], rows lane/4 and +8 of each 16-row half */
        float s[MT][NB / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < NB / 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
        if constexpr (WG) { /* the warpgroup's 64 rows x NB keys, K read K-major from shared memory */
            lz::wg_fence();
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                const uint64_t desc = lz::wg_desc(kd + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                if constexpr (NB == BN) lz::wg_s_n64(s[0], qa[ks], desc, ks > 0);
                else lz::wg_s_n32(s[0], qa[ks], desc, ks > 0);
            }
            lz::wg_commit();
            lz::wg_wait0();
            lz::wg_fence_acc(s[0]);
        } else {
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t qf[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if constexpr (MT == 1) {
                    qf[mt][0] = qa[ks][0]; qf[mt][1] = qa[ks][1]; qf[mt][2] = qa[ks][2]; qf[mt][3] = qa[ks][3];
                } else {
                    int r = wr0 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
                    lz::ldsm_x4(q_u + lz::swz<D>(r, c), qf[mt][0], qf[mt][1], qf[mt][2], qf[mt][3]);
                }
            }
#pragma unroll
            for (int np = 0; np < NB / 16; np++) {
                uint32_t b0, b1, b2, b3;
                int r = np * 16 + (lane & 7) + (lane >> 4) * 8, c = ks * 2 + ((lane >> 3) & 1);
                lz::ldsm_x4(kd + lz::swz<D>(r, c), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    lz::mma16816(s[mt][2 * np], qf[mt], b0, b1);
                    lz::mma16816(s[mt][2 * np + 1], qf[mt], b2, b3);
                }
            }
        }
        }
        const bool need_mask = x.n < NB || (is_self && x.j0 + NB - 1 > m_lo);
        /* F8: the tile's key scale in the scores' factor (1 for bf16 tiles) */
        const float sl2t = F8 ? sl2 * x.ks : sl2;
        uint32_t pa[MT][NB / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float mx[2] = {-INFINITY, -INFINITY}; /* the raw scores' max (scaled below: sl2 > 0) */
            const int pos0 = need_mask ? row_pos(mt, 0) : 0, pos1 = need_mask ? row_pos(mt, 1) : 0;
#pragma unroll
            for (int nt = 0; nt < NB / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = s[mt][nt][e];
                    if (need_mask) {
                        int col = nt * 8 + 2 * (lane & 3) + (e & 1);
                        bool ok = col < x.n && (!is_self || x.j0 + col <= ((e >> 1) ? pos1 : pos0));
                        v = ok ? v : -INFINITY;
                    }
                    s[mt][nt][e] = v;
                    mx[e >> 1] = fmaxf(mx[e >> 1], v);
                }
            /* online softmax with a lazy running max: it moves (and the output
             * and sum so far are rescaled) only when a row's max grows past it
             * by more than 2^RESCALE_TAU, decided for the whole warp; else
             * the weights are taken against the old max (at most 2^TAU = 256:
             * fp32 sums and bf16 P hold it). The result is the same softmax
             * (the final division uses the same reference). Against rescaling
             * every tile: the lazy kernel 0-1.5% faster, the twin 0-0.7%
             * slower, the lazy overhead under 1% on every shape */
            float mu[2];
            bool grow = false;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                mx[r] *= sl2t;
                grow |= mx[r] > mrow[mt][r] + RESCALE_TAU;
            }
            if (__any_sync(0xffffffffu, grow)) {
                float alpha[2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float mn = fmaxf(mrow[mt][r], mx[r]);
                    mu[r] = mn == -INFINITY ? 0.f : mn;
                    alpha[r] = lz::ex2(mrow[mt][r] - mu[r]);
                    mrow[mt][r] = mn;
                    lrow[mt][r] *= alpha[r];
                }
#pragma unroll
                for (int nt = 0; nt < D / 8; nt++) {
                    o[mt][nt][0] *= alpha[0]; o[mt][nt][1] *= alpha[0];
                    o[mt][nt][2] *= alpha[1]; o[mt][nt][3] *= alpha[1];
                }
            } else {
                mu[0] = mrow[mt][0] == -INFINITY ? 0.f : mrow[mt][0];
                mu[1] = mrow[mt][1] == -INFINITY ? 0.f : mrow[mt][1];
            }
            float rs[2] = {0.f, 0.f};
#pragma unroll
            for (int nt = 0; nt < NB / 8; nt++) {
                /* scale and subtract in one FFMA, 2^x without exp2f's subnormal fix-up (lz::ex2):
                 * 2.5-4.5% faster, twin and lazy */
                float p0 = lz::ex2(fmaf(s[mt][nt][0], sl2t, -mu[0])), p1 = lz::ex2(fmaf(s[mt][nt][1], sl2t, -mu[0]));
                float p2 = lz::ex2(fmaf(s[mt][nt][2], sl2t, -mu[1])), p3 = lz::ex2(fmaf(s[mt][nt][3], sl2t, -mu[1]));
                rs[0] += p0 + p1;
                rs[1] += p2 + p3;
                if constexpr (F8) { /* the value scale in P (bf16 keeps its relative precision) */
                    p0 *= x.vs; p1 *= x.vs; p2 *= x.vs; p3 *= x.vs;
                }
                pa[mt][nt >> 1][(nt & 1) * 2] = lz::pack_bf16(p0, p1);
                pa[mt][nt >> 1][(nt & 1) * 2 + 1] = lz::pack_bf16(p2, p3);
            }
            lrow[mt][0] += rs[0];
            lrow[mt][1] += rs[1];
        }
        /* O += P V, each V fragment used by every 16-row half */
        if constexpr (WG) { /* V read MN-major: 64-column blocks BN*128 bytes apart, 8-key atoms 1 KiB apart */
            lz::wg_fence();
#pragma unroll
            for (int kk = 0; kk < NB / 16; kk++) {
                const uint64_t desc = lz::wg_desc(vd + kk * 2048, BN * 128, 1024);
                if constexpr (D == 128) lz::wg_pv_n128(o[0], pa[0][kk], desc, 1);
                else lz::wg_pv_n64(o[0], pa[0][kk], desc, 1);
            }
            lz::wg_commit();
            /* lazy: the next tile starts another segment: its query is rotated
             * now, while the tensor cores run P V (qa is not an operand of it) */
            if constexpr (CHG) { /* pend: the next tile (WG: 2 stages); a tail runs this copy either way */
                if (NB == BN || tail_change) {
                    load_rotated_q(pend.slot);
                    q_slot = pend.slot;
                }
            }
            /* F8: the next tile, if fp8 (its chunks in registers since this tile's
             * start), into the other stage as bf16; the next barrier publishes it */
            if constexpr (F8)
                if (t + 1 < t1 && ((f8_stages >> (stage ^ 1)) & 1)) {
                    const uint32_t kn = ring_u + (stage ^ 1) * (2 * BN * D * 2);
                    lz::store_tile_f8<D, BN, THREADS, WG>(kn, k8r, tid);
                    lz::store_tile_f8<D, BN, THREADS, WG>(kn + BN * D * 2, v8r, tid);
                }
            lz::wg_wait0();
            lz::wg_fence_acc(o[0]);
        } else {
#pragma unroll
        for (int kk = 0; kk < NB / 16; kk++)
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b0, b1, b2, b3;
                int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = dp * 2 + (lane >> 4);
                lz::ldsm_x4_t(vd + lz::swz<D>(r, c), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    lz::mma16816(o[mt][2 * dp], pa[mt][kk], b0, b1);
                    lz::mma16816(o[mt][2 * dp + 1], pa[mt][kk], b2, b3);
                }
            }
        }
    };
        /* lazy wgmma: the full tiles before a segment change run their own copy
         * of the tile code (CHG: the next query rotated during P V); every other
         * full tile runs the twin's code exactly. With the change as a runtime
         * branch inside the one copy, the whole loop was scheduled around it:
         * 128 x 1536 lazy +2.8% over the twin instead of +1.4%. A segment's
         * tail (<= 32 keys) is almost always followed by a change, so every
         * lazy tail runs the change copy, the rotation behind a runtime test:
         * one copy of the code less, 128 x 1536 +1.7..2.0% instead of
         * +2.6..2.7%, ingest +0.5..1.0% instead of +1.3..1.9% */
        using no_chg = std::integral_constant<bool, false>;
        using chg = std::integral_constant<bool, LAZY && WG>;
        const bool change = LAZY && WG && t + 1 < t1 && pend.slot != q_slot; /* computed here, as measured: where it
                                                                              * is computed changes the schedule */
        if (x.n <= BN / 2) {
            if (LAZY && WG) tile_step(std::integral_constant<int, BN / 2>{}, chg{});
            else tile_step(std::integral_constant<int, BN / 2>{}, no_chg{});
        } else {
            if (change) tile_step(std::integral_constant<int, BN>{}, chg{});
            else tile_step(std::integral_constant<int, BN>{}, no_chg{});
        }
    }
    lz::cp_async_wait<0>();
    /* the combine kernel (a programmatic dependent) may be scheduled once every CTA is
     * here; triggered at the start instead, its CTAs took resources from this kernel
     * (H200: 128 x 1536 lazy 26.4 against 25.7 us launched plainly) */
    if (n_split > 1) lz::pdl_trigger();

    /* write: bf16 rows when one part, else normalised fp32 part + log2-sum-exp */
    const size_t rows = (size_t)p.n_heads * M;
    float *part = p.work, *lse = p.work + rows * n_split * D;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            float l = lrow[mt][k];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            int rr = r0 + wr0 + mt * 16 + (lane >> 2) + 8 * k;
            if (rr >= R) continue;
            size_t row = (size_t)h * R + rr; /* (h*G + rr/M)*M + rr%M */
            float inv = l > 0.f ? 1.f / l : 0.f;
            if (n_split == 1) {
                __nv_bfloat16 *dst = reinterpret_cast<__nv_bfloat16 *>(p.o) + row * D;
#pragma unroll
                for (int nt = 0; nt < D / 8; nt++)
                    *reinterpret_cast<uint32_t *>(dst + nt * 8 + 2 * (lane & 3)) =
                        lz::pack_bf16(o[mt][nt][2 * k] * inv, o[mt][nt][2 * k + 1] * inv);
            } else {
                float *dst = part + (row * n_split + sp) * D;
#pragma unroll
                for (int nt = 0; nt < D / 8; nt++)
                    *reinterpret_cast<float2 *>(dst + nt * 8 + 2 * (lane & 3)) =
                        make_float2(o[mt][nt][2 * k] * inv, o[mt][nt][2 * k + 1] * inv);
                if ((lane & 3) == 0)
                    lse[row * n_split + sp] = l > 0.f ? mrow[mt][k] + log2f(l) : -INFINITY;
            }
        }
}

template <int D, int LAYOUT, bool LAZY, int MT, int WARPS, bool WG, bool F8>
int launch(const lz_prefill_params *p, int ns, cudaStream_t st)
{
    using SH = Shape<MT, WARPS>;
    auto kern = prefill_kernel<D, LAYOUT, LAZY, MT, WARPS, WG, F8>;
    const size_t base = pf_smem_base<D, MT, WARPS>() + (WG ? 1024 : 0);
    const size_t smem_max = base + (size_t)(LZ_PREFILL_MAX_SEG + 1) * ((D / 2) * sizeof(float2) + sizeof(int64_t));
    const size_t smem = base + (LAZY ? (size_t)(p->n_seg + 1) * ((D / 2) * sizeof(float2) + sizeof(int64_t)) : 0);
    static std::atomic<unsigned long long> attr_set{0};
    if (int e = lz::max_smem_once(kern, (int)smem_max, attr_set)) return e;
    const int G = p->n_heads / p->n_kv_heads;
    const int64_t row_tiles = ((int64_t)G * p->n_rows + SH::BM - 1) / SH::BM;
    if (row_tiles > 65535 || ns > 65535) return LZ_ATTN_EARG; /* the grid's y and z limits */
    dim3 grid(p->n_kv_heads, (unsigned)row_tiles, ns);
    kern<<<grid, SH::THREADS, smem, st>>>(*p, ns);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    if (ns > 1) {
        int rows = p->n_heads * p->n_rows;
        return lz::launch_combine<D>(reinterpret_cast<__nv_bfloat16 *>(p->o), p->work,
                                     p->work + (size_t)rows * ns * D, rows, ns, st, !p->no_pdl);
    }
    return LZ_ATTN_OK;
}

/* Kernel shape and split-KV parts: lz_prefill_plan (kernels/lz_attn_ref.c). */
template <int D, int LAYOUT, bool LAZY, bool F8>
int launch(const lz_prefill_params *p, int ns, int bm, int rpw, int wg, cudaStream_t st)
{
    if (wg) return launch<D, LAYOUT, LAZY, 1, 4, true, F8>(p, ns, st);
    if (rpw == 32 && bm == 128) return launch<D, LAYOUT, LAZY, 2, 4, false, F8>(p, ns, st);
    if (rpw == 16 && bm == 128) return launch<D, LAYOUT, LAZY, 1, 8, false, F8>(p, ns, st);
    if (rpw == 16 && bm == 64) return launch<D, LAYOUT, LAZY, 1, 4, false, F8>(p, ns, st);
    return LZ_ATTN_EARG;
}
template <int D, int LAYOUT, bool LAZY>
int launch(const lz_prefill_params *p, cudaStream_t st)
{
    int n_sm, e = lz::sm_count(&n_sm);
    if (e) return e;
    int bm, rpw, ns, wg;
    lz_prefill_plan(p, n_sm, &bm, &rpw, &ns, &wg);
    if (ns > 1 && (!p->work || p->work_bytes < lz_prefill_workspace(p, ns))) return LZ_ATTN_EWORK;
    if (p->seg_fp8 && p->n_seg > 0) return launch<D, LAYOUT, LAZY, true>(p, ns, bm, rpw, wg, st);
    return launch<D, LAYOUT, LAZY, false>(p, ns, bm, rpw, wg, st);
}

template <bool LAZY> int dispatch(const lz_prefill_params *p, void *stream)
{
    return lz::checked_with_shape(lz_prefill_check(p), p, [&](auto d, auto layout) {
        return launch<decltype(d)::value, decltype(layout)::value, LAZY>(p, (cudaStream_t)stream);
    });
}

} /* namespace */


extern "C" int lz_prefill_lazy(const lz_prefill_params *p, void *stream) { return dispatch<true>(p, stream); }
extern "C" int lz_prefill(const lz_prefill_params *p, void *stream) { return dispatch<false>(p, stream); }
