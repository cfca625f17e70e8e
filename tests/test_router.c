/* test_router.c - serving on several engines (serve/router.h) with CPU
 * engines over the shipped model and a store of the demo corpus built here,
 * each engine its own session and its own store handle (lz_store_open_shared):
 * greedy answers on 3 engines equal one session's; requests sharing documents
 * go to the engine that first placed them (ids, and BM25 `retrieve` resolved
 * for routing), requests of other documents to another, a flood on one hot
 * document set spills past its home; a cancelled request (running or queued)
 * frees its slot on its own engine; full queues refuse as one does, counted
 * once; the aggregate stats and /metrics' totals are the sums of the engines'; homes planned
 * at start (lz_serve_homes_plan) deal the corpus evenly, each engine preloads its whole share
 * first and the others' documents into its host tier's room, and the first request goes to
 * its planned home.
 * The HTTP side (lazyserve --engines 2) is tests/test_serve.c's. */
#include <math.h>

#include "query/retrieve.h"
#include "serve/engines.h"
#include "serve/metrics.h"
#include "serve/router.h"
#include "tests/serve_test.h"
#include "tests/test.h"

#define NQ 12
static char dir[256];
static char *questions[NQ];
static char *ctx_ids[NQ][10];
static int n_ctx[NQ];
static lz_llama *model;
static lz_store *store;

/* n CPU engines over the test store: sessions, a handle each (engine 0 the test's store), and
 * the router's own handle; the router started with them. */
typedef struct {
    int n;
    lz_serve_engine e[4];
    lz_store *route_store;
    lz_serve_router *r;
} engines;

static int engines_open_homes(engines *E, int n, int max_running, int max_queue, int spill_margin,
                              lz_serve_homes *homes)
{
    memset(E, 0, sizeof *E);
    char err[512];
    for (int i = 0; i < n; i++) {
        lz_store *st = store;
        if (i > 0 && lz_store_open_shared(store, &st, err, sizeof err)) { CHECK(0, "shared %d: %s", i, err); return -1; }
        E->e[i].store = st;
        E->e[i].q = lz_test_open_session(model, st, 48, NULL);
        lz_serve_sched_opts_default(&E->e[i].so);
        E->e[i].so.max_running = max_running;
        E->e[i].so.max_queue = max_queue;
        E->n = i + 1;
        if (!E->e[i].q) return -1;
    }
    if (lz_store_open_shared(store, &E->route_store, err, sizeof err)) { CHECK(0, "router's handle: %s", err); return -1; }
    lz_serve_router_opts ro;
    lz_serve_router_opts_default(&ro);
    ro.store = E->route_store;
    ro.spill_margin = spill_margin;
    ro.homes = homes;
    if (lz_serve_router_new(E->e, n, &ro, &E->r, err, sizeof err)) { CHECK(0, "router: %s", err); return -1; }
    return 0;
}

static int engines_open(engines *E, int n, int max_running, int max_queue, int spill_margin)
{
    return engines_open_homes(E, n, max_running, max_queue, spill_margin, NULL);
}

static void engines_close(engines *E)
{
    lz_serve_router_free(E->r);
    for (int i = 0; i < E->n; i++) {
        lz_query_session_free(E->e[i].q);
        if (E->e[i].store != store) lz_store_close(E->e[i].store);
    }
    lz_store_close(E->route_store);
    memset(E, 0, sizeof *E);
}

/* Waits until no engine runs or queues anything; the sum and each engine's stats. */
static void settle(engines *E, lz_serve_stats *sum, lz_serve_stats *each)
{
    for (int i = 0; i < 4000; i++) {
        lz_serve_router_stats(E->r, sum, each);
        if (!sum->running && !sum->queued) return;
        lz_test_sleep_ms(5);
    }
}

/* A request's answer through the router, to its end: its text (malloc'd), its engine. */
static char *ask(engines *E, const lz_serve_req *rq, int *engine, int *state)
{
    lz_serve_ticket *t;
    char err[512];
    *state = -1;
    if (lz_serve_router_submit(E->r, rq, &t, engine, err, sizeof err)) { CHECK(0, "submit: %s", err); return strdup(""); }
    lz_serve_update u;
    char *got = lz_test_drain(t, &u);
    *state = u.state;
    lz_serve_release(t);
    return got;
}

/* 3 engines answer every question as one session does alone (greedy), and all take some. */
static void test_identical(void)
{
    char *want[NQ];
    char err[512];
    lz_query_session *q = lz_test_open_session(model, store, 48, NULL);
    if (!q) return;
    lz_test_serial_answers(q, store, NQ, questions, ctx_ids, n_ctx, want);
    lz_query_session_free(q);
    engines E;
    if (engines_open(&E, 3, 4, 64, -1)) { engines_close(&E); return; }
    lz_serve_ticket *t[NQ];
    int at[NQ];
    for (int i = 0; i < NQ; i++) {
        lz_serve_req rq = lz_test_greedy_req(questions[i], ctx_ids[i], n_ctx[i], 48);
        CHECK(lz_serve_router_submit(E.r, &rq, &t[i], &at[i], err, sizeof err) == LZ_SERVE_OK, "submit %d: %s", i, err);
    }
    int same = 0, used[3] = {0};
    for (int i = 0; i < NQ; i++) {
        if (!t[i]) continue;
        lz_serve_update u;
        char *got = lz_test_drain(t[i], &u);
        CHECK(u.state == LZ_SERVE_DONE, "request %d ended in state %d (%s)", i, u.state, u.error);
        const int eq = want[i] && !strcmp(got, want[i]);
        same += eq;
        CHECK(eq, "request %d on engine %d: '%s' vs one session's '%s'", i, at[i], got, want[i] ? want[i] : "?");
        if (at[i] >= 0 && at[i] < 3) used[at[i]]++;
        free(got);
        lz_serve_release(t[i]);
    }
    lz_serve_stats sum, each[3];
    settle(&E, &sum, each);
    printf("3 engines == one session: %d of %d greedy answers; requests per engine %d %d %d\n", same, NQ, used[0],
           used[1], used[2]);
    CHECK(used[0] && used[1] && used[2], "every engine took requests (%d %d %d)", used[0], used[1], used[2]);
    CHECK(sum.ok == NQ && sum.reserved_bytes == 0 && sum.host.n_held == 0, "all done, nothing held (%lld ok)",
          (long long)sum.ok);
    for (int i = 0; i < 3; i++)
        CHECK(each[i].ok == used[i], "engine %d answered its %d requests (%lld)", i, used[i], (long long)each[i].ok);
    engines_close(&E);
    for (int i = 0; i < NQ; i++) free(want[i]);
}

/* Whether question a's and b's documents are disjoint. */
static int disjoint(int a, int b)
{
    for (int i = 0; i < n_ctx[a]; i++)
        for (int j = 0; j < n_ctx[b]; j++)
            if (!strcmp(ctx_ids[a][i], ctx_ids[b][j])) return 0;
    return 1;
}

/* The same documents go to the engine that first placed them, other documents to another;
 * BM25 requests too; a flood on one document set spills past its home and the home stays. */
static void test_affinity(void)
{
    engines E;
    if (engines_open(&E, 2, 2, 64, 1)) { engines_close(&E); return; }
    int b = 1;
    while (b < NQ && !disjoint(0, b)) b++;
    if (b == NQ) { CHECK(0, "no demo question with documents apart from question 0's"); engines_close(&E); return; }
    int state, home = -1, other = -1, e;
    lz_serve_req ra = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 4);
    lz_serve_req rb = lz_test_greedy_req(questions[b], ctx_ids[b], n_ctx[b], 4);
    free(ask(&E, &ra, &home, &state));
    CHECK(state == LZ_SERVE_DONE, "the first request answered");
    free(ask(&E, &rb, &other, &state));
    CHECK(other != home, "documents apart go to the other engine (%d, %d)", home, other);
    int stay = 0;
    for (int i = 0; i < 4; i++) {
        ra.question = questions[(i * 5) % NQ]; /* another question, the same documents */
        free(ask(&E, &ra, &e, &state));
        stay += e == home;
        free(ask(&E, &rb, &e, &state));
        stay += e == other;
    }
    CHECK(stay == 8, "requests on the same documents stay on their home engine (%d of 8)", stay);
    /* retrieval: the same question retrieves the same documents, so lands where they live */
    lz_serve_req rr = {.question = questions[3], .retrieve_k = 3, .max_tokens = 2, .top_p = 1.0f, .seed = 7};
    int r0, r1;
    free(ask(&E, &rr, &r0, &state));
    CHECK(state == LZ_SERVE_DONE, "a retrieve request answered");
    free(ask(&E, &rr, &r1, &state));
    CHECK(r0 == r1, "the same retrieval, the same engine (%d, %d)", r0, r1);
    /* one request at a time, on both engines: at most one ran at once across them (a sum of the
     * engines' peaks would say 2) */
    lz_serve_stats sum, each[2];
    lz_serve_router_stats(E.r, &sum, each);
    CHECK(each[0].peak_running == 1 && each[1].peak_running == 1 && sum.peak_running == 1,
          "one at a time on two engines: peaks %d and %d, at once across them %d", each[0].peak_running,
          each[1].peak_running, sum.peak_running);
    /* a flood on A's documents: the first ones home, then the rest spill to the idle engine */
    enum { F = 16 };
    lz_serve_ticket *t[F];
    int at[F], n_home = 0, n_away = 0;
    char err[512];
    ra.max_tokens = 24;
    for (int i = 0; i < F; i++) {
        CHECK(lz_serve_router_submit(E.r, &ra, &t[i], &at[i], err, sizeof err) == LZ_SERVE_OK, "flood %d: %s", i, err);
        n_home += at[i] == home;
        n_away += at[i] != home;
    }
    CHECK(at[0] == home && at[1] == home, "the flood starts at home (%d %d, home %d)", at[0], at[1], home);
    CHECK(n_away >= F / 4 && n_home >= F / 4, "the flood spills: %d home, %d elsewhere", n_home, n_away);
    for (int i = 0; i < F; i++) {
        if (!t[i]) continue;
        lz_serve_update u;
        free(lz_test_drain(t[i], &u));
        CHECK(u.state == LZ_SERVE_DONE, "flood %d: state %d (%s)", i, u.state, u.error);
        lz_serve_release(t[i]);
    }
    lz_serve_router_stats(E.r, &sum, each);
    const int most = each[0].peak_running > each[1].peak_running ? each[0].peak_running : each[1].peak_running;
    CHECK(sum.peak_running >= most && sum.peak_running <= each[0].peak_running + each[1].peak_running && most >= 2,
          "the flood: at once across the engines %d, between the larger peak %d and their sum %d", sum.peak_running,
          most, each[0].peak_running + each[1].peak_running);
    lz_serve_route_stats rs[2];
    lz_serve_router_route_stats(E.r, rs);
    CHECK(rs[0].spilled + rs[1].spilled >= F / 4 && rs[home].home >= 4, "routing counted: spilled %lld + %lld, home "
          "%lld", (long long)rs[0].spilled, (long long)rs[1].spilled, (long long)rs[home].home);
    CHECK(rs[0].homed_docs + rs[1].homed_docs >= n_ctx[0] + n_ctx[b] && rs[home].homed_tokens > 0,
          "documents homed (%lld + %lld)", (long long)rs[0].homed_docs, (long long)rs[1].homed_docs);
    free(ask(&E, &ra, &e, &state)); /* the home stays: the flood is over */
    CHECK(e == home, "after the flood, home again (%d, home %d)", e, home);
    engines_close(&E);
}

/* Homes planned at start (lz_serve_homes_plan, as serve/engines.h does with a preload): every
 * document dealt, the engines' tokens balanced; each engine preloads only its share (together
 * what one engine preloads, apart nothing twice); a request goes to the engine homing most of
 * its documents' tokens from its first submit. */
typedef struct {
    int docs;
    int64_t tokens, max_tokens;
} corpus_count;

static int count_one(int64_t doc_id, int64_t hits, const uint8_t *key, int n_tokens, void *ctx)
{
    corpus_count *c = ctx;
    (void)doc_id, (void)hits, (void)key;
    c->docs++;
    c->tokens += n_tokens;
    if (n_tokens > c->max_tokens) c->max_tokens = n_tokens;
    return 0;
}
static void test_planned(void)
{
    char err[512];
    corpus_count c = {0};
    CHECK(lz_store_top_accessed(store, INT32_MAX, 1, count_one, &c, err, sizeof err) == 0 && c.docs > 2, "corpus: %s", err);
    lz_serve_homes *h = lz_serve_homes_new();
    CHECK(h && lz_serve_homes_plan(h, store, 2, 1, err, sizeof err) == 0, "plan: %s", err);
    if (!h) return;
    int64_t d0, t0, d1, t1;
    lz_serve_homes_engine(h, 0, &d0, &t0);
    lz_serve_homes_engine(h, 1, &d1, &t1);
    CHECK(lz_serve_homes_count(h) == c.docs && d0 + d1 == c.docs && t0 + t1 == c.tokens, "every document dealt once "
          "(%ld homes, %lld + %lld of %d)", lz_serve_homes_count(h), (long long)d0, (long long)d1, c.docs);
    CHECK(llabs(t0 - t1) <= c.max_tokens, "tokens balanced: %lld and %lld (a document at most %lld)", (long long)t0,
          (long long)t1, (long long)c.max_tokens);
    /* one engine's preload: every document; each of two: its whole share first, then the
     * others' while its host tier has room (all of them in a tier that holds the corpus;
     * 60% of the corpus in one that does not) */
    lz_query_session *one = lz_test_open_session(model, store, 8, NULL);
    lz_query_preload_result all, part[2];
    CHECK(one && lz_query_preload(one, 1, &all, err, sizeof err) == 0 && all.host == c.docs, "one engine preloads %d of %d",
          all.host, c.docs);
    lz_query_session_free(one);
    for (int tight = 0; tight < 2; tight++)
        for (int e = 0; e < 2; e++) {
            lz_query_opts o;
            lz_query_opts_default(&o);
            o.max_new_tokens = 8;
            o.max_positions = model->cfg.ctx;
            if (tight) o.cache_bytes = (size_t)(all.host_bytes * 0.6);
            else if (o.cache_bytes < (size_t)all.host_bytes * 2) o.cache_bytes = (size_t)all.host_bytes * 2;
            lz_query_session *qe = NULL;
            lz_serve_engine_share s = {h, e};
            CHECK(lz_query_session_new(model, store, &o, &qe, err, sizeof err) == 0 &&
                      lz_query_preload_only(qe, 1, lz_serve_engine_keeps, &s, &part[e], err, sizeof err) == 0,
                  "preload %d: %s", e, err);
            lz_query_session_free(qe);
            const int64_t de = e ? d1 : d0;
            if (!tight)
                CHECK(part[e].host_share == de && part[e].host == c.docs && part[e].host_bytes == all.host_bytes,
                      "engine %d, room for the corpus: its %lld first (%d), then the rest (%d of %d)", e, (long long)de,
                      part[e].host_share, part[e].host, c.docs);
            else
                CHECK(part[e].host_share == de && part[e].host > de && part[e].host < c.docs &&
                          part[e].host_bytes <= (int64_t)o.cache_bytes,
                      "engine %d, 60%% of the corpus: its whole share (%d of %lld), then others' (%d in all of %d, %lld "
                      "of %zu bytes)", e, part[e].host_share, (long long)de, part[e].host, c.docs,
                      (long long)part[e].host_bytes, o.cache_bytes);
        }
    /* the router starts from the plan */
    engines E;
    if (engines_open_homes(&E, 2, 2, 64, 1, h)) { engines_close(&E); lz_serve_homes_free(h); return; }
    lz_query_doc *docs = NULL;
    int nd = 0;
    CHECK(lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[0], n_ctx[0], &docs, &nd, err, sizeof err) == 0,
          "resolve: %s", err);
    int64_t aff[2] = {0, 0};
    for (int k = 0; k < nd; k++) {
        char key[LZ_SERVE_HOME_KEY];
        lz_serve_home_key(&docs[k], key);
        const int e = lz_serve_homes_get(h, key);
        if (e >= 0) aff[e] += docs[k].n_tokens;
    }
    free(docs);
    const int want = aff[1] > aff[0] ? 1 : 0;
    lz_serve_req ra = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 2);
    int at = -1, state;
    free(ask(&E, &ra, &at, &state));
    lz_serve_route_stats rs[2];
    lz_serve_router_route_stats(E.r, rs);
    CHECK(state == LZ_SERVE_DONE && at == want && rs[at].home == 1 && rs[0].homed_docs + rs[1].homed_docs == c.docs,
          "the first request goes to its planned home (engine %d, want %d; tokens there %lld / %lld)", at, want,
          (long long)aff[0], (long long)aff[1]);
    engines_close(&E);
    lz_serve_homes_free(h);
}

/* Cancelled on the engine that runs it: its slot freed there, the other engine untouched. */
static void test_cancel(void)
{
    engines E;
    if (engines_open(&E, 2, 1, 64, 0)) { engines_close(&E); return; }
    char err[512];
    int b = 1;
    while (b < NQ && !disjoint(0, b)) b++;
    if (b == NQ) { engines_close(&E); return; }
    lz_serve_req ra = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 400);
    lz_serve_req rb = lz_test_greedy_req(questions[b], ctx_ids[b], n_ctx[b], 400);
    ra.temperature = rb.temperature = 5.0f; /* long random answers: still running when cancelled */
    lz_serve_ticket *a, *bt, *c;
    int ea, eb, ec;
    CHECK(lz_serve_router_submit(E.r, &ra, &a, &ea, err, sizeof err) == 0, "a: %s", err);
    CHECK(lz_serve_router_submit(E.r, &rb, &bt, &eb, err, sizeof err) == 0, "b: %s", err);
    CHECK(ea != eb, "a and b on two engines (%d, %d)", ea, eb);
    ra.max_tokens = 4;
    ra.temperature = 0;
    CHECK(lz_serve_router_submit(E.r, &ra, &c, &ec, err, sizeof err) == 0, "c: %s", err); /* queued behind a */
    CHECK(ec == ea, "c follows a's documents (%d, %d)", ec, ea);
    lz_serve_update u;
    size_t have = 0;
    int state = LZ_SERVE_PENDING;
    for (int i = 0; i < 200 && have < 8; i++) {
        lz_serve_wait(a, have, state, 2.0, &u);
        have = u.total;
        state = u.state;
        free(u.text);
    }
    lz_serve_release(c); /* gone while queued */
    lz_serve_release(a); /* gone mid-stream */
    lz_serve_stats sum, each[2];
    int freed = 0;
    for (int i = 0; i < 400 && !freed; i++) {
        lz_serve_router_stats(E.r, &sum, each);
        freed = each[ea].cancelled == 2 && each[ea].running == 0 && each[ea].host.n_held == 0;
        if (!freed) lz_test_sleep_ms(5);
    }
    CHECK(freed, "a's engine freed both (%lld cancelled, %d running, %lld held)", (long long)each[ea].cancelled,
          each[ea].running, (long long)each[ea].host.n_held);
    CHECK(each[eb].cancelled == 0 && each[eb].running == 1, "b's engine untouched (%lld cancelled, %d running)",
          (long long)each[eb].cancelled, each[eb].running);
    lz_serve_release(bt);
    settle(&E, &sum, each);
    CHECK(sum.cancelled == 3 && sum.running == 0 && sum.reserved_bytes == 0 && sum.host.n_held == 0,
          "all cancelled, nothing held (%lld)", (long long)sum.cancelled);
    engines_close(&E);
}

/* Every queue full: refused as one scheduler refuses, each refusal counted once; what was taken
 * is answered. */
static void test_full(void)
{
    engines E;
    if (engines_open(&E, 2, 1, 2, 0)) { engines_close(&E); return; }
    enum { M = 20 };
    lz_serve_ticket *t[M];
    int taken = 0, refused = 0;
    char err[512];
    for (int i = 0; i < M; i++) {
        lz_serve_req rq = lz_test_greedy_req(questions[i % NQ], ctx_ids[i % NQ], n_ctx[i % NQ], 16);
        const int rc = lz_serve_router_submit(E.r, &rq, &t[i], NULL, err, sizeof err);
        if (rc == LZ_SERVE_OK) taken++;
        else {
            CHECK(rc == LZ_SERVE_EFULL && !t[i] && strstr(err, "queue is full"), "refused as full: %d %s", rc, err);
            refused++;
        }
    }
    CHECK(refused > 0 && taken >= 4, "full queues refuse (%d taken, %d refused)", taken, refused);
    for (int i = 0; i < M; i++) {
        if (!t[i]) continue;
        lz_serve_update u;
        free(lz_test_drain(t[i], &u));
        CHECK(u.state == LZ_SERVE_DONE, "taken %d answered (%d: %s)", i, u.state, u.error);
        lz_serve_release(t[i]);
    }
    lz_serve_stats sum, each[2];
    settle(&E, &sum, each);
    CHECK(sum.rejected_full == refused && sum.ok == taken && sum.submitted == taken,
          "totals: %lld refused of %d, %lld ok of %d", (long long)sum.rejected_full, refused, (long long)sum.ok, taken);
    /* the aggregate is the sum of the engines', field by field, and /metrics says so */
    lz_serve_stats add = {0};
    lz_serve_stats_add(&add, &each[0]);
    lz_serve_stats_add(&add, &each[1]);
    CHECK(add.ok == sum.ok && add.completion_tokens == sum.completion_tokens && add.steps == sum.steps &&
              add.ttft.n == sum.ttft.n && add.host.hits == sum.host.hits && add.host.misses == sum.host.misses &&
              add.mem_budget == sum.mem_budget && sum.ok == each[0].ok + each[1].ok &&
              sum.host.hits == each[0].host.hits + each[1].host.hits && sum.ttft.n == each[0].ttft.n + each[1].ttft.n,
          "the sum of the engines");
    lz_serve_route_stats rs[2];
    lz_serve_router_route_stats(E.r, rs);
    lz_serve_http_counts hc = {0};
    char *m = lz_serve_metrics_text(&sum, each, rs, 2, &hc, 1.0);
    char want[256];
    snprintf(want, sizeof want, "lazy_requests_total{status=\"ok\"} %lld\n", (long long)sum.ok);
    CHECK(m && strstr(m, want), "the total in /metrics (%s)", want);
    for (int i = 0; i < 2 && m; i++) {
        snprintf(want, sizeof want, "lazy_engine_requests_total{engine=\"%d\",status=\"ok\"} %lld\n", i,
                 (long long)each[i].ok);
        CHECK(strstr(m, want), "engine %d's in /metrics (%s)", i, want);
        snprintf(want, sizeof want, "lazy_engine_cache_hits_total{engine=\"%d\",tier=\"host\"} %lld\n", i,
                 (long long)each[i].host.hits);
        CHECK(strstr(m, want), "engine %d's hits in /metrics (%s)", i, want);
    }
    CHECK(m && strstr(m, "lazy_engines 2\n") && strstr(m, "lazy_route_requests_total{engine=\"1\",route=\"home\"}"),
          "engines and routing in /metrics");
    CHECK(m && !sum.has_gpu && !strstr(m, "lazy_decode_grouped"), "no grouped-decode counters without a GPU tier");
    free(m);
    /* a GPU engine's grouped-decode counters: summed over the engines, then in /metrics */
    lz_serve_stats g[2] = {each[0], each[1]}, gsum = {0};
    for (int i = 0; i < 2; i++)
        g[i].has_gpu = 1, g[i].grouped_steps = 10 + i, g[i].grouped_blocks_read = 100 + i, g[i].grouped_blocks_placed = 300 + i;
    lz_serve_stats_add(&gsum, &g[0]);
    lz_serve_stats_add(&gsum, &g[1]);
    CHECK(gsum.has_gpu && gsum.grouped_steps == 21 && gsum.grouped_blocks_read == 201 && gsum.grouped_blocks_placed == 601,
          "grouped-decode counters summed");
    m = lz_serve_metrics_text(&gsum, g, rs, 2, &hc, 1.0);
    CHECK(m && strstr(m, "lazy_decode_grouped_steps_total 21\n") &&
              strstr(m, "lazy_decode_grouped_blocks_total{of=\"read\"} 201\n") &&
              strstr(m, "lazy_decode_grouped_blocks_total{of=\"placed\"} 601\n"),
          "grouped-decode counters in /metrics");
    free(m);
    engines_close(&E);
}

/* One engine: the router is that scheduler (no routing state, no per-engine metrics). */
static void test_one(void)
{
    engines E;
    if (engines_open(&E, 1, 4, 64, -1)) { engines_close(&E); return; }
    int e, state;
    lz_serve_req rq = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 4);
    free(ask(&E, &rq, &e, &state));
    CHECK(state == LZ_SERVE_DONE && e == 0, "one engine answers (%d)", state);
    lz_serve_stats sum, each[1];
    settle(&E, &sum, each);
    lz_serve_route_stats rs[1];
    lz_serve_router_route_stats(E.r, rs);
    CHECK(sum.ok == 1 && rs[0].home + rs[0].fresh + rs[0].spilled + rs[0].unresolved == 0, "nothing routed");
    lz_serve_http_counts hc = {0};
    char *m = lz_serve_metrics_text(&sum, each, rs, 1, &hc, 1.0);
    CHECK(m && !strstr(m, "lazy_engine_requests") && !strstr(m, "lazy_engines") && !strstr(m, "lazy_route"), "no per-engine metrics with one engine");
    free(m);
    engines_close(&E);
}

int main(void)
{
    if (!lz_test_demo_setup(dir, NQ, questions, ctx_ids, n_ctx, &model, &store)) return lz_test_done();
    test_identical();
    test_affinity();
    test_planned();
    test_cancel();
    test_full();
    test_one();
    lz_test_demo_teardown(dir, NQ, questions, ctx_ids, n_ctx, model, store);
    return lz_test_done();
}
