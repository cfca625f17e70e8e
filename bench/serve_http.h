/* serve_http.h - bench_serve's HTTP mode: a running lazyserve on 127.0.0.1 under
 * Poisson arrivals at each rate of a sweep (or all at once: rate inf), one thread a
 * request, each placing K documents drawn by Zipf popularity over the corpus's
 * documents (the same stream at every rate) and streaming its answer over a plain
 * socket (SSE, Connection: close); measured per rate as vLLM's benchmark_serving
 * does, from the client's side: requests/s, output tokens/s, time to first token,
 * time per output token and inter-token latency (mean, p50, p99). Header-only, for
 * bench/bench_serve.c. What it leaves out: starting the server (bench/serve_load.sh). */
#ifndef LZ_BENCH_SERVE_HTTP_H
#define LZ_BENCH_SERVE_HTTP_H

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/serve_stats.h"
#include "bench/serve_stream.h"
#include "eval/zipf.h"

typedef struct {
    char *body;          /* the request's JSON */
    double t_send, t_first, t_end;
    double t_event;      /* the first event of the stream (a request whose text never shows, a random
                            model's pieces of UTF-8 held back, times its first token by it) */
    double *itl;         /* gaps between content chunks */
    int n_itl, cap_itl;
    int tokens, ok;
} lz_bs_http_req;

static int lz_bs_port = 8080;

/* Sends r and reads its stream to the end. */
static void *lz_bs_http_request(void *arg)
{
    lz_bs_http_req *r = (lz_bs_http_req *)arg;
    r->t_send = lz_bs_now();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lz_bs_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) { if (fd >= 0) close(fd); return NULL; }
    char head[256];
    const size_t bl = strlen(r->body);
    const int hl = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                            "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", bl);
    if (write(fd, head, (size_t)hl) != hl || write(fd, r->body, bl) != (ssize_t)bl) { close(fd); return NULL; }
    /* the stream: look for "data: " events; chunked framing lines are skipped as non-events */
    size_t cap = 1 << 16, len = 0, scan = 0;
    char *buf = malloc(cap);
    double last = 0;
    int status = 0;
    for (;;) {
        if (len + 4096 > cap) { cap *= 2; char *b = realloc(buf, cap); if (!b) break; buf = b; }
        const ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0) break;
        len += (size_t)n;
        buf[len] = 0;
        if (!status && strstr(buf, "\r\n")) status = atoi(buf + 9);
        char *p;
        while ((p = strstr(buf + scan, "data: ")) && strstr(p, "\n\n")) {
            char *e = strstr(p, "\n\n");
            scan = (size_t)(e + 2 - buf);
            const double t = lz_bs_now();
            if (!strncmp(p + 6, "[DONE]", 6)) { r->ok = status == 200; continue; }
            if (!r->t_event) r->t_event = t;
            json_t *o = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
            json_t *c = json_array_get(json_object_get(o, "choices"), 0);
            const char *txt = json_string_value(json_object_get(c, "text"));
            json_t *u = json_object_get(o, "usage");
            if (u) r->tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
            if (txt && *txt) {
                if (!r->t_first) r->t_first = t;
                else {
                    if (r->n_itl == r->cap_itl) {
                        r->cap_itl = r->cap_itl ? 2 * r->cap_itl : 64;
                        r->itl = realloc(r->itl, (size_t)r->cap_itl * sizeof *r->itl);
                    }
                    r->itl[r->n_itl++] = t - last;
                }
                last = t;
            }
            json_decref(o);
        }
    }
    r->t_end = lz_bs_now();
    free(buf);
    close(fd);
    return NULL;
}

/* The HTTP mode's options and run (see bench/bench_serve.c's header). */
static int lz_bs_http_main(int argc, char **argv)
{
    const char *corpus = "datasets/demo/corpus.jsonl", *rates_arg = "1,2,4,inf", *label = "";
    int n_req = 64, K = 3, max_tokens = 32;
    FILE *json_out = NULL;
    double alpha = 1.0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--port")) lz_bs_port = atoi(v), i++;
        else if (!strcmp(a, "--corpus")) corpus = v, i++;
        else if (!strcmp(a, "--rates")) rates_arg = v, i++;
        else if (!strcmp(a, "--requests")) n_req = atoi(v), i++;
        else if (!strcmp(a, "--k")) K = atoi(v), i++;
        else if (!strcmp(a, "--alpha")) alpha = atof(v), i++;
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v), i++;
        else if (!strcmp(a, "--seed")) seed = (uint64_t)atoll(v), i++;
        else if (!strcmp(a, "--label")) label = v, i++;
        else if (!strcmp(a, "--json")) {
            if (!(json_out = fopen(v, "a"))) { fprintf(stderr, "bench_serve: cannot write %s\n", v); return 1; }
            i++;
        }
        else {
            fprintf(stderr, "usage: bench_serve --port P [--corpus FILE.jsonl] [--rates 1,2,4,inf] [--requests N] "
                    "[--k K] [--alpha A] [--max-tokens M] [--seed S] [--label L] [--json FILE]\n");
            return 2;
        }
    }
    /* the documents: ids and titles of the corpus */
    char **ids = NULL, **titles = NULL, err[512];
    const int N = lz_bs_read_corpus(corpus, &ids, &titles, err, sizeof err);
    if (N < 0) { fprintf(stderr, "bench_serve: %s\n", err); return 1; }
    if (N < K) { fprintf(stderr, "bench_serve: %d documents, fewer than k %d\n", N, K); return 1; }
    double *cdf = malloc((size_t)N * sizeof *cdf);
    const double z = lz_eval_zipf_cdf(cdf, N, alpha);
    printf("%-8s %6s %8s %9s %8s %8s %8s %8s %8s %8s %8s %8s\n", "rate", "done", "req/s", "out tok/s", "ttft ms",
               "p50", "p99", "tpot ms", "p50", "p99", "itl p50", "itl p99");
    for (const char *rp = rates_arg; *rp;) {
        const size_t rl = strcspn(rp, ",");
        char rs[32];
        snprintf(rs, sizeof rs, "%.*s", (int)rl, rp);
        rp += rl + (rp[rl] == ',');
        const double rate = !strcmp(rs, "inf") ? INFINITY : atof(rs);
        lz_eval_rng rng = {seed};
        lz_bs_http_req *rq = (lz_bs_http_req *)calloc((size_t)n_req, sizeof *rq);
        pthread_t *th = calloc((size_t)n_req, sizeof *th);
        int *pick = malloc((size_t)K * sizeof *pick);
        for (int i = 0; i < n_req; i++) { /* the same stream at every rate */
            lz_eval_zipf_draw(pick, K, cdf, N, z, NULL, lz_bs_u01, &rng);
            char docs[4096] = "";
            for (int k = 0; k < K; k++)
                snprintf(docs + strlen(docs), sizeof docs - strlen(docs), "%s\"%s\"", k ? ", " : "", ids[pick[k]]);
            json_t *o = json_pack("{s:s, s:i, s:b, s:b, s:{s:b}}", "prompt", "", "max_tokens", max_tokens, "stream", 1,
                                  "ignore_eos", 1, "stream_options", "include_usage", 1);
            char q[600];
            snprintf(q, sizeof q, "What is known about %s?", titles[pick[K - 1]]);
            json_object_set_new(o, "prompt", json_string(q));
            json_t *d = json_array();
            for (int k = 0; k < K; k++) json_array_append_new(d, json_string(ids[pick[k]]));
            json_object_set_new(o, "documents", d);
            rq[i].body = json_dumps(o, JSON_COMPACT);
            json_decref(o);
        }
        const double t0 = lz_bs_now();
        double at = 0;
        for (int i = 0; i < n_req; i++) {
            if (isfinite(rate)) { /* Poisson arrivals: exponential gaps */
                at += -log(1.0 - lz_eval_rng_u01(&rng)) / rate;
                const double wait = t0 + at - lz_bs_now();
                if (wait > 0) usleep((useconds_t)(wait * 1e6));
            }
            pthread_create(&th[i], NULL, lz_bs_http_request, &rq[i]);
        }
        for (int i = 0; i < n_req; i++) pthread_join(th[i], NULL);
        double t_last = t0;
        int done = 0;
        long tokens = 0, n_itl = 0;
        for (int i = 0; i < n_req; i++) {
            if (rq[i].t_end > t_last) t_last = rq[i].t_end;
            done += rq[i].ok;
            tokens += rq[i].tokens;
            n_itl += rq[i].n_itl;
        }
        double *ttft = malloc((size_t)n_req * sizeof *ttft), *tpot = malloc((size_t)n_req * sizeof *tpot);
        double *itl = malloc((size_t)(n_itl ? n_itl : 1) * sizeof *itl);
        int nt = 0, np = 0, ni = 0;
        for (int i = 0; i < n_req; i++) {
            if (!rq[i].ok || (!rq[i].t_first && !rq[i].t_event)) continue;
            if (!rq[i].t_first) rq[i].t_first = rq[i].t_event; /* no text came: its first event */
            ttft[nt++] = rq[i].t_first - rq[i].t_send;
            if (rq[i].tokens > 1) tpot[np++] = (rq[i].t_end - rq[i].t_first) / (rq[i].tokens - 1);
            for (int j = 0; j < rq[i].n_itl; j++) itl[ni++] = rq[i].itl[j];
        }
        const lz_bs_dist dt = lz_bs_dist_of(ttft, nt), dp = lz_bs_dist_of(tpot, np), di = lz_bs_dist_of(itl, ni);
        const double T[3] = {dt.mean, dt.p50, dt.p99}, P[3] = {dp.mean, dp.p50, dp.p99}, I[3] = {di.mean, di.p50, di.p99};
        const double wall = t_last - t0;
        if (json_out)
            fprintf(json_out, "{\"label\": \"%s\", \"rate\": \"%s\", \"requests\": %d, \"done\": %d, \"wall_s\": %.3f, \"req_s\": %.3f, "
                   "\"out_tok_s\": %.1f, \"ttft_s\": [%.4f, %.4f, %.4f], \"tpot_s\": [%.5f, %.5f, %.5f], "
                   "\"itl_s\": [%.5f, %.5f, %.5f], \"k\": %d, \"alpha\": %g, \"max_tokens\": %d}\n", label, rs, n_req,
                   done, wall, done / wall, tokens / wall, T[0], T[1], T[2], P[0], P[1], P[2], I[0], I[1], I[2], K, alpha,
                   max_tokens);
        printf("%-8s %6d %8.2f %9.1f %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %8.2f %8.2f\n", rs, done, done / wall,
                   tokens / wall, 1e3 * T[0], 1e3 * T[1], 1e3 * T[2], 1e3 * P[0], 1e3 * P[1], 1e3 * P[2], 1e3 * I[1],
                   1e3 * I[2]);
        fflush(stdout);
        for (int i = 0; i < n_req; i++) { free(rq[i].body); free(rq[i].itl); }
        free(rq);
        free(th);
        free(pick);
        free(ttft);
        free(tpot);
        free(itl);
    }
    if (json_out) fclose(json_out);
    for (int i = 0; i < N; i++) { free(ids[i]); free(titles[i]); }
    free(ids);
    free(titles);
    free(cdf);
    return 0;
}

#endif /* LZ_BENCH_SERVE_HTTP_H */
