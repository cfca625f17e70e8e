/* test_llama_cuda.cu - the GPU forward pass (gpu/llama_cuda*.cu)
 * against the CPU engine (lz_llama_forward, fp32) on random-weight models:
 * the document's K and V of every layer after a prompt prefix, at bf16
 * level (normalised error per layer <= 3e-2, no NaN), for documents of 1,
 * 37, 300 and the maximum tokens, head_dim 64 and 128, GQA 1 and 4, both
 * rotary layouts. The query side (lz_llama_gpu_begin / _step) against
 * lz_llama_forward over the same segments: the prefix, documents placed at
 * other offsets (fp32, bf16, and one packed with per-head kept counts),
 * the question, then greedy decode steps: logits normalised error <= 3e-2.
 * The prompt prefix run on the GPU by the encoder (lz_encoder_new_on)
 * against the CPU encoder's prefix, at the same level. Several documents
 * in one pass (lz_llama_gpu_encode_many / _start / _finish / _encoded).
 * The document cache's fast tiers (test_tiers): the same logits bit for bit from pinned host
 * memory, pageable memory or HBM; block (copies rotated on the device) and prefix (own rows
 * kept and reused) against lazy; churn with device memory stable; the start-up preload.
 * Several sequences at once (test_slots, test_slot_pins): batched prefill and decode over
 * slots joining and leaving against each sequence alone, pins under a budget that forces
 * eviction, churn of slots with device memory stable.
 * Then, with --bench, tokens/s of one document of 1024 tokens on a ~0.35B
 * model, and a question over 10 documents: GPU against the CPU engine.
 *
 * Usage: test_llama_cuda [--bench]   (run on the GPU machine)
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ingest/encode.h"
#include "ingest/kvpolicy.h"
#include "formats/gguf.h"
#include "base/clock.h"
#include "base/half.h"
#include "model/llama.h"
#include "gpu/llama_cuda.h"
#include "kernels/lz_argmax.h"
#include "base/env.h"
#include "model/mkmodel.h"
#include "tests/test.h"
#include "tests/cuda/llama_cuda_test.h"

/* Worst normalised error over layers and K / V of cache a against b (n
 * rows each, strides their caps); NaN counted in *nan. */
static double cache_err(const lz_kv_cache *a, const lz_kv_cache *b, int layers, int kv, int n, int hd, int *nan)
{
    double worst = 0;
    for (int l = 0; l < layers; l++)
        for (int kvi = 0; kvi < 2; kvi++) {
            double num = 0, den = 0;
            for (int h = 0; h < kv; h++) {
                const float *x = (kvi ? a->v : a->k) + ((size_t)l * kv + h) * a->cap * hd;
                const float *y = (kvi ? b->v : b->k) + ((size_t)l * kv + h) * b->cap * hd;
                for (size_t e = 0; e < (size_t)n * hd; e++) {
                    *nan += !isfinite(x[e]);
                    num += ((double)x[e] - y[e]) * ((double)x[e] - y[e]);
                    den += (double)y[e] * y[e];
                }
            }
            const double ne = sqrt(num / (den > 0 ? den : 1));
            worst = ne > worst ? ne : worst;
        }
    return worst;
}

static void test_shape(const char *dir, int hd, int heads, int kv, int layout_half)
{
    char path[600];
    snprintf(path, sizeof path, "%s/m%d_%d_%d.gguf", dir, hd, heads, kv);
    const int dim = 256, layers = 3, ffn = 512, vocab = 512, max_tokens = 700;
    lz_llama *m = make_model(path, dim, layers, heads, kv, hd, ffn, vocab, layout_half);
    if (!m) return;
    char err[512];
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, max_tokens, &g, err, sizeof err) == 0, "gpu: %s", err);
    const int s = 23, lens[4] = {1, 37, 300, max_tokens};
    int prefix[23], *ids = (int *)malloc((size_t)max_tokens * sizeof(int));
    for (int i = 0; i < s; i++) prefix[i] = 3 + (i * 31 + 5) % (vocab - 3);
    for (int i = 0; i < max_tokens; i++) ids[i] = 3 + (i * 97 + 11) % (vocab - 3);
    for (int li = 0; g && li < 4; li++) {
        const int n = lens[li];
        lz_kv_cache pc, dc, gc;
        const int cw = n >= 32 ? 32 : 0, c0 = n - cw; /* the observation window: the last 32 rows */
        const size_t qn = (size_t)layers * cw * heads * hd;
        float *qc = (float *)malloc((qn ? qn : 1) * 4), *qg = (float *)malloc((qn ? qn : 1) * 4);
        if (cpu_encode(m, prefix, s, ids, n, &pc, &dc, qc, c0, cw) || lz_kv_cache_init(&gc, &m->cfg, n)) { CHECK(0, "cpu"); break; }
        if (li == 0) CHECK(lz_llama_gpu_set_prefix(g, &pc, err, sizeof err) == 0, "prefix: %s", err);
        for (size_t i = 0; i < (size_t)layers * kv * n * hd; i++) gc.k[i] = gc.v[i] = NAN;
        CHECK(lz_llama_gpu_encode(g, ids, n, &gc, qg, c0, cw, err, sizeof err) == 0, "encode: %s", err);
        if (cw) {
            const double qe = vec_err(qg, qc, qn);
            CHECK(qe <= 3e-2, "window queries d=%d n=%d: normalised error %.3g", hd, n, qe);
            printf("d=%3d n=%4d: the eviction window's 32 queries, GPU vs CPU normalised error %.2e\n", hd, n, qe);
        }
        free(qc);
        free(qg);
        CHECK(gc.n == n && gc.pos0 == s, "cache counts");
        int nan = 0;
        const double worst = cache_err(&gc, &dc, layers, kv, n, hd, &nan);
        CHECK(nan == 0 && worst <= 3e-2, "d=%d H=%d KV=%d layout=%s n=%d: worst layer K/V normalised error %.3g, %d NaN",
              hd, heads, kv, layout_half ? "half" : "adjacent", n, worst, nan);
        printf("d=%3d H=%d KV=%d %-8s n=%4d: GPU vs CPU K/V normalised error, worst layer %.2e\n", hd, heads, kv,
               layout_half ? "half" : "adjacent", n, worst);
        lz_kv_cache_free(&pc); lz_kv_cache_free(&dc); lz_kv_cache_free(&gc);
    }
    /* bad input: too many tokens, an id out of range */
    lz_kv_cache big;
    if (g && !lz_kv_cache_init(&big, &m->cfg, max_tokens + 1)) {
        int *many = (int *)calloc((size_t)max_tokens + 1, sizeof(int));
        CHECK(lz_llama_gpu_encode(g, many, max_tokens + 1, &big, NULL, 0, 0, err, sizeof err) != 0, "too many tokens accepted");
        many[0] = vocab;
        CHECK(lz_llama_gpu_encode(g, many, 2, &big, NULL, 0, 0, err, sizeof err) != 0 && strstr(err, "out of range"), "bad id");
        free(many);
        lz_kv_cache_free(&big);
    }
    free(ids);
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

/* fp8 passes read back as planes only (lz_llama_gpu_set_encode_fp8(g, 2), an fp8 store whose
 * documents are stored whole): the same fp8 bytes and scales as a pass that also read back bf16,
 * no bf16 document of the pass to fetch (an error naming it), and a one-document encode still
 * read back in bf16, equal to the pass's document. */
static void test_fp8_planes_only(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/mplanes.gguf", dir);
    const int layers = 2, heads = 8, kv = 2, hd = 128, vocab = 512, s = 11, N = 3;
    lz_llama *m = make_model(path, 256, layers, heads, kv, hd, 512, vocab, 1);
    if (!m) return;
    char err[512];
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, 600, &g, err, sizeof err) == 0, "gpu: %s", err);
    const int len[N] = {129, 300, 7}, zero[N] = {0, 0, 0};
    int prefix[11], *ids[N];
    for (int i = 0; i < s; i++) prefix[i] = 3 + (i * 29 + 1) % (vocab - 3);
    for (int i = 0; i < N; i++) {
        ids[i] = (int *)malloc((size_t)len[i] * sizeof(int));
        for (int j = 0; j < len[i]; j++) ids[i][j] = 3 + (j * 89 + 13 * i + 5) % (vocab - 3);
    }
    lz_kv_cache pc = {}, dc = {}, got[N] = {}, alone = {};
    int ok = g && !cpu_encode(m, prefix, s, ids[0], len[0], &pc, &dc, NULL, 0, 0) &&
             !lz_kv_cache_init(&alone, &m->cfg, 300);
    for (int i = 0; i < N; i++) ok = ok && !lz_kv_cache_init(&got[i], &m->cfg, len[i]);
    if (ok) ok = !lz_llama_gpu_set_prefix(g, &pc, err, sizeof err);
    CHECK(ok, "planes only: setup: %s", err);
    const size_t per = (size_t)layers * kv * hd; /* bytes of one row's K (or V) planes in e4m3 */
    uint8_t *ref[N] = {};
    int same = 1, fails = 1, no16 = 1;
    for (int round = 0; ok && round < 2; round++) {
        lz_llama_gpu_set_encode_fp8(g, round ? 2 : 1);
        CHECK(lz_llama_gpu_encode_many(g, ids, len, zero, zero, N, err, sizeof err) == 0, "planes only: pass: %s", err);
        for (int i = 0; i < N; i++) {
            const void *k, *v;
            const float *ks, *vs;
            const int rc = lz_llama_gpu_encoded_planes(g, i, len[i], 3, &k, &v, &ks, &vs, err, sizeof err);
            CHECK(rc == 1, "planes only: round %d document %d: %d %s", round, i, rc, err);
            if (rc != 1) continue;
            const size_t nb = per * len[i], ns = (size_t)layers * kv * sizeof(float);
            if (!round) {
                ref[i] = (uint8_t *)malloc(2 * nb + 2 * ns);
                memcpy(ref[i], k, nb), memcpy(ref[i] + nb, v, nb), memcpy(ref[i] + 2 * nb, ks, ns),
                    memcpy(ref[i] + 2 * nb + ns, vs, ns);
                CHECK(lz_llama_gpu_encoded(g, i, &got[i], NULL, err, sizeof err) == 0, "bf16 fetch %d: %s", i, err);
            } else {
                same &= !memcmp(ref[i], k, nb) && !memcmp(ref[i] + nb, v, nb) && !memcmp(ref[i] + 2 * nb, ks, ns) &&
                        !memcmp(ref[i] + 2 * nb + ns, vs, ns);
                lz_kv_cache tmp = {};
                lz_kv_cache_init(&tmp, &m->cfg, len[i]);
                err[0] = 0;
                fails &= lz_llama_gpu_encoded(g, i, &tmp, NULL, err, sizeof err) == -1 && strstr(err, "fp8 planes only");
                lz_kv_cache_free(&tmp);
                no16 &= lz_llama_gpu_encoded_planes(g, i, len[i], 1, &k, &v, &ks, &vs, err, sizeof err) == 0;
            }
        }
    }
    CHECK(same, "planes only: other fp8 bytes or scales than a pass that read back bf16 too");
    CHECK(fails && no16, "planes only: a bf16 document of the pass was handed out (%s)", err);
    /* one document alone: read back in bf16 whatever the passes do */
    int nan = 0;
    const int arc = ok ? lz_llama_gpu_encode(g, ids[1], len[1], &alone, NULL, 0, 0, err, sizeof err) : -1;
    CHECK(arc == 0, "planes only: one document alone: %s", err);
    const double ea = arc ? 1 : cache_err(&got[1], &alone, layers, kv, len[1], hd, &nan);
    CHECK(ea <= 1e-2 && nan == 0, "planes only: alone against the pass's bf16: %.3g", ea);
    printf("fp8 passes read back as planes only: the same e4m3 bytes and scales, no bf16 fetch, one document alone "
           "%.2e from the pass\n", ea);
    for (int i = 0; i < N; i++) free(ids[i]), free(ref[i]), lz_kv_cache_free(&got[i]);
    lz_kv_cache_free(&pc), lz_kv_cache_free(&dc), lz_kv_cache_free(&alone);
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

/* Several documents in one pass (lz_llama_gpu_encode_many, lazyingest's
 * batches): each document's K / V and eviction window against the CPU
 * encoder's and against the same document encoded alone; a second pass
 * started while the first's results are fetched (they stay until its
 * finish), with the documents in another order; bad input. */
static void test_many(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/mmany.gguf", dir);
    const int layers = 3, heads = 8, kv = 2, hd = 128, vocab = 512, max_tokens = 700, s = 23, N = 4;
    lz_llama *m = make_model(path, 256, layers, heads, kv, hd, 512, vocab, 1);
    if (!m) return;
    char err[512];
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, max_tokens, &g, err, sizeof err) == 0, "gpu: %s", err);
    const int len[N] = {37, 300, 1, 150}, c0[N] = {5, 268, 0, 0}, cw[N] = {32, 32, 0, 150}; /* doc 3: the self window */
    int prefix[23], *ids[N];
    for (int i = 0; i < s; i++) prefix[i] = 3 + (i * 31 + 5) % (vocab - 3);
    for (int i = 0; i < N; i++) {
        ids[i] = (int *)malloc((size_t)len[i] * sizeof(int));
        for (int j = 0; j < len[i]; j++) ids[i][j] = 3 + (j * 97 + 11 * i + 7) % (vocab - 3);
    }
    lz_kv_cache pc[N] = {}, dc[N] = {}, pass[N] = {}, alone = {};
    float *qc[N], *qp[N], *qa = (float *)malloc((size_t)layers * 150 * heads * hd * 4);
    int ok = g && !lz_kv_cache_init(&alone, &m->cfg, 300);
    for (int i = 0; i < N; i++) {
        const size_t qn = (size_t)layers * (cw[i] ? cw[i] : 1) * heads * hd;
        qc[i] = (float *)malloc(qn * 4);
        qp[i] = (float *)malloc(qn * 4);
        ok = ok && !cpu_encode(m, prefix, s, ids[i], len[i], &pc[i], &dc[i], qc[i], c0[i], cw[i]) &&
             !lz_kv_cache_init(&pass[i], &m->cfg, len[i] + 3);
    }
    CHECK(ok, "setup");
    if (ok) ok = !lz_llama_gpu_set_prefix(g, &pc[0], err, sizeof err);
    CHECK(ok && lz_llama_gpu_encode_many(g, ids, len, c0, cw, N, err, sizeof err) == 0, "encode_many: %s", err);
    double worst_cpu = 0, worst_alone = 0, worst_q = 0;
    for (int i = 0; ok && i < N; i++) { /* all fetched first: a pass's results last until the next pass */
        for (size_t e = 0; e < (size_t)layers * kv * pass[i].cap * hd; e++) pass[i].k[e] = pass[i].v[e] = NAN;
        CHECK(lz_llama_gpu_encoded(g, i, &pass[i], cw[i] ? qp[i] : NULL, err, sizeof err) == 0, "fetch %d: %s", i, err);
        CHECK(pass[i].n == len[i] && pass[i].pos0 == s, "doc %d: rows %d from %d", i, pass[i].n, (int)pass[i].pos0);
    }
    for (int i = 0; ok && i < N; i++) {
        int nan = 0;
        const double ec = cache_err(&pass[i], &dc[i], layers, kv, len[i], hd, &nan);
        CHECK(nan == 0 && ec <= 3e-2, "doc %d of a pass vs CPU: %.3g, %d NaN", i, ec, nan);
        worst_cpu = ec > worst_cpu ? ec : worst_cpu;
        CHECK(lz_llama_gpu_encode(g, ids[i], len[i], &alone, cw[i] ? qa : NULL, c0[i], cw[i], err, sizeof err) == 0,
              "alone %d: %s", i, err);
        const double ea = cache_err(&pass[i], &alone, layers, kv, len[i], hd, &nan);
        CHECK(ea <= 1e-2, "doc %d of a pass vs alone on the GPU: %.3g", i, ea);
        worst_alone = ea > worst_alone ? ea : worst_alone;
        if (cw[i]) {
            const size_t qn = (size_t)layers * cw[i] * heads * hd;
            const double eq = vec_err(qp[i], qc[i], qn), eqa = vec_err(qp[i], qa, qn);
            CHECK(eq <= 3e-2 && eqa <= 1e-2, "doc %d window queries: %.3g vs CPU, %.3g vs alone", i, eq, eqa);
            worst_q = eq > worst_q ? eq : worst_q;
        }
    }
    printf("%d documents (%d..%d tokens) in one GPU pass: K/V vs the CPU encoder %.2e, vs each encoded alone on the GPU "
           "%.2e; window queries vs CPU %.2e\n", N, 1, 300, worst_cpu, worst_alone, worst_q);
    /* KV eviction's attention masses of the pass (windows over the last rows; doc 2 has none)
     * against the ingest's CPU scoring over the same inputs: the fetched keys, the captured
     * queries, the prefix keys rounded to bf16 as the GPU holds them */
    if (ok) ok = !lz_llama_gpu_encode_many(g, ids, len, c0, cw, N, err, sizeof err);
    double worst_m = 0;
    for (int i = 0; ok && i < N; i++) {
        const int mm = cw[i] == len[i] ? len[i] : len[i] - cw[i];
        float *gm = (float *)malloc((size_t)layers * heads * (mm > 0 ? mm : 1) * 4);
        const int got = lz_llama_gpu_encoded_mass(g, i, gm);
        CHECK(got == (cw[i] > 0), "doc %d: masses %s", i, got ? "made" : "not made");
        if (got) {
            lz_kv_cache pr = {};
            lz_kv_cache_init(&pr, &m->cfg, s);
            for (size_t e = 0; e < (size_t)layers * kv * s * hd; e++) pr.k[e] = lz_bf16_to_f32(lz_f32_to_bf16(pc[0].k[e]));
            lz_kvscore_params sp = {.q = qp[i], .k = pass[i].k, .k_stride = pass[i].cap, .pk = pr.k, .pk_stride = s,
                                    .n_prefix = s, .n = len[i], .w = cw[i], .m = cw[i] == len[i] ? len[i] : 0, .L = layers,
                                    .H = heads, .KV = kv, .d = hd, .kernel = 1};
            float *cm = (float *)malloc((size_t)layers * heads * mm * 4);
            CHECK(lz_kvpolicy_mass(&sp, cm) == 0, "CPU masses");
            const double em = vec_err(gm, cm, (size_t)layers * heads * mm);
            CHECK(em <= 1e-4, "doc %d: KV eviction masses GPU vs CPU %.3g", i, em);
            worst_m = em > worst_m ? em : worst_m;
            free(cm);
            lz_kv_cache_free(&pr);
        }
        free(gm);
    }
    printf("KV eviction's attention masses of a pass (windows of 32 rows and the self window) vs the CPU scoring: %.2e\n",
           worst_m);
    /* pass B (reversed) started: pass A's results still fetchable until B's finish */
    const int *rid[N];
    int rlen[N], rc0[N], rcw[N];
    for (int i = 0; i < N; i++) rid[i] = ids[N - 1 - i], rlen[i] = len[N - 1 - i], rc0[i] = c0[N - 1 - i], rcw[i] = cw[N - 1 - i];
    if (ok) {
        CHECK(lz_llama_gpu_encode_many(g, ids, len, c0, cw, N, err, sizeof err) == 0, "pass A again: %s", err);
        CHECK(lz_llama_gpu_encode_start(g, rid, rlen, rc0, rcw, N, err, sizeof err) == 0, "start B: %s", err);
        CHECK(lz_llama_gpu_encoded(g, 1, &alone, NULL, err, sizeof err) == 0, "fetch A during B: %s", err);
        int nan = 0;
        CHECK(cache_err(&alone, &pass[1], layers, kv, len[1], hd, &nan) == 0.0, "pass A's document changed while B ran");
        CHECK(lz_llama_gpu_encode_finish(g, err, sizeof err) == 0, "finish B: %s", err);
        CHECK(lz_llama_gpu_encoded(g, N - 2, &alone, NULL, err, sizeof err) == 0, "fetch B: %s", err);
        const double eb = cache_err(&alone, &pass[1], layers, kv, len[1], hd, &nan);
        CHECK(eb <= 1e-2, "a document in another pass order: %.3g", eb);
        printf("the same document in a pass of another order: normalised difference %.2e%s\n", eb,
               eb == 0 ? " (bit for bit)" : "");
        /* bad input: nothing to finish, too many rows, an id out of range, a window past the end, an index */
        CHECK(lz_llama_gpu_encode_finish(g, err, sizeof err) != 0, "finish without a start accepted");
        CHECK(lz_llama_gpu_encoded(g, N, &alone, NULL, err, sizeof err) != 0, "fetch past the pass accepted");
        CHECK(lz_llama_gpu_encoded(g, 0, &alone, NULL, err, sizeof err) == 0 && alone.n == len[N - 1],
              "pass B's results after a finish with nothing started: %s", err);
        const int *two[2] = {ids[1], ids[1]};
        const int big[2] = {300, 401};
        CHECK(lz_llama_gpu_encode_many(g, two, big, NULL, NULL, 2, err, sizeof err) != 0 && strstr(err, "one pass"),
              "a pass over max_tokens: %s", err);
        const int badw[1] = {40}, badc[1] = {0};
        CHECK(lz_llama_gpu_encode_many(g, ids, len, badc, badw, 1, err, sizeof err) != 0 && strstr(err, "capture"),
              "a window past the document: %s", err);
        ids[2][0] = vocab;
        CHECK(lz_llama_gpu_encode_many(g, ids, len, c0, cw, N, err, sizeof err) != 0 && strstr(err, "out of range"),
              "an id out of range: %s", err);
        CHECK(lz_llama_gpu_encode_many(g, ids, len, c0, cw, 2, err, sizeof err) == 0, "a good pass after bad ones: %s", err);
    }
    for (int i = 0; i < N; i++) {
        lz_kv_cache_free(&pc[i]);
        lz_kv_cache_free(&dc[i]);
        lz_kv_cache_free(&pass[i]);
        free(ids[i]);
        free(qc[i]);
        free(qp[i]);
    }
    lz_kv_cache_free(&alone);
    free(qa);
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

/* A weight matrix of more than one staging buffer (the embedding, 70,000 x 512
 * bf16 = 72 MB: two chunks through the pinned buffers, upload_bytes in
 * gpu/llama_cuda.cu): a document of ids from the whole vocabulary encodes
 * as the CPU engine encodes it. */
static void test_big_upload(const char *dir)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/big.gguf", dir);
    const int vocab = 70000, s = 5, n = 200;
    lz_llama *m = make_model(path, 512, 1, 4, 2, 128, 512, vocab, 0);
    if (!m) return;
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, n, &g, err, sizeof err) == 0, "gpu: %s", err);
    int prefix[5], ids[200];
    for (int i = 0; i < s; i++) prefix[i] = 3 + i;
    for (int i = 0; i < n; i++) ids[i] = 3 + (int)(((long long)i * 69997 / n + i * 7) % (vocab - 3)); /* rows across the table */
    lz_kv_cache pc, dc, gc;
    if (g && !cpu_encode(m, prefix, s, ids, n, &pc, &dc) && !lz_kv_cache_init(&gc, &m->cfg, n)) {
        CHECK(lz_llama_gpu_set_prefix(g, &pc, err, sizeof err) == 0 && lz_llama_gpu_encode(g, ids, n, &gc, NULL, 0, 0, err, sizeof err) == 0,
              "encode: %s", err);
        double num = 0, den = 0;
        for (size_t e = 0; e < (size_t)2 * n * 128; e++) {
            num += ((double)gc.k[e] - dc.k[e]) * ((double)gc.k[e] - dc.k[e]) + ((double)gc.v[e] - dc.v[e]) * ((double)gc.v[e] - dc.v[e]);
            den += (double)dc.k[e] * dc.k[e] + (double)dc.v[e] * dc.v[e];
        }
        const double ne = sqrt(num / (den > 0 ? den : 1));
        CHECK(ne <= 3e-2, "a 72 MB embedding uploaded in chunks: K/V normalised error %.3g", ne);
        printf("a 72 MB embedding uploaded through the pinned buffers: GPU vs CPU K/V normalised error %.2e\n", ne);
        lz_kv_cache_free(&pc); lz_kv_cache_free(&dc); lz_kv_cache_free(&gc);
    }
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

/* Documents encoded after the prefix (CPU), placed one after another: CPU
 * lz_llama_forward and the GPU step over the same segments. far: the
 * documents and the question placed that many positions later (past 2^21,
 * the decode block words' offset field: the steps' attention falls back to
 * lz_prefill_lazy by itself). */
/* packed16: document 2's unequal heads as packed bf16 (the host tier's entries: the engine copies
 * them as they are, layer by layer), else fp32 (staged on the host into the device's layout) */
static void test_query(const char *dir, int hd, int heads, int kv, int layout_half, int64_t far = 0, int packed16 = 0)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/q%d_%d_%d.gguf", dir, hd, heads, kv);
    const int layers = 3, vocab = 512, s = 17, nd = 3, n_q = 9, steps = 60; /* own rows past one 64-key block */
    lz_llama *m = make_model(path, 256, layers, heads, kv, hd, 512, vocab, layout_half);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    int prefix[17], lens[3] = {41, 7, 66}, qids[9];
    for (int i = 0; i < s; i++) prefix[i] = 3 + (i * 31 + 5) % (vocab - 3);
    for (int i = 0; i < n_q; i++) qids[i] = 3 + (i * 13 + 2) % (vocab - 3);
    lz_kv_cache pc, dc[3];
    lz_kv_segment segs[4];
    float *packed_k = NULL, *packed_v = NULL;
    uint16_t *k16 = NULL, *v16 = NULL;
    int kept[64];
    int64_t head_row[64];
    int64_t pos = s + far;
    for (int i = 0; i < nd; i++) {
        int ids[66];
        for (int j = 0; j < lens[i]; j++) ids[j] = 3 + (j * 97 + 11 * i) % (vocab - 3);
        lz_kv_cache tmp;
        if (cpu_encode(m, prefix, s, ids, lens[i], i == 0 ? &pc : &tmp, &dc[i])) { CHECK(0, "cpu encode"); return; }
        if (i) lz_kv_cache_free(&tmp);
        segs[i + 1] = (lz_kv_segment){.k = dc[i].k, .v = dc[i].v, .n = lens[i], .stride = dc[i].cap, .rot = pos - s};
        pos += lens[i];
    }
    segs[0] = (lz_kv_segment){.k = pc.k, .v = pc.v, .n = s, .stride = pc.cap};
    /* document 0 as bf16; document 2 packed, head (l, h) keeping its first 66 - 9 * ((l + h) % 5) rows */
    const size_t n0 = (size_t)layers * kv * dc[0].cap * hd;
    k16 = (uint16_t *)malloc(n0 * 2), v16 = (uint16_t *)malloc(n0 * 2);
    for (size_t e = 0; e < n0; e++) {
        k16[e] = lz_f32_to_bf16(dc[0].k[e]), v16[e] = lz_f32_to_bf16(dc[0].v[e]);
        dc[0].k[e] = lz_bf16_to_f32(k16[e]), dc[0].v[e] = lz_bf16_to_f32(v16[e]); /* the CPU sees the same values */
    }
    segs[1].k = segs[1].v = NULL;
    segs[1].k16 = k16, segs[1].v16 = v16;
    packed_k = (float *)malloc((size_t)layers * kv * 66 * hd * 4), packed_v = (float *)malloc((size_t)layers * kv * 66 * hd * 4);
    int64_t row = 0;
    for (int l = 0; l < layers; l++)
        for (int h = 0; h < kv; h++) {
            const int lh = l * kv + h;
            kept[lh] = 66 - 9 * ((l + h) % 5);
            head_row[lh] = row;
            memcpy(packed_k + row * hd, dc[2].k + (size_t)lh * dc[2].cap * hd, (size_t)kept[lh] * hd * 4);
            memcpy(packed_v + row * hd, dc[2].v + (size_t)lh * dc[2].cap * hd, (size_t)kept[lh] * hd * 4);
            row += kept[lh];
        }
    segs[3].k = packed_k, segs[3].v = packed_v, segs[3].n_kept = kept, segs[3].head_row = head_row;
    uint16_t *p16 = NULL;
    if (packed16) { /* the CPU reads the bf16 rows too */
        p16 = (uint16_t *)malloc((size_t)2 * row * hd * 2);
        for (size_t e = 0; e < (size_t)row * hd; e++) {
            p16[e] = lz_f32_to_bf16(packed_k[e]), p16[row * hd + e] = lz_f32_to_bf16(packed_v[e]);
            packed_k[e] = lz_bf16_to_f32(p16[e]), packed_v[e] = lz_bf16_to_f32(p16[row * hd + e]);
        }
        segs[3].k = segs[3].v = NULL;
        segs[3].k16 = p16, segs[3].v16 = p16 + row * hd;
    }
    /* CPU */
    lz_kv_cache lc;
    lz_llama_scratch *sc = lz_llama_scratch_new(m, 64);
    lz_kv_cache_init(&lc, c, n_q + steps);
    lz_kv_cache_reset(&lc, pos);
    float *lcpu = (float *)malloc((size_t)(steps + 1) * vocab * 4), *lgpu = (float *)malloc((size_t)(steps + 1) * vocab * 4);
    int toks[60];
    CHECK(lz_llama_forward(m, sc, &lc, segs, 4, qids, n_q, lcpu, LZ_LOGITS_LAST) == 0, "cpu question");
    for (int t = 0; t < steps; t++) {
        const float *lg = lcpu + (size_t)t * vocab;
        int b = 0;
        for (int v = 1; v < vocab; v++) if (lg[v] > lg[b]) b = v;
        toks[t] = b;
        CHECK(lz_llama_forward(m, sc, &lc, segs, 4, &toks[t], 1, lcpu + (size_t)(t + 1) * vocab, LZ_LOGITS_LAST) == 0, "cpu step");
    }
    /* GPU */
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, 80, &g, err, sizeof err) == 0, "gpu: %s", err);
    if (g) {
        uint8_t keyb[4][32];
        const uint8_t *keys[4];
        for (int i = 0; i < 4; i++) { memset(keyb[i], 0, 32); keyb[i][0] = (uint8_t)(i + 1); keys[i] = keyb[i]; }
        CHECK(lz_llama_gpu_step(g, qids, n_q, NULL, err, sizeof err) != 0, "a step before any begin accepted");
        CHECK(lz_llama_gpu_begin(g, segs, keys, 200, pos, err, sizeof err) != 0 &&
              lz_llama_gpu_step(g, qids, n_q, NULL, err, sizeof err) != 0, "200 segments, or a step after it, accepted");
        CHECK(lz_llama_gpu_begin(g, segs, keys, 4, pos, err, sizeof err) == 0, "begin: %s", err);
        CHECK(lz_llama_gpu_step(g, qids, n_q, lgpu, err, sizeof err) == 0, "question: %s", err);
        for (int t = 0; t < steps; t++)
            CHECK(lz_llama_gpu_step(g, &toks[t], 1, lgpu + (size_t)(t + 1) * vocab, err, sizeof err) == 0, "step: %s", err);
        double worst = 0;
        for (int t = 0; t <= steps; t++) {
            const double e = vec_err(lgpu + (size_t)t * vocab, lcpu + (size_t)t * vocab, vocab);
            worst = e > worst ? e : worst;
        }
        CHECK(worst <= 3e-2, "query d=%d H=%d KV=%d layout=%s, %lld positions later: logits normalised error %.3g", hd,
              heads, kv, layout_half ? "half" : "adjacent", (long long)far, worst);
        printf("query d=%3d H=%d KV=%d %-8s: question and %d decode steps over 4 segments (bf16, packed as %s), placed "
               "%lld positions later: logits normalised error, worst %.2e\n", hd, heads, kv,
               layout_half ? "half" : "adjacent", steps, packed16 ? "bf16" : "fp32", (long long)far, worst);
        /* the decode steps' attention by lz_prefill_lazy instead (LAZY_GPU_DECODE=prefill, which an
         * engine takes when it is made): the same tokens within bf16 of the CPU too, and of the
         * lz_decode_lazy steps above */
        {
            float *lpf = (float *)malloc((size_t)(steps + 1) * vocab * 4);
            setenv("LAZY_GPU_DECODE", "prefill", 1);
            lz_env_reload(); /* the switches are read once (base/env.h) */
            lz_llama_gpu *gp = NULL;
            CHECK(lz_llama_gpu_new(m, 80, &gp, err, sizeof err) == 0, "gpu (LAZY_GPU_DECODE=prefill): %s", err);
            unsetenv("LAZY_GPU_DECODE");
            lz_env_reload();
            CHECK(gp && lz_llama_gpu_begin(gp, segs, keys, 4, pos, err, sizeof err) == 0 &&
                  lz_llama_gpu_step(gp, qids, n_q, lpf, err, sizeof err) == 0, "prefill-path question: %s", err);
            for (int t = 0; gp && t < steps; t++)
                CHECK(lz_llama_gpu_step(gp, &toks[t], 1, lpf + (size_t)(t + 1) * vocab, err, sizeof err) == 0, "step: %s",
                      err);
            lz_llama_gpu_free(gp);
            double w1 = 0, w2 = 0;
            for (int t = 0; t <= steps; t++) {
                const double e1 = vec_err(lpf + (size_t)t * vocab, lcpu + (size_t)t * vocab, vocab);
                const double e2 = vec_err(lpf + (size_t)t * vocab, lgpu + (size_t)t * vocab, vocab);
                w1 = e1 > w1 ? e1 : w1;
                w2 = e2 > w2 ? e2 : w2;
            }
            CHECK(w1 <= 3e-2 && w2 <= 3e-2, "decode by lz_prefill_lazy: logits error %.3g (CPU), %.3g (lz_decode_lazy)", w1,
                  w2);
            /* past the words' offset field the default steps fell back to lz_prefill_lazy themselves */
            CHECK(!far || w2 == 0, "%lld positions later: the steps did not fall back to lz_prefill_lazy (%.3g)",
                  (long long)far, w2);
            printf("query d=%3d H=%d KV=%d %-8s: the same steps' attention by lz_prefill_lazy: error %.2e (CPU), %.2e "
                   "(lz_decode_lazy)\n", hd, heads, kv, layout_half ? "half" : "adjacent", w1, w2);
            free(lpf);
        }
        int too_many[81] = {0};
        CHECK(lz_llama_gpu_step(g, too_many, 81, NULL, err, sizeof err) != 0, "more than max_tokens accepted");
        /* the same question again: every segment found resident (keys), the same logits; then with
         * nothing allowed to stay (budget 0): uploaded again, the same logits */
        float *again = (float *)malloc((size_t)vocab * 4);
        long h0, m0, h1, m1, h2, m2;
        size_t b0, b1, b2;
        lz_llama_gpu_cache_stats(g, &h0, &m0, &b0);
        CHECK(lz_llama_gpu_begin(g, segs, keys, 4, pos, err, sizeof err) == 0 &&
              lz_llama_gpu_step(g, qids, n_q, again, err, sizeof err) == 0, "again: %s", err);
        lz_llama_gpu_cache_stats(g, &h1, &m1, &b1);
        CHECK(h1 - h0 == 4 && m1 == m0 && b1 == b0 && b0 > 0, "resident: %ld hits, %ld misses", h1 - h0, m1 - m0);
        CHECK(!memcmp(again, lgpu, (size_t)vocab * 4), "resident segments changed the logits");
        lz_llama_gpu_set_cache(g, 0);
        CHECK(lz_llama_gpu_begin(g, segs, keys, 4, pos, err, sizeof err) == 0 &&
              lz_llama_gpu_step(g, qids, n_q, again, err, sizeof err) == 0, "budget 0: %s", err);
        lz_llama_gpu_cache_stats(g, &h2, &m2, &b2);
        CHECK(h2 - h1 == 4 && !memcmp(again, lgpu, (size_t)vocab * 4), "budget 0: this question's segments stay");
        CHECK(lz_llama_gpu_begin(g, segs, NULL, 4, pos, err, sizeof err) == 0 &&
              lz_llama_gpu_step(g, qids, n_q, again, err, sizeof err) == 0, "unkeyed: %s", err);
        lz_llama_gpu_cache_stats(g, &h1, &m1, &b1);
        CHECK(b1 == 0 && !memcmp(again, lgpu, (size_t)vocab * 4), "budget 0: the keyed ones evicted (%zu bytes left)", b1);
        free(again);
    }
    lz_llama_gpu_free(g);
    /* cold documents recomputed on the device (lz_llama_gpu_encode_keep) and used as resident: the
     * CPU engine over the same documents stored whole; all three in one pass (max_tokens 128), in
     * two (70: 41 + 7, then 66), or the 66-token one skipped as too long (50) and uploaded instead */
    {
        lz_kv_segment whole[4];
        memcpy(whole, segs, sizeof whole);
        whole[3] = (lz_kv_segment){.k = dc[2].k, .v = dc[2].v, .n = lens[2], .stride = dc[2].cap, .rot = segs[3].rot};
        lz_kv_cache_reset(&lc, pos);
        float *lw = (float *)malloc((size_t)vocab * 4), *lk = (float *)malloc((size_t)vocab * 4);
        CHECK(lz_llama_forward(m, sc, &lc, whole, 4, qids, n_q, lw, LZ_LOGITS_LAST) == 0, "cpu question (whole)");
        int idb[3][66];
        const int *dids[3] = {idb[0], idb[1], idb[2]};
        for (int i = 0; i < nd; i++)
            for (int j = 0; j < lens[i]; j++) idb[i][j] = 3 + (j * 97 + 11 * i) % (vocab - 3);
        uint8_t keyb[4][32];
        const uint8_t *keys[4];
        for (int i = 0; i < 4; i++) { memset(keyb[i], 0, 32); keyb[i][0] = (uint8_t)(i + 1); keys[i] = keyb[i]; }
        lz_kv_segment held[4];
        memcpy(held, segs, sizeof held);
        for (int i = 1; i < 4; i++) held[i] = (lz_kv_segment){.n = lens[i - 1], .stride = lens[i - 1], .rot = segs[i].rot};
        const int caps[3] = {128, 70, 50};
        for (int t = 0; t < 3; t++) {
            lz_llama_gpu *gk = NULL;
            CHECK(lz_llama_gpu_new(m, caps[t], &gk, err, sizeof err) == 0, "gpu: %s", err);
            if (!gk) continue;
            int bad[3] = {1, 2, vocab};
            const int *bids[1] = {bad};
            const int n3 = 3;
            CHECK(lz_llama_gpu_encode_keep(gk, &segs[0], keys[0], bids, &n3, &keys[1], 1, err, sizeof err) != 0 &&
                      strstr(err, "out of range") && !lz_llama_gpu_resident(gk, keys[1]),
                  "an id out of range recomputed or kept");
            CHECK(lz_llama_gpu_encode_keep(gk, &segs[0], keys[0], dids, lens, &keys[1], 3, err, sizeof err) == 0,
                  "encode_keep: %s", err);
            const int fits = lens[2] <= caps[t];
            int all = 1;
            for (int i = 0; i < 3; i++) all &= lz_llama_gpu_resident(gk, keys[i]);
            CHECK(all && lz_llama_gpu_resident(gk, keys[3]) == fits,
                  "max_tokens %d: the prefix and the documents that fit resident", caps[t]);
            held[3] = fits ? (lz_kv_segment){.n = lens[2], .stride = lens[2], .rot = segs[3].rot} : whole[3];
            long h0, m0, h1, m1;
            size_t b0, b1;
            CHECK(lz_llama_gpu_begin(gk, held, keys, 4, pos, err, sizeof err) == 0 &&
                      lz_llama_gpu_step(gk, qids, n_q, lk, err, sizeof err) == 0,
                  "question over recomputed documents: %s", err);
            lz_llama_gpu_cache_stats(gk, &h0, &m0, &b0);
            CHECK(h0 == 0 && m0 == 4, "recomputed ones count as misses (%ld hits, %ld misses)", h0, m0);
            const double e = vec_err(lk, lw, vocab);
            CHECK(e <= 3e-2, "recomputed documents (max_tokens %d): logits normalised error %.3g", caps[t], e);
            printf("query d=%3d H=%d KV=%d %-8s: 3 documents recomputed on the GPU (max_tokens %3d): logits normalised "
                   "error %.2e against the CPU over the same documents\n", hd, heads, kv, layout_half ? "half" : "adjacent",
                   caps[t], e);
            float *again = (float *)malloc((size_t)vocab * 4);
            CHECK(lz_llama_gpu_encode_keep(gk, &segs[0], keys[0], dids, lens, &keys[1], 3, err, sizeof err) == 0 &&
                      lz_llama_gpu_begin(gk, held, keys, 4, pos, err, sizeof err) == 0 &&
                      lz_llama_gpu_step(gk, qids, n_q, again, err, sizeof err) == 0,
                  "again: %s", err);
            lz_llama_gpu_cache_stats(gk, &h1, &m1, &b1);
            CHECK(h1 - h0 == 4 && m1 == m0 && b1 == b0 && !memcmp(again, lk, (size_t)vocab * 4),
                  "resident ones not recomputed: %ld hits, %ld misses, the same logits", h1 - h0, m1 - m0);
            free(again);
            if (t == 0) { /* a question recomputed its documents and failed before its begin */
                uint8_t sk[4][32];
                const uint8_t *skeys[4] = {keys[0], sk[1], sk[2], sk[3]};
                for (int i = 1; i < 4; i++) { memset(sk[i], 0, 32); sk[i][0] = (uint8_t)(0x40 + i); }
                CHECK(lz_llama_gpu_encode_keep(gk, &segs[0], keys[0], dids, lens, &skeys[1], 3, err, sizeof err) == 0 &&
                          lz_llama_gpu_resident(gk, sk[1]),
                      "stale: recomputed, kept pending: %s", err);
                /* the next question's recompute drops them (budget 0 would not evict pending ones) */
                CHECK(lz_llama_gpu_encode_keep(gk, &segs[0], keys[0], dids, lens, &keys[1], 3, err, sizeof err) == 0 &&
                          lz_llama_gpu_begin(gk, held, keys, 4, pos, err, sizeof err) == 0 &&
                          lz_llama_gpu_step(gk, qids, n_q, lk, err, sizeof err) == 0,
                      "the next question: %s", err);
                lz_llama_gpu_set_cache(gk, 0);
                int left = 0;
                for (int i = 1; i < 4; i++) left += lz_llama_gpu_resident(gk, sk[i]);
                CHECK(left == 0, "a failed question's recomputed documents left outside the budget: %d of 3", left);
            }
            lz_llama_gpu_free(gk);
        }
        free(lw);
        free(lk);
    }
    lz_llama_scratch_free(sc);
    lz_kv_cache_free(&lc);
    lz_kv_cache_free(&pc);
    for (int i = 0; i < nd; i++) lz_kv_cache_free(&dc[i]);
    free(lcpu); free(lgpu); free(k16); free(v16); free(packed_k); free(packed_v); free(p16);
    lz_llama_free(m);
    remove(path);
}

static void bench(const char *dir)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/bench.gguf", dir);
    const int n = 1024, s = 64;
    lz_llama *m = make_model(path, 1536, 12, 12, 4, 128, 4096, 32000, 0);
    if (!m) return;
    lz_llama_gpu *g = NULL;
    if (lz_llama_gpu_new(m, n, &g, err, sizeof err)) { CHECK(0, "gpu: %s", err); lz_llama_free(m); return; }
    int prefix[64], *ids = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < s; i++) prefix[i] = 3 + i;
    for (int i = 0; i < n; i++) ids[i] = 3 + (i * 97 + 11) % 31000;
    lz_kv_cache pc, dc, gc;
    double t = lz_now_s();
    CHECK(cpu_encode(m, prefix, s, ids, n, &pc, &dc) == 0, "cpu");
    const double tc = lz_now_s() - t;
    lz_kv_cache_init(&gc, &m->cfg, n);
    lz_llama_gpu_set_prefix(g, &pc, err, sizeof err);
    lz_llama_gpu_encode(g, ids, n, &gc, NULL, 0, 0, err, sizeof err); /* warm-up */
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        t = lz_now_s();
        CHECK(lz_llama_gpu_encode(g, ids, n, &gc, NULL, 0, 0, err, sizeof err) == 0, "encode: %s", err);
        t = lz_now_s() - t;
        best = t < best ? t : best;
    }
    const double params = 12.0 * (1536.0 * 1536 * 2 + 1536.0 * 512 * 2 + 3.0 * 1536 * 4096) + 32000.0 * 1536;
    printf("bench: %.0fM-parameter model, one %d-token document after a %d-token prefix: GPU %.2f ms (%.0f tok/s, "
           "%.1f TFLOP/s of GEMMs, K/V read back included), CPU engine %.0f ms (%.0f tok/s, %d threads): %.0fx\n",
           params / 1e6, n, s, best * 1e3, n / best, 2.0 * (params - 32000.0 * 1536) * n / best / 1e12, tc * 1e3,
           n / tc, (int)sysconf(_SC_NPROCESSORS_ONLN), tc / best);
    /* a question over 10 documents of 150 tokens (encoded on the GPU), placed after the prefix */
    enum { ND = 10, DL = 150, NQ = 32, STEPS = 32 };
    lz_kv_cache docs[ND];
    lz_kv_segment segs[ND + 1];
    segs[0] = (lz_kv_segment){.k = pc.k, .v = pc.v, .n = s, .stride = pc.cap};
    int64_t pos = s;
    for (int i = 0; i < ND; i++) {
        lz_kv_cache_init(&docs[i], &m->cfg, DL);
        CHECK(lz_llama_gpu_encode(g, ids + i * 50, DL, &docs[i], NULL, 0, 0, err, sizeof err) == 0, "encode: %s", err);
        segs[i + 1] = (lz_kv_segment){.k = docs[i].k, .v = docs[i].v, .n = DL, .stride = DL, .rot = pos - s};
        pos += DL;
    }
    int qids[NQ], tok = 5;
    for (int i = 0; i < NQ; i++) qids[i] = 7 + i;
    float *lg = (float *)malloc((size_t)m->cfg.vocab * 4);
    lz_llama_gpu *gq = NULL;
    if (lz_llama_gpu_new(m, NQ + STEPS, &gq, err, sizeof err)) { CHECK(0, "gpu: %s", err); }
    double tg_ttft = 1e9, tg_dec = 1e9, tg_cold = 0;
    uint8_t keyb[ND + 1][32];
    const uint8_t *keys[ND + 1];
    for (int i = 0; i <= ND; i++) { memset(keyb[i], 0, 32); keyb[i][0] = (uint8_t)(i + 1); keys[i] = keyb[i]; }
    for (int r = 0; gq && r < 4; r++) { /* round 0 uploads the documents, later rounds find them resident */
        t = lz_now_s();
        CHECK(lz_llama_gpu_begin(gq, segs, keys, ND + 1, pos, err, sizeof err) == 0 &&
              lz_llama_gpu_step(gq, qids, NQ, lg, err, sizeof err) == 0, "gpu question: %s", err);
        const double a = lz_now_s() - t;
        t = lz_now_s();
        for (int i = 0; i < STEPS; i++) lz_llama_gpu_step(gq, &tok, 1, lg, err, sizeof err);
        const double b = lz_now_s() - t;
        if (r == 0) tg_cold = a;
        else tg_ttft = a < tg_ttft ? a : tg_ttft;
        tg_dec = b < tg_dec ? b : tg_dec;
    }
    lz_kv_cache lc;
    lz_llama_scratch *sc = lz_llama_scratch_new(m, 64);
    lz_kv_cache_init(&lc, &m->cfg, NQ + STEPS);
    lz_kv_cache_reset(&lc, pos);
    t = lz_now_s();
    lz_llama_forward(m, sc, &lc, segs, ND + 1, qids, NQ, lg, LZ_LOGITS_LAST);
    const double tc_ttft = lz_now_s() - t;
    t = lz_now_s();
    for (int i = 0; i < STEPS; i++) lz_llama_forward(m, sc, &lc, segs, ND + 1, &tok, 1, lg, LZ_LOGITS_LAST);
    const double tc_dec = lz_now_s() - t;
    printf("bench: a %d-token question over %d documents of %d tokens (lazy placement) and %d decode steps: "
           "GPU %.2f ms to the first token with the documents resident (%.2f ms uploading them), %.1f tok/s decode; "
           "CPU engine %.1f ms, %.1f tok/s: %.0fx / %.0fx\n", NQ, ND, DL, STEPS, tg_ttft * 1e3, tg_cold * 1e3,
           STEPS / tg_dec, tc_ttft * 1e3, STEPS / tc_dec, tc_ttft / tg_ttft, tc_dec / tg_dec);
    lz_llama_scratch_free(sc);
    lz_kv_cache_free(&lc);
    lz_llama_gpu_free(gq);
    for (int i = 0; i < ND; i++) lz_kv_cache_free(&docs[i]);
    free(lg);
    free(ids);
    lz_kv_cache_free(&pc); lz_kv_cache_free(&dc); lz_kv_cache_free(&gc);
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

static int gpu_encode_cb(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                         size_t errlen)
{
    return lz_llama_gpu_encode((lz_llama_gpu *)ctx, ids, n, out, qwin, c0, cw, err, errlen);
}

/* lazyingest --gpu's prefix: lz_encoder_new_on with the GPU as its backend
 * (no prefix set on it yet) against lz_encoder_new on the CPU. */
static void test_prefix_on_gpu(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/mprefix.gguf", dir);
    const int layers = 3, kv = 2, hd = 128, s = 41, vocab = 512;
    lz_llama *m = make_model(path, 256, layers, 8, kv, hd, 512, vocab, 1);
    if (!m) return;
    char err[512];
    lz_llama_gpu *g = NULL;
    lz_encoder *ec = NULL, *eg = NULL;
    int prefix[41];
    for (int i = 0; i < s; i++) prefix[i] = 3 + (i * 53 + 7) % (vocab - 3);
    lz_encode_backend b = {NULL, gpu_encode_cb, 700};
    int ok = lz_llama_gpu_new(m, 700, &g, err, sizeof err) == 0 && (b.ctx = g) &&
             lz_encoder_new(m, prefix, s, &ec, err, sizeof err) == 0 &&
             lz_encoder_new_on(m, prefix, s, &b, &eg, err, sizeof err) == 0;
    CHECK(ok, "encoders: %s", err);
    if (ok) {
        const lz_kv_cache *pc = lz_encoder_prefix_cache(ec), *pg = lz_encoder_prefix_cache(eg);
        CHECK(pg->n == s && pg->pos0 == 0, "GPU prefix rows %d from %d", pg->n, pg->pos0);
        double worst = 0;
        int nan = 0;
        for (int lh = 0; lh < layers * kv; lh++)
            for (int kvi = 0; kvi < 2; kvi++) {
                double num = 0, den = 0;
                const float *a = (kvi ? pg->v : pg->k) + (size_t)lh * pg->cap * hd, *r = (kvi ? pc->v : pc->k) + (size_t)lh * pc->cap * hd;
                for (size_t e = 0; e < (size_t)s * hd; e++) {
                    nan += !isfinite(a[e]);
                    num += ((double)a[e] - r[e]) * ((double)a[e] - r[e]);
                    den += (double)r[e] * r[e];
                }
                const double ne = sqrt(num / (den > 0 ? den : 1));
                worst = ne > worst ? ne : worst;
            }
        CHECK(nan == 0 && worst <= 3e-2, "prefix on the GPU: worst (layer, head) K/V normalised error %.3g, %d NaN", worst, nan);
        printf("prompt prefix of %d tokens on the GPU vs the CPU encoder: worst (layer, head) K/V normalised error %.2e\n",
               s, worst);
    }
    lz_encoder_free(ec);
    lz_encoder_free(eg);
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

/* The fast tiers (gpu/llama_cuda_pool.cu): a question's logits bit for bit the same whether its
 * documents came from pinned host memory (K and V in one block, copied layer by layer beside
 * the question's first step), from pageable memory in two planes, or were resident in HBM; then churn: 3,000 questions of 4 documents
 * drawn from 12 under a budget of about 3, with device memory, the pool's regions and a
 * reference question's logits unchanged from the first hundred questions on. */
static void test_tiers(const char *dir)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/tiers.gguf", dir);
    const int layers = 2, vocab = 512, kv = 2, hd = 64, s = 0, nd = 12, n_q = 6;
    lz_llama *m = make_model(path, 128, layers, 4, kv, hd, 256, vocab, 0);
    if (!m) return;
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, 64, &g, err, sizeof err) == 0, "gpu: %s", err);
    if (!g) { lz_llama_free(m); return; }
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    auto rnd = [&rs]() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; };
    /* documents of random bf16 KV: pinned (K then V, one block) and the same values pageable */
    int lens[12];
    uint16_t *pin[12], *pk[12], *pv[12];
    size_t bytes[12];
    for (int i = 0; i < nd; i++) {
        lens[i] = 5 + (int)(rnd() % 40);
        const size_t e = (size_t)layers * kv * lens[i] * hd;
        bytes[i] = e * 4;
        pin[i] = (uint16_t *)lz_llama_gpu_host_alloc(g, bytes[i]);
        pk[i] = (uint16_t *)malloc(e * 2), pv[i] = (uint16_t *)malloc(e * 2);
        CHECK(pin[i] && pk[i] && pv[i], "pinned host memory");
        if (!pin[i] || !pk[i] || !pv[i]) { lz_llama_gpu_free(g); lz_llama_free(m); return; }
        for (size_t j = 0; j < 2 * e; j++) pin[i][j] = lz_f32_to_bf16(((int)(rnd() % 2001) - 1000) / 1000.0f);
        memcpy(pk[i], pin[i], e * 2);
        memcpy(pv[i], pin[i] + e, e * 2);
    }
    int qids[6];
    for (int i = 0; i < n_q; i++) qids[i] = 3 + (i * 29) % (vocab - 3);
    /* a question over documents pick[0..3] from source src (0 pinned, 1 pageable) */
    auto ask = [&](const int *pick, int src, const uint8_t *const *keys, float *logits, int blk = 0) {
        lz_kv_segment segs[4];
        int64_t p = s;
        for (int j = 0; j < 4; j++) {
            const int i = pick[j];
            const size_t e = (size_t)layers * kv * lens[i] * hd;
            segs[j] = (lz_kv_segment){.n = lens[i], .stride = lens[i], .rot = p - s};
            segs[j].k16 = src ? pk[i] : pin[i];
            segs[j].v16 = src ? pv[i] : pin[i] + e;
            p += lens[i];
        }
        return (blk ? lz_llama_gpu_begin_block : lz_llama_gpu_begin)(g, segs, keys, 4, p, err, sizeof err) == 0 &&
               lz_llama_gpu_step(g, qids, n_q, logits, err, sizeof err) == 0;
    };
    uint8_t kb[12][32];
    for (int i = 0; i < nd; i++) { memset(kb[i], 0, 32); kb[i][0] = (uint8_t)(i + 1); kb[i][1] = 0x7a; }
    const int ref[4] = {0, 1, 2, 3};
    const uint8_t *rk[4] = {kb[0], kb[1], kb[2], kb[3]};
    float *l_pin = (float *)malloc(vocab * 4), *l_page = (float *)malloc(vocab * 4), *l_hbm = (float *)malloc(vocab * 4);
    lz_llama_gpu_set_cache(g, 0); /* nothing stays: every question uploads */
    CHECK(ask(ref, 1, rk, l_page), "pageable: %s", err);
    CHECK(ask(ref, 0, rk, l_pin), "pinned: %s", err);
    lz_llama_gpu_tiers t0, t1;
    lz_llama_gpu_tier_stats(g, &t0);
    CHECK(!memcmp(l_pin, l_page, vocab * 4), "pinned and pageable uploads differ");
    CHECK(t0.uploads == 8 && t0.bytes_up == (int64_t)(2 * (bytes[0] + bytes[1] + bytes[2] + bytes[3])),
          "uploads counted: %lld of %lld bytes", (long long)t0.uploads, (long long)t0.bytes_up);
    /* budget 0: the last question's documents stay only until the next one begins */
    CHECK(t0.copy_s > 0 && t0.pool_regions == 1 && t0.pool_used == bytes[0] + bytes[1] + bytes[2] + bytes[3],
          "copy time %.3g s, %d regions, %zu bytes used", t0.copy_s, t0.pool_regions, t0.pool_used);
    size_t budget = bytes[0] + bytes[1] + bytes[2];
    lz_llama_gpu_set_cache(g, budget);
    CHECK(ask(ref, 0, rk, l_hbm) && ask(ref, 0, rk, l_hbm), "resident: %s", err);
    long h, mi;
    size_t used;
    lz_llama_gpu_cache_stats(g, &h, &mi, &used);
    CHECK(!memcmp(l_hbm, l_pin, vocab * 4) && h > 0, "resident documents (%ld hits) gave other logits", h);
    /* block mode: the copies rotated on the device to their placements, within bf16 rounding of
     * lazy; resident the second time (keys of their own) and then the same bits */
    {
        uint8_t bk[4][32];
        const uint8_t *bkp[4];
        for (int j = 0; j < 4; j++) { memset(bk[j], 0, 32); bk[j][0] = (uint8_t)(j + 1); bk[j][1] = 0xb1; bkp[j] = bk[j]; }
        float *l_blk = (float *)malloc(vocab * 4), *l_blk2 = (float *)malloc(vocab * 4);
        long h0, m0, h1, m1;
        size_t u0, u1;
        lz_llama_gpu_set_cache(g, (size_t)1 << 28); /* room for the copies (else LFU turns the new keys away) */
        lz_llama_gpu_cache_stats(g, &h0, &m0, &u0);
        CHECK(ask(ref, 0, bkp, l_blk, 1) && ask(ref, 0, bkp, l_blk2, 1), "block: %s", err);
        lz_llama_gpu_cache_stats(g, &h1, &m1, &u1);
        lz_llama_gpu_set_cache(g, budget);
        const double e = vec_err(l_blk, l_pin, vocab);
        CHECK(e <= 3e-2, "block against lazy: logits normalised error %.3g", e);
        CHECK(!memcmp(l_blk, l_blk2, vocab * 4) && m1 - m0 == 4 && h1 - h0 == 4,
              "block resident: the same logits (%ld misses, %ld hits)", m1 - m0, h1 - h0);
        printf("tiers: block (copies rotated on the device) against lazy: logits normalised error %.2e\n", e);
        free(l_blk);
        free(l_blk2);
    }
    /* churn */
    size_t free0 = 0, free1 = 0, tot = 0;
    int ok = 1, regions0 = 0, same = 1;
    float *l = (float *)malloc(vocab * 4);
    for (int it = 0; it < 3000 && ok; it++) {
        int pick[4];
        const uint8_t *keys[4];
        for (int j = 0; j < 4; j++) {
            int i;
            do {
                const uint64_t r = rnd() % 100; /* skewed: low ids more often */
                i = r < 40 ? (int)(r % 3) : r < 70 ? 3 + (int)(r % 4) : 7 + (int)(r % 5);
                for (int k = 0; k < j; k++) if (pick[k] == i) i = -1;
            } while (i < 0);
            pick[j] = i;
            keys[j] = kb[i];
        }
        ok = ask(pick, (int)(rnd() % 2), keys, l);
        if (it % 500 == 499) same &= ask(ref, 0, rk, l) && !memcmp(l, l_pin, vocab * 4);
        if (it == 99) {
            cudaMemGetInfo(&free0, &tot);
            lz_llama_gpu_tier_stats(g, &t0);
            regions0 = t0.pool_regions;
        }
    }
    CHECK(ok, "churn: %s", err);
    CHECK(same, "churn: the reference question's logits changed");
    cudaMemGetInfo(&free1, &tot);
    lz_llama_gpu_tier_stats(g, &t1);
    lz_llama_gpu_cache_stats(g, &h, &mi, &used);
    CHECK(free1 == free0 && t1.pool_regions == regions0, "churn: device memory %zu -> %zu free, pool regions %d -> %d",
          free0, free1, regions0, t1.pool_regions);
    CHECK(used <= budget && t1.pool_used <= t1.pool_capacity && h > 0 && mi > 0,
          "churn: %zu bytes kept (budget %zu), pool %zu of %zu, %ld hits %ld misses", used, budget, t1.pool_used,
          t1.pool_capacity, h, mi);
    printf("tiers: pinned = pageable = resident logits; churn of 3,000 questions: %ld hits, %ld misses, %lld uploads "
           "(%.1f MB at %.2f GB/s), pool %d region(s) of %.1f MB, %lld fragmentation evictions, device memory stable\n",
           h, mi, (long long)t1.uploads, t1.bytes_up / 1e6, t1.copy_s > 0 ? t1.bytes_up / t1.copy_s / 1e9 : 0.0,
           t1.pool_regions, t1.pool_capacity / 1e6, (long long)t1.pool_evictions);
    /* prefix mode: two documents and a question stepped as own tokens, the documents' rows kept
     * (lz_llama_gpu_keep_own); the question again over them as resident segments at offset 0:
     * the same logits within the engine's tolerance */
    {
        lz_llama_gpu *gp = NULL;
        CHECK(lz_llama_gpu_new(m, 256, &gp, err, sizeof err) == 0, "gpu: %s", err);
        if (gp) {
            int all[41];
            for (int i = 0; i < 41; i++) all[i] = 3 + (int)(rnd() % (vocab - 3));
            float *l1 = (float *)malloc(vocab * 4), *l2 = (float *)malloc(vocab * 4);
            uint8_t ka[32] = {0xa1}, kb2[32] = {0xb2};
            const uint8_t *kk[2] = {ka, kb2};
            CHECK(lz_llama_gpu_begin(gp, NULL, NULL, 0, 0, err, sizeof err) == 0 &&
                      lz_llama_gpu_step(gp, all, 41, l1, err, sizeof err) == 0,
                  "prefix: the whole prompt: %s", err);
            CHECK(lz_llama_gpu_keep_own(gp, 0, 20, ka, err, sizeof err) == 1 &&
                      lz_llama_gpu_keep_own(gp, 20, 15, kb2, err, sizeof err) == 1 &&
                      lz_llama_gpu_keep_own(gp, 30, 20, kb2, err, sizeof err) < 0,
                  "keep_own: %s", err);
            lz_kv_segment held[2] = {{.n = 20, .stride = 20}, {.n = 15, .stride = 15}};
            CHECK(lz_llama_gpu_resident(gp, ka) && lz_llama_gpu_resident(gp, kb2) &&
                      lz_llama_gpu_begin(gp, held, kk, 2, 35, err, sizeof err) == 0 &&
                      lz_llama_gpu_step(gp, all + 35, 6, l2, err, sizeof err) == 0,
                  "prefix: the question over the kept documents: %s", err);
            const double e = vec_err(l2, l1, vocab);
            CHECK(e <= 3e-2, "prefix: kept rows against the whole prompt: logits normalised error %.3g", e);
            printf("tiers: prefix (own rows kept, reused as segments) against the whole prompt: error %.2e\n", e);
            free(l1);
            free(l2);
        }
        lz_llama_gpu_free(gp);
    }
    /* the start-up preload: new keys kept while the budget has room, then refused; resident */
    {
        lz_llama_gpu *gp = NULL;
        CHECK(lz_llama_gpu_new(m, 64, &gp, err, sizeof err) == 0, "gpu: %s", err);
        if (gp) {
            lz_llama_gpu_set_cache(gp, budget);
            int kept = 0, rc = 1;
            for (int i = 0; i < nd && rc == 1; i++) {
                const size_t e = (size_t)layers * kv * lens[i] * hd;
                lz_kv_segment sg = {.n = lens[i], .stride = lens[i]};
                sg.k16 = pin[i], sg.v16 = pin[i] + e;
                CHECK(lz_llama_gpu_preload(gp, NULL, kb[i], 5.0, err, sizeof err) == 0, "a prior alone keeps nothing");
                rc = lz_llama_gpu_preload(gp, &sg, kb[i], 0, err, sizeof err);
                if (rc == 1) CHECK(lz_llama_gpu_resident(gp, kb[i]), "preloaded document %d resident", i);
                kept += rc == 1;
            }
            lz_llama_gpu_cache_stats(gp, &h, &mi, &used);
            CHECK(rc == 0 && kept >= 1 && used <= budget, "preload: %d kept, then refused (%d), %zu of %zu bytes", kept, rc,
                  used, budget);
        }
        lz_llama_gpu_free(gp);
    }
    free(l); free(l_pin); free(l_page); free(l_hbm);
    for (int i = 0; i < nd; i++) { lz_llama_gpu_host_free(g, pin[i], bytes[i]); free(pk[i]); free(pv[i]); }
    lz_llama_gpu_free(g);
    lz_llama_free(m);
    remove(path);
}

/* ---- several sequences at once (lz_llama_gpu_set_slots, _prefill_many, _decode_many) ---- */

/* Random bf16 documents (K then V, pageable) and the keys they go by, for the slot tests. */
typedef struct {
    int n, lens[12];
    uint16_t *kv[12];
    uint8_t keys[12][32];
} rand_docs;

static void rand_docs_make(rand_docs *r, const lz_llama_config *c, int n, const int *lens, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    for (int i = 0; i < n; i++) {
        r->lens[i] = lens[i];
        const size_t e = (size_t)c->n_layers * c->n_kv_heads * lens[i] * c->head_dim;
        r->kv[i] = (uint16_t *)malloc(2 * e * 2);
        for (size_t j = 0; j < 2 * e; j++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            r->kv[i][j] = lz_f32_to_bf16(((int)(seed % 2001) - 1000) / 1000.0f);
        }
        memset(r->keys[i], 0, 32);
        r->keys[i][0] = (uint8_t)(i + 1);
        r->keys[i][1] = 0x5a;
    }
}

static void rand_docs_free(rand_docs *r)
{
    for (int i = 0; i < r->n; i++) free(r->kv[i]);
}

/* A question's segments over documents pick[0..nd) placed from position p0: segs, keys; the
 * position after them. */
static int64_t place(const rand_docs *r, const lz_llama_config *c, const int *pick, int nd, int64_t p0,
                     lz_kv_segment *segs, const uint8_t **keys)
{
    int64_t p = p0;
    for (int j = 0; j < nd; j++) {
        const int i = pick[j];
        const size_t e = (size_t)c->n_layers * c->n_kv_heads * r->lens[i] * c->head_dim;
        segs[j] = (lz_kv_segment){.n = r->lens[i], .stride = r->lens[i], .rot = p};
        segs[j].k16 = r->kv[i];
        segs[j].v16 = r->kv[i] + e;
        keys[j] = r->keys[i];
        p += r->lens[i];
    }
    return p;
}

/* The largest |a - b| over n, and the gap between the two largest of b. */
static double max_abs(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m = fabs((double)a[i] - b[i]) > m ? fabs((double)a[i] - b[i]) : m;
    return m;
}

static double top_gap(const float *x, int n)
{
    const int b = argmax(x, n);
    double second = -1e30;
    for (int i = 0; i < n; i++) if (i != b && x[i] > second) second = x[i];
    return (double)x[b] - second;
}

/* Batched decode over several slots against each sequence decoded alone: six questions over
 * different documents (2 to 4 of 8, 7 to 130 tokens, placed at other offsets), question lengths
 * and answer lengths, four slots: the first four join together (one prefill_many), the others
 * join as slots are released (a slot reused), every step one decode_many over the slots live
 * then, each fed the tokens its serial run chose greedily. Logits within the engine's tolerance
 * (normalised error <= 3e-2 at every step, as GPU against CPU), and each step's greedy token the
 * serial one except where the serial logits' top two are closer than twice the largest logit
 * difference (a tie the products' order can break; counted, reported). A pass of one sequence
 * (prefill or decode) is the serial path: the same bits. The passes run by decode_next: each
 * row's greedy tokens are the argmax of the logits it returned, with and without a ban list of
 * the serial runs' commonest tokens; on the serial engine a pass asking no logits gives the
 * serial run's tokens. Bad calls fail. */
static void test_slots(const char *dir)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/slots.gguf", dir);
    const int layers = 3, vocab = 512, N = 128, NS = 6;
    lz_llama *m = make_model(path, 256, layers, 8, 2, 128, 512, vocab, 1);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    const int lens[8] = {41, 7, 66, 130, 12, 90, 33, 70};
    rand_docs rd;
    rand_docs_make(&rd, c, 8, lens, 0x1234567ull);
    const int nd[NS] = {3, 2, 4, 2, 3, 2}, pick[NS][4] = {{0, 1, 2}, {3, 4}, {5, 6, 7, 1}, {2, 5}, {7, 0, 3}, {6, 4}};
    const int64_t p0[NS] = {17, 17, 300, 5000, 17, 40};
    const int nq[NS] = {9, 1, 20, 5, 13, 3}, steps[NS] = {60, 5, 33, 70, 12, 45};
    int qids[NS][20];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < nq[i]; j++) qids[i][j] = 3 + (j * 37 + 11 * i) % (vocab - 3);
    lz_kv_segment segs[NS][4];
    const uint8_t *keys[NS][4];
    int64_t pos[NS];
    for (int i = 0; i < NS; i++) pos[i] = place(&rd, c, pick[i], nd[i], p0[i], segs[i], keys[i]);
    /* each alone: the serial engine (slot 0, lz_llama_gpu_begin / _step) */
    float *ref[NS];
    int tok[NS][70];
    lz_llama_gpu *gr = NULL, *gb = NULL;
    CHECK(lz_llama_gpu_new(m, N, &gr, err, sizeof err) == 0 && lz_llama_gpu_new(m, N, &gb, err, sizeof err) == 0, "gpu: %s",
          err);
    for (int i = 0; i < NS; i++) {
        ref[i] = (float *)malloc((size_t)(steps[i] + 1) * vocab * 4);
        CHECK(gr && lz_llama_gpu_begin(gr, segs[i], keys[i], nd[i], pos[i], err, sizeof err) == 0 &&
                  lz_llama_gpu_step(gr, qids[i], nq[i], ref[i], err, sizeof err) == 0,
              "serial %d: %s", i, err);
        for (int t = 0; gr && t < steps[i]; t++) {
            tok[i][t] = argmax(ref[i] + (size_t)t * vocab, vocab);
            CHECK(lz_llama_gpu_step(gr, &tok[i][t], 1, ref[i] + (size_t)(t + 1) * vocab, err, sizeof err) == 0,
                  "serial %d step %d: %s", i, t, err);
        }
    }
    if (!gr || !gb) { lz_llama_gpu_free(gr); lz_llama_gpu_free(gb); lz_llama_free(m); return; }
    /* the ban list: the serial runs' three commonest greedy tokens */
    int ban[3], n_ban = 0, nx[8], greedy_ok = 0, greedy_n = 0;
    {
        int *count = (int *)calloc((size_t)vocab, sizeof(int));
        for (int i = 0; i < NS; i++)
            for (int t = 0; t < steps[i]; t++) count[tok[i][t]]++;
        for (; n_ban < 3; n_ban++) {
            ban[n_ban] = argmax(count, vocab);
            count[ban[n_ban]] = -1;
        }
        free(count);
    }
    CHECK(lz_llama_gpu_set_ban(gb, ban, n_ban, err, sizeof err) == 0, "set_ban: %s", err);
    {
        int many[LZ_ARGMAX_MAX_BAN + 1] = {0};
        CHECK(lz_llama_gpu_set_ban(gb, many, LZ_ARGMAX_MAX_BAN + 1, err, sizeof err) != 0 && strstr(err, "at most"),
              "a ban list past the bound: %s", err);
    }
    /* the serial engine again, sequence 0: passes that ask no logits choose the serial tokens */
    CHECK(lz_llama_gpu_set_ban(gr, ban, n_ban, err, sizeof err) == 0 &&
              lz_llama_gpu_begin(gr, segs[0], keys[0], nd[0], pos[0], err, sizeof err) == 0 &&
              lz_llama_gpu_step(gr, qids[0], nq[0], NULL, err, sizeof err) == 0,
          "serial again: %s", err);
    {
        float *none[1] = {NULL}, *masked = (float *)malloc((size_t)vocab * 4);
        int same = 1, same_ban = 1;
        for (int t = 0; t + 1 < steps[0]; t++) {
            CHECK(lz_llama_gpu_decode_next(gr, NULL, &tok[0][t], 1, none, nx, err, sizeof err) == 0, "decode_next: %s", err);
            memcpy(masked, ref[0] + (size_t)(t + 1) * vocab, (size_t)vocab * 4);
            for (int b = 0; b < n_ban; b++) masked[ban[b]] = -INFINITY;
            same &= nx[0] == tok[0][t + 1];
            same_ban &= nx[1] == argmax(masked, vocab);
        }
        CHECK(same && same_ban, "the serial engine's greedy tokens without logits: as the serial run (%d), banned (%d)",
              same, same_ban);
        free(masked);
    }
    CHECK(lz_llama_gpu_slots(gb) == 1 && lz_llama_gpu_set_slots(gb, 1 << 20, N, err, sizeof err) != 0 &&
              strstr(err, "fit"),
          "a million slots accepted: %s", err);
    CHECK(lz_llama_gpu_set_slots(gb, 4, N, err, sizeof err) == 0 && lz_llama_gpu_slots(gb) == 4 &&
              lz_llama_gpu_slot_tokens(gb) == N,
          "set_slots: %s", err);
    /* batched: slots join and leave; each step one decode_many over the live ones */
    int slot_of[NS], at[NS], next = 0, live = 0, done = 0, flips = 0, ties = 0, exact1 = 0, passes = 0, multi = 0;
    /* mixed[i]: sequence i ran in a pass of several (its K/V rows then differ from the serial
     * run's in the last bits, so its later passes of one owe the serial bits no more) */
    int mixed[NS];
    for (int i = 0; i < NS; i++) slot_of[i] = -1, at[i] = 0, mixed[i] = 0;
    double worst = 0;
    float *lg = (float *)malloc((size_t)4 * vocab * 4);
    for (int round = 0; round < 400 && done < NS; round++) {
        /* joins: every free slot takes the next question; their questions in one prefill_many */
        int js[4], jslot[4], jn[4], nj = 0;
        const int *jids[4];
        float *jl[4];
        while (next < NS && lz_llama_gpu_idle_slot(gb) >= 0) {
            const int i = next++, sl = lz_llama_gpu_idle_slot(gb);
            CHECK(lz_llama_gpu_begin_slot(gb, sl, segs[i], keys[i], nd[i], pos[i], err, sizeof err) == 0, "begin %d: %s",
                  i, err);
            slot_of[i] = sl;
            js[nj] = i, jslot[nj] = sl, jn[nj] = nq[i], jids[nj] = qids[i], jl[nj] = lg + (size_t)nj * vocab;
            nj++;
            live++;
        }
        if (next < NS) CHECK(lz_llama_gpu_idle_slot(gb) == -1, "idle_slot with every slot live");
        if (nj) {
            CHECK(lz_llama_gpu_prefill_many(gb, jslot, jids, jn, nj, jl, err, sizeof err) == 0, "prefill_many: %s", err);
            for (int j = 0; j < nj; j++) {
                const double e = vec_err(jl[j], ref[js[j]], vocab);
                worst = e > worst ? e : worst;
                if (nj == 1) exact1 += !memcmp(jl[j], ref[js[j]], (size_t)vocab * 4);
                CHECK(nj > 1 || !memcmp(jl[j], ref[js[j]], (size_t)vocab * 4), "a prefill of one is not the serial one");
                mixed[js[j]] |= nj > 1;
            }
        }
        /* one decode step for every live sequence, fed its serial token */
        int ds[4], dslot[4], dtok[4], n = 0;
        for (int i = 0; i < NS; i++)
            if (slot_of[i] >= 0 && at[i] < steps[i]) ds[n] = i, dslot[n] = slot_of[i], dtok[n] = tok[i][at[i]], n++;
        if (n) {
            float *rows[4];
            for (int j = 0; j < n; j++) rows[j] = lg + (size_t)j * vocab;
            CHECK(lz_llama_gpu_decode_next(gb, dslot, dtok, n, rows, nx, err, sizeof err) == 0, "decode_next (%d): %s", n,
                  err);
            for (int j = 0; j < n; j++) { /* its greedy tokens: the argmax of the logits it returned, unmasked and masked */
                float *row = rows[j];
                const int all = argmax(row, vocab);
                float keep[3];
                for (int b = 0; b < n_ban; b++) keep[b] = row[ban[b]], row[ban[b]] = -INFINITY;
                const int kept = argmax(row, vocab);
                for (int b = 0; b < n_ban; b++) row[ban[b]] = keep[b];
                greedy_ok += nx[2 * j] == all && nx[2 * j + 1] == kept;
                greedy_n++;
            }
            passes++;
            multi += n > 1;
            for (int j = 0; j < n; j++) {
                const int i = ds[j];
                const float *want = ref[i] + (size_t)(at[i] + 1) * vocab, *got = lg + (size_t)j * vocab;
                const double e = vec_err(got, want, vocab);
                worst = e > worst ? e : worst;
                if (n == 1 && !mixed[i]) { /* every pass of it alone so far: the serial path, bit for bit */
                    exact1 += !memcmp(got, want, (size_t)vocab * 4);
                    CHECK(!memcmp(got, want, (size_t)vocab * 4), "a decode pass of one (never batched) is not the serial step");
                }
                mixed[i] |= n > 1;
                if (argmax(got, vocab) != argmax(want, vocab)) {
                    if (top_gap(want, vocab) <= 2 * max_abs(got, want, vocab)) ties++;
                    else flips++;
                }
                at[i]++;
            }
        }
        /* leaves: the sequences at their end give their slots back */
        for (int i = 0; i < NS; i++)
            if (slot_of[i] >= 0 && at[i] == steps[i]) {
                lz_llama_gpu_release(gb, slot_of[i]);
                slot_of[i] = -1;
                live--;
                done++;
            }
    }
    CHECK(done == NS, "%d of %d sequences finished", done, NS);
    CHECK(worst <= 3e-2, "batched against alone: logits normalised error %.3g", worst);
    CHECK(flips == 0, "batched greedy tokens: %d differ from the serial ones outside near-ties", flips);
    CHECK(multi > 0 && exact1 > 0, "passes of several (%d) and of one (%d bit for bit)", multi, exact1);
    CHECK(greedy_n > 0 && greedy_ok == greedy_n, "decode_next's greedy tokens = the argmax of its logits: %d of %d rows",
          greedy_ok, greedy_n);
    lz_llama_gpu_group_info gsi;
    lz_llama_gpu_group_stats(gb, &gsi);
    /* LAZY_GPU_DECODE_GROUP=1: every batched pass grouped by document (and the answers as close) */
    if (lz_env_get()->gpu_decode_group == 1)
        CHECK(gsi.steps == multi && gsi.blocks_read <= gsi.blocks_placed,
              "grouping forced: %lld of %d batched passes grouped (%lld of %lld document blocks read)",
              (long long)gsi.steps, multi, (long long)gsi.blocks_read, (long long)gsi.blocks_placed);
    if (lz_env_get()->gpu_decode_group == 0) CHECK(gsi.steps == 0, "grouping off: %lld grouped", (long long)gsi.steps);
    printf("slots: %d questions over 4 slots (joining, leaving, a slot reused), %d decode passes (%d batched, %lld "
           "grouped by document: %lld of %lld document blocks read): logits normalised error against each alone "
           "%.2e, greedy tokens equal (%d near-ties), %d passes of one bit for bit\n",
           NS, passes, multi, (long long)gsi.steps, (long long)gsi.blocks_read, (long long)gsi.blocks_placed,
           worst, ties, exact1);
    /* bad calls: a slot twice, a released slot, set_slots with one live, a slot out of range */
    {
        const int two[2] = {0, 0}, t2[2] = {5, 5}, gone[1] = {1}, out[1] = {9};
        CHECK(lz_llama_gpu_begin_slot(gb, 0, segs[0], keys[0], nd[0], pos[0], err, sizeof err) == 0 &&
                  lz_llama_gpu_step_slot(gb, 0, qids[0], nq[0], NULL, err, sizeof err) == 0,
              "begin: %s", err);
        CHECK(lz_llama_gpu_decode_many(gb, two, t2, 2, lg, err, sizeof err) != 0 && strstr(err, "twice"), "a slot twice: %s",
              err);
        CHECK(lz_llama_gpu_decode_many(gb, gone, t2, 1, lg, err, sizeof err) != 0, "a released slot stepped");
        CHECK(lz_llama_gpu_decode_many(gb, out, t2, 1, lg, err, sizeof err) != 0, "slot 9 of 4 stepped");
        CHECK(lz_llama_gpu_set_slots(gb, 2, N, err, sizeof err) != 0 && strstr(err, "release"), "set_slots while live: %s",
              err);
        lz_llama_gpu_release(gb, 0);
        lz_llama_gpu_release(gb, 0); /* twice: a no-op */
        lz_llama_gpu_slot_info si;
        lz_llama_gpu_slot_stats(gb, &si);
        CHECK(si.live == 0 && si.pins == 0 && si.slots == 4, "released: %d live, %d pins", si.live, si.pins);
    }
    free(lg);
    for (int i = 0; i < NS; i++) free(ref[i]);
    lz_llama_gpu_free(gr);
    lz_llama_gpu_free(gb);
    rand_docs_free(&rd);
    lz_llama_free(m);
    remove(path);
}

/* Pins: a document a live slot uses survives a budget that forces eviction (budget 0, another
 * slot's begin trimming the cache), its question's steps the same bits as alone; the policy
 * counts its holds; once the slot is released the next begin may evict it. Then churn: 600
 * rounds of questions joining free slots (4 documents of 12 each, prefilled together) and
 * leaving at random lengths, every live one decoded together each round, with device memory and
 * the pool's regions unchanged after a warm-up that reached the largest shapes. */
static void test_slot_pins(const char *dir)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/pins.gguf", dir);
    const int layers = 2, vocab = 512, N = 64;
    lz_llama *m = make_model(path, 128, layers, 4, 2, 64, 256, vocab, 0);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    int lens[12];
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    auto rnd = [&rs]() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; };
    for (int i = 0; i < 12; i++) lens[i] = 5 + (int)(rnd() % 40);
    rand_docs rd;
    rand_docs_make(&rd, c, 12, lens, 0xabcdefull);
    size_t bytes[12], all = 0;
    for (int i = 0; i < 12; i++) all += bytes[i] = (size_t)layers * c->n_kv_heads * lens[i] * c->head_dim * 4;
    lz_llama_gpu *g = NULL, *gr = NULL;
    CHECK(lz_llama_gpu_new(m, N, &g, err, sizeof err) == 0 && lz_llama_gpu_new(m, N, &gr, err, sizeof err) == 0, "gpu: %s",
          err);
    if (!g || !gr || lz_llama_gpu_set_slots(g, 4, N, err, sizeof err)) {
        CHECK(0, "slots: %s", err);
        lz_llama_gpu_free(g); lz_llama_gpu_free(gr); rand_docs_free(&rd); lz_llama_free(m);
        return;
    }
    int qids[8];
    for (int i = 0; i < 8; i++) qids[i] = 3 + (i * 29) % (vocab - 3);
    lz_kv_segment sa[4], sb[4];
    const uint8_t *ka[4], *kb[4];
    const int pa[2] = {0, 1}, pb[2] = {2, 3}, pc[1] = {4};
    const int64_t posa = place(&rd, c, pa, 2, 0, sa, ka), posb = place(&rd, c, pb, 2, 0, sb, kb);
    float *la = (float *)malloc(vocab * 4), *lr = (float *)malloc(vocab * 4);
    lz_llama_gpu_set_cache(g, bytes[0] + bytes[1]);
    CHECK(lz_llama_gpu_begin_slot(g, 0, sa, ka, 2, posa, err, sizeof err) == 0, "begin a: %s", err);
    CHECK(lz_llama_gpu_resident(g, rd.keys[0]) && lz_llama_gpu_resident(g, rd.keys[1]), "a's documents resident");
    lz_llama_gpu_set_cache(g, 0); /* everything must leave that may */
    CHECK(lz_llama_gpu_begin_slot(g, 1, sb, kb, 2, posb, err, sizeof err) == 0, "begin b: %s", err);
    lz_doc_cache_stats ps;
    lz_llama_gpu_cache_policy_stats(g, &ps);
    CHECK(lz_llama_gpu_resident(g, rd.keys[0]) && lz_llama_gpu_resident(g, rd.keys[1]) && ps.n_held == 2,
          "a live slot's documents evicted under budget 0 (%lld held)", (long long)ps.n_held);
    CHECK(lz_llama_gpu_step_slot(g, 0, qids, 8, la, err, sizeof err) == 0 &&
              lz_llama_gpu_begin(gr, sa, ka, 2, posa, err, sizeof err) == 0 &&
              lz_llama_gpu_step(gr, qids, 8, lr, err, sizeof err) == 0 && !memcmp(la, lr, vocab * 4),
          "a pinned slot's question changed: %s", err);
    lz_llama_gpu_slot_info si;
    lz_llama_gpu_slot_stats(g, &si);
    CHECK(si.live == 2 && si.pins == 4, "slot stats: %d live, %d pins", si.live, si.pins);
    lz_llama_gpu_release(g, 0);
    lz_kv_segment sc1[1];
    const uint8_t *kc[1];
    place(&rd, c, pc, 1, 0, sc1, kc);
    CHECK(lz_llama_gpu_begin_slot(g, 2, sc1, kc, 1, 100, err, sizeof err) == 0, "begin c: %s", err);
    long h, mi;
    size_t used;
    lz_llama_gpu_cache_stats(g, &h, &mi, &used);
    CHECK(!lz_llama_gpu_resident(g, rd.keys[0]) && used == 0, "released documents left under budget 0 (%zu bytes)", used);
    lz_llama_gpu_release(g, 1);
    lz_llama_gpu_release(g, 2);
    printf("slots: a live slot's documents survive a budget of 0 (held %lld), the same logits; gone once released\n",
           (long long)ps.n_held);
    /* churn: room for every document (the pool's first region holds them), four slots */
    lz_llama_gpu_set_cache(g, all);
    int live_tok[4] = {0}, end_tok[4] = {0}, slot_live[4] = {0};
    float *lg = (float *)malloc((size_t)4 * vocab * 4);
    auto join = [&](int sl, const int *pk, int nq) {
        lz_kv_segment sg[4];
        const uint8_t *kk[4];
        const int64_t p = place(&rd, c, pk, 4, 3, sg, kk);
        return lz_llama_gpu_begin_slot(g, sl, sg, kk, 4, p, err, sizeof err) == 0 &&
               (slot_live[sl] = 1, live_tok[sl] = nq, 1);
    };
    /* warm-up: every slot count and question length with the four longest documents (the
     * workspaces' and block words' largest shapes) */
    int longest[12];
    for (int i = 0; i < 12; i++) longest[i] = i;
    for (int i = 0; i < 12; i++)
        for (int j = i + 1; j < 12; j++)
            if (lens[longest[j]] > lens[longest[i]]) { const int x = longest[i]; longest[i] = longest[j]; longest[j] = x; }
    int ok = 1;
    for (int B = 1; B <= 4 && ok; B++)
        for (int nq = 1; nq <= 8 && ok; nq++) {
            int sl[4], nqs[4], tk[4];
            const int *ids[4];
            float *rows[4];
            for (int b = 0; b < B; b++) {
                ok = ok && join(b, longest, nq);
                sl[b] = b, nqs[b] = nq, ids[b] = qids, rows[b] = lg + (size_t)b * vocab, tk[b] = 7;
            }
            ok = ok && lz_llama_gpu_prefill_many(g, sl, ids, nqs, B, rows, err, sizeof err) == 0;
            for (int t = 0; t < (nq == 8 ? N - 8 : 2) && ok; t++)
                ok = lz_llama_gpu_decode_many(g, sl, tk, B, lg, err, sizeof err) == 0;
            for (int b = 0; b < B; b++) lz_llama_gpu_release(g, b), slot_live[b] = 0;
        }
    CHECK(ok, "warm-up: %s", err);
    size_t free0 = 0, free1 = 0, tot = 0;
    lz_llama_gpu_tiers t0, t1;
    int rounds = 0, passes = 0, joins = 0;
    for (int it = 0; it < 600 && ok; it++, rounds++) {
        int sl[4], nqs[4], n = 0;
        const int *ids[4];
        float *rows[4];
        for (int s = 0; s < 4; s++)
            if (!slot_live[s] && rnd() % 3 == 0) { /* a question joins */
                int pk[4];
                for (int j = 0; j < 4; j++) {
                    int i;
                    do {
                        i = (int)(rnd() % 12);
                        for (int k = 0; k < j; k++) if (pk[k] == i) i = -1;
                    } while (i < 0);
                    pk[j] = i;
                }
                const int nq = 1 + (int)(rnd() % 8);
                ok = ok && join(s, pk, nq);
                end_tok[s] = nq + 1 + (int)(rnd() % (N - nq - 1));
                sl[n] = s, nqs[n] = nq, ids[n] = qids, rows[n] = lg + (size_t)n * vocab, n++;
                joins++;
            }
        if (n && ok) ok = lz_llama_gpu_prefill_many(g, sl, ids, nqs, n, rows, err, sizeof err) == 0;
        int ds[4], tk[4], nd = 0;
        for (int s = 0; s < 4; s++)
            if (slot_live[s] && live_tok[s] < end_tok[s]) ds[nd] = s, tk[nd] = 3 + (int)(rnd() % (vocab - 3)), nd++;
        if (nd && ok) {
            ok = lz_llama_gpu_decode_many(g, ds, tk, nd, lg, err, sizeof err) == 0;
            passes++;
            for (int j = 0; j < nd && ok; j++) ok = isfinite(lg[(size_t)j * vocab]) && isfinite(lg[(size_t)j * vocab + 7]);
            for (int j = 0; j < nd; j++) live_tok[ds[j]]++;
        }
        for (int s = 0; s < 4; s++)
            if (slot_live[s] && (live_tok[s] >= end_tok[s] || rnd() % 17 == 0)) { /* ends, or is cancelled */
                lz_llama_gpu_release(g, s);
                slot_live[s] = 0;
            }
        if (it == 99) {
            cudaMemGetInfo(&free0, &tot);
            lz_llama_gpu_tier_stats(g, &t0);
        }
    }
    CHECK(ok, "churn: %s", err);
    for (int s = 0; s < 4; s++) lz_llama_gpu_release(g, s);
    cudaMemGetInfo(&free1, &tot);
    lz_llama_gpu_tier_stats(g, &t1);
    lz_llama_gpu_slot_stats(g, &si);
    lz_llama_gpu_cache_stats(g, &h, &mi, &used);
    lz_llama_gpu_cache_policy_stats(g, &ps);
    /* the pool exactly as it was (every document resident, nothing else left in it); the device's
     * free memory within what decode graphs made and dropped by the driver may take */
    const double drift = ((double)free0 - (double)free1) / 1048576.0;
    CHECK(t1.pool_regions == t0.pool_regions && t1.pool_used == t0.pool_used && fabs(drift) <= 8.0,
          "churn: device memory %zu -> %zu free (%.2f MiB), pool regions %d -> %d, %zu -> %zu bytes in documents", free0,
          free1, drift, t0.pool_regions, t1.pool_regions, t0.pool_used, t1.pool_used);
    CHECK(si.live == 0 && si.pins == 0 && ps.n_held == 0 && used <= all, "churn: %d live, %d pins, %lld held, %zu bytes",
          si.live, si.pins, (long long)ps.n_held, used);
    printf("slots: churn of %d rounds over 4 slots (%d questions joined, %d decode passes): the pool unchanged, device "
           "memory %+.2f MiB, nothing left pinned; %ld hits, %ld misses\n", rounds, joins, passes, -drift, h, mi);
    free(lg);
    free(la);
    free(lr);
    lz_llama_gpu_free(g);
    lz_llama_gpu_free(gr);
    rand_docs_free(&rd);
    lz_llama_free(m);
    remove(path);
}

int main(int argc, char **argv)
{
    char dir[256];
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    lz_llama_set_threads(0);
    test_shape(dir, 64, 4, 4, 0);
    test_shape(dir, 128, 8, 2, 1);
    test_shape(dir, 128, 8, 2, 0);
    test_query(dir, 64, 4, 4, 0);
    test_query(dir, 128, 8, 2, 1);
    test_query(dir, 128, 8, 2, 1, 3000000); /* offsets past the decode words' 21 bits */
    test_query(dir, 128, 8, 2, 1, 0, 1);    /* the unequal heads' document packed in bf16 */
    test_prefix_on_gpu(dir);
    test_many(dir);
    test_fp8_planes_only(dir);
    test_big_upload(dir);
    test_tiers(dir);
    test_slots(dir);
    test_slot_pins(dir);
    if (argc > 1 && !strcmp(argv[1], "--bench")) bench(dir);
    rmdir(dir);
    return lz_test_done();
}
