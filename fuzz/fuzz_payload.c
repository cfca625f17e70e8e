/* fuzz_payload.c - libFuzzer target: payload decoding (store/payload.h, read
 * through its public API only). The input's first byte: bit 0 set = write
 * the right CRC32C into the blob first (schema/PAYLOAD.md: offset 80, over
 * the blob with those 4 bytes zero), so mutations reach the decoders
 * instead of stopping at the checksum. The rest is the blob.
 * Invariants beside the sanitizers, for a blob that parses:
 *   - the strided, packed and batch decoders agree;
 *   - re-encoding the decoded KV (same dtype, codec, kept table, model,
 *     base) gives a blob that decodes to the same values, and re-encoding
 *     that blob's values gives the same bytes again (decode then encode is
 *     a fixed point);
 *   - a raw-codec blob with zero reserved bytes re-encodes to exactly the
 *     input's bytes (no NaN: bf16 stores NaN quiet).
 * Decoding is bounded (4 MiB of values) so that the fuzzer measures the
 * parser, not memory. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/payload.h"
#include "fuzz/fuzz_common.h"

enum { CRC_AT = 80, RESERVED_AT = 84, RESERVED_LEN = 12 }; /* schema/PAYLOAD.md */

static lz_payload_codec *codec;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    codec = lz_payload_codec_new();
    if (!codec) abort();
    return 0;
}

static uint32_t blob_crc(const uint8_t *b, size_t len)
{
    static const uint8_t zero[4];
    uint32_t c = lz_crc32c(0, b, CRC_AT);
    c = lz_crc32c(c, zero, 4);
    return lz_crc32c(c, b + CRC_AT + 4, len - CRC_AT - 4);
}

/* Two float arrays equal, every NaN equal to any NaN. */
static int same_values(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])) || memcmp(&a[i], &b[i], 4) == 0)) return 0;
    return 1;
}

typedef struct {
    lz_payload_info info;
    int *kept;
    float *k, *v;   /* (L, KV, n, d), rows past a head's kept count zero */
    size_t n_vals;  /* floats in each of k and v */
} decoded;

static void decoded_free(decoded *d)
{
    free(d->kept);
    free(d->k);
    free(d->v);
    memset(d, 0, sizeof *d);
}

/* Decodes blob into d (strided); 0, or -1 when it does not decode. */
static int decode(const uint8_t *blob, size_t len, decoded *d)
{
    memset(d, 0, sizeof *d);
    char err[256];
    if (lz_payload_parse(blob, len, 1, &d->info, err, sizeof err)) return -1;
    const lz_payload_info *in = &d->info;
    const size_t nh = (size_t)in->n_layers * (size_t)in->n_kv_heads;
    const double vals = (double)nh * (in->n_tokens ? in->n_tokens : 1) * in->head_dim;
    if (vals > (1 << 20) || in->raw_size > (4u << 20)) return -1; /* the fuzzer's bound, not the format's */
    d->n_vals = (size_t)vals;
    d->kept = malloc(sizeof(int) * nh);
    d->k = calloc(d->n_vals, sizeof(float));
    d->v = calloc(d->n_vals, sizeof(float));
    if (!d->kept || !d->k || !d->v) { decoded_free(d); return -1; }
    const int stride = in->n_tokens ? in->n_tokens : 1;
    if (lz_payload_decode_f32(codec, blob, len, d->k, d->v, stride, d->kept, NULL, err, sizeof err)) {
        decoded_free(d);
        return -1;
    }
    return 0;
}

/* The packed and batch decoders against the strided one. */
static void check_packed(const uint8_t *blob, size_t len, const decoded *d)
{
    const lz_payload_info *in = &d->info;
    const size_t rows = (size_t)in->n_kept_sum, dd = (size_t)in->head_dim, nh = (size_t)in->n_layers * in->n_kv_heads;
    float *pk = malloc(sizeof(float) * (rows * dd + 1)), *pv = malloc(sizeof(float) * (rows * dd + 1));
    uint16_t *bk = malloc(2 * (rows * dd + 1)), *bv = malloc(2 * (rows * dd + 1));
    uint16_t *jk = malloc(2 * (rows * dd + 1)), *jv = malloc(2 * (rows * dd + 1));
    char err[256];
    if (pk && pv && bk && bv && jk && jv) {
        FUZZ_CHECK(lz_payload_decode_f32_packed(codec, blob, len, pk, pv, NULL, NULL, err, sizeof err) == 0, "packed: %s", err);
        const int stride = in->n_tokens ? in->n_tokens : 1;
        size_t row = 0;
        for (size_t h = 0; h < nh; h++) {
            const size_t at = h * (size_t)stride * dd;
            FUZZ_CHECK(same_values(pk + row * dd, d->k + at, (size_t)d->kept[h] * dd) &&
                       same_values(pv + row * dd, d->v + at, (size_t)d->kept[h] * dd), "packed head %zu differs", h);
            row += (size_t)d->kept[h];
        }
        FUZZ_CHECK(lz_payload_decode_bf16_packed(codec, blob, len, bk, bv, NULL, NULL, err, sizeof err) == 0,
                   "bf16 packed: %s", err);
        lz_payload_job job = { .blob = blob, .len = len, .k = jk, .v = jv };
        FUZZ_CHECK(lz_payload_decode_batch(codec, &job, 1) == 0 && job.status == 0, "batch: %s", job.err);
        FUZZ_CHECK(memcmp(jk, bk, 2 * rows * dd) == 0 && memcmp(jv, bv, 2 * rows * dd) == 0, "batch and bf16 packed differ");
    }
    free(pk); free(pv); free(bk); free(bv); free(jk); free(jv);
}

/* Encodes d's values as d's header says. */
static int encode(const decoded *d, void **out, size_t *out_len)
{
    const lz_payload_info *in = &d->info;
    lz_payload_src src = {
        .k = d->k, .v = d->v, .stride = in->n_tokens ? in->n_tokens : 1, .t0 = 0, .n_layers = in->n_layers,
        .n_kv_heads = in->n_kv_heads, .head_dim = in->head_dim, .n_tokens = in->n_tokens, .n_kept = d->kept,
        .pos_base = in->pos_base, .model = in->model, .dtype = in->dtype,
    };
    char err[256];
    int rc = lz_payload_encode(codec, &src, in->codec, 1, out, out_len, err, sizeof err);
    FUZZ_CHECK(rc == 0, "re-encoding a decoded payload: %s", err);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const size_t len = size - 1;
    uint8_t *blob = malloc(len ? len : 1); /* exact size: ASan sees overreads */
    if (!blob) return 0;
    memcpy(blob, data + 1, len);
    if ((data[0] & 1) && len >= LZ_PAYLOAD_HEADER_SIZE) {
        uint32_t c = blob_crc(blob, len);
        memcpy(blob + CRC_AT, &c, 4); /* little-endian host */
    }
    decoded x;
    if (decode(blob, len, &x) == 0) {
        check_packed(blob, len, &x);
        void *y = NULL, *z = NULL;
        size_t ylen = 0, zlen = 0;
        if (encode(&x, &y, &ylen) == 0) {
            decoded dy;
            FUZZ_CHECK(decode(y, ylen, &dy) == 0, "the re-encoded blob does not decode");
            FUZZ_CHECK(same_values(dy.k, x.k, x.n_vals) && same_values(dy.v, x.v, x.n_vals), "re-encoded values differ");
            if (encode(&dy, &z, &zlen) == 0)
                FUZZ_CHECK(zlen == ylen && memcmp(y, z, ylen) == 0, "decode then encode is not a fixed point");
            int nan = 0;
            for (size_t i = 0; i < x.n_vals && !nan; i++) nan = isnan(x.k[i]) || isnan(x.v[i]);
            static const uint8_t zero[RESERVED_LEN];
            if (x.info.codec == LZ_PAYLOAD_CODEC_RAW && !nan && memcmp(blob + RESERVED_AT, zero, RESERVED_LEN) == 0)
                FUZZ_CHECK(ylen == len && memcmp(y, blob, len) == 0, "a raw payload re-encodes to other bytes");
            decoded_free(&dy);
        }
        free(y);
        free(z);
        decoded_free(&x);
    }
    free(blob);
    return 0;
}
