/* lz_prefill_cursor.cuh - the prefill kernels' tile list (kernels/lz_prefill.cu,
 * inside its anonymous namespace): a Tile (keys and values of up to BN keys
 * of one segment, or of the question's own keys) and the Cursor that walks
 * kv head h's tiles in order, placed on a split-KV part's first tile from
 * one parallel read of the segments' lengths. With F8 (the kernels built for
 * fp8 segments) a segment whose descriptor has k8 gives fp8 tiles: k and v
 * point at e4m3 bytes, with the kv head's scales.
 */
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels/lz_prefill.h"

namespace lz_pf {

constexpr int BN = LZ_PREFILL_BN; /* keys per tile */

struct Tile {
    const __nv_bfloat16 *k, *v; /* first row of the tile (fp8 tiles: of e4m3 bytes, cast) */
    int n;                      /* valid keys (1..BN) */
    int slot;                   /* segment index, n_seg for own keys (causal) */
    int j0;                     /* own keys: index of the first key */
    float ks, vs;               /* fp8 tiles: the kv head's key and value scales; bf16: 1, 1 */
    bool f8;                    /* an fp8 tile (F8 kernels only) */
};

/* Walks kv head h's tile list: segment tiles in order (empty segments have
 * none), then own-key tiles. Placed on a part's first tile from one parallel
 * read of the lengths (read_tiles, locate); then reads a segment's length
 * only when entering it. */
struct Cursor {
    int s, k, nt;
    __device__ __forceinline__ int seg_tiles(const lz_prefill_params &p, int h, int s_) const
    {
        return (p.seg_len[(size_t)s_ * p.n_kv_heads + h] + BN - 1) / BN;
    }
    /* kv head h's segment lengths, lane l reading segments l, l + 32, ...
     * (CH chunks of 32), all loads issued at once; every lane of every warp
     * does the same. A serial count of the tiles and a walk to the part's
     * first one waited for a read, or a group of 4, at a time: about 900
     * cycles of each CTA's prologue. */
    static constexpr int CH = (LZ_PREFILL_MAX_SEG + 31) / 32;
    __device__ __forceinline__ static void read_tiles(const lz_prefill_params &p, int h, int lane, int (&c_nt)[CH])
    {
#pragma unroll
        for (int c = 0; c < CH; c++) {
            const int s_ = c * 32 + lane;
            c_nt[c] = s_ < p.n_seg ? p.seg_len[(size_t)s_ * p.n_kv_heads + h] : 0;
        }
    }
    /* from read_tiles' lengths (segments' tiles, then self_tiles own ones):
     * this part's range [*t0, *t1), the cursor at *t0 and in *s_last the
     * slot of the part's last tile */
    __device__ __forceinline__ void locate(const lz_prefill_params &p, int self_tiles, int lane, int (&c_nt)[CH], int sp,
                                          int n_split, int *t0, int *t1, int *s_last)
    {
        int seg_total = 0;
#pragma unroll
        for (int c = 0; c < CH; c++) {
            c_nt[c] = (c_nt[c] + BN - 1) / BN;
            if (c * 32 < p.n_seg) seg_total += __reduce_add_sync(0xffffffffu, c_nt[c]);
        }
        const int n_tiles = seg_total + self_tiles;
        if ((uint64_t)n_tiles * (uint64_t)n_split <= 0xffffffffu) { /* 32-bit divisions (64-bit ones are calls) */
            *t0 = (int)((unsigned)n_tiles * (unsigned)sp / (unsigned)n_split);
            *t1 = (int)((unsigned)n_tiles * (unsigned)(sp + 1) / (unsigned)n_split);
        } else {
            *t0 = (int)((int64_t)n_tiles * sp / n_split);
            *t1 = (int)((int64_t)n_tiles * (sp + 1) / n_split);
        }
        const int ta = *t0, tb = *t1 - 1;
        s = p.n_seg;
        nt = self_tiles;
        k = ta - seg_total;
        *s_last = p.n_seg;
        if (ta < seg_total) {
            int base = 0;
            bool found = false;
#pragma unroll
            for (int c = 0; c < CH; c++) {
                if (c * 32 >= p.n_seg) break;
                int incl = c_nt[c];
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const int v = __shfl_up_sync(0xffffffffu, incl, o);
                    if (lane >= o) incl += v;
                }
                const uint32_t hit = __ballot_sync(0xffffffffu, base + incl > ta), last = __ballot_sync(0xffffffffu, base + incl > tb);
                if (hit && !found) {
                    const int L = __ffs(hit) - 1;
                    s = c * 32 + L;
                    nt = __shfl_sync(0xffffffffu, c_nt[c], L);
                    k = ta - base - (__shfl_sync(0xffffffffu, incl, L) - nt);
                    found = true;
                }
                if (last) {
                    *s_last = c * 32 + __ffs(last) - 1;
                    break;
                }
                base += __shfl_sync(0xffffffffu, incl, 31);
            }
        }
    }
    __device__ __forceinline__ void next(const lz_prefill_params &p, int h, int self_tiles)
    {
        if (++k < nt) return;
        k = 0;
        for (s++; s < p.n_seg; s++)
            if ((nt = seg_tiles(p, h, s)) > 0) return;
        nt = self_tiles;
    }
    /* The first 32 segments' descriptors and kv head h's lengths, lane l
     * holding segment l's, read with the lengths: the part's first tiles
     * (tile_pre) need no second global latency. */
    struct Descs {
        const __nv_bfloat16 *k, *v; /* fp8 segments: their e4m3 bytes */
        int64_t row0; /* kv head h's first row (seg_row, or h * cap) */
        int len;
        float ks, vs; /* Tile's */
        int f8;
    };
    template <bool F8>
    __device__ __forceinline__ static void read_descs(const lz_prefill_params &p, int h, int lane, Descs &d)
    {
        d.k = d.v = nullptr;
        d.row0 = 0;
        d.len = 0;
        d.ks = d.vs = 1.f;
        d.f8 = 0;
        if (lane < p.n_seg) {
            const lz_attn_segment sg = p.segs[lane];
            d.k = reinterpret_cast<const __nv_bfloat16 *>(sg.k);
            d.v = reinterpret_cast<const __nv_bfloat16 *>(sg.v);
            d.row0 = p.seg_row ? (int64_t)p.seg_row[(size_t)lane * p.n_kv_heads + h] : (int64_t)h * sg.cap;
            d.len = p.seg_len[(size_t)lane * p.n_kv_heads + h];
            if (F8 && sg.k8) {
                d.k = reinterpret_cast<const __nv_bfloat16 *>(sg.k8);
                d.v = reinterpret_cast<const __nv_bfloat16 *>(sg.v8);
                d.ks = sg.k_scale[h];
                d.vs = sg.v_scale[h];
                d.f8 = 1;
            }
        }
    }
    /* segment s's tile k of a kv head, from the segment's K / V bases, the head's first row
     * row0 and its kept length len (tile and tile_pre) */
    __device__ __forceinline__ void seg_tile(Tile &x, const __nv_bfloat16 *kb, const __nv_bfloat16 *vb, int64_t row0,
                                             int len, int D, bool f8 = false) const
    {
        size_t r = ((size_t)row0 + (size_t)k * BN) * D;
        if (f8) { /* e4m3 rows: r bytes */
            x.k = reinterpret_cast<const __nv_bfloat16 *>(reinterpret_cast<const uint8_t *>(kb) + r);
            x.v = reinterpret_cast<const __nv_bfloat16 *>(reinterpret_cast<const uint8_t *>(vb) + r);
        } else {
            x.k = kb + r;
            x.v = vb + r;
        }
        x.n = min(BN, len - k * BN);
        x.j0 = 0;
    }
    /* tile() from read_descs' registers (s is the same in every lane) */
    template <bool F8>
    __device__ __forceinline__ Tile tile_pre(const lz_prefill_params &p, int h, int D, const Descs &d) const
    {
        if (s >= p.n_seg || s >= 32) return tile<F8>(p, h, D);
        Tile x;
        x.slot = s;
        const __nv_bfloat16 *kb = reinterpret_cast<const __nv_bfloat16 *>(__shfl_sync(0xffffffffu, (unsigned long long)d.k, s));
        const __nv_bfloat16 *vb = reinterpret_cast<const __nv_bfloat16 *>(__shfl_sync(0xffffffffu, (unsigned long long)d.v, s));
        const int64_t row0 = __shfl_sync(0xffffffffu, (long long)d.row0, s);
        const int len = __shfl_sync(0xffffffffu, d.len, s);
        x.ks = x.vs = 1.f;
        x.f8 = false;
        if (F8) {
            x.ks = __shfl_sync(0xffffffffu, d.ks, s);
            x.vs = __shfl_sync(0xffffffffu, d.vs, s);
            x.f8 = __shfl_sync(0xffffffffu, d.f8, s) != 0;
        }
        seg_tile(x, kb, vb, row0, len, D, x.f8);
        return x;
    }
    template <bool F8> __device__ __forceinline__ Tile tile(const lz_prefill_params &p, int h, int D) const
    {
        Tile x;
        x.slot = s;
        x.ks = x.vs = 1.f;
        x.f8 = false;
        if (s < p.n_seg) {
            const lz_attn_segment sg = p.segs[s];
            const int len = p.seg_len[(size_t)s * p.n_kv_heads + h];
            const int64_t row0 = p.seg_row ? (int64_t)p.seg_row[(size_t)s * p.n_kv_heads + h] : (int64_t)h * sg.cap;
            if (F8 && sg.k8) {
                x.ks = sg.k_scale[h];
                x.vs = sg.v_scale[h];
                x.f8 = true;
                seg_tile(x, reinterpret_cast<const __nv_bfloat16 *>(sg.k8), reinterpret_cast<const __nv_bfloat16 *>(sg.v8),
                         row0, len, D, true);
            } else {
                seg_tile(x, reinterpret_cast<const __nv_bfloat16 *>(sg.k), reinterpret_cast<const __nv_bfloat16 *>(sg.v),
                         row0, len, D);
            }
        } else {
            size_t r = ((size_t)h * p.n_rows + (size_t)k * BN) * D;
            x.k = reinterpret_cast<const __nv_bfloat16 *>(p.k_self) + r;
            x.v = reinterpret_cast<const __nv_bfloat16 *>(p.v_self) + r;
            x.n = min(BN, p.n_rows - k * BN);
            x.j0 = k * BN;
        }
        return x;
    }
};

} /* namespace lz_pf */
