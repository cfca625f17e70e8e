/* test_payload.c - KV payload codec: round trips bit for bit (bf16 of the
 * fp32 input) for every codec, unequal per-head kept counts, shuffle,
 * CRC32C vectors, rejection of every kind of corruption, compression on
 * zstd workers, many payloads decoded as one batch on threads, fp8 e4m3
 * payloads (the conversions, the scales, the error bound, version 2). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp8.h"
#include "kernels/lz_fp8_quant.h"
#include "base/half.h"
#include "base/status.h"
#include "store/payload.h"
#include "tests/test.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { return (float)lz_test_u01(&rng) * 4.0f - 2.0f; }

/* Checks dst (L, KV, T2, d) against bf16 of src (L, KV, T, d) from t0 on. */
static int same_bits(const float *src, int T, int t0, const float *dst, int T2, int L, int KV, int d,
                     const int *kept, int n)
{
    for (int i = 0; i < L * KV; i++) {
        int k = kept ? kept[i] : n;
        for (int t = 0; t < k; t++)
            for (int e = 0; e < d; e++) {
                float want = lz_bf16_to_f32(lz_f32_to_bf16(src[((size_t)i * T + t0 + t) * d + e]));
                float got = dst[((size_t)i * T2 + t) * d + e];
                if (memcmp(&want, &got, 4) != 0) return 0;
            }
    }
    return 1;
}

static void test_crc(void)
{
    /* RFC 3720 B.4 test vectors */
    uint8_t z[32] = { 0 }, ff[32], inc[32];
    memset(ff, 0xff, 32);
    for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i;
    CHECK(lz_crc32c(0, z, 32) == 0x8a9136aa, "zeros %08x", lz_crc32c(0, z, 32));
    CHECK(lz_crc32c(0, ff, 32) == 0x62a8ab43, "ones %08x", lz_crc32c(0, ff, 32));
    CHECK(lz_crc32c(0, inc, 32) == 0x46dd794e, "incr %08x", lz_crc32c(0, inc, 32));
    CHECK(lz_crc32c(0, "123456789", 9) == 0xe3069283, "check value");
    /* streaming equals one shot */
    CHECK(lz_crc32c(lz_crc32c(0, inc, 13), inc + 13, 19) == 0x46dd794e, "streaming");
    /* the CRC of two pieces joined from their CRCs equals the one-shot CRC, at random splits */
    enum { N = 5000 };
    uint8_t *buf = malloc(N);
    for (int i = 0; i < N; i++) buf[i] = (uint8_t)(lz_test_u01(&rng) * 256);
    int ok = 1;
    for (int t = 0; t < 200 && ok; t++) {
        size_t a = (size_t)(lz_test_u01(&rng) * N), b = a + (size_t)(lz_test_u01(&rng) * (N - a));
        uint32_t whole = lz_crc32c(0, buf, b);
        ok = lz_crc32c_combine(lz_crc32c(0, buf, a), lz_crc32c(0, buf + a, b - a), b - a) == whole;
    }
    CHECK(ok, "lz_crc32c_combine equals the one-shot CRC at 200 random splits");
    CHECK(lz_crc32c_combine(lz_crc32c(0, inc, 32), lz_crc32c(0, inc, 0), 0) == 0x46dd794e, "an empty second piece");
    free(buf);
}

static void test_shuffle(void)
{
    uint16_t a[5] = { 0x0102, 0x0304, 0x0506, 0x0708, 0x090a }, b[5];
    uint8_t s[10];
    lz_payload_shuffle16(s, a, 5);
    static const uint8_t want[10] = { 0x02, 0x04, 0x06, 0x08, 0x0a, 0x01, 0x03, 0x05, 0x07, 0x09 };
    CHECK(memcmp(s, want, 10) == 0, "shuffle layout");
    lz_payload_unshuffle16(b, s, 5);
    CHECK(memcmp(a, b, 10) == 0, "unshuffle");
}

static void test_roundtrip(void)
{
    const int L = 3, KV = 2, T = 40, d = 16, t0 = 5, n = 29;
    size_t N = (size_t)L * KV * T * d;
    float *k = malloc(N * 4), *v = malloc(N * 4);
    for (size_t i = 0; i < N; i++) {
        k[i] = frand();
        v[i] = frand() * 0.01f;
    }
    k[3] = 0.0f / 0.0f; /* NaN survives as NaN */
    k[7 * d + 1] = -0.0f;
    uint8_t fp[32];
    for (int i = 0; i < 32; i++) fp[i] = (uint8_t)(i * 7);
    lz_payload_codec *c = lz_payload_codec_new();
    char err[256];
    for (int codec = 0; codec <= 2; codec++) {
        for (int variant = 0; variant < 2; variant++) {
            int kept[6] = { 29, 0, 7, 29, 1, 13 }; /* Ada-KV-like unequal counts */
            const int *kp = variant ? kept : NULL;
            lz_payload_src src = { k, v, T, t0, L, KV, d, n, kp, 11, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL };
            void *blob;
            size_t len;
            int rc = lz_payload_encode(c, &src, codec, 3, &blob, &len, err, sizeof err);
            CHECK(rc == 0, "encode codec %d: %s", codec, err);
            if (rc) continue;
            lz_payload_info info;
            rc = lz_payload_parse(blob, len, 1, &info, err, sizeof err);
            CHECK(rc == 0, "parse: %s", err);
            CHECK(info.codec == codec && info.n_layers == L && info.n_kv_heads == KV &&
                      info.head_dim == d && info.n_tokens == n && info.pos_base == 11,
                  "header fields");
            CHECK(memcmp(info.model, fp, 32) == 0, "model fingerprint");
            uint64_t sum = 0;
            for (int i = 0; i < L * KV; i++) sum += kp ? (uint64_t)kp[i] : (uint64_t)n;
            CHECK(info.raw_size == 4 * sum * d, "raw size %llu", (unsigned long long)info.raw_size);
            if (codec == LZ_PAYLOAD_CODEC_RAW) CHECK(info.body_size == info.raw_size, "raw body");

            const int T2 = 33;
            float *k2 = calloc((size_t)L * KV * T2 * d, 4), *v2 = calloc((size_t)L * KV * T2 * d, 4);
            int got_kept[6];
            rc = lz_payload_decode_f32(c, blob, len, k2, v2, T2, got_kept, NULL, err, sizeof err);
            CHECK(rc == 0, "decode: %s", err);
            CHECK(same_bits(k, T, t0, k2, T2, L, KV, d, kp, n), "K bit for bit (codec %d)", codec);
            CHECK(same_bits(v, T, t0, v2, T2, L, KV, d, kp, n), "V bit for bit (codec %d)", codec);
            for (int i = 0; i < L * KV; i++) CHECK(got_kept[i] == (kp ? kp[i] : n), "kept %d", i);

            uint16_t *kb = calloc((size_t)L * KV * n * d, 2), *vb = calloc((size_t)L * KV * n * d, 2);
            rc = lz_payload_decode_bf16(c, blob, len, kb, vb, n, NULL, NULL, err, sizeof err);
            CHECK(rc == 0, "decode bf16: %s", err);
            int okb = 1;
            for (int i = 0; i < L * KV; i++)
                for (int e = 0; e < (kp ? kp[i] : n) * d; e++)
                    okb &= kb[(size_t)i * n * d + e] == lz_f32_to_bf16(k[((size_t)i * T + t0) * d + e]);
            CHECK(okb, "bf16 decode equals the encoder's bf16");

            CHECK(lz_payload_decode_f32(c, blob, len, k2, v2, n - 1, NULL, NULL, err, sizeof err) ==
                      LZ_EINVAL, "stride smaller than n refused");

            /* corruption: every single-byte flip in header, table and body is caught */
            uint8_t *b = blob;
            int caught = 0, tried = 0;
            for (size_t pos = 0; pos < len; pos += (len / 97) + 1) {
                b[pos] ^= 0x10;
                tried++;
                caught += lz_payload_decode_f32(c, blob, len, k2, v2, T2, NULL, NULL, err, sizeof err) != 0;
                b[pos] ^= 0x10;
            }
            CHECK(caught == tried, "%d of %d flips caught", caught, tried);
            CHECK(lz_payload_parse(blob, len - 1, 0, &info, err, sizeof err) == LZ_ECORRUPT,
                  "truncated");
            CHECK(lz_payload_parse(blob, 50, 0, &info, err, sizeof err) == LZ_ECORRUPT, "short");
            b[4] = 9;
            CHECK(lz_payload_parse(blob, len, 0, &info, err, sizeof err) == LZ_EVERSION, "version");
            b[4] = 1;
            b[0] = 'X';
            CHECK(lz_payload_parse(blob, len, 0, &info, err, sizeof err) == LZ_ECORRUPT, "magic");
            b[0] = 'L';
            CHECK(lz_payload_parse(blob, len, 1, &info, err, sizeof err) == 0, "restored");
            free(k2);
            free(v2);
            free(kb);
            free(vb);
            free(blob);
        }
    }
    /* invalid inputs */
    int bad[6] = { 30, 0, 0, 0, 0, 0 };
    lz_payload_src src = { k, v, T, t0, L, KV, d, n, bad, 0, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL };
    void *blob;
    size_t len;
    CHECK(lz_payload_encode(c, &src, 2, 3, &blob, &len, err, sizeof err) == LZ_EINVAL,
          "kept > n refused");
    src.n_kept = NULL;
    src.t0 = 12; /* 12 + 29 > 40 */
    CHECK(lz_payload_encode(c, &src, 2, 3, &blob, &len, err, sizeof err) == LZ_EINVAL,
          "past the stride refused");
    src.t0 = 0;
    CHECK(lz_payload_encode(c, &src, 7, 3, &blob, &len, err, sizeof err) == LZ_EINVAL,
          "unknown codec refused");
    src.dtype = 9;
    CHECK(lz_payload_encode(c, &src, 2, 3, &blob, &len, err, sizeof err) == LZ_EINVAL, "unknown dtype refused");
    src.dtype = LZ_PAYLOAD_DTYPE_BF16;
    /* zero tokens is a valid (empty) payload */
    src.n_tokens = 0;
    CHECK(lz_payload_encode(c, &src, 2, 3, &blob, &len, err, sizeof err) == 0, "empty: %s", err);
    lz_payload_info info;
    CHECK(lz_payload_decode_f32(c, blob, len, k, v, 1, NULL, &info, err, sizeof err) == 0 &&
              info.n_tokens == 0, "empty decode: %s", err);
    free(blob);
    lz_payload_codec_free(c);
    lz_payload_codec_free(NULL);
    free(k);
    free(v);
}

/* fp32 payloads: exact round trip for every codec, bf16 decode rounds. */
static void test_f32(void)
{
    const int L = 2, KV = 3, T = 20, d = 8, n = 17;
    size_t N = (size_t)L * KV * T * d;
    float *k = malloc(N * 4), *v = malloc(N * 4), *k2 = calloc(N, 4), *v2 = calloc(N, 4);
    uint16_t *kb = calloc(N, 2), *vb = calloc(N, 2);
    for (size_t i = 0; i < N; i++) {
        k[i] = frand() * 3.0f;
        v[i] = frand() * 1e-3f;
    }
    uint8_t fp[32] = { 1 };
    lz_payload_codec *c = lz_payload_codec_new();
    char err[256];
    int kept[6] = { 17, 3, 0, 17, 9, 1 };
    for (int codec = 0; codec <= 2; codec++) {
        lz_payload_src src = { k, v, T, 2, L, KV, d, n, kept, 5, fp, LZ_PAYLOAD_DTYPE_F32, NULL, NULL, NULL, NULL };
        void *blob;
        size_t len;
        CHECK(lz_payload_encode(c, &src, codec, 3, &blob, &len, err, sizeof err) == 0, "f32 encode: %s", err);
        lz_payload_info info;
        CHECK(lz_payload_decode_f32(c, blob, len, k2, v2, T, NULL, &info, err, sizeof err) == 0, "f32 decode: %s", err);
        CHECK(info.dtype == LZ_PAYLOAD_DTYPE_F32 && info.raw_size == (uint64_t)2 * 4 * (17 + 3 + 17 + 9 + 1) * d,
              "f32 header: dtype %d raw %llu", info.dtype, (unsigned long long)info.raw_size);
        int exact = 1, rounded = 1;
        CHECK(lz_payload_decode_bf16(c, blob, len, kb, vb, T, NULL, NULL, err, sizeof err) == 0, "bf16 of f32");
        for (int i = 0; i < L * KV; i++)
            for (int e = 0; e < kept[i] * d; e++) {
                size_t src_i = ((size_t)i * T + 2) * d + e, dst = (size_t)i * T * d + e;
                exact &= memcmp(&k[src_i], &k2[dst], 4) == 0 && memcmp(&v[src_i], &v2[dst], 4) == 0;
                rounded &= kb[dst] == lz_f32_to_bf16(k[src_i]) && vb[dst] == lz_f32_to_bf16(v[src_i]);
            }
        CHECK(exact, "f32 payload decodes exactly (codec %d)", codec);
        CHECK(rounded, "f32 payload to bf16 rounds to nearest even (codec %d)", codec);
        free(blob);
    }
    lz_payload_codec_free(c);
    free(k);
    free(v);
    free(k2);
    free(v2);
    free(kb);
    free(vb);
}

/* n random keys and values a tenth their size: the body of the worker and thread tests. */
static void random_kv(float *k, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        k[i] = frand();
        v[i] = frand() * 0.1f;
    }
}

/* Compression on zstd workers (lz_payload_codec_set_threads): a payload of
 * several 1 MiB jobs decodes to the same bits as one compressed in the
 * calling thread, and its bytes do not depend on the worker count. */
static void test_threads(void)
{
    const int L = 4, KV = 2, T = 2048, d = 64, n = 2000; /* 4 MB of bf16 body: 4 jobs */
    size_t N = (size_t)L * KV * T * d;
    float *k = malloc(N * 4), *v = malloc(N * 4), *k2 = calloc(N, 4), *v2 = calloc(N, 4);
    random_kv(k, v, N);
    uint8_t fp[32] = { 7 };
    char err[256];
    lz_payload_src src = { k, v, T, 0, L, KV, d, n, NULL, 3, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL };
    void *blob[3] = { NULL, NULL, NULL };
    size_t len[3] = { 0, 0, 0 };
    const int workers[3] = { 0, 1, 3 };
    for (int w = 0; w < 3; w++) {
        lz_payload_codec *c = lz_payload_codec_new();
        int rc = lz_payload_codec_set_threads(c, workers[w]);
        if (rc && workers[w]) {
            printf("SKIP threads: this libzstd has no multithreading\n");
            lz_payload_codec_free(c);
            goto out;
        }
        CHECK(lz_payload_encode(c, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 3, &blob[w], &len[w], err, sizeof err) == 0,
              "encode with %d workers: %s", workers[w], err);
        memset(k2, 0, N * 4);
        memset(v2, 0, N * 4);
        CHECK(lz_payload_decode_f32(c, blob[w], len[w], k2, v2, T, NULL, NULL, err, sizeof err) == 0,
              "decode of the %d-worker payload: %s", workers[w], err);
        CHECK(same_bits(k, T, 0, k2, T, L, KV, d, NULL, n) && same_bits(v, T, 0, v2, T, L, KV, d, NULL, n),
              "the %d-worker payload decodes to the bf16 of the input", workers[w]);
        lz_payload_codec_free(c);
    }
    CHECK(len[1] == len[2] && memcmp(blob[1], blob[2], len[1]) == 0,
          "payload bytes do not depend on the worker count (%zu and %zu bytes)", len[1], len[2]);
    CHECK(len[1] < len[0] * 1.02 && len[1] > len[0] * 0.98, "workers compress as well (%zu against %zu bytes)",
          len[1], len[0]);
out:
    for (int w = 0; w < 3; w++) free(blob[w]);
    free(k);
    free(v);
    free(k2);
    free(v2);
}

/* Decoding on threads: a payload of many frames (written by workers) decodes
 * to the same bits with 1, 2 and 4 OpenMP threads, through the packed bf16
 * path (frames decompressed in parallel, the byte planes unshuffled straight
 * into K and V) and the strided fp32 path; a damaged middle frame is an
 * error, never a crash or a silent result. */
static void test_parallel_decode(void)
{
    const int L = 4, KV = 2, T = 3000, d = 64, n = 3000; /* 6 MB of bf16 body: 6 frames */
    const size_t N = (size_t)L * KV * T * d;
    float *k = malloc(N * 4), *v = malloc(N * 4);
    uint16_t *k16 = malloc(N * 2), *v16 = malloc(N * 2), *k1 = malloc(N * 2), *v1 = malloc(N * 2);
    random_kv(k, v, N);
    uint8_t fp[32] = { 9 };
    char err[256];
    lz_payload_src src = { k, v, T, 0, L, KV, d, n, NULL, 3, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL };
    lz_payload_codec *c = lz_payload_codec_new();
    void *blob = NULL;
    size_t len = 0;
    if (lz_payload_codec_set_threads(c, 2)) {
        printf("SKIP parallel decode: this libzstd has no multithreading\n");
        goto out;
    }
    CHECK(lz_payload_encode(c, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &blob, &len, err, sizeof err) == 0,
          "encode: %s", err);
    const int threads[3] = { 1, 2, 4 };
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(threads[t]);
        memset(k16, 0, N * 2);
        memset(v16, 0, N * 2);
        CHECK(lz_payload_decode_bf16_packed(c, blob, len, k16, v16, NULL, NULL, err, sizeof err) == 0,
              "packed bf16 decode on %d threads: %s", threads[t], err);
        if (t == 0) {
            memcpy(k1, k16, N * 2);
            memcpy(v1, v16, N * 2);
            int ok = 1;
            for (size_t e = 0; e < N && ok; e++) ok = k16[e] == lz_f32_to_bf16(k[e]) && v16[e] == lz_f32_to_bf16(v[e]);
            CHECK(ok, "the packed decode gives the input's bf16 (one thread)");
        } else {
            CHECK(!memcmp(k1, k16, N * 2) && !memcmp(v1, v16, N * 2), "%d threads decode the same bits as one",
                  threads[t]);
        }
        float *kf = calloc(N, 4), *vf = calloc(N, 4);
        CHECK(lz_payload_decode_f32(c, blob, len, kf, vf, T, NULL, NULL, err, sizeof err) == 0 &&
                  same_bits(k, T, 0, kf, T, L, KV, d, NULL, n) && same_bits(v, T, 0, vf, T, L, KV, d, NULL, n),
              "fp32 decode on %d threads: %s", threads[t], err);
        free(kf);
        free(vf);
    }
    /* a byte of the third frame's compressed data flipped, the checksum made to match: zstd must refuse it */
    {
        uint8_t *bad = malloc(len);
        memcpy(bad, blob, len);
        bad[len / 2] ^= 0x5A;
        lz_payload_info info;
        int prc = lz_payload_parse(bad, len, 1, &info, err, sizeof err);
        CHECK(prc == LZ_ECHECKSUM, "a flipped byte fails the checksum (%d)", prc);
        omp_set_num_threads(4);
        CHECK(lz_payload_decode_bf16_packed(c, bad, len, k16, v16, NULL, NULL, err, sizeof err) != 0,
              "a damaged payload is refused on 4 threads");
        free(bad);
    }
out:
    omp_set_num_threads(1);
    free(blob);
    lz_payload_codec_free(c);
    free(k);
    free(v);
    free(k16);
    free(v16);
    free(k1);
    free(v1);
}

/* A batch (lz_payload_decode_batch): payloads of several shapes and codecs in one call (many
 * frames written by workers, one frame, the zstd and raw codecs, fp32, fp8 (zstd and raw), unequal kept counts,
 * an empty document) decode to exactly the bits each gives alone through the unpacked
 * decoder, on 1 and 4 threads and in waves; a damaged body (checksum), a damaged header and a
 * truncated blob fail alone with their own message while the rest of the batch decodes. */
static void test_batch(void)
{
    enum { NJ = 11 };
    const int L = 2, KV = 2, d = 64;
    const int ntok[NJ] = { 2500, 40, 3000, 300, 1, 0, 700, 1800, 500, 2200, 600 };
    const int codec[NJ] = { 2, 2, 2, 1, 0, 2, 2, 0, 0, 2, 2 }; /* 7, 8: bf16 stored raw */
    const int dtype[NJ] = { 1, 1, 1, 3, 3, 1, 2, 1, 1, 1, 1 }; /* 3: fp8, zstd and raw */
    const int workers[NJ] = { 2, 0, 3, 0, 0, 0, 0, 0, 0, 2, 2 };
    const int damage[NJ] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2 }; /* 1: a body byte, 2: the header's shape */
    uint8_t fp[32] = { 4 };
    char err[256];
    void *blob[NJ + 1] = { 0 };
    size_t len[NJ + 1] = { 0 };
    int kept[NJ][4];
    uint16_t *want_k[NJ], *want_v[NJ], *got_k[NJ], *got_v[NJ];
    lz_payload_codec *enc = lz_payload_codec_new(), *c = lz_payload_codec_new();
    for (int j = 0; j < NJ; j++) {
        const int n = ntok[j], T = n > 0 ? n : 1;
        const size_t N = (size_t)L * KV * T * d;
        float *k = malloc(N * 4), *v = malloc(N * 4);
        random_kv(k, v, N);
        for (int h = 0; h < L * KV; h++) kept[j][h] = j == 2 || j == 7 ? n - (h * n) / 5 : n; /* Ada-KV-like lengths */
        lz_payload_src src = { k, v, T, 0, L, KV, d, n, kept[j], 0, fp, dtype[j], NULL, NULL, NULL, NULL };
        lz_payload_codec_set_threads(enc, workers[j]);
        CHECK(lz_payload_encode(enc, &src, codec[j], 1, &blob[j], &len[j], err, sizeof err) == 0, "encode %d: %s", j, err);
        lz_payload_info info;
        lz_payload_parse(blob[j], len[j], 0, &info, err, sizeof err);
        const size_t half = (size_t)info.n_kept_sum * d + 1;
        want_k[j] = calloc(half, 2), want_v[j] = calloc(half, 2), got_k[j] = calloc(half, 2), got_v[j] = calloc(half, 2);
        /* the reference: the unpacked decoder (one thread), its rows packed head after head */
        uint16_t *ku = calloc(N, 2), *vu = calloc(N, 2);
        CHECK(lz_payload_decode_bf16(c, blob[j], len[j], ku, vu, T, NULL, NULL, err, sizeof err) == 0, "ref %d: %s", j, err);
        size_t o = 0;
        for (int h = 0; h < L * KV; h++) {
            memcpy(want_k[j] + o, ku + (size_t)h * T * d, (size_t)kept[j][h] * d * 2);
            memcpy(want_v[j] + o, vu + (size_t)h * T * d, (size_t)kept[j][h] * d * 2);
            o += (size_t)kept[j][h] * d;
        }
        free(ku);
        free(vu);
        free(k);
        free(v);
        uint8_t *b = blob[j];
        if (damage[j] == 1) b[len[j] - len[j] / 3] ^= 0x21;
        if (damage[j] == 2) b[16] ^= 0x40; /* head_dim */
    }
    blob[NJ] = blob[0], len[NJ] = len[0] / 2; /* truncated */
    const int threads[2] = { 1, 4 };
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(threads[t]);
        lz_payload_job jobs[NJ + 1];
        int kt[NJ + 1][4];
        uint16_t dummy[8];
        for (int j = 0; j <= NJ; j++) {
            jobs[j] = (lz_payload_job){.blob = blob[j], .len = len[j], .k = j < NJ ? got_k[j] : dummy,
                                       .v = j < NJ ? got_v[j] : dummy, .n_kept = kt[j]};
            if (j < NJ) memset(got_k[j], 0, 2), memset(got_v[j], 0, 2);
        }
        int failed = lz_payload_decode_batch(c, jobs, NJ + 1);
        CHECK(failed == 4, "%d threads: 4 of %d payloads fail (%d)", threads[t], NJ + 1, failed);
        CHECK(jobs[8].status == LZ_ECHECKSUM && strstr(jobs[8].err, "CRC32C"), "a damaged raw body: %d %s",
              jobs[8].status, jobs[8].err);
        CHECK(jobs[9].status == LZ_ECHECKSUM && strstr(jobs[9].err, "CRC32C"), "a damaged body: %d %s",
              jobs[9].status, jobs[9].err);
        CHECK(jobs[10].status == LZ_ECORRUPT || jobs[10].status == LZ_ECHECKSUM, "a damaged header: %d %s",
              jobs[10].status, jobs[10].err);
        CHECK(jobs[NJ].status == LZ_ECORRUPT, "a truncated blob: %d %s", jobs[NJ].status, jobs[NJ].err);
        for (int j = 0; j < 8; j++) {
            const size_t half = (size_t)jobs[j].info.n_kept_sum * d;
            CHECK(jobs[j].status == 0 && !memcmp(got_k[j], want_k[j], half * 2) && !memcmp(got_v[j], want_v[j], half * 2) &&
                      !memcmp(kt[j], kept[j], sizeof kept[j]),
                  "%d threads: payload %d (%d tokens, codec %d, dtype %d) decodes to the reference bits: %s",
                  threads[t], j, ntok[j], codec[j], dtype[j], jobs[j].err);
        }
    }
    omp_set_num_threads(1);
    lz_payload_info ri;
    CHECK(lz_payload_parse(blob[7], len[7], 0, &ri, err, sizeof err) == 0 && ri.codec == LZ_PAYLOAD_CODEC_RAW &&
              lz_payload_batch_format(&ri), "bf16 stored raw is decoded by the batch (checksums and copies on threads)");
    for (int j = 0; j < NJ; j++) free(blob[j]), free(want_k[j]), free(want_v[j]), free(got_k[j]), free(got_v[j]);
    lz_payload_codec_free(enc);
    lz_payload_codec_free(c);
}

/* e4m3 (base/fp8.h): every finite code decodes and encodes back to itself, midpoints round
 * to even, out of range saturates at 448, NaN stays NaN, subnormals are exact. */
static void test_e4m3(void)
{
    int ok = 1;
    for (int b = 0; b < 256; b++) {
        const float f = lz_e4m3_to_f32((uint8_t)b);
        if ((b & 0x7f) == 0x7f) { ok &= isnan(f); continue; }
        ok &= lz_f32_to_e4m3(f) == b || (f == 0 && (lz_f32_to_e4m3(f) & 0x7f) == 0);
    }
    CHECK(ok, "every e4m3 code round-trips");
    ok = 1;
    for (int b = 0; b < 0x7e; b++) {
        const float lo = lz_e4m3_to_f32((uint8_t)b), hi = lz_e4m3_to_f32((uint8_t)(b + 1));
        ok &= lz_f32_to_e4m3((lo + hi) / 2) == ((b & 1) ? b + 1 : b);
        ok &= lz_f32_to_e4m3(lo + (hi - lo) * 0.3f) == b && lz_f32_to_e4m3(lo + (hi - lo) * 0.7f) == b + 1;
    }
    CHECK(ok, "midpoints round to even, other values to the nearest code");
    CHECK(lz_e4m3_to_f32(0x7e) == 448.0f && lz_f32_to_e4m3(1e9f) == 0x7e && lz_f32_to_e4m3(-500.0f) == 0xfe,
          "448 is the largest; beyond it saturates");
    CHECK(lz_e4m3_to_f32(0x01) == 0.001953125f && lz_e4m3_to_f32(0x08) == 0.015625f, "subnormal and first normal");
    CHECK((lz_f32_to_e4m3(NAN) & 0x7f) == 0x7f, "NaN stays NaN");
    /* the vectorized encoder gives the scalar one's bits, over every magnitude and the specials */
    enum { M = 200000 };
    float *x = malloc(M * sizeof *x);
    uint8_t *a = malloc(M), *b = malloc(M);
    for (int i = 0; i < M; i++) x[i] = (float)((lz_test_u01(&rng) - 0.5) * ldexp(1.0, (int)(lz_test_u01(&rng) * 40) - 20));
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 0.0f, x[4] = -0.0f, x[5] = 448.0f, x[6] = 464.0f, x[7] = 0.0078125f;
    const float mul = 1.7f;
    lz_f32_to_e4m3_n(a, x, M, mul);
    ok = 1;
    for (int i = 0; i < M; i++) {
        b[i] = lz_f32_to_e4m3(x[i] * mul);
        ok &= a[i] == b[i] || (isnan(x[i]) && (a[i] & 0x7f) == 0x7f);
    }
    CHECK(ok, "lz_f32_to_e4m3_n equals lz_f32_to_e4m3 on %d values", M);
    free(x), free(a), free(b);
}

/* An fp8 payload: version 2, a scale per (part, layer, kv head) = its absolute maximum / 448,
 * every value decoded (fp32 strided and packed, bf16 packed, a batch) as exactly
 * e4m3(x / scale) * scale, within e4m3's bound of x; Ada-KV kept counts; raw and zstd codecs
 * (shuffle asked for: stored as zstd, one byte is one plane); a version-1 header claiming fp8
 * is refused. */
static void test_fp8(void)
{
    const int L = 3, KV = 2, T = 50, d = 32, n = 41, nh = L * KV;
    const size_t N = (size_t)nh * T * d;
    float *k = malloc(N * 4), *v = malloc(N * 4), *kf = calloc(N, 4), *vf = calloc(N, 4);
    int kept[6];
    for (int h = 0; h < nh; h++) kept[h] = n - 7 * h;
    for (size_t i = 0; i < N; i++) k[i] = frand() * (1 + (float)(i % d)), v[i] = frand() * 0.05f;
    k[5] = 0;
    uint8_t fp[32] = { 8 };
    char err[256];
    lz_payload_src src = { k, v, T, 2, L, KV, d, n, kept, 7, fp, LZ_PAYLOAD_DTYPE_FP8, NULL, NULL, NULL, NULL };
    lz_payload_codec *c = lz_payload_codec_new();
    const int codecs[3] = { LZ_PAYLOAD_CODEC_RAW, LZ_PAYLOAD_CODEC_ZSTD, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD };
    for (int ci = 0; ci < 3; ci++) {
        void *blob = NULL;
        size_t len = 0;
        CHECK(lz_payload_encode(c, &src, codecs[ci], 1, &blob, &len, err, sizeof err) == 0, "fp8 encode: %s", err);
        lz_payload_info info;
        CHECK(lz_payload_parse(blob, len, 1, &info, err, sizeof err) == 0 && info.version == 2 &&
                  info.dtype == LZ_PAYLOAD_DTYPE_FP8 && info.codec == (ci ? LZ_PAYLOAD_CODEC_ZSTD : LZ_PAYLOAD_CODEC_RAW),
              "fp8 header: version %d dtype %d codec %d (%s)", info.version, info.dtype, info.codec, err);
        uint64_t sum = 0;
        for (int h = 0; h < nh; h++) sum += (uint64_t)kept[h];
        CHECK(info.raw_size == 8 * (uint64_t)nh + 2 * sum * d, "fp8 raw size: scales + a byte a value (%llu)",
              (unsigned long long)info.raw_size);
        CHECK(lz_payload_decode_f32(c, blob, len, kf, vf, T, NULL, NULL, err, sizeof err) == 0, "fp8 decode: %s", err);
        const size_t half = sum * d;
        float *kp = malloc(half * 4), *vp = malloc(half * 4);
        uint16_t *kb = malloc(half * 2), *vb = malloc(half * 2), *kb2 = malloc(half * 2), *vb2 = malloc(half * 2);
        CHECK(lz_payload_decode_f32_packed(c, blob, len, kp, vp, NULL, NULL, err, sizeof err) == 0 &&
                  lz_payload_decode_bf16_packed(c, blob, len, kb, vb, NULL, NULL, err, sizeof err) == 0,
              "fp8 packed decodes: %s", err);
        lz_payload_job job = {.blob = blob, .len = len, .k = kb2, .v = vb2};
        CHECK(lz_payload_decode_batch(c, &job, 1) == 0 && !memcmp(kb, kb2, half * 2) && !memcmp(vb, vb2, half * 2),
              "an fp8 payload in a batch decodes as alone: %s", job.err);
        /* kept as fp8 (a job with k8): the bytes and scales, which dequantise to the values above */
        uint8_t *k8 = malloc(half), *v8 = malloc(half);
        float ks8[6], vs8[6];
        lz_payload_job j8 = {.blob = blob, .len = len, .k8 = k8, .v8 = v8, .k_scales = ks8, .v_scales = vs8};
        CHECK(lz_payload_decode_batch(c, &j8, 1) == 0, "an fp8 payload kept as fp8: %s", j8.err);
        int kept8 = 1;
        size_t o8 = 0;
        for (int part = 0; part < 2; part++)
            for (int h = 0; h < nh; h++) {
                const float sc = (part ? vs8 : ks8)[h];
                for (size_t e = 0; e < (size_t)kept[h] * d; e++) {
                    const size_t at = (part ? o8 - half : o8) + e;
                    kept8 &= lz_e4m3_to_f32((part ? v8 : k8)[at]) * sc == (part ? vp : kp)[at];
                }
                o8 += (size_t)kept[h] * d;
            }
        CHECK(kept8, "codec %d: the fp8 bytes times their scales are the decoded values", codecs[ci]);
        free(k8), free(v8);
        int exact = 1, bound = 1, packed = 1;
        size_t o = 0;
        for (int part = 0; part < 2; part++)
            for (int h = 0; h < nh; h++) {
                const float *x = (part ? v : k) + ((size_t)h * T + 2) * d;
                float amax = 0;
                for (size_t e = 0; e < (size_t)kept[h] * d; e++) amax = fmaxf(amax, fabsf(x[e]));
                const float sc = amax > 0 ? amax / 448.0f : 1.0f;
                const float *got = (part ? vf : kf) + (size_t)h * T * d;
                for (size_t e = 0; e < (size_t)kept[h] * d; e++) {
                    const float want = lz_e4m3_to_f32(lz_f32_to_e4m3(x[e] * (1.0f / sc))) * sc;
                    exact &= got[e] == want;
                    bound &= fabsf(got[e] - x[e]) <= fmaxf(fabsf(x[e]) * 0.0625f, sc * 0.0009765625f) * 1.0001f;
                    const size_t at = (part ? o - half : o) + e;
                    packed &= (part ? vp : kp)[at] == want && (part ? vb : kb)[at] == lz_f32_to_bf16(want);
                }
                o += (size_t)kept[h] * d;
            }
        CHECK(exact, "codec %d: every value is e4m3(x / scale) * scale, scale = max |x| / 448", codecs[ci]);
        CHECK(bound, "codec %d: within 2^-4 of |x| (2^-10 scale for subnormals)", codecs[ci]);
        CHECK(packed, "codec %d: the packed fp32 and bf16 decodes hold the same values", codecs[ci]);
        if (ci == 0) {
            uint8_t *bad = malloc(len);
            memcpy(bad, blob, len);
            bad[4] = 1; /* version 1 with dtype fp8 */
            CHECK(lz_payload_parse(bad, len, 0, &info, err, sizeof err) != 0, "fp8 under version 1 is refused");
            free(bad);
        }
        free(kp), free(vp), free(kb), free(vb), free(kb2), free(vb2);
        free(blob);
    }
    { /* fp8 bytes asked of a payload that is not fp8: refused, nothing written */
        lz_payload_src s16 = src;
        s16.dtype = LZ_PAYLOAD_DTYPE_BF16;
        void *blob = NULL;
        size_t len = 0;
        uint8_t k8[16], v8[16];
        float sc[12];
        CHECK(lz_payload_encode(c, &s16, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &blob, &len, err, sizeof err) == 0, "bf16 encode: %s", err);
        lz_payload_job j = {.blob = blob, .len = len, .k8 = k8, .v8 = v8, .k_scales = sc, .v_scales = sc + 6};
        CHECK(lz_payload_decode_batch(c, &j, 1) == 1 && j.status == LZ_EUNSUPPORTED && strstr(j.err, "fp8"),
              "fp8 bytes of a bf16 payload: status %d (%s)", j.status, j.err);
        free(blob);
    }
    lz_payload_codec_free(c);
    free(k), free(v), free(kf), free(vf);
}

/* Planes already of the payload's dtype (the GPU ingest's bf16 bytes, or fp8 bytes quantised
 * on the device by kernels/lz_fp8_quant.h, here by its CPU reference) pack to the very bytes
 * of the fp32 path for values a bf16 holds; a NaN or Inf in an fp8 payload's values is an
 * error naming the part, layer and kv head (never a saturated value); planes with a kept
 * table or without fp8's scales are refused. */
static void test_planes(void)
{
    const int L = 2, KV = 3, d = 16, n = 37, nh = L * KV;
    const size_t N = (size_t)nh * n * d;
    float *k = malloc(N * 4), *v = malloc(N * 4);
    uint16_t *kb = malloc(N * 2), *vb = malloc(N * 2);
    for (size_t i = 0; i < N; i++) {
        kb[i] = lz_f32_to_bf16(frand() * (1 + (float)(i % 7))), vb[i] = lz_f32_to_bf16(frand() * 0.01f);
        k[i] = lz_bf16_to_f32(kb[i]), v[i] = lz_bf16_to_f32(vb[i]);
    }
    uint8_t *k8 = malloc(N), *v8 = malloc(N), fp[32] = { 3 };
    float ks[6], vs[6];
    int bad = 0;
    lz_fp8_quant_params q = {k8, ks, &bad, kb, (int64_t)n * d, nh};
    CHECK(lz_fp8_quant_ref(&q, NULL) == 0 && bad == 0, "fp8 quantisation reference");
    q = (lz_fp8_quant_params){v8, vs, &bad, vb, (int64_t)n * d, nh};
    CHECK(lz_fp8_quant_ref(&q, NULL) == 0 && bad == 0, "fp8 quantisation reference (V)");
    char err[256];
    lz_payload_codec *c = lz_payload_codec_new();
    const int dtypes[3] = { LZ_PAYLOAD_DTYPE_BF16, LZ_PAYLOAD_DTYPE_FP8, LZ_PAYLOAD_DTYPE_F32 };
    for (int t = 0; t < 3; t++) {
        const lz_payload_src a = {.k = k, .v = v, .stride = n, .n_layers = L, .n_kv_heads = KV, .head_dim = d,
                                  .n_tokens = n, .pos_base = 5, .model = fp, .dtype = dtypes[t]};
        lz_payload_src b = a;
        b.k = b.v = NULL;
        b.k_planes = t == 0 ? (const void *)kb : t == 1 ? (const void *)k8 : (const void *)k;
        b.v_planes = t == 0 ? (const void *)vb : t == 1 ? (const void *)v8 : (const void *)v;
        if (t == 1) b.k_scales = ks, b.v_scales = vs;
        void *ba = NULL, *bb = NULL;
        size_t la = 0, lb = 0;
        CHECK(lz_payload_encode(c, &a, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &ba, &la, err, sizeof err) == 0 &&
                  lz_payload_encode(c, &b, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &bb, &lb, err, sizeof err) == 0,
              "%s planes encode: %s", lz_payload_dtype_name(dtypes[t]), err);
        CHECK(la == lb && !memcmp(ba, bb, la), "%s: planes pack to the fp32 path's bytes (%zu and %zu)",
              lz_payload_dtype_name(dtypes[t]), la, lb);
        free(ba), free(bb);
        if (t == 1) {
            lz_payload_src r = b;
            r.k_scales = NULL;
            CHECK(lz_payload_encode(c, &r, LZ_PAYLOAD_CODEC_RAW, 1, &bb, &lb, err, sizeof err) != 0 && strstr(err, "scales"),
                  "fp8 planes without scales refused: %s", err);
            int kept[6] = { 1, 2, 3, 4, 5, 6 };
            r = b, r.n_kept = kept;
            CHECK(lz_payload_encode(c, &r, LZ_PAYLOAD_CODEC_RAW, 1, &bb, &lb, err, sizeof err) != 0,
                  "planes with a kept table refused");
            lz_payload_src nanv = a;
            v[(size_t)(1 * KV + 2) * n * d + 5] = NAN; /* V of layer 1, kv head 2 */
            k[(size_t)(1 * KV + 0) * n * d + 9] = INFINITY; /* and K of layer 1, kv head 0: K is named first */
            CHECK(lz_payload_encode(c, &nanv, LZ_PAYLOAD_CODEC_RAW, 1, &bb, &lb, err, sizeof err) != 0 &&
                      strstr(err, "NaN or Inf in K of layer 1, kv head 0"),
                  "fp8: a non-finite value is an error naming it: %s", err);
            k[(size_t)(1 * KV + 0) * n * d + 9] = 0;
            CHECK(lz_payload_encode(c, &nanv, LZ_PAYLOAD_CODEC_RAW, 1, &bb, &lb, err, sizeof err) != 0 &&
                      strstr(err, "NaN or Inf in V of layer 1, kv head 2"),
                  "fp8: a NaN in V named: %s", err);
            v[(size_t)(1 * KV + 2) * n * d + 5] = 0;
        }
    }
    lz_payload_codec_free(c);
    free(k), free(v), free(kb), free(vb), free(k8), free(v8);
}

/* The tuned levels (<= LZ_PAYLOAD_TUNED_LEVEL: only matches of 7+ bytes):
 * a body of normally distributed bf16 keys and values (per-column scales,
 * as rotary keys have) decodes to the same bits at levels 1 and 3, and level
 * 1 stores no more bytes than level 3 (the planes' gain is in the entropy
 * coding of the literals, not in matches). */
static void test_tuned_level(void)
{
    const int L = 4, KV = 2, T = 700, d = 128, n = 700;
    size_t N = (size_t)L * KV * T * d;
    float *k = malloc(N * 4), *v = malloc(N * 4), *k2 = calloc(N, 4), *v2 = calloc(N, 4);
    for (size_t i = 0; i < N; i++) { /* Box-Muller */
        const double u1 = 1.0 - lz_test_u01(&rng), u2 = lz_test_u01(&rng);
        const float g = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
        k[i] = g * (1.0f + (float)(i % d) / 16.0f);
        v[i] = g * 0.3f;
    }
    uint8_t fp[32] = { 9 };
    char err[256];
    lz_payload_src src = { k, v, T, 0, L, KV, d, n, NULL, 3, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL };
    lz_payload_codec *c = lz_payload_codec_new();
    CHECK(c && lz_payload_codec_set_threads(c, 1) == 0, "codec");
    size_t len[2] = { 0, 0 };
    const int levels[2] = { 1, 3 };
    for (int i = 0; c && i < 2; i++) {
        void *blob = NULL;
        CHECK(lz_payload_encode(c, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, levels[i], &blob, &len[i], err, sizeof err) == 0,
              "encode at level %d: %s", levels[i], err);
        CHECK(blob && lz_payload_decode_f32(c, blob, len[i], k2, v2, T, NULL, NULL, err, sizeof err) == 0 &&
                  same_bits(k, T, 0, k2, T, L, KV, d, NULL, n) && same_bits(v, T, 0, v2, T, L, KV, d, NULL, n),
              "level %d decodes to the bf16 of the input: %s", levels[i], err);
        free(blob);
    }
    CHECK(len[0] > 0 && len[0] <= len[1], "level 1 (tuned) stores %zu bytes, level 3 %zu", len[0], len[1]);
    printf("normal bf16 K/V, %zu bytes raw: level 1 (tuned) %zu bytes, level 3 %zu\n", 2 * N * 2 * (size_t)n / T,
           len[0], len[1]);
    lz_payload_codec_free(c);
    free(k);
    free(v);
    free(k2);
    free(v2);
}

int main(void)
{
    test_crc();
    test_shuffle();
    test_roundtrip();
    test_f32();
    test_threads();
    test_parallel_decode();
    test_batch();
    test_e4m3();
    test_fp8();
    test_planes();
    test_tuned_level();
    return lz_test_done();
}
