/* router.c - N schedulers behind one submit (router.h): a request's documents
 * resolved for routing (ids, or BM25) with the router's store handle, the
 * engine chosen by their homes' tokens against the engines' loads, the
 * request queued there. One lock serialises routing (the homes, the store
 * handle, the loads read and the submit): the engines' locks are taken inside
 * it, never the other way. What it leaves out: the engines (sched.c). */
#include "serve/router.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "query/retrieve.h"
#include "serve/homes.h"

struct lz_serve_router {
    int n;
    lz_serve_sched **sched;     /* (n) */
    lz_serve_route_stats *rs;   /* (n) */
    lz_serve_router_opts o;
    int margin;                 /* spill_margin resolved */
    lz_serve_homes *homes;
    int own_homes;
    lz_serve_running running; /* across every engine's scheduler: the aggregate's peak */
    pthread_mutex_t mu;
};

void lz_serve_router_opts_default(lz_serve_router_opts *o)
{
    *o = (lz_serve_router_opts){.spill_factor = 1.5, .spill_margin = -1, .store = NULL, .homes = NULL};
}

int lz_serve_router_new(const lz_serve_engine *engines, int n, const lz_serve_router_opts *o, lz_serve_router **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    if (n < 1 || n > LZ_SERVE_MAX_ENGINES) {
        snprintf(err, errlen, "%d engines: expected 1 to %d", n, LZ_SERVE_MAX_ENGINES);
        return -1;
    }
    lz_serve_router *r = calloc(1, sizeof *r);
    if (!r) { snprintf(err, errlen, "out of memory"); return -1; }
    pthread_mutex_init(&r->mu, NULL);
    r->n = n;
    r->o = *o;
    r->sched = calloc((size_t)n, sizeof *r->sched);
    r->rs = calloc((size_t)n, sizeof *r->rs);
    r->own_homes = n > 1 && !o->homes;
    r->homes = o->homes ? o->homes : r->own_homes ? lz_serve_homes_new() : NULL;
    if (!r->sched || !r->rs || (n > 1 && !r->homes)) {
        snprintf(err, errlen, "out of memory");
        lz_serve_router_free(r);
        return -1;
    }
    int batch = 0;
    for (int i = 0; i < n; i++) {
        char e2[512];
        lz_serve_sched_opts so = engines[i].so;
        so.shared = &r->running;
        if (lz_serve_sched_new(engines[i].q, engines[i].store, &so, &r->sched[i], e2, sizeof e2)) {
            snprintf(err, errlen, "engine %d: %s", i, e2);
            lz_serve_router_free(r);
            return -1;
        }
        const int b = lz_serve_sched_batch(r->sched[i]);
        if (!batch || b < batch) batch = b;
    }
    r->margin = o->spill_margin >= 0 ? o->spill_margin : batch / 4 > 2 ? batch / 4 : 2;
    if (!(r->o.spill_factor >= 1.0)) r->o.spill_factor = 1.0;
    *out = r;
    return 0;
}

void lz_serve_router_free(lz_serve_router *r)
{
    if (!r) return;
    for (int i = 0; r->sched && i < r->n; i++) lz_serve_sched_free(r->sched[i]);
    pthread_mutex_destroy(&r->mu);
    if (r->own_homes) lz_serve_homes_free(r->homes);
    free(r->sched);
    free(r->rs);
    free(r);
}

int lz_serve_router_n(const lz_serve_router *r) { return r->n; }
lz_serve_sched *lz_serve_router_sched(lz_serve_router *r, int i) { return i >= 0 && i < r->n ? r->sched[i] : NULL; }

/* The documents routing weighs (under the lock): resolved by the router's store (ids to their
 * passages, or BM25's best k), each weighted by its tokens; without a store, the ids as named,
 * one each. 0, or -1 when they cannot be known here (*docs NULL). */
static int route_docs(lz_serve_router *r, const lz_serve_req *req, lz_query_doc **docs, int *n)
{
    *docs = NULL;
    *n = 0;
    char err[512];
    if (req->n_doc_ids > 0) {
        if (r->o.store)
            return lz_retrieve_resolve_ids(r->o.store, req->doc_ids, req->n_doc_ids, docs, n, err, sizeof err) ? -1 : 0;
        lz_query_doc *d = calloc((size_t)req->n_doc_ids, sizeof *d);
        if (!d) return -1;
        for (int i = 0; i < req->n_doc_ids; i++) {
            snprintf(d[i].ext_id, sizeof d[i].ext_id, "%s", req->doc_ids[i] ? req->doc_ids[i] : "");
            d[i].n_tokens = 1;
        }
        *docs = d;
        *n = req->n_doc_ids;
        return 0;
    }
    if (req->retrieve_k <= 0) return 0; /* no documents: nothing binds it to an engine */
    if (!r->o.store || !req->question) return -1;
    return lz_retrieve_search(r->o.store, req->question, req->retrieve_k, docs, n, err, sizeof err) ? -1 : 0;
}

/* The engine for docs[0..nd) given the loads (under the lock); *why: 0 home, 1 spilled, 2 fresh,
 * 3 unresolved. -1 when every queue is full. */
static int choose(lz_serve_router *r, const lz_query_doc *docs, int nd, int resolved, const int *load, const int *full,
                  int *why)
{
    int least = -1;
    int64_t homed[LZ_SERVE_MAX_ENGINES], docs_e;
    for (int e = 0; e < r->n; e++) lz_serve_homes_engine(r->homes, e, &docs_e, &homed[e]);
    for (int e = 0; e < r->n; e++) {
        if (full[e]) continue;
        if (least < 0 || load[e] < load[least] || (load[e] == load[least] && homed[e] < homed[least])) least = e;
    }
    if (least < 0) return -1;
    if (!resolved) { *why = 3; return least; }
    int64_t aff[LZ_SERVE_MAX_ENGINES] = {0}; /* tokens of its documents homed on each engine */
    int home = -1;
    for (int k = 0; k < nd; k++) {
        char key[LZ_SERVE_HOME_KEY];
        lz_serve_home_key(&docs[k], key);
        const int h = lz_serve_homes_get(r->homes, key);
        if (h >= 0 && h < r->n) aff[h] += docs[k].n_tokens > 0 ? docs[k].n_tokens : 1;
    }
    for (int e = 0; e < r->n; e++)
        if (aff[e] > 0 && (home < 0 || aff[e] > aff[home] || (aff[e] == aff[home] && load[e] < load[home]))) home = e;
    if (home < 0) { *why = 2; return least; }
    if (!full[home] && !(load[home] > r->o.spill_factor * load[least] + r->margin)) { *why = 0; return home; }
    /* much busier (or full): the least loaded, the most affine among those as loaded */
    int best = least;
    for (int e = 0; e < r->n; e++)
        if (!full[e] && e != home && load[e] == load[least] && aff[e] > aff[best]) best = e;
    *why = best == home ? 0 : 1;
    return best;
}

int lz_serve_router_submit(lz_serve_router *r, const lz_serve_req *req, lz_serve_ticket **out, int *engine, char *err,
                           size_t errlen)
{
    if (engine) *engine = 0;
    if (r->n == 1) return lz_serve_submit(r->sched[0], req, out, err, errlen);
    *out = NULL;
    int load[LZ_SERVE_MAX_ENGINES], full[LZ_SERVE_MAX_ENGINES];
    pthread_mutex_lock(&r->mu);
    lz_query_doc *docs;
    int nd;
    const int resolved = route_docs(r, req, &docs, &nd) == 0;
    for (int e = 0; e < r->n; e++) {
        int q, run, maxq;
        lz_serve_sched_load(r->sched[e], &q, &run, &maxq);
        load[e] = q + run;
        full[e] = q >= maxq;
    }
    int why = 0;
    int e = choose(r, docs, nd, resolved, load, full, &why);
    if (e < 0) e = 0; /* every queue full: the first refuses, counting it once */
    const int rc = lz_serve_submit(r->sched[e], req, out, err, errlen);
    if (rc == LZ_SERVE_OK) {
        lz_serve_route_stats *s = &r->rs[e];
        if (why == 0) s->home++;
        else if (why == 1) s->spilled++;
        else if (why == 2) s->fresh++;
        else s->unresolved++;
        for (int k = 0; resolved && k < nd; k++) {
            char key[LZ_SERVE_HOME_KEY];
            lz_serve_home_key(&docs[k], key);
            lz_serve_homes_set(r->homes, key, e, docs[k].n_tokens);
        }
        if (engine) *engine = e;
    }
    pthread_mutex_unlock(&r->mu);
    free(docs);
    return rc;
}

static void hist_add(lz_serve_hist *a, const lz_serve_hist *b)
{
    for (int i = 0; i <= LZ_SERVE_HIST_BUCKETS; i++) a->count[i] += b->count[i];
    a->n += b->n;
    a->sum += b->sum;
}

static void tier_add(lz_doc_cache_stats *a, const lz_doc_cache_stats *b)
{
    a->hits += b->hits;
    a->misses += b->misses;
    a->admitted += b->admitted;
    a->rejected += b->rejected;
    a->evicted += b->evicted;
    a->bytes_loaded += b->bytes_loaded;
    a->bytes_used += b->bytes_used;
    a->bytes_budget += b->bytes_budget;
    a->n_entries += b->n_entries;
    a->n_held += b->n_held;
    a->bytes_held += b->bytes_held;
}

void lz_serve_stats_add(lz_serve_stats *a, const lz_serve_stats *b)
{
    a->submitted += b->submitted;
    a->ok += b->ok;
    a->failed_client += b->failed_client;
    a->failed_server += b->failed_server;
    a->cancelled += b->cancelled;
    a->rejected_full += b->rejected_full;
    a->prompt_tokens += b->prompt_tokens;
    a->completion_tokens += b->completion_tokens;
    a->steps += b->steps;
    a->step_rows += b->step_rows;
    a->prefills += b->prefills;
    a->prefill_rows += b->prefill_rows;
    a->queued += b->queued;
    a->running += b->running;
    a->peak_running += b->peak_running;
    a->mem_retries += b->mem_retries;
    a->reserved_bytes += b->reserved_bytes;
    a->mem_budget += b->mem_budget;
    hist_add(&a->ttft, &b->ttft);
    hist_add(&a->tpot, &b->tpot);
    hist_add(&a->queue, &b->queue);
    tier_add(&a->host, &b->host);
    tier_add(&a->gpu, &b->gpu);
    a->has_gpu |= b->has_gpu;
    a->grouped_steps += b->grouped_steps;
    a->grouped_blocks_read += b->grouped_blocks_read;
    a->grouped_blocks_placed += b->grouped_blocks_placed;
    a->busy_s += b->busy_s;
    a->decode_s += b->decode_s;
    a->pass_s += b->pass_s;
}

void lz_serve_router_stats(lz_serve_router *r, lz_serve_stats *sum, lz_serve_stats *each)
{
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < r->n; i++) {
        lz_serve_stats st;
        lz_serve_sched_stats(r->sched[i], &st);
        if (each) each[i] = st;
        lz_serve_stats_add(sum, &st);
    }
    sum->peak_running = atomic_load(&r->running.peak); /* at once across the engines, not a sum of peaks */
}

void lz_serve_router_route_stats(lz_serve_router *r, lz_serve_route_stats *each)
{
    pthread_mutex_lock(&r->mu);
    memcpy(each, r->rs, (size_t)r->n * sizeof *each);
    for (int e = 0; r->homes && e < r->n; e++) /* the homes' own counts (planned ones included) */
        lz_serve_homes_engine(r->homes, e, &each[e].homed_docs, &each[e].homed_tokens);
    pthread_mutex_unlock(&r->mu);
}
