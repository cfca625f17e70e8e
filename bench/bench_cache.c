/* bench_cache.c - document cache hit rates per mode under a Zipf query
 * stream, using the product's own cache (cache/doc_cache.c) and the keys each
 * mode uses: lazy (one entry per document), block (one per document AND
 * offset), prefix (one per exact chain of preceding documents). Each query
 * retrieves k distinct documents drawn by Zipf(alpha) popularity and places
 * them in a random order, as retrieval ranks vary per question.
 * Bytes per token default to Llama-3.1-8B's bf16 KV (128 KiB).
 * usage: bench_cache [--docs N] [--k K] [--alpha A] [--queries Q] [--kib-per-token B] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "cache/doc_cache.h"
#include "bench/zipf.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static double unif(void) { return (double)(next() >> 11) / 9007199254740992.0; }

static void free_none(void *v, void *c) { (void)v; (void)c; }

int main(int argc, char **argv)
{
    int N = 2000, K = 10, Q = 20000;
    double alpha = 1.1, kib = 128;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--docs")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--k")) K = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--alpha")) alpha = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--queries")) Q = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--kib-per-token")) kib = atof(argv[i + 1]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 1; }
    }
    int *len = malloc((size_t)N * sizeof(int));
    double *cdf = malloc((size_t)N * sizeof(double)), z = 0;
    for (int i = 0; i < N; i++) len[i] = 100 + (int)(next() % 201);
    z = lz_zipf_cdf(cdf, N, alpha);
    /* one fixed query stream for every mode and budget */
    int *stream = malloc((size_t)Q * K * sizeof(int));
    for (int q = 0; q < Q; q++) lz_zipf_question(stream + (size_t)q * K, K, cdf, N, z, NULL, unif);
    double gib[] = {1, 4, 16};
    printf("Zipf(%.2f) over %d documents of 100-300 tokens, top-%d per query in random order, %d queries, %.0f KiB/token\n",
           alpha, N, K, Q, kib);
    printf("| budget | lazy hit rate | block hit rate | prefix hit rate | lazy / block |\n|---|---|---|---|---|\n");
    for (int b = 0; b < 3; b++) {
        double rate[3];
        for (int mode = 0; mode < 3; mode++) {
            lz_doc_cache *c = lz_doc_cache_new((size_t)(gib[b] * 1073741824.0), free_none, NULL);
            int64_t hits = 0, looks = 0;
            for (int q = 0; q < Q; q++) {
                const int *d = stream + (size_t)q * K;
                int64_t p = 0;
                uint8_t chain[32] = {0};
                int chain_ok = 1;
                lz_doc_cache_begin(c);
                for (int j = 0; j < K; j++) {
                    uint8_t key[40];
                    size_t kl;
                    if (mode == 0) { memcpy(key, &d[j], 4); kl = 4; }
                    else if (mode == 1) { memcpy(key, &d[j], 4); memcpy(key + 4, &p, 8); kl = 12; }
                    else {
                        uint8_t buf[36];
                        memcpy(buf, chain, 32); memcpy(buf + 32, &d[j], 4);
                        lz_sha256(buf, sizeof buf, chain);
                        memcpy(key, chain, 32); kl = 32;
                    }
                    size_t bytes = (size_t)(len[d[j]] * kib * 1024);
                    looks++;
                    /* prefix: after the first miss the rest is recomputed (and then cached) */
                    if ((mode != 2 || chain_ok) && lz_doc_cache_get(c, key, kl)) hits++;
                    else {
                        if (mode == 2) { if (chain_ok) chain_ok = 0; else lz_doc_cache_get(c, key, kl); }
                        lz_doc_cache_put(c, key, kl, (void *)1, bytes);
                    }
                    p += len[d[j]];
                }
            }
            rate[mode] = (double)hits / (double)looks;
            lz_doc_cache_free(c);
        }
        printf("| %.0f GiB | %.2f%% | %.2f%% | %.2f%% | %.2fx |\n", gib[b], 100 * rate[0], 100 * rate[1], 100 * rate[2],
               rate[0] / (rate[1] > 0 ? rate[1] : 1e-9));
    }
    free(len); free(cdf); free(stream);
    return 0;
}
