/* test_query.c - the query side end to end on a generated model and store:
 * lazy and block give identical greedy answers and logits (1e-5 relative)
 * over random placements of 1-20 documents in random orders; with one
 * document lazy equals full recomputation, with several full differs;
 * prefix equals full; the cache serves repeats; and the CLI refuses bad
 * input (empty question, too long, missing or foreign store, hostile FTS
 * strings, top-k beyond the store) with a message, never a crash; a corrupt
 * payload among cold documents is named. The store
 * is fp32 (--kv-dtype f32) so the 1e-5 comparisons measure the method, not
 * bf16 storage. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "model/llama.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "model/prompt.h"
#include "tests/store_inner.h"
#include "base/sha256.h"
#include "tests/test.h"

static char dir[256], bin[512], model[600], store[600];

/* The test model and the shared store (read-only), or 0 after a failed check. */
static int open_model_store(lz_llama **m, lz_store **s)
{
    char err[1024];
    if (lz_llama_load(model, m, err, sizeof err)) { CHECK(0, "load: %s", err); return 0; }
    if (lz_store_open(store, LZ_STORE_RDONLY, s, err, sizeof err)) {
        CHECK(0, "store: %s", err);
        lz_llama_free(*m);
        return 0;
    }
    return 1;
}



static unsigned long long rng = 0x1234567;
static int irand(int n) { return lz_test_irand(&rng, n); }

static void write_corpus(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    lz_test_write_word_docs(f, n, 3, 30, &rng);
    fclose(f);
}

static lz_query_session *session_f32(lz_llama *m, lz_store *s, int mode, size_t cache, int cache_f32)
{
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.mode = mode;
    o.cache_bytes = cache;
    o.cache_f32 = cache_f32;
    o.max_new_tokens = 6;
    o.keep_logits = 1;
    lz_query_session *q = NULL;
    char err[512];
    if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    return q;
}

static lz_query_session *session(lz_llama *m, lz_store *s, int mode, size_t cache)
{
    return session_f32(m, s, mode, cache, 0);
}

/* A bf16 store (lazyingest's default): its KV cached as bf16 (the default)
 * or widened to fp32 (cache_f32). Lazy: identical logits and answers, half
 * the cache bytes. Block and prefix round their re-rotated / recomputed
 * copies to bf16: close, not equal. */
static void test_bf16_cache(const char *store16)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (lz_llama_load(model, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    if (lz_store_open(store16, LZ_STORE_RDONLY, &s, err, sizeof err)) { CHECK(0, "store: %s", err); lz_llama_free(m); return; }
    const int V = m->cfg.vocab, modes[3] = {LZ_MODE_LAZY, LZ_MODE_BLOCK, LZ_MODE_PREFIX};
    for (int mi = 0; mi < 3; mi++) {
        lz_query_session *q16 = session_f32(m, s, modes[mi], 1 << 22, 0), *q32 = session_f32(m, s, modes[mi], 1 << 22, 1);
        if (!q16 || !q32) { lz_query_session_free(q16); lz_query_session_free(q32); continue; }
        double worst = 0;
        int identical = 1;
        for (int t = 0; t < 8; t++) {
            const char *pick[6];
            char buf[6][16];
            const int n = 2 + (t / 2) % 5; /* each placement twice: the second time from the cache */
            for (int i = 0; i < n; i++) { snprintf(buf[i], 16, "doc%d", (t / 2 * 7 + i * 5) % 40); pick[i] = buf[i]; }
            lz_query_doc *docs;
            if (lz_retrieve_ids(s, pick, n, &docs, err, sizeof err)) { CHECK(0, "ids: %s", err); continue; }
            lz_query_result a, b;
            int ok = !lz_query_answer(q16, "castle river", docs, n, &a, err, sizeof err) &&
                     !lz_query_answer(q32, "castle river", docs, n, &b, err, sizeof err);
            CHECK(ok, "answer: %s", err);
            if (ok) {
                identical &= !memcmp(a.logits, b.logits, (size_t)V * sizeof(float)) && a.n_answer == b.n_answer &&
                             !memcmp(a.answer_ids, b.answer_ids, (size_t)a.n_answer * sizeof(int));
                worst = fmax(worst, lz_test_rel_diff(a.logits, b.logits, V));
                lz_query_result_free(&a);
                lz_query_result_free(&b);
            }
            free(docs);
        }
        lz_doc_cache_stats a, b;
        lz_query_cache_stats(q16, &a);
        lz_query_cache_stats(q32, &b);
        CHECK(a.n_entries == b.n_entries && a.bytes_used * 2 == b.bytes_used, "%s: bf16 cache %lld bytes in %lld "
              "entries, fp32 %lld in %lld", lz_query_mode_name(modes[mi]), (long long)a.bytes_used,
              (long long)a.n_entries, (long long)b.bytes_used, (long long)b.n_entries);
        if (modes[mi] == LZ_MODE_LAZY) CHECK(identical, "lazy: bf16 cache changed the logits (rel diff %g)", worst);
        else CHECK(worst <= 1e-2, "%s: bf16 copies moved the logits by %g", lz_query_mode_name(modes[mi]), worst);
        printf("bf16 store, %-6s: bf16 cache vs fp32 cache: logits rel diff %.3g, %lld vs %lld bytes\n",
               lz_query_mode_name(modes[mi]), worst, (long long)a.bytes_used, (long long)b.bytes_used);
        lz_query_session_free(q16);
        lz_query_session_free(q32);
    }
    lz_store_close(s);
    lz_llama_free(m);
}

/* An fp8 store (lazyingest --kv-dtype fp8) of the same corpus: half the KV bytes of the bf16
 * store on disk and in the host tier's dequantised bf16 entries the same bytes as bf16's; lazy
 * logits within a stated distance of the bf16 store's (e4m3 keeps 3 mantissa bits, 2^-4
 * relative error a value), the same greedy answers on most questions. */
static void test_fp8_store(const char *store16, const char *store8)
{
    char err[1024];
    lz_llama *m;
    lz_store *s16, *s8;
    if (lz_llama_load(model, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    if (lz_store_open(store16, LZ_STORE_RDONLY, &s16, err, sizeof err)) { CHECK(0, "store: %s", err); lz_llama_free(m); return; }
    if (lz_store_open(store8, LZ_STORE_RDONLY, &s8, err, sizeof err)) {
        CHECK(0, "fp8 store: %s", err);
        lz_store_close(s16);
        lz_llama_free(m);
        return;
    }
    size_t bytes[2] = { 0, 0 };
    for (int st = 0; st < 2; st++)
        for (int i = 0; i < 40; i++) {
            char id[16];
            const char *pick[1] = { id };
            snprintf(id, sizeof id, "doc%d", i);
            lz_query_doc *d;
            size_t len = 0;
            if (lz_retrieve_ids(st ? s8 : s16, pick, 1, &d, err, sizeof err)) continue;
            if (lz_store_has_payload(st ? s8 : s16, d[0].payload_key, &len, err, sizeof err) == 1) bytes[st] += len;
            free(d);
        }
    CHECK(bytes[1] > 0 && bytes[1] * 10 < bytes[0] * 7, "fp8 payloads %zu bytes, bf16 %zu", bytes[1], bytes[0]);
    const int V = m->cfg.vocab;
    lz_query_session *q16 = session_f32(m, s16, LZ_MODE_LAZY, 1 << 22, 0), *q8 = session_f32(m, s8, LZ_MODE_LAZY, 1 << 22, 0);
    CHECK(lz_store_kv_dtype(s8) == LZ_PAYLOAD_DTYPE_FP8, "the store records fp8 (%d)", lz_store_kv_dtype(s8));
    double worst = 0;
    int same = 0, total = 0;
    for (int t = 0; q16 && q8 && t < 8; t++) {
        const char *pick[5];
        char buf[5][16];
        const int n = 1 + t % 5;
        for (int i = 0; i < n; i++) { snprintf(buf[i], 16, "doc%d", (t * 7 + i * 5) % 40); pick[i] = buf[i]; }
        lz_query_doc *d16, *d8;
        if (lz_retrieve_ids(s16, pick, n, &d16, err, sizeof err)) { CHECK(0, "ids: %s", err); continue; }
        if (lz_retrieve_ids(s8, pick, n, &d8, err, sizeof err)) { CHECK(0, "ids: %s", err); free(d16); continue; }
        lz_query_result r16, r8;
        int ok = !lz_query_answer(q16, "castle river", d16, n, &r16, err, sizeof err) &&
                 !lz_query_answer(q8, "castle river", d8, n, &r8, err, sizeof err);
        CHECK(ok, "fp8 answer: %s", err);
        if (ok) {
            worst = fmax(worst, lz_test_rel_diff(r8.logits, r16.logits, V));
            same += r8.n_answer == r16.n_answer && !memcmp(r8.answer_ids, r16.answer_ids, (size_t)r8.n_answer * sizeof(int));
            total++;
            lz_query_result_free(&r16);
            lz_query_result_free(&r8);
        }
        free(d16);
        free(d8);
    }
    CHECK(total == 8 && worst <= 0.05, "fp8 store: lazy logits within 0.05 of the bf16 store's (rel diff %g)", worst);
    CHECK(same * 2 >= total, "fp8 store: the same greedy answer on %d of %d questions", same, total);
    printf("fp8 store vs bf16 store, lazy: logits rel diff %.3g, %d of %d answers identical\n", worst, same, total);
    lz_query_session_free(q16);
    lz_query_session_free(q8);
    lz_store_close(s16);
    lz_store_close(s8);
    lz_llama_free(m);
}

/* A backend that reads fp8 (reads_fp8) made of the CPU engine itself: begin keeps the segments
 * (the session keeps their memory until the answer ends), step runs lz_llama_forward over them,
 * so an fp8 store's documents reach model/attention.c as e4m3 bytes and scales. */
typedef struct {
    lz_llama *m;
    lz_llama_scratch *sc;
    lz_kv_cache cache;
    lz_kv_segment segs[16];
    int n_segs, fp8_segs;
} cpu_fp8_backend;

static int cpu8_begin(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                      char *err, size_t errlen)
{
    (void)keys;
    cpu_fp8_backend *b = ctx;
    if (n_segs > 16) { snprintf(err, errlen, "too many segments"); return -1; }
    memcpy(b->segs, segs, (size_t)n_segs * sizeof *segs);
    b->n_segs = n_segs;
    for (int i = 0; i < n_segs; i++) b->fp8_segs += segs[i].k8 != NULL;
    lz_kv_cache_reset(&b->cache, pos0);
    return 0;
}

static int cpu8_step(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    cpu_fp8_backend *b = ctx;
    if (lz_llama_forward(b->m, b->sc, &b->cache, b->segs, b->n_segs, ids, n, logits, logits ? LZ_LOGITS_LAST : LZ_LOGITS_NONE)) {
        snprintf(err, errlen, "cpu forward failed");
        return -1;
    }
    return 0;
}

/* An fp8 store's documents kept fp8 in the host tier for a backend that reads fp8 (and, the
 * same bytes, for the CPU engine without a backend): about half the host tier's bytes of the
 * bf16 entries dequantised for a backend that does not, every document handed to the backend
 * as fp8, and the answers of the CPU engine reading them close to those over the bf16 entries
 * (the same e4m3 values; bf16 rounds them): lazy logits within 0.02 and the same greedy answers;
 * block (the session's re-rotated copies: fp8 re-quantised at the scale x sqrt 2, against bf16
 * rounded) within 0.05 and the same answers on most questions. */
static void fp8_kept_mode(lz_llama *m, lz_store *s8, int mode)
{
    char err[1024];
    cpu_fp8_backend b = {.m = m, .sc = lz_llama_scratch_new(m, 64)}, b16 = {.m = m, .sc = lz_llama_scratch_new(m, 64)};
    lz_kv_cache_init(&b.cache, &m->cfg, 256);
    lz_kv_cache_init(&b16.cache, &m->cfg, 256);
    lz_query_backend be = {.ctx = &b, .begin = cpu8_begin, .step = cpu8_step, .reads_fp8 = 1};
    lz_query_backend be16 = {.ctx = &b16, .begin = cpu8_begin, .step = cpu8_step, .reads_fp8 = 0};
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.mode = mode;
    o.cache_bytes = 1 << 26;
    o.max_new_tokens = 6;
    o.keep_logits = 1;
    o.backend = &be;
    lz_query_session *q8 = NULL, *q16 = NULL, *qc = session(m, s8, mode, 1 << 26);
    if (lz_query_session_new(m, s8, &o, &q8, err, sizeof err)) CHECK(0, "session: %s", err);
    o.backend = &be16; /* a backend that does not read fp8: bf16 entries */
    if (lz_query_session_new(m, s8, &o, &q16, err, sizeof err)) CHECK(0, "session: %s", err);
    const int V = m->cfg.vocab;
    const char *name = mode == LZ_MODE_BLOCK ? "block" : "lazy";
    double worst = 0;
    int same = 0, total = 0, docs = 0, cpu_same = 0;
    for (int t = 0; q8 && q16 && qc && t < 8; t++) {
        const char *pick[5];
        char buf[5][16];
        const int n = 1 + t % 5;
        for (int i = 0; i < n; i++) { snprintf(buf[i], 16, "doc%d", (t * 7 + i * 5) % 40); pick[i] = buf[i]; }
        lz_query_doc *d;
        if (lz_retrieve_ids(s8, pick, n, &d, err, sizeof err)) { CHECK(0, "ids: %s", err); continue; }
        lz_query_result r8, r16;
        b.fp8_segs = 0;
        int ok = !lz_query_answer(q8, "castle river", d, n, &r8, err, sizeof err);
        CHECK(ok, "fp8 kept (%s): %s", name, err);
        docs += ok && b.fp8_segs == n + 1; /* the documents and the prompt prefix */
        if (ok && !lz_query_answer(q16, "castle river", d, n, &r16, err, sizeof err)) {
            worst = fmax(worst, lz_test_rel_diff(r8.logits, r16.logits, V));
            same += r8.n_answer == r16.n_answer && !memcmp(r8.answer_ids, r16.answer_ids, (size_t)r8.n_answer * sizeof(int));
            total++;
            lz_query_result_free(&r16);
        }
        lz_query_result rc; /* the CPU engine alone over the same fp8 entries: the same bits */
        if (ok && !lz_query_answer(qc, "castle river", d, n, &rc, err, sizeof err)) {
            cpu_same += !memcmp(rc.logits, r8.logits, (size_t)V * sizeof(float));
            lz_query_result_free(&rc);
        }
        if (ok) lz_query_result_free(&r8);
        free(d);
    }
    lz_doc_cache_stats c8 = {0}, c16 = {0}, cc = {0};
    if (q8 && q16 && qc) lz_query_cache_stats(q8, &c8), lz_query_cache_stats(q16, &c16), lz_query_cache_stats(qc, &cc);
    const double tol = mode == LZ_MODE_BLOCK ? 0.05 : 0.02;
    CHECK(cc.bytes_used == c8.bytes_used && cpu_same == 8,
          "fp8 kept (%s): the CPU session holds %lld bytes (the fp8 backend's %lld) and gives its logits on %d of 8", name,
          (long long)cc.bytes_used, (long long)c8.bytes_used, cpu_same);
    CHECK(docs == 8, "fp8 kept (%s): every segment handed to the backend as fp8 on %d of 8 questions", name, docs);
    CHECK(total == 8 && worst <= tol, "fp8 kept (%s): logits within %g of the dequantised bf16 entries' (rel diff %g)",
          name, tol, worst);
    CHECK(mode == LZ_MODE_BLOCK ? same * 2 >= total : same == total,
          "fp8 kept (%s): the same greedy answer on %d of %d questions", name, same, total);
    CHECK(c8.bytes_used > 0 && c8.bytes_used * 10 < c16.bytes_used * 6,
          "fp8 kept (%s): the host tier holds %lld bytes, the bf16 entries %lld", name, (long long)c8.bytes_used,
          (long long)c16.bytes_used);
    printf("fp8 kept for a backend that reads it, %s: host tier %lld bytes against %lld dequantised; logits rel diff "
           "%.3g, %d of %d answers identical\n", name, (long long)c8.bytes_used, (long long)c16.bytes_used, worst, same,
           total);
    lz_query_session_free(q8);
    lz_query_session_free(q16);
    lz_query_session_free(qc);
    lz_kv_cache_free(&b.cache);
    lz_kv_cache_free(&b16.cache);
    lz_llama_scratch_free(b.sc);
    lz_llama_scratch_free(b16.sc);
}

static void test_fp8_kept(const char *store8)
{
    char err[1024];
    lz_llama *m;
    lz_store *s8;
    if (lz_llama_load(model, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    if (lz_store_open(store8, LZ_STORE_RDONLY, &s8, err, sizeof err)) { CHECK(0, "fp8 store: %s", err); lz_llama_free(m); return; }
    fp8_kept_mode(m, s8, LZ_MODE_LAZY);
    fp8_kept_mode(m, s8, LZ_MODE_BLOCK);
    lz_store_close(s8);
    lz_llama_free(m);
}

static void test_modes(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    lz_query_session *lazy = session(m, s, LZ_MODE_LAZY, 1 << 20), *block = session(m, s, LZ_MODE_BLOCK, 1 << 20);
    lz_query_session *prefix = session(m, s, LZ_MODE_PREFIX, 1 << 20), *full = session(m, s, LZ_MODE_FULL, 0);
    if (!lazy || !block || !prefix || !full) goto out;
    const int V = m->cfg.vocab;
    char ids_buf[40][16];
    const char *ids[40];
    for (int i = 0; i < 40; i++) { snprintf(ids_buf[i], 16, "doc%d", i); ids[i] = ids_buf[i]; }
    double worst_lb = 0, worst_pf = 0;
    int answers_equal = 1, trials = 30;
    for (int t = 0; t < trials; t++) {
        int n = t == 0 ? 1 : 1 + irand(20);
        const char *pick[20];
        for (int i = 0; i < n; i++) {
            int dup;
            do { pick[i] = ids[irand(40)]; dup = 0; for (int j = 0; j < i; j++) dup |= pick[j] == pick[i]; } while (dup);
        }
        lz_query_doc *docs;
        if (lz_retrieve_ids(s, pick, n, &docs, err, sizeof err)) { CHECK(0, "ids: %s", err); continue; }
        lz_query_result rl, rb, rp, rf;
        const char *question = irand(2) ? "Which castle is near the river?" : "apple engine";
        int ok = !lz_query_answer(lazy, question, docs, n, &rl, err, sizeof err) &&
                 !lz_query_answer(block, question, docs, n, &rb, err, sizeof err) &&
                 !lz_query_answer(prefix, question, docs, n, &rp, err, sizeof err) &&
                 !lz_query_answer(full, question, docs, n, &rf, err, sizeof err);
        CHECK(ok, "answer: %s", err);
        if (ok) {
            double lb = lz_test_rel_diff(rl.logits, rb.logits, V), pf = lz_test_rel_diff(rp.logits, rf.logits, V);
            double lf = lz_test_rel_diff(rl.logits, rf.logits, V);
            worst_lb = fmax(worst_lb, lb);
            worst_pf = fmax(worst_pf, pf);
            if (rl.n_answer != rb.n_answer || memcmp(rl.answer_ids, rb.answer_ids, (size_t)rl.n_answer * sizeof(int)))
                answers_equal = 0;
            if (n == 1) CHECK(lf <= 1e-5, "one document: lazy vs full rel diff %g", lf);
            if (n >= 3) CHECK(lf > 1e-4, "%d documents: full should differ from lazy (rel diff %g)", n, lf);
            CHECK(rf.n_computed == rf.n_prompt && rl.n_computed < rl.n_prompt, "full recomputes, lazy reuses");
            lz_query_result_free(&rl); lz_query_result_free(&rb); lz_query_result_free(&rp); lz_query_result_free(&rf);
        }
        free(docs);
    }
    CHECK(worst_lb <= 1e-5, "lazy vs block logits: worst relative difference %g", worst_lb);
    CHECK(worst_pf <= 1e-5, "prefix vs full logits: worst relative difference %g", worst_pf);
    CHECK(answers_equal, "lazy and block greedy answers identical");
    printf("lazy vs block worst rel diff %.3g, prefix vs full %.3g over %d placements\n", worst_lb, worst_pf, trials);
    /* repeats hit the cache: the same documents again (fresh sessions: a
     * document seen once cannot displace the popular ones of the trials) */
    lz_query_session_free(lazy);
    lz_query_session_free(block);
    lazy = session(m, s, LZ_MODE_LAZY, 1 << 20);
    block = session(m, s, LZ_MODE_BLOCK, 1 << 20);
    if (lazy && block) {
        const char *pick[3] = {"doc1", "doc2", "doc3"};
        lz_query_doc *docs;
        lz_query_result r;
        lz_retrieve_ids(s, pick, 3, &docs, err, sizeof err);
        lz_query_answer(lazy, "river", docs, 3, &r, err, sizeof err);
        lz_query_result_free(&r);
        CHECK(lz_query_answer(lazy, "river", docs, 3, &r, err, sizeof err) == 0 && r.hits == 3 && r.misses == 0,
              "repeat served from cache (%lld hits)", (long long)r.hits);
        lz_query_result_free(&r);
        /* other order: lazy still hits (one copy for every position), block misses the moved ones */
        const char *rev[3] = {"doc3", "doc2", "doc1"};
        free(docs);
        lz_retrieve_ids(s, rev, 3, &docs, err, sizeof err);
        CHECK(lz_query_answer(lazy, "river", docs, 3, &r, err, sizeof err) == 0 && r.hits == 3, "lazy hits any order");
        lz_query_result_free(&r);
        lz_query_answer(block, "river", docs, 3, &r, err, sizeof err);
        lz_query_result_free(&r);
        const char *fwd[3] = {"doc1", "doc2", "doc3"};
        free(docs);
        lz_retrieve_ids(s, fwd, 3, &docs, err, sizeof err);
        lz_query_answer(block, "river", docs, 3, &r, err, sizeof err);
        lz_query_result_free(&r);
        free(docs);
        lz_retrieve_ids(s, rev, 3, &docs, err, sizeof err);
        CHECK(lz_query_answer(block, "river", docs, 3, &r, err, sizeof err) == 0 && r.hits == 3,
              "block hits only at the same offsets");
        lz_query_result_free(&r);
        free(docs);
        /* an empty question is refused */
        CHECK(lz_query_answer(lazy, "", NULL, 0, &r, err, sizeof err) != 0 && strstr(err, "empty"), "empty question");
    }
    /* retrieval: hostile strings are plain words */
    const char *hostile[] = {"\"unbalanced", "title:castle", "a OR b AND NOT (c", "NEAR(river castle, 2)", "*", "\"\"\"",
                             "col:", ")))(((", "river\" OR \"x", "-", "^start", "'; DROP TABLE documents; --"};
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        lz_query_doc *docs;
        int n;
        CHECK(lz_retrieve_search(s, hostile[i], 5, &docs, &n, err, sizeof err) == 0, "hostile '%s': %s", hostile[i], err);
        free(docs);
    }
    lz_query_doc *docs;
    int n;
    CHECK(lz_retrieve_search(s, "castle river", 1000, &docs, &n, err, sizeof err) == 0 && n > 0 && n <= 40,
          "top-k beyond the store returns what exists (%d)", n);
    free(docs);
    const char *missing[1] = {"no-such-doc"};
    CHECK(lz_retrieve_ids(s, missing, 1, &docs, err, sizeof err) != 0 && strstr(err, "no-such-doc"), "unknown id named");
out:
    lz_query_session_free(lazy); lz_query_session_free(block); lz_query_session_free(prefix); lz_query_session_free(full);
    lz_store_close(s);
    lz_llama_free(m);
}

static void test_cli(void)
{
    char out[700];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 4 'Where is the castle?' > %s 2>&1", bin, model, store, out) == 0,
          "plain question answers");
    CHECK(lz_test_sh("grep -q '^Sources:' %s", out) == 0, "sources listed");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 4 --json --docs doc1,doc2 'river?' > %s 2>&1", bin, model, store, out) == 0 &&
          lz_test_sh("grep -q '\"sources\"' %s && grep -q '\"ttft_s\"' %s", out, out) == 0, "--json with --docs");
    CHECK(lz_test_sh("grep -q '\"title\":\"Title 1 castle\"' %s", out) == 0, "--docs sources carry their titles");
    { /* "answer" is the final answer of "generated" (model/prompt.h LZ_PROMPT_FINAL) */
        size_t len, fl;
        char *txt = lz_test_read_file(out, &len);
        json_error_t je;
        json_t *o = txt ? json_loads(txt, JSON_DISABLE_EOF_CHECK, &je) : NULL;
        const char *ans = json_string_value(json_object_get(o, "answer"));
        const char *gen = json_string_value(json_object_get(o, "generated"));
        const char *fin = gen ? lz_prompt_final_answer(gen, &fl, NULL) : NULL;
        CHECK(ans && gen && strlen(ans) == fl && !strncmp(ans, fin, fl), "--json answer = final answer of generated (%s | %s)",
              ans ? ans : "-", gen ? gen : "-");
        json_decref(o);
        free(txt);
    }
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s '' > %s 2>&1", bin, model, store, out) != 0 &&
          lz_test_sh("grep -q 'empty' %s", out) == 0, "empty question refused");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s --cold later 'river?' > %s 2>&1", bin, model, store, out) == 2 &&
          lz_test_sh("grep -q -- \"--cold: expected recompute, load or auto, got 'later'\" %s", out) == 0,
          "--cold with an unknown value refused (exit 2, the option and value named)");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --cold load --json 'river?' > %s 2>&1", bin, model, store,
                     out) == 0 &&
              lz_test_sh("grep -q '\"recomputed\":0' %s && grep -q '\"recompute_s\"' %s", out, out) == 0,
          "--cold load on the CPU: answers, reports nothing recomputed");
    /* a question longer than the model's context (2048) */
    char longq[700];
    snprintf(longq, sizeof longq, "%s/long.txt", dir);
    FILE *f = fopen(longq, "w");
    for (int i = 0; i < 3000; i++) fputs("castle ", f);
    fputc('\n', f);
    fclose(f);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s < %s > %s 2>&1", bin, model, store, longq, out) != 0 &&
          lz_test_sh("grep -q 'context' %s", out) == 0, "too-long question refused, naming the context");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s/none 'x' > %s 2>&1", bin, model, dir, out) != 0 &&
          lz_test_sh("grep -q 'none' %s", out) == 0, "missing store refused");
    /* foreign store: another model */
    CHECK(lz_test_sh("%s/lazy-mkmodel --seed 7 -o %s/other.gguf", bin, dir) == 0, "other model");
    CHECK(lz_test_sh("%s/lazyquery --model %s/other.gguf --store %s 'x' > %s 2>&1", bin, dir, store, out) != 0 &&
          lz_test_sh("grep -qi 'model' %s", out) == 0, "store of another model refused");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -k 500 -n 2 'NEAR(castle' > %s 2>&1", bin, model, store, out) == 0,
          "hostile FTS string and top-k beyond the store answered");
    CHECK(lz_test_sh("printf 'river?\\ncastle?\\n' | %s/lazyquery --model %s --store %s -n 2 --json > %s 2>&1", bin, model, store, out) == 0 &&
          lz_test_sh("test $(grep -c '\"answer\"' %s) -eq 2", out) == 0, "questions from stdin, one JSON line each");
    CHECK(lz_test_sh("printf 'bad \\377 question?\\n' | %s/lazyquery --model %s --store %s -n 8 --json > %s 2>&1", bin, model, store, out) == 0 &&
          lz_test_sh("grep -q 'uFFFD' %s && grep -q '\"answer\"' %s", out, out) == 0,
          "invalid UTF-8 in a question (and random-model answers) still gives a JSON result");
    CHECK(lz_test_sh("printf '{\"id\": \"q1\", \"question\": \"river?\", \"docs\": [\"doc3\"]}\\nnot json\\n' > %s/q.jsonl", dir) == 0, "write");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --questions %s/q.jsonl > %s 2>&1", bin, model, store, dir, out) == 2 &&
          lz_test_sh("grep -q '\"id\":\"q1\"' %s && grep -q 'q.jsonl:2' %s", out, out) == 0, "--questions: answers and names the bad line");
}

/* The final answer after a reasoning (model/prompt.h LZ_PROMPT_FINAL). */
static void test_final_answer(void)
{
    size_t n, w;
    const char *a = lz_prompt_final_answer("Ada Kell 1871; Bo Tran 1862 => Bo Tran\n", &n, &w);
    CHECK(n == 7 && !strncmp(a, "Bo Tran", n) && w == 27, "final answer after the marker (%zu, %zu)", n, w);
    a = lz_prompt_final_answer("  logistics ", &n, &w);
    CHECK(n == 9 && !strncmp(a, "logistics", n) && w == 0, "no marker: the whole text, trimmed");
    a = lz_prompt_final_answer("x => y => z", &n, &w);
    CHECK(n == 1 && *a == 'z' && w == 6, "the last marker counts");
    a = lz_prompt_final_answer("A 1 => ", &n, &w);
    CHECK(n == 0 && w == 3, "an empty final answer stays empty, not the reasoning");
    a = lz_prompt_final_answer("", &n, &w);
    CHECK(n == 0 && w == 0, "empty text");
}

/* An accelerator that keeps the documents it was given (the GPU's cache,
 * gpu/llama_cuda_docs.cu) stands in for it here: a segment handed with data is
 * kept by its content key; one handed without data must be a kept key. */
typedef struct {
    uint8_t keys[64][32];
    int n_keys, n_begins, placeholders, bad, V;
    int64_t last_rot; /* the placement of the last segment handed without data */
    /* encode: documents longer than max_n are skipped; what it was handed, by key index */
    int max_n, encode_calls, prefix_n, enc_n[64], enc_ids[64][64], encode_fails;
    int encode_rc; /* what a failing encode returns (0: -1) */
    /* host_alloc: its blocks (live ones), allocations made; data segments handed whose K and V
     * were not one block from it (K's rows then V's) */
    void *blocks[256];
    size_t block_bytes[256];
    int n_blocks, host_allocs, host_frees, not_block;
    int L, KV, d; /* set: the data segments are checked against the blocks */
    /* preload: priors seeded (key index -> hits), documents it keeps (into keys) while below keep_cap */
    int n_priors, keep_cap, kept, preload_order_bad;
    int n_block_begins; /* begin_block: calls, and the last one's rot of segments 1..8 */
    int last_step_n, n_steps, n_keep, keep_t0[16], keep_n[16], last_begin_segs;
    int step_fails, settles; /* step_fails: every step fails; settles: settle calls */
    int64_t last_pos0;
    int64_t block_rot[9];
    double prior_hits[64];
    uint8_t prior_keys[64][32];
} fake_backend;

static void *fake_host_alloc(void *ctx, size_t bytes)
{
    fake_backend *f = ctx;
    if (f->n_blocks == 256) return NULL; /* full: the session falls back to malloc */
    void *p = malloc(bytes);
    if (!p) return NULL;
    f->blocks[f->n_blocks] = p;
    f->block_bytes[f->n_blocks++] = bytes;
    f->host_allocs++;
    return p;
}

static void fake_host_free(void *ctx, void *p, size_t bytes)
{
    fake_backend *f = ctx;
    for (int i = 0; i < f->n_blocks; i++)
        if (f->blocks[i] == p) {
            CHECK(f->block_bytes[i] == bytes, "host_free: %zu bytes, allocated %zu", bytes, f->block_bytes[i]);
            free(p);
            f->blocks[i] = f->blocks[--f->n_blocks];
            f->block_bytes[i] = f->block_bytes[f->n_blocks];
            f->host_frees++;
            return;
        }
    CHECK(0, "host_free of a block it did not allocate");
}

/* Whether segment sg's K and V are one block from f's host_alloc, K's rows then V's. */
static int fake_one_block(const fake_backend *f, const lz_kv_segment *sg, int L, int KV, int d)
{
    size_t rows = 0;
    for (int i = 0; i < L * KV; i++) rows += sg->n_kept ? (size_t)sg->n_kept[i] : (size_t)sg->n;
    const void *k = sg->k16 ? (const void *)sg->k16 : (const void *)sg->k;
    const size_t es = sg->k16 ? 2 : 4, bytes = 2 * (rows ? rows : 1) * d * es;
    const char *v = sg->k16 ? (const char *)sg->v16 : (const char *)sg->v;
    if (v != (const char *)k + bytes / 2) return 0;
    for (int i = 0; i < f->n_blocks; i++)
        if (f->blocks[i] == k && f->block_bytes[i] == bytes) return 1;
    return 0;
}

static int fake_begin(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                      char *err, size_t errlen)
{
    fake_backend *f = ctx;
    f->last_pos0 = pos0;
    f->last_begin_segs = n_segs;
    f->n_steps = 0;
    f->n_begins++;
    for (int i = 0; i < n_segs; i++) {
        int known = -1;
        for (int k = 0; k < f->n_keys; k++)
            if (!memcmp(f->keys[k], keys[i], 32)) known = k;
        if (!segs[i].k && !segs[i].k16) {
            f->placeholders++;
            f->last_rot = segs[i].rot;
            if (known < 0) f->bad++;
        } else {
            if (f->L && !fake_one_block(f, &segs[i], f->L, f->KV, f->d)) f->not_block++;
            if (known < 0 && f->n_keys < 64) memcpy(f->keys[f->n_keys++], keys[i], 32);
        }
    }
    if (f->bad) snprintf(err, errlen, "a segment without data the backend does not hold");
    return f->bad ? -1 : 0;
}

static int fake_step(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    (void)ids; (void)err; (void)errlen;
    fake_backend *f = ctx;
    if (!f->n_steps++) f->last_step_n = n; /* the question's (the first step of each question) */
    if (f->step_fails) { snprintf(err, errlen, "accelerator step failed"); return -1; }
    if (logits)
        for (int v = 0; v < f->V; v++) logits[v] = v == 5 ? 1.f : 0.f;
    return 0;
}

static int fake_resident(void *ctx, const uint8_t key[32])
{
    fake_backend *f = ctx;
    for (int k = 0; k < f->n_keys; k++)
        if (!memcmp(f->keys[k], key, 32)) return 1;
    return 0;
}

static int fake_encode(void *ctx, const lz_kv_segment *prefix, const uint8_t *prefix_key, const int *const *ids,
                       const int *n, const uint8_t *const *keys, int n_docs, char *err, size_t errlen)
{
    (void)prefix_key;
    fake_backend *f = ctx;
    f->encode_calls++;
    f->prefix_n = prefix->n;
    if (f->encode_fails) {
        snprintf(err, errlen, "accelerator out of memory");
        return f->encode_rc ? f->encode_rc : -1;
    }
    for (int i = 0; i < n_docs && f->n_keys < 64; i++) {
        if (n[i] > f->max_n) continue;
        const int k = f->n_keys++;
        memcpy(f->keys[k], keys[i], 32);
        f->enc_n[k] = n[i];
        memcpy(f->enc_ids[k], ids[i], (size_t)(n[i] < 64 ? n[i] : 64) * sizeof(int));
    }
    return 0;
}

static int fake_preload(void *ctx, const lz_kv_segment *seg, const uint8_t key[32], double hits, char *err, size_t errlen)
{
    (void)err; (void)errlen;
    fake_backend *f = ctx;
    if (!seg) {
        if (f->n_priors < 64) {
            memcpy(f->prior_keys[f->n_priors], key, 32);
            f->prior_hits[f->n_priors++] = hits;
        }
        return 0;
    }
    if (!seg->k && !seg->k16) f->bad++;
    if (f->kept >= f->keep_cap || f->n_keys >= 64) return 0;
    memcpy(f->keys[f->n_keys++], key, 32);
    f->kept++;
    return 1;
}

/* A lazy session on stand-in backend f (with encode) and cold policy cold;
 * cache_bytes 1 unless given (no document fits the CPU cache). */
static lz_query_session *fake_session(lz_llama *m, lz_store *s, lz_query_backend *be, fake_backend *f, int cold,
                                      size_t cache_bytes, char *err, size_t errlen)
{
    *be = (lz_query_backend){.ctx = f, .begin = fake_begin, .step = fake_step, .resident = fake_resident,
                             .encode = fake_encode};
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.mode = LZ_MODE_LAZY;
    o.cache_bytes = cache_bytes ? cache_bytes : 1;
    o.max_new_tokens = 2;
    o.backend = be;
    o.cold = cold;
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, s, &o, &q, err, errlen)) CHECK(0, "session: %s", err);
    return q;
}

/* Cold documents recomputed on the accelerator (opts.cold, lazy mode): not
 * loaded, handed to it with their stored token ids after the prefix, counted
 * as misses, held on the next question; those it cannot take (too long) and
 * those stored with KV eviction are loaded; LZ_COLD_LOAD never recomputes. */
static void test_backend_recompute(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    const char *three[3] = {"doc1", "doc2", "doc3"};
    lz_query_doc *d3 = NULL;
    if (lz_retrieve_ids(s, three, 3, &d3, err, sizeof err)) { CHECK(0, "ids: %s", err); goto out; }
    CHECK(d3[0].whole && d3[1].whole && d3[2].whole, "documents stored without eviction are whole");
    for (int cold = LZ_COLD_LOAD; cold <= LZ_COLD_RECOMPUTE; cold++)
        for (int variant = 0; variant < 3; variant++) { /* 0 all fit, 1 none fits, 2 doc2 marked evicted */
            if (cold == LZ_COLD_LOAD && variant) continue;
            fake_backend f = {.V = m->cfg.vocab, .max_n = variant == 1 ? 0 : 1 << 20};
            lz_query_backend be;
            lz_query_session *q = fake_session(m, s, &be, &f, cold, 0, err, sizeof err);
            if (!q) continue;
            lz_query_doc docs[3];
            memcpy(docs, d3, sizeof docs);
            if (variant == 2) docs[1].whole = 0;
            const int want = cold == LZ_COLD_LOAD || variant == 1 ? 0 : variant == 2 ? 2 : 3;
            lz_query_result r;
            CHECK(lz_query_answer(q, "river", docs, 3, &r, err, sizeof err) == 0 && r.misses == 3 &&
                      r.n_recomputed == want && (r.bytes_loaded > 0) == (want < 3) && r.t_recompute >= 0,
                  "cold %d variant %d: %d recomputed (want %d), %lld misses, %lld bytes loaded: %s", cold, variant,
                  r.n_recomputed, want, (long long)r.misses, (long long)r.bytes_loaded, err);
            CHECK(f.encode_calls == (cold == LZ_COLD_RECOMPUTE), "encode called %d times", f.encode_calls);
            CHECK(f.encode_calls == 0 || f.prefix_n == lz_query_prefix_len(q), "the prefix handed along (%d tokens)",
                  f.prefix_n);
            lz_query_result_free(&r);
            for (int k = 0; k < f.n_keys && want; k++) { /* the stored token ids of one of the documents */
                if (!f.enc_n[k]) continue; /* kept by begin (handed with data), not encoded */
                int match = 0;
                for (int i = 0; i < 3; i++) {
                    int *ids, n;
                    if (lz_store_doc_tokens(s, docs[i].id, &ids, &n, err, sizeof err)) continue;
                    match |= n == f.enc_n[k] && !memcmp(ids, f.enc_ids[k], (size_t)(n < 64 ? n : 64) * sizeof(int));
                    free(ids);
                }
                CHECK(match, "recomputed document %d handed its stored token ids", k);
            }
            CHECK(lz_query_answer(q, "river", docs, 3, &r, err, sizeof err) == 0 && r.hits == 3 && r.bytes_loaded == 0 &&
                      r.n_recomputed == 0,
                  "cold %d variant %d, again: every document held (%lld hits, %d recomputed): %s", cold, variant,
                  (long long)r.hits, r.n_recomputed, err);
            lz_query_result_free(&r);
            lz_query_session_free(q);
        }
    { /* the same document twice in one prompt: recomputed once, neither copy loaded */
        fake_backend f = {.V = m->cfg.vocab, .max_n = 1 << 20};
        lz_query_backend be;
        lz_query_session *q = fake_session(m, s, &be, &f, LZ_COLD_RECOMPUTE, 0, err, sizeof err);
        lz_query_doc rep[3] = {d3[0], d3[1], d3[0]};
        if (q) {
            lz_query_result r;
            int rc = lz_query_answer(q, "river", rep, 3, &r, err, sizeof err);
            CHECK(rc == 0 && r.n_recomputed == 2 && r.misses == 3 && r.bytes_loaded == 0 && f.n_keys >= 2,
                  "a repeated document recomputed once (%d recomputed, %lld misses, %lld bytes loaded): %s",
                  rc ? -1 : r.n_recomputed, rc ? -1LL : (long long)r.misses, rc ? -1LL : (long long)r.bytes_loaded, err);
            if (!rc) lz_query_result_free(&r);
            lz_query_session_free(q);
        }
    }
    { /* the accelerator failing: the question fails with its message and its status (LZ_QUERY_ENOMEM passed
       * on unchanged, -1 as -1), and the session still answers after */
        fake_backend f = {.V = m->cfg.vocab, .max_n = 1 << 20, .encode_fails = 1, .encode_rc = LZ_QUERY_ENOMEM};
        lz_query_backend be;
        lz_query_session *q = fake_session(m, s, &be, &f, LZ_COLD_RECOMPUTE, (size_t)1 << 30, err, sizeof err);
        if (q) {
            lz_query_result r;
            int rc = lz_query_answer(q, "river", d3, 3, &r, err, sizeof err);
            CHECK(rc == LZ_QUERY_ENOMEM && strstr(err, "out of memory"), "a recomputation out of memory: %d (%s)", rc,
                  rc ? err : "answered");
            if (!rc) lz_query_result_free(&r);
            f.encode_rc = 0;
            rc = lz_query_answer(q, "river", d3, 3, &r, err, sizeof err);
            CHECK(rc == -1 && strstr(err, "out of memory"), "a failed recomputation reported: %d (%s)", rc,
                  rc ? err : "answered");
            if (!rc) lz_query_result_free(&r);
            f.encode_fails = 0;
            rc = lz_query_answer(q, "river", d3, 3, &r, err, sizeof err);
            CHECK(rc == 0 && r.n_recomputed == 3, "then recomputed (%d): %s", rc ? -1 : r.n_recomputed, err);
            if (!rc) lz_query_result_free(&r);
            lz_query_session_free(q);
        }
    }
out:
    free(d3);
    lz_store_close(s);
    lz_llama_free(m);
}

/* LZ_COLD_AUTO: per document the cheaper way at the session's rates: with the store's decode
 * made slow (1 byte/s) every whole cold document is recomputed, with recompute made slow (1
 * token/s) none is; each question updates the rate of the way it took from what it measured
 * (the other stays); the priors are 4 GB/s and 20,000 tokens/s. */
static void test_backend_auto(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    const char *three[3] = {"doc1", "doc2", "doc3"};
    lz_query_doc *d3 = NULL;
    if (lz_retrieve_ids(s, three, 3, &d3, err, sizeof err)) CHECK(0, "ids: %s", err);
    for (int slow = 0; d3 && slow < 2; slow++) { /* 0: decode slow, 1: recompute slow */
        fake_backend f = {.V = m->cfg.vocab, .max_n = 1 << 20};
        lz_query_backend be;
        lz_query_session *q = fake_session(m, s, &be, &f, LZ_COLD_AUTO, 0, err, sizeof err);
        if (!q) continue;
        double dec, rec;
        lz_query_cold_rates(q, &dec, &rec);
        CHECK(dec == 4e9 && rec == 2e4, "priors %g B/s, %g tokens/s", dec, rec);
        lz_query_set_cold_rates(q, slow ? 0 : 1, slow ? 1 : 0);
        lz_query_result r;
        const int want = slow ? 0 : 3;
        CHECK(lz_query_answer(q, "river", d3, 3, &r, err, sizeof err) == 0 && r.n_recomputed == want &&
                  (r.bytes_loaded > 0) == (want == 0),
              "auto, %s slow: %d recomputed (want %d), %lld bytes loaded: %s", slow ? "recompute" : "decode",
              r.n_recomputed, want, (long long)r.bytes_loaded, err);
        lz_query_result_free(&r);
        double dec2, rec2;
        lz_query_cold_rates(q, &dec2, &rec2);
        CHECK(slow ? dec2 != 4e9 && rec2 == 1 : dec2 == 1 && rec2 != 2e4,
              "the rate of the way taken measured: %g -> %g B/s, %g -> %g tokens/s", slow ? 4e9 : 1.0, dec2,
              slow ? 1.0 : 2e4, rec2);
        lz_query_session_free(q);
    }
    free(d3);
    lz_store_close(s);
    lz_llama_free(m);
}

/* The start-up preload over both tiers: with access counts doc3 300, doc1 200, doc7 100, the
 * backend's cache (room for 2) gets the frequencies of all three and keeps the two hottest,
 * the host tier all three; a question over them then loads nothing (doc3 and doc1 held by the
 * backend, doc7 from the host tier). --preload all: every document into the host tier, none
 * more into the backend. */
static void test_preload_tiers(const char *store_copy)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (lz_test_sh("rm -rf %s && cp -r %s %s", store_copy, store, store_copy)) { CHECK(0, "copy the store"); return; }
    if (lz_llama_load(model, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    if (lz_store_open(store_copy, LZ_STORE_WRITER, &s, err, sizeof err)) { CHECK(0, "store: %s", err); lz_llama_free(m); return; }
    const char *hot[3] = {"doc3", "doc1", "doc7"};
    lz_query_doc *d = NULL;
    if (lz_retrieve_ids(s, hot, 3, &d, err, sizeof err)) { CHECK(0, "ids: %s", err); goto out; }
    int64_t n_docs = 0;
    lz_store_doc_count(s, &n_docs, err, sizeof err);
    for (int all = 0; all < 2; all++) {
        if (!all) /* 300, 200, 100 hits more: above what the command-line tests counted in the copy */
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 100 * (3 - i); k++) lz_store_hit(s, d[i].id, err, sizeof err);
        fake_backend f = {.V = m->cfg.vocab, .keep_cap = 2};
        lz_query_backend be = {.ctx = &f, .begin = fake_begin, .step = fake_step, .resident = fake_resident,
                               .preload = fake_preload};
        lz_query_opts o;
        lz_query_opts_default(&o);
        o.mode = LZ_MODE_LAZY;
        o.max_new_tokens = 2;
        o.backend = &be;
        lz_query_session *q = NULL;
        if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) { CHECK(0, "session: %s", err); continue; }
        lz_query_preload_result pr;
        CHECK(lz_query_preload(q, all, &pr, err, sizeof err) == 0, "preload: %s", err);
        /* the three (and any the copy's earlier runs counted) seeded, hottest first */
        int seeded = 0;
        for (int i = 0; i < 3; i++) {
            uint8_t dg[32];
            lz_sha256(d[i].payload_key, LZ_META_KEY_LEN, dg);
            for (int k = 0; k < f.n_priors; k++) seeded += !memcmp(f.prior_keys[k], dg, 32) && f.prior_hits[k] >= 1;
        }
        int sorted = 1;
        for (int k = 1; k < f.n_priors; k++) sorted &= f.prior_hits[k] <= f.prior_hits[k - 1];
        CHECK(seeded == 3 && sorted, "backend priors: %d of 3 seeded (%d in all), hottest first %d", seeded, f.n_priors,
              sorted);
        CHECK(pr.gpu == 2 && f.kept == 2 && f.bad == 0 && pr.gpu_bytes > 0, "backend kept %d (want 2)", pr.gpu);
        CHECK(all ? pr.host == (int)n_docs : pr.host == f.n_priors, "host tier: %d documents (%lld in the store)",
              pr.host, (long long)n_docs);
        lz_query_result r;
        const int rc = lz_query_answer(q, "river", d, 3, &r, err, sizeof err);
        CHECK(rc == 0 && r.bytes_loaded == 0 && r.hits == 3, "after the preload: %lld hits, %lld bytes loaded: %s",
              (long long)r.hits, (long long)r.bytes_loaded, rc ? err : "");
        if (!rc) lz_query_result_free(&r);
        lz_query_session_free(q);
    }
out:
    free(d);
    lz_store_close(s);
    lz_llama_free(m);
}

/* Block mode on a backend that rotates its own copies (begin_block): segments come as the
 * documents' content KV (the same bytes lazy mode hands) with their placements in rot, a key
 * per (document, placement); the host tier keeps one copy a document for every placement. */
static int fake_begin_block(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                            char *err, size_t errlen)
{
    fake_backend *f = ctx;
    f->n_block_begins++;
    for (int i = 1; i < n_segs && i < 9; i++) f->block_rot[i] = segs[i].rot;
    return fake_begin(ctx, segs, keys, n_segs, pos0, err, errlen);
}

static int fake_keep_own(void *ctx, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    (void)err; (void)errlen;
    fake_backend *f = ctx;
    if (f->n_keep < 16) { f->keep_t0[f->n_keep] = t0; f->keep_n[f->n_keep] = n; }
    f->n_keep++;
    if (f->n_keys < 64) memcpy(f->keys[f->n_keys++], key, 32);
    return 1;
}

/* Full and prefix modes on a backend: full begins with nothing at position 0 and steps the
 * whole prompt at once; prefix steps the documents and the question, keeps each document's
 * rows under its chain key (keep_own, at its offset among the own tokens), and the same
 * documents again are found resident: placeholders, only the question stepped. */
static void test_backend_full_prefix(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    const char *ab[2] = {"doc1", "doc2"};
    lz_query_doc *d = NULL;
    if (lz_retrieve_ids(s, ab, 2, &d, err, sizeof err)) { CHECK(0, "ids: %s", err); goto out; }
    for (int mode = LZ_MODE_PREFIX; mode <= LZ_MODE_FULL; mode++) {
        fake_backend f = {.V = m->cfg.vocab};
        lz_query_backend be = {.ctx = &f, .begin = fake_begin, .step = fake_step, .resident = fake_resident,
                               .keep_own = fake_keep_own};
        lz_query_opts o;
        lz_query_opts_default(&o);
        o.mode = mode;
        o.max_new_tokens = 3;
        o.backend = &be;
        lz_query_session *q = NULL;
        if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) { CHECK(0, "session: %s", err); continue; }
        const int sp = lz_query_prefix_len(q), n0 = d[0].n_tokens, n1 = d[1].n_tokens;
        lz_query_result r;
        int rc = lz_query_answer(q, "river", d, 2, &r, err, sizeof err);
        const int nq = rc ? 0 : r.n_prompt - sp - n0 - n1;
        if (mode == LZ_MODE_FULL)
            CHECK(rc == 0 && f.last_begin_segs == 0 && f.last_pos0 == 0 && f.last_step_n == r.n_prompt &&
                      r.n_computed == r.n_prompt && f.n_keep == 0,
                  "full: %d segments at %lld, stepped %d of %d prompt tokens: %s", f.last_begin_segs,
                  (long long)f.last_pos0, f.last_step_n, rc ? 0 : r.n_prompt, err);
        else
            CHECK(rc == 0 && f.last_begin_segs == 1 && f.last_pos0 == sp && f.last_step_n == n0 + n1 + nq &&
                      f.n_keep == 2 && f.keep_t0[0] == 0 && f.keep_n[0] == n0 && f.keep_t0[1] == n0 && f.keep_n[1] == n1,
                  "prefix: stepped %d, kept %d (%d+%d, %d+%d): %s", f.last_step_n, f.n_keep, f.keep_t0[0], f.keep_n[0],
                  f.keep_t0[1], f.keep_n[1], err);
        if (!rc) lz_query_result_free(&r);
        if (mode == LZ_MODE_PREFIX) { /* again: both documents' chains resident */
            rc = lz_query_answer(q, "river", d, 2, &r, err, sizeof err);
            CHECK(rc == 0 && f.last_begin_segs == 3 && f.placeholders == 2 && f.bad == 0 && f.last_step_n == nq &&
                      r.hits == 2 && f.last_pos0 == sp + n0 + n1 && f.n_keep == 2,
                  "prefix again: %d segments, %d placeholders, stepped %d (question %d), %lld hits: %s",
                  f.last_begin_segs, f.placeholders, f.last_step_n, nq, rc ? 0LL : (long long)r.hits, err);
            if (!rc) lz_query_result_free(&r);
        }
        lz_query_session_free(q);
    }
out:
    free(d);
    lz_store_close(s);
    lz_llama_free(m);
}

static void fake_settle(void *ctx) { ((fake_backend *)ctx)->settles++; }

/* A question that fails after begin settles the backend (its copies may still read the
 * segments' memory) before the session frees that memory; a question that answers does not. */
static void test_backend_settle(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    const char *ab[2] = {"doc1", "doc2"};
    lz_query_doc *d = NULL;
    fake_backend f = {.V = m->cfg.vocab};
    lz_query_backend be = {.ctx = &f, .begin = fake_begin, .step = fake_step, .settle = fake_settle};
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.max_new_tokens = 2;
    o.backend = &be;
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    if (q && !lz_retrieve_ids(s, ab, 2, &d, err, sizeof err)) {
        lz_query_result r;
        CHECK(lz_query_answer(q, "river", d, 2, &r, err, sizeof err) == 0 && f.settles == 0, "answered: %d settles",
              f.settles);
        lz_query_result_free(&r);
        f.step_fails = 1;
        CHECK(lz_query_answer(q, "river", d, 2, &r, err, sizeof err) != 0 && strstr(err, "step failed") &&
                  f.settles == 1,
              "a failed step: %d settles (%s)", f.settles, err);
    }
    free(d);
    lz_query_session_free(q);
    lz_store_close(s);
    lz_llama_free(m);
}

static void test_backend_block(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    const char *ab[2] = {"doc1", "doc2"}, *ba[2] = {"doc2", "doc1"};
    lz_query_doc *d1 = NULL, *d2 = NULL;
    fake_backend f = {.V = m->cfg.vocab};
    lz_query_backend be = {.ctx = &f, .begin = fake_begin, .step = fake_step, .begin_block = fake_begin_block};
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.mode = LZ_MODE_BLOCK;
    o.max_new_tokens = 2;
    o.backend = &be;
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    if (q && !lz_retrieve_ids(s, ab, 2, &d1, err, sizeof err) && !lz_retrieve_ids(s, ba, 2, &d2, err, sizeof err)) {
        lz_query_result r;
        CHECK(lz_query_answer(q, "river", d1, 2, &r, err, sizeof err) == 0 && r.misses == 2 && f.n_block_begins == 1 &&
                  f.n_begins == 1 && f.block_rot[1] == 0 && f.block_rot[2] == d1[0].n_tokens,
              "block: begin_block with the placements (%lld, %lld): %s", (long long)f.block_rot[1],
              (long long)f.block_rot[2], err);
        lz_query_result_free(&r);
        /* the other order: new placements, new keys for the backend, the same host entries */
        CHECK(lz_query_answer(q, "river", d2, 2, &r, err, sizeof err) == 0 && r.hits == 2 && r.bytes_loaded == 0 &&
                  f.block_rot[2] == d2[0].n_tokens && f.n_keys == 5,
              "block, swapped: %lld host hits, %lld bytes loaded, %d backend keys (the prefix and 2 x 2 placements): %s", (long long)r.hits,
              (long long)r.bytes_loaded, f.n_keys, err);
        lz_query_result_free(&r);
        lz_doc_cache_stats st;
        lz_query_cache_stats(q, &st);
        CHECK(st.n_entries == 2, "host tier: %lld entries for two documents at four placements", (long long)st.n_entries);
    }
    free(d1);
    free(d2);
    lz_query_session_free(q);
    lz_store_close(s);
    lz_llama_free(m);
}

/* Documents the accelerator holds are not loaded again, even when the CPU
 * cache (here too small for any) has none of them; the others are. */
static void test_backend_resident(void)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (!open_model_store(&m, &s)) return;
    fake_backend f = {.V = m->cfg.vocab, .L = m->cfg.n_layers, .KV = m->cfg.n_kv_heads, .d = m->cfg.head_dim};
    /* with the backend's host memory: every segment handed with data is one block of it */
    lz_query_backend be = {.ctx = &f, .begin = fake_begin, .step = fake_step, .resident = fake_resident,
                           .host_alloc = fake_host_alloc, .host_free = fake_host_free};
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.mode = LZ_MODE_LAZY;
    o.cache_bytes = 1; /* no document fits: only the backend keeps them */
    o.max_new_tokens = 2;
    o.backend = &be;
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    const char *three[3] = {"doc1", "doc2", "doc3"}, *two[2] = {"doc3", "doc4"};
    lz_query_doc *d3 = NULL, *d2 = NULL;
    if (q && !lz_retrieve_ids(s, three, 3, &d3, err, sizeof err) && !lz_retrieve_ids(s, two, 2, &d2, err, sizeof err)) {
        lz_query_result r;
        CHECK(lz_query_answer(q, "river", d3, 3, &r, err, sizeof err) == 0 && r.misses == 3 && r.bytes_loaded > 0,
              "first question loads its documents (%lld misses): %s", (long long)r.misses, err);
        lz_query_result_free(&r);
        CHECK(lz_query_answer(q, "river", d3, 3, &r, err, sizeof err) == 0 && r.hits == 3 && r.bytes_loaded == 0 &&
                  f.placeholders == 3 && f.bad == 0,
              "held documents not loaded again (%lld hits, %lld bytes, %d placeholders): %s", (long long)r.hits,
              (long long)r.bytes_loaded, f.placeholders, err);
        lz_query_result_free(&r);
        /* doc3 first now: held (lazy: one copy for every position), placed at 0; doc4 loaded */
        CHECK(lz_query_answer(q, "river", d2, 2, &r, err, sizeof err) == 0 && r.hits == 1 && r.misses == 1 &&
                  f.last_rot == 0,
              "a held and a new document (%lld hits, %lld misses, rot %lld): %s", (long long)r.hits, (long long)r.misses,
              (long long)f.last_rot, err);
        lz_query_result_free(&r);
    }
    free(d3);
    free(d2);
    CHECK(f.not_block == 0 && f.host_allocs >= 5, "%d segments not one block of the backend's host memory (%d blocks)",
          f.not_block, f.host_allocs);
    lz_query_session_free(q);
    CHECK(f.n_blocks == 0 && f.host_frees == f.host_allocs, "host memory back to the backend: %d blocks left, %d of %d freed",
          f.n_blocks, f.host_frees, f.host_allocs);
    lz_store_close(s);
    lz_llama_free(m);
}

/* A corrupt payload among a question's cold documents (decoded in parallel
 * before placement): the answer is refused naming that document, the other
 * documents still answer, and a session sees the same after the failure. */
static void test_corrupt_cold(const char *store_copy)
{
    char err[1024];
    lz_llama *m;
    lz_store *s;
    if (lz_test_sh("cp -r %s %s", store, store_copy)) { CHECK(0, "copy the store"); return; }
    if (lz_llama_load(model, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    if (lz_store_open(store_copy, LZ_STORE_WRITER, &s, err, sizeof err)) { CHECK(0, "store: %s", err); lz_llama_free(m); return; }
    lz_meta_doc d5;
    void *blob = NULL;
    size_t len = 0;
    int ok = lz_meta_doc_find(test_store_meta(s), "doc5", &d5, NULL, 0, err, sizeof err) == 0 &&
             lz_store_get_payload(s, d5.payload_key, &blob, &len, err, sizeof err) == 0;
    CHECK(ok, "doc5's payload: %s", err);
    if (ok) {
        ((uint8_t *)blob)[len - 3] ^= 1; /* a body byte: the CRC no longer matches */
        lz_store_payload bad = {{0}, blob, len};
        memcpy(bad.key, d5.payload_key, LZ_META_KEY_LEN);
        CHECK(lz_store_put_payloads(s, &bad, 1, err, sizeof err) == 0, "write the corrupt payload: %s", err);
    }
    free(blob);
    lz_query_session *q = session(m, s, LZ_MODE_LAZY, 1 << 20);
    const char *with[4] = {"doc1", "doc5", "doc7", "doc9"}, *without[3] = {"doc1", "doc7", "doc9"};
    lz_query_doc *docs = NULL, *docs2 = NULL;
    if (q && !lz_retrieve_ids(s, with, 4, &docs, err, sizeof err) && !lz_retrieve_ids(s, without, 3, &docs2, err, sizeof err)) {
        lz_query_result r;
        for (int round = 0; round < 2; round++) {
            int rc = lz_query_answer(q, "river", docs, 4, &r, err, sizeof err);
            CHECK(rc != 0 && strstr(err, "doc5") && strstr(err, "corrupt"), "corrupt cold document named: %s", rc ? err : "answered");
            if (!rc) lz_query_result_free(&r);
            rc = lz_query_answer(q, "river", docs2, 3, &r, err, sizeof err);
            CHECK(rc == 0, "the other documents answer (round %d): %s", round, err);
            if (!rc) lz_query_result_free(&r);
        }
    }
    free(docs);
    free(docs2);
    lz_query_session_free(q);
    lz_store_close(s);
    lz_llama_free(m);
}

/* ---- --doc, source ids standing for their passages, no documents, --json into a pipe (issue #31) ---- */

/* The ids of "sources" of the first JSON line in path, joined by '|' into buf; the line's
 * "warning" (or "") into warn. 0 when there is no such line. */
static int json_sources(const char *path, char *buf, size_t n, char *warn, size_t wn)
{
    size_t len;
    char *txt = lz_test_read_file(path, &len);
    json_error_t je;
    json_t *o = txt ? json_loads(txt, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    free(txt);
    buf[0] = 0;
    if (warn) snprintf(warn, wn, "%s", o ? (json_string_value(json_object_get(o, "warning")) ?: "") : "");
    if (!o) return 0;
    json_t *src = json_object_get(o, "sources");
    size_t k = 0;
    for (size_t i = 0; i < json_array_size(src) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s|", json_string_value(json_object_get(json_array_get(src, i), "id")));
    json_decref(o);
    return 1;
}

typedef struct {
    char ids[16][64];
    int n;
} passage_ids;

static int take_passage(const lz_meta_doc *d, void *p)
{
    passage_ids *v = p;
    if (v->n < 16) snprintf(v->ids[v->n++], 64, "%s", d->ext_id);
    return 0;
}

/* A store with a comma inside an id and a record split into passages: --doc takes one id
 * whole, beside --docs and in order with it; a --questions "docs" list too; the id of a split
 * record stands for its passages in passage order (lz_retrieve_resolve_ids), while
 * lz_retrieve_ids keeps exact ids. */
static void test_doc_ids(void)
{
    char corpus[700], st[700], o[700], e[700], q[700];
    snprintf(corpus, sizeof corpus, "%s/split.jsonl", dir);
    snprintf(st, sizeof st, "%s/store-split", dir);
    snprintf(o, sizeof o, "%s/doc-out.txt", dir);
    snprintf(e, sizeof e, "%s/doc-err.txt", dir);
    snprintf(q, sizeof q, "%s/doc-q.jsonl", dir);
    FILE *f = fopen(corpus, "w");
    fprintf(f, "{\"id\": \"Ackworth, Yorkshire\", \"text\": \"A village with a castle.\"}\n"
               "{\"id\": \"long\", \"title\": \"Long\", \"text\": \"The river runs north. The castle stands on a "
               "hill. The market opens in winter. The garden has a copper lantern. The falcon flies over the "
               "meadow.\"}\n"
               "{\"id\": \"short\", \"text\": \"A short apple.\"}\n");
    fclose(f);
    if (lz_test_sh("%s/lazyingest --quiet --model %s --store %s --max-doc-tokens 80 %s", bin, model, st, corpus)) {
        CHECK(0, "the split store");
        return;
    }
    char err[1024];
    lz_store *s;
    passage_ids pv = {0};
    if (lz_store_open(st, LZ_STORE_RDONLY, &s, err, sizeof err)) { CHECK(0, "store: %s", err); return; }
    lz_store_source_rows(s, "long", take_passage, &pv, err, sizeof err);
    CHECK(pv.n >= 2 && !strcmp(pv.ids[0], "long#0") && !strcmp(pv.ids[1], "long#1"), "'long' split into %d passages", pv.n);
    char want[1024] = "";
    size_t k = 0;
    for (int i = 0; i < pv.n; i++) k += (size_t)snprintf(want + k, sizeof want - k, "%s|", pv.ids[i]);
    /* in-process: the source id expands, exact ids stay exact, unknown ids are named */
    const char *ids[3] = {"short", "long", "Ackworth, Yorkshire"};
    lz_query_doc *docs = NULL;
    int n = 0;
    CHECK(lz_retrieve_resolve_ids(s, ids, 3, &docs, &n, err, sizeof err) == 0 && n == pv.n + 2 &&
              !strcmp(docs[0].ext_id, "short") && !strcmp(docs[1].ext_id, "long#0") &&
              !strcmp(docs[n - 1].ext_id, "Ackworth, Yorkshire") && !strcmp(docs[1].title, "Long") && docs[1].n_tokens > 0,
          "resolve: %d documents (%s)", n, err);
    free(docs);
    const char *one[1] = {"long#1"}, *none[1] = {"lon"};
    CHECK(lz_retrieve_resolve_ids(s, one, 1, &docs, &n, err, sizeof err) == 0 && n == 1 && !strcmp(docs[0].ext_id, "long#1"),
          "a passage by its own id");
    free(docs);
    CHECK(lz_retrieve_resolve_ids(s, none, 1, &docs, &n, err, sizeof err) == LZ_ENOTFOUND &&
              strstr(err, "document 'lon' is not in the store"),
          "an id that is neither a document nor a source: LZ_ENOTFOUND, %s", err);
    CHECK(lz_retrieve_resolve_ids(s, NULL, 0, &docs, &n, err, sizeof err) == 0 && n == 0 && docs, "no ids: no documents");
    free(docs);
    const char *exact[1] = {"long"};
    CHECK(lz_retrieve_ids(s, exact, 1, &docs, err, sizeof err) != 0 && strstr(err, "'long'"), "lz_retrieve_ids: exact ids only");
    lz_store_close(s);

    /* the command line */
    char got[1024];
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json --doc 'Ackworth, Yorkshire' --doc long 'castle?' > %s 2> %s",
                     bin, model, st, o, e) == 0 && json_sources(o, got, sizeof got, NULL, 0),
          "--doc twice: exit 0");
    char w2[1100];
    snprintf(w2, sizeof w2, "Ackworth, Yorkshire|%s", want);
    CHECK(!strcmp(got, w2), "--doc with a comma, and a split record's passages: '%s' (want '%s')", got, w2);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json --docs short --doc 'Ackworth, Yorkshire' --docs long#1,short 'x?' > %s 2> %s",
                     bin, model, st, o, e) == 0 && json_sources(o, got, sizeof got, NULL, 0) &&
              !strcmp(got, "short|Ackworth, Yorkshire|long#1|short|"),
          "--docs and --doc in the order given: '%s'", got);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json --docs 'Ackworth, Yorkshire' 'x?' > %s 2> %s", bin, model,
                     st, o, e) == 2 && lz_test_sh("grep -q \"document 'Ackworth' is not in the store\" %s", e) == 0,
          "--docs still splits at commas (exit 2, the piece named)");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s --doc '' 'x?' > %s 2> %s", bin, model, st, o, e) == 2 &&
              lz_test_sh("grep -q -- '--doc' %s", e) == 0, "an empty --doc refused (exit 2)");
    f = fopen(q, "w");
    fprintf(f, "{\"id\": \"c1\", \"question\": \"castle?\", \"docs\": [\"Ackworth, Yorkshire\", \"long\"]}\n");
    fclose(f);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --questions %s > %s 2> %s", bin, model, st, q, o, e) == 0 &&
              json_sources(o, got, sizeof got, NULL, 0) && !strcmp(got, w2),
          "--questions docs: a comma inside an id, a source id: '%s'", got);
}

/* A question answered from no documents: a warning naming it on standard error and "warning":
 * "no documents" in its JSON line; --strict makes it a failed question (exit 2); answers with
 * documents carry no warning. */
static void test_no_documents(void)
{
    char o[700], e[700], q[700], w[64], got[1024];
    snprintf(o, sizeof o, "%s/nodoc-out.txt", dir);
    snprintf(e, sizeof e, "%s/nodoc-err.txt", dir);
    snprintf(q, sizeof q, "%s/nodoc-q.jsonl", dir);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json 'zyzzyva qwxq?' > %s 2> %s", bin, model, store, o, e) == 0 &&
              json_sources(o, got, sizeof got, w, sizeof w) && !got[0] && !strcmp(w, "no documents"),
          "retrieval found nothing: answered, \"warning\": '%s'", w);
    CHECK(lz_test_sh("grep -q \"warning: no documents for question 'zyzzyva qwxq?': retrieval found none\" %s", e) == 0,
          "the warning names the question");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 'zyzzyva qwxq?' > %s 2> %s", bin, model, store, o, e) == 0 &&
              lz_test_sh("grep -q '^Answer: ' %s && grep -q 'warning: no documents' %s", o, e) == 0,
          "text mode: answered with the warning");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json --strict 'zyzzyva qwxq?' > %s 2> %s", bin, model, store, o,
                     e) == 2 &&
              lz_test_sh("grep -q '\"error\":\"no documents for question' %s && ! grep -q '\"answer\"' %s", o, o) == 0 &&
              lz_test_sh("grep -q 'no documents for question' %s", e) == 0,
          "--strict: the question fails (exit 2), its error line");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json --strict --docs , 'river?' > %s 2> %s", bin, model, store,
                     o, e) == 2 && lz_test_sh("grep -q 'the given ids name none' %s", e) == 0,
          "--docs naming none, --strict: fails");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --json --strict 'castle river?' > %s 2> %s", bin, model, store, o,
                     e) == 0 && json_sources(o, got, sizeof got, w, sizeof w) && got[0] && !w[0] &&
              lz_test_sh("! grep -q warning %s", e) == 0,
          "--strict with documents: answered, no warning");
    FILE *f = fopen(q, "w");
    fprintf(f, "{\"id\": \"e1\", \"question\": \"river?\", \"docs\": []}\n{\"id\": \"e2\", \"question\": \"river?\", \"docs\": [\"doc1\"]}\n");
    fclose(f);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --questions %s > %s 2> %s", bin, model, store, q, o, e) == 0 &&
              lz_test_sh("test $(grep -c '\"warning\":\"no documents\"' %s) -eq 1 && grep -q '\"id\":\"e1\"' %s", o, o) == 0 &&
              lz_test_sh("grep -q 'no documents for question e1 ' %s", e) == 0,
          "--questions with \"docs\": [] warned about, by its id");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 2 --strict --questions %s > %s 2> %s", bin, model, store, q, o, e) == 2 &&
              lz_test_sh("grep -q '\"id\":\"e2\"' %s && grep '\"id\":\"e1\"' %s | grep -q '\"error\"'", o, o) == 0,
          "--strict --questions: that question fails, the next is answered, exit 2");
}

/* One line from fd within timeout_ms (poll per byte): its length, or -1 on a timeout or EOF. */
static int read_line_within(int fd, char *buf, size_t n, int timeout_ms)
{
    size_t k = 0;
    while (k + 1 < n) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0) return -1;
        if (read(fd, buf + k, 1) != 1) return -1;
        if (buf[k++] == '\n') break;
    }
    buf[k] = 0;
    return (int)k;
}

/* lazyquery --json --questions - through pipes: each answer line (and an error line) can be
 * read before the next question is written, so a program reading the pipe sees every answer
 * as it is made (30 s a line at most: a missing flush fails here, never hangs). */
static void test_json_pipe(void)
{
    int to[2], from[2];
    char path[700], e[700];
    snprintf(path, sizeof path, "%s/lazyquery", bin);
    snprintf(e, sizeof e, "%s/pipe-err.txt", dir);
    if (pipe(to) || pipe(from)) { CHECK(0, "pipe"); return; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(to[0], 0);
        dup2(from[1], 1);
        dup2(fe, 2);
        close(to[1]);
        close(from[0]);
        execl(path, path, "--model", model, "--store", store, "-n", "2", "--json", "--questions", "-", (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    static const char *const qs[3] = {"{\"id\": \"p1\", \"question\": \"river?\"}\n",
                                      "{\"id\": \"p2\", \"question\": \"castle?\", \"docs\": [\"no-such-doc\"]}\n",
                                      "{\"id\": \"p3\", \"question\": \"apple?\", \"docs\": [\"doc2\"]}\n"};
    static const char *const want[3] = {"\"answer\"", "\"error\"", "\"answer\""};
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
        char line[1 << 15], id[32];
        ok = write(to[1], qs[i], strlen(qs[i])) == (ssize_t)strlen(qs[i]);
        CHECK(ok, "question %d written", i + 1);
        int n = ok ? read_line_within(from[0], line, sizeof line, 30000) : -1;
        snprintf(id, sizeof id, "\"id\":\"p%d\"", i + 1);
        ok = n > 0 && strstr(line, id) && strstr(line, want[i]);
        CHECK(ok, "line %d read before question %d is written (%s): '%.200s'", i + 1, i + 2, n < 0 ? "timed out" : "read",
              n > 0 ? line : "");
    }
    close(to[1]);
    if (!ok) kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(from[0]);
    signal(SIGPIPE, old);
    CHECK(!ok || (WIFEXITED(status) && WEXITSTATUS(status) == 2), "exit 2 after the failed question (status %d)", status);
}

int main(void)
{
    test_final_answer();
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    snprintf(bin, sizeof bin, "%s", b);
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    char corpus[700];
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    write_corpus(corpus, 40);
    lz_llama_set_threads(2);
    if (lz_test_sh("%s/lazy-mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 -o %s", bin, model) ||
        lz_test_sh("%s/lazyingest --quiet --kv-dtype f32 --model %s --store %s %s", bin, model, store, corpus)) {
        CHECK(0, "could not build the test store");
        return lz_test_done();
    }
    test_modes();
    test_backend_resident();
    test_backend_recompute();
    test_backend_auto();
    test_backend_block();
    test_backend_full_prefix();
    test_backend_settle();
    char copy[700];
    snprintf(copy, sizeof copy, "%s/store-corrupt", dir);
    test_corrupt_cold(copy);
    snprintf(copy, sizeof copy, "%s/store-preload", dir);
    test_preload_tiers(copy);
    char store16[700];
    snprintf(store16, sizeof store16, "%s/store16", dir);
    if (lz_test_sh("%s/lazyingest --quiet --model %s --store %s %s", bin, model, store16, corpus)) CHECK(0, "bf16 store");
    else test_bf16_cache(store16);
    char store8[700];
    snprintf(store8, sizeof store8, "%s/store8", dir);
    if (lz_test_sh("%s/lazyingest --quiet --kv-dtype fp8 --model %s --store %s %s", bin, model, store8, corpus)) CHECK(0, "fp8 store");
    else test_fp8_store(store16, store8), test_fp8_kept(store8);
    test_cli();
    test_doc_ids();
    test_no_documents();
    test_json_pipe();
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
