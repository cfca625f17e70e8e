/* test_sched.c - the serving scheduler (serve/sched.h) on the shipped model
 * (models/default.gguf) over a store of the demo corpus built here: greedy
 * answers of requests batched together equal lz_query_answer's, one by one;
 * requests of mixed lengths joining and leaving a running batch (and BM25
 * retrieval) equal their serial answers; stop strings cut the answer; a
 * cancelled request (running or queued) frees its slot, its memory and its
 * holds on documents; a full queue refuses and the scheduler goes on; the
 * memory budget bounds the batch; unknown ids, ids too long, prompts past the
 * context and requests past the budget fail with their status (the ids' by
 * lz_retrieve_resolve_ids' status codes). */
#include <time.h>

#include "query/answer_run.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "serve/sched.h"
#include "tests/serve_test.h"
#include "tests/test.h"

#define NQ 12
static char dir[256];
static char *questions[NQ];
static char *ctx_ids[NQ][10];
static int n_ctx[NQ];
static lz_llama *model;
static lz_store *store;

/* A serial answer through the run API, one request alone (greedy, max tokens). */
static char *serial_answer(lz_query_session *q, const char *question, const lz_query_doc *docs, int n, int max_new)
{
    lz_query_run_opts ro = {.max_new_tokens = max_new, .top_p = 1.0f, .seed = 1};
    lz_query_run *r;
    char err[512];
    if (lz_query_run_start(q, question, docs, n, &ro, &r, err, sizeof err)) { CHECK(0, "serial: %s", err); return strdup(""); }
    for (;;) {
        const char *p;
        int pl;
        lz_query_run_next(r, &p, &pl);
        if (lz_query_run_done(r)) break;
        if (lz_query_run_step(q, &r, 1, err, sizeof err)) { CHECK(0, "serial step: %s", err); break; }
    }
    lz_query_result res;
    lz_query_run_finish(r, &res);
    char *a = strdup(res.answer ? res.answer : "");
    lz_query_result_free(&res);
    return a;
}

/* Everything submitted at once: the batch answers what lz_query_answer answers alone. */
static void test_identical(void)
{
    lz_query_session *q = lz_test_open_session(model, store, 48, NULL);
    if (!q) return;
    char *want[NQ];
    char err[512];
    lz_test_serial_answers(q, store, NQ, questions, ctx_ids, n_ctx, want);
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    lz_serve_sched *s;
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_ticket *t[NQ];
    for (int i = 0; i < NQ; i++) {
        lz_serve_req rq = lz_test_greedy_req(questions[i], ctx_ids[i], n_ctx[i], 48);
        CHECK(lz_serve_submit(s, &rq, &t[i], err, sizeof err) == LZ_SERVE_OK, "submit %d: %s", i, err);
    }
    int same = 0;
    for (int i = 0; i < NQ; i++) {
        if (!t[i]) continue;
        lz_serve_update u;
        char *got = lz_test_drain(t[i], &u);
        CHECK(u.state == LZ_SERVE_DONE, "request %d ended in state %d (%s)", i, u.state, u.error);
        const int eq = want[i] && !strcmp(got, want[i]);
        same += eq;
        CHECK(eq, "request %d: batched '%s' vs serial '%s'", i, got, want[i] ? want[i] : "?");
        CHECK(u.timing.n_completion > 0 && u.timing.ttft_s > 0 && u.finish, "request %d: timings and finish", i);
        int nd;
        lz_serve_ticket_docs(t[i], &nd);
        CHECK(nd == n_ctx[i], "request %d: %d documents placed", i, nd);
        free(got);
        lz_serve_release(t[i]);
    }
    lz_serve_stats st;
    lz_test_settle(s, &st);
    printf("batched == serial: %d of %d greedy answers; %lld steps, mean batch %.1f, peak %d running\n", same, NQ,
           (long long)st.steps, st.steps ? (double)st.step_rows / st.steps : 0, st.peak_running);
    CHECK(st.peak_running > 1 && st.step_rows > st.steps, "requests decoded together (peak %d)", st.peak_running);
    CHECK(st.ok == NQ && st.reserved_bytes == 0 && st.host.n_held == 0, "all done, nothing reserved or held "
          "(%lld ok, %lld bytes, %lld held)", (long long)st.ok, (long long)st.reserved_bytes, (long long)st.host.n_held);
    CHECK(st.ttft.n == NQ && st.completion_tokens > 0, "TTFT observed for each");
    lz_serve_sched_free(s);
    for (int i = 0; i < NQ; i++) free(want[i]);
    lz_query_session_free(q);
}

/* Requests of mixed lengths in three waves, joining a running batch and leaving it at their
 * own ends; a third of them by BM25 retrieval. Each equals its serial answer. */
static void test_mixed(void)
{
    enum { N = 24 };
    lz_query_session *q = lz_test_open_session(model, store, 48, NULL);
    if (!q) return;
    const int lens[4] = {1, 3, 9, 40};
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_running = 8;
    so.max_prefill = 3;
    lz_serve_sched *s;
    char err[512];
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_ticket *t[N] = {0};
    for (int i = 0; i < N; i++) {
        if (i == 8 || i == 16) lz_test_sleep_ms(30); /* the next wave joins a running batch */
        lz_serve_req rq = lz_test_greedy_req(questions[i % NQ], ctx_ids[i % NQ], n_ctx[i % NQ], lens[(i * 7) % 4]);
        if (i % 3 == 2) { rq.doc_ids = NULL; rq.n_doc_ids = 0; rq.retrieve_k = 3; }
        CHECK(lz_serve_submit(s, &rq, &t[i], err, sizeof err) == LZ_SERVE_OK, "submit %d: %s", i, err);
    }
    char *got[N];
    for (int i = 0; i < N; i++) {
        lz_serve_update u;
        got[i] = t[i] ? lz_test_drain(t[i], &u) : strdup("");
        CHECK(!t[i] || u.state == LZ_SERVE_DONE, "mixed %d: state %d (%s)", i, u.state, u.error);
        if (t[i] && u.state == LZ_SERVE_DONE)
            CHECK(u.timing.n_completion <= lens[(i * 7) % 4], "mixed %d: %d tokens past max_tokens %d", i,
                  u.timing.n_completion, lens[(i * 7) % 4]);
    }
    lz_serve_stats st;
    lz_test_settle(s, &st);
    lz_serve_sched_free(s); /* the session is the test's again: the serial references */
    int same = 0;
    for (int i = 0; i < N; i++) {
        if (!t[i]) continue;
        int nd;
        const lz_query_doc *docs = lz_serve_ticket_docs(t[i], &nd);
        if (i % 3 == 2) CHECK(nd > 0 && nd <= 3, "mixed %d: %d retrieved", i, nd);
        char *want = serial_answer(q, questions[i % NQ], docs, nd, lens[(i * 7) % 4]);
        same += !strcmp(want, got[i]);
        CHECK(!strcmp(want, got[i]), "mixed %d (max %d): batched '%s' vs serial '%s'", i, lens[(i * 7) % 4], got[i], want);
        free(want);
        free(got[i]);
        lz_serve_release(t[i]);
    }
    printf("mixed lengths, three waves: %d of %d equal their serial answers; peak %d running, mean batch %.1f\n", same,
           N, st.peak_running, st.steps ? (double)st.step_rows / st.steps : 0);
    CHECK(st.peak_running > 1 && st.peak_running <= 8, "batch bounded by max_running (%d)", st.peak_running);
    lz_query_session_free(q);
}

/* Stop strings: the answer ends where the first one starts; one that never comes changes
 * nothing. */
static void test_stop(lz_query_session *q)
{
    char err[512];
    lz_query_doc *docs;
    int n;
    if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[0], n_ctx[0], &docs, &n, err, sizeof err)) return;
    char *full = serial_answer(q, questions[0], docs, n, 48);
    free(docs);
    const size_t L = strlen(full);
    CHECK(L >= 4, "an answer to cut ('%s')", full);
    if (L < 4) { free(full); return; }
    char stop[8] = "";
    memcpy(stop, full + L / 2, 2); /* two bytes from its middle */
    const char *stops[2] = {"never-said-xyz", stop};
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    lz_serve_sched *s;
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); free(full); return; }
    lz_serve_req rq = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 48);
    rq.stop = stops;
    rq.n_stop = 2;
    lz_serve_ticket *t, *t2;
    CHECK(lz_serve_submit(s, &rq, &t, err, sizeof err) == 0, "submit: %s", err);
    rq.n_stop = 1;
    CHECK(lz_serve_submit(s, &rq, &t2, err, sizeof err) == 0, "submit: %s", err);
    lz_serve_update u, u2;
    char *got = lz_test_drain(t, &u), *got2 = lz_test_drain(t2, &u2);
    const char *at = strstr(full, stop);
    CHECK(at && strlen(got) == (size_t)(at - full) && !strncmp(got, full, strlen(got)) && !strcmp(u.finish, "stop"),
          "stop '%s': '%s' of '%s' (finish %s)", stop, got, full, u.finish ? u.finish : "?");
    CHECK(!strcmp(got2, full), "a stop string never said: the whole answer ('%s')", got2);
    char e2[64];
    const char *bad[1] = {""};
    rq.stop = bad;
    lz_serve_ticket *t3;
    CHECK(lz_serve_submit(s, &rq, &t3, e2, sizeof e2) == LZ_SERVE_EINVAL && !t3, "an empty stop string refused");
    lz_serve_release(t);
    lz_serve_release(t2);
    free(got);
    free(got2);
    free(full);
    lz_serve_sched_free(s);
}

/* A client gone mid-stream: its slot, memory and document holds are free at the next step;
 * one gone while queued never runs; the others finish. */
static void test_cancel(lz_query_session *q)
{
    char err[512];
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_running = 2;
    lz_serve_sched *s;
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_req rq = lz_test_greedy_req(questions[1], ctx_ids[1], n_ctx[1], 400);
    rq.temperature = 5.0f; /* a long random answer: it is still running when cancelled */
    lz_serve_ticket *a, *b, *c;
    CHECK(lz_serve_submit(s, &rq, &a, err, sizeof err) == 0, "a: %s", err);
    CHECK(lz_serve_submit(s, &rq, &b, err, sizeof err) == 0, "b: %s", err);
    lz_serve_req rc = lz_test_greedy_req(questions[2], ctx_ids[2], n_ctx[2], 8);
    CHECK(lz_serve_submit(s, &rc, &c, err, sizeof err) == 0, "c: %s", err); /* queued behind a and b */
    lz_serve_update u;
    int state = LZ_SERVE_PENDING;
    size_t have = 0;
    for (int i = 0; i < 200 && have < 8; i++) { /* a streams a few tokens */
        lz_serve_wait(a, have, state, 2.0, &u);
        have = u.total;
        state = u.state;
        free(u.text);
    }
    lz_serve_stats st;
    lz_serve_sched_stats(s, &st);
    CHECK(st.running == 2 && st.host.n_held > 0 && st.reserved_bytes > 0, "two running, holding documents "
          "(%d running, %lld held, %lld entries, %lld hits %lld misses, %lld steps)", st.running, (long long)st.host.n_held,
          (long long)st.host.n_entries, (long long)st.host.hits, (long long)st.host.misses, (long long)st.steps);
    lz_serve_release(c); /* gone while queued */
    lz_serve_release(a); /* gone mid-stream */
    int freed = 0;
    for (int i = 0; i < 400 && !freed; i++) {
        lz_serve_sched_stats(s, &st);
        freed = st.cancelled == 2 && st.running == 1;
        if (!freed) lz_test_sleep_ms(5);
    }
    CHECK(freed, "the cancelled ones left (%lld cancelled, %d running)", (long long)st.cancelled, st.running);
    lz_serve_release(b);
    lz_test_settle(s, &st);
    CHECK(st.cancelled == 3 && st.running == 0 && st.reserved_bytes == 0 && st.host.n_held == 0 && st.ok == 0,
          "all cancelled: nothing running, reserved or held (%lld cancelled, %lld bytes, %lld held)",
          (long long)st.cancelled, (long long)st.reserved_bytes, (long long)st.host.n_held);
    /* and the scheduler serves on */
    lz_serve_ticket *d;
    rc.max_tokens = 4;
    CHECK(lz_serve_submit(s, &rc, &d, err, sizeof err) == 0, "after cancels: %s", err);
    char *got = lz_test_drain(d, &u);
    CHECK(u.state == LZ_SERVE_DONE && *got, "served after cancellations ('%s')", got);
    free(got);
    lz_serve_release(d);
    lz_serve_sched_free(s);
}

/* A full queue refuses; what was taken is answered; the scheduler serves on. */
static void test_queue_full(lz_query_session *q)
{
    enum { N = 10 };
    char err[512];
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_running = 1;
    so.max_queue = 2;
    lz_serve_sched *s;
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_ticket *t[N];
    int full = 0, taken = 0;
    for (int i = 0; i < N; i++) {
        lz_serve_req rq = lz_test_greedy_req(questions[i % NQ], ctx_ids[i % NQ], n_ctx[i % NQ], 16);
        const int rc = lz_serve_submit(s, &rq, &t[i], err, sizeof err);
        if (rc == LZ_SERVE_EFULL) { full++; CHECK(strstr(err, "queue is full") != NULL, "says why: %s", err); }
        else taken += rc == LZ_SERVE_OK;
    }
    CHECK(full > 0 && taken >= 2, "a queue of 2: %d refused, %d taken", full, taken);
    for (int i = 0; i < N; i++) {
        if (!t[i]) continue;
        lz_serve_update u;
        free(lz_test_drain(t[i], &u));
        CHECK(u.state == LZ_SERVE_DONE, "taken ones answered (%d: %s)", i, u.error);
        lz_serve_release(t[i]);
    }
    lz_serve_stats st;
    lz_test_settle(s, &st);
    CHECK(st.rejected_full == full && st.peak_running == 1, "%lld refusals counted, batch of one",
          (long long)st.rejected_full);
    lz_serve_ticket *d;
    lz_serve_req rq = lz_test_greedy_req(questions[3], ctx_ids[3], n_ctx[3], 4);
    CHECK(lz_serve_submit(s, &rq, &d, err, sizeof err) == 0, "served again once drained: %s", err);
    lz_serve_update u;
    free(lz_test_drain(d, &u));
    lz_serve_release(d);
    lz_serve_sched_free(s);
}

/* Admission by memory: a budget of 2.5 requests' estimates runs at most two at once. */
static void test_memory(lz_query_session *q)
{
    char err[512];
    lz_query_doc *docs;
    int n;
    if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[0], n_ctx[0], &docs, &n, err, sizeof err)) return;
    const int64_t est = lz_query_run_estimate(q, questions[0], docs, n, 24);
    free(docs);
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.mem_budget = (size_t)(est * 5 / 2);
    lz_serve_sched *s;
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_ticket *t[6];
    for (int i = 0; i < 6; i++) {
        lz_serve_req rq = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 24);
        CHECK(lz_serve_submit(s, &rq, &t[i], err, sizeof err) == 0, "submit: %s", err);
    }
    for (int i = 0; i < 6; i++) {
        lz_serve_update u;
        free(lz_test_drain(t[i], &u));
        CHECK(u.state == LZ_SERVE_DONE, "memory %d done (%s)", i, u.error);
        lz_serve_release(t[i]);
    }
    lz_serve_stats st;
    lz_test_settle(s, &st);
    CHECK(st.peak_running == 2, "a budget for 2.5: peak %d running", st.peak_running);
    /* a request past the whole budget fails at once */
    lz_serve_req big = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 24);
    big.max_tokens = 2000;
    lz_serve_ticket *b;
    lz_serve_update u;
    CHECK(lz_serve_submit(s, &big, &b, err, sizeof err) == 0, "submit big");
    free(lz_test_drain(b, &u));
    CHECK(u.state == LZ_SERVE_FAILED && (u.status == 400) && (strstr(u.error, "budget") || strstr(u.error, "context")),
          "past the budget: %d %s", u.status, u.error);
    lz_serve_release(b);
    lz_serve_sched_free(s);
}

/* Unknown ids (named, 404), an id too long (400), a prompt past the context (400), an empty
 * question (refused); the statuses lz_retrieve_resolve_ids tells them apart by. */
static void test_errors(lz_query_session *q)
{
    char err[512];
    char long_id[300];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    {
        const char *unknown[1] = {"no-such-doc-42"}, *too_long[1] = {long_id};
        lz_query_doc *docs = NULL;
        int n;
        int rc = lz_retrieve_resolve_ids(store, unknown, 1, &docs, &n, err, sizeof err);
        CHECK(rc == LZ_ENOTFOUND && !docs, "an unknown id: LZ_ENOTFOUND (%d: %s)", rc, err);
        rc = lz_retrieve_resolve_ids(store, too_long, 1, &docs, &n, err, sizeof err);
        CHECK(rc == LZ_EINVAL && !docs && strstr(err, "longer than"), "an id too long: LZ_EINVAL (%d: %s)", rc, err);
    }
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    lz_serve_sched *s;
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    const char *ids[2] = {"te2024-country0", "no-such-doc-42"};
    lz_serve_req rq = {.question = "Where?", .doc_ids = ids, .n_doc_ids = 2, .max_tokens = 4, .top_p = 1};
    lz_serve_ticket *t;
    lz_serve_update u;
    CHECK(lz_serve_submit(s, &rq, &t, err, sizeof err) == 0, "submit");
    free(lz_test_drain(t, &u));
    CHECK(u.state == LZ_SERVE_FAILED && u.status == 404 && strstr(u.error, "no-such-doc-42"), "unknown id: %d %s",
          u.status, u.error);
    lz_serve_release(t);
    const char *long_ids[1] = {long_id};
    lz_serve_req rl = {.question = "Where?", .doc_ids = long_ids, .n_doc_ids = 1, .max_tokens = 4, .top_p = 1};
    CHECK(lz_serve_submit(s, &rl, &t, err, sizeof err) == 0, "submit");
    free(lz_test_drain(t, &u));
    CHECK(u.state == LZ_SERVE_FAILED && u.status == 400 && strstr(u.error, "longer than"), "an id too long: %d %s",
          u.status, u.error);
    lz_serve_release(t);
    rq.n_doc_ids = 1;
    rq.max_tokens = model->cfg.ctx; /* the answer alone fills the context */
    CHECK(lz_serve_submit(s, &rq, &t, err, sizeof err) == 0, "submit");
    free(lz_test_drain(t, &u));
    CHECK(u.state == LZ_SERVE_FAILED && u.status == 400 && strstr(u.error, "context"), "past the context: %d %s",
          u.status, u.error);
    lz_serve_release(t);
    rq.question = "";
    CHECK(lz_serve_submit(s, &rq, &t, err, sizeof err) == LZ_SERVE_EINVAL && t == NULL, "empty question refused");
    rq.question = "Where?";
    rq.max_tokens = -1;
    CHECK(lz_serve_submit(s, &rq, &t, err, sizeof err) == LZ_SERVE_EINVAL, "negative max_tokens refused");
    lz_serve_stats st;
    lz_test_settle(s, &st);
    CHECK(st.failed_client == 3 && st.ok == 0, "three client errors counted (%lld)", (long long)st.failed_client);
    lz_serve_sched_free(s);
}

int main(void)
{
    if (!lz_test_demo_setup(dir, NQ, questions, ctx_ids, n_ctx, &model, &store)) return lz_test_done();
    test_identical();
    test_mixed();
    lz_query_session *q = lz_test_open_session(model, store, 48, NULL);
    if (q) {
        test_stop(q);
        test_cancel(q);
        test_queue_full(q);
        test_memory(q);
        test_errors(q);
        lz_query_session_free(q);
    }
    lz_test_demo_teardown(dir, NQ, questions, ctx_ids, n_ctx, model, store);
    return lz_test_done();
}
