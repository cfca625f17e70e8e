/* lz_mma.cuh - private device helpers of the attention kernels: cp.async,
 * ldmatrix, mma.sync m16n8k16 (bf16 in, fp32 accumulate), the XOR swizzle of
 * shared-memory tiles, tile copies, the split-KV combine of a row. CUDA C++ only.
 *
 * Legend: d = head_dim, rows of d bf16 = d/8 chunks of 16 bytes; a chunk c of
 * tile row r lives at chunk (c ^ (r & 7)) so ldmatrix reads hit 8 banks.
 */
#ifndef LZ_MMA_CUH
#define LZ_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <type_traits>

#include "kernels/lz_ops.cuh"
#include "base/rope.h"

namespace lz {

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte async copy global -> shared; src_bytes 0 zero-fills without reading. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                        uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                          uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* c[4] += a[4] (16x16 row) * b[2] (16x8 col), bf16 -> fp32. */
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
/* packed bf16x2 a * b + c, one rounding per half (sm_90) */
__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* packed bf16x2 a * b (+ -0, which leaves every product as it is) */
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) { return bf16x2_fma(a, b, 0x80008000u); }
/* 2^x on the special-function unit, subnormal results flushed to zero (exp2f
 * adds a range test and two multiplies around the same instruction to keep
 * them; a softmax weight below 2^-126 is zero for every purpose here) */
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/* (cos a, sin a) of a rotary angle |a| < 2^24 rad: reduced to [-pi, pi] in
 * double precision (exact product, error ~1e-10 rad at 2e6 rad), then the
 * hardware sin/cos (absolute error ~4e-7 there). cosf/sinf take a slow path
 * (Payne-Hanek, a stack frame) above 105,615 rad, which decode offsets reach. */
__device__ __forceinline__ float2 rope_cos_sin(float a)
{
    const double x = (double)a;
    const double k = rint(x * 0.15915494309189535);
    const float r = (float)fma(-k, 6.283185307179586, x);
    float s, c;
    __sincosf(r, &s, &c);
    return make_float2(c, s);
}

/* Byte offset of 16-byte chunk c of row r in a swizzled tile of D bf16 per row. */
template <int D> __device__ __forceinline__ uint32_t swz(int r, int c)
{
    return (uint32_t)(r * (D * 2) + ((c ^ (r & 7)) << 4));
}

/* Byte offset of 16-byte chunk c (0 .. d/8-1) of row r in a tile of R rows
 * in the wgmma layout (lz_wgmma.cuh): blocks of 64 columns, each R rows of
 * 128 bytes, chunk c & 7 at (c & 7) ^ (r & 7). Equal to swz<64> for d = 64. */
template <int R> __device__ __forceinline__ uint32_t wg_off(int r, int c)
{
    return (uint32_t)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* Multiprocessors of the current device into *n_sm; 0 or a cudaError_t. */
static inline int sm_count(int *n_sm)
{
    int dev;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(n_sm, cudaDevAttrMultiProcessorCount, dev);
    return (int)e;
}

/* Raises kern's dynamic shared memory limit to bytes on the current device,
 * once per device: cudaFuncSetAttribute applies to the device current when it
 * runs, so a process driving several GPUs sets it on each (done: the
 * kernel's own flags, one bit a device; two threads racing both set it,
 * which is harmless). 0 or a cudaError_t. */
template <class K> static int max_smem_once(K kern, int bytes, std::atomic<unsigned long long> &done)
{
    int dev;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (bit && (done.load(std::memory_order_acquire) & bit)) return 0;
    e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return (int)e;
    done.fetch_or(bit, std::memory_order_release);
    return 0;
}

/* f(d, layout), both std::integral_constant: the compile-time head_dim (64
 * or 128; checked by the caller) and rotary layout of a kernel family from
 * their runtime values. */
template <class F> static int with_shape(int head_dim, int layout, F &&f)
{
    using D64 = std::integral_constant<int, 64>;
    using D128 = std::integral_constant<int, 128>;
    using HALF = std::integral_constant<int, LZ_ROPE_HALF>;
    using ADJ = std::integral_constant<int, LZ_ROPE_ADJACENT>;
    if (head_dim == 128) return layout == LZ_ROPE_HALF ? f(D128{}, HALF{}) : f(D128{}, ADJ{});
    return layout == LZ_ROPE_HALF ? f(D64{}, HALF{}) : f(D64{}, ADJ{});
}

/* The entry of a kernel family: rc from its argument check, else
 * launch(D, LAYOUT) for p's head_dim and rotary layout. */
template <class P, class F> static int checked_with_shape(int rc, const P *p, F &&launch)
{
    return rc ? rc : with_shape(p->head_dim, p->rope_layout, launch);
}

/* Copies a tile of up to R rows x D bf16 (rows D elements apart in global
 * memory) into a swizzled shared tile with 16-byte cp.async, rows >= n
 * zero-filled, by THREADS threads, in the swz<D> layout or (WG) the wgmma
 * layout of wg_off<R>. Thread t owns chunk t % (D/8) of rows
 * t / (D/8) + j*RPP; RPP is a multiple of 8, so the swizzle of its rows is
 * one constant and every copy is base + constant (a generic per-chunk index
 * computation costs about 27 instructions a copy). */
template <int D, int R, int THREADS, bool WG = false>
__device__ __forceinline__ void copy_tile(uint32_t dst, const __nv_bfloat16 *src, int n, int tid)
{
    constexpr int CH = D / 8, RPP = THREADS / CH, PASSES = R / RPP;
    constexpr int STEP = WG ? RPP * 128 : RPP * D * 2; /* bytes between a thread's rows */
    static_assert(RPP % 8 == 0 && R % RPP == 0, "tile copy shape");
    const int lr = tid / CH;
    dst += WG ? wg_off<R>(lr, tid % CH) : swz<D>(lr, tid % CH);
    const __nv_bfloat16 *g = src + lr * D + (tid % CH) * 8;
    if (n >= R) {
#pragma unroll
        for (int j = 0; j < PASSES; j++) cp_async16(dst + j * STEP, g + j * RPP * D, 16);
    } else {
#pragma unroll
        for (int j = 0; j < PASSES; j++) {
            const bool ok = lr + j * RPP < n;
            cp_async16(dst + j * STEP, ok ? g + j * RPP * D : src, ok ? 16 : 0);
        }
    }
}

/* Split-KV combine of one row by one warp: n_split partial outputs
 * (normalised, part[s*d ..]) and their log2-sum-exp (lse[s], -inf = empty
 * part) into one bf16 row. Lane s holds the weight of part s (32 parts a
 * pass), each lane d/32 consecutive outputs; the part loads do not depend on
 * one another. */
template <int D, bool SAME_KERNEL>
__device__ __forceinline__ void combine_row(__nv_bfloat16 *out, const float *part, const float *lse, int n_split,
                                            int lane)
{
    /* parts written by this kernel's other CTAs: L2 loads (L1 is not coherent);
     * by an earlier kernel: the read-only path (2 us faster on 32 x 1536 with
     * 16 parts) */
    auto ld = [](const float *x) { return SAME_KERNEL ? __ldcg(x) : __ldg(x); };
    auto ld4 = [](const float *x) {
        return SAME_KERNEL ? __ldcg(reinterpret_cast<const float4 *>(x)) : __ldg(reinterpret_cast<const float4 *>(x));
    };
    auto ld2 = [](const float *x) {
        return SAME_KERNEL ? __ldcg(reinterpret_cast<const float2 *>(x)) : __ldg(reinterpret_cast<const float2 *>(x));
    };
    float mx = -INFINITY;
    for (int s = lane; s < n_split; s += 32) mx = fmaxf(mx, ld(lse + s));
#pragma unroll
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    constexpr int E = D / 32; /* elements per lane: 2 or 4 */
    float acc[E] = {};
    float sum = 0.f;
    const float *src = part + lane * E;
    for (int s0 = 0; s0 < n_split; s0 += 32) {
        const float l = s0 + lane < n_split ? ld(lse + s0 + lane) : -INFINITY;
        const float wl = (mx == -INFINITY || l == -INFINITY) ? 0.f : exp2f(l - mx);
        sum += wl;
        const int n = min(32, n_split - s0);
#pragma unroll 4
        for (int j = 0; j < n; j++) {
            const float w = __shfl_sync(0xffffffffu, wl, j);
            const float *x = src + (size_t)(s0 + j) * D;
            if constexpr (E == 4) {
                const float4 v = ld4(x);
                acc[0] += w * v.x; acc[1] += w * v.y; acc[2] += w * v.z; acc[3] += w * v.w;
            } else {
                const float2 v = ld2(x);
                acc[0] += w * v.x; acc[1] += w * v.y;
            }
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    __nv_bfloat16 *dst = out + lane * E;
#pragma unroll
    for (int i = 0; i < E; i += 2)
        *reinterpret_cast<__nv_bfloat162 *>(dst + i) = __floats2bfloat162_rn(acc[i] * inv, acc[i + 1] * inv);
}

/* Split-KV combine kernel: rows of n_split partial outputs, part (rows,
 * n_split, d) fp32 and lse (rows, n_split), into out (rows, d); one warp a
 * row, all warps of the GPU at once (a merge by the last part's CTA serialises
 * a row tile's rows on four warps: 4x slower on question prefill). */
template <int D>
__global__ void combine_kernel(__nv_bfloat16 *__restrict__ out, const float *__restrict__ part,
                               const float *__restrict__ lse, int rows, int n_split)
{
    /* launched as a programmatic dependent of the split kernel: resident early,
     * waits here until that grid has finished and its stores are visible */
    pdl_wait();
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    combine_row<D, false>(out + (size_t)row * D, part + (size_t)row * n_split * D, lse + (size_t)row * n_split, n_split,
                   threadIdx.x & 31);
}

/* pdl: programmatic dependent launch (sm_90): the combine grid is scheduled
 * while the split kernel's CTAs store their parts (they trigger after their
 * tile loop), so its launch latency leaves the critical path;
 * griddepcontrol.wait keeps the order. Captured into CUDA graphs as a
 * programmatic edge. */
template <int D>
static int launch_combine(__nv_bfloat16 *out, const float *part, const float *lse, int rows, int n_split,
                          cudaStream_t st, bool pdl)
{
    return (int)launch_pdl(combine_kernel<D>, dim3((rows + 7) / 8), dim3(256), 0, st, pdl, out, part, lse, rows,
                           n_split);
}

} /* namespace lz */
#endif /* LZ_MMA_CUH */
