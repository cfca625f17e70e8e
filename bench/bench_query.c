/* bench_query.c - time to first token per mode on the CPU, 10 cached
 * documents of ~200 tokens placed before a question, on a generated model
 * (dim 512, 8 layers, 8/2 heads, ffn 1536, vocab 4096 by default; --big for
 * the ~100M shape). Ingests a synthetic corpus with lazyingest first.
 * Reports the first (cold: KV from LMDB) and the median of later (warm)
 * queries per mode, and the tokens each mode computes.
 * usage: bench_query [--big] [--threads N] [--queries Q]   (from the repo root, after make) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "model/mkmodel.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "base/runtime.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    int big = 0, threads = 0, Q = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--big")) big = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--queries") && i + 1 < argc) Q = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_query [--big] [--threads N] [--queries Q]\n"); return 1; }
    }
    if (Q < 2) Q = 2;
    lz_llama_set_threads(threads);
    const char *dir = "build/bench-query";
    char cmd[2560], path[512], err[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd)) return 1;
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    if (big) { o.dim = 768; o.n_layers = 12; o.n_heads = 12; o.n_kv_heads = 4; o.head_dim = 64; o.ffn_dim = 2048; o.vocab = 32000; }
    else { o.dim = 512; o.n_layers = 8; o.n_heads = 8; o.n_kv_heads = 2; o.head_dim = 64; o.ffn_dim = 1536; o.vocab = 4096; }
    o.ctx = 8192;
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    if (lz_mkmodel_write(&o, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    /* 10 documents of ~200 tokens */
    char corpus[512];
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    FILE *f = fopen(corpus, "w");
    static const char *w[] = {"river", "castle", "apple", "north", "engine", "violet", "market", "signal"};
    for (int i = 0; i < 10; i++) {
        fprintf(f, "{\"id\": \"d%d\", \"title\": \"Doc %d\", \"text\": \"", i, i);
        for (int j = 0; j < 60; j++) fprintf(f, "%s%s", j ? " " : "", w[(i * 7 + j * 3) % 8]);
        fprintf(f, ".\"}\n");
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "build/bin/lazyingest --quiet --model %s --store %s/store %s", path, dir, corpus);
    if (system(cmd)) { fprintf(stderr, "ingest failed (build first: make)\n"); return 1; }
    lz_llama *m;
    lz_store *st;
    snprintf(cmd, sizeof cmd, "%s/store", dir);
    if (lz_llama_load(path, &m, err, sizeof err) || lz_store_open(cmd, LZ_STORE_RDONLY, &st, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const char *ids[10] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"};
    lz_query_doc *docs;
    if (lz_retrieve_ids(st, ids, 10, &docs, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    int total = 0;
    for (int i = 0; i < 10; i++) total += docs[i].n_tokens;
    printf("model: dim %d, %d layers, %d/%d heads, %.1fM params; 10 documents, %d tokens; %d queries per mode\n",
           o.dim, o.n_layers, o.n_heads, o.n_kv_heads,
           ((double)o.n_layers * (2.0 * o.dim * o.n_heads * o.head_dim + 2.0 * o.dim * o.n_kv_heads * o.head_dim +
                                  3.0 * o.dim * o.ffn_dim) + 2.0 * o.vocab * o.dim) / 1e6,
           total, Q);
    printf("| mode | cold TTFT (ms) | warm TTFT median (ms) | tokens computed | prompt tokens | warm vs full |\n|---|---|---|---|---|---|\n");
    double full_warm = 0, warm_of[4];
    int modes[4] = {LZ_MODE_FULL, LZ_MODE_PREFIX, LZ_MODE_BLOCK, LZ_MODE_LAZY};
    for (int mi = 0; mi < 4; mi++) {
        lz_query_opts qo;
        lz_query_opts_default(&qo);
        qo.mode = modes[mi];
        qo.max_new_tokens = 1;
        lz_query_session *q;
        if (lz_query_session_new(m, st, &qo, &q, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        double *t = malloc((size_t)Q * sizeof(double)), cold = 0;
        int computed = 0, prompt = 0;
        for (int i = 0; i < Q; i++) {
            lz_query_result r;
            if (lz_query_answer(q, "Which castle is near the north river?", docs, 10, &r, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            t[i] = r.t_ttft * 1e3;
            if (i == 0) cold = t[i];
            computed = r.n_computed;
            prompt = r.n_prompt;
            lz_query_result_free(&r);
        }
        qsort(t + 1, (size_t)Q - 1, sizeof(double), cmp_d);
        double warm = t[1 + (Q - 1) / 2];
        warm_of[mi] = warm;
        if (modes[mi] == LZ_MODE_FULL) full_warm = warm;
        printf("| %s | %.1f | %.1f | %d | %d | %.1fx |\n", lz_query_mode_name(modes[mi]), cold, warm, computed, prompt,
               full_warm / warm);
        free(t);
        lz_query_session_free(q);
    }
    printf("lazy vs block warm TTFT: %+.1f%%\n", 100.0 * (warm_of[3] - warm_of[2]) / warm_of[2]);
    free(docs);
    lz_store_close(st);
    lz_llama_free(m);
    return 0;
}
