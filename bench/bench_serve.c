/* bench_serve.c - a load generator for lazyserve in the manner of vLLM's
 * benchmark_serving: requests arrive by a Poisson process at each rate of a
 * sweep (or all at once: rate inf), each placing K documents drawn by Zipf
 * popularity (eval/zipf.h) over the corpus's documents and streaming its
 * answer; measured per rate: requests/s, output tokens/s, time to first token,
 * time per output token and inter-token latency (mean, p50, p99). One thread
 * a request; HTTP over a plain socket (SSE, Connection: close).
 *
 *   bench_serve --port P --corpus corpus.jsonl [--rates 1,2,4,inf] [--requests N]
 *               [--k K] [--alpha A] [--max-tokens M] [--seed S] [--label L] [--json FILE]
 *
 * Or in-process (--store): the same requests straight to the scheduler
 * (serve/sched.h) over a session of this process, no HTTP (the GPU machine
 * need not have libmicrohttpd), at fixed concurrencies: C clients, each
 * submitting its next request when the last one ends; measured per level:
 * requests/s, output tokens/s, TTFT and TPOT (mean, p50, p99, the
 * scheduler's timings), the mean decode batch. With --gpu (CUDA builds) on
 * the GPU engine, first serial (one sequence, lazyquery's path: the baseline)
 * then batched (slots for the largest concurrency), each level's throughput
 * also as a ratio to serial's; a warm-up round first (the documents resident,
 * the kernels loaded).
 *
 *   bench_serve --store DIR --model M --corpus corpus.jsonl [--gpu] [--mode lazy]
 *               [--concurrency 1,8,32,64] [--requests N] [--k K] [--alpha A] [--max-tokens M]
 *               [--seed S] [--label L] [--json FILE] [--gpu-seq-tokens T] [--no-serial]
 *
 * Fixed output lengths: every request asks max_tokens with ignore_eos. What it
 * leaves out: starting the server (bench/serve_load.sh does). */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "eval/zipf.h"
#include "query/session.h"
#include "serve/sched.h"
#ifdef LZ_CUDA
#include "eval/gpu_backend.h"
#endif

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    char *body;          /* the request's JSON */
    double t_send, t_first, t_end;
    double *itl;         /* gaps between content chunks */
    int n_itl, cap_itl;
    int tokens, ok;
} request;

static int port = 8080;

/* Sends r and reads its stream to the end. */
static void *run_request(void *arg)
{
    request *r = arg;
    r->t_send = now_s();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
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
            const double t = now_s();
            if (!strncmp(p + 6, "[DONE]", 6)) { r->ok = status == 200; continue; }
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
    r->t_end = now_s();
    free(buf);
    close(fd);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* mean, p50, p99 of v[0..n) (sorted here) */
static void stats3(double *v, int n, double out[3])
{
    out[0] = out[1] = out[2] = 0;
    if (!n) return;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    for (int i = 0; i < n; i++) out[0] += v[i];
    out[0] /= n;
    out[1] = v[(int)(0.5 * (n - 1))];
    out[2] = v[(int)ceil(0.99 * (n - 1))];
}

static double u01(void *ctx) { return lz_eval_rng_u01(ctx); }

/* ---- in-process: the scheduler at fixed concurrencies ---- */

typedef struct {
    char *question;
    const char *docs[64];
    int n_docs;
} draw;

typedef struct {
    lz_serve_sched *s;
    const draw *d;
    int n, max_tokens;
    int next;               /* the next request to submit (under mu) */
    pthread_mutex_t mu;
    double *ttft, *tpot;    /* per request, the scheduler's timings */
    int *tokens, *ok;
} level;

/* One client: its next request when the last one ended, until none is left. */
static void *client(void *arg)
{
    level *L = arg;
    for (;;) {
        pthread_mutex_lock(&L->mu);
        const int i = L->next < L->n ? L->next++ : -1;
        pthread_mutex_unlock(&L->mu);
        if (i < 0) return NULL;
        const lz_serve_req rq = {.question = L->d[i].question, .doc_ids = L->d[i].docs, .n_doc_ids = L->d[i].n_docs,
                                 .max_tokens = L->max_tokens, .top_p = 1.0f, .seed = (uint64_t)i + 1, .ignore_eos = 1};
        lz_serve_ticket *t;
        char err[512];
        if (lz_serve_submit(L->s, &rq, &t, err, sizeof err) != LZ_SERVE_OK) {
            fprintf(stderr, "bench_serve: request %d: %s\n", i, err);
            continue;
        }
        size_t have = 0;
        int state = LZ_SERVE_PENDING;
        lz_serve_update u;
        for (;;) {
            lz_serve_wait(t, have, state, 60.0, &u);
            have += u.len;
            state = u.state;
            free(u.text);
            if (state >= LZ_SERVE_DONE) break;
        }
        L->ok[i] = state == LZ_SERVE_DONE;
        if (state == LZ_SERVE_FAILED) fprintf(stderr, "bench_serve: request %d failed: %s\n", i, u.error);
        L->ttft[i] = u.timing.ttft_s;
        L->tpot[i] = u.timing.tpot_s;
        L->tokens[i] = u.timing.n_completion;
        lz_serve_release(t);
    }
}

/* Requests d[0..n) by C clients through a scheduler of max_running over q; prints and appends
 * one line; returns output tokens a second. */
static double run_level(lz_query_session *q, lz_store *st, const char *label, int C, int max_running, const draw *d,
                        int n, int max_tokens, FILE *json_out, double serial_tps, int quiet)
{
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_running = max_running;
    so.max_queue = n + C;
    so.mem_budget = (size_t)1 << 40; /* admission by the backend's memory and slots, not a host estimate */
    so.max_prefill = C < 16 ? C : 16;
    lz_serve_sched *s;
    char err[512];
    if (lz_serve_sched_new(q, st, &so, &s, err, sizeof err)) { fprintf(stderr, "bench_serve: %s\n", err); return 0; }
    level L = {.s = s, .d = d, .n = n, .max_tokens = max_tokens};
    pthread_mutex_init(&L.mu, NULL);
    L.ttft = calloc((size_t)n, sizeof *L.ttft), L.tpot = calloc((size_t)n, sizeof *L.tpot);
    L.tokens = calloc((size_t)n, sizeof *L.tokens), L.ok = calloc((size_t)n, sizeof *L.ok);
    pthread_t *th = calloc((size_t)C, sizeof *th);
    const double t0 = now_s();
    for (int c = 0; c < C; c++) pthread_create(&th[c], NULL, client, &L);
    for (int c = 0; c < C; c++) pthread_join(th[c], NULL);
    const double wall = now_s() - t0;
    lz_serve_stats ss;
    lz_serve_sched_stats(s, &ss);
    lz_serve_sched_free(s);
    int done = 0, nt = 0, np = 0;
    long tokens = 0;
    double *ttft = malloc((size_t)n * sizeof *ttft), *tpot = malloc((size_t)n * sizeof *tpot);
    for (int i = 0; i < n; i++) {
        if (!L.ok[i]) continue;
        done++;
        tokens += L.tokens[i];
        ttft[nt++] = L.ttft[i];
        if (L.tokens[i] > 1) tpot[np++] = L.tpot[i];
    }
    double T[3], P[3];
    stats3(ttft, nt, T);
    stats3(tpot, np, P);
    const double tps = tokens / wall, batch = ss.steps ? (double)ss.step_rows / ss.steps : 0;
    if (!quiet) {
        printf("%-10s %5d %6d %8.2f %9.1f %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %6.1f\n", label, C, done, done / wall,
               tps, 1e3 * T[0], 1e3 * T[1], 1e3 * T[2], 1e3 * P[0], 1e3 * P[1], 1e3 * P[2], batch);
        if (serial_tps > 0) printf("%-10s %5s %6s %8s %8.1fx  (output tokens/s against serial)\n", "", "", "", "", tps / serial_tps);
        fflush(stdout);
    }
    if (json_out && !quiet)
        fprintf(json_out, "{\"label\": \"%s\", \"concurrency\": %d, \"requests\": %d, \"done\": %d, \"wall_s\": %.3f, "
                "\"req_s\": %.3f, \"out_tok_s\": %.1f, \"ttft_s\": [%.4f, %.4f, %.4f], \"tpot_s\": [%.5f, %.5f, %.5f], "
                "\"mean_batch\": %.2f, \"peak_running\": %d, \"vs_serial\": %.2f, \"max_tokens\": %d}\n", label, C, n,
                done, wall, done / wall, tps, T[0], T[1], T[2], P[0], P[1], P[2], batch, ss.peak_running,
                serial_tps > 0 ? tps / serial_tps : 1.0, max_tokens);
    pthread_mutex_destroy(&L.mu);
    free(L.ttft); free(L.tpot); free(L.tokens); free(L.ok);
    free(th); free(ttft); free(tpot);
    return tps;
}

/* The ids and titles (the id where none) of a JSONL corpus into malloc'd arrays: their count,
 * or -1 with a message when the file cannot be read. */
static int read_corpus(const char *corpus, char ***ids_out, char ***titles_out)
{
    FILE *f = fopen(corpus, "r");
    if (!f) { fprintf(stderr, "bench_serve: cannot read %s\n", corpus); return -1; }
    char **ids = NULL, **titles = NULL, *line = NULL;
    size_t lcap = 0;
    int N = 0;
    while (getline(&line, &lcap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(o, "id")), *t = json_string_value(json_object_get(o, "title"));
        if (id) {
            ids = realloc(ids, (size_t)(N + 1) * sizeof *ids);
            titles = realloc(titles, (size_t)(N + 1) * sizeof *titles);
            ids[N] = strdup(id);
            titles[N++] = strdup(t ? t : id);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    *ids_out = ids, *titles_out = titles;
    return N;
}

/* The in-process mode's options and run (see the file's header). */
static int main_inproc(int argc, char **argv)
{
    const char *store_dir = NULL, *model_path = NULL, *corpus = "datasets/demo/corpus.jsonl", *conc = "1,8,32,64";
    const char *label = "", *mode = "lazy";
    int n_req = 0, K = 5, max_tokens = 32, gpu = 0, serial = 1, seq_tokens = 2048;
    double alpha = 1.0;
    uint64_t seed = 1;
    FILE *json_out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--store")) store_dir = v, i++;
        else if (!strcmp(a, "--model")) model_path = v, i++;
        else if (!strcmp(a, "--corpus")) corpus = v, i++;
        else if (!strcmp(a, "--concurrency")) conc = v, i++;
        else if (!strcmp(a, "--requests")) n_req = atoi(v), i++;
        else if (!strcmp(a, "--k")) K = atoi(v), i++;
        else if (!strcmp(a, "--alpha")) alpha = atof(v), i++;
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v), i++;
        else if (!strcmp(a, "--seed")) seed = (uint64_t)atoll(v), i++;
        else if (!strcmp(a, "--label")) label = v, i++;
        else if (!strcmp(a, "--mode")) mode = v, i++;
        else if (!strcmp(a, "--gpu-seq-tokens")) seq_tokens = atoi(v), i++;
        else if (!strcmp(a, "--gpu")) gpu = 1;
        else if (!strcmp(a, "--no-serial")) serial = 0;
        else if (!strcmp(a, "--json")) {
            if (!(json_out = fopen(v, "a"))) { fprintf(stderr, "bench_serve: cannot write %s\n", v); return 1; }
            i++;
        } else {
            fprintf(stderr, "usage: bench_serve --store DIR --model M [--corpus FILE.jsonl] [--gpu] [--mode lazy] "
                    "[--concurrency 1,8,32,64] [--requests N] [--k K] [--alpha A] [--max-tokens M] [--seed S] "
                    "[--label L] [--json FILE] [--gpu-seq-tokens T] [--no-serial]\n");
            return 2;
        }
    }
#ifndef LZ_CUDA
    if (gpu) { fprintf(stderr, "bench_serve: --gpu needs the CUDA build (make cuda: build/cuda/bench_serve)\n"); return 2; }
    (void)seq_tokens;
#endif
    if (!model_path || K < 1 || K > 64 || max_tokens < 1) { fprintf(stderr, "bench_serve: --model, k 1..64, max tokens >= 1\n"); return 2; }
    /* the corpus's ids and titles, and the requests: K documents by Zipf, the last one's title asked about */
    char **ids = NULL, **titles = NULL;
    const int N = read_corpus(corpus, &ids, &titles);
    if (N < 0) return 1;
    if (N < K) { fprintf(stderr, "bench_serve: %d documents, fewer than k %d\n", N, K); return 1; }
    int levels[16], n_levels = 0, max_c = 1;
    for (const char *p = conc; *p && n_levels < 16;) {
        levels[n_levels] = atoi(p);
        if (levels[n_levels] < 1) { fprintf(stderr, "bench_serve: concurrency '%s'\n", conc); return 2; }
        max_c = levels[n_levels] > max_c ? levels[n_levels] : max_c;
        n_levels++;
        p += strcspn(p, ",");
        p += *p == ',';
    }
    const int n = n_req > 0 ? n_req : (4 * max_c > 64 ? 4 * max_c : 64);
    double *cdf = malloc((size_t)N * sizeof *cdf);
    const double z = lz_eval_zipf_cdf(cdf, N, alpha);
    draw *d = calloc((size_t)n, sizeof *d);
    int pick[64];
    lz_eval_rng rng = {seed};
    for (int i = 0; i < n; i++) {
        lz_eval_zipf_draw(pick, K, cdf, N, z, NULL, u01, &rng);
        char q[600];
        snprintf(q, sizeof q, "What is known about %s?", titles[pick[K - 1]]);
        d[i].question = strdup(q);
        d[i].n_docs = K;
        for (int k = 0; k < K; k++) d[i].docs[k] = ids[pick[k]];
    }
    /* the session */
    char err[1024];
    lz_store *st = NULL;
    lz_llama *m = NULL;
    lz_query_session *q = NULL;
    if (lz_store_open(store_dir, LZ_STORE_RDONLY, &st, err, sizeof err) || lz_llama_load(model_path, &m, err, sizeof err)) {
        fprintf(stderr, "bench_serve: %s\n", err);
        return 1;
    }
    lz_query_opts qo;
    lz_query_opts_default(&qo);
    qo.mode = lz_query_mode_parse(mode);
    qo.max_new_tokens = max_tokens;
    qo.max_positions = m->cfg.ctx;
    if (qo.mode < 0) { fprintf(stderr, "bench_serve: mode '%s'\n", mode); return 2; }
#ifdef LZ_CUDA
    lz_llama_gpu *g = NULL;
    lz_query_backend be;
    if (gpu) {
        const int rows = qo.mode == LZ_MODE_FULL || qo.mode == LZ_MODE_PREFIX ? 16384 : 4096;
        if (lz_llama_gpu_new(m, rows, &g, err, sizeof err)) { fprintf(stderr, "bench_serve: %s\n", err); return 1; }
        (void)lz_eval_gpu_tier; /* the scheduler's GPU tier counters: not reported here */
        be = lz_eval_gpu_backend(g); /* one sequence (serial) until the batched levels */
        qo.backend = &be;
        qo.cold = LZ_COLD_AUTO;
    }
#endif
    if (lz_query_session_new(m, st, &qo, &q, err, sizeof err)) { fprintf(stderr, "bench_serve: %s\n", err); return 1; }
    printf("in-process: %d requests a level, k %d (Zipf %.2f over %d documents), %d output tokens (ignore_eos), mode %s, %s\n",
           n, K, alpha, N, max_tokens, mode, gpu ? "GPU" : "CPU");
    printf("%-10s %5s %6s %8s %9s %8s %8s %8s %8s %8s %8s %6s\n", "run", "conc", "done", "req/s", "out tok/s", "ttft ms",
           "p50", "p99", "tpot ms", "p50", "p99", "batch");
    double serial_tps = 0;
    char lab[256];
    if (gpu && serial) { /* the baseline: one sequence at a time, as lazyquery --gpu */
        run_level(q, st, "warm-up", 1, 1, d, n < 16 ? n : 16, max_tokens, NULL, 0, 1);
        snprintf(lab, sizeof lab, "%sserial", label);
        serial_tps = run_level(q, st, lab, 1, 1, d, n, max_tokens, json_out, 0, 0);
    }
#ifdef LZ_CUDA
    if (gpu) { /* slots for the largest level: the engine sized against its memory */
        int slots = max_c;
        lz_llama_gpu_release(g, 0); /* the serial run's last question (the one-question API holds it until the next) */
        while (slots > 1 && lz_llama_gpu_set_slots(g, slots, seq_tokens, err, sizeof err)) {
            fprintf(stderr, "bench_serve: %s\n", err);
            slots /= 2;
        }
        be = lz_eval_gpu_backend(g); /* the session reads the struct it was given: now with the slots */
        printf("GPU: %d slots of %d tokens\n", lz_llama_gpu_slots(g), lz_llama_gpu_slot_tokens(g));
    }
#endif
    run_level(q, st, "warm-up", max_c, max_c, d, n < 2 * max_c ? n : 2 * max_c, max_tokens, NULL, 0, 1);
    for (int i = 0; i < n_levels; i++) {
        snprintf(lab, sizeof lab, "%s%s", label, gpu ? "batched" : "cpu");
        run_level(q, st, lab, levels[i], levels[i], d, n, max_tokens, json_out, serial_tps, 0);
    }
    lz_query_session_free(q);
#ifdef LZ_CUDA
    lz_llama_gpu_free(g);
#endif
    lz_llama_free(m);
    lz_store_close(st);
    for (int i = 0; i < n; i++) free(d[i].question);
    free(d);
    free(cdf);
    for (int i = 0; i < N; i++) { free(ids[i]); free(titles[i]); }
    free(ids);
    free(titles);
    if (json_out) fclose(json_out);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--store")) return main_inproc(argc, argv);
    const char *corpus = "datasets/demo/corpus.jsonl", *rates_arg = "1,2,4,inf", *label = "";
    int n_req = 64, K = 3, max_tokens = 32;
    FILE *json_out = NULL;
    double alpha = 1.0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--port")) port = atoi(v), i++;
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
    char **ids = NULL, **titles = NULL;
    const int N = read_corpus(corpus, &ids, &titles);
    if (N < 0) return 1;
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
        request *rq = calloc((size_t)n_req, sizeof *rq);
        pthread_t *th = calloc((size_t)n_req, sizeof *th);
        int *pick = malloc((size_t)K * sizeof *pick);
        for (int i = 0; i < n_req; i++) { /* the same stream at every rate */
            lz_eval_zipf_draw(pick, K, cdf, N, z, NULL, u01, &rng);
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
        const double t0 = now_s();
        double at = 0;
        for (int i = 0; i < n_req; i++) {
            if (isfinite(rate)) { /* Poisson arrivals: exponential gaps */
                at += -log(1.0 - lz_eval_rng_u01(&rng)) / rate;
                const double wait = t0 + at - now_s();
                if (wait > 0) usleep((useconds_t)(wait * 1e6));
            }
            pthread_create(&th[i], NULL, run_request, &rq[i]);
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
            if (!rq[i].ok) continue;
            ttft[nt++] = rq[i].t_first - rq[i].t_send;
            if (rq[i].tokens > 1) tpot[np++] = (rq[i].t_end - rq[i].t_first) / (rq[i].tokens - 1);
            for (int j = 0; j < rq[i].n_itl; j++) itl[ni++] = rq[i].itl[j];
        }
        double T[3], P[3], I[3];
        stats3(ttft, nt, T);
        stats3(tpot, np, P);
        stats3(itl, ni, I);
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
