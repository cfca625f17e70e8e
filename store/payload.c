/* payload.c - KV payload codec (format: schema/PAYLOAD.md): fp32 -> bf16,
 * byte shuffle, zstd, CRC32C, and the reverse. Only file besides kvdb.c and
 * meta.c that may include a storage library header (zstd.h).
 *
 * Legend: L = layers, KV = kv heads, T = caller token stride, d = head_dim.
 */
#include "store/payload.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <zstd.h>

#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

#include "base/fp8.h"
#include "base/half.h"
#include "base/error.h"
#include "store/payload_impl.h"

/* ---- little-endian field access (blobs may sit unaligned in an LMDB map) ---- */

static void put16(uint8_t *p, uint16_t x) { p[0] = (uint8_t)x; p[1] = (uint8_t)(x >> 8); }
static void put32(uint8_t *p, uint32_t x) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i)); }
static void put64(uint8_t *p, uint64_t x) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
#define get32 lz_payload_get32
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32); }

/* ---- CRC32C ---- */

#ifndef __SSE4_2__
/* Slicing-by-8 tables for builds without the SSE4.2 crc32 instruction. */
static uint32_t crc_table[8][256];
static int crc_table_ready;

static void crc_init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    __atomic_store_n(&crc_table_ready, 1, __ATOMIC_RELEASE);
}
#endif

uint32_t lz_crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    crc = ~crc;
#ifdef __SSE4_2__
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = (uint32_t)_mm_crc32_u64(crc, w);
        p += 8;
        n -= 8;
    }
    while (n--) crc = _mm_crc32_u8(crc, *p++);
#else
    if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE)) crc_init_table();
    while (n >= 8) {
        uint32_t lo = crc ^ get32(p), hi = get32(p + 4);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
#endif
    return ~crc;
}

/* CRC of the whole blob with the checksum field read as zero. */
static uint32_t blob_crc(const uint8_t *b, size_t len)
{
    static const uint8_t zero[4];
    uint32_t c = lz_crc32c(0, b, OFF_CRC);
    c = lz_crc32c(c, zero, 4);
    return lz_crc32c(c, b + OFF_CRC + 4, len - OFF_CRC - 4);
}

/* ---- shuffle ---- */

/* Elements a..b-1 of a 16-bit shuffle of n elements (ranges run in parallel). */
static void shuffle16_range(uint8_t *dst, const uint16_t *src, size_t n, size_t a, size_t b)
{
    uint8_t *lo = dst, *hi = dst + n;
    for (size_t i = a; i < b; i++) {
        lo[i] = (uint8_t)src[i];
        hi[i] = (uint8_t)(src[i] >> 8);
    }
}

void lz_payload_shuffle16(uint8_t *dst, const uint16_t *src, size_t n) { shuffle16_range(dst, src, n, 0, n); }

void lz_payload_unshuffle16(uint16_t *dst, const uint8_t *src, size_t n)
{
    const uint8_t *lo = src, *hi = src + n;
    for (size_t i = 0; i < n; i++) dst[i] = (uint16_t)(lo[i] | (hi[i] << 8));
}

/* Byte planes for elements of es bytes: dst = [byte 0 of all][byte 1 of all]... */
static void shuffle_planes(uint8_t *dst, const uint8_t *src, size_t n, size_t es)
{
    if (es == 2) { lz_payload_shuffle16(dst, (const uint16_t *)(const void *)src, n); return; }
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < es; b++) dst[b * n + i] = src[i * es + b];
}

static void unshuffle_planes(uint8_t *dst, const uint8_t *src, size_t n, size_t es)
{
    if (es == 2) { lz_payload_unshuffle16((uint16_t *)(void *)dst, src, n); return; }
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < es; b++) dst[i * es + b] = src[b * n + i];
}

static size_t dtype_size(int dtype)
{
    return dtype == LZ_PAYLOAD_DTYPE_F32 ? 4 : dtype == LZ_PAYLOAD_DTYPE_BF16 ? 2 : dtype == LZ_PAYLOAD_DTYPE_FP8 ? 1 : 0;
}

/* Bytes of the body's scale table (fp8: a float for K and for V of each (layer, kv head)). */
static size_t scales_size(int dtype, size_t nh) { return dtype == LZ_PAYLOAD_DTYPE_FP8 ? 8 * nh : 0; }

/* The version a payload of dtype is written with (fp8 is version 2's). */
static int version_of(int dtype) { return dtype == LZ_PAYLOAD_DTYPE_FP8 ? 2 : 1; }

/* ---- codec state ---- */

lz_payload_codec *lz_payload_codec_new(void)
{
    lz_payload_codec *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cctx = ZSTD_createCCtx();
    c->dctx = ZSTD_createDCtx();
    if (!c->cctx || !c->dctx) {
        lz_payload_codec_free(c);
        return NULL;
    }
    return c;
}

static void free_workers(lz_payload_codec *c)
{
    for (int i = 0; c->wctx && i < c->workers; i++) ZSTD_freeCCtx(c->wctx[i]);
    free(c->wctx);
    c->wctx = NULL;
    c->workers = 0;
}

int lz_payload_codec_set_threads(lz_payload_codec *c, int n)
{
    free_workers(c);
    if (n <= 0) return 0;
    if (n > 256) n = 256;
    if (!(c->wctx = calloc((size_t)n, sizeof *c->wctx))) return -1;
    c->workers = n;
    for (int i = 0; i < n; i++)
        if (!(c->wctx[i] = ZSTD_createCCtx())) {
            free_workers(c);
            return -1;
        }
    return 0;
}

/* zstd of src[n] into dst (cap bytes) with cctx: level, content checksum.
 * Levels up to LZ_PAYLOAD_TUNED_LEVEL search only for matches of 7 bytes or
 * more in a 256-entry hash table: the shuffled planes of bf16 K/V have few
 * matches, and their gain is in the literals' entropy coding, so this is
 * 4-6x faster than zstd's level 3 and stores fewer bytes (bench/RESULTS.md,
 * "Payload packing"). */
static size_t zstd_frame(ZSTD_CCtx *cctx, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, int level)
{
    size_t r = ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r) && level <= LZ_PAYLOAD_TUNED_LEVEL) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, 8);
    if (!ZSTD_isError(r) && level <= LZ_PAYLOAD_TUNED_LEVEL) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, 7);
    if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    if (!ZSTD_isError(r)) r = ZSTD_compress2(cctx, dst, cap, src, n);
    return r;
}


/* src[n] as frames of LZ_PAYLOAD_FRAME_BYTES compressed on c's threads,
 * joined at dst (cap bytes) into *out bytes. The bytes do not depend on the
 * thread count. Returns 0, or -1 with *why (a zstd error name). */
static int zstd_frames(lz_payload_codec *c, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, int level,
                       size_t *out, const char **why)
{
    const size_t F = LZ_PAYLOAD_FRAME_BYTES, nf = n ? (n + F - 1) / F : 1, fb = ZSTD_compressBound(F);
    size_t *len = malloc(nf * sizeof *len);
    if (!len || lz_payload_reserve(&c->zbuf, &c->zcap, nf * fb)) {
        free(len);
        *why = "out of memory";
        return -1;
    }
#pragma omp parallel for num_threads(c->workers) schedule(dynamic, 1)
    for (size_t f = 0; f < nf; f++) {
        const size_t at = f * F, m = n - at < F ? n - at : F;
        len[f] = zstd_frame(c->wctx[omp_get_thread_num()], c->zbuf + f * fb, fb, src + at, m, level);
    }
    *out = 0;
    for (size_t f = 0; f < nf; f++) {
        if (ZSTD_isError(len[f])) { *why = ZSTD_getErrorName(len[f]); free(len); return -1; }
        if (*out + len[f] > cap) { *why = "joined frames exceed the bound"; free(len); return -1; }
        memcpy(dst + *out, c->zbuf + f * fb, len[f]);
        *out += len[f];
    }
    free(len);
    return 0;
}

void lz_payload_codec_free(lz_payload_codec *c)
{
    if (!c) return;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    for (int i = 0; i < c->n_wdctx; i++) ZSTD_freeDCtx(c->wdctx[i]);
    free(c->wdctx);
    free_workers(c);
    free(c->zbuf);
    free(c->scratch);
    free(c->scratch2);
    free(c->planes);
    free(c);
}

int lz_payload_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (*cap >= need) return 0;
    size_t n = need < 4096 ? 4096 : need;
    uint8_t *p = realloc(*buf, n);
    if (!p) return -1;
    *buf = p;
    *cap = n;
    return 0;
}

const char *lz_payload_dtype_name(int dtype)
{
    return dtype == LZ_PAYLOAD_DTYPE_BF16 ? "bf16" : dtype == LZ_PAYLOAD_DTYPE_F32 ? "fp32" : dtype == LZ_PAYLOAD_DTYPE_FP8 ? "fp8" : "?";
}

const char *lz_payload_codec_name(int codec)
{
    switch (codec) {
    case LZ_PAYLOAD_CODEC_RAW: return "raw";
    case LZ_PAYLOAD_CODEC_ZSTD: return "zstd";
    case LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD: return "shuffle-zstd";
    default: return "?";
    }
}

/* ---- encode ---- */

int lz_payload_encode(lz_payload_codec *c, const lz_payload_src *s, int codec, int level,
                      void **out, size_t *out_len, char *err, size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    const int by_planes = s && s->k_planes;
    if (!c || !s || (!by_planes && (!s->k || !s->v)) || !s->model || s->n_layers <= 0 || s->n_kv_heads <= 0 ||
        s->head_dim <= 0 || s->n_tokens < 0 || s->t0 < 0 || s->pos_base < 0 ||
        (!by_planes && (int64_t)s->t0 + s->n_tokens > s->stride))
        return lz_fail(err, errlen, LZ_EINVAL,
                    "payload encode: bad shape (L=%d KV=%d d=%d n=%d t0=%d stride=%d)",
                    s ? s->n_layers : 0, s ? s->n_kv_heads : 0, s ? s->head_dim : 0,
                    s ? s->n_tokens : 0, s ? s->t0 : 0, s ? s->stride : 0);
    if (codec < LZ_PAYLOAD_CODEC_RAW || codec > LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD)
        return lz_fail(err, errlen, LZ_EINVAL, "payload encode: unknown codec %d", codec);
    const int L = s->n_layers, KV = s->n_kv_heads, d = s->head_dim, n = s->n_tokens;
    const size_t nh = (size_t)L * KV;
    uint64_t kept_sum = 0;
    for (size_t i = 0; i < nh; i++) {
        int kept = s->n_kept ? s->n_kept[i] : n;
        if (kept < 0 || kept > n)
            return lz_fail(err, errlen, LZ_EINVAL,
                        "payload encode: kept count %d of (layer %zu, kv head %zu) not in [0, %d]",
                        kept, i / KV, i % KV, n);
        kept_sum += (uint64_t)kept;
    }
    const int dtype = s->dtype ? s->dtype : LZ_PAYLOAD_DTYPE_BF16;
    const size_t es = dtype_size(dtype);
    if (!es) return lz_fail(err, errlen, LZ_EINVAL, "payload encode: unknown dtype %d", dtype);
    const size_t n_elem = (size_t)(2 * kept_sum * (uint64_t)d); /* K and V */
    const size_t sc_bytes = scales_size(dtype, nh), raw_size = sc_bytes + n_elem * es;
    if (es == 1 && codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD) codec = LZ_PAYLOAD_CODEC_ZSTD; /* one byte: one plane */
    if (lz_payload_reserve(&c->scratch, &c->cap, raw_size ? raw_size : 1))
        return lz_fail(err, errlen, LZ_ENOMEM, "payload encode: out of memory (%zu bytes)", raw_size);

    /* body: K of every (l, h) in order, then V; bf16, fp32 as is (little-endian hosts), or fp8
     * after the scale table (each (part, head) divided by its absolute maximum over 448) */
    uint16_t *body = (uint16_t *)(void *)c->scratch;
    float *body32 = (float *)(void *)c->scratch;
    uint8_t *body8 = c->scratch + sc_bytes;
    const int planes = s->k_planes != NULL;
    if (planes && (!s->v_planes || s->n_kept || (es == 1 && (!s->k_scales || !s->v_scales))))
        return lz_fail(err, errlen, LZ_EINVAL, "payload encode: planes need both parts%s and no kept table",
                       es == 1 ? ", their scales" : "");
    long nonfinite = -1; /* fp8: the first (part, head) holding a NaN or Inf */
    /* (kv, head) slices at their offsets, on c's threads when it has them */
    const int T = c->workers > 1 ? c->workers : 1;
#pragma omp parallel for num_threads(T) schedule(dynamic, 4) if (T > 1 && raw_size >= LZ_PAYLOAD_FRAME_BYTES)
    for (size_t j = 0; j < 2 * nh; j++) {
        const size_t i = j % nh;
        size_t o = j < nh ? 0 : n_elem / 2; /* K of every head, then V */
        for (size_t h = 0; h < i; h++) o += (size_t)(s->n_kept ? s->n_kept[h] : n) * d;
        const int kept = s->n_kept ? s->n_kept[i] : n;
        if (planes) { /* already of dtype: copied as they are */
            const size_t at = i * (size_t)n * d * es;
            memcpy((uint8_t *)c->scratch + sc_bytes + o * es, (const uint8_t *)(j < nh ? s->k_planes : s->v_planes) + at,
                   (size_t)n * d * es);
            if (es == 1) put32(c->scratch + 4 * j, lz_f32_to_bits((j < nh ? s->k_scales : s->v_scales)[i]));
            continue;
        }
        const float *row = (j < nh ? s->k : s->v) + (i * (size_t)s->stride + (size_t)s->t0) * (size_t)d;
        if (es == 4) {
            memcpy(body32 + o, row, (size_t)kept * d * 4);
        } else if (es == 2) {
            lz_f32_to_bf16_n(body + o, row, (size_t)kept * d);
        } else {
            float amax = 0;
            int finite = 1;
            for (size_t e = 0; e < (size_t)kept * d; e++) {
                finite &= isfinite(row[e]) != 0;
                amax = fmaxf(amax, fabsf(row[e]));
            }
            if (!finite) {
#ifdef _OPENMP
#pragma omp critical(lz_payload_nonfinite)
#endif
                if (nonfinite < 0 || (long)j < nonfinite) nonfinite = (long)j;
            }
            const float scale = amax > 0 && isfinite(amax) ? amax / LZ_E4M3_MAX : 1.0f, inv = 1.0f / scale;
            put32(c->scratch + 4 * j, lz_f32_to_bits(scale)); /* K's heads, then V's */
            lz_f32_to_e4m3_n(body8 + o, row, (size_t)kept * d, inv);
        }
    }

    if (nonfinite >= 0)
        return lz_fail(err, errlen, LZ_EINVAL, "payload encode: a NaN or Inf in %s of layer %ld, kv head %ld (fp8 would saturate it)",
                       nonfinite < (long)nh ? "K" : "V", (nonfinite % (long)nh) / KV, (nonfinite % (long)nh) % KV);
    const uint8_t *stored = c->scratch;
    size_t body_size = raw_size;
    size_t hdr = LZ_PAYLOAD_HEADER_SIZE + 4 * nh;
    uint8_t *blob = NULL;
    if (codec == LZ_PAYLOAD_CODEC_RAW) {
        blob = malloc(hdr + raw_size);
        if (!blob) return lz_fail(err, errlen, LZ_ENOMEM, "payload encode: out of memory");
        memcpy(blob + hdr, stored, raw_size);
    } else {
        if (codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD) {
            if (lz_payload_reserve(&c->scratch2, &c->cap2, raw_size ? raw_size : 1))
                return lz_fail(err, errlen, LZ_ENOMEM, "payload encode: out of memory");
            if (T > 1 && es == 2 && raw_size >= LZ_PAYLOAD_FRAME_BYTES) { /* element ranges in parallel */
                const size_t per = (n_elem + (size_t)T - 1) / (size_t)T;
#pragma omp parallel for num_threads(T)
                for (int t = 0; t < T; t++) {
                    const size_t a = (size_t)t * per, b = a + per < n_elem ? a + per : n_elem;
                    shuffle16_range(c->scratch2, (const uint16_t *)(const void *)c->scratch, n_elem, a, b);
                }
            } else {
                shuffle_planes(c->scratch2, c->scratch, n_elem, es);
            }
            stored = c->scratch2;
        }
        /* frames: each at most its compress bound; joined, at most the bound of the whole plus a frame
         * header a frame */
        const size_t nf = raw_size / LZ_PAYLOAD_FRAME_BYTES + 1;
        size_t bound = ZSTD_compressBound(raw_size) + (c->workers ? nf * 32 : 0);
        blob = malloc(hdr + bound);
        if (!blob) return lz_fail(err, errlen, LZ_ENOMEM, "payload encode: out of memory");
        size_t r = 0;
        const char *why = NULL;
        if (c->workers) {
            if (zstd_frames(c, blob + hdr, bound, stored, raw_size, level, &r, &why)) r = 0;
        } else {
            r = zstd_frame(c->cctx, blob + hdr, bound, stored, raw_size, level);
            if (ZSTD_isError(r)) why = ZSTD_getErrorName(r);
        }
        if (why) {
            free(blob);
            return lz_fail(err, errlen, LZ_ECODEC, "payload encode: zstd: %s", why);
        }
        body_size = r;
    }

    memset(blob, 0, LZ_PAYLOAD_HEADER_SIZE);
    memcpy(blob + OFF_MAGIC, LZ_PAYLOAD_MAGIC, 4);
    put16(blob + OFF_VERSION, (uint16_t)version_of(dtype));
    blob[OFF_DTYPE] = (uint8_t)dtype;
    blob[OFF_CODEC] = (uint8_t)codec;
    put32(blob + OFF_LAYERS, (uint32_t)L);
    put32(blob + OFF_KVHEADS, (uint32_t)KV);
    put32(blob + OFF_HEADDIM, (uint32_t)d);
    put32(blob + OFF_NTOKENS, (uint32_t)n);
    put32(blob + OFF_POSBASE, (uint32_t)s->pos_base);
    put32(blob + OFF_FLAGS, 0);
    put64(blob + OFF_RAW, raw_size);
    put64(blob + OFF_BODY, body_size);
    memcpy(blob + OFF_MODEL, s->model, 32);
    for (size_t i = 0; i < nh; i++)
        put32(blob + LZ_PAYLOAD_HEADER_SIZE + 4 * i, (uint32_t)(s->n_kept ? s->n_kept[i] : n));
    size_t total = hdr + body_size;
    put32(blob + OFF_CRC, blob_crc(blob, total));
    uint8_t *shrunk = realloc(blob, total);
    *out = shrunk ? shrunk : blob;
    *out_len = total;
    return LZ_OK;
}

/* ---- parse ---- */

int lz_payload_parse(const void *buf, size_t len, int verify_checksum, lz_payload_info *info,
                     char *err, size_t errlen)
{
    const uint8_t *b = buf;
    memset(info, 0, sizeof *info);
    if (!b || len < LZ_PAYLOAD_HEADER_SIZE)
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: %zu bytes, shorter than the %d-byte header",
                    len, LZ_PAYLOAD_HEADER_SIZE);
    if (memcmp(b + OFF_MAGIC, LZ_PAYLOAD_MAGIC, 4) != 0)
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: bad magic (expected \"LZKV\")");
    info->version = get16(b + OFF_VERSION);
    if (info->version < 1 || info->version > LZ_PAYLOAD_VERSION)
        return lz_fail(err, errlen, LZ_EVERSION, "payload: version %d, this build reads 1 to %d",
                    info->version, LZ_PAYLOAD_VERSION);
    info->dtype = b[OFF_DTYPE];
    info->codec = b[OFF_CODEC];
    info->n_layers = (int)get32(b + OFF_LAYERS);
    info->n_kv_heads = (int)get32(b + OFF_KVHEADS);
    info->head_dim = (int)get32(b + OFF_HEADDIM);
    info->n_tokens = (int)get32(b + OFF_NTOKENS);
    info->pos_base = (int)get32(b + OFF_POSBASE);
    info->raw_size = get64(b + OFF_RAW);
    info->body_size = get64(b + OFF_BODY);
    memcpy(info->model, b + OFF_MODEL, 32);
    info->checksum = get32(b + OFF_CRC);
    if (!dtype_size(info->dtype))
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: unknown dtype %d", info->dtype);
    if (info->version != version_of(info->dtype))
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: dtype %d in a version %d payload", info->dtype,
                       info->version);
    if (info->codec > LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD)
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: unknown codec %d", info->codec);
    if (get32(b + OFF_FLAGS) != 0)
        return lz_fail(err, errlen, LZ_EVERSION, "payload: unknown flags 0x%x", get32(b + OFF_FLAGS));
    if (info->n_layers <= 0 || info->n_layers > 4096 || info->n_kv_heads <= 0 ||
        info->n_kv_heads > 4096 || info->head_dim <= 0 || info->head_dim > 4096 ||
        info->n_tokens < 0 || info->pos_base < 0)
        return lz_fail(err, errlen, LZ_ECORRUPT,
                    "payload: implausible shape (L=%d KV=%d d=%d n=%d base=%d)", info->n_layers,
                    info->n_kv_heads, info->head_dim, info->n_tokens, info->pos_base);
    uint64_t nh = (uint64_t)info->n_layers * (uint64_t)info->n_kv_heads;
    uint64_t hdr = LZ_PAYLOAD_HEADER_SIZE + 4 * nh;
    if (hdr > len)
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: kept table (%llu bytes) past the end (%zu)",
                    (unsigned long long)(4 * nh), len);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < nh; i++) {
        uint32_t kept = get32(b + LZ_PAYLOAD_HEADER_SIZE + 4 * i);
        if (kept > (uint32_t)info->n_tokens)
            return lz_fail(err, errlen, LZ_ECORRUPT,
                        "payload: kept count %u of (layer %llu, kv head %llu) exceeds n_tokens %d", kept,
                        (unsigned long long)(i / info->n_kv_heads),
                        (unsigned long long)(i % info->n_kv_heads), info->n_tokens);
        sum += kept;
    }
    info->n_kept_sum = sum;
    uint64_t want_raw = scales_size(info->dtype, nh) + 2 * dtype_size(info->dtype) * sum * (uint64_t)info->head_dim;
    if (info->raw_size != want_raw)
        return lz_fail(err, errlen, LZ_ECORRUPT,
                    "payload: raw size %llu does not match the kept table (%llu)",
                    (unsigned long long)info->raw_size, (unsigned long long)want_raw);
    if (info->codec == LZ_PAYLOAD_CODEC_RAW && info->body_size != info->raw_size)
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload: raw codec with body %llu != raw %llu",
                    (unsigned long long)info->body_size, (unsigned long long)info->raw_size);
    if (hdr + info->body_size != len)
        return lz_fail(err, errlen, LZ_ECORRUPT,
                    "payload: header says %llu bytes, blob has %zu",
                    (unsigned long long)(hdr + info->body_size), len);
    info->total_size = len;
    if (verify_checksum) {
        uint32_t c = blob_crc(b, len);
        if (c != info->checksum)
            return lz_fail(err, errlen, LZ_ECHECKSUM,
                        "payload: CRC32C mismatch (stored %08x, computed %08x)", info->checksum, c);
    }
    return LZ_OK;
}

void lz_payload_kept(const void *buf, const lz_payload_info *info, int *n_kept)
{
    const uint8_t *b = buf;
    size_t nh = (size_t)info->n_layers * info->n_kv_heads;
    for (size_t i = 0; i < nh; i++) n_kept[i] = (int)get32(b + LZ_PAYLOAD_HEADER_SIZE + 4 * i);
}

/* ---- decode ---- */

int lz_payload_thread_dctx(lz_payload_codec *c, int n)
{
    if (c->n_wdctx >= n) return 0;
    ZSTD_DCtx **w = realloc(c->wdctx, (size_t)n * sizeof *w);
    if (!w) return -1;
    c->wdctx = w;
    for (; c->n_wdctx < n; c->n_wdctx++)
        if (!(c->wdctx[c->n_wdctx] = ZSTD_createDCtx())) return -1;
    return 0;
}

/* The frames of a body written on threads, decompressed on threads: the frames are found
 * in order (their compressed sizes), each knows its content size, and every thread
 * decompresses whole frames into its place in dst. 0 when done, 1 when the body is not made
 * of such frames or threads would not pay (the caller decompresses it in one call), -1 on
 * a zstd error (message in err). */
static int decompress_frames(lz_payload_codec *c, uint8_t *dst, size_t raw, const uint8_t *src, size_t n,
                             char *err, size_t errlen)
{
    const int T = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (T < 2 || raw < 2 * LZ_PAYLOAD_FRAME_BYTES) return 1;
    size_t nf_max = raw / 1024 + 2, nf = 0; /* frames are LZ_PAYLOAD_FRAME_BYTES but for the last */
    size_t *at = malloc(3 * nf_max * sizeof *at);
    if (!at) return 1;
    size_t off = 0, out = 0;
    while (off < n && nf < nf_max) {
        size_t fs = ZSTD_findFrameCompressedSize(src + off, n - off);
        unsigned long long cs = ZSTD_isError(fs) ? ZSTD_CONTENTSIZE_ERROR : ZSTD_getFrameContentSize(src + off, fs);
        if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN || out + cs > raw) { free(at); return 1; }
        at[3 * nf] = off, at[3 * nf + 1] = fs, at[3 * nf + 2] = out;
        nf++, off += fs, out += (size_t)cs;
    }
    if (off != n || out != raw || nf < 2) { free(at); return 1; }
    if (lz_payload_thread_dctx(c, T)) { free(at); return 1; }
    int bad = 0;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1) reduction(|| : bad)
    for (size_t f = 0; f < nf; f++) {
        const size_t want = (f + 1 < nf ? at[3 * (f + 1) + 2] : raw) - at[3 * f + 2];
        size_t r = ZSTD_decompressDCtx(c->wdctx[omp_get_thread_num()], dst + at[3 * f + 2], want, src + at[3 * f],
                                       at[3 * f + 1]);
        bad = bad || ZSTD_isError(r) || r != want;
    }
    free(at);
    if (bad) {
        lz_fail(err, errlen, LZ_ECODEC, "payload decode: zstd: a frame did not decompress");
        return -1;
    }
    return 0;
}

/* Decompresses the body into dst (raw bytes): in parallel frames when it has them. */
static int decompress_body(lz_payload_codec *c, uint8_t *dst, size_t raw, const uint8_t *src, size_t n,
                           char *err, size_t errlen)
{
    int fr = decompress_frames(c, dst, raw, src, n, err, errlen);
    if (fr < 0) return LZ_ECODEC;
    if (fr == 0) return LZ_OK;
    size_t r = ZSTD_decompressDCtx(c->dctx, dst, raw, src, n);
    if (ZSTD_isError(r))
        return lz_fail(err, errlen, LZ_ECODEC, "payload decode: zstd: %s", ZSTD_getErrorName(r));
    if (r != raw)
        return lz_fail(err, errlen, LZ_ECORRUPT, "payload decode: zstd gave %zu bytes, expected %zu", r, raw);
    return LZ_OK;
}

/* Parses, verifies and leaves the body (bf16 or fp32 elements) in c->scratch. */
static int decode_body(lz_payload_codec *c, const void *buf, size_t len, int stride,
                       lz_payload_info *info, const uint8_t **body, char *err, size_t errlen)
{
    int rc = lz_payload_parse(buf, len, 1, info, err, errlen);
    if (rc) return rc;
    if (stride < info->n_tokens)
        return lz_fail(err, errlen, LZ_EINVAL, "payload decode: stride %d < n_tokens %d", stride,
                    info->n_tokens);
    const uint8_t *src = (const uint8_t *)buf + LZ_PAYLOAD_HEADER_SIZE +
                         4 * (size_t)info->n_layers * info->n_kv_heads;
    size_t es = dtype_size(info->dtype), raw = (size_t)info->raw_size, n_elem = raw / es;
    if (lz_payload_reserve(&c->scratch, &c->cap, raw ? raw : 1))
        return lz_fail(err, errlen, LZ_ENOMEM, "payload decode: out of memory (%zu bytes)", raw);
    if (info->codec == LZ_PAYLOAD_CODEC_RAW) {
        memcpy(c->scratch, src, raw);
    } else {
        uint8_t *dst = c->scratch;
        if (info->codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD) {
            if (lz_payload_reserve(&c->scratch2, &c->cap2, raw ? raw : 1))
                return lz_fail(err, errlen, LZ_ENOMEM, "payload decode: out of memory");
            dst = c->scratch2;
        }
        rc = decompress_body(c, dst, raw, src, (size_t)info->body_size, err, errlen);
        if (rc) return rc;
        if (info->codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD) unshuffle_planes(c->scratch, c->scratch2, n_elem, es);
    }
    *body = c->scratch;
    return LZ_OK;
}


/* Element e of a body's elements of dtype as fp32 / as bf16 bits; sc: the fp8 scale of its head. */
static inline float elem_f32(const uint8_t *body, int dtype, size_t e, float sc)
{
    if (dtype == LZ_PAYLOAD_DTYPE_F32) { float f; memcpy(&f, body + 4 * e, 4); return f; }
    if (dtype == LZ_PAYLOAD_DTYPE_FP8) return lz_e4m3_to_f32(body[e]) * sc;
    uint16_t h; memcpy(&h, body + 2 * e, 2); return lz_bf16_to_f32(h);
}
static inline uint16_t elem_bf16(const uint8_t *body, int dtype, size_t e, float sc)
{
    if (dtype == LZ_PAYLOAD_DTYPE_BF16) { uint16_t h; memcpy(&h, body + 2 * e, 2); return h; }
    return lz_f32_to_bf16(elem_f32(body, dtype, e, sc));
}

/* Every (part, head) of a decoded body in order: its kept rows from element o of the
 * elements (after an fp8 body's scale table), its scale. */
#define FOR_EACH_HEAD(buf, info, body, BODY_OF_HEAD)                                             \
    const size_t nh = (size_t)(info)->n_layers * (info)->n_kv_heads, d = (size_t)(info)->head_dim; \
    const int dtype = (info)->dtype;                                                             \
    const uint8_t *elems = (body) + scales_size(dtype, nh);                                      \
    size_t o = 0;                                                                                \
    for (int kv = 0; kv < 2; kv++)                                                               \
        for (size_t i = 0; i < nh; i++) {                                                        \
            const size_t kept = get32((const uint8_t *)(buf) + LZ_PAYLOAD_HEADER_SIZE + 4 * i);  \
            const float sc = dtype == LZ_PAYLOAD_DTYPE_FP8                                       \
                                 ? lz_bits_to_f32(get32((body) + 4 * ((size_t)kv * nh + i))) : 1.0f; \
            BODY_OF_HEAD                                                                         \
            o += kept * d;                                                                       \
        }

#define DECODE_IMPL(T, CONV)                                                                     \
    lz_payload_info local;                                                                       \
    if (!info) info = &local;                                                                    \
    const uint8_t *body;                                                                         \
    int rc = decode_body(c, buf, len, stride, info, &body, err, errlen);                         \
    if (rc) return rc;                                                                           \
    FOR_EACH_HEAD(buf, info, body, {                                                             \
        if (n_kept && kv == 0) n_kept[i] = (int)kept;                                            \
        T *row = (kv ? v : k) + i * (size_t)stride * d;                                          \
        for (size_t e = 0; e < kept * d; e++) row[e] = CONV(elems, dtype, o + e, sc);            \
    })                                                                                           \
    return LZ_OK;

int lz_payload_decode_f32(lz_payload_codec *c, const void *buf, size_t len, float *k, float *v,
                          int stride, int *n_kept, lz_payload_info *info, char *err,
                          size_t errlen)
{
    DECODE_IMPL(float, elem_f32)
}

int lz_payload_decode_bf16(lz_payload_codec *c, const void *buf, size_t len, uint16_t *k,
                           uint16_t *v, int stride, int *n_kept, lz_payload_info *info,
                           char *err, size_t errlen)
{
    DECODE_IMPL(uint16_t, elem_bf16)
}

/* Packed: k and v receive sum(kept) rows each, in the body's order. */
#define DECODE_PACKED_IMPL(CONV)                                                                 \
    lz_payload_info local;                                                                       \
    if (!info) info = &local;                                                                    \
    const uint8_t *body;                                                                         \
    int rc = lz_payload_parse(buf, len, 0, info, err, errlen);                                   \
    if (!rc) rc = decode_body(c, buf, len, info->n_tokens, info, &body, err, errlen);            \
    if (rc) return rc;                                                                           \
    if (n_kept) lz_payload_kept(buf, info, n_kept);                                              \
    const size_t half = (size_t)info->n_kept_sum * info->head_dim;                               \
    FOR_EACH_HEAD(buf, info, body, {                                                             \
        const size_t at = kv ? o - half : o;                                                     \
        for (size_t e = 0; e < kept * d; e++) (kv ? v : k)[at + e] = CONV(elems, dtype, o + e, sc); \
    })                                                                                           \
    return LZ_OK;

int lz_payload_decode_f32_packed(lz_payload_codec *c, const void *buf, size_t len, float *k, float *v,
                                 int *n_kept, lz_payload_info *info, char *err, size_t errlen)
{
    DECODE_PACKED_IMPL(elem_f32)
}

int lz_payload_decode_bf16_packed(lz_payload_codec *c, const void *buf, size_t len, uint16_t *k, uint16_t *v,
                                  int *n_kept, lz_payload_info *info, char *err, size_t errlen)
{
    lz_payload_info local;
    if (!info) info = &local;
    int rc = lz_payload_parse(buf, len, 0, info, err, errlen);
    if (rc) return rc;
    if (!lz_payload_batch_format(info)) {
        DECODE_PACKED_IMPL(elem_bf16)
    }
    /* bf16 planes (or fp8 bytes) straight into k and v, checksum and frames on threads */
    lz_payload_job job = {.blob = buf, .len = len, .k = k, .v = v, .n_kept = n_kept};
    if (lz_payload_decode_batch(c, &job, 1)) return lz_fail(err, errlen, job.status, "%s", job.err);
    *info = job.info;
    return LZ_OK;
}
