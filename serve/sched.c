/* sched.c - continuous batching over one query session (sched.h). One mutex
 * guards the queues, the tickets' streamed text and the totals; the engine
 * thread drops it while it runs the model or reads the store, which only it
 * touches. Each loop: cancelled requests leave, new ones are resolved, queued
 * ones are admitted by memory and prefilled together, then every running
 * request takes one decode step in one batched pass; a begin that fails for
 * memory while others run goes back to the queue's head until one of them
 * ends (sched.h). What it leaves out: HTTP and JSON (serve/http.c,
 * serve/openai.c). */
#include "serve/sched.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "query/answer_run.h"
#include "query/retrieve.h"

struct lz_serve_ticket {
    lz_serve_sched *s;
    int refs;                /* the client's and the engine's */
    int state;               /* lz_serve_state */
    int cancel;              /* released by the client before its end */
    pthread_cond_t cond;     /* the text grew or the state changed */
    lz_serve_ticket *next;   /* in the pending or the waiting queue */
    /* the request (copies) */
    char *question;
    char **doc_ids;
    int n_doc_ids, retrieve_k;
    lz_query_run_opts ro;
    char *stop[LZ_SERVE_MAX_STOP];
    int n_stop;
    /* the engine's */
    lz_query_doc *docs;
    int n_docs;
    int resolved;            /* resolve's status: 0, or the HTTP status it failed with (why in why) */
    char why[512];
    lz_query_run *run;
    int64_t reserved;        /* its memory estimate, counted while it runs */
    int mem_wait;            /* its begin failed for memory: it waits at the queue's head ... */
    int64_t mem_mark;        /* ... until the scheduler's n_left passes this */
    size_t emitted;          /* bytes of the answer streamed */
    double t_submit, t_admit, t_first, t_last;
    /* what the client reads */
    char *text;
    size_t len, cap;
    const char *finish;
    int status;
    char error[512];
    lz_serve_timing timing;
};

struct lz_serve_sched {
    lz_query_session *q;
    lz_store *store;
    lz_serve_sched_opts o;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;      /* a submission, a cancellation, stop */
    int stopping, n_tickets;  /* tickets alive (the client's or the engine's) */
    int orphaned;             /* lz_serve_sched_free ran with tickets alive: the last release frees it */
    lz_serve_ticket *pending, *pending_tail; /* submitted, not resolved */
    lz_serve_ticket *waiting, *waiting_tail; /* resolved, not admitted */
    int n_pending, n_waiting;
    lz_serve_ticket **running; /* (max_running) */
    int n_running;
    int n_admitting; /* taken from the queue, their begin not yet done: counted as running */
    int64_t n_left;           /* running requests that have left (ended, failed, cancelled) */
    int64_t reserved;
    int threads;              /* the creating thread's OpenMP threads: the engine's too */
    lz_serve_stats st;
};

void lz_serve_sched_opts_default(lz_serve_sched_opts *o)
{
    *o = (lz_serve_sched_opts){.max_running = 64, .max_queue = 256, .mem_budget = (size_t)1 << 30, .max_prefill = 16,
                               .record_hits = 0, .best_first = 0};
}

/* ---- tickets ---- */

static void ticket_free(lz_serve_ticket *t)
{
    free(t->question);
    for (int i = 0; i < t->n_doc_ids; i++) free(t->doc_ids[i]);
    free(t->doc_ids);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t->docs);
    free(t->text);
    pthread_cond_destroy(&t->cond);
    free(t);
}

/* Drops one reference (under the lock). */
static void ticket_unref(lz_serve_sched *s, lz_serve_ticket *t)
{
    if (--t->refs) return;
    ticket_free(t);
    s->n_tickets--;
}

static void sched_destroy(lz_serve_sched *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    free(s->running);
    free(s);
}

static int final_state(int state) { return state >= LZ_SERVE_DONE; }

/* Appends streamed text (under the lock); out of memory: the text is lost, the ticket fails. */
static void ticket_append(lz_serve_ticket *t, const char *p, size_t n)
{
    if (!n) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (t->len + n + 1 > cap) cap *= 2;
        char *x = realloc(t->text, cap);
        if (!x) return;
        t->text = x;
        t->cap = cap;
    }
    memcpy(t->text + t->len, p, n);
    t->len += n;
    t->text[t->len] = 0;
    pthread_cond_broadcast(&t->cond);
}

/* Ends a ticket (under the lock): its state, the engine's reference dropped. */
static void ticket_end(lz_serve_sched *s, lz_serve_ticket *t, int state, int status, const char *error)
{
    t->state = state;
    t->status = status;
    if (error) snprintf(t->error, sizeof t->error, "%s", error);
    t->timing.total_s = lz_now_s() - t->t_submit;
    if (state == LZ_SERVE_DONE) s->st.ok++;
    else if (state == LZ_SERVE_CANCELLED) s->st.cancelled++;
    else if (status >= 500) s->st.failed_server++;
    else s->st.failed_client++;
    pthread_cond_broadcast(&t->cond);
    ticket_unref(s, t);
}

static char *dup_str(const char *p) { return p ? strdup(p) : NULL; }

int lz_serve_submit(lz_serve_sched *s, const lz_serve_req *req, lz_serve_ticket **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!req->question || !*req->question) { snprintf(err, errlen, "the prompt is empty"); return LZ_SERVE_EINVAL; }
    if (req->n_stop < 0 || req->n_stop > LZ_SERVE_MAX_STOP) {
        snprintf(err, errlen, "at most %d stop strings, got %d", LZ_SERVE_MAX_STOP, req->n_stop);
        return LZ_SERVE_EINVAL;
    }
    for (int i = 0; i < req->n_stop; i++)
        if (!req->stop[i] || !*req->stop[i] || strlen(req->stop[i]) > LZ_SERVE_MAX_STOP_LEN) {
            snprintf(err, errlen, "stop strings must be non-empty and at most %d bytes", LZ_SERVE_MAX_STOP_LEN);
            return LZ_SERVE_EINVAL;
        }
    if (req->max_tokens < 0) { snprintf(err, errlen, "max_tokens must be >= 0"); return LZ_SERVE_EINVAL; }
    lz_serve_ticket *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errlen, "out of memory"); return LZ_SERVE_ENOMEM; }
    pthread_cond_init(&t->cond, NULL);
    t->s = s;
    t->question = dup_str(req->question);
    t->doc_ids = calloc((size_t)(req->n_doc_ids > 0 ? req->n_doc_ids : 1), sizeof *t->doc_ids);
    int oom = !t->question || !t->doc_ids;
    for (int i = 0; !oom && i < req->n_doc_ids; i++) {
        if (!(t->doc_ids[i] = dup_str(req->doc_ids[i] ? req->doc_ids[i] : ""))) oom = 1;
        else t->n_doc_ids = i + 1;
    }
    for (int i = 0; !oom && i < req->n_stop; i++) {
        if (!(t->stop[i] = dup_str(req->stop[i]))) oom = 1;
        else t->n_stop = i + 1;
    }
    if (oom) {
        ticket_free(t);
        snprintf(err, errlen, "out of memory");
        return LZ_SERVE_ENOMEM;
    }
    t->retrieve_k = req->n_doc_ids ? 0 : req->retrieve_k;
    t->ro = (lz_query_run_opts){.max_new_tokens = req->max_tokens, .temperature = req->temperature,
                                .top_p = req->top_p > 0 && req->top_p <= 1 ? req->top_p : 1.0f, .seed = req->seed,
                                .ignore_eos = req->ignore_eos};
    t->t_submit = lz_now_s();
    t->refs = 2;
    pthread_mutex_lock(&s->mu);
    int rc = LZ_SERVE_OK;
    if (s->stopping) {
        snprintf(err, errlen, "the server is stopping");
        rc = LZ_SERVE_ESTOPPED;
    } else if (s->n_pending + s->n_waiting >= s->o.max_queue) {
        snprintf(err, errlen, "the queue is full (%d requests waiting, %d running); try again later",
                 s->n_pending + s->n_waiting, s->n_running);
        s->st.rejected_full++;
        rc = LZ_SERVE_EFULL;
    }
    if (rc) {
        pthread_mutex_unlock(&s->mu);
        ticket_free(t);
        return rc;
    }
    s->n_tickets++;
    s->st.submitted++;
    if (s->pending_tail) s->pending_tail->next = t;
    else s->pending = t;
    s->pending_tail = t;
    s->n_pending++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    *out = t;
    return LZ_SERVE_OK;
}

void lz_serve_release(lz_serve_ticket *t)
{
    if (!t) return;
    lz_serve_sched *s = t->s;
    pthread_mutex_lock(&s->mu);
    if (!final_state(t->state)) {
        t->cancel = 1;
        pthread_cond_signal(&s->work);
    }
    ticket_unref(s, t);
    const int last = s->orphaned && !s->n_tickets;
    pthread_mutex_unlock(&s->mu);
    if (last) sched_destroy(s); /* its scheduler was freed before this ticket */
}

int lz_serve_wait(lz_serve_ticket *t, size_t have, int state_seen, double timeout_s, lz_serve_update *u)
{
    lz_serve_sched *s = t->s;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_s > 0) {
        const double at = (double)until.tv_sec + until.tv_nsec * 1e-9 + timeout_s;
        until.tv_sec = (time_t)at;
        until.tv_nsec = (long)((at - (double)until.tv_sec) * 1e9);
    }
    pthread_mutex_lock(&s->mu);
    int changed;
    while (!(changed = t->len > have || t->state != state_seen) && timeout_s > 0)
        if (pthread_cond_timedwait(&t->cond, &s->mu, &until) == ETIMEDOUT) {
            changed = t->len > have || t->state != state_seen;
            break;
        }
    memset(u, 0, sizeof *u);
    u->state = t->state;
    const size_t from = have < t->len ? have : t->len;
    u->len = t->len - from;
    u->total = t->len;
    u->text = malloc(u->len + 1);
    if (u->text) {
        if (u->len) memcpy(u->text, t->text + from, u->len);
        u->text[u->len] = 0;
    }
    u->finish = t->finish;
    u->status = t->status;
    snprintf(u->error, sizeof u->error, "%s", t->error);
    u->timing = t->timing;
    pthread_mutex_unlock(&s->mu);
    return changed;
}

const lz_query_doc *lz_serve_ticket_docs(const lz_serve_ticket *t, int *n)
{
    *n = t->n_docs;
    return t->docs;
}

void lz_serve_sched_stats(lz_serve_sched *s, lz_serve_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->queued = s->n_pending + s->n_waiting;
    st->running = s->n_running + s->n_admitting;
    st->reserved_bytes = s->reserved;
    st->mem_budget = (int64_t)s->o.mem_budget;
    pthread_mutex_unlock(&s->mu);
}

void lz_serve_sched_load(lz_serve_sched *s, int *queued, int *running, int *max_queue)
{
    pthread_mutex_lock(&s->mu);
    *queued = s->n_pending + s->n_waiting;
    *running = s->n_running + s->n_admitting;
    *max_queue = s->o.max_queue;
    pthread_mutex_unlock(&s->mu);
}

int lz_serve_sched_batch(const lz_serve_sched *s)
{
    const int par = lz_query_run_parallel(s->q);
    return par && par < s->o.max_running ? par : s->o.max_running;
}

/* ---- the engine ---- */

/* The documents of t (engine thread, no lock): its ids, or BM25's best k (best last unless
 * best_first), cut to what the context leaves; its memory estimate. 0, or an HTTP status
 * with the message in t->why. */
static int resolve(lz_serve_sched *s, lz_serve_ticket *t)
{
    char err[512] = "";
    const lz_query_opts *qo = lz_query_session_opts(s->q);
    /* positions left for documents with this request's answer length */
    int64_t budget = lz_query_doc_budget(s->q, t->question);
    if (budget < 0) { snprintf(t->why, sizeof t->why, "out of memory"); return 500; }
    budget += qo->max_new_tokens - t->ro.max_new_tokens;
    if (t->n_doc_ids) {
        const int rrc = lz_retrieve_resolve_ids(s->store, (const char *const *)t->doc_ids, t->n_doc_ids, &t->docs,
                                                &t->n_docs, err, sizeof err);
        if (rrc) {
            snprintf(t->why, sizeof t->why, "%s", err);
            return rrc == LZ_ENOTFOUND ? 404 : rrc == LZ_EINVAL ? 400 : 500;
        }
        int64_t used = 0;
        for (int i = 0; i < t->n_docs; i++) used += t->docs[i].n_tokens;
        if (used > budget) {
            snprintf(t->why, sizeof t->why,
                     "the documents take %lld positions but the model's context leaves %lld for them after the "
                     "prompt and max_tokens %d", (long long)used, (long long)(budget > 0 ? budget : 0),
                     t->ro.max_new_tokens);
            return 400;
        }
    } else if (t->retrieve_k > 0) {
        lz_query_doc *found;
        int n;
        if (lz_retrieve_search(s->store, t->question, t->retrieve_k, &found, &n, err, sizeof err)) {
            snprintf(t->why, sizeof t->why, "retrieval: %.480s", err);
            return 500;
        }
        int fit = 0; /* the lowest ranked that do not fit the context are dropped */
        for (int64_t used = 0; fit < n && used + found[fit].n_tokens <= budget; fit++) used += found[fit].n_tokens;
        t->docs = malloc((size_t)(fit > 0 ? fit : 1) * sizeof *t->docs);
        if (!t->docs) { free(found); snprintf(t->why, sizeof t->why, "out of memory"); return 500; }
        for (int i = 0; i < fit; i++) t->docs[i] = found[s->o.best_first ? i : fit - 1 - i];
        t->n_docs = fit;
        free(found);
    }
    if (budget < 0) {
        snprintf(t->why, sizeof t->why, "the prompt and max_tokens %d do not fit the model's context (%d positions)",
                 t->ro.max_new_tokens, qo->max_positions);
        return 400;
    }
    t->reserved = lz_query_run_estimate(s->q, t->question, t->docs, t->n_docs, t->ro.max_new_tokens);
    if (t->reserved < 0) { snprintf(t->why, sizeof t->why, "out of memory"); return 500; }
    if ((size_t)t->reserved > s->o.mem_budget) {
        snprintf(t->why, sizeof t->why, "the request needs %.1f MiB of memory (its KV and documents), more than the "
                 "server's budget of %.1f MiB (--mem-budget)", t->reserved / 1048576.0, s->o.mem_budget / 1048576.0);
        return 400;
    }
    return 0;
}

/* Streams what the run's answer allows now (stop strings, UTF-8 boundaries); a stop string
 * ends the run there. At the run's end everything left is streamed. Engine thread, takes
 * the lock. */
static void stream(lz_serve_sched *s, lz_serve_ticket *t)
{
    const lz_query_result *r = lz_query_run_result(t->run);
    const size_t len = r->answer ? strlen(r->answer) : 0;
    int hit;
    size_t end = lz_serve_stop_scan(r->answer ? r->answer : "", len, t->emitted, (const char *const *)t->stop, t->n_stop,
                                    &hit);
    if (hit) {
        lz_query_run_stop(t->run);
        t->finish = "stop";
    } else if (lz_query_run_done(t->run)) {
        end = len; /* the rest, a stop string's unfinished prefix and all */
    }
    pthread_mutex_lock(&s->mu);
    ticket_append(t, r->answer + t->emitted, end - t->emitted);
    pthread_mutex_unlock(&s->mu);
    t->emitted = end;
}

/* After a sample: timestamps, streaming. */
static void sampled(lz_serve_sched *s, lz_serve_ticket *t, int appended)
{
    const double now = lz_now_s();
    if (!t->t_first) t->t_first = now;
    if (appended) t->t_last = now;
    stream(s, t);
}

/* The end of a running request (engine thread, takes the lock): its timings, its run freed
 * (its KV, its holds on documents), its slot and memory given back. */
static void leave(lz_serve_sched *s, int i, int state, int status, const char *error)
{
    lz_serve_ticket *t = s->running[i];
    lz_serve_timing tm = {0};
    if (t->run) {
        const lz_query_result *r = lz_query_run_result(t->run);
        tm.n_prompt = r->n_prompt;
        tm.n_completion = r->n_answer;
        tm.hits = r->hits;
        tm.misses = r->misses;
        if (!t->finish) t->finish = r->n_answer >= t->ro.max_new_tokens ? "length" : "stop";
    }
    tm.queue_s = t->t_admit - t->t_submit;
    tm.ttft_s = t->t_first ? t->t_first - t->t_submit : 0;
    tm.tpot_s = tm.n_completion > 1 ? (t->t_last - t->t_first) / (tm.n_completion - 1) : 0;
    if (state == LZ_SERVE_DONE && s->o.record_hits)
        for (int k = 0; k < t->n_docs; k++) {
            char e2[256];
            lz_store_hit(s->store, t->docs[k].id, e2, sizeof e2); /* a count not recorded is no failure */
        }
    lz_query_run_free(t->run);
    t->run = NULL;
    lz_doc_cache_stats hs; /* its holds are gone: what a client reads once it sees the end */
    lz_query_cache_stats(s->q, &hs);
    pthread_mutex_lock(&s->mu);
    s->st.host = hs;
    t->timing = tm;
    s->reserved -= t->reserved;
    s->running[i] = s->running[--s->n_running];
    if (s->o.shared) atomic_fetch_sub(&s->o.shared->now, 1);
    s->n_left++;
    if (state == LZ_SERVE_DONE) {
        s->st.prompt_tokens += tm.n_prompt;
        s->st.completion_tokens += tm.n_completion;
        if (t->t_first) lz_serve_hist_add(&s->st.ttft, tm.ttft_s);
        if (tm.n_completion > 1) lz_serve_hist_add(&s->st.tpot, tm.tpot_s);
    }
    ticket_end(s, t, state, status, error);
    pthread_mutex_unlock(&s->mu);
}

/* Removes cancelled tickets from a queue (under the lock). */
static void sweep(lz_serve_sched *s, lz_serve_ticket **head, lz_serve_ticket **tail, int *n)
{
    lz_serve_ticket *prev = NULL;
    for (lz_serve_ticket *t = *head, *nx; t; t = nx) {
        nx = t->next;
        if (!t->cancel && !s->stopping) { prev = t; continue; }
        if (prev) prev->next = nx;
        else *head = nx;
        if (*tail == t) *tail = prev;
        (*n)--;
        t->next = NULL;
        ticket_end(s, t, LZ_SERVE_CANCELLED, 0, NULL);
    }
}

/* Resolves every pending ticket (the lock held on entry and exit, dropped meanwhile). */
static void resolve_pending(lz_serve_sched *s)
{
    lz_serve_ticket *list = s->pending;
    s->pending = s->pending_tail = NULL;
    int n = s->n_pending;
    s->n_pending = 0;
    s->n_waiting += n; /* counted as waiting while being resolved: the queue bound holds */
    pthread_mutex_unlock(&s->mu);
    for (lz_serve_ticket *t = list; t; t = t->next) t->resolved = resolve(s, t);
    pthread_mutex_lock(&s->mu);
    s->n_waiting -= n;
    for (lz_serve_ticket *t = list, *nx; t; t = nx) {
        nx = t->next;
        t->next = NULL;
        if (t->resolved) {
            ticket_end(s, t, LZ_SERVE_FAILED, t->resolved, t->why);
            continue;
        }
        t->state = LZ_SERVE_QUEUED;
        pthread_cond_broadcast(&t->cond);
        if (s->waiting_tail) s->waiting_tail->next = t;
        else s->waiting = t;
        s->waiting_tail = t;
        s->n_waiting++;
    }
}

/* Puts fresh[0..n) (admitted, not begun) back at the head of the queue in their order, their
 * memory no longer reserved; the first waits there until a running request ends (under the
 * lock). */
static void requeue(lz_serve_sched *s, lz_serve_ticket **fresh, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        lz_serve_ticket *t = fresh[i];
        t->next = s->waiting;
        s->waiting = t;
        if (!s->waiting_tail) s->waiting_tail = t;
        s->n_waiting++;
        s->reserved -= t->reserved;
        t->mem_wait = i == 0;
        t->mem_mark = s->n_left;
    }
}

/* Begins and prefills the admitted tickets fresh[0..n) (engine thread, no lock): on a backend
 * of one sequence each one's begin and prefill together, else every begin, then one prefill.
 * A begin that fails for memory while others run sends it and those after it back to the
 * queue's head (sched.h); with nothing else running it fails. */
static void admit(lz_serve_sched *s, lz_serve_ticket **fresh, int n)
{
    const int be = lz_query_run_parallel(s->q) == 1;
    lz_query_run **runs = malloc((size_t)(n > 0 ? n : 1) * sizeof *runs);
    int m = 0;
    char err[1024];
    const double t0 = lz_now_s();
    for (int i = 0; i < n; i++) {
        lz_serve_ticket *t = fresh[i];
        t->t_admit = lz_now_s();
        int rc = be ? lz_query_run_start(s->q, t->question, t->docs, t->n_docs, &t->ro, &t->run, err, sizeof err)
                    : lz_query_run_begin(s->q, t->question, t->docs, t->n_docs, &t->ro, &t->run, err, sizeof err);
        pthread_mutex_lock(&s->mu);
        if (rc == LZ_QUERY_ENOMEM) { /* the backend's memory, or an allocation (session.h) */
            if (s->n_running > 0) { /* others hold the memory: again once one of them has ended */
                t->run = NULL;
                requeue(s, fresh + i, n - i);
                s->n_admitting -= n - i;
                s->st.mem_retries++;
                pthread_mutex_unlock(&s->mu);
                break;
            }
            char why[sizeof err];
            snprintf(why, sizeof why, "not enough memory for this request even with no other request running: %.900s",
                     err);
            memcpy(err, why, sizeof err);
        }
        s->running[s->n_running++] = t;
        s->n_admitting--;
        if (s->n_running > s->st.peak_running) s->st.peak_running = s->n_running;
        if (s->o.shared) { /* the count across the schedulers sharing it, and its peak */
            const int now = atomic_fetch_add(&s->o.shared->now, 1) + 1;
            int peak = atomic_load(&s->o.shared->peak);
            while (now > peak && !atomic_compare_exchange_weak(&s->o.shared->peak, &peak, now)) {}
        }
        t->state = LZ_SERVE_RUNNING;
        t->mem_wait = 0;
        lz_serve_hist_add(&s->st.queue, t->t_admit - t->t_submit);
        pthread_cond_broadcast(&t->cond);
        pthread_mutex_unlock(&s->mu);
        if (rc) { t->run = NULL; leave(s, s->n_running - 1, LZ_SERVE_FAILED, 500, err); continue; }
        if (runs) runs[m++] = t->run;
    }
    if (!be && m) {
        const int rc = lz_query_run_prefill(s->q, runs, m, err, sizeof err);
        pthread_mutex_lock(&s->mu);
        s->st.prefills++;
        s->st.prefill_rows += m;
        pthread_mutex_unlock(&s->mu);
        if (rc) /* every run of the pass failed */
            for (int i = s->n_running - 1; i >= 0; i--)
                if (lz_query_run_done(s->running[i]->run) && !lz_query_run_result(s->running[i]->run)->n_answer &&
                    !s->running[i]->t_first)
                    leave(s, i, LZ_SERVE_FAILED, 500, err);
    }
    free(runs);
    /* the first token of each */
    for (int i = s->n_running - 1; i >= 0; i--) {
        lz_serve_ticket *t = s->running[i];
        if (t->t_first) continue;
        const char *piece;
        int pl;
        sampled(s, t, lz_query_run_next(t->run, &piece, &pl));
        if (lz_query_run_done(t->run)) leave(s, i, LZ_SERVE_DONE, 0, NULL);
    }
    lz_doc_cache_stats hs; /* what the newcomers hold */
    lz_query_cache_stats(s->q, &hs);
    pthread_mutex_lock(&s->mu);
    s->st.busy_s += lz_now_s() - t0;
    s->st.host = hs;
    pthread_mutex_unlock(&s->mu);
}

/* Samples the next token of every running request at once (a backend of slots: the decode
 * step is short and a vocabulary's argmax per request is not), when each one's sampler may run
 * beside the others (greedy, or no top-p cut); appended[i] as lz_query_run_next says. 1 when
 * done, 0 when they are to be sampled one by one. */
static int sample_all(lz_serve_sched *s, int n, int *appended)
{
    if (lz_query_run_parallel(s->q) <= 1 || n < 2) return 0;
    for (int i = 0; i < n; i++)
        if (s->running[i]->ro.temperature != 0 && s->running[i]->ro.top_p < 1.0f) return 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        const char *piece;
        int pl;
        appended[i] = lz_query_run_next(s->running[i]->run, &piece, &pl);
    }
    return 1;
}

/* One decode step for every running request (engine thread, no lock). */
static void decode_step(lz_serve_sched *s)
{
    const int n = s->n_running;
    if (!n) return;
    lz_query_run **runs = malloc((size_t)n * sizeof *runs);
    int *appended = malloc((size_t)n * sizeof *appended);
    if (!runs || !appended) { free(runs); free(appended); return; }
    for (int i = 0; i < n; i++) runs[i] = s->running[i]->run;
    char err[1024];
    const double t0 = lz_now_s();
    const int rc = lz_query_run_step(s->q, runs, n, err, sizeof err);
    const double t_pass = lz_now_s() - t0;
    free(runs);
    if (rc) {
        free(appended);
        while (s->n_running) leave(s, s->n_running - 1, LZ_SERVE_FAILED, 500, err);
        return;
    }
    const int all = sample_all(s, n, appended);
    for (int i = n - 1; i >= 0; i--) {
        lz_serve_ticket *t = s->running[i];
        const char *piece;
        int pl;
        sampled(s, t, all ? appended[i] : lz_query_run_next(t->run, &piece, &pl));
        if (lz_query_run_done(t->run)) leave(s, i, LZ_SERVE_DONE, 0, NULL);
    }
    free(appended);
    lz_doc_cache_stats hs, gs = {0};
    lz_query_cache_stats(s->q, &hs);
    if (s->o.tier_stats) s->o.tier_stats(s->o.tier_ctx, &gs);
    int64_t gsteps = 0, gread = 0, gplaced = 0;
    if (s->o.decode_stats) s->o.decode_stats(s->o.tier_ctx, &gsteps, &gread, &gplaced);
    pthread_mutex_lock(&s->mu);
    s->st.gpu = gs;
    s->st.grouped_steps = gsteps;
    s->st.grouped_blocks_read = gread;
    s->st.grouped_blocks_placed = gplaced;
    s->st.has_gpu = s->o.tier_stats != NULL;
    s->st.steps++;
    s->st.step_rows += n;
    const double t_step = lz_now_s() - t0;
    s->st.busy_s += t_step;
    s->st.decode_s += t_step;
    s->st.pass_s += t_pass;
    s->st.host = hs;
    pthread_mutex_unlock(&s->mu);
}

static void *engine(void *arg)
{
    lz_serve_sched *s = arg;
    if (s->o.on_start) s->o.on_start(s->o.start_ctx);
    lz_llama_set_threads(s->threads); /* a new thread starts from OpenMP's defaults, not the program's -t */
    lz_serve_ticket **fresh = malloc((size_t)s->o.max_prefill * sizeof *fresh);
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        if (!s->pending && !s->waiting && !s->n_running) {
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        /* cancelled ones leave first: their slots and documents are free for this step */
        for (int i = s->n_running - 1; i >= 0; i--)
            if (s->running[i]->cancel) {
                pthread_mutex_unlock(&s->mu);
                leave(s, i, LZ_SERVE_CANCELLED, 0, NULL);
                pthread_mutex_lock(&s->mu);
            }
        sweep(s, &s->pending, &s->pending_tail, &s->n_pending);
        sweep(s, &s->waiting, &s->waiting_tail, &s->n_waiting);
        if (s->pending) resolve_pending(s);
        /* admission: in order, while the batch has room (on a backend: its sequences), the
         * memory budget allows and the backend's memory takes the documents (the head waits
         * for memory rather than being overtaken) */
        const lz_query_backend *qb = lz_query_session_opts(s->q)->backend;
        const int par = lz_query_run_parallel(s->q);
        const int room = par && par < s->o.max_running ? par : s->o.max_running;
        int n = 0;
        int64_t reserved = s->reserved, doc_tokens = 0;
        while (fresh && s->waiting && s->n_running + n < room && n < s->o.max_prefill) {
            lz_serve_ticket *t = s->waiting;
            if (t->mem_wait && t->mem_mark == s->n_left) break; /* its begin found no memory: until one ends */
            if (reserved + t->reserved > (int64_t)s->o.mem_budget && s->n_running + n > 0) break;
            if (par > 1 && qb->fits) { /* the documents it will pin on the device (as if none were resident) */
                int64_t dt = 0;
                for (int k = 0; k < t->n_docs; k++) dt += t->docs[k].n_tokens;
                if (s->n_running + n > 0 && !qb->fits(qb->ctx, doc_tokens + dt)) break;
                doc_tokens += dt;
            }
            s->waiting = t->next;
            if (!s->waiting) s->waiting_tail = NULL;
            t->next = NULL;
            s->n_waiting--;
            reserved += t->reserved;
            fresh[n++] = t;
        }
        s->reserved = reserved;
        s->n_admitting = n; /* neither queued nor in running[] until admit places them */
        pthread_mutex_unlock(&s->mu);
        if (n) admit(s, fresh, n);
        /* the first tokens of the fresh ones were sampled by admit: step those with the rest */
        decode_step(s);
        pthread_mutex_lock(&s->mu);
    }
    /* stopping: every request ends cancelled */
    while (s->n_running) {
        pthread_mutex_unlock(&s->mu);
        leave(s, s->n_running - 1, LZ_SERVE_CANCELLED, 0, NULL);
        pthread_mutex_lock(&s->mu);
    }
    sweep(s, &s->pending, &s->pending_tail, &s->n_pending);
    sweep(s, &s->waiting, &s->waiting_tail, &s->n_waiting);
    pthread_mutex_unlock(&s->mu);
    free(fresh);
    return NULL;
}

int lz_serve_sched_new(lz_query_session *q, lz_store *st, const lz_serve_sched_opts *o, lz_serve_sched **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    lz_serve_sched *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return -1; }
    s->q = q;
    s->store = st;
    s->o = *o;
    if (s->o.max_running < 1) s->o.max_running = 1;
    if (s->o.max_prefill < 1) s->o.max_prefill = 1;
    if (s->o.max_queue < 0) s->o.max_queue = 0;
    s->running = calloc((size_t)s->o.max_running, sizeof *s->running);
    if (!s->running) { free(s); snprintf(err, errlen, "out of memory"); return -1; }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    lz_query_cache_stats(q, &s->st.host);
    s->threads = omp_get_max_threads();
    if (pthread_create(&s->thread, NULL, engine, s)) {
        snprintf(err, errlen, "cannot start the engine thread");
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        free(s->running);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void lz_serve_sched_free(lz_serve_sched *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->mu); /* tickets the clients still hold keep it until the last release */
    const int alive = s->n_tickets > 0;
    s->orphaned = alive;
    pthread_mutex_unlock(&s->mu);
    if (!alive) sched_destroy(s);
}
