/* bench_engine.c - CPU engine speed: prefill and decode tokens/s for
 * stories260K (when the fixture exists) and a generated ~100M-parameter
 * Llama shape (fp32, and bf16 matrices kept in place or widened to fp32 at
 * load: formats/weights.h), against the machine's limits measured in the same
 * run: OpenBLAS sgemm GFLOP/s (prefill ceiling) and memory read bandwidth
 * (decode ceiling: every weight byte is read once per token). Also, on one
 * thread, the 16-bit decode dot product (lz_mat_gemv, SIMD and portable)
 * against OpenBLAS sgemv on an fp32 copy of an 8192 x 4096 matrix.
 * usage: bench_engine [--threads N] [--prefill N] [--decode N] [--skip-100m] */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "formats/gguf.h"
#include "base/half.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "model/sampler.h"
#include "base/runtime.h"

static double sgemm_gflops(int n, int k, int m)
{
    float *a = calloc((size_t)n * k, 4), *b = calloc((size_t)m * k, 4), *c = calloc((size_t)n * m, 4);
    for (size_t i = 0; i < (size_t)n * k; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)m * k; i++) b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1, a, k, b, k, 0, c, m);
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t = lz_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1, a, k, b, k, 0, c, m);
        t = lz_now_s() - t;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * n * k * m / best / 1e9;
}

/* Read bandwidth over a buffer far larger than the caches (sum of floats). */
static double read_gbps(size_t bytes)
{
    size_t n = bytes / 4;
    float *x = malloc(bytes);
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    double best = 1e9;
    volatile float sink = 0;
    for (int r = 0; r < 3; r++) {
        double t = lz_now_s();
        float s = 0;
#pragma omp parallel for simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += x[i];
        t = lz_now_s() - t;
        sink += s;
        if (t < best) best = t;
    }
    free(x);
    return (double)bytes / best / 1e9;
}

/* Weight elements of the model (matrices and norms). */
static size_t weight_count(const lz_llama_config *c)
{
    size_t D = (size_t)c->dim, F = (size_t)c->ffn_dim, Hd = (size_t)c->n_heads * c->head_dim,
           KVd = (size_t)c->n_kv_heads * c->head_dim;
    size_t per_layer = D * Hd * 2 + D * KVd * 2 + 3 * D * F + 2 * D;
    return per_layer * (size_t)c->n_layers + (size_t)c->vocab * D * (c->tied_output ? 1 : 2) + D;
}

static int run(const char *label, const char *path, int n_prefill, int n_decode, double gflops, double gbps)
{
    char err[512];
    lz_llama *m;
    if (lz_llama_load(path, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    const lz_llama_config *c = &m->cfg;
    lz_kv_cache cache;
    lz_kv_cache_init(&cache, c, n_prefill + n_decode + 1);
    lz_llama_scratch *s = lz_llama_scratch_new(m, 512);
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    int *toks = malloc((size_t)n_prefill * sizeof(int));
    for (int i = 0; i < n_prefill; i++) toks[i] = 3 + (i * 131) % (c->vocab - 3);
    /* warm-up */
    lz_llama_forward(m, s, &cache, NULL, 0, toks, n_prefill < 16 ? n_prefill : 16, logits, LZ_LOGITS_LAST);
    lz_kv_cache_reset(&cache, 0);
    double t0 = lz_now_s();
    lz_llama_forward(m, s, &cache, NULL, 0, toks, n_prefill, logits, LZ_LOGITS_LAST);
    double tp = lz_now_s() - t0;
    t0 = lz_now_s();
    for (int i = 0; i < n_decode; i++) {
        int next = lz_sample_argmax(logits, c->vocab);
        lz_llama_forward(m, s, &cache, NULL, 0, &next, 1, logits, LZ_LOGITS_LAST);
    }
    double td = lz_now_s() - t0;
    const int type = m->layers[0].wq.type; /* bytes a decode step reads per weight: */
    const double elem = type == LZ_MAT_F32 ? 4 : type == LZ_MAT_Q8_0 ? 34.0 / 32 : 2;
    double params = (double)weight_count(c), wb = params * elem;
    double pf_gflops = 2.0 * params * n_prefill / tp / 1e9;
    double dec_gbps = (double)wb * n_decode / td / 1e9;
    printf("%-18s params %6.1fM, %.2f-byte weights | prefill %4d tok: %9.1f tok/s (%6.1f GFLOP/s, %3.0f%% of sgemm) | "
           "decode %3d tok: %8.1f tok/s (%5.1f GB/s weights, %3.0f%% of read bw)\n",
           label, params / 1e6, elem, n_prefill, n_prefill / tp, pf_gflops, 100 * pf_gflops / gflops, n_decode,
           n_decode / td, dec_gbps, 100 * dec_gbps / gbps);
    free(logits); free(toks);
    lz_llama_scratch_free(s);
    lz_kv_cache_free(&cache);
    lz_llama_free(m);
    return 0;
}

/* One thread: y = W x for an 8192 x 4096 matrix from memory, bf16 (SIMD,
 * portable) against sgemv on its fp32 copy; best of 3 after a warm-up. */
static void gemv_bench(void)
{
    enum { R = 8192, C = 4096 };
    const size_t n = (size_t)R * C;
    uint16_t *h = malloc(n * 2);
    float *f = malloc(n * 4), *x = malloc(C * 4), *y = malloc(R * 4);
    for (size_t i = 0; i < n; i++) h[i] = lz_f32_to_bf16(f[i] = (float)(i % 13) * 0.01f);
    for (int i = 0; i < C; i++) x[i] = 1e-3f * (float)i;
    openblas_set_num_threads(1);
    double best[3] = {1e9, 1e9, 1e9};
    for (int r = 0; r < 4; r++) {
        double t[3];
        for (int k = 0; k < 2; k++) {
            lz_mat_set_simd(k == 0);
            t[k] = lz_now_s();
            lz_mat_gemv(y, (lz_mat){h, LZ_MAT_BF16}, x, C, 0, R, 0.f);
            t[k] = lz_now_s() - t[k];
        }
        lz_mat_set_simd(1);
        t[2] = lz_now_s();
        cblas_sgemv(CblasRowMajor, CblasNoTrans, R, C, 1.f, f, C, x, 1, 0.f, y, 1);
        t[2] = lz_now_s() - t[2];
        for (int k = 0; r > 0 && k < 3; k++) best[k] = t[k] < best[k] ? t[k] : best[k];
    }
    /* the same values as Q8_0 (scale 0.01, q = value * 100 is exact for i % 13 * 0.01) */
    const size_t nb = n / 32;
    uint8_t *q8 = malloc(nb * 34);
    const uint16_t sc = lz_f32_to_f16(0.01f);
    for (size_t b = 0; b < nb; b++) {
        memcpy(q8 + b * 34, &sc, 2);
        for (int j = 0; j < 32; j++) q8[b * 34 + 2 + j] = (uint8_t)((b * 32 + j) % 13);
    }
    double bq = 1e9;
    for (int r = 0; r < 4; r++) {
        double t = lz_now_s();
        lz_mat_gemv(y, (lz_mat){q8, LZ_MAT_Q8_0}, x, C, 0, R, 0.f);
        t = lz_now_s() - t;
        if (r > 0 && t < bq) bq = t;
    }
    printf("gemv 8192x4096, 1 thread: bf16 %.2f ms (%.1f GB/s), bf16 portable %.2f ms (%.1f GB/s), "
           "q8_0 %.2f ms (%.1f GB/s), fp32 sgemv %.2f ms (%.1f GB/s)\n", best[0] * 1e3, n * 2 / best[0] / 1e9,
           best[1] * 1e3, n * 2 / best[1] / 1e9, bq * 1e3, nb * 34 / bq / 1e9, best[2] * 1e3, n * 4 / best[2] / 1e9);
    free(h); free(f); free(x); free(y); free(q8);
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    int threads = 0, n_prefill = 512, n_decode = 64, skip100 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) n_prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skip-100m")) skip100 = 1;
        else { fprintf(stderr, "usage: bench_engine [--threads N] [--prefill N] [--decode N] [--skip-100m]\n"); return 1; }
    }
    /* limits with OpenBLAS's own threading over all the cores the engine uses */
    lz_llama_set_threads(threads);
    openblas_set_num_threads(omp_get_max_threads());
    double gflops = sgemm_gflops(512, 768, 2048), gbps = read_gbps((size_t)512 << 20);
    gemv_bench();
    openblas_set_num_threads(1);
    printf("limits (%d threads): sgemm 512x768x2048 %.1f GFLOP/s, memory read %.1f GB/s\n", omp_get_max_threads(), gflops, gbps);
    const char *dir = getenv("LZ_FIXTURES");
    char p[512];
    snprintf(p, sizeof p, "%s/models/stories260K.gguf", dir ? dir : "../shared/fixtures");
    FILE *f = fopen(p, "rb");
    if (f) { fclose(f); run("stories260K", p, n_prefill, n_decode * 4, gflops, gbps); }
    else printf("SKIP stories260K: %s not found\n", p);
    if (!skip100) {
        lz_mkmodel_opts o;
        lz_mkmodel_defaults(&o);
        o.dim = 768; o.n_layers = 12; o.n_heads = 12; o.n_kv_heads = 4; o.head_dim = 64; o.ffn_dim = 2048;
        o.vocab = 32000;
        const char *path = "build/bench-100m.gguf";
        char err[256];
        if (lz_mkmodel_write(&o, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        run("random-100M", path, n_prefill, n_decode, gflops, gbps);
        o.tensor_type = LZ_GGML_BF16; /* the same shape stored as bf16: in place, then widened at load */
        if (lz_mkmodel_write(&o, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        run("random-100M bf16", path, n_prefill, n_decode, gflops, gbps);
        setenv("LAZY_F32_WEIGHTS", "1", 1);
        run("bf16 widened", path, n_prefill, n_decode, gflops, gbps);
        unsetenv("LAZY_F32_WEIGHTS");
        o.tensor_type = LZ_GGML_Q8_0; /* and as Q8_0 */
        if (lz_mkmodel_write(&o, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        run("random-100M q8_0", path, n_prefill, n_decode, gflops, gbps);
        setenv("LAZY_F32_WEIGHTS", "1", 1);
        run("q8_0 widened", path, n_prefill, n_decode, gflops, gbps);
        unsetenv("LAZY_F32_WEIGHTS");
        remove(path);
    }
    return 0;
}
