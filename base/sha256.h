/* sha256.h - SHA-256 (FIPS 180-4) for content addressing: model fingerprints
 * and document content hashes. Streaming init/update/final plus one-shot. */
#ifndef LZ_SHA256_H
#define LZ_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
} lz_sha256_ctx;

void lz_sha256_init(lz_sha256_ctx *s);
void lz_sha256_update(lz_sha256_ctx *s, const void *data, size_t n);
void lz_sha256_final(lz_sha256_ctx *s, uint8_t out[32]);
void lz_sha256(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of 32 bytes into hex[65] (NUL-terminated). */
void lz_sha256_hex(const uint8_t d[32], char hex[65]);

#endif /* LZ_SHA256_H */
