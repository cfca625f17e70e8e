/* test_llama_fp8.cu - an fp8 store's documents on the GPU engine, kept fp8 in
 * HBM and read by the fp8 kernels (gpu/llama_cuda_docs.cu, _query.cu,
 * _batch.cu; kernels/lz_decode_fp8.cu, lz_prefill.cu's fp8 segments), on
 * random-weight models. Documents are quantised as the payload format stores
 * them (schema/PAYLOAD.md: e4m3 bytes, one scale a (K or V, layer, kv head) =
 * max |x| / 448): one whole in a host-tier entry's layout (K, V, then the
 * scales: one copy), one whole with its scales elsewhere, one packed with
 * per-head kept counts (Ada-KV: the staging path). Checks:
 *  - the CPU engine over the fp8 segments equals it over their dequantised
 *    fp32 values bit for bit (model/attention.c reads fp8 through a table of
 *    the scale: the same floats);
 *  - the GPU (question, then 60 decode steps over the fp8 blocks of
 *    lz_decode_lazy) against the CPU: logits normalised error <= 3e-2;
 *  - the same logits bit for bit whether the documents were resident, copied
 *    layer by layer at the question, preloaded (one DMA, or three), or
 *    uploaded again under a budget of 0;
 *  - block mode (the fp8 copies re-rotated on the device, scales x sqrt 2)
 *    against lazy within 6e-2;
 *  - several slots decoded in one pass (fp8 and bf16 documents mixed, the
 *    batch's fp8 block words and scales gathered by lz_op_batch_words)
 *    against each alone: <= 3e-2;
 *  - documents recomputed on the GPU after an fp8 prefix against the CPU.
 * Usage: test_llama_fp8   (run on the GPU machine) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fp8.h"
#include "base/half.h"
#include "gpu/llama_cuda.h"
#include "model/llama.h"
#include "base/env.h"
#include "tests/test.h"
#include "tests/cuda/llama_cuda_test.h"

/* A document's KV as an fp8 payload holds it: kept[lh] rows of head lh from row head_row[lh],
 * block = K bytes, V bytes, then the scales (ks (L, KV), vs); deq the same values as fp32. */
struct Fp8Doc {
    uint8_t *block, *k8, *v8;
    float *ks, *vs, *dk, *dv;
    int kept[64];
    int64_t head_row[64];
    size_t rows;
};

/* Quantises (L, KV, cap, d) fp32 K and V of n tokens; keep(lh) rows of each head. */
static void fp8_make(Fp8Doc *f, const float *k, const float *v, int L, int KV, int cap, int d, int (*keep)(int, int),
                     int n)
{
    size_t rows = 0;
    for (int lh = 0; lh < L * KV; lh++) f->kept[lh] = keep ? keep(lh, n) : n, f->head_row[lh] = (int64_t)rows, rows += f->kept[lh];
    f->rows = rows;
    const size_t nh = (size_t)L * KV;
    f->block = (uint8_t *)malloc(2 * rows * d + 2 * nh * 4);
    f->k8 = f->block, f->v8 = f->block + rows * d;
    f->ks = (float *)(void *)(f->v8 + rows * d), f->vs = f->ks + nh;
    f->dk = (float *)malloc(rows * d * 4), f->dv = (float *)malloc(rows * d * 4);
    for (size_t lh = 0; lh < nh; lh++)
        for (int part = 0; part < 2; part++) {
            const float *src = (part ? v : k) + lh * cap * d;
            const size_t cnt = (size_t)f->kept[lh] * d, at = (size_t)f->head_row[lh] * d;
            float mx = 0;
            for (size_t e = 0; e < cnt; e++) mx = fabsf(src[e]) > mx ? fabsf(src[e]) : mx;
            const float sc = mx > 0 ? mx / 448.f : 1.f;
            (part ? f->vs : f->ks)[lh] = sc;
            uint8_t *b = (part ? f->v8 : f->k8) + at;
            float *dq = (part ? f->dv : f->dk) + at;
            for (size_t e = 0; e < cnt; e++) {
                b[e] = lz_f32_to_e4m3(src[e] / sc);
                dq[e] = lz_e4m3_to_f32(b[e]) * sc;
            }
        }
}

static void fp8_free(Fp8Doc *f) { free(f->block), free(f->dk), free(f->dv); }

static lz_kv_segment fp8_seg(const Fp8Doc *f, int n, int64_t rot, int packed)
{
    lz_kv_segment s;
    memset(&s, 0, sizeof s);
    s.k8 = f->k8, s.v8 = f->v8, s.k_scales = f->ks, s.v_scales = f->vs;
    s.n = n, s.stride = n, s.rot = rot;
    if (packed) s.n_kept = f->kept, s.head_row = f->head_row;
    return s;
}

static lz_kv_segment deq_seg(const Fp8Doc *f, int n, int64_t rot, int packed)
{
    lz_kv_segment s;
    memset(&s, 0, sizeof s);
    s.k = f->dk, s.v = f->dv, s.n = n, s.stride = n, s.rot = rot;
    if (packed) s.n_kept = f->kept, s.head_row = f->head_row;
    return s;
}

static int keep_ada(int lh, int n) { return n - 9 * (lh % 5); }

/* The question then steps greedy tokens (toks: chosen from ref when given, else from the run's own
 * logits) on g's slot 0; logits (steps + 1, V). 0 or -1. */
static int run_gpu(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos,
                   const int *q, int nq, int *toks, int steps, float *logits, int V, int block, char *err, size_t errlen)
{
    if ((block ? lz_llama_gpu_begin_block : lz_llama_gpu_begin)(g, segs, keys, n_segs, pos, err, errlen) ||
        lz_llama_gpu_step(g, q, nq, logits, err, errlen))
        return -1;
    for (int t = 0; t < steps; t++) {
        if (lz_llama_gpu_step(g, &toks[t], 1, logits + (size_t)(t + 1) * V, err, errlen)) return -1;
    }
    return 0;
}

static double worst_err(const float *a, const float *b, int rows, int V)
{
    double w = 0;
    for (int t = 0; t < rows; t++) {
        const double e = vec_err(a + (size_t)t * V, b + (size_t)t * V, V);
        w = e > w ? e : w;
    }
    return w;
}

static void test_fp8(const char *dir, int hd, int heads, int kv, int layout_half)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/f%d_%d_%d.gguf", dir, hd, heads, kv);
    const int layers = 3, vocab = 512, s = 17, nd = 3, n_q = 9, steps = 60;
    lz_llama *m = make_model(path, 256, layers, heads, kv, hd, 512, vocab, layout_half);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    int prefix[17], lens[3] = {41, 70, 66}, qids[9];
    for (int i = 0; i < s; i++) prefix[i] = 3 + (i * 31 + 5) % (vocab - 3);
    for (int i = 0; i < n_q; i++) qids[i] = 3 + (i * 13 + 2) % (vocab - 3);
    lz_kv_cache pc, dc[3];
    Fp8Doc f[3], fpre;
    int64_t pos = s, rot[3];
    int ids[3][70];
    for (int i = 0; i < nd; i++) {
        for (int j = 0; j < lens[i]; j++) ids[i][j] = 3 + (j * 97 + 11 * i) % (vocab - 3);
        lz_kv_cache tmp;
        if (cpu_encode(m, prefix, s, ids[i], lens[i], i == 0 ? &pc : &tmp, &dc[i])) { CHECK(0, "cpu encode"); return; }
        if (i) lz_kv_cache_free(&tmp);
        fp8_make(&f[i], dc[i].k, dc[i].v, layers, kv, dc[i].cap, hd, i == 2 ? keep_ada : NULL, lens[i]);
        rot[i] = pos - s;
        pos += lens[i];
    }
    fp8_make(&fpre, pc.k, pc.v, layers, kv, pc.cap, hd, NULL, s);
    /* doc 1's scales copied elsewhere: not after its V (the non-joint copies) */
    float *sc1 = (float *)malloc((size_t)2 * layers * kv * 4);
    memcpy(sc1, f[1].ks, (size_t)2 * layers * kv * 4);
    lz_kv_segment segs[4], deq[4];
    segs[0] = (lz_kv_segment){.k = pc.k, .v = pc.v, .n = s, .stride = pc.cap};
    deq[0] = segs[0];
    for (int i = 0; i < nd; i++) segs[i + 1] = fp8_seg(&f[i], lens[i], rot[i], i == 2), deq[i + 1] = deq_seg(&f[i], lens[i], rot[i], i == 2);
    segs[2].k_scales = sc1, segs[2].v_scales = sc1 + layers * kv;
    /* CPU: fp8 segments and their dequantised values, the same bits */
    lz_kv_cache lc;
    lz_llama_scratch *sc = lz_llama_scratch_new(m, 64);
    lz_kv_cache_init(&lc, c, n_q + steps);
    const size_t rows = (size_t)(steps + 1) * vocab;
    float *lcpu = (float *)malloc(rows * 4), *ldq = (float *)malloc(rows * 4), *lg = (float *)malloc(rows * 4);
    float *l2 = (float *)malloc(rows * 4);
    int toks[60];
    lz_kv_cache_reset(&lc, pos);
    CHECK(lz_llama_forward(m, sc, &lc, segs, 4, qids, n_q, lcpu, LZ_LOGITS_LAST) == 0, "cpu question");
    for (int t = 0; t < steps; t++) {
        toks[t] = argmax(lcpu + (size_t)t * vocab, vocab);
        CHECK(lz_llama_forward(m, sc, &lc, segs, 4, &toks[t], 1, lcpu + (size_t)(t + 1) * vocab, LZ_LOGITS_LAST) == 0, "cpu step");
    }
    lz_kv_cache_reset(&lc, pos);
    int same = lz_llama_forward(m, sc, &lc, deq, 4, qids, n_q, ldq, LZ_LOGITS_LAST) == 0;
    for (int t = 0; same && t < steps; t++)
        same = lz_llama_forward(m, sc, &lc, deq, 4, &toks[t], 1, ldq + (size_t)(t + 1) * vocab, LZ_LOGITS_LAST) == 0;
    CHECK(same && !memcmp(lcpu, ldq, rows * 4), "CPU: fp8 segments and their dequantised fp32 values differ");
    uint8_t keyb[4][32];
    const uint8_t *keys[4];
    for (int i = 0; i < 4; i++) { memset(keyb[i], 0, 32); keyb[i][0] = (uint8_t)(i + 1); keyb[i][1] = 0xf8; keys[i] = keyb[i]; }
    lz_llama_gpu *g = NULL;
    CHECK(lz_llama_gpu_new(m, 80, &g, err, sizeof err) == 0, "gpu: %s", err);
    if (g) {
        CHECK(run_gpu(g, segs, keys, 4, pos, qids, n_q, toks, steps, lg, vocab, 0, err, sizeof err) == 0, "fp8 question: %s", err);
        const double w = worst_err(lg, lcpu, steps + 1, vocab);
        CHECK(w <= 3e-2, "fp8 d=%d H=%d KV=%d: GPU against CPU, logits error %.3g", hd, heads, kv, w);
        printf("fp8 d=%3d H=%d KV=%d %-8s: question and %d decode steps over fp8 documents (entry layout, scales apart, "
               "Ada-KV packed): logits normalised error %.2e against the CPU\n", hd, heads, kv,
               layout_half ? "half" : "adjacent", steps, w);
        lz_llama_gpu_tiers t0, t1;
        lz_llama_gpu_tier_stats(g, &t0);
        CHECK(run_gpu(g, segs, keys, 4, pos, qids, n_q, toks, steps, l2, vocab, 0, err, sizeof err) == 0 &&
                  !memcmp(l2, lg, rows * 4),
              "resident fp8 documents: other logits (%s)", err);
        lz_llama_gpu_tier_stats(g, &t1);
        CHECK(t1.bytes_up == t0.bytes_up, "resident fp8 documents copied again (%lld bytes)", (long long)(t1.bytes_up - t0.bytes_up));
        lz_llama_gpu_set_cache(g, 0);
        CHECK(run_gpu(g, segs, keys, 4, pos, qids, n_q, toks, steps, l2, vocab, 0, err, sizeof err) == 0 &&
                  run_gpu(g, segs, keys, 4, pos, qids, n_q, toks, steps, l2, vocab, 0, err, sizeof err) == 0 &&
                  !memcmp(l2, lg, rows * 4),
              "fp8 documents uploaded again under a budget of 0: other logits (%s)", err);
    }
    lz_llama_gpu_free(g);
    /* what a miss moves: documents 0 and 1 alone on a new engine, exactly their fp8 bytes and scales */
    g = NULL;
    CHECK(lz_llama_gpu_new(m, 80, &g, err, sizeof err) == 0, "gpu: %s", err);
    if (g) {
        lz_llama_gpu_tiers t;
        CHECK(lz_llama_gpu_begin(g, &segs[1], &keys[1], 2, pos, err, sizeof err) == 0 &&
                  lz_llama_gpu_step(g, qids, n_q, l2, err, sizeof err) == 0,
              "two fp8 documents: %s", err);
        lz_llama_gpu_tier_stats(g, &t);
        const int64_t want = (int64_t)(2 * (f[0].rows + f[1].rows) * hd + 4 * (size_t)layers * kv * 4);
        CHECK(t.bytes_up == want, "two fp8 documents moved %lld bytes, their fp8 rows and scales are %lld",
              (long long)t.bytes_up, (long long)want);
    }
    lz_llama_gpu_free(g);
    /* preloaded (immediate copies: one DMA for the entry layout, three for scales apart, staged for
     * the packed one), then the question finds them: the same bits */
    g = NULL;
    CHECK(lz_llama_gpu_new(m, 80, &g, err, sizeof err) == 0, "gpu: %s", err);
    if (g) {
        int ok = 1;
        for (int i = 0; i < 4; i++) ok &= lz_llama_gpu_preload(g, &segs[i], keys[i], 1.0, err, sizeof err) == 1;
        CHECK(ok, "preload fp8: %s", err);
        CHECK(run_gpu(g, segs, keys, 4, pos, qids, n_q, toks, steps, l2, vocab, 0, err, sizeof err) == 0 &&
                  !memcmp(l2, lg, rows * 4),
              "preloaded fp8 documents: other logits (%s)", err);
        long h, mi;
        size_t b;
        lz_llama_gpu_cache_stats(g, &h, &mi, &b);
        CHECK(h == 4 && mi == 0, "preloaded: %ld hits, %ld misses", h, mi);
        /* block mode: the copies re-rotated in fp8 on the device (a key per document and placement) */
        uint8_t bkb[4][32];
        const uint8_t *bkeys[4];
        for (int i = 0; i < 4; i++) memcpy(bkb[i], keyb[i], 32), bkb[i][2] = 0xb1, bkeys[i] = bkb[i];
        float *lb = (float *)malloc(rows * 4);
        CHECK(run_gpu(g, segs, bkeys, 4, pos, qids, n_q, toks, steps, lb, vocab, 1, err, sizeof err) == 0, "block fp8: %s", err);
        const double wb = worst_err(lb, lg, steps + 1, vocab);
        CHECK(wb <= 6e-2, "block over fp8 against lazy: logits error %.3g", wb);
        printf("fp8 d=%3d H=%d KV=%d %-8s: resident, preloaded and re-uploaded documents give the same logits bit for bit; "
               "block mode (fp8 copies re-rotated on the GPU) %.2e from lazy\n", hd, heads, kv,
               layout_half ? "half" : "adjacent", wb);
        free(lb);
    }
    lz_llama_gpu_free(g);
    /* documents recomputed on the GPU after the fp8 prefix, against the CPU over the same */
    {
        lz_kv_segment pseg = fp8_seg(&fpre, s, 0, 0), whole[4];
        whole[0] = pseg;
        lz_kv_cache dcf[3];
        for (int i = 0; i < nd; i++) {
            lz_kv_cache_init(&dcf[i], c, lens[i]);
            lz_kv_cache_reset(&dcf[i], s);
            CHECK(lz_llama_forward(m, sc, &dcf[i], &pseg, 1, ids[i], lens[i], NULL, LZ_LOGITS_NONE) == 0, "cpu doc");
            whole[i + 1] = (lz_kv_segment){.k = dcf[i].k, .v = dcf[i].v, .n = lens[i], .stride = dcf[i].cap, .rot = rot[i]};
        }
        float *lw = (float *)malloc((size_t)vocab * 4), *lk = (float *)malloc((size_t)vocab * 4);
        lz_kv_cache_reset(&lc, pos);
        CHECK(lz_llama_forward(m, sc, &lc, whole, 4, qids, n_q, lw, LZ_LOGITS_LAST) == 0, "cpu question (recomputed)");
        lz_llama_gpu *gk = NULL;
        CHECK(lz_llama_gpu_new(m, 128, &gk, err, sizeof err) == 0, "gpu: %s", err);
        const int *dids[3] = {ids[0], ids[1], ids[2]};
        lz_kv_segment held[4];
        held[0] = pseg;
        for (int i = 0; i < nd; i++) held[i + 1] = (lz_kv_segment){.n = lens[i], .stride = lens[i], .rot = rot[i]};
        CHECK(gk && lz_llama_gpu_encode_keep(gk, &pseg, keys[0], dids, lens, &keys[1], 3, err, sizeof err) == 0 &&
                  lz_llama_gpu_begin(gk, held, keys, 4, pos, err, sizeof err) == 0 &&
                  lz_llama_gpu_step(gk, qids, n_q, lk, err, sizeof err) == 0,
              "recomputed after an fp8 prefix: %s", err);
        const double e = vec_err(lk, lw, vocab);
        CHECK(e <= 3e-2, "documents recomputed after an fp8 prefix: logits error %.3g", e);
        printf("fp8 d=%3d H=%d KV=%d %-8s: documents recomputed on the GPU after an fp8 prefix: logits normalised error "
               "%.2e against the CPU\n", hd, heads, kv, layout_half ? "half" : "adjacent", e);
        lz_llama_gpu_free(gk);
        for (int i = 0; i < nd; i++) lz_kv_cache_free(&dcf[i]);
        free(lw), free(lk);
    }
    /* several slots in one pass: fp8 documents, one bf16 (doc 0 widened) among them */
    {
        const int NS = 3, st2 = 24;
        uint16_t *k16 = (uint16_t *)malloc((size_t)layers * kv * lens[0] * hd * 2), *v16 = (uint16_t *)malloc((size_t)layers * kv * lens[0] * hd * 2);
        for (size_t e = 0; e < (size_t)layers * kv * lens[0] * hd; e++) k16[e] = lz_f32_to_bf16(dc[0].k[e]), v16[e] = lz_f32_to_bf16(dc[0].v[e]);
        lz_kv_segment sq[3][4];
        const uint8_t *kq[3][4];
        uint8_t kb16[32];
        memset(kb16, 0x16, 32);
        for (int i = 0; i < NS; i++) {
            memcpy(sq[i], segs, sizeof segs);
            memcpy(kq[i], keys, sizeof keys);
        }
        sq[1][1] = (lz_kv_segment){.n = lens[0], .stride = lens[0], .rot = rot[0], .k16 = k16, .v16 = v16};
        kq[1][1] = kb16;
        sq[2][3].rot = sq[2][1].rot, sq[2][1].rot = rot[2] + lens[2] - lens[0]; /* other placements */
        float *ref[3], *bat = (float *)malloc((size_t)NS * vocab * 4);
        int tk[3][24];
        lz_llama_gpu *gr = NULL, *gb = NULL;
        CHECK(lz_llama_gpu_new(m, 128, &gr, err, sizeof err) == 0 && lz_llama_gpu_new(m, 128, &gb, err, sizeof err) == 0,
              "gpu: %s", err);
        for (int i = 0; gr && i < NS; i++) {
            ref[i] = (float *)malloc((size_t)(st2 + 1) * vocab * 4);
            CHECK(lz_llama_gpu_begin(gr, sq[i], kq[i], 4, pos, err, sizeof err) == 0 &&
                      lz_llama_gpu_step(gr, qids, n_q - i, ref[i], err, sizeof err) == 0,
                  "serial %d: %s", i, err);
            for (int t = 0; t < st2; t++) {
                tk[i][t] = argmax(ref[i] + (size_t)t * vocab, vocab);
                CHECK(lz_llama_gpu_step(gr, &tk[i][t], 1, ref[i] + (size_t)(t + 1) * vocab, err, sizeof err) == 0,
                      "serial step: %s", err);
            }
        }
        if (gr && gb && lz_llama_gpu_set_slots(gb, NS, 128, err, sizeof err) == 0) {
            int sl[3], nqs[3];
            const int *qs[3];
            float *lo[3];
            for (int i = 0; i < NS; i++) {
                sl[i] = i, nqs[i] = n_q - i, qs[i] = qids, lo[i] = bat + (size_t)i * vocab;
                CHECK(lz_llama_gpu_begin_slot(gb, i, sq[i], kq[i], 4, pos, err, sizeof err) == 0, "begin slot: %s", err);
            }
            double wq = 0, wd = 0;
            CHECK(lz_llama_gpu_prefill_many(gb, sl, qs, nqs, NS, lo, err, sizeof err) == 0, "prefill_many: %s", err);
            for (int i = 0; i < NS; i++) wq = fmax(wq, vec_err(lo[i], ref[i], vocab));
            for (int t = 0; t < st2; t++) {
                int ti[3];
                for (int i = 0; i < NS; i++) ti[i] = tk[i][t];
                CHECK(lz_llama_gpu_decode_many_rows(gb, sl, ti, NS, lo, err, sizeof err) == 0, "decode_many: %s", err);
                for (int i = 0; i < NS; i++) wd = fmax(wd, vec_err(lo[i], ref[i] + (size_t)(t + 1) * vocab, vocab));
            }
            CHECK(wq <= 3e-2 && wd <= 3e-2, "batched over fp8 documents: errors %.3g (prefill), %.3g (decode)", wq, wd);
            lz_llama_gpu_group_info gsi;
            lz_llama_gpu_group_stats(gb, &gsi);
            if (lz_env_get()->gpu_decode_group == 1 && 2 * (heads / kv) <= 16) /* forced: every step grouped */
                CHECK(gsi.steps == st2, "grouping forced over fp8 documents: %lld of %d steps grouped",
                      (long long)gsi.steps, st2);
            printf("fp8 d=%3d H=%d KV=%d %-8s: %d slots (fp8 and bf16 documents) prefilled and decoded %d steps together: "
                   "error %.2e / %.2e against each alone\n", hd, heads, kv, layout_half ? "half" : "adjacent", NS, st2, wq,
                   wd);
        } else {
            CHECK(0, "slots: %s", err);
        }
        for (int i = 0; gr && i < NS; i++) free(ref[i]);
        lz_llama_gpu_free(gr);
        lz_llama_gpu_free(gb);
        free(bat), free(k16), free(v16);
    }
    lz_llama_scratch_free(sc);
    lz_kv_cache_free(&lc);
    lz_kv_cache_free(&pc);
    for (int i = 0; i < nd; i++) lz_kv_cache_free(&dc[i]), fp8_free(&f[i]);
    fp8_free(&fpre);
    free(sc1), free(lcpu), free(ldq), free(lg), free(l2);
    lz_llama_free(m);
    remove(path);
}

int main(void)
{
    char dir[256];
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    lz_llama_set_threads(0);
    test_fp8(dir, 64, 4, 4, 0);
    test_fp8(dir, 128, 8, 2, 1);
    test_fp8(dir, 128, 32, 8, 0);
    rmdir(dir);
    return lz_test_done();
}
