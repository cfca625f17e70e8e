/* lz_fp8_tile.cuh - private device helpers of the fp8 (e4m3) attention paths:
 * e4m3 bytes to fp16 / bf16 with integer operations (Hopper's conversion
 * instructions run at a fraction of the integer rate), mma.sync m16n8k16 on
 * fp16, 16-byte shared loads, the fp8 tile layout of the decode kernel and
 * the copy-then-convert-in-place tiles of the prefill kernels. CUDA C++ only.
 *
 * e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits) sits inside fp16
 * and bf16: moving the 7 magnitude bits under fp16's exponent gives the value
 * times 2^-8 (fp16's bias is 15), subnormals included, in one shift and one
 * masked merge; under bf16's the value times 2^-120, which one bf16x2 multiply
 * by 2^120 makes exact. The NaN byte S.1111.111 becomes +-480 (fp16 1.875 *
 * 2^0 times 2^8), not NaN.
 *
 * Legend: d = head_dim; a 16-byte chunk of an fp8 row is 16 elements.
 */
#ifndef LZ_FP8_TILE_CUH
#define LZ_FP8_TILE_CUH

#include <stdint.h>

#include "kernels/lz_mma.cuh"

namespace lz {

/* fp16x2 (times 2^-8) of the two e4m3 bytes in bits 8-15 and 24-31 of t (the
 * other bytes are ignored): magnitudes one bit down, signs where they are. */
__device__ __forceinline__ uint32_t e4m3_hi2_f16(uint32_t t)
{
    return ((t >> 1) & 0x3f803f80u) | (t & 0x80008000u);
}
/* bytes (0, 2) and (1, 3) of w as fp16x2 times 2^-8 (low half = the lower byte) */
__device__ __forceinline__ uint32_t e4m3_even_f16(uint32_t w) { return e4m3_hi2_f16(w << 8); }
__device__ __forceinline__ uint32_t e4m3_odd_f16(uint32_t w) { return e4m3_hi2_f16(w); }
/* byte J of a (low half) and byte J of b (high half) as fp16x2 times 2^-8 */
template <int J> __device__ __forceinline__ uint32_t e4m3_cross_f16(uint32_t a, uint32_t b)
{
    constexpr uint32_t sel = ((4u + J) << 12) | ((4u + J) << 8) | ((uint32_t)J << 4) | (uint32_t)J;
    return e4m3_hi2_f16(__byte_perm(a, b, sel));
}

/* Four e4m3 bytes (element order) as two bf16x2 words of their exact values:
 * lo = (e0, e1), hi = (e2, e3). */
__device__ __forceinline__ void e4m3x4_bf16(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    constexpr uint32_t TWO120 = 0x7b807b80u; /* bf16 2^120 in both halves */
    const uint32_t a = __byte_perm(w, 0, 0x1404), b = __byte_perm(w, 0, 0x3424); /* bytes to bits 8-15, 24-31 */
    lo = bf16x2_mul(((a >> 4) & 0x07f007f0u) | (a & 0x80008000u), TWO120);
    hi = bf16x2_mul(((b >> 4) & 0x07f007f0u) | (b & 0x80008000u), TWO120);
}

/* c[4] += a[4] (16x16 row) * b[2] (16x8 col), fp16 -> fp32. */
__device__ __forceinline__ void mma16816_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi)
{
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

__device__ __forceinline__ uint4 lds128(uint32_t addr)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d));
}

/* fp32 pair -> e4m3 pair (round to nearest even, saturating at +-448, NaN kept):
 * the low byte from lo, the high byte from hi */
__device__ __forceinline__ uint16_t f32x2_e4m3(float lo, float hi)
{
    uint16_t d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}
/* one e4m3 byte -> fp32 by the conversion instructions (exact; NaN kept) */
__device__ __forceinline__ float e4m3_f32(uint8_t b)
{
    float f;
    asm("{\n .reg .b16 lo, hi;\n .reg .b32 h2;\n cvt.rn.f16x2.e4m3x2 h2, %1;\n mov.b32 {lo, hi}, h2;\n"
        " cvt.f32.f16 %0, lo;\n}\n"
        : "=f"(f)
        : "h"((uint16_t)b));
    return f;
}

/* Byte offset of 16-byte chunk c of row r in the decode kernel's fp8 tiles (rows
 * of d bytes; d = 128: a row a 128-byte line, chunk c at c ^ f(r), f(r) = 2 *
 * ((r >> 1) & 3) ^ 4 * (r & 1); d = 64: two rows a line, the pair's 8 chunks at
 * (4 * (r & 1) + c) ^ 2 * ((r >> 1) & 3)). The key reads (rows r, r + 1, 4
 * chunks each) and the value reads (rows 2i, i = 0..3, 2 chunks or 4 halves)
 * of a quarter warp then hit distinct banks; f depends on r & 7 only. */
template <int D> __device__ __forceinline__ uint32_t f8_off(int r, int c)
{
    if (D == 128) return (uint32_t)(r * 128 + ((c ^ ((((r >> 1) & 3) << 1) ^ ((r & 1) << 2))) << 4));
    return (uint32_t)((r >> 1) * 128 + (((((r & 1) << 2) | c) ^ (((r >> 1) & 3) << 1)) << 4));
}

/* Copies up to R rows of d e4m3 bytes into an f8_off tile with 16-byte
 * cp.async, rows >= n zero-filled, by THREADS threads (thread t: chunk t %
 * (d/16) of rows t / (d/16) + j*RPP; RPP a multiple of 8 keeps f8_off's
 * pattern, so every copy is base + constant). */
template <int D, int R, int THREADS>
__device__ __forceinline__ void copy_tile_f8_dec(uint32_t dst, const uint8_t *src, int n, int tid)
{
    constexpr int CH = D / 16, RPP = THREADS / CH, PASSES = R / RPP;
    static_assert(RPP % 8 == 0 && R % RPP == 0, "fp8 tile copy shape");
    const int lr = tid / CH, c = tid % CH;
    dst += f8_off<D>(lr, c);
    const uint8_t *g = src + lr * D + c * 16;
#pragma unroll
    for (int j = 0; j < PASSES; j++) {
        const bool ok = lr + j * RPP < n;
        cp_async16(dst + j * RPP * D, ok ? g + j * RPP * D : src, ok ? 16 : 0);
    }
}

/* The prefill kernels' fp8 tiles: the bf16 tile's layout (swz<D>, or the
 * wgmma layout wg_off<R> when WG), each 16-byte fp8 chunk q of a row (elements
 * 16q .. 16q+15) copied into the slot of its first bf16 chunk 2q (the slots of
 * chunks 2q, 2q+1 are a pair in both layouts); the thread that copied it later
 * reads it and writes both bf16 chunks (convert_tile_f8), so no other thread
 * touches those bytes in between: its own cp.async wait suffices, and the
 * tile's barrier publishes the bf16 tile. Thread t copies chunk f8_q(t) of
 * rows f8_row(t) + j*RPP: at d = 128 four threads a row and two rows in each
 * group of 8 threads, so that the 16-byte shared reads and writes of the
 * conversion hit 8 distinct bank groups (the even slots of an even row, the
 * odd ones of an odd row); at d = 64 the plain order does that. */
template <int D, int R, bool WG> __device__ __forceinline__ uint32_t bf16_slot(int r, int c)
{
    return WG ? wg_off<R>(r, c) : swz<D>(r, c);
}
template <int D> __device__ __forceinline__ int f8_q(int t)
{
    return D == 128 ? (t & 3) | (((t >> 3) & 1) << 2) : t % (D / 16);
}
template <int D> __device__ __forceinline__ int f8_row(int t)
{
    return D == 128 ? ((t >> 4) << 1) | ((t >> 2) & 1) : t / (D / 16);
}
template <int D, int R, int THREADS, bool WG>
__device__ __forceinline__ void copy_tile_f8(uint32_t dst, const uint8_t *src, int n, int tid)
{
    constexpr int CH = D / 16, RPP = THREADS / CH, PASSES = R / RPP;
    constexpr int STEP = WG ? RPP * 128 : RPP * D * 2; /* bytes between a thread's rows */
    static_assert(RPP % 8 == 0 && R % RPP == 0 && (D == 64 || D == 128), "fp8 tile copy shape");
    const int lr = f8_row<D>(tid), q = f8_q<D>(tid);
    dst += bf16_slot<D, R, WG>(lr, 2 * q);
    const uint8_t *g = src + lr * D + q * 16;
#pragma unroll
    for (int j = 0; j < PASSES; j++) {
        const bool ok = lr + j * RPP < n;
        cp_async16(dst + j * STEP, ok ? g + j * RPP * D : src, ok ? 16 : 0);
    }
}
/* After this thread's cp.async of copy_tile_f8 completed: its chunks of the
 * tile at base become bf16 (exact values; zero-filled rows stay zero). */
template <int D, int R, int THREADS, bool WG>
__device__ __forceinline__ void convert_tile_f8(uint32_t base, int tid)
{
    constexpr int CH = D / 16, RPP = THREADS / CH, PASSES = R / RPP;
    constexpr int STEP = WG ? RPP * 128 : RPP * D * 2;
    const int lr = f8_row<D>(tid), q = f8_q<D>(tid);
    const uint32_t o0 = base + bf16_slot<D, R, WG>(lr, 2 * q), o1 = base + bf16_slot<D, R, WG>(lr, 2 * q + 1);
#pragma unroll
    for (int j = 0; j < PASSES; j++) {
        const uint4 v = lds128(o0 + j * STEP);
        uint32_t w[8];
        e4m3x4_bf16(v.x, w[0], w[1]);
        e4m3x4_bf16(v.y, w[2], w[3]);
        e4m3x4_bf16(v.z, w[4], w[5]);
        e4m3x4_bf16(v.w, w[6], w[7]);
        sts128(o0 + j * STEP, w[0], w[1], w[2], w[3]);
        sts128(o1 + j * STEP, w[4], w[5], w[6], w[7]);
    }
}

/* The wgmma prefill's fp8 tiles through registers: thread t loads the same
 * 16-byte chunks as copy_tile_f8 (rows >= n as zeros) into c, and later
 * writes them as bf16 into the tile's bf16 slots (store_tile_f8). Shared
 * memory then sees a bf16 tile's traffic (the bf16 writes, the tensor cores'
 * reads); landing the fp8 bytes there and reading them back costs half as
 * much again, on a loop bound by shared-memory bandwidth. */
template <int D, int R, int THREADS> __host__ __device__ constexpr int f8_tile_passes() { return R / (THREADS / (D / 16)); }
template <int D, int R, int THREADS>
__device__ __forceinline__ void load_tile_f8_regs(uint4 (&c)[f8_tile_passes<D, R, THREADS>()], const uint8_t *src, int n,
                                                  int tid)
{
    constexpr int RPP = THREADS / (D / 16), PASSES = f8_tile_passes<D, R, THREADS>();
    const int lr = f8_row<D>(tid), q = f8_q<D>(tid);
    const uint8_t *g = src + lr * D + q * 16;
#pragma unroll
    for (int j = 0; j < PASSES; j++)
        c[j] = lr + j * RPP < n ? __ldg(reinterpret_cast<const uint4 *>(g + j * RPP * D)) : make_uint4(0, 0, 0, 0);
}
template <int D, int R, int THREADS, bool WG>
__device__ __forceinline__ void store_tile_f8(uint32_t base, const uint4 (&c)[f8_tile_passes<D, R, THREADS>()], int tid)
{
    constexpr int RPP = THREADS / (D / 16), PASSES = f8_tile_passes<D, R, THREADS>();
    constexpr int STEP = WG ? RPP * 128 : RPP * D * 2;
    const int lr = f8_row<D>(tid), q = f8_q<D>(tid);
    const uint32_t o0 = base + bf16_slot<D, R, WG>(lr, 2 * q), o1 = base + bf16_slot<D, R, WG>(lr, 2 * q + 1);
#pragma unroll
    for (int j = 0; j < PASSES; j++) {
        uint32_t w[8];
        e4m3x4_bf16(c[j].x, w[0], w[1]);
        e4m3x4_bf16(c[j].y, w[2], w[3]);
        e4m3x4_bf16(c[j].z, w[4], w[5]);
        e4m3x4_bf16(c[j].w, w[6], w[7]);
        sts128(o0 + j * STEP, w[0], w[1], w[2], w[3]);
        sts128(o1 + j * STEP, w[4], w[5], w[6], w[7]);
    }
}

} /* namespace lz */
#endif /* LZ_FP8_TILE_CUH */
