/* lz_wgmma.cuh - Hopper (sm_90a) warpgroup MMA helpers of the prefill
 * kernels: the shared-memory matrix descriptor (128-byte swizzle), fences, and
 * wgmma.mma_async m64nNk16 bf16 -> fp32 with A from registers (the same
 * fragment layout as mma.sync m16n8k16, one 16-row slice a warp) and B from
 * shared memory; and a one-shot bulk copy (TMA engine) completing on an
 * mbarrier. Accumulators d[n8][4] are laid out as mma.sync's C
 * fragments: d[i][0..1] row lane/4, d[i][2..3] row lane/4 + 8, columns
 * 8i + 2*(lane%4) + {0,1} of the warp's 16 rows. CUDA C++ only.
 *
 * Shared tiles for B (the wgmma layout, lz::wg_off in lz_mma.cuh): rows of 64 bf16 (128
 * bytes) in 8-row atoms of 1024 bytes, 16-byte chunk c of row r at chunk
 * c ^ (r & 7); a d = 128 tile is two such blocks of 64 columns, block b at
 * b * rows * 128 bytes. K tiles are read K-major (keys = N, d = K), V tiles
 * MN-major (keys = K, d = N, transposed), both from the same layout.
 */
#ifndef LZ_WGMMA_CUH
#define LZ_WGMMA_CUH

#include <stdint.h>

namespace lz {

/* Matrix descriptor: shared address, leading / stride byte offsets, 128-byte swizzle. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* After a wait: the accumulators are read only from here on (the compiler
 * sees no dependency between wgmma.wait_group and the registers otherwise). */
template <int N> __device__ __forceinline__ void wg_fence_acc(float (&d)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) asm volatile("" : "+f"(d[i][j])::"memory");
}

/* Generic-proxy writes (cp.async, st.shared) before async-proxy reads (wgmma). */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* One bulk copy global -> shared by the TMA engine (no tensor map), completing
 * on an mbarrier instead of a cp.async group: waiting for it waits for
 * nothing else. bytes % 16 == 0, both addresses 16-byte aligned; one thread
 * inits the barrier (count 1) and issues; everyone waits after a barrier. */
__device__ __forceinline__ void mbar_init(uint32_t bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "fence.mbarrier_init.release.cluster;\n" ::"r"(bar)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %1, [%0];\n" ::"r"(bar),
                 "r"(bytes), "r"(dst), "l"(src)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n .reg .pred done;\n"
                 "LZ_MBAR_WAIT%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra LZ_MBAR_WAIT%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}


/* The wgmma wrappers below differ only in N (the accumulator count, N/2 a
 * thread) and in B's major-ness; their operand lists come from these macros:
 * accumulator registers %0.. in groups of 8 (LZ_WG_D8) and the matching
 * "+f" operands of d[i..i+1][0..3] (LZ_WG_ACC8). After the accumulators: A's
 * 4 registers, the descriptor, the scale-d flag (a predicate), TRANS_B. */
#define LZ_WG_D8(a, b, c, d_, e, f, g, h) "%" #a ", %" #b ", %" #c ", %" #d_ ", %" #e ", %" #f ", %" #g ", %" #h
#define LZ_WG_ACC8(d, i)                                                                                          \
    "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3]), "+f"(d[i + 1][0]), "+f"(d[i + 1][1]),             \
        "+f"(d[i + 1][2]), "+f"(d[i + 1][3])
#define LZ_WG_IN(a, desc, accumulate, trans_b)                                                                     \
    "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate), "n"(trans_b)

/* m64n32k16: an S tile of 32 keys (a segment's tail), B = K, K-major */
__device__ __forceinline__ void wg_s_n32(float (&d)[4][4], const uint32_t (&a)[4], uint64_t desc, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" LZ_WG_D8(0, 1, 2, 3, 4, 5, 6, 7) ", "
                 LZ_WG_D8(8, 9, 10, 11, 12, 13, 14, 15) "}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                 : LZ_WG_ACC8(d, 0), LZ_WG_ACC8(d, 2)
                 : LZ_WG_IN(a, desc, accumulate, 0));
}

/* m64n64k16: d (64 x 64) (+)= A (64 x 16, registers) B, B from shared
 * memory K-major (TRANS_B 0: an S tile of 64 keys, B = K) or MN-major
 * (TRANS_B 1: O += P V for d = 64, B = V) */
template <int TRANS_B>
__device__ __forceinline__ void wg_mma_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" LZ_WG_D8(0, 1, 2, 3, 4, 5, 6, 7) ", "
                 LZ_WG_D8(8, 9, 10, 11, 12, 13, 14, 15) ", " LZ_WG_D8(16, 17, 18, 19, 20, 21, 22, 23) ", "
                 LZ_WG_D8(24, 25, 26, 27, 28, 29, 30, 31) "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : LZ_WG_ACC8(d, 0), LZ_WG_ACC8(d, 2), LZ_WG_ACC8(d, 4), LZ_WG_ACC8(d, 6)
                 : LZ_WG_IN(a, desc, accumulate, TRANS_B));
}
__device__ __forceinline__ void wg_s_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc, int accumulate)
{
    wg_mma_n64<0>(d, a, desc, accumulate);
}
/* O (64 x 64) (+)= P V for d = 64 */
__device__ __forceinline__ void wg_pv_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc, int accumulate)
{
    wg_mma_n64<1>(d, a, desc, accumulate);
}

/* m64n128k16: O (64 x 128) (+)= P (64 x 16 keys, registers) V (16 keys x 128, MN-major) */
__device__ __forceinline__ void wg_pv_n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" LZ_WG_D8(0, 1, 2, 3, 4, 5, 6, 7) ", "
                 LZ_WG_D8(8, 9, 10, 11, 12, 13, 14, 15) ", " LZ_WG_D8(16, 17, 18, 19, 20, 21, 22, 23) ", "
                 LZ_WG_D8(24, 25, 26, 27, 28, 29, 30, 31) ", " LZ_WG_D8(32, 33, 34, 35, 36, 37, 38, 39) ", "
                 LZ_WG_D8(40, 41, 42, 43, 44, 45, 46, 47) ", " LZ_WG_D8(48, 49, 50, 51, 52, 53, 54, 55) ", "
                 LZ_WG_D8(56, 57, 58, 59, 60, 61, 62, 63) "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : LZ_WG_ACC8(d, 0), LZ_WG_ACC8(d, 2), LZ_WG_ACC8(d, 4), LZ_WG_ACC8(d, 6), LZ_WG_ACC8(d, 8),
                   LZ_WG_ACC8(d, 10), LZ_WG_ACC8(d, 12), LZ_WG_ACC8(d, 14)
                 : LZ_WG_IN(a, desc, accumulate, 1));
}

#undef LZ_WG_D8
#undef LZ_WG_ACC8
#undef LZ_WG_IN

} /* namespace lz */
#endif /* LZ_WGMMA_CUH */
