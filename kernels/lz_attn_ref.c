/* lz_attn_ref.c - host-side code shared by the CUDA kernels and the CPU
 * references: status text, argument checks, split-KV sizing and the decode
 * block-word builder. No CUDA headers; compiled by gcc into liblazy.a.
 *
 * Legend: S = segments, KV = kv heads, H = query heads, G = H/KV, M = rows,
 * d = head_dim, B = sequences, NB = max block words per (b, kv head).
 */
#include <math.h>
#include <stdio.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_prefill.h"
#include "kernels/lz_rerotate.h"
#include "base/rope.h"

const char *lz_attn_strerror(int status)
{
    static __thread char buf[48];
    switch (status) {
    case LZ_ATTN_OK: return "ok";
    case LZ_ATTN_EHEADDIM: return "head_dim must be 64 or 128";
    case LZ_ATTN_EGQA: return "n_heads must be a multiple of n_kv_heads (ratio <= 16 for decode)";
    case LZ_ATTN_ELAYOUT: return "rope_layout must be LZ_ROPE_ADJACENT or LZ_ROPE_HALF";
    case LZ_ATTN_EARG: return "NULL pointer or negative size/count";
    case LZ_ATTN_EWORK: return "split-KV workspace missing or too small";
    case LZ_ATTN_ERANGE: return "value does not fit its packed field (row >= 2^36 or offset >= 2^21)";
    }
    snprintf(buf, sizeof buf, "CUDA error %d", status);
    return buf;
}

static int check_common(int d, int h, int kv, int layout)
{
    if (d != 64 && d != 128) return LZ_ATTN_EHEADDIM;
    if (kv <= 0 || h <= 0 || h % kv != 0) return LZ_ATTN_EGQA;
    if (layout != LZ_ROPE_ADJACENT && layout != LZ_ROPE_HALF) return LZ_ATTN_ELAYOUT;
    return LZ_ATTN_OK;
}

int lz_prefill_check(const lz_prefill_params *p)
{
    if (!p) return LZ_ATTN_EARG;
    int rc = check_common(p->head_dim, p->n_heads, p->n_kv_heads, p->rope_layout);
    if (rc) return rc;
    if (!p->o || !p->q || !p->k_self || !p->v_self || !p->inv_freq || p->n_rows < 1 ||
        p->n_seg < 0 || p->n_seg > LZ_PREFILL_MAX_SEG || p->n_split < 0 || p->self_offset < 0 ||
        (p->n_seg > 0 && (!p->segs || !p->seg_len)) ||
        (p->rows_per_warp != 0 && p->rows_per_warp != 16 && p->rows_per_warp != 32) ||
        (p->rows_per_cta != 0 && p->rows_per_cta != 64 && p->rows_per_cta != 128) ||
        (p->rows_per_warp == 32 && p->rows_per_cta == 64) || p->wgmma < 0 || p->wgmma > 2 ||
        (p->wgmma == 2 && (p->rows_per_warp == 32 || p->rows_per_cta == 128)) ||
        ((uintptr_t)p->rope_cs & 15)) /* the CUDA kernels copy it in 16-byte units */
        return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

int lz_decode_check(const lz_decode_params *p)
{
    if (!p) return LZ_ATTN_EARG;
    int rc = check_common(p->head_dim, p->n_heads, p->n_kv_heads, p->rope_layout);
    if (rc) return rc;
    if (p->n_heads / p->n_kv_heads > 16) return LZ_ATTN_EGQA;
    if (!p->o || !p->q || !p->blocks || !p->n_blocks || !p->inv_freq || p->batch < 0 ||
        p->max_blocks < 0 || p->n_split < 0 || p->n_split > LZ_DECODE_MAX_SPLIT)
        return LZ_ATTN_EARG;
    /* bf16 pools, unless fp8 blocks are possible (then a bf16 block needs them; not checkable here) */
    if (!p->k_scales && (!p->k_pool || !p->v_pool)) return LZ_ATTN_EARG;
    if (p->k_scales && (!p->v_scales || !p->k_pool8 || !p->v_pool8)) return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

static int clampi(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

void lz_prefill_plan(const lz_prefill_params *p, int n_sm, int *rows_per_cta, int *rows_per_warp,
                     int *n_split, int *wgmma)
{
    int g = p->n_heads / p->n_kv_heads, bm = p->rows_per_cta, rpw = p->rows_per_warp;
    int64_t tiles128 = ((int64_t)g * p->n_rows + 127) / 128 * p->n_kv_heads;
    /* 16 rows a warp, 64 a CTA, wgmma: every shape (H200: question prefill
     * 128 x 4096 twin 41.5 us against 48.6 with mma.sync, ingest 2048 rows
     * 119.8 against 151.5 with 32 rows a warp). With mma.sync asked for: 32
     * rows a warp (K/V fragments feed two halves) when the rows alone fill
     * the GPU, else 16 rows a warp with split-KV. */
    if (!rpw) rpw = (p->wgmma == 1 && bm != 64 && tiles128 >= n_sm) ? 32 : 16;
    if (!bm) bm = rpw == 16 ? 64 : 128; /* 64 rows a CTA beat 128 on every question shape (H200 sweep) */
    if (rpw == 32) bm = 128;
    /* the wgmma tile loop exists for the 64-row shape only, and is its default */
    *wgmma = p->wgmma != 1 && rpw == 16 && bm == 64;
    *rows_per_cta = bm;
    *rows_per_warp = rpw;
    if (p->n_split > 0) {
        *n_split = p->n_split;
        return;
    }
    int per_sm = (rpw == 16 && bm == 128) ? 1 : 2; /* CTAs resident per SM (registers, shared memory) */
    int64_t row_tiles = ((int64_t)g * p->n_rows + bm - 1) / bm * p->n_kv_heads;
    int64_t key_tiles = p->seg_keys / LZ_PREFILL_BN + p->n_seg +
                        (p->n_rows + LZ_PREFILL_BN - 1) / LZ_PREFILL_BN;
    /* fill exactly one wave, >= 2 tiles a part */
    int64_t want = (int64_t)n_sm * per_sm / row_tiles;
    *n_split = clampi((int)(want < 64 ? want : 64), 1, (int)(key_tiles / 2 > 1 ? key_tiles / 2 : 1));
}

int lz_prefill_splits(const lz_prefill_params *p, int n_sm)
{
    int bm, rpw, ns, wg;
    lz_prefill_plan(p, n_sm, &bm, &rpw, &ns, &wg);
    return ns;
}

void lz_prefill_rope_table(float *out, const int64_t *seg_offsets, int n_seg, int64_t self_offset,
                           const float *inv_freq, int head_dim)
{
    for (int sl = 0; sl <= n_seg; sl++) {
        int64_t off = sl < n_seg ? seg_offsets[sl] : self_offset;
        for (int i = 0; i < head_dim / 2; i++) {
            float ang = (float)(-off) * inv_freq[i];
            out[((size_t)sl * (head_dim / 2) + i) * 2] = cosf(ang);
            out[((size_t)sl * (head_dim / 2) + i) * 2 + 1] = sinf(ang);
        }
    }
}

size_t lz_prefill_workspace(const lz_prefill_params *p, int n_split)
{
    if (n_split <= 1) return 0;
    size_t rows = (size_t)p->n_heads * p->n_rows;
    return rows * n_split * ((size_t)p->head_dim + 1) * sizeof(float);
}

int lz_decode_splits(const lz_decode_params *p, int n_sm)
{
    if (p->n_split > 0) return p->n_split;
    int64_t ctas = (int64_t)p->batch * p->n_kv_heads;
    if (ctas <= 0) return 1;
    /* one wave: two CTAs per SM (3 stages) when each part keeps >= 16 blocks,
     * else about one per SM (6 stages), >= 8 blocks a part. H200: 16x4096 2
     * parts 69.6 us against 70.6 with 1; 1x16384 16 parts 26.8, 33 parts worse */
    int64_t two = 2 * (int64_t)n_sm / ctas;
    if (two >= 2 && p->max_blocks / two >= 16) return (int)(two < 256 ? two : 256);
    int64_t want = (int64_t)n_sm / ctas;
    int most = (p->max_blocks + 7) / 8;
    return clampi((int)(want < 256 ? want : 256), 1, most > 1 ? most : 1);
}

size_t lz_decode_workspace(const lz_decode_params *p, int n_split)
{
    if (n_split <= 1) return 0;
    size_t rows = (size_t)p->batch * p->n_heads;
    return rows * n_split * ((size_t)p->head_dim + 1) * sizeof(float) +
           (size_t)p->batch * p->n_kv_heads * sizeof(unsigned);
}

int lz_decode_add_segment_kv(uint64_t *words, uint64_t *v_rows, int *n, int cap, uint64_t row, uint64_t v_row,
                             int64_t len, int64_t offset)
{
    if (!words || !n || len < 0 || offset < 0) return LZ_ATTN_EARG;
    if (offset > LZ_DECODE_MAX_OFFSET || row + (uint64_t)len > LZ_DECODE_MAX_ROW + 1)
        return LZ_ATTN_ERANGE;
    for (int64_t j = 0; j < len; j += LZ_DECODE_BLOCK) {
        if (*n >= cap) return LZ_ATTN_EARG;
        int nk = (int)(len - j < LZ_DECODE_BLOCK ? len - j : LZ_DECODE_BLOCK);
        if (v_rows) v_rows[*n] = v_row + (uint64_t)j;
        words[(*n)++] = lz_decode_word(row + (uint64_t)j, offset, nk) | (j == 0 ? LZ_DECODE_SEG_START : 0);
    }
    return LZ_ATTN_OK;
}

int lz_decode_add_segment(uint64_t *words, int *n, int cap, uint64_t row, int64_t len, int64_t offset)
{
    return lz_decode_add_segment_kv(words, NULL, n, cap, row, 0, len, offset);
}

int lz_decode_add_segment_fp8(uint64_t *words, uint64_t *v_rows, float *k_scales, float *v_scales, int *n, int cap,
                              uint64_t row, uint64_t v_row, int64_t len, int64_t offset, float k_scale,
                              float v_scale)
{
    if (!k_scales || !v_scales || !n || !(k_scale > 0.0f)) return LZ_ATTN_EARG;
    const int n0 = *n;
    int rc = lz_decode_add_segment_kv(words, v_rows, n, cap, row, v_row, len, offset);
    for (int i = n0; i < *n; i++) {
        k_scales[i] = k_scale;
        v_scales[i] = v_scale;
    }
    return rc;
}

int lz_rerotate_check(const lz_rerotate_params *p)
{
    if (!p || !p->inv_freq || p->n_rows < 0 || p->n_scales < 0) return LZ_ATTN_EARG;
    if (p->src8 ? !p->dst8 : (!p->dst || !p->src)) return LZ_ATTN_EARG;
    if (p->n_scales > 0 && (!p->scale8_in || !p->scale8_out)) return LZ_ATTN_EARG;
    if (p->head_dim <= 0 || p->head_dim > 256 || p->head_dim % 2) return LZ_ATTN_EHEADDIM;
    if (p->rope_layout != LZ_ROPE_ADJACENT && p->rope_layout != LZ_ROPE_HALF) return LZ_ATTN_ELAYOUT;
    return LZ_ATTN_OK;
}
