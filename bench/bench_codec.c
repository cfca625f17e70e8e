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
 *      into K and V), one thread and all (OMP_NUM_THREADS): MB/s of bf16 K+V;
 *   5. the store tier: 10 such payloads (each its own values) decoded as one batch
 *      (lz_payload_decode_batch) from memory, and read from an LMDB environment
 *      in one snapshot then decoded (the path of a question's misses), on 1, 4, 8
 *      and all threads: MB/s of decoded bf16 K+V into buffers touched before;
 *   6. fp8 (e4m3, a scale a head): bytes a token raw and with zstd level 1 (does an
 *      entropy stage pay?), encode MB/s on one thread, and ten payloads decoded as
 *      one batch to bf16 on all threads.
 * usage: bench_codec [--reps N] [--lmdb DIR]   (bench/RESULTS.md, "Store and codec")
 *   DIR: where the LMDB environment of part 5 is made and removed (default /tmp)
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "base/clock.h"
#include "base/half.h"
#include "store/kvdb.h"
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

/* Part 5: nb payloads of the body's shape, each its own values, stored with codec (shuffle-zstd,
 * the default, or raw: lazyingest --codec), decoded as one batch from memory and from an LMDB
 * environment in dir (one snapshot, zero-copy). */
static int batch_rows(const lz_payload_src *src0, size_t N, int reps, const char *dir, int codec, char *rows, size_t cap)
{
    enum { NB = 10 };
    lz_payload_codec *enc = lz_payload_codec_new(), *c = lz_payload_codec_new();
    char err[256];
    void *blob[NB];
    size_t len[NB];
    uint16_t *dk[NB], *dv[NB];
    float *k = malloc(N * 4), *v = malloc(N * 4);
    if (!enc || !c || !k || !v || lz_payload_codec_set_threads(enc, omp_get_max_threads())) return 1;
    for (int b = 0; b < NB; b++) {
        for (size_t i = 0; i < N; i++) k[i] = src0->k[i] * (1.0f + 0.01f * gauss()), v[i] = src0->v[i] + 0.01f * gauss();
        lz_payload_src s = *src0;
        s.k = k, s.v = v;
        if (lz_payload_encode(enc, &s, codec, 1, &blob[b], &len[b], err, sizeof err)) {
            fprintf(stderr, "encode: %s\n", err);
            return 1;
        }
        dk[b] = malloc(N * 2), dv[b] = malloc(N * 2);
        memset(dk[b], 1, N * 2), memset(dv[b], 1, N * 2); /* touched, as the host tier's pinned blocks are */
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_codec_lmdb.%d", dir, (int)getpid());
    lz_kvdb *db = NULL;
    lz_kvdb_item items[NB];
    uint8_t keys[NB][32];
    for (int b = 0; b < NB; b++) {
        memset(keys[b], b + 1, 32);
        items[b] = (lz_kvdb_item){keys[b], 32, blob[b], len[b]};
    }
    if (lz_kvdb_open(path, 0, &db, err, sizeof err) || lz_kvdb_put_batch(db, items, NB, err, sizeof err)) {
        fprintf(stderr, "lmdb %s: %s\n", path, err);
        return 1;
    }
    const int all = omp_get_max_threads(), tcount[4] = { 1, 4, 8, all };
    size_t o = 0;
    o += (size_t)snprintf(rows + o, cap - o, "| %d payloads of %.1f MB, %s | from | threads | MB/s of bf16 K+V |\n"
                          "|---|---|---|---|\n", NB, 2.0 * N * 2 / 1e6, lz_payload_codec_name(codec));
    for (int way = 0; way < 2; way++)
        for (int t = 0; t < 4; t++) {
            if (t > 0 && tcount[t] <= tcount[t - 1]) continue;
            omp_set_num_threads(tcount[t]);
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                lz_payload_job jobs[NB];
                lz_kvdb_reader *rd = NULL;
                const double t0 = lz_now_s();
                if (way == 1 && lz_kvdb_reader_begin(db, &rd, err, sizeof err)) return 1;
                for (int b = 0; b < NB; b++) {
                    const void *p = blob[b];
                    size_t n = len[b];
                    if (way == 1 && lz_kvdb_reader_get(rd, keys[b], 32, &p, &n, err, sizeof err)) return 1;
                    jobs[b] = (lz_payload_job){.blob = p, .len = n, .k = dk[b], .v = dv[b]};
                }
                if (lz_payload_decode_batch(c, jobs, NB)) { fprintf(stderr, "batch: %s\n", jobs[0].err); return 1; }
                lz_kvdb_reader_end(rd);
                const double dt = lz_now_s() - t0;
                if (dt < best) best = dt;
            }
            o += (size_t)snprintf(rows + o, cap - o, "| one batch | %s | %d | %.0f |\n", way ? "LMDB (one snapshot)" : "memory",
                                  tcount[t], NB * 2.0 * N * 2 / 1e6 / best);
        }
    omp_set_num_threads(all);
    lz_kvdb_close(db);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", path);
    for (int b = 0; b < NB; b++) free(blob[b]), free(dk[b]), free(dv[b]);
    free(k);
    free(v);
    lz_payload_codec_free(enc);
    lz_payload_codec_free(c);
    return 0;
}

/* Part 6: fp8 payloads of the body's shape, raw and zstd. */
static int fp8_rows(const lz_payload_src *src0, size_t N, int n_tok, int reps, char *rows, size_t cap)
{
    enum { NB = 10 };
    lz_payload_codec *c = lz_payload_codec_new();
    char err[256];
    lz_payload_src s = *src0;
    s.dtype = LZ_PAYLOAD_DTYPE_FP8;
    uint16_t *dk = malloc(N * 2 * NB), *dv = malloc(N * 2 * NB);
    if (!c || !dk || !dv) return 1;
    memset(dk, 1, N * 2 * NB), memset(dv, 1, N * 2 * NB);
    size_t o = (size_t)snprintf(rows, cap, "| fp8 e4m3 codec | bytes a token | of raw fp8 | encode MB/s (1 thread) | batch decode to bf16, %d threads, MB/s of bf16 K+V |\n|---|---|---|---|---|\n",
                                omp_get_max_threads());
    const int codecs[2] = { LZ_PAYLOAD_CODEC_RAW, LZ_PAYLOAD_CODEC_ZSTD };
    for (int ci = 0; ci < 2; ci++) {
        void *blob = NULL;
        size_t len = 0;
        omp_set_num_threads(1);
        double t0 = lz_now_s();
        for (int r = 0; r < reps; r++) {
            free(blob);
            if (lz_payload_encode(c, &s, codecs[ci], 1, &blob, &len, err, sizeof err)) { fprintf(stderr, "fp8: %s\n", err); return 1; }
        }
        const double enc = reps * 2.0 * N * 2 / 1e6 / (lz_now_s() - t0);
        omp_set_num_threads(omp_get_num_procs());
        lz_payload_job jobs[NB];
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            for (int b = 0; b < NB; b++) jobs[b] = (lz_payload_job){.blob = blob, .len = len, .k = dk + b * N, .v = dv + b * N};
            t0 = lz_now_s();
            if (lz_payload_decode_batch(c, jobs, NB)) { fprintf(stderr, "fp8 batch: %s\n", jobs[0].err); return 1; }
            const double dt = lz_now_s() - t0;
            if (dt < best) best = dt;
        }
        o += (size_t)snprintf(rows + o, cap - o, "| %s | %.0f | %.3f | %.0f | %.0f |\n", codecs[ci] ? "zstd level 1" : "raw",
                              (double)len / n_tok, (double)len / (2.0 * N + 8.0 * 32 * 8), enc, NB * 2.0 * N * 2 / 1e6 / best);
        free(blob);
    }
    free(dk);
    free(dv);
    lz_payload_codec_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 5;
    const char *lmdb_dir = "/tmp";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lmdb")) lmdb_dir = argv[i + 1];
        else { fprintf(stderr, "usage: bench_codec [--reps N] [--lmdb DIR]\n"); return 2; }
    }
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
    lz_payload_src src = { k, v, n, 0, L, KV, d, n, NULL, 20, fp, LZ_PAYLOAD_DTYPE_BF16, NULL, NULL, NULL, NULL };
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
    /* 5, 6 */
    static char batch[2048], batch_raw[2048], fp8[1024];
    if (batch_rows(&src, N, reps, lmdb_dir, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, batch, sizeof batch)) return 1;
    if (batch_rows(&src, N, reps, lmdb_dir, LZ_PAYLOAD_CODEC_RAW, batch_raw, sizeof batch_raw)) return 1;
    if (fp8_rows(&src, N, n, reps, fp8, sizeof fp8)) return 1;
    free(k);
    free(v);
    free(h);
    free(sh);
    printf("\n| decode of a %.1f MB payload (1 MiB frames, level 1) | threads | MB/s of bf16 K+V |\n|---|---|---|\n%s",
           2.0 * N * 2 / 1e6, dec_rows);
    printf("\n%s\n%s\n%s", batch, batch_raw, fp8);
    return 0;
}
