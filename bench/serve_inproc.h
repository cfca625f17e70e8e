/* serve_inproc.h - bench_serve's in-process runs: a stream's requests
 * (bench/serve_stream.h) straight to the serving scheduler (serve/sched.h)
 * over a query session of this process, no HTTP. Two kinds of run:
 *
 *   closed loop  C clients, each submitting its next request when its last
 *                one ended (C = 1: one request at a time, the idle TTFT)
 *   open loop    Poisson arrivals at a rate (eval/workload.h's arrival
 *                times from the seed; rate inf: all at once), one waiting
 *                thread a request
 *
 * A run takes a part of the stream (its first request and count: the caller
 * lays the runs out). Every request asks max_tokens with ignore_eos (fixed
 * output lengths), greedy. Per run: requests/s and output tokens/s over its wall time (the
 * run's start to the last request's end), TTFT and time per output token as
 * the scheduler timed them (submit to first token; mean gap after it), the
 * inter-token latency as each request's waiter saw its text grow (vLLM's
 * ITL: the gaps between stream chunks), the mean decode batch, the peak
 * running, begins retried for memory. On several engines (the target's
 * engines: serve/router.h, a router made for the run) also each engine's
 * requests and document cache lookups per tier during the run, the hit rates
 * the multi-GPU figures compare. Header-only, for bench/bench_serve.c.
 * What it leaves out: the session and the GPU engine, printing (the caller). */
#ifndef LZ_BENCH_SERVE_INPROC_H
#define LZ_BENCH_SERVE_INPROC_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/serve_stats.h"
#include "bench/serve_stream.h"
#include "eval/workload.h"
#include "serve/router.h"
#include "serve/sched.h"

/* Where a run sends its requests. */
typedef struct {
    lz_query_session *q; /* the session (its mode, its backend) */
    lz_store *st;
    int max_running;     /* the scheduler's batch (on a backend: at most its slots) */
    int max_tokens;      /* every request's output tokens (ignore_eos) */
    int quiet;           /* no failure lines on stderr */
    /* or, n_engines > 0: the engines a router spreads the run's requests over (q, st unused) */
    const lz_serve_engine *engines;
    int n_engines;
    lz_store *route_store; /* the router's store handle (serve/router.h) */
    lz_serve_homes *homes; /* the documents' homes, kept from run to run (serve/homes.h) */
} lz_bs_target;

/* One engine's part of a run: requests it answered, its cache lookups per tier in the run. */
typedef struct {
    int64_t ok, host_hits, host_misses, gpu_hits, gpu_misses;
} lz_bs_engine_run;

/* What a run measured. */
typedef struct {
    int requests, done, failed;
    double wall_s, req_s, tok_s;
    double arrival_span_s;   /* the last arrival's offset (open loop; 0 closed or at rate inf) */
    lz_bs_dist ttft, tpot, itl;
    double mean_batch;       /* decode rows a step */
    double step_ms, pass_ms; /* a decode step's engine time, and its model pass's (the rest:
                              * sampling, streaming; TPOT minus the step: admission, prefills) */
    int peak_running;
    int64_t mem_retries;
    int n_engines;           /* the target's (0: one scheduler) */
    lz_bs_engine_run eng[LZ_SERVE_MAX_ENGINES];
} lz_bs_result;

typedef struct {
    int ok, tokens;
    double ttft, tpot, t_end;
    lz_bs_list itl;
} lz_bs_rec;

typedef struct {
    const lz_bs_target *tg;
    const lz_bs_stream *s;
    lz_serve_sched *sched;
    lz_serve_router *router; /* instead of sched, on several engines */
    lz_bs_rec *rec;       /* (n) */
    int first, n;         /* the run's requests: the stream's first .. first + n - 1 */
    int next;             /* closed loop: the next request to submit (under mu) */
    int n_errors;         /* failure lines printed (under mu) */
    pthread_mutex_t mu;
} lz_bs_run_ctx;

/* The run's request i (the stream's first + i): submitted, its stream read to the end, its
 * record filled. */
static void lz_bs_one(lz_bs_run_ctx *c, int i)
{
    const lz_bs_req *r = &c->s->r[c->first + i];
    lz_bs_rec *rec = &c->rec[i];
    const lz_serve_req rq = {.question = r->question, .doc_ids = r->docs, .n_doc_ids = r->n_docs,
                             .max_tokens = c->tg->max_tokens, .top_p = 1.0f, .seed = (uint64_t)(c->first + i) + 1,
                             .ignore_eos = 1};
    lz_serve_ticket *t;
    char err[512];
    const int rc = c->router ? lz_serve_router_submit(c->router, &rq, &t, NULL, err, sizeof err)
                             : lz_serve_submit(c->sched, &rq, &t, err, sizeof err);
    lz_serve_update u = {0};
    if (rc == LZ_SERVE_OK) {
        size_t have = 0;
        int state = LZ_SERVE_PENDING;
        double last = 0;
        for (;;) {
            lz_serve_wait(t, have, state, 60.0, &u);
            const double now = lz_bs_now();
            if (u.len) {
                if (last > 0) lz_bs_push(&rec->itl, now - last);
                last = now;
            }
            have += u.len;
            state = u.state;
            free(u.text);
            if (state >= LZ_SERVE_DONE) break;
        }
        rec->ok = state == LZ_SERVE_DONE;
        rec->ttft = u.timing.ttft_s;
        rec->tpot = u.timing.tpot_s;
        rec->tokens = u.timing.n_completion;
        lz_serve_release(t);
    } else {
        snprintf(u.error, sizeof u.error, "%s", err);
    }
    rec->t_end = lz_bs_now();
    if (!rec->ok && !c->tg->quiet) {
        pthread_mutex_lock(&c->mu);
        if (c->n_errors++ < 3) fprintf(stderr, "bench_serve: request %d failed: %s\n", c->first + i, u.error);
        pthread_mutex_unlock(&c->mu);
    }
}

/* A closed-loop client: the next request once the last one ended, until none is left. */
static void *lz_bs_client(void *arg)
{
    lz_bs_run_ctx *c = (lz_bs_run_ctx *)arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        const int i = c->next < c->n ? c->next++ : -1;
        pthread_mutex_unlock(&c->mu);
        if (i < 0) return NULL;
        lz_bs_one(c, i);
    }
}

typedef struct {
    lz_bs_run_ctx *c;
    int i;
} lz_bs_arrival;

static void *lz_bs_arrive(void *arg)
{
    lz_bs_arrival *a = (lz_bs_arrival *)arg;
    lz_bs_one(a->c, a->i);
    return NULL;
}

/* Requests first .. first + n - 1 of s (cut to the stream) through a new scheduler over tg: a
 * closed loop of C clients (C >= 1), or (C == 0) an open loop of Poisson arrivals at rate
 * (INFINITY: all at once) from seed. Fills *out; 0, or -1 with a message (the scheduler or a
 * thread could not start). */
static int lz_bs_run(const lz_bs_target *tg, const lz_bs_stream *s, int first, int n, int C, double rate,
                     uint64_t seed, lz_bs_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (first < 0 || first > s->n) first = s->n;
    if (n > s->n - first) n = s->n - first;
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_running = tg->max_running;
    so.max_queue = n + C + 1;
    so.mem_budget = (size_t)1 << 40; /* admission by the batch and the backend's memory, not a host estimate */
    so.max_prefill = tg->max_running < 16 ? tg->max_running : 16;
    lz_bs_run_ctx c = {.tg = tg, .s = s, .first = first, .n = n};
    c.rec = (lz_bs_rec *)calloc((size_t)(n > 0 ? n : 1), sizeof *c.rec);
    const int n_threads = C > 0 ? C : n;
    pthread_t *th = (pthread_t *)calloc((size_t)(n_threads > 0 ? n_threads : 1), sizeof *th);
    lz_bs_arrival *arr = C > 0 ? NULL : (lz_bs_arrival *)calloc((size_t)(n > 0 ? n : 1), sizeof *arr);
    double *at = C > 0 ? NULL : (double *)calloc((size_t)(n > 0 ? n : 1), sizeof *at);
    if (!c.rec || !th || (C == 0 && (!arr || !at))) {
        free(c.rec); free(th); free(arr); free(at);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    lz_serve_engine eng[LZ_SERVE_MAX_ENGINES];
    lz_serve_stats before[LZ_SERVE_MAX_ENGINES];
    lz_doc_cache_stats gpu0[LZ_SERVE_MAX_ENGINES];
    const int ne = tg->n_engines > LZ_SERVE_MAX_ENGINES ? LZ_SERVE_MAX_ENGINES : tg->n_engines;
    for (int e = 0; e < ne; e++) { /* the run's scheduler options over each engine's own (its GPU hooks) */
        eng[e] = tg->engines[e];
        eng[e].so.max_running = so.max_running < eng[e].so.max_running ? so.max_running : eng[e].so.max_running;
        eng[e].so.max_queue = so.max_queue;
        eng[e].so.mem_budget = so.mem_budget;
        eng[e].so.max_prefill = so.max_prefill;
        memset(&gpu0[e], 0, sizeof gpu0[e]);
        if (eng[e].so.tier_stats) eng[e].so.tier_stats(eng[e].so.tier_ctx, &gpu0[e]); /* idle: read here */
    }
    if (ne > 0) {
        lz_serve_router_opts ro;
        lz_serve_router_opts_default(&ro);
        ro.store = tg->route_store;
        ro.homes = tg->homes;
        if (lz_serve_router_new(eng, ne, &ro, &c.router, err, errlen)) {
            free(c.rec); free(th); free(arr); free(at);
            return -1;
        }
        lz_serve_stats sum;
        lz_serve_router_stats(c.router, &sum, before);
    } else if (lz_serve_sched_new(tg->q, tg->st, &so, &c.sched, err, errlen)) {
        free(c.rec); free(th); free(arr); free(at);
        return -1;
    }
    pthread_mutex_init(&c.mu, NULL);
    int started = 0, rc = 0;
    const double t0 = lz_bs_now();
    if (C > 0) {
        for (; started < C; started++)
            if (pthread_create(&th[started], NULL, lz_bs_client, &c)) break;
    } else {
        if (isfinite(rate)) lz_eval_poisson_arrivals(at, n, rate, seed);
        for (; started < n; started++) {
            const double wait = t0 + at[started] - lz_bs_now();
            if (wait > 0) usleep((useconds_t)(wait * 1e6));
            arr[started] = (lz_bs_arrival){&c, started};
            if (pthread_create(&th[started], NULL, lz_bs_arrive, &arr[started])) break;
        }
        out->arrival_span_s = n ? at[n - 1] : 0;
    }
    if (started < n_threads) { snprintf(err, errlen, "cannot start thread %d", started); rc = -1; }
    if (C > 0 && started == 0) { /* no client took the requests */
        lz_serve_sched_free(c.sched);
        lz_serve_router_free(c.router);
        goto done;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    lz_serve_stats ss;
    if (c.router) {
        lz_serve_stats after[LZ_SERVE_MAX_ENGINES];
        lz_serve_router_stats(c.router, &ss, after);
        lz_serve_router_free(c.router); /* the engines stopped: their GPU counters are still */
        out->n_engines = ne;
        for (int e = 0; e < ne; e++) {
            lz_doc_cache_stats g = {0};
            if (eng[e].so.tier_stats) eng[e].so.tier_stats(eng[e].so.tier_ctx, &g);
            out->eng[e] = (lz_bs_engine_run){.ok = after[e].ok, .host_hits = after[e].host.hits - before[e].host.hits,
                                             .host_misses = after[e].host.misses - before[e].host.misses,
                                             .gpu_hits = g.hits - gpu0[e].hits, .gpu_misses = g.misses - gpu0[e].misses};
        }
    } else {
        lz_serve_sched_stats(c.sched, &ss);
        lz_serve_sched_free(c.sched);
    }
    double t_end = t0;
    long tokens = 0;
    int nt = 0, np = 0, ni = 0, n_itl = 0;
    for (int i = 0; i < n; i++) n_itl += c.rec[i].itl.n;
    double *ttft = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof *ttft);
    double *tpot = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof *tpot);
    double *itl = (double *)malloc((size_t)(n_itl > 0 ? n_itl : 1) * sizeof *itl);
    for (int i = 0; i < n && ttft && tpot && itl; i++) {
        const lz_bs_rec *r = &c.rec[i];
        if (r->t_end > t_end) t_end = r->t_end;
        if (!r->ok) { out->failed++; continue; }
        out->done++;
        tokens += r->tokens;
        ttft[nt++] = r->ttft;
        if (r->tokens > 1) tpot[np++] = r->tpot;
        for (int j = 0; j < r->itl.n; j++) itl[ni++] = r->itl.v[j];
    }
    out->requests = n;
    out->wall_s = t_end - t0;
    out->req_s = out->wall_s > 0 ? out->done / out->wall_s : 0;
    out->tok_s = out->wall_s > 0 ? tokens / out->wall_s : 0;
    if (ttft && tpot && itl) {
        out->ttft = lz_bs_dist_of(ttft, nt);
        out->tpot = lz_bs_dist_of(tpot, np);
        out->itl = lz_bs_dist_of(itl, ni);
    } else {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    out->mean_batch = ss.steps ? (double)ss.step_rows / (double)ss.steps : 0;
    out->step_ms = ss.steps ? 1e3 * ss.decode_s / (double)ss.steps : 0;
    out->pass_ms = ss.steps ? 1e3 * ss.pass_s / (double)ss.steps : 0;
    out->peak_running = ss.peak_running;
    out->mem_retries = ss.mem_retries;
    free(ttft);
    free(tpot);
    free(itl);
done:
    for (int i = 0; i < n; i++) lz_bs_list_free(&c.rec[i].itl);
    pthread_mutex_destroy(&c.mu);
    free(c.rec);
    free(th);
    free(arr);
    free(at);
    return rc;
}

#endif /* LZ_BENCH_SERVE_INPROC_H */
