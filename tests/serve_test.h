/* serve_test.h - what the scheduler's tests share (tests/test_sched.c,
 * tests/test_slots.c): the demo store and model set up and torn down, the demo's
 * first questions with their context ids, a query session over the test store,
 * and a ticket's stream read to its end.
 * Header-only, like tests/test.h. */
#ifndef LZ_SERVE_TEST_H
#define LZ_SERVE_TEST_H

#include <jansson.h>

#include "query/retrieve.h"
#include "query/session.h"
#include "serve/sched.h"
#include "tests/test.h"

/* The first n questions of datasets/demo/questions.json into questions[i] (strdup'd) with up
 * to 10 of their context ids each (ctx_ids[i][j], n_ctx[i]): 1, or 0 when the file holds
 * fewer. */
static inline int lz_test_demo_questions(int n, char **questions, char *(*ctx_ids)[10], int *n_ctx)
{
    json_error_t je;
    json_t *a = json_load_file("datasets/demo/questions.json", 0, &je);
    if (!a || (int)json_array_size(a) < n) { json_decref(a); return 0; }
    for (int i = 0; i < n; i++) {
        json_t *q = json_array_get(a, (size_t)i), *ids = json_object_get(q, "context_ids");
        questions[i] = strdup(json_string_value(json_object_get(q, "question")));
        n_ctx[i] = (int)json_array_size(ids) < 10 ? (int)json_array_size(ids) : 10;
        for (int j = 0; j < n_ctx[i]; j++) ctx_ids[i][j] = strdup(json_string_value(json_array_get(ids, (size_t)j)));
    }
    json_decref(a);
    return 1;
}

/* A session of m over st answering up to max_new tokens over the model's whole context, on
 * backend be (NULL: the session's own CPU engine); a failure is a failed check (NULL returned). */
static inline lz_query_session *lz_test_open_session(lz_llama *m, lz_store *st, int max_new, const lz_query_backend *be)
{
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.max_new_tokens = max_new;
    o.max_positions = m->cfg.ctx;
    o.backend = be;
    lz_query_session *q = NULL;
    char err[512];
    if (lz_query_session_new(m, st, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    return q;
}

/* The whole stream of t until its end: text (malloc'd) and the last update. */
static inline char *lz_test_drain(lz_serve_ticket *t, lz_serve_update *last)
{
    size_t len = 0;
    char *text = calloc(1, 1);
    int state = LZ_SERVE_PENDING;
    for (int guard = 0; guard < 100000; guard++) {
        lz_serve_update u;
        lz_serve_wait(t, len, state, 5.0, &u);
        char *x = realloc(text, len + u.len + 1);
        if (x) {
            text = x;
            memcpy(text + len, u.text, u.len);
            len += u.len;
            text[len] = 0;
        }
        free(u.text);
        state = u.state;
        *last = u;
        if (state >= LZ_SERVE_DONE) break;
    }
    return text;
}

/* The scheduler tests' setup: a temporary folder dir (256 bytes), the demo corpus ingested into
 * dir/store by $LZ_BIN/lazyingest, the shipped model and that store opened, the first nq demo
 * questions loaded. 1 when ready; 0 when the test is to end now (SKIP printed, or a failed
 * check). */
static inline int lz_test_demo_setup(char *dir, int nq, char **questions, char *(*ctx_ids)[10], int *n_ctx,
                                     lz_llama **model, lz_store **store)
{
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return 0; }
    if (access("models/default.gguf", R_OK) || access("datasets/demo/corpus.jsonl", R_OK)) {
        printf("SKIP models/default.gguf or the demo corpus not found (run from the repository)\n");
        return 0;
    }
    if (!lz_test_tmpdir(dir, 256) || !lz_test_demo_questions(nq, questions, ctx_ids, n_ctx)) { CHECK(0, "setup"); return 0; }
    char store_dir[600];
    snprintf(store_dir, sizeof store_dir, "%s/store", dir);
    lz_llama_set_threads(2);
    char err[512] = "";
    if (lz_test_sh("%s/lazyingest --quiet --model models/default.gguf --store %s datasets/demo/corpus.jsonl", b,
                   store_dir) ||
        lz_llama_load("models/default.gguf", model, err, sizeof err) ||
        lz_store_open(store_dir, LZ_STORE_RDONLY, store, err, sizeof err)) {
        CHECK(0, "could not build the test store: %s", err);
        return 0;
    }
    return 1;
}

/* The greedy answers of session q alone to the first nq questions over their documents (st's),
 * into want[i] (malloc'd; NULL after a failed check): what batched or routed answers must equal. */
static inline void lz_test_serial_answers(lz_query_session *q, lz_store *st, int nq, char **questions,
                                          char *(*ctx_ids)[10], const int *n_ctx, char **want)
{
    char err[512];
    for (int i = 0; i < nq; i++) {
        lz_query_doc *docs;
        int n;
        lz_query_result r;
        want[i] = NULL;
        if (lz_retrieve_resolve_ids(st, (const char *const *)ctx_ids[i], n_ctx[i], &docs, &n, err, sizeof err) ||
            lz_query_answer(q, questions[i], docs, n, &r, err, sizeof err)) {
            CHECK(0, "serial %d: %s", i, err);
            continue;
        }
        want[i] = strdup(r.answer);
        lz_query_result_free(&r);
        free(docs);
    }
}

/* What lz_test_demo_setup made, undone (dir removed). */
static inline void lz_test_demo_teardown(char *dir, int nq, char **questions, char *(*ctx_ids)[10], const int *n_ctx,
                                         lz_llama *model, lz_store *store)
{
    lz_store_close(store);
    lz_llama_free(model);
    for (int i = 0; i < nq; i++) {
        free(questions[i]);
        for (int j = 0; j < n_ctx[i]; j++) free(ctx_ids[i][j]);
    }
    lz_test_sh("rm -rf %s", dir);
}

/* A greedy request for a question over its context ids (answers of max_tokens, seed 7). */
static inline lz_serve_req lz_test_greedy_req(const char *question, char *const *ids, int n_ids, int max_tokens)
{
    return (lz_serve_req){.question = question, .doc_ids = (const char *const *)ids, .n_doc_ids = n_ids,
                          .max_tokens = max_tokens, .top_p = 1.0f, .seed = 7};
}

/* Waits until nothing runs and nothing is queued on s; its stats then in st. */
static inline void lz_test_settle(lz_serve_sched *s, lz_serve_stats *st)
{
    for (int i = 0; i < 2000; i++) {
        lz_serve_sched_stats(s, st);
        if (!st->running && !st->queued) return;
        lz_test_sleep_ms(5);
    }
}

#endif /* LZ_SERVE_TEST_H */
