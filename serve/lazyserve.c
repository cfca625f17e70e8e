/* lazyserve.c - serves a store built by lazyingest over HTTP: an
 * OpenAI-compatible API (/v1/completions, /v1/chat/completions, streaming or
 * not) with a RAG extension, many requests answered together by continuous
 * batching on an engine thread (serve/sched.h), /metrics for Prometheus; on
 * several engines (--engines N on the CPU, --gpus LIST: one per GPU) requests
 * are routed by their documents' homes against the engines' loads
 * (serve/router.h, serve/engines.h). The store and model options are
 * lazyquery's (query/session_cli.h). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/env.h"
#include "base/runtime.h"
#include "query/session_cli.h"
#include "serve/engines.h"
#include "serve/http.h"
#include "serve/router.h"
#include "serve/sched.h"

static void usage(FILE *f)
{
    fputs(
        "usage: lazyserve [options]\n"
        "\n"
        "Serves the documents of a store built by lazyingest over HTTP, with an API that\n"
        "OpenAI's clients speak. Many requests are answered at once: their decode steps run\n"
        "together in one batched pass, on the CPU or with --gpu on the GPU (continuous\n"
        "batching: a request joins the running batch between two steps and leaves it at its\n"
        "end; with --gpu the engine holds --max-running sequences, sized against its memory).\n"
        "Stop it with Ctrl-C (SIGINT) or SIGTERM: running requests end, then it exits.\n"
        "\n"
        "Server:\n"
        "      --host ADDR        address to listen on (default 127.0.0.1: this machine only;\n"
        "                         0.0.0.0 or :: for every interface)\n"
        "      --port N           port (default 8080; 0: any free port, printed at start)\n"
        "      --port-file FILE   write the port bound to FILE once listening (scripts, tests)\n"
        "      --max-running N    requests decoding at once, the batch (default 64); with --gpu the\n"
        "                         GPU engine's sequences (fewer when they do not fit its memory; 1:\n"
        "                         one request runs at a time, as in lazyquery --gpu)\n"
        "      --gpus LIST        one engine per GPU listed (implies --gpu; CUDA builds): all, 0,2, 0-3; a\n"
        "                         device may repeat (0,0: two engines on one GPU). Each engine has its own\n"
        "                         weights, slots (--max-running each) and GPU tier (--gpu-cache-bytes\n"
        "                         each) and its own host tier (--host-cache-bytes each); a request goes\n"
        "                         to the engine where its documents are at home (the one that first\n"
        "                         placed them) unless that one is much busier than the least loaded.\n"
        "                         With --preload the hot documents get their homes first, dealt by\n"
        "                         tokens: each engine preloads its share into both tiers, then the\n"
        "                         others' into its host tier while it has room\n"
        "      --engines N        N engines on the CPU (default 1), routed the same way (the cores are\n"
        "                         shared: -t threads in all)\n"
        "      --spill-margin N   a request leaves its documents' home engine when that one's load\n"
        "                         (queued + running) is past 1.5 x the least loaded's + N (default: a\n"
        "                         quarter of --max-running, at least 2)\n"
        "      --gpu-seq-tokens N own tokens a request may hold on the GPU: its question and answer\n"
        "                         (the whole prompt in full and prefix modes); default 2048 (16384\n"
        "                         in full and prefix modes); longer requests fail\n"
        "      --max-queue N      requests waiting beyond which new ones get 429 (default 256; with\n"
        "                         several engines, each engine's: 429 when every queue is full)\n"
        "      --mem-budget N     memory the running requests may hold: each one's own KV (question\n"
        "                         and answer) plus the KV of the documents it places, e.g. 2G\n"
        "                         (default 1G); a request waits until it fits, and one larger than\n"
        "                         the whole budget gets 400\n"
        "      --max-prefill N    requests admitted between two decode steps (default 16): their\n"
        "                         questions run in one batched pass, the others wait a step\n"
        "      --max-body N       request bodies past N bytes get 413 (default 1M)\n"
        "      --max-connections N  connections at once, each a thread (default 256)\n"
        "      --retry-after S    the Retry-After header of a 429 (default 1 second)\n"
        "      --model-name NAME  the model id /v1/models lists and responses carry (default: the\n"
        "                         model file's name)\n"
        "      --order ORDER      retrieved documents best-last (default: nearest the question) or\n"
        "                         best-first\n"
        "  -q, --quiet            no start-up lines on standard error\n"
        "\n"
        "Store, model and answers (as lazyquery's):\n"
        LZ_SESSION_CLI_HELP
        LZ_CLI_COMMON_HELP
        "\n"
        "Endpoints:\n"
        "  POST /v1/completions        {\"prompt\": \"question\", ...}\n"
        "  POST /v1/chat/completions   {\"messages\": [{\"role\": \"user\", \"content\": \"question\"}], ...};\n"
        "                              the question is the last user message\n"
        "  GET  /v1/models             the one model served\n"
        "  GET  /health                {\"status\": \"ok\", \"running\": N, \"queued\": N}\n"
        "  GET  /metrics               Prometheus text: requests by outcome, responses by code,\n"
        "                              TTFT / time-per-output-token / queue histograms, tokens,\n"
        "                              decode steps and rows (mean batch), queue length, running\n"
        "                              requests, memory reserved, cache hits and held entries per tier;\n"
        "                              with several engines their sums, then each engine's\n"
        "                              (lazy_engine_*{engine=\"i\"}) and the routing (lazy_route_*)\n"
        "Request fields: max_tokens (default -n), temperature (default --temp), top_p, seed, stop\n"
        "(a string or up to 4), stream (server-sent events: 'data: {...}' chunks, then\n"
        "'data: [DONE]'), stream_options.include_usage, ignore_eos (vLLM's: no end of generation, the\n"
        "answer runs to max_tokens); n must be 1; other fields are ignored.\n"
        "The RAG extension: \"documents\": [\"id\", ...] places those documents (in order, the last\n"
        "nearest the question; a split record's id stands for its passages); \"retrieve\": {\"k\": 10}\n"
        "retrieves BM25's best k over the store; \"retrieve\": false places none; a request with\n"
        "neither retrieves --top-k. Responses carry \"sources\" (id, title, score, tokens; in a\n"
        "stream's first chunk) and \"timings\" (queue_s, ttft_s, tpot_s, total_s).\n"
        "Errors are JSON {\"error\": {\"message\", \"type\", \"param\", \"code\"}}: 400 malformed JSON or a\n"
        "bad field, a prompt past the model's context; 404 an unknown document id (named) or\n"
        "route; 405 a wrong method; 413 a body past --max-body; 429 a full queue (Retry-After);\n"
        "500 a failure while answering; 503 stopping. A client that disconnects has its request\n"
        "cancelled: its slot, KV and held documents are freed before the next decode step.\n"
        "\n"
        "Example:\n"
        "  lazyserve --store ./lazystore --port 8080 &\n"
        "  curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' \\\n"
        "       -d '{\"prompt\": \"What is the capital of Foxaria?\", \"max_tokens\": 32}'\n"
        "\n" LZ_ENV_HELP "\n" LZ_CLI_EXIT_HELP,
        f);
}

typedef struct {
    lz_session_cli sc;
    const char *host, *port_file, *model_name;
    int port, quiet, max_connections, retry_after, gpu_seq_tokens;
    int n_engines, spill_margin;
    const char *gpus;   /* --gpus LIST, parsed in main (it needs the CUDA runtime's device count) */
    size_t max_body;
    lz_serve_sched_opts so;
} options;

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_HOST = 256, O_PORT, O_PORT_FILE, O_MAX_RUNNING, O_MAX_QUEUE, O_MEM, O_PREFILL, O_BODY, O_CONN, O_RETRY,
           O_NAME, O_ORDER, O_GPU_SEQ, O_GPUS, O_ENGINES, O_SPILL };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_SESSION_CLI_LONGOPTS, LZ_CLI_OPT_QUIET,
        LZ_OPT_ARG("host", O_HOST), LZ_OPT_ARG("port", O_PORT), LZ_OPT_ARG("port-file", O_PORT_FILE),
        LZ_OPT_ARG("max-running", O_MAX_RUNNING), LZ_OPT_ARG("max-queue", O_MAX_QUEUE), LZ_OPT_ARG("mem-budget", O_MEM),
        LZ_OPT_ARG("max-prefill", O_PREFILL), LZ_OPT_ARG("max-body", O_BODY), LZ_OPT_ARG("max-connections", O_CONN),
        LZ_OPT_ARG("retry-after", O_RETRY), LZ_OPT_ARG("model-name", O_NAME), LZ_OPT_ARG("order", O_ORDER),
        LZ_OPT_ARG("gpu-seq-tokens", O_GPU_SEQ), LZ_OPT_ARG("gpus", O_GPUS), LZ_OPT_ARG("engines", O_ENGINES),
        LZ_OPT_ARG("spill-margin", O_SPILL),
        {NULL, 0, NULL, 0}};
    static const char *const orders[] = {"best-last", "best-first", NULL};
    int c;
    while ((c = lz_cli_getopt(argc, argv, "hV" LZ_SESSION_CLI_SHORT "q", longopts)) != -1) {
        const int shared = lz_session_cli_parse(&o->sc, c, optarg);
        if (shared == 1) continue;
        if (shared) return shared;
        switch (c) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 'q': o->quiet = 1; break;
        case O_HOST: o->host = optarg; break;
        case O_PORT: if (lz_cli_int("--port", optarg, 0, 65535, &o->port)) return LZ_EXIT_USAGE; break;
        case O_PORT_FILE: o->port_file = optarg; break;
        case O_MAX_RUNNING: if (lz_cli_int("--max-running", optarg, 1, 4096, &o->so.max_running)) return LZ_EXIT_USAGE; break;
        case O_MAX_QUEUE: if (lz_cli_int("--max-queue", optarg, 0, 1 << 20, &o->so.max_queue)) return LZ_EXIT_USAGE; break;
        case O_MEM:
            if (lz_cli_size("--mem-budget", optarg, &o->so.mem_budget)) return LZ_EXIT_USAGE;
            if (!o->so.mem_budget) return lz_cli_usage("--mem-budget: expected a size above 0, got '%s'", optarg);
            break;
        case O_PREFILL: if (lz_cli_int("--max-prefill", optarg, 1, 4096, &o->so.max_prefill)) return LZ_EXIT_USAGE; break;
        case O_BODY:
            if (lz_cli_size("--max-body", optarg, &o->max_body)) return LZ_EXIT_USAGE;
            if (!o->max_body) return lz_cli_usage("--max-body: expected a size above 0, got '%s'", optarg);
            break;
        case O_CONN: if (lz_cli_int("--max-connections", optarg, 1, 65536, &o->max_connections)) return LZ_EXIT_USAGE; break;
        case O_RETRY: if (lz_cli_int("--retry-after", optarg, 0, 3600, &o->retry_after)) return LZ_EXIT_USAGE; break;
        case O_NAME: o->model_name = optarg; break;
        case O_GPU_SEQ:
            if (lz_cli_int("--gpu-seq-tokens", optarg, 1, 1 << 20, &o->gpu_seq_tokens)) return LZ_EXIT_USAGE;
            break;
        case O_GPUS:
            if (!lz_engine_gpu_built()) return lz_cli_usage("--gpus needs the CUDA build (make cuda: build/cuda/lazyserve)");
            o->gpus = optarg;
            o->sc.gpu = 1;
            break;
        case O_ENGINES:
            if (lz_cli_int("--engines", optarg, 1, LZ_SERVE_MAX_ENGINES, &o->n_engines)) return LZ_EXIT_USAGE;
            break;
        case O_SPILL: if (lz_cli_int("--spill-margin", optarg, 0, 1 << 20, &o->spill_margin)) return LZ_EXIT_USAGE; break;
        case O_ORDER: if (lz_cli_choice("--order", optarg, orders, &o->so.best_first)) return LZ_EXIT_USAGE; break;
        default: return LZ_EXIT_USAGE;
        }
    }
    if (optind < argc) return lz_cli_usage("unexpected argument '%s' (questions come over HTTP)", argv[optind]);
    if (o->gpus && o->n_engines > 1)
        return lz_cli_usage("--engines N is for CPU engines; with --gpus the list says how many (0,0: two on GPU 0)");
    if (o->sc.gpu && o->n_engines > 1)
        return lz_cli_usage("--engines N runs CPU engines; for several GPU engines give --gpus LIST");
    const int erc = lz_cli_check_env();
    return erc ? erc : -1;
}

/* The model id: --model-name, else the model path's last component. */
static const char *model_name(const options *o)
{
    if (o->model_name) return o->model_name;
    const char *p = o->sc.model_path ? o->sc.model_path : "lazy";
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    const char *s = p + n;
    while (s > p && s[-1] != '/') s--;
    static char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(p + n - s), s);
    return name;
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    lz_cli_init("lazyserve");
    static options o = {.host = "127.0.0.1", .port = 8080, .max_connections = 256, .retry_after = 1,
                        .max_body = (size_t)1 << 20};
    lz_session_cli_default(&o.sc, lz_engine_gpu_built());
    lz_serve_sched_opts_default(&o.so);
    const int prc = parse_options(argc, argv, &o);
    if (prc >= 0) return prc;
    /* the signals that stop it are taken by sigwait below, never by another thread */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    signal(SIGPIPE, SIG_IGN);
    lz_store *st;
    lz_llama *m;
    const int orc = lz_session_cli_open_store(&o.sc, &st);
    if (orc) return orc;
    char err[1024] = "";
    int64_t n_stored = -1;
    if (lz_store_doc_count(st, &n_stored, err, sizeof err) == 0 && n_stored == 0)
        fprintf(stderr, "lazyserve: warning: store %s holds no documents (ingest a corpus into it first): every "
                "question is answered from the question alone\n", o.sc.store_dir);
    const int mrc = lz_session_cli_load_model(&o.sc, &m);
    if (mrc) {
        lz_store_close(st);
        return mrc;
    }
    o.so.record_hits = o.sc.stats;
    /* the engines: one (today's server), --engines N on the CPU, or one per --gpus device */
    int devs[LZ_SERVE_MAX_ENGINES], n_devs = 0;
    if (o.sc.gpu) {
        if (o.gpus) {
            n_devs = lz_cli_gpu_list("--gpus", o.gpus, lz_engine_gpu_count(), devs, LZ_SERVE_MAX_ENGINES);
            if (n_devs < 0) {
                lz_llama_free(m);
                lz_store_close(st);
                return LZ_EXIT_USAGE;
            }
        } else {
            devs[n_devs++] = 0; /* --gpu: the one engine on the first device, as before --gpus */
        }
    }
    const lz_serve_engines_opts eo = {.n = n_devs ? n_devs : o.n_engines ? o.n_engines : 1,
                                      .devs = n_devs ? devs : NULL, .gpu_cache = o.sc.gpu_cache,
                                      .gpu_seq_tokens = o.gpu_seq_tokens, .cold = o.sc.cold, .preload = o.sc.preload,
                                      .threads = o.sc.threads, .quiet = o.quiet};
    lz_serve_engines E = {0};
    int rc = LZ_EXIT_RUNTIME;
    lz_serve_router *router = NULL;
    lz_serve_http *http = NULL;
    if (lz_serve_engines_open(&E, m, st, &o.sc.qo, &o.so, &eo, err, sizeof err)) {
        fprintf(stderr, "lazyserve: %s\n", err);
        goto done;
    }
    lz_serve_router_opts ro;
    lz_serve_router_opts_default(&ro);
    ro.store = E.route_store;
    ro.homes = E.homes; /* planned with the preload (NULL: the router's own) */
    if (o.spill_margin) ro.spill_margin = o.spill_margin;
    if (lz_serve_router_new(E.e, E.n, &ro, &router, err, sizeof err)) {
        fprintf(stderr, "lazyserve: %s\n", err);
        goto done;
    }
    int batch = 0;
    for (int i = 0; i < E.n; i++) batch += lz_serve_sched_batch(lz_serve_router_sched(router, i));
    const lz_oai_defaults def = {.max_tokens = o.sc.qo.max_new_tokens, .temperature = o.sc.qo.temperature,
                                 .top_p = o.sc.qo.top_p, .seed = o.sc.qo.seed, .top_k = o.sc.top_k,
                                 .model = model_name(&o)};
    const lz_serve_http_opts ho = {.host = o.host, .port = o.port, .max_body = o.max_body,
                                   .max_connections = o.max_connections, .retry_after_s = o.retry_after,
                                   .defaults = def, .router = router};
    if (lz_serve_http_start(&ho, &http, err, sizeof err)) {
        fprintf(stderr, "lazyserve: %s\n", err);
        goto done;
    }
    const int port = lz_serve_http_port(http);
    if (o.port_file) {
        FILE *f = fopen(o.port_file, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f)) {
            fprintf(stderr, "lazyserve: cannot write --port-file %s\n", o.port_file);
            goto done;
        }
    }
    if (!o.quiet) {
        char engines[64] = "";
        if (E.n > 1) snprintf(engines, sizeof engines, "%d engines, ", E.n);
        fprintf(stderr, "lazyserve: serving %s (mode %s, %s%s, batch up to %d) on http://%s%s%s:%d\n", def.model,
                lz_query_mode_name(o.sc.qo.mode), engines, o.sc.gpu ? "GPU" : "CPU", batch,
                strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "", port);
    }
    int sig = 0;
    sigwait(&stop_set, &sig);
    if (!o.quiet) fprintf(stderr, "lazyserve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = LZ_EXIT_OK;
done:
    lz_serve_router_free(router); /* running requests end: their streams close */
    lz_serve_http_stop(http);     /* every connection's thread joined: the last ticket released */
    lz_serve_engines_close(&E);   /* sessions, GPU engines, the engines' store handles */
    lz_llama_free(m);
    lz_store_close(st);
    return rc;
}
