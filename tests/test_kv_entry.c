/* test_kv_entry.c - query/kv_entry.c: a store payload decoded into a host-tier
 * entry (bf16 as stored, equal to the encoded values rounded to bf16), and why
 * one is not: an entry's memory that cannot be had is LZ_QUERY_ENOMEM (memory
 * other requests may give back: a scheduler waits and begins the request
 * again), where a corrupt payload, another model's, or a header asking for more
 * tokens than a prompt holds is -1, a failure of the request itself; the same
 * statuses per blob from kv_entry_decode_many, a skipped blob 0. */
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "query/kv_entry.h"
#include "tests/test.h"

enum { L = 2, KV = 2, D = 8, N = 5 };

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static void *no_heap(size_t bytes) { (void)bytes; return NULL; }

/* A bf16 payload of N tokens of random K/V (k, v: (L, KV, N, D)) by model fp. */
static void *payload(lz_payload_codec *c, const uint8_t *fp, float *k, float *v, size_t *len)
{
    for (int i = 0; i < L * KV * N * D; i++) k[i] = (float)(lz_test_u01(&rng) * 4 - 2), v[i] = (float)lz_test_u01(&rng);
    lz_payload_src src = {k, v, N, 0, L, KV, D, N, NULL, 3, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL};
    void *blob = NULL;
    char err[256];
    CHECK(lz_payload_encode(c, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &blob, len, err, sizeof err) == 0, "encode: %s",
          err);
    return blob;
}

int main(void)
{
    lz_llama_config cfg = {0};
    cfg.n_layers = L, cfg.n_kv_heads = KV, cfg.head_dim = D;
    uint8_t fp[32], other[32];
    memset(fp, 7, sizeof fp);
    memset(other, 8, sizeof other);
    lz_payload_codec *c = lz_payload_codec_new();
    kv_entry_env env = {.cfg = &cfg, .fingerprint = fp, .codec = c};
    static float k[L * KV * N * D], v[L * KV * N * D];
    size_t len = 0, len2 = 0;
    void *blob = payload(c, fp, k, v, &len);
    char err[512] = "";
    int st = 99;

    /* decoded: bf16 as stored, the encoded values rounded */
    kv_entry *e = kv_entry_decode(&env, blob, len, "document 'a'", &st, err, sizeof err);
    CHECK(e && st == 0, "decode: status %d, %s", st, err);
    if (e) {
        int same = e->k16 && e->v16 && e->n == N;
        for (int i = 0; same && i < L * KV * N * D; i++)
            same = e->k16[i] == lz_f32_to_bf16(k[i]) && e->v16[i] == lz_f32_to_bf16(v[i]);
        CHECK(same, "the entry holds the payload's values as bf16");
        kv_entry_free(&env, e);
    }

    /* no memory for the entry: LZ_QUERY_ENOMEM, the message says what */
    env.heap = no_heap;
    e = kv_entry_decode(&env, blob, len, "document 'a'", &st, err, sizeof err);
    CHECK(!e && st == LZ_QUERY_ENOMEM && strstr(err, "document 'a'") && strstr(err, "out of memory"),
          "no memory: status %d (want %d), %s", st, LZ_QUERY_ENOMEM, err);
    {
        void *blob2 = payload(c, fp, k, v, &len2);
        const void *blobs[3] = {blob, NULL, blob2};
        const size_t lens[3] = {len, 0, len2};
        kv_entry *out[3];
        int sts[3] = {9, 9, 9};
        char errs[3][256];
        CHECK(kv_entry_decode_many(&env, blobs, lens, 3, out, errs, sts) == 0 && !out[0] && !out[2], "none made");
        CHECK(sts[0] == LZ_QUERY_ENOMEM && sts[1] == 0 && sts[2] == LZ_QUERY_ENOMEM,
              "decode_many without memory: statuses %d %d %d", sts[0], sts[1], sts[2]);
        env.heap = NULL;
        CHECK(kv_entry_decode_many(&env, blobs, lens, 3, out, errs, sts) == 2 && sts[0] == 0 && sts[1] == 0 &&
                  sts[2] == 0, "decode_many: statuses %d %d %d", sts[0], sts[1], sts[2]);
        kv_entry_free(&env, out[0]);
        kv_entry_free(&env, out[2]);
        free(blob2);
    }

    /* the payload's own faults: -1 */
    uint8_t *bad = malloc(len);
    memcpy(bad, blob, len);
    bad[len - 1] ^= 0x40; /* in the body: the checksum no longer matches */
    e = kv_entry_decode(&env, bad, len, "document 'b'", &st, err, sizeof err);
    CHECK(!e && st == -1 && strstr(err, "document 'b'") && strstr(err, "corrupt"), "corrupt: status %d, %s", st, err);
    env.fingerprint = other;
    e = kv_entry_decode(&env, blob, len, "document 'c'", &st, err, sizeof err);
    CHECK(!e && st == -1 && strstr(err, "another model"), "another model's: status %d, %s", st, err);
    env.fingerprint = fp;
    /* a header of more tokens than a prompt holds (the kept table says none kept: the sizes
     * agree, so only the count gives it away) */
    {
        static float z[1];
        lz_payload_src src = {z, z, 1, 0, L, KV, D, 0, NULL, 3, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL};
        void *empty = NULL;
        size_t elen = 0;
        CHECK(lz_payload_encode(c, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &empty, &elen, err, sizeof err) == 0,
              "empty encode: %s", err);
        if (empty) {
            const uint32_t huge = QUERY_MAX_POSITIONS + 1; /* n_tokens at offset 20, little-endian */
            uint8_t *h = empty;
            for (int i = 0; i < 4; i++) h[20 + i] = (uint8_t)(huge >> (8 * i));
            e = kv_entry_decode(&env, empty, elen, "document 'd'", &st, err, sizeof err);
            CHECK(!e && st == -1 && strstr(err, "more than a prompt"), "huge header: status %d, %s", st, err);
            free(empty);
        }
    }
    free(bad);
    free(blob);
    lz_payload_codec_free(c);
    return lz_test_done();
}
