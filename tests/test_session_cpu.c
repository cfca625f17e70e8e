/* test_session_cpu.c - the query session over the CPU engine's question
 * table (engine/cpu_query.h), on a generated model and fp32 store, random
 * documents and questions, greedy and sampled: the session's own CPU table
 * (backend NULL) and the CPU engine's (lz_engine_query) give the same bits
 * in every mode (first-token logits, answers, tokens computed, cache
 * lookups, the answer's memory and estimate), one answer at a time and
 * several begun, prefilled and stepped together; full mode equals the
 * forward calls the session made itself before the table (the prefix, each
 * document, the question, each answer token, one lz_llama_forward each:
 * the first token's logits to the bit, every greedy token their argmax);
 * prefix mode on a backend without keep_own runs on the CPU engine's table
 * (the backend never called) with the CPU's results; and the CPU runs any
 * number of answers at once (lz_query_run_parallel 0). */
#include "engine/engine.h"
#include "model/prompt.h"
#include "model/sampler.h"
#include "query/answer_run.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "tests/test.h"

static char dir[256], model[600], store[600];
static unsigned long long rng = 0x5eed;
static lz_llama *m;
static lz_store *st;

static const char *questions[] = {"castle river", "apple north engine", "violet market?", "signal harbor garden",
                                  "copper winter", "lantern meadow falcon quartz"};

static lz_query_session *open_session(int mode, float temp, const lz_query_backend *be)
{
    char err[512];
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.mode = mode;
    o.cache_bytes = 1 << 20; /* a few documents: evictions too */
    o.max_new_tokens = 8;
    o.keep_logits = 1;
    o.temperature = temp;
    o.top_p = 1.0f;
    o.backend = be;
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, st, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    return q;
}

/* k random documents (ids doc0..doc39, repeats allowed); *docs malloc'd, or NULL after a failed check. */
static lz_query_doc *pick_docs(int k)
{
    char buf[8][16], err[256];
    const char *ids[8];
    for (int i = 0; i < k; i++) snprintf(buf[i], 16, "doc%d", lz_test_irand(&rng, 40)), ids[i] = buf[i];
    lz_query_doc *d = NULL;
    if (lz_retrieve_ids(st, ids, k, &d, err, sizeof err)) CHECK(0, "ids: %s", err);
    return d;
}

static int same_result(const lz_query_result *a, const lz_query_result *b)
{
    const size_t V = (size_t)m->cfg.vocab;
    return a->n_answer == b->n_answer && !memcmp(a->answer_ids, b->answer_ids, (size_t)a->n_answer * sizeof(int)) &&
           (a->logits == NULL) == (b->logits == NULL) && (!a->logits || !memcmp(a->logits, b->logits, V * sizeof(float))) &&
           a->n_computed == b->n_computed && a->n_prompt == b->n_prompt && a->hits == b->hits && a->misses == b->misses &&
           !strcmp(a->answer, b->answer);
}

/* The session alone and over the CPU engine's table: one answer at a time, then four together. */
static void test_own_and_engine(int mode)
{
    char err[512], e2[512];
    const char *name = lz_query_mode_name(mode);
    for (int sampled = 0; sampled < 2; sampled++) {
        lz_engine *eng = NULL;
        const lz_engine_opts eo = {.batch = 256};
        if (lz_engine_open(m, &eo, &eng, err, sizeof err)) { CHECK(0, "engine: %s", err); return; }
        lz_query_session *qa = open_session(mode, sampled ? 0.9f : 0, NULL);
        lz_query_session *qb = open_session(mode, sampled ? 0.9f : 0, lz_engine_query(eng));
        if (!qa || !qb) goto next;
        CHECK(lz_query_run_parallel(qa) == 0 && lz_query_run_parallel(qb) == 0, "%s: any number of answers at once", name);
        int same = 1, answered = 0, est = 1;
        for (int t = 0; t < 10; t++) {
            const int k = 1 + lz_test_irand(&rng, 5);
            lz_query_doc *d = pick_docs(k);
            if (!d) continue;
            const char *qs = questions[lz_test_irand(&rng, 6)];
            est &= lz_query_run_estimate(qa, qs, d, k, 8) == lz_query_run_estimate(qb, qs, d, k, 8);
            lz_query_result a, b;
            const int ra = lz_query_answer(qa, qs, d, k, &a, err, sizeof err);
            const int rb = lz_query_answer(qb, qs, d, k, &b, e2, sizeof e2);
            CHECK(!ra && !rb, "%s: answers: %s / %s", name, err, e2);
            if (!ra && !rb) same &= same_result(&a, &b), answered++;
            if (!ra) lz_query_result_free(&a);
            if (!rb) lz_query_result_free(&b);
            free(d);
        }
        CHECK(answered == 10 && same, "%s%s: the CPU engine's table gives the session's own results, bit for bit", name,
              sampled ? " (sampled)" : "");
        CHECK(est, "%s: the same memory estimates", name);
        /* four answers begun, prefilled in one pass, stepped together */
        lz_query_run *ra[4] = {0}, *rb[4] = {0};
        lz_query_doc *ds[4] = {0};
        int nd[4], begun = 1, bytes = 1;
        for (int i = 0; i < 4; i++) {
            nd[i] = 1 + i;
            ds[i] = pick_docs(nd[i]);
            lz_query_run_opts ro;
            lz_query_run_opts_default(qa, &ro);
            ro.seed = 100 + i;
            ro.max_new_tokens = 4 + i;
            begun &= ds[i] && !lz_query_run_begin(qa, questions[i], ds[i], nd[i], &ro, &ra[i], err, sizeof err) &&
                     !lz_query_run_begin(qb, questions[i], ds[i], nd[i], &ro, &rb[i], err, sizeof err);
            bytes &= ra[i] && rb[i] && lz_query_run_bytes(ra[i]) == lz_query_run_bytes(rb[i]);
        }
        CHECK(begun && bytes, "%s: four answers begun, holding the same memory: %s", name, err);
        if (begun && !lz_query_run_prefill(qa, ra, 4, err, sizeof err) && !lz_query_run_prefill(qb, rb, 4, err, sizeof err)) {
            for (int steps = 0; steps < 16; steps++) {
                lz_query_run *la[4], *lb[4];
                int n = 0;
                for (int i = 0; i < 4; i++) {
                    const char *p;
                    int pl;
                    lz_query_run_next(ra[i], &p, &pl);
                    lz_query_run_next(rb[i], &p, &pl);
                    if (!lz_query_run_done(ra[i]) && !lz_query_run_done(rb[i])) la[n] = ra[i], lb[n++] = rb[i];
                }
                if (!n || lz_query_run_step(qa, la, n, err, sizeof err) || lz_query_run_step(qb, lb, n, err, sizeof err))
                    break;
            }
            int eq = 1;
            for (int i = 0; i < 4; i++) eq &= same_result(lz_query_run_result(ra[i]), lz_query_run_result(rb[i]));
            CHECK(eq, "%s%s: four answers together, the same bits on both tables", name, sampled ? " (sampled)" : "");
        } else {
            CHECK(0, "%s: prefill: %s", name, err);
        }
        for (int i = 0; i < 4; i++) lz_query_run_free(ra[i]), lz_query_run_free(rb[i]), free(ds[i]);
        lz_doc_cache_stats ca, cb;
        lz_query_cache_stats(qa, &ca);
        lz_query_cache_stats(qb, &cb);
        CHECK(ca.hits == cb.hits && ca.misses == cb.misses && ca.bytes_used == cb.bytes_used && ca.evicted == cb.evicted,
              "%s: the same host tier (%lld hits, %lld misses, %lld evicted)", name, (long long)ca.hits,
              (long long)ca.misses, (long long)ca.evicted);
    next:
        lz_query_session_free(qa);
        lz_query_session_free(qb);
        lz_engine_free(eng);
    }
}

/* Full mode against the forward calls the session made itself before the table. */
static void test_full_direct(void)
{
    char err[512];
    const int V = m->cfg.vocab;
    lz_query_session *q = open_session(LZ_MODE_FULL, 0, NULL);
    lz_llama_scratch *sc = lz_llama_scratch_new(m, 256);
    float *logits = malloc((size_t)V * sizeof *logits);
    int *pre = NULL, n_pre = 0, same = 0, greedy = 0, runs = 0;
    if (!q || !sc || !logits || lz_prompt_prefix_tokens(m->tok, &pre, &n_pre)) { CHECK(0, "full: setup"); goto done; }
    for (int t = 0; t < 6; t++) {
        const int k = 1 + lz_test_irand(&rng, 4);
        lz_query_doc *d = pick_docs(k);
        if (!d) continue;
        const char *qs = questions[t % 6];
        int *qids, nq, total = n_pre;
        lz_prompt_question_tokens(m->tok, qs, &qids, &nq);
        for (int i = 0; i < k; i++) total += d[i].n_tokens;
        lz_kv_cache c;
        lz_kv_cache_init(&c, &m->cfg, total + nq + 8);
        lz_kv_cache_reset(&c, 0);
        int rc = lz_llama_forward(m, sc, &c, NULL, 0, pre, n_pre, NULL, LZ_LOGITS_NONE);
        for (int i = 0; i < k && !rc; i++) {
            int *ids, n;
            rc = lz_store_doc_tokens(st, d[i].id, &ids, &n, err, sizeof err) ||
                 lz_llama_forward(m, sc, &c, NULL, 0, ids, n, NULL, LZ_LOGITS_NONE);
            free(ids);
        }
        rc = rc || lz_llama_forward(m, sc, &c, NULL, 0, qids, nq, logits, LZ_LOGITS_LAST);
        lz_query_result r;
        if (!rc && !lz_query_answer(q, qs, d, k, &r, err, sizeof err)) {
            runs++;
            same += r.logits && !memcmp(r.logits, logits, (size_t)V * sizeof *logits) && r.n_computed == total + nq;
            int ok = 1;
            for (int i = 0; i < r.n_answer && ok; i++) { /* each greedy token the argmax of the logits before it */
                ok = lz_sample_argmax(logits, V) == r.answer_ids[i] &&
                     !lz_llama_forward(m, sc, &c, NULL, 0, &r.answer_ids[i], 1, logits, LZ_LOGITS_LAST);
            }
            greedy += ok;
            lz_query_result_free(&r);
        } else {
            CHECK(0, "full: %s", err);
        }
        lz_kv_cache_free(&c);
        free(qids);
        free(d);
    }
    CHECK(runs == 6 && same == 6, "full: the first token's logits of the direct forward calls on %d of %d", same, runs);
    CHECK(greedy == 6, "full: every greedy token their argmax on %d of %d", greedy, runs);
done:
    free(pre);
    free(logits);
    lz_llama_scratch_free(sc);
    lz_query_session_free(q);
}

/* A backend of one sequence without keep_own: prefix mode runs on the CPU engine's table. */
static int calls;
static int fb_begin(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                    char *err, size_t errlen)
{
    calls++;
    return snprintf(err, errlen, "not this backend"), -1;
}
static int fb_step(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    calls++;
    return snprintf(err, errlen, "not this backend"), -1;
}

static void test_prefix_fallback(void)
{
    char err[512], e2[512];
    const lz_query_backend fb = {.begin = fb_begin, .step = fb_step};
    lz_query_session *qa = open_session(LZ_MODE_PREFIX, 0, NULL), *qb = open_session(LZ_MODE_PREFIX, 0, &fb);
    int same = 1, answered = 0;
    for (int t = 0; qa && qb && t < 8; t++) {
        const int k = 1 + t % 3;
        lz_query_doc *d = pick_docs(k);
        if (!d) continue;
        lz_query_result a, b;
        const int ra = lz_query_answer(qa, questions[t % 6], d, k, &a, err, sizeof err);
        const int rb = lz_query_answer(qb, questions[t % 6], d, k, &b, e2, sizeof e2);
        if (!ra && !rb) same &= same_result(&a, &b), answered++;
        else CHECK(0, "prefix fallback: %s / %s", err, e2);
        if (!ra) lz_query_result_free(&a);
        if (!rb) lz_query_result_free(&b);
        free(d);
    }
    CHECK(answered == 8 && same && calls == 0,
          "prefix on a backend without keep_own: the CPU engine's table, its results (%d answered, %d backend calls)",
          answered, calls);
    CHECK(qb && lz_query_run_parallel(qb) == 1, "the backend's sequences still bound the answers at once");
    lz_query_session_free(qa);
    lz_query_session_free(qb);
}

int main(void)
{
    char err[512];
    const char *bin = getenv("LZ_BIN");
    if (!bin) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    char corpus[700];
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    FILE *f = fopen(corpus, "w");
    if (f) lz_test_write_word_docs(f, 40, 3, 30, &rng), fclose(f);
    lz_llama_set_threads(2);
    if (!f || lz_test_sh("%s/lazy-mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 -o %s", bin, model) ||
        lz_test_sh("%s/lazyingest --quiet --kv-dtype f32 --model %s --store %s %s", bin, model, store, corpus)) {
        CHECK(0, "could not build the test store");
        return lz_test_done();
    }
    if (lz_llama_load(model, &m, err, sizeof err) || lz_store_open(store, LZ_STORE_RDONLY, &st, err, sizeof err)) {
        CHECK(0, "open: %s", err);
        return lz_test_done();
    }
    for (int mode = LZ_MODE_LAZY; mode <= LZ_MODE_FULL; mode++) test_own_and_engine(mode);
    test_full_direct();
    test_prefix_fallback();
    lz_store_close(st);
    lz_llama_free(m);
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
