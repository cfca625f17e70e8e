/* lazyquery.c - answers questions from a store built by lazyingest: retrieves
 * documents (FTS5 BM25, or --docs), places their cached KV at any position of
 * the prompt with lazy rotary attention, and generates the answer. One
 * process answers many questions (argument, --questions file.jsonl, or stdin
 * lines) and keeps its document cache warm between them. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/llama.h"
#include "model/prompt.h"
#include "base/unicode.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "query/session_cli.h"
#include "store/store.h"
#include "base/cli.h"
#include "base/env.h"
#include "base/runtime.h"

static void usage(FILE *f)
{
    fputs(
        "usage: lazyquery [options] \"question\"\n"
        "       lazyquery [options] -                          (questions from standard input, one a line)\n"
        "       lazyquery [options] --questions FILE.jsonl     (one JSON result per line; '-': standard input)\n"
        "\n"
        "Answers questions from the documents of a store built by lazyingest. Cached\n"
        "documents are placed at any position of the prompt without re-encoding them.\n"
        "With no question and no --questions, the questions are read from standard input too.\n"
        "Options take their value as '--opt value' or '--opt=value'; '--' ends the options\n"
        "(lazyquery -- \"-1 or 1?\").\n"
        "\n"
        "      --docs ID,ID,...   use these documents (external ids) instead of retrieval\n"
        "      --doc ID           one more such document, the whole argument one id (commas allowed);\n"
        "                         repeatable, in order with --docs. The id of a record lazyingest\n"
        "                         split into passages (ID#0, ID#1, ...) stands for its passages\n"
        "      --strict           a question answered from no documents (retrieval found none, or\n"
        "                         the given ids named none) fails instead of a warning\n"
        "      --questions FILE   JSONL questions, one result a line (implies --json)\n"
        "      --order ORDER      best-last (default: best document nearest the question) or best-first\n"
        "      --json             one JSON object per question: answer, generated, sources, timings, cache\n"
        "  -q, --quiet            only the answer (text mode)\n"
        LZ_SESSION_CLI_HELP
        LZ_CLI_COMMON_HELP
        "\n"
        "--questions FILE: JSONL objects with \"question\" and optionally \"id\" and \"docs\"\n"
        "(a list of external ids, as --doc); each output line echoes \"id\". A question answered\n"
        "from no documents is warned about on standard error (its line carries \"warning\":\n"
        "\"no documents\"). --json lines are flushed one by one (a pipe sees each answer at once).\n"
        "\n"
        "A model may reason before it answers (\"A 1871; B 1862 => B\"): the answer is what\n"
        "follows the last \" => \"; text mode prints the rest as \"Reasoning:\", --json gives the\n"
        "whole text as \"generated\".\n"
        "\n" LZ_ENV_HELP
        "\nlazyquery also exits 2 when a question could not be answered (each one named on\n"
        "standard error; the others are answered).\n" LZ_CLI_EXIT_HELP,
        f);
}


typedef struct {
    lz_session_cli sc;       /* the store, the model and the session (query/session_cli.h) */
    const char *questions_path;
    char **doc_ids;          /* --docs and --doc, in order (copies) */
    int n_doc_ids, cap_doc_ids, docs_given; /* docs_given: --docs or --doc was given (even naming none) */
    int strict;              /* --strict: a question without documents fails */
    int best_first, json, quiet;
    lz_engine *engine;       /* the CPU's or --gpu's, for its GPU tier's counts */
    lz_query_preload_result pre; /* what the start-up preload did */
} options;

/* The document cache's tiers as JSON: per tier its policy, hits, misses, admissions, rejections,
 * evictions, bytes used and budget (the host tier, and the GPU's with --gpu). */
static json_t *tier(const lz_doc_cache_stats *c, int policy)
{
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "policy", lz_cache_policy_name(policy), "hits",
                     (json_int_t)c->hits, "misses", (json_int_t)c->misses, "admitted", (json_int_t)c->admitted,
                     "rejected", (json_int_t)c->rejected, "evicted", (json_int_t)c->evicted, "bytes_used",
                     (json_int_t)c->bytes_used, "bytes_budget", (json_int_t)c->bytes_budget);
}

static json_t *tiers_json(const options *o, const lz_doc_cache_stats *host)
{
    json_t *t = json_object();
    json_t *ht = tier(host, o->sc.qo.cache_policy);
    json_object_set_new(ht, "preloaded", json_integer(o->pre.host));
    json_object_set_new(ht, "preload_s", json_real(o->pre.seconds));
    json_object_set_new(t, "host", ht);
    if (lz_engine_is_gpu(o->engine)) {
        lz_doc_cache_stats g;
        lz_engine_tiers ft; /* its memory and the copies into it */
        lz_engine_tier_stats(o->engine, &g, &ft);
        json_t *gt = tier(&g, o->sc.qo.cache_policy);
        json_object_set_new(gt, "preloaded", json_integer(o->pre.gpu));
        json_object_set_new(gt, "copies", json_integer(ft.copies));
        json_object_set_new(gt, "bytes_in", json_integer(ft.bytes_in));
        json_object_set_new(gt, "copy_s", json_real(ft.copy_s));
        json_object_set_new(gt, "copy_gbps", json_real(ft.copy_s > 0 ? ft.bytes_in / ft.copy_s / 1e9 : 0));
        json_object_set_new(gt, "pool_bytes", json_integer((json_int_t)ft.pool_bytes));
        json_object_set_new(gt, "pool_regions", json_integer(ft.pool_regions));
        json_object_set_new(gt, "pool_evictions", json_integer(ft.pool_evictions));
        json_object_set_new(gt, "pinned_bytes", json_integer((json_int_t)ft.pinned_bytes));
        json_object_set_new(t, "gpu", gt);
    }
    return t;
}

/* A copy of s with every byte that does not start a valid UTF-8 sequence
 * replaced by U+FFFD, so JSON output never fails on what a model generated
 * (or on a question read from a file). malloc'd. */
static char *utf8_clean(const char *s)
{
    size_t n = strlen(s), o = 0;
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        int len = lz_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (len > 0) { memcpy(out + o, s + i, (size_t)len); o += (size_t)len; i += (size_t)len; }
        else { memcpy(out + o, "\xef\xbf\xbd", 3); o += 3; i++; }
    }
    out[o] = 0;
    return out;
}

static void print_piece(const char *piece, int len, void *ctx)
{
    (void)ctx;
    fwrite(piece, 1, (size_t)len, stdout);
    fflush(stdout);
}

/* Appends the ids of arg to o->doc_ids: "a,b,c" split at commas (empty pieces dropped) when
 * split (--docs), else arg as one id (--doc). 0, or -1 when out of memory. */
static int add_doc_ids(options *o, const char *arg, int split)
{
    o->docs_given = 1;
    const char *p = arg;
    while (*p || !split) {
        size_t n = split ? strcspn(p, ",") : strlen(p);
        if (n) {
            if (o->n_doc_ids == o->cap_doc_ids) {
                int cap = o->cap_doc_ids ? o->cap_doc_ids * 2 : 8;
                char **v = realloc(o->doc_ids, sizeof *v * (size_t)cap);
                if (!v) return -1;
                o->doc_ids = v;
                o->cap_doc_ids = cap;
            }
            if (!(o->doc_ids[o->n_doc_ids] = strndup(p, n))) return -1;
            o->n_doc_ids++;
        }
        if (!split || !p[n]) break;
        p += n + 1;
    }
    return 0;
}

/* Answers one question; prints text or one JSON line. Returns 0 or 1. */
static int answer_one(lz_query_session *q, lz_store *st, const options *o, const char *qid, const char *question,
                      json_t *docs_json)
{
    char err[1024] = "";
    lz_query_doc *docs = NULL;
    int n_docs = 0, rc = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!question || !*question) { snprintf(err, sizeof err, "the question is empty"); goto fail; }
    if (docs_json && json_is_array(docs_json)) {
        size_t n = json_array_size(docs_json);
        const char **ids = calloc(n ? n : 1, sizeof *ids);
        for (size_t i = 0; ids && i < n; i++) ids[i] = json_string_value(json_array_get(docs_json, i));
        int bad = 0;
        for (size_t i = 0; ids && i < n; i++) if (!ids[i]) bad = 1;
        if (!ids || bad) { free(ids); snprintf(err, sizeof err, "\"docs\" must be a list of strings"); goto fail; }
        int r = lz_retrieve_resolve_ids(st, ids, (int)n, &docs, &n_docs, err, sizeof err);
        free(ids);
        if (r) goto fail;
    } else if (o->docs_given) {
        if (lz_retrieve_resolve_ids(st, (const char *const *)o->doc_ids, o->n_doc_ids, &docs, &n_docs, err, sizeof err))
            goto fail;
    } else if (lz_retrieve_search(st, question, o->sc.top_k, &docs, &n_docs, err, sizeof err)) {
        goto fail;
    }
    const int explicit_docs = o->docs_given || docs_json, n_found = n_docs;
    if (!explicit_docs) {
        /* retrieved documents that do not fit the model's context are dropped, lowest ranked first */
        int64_t budget = lz_query_doc_budget(q, question), used = 0;
        int fit = 0;
        while (fit < n_docs && used + docs[fit].n_tokens <= budget) used += docs[fit++].n_tokens;
        if (fit < n_docs && !o->quiet)
            fprintf(stderr, "lazyquery: note: %d of %d retrieved documents fit the model's context; using the best %d\n",
                    fit, n_docs, fit);
        n_docs = fit;
    }
    int no_docs = 0; /* answered from the question alone: a warning, or with --strict a failure */
    if (n_docs == 0) {
        char *q_clean = utf8_clean(question);
        const char *why = explicit_docs ? "the given ids name none"
                          : n_found ? "none of the retrieved ones fits the model's context" : "retrieval found none";
        if (o->strict) {
            snprintf(err, sizeof err, "no documents for question %s%s'%.200s': %s (--strict)", qid ? qid : "",
                     qid ? " " : "", q_clean ? q_clean : "", why);
            free(q_clean);
            goto fail;
        }
        fprintf(stderr, "lazyquery: warning: no documents for question %s%s'%.200s': %s; answering from the "
                "question alone\n", qid ? qid : "", qid ? " " : "", q_clean ? q_clean : "", why);
        free(q_clean);
        no_docs = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double t_retrieve = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* placement order: retrieval gives best first; default puts the best last (nearest the question) */
    lz_query_doc *placed = malloc((size_t)(n_docs ? n_docs : 1) * sizeof *placed);
    if (!placed) { snprintf(err, sizeof err, "out of memory"); goto fail; }
    int explicit_order = explicit_docs;
    for (int i = 0; i < n_docs; i++)
        placed[i] = docs[explicit_order || o->best_first ? i : n_docs - 1 - i];
    int stream = !o->json && isatty(STDOUT_FILENO);
    lz_query_opts qo = o->sc.qo;
    lz_query_result r;
    (void)qo;
    if (stream && !o->quiet) { fputs("Answer: ", stdout); fflush(stdout); }
    int arc = lz_query_answer(q, question, placed, n_docs, &r, err, sizeof err);
    free(placed);
    if (arc) goto fail;
    if (o->sc.stats)
        for (int i = 0; i < n_docs; i++) {
            char e2[256];
            if (lz_store_hit(st, docs[i].id, e2, sizeof e2))
                fprintf(stderr, "lazyquery: warning: access count not recorded: %s\n", e2);
        }
    lz_doc_cache_stats cs;
    lz_query_cache_stats(q, &cs);
    double tps = r.n_answer > 1 && r.t_decode > 0 ? (r.n_answer - 1) / r.t_decode : 0;
    if (o->json) {
        json_t *src = json_array();
        for (int i = 0; i < n_docs; i++) {
            /* titles are cut at 255 bytes, possibly inside a UTF-8 sequence */
            char *id_clean = utf8_clean(docs[i].ext_id), *t_clean = utf8_clean(docs[i].title);
            json_array_append_new(src, json_pack("{s:s, s:s, s:f, s:i}", "id", id_clean ? id_clean : "", "title",
                                                 t_clean ? t_clean : "", "score", docs[i].score, "tokens",
                                                 docs[i].n_tokens));
            free(id_clean);
            free(t_clean);
        }
        size_t fl;
        const char *fin = lz_prompt_final_answer(r.answer, &fl, NULL);
        char *final = strndup(fin, fl);
        char *q_clean = utf8_clean(question), *a_clean = utf8_clean(final ? final : r.answer);
        char *g_clean = utf8_clean(r.answer);
        free(final);
        json_t *out = json_pack(
            "{s:s, s:s, s:o, s:s, s:{s:f, s:f, s:f, s:f, s:f, s:f}, s:{s:i, s:i, s:i}, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
            "question", q_clean ? q_clean : "", "answer", a_clean ? a_clean : "", "sources", src, "mode", lz_query_mode_name(o->sc.qo.mode),
            "timings", "retrieval_s", t_retrieve, "kv_load_s", r.t_load, "recompute_s", r.t_recompute, "ttft_s", r.t_ttft,
            "decode_s", r.t_decode, "decode_tok_s", tps,
            "tokens", "prompt", r.n_prompt, "computed", r.n_computed, "answer", r.n_answer,
            "cache", "hits", (json_int_t)r.hits, "misses", (json_int_t)r.misses, "recomputed", (json_int_t)r.n_recomputed,
            "bytes_loaded", (json_int_t)r.bytes_loaded,
            "session_hits", (json_int_t)cs.hits, "session_misses", (json_int_t)cs.misses,
            "bytes_used", (json_int_t)cs.bytes_used, "bytes_budget", (json_int_t)cs.bytes_budget);
        free(q_clean);
        free(a_clean);
        /* the whole generated text: the reasoning, the marker and the answer when there is a marker */
        if (out) json_object_set_new(out, "generated", json_string(g_clean ? g_clean : ""));
        if (out) json_object_set_new(out, "tiers", tiers_json(o, &cs));
        if (out && no_docs) json_object_set_new(out, "warning", json_string("no documents"));
        free(g_clean);
        if (qid) json_object_set_new(out, "id", json_string(qid));
        char *line = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(line ? line : "{}");
        fflush(stdout); /* each answer as it is made, also into a pipe */
        free(line);
        json_decref(out);
    } else {
        size_t fl, wl;
        const char *fin = lz_prompt_final_answer(r.answer, &fl, &wl);
        if (!stream) {
            if (!o->quiet) fputs("Answer: ", stdout);
            fwrite(fin, 1, fl, stdout);
            if (!o->quiet && wl) printf("\nReasoning: %.*s", (int)wl, r.answer); /* before the final-answer marker */
        }
        putchar('\n');
        if (!o->quiet) {
            printf("Sources:\n");
            for (int i = 0; i < n_docs; i++)
                printf("  [%d] %s%s%s (bm25 %.3f, %d tokens)\n", i + 1, docs[i].ext_id, docs[i].title[0] ? " — " : "",
                       docs[i].title, docs[i].score, docs[i].n_tokens);
            char dec[64];
            if (r.n_answer > 1) snprintf(dec, sizeof dec, "decode %.1f tok/s", tps);
            else snprintf(dec, sizeof dec, "%d answer token%s", r.n_answer, r.n_answer == 1 ? "" : "s");
            char rec[96] = "";
            if (r.n_recomputed)
                snprintf(rec, sizeof rec, " (%d cold document%s recomputed in %.1f ms)", r.n_recomputed,
                         r.n_recomputed == 1 ? "" : "s", 1e3 * r.t_recompute);
            printf("Timings: retrieval %.1f ms, KV load %.1f ms%s, first token %.1f ms, %s "
                   "(%d prompt tokens, %d computed, mode %s)\n",
                   1e3 * t_retrieve, 1e3 * r.t_load, rec, 1e3 * r.t_ttft, dec, r.n_prompt, r.n_computed,
                   lz_query_mode_name(o->sc.qo.mode));
            printf("Cache: this question %lld hits / %lld misses; session %lld hits / %lld misses, %.1f of %.1f MiB used\n",
                   (long long)r.hits, (long long)r.misses, (long long)cs.hits, (long long)cs.misses,
                   cs.bytes_used / 1048576.0, cs.bytes_budget / 1048576.0);
        }
        fflush(stdout);
    }
    lz_query_result_free(&r);
    rc = 0;
    goto done;
fail:
    if (o->json) {
        char *q_clean = utf8_clean(question ? question : ""), *e_clean = utf8_clean(err);
        json_t *out = json_pack("{s:s, s:s}", "question", q_clean ? q_clean : "", "error", e_clean ? e_clean : "");
        free(q_clean);
        free(e_clean);
        if (qid) json_object_set_new(out, "id", json_string(qid));
        char *line = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(line ? line : "{}");
        fflush(stdout);
        free(line);
        json_decref(out);
    }
    fprintf(stderr, "lazyquery: %s\n", err);
done:
    free(docs);
    return rc;
}

/* The options into o and *question. Returns -1 to go on, else the exit
 * status (--help, --version: 0; a bad option or value: LZ_EXIT_USAGE). */
static int parse_options(int argc, char **argv, options *o, const char **question)
{
    enum { O_DOCS = 256, O_QUESTIONS, O_ORDER, O_JSON, O_DOC, O_STRICT };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_SESSION_CLI_LONGOPTS, LZ_CLI_OPT_QUIET,
        LZ_OPT_ARG("docs", O_DOCS), LZ_OPT_ARG("questions", O_QUESTIONS), LZ_OPT_ARG("order", O_ORDER),
        LZ_OPT_FLAG("json", O_JSON), LZ_OPT_ARG("doc", O_DOC), LZ_OPT_FLAG("strict", O_STRICT),
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
        case O_DOCS: if (add_doc_ids(o, optarg, 1)) return lz_cli_fail("out of memory"); break;
        case O_DOC:
            if (!*optarg) return lz_cli_usage("--doc: expected a document id, got ''");
            if (add_doc_ids(o, optarg, 0)) return lz_cli_fail("out of memory");
            break;
        case O_STRICT: o->strict = 1; break;
        case O_QUESTIONS: o->questions_path = optarg; break;
        case O_ORDER: if (lz_cli_choice("--order", optarg, orders, &o->best_first)) return LZ_EXIT_USAGE; break;
        case O_JSON: o->json = 1; break;
        default: return LZ_EXIT_USAGE; /* '?': lz_cli_getopt named it */
        }
    }
    if (optind + 1 < argc) return lz_cli_usage("one question per call (quote it), or use --questions or '-'");
    if (optind < argc) *question = argv[optind];
    if (*question && o->questions_path)
        return lz_cli_usage("a question and --questions %s: give one of them", o->questions_path);
    if (*question && !strcmp(*question, "-")) *question = NULL; /* '-': standard input, one question a line */
    const int erc = lz_cli_check_env();
    return erc ? erc : -1;
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    lz_cli_init("lazyquery");
    /* static: the --doc copies it holds stay reachable on every early return */
    static options o;
    lz_session_cli_default(&o.sc, lz_engine_gpu_built());
    const char *question = NULL;
    const int prc = parse_options(argc, argv, &o, &question);
    if (prc >= 0) return prc;
    if (o.questions_path) o.json = 1; /* one JSON result per line */
    char err[1024] = "";
    lz_store *st = NULL;
    const int orc = lz_session_cli_open_store(&o.sc, &st);
    if (orc) return orc;
    /* a store with no documents answers every question from the question alone: said once, and
     * refused under --strict (before the model loads) */
    int64_t n_stored = -1;
    if (lz_store_doc_count(st, &n_stored, err, sizeof err) == 0 && n_stored == 0) {
        if (o.strict) {
            fprintf(stderr, "lazyquery: store %s holds no documents: no question can be answered from documents "
                    "(--strict); ingest a corpus into it first\n", o.sc.store_dir);
            lz_store_close(st);
            return LZ_EXIT_USAGE;
        }
        fprintf(stderr, "lazyquery: warning: store %s holds no documents (ingest a corpus into it first): every "
                "question is answered from the question alone\n", o.sc.store_dir);
    }
    lz_llama *m = NULL;
    const int mrc = lz_session_cli_load_model(&o.sc, &m);
    if (mrc) {
        lz_store_close(st);
        return mrc;
    }
    if (!o.json && !o.quiet && isatty(STDOUT_FILENO)) o.sc.qo.on_piece = print_piece;
    /* the engine: --gpu's, else the CPU's */
    lz_engine_opts eo = {.gpu = o.sc.gpu, .device = -1, .own_tokens = lz_query_engine_rows(o.sc.qo.mode),
                         .gpu_cache = o.sc.gpu_cache, .cache_policy = o.sc.qo.cache_policy, .batch = o.sc.qo.batch};
    if (lz_engine_open(m, &eo, &o.engine, err, sizeof err)) {
        fprintf(stderr, "lazyquery: %s\n", err);
        lz_llama_free(m);
        lz_store_close(st);
        return 1;
    }
    if (o.sc.gpu) {
        if (o.sc.gpu_cache && lz_engine_gpu_cache(o.engine) < o.sc.gpu_cache)
            fprintf(stderr, "lazyquery: note: --gpu-cache-bytes %.2f GiB is more than the GPU has free; using %.2f GiB\n",
                    o.sc.gpu_cache / 1073741824.0, lz_engine_gpu_cache(o.engine) / 1073741824.0);
        o.sc.qo.cold = o.sc.cold < 0 ? LZ_COLD_AUTO : o.sc.cold;
    }
    o.sc.qo.backend = lz_engine_query(o.engine); /* the GPU's: one sequence at a time */
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, st, &o.sc.qo, &q, err, sizeof err)) {
        fprintf(stderr, "lazyquery: %s\n", err);
        lz_llama_free(m);
        lz_store_close(st);
        return 1;
    }
    if (o.sc.preload) {
        lz_query_preload_result pr;
        const int rc = lz_query_preload(q, o.sc.preload == 2, &pr, err, sizeof err);
        o.pre = pr;
        if (rc) fprintf(stderr, "lazyquery: warning: preload: %s\n", err);
        if (!o.quiet && !o.json && pr.gpu + pr.host > 0) /* --json: in every answer's tiers */
            fprintf(stderr, "lazyquery: preloaded %d documents (%.2f GB of KV) into the GPU tier and %d (%.2f GB) into "
                    "the host tier in %.2f s\n", pr.gpu, pr.gpu_bytes / 1e9, pr.host, pr.host_bytes / 1e9, pr.seconds);
    }
    int failures = 0, answered = 0;
    if (question) {
        failures += answer_one(q, st, &o, NULL, question, NULL);
        answered++;
    } else if (o.questions_path) {
        FILE *f = strcmp(o.questions_path, "-") ? fopen(o.questions_path, "r") : stdin;
        if (!f) { fprintf(stderr, "lazyquery: %s: %s\n", o.questions_path, strerror(errno)); failures++; }
        char *line = NULL;
        size_t cap = 0;
        long lineno = 0;
        while (f && getline(&line, &cap, f) > 0) {
            lineno++;
            json_error_t je;
            if (strspn(line, " \t\r\n") == strlen(line)) continue;
            json_t *obj = json_loads(line, 0, &je);
            const char *qq = obj ? json_string_value(json_object_get(obj, "question")) : NULL;
            if (!qq) {
                fprintf(stderr, "lazyquery: %s:%ld: %s\n", o.questions_path, lineno,
                        obj ? "no \"question\" string" : je.text);
                failures++;
                json_decref(obj);
                continue;
            }
            json_t *idv = json_object_get(obj, "id");
            if (!idv) idv = json_object_get(obj, "_id");
            char idbuf[64];
            const char *qid = json_string_value(idv);
            if (!qid && json_is_integer(idv)) { snprintf(idbuf, sizeof idbuf, "%lld", (long long)json_integer_value(idv)); qid = idbuf; }
            failures += answer_one(q, st, &o, qid, qq, json_object_get(obj, "docs"));
            answered++;
            json_decref(obj);
        }
        free(line);
        if (f && f != stdin) fclose(f);
    } else {
        if (isatty(STDIN_FILENO)) fprintf(stderr, "lazyquery: reading questions from standard input, one per line (Ctrl-D ends)\n");
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, stdin)) > 0) {
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (!len) continue;
            failures += answer_one(q, st, &o, NULL, line, NULL);
            answered++;
        }
        free(line);
    }
    lz_query_session_free(q);
    lz_engine_free(o.engine);
    lz_llama_free(m);
    lz_store_close(st);
    for (int i = 0; i < o.n_doc_ids; i++) free(o.doc_ids[i]);
    free(o.doc_ids);
    if (answered == 0 && failures == 0) return lz_cli_usage("no question given");
    return failures ? LZ_EXIT_USAGE : LZ_EXIT_OK; /* a question that got no answer: named above */
}
