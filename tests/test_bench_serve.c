/* test_bench_serve.c - bench_serve (bench/bench_serve.c) on the CPU with the
 * shipped model over a store of the demo corpus built here, small enough for
 * CI: one in-process invocation runs lazy, block and full over one request
 * stream (the same stream hash in every row) with the idle TTFT, Poisson
 * arrivals at a finite rate (spread in time, capped by --rate-seconds) and
 * all at once, and a closed loop; every request answered, the figures
 * consistent (p50 <= p99, tokens per second = tokens over the wall time), the
 * p99 TTFT set against the idle one; questions of exactly --question-tokens
 * tokens; each run its own part of the stream; --stream workload is the
 * stream bench_workload --emit-questions writes; --replay; --setup a sets
 * the paper's knobs; --engines 2 reports each engine's requests and hit rate
 * and their aggregate; bad options exit 2; the HTTP mode against a lazyserve
 * on 127.0.0.1. Runs $LZ_BIN/../bench/bench_serve. */
#include <jansson.h>

#include "tests/test.h"

static char dir[256], bin[512], bench[600], store[700];

/* Every JSON line of path (an array; empty when unreadable). */
static json_t *read_lines(const char *path)
{
    json_t *a = json_array();
    FILE *f = fopen(path, "r");
    if (!f) return a;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        if (o) json_array_append_new(a, o);
    }
    free(line);
    fclose(f);
    return a;
}

static const char *str(json_t *o, const char *k) { const char *s = json_string_value(json_object_get(o, k)); return s ? s : ""; }
static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static double at(json_t *o, const char *k, int i) { return json_number_value(json_array_get(json_object_get(o, k), (size_t)i)); }

/* The row of mode and run (and rate, when not NULL), or NULL. */
static json_t *find(json_t *rows, const char *mode, const char *run, const char *rate)
{
    size_t i;
    json_t *o;
    json_array_foreach(rows, i, o)
        if (!strcmp(str(o, "mode"), mode) && !strcmp(str(o, "run"), run) && (!rate || !strcmp(str(o, "rate"), rate)))
            return o;
    return NULL;
}

/* Three modes over one stream: idle, rate 40 (capped at 4 requests by --rate-seconds 0.1),
 * rate inf and a closed loop of 2, each row consistent. */
static void test_modes_and_rates(void)
{
    char json[800], out[800], qs[800];
    snprintf(json, sizeof json, "%s/modes.jsonl", dir);
    snprintf(out, sizeof out, "%s/modes.txt", dir);
    snprintf(qs, sizeof qs, "%s/stream.jsonl", dir);
    const int rc = lz_test_sh("%s --store %s --model models/default.gguf --mode lazy,block,full --rates 40,inf "
                              "--rate-seconds 0.1 --concurrency 2 --requests 6 --idle 2 --warmup 1 --k 2 --max-tokens 4 "
                              "--question-tokens 12 --stream workload --label t --json %s --emit-questions %s > %s 2>&1",
                              bench, store, json, qs, out);
    CHECK(rc == 0, "bench_serve exited %d (see %s)", rc, out);
    json_t *rows = read_lines(json);
    CHECK(json_array_size(rows) == 12, "3 modes x (idle, 2 rates, 1 level): %zu rows", json_array_size(rows));
    const char *hash = json_array_size(rows) ? str(json_array_get(rows, 0), "stream_hash") : "";
    size_t i;
    json_t *o;
    int same = 0;
    json_array_foreach(rows, i, o) {
        const char *what = str(o, "run");
        same += !strcmp(str(o, "stream_hash"), hash) && *hash;
        CHECK(num(o, "done") == num(o, "requests") && num(o, "failed") == 0 && num(o, "done") > 0,
              "%s %s: %g of %g done", str(o, "mode"), what, num(o, "done"), num(o, "requests"));
        CHECK(at(o, "ttft_s", 0) > 0 && at(o, "ttft_s", 1) <= at(o, "ttft_s", 2) && at(o, "tpot_s", 1) > 0 &&
              at(o, "tpot_s", 1) <= at(o, "tpot_s", 2) && at(o, "itl_s", 0) > 0,
              "%s %s: ttft %g/%g/%g, tpot p50 %g, itl mean %g", str(o, "mode"), what, at(o, "ttft_s", 0),
              at(o, "ttft_s", 1), at(o, "ttft_s", 2), at(o, "tpot_s", 1), at(o, "itl_s", 0));
        CHECK_CLOSE(num(o, "out_tok_s"), num(o, "done") * 4 / num(o, "wall_s"), 1e-6, 1e-3);
        CHECK_CLOSE(num(o, "req_s"), num(o, "done") / num(o, "wall_s"), 1e-6, 1e-3);
        CHECK(num(o, "question_tokens") == 12 && num(o, "k") == 2 && num(o, "max_tokens") == 4 &&
              !strcmp(str(o, "device"), "CPU") && !strcmp(str(o, "label"), "t"),
              "%s %s: question tokens %g, k %g", str(o, "mode"), what, num(o, "question_tokens"), num(o, "k"));
        if (!strcmp(what, "rate"))
            CHECK(num(o, "idle_ttft_p99_s") > 0 &&
                      fabs(num(o, "ttft_p99_over_idle") - at(o, "ttft_s", 2) / num(o, "idle_ttft_p99_s")) < 1e-6,
                  "%s rate %s: p99 over idle %g", str(o, "mode"), str(o, "rate"), num(o, "ttft_p99_over_idle"));
    }
    CHECK(same == 12, "one stream for every mode and run (%d rows with hash %s)", same, hash);
    const char *modes[3] = {"lazy", "block", "full"};
    for (int m = 0; m < 3; m++) {
        json_t *idle = find(rows, modes[m], "idle", NULL), *r40 = find(rows, modes[m], "rate", "40"),
               *rinf = find(rows, modes[m], "rate", "inf"), *c2 = find(rows, modes[m], "concurrency", NULL);
        CHECK(idle && r40 && rinf && c2, "%s: every run there", modes[m]);
        if (!idle || !r40 || !rinf || !c2) continue;
        CHECK(num(idle, "requests") == 2 && num(idle, "peak_running") == 1, "%s idle: %g requests, peak %g", modes[m],
              num(idle, "requests"), num(idle, "peak_running"));
        CHECK(num(r40, "requests") == 4 && num(rinf, "requests") == 6 && num(c2, "requests") == 6,
              "%s: rate 40 capped at 40 x 0.1 s = 4 requests (%g), inf and the closed loop 6 (%g, %g)", modes[m],
              num(r40, "requests"), num(rinf, "requests"), num(c2, "requests"));
        /* Poisson arrivals: spread in time at 40 a second, none at inf */
        CHECK(num(r40, "arrival_span_s") > 0 && num(r40, "arrival_span_s") < 2 && num(rinf, "arrival_span_s") == 0,
              "%s: arrivals span %g s at rate 40, %g at inf", modes[m], num(r40, "arrival_span_s"),
              num(rinf, "arrival_span_s"));
        CHECK(num(c2, "concurrency") == 2 && num(c2, "peak_running") <= 2, "%s conc 2: peak %g", modes[m],
              num(c2, "peak_running"));
        /* each run its own part of the stream, after the warm-up's one request */
        CHECK(num(idle, "first_request") == 1 && num(r40, "first_request") == 3 && num(rinf, "first_request") == 7 &&
                  num(c2, "first_request") == 13,
              "%s: parts at %g, %g, %g, %g", modes[m], num(idle, "first_request"), num(r40, "first_request"),
              num(rinf, "first_request"), num(c2, "first_request"));
    }
    json_decref(rows);
    size_t len = 0;
    char *text = lz_test_read_file(out, &len);
    CHECK(text && strstr(text, "saturation (best output tokens/s") && strstr(text, "lazy / block") &&
              strstr(text, "p99 TTFT at the highest finite rate over the idle p99") && strstr(text, "full   rate 40"),
          "the table and the summary:\n%s", text ? text : "(none)");
    free(text);
}

/* --stream workload: the documents bench_workload --emit-questions names for the same corpus
 * size, K, alpha and seed (its d%05d i is the corpus's i-th line). */
static void test_workload_stream(void)
{
    char qs[800], wq[800];
    snprintf(qs, sizeof qs, "%s/stream.jsonl", dir);
    snprintf(wq, sizeof wq, "%s/workload.jsonl", dir);
    int rc = lz_test_sh("%s/../bench/bench_workload --corpus synthetic:116:50 --docs 2 --alpha 1.0 --seed 1 --questions 6 "
                        "--emit-questions %s > /dev/null 2>&1", bin, wq);
    CHECK(rc == 0, "bench_workload exited %d", rc);
    json_t *ours = read_lines(qs), *theirs = read_lines(wq), *ids = read_lines("datasets/demo/corpus.jsonl");
    /* a part of the stream a run: warm-up 1, idle 2, rate 40 4, rate inf 6, the closed loop 6 */
    CHECK(json_array_size(ours) == 19 && json_array_size(theirs) == 6 && json_array_size(ids) == 116,
          "19 requests in bench_serve's stream (%zu), 6 of bench_workload's (%zu), 116 documents",
          json_array_size(ours), json_array_size(theirs));
    int same = 0, tokens_ok = 0;
    for (size_t i = 0; i < json_array_size(ours) && i < json_array_size(theirs); i++) {
        json_t *a = json_object_get(json_array_get(ours, i), "docs"), *b = json_object_get(json_array_get(theirs, i), "docs");
        int eq = json_array_size(a) == 2 && json_array_size(b) == 2;
        for (size_t k = 0; eq && k < 2; k++) {
            const int idx = atoi(json_string_value(json_array_get(b, k)) + 1); /* "d00042" */
            eq = !strcmp(json_string_value(json_array_get(a, k)), str(json_array_get(ids, (size_t)idx), "id"));
        }
        same += eq;
        tokens_ok += strlen(str(json_array_get(ours, i), "question")) > 0;
    }
    CHECK(same == 6, "bench_serve's workload stream is bench_workload's: %d of 6 requests place the same documents", same);
    CHECK(tokens_ok == 6, "every question written");
    json_decref(ours);
    json_decref(theirs);
    json_decref(ids);
}

/* --setup a: the paper's knobs (k 5, alpha 2.1, the workload stream, 32-token questions, 16
 * output tokens) in the JSON line; options after it override. */
static void test_setup_a(void)
{
    char json[800];
    snprintf(json, sizeof json, "%s/setup.jsonl", dir);
    int rc = lz_test_sh("%s --store %s --model models/default.gguf --setup a --rates inf --requests 2 --idle 0 --warmup 0 "
                        "--json %s > /dev/null 2>&1", bench, store, json);
    CHECK(rc == 0, "--setup a exited %d", rc);
    json_t *rows = read_lines(json), *o = json_array_get(rows, 0);
    CHECK(json_array_size(rows) == 1 && num(o, "k") == 5 && fabs(num(o, "alpha") - 2.1) < 1e-9 &&
              !strcmp(str(o, "stream"), "workload") && num(o, "question_tokens") == 32 && num(o, "max_tokens") == 16 &&
              num(o, "done") == 2,
          "setup a: k %g, alpha %g, stream %s, question %g tokens, %g output tokens, %g done", num(o, "k"),
          num(o, "alpha"), str(o, "stream"), num(o, "question_tokens"), num(o, "max_tokens"), num(o, "done"));
    json_decref(rows);
}

/* --replay: every run from the stream's start, so the stream is as long as the longest run. */
static void test_replay(void)
{
    char qs[800];
    snprintf(qs, sizeof qs, "%s/replay.jsonl", dir);
    int rc = lz_test_sh("%s --store %s --model models/default.gguf --replay --rates inf --concurrency 1 --requests 3 --idle 2 "
                        "--warmup 2 --max-tokens 2 --k 2 --emit-questions %s > /dev/null 2>&1", bench, store, qs);
    CHECK(rc == 0, "--replay exited %d", rc);
    json_t *rows = read_lines(qs);
    CHECK(json_array_size(rows) == 3, "--replay: a stream of the longest run, 3 (%zu)", json_array_size(rows));
    json_decref(rows);
}

/* --engines 2: the requests over two CPU engines behind the router; each row tells each
 * engine's requests and hit rate, and the aggregate is their sum. */
static void test_engines(void)
{
    char json[800];
    snprintf(json, sizeof json, "%s/engines.jsonl", dir);
    int rc = lz_test_sh("%s --store %s --model models/default.gguf --engines 2 --rates inf --concurrency 4 --requests 12 "
                        "--idle 2 --warmup 2 --max-tokens 2 --k 2 --alpha 1.5 --json %s > /dev/null 2>&1", bench, store,
                        json);
    CHECK(rc == 0, "--engines 2 exited %d", rc);
    json_t *rows = read_lines(json);
    CHECK(json_array_size(rows) == 3, "--engines 2: idle, rate inf, conc 4 (%zu rows)", json_array_size(rows));
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *o = json_array_get(rows, i), *pe = json_object_get(o, "per_engine");
        double req = 0, hits = 0, lookups = 0;
        for (size_t e = 0; e < json_array_size(pe); e++) {
            json_t *x = json_array_get(pe, e);
            req += num(x, "requests");
            hits += num(x, "host_hits");
            lookups += num(x, "host_hits") + num(x, "host_misses");
        }
        const double agg = lookups ? hits / lookups : 0;
        CHECK(num(o, "engines") == 2 && json_array_size(pe) == 2 && req == num(o, "done") && lookups > 0 &&
                  fabs(num(o, "hit_rate") - agg) < 1e-9 && !strcmp(str(o, "tier"), "host"),
              "row %zu: 2 engines, %g of %g requests, hit rate %g = %g", i, req, num(o, "done"), num(o, "hit_rate"), agg);
    }
    json_decref(rows);
    CHECK(lz_test_sh("%s --store %s --model models/default.gguf --gpus 0,0 > /dev/null 2>&1", bench, store) == 2,
          "--gpus without the CUDA build: a usage error");
}

/* Bad options: usage errors (exit 2), no run. */
static void test_usage(void)
{
    const char *bad[] = {"--mode lazy,bogus", "--rates 0", "--rates 1,x", "--concurrency 0", "--setup b",
                         "--stream sideways", "--question-tokens -1", "--k 65", "--no-such-option 1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const int rc = lz_test_sh("%s --store %s --model models/default.gguf %s > /dev/null 2>&1", bench, store, bad[i]);
        CHECK(rc == 2, "'%s': exit %d, want 2", bad[i], rc);
    }
    CHECK(lz_test_sh("%s --port 1 --question-tokens 8 > /dev/null 2>&1", bench) == 2, "HTTP mode: in-process options refused");
    CHECK(lz_test_sh("%s --help > /dev/null 2>&1", bench) == 0, "--help");
}

/* The HTTP mode against lazyserve on a free port of 127.0.0.1: every request answered. */
static void test_http(void)
{
    char json[800], port[800];
    snprintf(json, sizeof json, "%s/http.jsonl", dir);
    snprintf(port, sizeof port, "%s/port", dir);
    const int rc = lz_test_sh(
        "%s/lazyserve -q --store %s -m models/default.gguf --port 0 --port-file %s --no-stats 2>%s/server.log & pid=$!; "
        "i=0; while [ ! -s %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
        "%s --port $(cat %s) --rates inf --requests 3 --k 2 --max-tokens 4 --label h --json %s > /dev/null 2>&1; st=$?; "
        "kill $pid; wait $pid; exit $st", bin, store, port, dir, port, bench, port, json);
    CHECK(rc == 0, "HTTP run exited %d", rc);
    json_t *rows = read_lines(json), *o = json_array_get(rows, 0);
    CHECK(json_array_size(rows) == 1 && num(o, "done") == 3 && !strcmp(str(o, "rate"), "inf") && at(o, "ttft_s", 0) > 0,
          "HTTP: %zu rows, %g done", json_array_size(rows), num(o, "done"));
    json_decref(rows);
}

int main(void)
{
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    snprintf(bin, sizeof bin, "%s", b);
    snprintf(bench, sizeof bench, "%s/../bench/bench_serve", bin);
    if (access(bench, X_OK) || access("models/default.gguf", R_OK)) {
        printf("SKIP %s or models/default.gguf not found\n", bench);
        return lz_test_done();
    }
    if (!lz_test_tmpdir(dir, sizeof dir)) { CHECK(0, "tmpdir"); return lz_test_done(); }
    snprintf(store, sizeof store, "%s/store", dir);
    if (lz_test_sh("%s/lazyingest --quiet --model models/default.gguf --store %s datasets/demo/corpus.jsonl", bin, store)) {
        CHECK(0, "could not build the test store");
        return lz_test_done();
    }
    test_modes_and_rates();
    test_workload_stream();
    test_setup_a();
    test_replay();
    test_engines();
    test_usage();
    test_http();
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
