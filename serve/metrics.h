/* metrics.h - lazyserve's /metrics in the Prometheus text format (0.0.4):
 * requests by outcome and HTTP responses by status, the TTFT, time per
 * output token and queueing histograms, tokens, decode steps and the mean
 * batch, queue length and running requests, memory reserved against the
 * budget, and the document cache's counters per tier (host; gpu with a
 * backend), held entries included. With several engines (serve/router.h)
 * those are the engines' sums, and each engine's own follow under lazy_engine_*
 * names with an engine="i" label (requests, queue, running, steps, busy time,
 * cache per tier), with how requests were routed (lazy_route_*). */
#ifndef LZ_SERVE_METRICS_H
#define LZ_SERVE_METRICS_H

#include <stdint.h>

#include "serve/router.h"
#include "serve/sched.h"

/* HTTP responses by status code, counted by the server (errors that never reach the
 * scheduler: bad JSON, bodies too large, a full queue). */
#define LZ_SERVE_N_CODES 10
extern const int lz_serve_codes[LZ_SERVE_N_CODES]; /* 200, 400, 404, 405, 413, 429, 500, 503, ... */
typedef struct {
    int64_t count[LZ_SERVE_N_CODES + 1]; /* the last: any other code */
    int64_t disconnects;                 /* clients gone before their answer ended */
} lz_serve_http_counts;

/* Counts one response of status code (thread-safe). */
void lz_serve_http_count(lz_serve_http_counts *h, int code);

/* The metrics page, malloc'd NUL-terminated text (NULL when out of memory): st the totals
 * (the sum of the engines'); with n_engines > 1 each[0..n) and route[0..n) per engine too. */
char *lz_serve_metrics_text(const lz_serve_stats *st, const lz_serve_stats *each, const lz_serve_route_stats *route,
                            int n_engines, const lz_serve_http_counts *h, double uptime_s);

#endif /* LZ_SERVE_METRICS_H */
