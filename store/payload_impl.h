/* payload_impl.h - private to store/payload*.c: the codec's state, the header's
 * byte offsets (schema/PAYLOAD.md) and the helpers payload.c (one blob) and
 * payload_batch.c (many blobs on all threads) share. Includes zstd.h: store/
 * only (ARCHITECTURE.md).
 */
#ifndef LZ_STORE_PAYLOAD_IMPL_H
#define LZ_STORE_PAYLOAD_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "store/payload.h"

struct lz_payload_codec {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *scratch;  /* raw body bytes (bf16) */
    size_t cap;
    uint8_t *scratch2; /* shuffled body */
    size_t cap2;
    int workers;       /* lz_payload_codec_set_threads: 0 = one frame, this thread; else frames of
                          LZ_PAYLOAD_FRAME_BYTES compressed by this many threads */
    ZSTD_CCtx **wctx;  /* one compression context a thread */
    ZSTD_DCtx **wdctx; /* one decompression context a thread, made at the first parallel decode */
    int n_wdctx;
    uint8_t *zbuf;     /* the frames before they are joined */
    size_t zcap;
    uint8_t *planes;   /* lz_payload_decode_batch: the byte planes of a wave of payloads */
    size_t planes_cap;
};

/* Body bytes per zstd frame when a codec compresses on threads: frames are
 * independent, so they compress in parallel, and concatenated frames are one
 * valid zstd stream (ZSTD_decompress reads them in order). 1 MiB loses ~0.1%
 * of ratio on KV (no match crosses a frame). */
#define LZ_PAYLOAD_FRAME_BYTES ((size_t)1 << 20)

/* Header offsets (schema/PAYLOAD.md). */
enum { OFF_MAGIC = 0, OFF_VERSION = 4, OFF_DTYPE = 6, OFF_CODEC = 7, OFF_LAYERS = 8,
       OFF_KVHEADS = 12, OFF_HEADDIM = 16, OFF_NTOKENS = 20, OFF_POSBASE = 24, OFF_FLAGS = 28,
       OFF_RAW = 32, OFF_BODY = 40, OFF_MODEL = 48, OFF_CRC = 80 };

/* Little-endian u32 (blobs may sit unaligned in an LMDB map). */
static inline uint32_t lz_payload_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Makes c hold at least n per-thread decompression contexts; 0, or -1 out of memory. */
int lz_payload_thread_dctx(struct lz_payload_codec *c, int n);

/* Grows *buf to need bytes (contents kept); 0, or -1 out of memory. */
int lz_payload_reserve(uint8_t **buf, size_t *cap, size_t need);

#endif /* LZ_STORE_PAYLOAD_IMPL_H */
