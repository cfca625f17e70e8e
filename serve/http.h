/* http.h - lazyserve's HTTP server on libmicrohttpd (a thread a
 * connection): POST /v1/completions and /v1/chat/completions (whole JSON
 * responses, or server-sent events with `stream`), GET /v1/models, /health,
 * /metrics. Requests go to the scheduler (serve/sched.h); a client that
 * disconnects is noticed while it waits (its socket is watched) and its
 * request cancelled. Requests go through the router (serve/router.h) to one of
 * its engines; /health and /metrics show their sums (and /metrics each one's). Errors are OpenAI-style JSON bodies: malformed JSON and
 * bad fields 400, unknown document ids 404, a body past the limit 413, a
 * full queue 429 with Retry-After, the server stopping 503; the server goes
 * on after every one. */
#ifndef LZ_SERVE_HTTP_H
#define LZ_SERVE_HTTP_H

#include <stddef.h>

#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/router.h"
#include "serve/sched.h"

typedef struct lz_serve_http lz_serve_http;

typedef struct {
    const char *host;     /* address to bind: an IPv4 or IPv6 literal (default 127.0.0.1) */
    int port;             /* 0: any free port (lz_serve_http_port says which) */
    size_t max_body;      /* request bodies past this many bytes: 413 */
    int max_connections;  /* connections at once (each a thread) */
    int retry_after_s;    /* Retry-After of a 429 */
    lz_oai_defaults defaults;
    lz_serve_router *router; /* borrowed: its engines' schedulers (one engine: lazyserve's default) */
} lz_serve_http_opts;

/* Binds and starts serving. 0, or -1 with a message (address in use, bad host, ...). */
int lz_serve_http_start(const lz_serve_http_opts *o, lz_serve_http **out, char *err, size_t errlen);
/* The port bound. */
int lz_serve_http_port(const lz_serve_http *h);
/* Stops accepting, waits for every connection's thread (requests still running: stop the
 * scheduler first, so they end), frees it. NULL is a no-op. */
void lz_serve_http_stop(lz_serve_http *h);

#endif /* LZ_SERVE_HTTP_H */
