/* llama_cuda_test.h - what the GPU engine's tests share (tests/cuda/test_llama_*.cu):
 * random-weight bf16 models written and loaded, the CPU encoder's
 * steps (the prefix, then a document after it as a segment), the
 * normalised error of one vector against another and the argmax. C++ (nvcc), header only. */
#ifndef LZ_TESTS_LLAMA_CUDA_TEST_H
#define LZ_TESTS_LLAMA_CUDA_TEST_H

#include <math.h>
#include <stdio.h>

#include "model/llama.h"
#include "model/mkmodel.h"
#include "tests/test.h"

static lz_llama *make_model(const char *path, int dim, int layers, int heads, int kv, int hd, int ffn, int vocab,
                            int layout_half)
{
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    o.dim = dim, o.n_layers = layers, o.n_heads = heads, o.n_kv_heads = kv, o.head_dim = hd, o.ffn_dim = ffn;
    o.vocab = vocab;
    o.tensor_type = LZ_GGML_BF16;
    char err[512];
    lz_llama *m = NULL;
    if (lz_mkmodel_write(&o, path, err, sizeof err) || lz_llama_load(path, &m, err, sizeof err)) {
        CHECK(0, "model: %s", err);
        return NULL;
    }
    if (layout_half) m->cfg.rope_layout = LZ_ROPE_HALF; /* the same weights read with the other pair layout */
    return m;
}

/* The CPU encoder's steps (ingest/encode.c): the prefix, then the document after it as a segment. */
static int cpu_encode(const lz_llama *m, const int *prefix, int s, const int *ids, int n, lz_kv_cache *pc,
                      lz_kv_cache *dc, float *qwin = NULL, int c0 = 0, int cw = 0)
{
    lz_llama_scratch *sc = lz_llama_scratch_new(m, 256);
    if (!sc || lz_kv_cache_init(pc, &m->cfg, s) || lz_kv_cache_init(dc, &m->cfg, n)) return -1;
    lz_kv_cache_reset(pc, 0);
    if (lz_llama_forward(m, sc, pc, NULL, 0, prefix, s, NULL, LZ_LOGITS_NONE)) return -1;
    lz_kv_segment seg = {.k = pc->k, .v = pc->v, .n = s, .stride = pc->cap};
    lz_kv_cache_reset(dc, s);
    if (cw) lz_llama_scratch_capture(sc, qwin, s + c0, cw); /* the eviction window's queries */
    int rc = lz_llama_forward(m, sc, dc, &seg, 1, ids, n, NULL, LZ_LOGITS_NONE);
    lz_llama_scratch_free(sc);
    return rc;
}

static double vec_err(const float *x, const float *y, size_t n)
{
    double num = 0, den = 0;
    for (size_t e = 0; e < n; e++) {
        num += ((double)x[e] - y[e]) * ((double)x[e] - y[e]);
        den += (double)y[e] * y[e];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* the first index of the largest of x[0..n) (lz_sample_argmax's scan, for logits and counts alike) */
template <class T> static int argmax(const T *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

#endif /* LZ_TESTS_LLAMA_CUDA_TEST_H */
