/* payload.h - the KV payload codec: one self-describing binary blob per
 * document (or per model prefix) holding K and V of every (layer, kv head)
 * as bf16, byte-shuffled and zstd-compressed, with a CRC32C checksum.
 * The byte format is specified in schema/PAYLOAD.md; this header is its API.
 * No I/O here: blobs go to and from LMDB through store/kvdb.h.
 *
 * Legend: L = layers, KV = key/value heads, T = token stride of a caller
 * buffer, d = head_dim, n = tokens of the document, kept[l][h] <= n = tokens
 * kept for (layer l, kv head h) (all n today; Ada-KV eviction makes them
 * differ, the format and the decoders already allow it).
 */
#ifndef LZ_PAYLOAD_H
#define LZ_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>
#include "base/status.h"

#define LZ_PAYLOAD_MAGIC "LZKV"
#define LZ_PAYLOAD_VERSION 2 /* the newest this build reads: 1 (bf16, fp32), 2 (fp8) */
#define LZ_PAYLOAD_HEADER_SIZE 96 /* fixed part; the kept table (4 * L * KV bytes) follows */

enum {
    LZ_PAYLOAD_DTYPE_BF16 = 1, /* default: half the bytes, the GPU's format */
    LZ_PAYLOAD_DTYPE_F32 = 2,  /* exact fp32 (CPU-only deployments, exactness tests) */
    LZ_PAYLOAD_DTYPE_FP8 = 3   /* fp8 e4m3 (base/fp8.h) with a scale per (K or V, layer, kv head):
                                  a quarter of fp32's bytes; payload version 2 */
};

typedef enum {
    LZ_PAYLOAD_CODEC_RAW = 0,          /* bf16 body as is */
    LZ_PAYLOAD_CODEC_ZSTD = 1,         /* zstd of the bf16 body */
    LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD = 2  /* low bytes, then high bytes, then zstd (default) */
} lz_payload_codec_id;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

#define LZ_PAYLOAD_DEFAULT_LEVEL 1 /* zstd level used by lazyingest (tuned: see LZ_PAYLOAD_TUNED_LEVEL) */
#define LZ_PAYLOAD_TUNED_LEVEL 2  /* levels up to this one: matching tuned for K/V planes (payload.c) */

/* What to encode: K/V of one document inside larger fp32 buffers, e.g. an
 * lz_kv_cache (k, v: (L, KV, T, d); the document's token j of (l, h) is at
 * k[((l * KV + h) * T + t0 + j) * d]). With n_kept, head (l, h) keeps its
 * first n_kept[l * KV + h] tokens (already compacted by the caller). */
typedef struct {
    const float *k;        /* (L, KV, T, d) keys rotated at positions pos_base + j */
    const float *v;        /* (L, KV, T, d) */
    int stride;            /* T */
    int t0;                /* first token of the document in every (l, h) row */
    int n_layers;          /* L */
    int n_kv_heads;        /* KV */
    int head_dim;          /* d */
    int n_tokens;          /* n */
    const int *n_kept;     /* (L, KV), each in [0, n]; NULL: every head keeps n */
    int pos_base;          /* rotary position of token 0 (the prompt prefix length s) */
    const uint8_t *model;  /* 32-byte model fingerprint, recorded in the header */
    int dtype;             /* LZ_PAYLOAD_DTYPE_*; 0 means BF16 */
    /* Optional, instead of k and v (then NULL): the document already in dtype, (L, KV, n, d)
     * back to back (fp32, bf16 bits, or fp8 bytes with k_scales / v_scales: (L, KV) each),
     * every head keeping n (n_kept NULL; stride and t0 unused), packed as they are (ingest on
     * the GPU: nothing widened or narrowed on the host) */
    const void *k_planes, *v_planes;
    const float *k_scales, *v_scales;
} lz_payload_src;

/* A parsed header. Fields are copied out of the blob (which may be unaligned
 * memory inside an LMDB map); the kept table is read with lz_payload_kept. */
typedef struct {
    int version, dtype, codec;
    int n_layers, n_kv_heads, head_dim, n_tokens, pos_base;
    uint64_t raw_size;     /* bf16 body bytes: 2 (K and V) * sum(kept) * d * 2 */
    uint64_t body_size;    /* stored body bytes after the kept table */
    uint64_t total_size;   /* header + kept table + body */
    uint64_t n_kept_sum;   /* sum of the kept table */
    uint32_t checksum;     /* CRC32C as stored */
    uint8_t model[32];
} lz_payload_info;

/* Reusable compression state and scratch (not thread-safe; one per thread). */
typedef struct lz_payload_codec lz_payload_codec;
lz_payload_codec *lz_payload_codec_new(void);  /* NULL when out of memory */
void lz_payload_codec_free(lz_payload_codec *c); /* NULL is a no-op */
/* Threads that compress each payload c encodes: n >= 1 compresses the body
 * as independent 1 MiB zstd frames on n threads, joined (one valid zstd
 * stream; the bytes do not depend on n; a bf16 payload of an 8B model is
 * ~20 MB, ~90 ms in one thread); 0 (the default) compresses one frame in the
 * calling thread. Decoding is the same either way. Returns 0, or -1 when out
 * of memory (c is then back to 0). */
int lz_payload_codec_set_threads(lz_payload_codec *c, int n);

/* Encodes src with codec (lz_payload_codec_id) at zstd level (ignored for
 * RAW) into a malloc'd blob *out of *out_len bytes.
 * Errors: EINVAL (shapes, kept counts out of range, unknown codec, a NaN or
 * Inf in an fp8 payload's values (named by part, layer and kv head): fp8
 * would saturate it silently),
 * ENOMEM, ECODEC (zstd failure). */
int lz_payload_encode(lz_payload_codec *c, const lz_payload_src *src, int codec, int level,
                      void **out, size_t *out_len, char *err, size_t errlen);

/* Validates the header of buf[len]: magic, version, dtype, codec, shapes,
 * kept counts, sizes against len, and (verify_checksum) the CRC32C over the
 * whole blob. Fills info. Errors: ECORRUPT, EVERSION, ECHECKSUM. */
int lz_payload_parse(const void *buf, size_t len, int verify_checksum, lz_payload_info *info,
                     char *err, size_t errlen);

/* Copies the kept table of a parsed blob into n_kept (L * KV ints). */
void lz_payload_kept(const void *buf, const lz_payload_info *info, int *n_kept);

/* Decodes buf[len] (parsed and checksum-verified inside) into caller buffers
 * k, v: (L, KV, stride, d), stride >= n_tokens; head (l, h) fills rows
 * 0..kept-1, the rest is untouched. n_kept (L * KV) receives the kept table
 * when not NULL; info when not NULL. The f32 variant widens bf16 exactly.
 * Errors: those of lz_payload_parse, EINVAL (stride), ECODEC, ENOMEM. */
int lz_payload_decode_f32(lz_payload_codec *c, const void *buf, size_t len, float *k, float *v,
                          int stride, int *n_kept, lz_payload_info *info, char *err,
                          size_t errlen);
int lz_payload_decode_bf16(lz_payload_codec *c, const void *buf, size_t len, uint16_t *k,
                           uint16_t *v, int stride, int *n_kept, lz_payload_info *info,
                           char *err, size_t errlen);

/* Decodes buf[len] (parsed and checksum-verified inside) packed: k and v
 * receive sum(kept) rows of d floats each, head (l, h)'s kept rows after
 * those of every earlier head, in the body's order (the layout of
 * lz_kv_segment.head_row); size them from lz_payload_parse's n_kept_sum.
 * n_kept (L * KV) and info as for lz_payload_decode_f32. */
int lz_payload_decode_f32_packed(lz_payload_codec *c, const void *buf, size_t len, float *k, float *v,
                                 int *n_kept, lz_payload_info *info, char *err, size_t errlen);
/* The same as bf16 bits (exact for a bf16 payload; an f32 one is rounded). */
int lz_payload_decode_bf16_packed(lz_payload_codec *c, const void *buf, size_t len, uint16_t *k, uint16_t *v,
                                  int *n_kept, lz_payload_info *info, char *err, size_t errlen);

/* One payload of a batch (lz_payload_decode_batch). The caller sizes k and v from
 * lz_payload_parse's n_kept_sum (as for lz_payload_decode_bf16_packed). */
typedef struct {
    const void *blob;      /* in: the payload (not modified; may sit in an LMDB map) */
    size_t len;
    uint16_t *k, *v;       /* out: sum(kept) rows of d bf16 values each, packed */
    uint8_t *k8, *v8;      /* out instead of k, v when set (an fp8 payload of the batch's formats, else
                              LZ_EUNSUPPORTED): its e4m3 bytes as they are, packed as k and v */
    float *k_scales;       /* out with k8: (L * KV) the keys' scales, then v_scales the values' */
    float *v_scales;
    int *n_kept;           /* out when not NULL: the kept table (L * KV) */
    lz_payload_info info;  /* out */
    int status;            /* out: LZ_OK or the error lz_payload_decode_bf16_packed would give */
    char err[192];         /* out: its message */
} lz_payload_job;
/* Decodes n payloads as lz_payload_decode_bf16_packed decodes each (checksum verified, the
 * same bits), with every payload's zstd frames, checksum pieces and byte planes spread
 * over all OpenMP threads together (one thread when called inside a parallel region).
 * Holds up to 256 MiB of planes in c at a time (larger batches go in waves). Returns the
 * number of jobs that failed (their status and err say why). */
int lz_payload_decode_batch(lz_payload_codec *c, lz_payload_job *jobs, int n);
/* Whether lz_payload_decode_batch decodes a payload of this header itself (bf16 shuffled or raw, fp8
 * raw or zstd: then it can keep fp8 as it is), so lz_payload_decode_bf16_packed hands such a
 * payload to it; any other is decoded alone, and the batch calls lz_payload_decode_bf16_packed for it. */
int lz_payload_batch_format(const lz_payload_info *in);
/* Byte shuffle of n 16-bit elements: dst = [low bytes][high bytes], and back. */
void lz_payload_shuffle16(uint8_t *dst, const uint16_t *src, size_t n);
void lz_payload_unshuffle16(uint16_t *dst, const uint8_t *src, size_t n);

/* CRC32C (Castagnoli), continuing from crc (start with 0). SSE4.2 when built
 * for it, else a table. */
uint32_t lz_crc32c(uint32_t crc, const void *data, size_t n);
/* The CRC32C of A followed by B from crc1 = CRC(A), crc2 = CRC(B) and len2 = |B|. */
uint32_t lz_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

const char *lz_payload_codec_name(int codec); /* "raw", "zstd", "shuffle-zstd" (lazyingest --codec's names), "?" */
const char *lz_payload_dtype_name(int dtype); /* "bf16", "fp32", "fp8", "?" */

#endif /* LZ_PAYLOAD_H */
