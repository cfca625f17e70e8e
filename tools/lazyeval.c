/* lazyeval.c - evaluates lazy on the official HotpotQA and 2WikiMultihopQA
 * files as a user runs them: builds or updates a store from the questions'
 * contexts (lazyingest), answers every question in one process through the
 * query session (its caches warm from question to question), in any mode,
 * on the CPU or the GPU, and reports quality (EM / F1 with each dataset's
 * normalisation, per type) and speed (TTFT, decode, cache tiers, recall@k)
 * as report.json, questions.csv and PNG plots. The library parts are eval/. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/env.h"
#include "base/runtime.h"
#include "engine/engine.h"
#include "eval/build_store.h"
#include "eval/dataset.h"
#include "eval/machine.h"
#include "eval/plot.h"
#include "eval/report.h"
#include "eval/report_header.h"
#include "eval/run.h"
#include "eval/store_map.h"
#include "eval/summary.h"
#include "eval/workload.h"
#include "model/prompt.h"
#include "query/session.h"
#include "store/store.h"

#define MAX_LIST 16  /* entries of --mode, --host-cache-bytes, --gpu-cache-bytes */
#define MAX_EXTRA 32 /* --ingest-arg */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: lazyeval [options] DATASET.json [DATASET.json ...]\n"
        "\n"
        "Evaluates lazy on HotpotQA or 2WikiMultihopQA files in their official format: builds or\n"
        "updates a store from the questions' contexts (with lazyingest), answers every question in\n"
        "one process (its document cache warm from question to question, as a server's), and writes\n"
        "a report of quality and speed: OUT/report.json, OUT/questions.csv (a row per question) and\n"
        "PNG plots in OUT/plots/ (gnuplot). Options take '--opt value' or '--opt=value'.\n"
        "\n"
        "Input\n"
        "  DATASET.json           a JSON array of questions. HotpotQA (distractor or fullwiki): _id,\n"
        "                         question, answer, type, level, supporting_facts [[title, i]], context\n"
        "                         [[title, [sentences]]]. 2WikiMultihopQA (dev, test): the same context,\n"
        "                         type, evidences [[subject, relation, object]], answer_id. A record\n"
        "                         without an answer (a test file) is answered, not scored\n"
        "      --format F         auto (default: 2wiki when the first record has \"evidences\"), hotpotqa,\n"
        "                         2wiki\n"
        "      --aliases FILE     2Wiki's id_aliases.json (JSONL: Q_id, aliases, demonyms): a question\n"
        "                         whose answer_id is listed also accepts those names (answer_aliases in a\n"
        "                         record, or an answer given as a list, count the same way)\n"
        "      --limit N          the first N questions only\n"
        "\n"
        "Store\n"
        "  -m, --model PATH       model (default: $%s, else <repo>/%s)\n"
        "  -s, --store DIR        store folder (default OUT/store). Every context passage is one\n"
        "                         document: id and title the passage's title; a title seen again with\n"
        "                         other text is the document 'title (2)', 'title (3)', ... (as lazyingest\n"
        "                         names HotpotQA context pairs); a passage longer than lazyingest's\n"
        "                         --max-doc-tokens is split into 'title#0', 'title#1', ... and a question\n"
        "                         naming it gets its passages. The passages are written to\n"
        "                         OUT/corpus.jsonl and lazyingest runs on it: a store that holds them\n"
        "                         already costs a hash a passage; lazyingest's summary: OUT/ingest.json\n"
        "      --no-ingest        use the store as it is. Each passage is found there by its text (under\n"
        "                         its title or a 'title (k)'): a question whose passages the store lacks,\n"
        "                         or holds with other text, fails; split passages are checked against\n"
        "                         --ingest-arg --max-doc-tokens N when given\n"
        "      --ingest-only      build or update the store and stop\n"
        "      --ingest-arg ARG   one more argument for lazyingest (repeatable: --ingest-arg\n"
        "                         --max-doc-tokens --ingest-arg 512)\n"
        "      --lazyingest PATH  the lazyingest program (default: $LZ_BIN/lazyingest, else the one\n"
        "                         next to lazyeval, else lazyingest on PATH)\n"
        "\n"
        "Answering\n"
        "      --setting S        distractor (default): each question over its own context passages,\n"
        "                         in context order; open: BM25 top-k over the whole store (every\n"
        "                         question's passages), the best nearest the question\n"
        "  -k, --top-k K          open setting: documents retrieved (default 10)\n"
        "      --mode LIST        lazy (default), block, prefix, full, or a list (lazy,block,full) or\n"
        "                         'all': one run per mode, each a fresh session\n"
        "      --host-cache-bytes LIST  the host tier's budget (default 1G); a list (64M,256M,1G) runs\n"
        "                         each mode at each budget (the hit-rate plot)\n"
        "      --cache-policy P   lfu (default) or lru\n"
        "      --preload WHAT     none (default: a clean measurement), hot or all (lazyquery's --preload:\n"
        "                         the store's access counts then seed the cache)\n"
        "      --stats            record access counts in the store (default: the store is opened\n"
        "                         read-only and no count is read or written)\n"
        "      --gpu              answer on the GPU (CUDA builds: 'make cuda' makes build/cuda/lazyeval;\n"
        "                         lazyingest gets --gpu too)\n"
        "      --gpu-cache-bytes LIST  the GPU tier's budget (default: half of what is free); a list\n"
        "                         runs each\n"
        "      --cold WHAT        --gpu, lazy mode: auto (default), load or recompute (lazyquery's --cold)\n"
        "      --cache-f32        keep cached KV in fp32\n"
        "  -n, --max-tokens N     answer length limit (default 64)\n"
        "      --temp T, --top-p P, --seed S   sampling (default greedy)\n"
        "  -t, --threads N        CPU threads (default: all cores), for lazyingest too\n"
        "\n"
        "Workload (a replay instead of each question once)\n"
        "      --workload zipf    requests drawn by Zipf(alpha) popularity (eval/zipf.h, the generator\n"
        "                         of bench/bench_workload.c), arriving as a Poisson process\n"
        "      --popularity WHAT  questions (default): a request is a question drawn by popularity,\n"
        "                         asked over its documents (scored, repeats counted); documents: a\n"
        "                         request is --workload-docs passages drawn by popularity (bench_workload's\n"
        "                         stream) asked with the question of the first one (speed only: unscored)\n"
        "      --requests N       requests (default: as many as questions)\n"
        "      --alpha A          Zipf exponent (default 1.0; 0: uniform)\n"
        "      --rate R           arrivals a second (default 0: back to back); a request that arrives\n"
        "                         while another is answered waits, and its latency counts the wait\n"
        "      --workload-docs K  passages a request with --popularity documents (default 10)\n"
        "      --workload-seed S  the permutation, the draws and the arrivals (default 1)\n"
        "\n"
        "Output\n"
        "  -o, --out DIR          the report folder (default lazyeval-out; created)\n"
        "      --no-plots         no PNG plots\n"
        "      --plotter PATH     the gnuplot program (default: gnuplot on PATH; when there is none the\n"
        "                         plots are skipped with a note: 'make deps' installs gnuplot-nox)\n"
        "      --no-rows          report.json without the per-question rows (questions.csv has them)\n"
        "      --strict           exit 2 when a question failed\n"
        "  -q, --quiet            no progress lines\n"
        LZ_CLI_COMMON_HELP
        "\n"
        "What the report measures (report.json: per run; questions.csv: per question)\n"
        "  em, f1         the official answer metrics, in percent over the scored questions: the answer\n"
        "                 (what the model wrote after its last \" => \") and each gold answer normalised as\n"
        "                 HotpotQA's and 2Wiki's normalize_answer do (lower case, ASCII punctuation and the\n"
        "                 words a / an / the removed, whitespace collapsed); EM: equal; F1: token overlap\n"
        "                 (precision and recall of the words); a prediction or gold answer that is yes, no\n"
        "                 or noanswer scores F1 0 unless both are equal; with several gold answers (2Wiki\n"
        "                 aliases) the best of each. by_type: the same per question type\n"
        "  failed         questions that got no answer (their documents are not in the store, the prompt\n"
        "                 is longer than the model's context, ...): an error row with the reason, counted\n"
        "                 apart and never scored as an empty answer; em_with_failures counts them as 0\n"
        "                 (what the official scripts do with a missing prediction)\n"
        "  ttft_s         time to the first answer token (KV load included), mean / p50 / p95 / p99,\n"
        "                 over the answered questions after the first; the first is 'warmup', apart\n"
        "  latency_s      from a request's arrival to its first token (its wait in the queue,\n"
        "                 retrieval and TTFT); equal to TTFT plus retrieval when back to back\n"
        "  decode_tok_s   answer tokens after the first over the seconds generating them\n"
        "  cache          per tier (host; gpu with --gpu) hits / (hits + misses) of the documents'\n"
        "                 lookups after the warm-up, and the tier's own counters\n"
        "  recall_at_k    open setting: the share of a question's gold passages (supporting_facts\n"
        "                 titles; 2Wiki: evidences' subjects when there are none) among the k retrieved,\n"
        "                 averaged; all_gold_at_k: questions with all of them retrieved\n"
        "Every report records the model, the store, the options, the machine (host, CPU, GPUs) and the\n"
        "version (git describe). With the shipped model (models/default.gguf, 11.8M parameters trained on\n"
        "synthetic worlds) EM on real HotpotQA / 2Wiki questions is near 0: the run measures the\n"
        "pipeline and its speed; datasets/tools/worldgen_to_hotpot.py writes the synthetic test split in\n"
        "HotpotQA's format, where the model does answer.\n"
        "\n" LZ_ENV_HELP
        "\nlazyeval also exits 2 with --strict when a question failed.\n" LZ_CLI_EXIT_HELP,
        LZ_DEFAULT_MODEL_ENV, LZ_DEFAULT_MODEL);
}

typedef struct {
    const char *out_dir, *store_dir, *model_path, *aliases, *lazyingest, *plotter;
    const char **files;
    int n_files;
    int format, limit, setting, top_k, no_ingest, ingest_only, preload, stats, gpu, cold, threads;
    int no_plots, no_rows, strict, quiet;
    int modes[MAX_LIST], n_modes;
    size_t host[MAX_LIST], gpu_budget[MAX_LIST];
    int n_host, n_gpu;
    const char *extra[MAX_EXTRA];
    int n_extra;
    lz_eval_workload wl;
    lz_query_opts qo;
} options;

static void fmt_size(size_t b, char *buf, size_t n)
{
    if (b >= (size_t)1 << 30 && b % ((size_t)1 << 30) == 0) snprintf(buf, n, "%zu GiB", b >> 30);
    else if (b >= (size_t)1 << 30) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (size_t)1 << 20) snprintf(buf, n, "%.0f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.0f KiB", b / 1024.0);
}

/* "a,b,c" into sizes; 0, or the usage error's exit status */
static int size_list(const char *opt, const char *s, size_t *v, int *n)
{
    *n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) return lz_cli_usage("%s: at most %d sizes", opt, MAX_LIST);
        if (lz_cli_size(opt, p, &v[*n])) return LZ_EXIT_USAGE;
        if (!v[*n]) return lz_cli_usage("%s: expected sizes above 0, got '%s'", opt, p);
        (*n)++;
    }
    return *n ? 0 : lz_cli_usage("%s: expected a size or a list of sizes, got '%s'", opt, s);
}

static int mode_list(const char *s, int *v, int *n)
{
    *n = 0;
    if (!strcmp(s, "all")) {
        for (int m = 0; m < 4; m++) v[(*n)++] = m;
        return 0;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const int m = lz_query_mode_parse(p);
        if (m < 0) return lz_cli_usage("--mode: expected lazy, block, prefix, full, a list of them or all, got '%s'", p);
        if (*n == MAX_LIST) return lz_cli_usage("--mode: at most %d modes", MAX_LIST);
        v[(*n)++] = m;
    }
    return *n ? 0 : lz_cli_usage("--mode: expected a mode, got '%s'", s);
}

/* The options into o. -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, options *o)
{
    enum { O_FORMAT = 256, O_ALIASES, O_LIMIT, O_NO_INGEST, O_INGEST_ONLY, O_INGEST_ARG, O_LAZYINGEST, O_SETTING,
           O_MODE, O_HOST_CACHE, O_POLICY, O_PRELOAD, O_STATS, O_GPU, O_GPU_CACHE, O_COLD, O_CACHE_F32, O_TEMP, O_TOP_P,
           O_SEED, O_WORKLOAD, O_POPULARITY, O_REQUESTS, O_ALPHA, O_RATE, O_WL_DOCS, O_WL_SEED, O_NO_PLOTS, O_PLOTTER,
           O_NO_ROWS, O_STRICT };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_STORE, LZ_CLI_OPT_MODEL, LZ_CLI_OPT_OUTPUT, LZ_CLI_OPT_THREADS, LZ_CLI_OPT_QUIET,
        LZ_CLI_OPT_MAX_TOKENS, LZ_OPT_ARG("out", 'o'), LZ_OPT_ARG("top-k", 'k'), LZ_OPT_ARG("format", O_FORMAT),
        LZ_OPT_ARG("aliases", O_ALIASES), LZ_OPT_ARG("limit", O_LIMIT), LZ_OPT_FLAG("no-ingest", O_NO_INGEST),
        LZ_OPT_FLAG("ingest-only", O_INGEST_ONLY), LZ_OPT_ARG("ingest-arg", O_INGEST_ARG),
        LZ_OPT_ARG("lazyingest", O_LAZYINGEST), LZ_OPT_ARG("setting", O_SETTING), LZ_OPT_ARG("mode", O_MODE),
        LZ_OPT_ARG("host-cache-bytes", O_HOST_CACHE), LZ_OPT_ARG("cache-bytes", O_HOST_CACHE),
        LZ_OPT_ARG("cache-policy", O_POLICY), LZ_OPT_ARG("preload", O_PRELOAD), LZ_OPT_FLAG("stats", O_STATS),
        LZ_OPT_FLAG("gpu", O_GPU), LZ_OPT_ARG("gpu-cache-bytes", O_GPU_CACHE), LZ_OPT_ARG("cold", O_COLD),
        LZ_OPT_FLAG("cache-f32", O_CACHE_F32), LZ_OPT_ARG("temp", O_TEMP), LZ_OPT_ARG("top-p", O_TOP_P),
        LZ_OPT_ARG("seed", O_SEED), LZ_OPT_ARG("workload", O_WORKLOAD), LZ_OPT_ARG("popularity", O_POPULARITY),
        LZ_OPT_ARG("requests", O_REQUESTS), LZ_OPT_ARG("alpha", O_ALPHA), LZ_OPT_ARG("rate", O_RATE),
        LZ_OPT_ARG("workload-docs", O_WL_DOCS), LZ_OPT_ARG("workload-seed", O_WL_SEED),
        LZ_OPT_FLAG("no-plots", O_NO_PLOTS), LZ_OPT_ARG("plotter", O_PLOTTER), LZ_OPT_FLAG("no-rows", O_NO_ROWS),
        LZ_OPT_FLAG("strict", O_STRICT), {NULL, 0, NULL, 0}};
    static const char *const settings[] = {"distractor", "open", NULL}, *const policies[] = {"lfu", "lru", NULL};
    static const char *const preloads[] = {"none", "hot", "all", NULL}, *const colds[] = {"auto", "load", "recompute", NULL};
    static const char *const pops[] = {"questions", "documents", NULL}, *const workloads[] = {"zipf", NULL};
    int c, k, zipf = 0;
    long x;
    double d;
    while ((c = lz_cli_getopt(argc, argv, "hVs:m:o:k:n:t:q", longopts)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 's': o->store_dir = optarg; break;
        case 'm': o->model_path = optarg; break;
        case 'o': o->out_dir = optarg; break;
        case 'k': if (lz_cli_int("--top-k", optarg, 1, 1000, &o->top_k)) return LZ_EXIT_USAGE; break;
        case 'n': if (lz_cli_int("--max-tokens", optarg, 1, 1 << 16, &o->qo.max_new_tokens)) return LZ_EXIT_USAGE; break;
        case 't': if (lz_cli_int("--threads", optarg, 1, 4096, &o->threads)) return LZ_EXIT_USAGE; break;
        case 'q': o->quiet = 1; break;
        case O_FORMAT:
            if ((o->format = lz_eval_format_parse(optarg)) < 0)
                return lz_cli_usage("--format: expected auto, hotpotqa or 2wiki, got '%s'", optarg);
            break;
        case O_ALIASES: o->aliases = optarg; break;
        case O_LIMIT: if (lz_cli_int("--limit", optarg, 1, INT_MAX, &o->limit)) return LZ_EXIT_USAGE; break;
        case O_NO_INGEST: o->no_ingest = 1; break;
        case O_INGEST_ONLY: o->ingest_only = 1; break;
        case O_INGEST_ARG:
            if (o->n_extra == MAX_EXTRA) return lz_cli_usage("--ingest-arg: at most %d", MAX_EXTRA);
            o->extra[o->n_extra++] = optarg;
            break;
        case O_LAZYINGEST: o->lazyingest = optarg; break;
        case O_SETTING: if (lz_cli_choice("--setting", optarg, settings, &o->setting)) return LZ_EXIT_USAGE; break;
        case O_MODE: if (mode_list(optarg, o->modes, &o->n_modes)) return LZ_EXIT_USAGE; break;
        case O_HOST_CACHE: if (size_list("--host-cache-bytes", optarg, o->host, &o->n_host)) return LZ_EXIT_USAGE; break;
        case O_POLICY: if (lz_cli_choice("--cache-policy", optarg, policies, &o->qo.cache_policy)) return LZ_EXIT_USAGE; break;
        case O_PRELOAD: if (lz_cli_choice("--preload", optarg, preloads, &o->preload)) return LZ_EXIT_USAGE; break;
        case O_STATS: o->stats = 1; break;
        case O_GPU:
            if (!lz_engine_gpu_built())
                return lz_cli_usage("--gpu: this build has no CUDA support ('make cuda' builds build/cuda/lazyeval)");
            o->gpu = 1;
            break;
        case O_GPU_CACHE: if (size_list("--gpu-cache-bytes", optarg, o->gpu_budget, &o->n_gpu)) return LZ_EXIT_USAGE; break;
        case O_COLD:
            if (lz_cli_choice("--cold", optarg, colds, &k)) return LZ_EXIT_USAGE;
            o->cold = k == 0 ? LZ_COLD_AUTO : k == 1 ? LZ_COLD_LOAD : LZ_COLD_RECOMPUTE;
            break;
        case O_CACHE_F32: o->qo.cache_f32 = 1; break;
        case O_TEMP: if (lz_cli_double("--temp", optarg, 0, 100, &d)) return LZ_EXIT_USAGE; o->qo.temperature = (float)d; break;
        case O_TOP_P:
            if (lz_cli_double("--top-p", optarg, 0, 1, &d)) return LZ_EXIT_USAGE;
            if (!(d > 0)) return lz_cli_usage("--top-p: expected a number in (0, 1], got '%s'", optarg);
            o->qo.top_p = (float)d;
            break;
        case O_SEED: if (lz_cli_long("--seed", optarg, 0, 0x7fffffffL, &x)) return LZ_EXIT_USAGE; o->qo.seed = (uint64_t)x; break;
        case O_WORKLOAD: if (lz_cli_choice("--workload", optarg, workloads, &k)) return LZ_EXIT_USAGE; zipf = 1; break;
        case O_POPULARITY:
            if (lz_cli_choice("--popularity", optarg, pops, &k)) return LZ_EXIT_USAGE;
            o->wl.popularity = k ? LZ_EVAL_POP_DOCUMENTS : LZ_EVAL_POP_QUESTIONS;
            break;
        case O_REQUESTS: if (lz_cli_int("--requests", optarg, 1, 100000000, &o->wl.n_requests)) return LZ_EXIT_USAGE; break;
        case O_ALPHA: if (lz_cli_double("--alpha", optarg, 0, 20, &o->wl.alpha)) return LZ_EXIT_USAGE; break;
        case O_RATE: if (lz_cli_double("--rate", optarg, 0, 1e9, &o->wl.rate)) return LZ_EXIT_USAGE; break;
        case O_WL_DOCS: if (lz_cli_int("--workload-docs", optarg, 1, 1000, &o->wl.docs)) return LZ_EXIT_USAGE; break;
        case O_WL_SEED: if (lz_cli_long("--workload-seed", optarg, 0, 1L << 40, &x)) return LZ_EXIT_USAGE; o->wl.seed = (uint64_t)x; break;
        case O_NO_PLOTS: o->no_plots = 1; break;
        case O_PLOTTER: o->plotter = optarg; break;
        case O_NO_ROWS: o->no_rows = 1; break;
        case O_STRICT: o->strict = 1; break;
        default: return LZ_EXIT_USAGE;
        }
    }
    o->files = (const char **)argv + optind;
    o->n_files = argc - optind;
    if (!o->n_files) return lz_cli_usage("give a dataset file (HotpotQA or 2WikiMultihopQA JSON)");
    if (!zipf && o->wl.popularity) return lz_cli_usage("--popularity needs --workload zipf");
    if (zipf && !o->wl.popularity) o->wl.popularity = LZ_EVAL_POP_QUESTIONS;
    if (!zipf && (o->wl.n_requests || o->wl.rate > 0)) return lz_cli_usage("--requests and --rate need --workload zipf");
    if (o->no_ingest && o->ingest_only) return lz_cli_usage("--no-ingest and --ingest-only: give one of them");
    if (o->n_gpu && !o->gpu) return lz_cli_usage("--gpu-cache-bytes needs --gpu");
    const int erc = lz_cli_check_env();
    return erc ? erc : -1;
}

/* ---- progress ---- */
typedef struct {
    const char *label;
    int quiet, failed;
} progress;

static void on_row(const lz_eval_row *row, int i, int n, void *ctx)
{
    progress *p = ctx;
    p->failed += !row->ok;
    const int step = n >= 20 ? n / 10 : 1;
    if (!p->quiet && ((i + 1) % step == 0 || i + 1 == n))
        fprintf(stderr, "lazyeval: [%s] %d/%d asked, %d failed\n", p->label, i + 1, n, p->failed);
}

/* ---- the report ---- */
static json_t *options_json(const options *o, const char *model, const char *store)
{
    json_t *modes = json_array(), *host = json_array(), *gpu = json_array(), *extra = json_array();
    for (int i = 0; i < o->n_modes; i++) json_array_append_new(modes, json_string(lz_query_mode_name(o->modes[i])));
    for (int i = 0; i < o->n_host; i++) json_array_append_new(host, json_integer((json_int_t)o->host[i]));
    for (int i = 0; i < o->n_gpu; i++) json_array_append_new(gpu, json_integer((json_int_t)o->gpu_budget[i]));
    for (int i = 0; i < o->n_extra; i++) json_array_append_new(extra, json_string(o->extra[i]));
    static const char *const preloads[] = {"none", "hot", "all"};
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:i, s:o, s:o, s:o, s:s, s:s, s:b, s:b, s:b, s:b, s:o}",
                          "model", model, "store", store, "out", o->out_dir, "format", lz_eval_format_name(o->format),
                          "limit", o->limit, "setting", lz_eval_setting_name(o->setting), "top_k", o->top_k, "modes",
                          modes, "host_cache_bytes", host, "gpu_cache_bytes", gpu, "cache_policy",
                          lz_cache_policy_name(o->qo.cache_policy), "preload", preloads[o->preload], "stats", o->stats,
                          "gpu", o->gpu, "no_ingest", o->no_ingest, "cache_f32", o->qo.cache_f32, "ingest_args", extra);
    json_object_set_new(j, "max_tokens", json_integer(o->qo.max_new_tokens));
    json_object_set_new(j, "temperature", json_real(o->qo.temperature));
    json_object_set_new(j, "top_p", json_real(o->qo.top_p));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->qo.seed));
    json_object_set_new(j, "threads", json_integer(o->threads));
    if (o->aliases) json_object_set_new(j, "aliases", json_string(o->aliases));
    if (o->gpu) json_object_set_new(j, "cold", json_string(o->cold == LZ_COLD_LOAD ? "load" : o->cold == LZ_COLD_RECOMPUTE ? "recompute" : "auto"));
    json_object_set_new(j, "workload", json_pack("{s:s, s:i, s:f, s:f, s:i, s:I}", "popularity",
                                                 lz_eval_popularity_name(o->wl.popularity), "requests", o->wl.n_requests,
                                                 "alpha", o->wl.alpha, "rate", o->wl.rate, "docs", o->wl.docs, "seed",
                                                 (json_int_t)o->wl.seed));
    return j;
}

/* lazyingest's --max-doc-tokens among the --ingest-arg values (its default 1024 when absent);
 * *given: 1 when it was among them */
static int max_doc_tokens(const options *o, int *given)
{
    int v = 1024;
    *given = 0;
    for (int i = 0; i < o->n_extra; i++) {
        const char *a = o->extra[i];
        if (!strcmp(a, "--max-doc-tokens") && i + 1 < o->n_extra) { v = atoi(o->extra[i + 1]); *given = 1; }
        else if (!strncmp(a, "--max-doc-tokens=", 17)) { v = atoi(a + 17); *given = 1; }
    }
    return v > 0 ? v : 1024;
}

static int mkdir_p(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

static int same_file(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    lz_cli_init("lazyeval");
    static options o = {.out_dir = "lazyeval-out", .top_k = 10, .cold = -1};
    o.wl.alpha = 1.0;
    o.wl.docs = 10;
    o.wl.seed = 1;
    lz_query_opts_default(&o.qo);
    const int prc = parse_options(argc, argv, &o);
    if (prc >= 0) return prc;
    if (!o.n_modes) { o.modes[0] = LZ_MODE_LAZY; o.n_modes = 1; }
    if (!o.n_host) { o.host[0] = o.qo.cache_bytes; o.n_host = 1; }
    if (!o.n_gpu) { o.gpu_budget[0] = 0; o.n_gpu = 1; } /* 0: the engine's default */
    char err[2048] = "", model_buf[4096], store_buf[4200], path[4200];
    if (!o.model_path) {
        if (lz_prompt_default_model(model_buf, sizeof model_buf, err, sizeof err)) return lz_cli_fail("%s", err);
        o.model_path = model_buf;
    }
    if (mkdir_p(o.out_dir)) return lz_cli_fail("%s: cannot create the report folder: %s", o.out_dir, strerror(errno));
    if (!o.store_dir) {
        snprintf(store_buf, sizeof store_buf, "%s/store", o.out_dir);
        o.store_dir = store_buf;
    }
    /* the questions */
    lz_eval_dataset ds;
    if (lz_eval_dataset_init(&ds)) return lz_cli_fail("out of memory");
    for (int i = 0; i < o.n_files; i++)
        if (lz_eval_dataset_read(&ds, o.files[i], (lz_eval_format)o.format, o.limit, err, sizeof err)) {
            lz_eval_dataset_free(&ds);
            return access(o.files[i], R_OK) ? lz_cli_fail("%s", err) : lz_cli_usage("%s", err);
        }
    if (o.aliases && lz_eval_dataset_read_aliases(&ds, o.aliases, err, sizeof err)) {
        lz_eval_dataset_free(&ds);
        return lz_cli_fail("%s", err);
    }
    if (!ds.n_q) { lz_eval_dataset_free(&ds); return lz_cli_usage("no questions in %s", o.files[0]); }
    if (!o.quiet) {
        fprintf(stderr, "lazyeval: %d questions (%s), %d passages", ds.n_q, lz_eval_format_name(ds.format),
                lz_eval_passages_count(ds.passages));
        if (ds.n_renamed) fprintf(stderr, ", %d renamed 'title (k)'", ds.n_renamed);
        if (ds.n_dropped) fprintf(stderr, ", %d context pairs dropped", ds.n_dropped);
        fprintf(stderr, "\n");
        for (int i = 0; i < ds.n_warnings; i++) fprintf(stderr, "lazyeval: warning: %s\n", ds.warnings[i]);
        if (ds.n_warnings_total > ds.n_warnings)
            fprintf(stderr, "lazyeval: ... %d warnings in all\n", ds.n_warnings_total);
    }
    json_t *report = json_object();
    char now[64];
    lz_eval_utc_now(now, sizeof now);
    json_t *cmd = json_array();
    for (int i = 0; i < argc; i++) json_array_append_new(cmd, json_string(argv[i]));
    json_object_set_new(report, "tool", json_string("lazyeval"));
    json_object_set_new(report, "version", json_string(lz_cli_version_string()));
    json_object_set_new(report, "started", json_string(now));
    json_object_set_new(report, "command", cmd);
    json_object_set_new(report, "machine", lz_eval_machine_json());
    json_object_set_new(report, "dataset", lz_eval_dataset_json(&ds, o.files, o.n_files));
    json_object_set_new(report, "options", options_json(&o, o.model_path, o.store_dir));
    int exit_rc = LZ_EXIT_OK;
    /* the store: the passages as a corpus, lazyingest on it */
    json_t *ingest = json_pack("{s:b}", "ran", !o.no_ingest);
    if (!o.no_ingest) {
        char corpus[4200], summary[4200], prog[4096];
        snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", o.out_dir);
        snprintf(summary, sizeof summary, "%s/ingest.json", o.out_dir);
        if (o.lazyingest) snprintf(prog, sizeof prog, "%s", o.lazyingest);
        else lz_eval_find_lazyingest(prog, sizeof prog);
        lz_eval_ingest_opts io = {.program = prog, .model = o.model_path, .store = o.store_dir, .corpus = corpus,
                                  .threads = o.threads, .gpu = o.gpu, .extra = o.extra, .n_extra = o.n_extra,
                                  .summary_path = summary};
        lz_eval_ingest_result ir;
        if (!o.quiet) fprintf(stderr, "lazyeval: building the store %s from %s\n", o.store_dir, corpus);
        if (lz_eval_write_corpus(ds.passages, corpus, err, sizeof err) || lz_eval_run_ingest(&io, &ir, err, sizeof err)) {
            fprintf(stderr, "lazyeval: %s\n", err);
            json_decref(report);
            json_decref(ingest);
            lz_eval_dataset_free(&ds);
            return LZ_EXIT_RUNTIME;
        }
        json_t *sj = json_load_file(summary, 0, NULL);
        json_object_set_new(ingest, "command", json_string(ir.command));
        json_object_set_new(ingest, "exit", json_integer(ir.exit_status));
        json_object_set_new(ingest, "seconds", json_real(ir.seconds));
        json_object_set_new(ingest, "summary", sj ? sj : json_null());
        if (!o.quiet)
            fprintf(stderr, "lazyeval: lazyingest done in %.1f s%s\n", ir.seconds,
                    ir.exit_status == 2 ? " (some passages were skipped: its warnings above)" : "");
    }
    json_object_set_new(report, "ingest", ingest);
    snprintf(path, sizeof path, "%s/meta.sqlite", o.store_dir);
    if (!lz_store_exists(o.store_dir)) { /* a plain store, or a sharded one's root */
        json_decref(report);
        lz_eval_dataset_free(&ds);
        return lz_cli_usage("no store at %s (%s not found): run without --no-ingest to build it", o.store_dir, path);
    }
    json_t *notes = json_array();
    char default_model[4096];
    if (!lz_prompt_default_model(default_model, sizeof default_model, err, sizeof err) &&
        same_file(o.model_path, default_model))
        json_array_append_new(notes, json_string(
            "The model is the shipped models/default.gguf: 11.8M parameters trained on synthetic multi-hop worlds "
            "(datasets/README.md), never on Wikipedia text. On real HotpotQA / 2WikiMultihopQA questions its exact "
            "match is near 0 (synthetic questions written in HotpotQA's format: datasets/tools/worldgen_to_hotpot.py); "
            "this run measures the pipeline (ingest, placement, caches, timings), not a model's quality."));
    json_t *runs_j = json_array();
    lz_eval_report_run *runs = NULL;
    lz_eval_run_result *results = NULL;
    lz_eval_summary *sums = NULL;
    lz_eval_stream stream = {0};
    lz_eval_store_map map = {0};
    int n_runs = 0;
    lz_store *st = NULL;
    lz_llama *m = NULL;
    if (o.ingest_only) goto write_report;
    { /* the requests; drawn by documents, each asks the question that first named its first passage */
        const int np = lz_eval_passages_count(ds.passages);
        int *owner = malloc(sizeof *owner * (size_t)(np ? np : 1));
        for (int i = 0; owner && i < np; i++) owner[i] = lz_eval_passages_get(ds.passages, i)->owner;
        const int src = owner ? lz_eval_stream_make(&o.wl, ds.n_q, np, owner, &stream, err, sizeof err) : -1;
        free(owner);
        if (src) {
            fprintf(stderr, "lazyeval: %s\n", err[0] ? err : "out of memory");
            exit_rc = LZ_EXIT_USAGE;
            goto write_report;
        }
    }
    if (lz_store_open(o.store_dir, o.stats ? 0 : LZ_STORE_RDONLY, &st, err, sizeof err)) {
        fprintf(stderr, "lazyeval: %s\n", err);
        exit_rc = LZ_EXIT_RUNTIME;
        goto write_report;
    }
    json_t *store_j = lz_eval_store_json(st, o.store_dir, o.stats);
    json_object_set_new(report, "store", store_j);
    /* each passage's document, checked by content: a store built from another file fails those questions */
    int mdt_given;
    const int mdt = max_doc_tokens(&o, &mdt_given);
    /* the split budget is known when this run built the store, or was told it */
    if (lz_eval_store_map_build(st, ds.passages, mdt, !o.no_ingest || mdt_given, &map, err, sizeof err)) {
        fprintf(stderr, "lazyeval: %s\n", err);
        exit_rc = LZ_EXIT_RUNTIME;
        goto write_report;
    }
    json_object_set_new(store_j, "passages_missing", json_integer(map.n_missing));
    json_object_set_new(store_j, "passages_with_other_text", json_integer(map.n_other));
    json_object_set_new(store_j, "split_passages_unchecked", json_integer(map.n_unchecked));
    if (map.n_unchecked && !o.quiet)
        fprintf(stderr, "lazyeval: note: %d split passages were taken without checking their text: the store was "
                "split with another --max-doc-tokens than %d (give it as --ingest-arg --max-doc-tokens "
                "--ingest-arg N to check them)\n", map.n_unchecked, mdt);
    if ((map.n_missing || map.n_other) && !o.quiet)
        fprintf(stderr, "lazyeval: warning: of %d passages, %d are not in the store and %d hold other text there: "
                "the questions that need them fail\n", map.n, map.n_missing, map.n_other);
    lz_llama_set_threads(o.threads);
    if (lz_llama_load(o.model_path, &m, err, sizeof err)) {
        fprintf(stderr, "lazyeval: %s\n", err);
        exit_rc = LZ_EXIT_RUNTIME;
        goto write_report;
    }
    json_object_set_new(report, "model", lz_eval_model_json(m, o.model_path));
    o.qo.max_positions = m->cfg.ctx;
    const int n_max = o.n_modes * o.n_host * o.n_gpu;
    runs = calloc((size_t)n_max, sizeof *runs);
    results = calloc((size_t)n_max, sizeof *results);
    sums = calloc((size_t)n_max, sizeof *sums);
    static char labels[MAX_LIST * MAX_LIST * MAX_LIST][96];
    if (!runs || !results || !sums) { fprintf(stderr, "lazyeval: out of memory\n"); exit_rc = 1; goto write_report; }
    for (int mi = 0; mi < o.n_modes; mi++)
        for (int hi = 0; hi < o.n_host; hi++)
            for (int gi = 0; gi < o.n_gpu; gi++) {
                lz_eval_report_run *r = &runs[n_runs];
                char hb[32], gb[32];
                fmt_size(o.host[hi], hb, sizeof hb);
                fmt_size(o.gpu_budget[gi], gb, sizeof gb);
                snprintf(labels[n_runs], sizeof labels[0], "%s%s%s%s%s", lz_query_mode_name(o.modes[mi]),
                         o.n_host > 1 ? " host " : "", o.n_host > 1 ? hb : "", o.n_gpu > 1 ? " gpu " : "",
                         o.n_gpu > 1 ? gb : "");
                lz_eval_run_opts ro = {.setting = o.setting, .top_k = o.top_k, .qo = o.qo, .preload = o.preload,
                                       .record_hits = o.stats, .map = &map, .max_doc_tokens = mdt,
                                       .on_row = on_row};
                ro.qo.mode = o.modes[mi];
                ro.qo.cache_bytes = o.host[hi];
                progress pg = {labels[n_runs], o.quiet, 0};
                ro.row_ctx = &pg;
                *r = (lz_eval_report_run){.label = labels[n_runs], .mode = o.modes[mi], .setting = o.setting,
                                          .top_k = o.top_k, .host_budget = o.host[hi], .gpu = o.gpu,
                                          .gpu_budget_asked = o.gpu_budget[gi],
                                          .poisson = !stream.back_to_back,
                                          .policy = lz_cache_policy_name(o.qo.cache_policy)};
                /* a fresh engine a run: its GPU tier starts empty */
                lz_engine_opts eo = {.gpu = o.gpu, .device = -1, .own_tokens = lz_query_engine_rows(ro.qo.mode),
                                     .gpu_cache = o.gpu_budget[gi], .cache_policy = o.qo.cache_policy,
                                     .batch = ro.qo.batch};
                lz_engine *engine = NULL;
                if (lz_engine_open(m, &eo, &engine, err, sizeof err)) {
                    fprintf(stderr, "lazyeval: %s\n", err);
                    exit_rc = LZ_EXIT_RUNTIME;
                    goto write_report;
                }
                ro.qo.backend = lz_engine_query(engine);
                if (o.gpu) {
                    ro.qo.cold = o.cold < 0 ? LZ_COLD_AUTO : o.cold;
                    ro.gpu_tier = lz_engine_policy_stats;
                    ro.gpu_ctx = engine;
                }
                const int rrc = lz_eval_run(m, st, &ds, &stream, &ro, &results[n_runs], err, sizeof err);
                lz_engine_free(engine);
                if (rrc) {
                    fprintf(stderr, "lazyeval: %s: %s\n", labels[n_runs], err);
                    lz_eval_run_result_free(&results[n_runs]);
                    exit_rc = LZ_EXIT_RUNTIME;
                    goto write_report;
                }
                r->res = &results[n_runs];
                r->gpu_budget = o.gpu ? results[n_runs].at_end.gpu.bytes_budget : 0;
                if (lz_eval_summarize(&ds, r->res, &sums[n_runs])) {
                    fprintf(stderr, "lazyeval: out of memory\n");
                    lz_eval_run_result_free(&results[n_runs]);
                    exit_rc = LZ_EXIT_RUNTIME;
                    goto write_report;
                }
                r->sum = &sums[n_runs];
                if (sums[n_runs].failed && o.strict) exit_rc = LZ_EXIT_USAGE;
                n_runs++;
                lz_eval_print_run(stdout, r);
                json_array_append_new(runs_j, lz_eval_run_json(&ds, r, !o.no_rows));
                /* what is measured so far, on disk: a later run cut short (a time limit) keeps it */
                json_object_set(report, "runs", runs_j);
                json_object_set_new(report, "complete", json_false());
                snprintf(path, sizeof path, "%s/report.json", o.out_dir);
                if (json_dump_file(report, path, JSON_INDENT(1) | JSON_ENSURE_ASCII))
                    fprintf(stderr, "lazyeval: %s: cannot write\n", path);
                char csv_so_far[4200];
                snprintf(csv_so_far, sizeof csv_so_far, "%s/questions.csv", o.out_dir);
                if (lz_eval_write_csv(csv_so_far, &ds, runs, n_runs, err, sizeof err)) fprintf(stderr, "lazyeval: %s\n", err);
            }
write_report:
    json_object_set_new(report, "runs", runs_j);
    json_object_set_new(report, "complete", json_true());
    /* the plots */
    if (n_runs && !o.no_plots) {
        char plots[4200], gp[4096], made[256];
        snprintf(plots, sizeof plots, "%s/plots", o.out_dir);
        const int have = lz_eval_find_program(o.plotter ? o.plotter : "gnuplot", gp, sizeof gp);
        if (mkdir_p(plots) || lz_eval_plot(runs, n_runs, plots, have ? gp : NULL, made, sizeof made, err, sizeof err)) {
            fprintf(stderr, "lazyeval: warning: plots: %s\n", err[0] ? err : strerror(errno));
            json_array_append_new(notes, json_string("the plots failed: see plots/gnuplot.log"));
        } else if (!have) {
            fprintf(stderr, "lazyeval: note: %s not found: no PNG plots (their data and script are in %s; "
                    "'make deps' installs gnuplot-nox)\n", o.plotter ? o.plotter : "gnuplot", plots);
            json_array_append_new(notes, json_string("gnuplot was not found: plots skipped (plots/plots.gp and its "
                                                     "data were written)"));
        } else {
            json_t *pj = json_array();
            for (char *save = NULL, *p = strtok_r(made, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
                char rel[64];
                snprintf(rel, sizeof rel, "plots/%s", p);
                json_array_append_new(pj, json_string(rel));
            }
            json_object_set_new(report, "plots", pj);
        }
    }
    json_object_set_new(report, "notes", notes);
    snprintf(path, sizeof path, "%s/report.json", o.out_dir);
    if (json_dump_file(report, path, JSON_INDENT(1) | JSON_ENSURE_ASCII)) {
        fprintf(stderr, "lazyeval: %s: cannot write\n", path);
        exit_rc = LZ_EXIT_RUNTIME;
    }
    if (n_runs) {
        char csv[4200];
        snprintf(csv, sizeof csv, "%s/questions.csv", o.out_dir);
        if (lz_eval_write_csv(csv, &ds, runs, n_runs, err, sizeof err)) {
            fprintf(stderr, "lazyeval: %s\n", err);
            exit_rc = LZ_EXIT_RUNTIME;
        }
    }
    if (!o.quiet) fprintf(stderr, "lazyeval: report: %s/report.json, %s/questions.csv%s\n", o.out_dir, o.out_dir,
                          json_object_get(report, "plots") ? ", plots/*.png" : "");
    for (size_t i = 0; i < json_array_size(notes); i++)
        if (!o.quiet) printf("\nNote: %s\n", json_string_value(json_array_get(notes, i)));
    json_decref(report);
    for (int i = 0; i < n_runs; i++) {
        lz_eval_summary_free(&sums[i]);
        lz_eval_run_result_free(&results[i]);
    }
    free(runs);
    free(results);
    free(sums);
    lz_eval_stream_free(&stream);
    lz_eval_store_map_free(&map);
    lz_llama_free(m);
    lz_store_close(st);
    lz_eval_dataset_free(&ds);
    return exit_rc;
}
