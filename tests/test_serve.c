/* test_serve.c - lazyserve end to end with real clients on 127.0.0.1 (a
 * free port): curl, whole and streamed (server-sent events), completions and
 * chat; a completion equals lazyquery's answer over the same documents; 64
 * concurrent clients of mixed lengths (half streaming) get what each gets
 * alone; clients that disconnect mid-stream (and one waiting for a whole
 * answer) have their slots and held documents freed (/metrics); malformed
 * JSON, bodies too large (announced and chunked), unknown fields, unknown
 * document ids, bad fields, wrong routes and methods, a full queue (429 with
 * Retry-After): clear errors, and the server serves on; two engines
 * (--engines 2: the same answer, requests routed by their documents, /metrics
 * the sums of the engines'); the official openai npm client under node
 * (tests/serve_client/, installed by tools/deps.sh: SKIP when absent);
 * SIGTERM ends it with status 0 (under ASan: no leaks). */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/test.h"

static char dir[256], store[600], bin[512];
static const char *model = "models/default.gguf";
static const char *question = "What is the capital of Foxaria?";

/* ---- the server ---- */

typedef struct {
    pid_t pid;
    int port;
} server;

/* Starts lazyserve with extra options; waits for its port file. 0 on success. */
static int server_start(server *s, const char *extra)
{
    char port_file[700], cmd[4096];
    static int k;
    snprintf(port_file, sizeof port_file, "%s/port%d", dir, k++);
    snprintf(cmd, sizeof cmd, "exec %s/lazyserve -q --store %s -m %s --port 0 --port-file %s %s 2>>%s/server.log", bin,
             store, model, port_file, extra, dir);
    s->pid = fork();
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1200; i++) { /* 60 s: a sanitizer build starts slowly */
        FILE *f = fopen(port_file, "r");
        if (f) {
            const int ok = fscanf(f, "%d", &s->port) == 1;
            fclose(f);
            if (ok && s->port > 0) return 0;
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) { s->pid = 0; return -1; }
        lz_test_sleep_ms(50);
    }
    return -1;
}

/* SIGTERM, then its exit status (-1: killed after 60 s). */
static int server_stop(server *s)
{
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 1200; i++) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        lz_test_sleep_ms(50);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    return -1;
}

/* ---- curl ---- */

/* One request with curl: the body (NULL: GET) from a file, the response into *out (malloc'd),
 * the headers into *hdr when not NULL. Returns the HTTP status (0: no response). */
static int http(const server *s, const char *path, const char *body, char **out, char **hdr)
{
    static int k;
    char bfile[700], ofile[700], hfile[700], cmd[3000];
    const int id = k++;
    snprintf(bfile, sizeof bfile, "%s/body%d", dir, id);
    snprintf(ofile, sizeof ofile, "%s/out%d", dir, id);
    snprintf(hfile, sizeof hfile, "%s/hdr%d", dir, id);
    if (body) {
        FILE *f = fopen(bfile, "wb");
        if (f) { fputs(body, f); fclose(f); }
    }
    snprintf(cmd, sizeof cmd, "curl -s -N -o %s -D %s -w '%%{http_code}' %s%s%s http://127.0.0.1:%d%s", ofile, hfile,
             body ? "-H 'Content-Type: application/json' --data-binary @" : "", body ? bfile : "", body ? "" : "",
             s->port, path);
    FILE *p = popen(cmd, "r");
    int code = 0;
    if (p) {
        if (fscanf(p, "%d", &code) != 1) code = 0;
        pclose(p);
    }
    size_t n;
    *out = lz_test_read_file(ofile, &n);
    if (!*out) *out = strdup("");
    if (hdr) {
        *hdr = lz_test_read_file(hfile, &n);
        if (!*hdr) *hdr = strdup("");
    }
    unlink(bfile);
    unlink(ofile);
    unlink(hfile);
    return code;
}

/* The text of a whole response (completion or chat), malloc'd; NULL if not one. */
static char *whole_text(const char *json)
{
    json_t *o = json_loads(json, 0, NULL);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    const char *t = json_string_value(json_object_get(c, "text"));
    if (!t) t = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
    char *r = t ? strdup(t) : NULL;
    json_decref(o);
    return r;
}

/* The text of a server-sent-event stream, malloc'd; *done: it ended with [DONE]; *sources:
 * the first chunk's sources count (-1 none). NULL when a chunk is not JSON. */
static char *stream_text(const char *sse, int *done, int *sources)
{
    size_t cap = strlen(sse) + 1, len = 0;
    char *text = calloc(1, cap);
    *done = 0;
    *sources = -1;
    int first = 1;
    for (const char *p = sse; p && *p;) {
        const char *e = strchr(p, '\n');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 6 && !strncmp(p, "data: ", 6)) {
            if (n == 12 && !strncmp(p + 6, "[DONE]", 6)) *done = 1;
            else {
                json_t *o = json_loadb(p + 6, n - 6, 0, NULL);
                if (!o) { free(text); return NULL; }
                if (first) *sources = (int)json_array_size(json_object_get(o, "sources"));
                first = 0;
                json_t *c = json_array_get(json_object_get(o, "choices"), 0);
                const char *t = json_string_value(json_object_get(c, "text"));
                if (!t) t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
                if (t && len + strlen(t) < cap) { memcpy(text + len, t, strlen(t)); len += strlen(t); }
                json_decref(o);
            }
        }
        p = e ? e + 1 : NULL;
    }
    return text;
}

/* A gauge or counter of /metrics (NAN when absent). */
static double metric(const server *s, const char *name)
{
    char *m;
    http(s, "/metrics", NULL, &m, NULL);
    double v = NAN;
    const size_t n = strlen(name);
    for (const char *p = m; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') { v = atof(p + n + 1); break; }
    free(m);
    return v;
}

/* Polls until nothing runs, nothing is held nor reserved (or 30 s). 1 when so. */
static int drained(const server *s)
{
    for (int i = 0; i < 300; i++) {
        if (metric(s, "lazy_running_requests") == 0 && metric(s, "lazy_queue_length") == 0 &&
            metric(s, "lazy_cache_held_entries{tier=\"host\"}") == 0 && metric(s, "lazy_reserved_bytes") == 0)
            return 1;
        lz_test_sleep_ms(100);
    }
    return 0;
}

static char *completion_body(const char *docs, int max_tokens, int stream, const char *extra)
{
    char *b = malloc(2048);
    snprintf(b, 2048, "{\"prompt\": \"%s\", \"max_tokens\": %d, \"stream\": %s, \"documents\": [%s]%s%s}", question,
             max_tokens, stream ? "true" : "false", docs, extra ? ", " : "", extra ? extra : "");
    return b;
}

/* ---- the tests ---- */

static void test_basics(const server *s)
{
    char *out;
    CHECK(http(s, "/health", NULL, &out, NULL) == 200 && strstr(out, "\"ok\""), "/health: %s", out);
    free(out);
    CHECK(http(s, "/v1/models", NULL, &out, NULL) == 200 && strstr(out, "\"default.gguf\"") && strstr(out, "\"list\""),
          "/v1/models: %s", out);
    free(out);
    char *h;
    CHECK(http(s, "/metrics", NULL, &out, &h) == 200 && strstr(out, "# TYPE lazy_ttft_seconds histogram") &&
              strstr(out, "lazy_tpot_seconds_bucket{le=\"+Inf\"}") && strstr(out, "lazy_queue_length ") &&
              strstr(out, "lazy_cache_hits_total{tier=\"host\"}") && strstr(h, "text/plain"),
          "/metrics in the Prometheus format");
    free(out);
    free(h);
}

/* Whole and streamed, completions and chat: one answer, lazyquery's. */
static void test_answers(const server *s)
{
    const char *docs = "\"te2024-country0\", \"te2024-city19\"";
    char *b = completion_body(docs, 32, 0, NULL), *out;
    CHECK(http(s, "/v1/completions", b, &out, NULL) == 200, "completion: %s", out);
    char *text = whole_text(out);
    CHECK(text && *text, "a completion text (%s)", out);
    CHECK(strstr(out, "\"sources\"") && strstr(out, "\"te2024-city19\"") && strstr(out, "\"usage\"") &&
              strstr(out, "\"ttft_s\""), "sources, usage and timings: %s", out);
    free(out);
    free(b);
    /* lazyquery over the same documents answers the same */
    char cmd[2000], qout[700];
    snprintf(qout, sizeof qout, "%s/lq.json", dir);
    snprintf(cmd, sizeof cmd, "%s/lazyquery -s %s -m %s --no-stats --no-preload --docs te2024-country0,te2024-city19 "
             "-n 32 --json \"%s\" > %s 2>/dev/null", bin, store, model, question, qout);
    if (!lz_test_sh("%s", cmd)) {
        size_t n;
        char *lq = lz_test_read_file(qout, &n);
        json_t *o = lq ? json_loads(lq, 0, NULL) : NULL;
        const char *gen = json_string_value(json_object_get(o, "generated"));
        CHECK(gen && text && !strcmp(gen, text), "lazyserve '%s' vs lazyquery '%s'", text ? text : "", gen ? gen : "");
        json_decref(o);
        free(lq);
    } else CHECK(0, "lazyquery failed");
    /* streamed: the same text in chunks, sources first, [DONE] last */
    b = completion_body(docs, 32, 1, NULL);
    char *h;
    CHECK(http(s, "/v1/completions", b, &out, &h) == 200 && strstr(h, "text/event-stream"), "stream: %s", h);
    int done, nsrc;
    char *st = stream_text(out, &done, &nsrc);
    CHECK(st && text && !strcmp(st, text) && done && nsrc == 2, "streamed '%s' (done %d, %d sources) vs '%s'",
          st ? st : "?", done, nsrc, text ? text : "");
    free(st);
    free(out);
    free(h);
    free(b);
    /* chat, whole and streamed */
    char cb[1024];
    snprintf(cb, sizeof cb, "{\"model\": \"x\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, "
             "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"%s\"}]}], \"max_tokens\": 32, "
             "\"documents\": [%s]}", question, docs);
    CHECK(http(s, "/v1/chat/completions", cb, &out, NULL) == 200 && strstr(out, "\"chat.completion\""), "chat: %s", out);
    char *ct = whole_text(out);
    CHECK(ct && text && !strcmp(ct, text), "chat '%s' vs completion '%s'", ct ? ct : "", text ? text : "");
    free(ct);
    free(out);
    snprintf(cb, sizeof cb, "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"max_tokens\": 32, "
             "\"stream\": true, \"stream_options\": {\"include_usage\": true}, \"documents\": [%s]}", question, docs);
    CHECK(http(s, "/v1/chat/completions", cb, &out, NULL) == 200, "chat stream");
    st = stream_text(out, &done, &nsrc);
    CHECK(st && text && !strcmp(st, text) && done && strstr(out, "\"role\":\"assistant\"") &&
              strstr(out, "\"chat.completion.chunk\"") && strstr(out, "\"usage\""),
          "streamed chat '%s'", st ? st : "?");
    free(st);
    free(out);
    /* retrieval: BM25 sources, k of them at most */
    CHECK(http(s, "/v1/completions", "{\"prompt\": \"What is the capital of Foxaria?\", \"retrieve\": {\"k\": 3}, "
               "\"max_tokens\": 8}", &out, NULL) == 200, "retrieve: %s", out);
    json_t *o = json_loads(out, 0, NULL);
    const size_t ns = json_array_size(json_object_get(o, "sources"));
    CHECK(ns >= 1 && ns <= 3 && json_real_value(json_object_get(json_array_get(json_object_get(o, "sources"), 0),
                                                               "score")) < 0, "%zu BM25 sources with scores", ns);
    json_decref(o);
    free(out);
    /* a stop string cuts it */
    if (text && strlen(text) >= 4) {
        char stop[8] = "", extra[64];
        memcpy(stop, text + 2, 2);
        snprintf(extra, sizeof extra, "\"stop\": [\"%s\"]", stop);
        b = completion_body(docs, 32, 0, extra);
        http(s, "/v1/completions", b, &out, NULL);
        char *cut = whole_text(out);
        CHECK(cut && !strncmp(cut, text, strlen(cut)) && strlen(cut) == (size_t)(strstr(text, stop) - text) &&
                  strstr(out, "\"finish_reason\":\"stop\""), "stop '%s': '%s'", stop, cut ? cut : "?");
        free(cut);
        free(out);
        free(b);
    }
    free(text);
}

/* Every error is a clear JSON body; the server serves on. */
static void test_errors(const server *s)
{
    char *out, *h;
    struct { const char *path, *body; int code; const char *says; } cases[] = {
        {"/v1/completions", "{\"prompt\": \"x\",", 400, "not valid JSON"},
        {"/v1/completions", "[1, 2]", 400, "JSON object"},
        {"/v1/completions", "", 400, "not valid JSON"},
        {"/v1/completions", "{\"prompt\": \"\"}", 400, "prompt"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"lots\"}", 400, "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": 9}", 400, "temperature"},
        {"/v1/completions", "{\"prompt\": \"x\", \"n\": 2}", 400, "'n'"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400, "stop"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": \"te2024-country0\"}", 400, "documents"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [\"te2024-country0\", \"missing-doc-9\"]}", 404,
         "missing-doc-9"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stream\": true, \"documents\": [\"missing-doc-8\"]}", 404,
         "missing-doc-8"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", 400, "user message"},
        {"/v1/chat/completions", "{\"messages\": \"hi\"}", 400, "messages"},
        {"/v1/nothing", "{}", 404, "no route"},
        {"/health", "{}", 405, "takes GET"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int code = http(s, cases[i].path, cases[i].body, &out, &h);
        json_t *o = json_loads(out, 0, NULL);
        const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        CHECK(code == cases[i].code && msg && strstr(msg, cases[i].says) && strstr(h, "application/json"),
              "%s %s: %d %s (want %d, '%s')", cases[i].path, cases[i].body, code, out, cases[i].code, cases[i].says);
        json_decref(o);
        free(out);
        free(h);
    }
    CHECK(http(s, "/v1/completions", NULL, &out, NULL) == 405, "GET on a POST route: 405");
    free(out);
    /* unknown fields are ignored */
    CHECK(http(s, "/v1/completions", "{\"prompt\": \"What is the capital of Foxaria?\", \"max_tokens\": 4, "
               "\"frobnicate\": {\"a\": [1]}, \"user\": \"u1\", \"logit_bias\": {}}", &out, NULL) == 200,
          "unknown fields ignored: %s", out);
    free(out);
    /* bodies past --max-body (1M): announced, and chunked without a length */
    char *big = malloc(3 << 20), cmd[1500];
    memset(big, 'a', 3 << 20);
    memcpy(big, "{\"prompt\": \"", 12);
    strcpy(big + (3 << 20) - 3, "\"}");
    char bf[700];
    snprintf(bf, sizeof bf, "%s/big.json", dir);
    FILE *f = fopen(bf, "wb");
    if (f) { fputs(big, f); fclose(f); }
    CHECK(http(s, "/v1/completions", big, &out, NULL) == 413 && strstr(out, "more than the server takes"),
          "a 3 MB body: 413 (%.200s)", out);
    free(out);
    free(big);
    snprintf(cmd, sizeof cmd, "cat %s | curl -s -o /dev/null -w '%%{http_code}' -H 'Transfer-Encoding: chunked' "
             "-H 'Content-Type: application/json' --data-binary @- http://127.0.0.1:%d/v1/completions > %s/chunked.code",
             bf, s->port, dir);
    lz_test_sh("%s", cmd);
    snprintf(bf, sizeof bf, "%s/chunked.code", dir);
    size_t n;
    char *code = lz_test_read_file(bf, &n);
    CHECK(code && atoi(code) == 413, "a chunked 3 MB body: 413 (%s)", code ? code : "?");
    free(code);
    CHECK(http(s, "/health", NULL, &out, NULL) == 200, "still serving after the errors");
    free(out);
    CHECK(metric(s, "lazy_http_responses_total{code=\"413\"}") >= 2 && metric(s, "lazy_http_responses_total{code=\"404\"}") >= 3,
          "error responses counted");
}

/* 64 concurrent clients, 16 distinct requests of mixed lengths (half streamed): each gets
 * the answer it gets alone. */
static void test_concurrent(const server *s)
{
    enum { DISTINCT = 16, CLIENTS = 64 };
    static const char *docsets[4] = {"\"te2024-country0\", \"te2024-city19\"", "\"te2024-country1\"",
                                     "\"te2024-org13\", \"te2024-org19\", \"te2024-person31\"", "\"te2024-country2\""};
    const int lens[4] = {1, 4, 12, 40};
    char *want[DISTINCT];
    for (int i = 0; i < DISTINCT; i++) { /* alone, one at a time */
        char *b = completion_body(docsets[i % 4], lens[i / 4], 0, NULL), *out;
        http(s, "/v1/completions", b, &out, NULL);
        want[i] = whole_text(out);
        CHECK(want[i] != NULL, "reference %d: %s", i, out);
        free(out);
        free(b);
    }
    char script[700];
    snprintf(script, sizeof script, "%s/many.sh", dir);
    FILE *f = fopen(script, "w");
    if (!f) { CHECK(0, "script"); return; }
    for (int c = 0; c < CLIENTS; c++) {
        const int i = (c * 7) % DISTINCT;
        char *b = completion_body(docsets[i % 4], lens[i / 4], c % 2, NULL);
        char bp[700];
        snprintf(bp, sizeof bp, "%s/c%d.json", dir, c);
        FILE *bf = fopen(bp, "w");
        if (bf) { fputs(b, bf); fclose(bf); }
        free(b);
        fprintf(f, "curl -s -N -o %s/c%d.out -w '%%{http_code}' -H 'Content-Type: application/json' --data-binary @%s "
                "http://127.0.0.1:%d/v1/completions > %s/c%d.code &\n", dir, c, bp, s->port, dir, c);
    }
    fprintf(f, "wait\n");
    fclose(f);
    const double t0 = (double)time(NULL);
    lz_test_sh("sh %s", script);
    int ok = 0, same = 0;
    for (int c = 0; c < CLIENTS; c++) {
        const int i = (c * 7) % DISTINCT;
        char p[700];
        size_t n;
        snprintf(p, sizeof p, "%s/c%d.code", dir, c);
        char *code = lz_test_read_file(p, &n);
        snprintf(p, sizeof p, "%s/c%d.out", dir, c);
        char *out = lz_test_read_file(p, &n);
        ok += code && atoi(code) == 200;
        int done = 1, nsrc;
        char *t = out ? (c % 2 ? stream_text(out, &done, &nsrc) : whole_text(out)) : NULL;
        const int eq = t && want[i] && !strcmp(t, want[i]) && done;
        same += eq;
        if (!eq) fprintf(stderr, "client %d (request %d): '%s' vs alone '%s'\n", c, i, t ? t : "?", want[i] ? want[i] : "?");
        free(t);
        free(code);
        free(out);
    }
    printf("64 concurrent clients: %d answered 200, %d equal to their answer alone (%.0f s)\n", ok, same,
           (double)time(NULL) - t0);
    CHECK(ok == CLIENTS && same == CLIENTS, "64 concurrent clients: %d ok, %d equal", ok, same);
    CHECK(metric(s, "lazy_running_requests_peak") > 1, "they ran batched (peak %g)", metric(s, "lazy_running_requests_peak"));
    CHECK(drained(s), "after them nothing runs, is held or reserved");
    for (int i = 0; i < DISTINCT; i++) free(want[i]);
}

/* Clients gone mid-stream (and one gone while waiting for a whole answer): cancelled, their
 * slots, memory and documents freed. */
static void test_disconnects(const server *s)
{
    const double c0 = metric(s, "lazy_requests_total{status=\"cancelled\"}");
    const double d0 = metric(s, "lazy_client_disconnects_total");
    char script[700];
    snprintf(script, sizeof script, "%s/gone.sh", dir);
    FILE *f = fopen(script, "w");
    if (!f) return;
    char *b = completion_body("\"te2024-country0\", \"te2024-org13\"", 3000, 1, "\"ignore_eos\": true");
    char *w = completion_body("\"te2024-country1\"", 3000, 0, "\"ignore_eos\": true");
    for (int c = 0; c < 9; c++)
        fprintf(f, "curl -s -N -o /dev/null --max-time 1.5 -H 'Content-Type: application/json' -d '%s' "
                "http://127.0.0.1:%d/v1/completions &\n", c < 8 ? b : w, s->port);
    fprintf(f, "wait\n");
    fclose(f);
    free(b);
    free(w);
    lz_test_sh("sh %s", script);
    CHECK(drained(s), "disconnected clients: nothing runs, is held or reserved afterwards");
    const double c1 = metric(s, "lazy_requests_total{status=\"cancelled\"}");
    const double d1 = metric(s, "lazy_client_disconnects_total");
    CHECK(c1 - c0 == 9 && d1 - d0 == 9, "9 clients gone: %g cancelled, %g disconnects", c1 - c0, d1 - d0);
    char *out;
    CHECK(http(s, "/v1/completions", "{\"prompt\": \"What is the capital of Foxaria?\", \"max_tokens\": 4}", &out,
               NULL) == 200, "serving after the disconnects");
    free(out);
}

/* A queue of one: the rest get 429 with Retry-After; the server serves on. */
static void test_queue_full(void)
{
    server s;
    if (server_start(&s, "--max-running 1 --max-queue 1 --retry-after 3 --no-preload")) {
        CHECK(0, "second server");
        return;
    }
    char script[700];
    snprintf(script, sizeof script, "%s/full.sh", dir);
    FILE *f = fopen(script, "w");
    char *b = completion_body("\"te2024-country0\"", 300, 0, "\"ignore_eos\": true");
    for (int c = 0; c < 6; c++)
        fprintf(f, "curl -s -o %s/q%d.out -D %s/q%d.hdr -w '%%{http_code}' -H 'Content-Type: application/json' -d '%s' "
                "http://127.0.0.1:%d/v1/completions > %s/q%d.code &\n", dir, c, dir, c, b, s.port, dir, c);
    fprintf(f, "wait\n");
    fclose(f);
    free(b);
    lz_test_sh("sh %s", script);
    int full = 0, ok = 0;
    for (int c = 0; c < 6; c++) {
        char p[700];
        size_t n;
        snprintf(p, sizeof p, "%s/q%d.code", dir, c);
        char *code = lz_test_read_file(p, &n);
        snprintf(p, sizeof p, "%s/q%d.hdr", dir, c);
        char *hdr = lz_test_read_file(p, &n);
        snprintf(p, sizeof p, "%s/q%d.out", dir, c);
        char *out = lz_test_read_file(p, &n);
        if (code && atoi(code) == 429) {
            full++;
            CHECK(hdr && strstr(hdr, "Retry-After: 3") && out && strstr(out, "queue is full") &&
                      strstr(out, "rate_limit_error"), "429 with Retry-After and a message: %s", out ? out : "");
        }
        ok += code && atoi(code) == 200;
        free(code);
        free(hdr);
        free(out);
    }
    CHECK(full >= 1 && ok >= 2 && ok + full == 6, "a queue of one: %d got 429, %d answered", full, ok);
    CHECK(metric(&s, "lazy_requests_total{status=\"rejected_queue_full\"}") == full, "refusals counted");
    char *out;
    CHECK(http(&s, "/v1/completions", "{\"prompt\": \"What is the capital of Foxaria?\", \"max_tokens\": 4}", &out,
               NULL) == 200, "serving again once the queue drained");
    free(out);
    CHECK(server_stop(&s) == 0, "the second server exits 0");
}

/* lazyserve --engines 2 (serve/router.h): the same answer as one engine's (lazyquery's), the
 * requests on one document set on one engine, another set on the other, /metrics' totals the
 * sums of each engine's; --gpus without the CUDA build is a usage error. */
static void test_engines(const char *one_text)
{
    char lzs[600];
    snprintf(lzs, sizeof lzs, "%s/lazyserve", bin);
    CHECK(lz_test_sh("%s --help | grep -q -- '--engines N'", lzs) == 0 &&
              lz_test_sh("%s --help | grep -q -- '--gpus LIST'", lzs) == 0, "--help tells of --engines and --gpus");
    CHECK(lz_test_sh("%s --store %s --gpus 0,0 --port 0 2>/dev/null; test $? -eq 2", lzs, store) == 0,
          "--gpus: a usage error without the CUDA build (exit 2)");
    server s;
    if (server_start(&s, "--engines 2 --no-preload")) { CHECK(0, "the two-engine server did not start"); return; }
    CHECK(metric(&s, "lazy_engines") == 2, "/metrics: two engines");
    const char *docs[2] = {"\"te2024-country0\", \"te2024-city19\"", "\"te2024-org13\", \"te2024-person31\""};
    for (int i = 0; i < 6; i++) {
        char *b = completion_body(docs[i % 2], 32, i % 3 == 2, NULL), *out;
        CHECK(http(&s, "/v1/completions", b, &out, NULL) == 200, "two engines: request %d: %s", i, out);
        if (i == 0) {
            char *text = whole_text(out);
            CHECK(text && one_text && !strcmp(text, one_text), "two engines answer '%s', one '%s'", text ? text : "?",
                  one_text ? one_text : "?");
            free(text);
        }
        free(out);
        free(b);
    }
    const double h0 = metric(&s, "lazy_route_requests_total{engine=\"0\",route=\"home\"}");
    const double h1 = metric(&s, "lazy_route_requests_total{engine=\"1\",route=\"home\"}");
    const double f0 = metric(&s, "lazy_route_requests_total{engine=\"0\",route=\"fresh\"}");
    const double f1 = metric(&s, "lazy_route_requests_total{engine=\"1\",route=\"fresh\"}");
    CHECK(h0 == 2 && h1 == 2 && f0 == 1 && f1 == 1, "each document set on its own engine: home %g %g, fresh %g %g", h0,
          h1, f0, f1);
    const double ok = metric(&s, "lazy_requests_total{status=\"ok\"}");
    const double ok0 = metric(&s, "lazy_engine_requests_total{engine=\"0\",status=\"ok\"}");
    const double ok1 = metric(&s, "lazy_engine_requests_total{engine=\"1\",status=\"ok\"}");
    const double hits = metric(&s, "lazy_cache_hits_total{tier=\"host\"}");
    const double hit0 = metric(&s, "lazy_engine_cache_hits_total{engine=\"0\",tier=\"host\"}");
    const double hit1 = metric(&s, "lazy_engine_cache_hits_total{engine=\"1\",tier=\"host\"}");
    CHECK(ok == 6 && ok0 + ok1 == ok && ok0 == 3 && hits == hit0 + hit1 && hits > 0,
          "totals are the engines' sums: ok %g = %g + %g, host hits %g = %g + %g", ok, ok0, ok1, hits, hit0, hit1);
    CHECK(drained(&s), "two engines: nothing left running or held");
    CHECK(server_stop(&s) == 0, "the two-engine server exits 0");
}

/* The official openai client under node (SKIP without node or the package). */
static void test_node(const server *s)
{
    if (lz_test_sh("command -v node >/dev/null 2>&1") || access("build/node/node_modules/openai/package.json", R_OK)) {
        printf("SKIP node client: node or build/node/node_modules/openai missing (make deps installs them)\n");
        return;
    }
    char out[700];
    snprintf(out, sizeof out, "%s/node.out", dir);
    const int rc = lz_test_sh("NODE_PATH=build/node/node_modules LZ_SERVE_URL=http://127.0.0.1:%d "
                              "LZ_DOCS=te2024-country0,te2024-city19 LZ_QUESTION='%s' "
                              "node tests/serve_client/openai_client.cjs > %s 2>&1", s->port, question, out);
    size_t n;
    char *text = lz_test_read_file(out, &n);
    int p = 0, f = 1;
    const char *line = text ? strstr(text, " passed, ") : NULL;
    while (line && line > text && line[-1] >= '0' && line[-1] <= '9') line--;
    if (line && sscanf(line, "%d passed, %d failed", &p, &f) != 2) f = 1;
    printf("node openai client: %d passed, %d failed\n", p, f);
    CHECK(rc == 0 && f == 0 && p > 0, "node openai client: exit %d: %s", rc, text ? text : "");
    lz_test_passed += p;
    free(text);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    snprintf(bin, sizeof bin, "%s", b);
    if (access(model, R_OK) || access("datasets/demo/corpus.jsonl", R_OK)) {
        printf("SKIP %s or the demo corpus not found (run from the repository)\n", model);
        return lz_test_done();
    }
    char lzs[600];
    snprintf(lzs, sizeof lzs, "%s/lazyserve", bin);
    if (access(lzs, X_OK)) { CHECK(0, "%s not built", lzs); return lz_test_done(); }
    if (lz_test_sh("%s --help | grep -q 'Retry-After'", lzs) || lz_test_sh("%s --help | grep -q 'runs at a time'", lzs))
        CHECK(0, "lazyserve --help says what the API does");
    if (!lz_test_tmpdir(dir, sizeof dir)) { CHECK(0, "tmpdir"); return lz_test_done(); }
    snprintf(store, sizeof store, "%s/store", dir);
    if (lz_test_sh("%s/lazyingest --quiet --model %s --store %s datasets/demo/corpus.jsonl", bin, model, store)) {
        CHECK(0, "could not build the test store");
        return lz_test_done();
    }
    if (lz_test_sh("command -v curl >/dev/null 2>&1")) {
        printf("SKIP curl not found: no HTTP tests\n");
        lz_test_sh("rm -rf %s", dir);
        return lz_test_done();
    }
    server s;
    if (server_start(&s, "")) {
        CHECK(0, "lazyserve did not start (%s/server.log)", dir);
        lz_test_sh("cat %s/server.log >&2", dir);
        return lz_test_done();
    }
    test_basics(&s);
    test_answers(&s);
    test_errors(&s);
    test_concurrent(&s);
    test_disconnects(&s);
    test_node(&s);
    CHECK(drained(&s), "nothing left running or held");
    char *one_text = NULL, *b1 = completion_body("\"te2024-country0\", \"te2024-city19\"", 32, 0, NULL), *o1;
    if (http(&s, "/v1/completions", b1, &o1, NULL) == 200) one_text = whole_text(o1); /* test_engines' reference */
    free(o1);
    free(b1);
    const int rc = server_stop(&s);
    CHECK(rc == 0, "lazyserve exits 0 on SIGTERM (a leak under ASan fails it): %d", rc);
    test_queue_full();
    test_engines(one_text);
    free(one_text);
    if (lz_test_failed) lz_test_sh("tail -n 30 %s/server.log >&2", dir);
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
