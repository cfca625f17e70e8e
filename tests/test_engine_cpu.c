/* test_engine_cpu.c - the CPU engine's two tables (engine/cpu_encode.h,
 * engine/cpu_query.h) against model/'s calls made directly, on a random
 * model and random inputs, to the bit: the document table's prefix pass,
 * documents after the prefix (K, V and the captured window queries, across
 * the chunk boundary), a probe after a document, many documents from
 * several threads at once on one table; the encoder with the CPU engine's
 * table as its backend against the encoder alone (the same KV and payload
 * bytes, with and without a probe); the question table's sequences over
 * random segments (step, prefill_many and decode_many of one and of several
 * slots against lz_llama_forward / lz_llama_forward_batch, own_kv's rows,
 * many slots at once, reuse after release) and its refusals (no rows
 * reserved, a block begin, an unknown slot, rows past memory). The session
 * over them: tests/test_session_cpu.c. */
#include <omp.h>
#include <string.h>

#include "engine/cpu_encode.h"
#include "engine/cpu_query.h"
#include "engine/engine.h"
#include "ingest/encode.h"
#include "tests/test.h"
#include "tests/test_model.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static lz_llama *m;

static void random_ids(int *ids, int n)
{
    for (int i = 0; i < n; i++) ids[i] = (int)(lz_test_xorshift(&rng) % (uint64_t)m->cfg.vocab);
}

/* 1 when rows [0, n) of a and b (caches of any capacities) hold the same bits, with the same n and pos0. */
static int same_rows(const lz_kv_cache *a, const lz_kv_cache *b)
{
    const lz_llama_config *c = &m->cfg;
    if (a->n != b->n || a->pos0 != b->pos0) return 0;
    const size_t row = (size_t)a->n * c->head_dim * sizeof(float);
    for (int lh = 0; lh < c->n_layers * c->n_kv_heads; lh++)
        if (memcmp(a->k + (size_t)lh * a->cap * c->head_dim, b->k + (size_t)lh * b->cap * c->head_dim, row) ||
            memcmp(a->v + (size_t)lh * a->cap * c->head_dim, b->v + (size_t)lh * b->cap * c->head_dim, row))
            return 0;
    return 1;
}

/* What the encoder did itself before its table: ids after the prefix segment (none when pc is
 * NULL), rows c0.. of the window captured, then the probe; a fresh scratch of LZ_ENCODE_CHUNK. */
static int direct_doc(const lz_kv_cache *pc, const int *ids, int n, const int *pids, int np, lz_kv_cache *out,
                      float *qwin, int c0, int cw)
{
    lz_llama_scratch *sc = lz_llama_scratch_new(m, LZ_ENCODE_CHUNK);
    const lz_kv_segment seg = pc ? (lz_kv_segment){.k = pc->k, .v = pc->v, .n = pc->n, .stride = pc->cap}
                                 : (lz_kv_segment){0};
    const int s = pc ? pc->n : 0;
    lz_kv_cache_reset(out, s);
    if (cw) lz_llama_scratch_capture(sc, qwin, (int64_t)s + c0, cw);
    int rc = lz_llama_forward(m, sc, out, pc ? &seg : NULL, pc ? 1 : 0, ids, n, NULL, LZ_LOGITS_NONE);
    if (!rc && np) rc = lz_llama_forward(m, sc, out, pc ? &seg : NULL, pc ? 1 : 0, pids, np, NULL, LZ_LOGITS_NONE);
    lz_llama_scratch_free(sc);
    return rc;
}

static size_t qwin_floats(int rows) { return (size_t)m->cfg.n_layers * rows * m->cfg.n_heads * m->cfg.head_dim; }

static void test_document_table(void)
{
    char err[256] = "";
    const lz_llama_config *c = &m->cfg;
    lz_engine_cpu_encode *t = lz_engine_cpu_encode_new(m);
    CHECK(t != NULL, "a document table");
    if (!t) return;
    lz_encode_backend b = lz_engine_cpu_encode_table(t, 0);
    CHECK(b.encode && b.encode_probe && !b.start && !b.fetch && !b.fetch_planes && b.max_tokens == INT32_MAX,
          "encode and probes, any length");
    CHECK(lz_engine_cpu_encode_table(t, 300).max_tokens == 300, "a length bound as asked");

    /* the prefix: a document at 0..s-1, longer than a chunk */
    const int s = LZ_ENCODE_CHUNK + 37;
    int pre[LZ_ENCODE_CHUNK + 37];
    random_ids(pre, s);
    lz_kv_cache pa, pb;
    lz_kv_cache_init(&pa, c, s);
    lz_kv_cache_init(&pb, c, s + 5);
    CHECK(!b.encode(b.ctx, pre, s, &pa, NULL, 0, 0, err, sizeof err) && !direct_doc(NULL, pre, s, NULL, 0, &pb, NULL, 0, 0),
          "the prefix pass: %s", err);
    CHECK(same_rows(&pa, &pb) && pa.n == s && pa.pos0 == 0, "the prefix's K and V, bit for bit (%d rows)", pa.n);
    lz_engine_cpu_encode_set_prefix(t, &pa);

    /* documents after it, random lengths and windows */
    int ok = 1, qok = 1;
    lz_kv_cache da, db;
    lz_kv_cache_init(&da, c, 700);
    lz_kv_cache_init(&db, c, 700);
    float *qa = calloc(qwin_floats(600), sizeof *qa), *qb = calloc(qwin_floats(600), sizeof *qb);
    int ids[600], pids[40];
    for (int k = 0; k < 12; k++) {
        const int n = 1 + (int)(lz_test_xorshift(&rng) % 599);
        const int cw = k % 3 == 0 ? 0 : k % 3 == 1 ? (n < 32 ? n : 32) : n, c0 = k % 3 == 2 ? 0 : n - cw;
        random_ids(ids, n);
        memset(qa, 0, qwin_floats(600) * sizeof *qa);
        memset(qb, 0, qwin_floats(600) * sizeof *qb);
        const int ra = b.encode(b.ctx, ids, n, &da, qa, c0, cw, err, sizeof err);
        const int rb = direct_doc(&pa, ids, n, NULL, 0, &db, qb, c0, cw);
        ok &= !ra && !rb && same_rows(&da, &db) && da.n == n && da.pos0 == s;
        qok &= !memcmp(qa, qb, qwin_floats(cw) * sizeof *qa);
    }
    CHECK(ok, "12 documents after the prefix: K and V bit for bit (%s)", err);
    CHECK(qok, "and their windows' queries");

    /* a probe after a document: its rows kept past n, its queries the window */
    ok = 1;
    for (int k = 0; k < 4; k++) {
        const int n = 20 + 150 * k, np = 3 + 12 * k;
        random_ids(ids, n);
        random_ids(pids, np);
        const int ra = b.encode_probe(b.ctx, ids, n, pids, np, &da, qa, err, sizeof err);
        const int rb = direct_doc(&pa, ids, n, pids, np, &db, qb, n, np);
        ok &= !ra && !rb && same_rows(&da, &db) && da.n == n + np && !memcmp(qa, qb, qwin_floats(np) * sizeof *qa);
    }
    CHECK(ok, "a probe after a document: the document's and the probe's rows, the probe's queries (%s)", err);

    /* one table, several threads at once: each document its own bits */
    enum { ND = 8 };
    lz_kv_cache ca[ND], cb[ND];
    int *dids[ND], dn[ND], rc_a[ND];
    for (int i = 0; i < ND; i++) {
        dn[i] = 50 + 61 * i;
        dids[i] = malloc((size_t)dn[i] * sizeof(int));
        random_ids(dids[i], dn[i]);
        lz_kv_cache_init(&ca[i], c, dn[i]);
        lz_kv_cache_init(&cb[i], c, dn[i]);
    }
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
    for (int i = 0; i < ND; i++) {
        char e2[256];
        rc_a[i] = b.encode(b.ctx, dids[i], dn[i], &ca[i], NULL, 0, 0, e2, sizeof e2);
    }
    ok = 1;
    for (int i = 0; i < ND; i++) {
        ok &= !rc_a[i] && !direct_doc(&pa, dids[i], dn[i], NULL, 0, &cb[i], NULL, 0, 0) && same_rows(&ca[i], &cb[i]);
        lz_kv_cache_free(&ca[i]);
        lz_kv_cache_free(&cb[i]);
        free(dids[i]);
    }
    CHECK(ok, "%d documents encoded by 4 threads at once on one table, each as alone", ND);

    free(qa);
    free(qb);
    lz_kv_cache_free(&da);
    lz_kv_cache_free(&db);
    lz_kv_cache_free(&pa);
    lz_kv_cache_free(&pb);
    lz_engine_cpu_encode_free(t);
    lz_engine_cpu_encode_free(NULL);
}

/* An encoder alone (its own CPU table) against one handed the CPU engine's table: the same
 * prefix, document KV and payload bytes; with probe, the cue probe of KV eviction (which only a
 * table with encode_probe takes). */
static void encoder_pair(int probe)
{
    char err[256] = "";
    int pre[40], ids[400], cue[9];
    random_ids(pre, 40);
    random_ids(cue, 9);
    lz_encoder *a = NULL, *b = NULL;
    lz_engine *e = NULL;
    const lz_engine_opts eo = {0};
    const lz_engine_encode_opts dopts = {.max_tokens = 300};
    if (lz_engine_open(m, &eo, &e, err, sizeof err)) { CHECK(0, "engine: %s", err); return; }
    const lz_encode_backend tb = lz_engine_encoder(e, &dopts);
    int rc = lz_encoder_new(m, pre, 40, &a, err, sizeof err) || lz_encoder_new_on(m, pre, 40, &tb, &b, err, sizeof err);
    CHECK(!rc, "encoders: %s", err);
    if (rc) goto done;
    CHECK(same_rows(lz_encoder_prefix_cache(a), lz_encoder_prefix_cache(b)), "the prefix through the engine's table");
    CHECK(!lz_engine_set_prefix(e, lz_encoder_prefix_cache(b), 0, err, sizeof err), "its prefix: %s", err);
    lz_encoder_set_backend(b, &tb);
    lz_kvpolicy p;
    lz_kvpolicy_default(&p);
    if (probe) {
        p.kind = LZ_KVPOLICY_ADA_SNAPKV, p.budget_frac = 0.3, p.window = 8, p.probe = LZ_KVPOLICY_PROBE_CUE;
        lz_encoder_set_kvpolicy(a, &p), lz_encoder_set_kvpolicy(b, &p);
        lz_encoder_set_probe(a, cue, 9), lz_encoder_set_probe(b, cue, 9);
    }
    lz_payload_codec *codec = lz_payload_codec_new();
    int same_kv = 1, same_blob = 1, docs = 0, taken = 0;
    for (int k = 0; k < 8 && codec; k++) {
        const int n = 10 + 48 * k; /* the last ones longer than the table's bound: the encoder's own */
        random_ids(ids, n);
        if (lz_encoder_run(a, ids, n, err, sizeof err) || lz_encoder_run(b, ids, n, err, sizeof err)) {
            CHECK(0, "run: %s", err);
            break;
        }
        docs++;
        taken += n <= dopts.max_tokens;
        same_kv &= same_rows(lz_encoder_doc_cache(a), lz_encoder_doc_cache(b));
        void *ba = NULL, *bb = NULL;
        size_t la = 0, lb = 0;
        if (!lz_encoder_pack(a, 1, codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 3, &ba, &la, err, sizeof err) &&
            !lz_encoder_pack(b, 1, codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 3, &bb, &lb, err, sizeof err))
            same_blob &= la == lb && !memcmp(ba, bb, la);
        else
            same_blob = 0;
        free(ba);
        free(bb);
    }
    CHECK(docs == 8 && same_kv, "%s: 8 documents, the same KV through the CPU engine's table", probe ? "cue probe" : "whole");
    CHECK(same_blob, "%s: the same payload bytes", probe ? "cue probe" : "whole");
    CHECK(lz_encoder_backend_docs(b) == taken && lz_encoder_backend_docs(a) == 0,
          "%s: the table took the %d documents within its bound (%ld), the lone encoder none", probe ? "cue probe" : "whole",
          taken, lz_encoder_backend_docs(b));
    lz_payload_codec_free(codec);
done:
    lz_encoder_free(a);
    lz_encoder_free(b);
    lz_engine_free(e);
}

/* ---- the question table ---- */

/* A random segment of n rows: keys and values in [-1, 1), placed at rot. */
static lz_kv_segment random_segment(int n, int64_t rot, float **mem)
{
    const lz_llama_config *c = &m->cfg;
    const size_t cnt = (size_t)c->n_layers * c->n_kv_heads * n * c->head_dim;
    float *kv = malloc(2 * cnt * sizeof *kv);
    for (size_t i = 0; i < 2 * cnt; i++) kv[i] = (float)(2 * lz_test_u01(&rng) - 1);
    *mem = kv;
    return (lz_kv_segment){.k = kv, .v = kv + cnt, .n = n, .stride = n, .rot = rot};
}

static void test_question_table(void)
{
    char err[256] = "";
    const int V = m->cfg.vocab, batch = 64;
    lz_engine_cpu_query *t = lz_engine_cpu_query_new(m, batch);
    CHECK(t != NULL, "a question table");
    if (!t) return;
    lz_query_backend b;
    lz_engine_cpu_query_table(t, &b);
    lz_llama_scratch *sc = lz_llama_scratch_new(m, batch);
    float *mem[3];
    const lz_kv_segment segs[3] = {random_segment(17, 0, &mem[0]), random_segment(90, 40, &mem[1]),
                                   random_segment(33, 300, &mem[2])};
    enum { NS = 3, ROWS = 400 };
    int slot[NS], *prompt[NS], np[NS];
    lz_kv_cache ref[NS];
    float *la = malloc((size_t)NS * V * sizeof *la), *lb = malloc((size_t)NS * V * sizeof *lb);
    int ok = 1;
    for (int i = 0; i < NS; i++) { /* each over its own segments, its prompt crossing a batch boundary */
        np[i] = 70 + 45 * i;
        prompt[i] = malloc((size_t)np[i] * sizeof(int));
        random_ids(prompt[i], np[i]);
        slot[i] = b.idle_slot(b.ctx);
        const int64_t pos0 = 500 + 7 * i;
        ok &= slot[i] >= 0 && !b.reserve(b.ctx, slot[i], ROWS, err, sizeof err) &&
              !b.begin_in(b.ctx, slot[i], 0, segs, NULL, 1 + i, pos0, err, sizeof err) &&
              !b.step_in(b.ctx, slot[i], prompt[i], np[i], la + (size_t)i * V, err, sizeof err);
        lz_kv_cache_init(&ref[i], &m->cfg, ROWS);
        lz_kv_cache_reset(&ref[i], pos0);
        ok &= !lz_llama_forward(m, sc, &ref[i], segs, 1 + i, prompt[i], np[i], lb + (size_t)i * V, LZ_LOGITS_LAST);
    }
    CHECK(ok && slot[0] != slot[1] && slot[1] != slot[2] && slot[0] != slot[2], "three slots begun and stepped: %s", err);
    CHECK(!memcmp(la, lb, (size_t)NS * V * sizeof *la), "step_in: the logits of lz_llama_forward, bit for bit");
    ok = 1;
    for (int i = 0; i < NS; i++) ok &= same_rows(b.own_kv(b.ctx, slot[i]), &ref[i]);
    CHECK(ok, "own_kv: the rows stepped, as lz_llama_forward's cache");

    /* prefill_many: one slot is lz_llama_forward, several lz_llama_forward_batch */
    int q[NS][9];
    const int *qp[NS], qn[NS] = {9, 4, 7};
    float *lpa[NS], *lpb[NS];
    lz_llama_seq seqs[NS];
    for (int i = 0; i < NS; i++) {
        random_ids(q[i], qn[i]);
        qp[i] = q[i], lpa[i] = la + (size_t)i * V, lpb[i] = lb + (size_t)i * V;
        seqs[i] = (lz_llama_seq){.cache = &ref[i], .segs = segs, .n_segs = 1 + i, .tokens = q[i], .n = qn[i], .logits = lpb[i]};
    }
    ok = !b.prefill_many(b.ctx, slot, qp, qn, 1, lpa, err, sizeof err) &&
         !lz_llama_forward(m, sc, &ref[0], segs, 1, q[0], qn[0], lpb[0], LZ_LOGITS_LAST);
    CHECK(ok && !memcmp(la, lb, (size_t)V * sizeof *la), "prefill_many of one slot: lz_llama_forward's logits");
    ok = !b.prefill_many(b.ctx, slot + 1, qp + 1, qn + 1, 2, lpa + 1, err, sizeof err) &&
         !lz_llama_forward_batch(m, sc, seqs + 1, 2);
    CHECK(ok && !memcmp(la + V, lb + V, 2 * (size_t)V * sizeof *la), "prefill_many of two: lz_llama_forward_batch's");

    /* decode_many: a token each, one slot and all three */
    int tok[NS];
    random_ids(tok, NS);
    for (int i = 0; i < NS; i++) seqs[i].tokens = &tok[i], seqs[i].n = 1;
    ok = !b.decode_many(b.ctx, slot, tok, 1, lpa, err, sizeof err) &&
         !lz_llama_forward(m, sc, &ref[0], segs, 1, tok, 1, lpb[0], LZ_LOGITS_LAST);
    CHECK(ok && !memcmp(la, lb, (size_t)V * sizeof *la), "decode_many of one slot: lz_llama_forward's logits");
    random_ids(tok, NS);
    ok = !b.decode_many(b.ctx, slot, tok, NS, lpa, err, sizeof err) && !lz_llama_forward_batch(m, sc, seqs, NS);
    CHECK(ok && !memcmp(la, lb, (size_t)NS * V * sizeof *la), "decode_many of three: lz_llama_forward_batch's");
    ok = 1;
    for (int i = 0; i < NS; i++) ok &= same_rows(b.own_kv(b.ctx, slot[i]), &ref[i]);
    CHECK(ok, "and the rows they appended");
    CHECK(!b.step_in(b.ctx, slot[1], tok, 1, NULL, err, sizeof err) &&
              b.own_kv(b.ctx, slot[1])->n == ref[1].n + 1, "a step without logits appends its row");

    /* any number of slots; a released slot is found again */
    int many[20], distinct = 1, begun = 1;
    for (int i = 0; i < 20; i++) {
        many[i] = b.idle_slot(b.ctx);
        begun &= many[i] >= 0 && !b.reserve(b.ctx, many[i], 8, err, sizeof err) &&
                 !b.begin_in(b.ctx, many[i], 0, NULL, NULL, 0, 0, err, sizeof err);
        for (int j = 0; j < NS; j++) distinct &= many[i] != slot[j];
        for (int j = 0; j < i; j++) distinct &= many[i] != many[j];
    }
    CHECK(begun && distinct, "20 more sequences at once, each its own slot: %s", err);
    b.release(b.ctx, many[5]);
    CHECK(b.idle_slot(b.ctx) == many[5], "a released slot is the next idle one");
    CHECK(b.own_kv(b.ctx, many[5])->cap == 0, "its rows freed");
    for (int i = 0; i < 20; i++) b.release(b.ctx, many[i]);

    /* refusals */
    const int idle = b.idle_slot(b.ctx);
    err[0] = 0;
    CHECK(b.begin_in(b.ctx, idle, 0, NULL, NULL, 0, 0, err, sizeof err) == -1 && strstr(err, "reserved"),
          "begun with no rows reserved: %s", err);
    CHECK(b.reserve(b.ctx, idle, (int64_t)1 << 40, err, sizeof err) == LZ_QUERY_ENOMEM && strstr(err, "out of memory"),
          "rows past memory: LZ_QUERY_ENOMEM (%s)", err);
    CHECK(!b.reserve(b.ctx, idle, 4, err, sizeof err) && b.begin_in(b.ctx, idle, 1, NULL, NULL, 0, 0, err, sizeof err) == -1 &&
              strstr(err, "begin_block"), "a block begin refused: %s", err);
    CHECK(b.step_in(b.ctx, 999, tok, 1, NULL, err, sizeof err) == -1 && strstr(err, "slot 999"), "an unknown slot: %s", err);
    b.release(b.ctx, 999); /* a no-op */

    for (int i = 0; i < NS; i++) b.release(b.ctx, slot[i]), lz_kv_cache_free(&ref[i]), free(prompt[i]);
    for (int i = 0; i < 3; i++) free(mem[i]);
    free(la);
    free(lb);
    lz_llama_scratch_free(sc);
    lz_engine_cpu_query_free(t);
    lz_engine_cpu_query_free(NULL);
}

int main(void)
{
    char mdir[256], mpath[320];
    lz_llama_set_threads(2);
    if (!(m = lz_test_model(2, 4, 2, 16, 64, mdir, sizeof mdir, mpath, sizeof mpath))) return lz_test_done();
    test_document_table();
    encoder_pair(0);
    encoder_pair(1);
    test_question_table();
    lz_test_model_free(m, mdir, mpath);
    return lz_test_done();
}
