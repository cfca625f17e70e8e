/* router.h - serving on N engines of one host (an engine per GPU, or N CPU
 * engines): each engine is a query session with its own document cache tiers
 * (its GPU's memory, its host tier) and its own scheduler (serve/sched.h);
 * one submit picks the engine of each request.
 *
 *   affinity  a document gets a home engine the first time a request places
 *             it: the engine that request went to. A request goes to the
 *             engine homing the most of its documents' tokens (where they
 *             are most likely resident); ties, to the least loaded. A
 *             request of new documents only goes to the least loaded engine,
 *             ties to the one homing the fewest tokens, so the corpus is
 *             split across the engines by size and their N budgets hold N
 *             different sets (the aggregate a cache of their sum)
 *   balance   load = queued + running. A request leaves its home when the
 *             home is much busier than the least loaded engine:
 *             load(home) > spill_factor x load(least) + spill_margin; it goes
 *             to the least loaded then (a hot document's flood spills; its
 *             home stays). An engine whose queue is full is passed over;
 *             every queue full: refused (LZ_SERVE_EFULL), as with one.
 *   documents resolved for routing by the router's own store handle (opts
 *             .store, lz_store_open_shared): named ids to their passages
 *             with their tokens; `retrieve` requests by BM25 at submit. The
 *             engine then resolves (retrieves) again, as with one engine, so
 *             the answer, its sources and the cut to the context are what
 *             one engine gives; BM25 runs twice (milliseconds, against the
 *             model's seconds), and the two agree (one store, one query).
 *             A request whose documents cannot be resolved here (an unknown
 *             id, no store handle) goes to the least loaded engine, which
 *             fails it with its status as one engine would.
 *
 * Tickets are the chosen engine's: lz_serve_wait, lz_serve_release (cancel,
 * a client gone) and lz_serve_ticket_docs work on them as with one
 * scheduler. With one engine submit is that engine's lz_serve_submit and
 * nothing is resolved here. What it leaves out: making the engines (the
 * caller: serve/engines.h), HTTP.
 */
#ifndef LZ_SERVE_ROUTER_H
#define LZ_SERVE_ROUTER_H

#include <stdint.h>

#include "serve/homes.h"
#include "serve/sched.h"

typedef struct lz_serve_router lz_serve_router;

#define LZ_SERVE_MAX_ENGINES 64

/* One engine: borrowed; the engine thread alone uses q and store until lz_serve_router_free. */
typedef struct {
    lz_query_session *q;    /* its session: the model, its cache tiers, its backend */
    lz_store *store;        /* its own store handle (a handle serves one thread: lz_store_open_shared) */
    lz_serve_sched_opts so; /* its scheduler's options (tier_stats, on_start: its GPU made current) */
} lz_serve_engine;

typedef struct {
    double spill_factor;   /* "much busier": load(home) > factor x load(least) + margin (default 1.5) */
    int spill_margin;      /* requests (default -1: a quarter of the smallest engine batch, at least 2) */
    lz_store *store;       /* borrowed, optional: the router's handle for resolving documents (used under
                              its lock, on the submitting threads); NULL: ids as named, weighted by count,
                              and retrieve requests to the least loaded engine */
    lz_serve_homes *homes;        /* borrowed, optional: the document homes to start from and keep (a
                              benchmark's runs over the same engines, one router each); NULL: its own */
} lz_serve_router_opts;

void lz_serve_router_opts_default(lz_serve_router_opts *o);

/* Starts a scheduler per engine (engines[0..n), 1 <= n <= LZ_SERVE_MAX_ENGINES). 0, or -1 with a message (those
 * started are stopped). */
int lz_serve_router_new(const lz_serve_engine *engines, int n, const lz_serve_router_opts *o, lz_serve_router **out,
                        char *err, size_t errlen);
/* Stops every scheduler (lz_serve_sched_free: requests end CANCELLED) and frees the router;
 * tickets still held stay readable and must still be released. NULL is a no-op. */
void lz_serve_router_free(lz_serve_router *r);

/* Queues req on the engine routing chose (*engine, may be NULL); as lz_serve_submit. */
int lz_serve_router_submit(lz_serve_router *r, const lz_serve_req *req, lz_serve_ticket **out, int *engine, char *err,
                           size_t errlen);

int lz_serve_router_n(const lz_serve_router *r);
lz_serve_sched *lz_serve_router_sched(lz_serve_router *r, int i);

/* How requests were routed to an engine. */
typedef struct {
    int64_t home;      /* to the engine homing most of their documents */
    int64_t spilled;   /* away from their home (it was much busier, or its queue full) */
    int64_t fresh;     /* of documents no engine homed yet (least loaded) */
    int64_t unresolved;/* documents not resolved here (least loaded) */
    int64_t homed_docs, homed_tokens; /* documents whose home it is, and their tokens */
} lz_serve_route_stats;

/* Every engine's stats into each[0..n) (may be NULL) and their sum into *sum (lz_serve_stats_add:
 * counters, gauges, histograms and cache tiers added; peak_running the most requests that ran at
 * once across the engines, counted as they start and end). */
void lz_serve_router_stats(lz_serve_router *r, lz_serve_stats *sum, lz_serve_stats *each);
/* each[0..n) of the routing counters. */
void lz_serve_router_route_stats(lz_serve_router *r, lz_serve_route_stats *each);
/* sum += x, field by field. */
void lz_serve_stats_add(lz_serve_stats *sum, const lz_serve_stats *x);

#endif /* LZ_SERVE_ROUTER_H */
