/* metrics.c - the Prometheus text page of lazyserve (metrics.h). */
#include "serve/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const int lz_serve_codes[LZ_SERVE_N_CODES] = {200, 400, 404, 405, 413, 429, 500, 503, 499, 408};

void lz_serve_http_count(lz_serve_http_counts *h, int code)
{
    int i = 0;
    while (i < LZ_SERVE_N_CODES && lz_serve_codes[i] != code) i++;
    __atomic_add_fetch(&h->count[i], 1, __ATOMIC_RELAXED);
}

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if (b->s && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *x = realloc(b->s, cap);
        if (!x) { b->oom = 1; return; }
        b->s = x;
        b->cap = cap;
    }
}

static void head(buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(buf *b, const char *name, const char *help, const lz_serve_hist *h)
{
    head(b, name, "histogram", help);
    for (int i = 0; i < LZ_SERVE_HIST_BUCKETS; i++)
        put(b, "%s_bucket{le=\"%g\"} %lld\n", name, lz_serve_hist_bounds[i], (long long)lz_serve_hist_le(h, i));
    put(b, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, (long long)h->n, name, h->sum, name,
        (long long)h->n);
}

static void tier(buf *b, const char *t, const lz_doc_cache_stats *c)
{
    put(b, "lazy_cache_hits_total{tier=\"%s\"} %lld\n", t, (long long)c->hits);
    put(b, "lazy_cache_misses_total{tier=\"%s\"} %lld\n", t, (long long)c->misses);
    put(b, "lazy_cache_evictions_total{tier=\"%s\"} %lld\n", t, (long long)c->evicted);
    put(b, "lazy_cache_bytes{tier=\"%s\"} %lld\n", t, (long long)c->bytes_used);
    put(b, "lazy_cache_budget_bytes{tier=\"%s\"} %lld\n", t, (long long)c->bytes_budget);
    put(b, "lazy_cache_entries{tier=\"%s\"} %lld\n", t, (long long)c->n_entries);
    put(b, "lazy_cache_held_entries{tier=\"%s\"} %lld\n", t, (long long)c->n_held);
}

/* Each engine's own, labelled engine="i". */
static void engines(buf *b, const lz_serve_stats *each, const lz_serve_route_stats *route, int n)
{
    head(b, "lazy_engine_requests_total", "counter", "Requests each engine took, by how they ended.");
    for (int i = 0; i < n; i++) {
        const lz_serve_stats *e = &each[i];
        put(b, "lazy_engine_requests_total{engine=\"%d\",status=\"ok\"} %lld\n", i, (long long)e->ok);
        put(b, "lazy_engine_requests_total{engine=\"%d\",status=\"client_error\"} %lld\n", i, (long long)e->failed_client);
        put(b, "lazy_engine_requests_total{engine=\"%d\",status=\"server_error\"} %lld\n", i, (long long)e->failed_server);
        put(b, "lazy_engine_requests_total{engine=\"%d\",status=\"cancelled\"} %lld\n", i, (long long)e->cancelled);
        put(b, "lazy_engine_requests_total{engine=\"%d\",status=\"rejected_queue_full\"} %lld\n", i,
            (long long)e->rejected_full);
    }
    head(b, "lazy_engine_queue_length", "gauge", "Requests waiting on each engine.");
    for (int i = 0; i < n; i++) put(b, "lazy_engine_queue_length{engine=\"%d\"} %d\n", i, each[i].queued);
    head(b, "lazy_engine_running_requests", "gauge", "Requests in each engine's running batch.");
    for (int i = 0; i < n; i++) put(b, "lazy_engine_running_requests{engine=\"%d\"} %d\n", i, each[i].running);
    head(b, "lazy_engine_completion_tokens_total", "counter", "Tokens each engine generated for answered requests.");
    for (int i = 0; i < n; i++)
        put(b, "lazy_engine_completion_tokens_total{engine=\"%d\"} %lld\n", i, (long long)each[i].completion_tokens);
    head(b, "lazy_engine_decode_steps_total", "counter", "Each engine's batched decode passes.");
    for (int i = 0; i < n; i++) put(b, "lazy_engine_decode_steps_total{engine=\"%d\"} %lld\n", i, (long long)each[i].steps);
    head(b, "lazy_engine_busy_seconds_total", "counter", "Each engine's time running the model.");
    for (int i = 0; i < n; i++) put(b, "lazy_engine_busy_seconds_total{engine=\"%d\"} %.6f\n", i, each[i].busy_s);
    head(b, "lazy_engine_cache_hits_total", "counter", "Each engine's document cache lookups that hit, per tier "
         "(also: misses, bytes, budget).");
    for (int i = 0; i < n; i++)
        for (int t = 0; t < 2; t++) {
            const lz_doc_cache_stats *c = t ? &each[i].gpu : &each[i].host;
            const char *tn = t ? "gpu" : "host";
            if (t && !each[i].has_gpu) continue;
            put(b, "lazy_engine_cache_hits_total{engine=\"%d\",tier=\"%s\"} %lld\n", i, tn, (long long)c->hits);
            put(b, "lazy_engine_cache_misses_total{engine=\"%d\",tier=\"%s\"} %lld\n", i, tn, (long long)c->misses);
            put(b, "lazy_engine_cache_bytes{engine=\"%d\",tier=\"%s\"} %lld\n", i, tn, (long long)c->bytes_used);
            put(b, "lazy_engine_cache_budget_bytes{engine=\"%d\",tier=\"%s\"} %lld\n", i, tn, (long long)c->bytes_budget);
        }
    head(b, "lazy_route_requests_total", "counter", "Requests routed to each engine: to their documents' home, "
         "spilled from a much busier home, of documents new to every engine, or not resolved for routing.");
    for (int i = 0; i < n; i++) {
        const lz_serve_route_stats *r = &route[i];
        put(b, "lazy_route_requests_total{engine=\"%d\",route=\"home\"} %lld\n", i, (long long)r->home);
        put(b, "lazy_route_requests_total{engine=\"%d\",route=\"spilled\"} %lld\n", i, (long long)r->spilled);
        put(b, "lazy_route_requests_total{engine=\"%d\",route=\"fresh\"} %lld\n", i, (long long)r->fresh);
        put(b, "lazy_route_requests_total{engine=\"%d\",route=\"unresolved\"} %lld\n", i, (long long)r->unresolved);
    }
    head(b, "lazy_route_homed_documents", "gauge", "Documents whose home is each engine (and lazy_route_homed_tokens).");
    for (int i = 0; i < n; i++)
        put(b, "lazy_route_homed_documents{engine=\"%d\"} %lld\nlazy_route_homed_tokens{engine=\"%d\"} %lld\n", i,
            (long long)route[i].homed_docs, i, (long long)route[i].homed_tokens);
}

char *lz_serve_metrics_text(const lz_serve_stats *st, const lz_serve_stats *each, const lz_serve_route_stats *route,
                            int n_engines, const lz_serve_http_counts *h, double uptime_s)
{
    buf b = {0};
    head(&b, "lazy_requests_total", "counter", "Requests the scheduler took, by how they ended.");
    put(&b, "lazy_requests_total{status=\"ok\"} %lld\n", (long long)st->ok);
    put(&b, "lazy_requests_total{status=\"client_error\"} %lld\n", (long long)st->failed_client);
    put(&b, "lazy_requests_total{status=\"server_error\"} %lld\n", (long long)st->failed_server);
    put(&b, "lazy_requests_total{status=\"cancelled\"} %lld\n", (long long)st->cancelled);
    put(&b, "lazy_requests_total{status=\"rejected_queue_full\"} %lld\n", (long long)st->rejected_full);
    head(&b, "lazy_http_responses_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < LZ_SERVE_N_CODES; i++)
        put(&b, "lazy_http_responses_total{code=\"%d\"} %lld\n", lz_serve_codes[i], (long long)h->count[i]);
    put(&b, "lazy_http_responses_total{code=\"other\"} %lld\n", (long long)h->count[LZ_SERVE_N_CODES]);
    head(&b, "lazy_client_disconnects_total", "counter", "Clients gone before their answer ended.");
    put(&b, "lazy_client_disconnects_total %lld\n", (long long)h->disconnects);
    hist(&b, "lazy_ttft_seconds", "Time from a request's arrival to its first token.", &st->ttft);
    hist(&b, "lazy_tpot_seconds", "Mean time per output token after the first, per request.", &st->tpot);
    hist(&b, "lazy_queue_seconds", "Time from arrival to admission into the running batch.", &st->queue);
    head(&b, "lazy_queue_length", "gauge", "Requests waiting (not yet running).");
    put(&b, "lazy_queue_length %d\n", st->queued);
    head(&b, "lazy_running_requests", "gauge", "Requests in the running batch.");
    put(&b, "lazy_running_requests %d\n", st->running);
    head(&b, "lazy_running_requests_peak", "gauge", "The most requests that ran at once.");
    put(&b, "lazy_running_requests_peak %d\n", st->peak_running);
    head(&b, "lazy_memory_retries_total", "counter", "Begins that found no memory after admission and went back to "
         "the queue's head until a running request ended.");
    put(&b, "lazy_memory_retries_total %lld\n", (long long)st->mem_retries);
    head(&b, "lazy_reserved_bytes", "gauge", "Memory the running requests hold (their KV and documents).");
    put(&b, "lazy_reserved_bytes %lld\n", (long long)st->reserved_bytes);
    head(&b, "lazy_memory_budget_bytes", "gauge", "The budget admission keeps the running requests under.");
    put(&b, "lazy_memory_budget_bytes %lld\n", (long long)st->mem_budget);
    head(&b, "lazy_prompt_tokens_total", "counter", "Prompt tokens of answered requests.");
    put(&b, "lazy_prompt_tokens_total %lld\n", (long long)st->prompt_tokens);
    head(&b, "lazy_completion_tokens_total", "counter", "Tokens generated for answered requests.");
    put(&b, "lazy_completion_tokens_total %lld\n", (long long)st->completion_tokens);
    head(&b, "lazy_decode_steps_total", "counter", "Batched decode passes.");
    put(&b, "lazy_decode_steps_total %lld\n", (long long)st->steps);
    head(&b, "lazy_decode_rows_total", "counter", "Sequences those passes ran (their sum: the mean batch is rows / steps).");
    put(&b, "lazy_decode_rows_total %lld\n", (long long)st->step_rows);
    head(&b, "lazy_prefill_passes_total", "counter", "Batched question prefills and the requests they ran.");
    put(&b, "lazy_prefill_passes_total %lld\nlazy_prefill_requests_total %lld\n", (long long)st->prefills,
        (long long)st->prefill_rows);
    head(&b, "lazy_engine_busy_seconds_total", "counter", "Engine time spent running the model.");
    put(&b, "lazy_engine_busy_seconds_total %.6f\n", st->busy_s);
    head(&b, "lazy_uptime_seconds", "gauge", "Seconds since the server started.");
    put(&b, "lazy_uptime_seconds %.3f\n", uptime_s);
    head(&b, "lazy_cache_hits_total", "counter", "Document cache lookups that hit, per tier "
         "(also: misses, evictions, bytes, budget, entries, entries held by running requests).");
    tier(&b, "host", &st->host);
    if (st->has_gpu) tier(&b, "gpu", &st->gpu);
    if (st->has_gpu) {
        head(&b, "lazy_decode_grouped_steps_total", "counter",
             "Batched decode passes whose attention read each shared document once for the rows placing it.");
        put(&b, "lazy_decode_grouped_steps_total %lld\n", (long long)st->grouped_steps);
        head(&b, "lazy_decode_grouped_blocks_total", "counter",
             "Document blocks (64 keys of every kv head) of those passes: read, and placed by their rows.");
        put(&b, "lazy_decode_grouped_blocks_total{of=\"read\"} %lld\nlazy_decode_grouped_blocks_total{of=\"placed\"} %lld\n",
            (long long)st->grouped_blocks_read, (long long)st->grouped_blocks_placed);
    }
    if (n_engines > 1 && each && route) {
        head(&b, "lazy_engines", "gauge", "Engines requests are routed to.");
        put(&b, "lazy_engines %d\n", n_engines);
        engines(&b, each, route, n_engines);
    }
    if (b.oom) { free(b.s); return NULL; }
    return b.s;
}
