/* bench_codec.c - where the payload codec's time goes on a body of Llama-3-8B's
 * shape (32 layers, 8 kv heads of 128, 175 tokens; synthetic normal K with
 * per-column scales, as rotary keys have, and V), one thread:
 *   1. lz_payload_encode (byte shuffle + zstd) at levels 1 (tuned: matches of
 *      7+ bytes in a 256-entry table, store/payload.c) and 3: MB/s and ratio;
 *   2. the shuffled planes alone (1 MiB of each), zstd at level 3, level 1,
 *      and level 1 with the tuned parameters: ratio and MB/s (why the tuning);
 *   3. the fp32 -> bf16 rounding: lz_f32_to_bf16 a value at a time against
 *      lz_f32_to_bf16_n (base/half.h), in cache (one head's slice) and not;
 *   4. decoding a payload as lazyingest writes it (1 MiB frames, level 1) to
 *      bf16 K/V: the strided decode on one thread (one zstd call, the planes
 *      unshuffled into a scratch copy, then copied element by element) against
 *      the packed decode (frames on every thread, the planes unshuffled straight
 *      into K and V), one thread and all (OMP_NUM_THREADS): MB/s of bf16 K+V.
 * usage: bench_codec [--reps N]   (bench/RESULTS.md, "Store and codec")
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "base/clock.h"
#include "base/half.h"
#include "store/payload.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float gauss(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const double u1 = ((rng >> 11) + 1.0) / 9007199254740993.0;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const double u2 = (rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* zstd of src[n] at level, tuned or not: ratio and MB/s over reps runs */
static void plane(const char *name, const uint8_t *src, size_t n, int level, int tuned, int reps)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    size_t cap = ZSTD_compressBound(n), r = 0;
    void *dst = malloc(cap);
    const double t0 = lz_now_s();
    for (int i = 0; i < reps; i++) {
        ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
        if (tuned) {
            ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, 8);
            ZSTD_CCtx_setParameter(c, ZSTD_c_minMatch, 7);
        }
        ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
        r = ZSTD_compress2(c, dst, cap, src, n);
    }
    const double t = lz_now_s() - t0;
    printf("| %s | %d%s | %.3f | %.0f |\n", name, level, tuned ? " (tuned)" : "", ZSTD_isError(r) ? 0.0 : (double)n / r,
           reps * n / 1e6 / t);
    free(dst);
    ZSTD_freeCCtx(c);
}

int main(int argc, char **argv)
{
    int reps = argc > 2 && !strcmp(argv[1], "--reps") ? atoi(argv[2]) : 5;
    if (reps < 1) reps = 1;
    const int L = 32, KV = 8, d = 128, n = 175;
    const size_t N = (size_t)L * KV * n * d;
    float *k = malloc(N * 4), *v = malloc(N * 4);
    uint16_t *h = malloc(N * 2);
    uint8_t *sh = malloc(N * 2);
    if (!k || !v || !h || !sh) return 1;
    for (size_t i = 0; i < N; i++) {
        k[i] = gauss() * (1.0f + (float)(i % d) / 16.0f);
        v[i] = gauss() * 0.3f;
    }
    printf("body: %d layers x %d kv heads x %d tokens x %d, K and V bf16: %.1f MB; one thread\n\n", L, KV, n, d,
           2.0 * N * 2 / 1e6);
    /* 1 */
    lz_payload_codec *c = lz_payload_codec_new();
    if (!c || lz_payload_codec_set_threads(c, 1)) return 1;
    uint8_t fp[32] = { 0 };
    lz_payload_src src = { k, v, n, 0, L, KV, d, n, NULL, 20, fp, LZ_PAYLOAD_DTYPE_BF16 };
    printf("| lz_payload_encode, shuffle + zstd | level | ratio | MB/s of bf16 K+V |\n|---|---|---|---|\n");
    for (int level = 1; level <= 3; level += 2) {
        char err[256];
        void *blob = NULL;
        size_t len = 0;
        const double t0 = lz_now_s();
        for (int i = 0; i < reps; i++) {
            free(blob);
            blob = NULL;
            if (lz_payload_encode(c, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, level, &blob, &len, err, sizeof err)) {
                fprintf(stderr, "encode: %s\n", err);
                return 1;
            }
        }
        const double t = lz_now_s() - t0;
        printf("| body | %d | %.3f | %.0f |\n", level, 2.0 * N * 2 / len, reps * 2.0 * N * 2 / 1e6 / t);
        free(blob);
    }
    lz_payload_codec_free(c);
    /* 4: decode (placed here to reuse the body; printed last) */
    char dec_rows[1024] = "";
    {
        lz_payload_codec *cw = lz_payload_codec_new();
        char err[256];
        void *blob = NULL;
        size_t len = 0;
        if (!cw || lz_payload_codec_set_threads(cw, 2) ||
            lz_payload_encode(cw, &src, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &blob, &len, err, sizeof err)) {
            fprintf(stderr, "encode for decode: %s\n", err);
            return 1;
        }
        uint16_t *dk = malloc(N * 2), *dv = malloc(N * 2);
        const int all = omp_get_max_threads();
        double mbs[3];
        for (int way = 0; way < 3; way++) {
            omp_set_num_threads(way == 2 ? all : 1);
            const double t0 = lz_now_s();
            for (int i = 0; i < reps; i++) {
                int rc = way == 0 ? lz_payload_decode_bf16(cw, blob, len, dk, dv, n, NULL, NULL, err, sizeof err)
                                  : lz_payload_decode_bf16_packed(cw, blob, len, dk, dv, NULL, NULL, err, sizeof err);
                if (rc) { fprintf(stderr, "decode: %s\n", err); return 1; }
            }
            mbs[way] = reps * 2.0 * N * 2 / 1e6 / (lz_now_s() - t0);
        }
        omp_set_num_threads(all);
        snprintf(dec_rows, sizeof dec_rows,
                 "| strided decode, one zstd call, unshuffled then copied | 1 | %.0f |\n"
                 "| packed decode, frames on threads, planes into K and V | 1 | %.0f |\n"
                 "| packed decode, frames on threads, planes into K and V | %d | %.0f |\n",
                 mbs[0], mbs[1], all, mbs[2]);
        free(dk);
        free(dv);
        free(blob);
        lz_payload_codec_free(cw);
    }
    /* 2: the keys' planes (low bytes: mantissa; high bytes: sign and exponent) */
    lz_f32_to_bf16_n(h, k, N);
    for (size_t i = 0; i < N; i++) sh[i] = (uint8_t)(h[i] & 0xff), sh[N + i] = (uint8_t)(h[i] >> 8);
    const size_t F = (size_t)1 << 20;
    printf("\n| plane (1 MiB of K) | zstd level | ratio | MB/s |\n|---|---|---|---|\n");
    for (int p = 0; p < 2; p++) {
        const char *name = p ? "high bytes" : "low bytes";
        plane(name, sh + (size_t)p * N, F, 3, 0, reps * 4);
        plane(name, sh + (size_t)p * N, F, 1, 0, reps * 4);
        plane(name, sh + (size_t)p * N, F, 1, 1, reps * 4);
    }
    /* 3 */
    printf("\n| fp32 -> bf16 | values | scalar MB/s | lz_f32_to_bf16_n MB/s | same bits |\n|---|---|---|---|---|\n");
    const size_t sizes[2] = { (size_t)n * d, N };
    for (int s = 0; s < 2; s++) {
        const size_t m = sizes[s];
        const int r = (int)(reps * (N / m < 200 ? N / m : 200));
        uint16_t *a = malloc(m * 2), *b = malloc(m * 2);
        double t0 = lz_now_s();
        for (int i = 0; i < r; i++)
            for (size_t j = 0; j < m; j++) a[j] = lz_f32_to_bf16(k[j]);
        const double t1 = lz_now_s();
        for (int i = 0; i < r; i++) lz_f32_to_bf16_n(b, k, m);
        const double t2 = lz_now_s();
        printf("| %s | %zu | %.0f | %.0f | %s |\n", s ? "whole body (out of cache)" : "one head's slice (in cache)", m,
               r * m * 2 / 1e6 / (t1 - t0), r * m * 2 / 1e6 / (t2 - t1), memcmp(a, b, m * 2) ? "NO" : "yes");
        free(a);
        free(b);
    }
    free(k);
    free(v);
    free(h);
    free(sh);
    printf("\n| decode of a %.1f MB payload (1 MiB frames, level 1) | threads | MB/s of bf16 K+V |\n|---|---|---|\n%s",
           2.0 * N * 2 / 1e6, dec_rows);
    return 0;
}
