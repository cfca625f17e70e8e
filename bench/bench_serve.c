/* bench_serve.c - a load generator for lazyserve in the manner of vLLM's
 * benchmark_serving. Each request places K documents drawn by Zipf popularity
 * (eval/zipf.h) over a corpus's documents and streams a fixed number of output
 * tokens (ignore_eos); measured per run: requests/s, output tokens/s, time to
 * first token, time per output token and inter-token latency (mean, p50, p99).
 *
 * Over HTTP (bench/serve_http.h), a running server, Poisson arrivals at each rate:
 *
 *   bench_serve --port P --corpus corpus.jsonl [--rates 1,2,4,inf] [--requests N]
 *               [--k K] [--alpha A] [--max-tokens M] [--seed S] [--label L] [--json FILE]
 *
 * Or in-process (--store; bench/serve_inproc.h): the same kind of requests straight
 * to the scheduler (serve/sched.h) over a session of this process, no HTTP (the GPU
 * machine need not have libmicrohttpd), for each mode of --mode in turn (a fresh
 * session, and with --gpu a fresh GPU engine, a mode) over ONE request stream
 * (bench/serve_stream.h) and the same arrival times: a warm-up, then the idle TTFT
 * (--idle requests one at a time), Poisson arrivals at each rate of --rates (inf:
 * all at once), and closed loops at each concurrency of --concurrency (C clients,
 * each submitting its next request when its last one ends; the default when no
 * rate is given). Each run takes the next part of the stream (the warm-up the
 * first), so no run finds the very placements of its own requests cached by an
 * earlier one: block mode's copies per (document, offset) are not handed a replay
 * (--replay: every run from the stream's start, as the HTTP mode does). With --gpu
 * (CUDA builds) the first mode is also run serially first (the engine holding one
 * sequence, lazyquery --gpu's path: the baseline of "x serial"), then on the
 * engine's slots (sized for the largest batch). With --engines N (CPU) or
 * --gpus LIST (CUDA builds; "0,0": two engines on one GPU) the requests are
 * routed over N engines (serve/router.h, serve/engines.h: each its own
 * session, tiers and, on the GPU, weights, slots and --gpu-cache-bytes), no
 * serial baseline, and each run also reports every engine's requests and GPU
 * (else host) tier hit rate and the aggregate: --gpus 0 against --gpus 0,0
 * (and all) gives the multi-GPU figures (bench/gpu_serve_gpus.sh). Per run
 * a table row and a JSON line; at the end each mode's saturation throughput (the
 * best output tokens/s of rate inf and the concurrency levels) against the first
 * mode's, and its p99 TTFT at the highest finite rate over its idle p99. A row's
 * "step ms" is a decode step's engine time (its pass, sampling, streaming) and
 * "pass ms" the model's pass in it: TPOT minus the step is what admission and the
 * newcomers' prefills cost the running requests.
 *
 *   bench_serve --store DIR --model M [--corpus FILE.jsonl] [--gpu] [--mode lazy,block,full]
 *               [--rates 0.5,1,2,4,inf] [--concurrency 1,8,32,64] [--requests N]
 *               [--rate-seconds S] [--idle N] [--warmup N] [--setup a] [--k K] [--alpha A]
 *               [--stream draw|workload] [--question-tokens T] [--max-tokens M] [--seed S]
 *               [--max-running N] [--host-cache-bytes N] [--gpu-cache-bytes N]
 *               [--preload none|hot|all] [--gpu-seq-tokens T] [--no-serial] [--replay]
 *               [--engines N | --gpus LIST]
 *               [--label L] [--json FILE] [--emit-questions FILE]
 *
 * (bench_serve --help lists what each does.) What it leaves out: starting the
 * server (bench/serve_load.sh does), making the corpus (bench/synthetic_corpus.py,
 * bench_workload --emit-corpus). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "bench/serve_http.h"
#include "bench/serve_inproc.h"
#include "bench/serve_stats.h"
#include "bench/serve_stream.h"
#include "query/session.h"
#include "serve/engines.h"

#define MAXL 16 /* entries of a list option */

static void usage(FILE *f)
{
    fputs("usage: bench_serve --store DIR --model M [options]      (in-process)\n"
          "       bench_serve --port P [--corpus F] [--rates L] [--requests N] [--k K] [--alpha A]\n"
          "                   [--max-tokens M] [--seed S] [--label L] [--json FILE]      (HTTP)\n"
          "\n"
          "In-process: requests straight to lazyserve's scheduler over a session of this process.\n"
          "  --corpus FILE          JSONL whose ids (and titles) the requests use (default the demo's)\n"
          "  --mode LIST            modes run one after another over the same stream, e.g.\n"
          "                         lazy,block,full (default lazy; prefix too)\n"
          "  --rates LIST           Poisson arrivals a second, inf: all at once (e.g. 0.5,1,2,4,inf)\n"
          "  --concurrency LIST     closed loops of C clients (default 1,8,32,64 when no --rates)\n"
          "  --requests N           requests of a run (default 64; with --concurrency max(4 C, 64))\n"
          "  --rate-seconds S       a finite rate sends at most rate x S requests (at least 4): its\n"
          "                         arrivals span about S seconds (default 0: --requests at every rate)\n"
          "  --idle N               N requests one at a time: the idle TTFT (default 16; 0: none)\n"
          "  --warmup N             requests run first, not reported (default min(requests, 2 x batch))\n"
          "  --setup a              the paper's setup: --k 5 --alpha 2.1 --stream workload\n"
          "                         --question-tokens 32 --max-tokens 16 (the corpus: 100 documents of\n"
          "                         2,048 tokens from bench/synthetic_corpus.py); options after override\n"
          "  --k K, --alpha A       documents a request (default 5), Zipf exponent (default 1.0; 0 uniform)\n"
          "  --stream KIND          draw (default): Zipf over the corpus in its order; workload: the stream\n"
          "                         bench_workload --seed S --alpha A --docs K --emit-questions writes\n"
          "  --question-tokens T    each question T tokens under the model's tokenizer (default: a short\n"
          "                         question about the last document's title)\n"
          "  --max-tokens M         output tokens of every request, ignore_eos (default 32)\n"
          "  --seed S               the stream and the arrivals (default 1)\n"
          "  --max-running N        the batch of the rate runs (default 64; --gpu: the engine's slots)\n"
          "  --host-cache-bytes N   the session's host tier (default 1G)\n"
          "  --preload WHAT         none (default), hot, or all (the host tier filled with the corpus), in\n"
          "                         lazy and block modes\n"
          "  --gpu                  on the GPU engine (CUDA builds: build/cuda/bench_serve)\n"
          "  --gpu-cache-bytes N    GPU memory documents may keep (default: half of what is free)\n"
          "  --gpu-seq-tokens T     own tokens of a slot in lazy and block modes (default 2048; full and\n"
          "                         prefix: the stream's longest prompt and answer)\n"
          "  --no-serial            no serial baseline with --gpu\n"
          "  --engines N            N CPU engines behind the router (lazyserve --engines): per run each\n"
          "                         engine's requests and tier hit rate, and the aggregate\n"
          "  --gpus LIST            one GPU engine per device listed (implies --gpu): all, 0,2, 0-3, 0,0\n"
          "                         (two engines on GPU 0); --gpu-cache-bytes, --host-cache-bytes and\n"
          "                         --max-running (its batch, its slots) are each engine's\n"
          "  --replay               every run replays the stream's first requests (default: each run the\n"
          "                         next part of the stream, so none finds its own placements cached)\n"
          "  --label L, --json FILE a label for the rows; JSON lines appended to FILE\n"
          "  --emit-questions FILE  the stream as lazyquery --questions JSONL (id, question, docs)\n",
          f);
}

typedef struct {
    const char *store_dir, *model_path, *corpus, *label, *emit_questions;
    int modes[8], n_modes;
    int conc[MAXL], n_conc, max_c;
    double rates[MAXL];
    char rate_names[MAXL][32];
    int n_rates;
    int n_req, n_idle, n_warmup, max_running, max_tokens, seq_tokens, gpu, serial, preload, replay;
    int n_engines;         /* --engines N (0: one scheduler, the classic runs) */
    const char *gpus;      /* --gpus LIST */
    double rate_seconds;
    size_t host_cache, gpu_cache;
    lz_bs_stream_opts so;
    FILE *json;
} inproc_opts;

/* What the closing summary needs of a mode. */
typedef struct {
    double sat_tps;        /* the best output tokens/s of rate inf and the concurrency levels */
    char sat_run[32];
    double top_rate_p99, idle_p99;
    char top_rate[32];
} mode_summary;

/* a comma-separated list into names (each at most 31 bytes): the count, -1 when more than MAXL */
static int split(const char *s, char names[MAXL][32])
{
    int n = 0;
    while (*s) {
        if (n == MAXL) return -1;
        const size_t l = strcspn(s, ",");
        snprintf(names[n++], 32, "%.*s", (int)(l < 31 ? l : 31), s);
        s += l;
        s += *s == ',';
    }
    return n;
}

/* The options (the setup's defaults first, the rest over them): 0, or an exit status. */
static int parse(int argc, char **argv, inproc_opts *o)
{
    memset(o, 0, sizeof *o);
    o->corpus = "datasets/demo/corpus.jsonl";
    o->label = "";
    o->modes[0] = LZ_MODE_LAZY;
    o->n_modes = 1;
    o->n_idle = 16;
    o->n_warmup = -1;
    o->max_running = 64;
    o->seq_tokens = 2048;
    o->serial = 1;
    o->so = (lz_bs_stream_opts){.K = 5, .alpha = 1.0, .seed = 1, .kind = LZ_BS_STREAM_DRAW};
    o->max_tokens = 32;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--setup")) {
            if (strcmp(argv[i + 1], "a")) return lz_cli_usage("--setup: expected a, got '%s'", argv[i + 1]);
            o->so.K = 5, o->so.alpha = 2.1, o->so.kind = LZ_BS_STREAM_WORKLOAD, o->so.question_tokens = 32;
            o->max_tokens = 16;
        }
    const char *conc = NULL, *rates = NULL;
    static const char *const streams[] = {"draw", "workload", NULL}, *const preloads[] = {"none", "hot", "all", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--gpu")) { o->gpu = 1; continue; }
        if (!strcmp(a, "--no-serial")) { o->serial = 0; continue; }
        if (!strcmp(a, "--replay")) { o->replay = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return -1; }
        if (i + 1 >= argc) return lz_cli_usage("%s: a value expected (or an unknown option)", a);
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--store")) o->store_dir = v;
        else if (!strcmp(a, "--model")) o->model_path = v;
        else if (!strcmp(a, "--corpus")) o->corpus = v;
        else if (!strcmp(a, "--label")) o->label = v;
        else if (!strcmp(a, "--emit-questions")) o->emit_questions = v;
        else if (!strcmp(a, "--setup")) ;
        else if (!strcmp(a, "--concurrency")) conc = v;
        else if (!strcmp(a, "--rates")) rates = v;
        else if (!strcmp(a, "--mode")) {
            char names[MAXL][32];
            const int n = split(v, names);
            if (n < 1 || n > 8) return lz_cli_usage("--mode: 1 to 8 modes, got '%s'", v);
            for (int k = 0; k < n; k++)
                if ((o->modes[k] = lz_query_mode_parse(names[k])) < 0)
                    return lz_cli_usage("--mode: '%s' is not lazy, block, prefix or full", names[k]);
            o->n_modes = n;
        }
        else if (!strcmp(a, "--requests")) bad = lz_cli_int(a, v, 1, 1 << 20, &o->n_req);
        else if (!strcmp(a, "--rate-seconds")) bad = lz_cli_double(a, v, 0, 1e6, &o->rate_seconds);
        else if (!strcmp(a, "--idle")) bad = lz_cli_int(a, v, 0, 1 << 20, &o->n_idle);
        else if (!strcmp(a, "--warmup")) bad = lz_cli_int(a, v, 0, 1 << 20, &o->n_warmup);
        else if (!strcmp(a, "--k")) bad = lz_cli_int(a, v, 1, LZ_BS_MAX_K, &o->so.K);
        else if (!strcmp(a, "--alpha")) bad = lz_cli_double(a, v, 0, 20, &o->so.alpha);
        else if (!strcmp(a, "--stream")) bad = lz_cli_choice(a, v, streams, &o->so.kind);
        else if (!strcmp(a, "--question-tokens")) bad = lz_cli_int(a, v, 0, 1 << 16, &o->so.question_tokens);
        else if (!strcmp(a, "--max-tokens")) bad = lz_cli_int(a, v, 1, 1 << 20, &o->max_tokens);
        else if (!strcmp(a, "--seed")) {
            long s;
            bad = lz_cli_long(a, v, 0, 1L << 62, &s);
            o->so.seed = (uint64_t)s;
        }
        else if (!strcmp(a, "--max-running")) bad = lz_cli_int(a, v, 1, 4096, &o->max_running);
        else if (!strcmp(a, "--gpu-seq-tokens")) bad = lz_cli_int(a, v, 1, 1 << 20, &o->seq_tokens);
        else if (!strcmp(a, "--host-cache-bytes")) bad = lz_cli_size(a, v, &o->host_cache);
        else if (!strcmp(a, "--gpu-cache-bytes")) bad = lz_cli_size(a, v, &o->gpu_cache);
        else if (!strcmp(a, "--preload")) bad = lz_cli_choice(a, v, preloads, &o->preload);
        else if (!strcmp(a, "--engines")) bad = lz_cli_int(a, v, 1, LZ_SERVE_MAX_ENGINES, &o->n_engines);
        else if (!strcmp(a, "--gpus")) { o->gpus = v; o->gpu = 1; }
        else if (!strcmp(a, "--json")) {
            if (!(o->json = fopen(v, "a"))) return lz_cli_fail("cannot write %s", v);
        }
        else return lz_cli_usage("unknown option '%s'", a);
        if (bad) return LZ_EXIT_USAGE;
    }
    if (!o->store_dir || !o->model_path) return lz_cli_usage("the in-process mode needs --store and --model");
    if (o->gpus && !lz_engine_gpu_built()) return lz_cli_usage("--gpus needs the CUDA build (make cuda: build/cuda/bench_serve)");
    if (o->gpu && !lz_engine_gpu_built()) return lz_cli_usage("--gpu needs the CUDA build (make cuda: build/cuda/bench_serve)");
    if (o->gpu && o->n_engines) return lz_cli_usage("--engines N runs CPU engines; GPU engines: --gpus LIST");
    if (o->gpus || o->n_engines) o->serial = 0; /* several engines: no serial baseline (the stream laid out without) */
    char names[MAXL][32];
    if (!conc && !rates) conc = "1,8,32,64";
    int n = conc ? split(conc, names) : 0;
    if (n < 0) return lz_cli_usage("--concurrency: at most %d levels", MAXL);
    for (int k = 0; k < n; k++) {
        if (lz_cli_int("--concurrency", names[k], 1, 4096, &o->conc[k])) return LZ_EXIT_USAGE;
        if (o->conc[k] > o->max_c) o->max_c = o->conc[k];
    }
    o->n_conc = n;
    n = rates ? split(rates, o->rate_names) : 0;
    if (n < 0) return lz_cli_usage("--rates: at most %d rates", MAXL);
    for (int k = 0; k < n; k++) {
        if (!strcmp(o->rate_names[k], "inf")) o->rates[k] = INFINITY;
        else if (lz_cli_double("--rates", o->rate_names[k], 1e-6, 1e9, &o->rates[k])) return LZ_EXIT_USAGE;
    }
    o->n_rates = n;
    if (!o->n_req) o->n_req = o->n_conc && 4 * o->max_c > 64 ? 4 * o->max_c : 64;
    o->so.corpus = o->corpus;
    return 0;
}

/* The batch the options ask for: the largest concurrency, and --max-running for the rates (on
 * the GPU: the slots made for it, fewer when they do not fit). */
static int opt_batch(const inproc_opts *o)
{
    const int b = o->n_rates && o->max_running > o->max_c ? o->max_running : o->max_c;
    return b > 1 ? b : 1;
}

/* Where each run's requests begin in the stream: a segment of its own, in the order the runs
 * go (the same for every mode), so that no run replays the documents and placements an earlier
 * one left in the caches; with --replay every run from the stream's start (as the HTTP mode). */
typedef struct {
    int serial_warm, serial, warm, idle, rate[MAXL], conc[MAXL]; /* each run's first request */
    int n_serial_warm, n_warm;                                   /* the warm-ups' requests */
    int total;                                                   /* the stream's length */
} layout;

static int seg(const inproc_opts *o, int *at, int *longest, int n)
{
    const int first = o->replay ? 0 : *at;
    *at += n;
    if (n > *longest) *longest = n;
    return first;
}

/* Requests of a finite rate: --requests, at most rate x --rate-seconds (at least 4). */
static int rate_requests(const inproc_opts *o, double rate)
{
    if (!isfinite(rate) || o->rate_seconds <= 0) return o->n_req;
    const int cap = (int)ceil(rate * o->rate_seconds);
    const int n = cap < 4 ? 4 : cap;
    return n < o->n_req ? n : o->n_req;
}

static void lay_out(const inproc_opts *o, layout *L)
{
    int at = 0, longest = 1;
    L->n_serial_warm = o->gpu && o->serial ? (o->n_req < 16 ? o->n_req : 16) : 0;
    L->n_warm = o->n_warmup >= 0 ? o->n_warmup : o->n_req < 2 * opt_batch(o) ? o->n_req : 2 * opt_batch(o);
    L->serial_warm = seg(o, &at, &longest, L->n_serial_warm);
    L->serial = seg(o, &at, &longest, o->gpu && o->serial ? o->n_req : 0);
    L->warm = seg(o, &at, &longest, L->n_warm);
    L->idle = seg(o, &at, &longest, o->n_idle);
    for (int i = 0; i < o->n_rates; i++) L->rate[i] = seg(o, &at, &longest, rate_requests(o, o->rates[i]));
    for (int i = 0; i < o->n_conc; i++) L->conc[i] = seg(o, &at, &longest, o->n_req);
    L->total = o->replay ? longest : at > 0 ? at : 1;
}

/* ---- the rows: a table line and a JSON line a run ---- */

static void header(void)
{
    printf("%-6s %-10s %5s %5s %8s %9s %8s %8s %8s %7s %7s %7s %7s %7s %7s %8s %6s %7s %7s %7s\n", "mode", "run", "reqs",
           "done", "req/s", "out tok/s", "ttft ms", "p50", "p99", "tpot ms", "p50", "p99", "itl ms", "p50", "p99",
           "p99/idle", "batch", "x serial", "step ms", "pass ms");
}

/* run: "idle", "serial", "rate" (rate_name) or "concurrency" (C); idle_p99 > 0: the ratio of
 * this run's p99 TTFT to it; serial_tps > 0: this run's output tokens/s against it. */
static void row(const inproc_opts *o, const lz_bs_stream *s, int mode, const char *run, const char *rate_name, int C,
                int first, const lz_bs_result *r, double idle_p99, double serial_tps)
{
    char what[32], ratio[16] = "-", xs[16] = "-";
    if (!strcmp(run, "rate")) snprintf(what, sizeof what, "rate %s", rate_name);
    else if (!strcmp(run, "concurrency")) snprintf(what, sizeof what, "conc %d", C);
    else snprintf(what, sizeof what, "%s", run);
    const double over = idle_p99 > 0 && r->done ? r->ttft.p99 / idle_p99 : 0;
    if (over > 0) snprintf(ratio, sizeof ratio, "%.2fx", over);
    if (serial_tps > 0) snprintf(xs, sizeof xs, "%.2fx", r->tok_s / serial_tps);
    printf("%-6s %-10s %5d %5d %8.2f %9.1f %8.1f %8.1f %8.1f %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %8s %6.1f %7s %7.2f %7.2f\n",
           lz_query_mode_name(mode), what, r->requests, r->done, r->req_s, r->tok_s, 1e3 * r->ttft.mean,
           1e3 * r->ttft.p50, 1e3 * r->ttft.p99, 1e3 * r->tpot.mean, 1e3 * r->tpot.p50, 1e3 * r->tpot.p99,
           1e3 * r->itl.mean, 1e3 * r->itl.p50, 1e3 * r->itl.p99, ratio, r->mean_batch, xs, r->step_ms, r->pass_ms);
    if (r->n_engines > 0) { /* the engines' parts: requests and hit rate of the fastest tier, then the aggregate */
        int64_t h = 0, l = 0;
        printf("%-6s %-10s %s hits:", "", "", o->gpu ? "GPU tier" : "host tier");
        for (int e = 0; e < r->n_engines; e++) {
            const lz_bs_engine_run *x = &r->eng[e];
            const int64_t eh = o->gpu ? x->gpu_hits : x->host_hits, el = eh + (o->gpu ? x->gpu_misses : x->host_misses);
            h += eh;
            l += el;
            printf(" e%d %.1f%% (%lld req)", e, el ? 100.0 * eh / el : 0.0, (long long)x->ok);
        }
        printf("; aggregate %.1f%% of %lld lookups\n", l ? 100.0 * h / l : 0.0, (long long)l);
    }
    fflush(stdout);
    if (!o->json) return;
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)s->hash);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:[f,f,f], s:[f,f,f], s:[f,f,f], "
                          "s:f, s:i, s:I, s:f, s:i, s:f, s:s, s:s, s:f, s:i, s:i, s:I}",
                          "label", o->label, "mode", lz_query_mode_name(mode), "device", o->gpu ? "GPU" : "CPU", "run",
                          run, "concurrency", C, "requests", r->requests, "done", r->done, "failed", r->failed,
                          "wall_s", r->wall_s, "req_s", r->req_s, "out_tok_s", r->tok_s, "ttft_s", r->ttft.mean,
                          r->ttft.p50, r->ttft.p99, "tpot_s", r->tpot.mean, r->tpot.p50, r->tpot.p99, "itl_s",
                          r->itl.mean, r->itl.p50, r->itl.p99, "mean_batch", r->mean_batch, "peak_running",
                          r->peak_running, "mem_retries", (json_int_t)r->mem_retries, "arrival_span_s",
                          r->arrival_span_s, "k", o->so.K, "alpha", o->so.alpha, "stream",
                          o->so.kind == LZ_BS_STREAM_WORKLOAD ? "workload" : "draw", "stream_hash", hash,
                          "question_tokens", s->mean_q_tokens, "max_tokens", o->max_tokens, "corpus_docs",
                          s->n_corpus, "seed", (json_int_t)o->so.seed);
    if (j && rate_name) json_object_set_new(j, "rate", json_string(rate_name));
    if (j) json_object_set_new(j, "first_request", json_integer(first)); /* the run's part of the stream */
    if (j) json_object_set_new(j, "step_ms", json_real(r->step_ms));     /* a decode step's engine time */
    if (j) json_object_set_new(j, "pass_ms", json_real(r->pass_ms));     /* its model pass */
    if (j && idle_p99 > 0) {
        json_object_set_new(j, "idle_ttft_p99_s", json_real(idle_p99));
        json_object_set_new(j, "ttft_p99_over_idle", json_real(over));
    }
    if (j && serial_tps > 0) json_object_set_new(j, "vs_serial", json_real(r->tok_s / serial_tps));
    if (j && r->n_engines > 0) { /* each engine's part and the aggregate hit rate of its fastest tier */
        json_t *a = json_array();
        int64_t h = 0, l = 0;
        for (int e = 0; e < r->n_engines; e++) {
            const lz_bs_engine_run *x = &r->eng[e];
            const int64_t eh = o->gpu ? x->gpu_hits : x->host_hits, el = eh + (o->gpu ? x->gpu_misses : x->host_misses);
            h += eh;
            l += el;
            json_array_append_new(a, json_pack("{s:i, s:I, s:I, s:I, s:I, s:I, s:f}", "engine", e, "requests",
                                               (json_int_t)x->ok, "gpu_hits", (json_int_t)x->gpu_hits, "gpu_misses",
                                               (json_int_t)x->gpu_misses, "host_hits", (json_int_t)x->host_hits,
                                               "host_misses", (json_int_t)x->host_misses, "hit_rate",
                                               el ? (double)eh / (double)el : 0.0));
        }
        json_object_set_new(j, "engines", json_integer(r->n_engines));
        json_object_set_new(j, "per_engine", a);
        json_object_set_new(j, "tier", json_string(o->gpu ? "gpu" : "host"));
        json_object_set_new(j, "hit_rate", json_real(l ? (double)h / (double)l : 0.0));
    }
    char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (line) fprintf(o->json, "%s\n", line);
    fflush(o->json);
    free(line);
    json_decref(j);
}

/* One run, its row, the mode's summary updated; 0 or -1 (why printed). */
static int run_one(const inproc_opts *o, const lz_bs_stream *s, const lz_bs_target *tg, int mode, const char *run,
                   int ri, int C, int first, int n, double idle_p99, double serial_tps, mode_summary *ms,
                   lz_bs_result *out)
{
    char err[512];
    lz_bs_result r;
    const double rate = ri >= 0 ? o->rates[ri] : 0;
    if (lz_bs_run(tg, s, first, n, C, rate, o->so.seed, &r, err, sizeof err)) {
        fprintf(stderr, "bench_serve: %s %s: %s\n", lz_query_mode_name(mode), run ? run : "warm-up", err);
        return -1;
    }
    if (run) row(o, s, mode, run, ri >= 0 ? o->rate_names[ri] : NULL, C, first, &r, idle_p99, serial_tps);
    if (ms && (C > 0 || isinf(rate)) && r.tok_s > ms->sat_tps) {
        ms->sat_tps = r.tok_s;
        if (C > 0) snprintf(ms->sat_run, sizeof ms->sat_run, "conc %d", C);
        else snprintf(ms->sat_run, sizeof ms->sat_run, "rate inf");
    }
    if (out) *out = r;
    return 0;
}

/* The stream as lazyquery --questions JSONL, as bench_workload --emit-questions writes it:
 * {"id": "q0", "question", "docs": [...]} a line. 0 or -1 (why printed). */
static int emit_questions(const lz_bs_stream *s, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "bench_serve: cannot write %s\n", path); return -1; }
    for (int i = 0; i < s->n; i++) {
        char id[32];
        snprintf(id, sizeof id, "q%d", i);
        json_t *d = json_array();
        for (int k = 0; k < s->r[i].n_docs; k++) json_array_append_new(d, json_string(s->r[i].docs[k]));
        json_t *o = json_pack("{s:s, s:s, s:o}", "id", id, "question", s->r[i].question, "docs", d);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (line) fprintf(f, "%s\n", line);
        free(line);
        json_decref(o);
    }
    if (fclose(f)) { fprintf(stderr, "bench_serve: cannot write %s\n", path); return -1; }
    return 0;
}

/* ---- a mode: its session (and GPU engine), then every run ---- */

/* The measured runs of one mode on target tg, after the engine is made: a warm-up of at most
 * warm_conc requests at once (not reported), the idle TTFT, each Poisson rate, each closed-loop
 * concurrency (at most batch running a scheduler on the GPU); serial_tps: the concurrency rows'
 * baseline (0: none). 0, or -1 when a run failed. */
static int run_levels(const inproc_opts *o, const layout *L, const lz_bs_stream *s, lz_bs_target *tg, int mode, int batch,
                      int warm_conc, double serial_tps, mode_summary *ms)
{
    int rc = 0;
    const int warm = L->n_warm;
    if (warm) {
        tg->quiet = 1;
        run_one(o, s, tg, mode, NULL, -1, warm < warm_conc ? warm : warm_conc, L->warm, warm, 0, 0, NULL, NULL);
        tg->quiet = 0;
    }
    double idle_p99 = 0;
    if (o->n_idle) {
        lz_bs_result r;
        if (!run_one(o, s, tg, mode, "idle", -1, 1, L->idle, o->n_idle, 0, 0, NULL, &r)) idle_p99 = r.ttft.p99;
        else rc = -1;
        ms->idle_p99 = idle_p99;
    }
    for (int i = 0; i < o->n_rates; i++) {
        lz_bs_result r;
        if (run_one(o, s, tg, mode, "rate", i, 0, L->rate[i], rate_requests(o, o->rates[i]), idle_p99, 0, ms, &r)) {
            rc = -1;
            continue;
        }
        if (isfinite(o->rates[i]) && (!ms->top_rate[0] || o->rates[i] >= atof(ms->top_rate))) {
            snprintf(ms->top_rate, sizeof ms->top_rate, "%s", o->rate_names[i]);
            ms->top_rate_p99 = r.ttft.p99;
        }
    }
    for (int i = 0; i < o->n_conc; i++) {
        const int C = o->conc[i];
        tg->max_running = C < batch || !o->gpu ? C : batch;
        rc |= run_one(o, s, tg, mode, "concurrency", -1, C, L->conc[i], o->n_req, 0, serial_tps, ms, NULL);
    }
    return rc;
}

/* The query session's options of a mode's run: its answer length, the model's context, the
 * host tier's budget when given. */
static lz_query_opts mode_query_opts(const inproc_opts *o, const lz_llama *m, int mode)
{
    lz_query_opts qo;
    lz_query_opts_default(&qo);
    qo.mode = mode;
    qo.max_new_tokens = o->max_tokens;
    qo.max_positions = m->cfg.ctx;
    if (o->host_cache) qo.cache_bytes = o->host_cache;
    return qo;
}

static int run_mode(const inproc_opts *o, const layout *L, lz_llama *m, lz_store *st, const lz_bs_stream *s, int mode,
                    int first, int64_t own_full, double *serial_tps, mode_summary *ms)
{
    char err[1024];
    lz_query_opts qo = mode_query_opts(o, m, mode);
    const int whole = mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX; /* the prompt computed: own tokens */
    int batch = opt_batch(o);
    const int seq = whole ? (int)((own_full + 64 + 255) / 256 * 256) : o->seq_tokens;
    const lz_engine_opts eo = {.gpu = o->gpu, .device = -1, .own_tokens = whole ? (seq > 16384 ? seq : 16384) : 4096,
                               .gpu_cache = o->gpu_cache, .cache_policy = qo.cache_policy, .batch = qo.batch};
    lz_engine *eng = NULL;
    if (lz_engine_open(m, &eo, &eng, err, sizeof err)) { fprintf(stderr, "bench_serve: %s\n", err); return -1; }
    qo.backend = lz_engine_query(eng); /* the GPU's: one sequence (serial) until the slots are made */
    if (o->gpu) qo.cold = LZ_COLD_AUTO;
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, st, &qo, &q, err, sizeof err)) {
        fprintf(stderr, "bench_serve: %s\n", err);
        lz_engine_free(eng);
        return -1;
    }
    /* the modes that read cached documents; before the serial baseline, so that it reads the same tiers (a fresh
     * store has no access counts: hot preloads nothing, all fills the host tier only) */
    if (o->preload && (mode == LZ_MODE_LAZY || mode == LZ_MODE_BLOCK)) {
        lz_query_preload_result pr;
        if (lz_query_preload(q, o->preload == 2, &pr, err, sizeof err)) fprintf(stderr, "bench_serve: preload: %s\n", err);
        printf("%-6s preload %s: %d documents (%.2f GB) into the GPU tier, %d (%.2f GB) into the host tier in %.2f s\n",
               lz_query_mode_name(mode), o->preload == 2 ? "all" : "hot", pr.gpu, pr.gpu_bytes / 1e9, pr.host,
               pr.host_bytes / 1e9, pr.seconds);
    }
    lz_bs_target tg = {.q = q, .st = st, .max_running = batch, .max_tokens = o->max_tokens};
    int rc = 0;
    if (o->gpu && o->serial && first) { /* the baseline: one sequence at a time, as lazyquery --gpu */
        tg.max_running = 1;
        tg.quiet = 1;
        rc |= run_one(o, s, &tg, mode, NULL, -1, 1, L->serial_warm, L->n_serial_warm, 0, 0, NULL, NULL);
        tg.quiet = 0;
        lz_bs_result r;
        if (!run_one(o, s, &tg, mode, "serial", -1, 1, L->serial, o->n_req, 0, 0, NULL, &r)) *serial_tps = r.tok_s;
        else rc = -1;
    }
    if (o->gpu) { /* slots for the largest batch: the engine sized against its memory */
        int slots = batch;
        qo.backend->release(qo.backend->ctx, 0); /* the serial run's last question (the one-question API holds it until the next) */
        while (slots > 1 && lz_engine_set_slots(eng, slots, seq, err, sizeof err)) {
            fprintf(stderr, "bench_serve: %s\n", err);
            slots /= 2;
        }
        /* the session reads the table it was given, which set_slots updated */
        batch = qo.backend->n_slots > 1 ? qo.backend->n_slots : 1;
        printf("%-6s GPU: %d slots of %d tokens\n", lz_query_mode_name(mode), qo.backend->n_slots, qo.backend->seq_tokens);
    }
    tg.max_running = batch;
    rc |= run_levels(o, L, s, &tg, mode, batch, batch, o->gpu ? *serial_tps : 0, ms);
    lz_query_session_free(q);
    lz_engine_free(eng);
    return rc;
}

/* A mode over several engines (--engines, --gpus): the engines made once (serve/engines.h), a
 * router each run with the documents' homes kept from run to run; no serial baseline. */
static int run_mode_engines(const inproc_opts *o, const layout *L, lz_llama *m, lz_store *st, const lz_bs_stream *s,
                            int mode, int64_t own_full, mode_summary *ms)
{
    char err[1024];
    lz_query_opts qo = mode_query_opts(o, m, mode);
    const int whole = mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX;
    int devs[LZ_SERVE_MAX_ENGINES], n_devs = 0;
    if (o->gpus) {
        n_devs = lz_cli_gpu_list("--gpus", o->gpus, lz_engine_gpu_count(), devs, LZ_SERVE_MAX_ENGINES);
        if (n_devs < 0) return -1;
    }
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_running = o->max_running; /* each engine's batch (its slots on the GPU) */
    const lz_serve_engines_opts eo = {.n = n_devs ? n_devs : o->n_engines, .devs = n_devs ? devs : NULL,
                                      .gpu_cache = o->gpu_cache,
                                      .gpu_seq_tokens = whole ? (int)((own_full + 64 + 255) / 256 * 256) : o->seq_tokens,
                                      .cold = -1, .preload = mode == LZ_MODE_LAZY || mode == LZ_MODE_BLOCK ? o->preload : 0,
                                      .prog = "bench_serve"};
    lz_serve_engines E;
    if (lz_serve_engines_open(&E, m, st, &qo, &so, &eo, err, sizeof err)) {
        fprintf(stderr, "bench_serve: %s\n", err);
        return -1;
    }
    /* the homes planned with the preload (serve/engines.h), else a set of its own */
    lz_serve_homes *homes = E.homes ? E.homes : lz_serve_homes_new();
    int batch = 1;
    for (int i = 0; i < E.n; i++)
        if (E.e[i].so.max_running > batch) batch = E.e[i].so.max_running;
    printf("%-6s %d engines (%s), batch up to %d each\n", lz_query_mode_name(mode), E.n, n_devs ? "GPU" : "CPU", batch);
    lz_bs_target tg = {.max_running = batch, .max_tokens = o->max_tokens, .engines = E.e, .n_engines = E.n,
                       .route_store = E.route_store, .homes = homes};
    const int rc = homes ? run_levels(o, L, s, &tg, mode, batch, batch * E.n, 0, ms) : -1;
    if (homes != E.homes) lz_serve_homes_free(homes);
    lz_serve_engines_close(&E);
    return rc;
}

/* The in-process mode (see the file's header). */
static int main_inproc(int argc, char **argv)
{
    inproc_opts o;
    const int prc = parse(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    char err[1024];
    lz_store *st = NULL;
    lz_llama *m = NULL;
    if (lz_store_open(o.store_dir, LZ_STORE_RDONLY, &st, err, sizeof err) ||
        lz_llama_load(o.model_path, &m, err, sizeof err)) {
        fprintf(stderr, "bench_serve: %s\n", err);
        lz_store_close(st);
        if (o.json) fclose(o.json);
        return LZ_EXIT_RUNTIME;
    }
    o.so.tok = m->tok;
    layout L;
    lay_out(&o, &L);
    o.so.n = L.total;
    lz_bs_stream s;
    int rc = 0;
    if (lz_bs_stream_make(&o.so, &s, err, sizeof err)) {
        fprintf(stderr, "bench_serve: %s\n", err);
        rc = LZ_EXIT_RUNTIME;
        goto out;
    }
    if (o.emit_questions && emit_questions(&s, o.emit_questions)) {
        rc = LZ_EXIT_RUNTIME;
        goto out;
    }
    int64_t own_full = 0; /* the longest prompt and answer: a full-mode slot's own tokens on the GPU */
    for (int i = 0; i < o.n_modes; i++)
        if (o.gpu && (o.modes[i] == LZ_MODE_FULL || o.modes[i] == LZ_MODE_PREFIX) && !own_full &&
            (own_full = lz_bs_stream_max_own(&s, st, m->tok, o.max_tokens, err, sizeof err)) < 0) {
            fprintf(stderr, "bench_serve: %s\n", err);
            rc = LZ_EXIT_RUNTIME;
            goto out;
        }
    char modes[96] = "";
    for (int i = 0; i < o.n_modes; i++)
        snprintf(modes + strlen(modes), sizeof modes - strlen(modes), "%s%s", i ? "," : "", lz_query_mode_name(o.modes[i]));
    printf("in-process, %s: modes %s over one stream of %d requests (hash %016llx; %s): k %d by Zipf %.2f over %d "
           "documents (stream %s), questions of %.1f tokens, %d output tokens (ignore_eos); %d requests a run",
           o.gpu ? "GPU" : "CPU", modes, s.n, (unsigned long long)s.hash,
           o.replay ? "every run replays its start" : "each run its own part, the warm-up first", o.so.K, o.so.alpha,
           s.n_corpus, o.so.kind == LZ_BS_STREAM_WORKLOAD ? "workload" : "draw", s.mean_q_tokens, o.max_tokens,
           o.n_req);
    if (o.n_rates && o.rate_seconds > 0) printf(" (a finite rate: at most rate x %g s, at least 4)", o.rate_seconds);
    printf("; idle: %d one at a time\n", o.n_idle);
    header();
    mode_summary ms[8];
    memset(ms, 0, sizeof ms);
    double serial_tps = 0;
    for (int i = 0; i < o.n_modes; i++)
        if (o.n_engines || o.gpus ? run_mode_engines(&o, &L, m, st, &s, o.modes[i], own_full, &ms[i])
                                  : run_mode(&o, &L, m, st, &s, o.modes[i], i == 0, own_full, &serial_tps, &ms[i]))
            rc = LZ_EXIT_RUNTIME;
    /* the comparison the issue asks for, read off the rows above */
    if (ms[0].sat_tps > 0) {
        printf("saturation (best output tokens/s of rate inf and the concurrency levels):");
        for (int i = 0; i < o.n_modes; i++) {
            printf(" %s %.1f (%s)", lz_query_mode_name(o.modes[i]), ms[i].sat_tps, ms[i].sat_run);
            if (i && ms[i].sat_tps > 0)
                printf(" [%s / %s %.2fx]", lz_query_mode_name(o.modes[0]), lz_query_mode_name(o.modes[i]),
                       ms[0].sat_tps / ms[i].sat_tps);
            printf("%s", i + 1 < o.n_modes ? "," : "");
        }
        if (serial_tps > 0) printf("; %s / serial %.2fx", lz_query_mode_name(o.modes[0]), ms[0].sat_tps / serial_tps);
        printf("\n");
    }
    if (ms[0].top_rate[0] && ms[0].idle_p99 > 0) {
        printf("p99 TTFT at the highest finite rate over the idle p99:");
        for (int i = 0; i < o.n_modes; i++)
            printf(" %s %.2fx (rate %s: %.1f ms, idle %.1f ms)%s", lz_query_mode_name(o.modes[i]),
                   ms[i].idle_p99 > 0 ? ms[i].top_rate_p99 / ms[i].idle_p99 : 0, ms[i].top_rate,
                   1e3 * ms[i].top_rate_p99, 1e3 * ms[i].idle_p99, i + 1 < o.n_modes ? "," : "");
        printf("\n");
    }
out:
    lz_bs_stream_free(&s);
    lz_llama_free(m);
    lz_store_close(st);
    if (o.json) fclose(o.json);
    return rc;
}

int main(int argc, char **argv)
{
    lz_cli_init("bench_serve");
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--store") || !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return main_inproc(argc, argv);
    return lz_bs_http_main(argc, argv);
}
