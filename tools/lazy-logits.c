/* lazy-logits.c - test driver for parity checks: loads a model (GGUF or
 * Hugging Face folder), runs given token ids starting at position --pos0
 * (the cache is empty; positions are pos0, pos0+1, ...), and prints one JSON
 * object: the last-position logits, a greedy continuation (argmax, first
 * index on ties, as torch.argmax) and the rotary inverse frequencies.
 * No tokenizer is needed. --tokenize-file prints the ids of a text instead
 * (no BOS, special tokens not parsed) to compare tokenizers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/clock.h"
#include "base/env.h"
#include "base/runtime.h"
#include "model/llama.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazy-logits -m MODEL (--ids \"1 2 3\" | --ids-file FILE) [options]\n"
            "       lazy-logits -m MODEL --tokenize-file FILE\n"
            "\n"
            "Prints {\"logits\": [...], \"greedy\": [...], ...} as JSON on stdout.\n"
            "Options take their value as '--opt value' or '--opt=value'; '--' ends the options.\n"
            "\n"
            "  -m, --model PATH     .gguf file or Hugging Face folder\n"
            "      --ids LIST       prompt token ids separated by spaces or commas\n"
            "      --ids-file FILE  the same, read from a file ('-': standard input)\n"
            "      --pos0 P         position of the first prompt token (default 0)\n"
            "  -n, --max-tokens N   greedy tokens to generate after the prompt (default 20)\n"
            "      --no-logits      leave the logits out of the JSON\n"
            "      --tokenize-file F  print {\"ids\": [...]} of the text in F (no BOS; '-': standard\n"
            "                       input) and exit\n"
            "  -t, --threads N      CPU threads (default: all cores)\n"
            "      --batch N        prefill batch (default 512)\n"
            LZ_CLI_COMMON_HELP
            "\n" LZ_ENV_HELP "\n" LZ_CLI_EXIT_HELP);
}

/* Parses integers separated by spaces, commas or newlines. */
static int parse_ids(const char *s, int **ids, int *n)
{
    int cap = 64;
    *n = 0;
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) return -1;
    while (*s) {
        if (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t' || *s == '\r' || *s == '[' || *s == ']') { s++; continue; }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > 0x7fffffff) return -1;
        if (*n == cap) {
            int *p = realloc(*ids, (size_t)(cap *= 2) * sizeof *p);
            if (!p) return -1;
            *ids = p;
        }
        (*ids)[(*n)++] = (int)v;
        s = end;
    }
    return 0;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Prints the ids of the text in path as {"ids": [...]}. */
static int tokenize(const char *model_path, const char *path)
{
    char err[512] = "", *text = lz_cli_read_file(path, NULL, err, sizeof err);
    lz_llama *m;
    if (!text) return lz_cli_fail("%s", err);
    if (lz_llama_load(model_path, &m, err, sizeof err)) { free(text); return lz_cli_fail("%s", err); }
    int *ids = NULL, n = 0, rc = LZ_EXIT_RUNTIME;
    if (!m->tok) fprintf(stderr, "lazy-logits: %s has no tokenizer\n", model_path);
    else if (lz_tokenizer_encode(m->tok, text, strlen(text), 0, &ids, &n)) fprintf(stderr, "lazy-logits: out of memory\n");
    else {
        printf("{\"ids\": [");
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]}\n");
        rc = LZ_EXIT_OK;
    }
    free(ids);
    free(text);
    lz_llama_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    lz_cli_init("lazy-logits");
    const char *model_path = NULL, *ids_s = NULL, *ids_file = NULL, *tok_file = NULL;
    long pos0 = 0;
    long n_gen = 20, threads = 0, batch = 512;
    int with_logits = 1;
    enum { O_IDS = 256, O_IDS_FILE, O_POS0, O_BATCH, O_NO_LOGITS, O_TOKENIZE_FILE };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_MODEL, LZ_CLI_OPT_MAX_TOKENS, LZ_CLI_OPT_THREADS,
        LZ_OPT_ARG("ids", O_IDS), LZ_OPT_ARG("ids-file", O_IDS_FILE), LZ_OPT_ARG("pos0", O_POS0),
        LZ_OPT_ARG("batch", O_BATCH), LZ_OPT_FLAG("no-logits", O_NO_LOGITS),
        LZ_OPT_ARG("tokenize-file", O_TOKENIZE_FILE),
        {NULL, 0, NULL, 0}};
    int c;
    while ((c = lz_cli_getopt(argc, argv, "hVm:n:t:", longopts)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 'm': model_path = optarg; break;
        case 'n': if (lz_cli_long("--max-tokens", optarg, 0, 1 << 20, &n_gen)) return LZ_EXIT_USAGE; break;
        case 't': if (lz_cli_long("--threads", optarg, 1, 4096, &threads)) return LZ_EXIT_USAGE; break;
        case O_IDS: ids_s = optarg; break;
        case O_IDS_FILE: ids_file = optarg; break;
        case O_POS0: if (lz_cli_long("--pos0", optarg, 0, 1L << 40, &pos0)) return LZ_EXIT_USAGE; break;
        case O_BATCH: if (lz_cli_long("--batch", optarg, 1, 1 << 16, &batch)) return LZ_EXIT_USAGE; break;
        case O_NO_LOGITS: with_logits = 0; break;
        case O_TOKENIZE_FILE: tok_file = optarg; break;
        default: return LZ_EXIT_USAGE; /* '?': lz_cli_getopt named it */
        }
    }
    if (optind < argc) return lz_cli_usage("unexpected argument '%s'", argv[optind]);
    if (!model_path) return lz_cli_usage("no model given (-m MODEL)");
    int erc = lz_cli_check_env();
    if (erc) return erc;
    if (tok_file) return tokenize(model_path, tok_file);
    if (!ids_s == !ids_file) return lz_cli_usage("need exactly one of --ids / --ids-file");
    char err[512] = "";
    char *text = ids_file ? lz_cli_read_file(ids_file, NULL, err, sizeof err) : NULL;
    if (ids_file && !text) return lz_cli_usage("%s", err);
    int *ids = NULL, n_ids = 0;
    if (parse_ids(ids_file ? text : ids_s, &ids, &n_ids) || n_ids == 0) {
        free(text); free(ids);
        return lz_cli_usage("the token ids must be non-negative integers (and at least one)");
    }
    free(text);
    lz_llama_set_threads((int)threads);
    lz_llama *m;
    double t0 = lz_now_s();
    if (lz_llama_load(model_path, &m, err, sizeof err)) { free(ids); return lz_cli_fail("%s", err); }
    double t_load = lz_now_s() - t0;
    const int V = m->cfg.vocab;
    int rc = 1;
    lz_kv_cache cache = {0};
    lz_llama_scratch *s = lz_llama_scratch_new(m, (int)batch);
    float *logits = malloc((size_t)V * sizeof(float)), *first = malloc((size_t)V * sizeof(float));
    int *gen = malloc((size_t)(n_gen + 1) * sizeof(int));
    if (!s || !logits || !first || !gen || lz_kv_cache_init(&cache, &m->cfg, n_ids + (int)n_gen)) {
        fprintf(stderr, "lazy-logits: out of memory\n");
        goto done;
    }
    lz_kv_cache_reset(&cache, pos0);
    double t1 = lz_now_s();
    if (lz_llama_forward(m, s, &cache, NULL, 0, ids, n_ids, logits, LZ_LOGITS_LAST)) {
        fprintf(stderr, "lazy-logits: forward pass failed (token id >= vocab %d?)\n", V);
        goto done;
    }
    double t_prefill = lz_now_s() - t1;
    memcpy(first, logits, (size_t)V * sizeof(float));
    for (int i = 0; i < n_gen; i++) {
        gen[i] = argmax(logits, V);
        if (i + 1 < n_gen && lz_llama_forward(m, s, &cache, NULL, 0, &gen[i], 1, logits, LZ_LOGITS_LAST)) {
            fprintf(stderr, "lazy-logits: forward pass failed\n");
            goto done;
        }
    }
    printf("{\"model\": \"%s\", \"arch\": \"%s\", \"fingerprint\": \"%s\", \"rope_layout\": \"%s\",\n", model_path,
           m->arch, m->fingerprint_hex, m->cfg.rope_layout == LZ_ROPE_HALF ? "half" : "adjacent");
    printf(" \"vocab\": %d, \"n_prompt\": %d, \"pos0\": %ld, \"load_s\": %.3f, \"prefill_s\": %.3f,\n", V, n_ids, pos0,
           t_load, t_prefill);
    printf(" \"inv_freq\": [");
    for (int i = 0; i < m->cfg.head_dim / 2; i++) printf(i ? ", %.9g" : "%.9g", m->inv_freq[i]);
    printf("],\n \"greedy\": [");
    for (int i = 0; i < n_gen; i++) printf(i ? ", %d" : "%d", gen[i]);
    printf("]");
    if (with_logits) {
        printf(",\n \"logits\": [");
        for (int i = 0; i < V; i++) printf(i ? ",%.9g" : "%.9g", first[i]);
        printf("]");
    }
    printf("}\n");
    rc = 0;
done:
    free(ids); free(logits); free(first); free(gen);
    lz_kv_cache_free(&cache);
    lz_llama_scratch_free(s);
    lz_llama_free(m);
    return rc;
}
