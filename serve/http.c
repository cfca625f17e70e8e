/* http.c - the routes of lazyserve on libmicrohttpd (http.h). Each
 * connection has its thread, so a handler may wait for its request: a whole
 * response is built when the answer ends; a stream is a callback response
 * whose reader waits for the next piece and writes it as an SSE chunk. While
 * waiting, the client's socket is polled: a client gone cancels its request.
 * What it leaves out: the JSON (openai.c), the metrics text (metrics.c). */
#define _GNU_SOURCE /* POLLRDHUP */
#include "serve/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/clock.h"

struct lz_serve_http {
    struct MHD_Daemon *d;
    lz_serve_http_opts o;
    int port;
    atomic_long next_id;
    double t_start;
    lz_serve_http_counts counts;
};

/* One request's body, gathered across the handler's calls. */
typedef struct {
    char *body;
    size_t len, cap;
    int answered; /* a response is queued already (413 before the body's end) */
    int too_large;    /* past --max-body: the rest is read and dropped, then 413 */
    size_t discarded;
} upload;

/* ---- responses ---- */

static enum MHD_Result respond(lz_serve_http *h, struct MHD_Connection *c, int status, const char *type, char *text,
                               int retry_after)
{
    if (!text) { status = 500; text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}"); }
    struct MHD_Response *r = MHD_create_response_from_buffer(text ? strlen(text) : 0, text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    const enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    lz_serve_http_count(&h->counts, status);
    return rc;
}

static enum MHD_Result respond_json(lz_serve_http *h, struct MHD_Connection *c, int status, char *json)
{
    return respond(h, c, status, "application/json", json, 0);
}

static enum MHD_Result respond_error(lz_serve_http *h, struct MHD_Connection *c, int status, const char *msg,
                                     const char *param)
{
    return respond(h, c, status, "application/json", lz_oai_error(status, msg, param),
                   status == 429 ? h->o.retry_after_s : 0);
}

/* Whether the client closed its end (a disconnect while its answer is made). */
static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    char b;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- streaming ---- */

typedef struct {
    lz_serve_http *h;
    struct MHD_Connection *c;
    lz_serve_ticket *t;
    lz_oai_request rq;
    char id[48];
    long created;
    size_t have;     /* bytes of the answer sent */
    int state, first, finished, gone;
    char *out;       /* SSE text ready to send: out[pos..len) */
    size_t len, pos;
} stream;

static void out_add(stream *x, char *s)
{
    if (!s) return;
    const size_t n = strlen(s);
    if (x->pos == x->len) x->pos = x->len = 0;
    char *o = realloc(x->out, x->len + n + 1);
    if (o) {
        memcpy(o + x->len, s, n + 1);
        x->out = o;
        x->len += n;
    }
    free(s);
}

/* The chunks an update brings: text, and at the end the finish, the usage and [DONE]. */
static void stream_update(stream *x, const lz_serve_update *u)
{
    const char *model = x->h->o.defaults.model;
    int nd;
    const lz_query_doc *docs = lz_serve_ticket_docs(x->t, &nd);
    if (u->len) {
        out_add(x, lz_oai_chunk(&x->rq, x->id, x->created, model, u->text, u->len, x->first, NULL, docs, nd));
        x->first = 0;
    }
    x->have = u->total;
    x->state = u->state;
    if (u->state < LZ_SERVE_DONE) return;
    if (u->state == LZ_SERVE_DONE) {
        out_add(x, lz_oai_chunk(&x->rq, x->id, x->created, model, "", 0, x->first, u->finish ? u->finish : "stop", docs, nd));
        if (x->rq.include_usage) out_add(x, lz_oai_usage_chunk(&x->rq, x->id, x->created, model, u));
    } else { /* failed or cancelled after the headers went: an error event, then the end */
        char *e = lz_oai_error(u->state == LZ_SERVE_FAILED ? (u->status ? u->status : 500) : 503,
                               u->state == LZ_SERVE_FAILED ? u->error : "the server is stopping", NULL);
        if (e) {
            char *ev = malloc(strlen(e) + 9);
            if (ev) sprintf(ev, "data: %s\n\n", e);
            out_add(x, ev);
            free(e);
        }
    }
    out_add(x, strdup("data: [DONE]\n\n"));
    x->finished = 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *x = cls;
    (void)pos;
    for (;;) {
        if (x->pos < x->len) {
            const size_t n = x->len - x->pos < max ? x->len - x->pos : max;
            memcpy(buf, x->out + x->pos, n);
            x->pos += n;
            return (ssize_t)n;
        }
        if (x->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        lz_serve_update u;
        const int changed = lz_serve_wait(x->t, x->have, x->state, 0.2, &u);
        if (changed) stream_update(x, &u);
        free(u.text);
        if (!changed && client_gone(x->c)) {
            x->gone = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls)
{
    stream *x = cls;
    if (!x->finished || x->gone) __atomic_add_fetch(&x->h->counts.disconnects, 1, __ATOMIC_RELAXED);
    lz_serve_release(x->t); /* cancels it when it has not ended */
    lz_oai_request_free(&x->rq);
    free(x->out);
    free(x);
}

/* ---- the completion routes ---- */

static enum MHD_Result completion(lz_serve_http *h, struct MHD_Connection *c, lz_oai_kind kind, const upload *up)
{
    char err[1024];
    const char *param = NULL;
    lz_oai_request rq;
    int status = lz_oai_parse(kind, up->body ? up->body : "", up->len, &h->o.defaults, &rq, err, sizeof err, &param);
    if (status) return respond_error(h, c, status, err, param);
    lz_serve_ticket *t;
    const int src = lz_serve_router_submit(h->o.router, &rq.req, &t, NULL, err, sizeof err);
    if (src) {
        lz_oai_request_free(&rq);
        status = src == LZ_SERVE_EFULL ? 429 : src == LZ_SERVE_ESTOPPED ? 503 : src == LZ_SERVE_EINVAL ? 400 : 500;
        return respond_error(h, c, status, err, NULL);
    }
    char id[48];
    snprintf(id, sizeof id, "%s-%ld", kind == LZ_OAI_CHAT ? "chatcmpl" : "cmpl", atomic_fetch_add(&h->next_id, 1));
    const long created = (long)time(NULL);
    /* wait for the documents to resolve (a stream's status is known then), or the end (a whole
     * response: woken by state changes only, its text taken at the end); the client's socket
     * is looked at on every wake */
    lz_serve_update u = {0};
    size_t have = 0;
    int state = LZ_SERVE_PENDING;
    char *text = NULL;
    for (;;) {
        lz_serve_update v;
        lz_serve_wait(t, (size_t)-1, state, 0.2, &v);
        free(v.text);
        v.text = NULL;
        u = v;
        state = v.state;
        if (state >= LZ_SERVE_DONE || (rq.stream && state != LZ_SERVE_PENDING)) break;
        if (client_gone(c)) { /* gone before its answer: cancelled, no response */
            __atomic_add_fetch(&h->counts.disconnects, 1, __ATOMIC_RELAXED);
            lz_serve_release(t);
            lz_oai_request_free(&rq);
            return MHD_NO;
        }
    }
    if (!rq.stream) { /* the whole text, how it ended */
        lz_serve_wait(t, 0, state, 0, &u);
        text = u.text;
        u.text = NULL;
        have = u.len;
    }
    if (state == LZ_SERVE_FAILED || state == LZ_SERVE_CANCELLED) {
        lz_serve_release(t);
        lz_oai_request_free(&rq);
        free(text);
        return respond_error(h, c, state == LZ_SERVE_FAILED ? (u.status ? u.status : 500) : 503,
                             state == LZ_SERVE_FAILED ? u.error : "the server is stopping", NULL);
    }
    if (!rq.stream) {
        int nd;
        const lz_query_doc *docs = lz_serve_ticket_docs(t, &nd);
        char *body = lz_oai_response(&rq, id, created, h->o.defaults.model, text ? text : "", have, &u, docs, nd);
        lz_serve_release(t);
        lz_oai_request_free(&rq);
        free(text);
        return respond_json(h, c, 200, body);
    }
    stream *x = calloc(1, sizeof *x);
    if (!x) {
        lz_serve_release(t);
        lz_oai_request_free(&rq);
        return respond_error(h, c, 500, "out of memory", NULL);
    }
    *x = (stream){.h = h, .c = c, .t = t, .rq = rq, .created = created, .state = LZ_SERVE_PENDING, .first = 1};
    snprintf(x->id, sizeof x->id, "%s", id);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, x, stream_free);
    if (!r) { stream_free(x); return MHD_NO; }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    const enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    lz_serve_http_count(&h->counts, 200);
    return rc;
}

/* ---- the other routes ---- */

static enum MHD_Result route_get(lz_serve_http *h, struct MHD_Connection *c, const char *url)
{
    if (!strcmp(url, "/health")) {
        lz_serve_stats st;
        lz_serve_router_stats(h->o.router, &st, NULL);
        json_t *o = json_pack("{s:s, s:i, s:i}", "status", "ok", "running", st.running, "queued", st.queued);
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return respond_json(h, c, 200, s);
    }
    if (!strcmp(url, "/v1/models")) {
        json_t *o = json_pack("{s:s, s:[{s:s, s:s, s:i, s:s}]}", "object", "list", "data", "id", h->o.defaults.model,
                              "object", "model", "created", 0, "owned_by", "lazy");
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return respond_json(h, c, 200, s);
    }
    if (!strcmp(url, "/metrics")) {
        const int n = lz_serve_router_n(h->o.router);
        lz_serve_stats st, *each = calloc((size_t)n, sizeof *each);
        lz_serve_route_stats *route = calloc((size_t)n, sizeof *route);
        if (!each || !route) { free(each); free(route); return respond_error(h, c, 500, "out of memory", NULL); }
        lz_serve_router_stats(h->o.router, &st, each);
        lz_serve_router_route_stats(h->o.router, route);
        char *text = lz_serve_metrics_text(&st, each, route, n, &h->counts, lz_now_s() - h->t_start);
        free(each);
        free(route);
        return respond(h, c, 200, "text/plain; version=0.0.4; charset=utf-8", text, 0);
    }
    return 0;
}

static int known_post(const char *url) { return !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions"); }
static int known_get(const char *url) { return !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics"); }

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **con_cls)
{
    lz_serve_http *h = cls;
    (void)version;
    upload *up = *con_cls;
    const int post = !strcmp(method, "POST");
    if (!up) { /* the headers: a body announced past the limit is refused before it comes */
        if (!(up = calloc(1, sizeof *up))) return MHD_NO;
        *con_cls = up;
        const char *cl = post ? MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH) : NULL;
        if (cl && strtoull(cl, NULL, 10) > h->o.max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "the body has %s bytes, more than the server takes (%zu: --max-body)", cl,
                     h->o.max_body);
            up->answered = 1;
            return respond_error(h, c, 413, msg, NULL);
        }
        return MHD_YES;
    }
    if (*size) { /* a piece of the body */
        if (!up->answered && !up->too_large && up->len + *size > h->o.max_body) up->too_large = 1;
        if (up->too_large) { /* read to its end (so the client reads the 413), unless it never ends */
            up->discarded += *size;
            *size = 0;
            if (up->discarded <= 64 * h->o.max_body) return MHD_YES;
            up->answered = 1;
            return respond_error(h, c, 413, "the body is far more than the server takes (--max-body)", NULL);
        }
        if (!up->answered) {
            if (up->len + *size > up->cap) {
                size_t cap = up->cap ? up->cap * 2 : 4096;
                while (cap < up->len + *size) cap *= 2;
                char *b = realloc(up->body, cap);
                if (!b) return MHD_NO;
                up->body = b;
                up->cap = cap;
            }
            memcpy(up->body + up->len, data, *size);
            up->len += *size;
        }
        *size = 0;
        return MHD_YES;
    }
    if (up->answered) return MHD_YES;
    up->answered = 1;
    if (up->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body is more than the server takes (%zu bytes: --max-body)", h->o.max_body);
        return respond_error(h, c, 413, msg, NULL);
    }
    if (post && known_post(url))
        return completion(h, c, strcmp(url, "/v1/chat/completions") ? LZ_OAI_COMPLETIONS : LZ_OAI_CHAT, up);
    if (!strcmp(method, "GET") && known_get(url)) return route_get(h, c, url);
    char msg[300];
    if (known_post(url) || known_get(url)) {
        snprintf(msg, sizeof msg, "%s takes %s, not %s", url, known_post(url) ? "POST" : "GET", method);
        return respond_error(h, c, 405, msg, NULL);
    }
    snprintf(msg, sizeof msg, "no route %s %.200s (POST /v1/completions, /v1/chat/completions; GET /v1/models, "
             "/health, /metrics)", method, url);
    return respond_error(h, c, 404, msg, NULL);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    upload *up = *con_cls;
    if (up) free(up->body);
    free(up);
    *con_cls = NULL;
}

int lz_serve_http_start(const lz_serve_http_opts *o, lz_serve_http **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_serve_http *h = calloc(1, sizeof *h);
    if (!h) { snprintf(err, errlen, "out of memory"); return -1; }
    h->o = *o;
    h->t_start = lz_now_s();
    atomic_init(&h->next_id, 1);
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    const char *host = o->host ? o->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)o->port);
        addr = (const struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)o->port);
        addr = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "--host %s: expected an IPv4 or IPv6 address (127.0.0.1, ::1, 0.0.0.0)", host);
        free(h);
        return -1;
    }
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handler, h, MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(o->max_connections > 0 ? o->max_connections : 256),
                            MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "cannot listen on %s port %d (in use, or not an address of this machine)", host, o->port);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    *out = h;
    return 0;
}

int lz_serve_http_port(const lz_serve_http *h) { return h->port; }

void lz_serve_http_stop(lz_serve_http *h)
{
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
