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
#include <time.h>

#include "model/llama.h"
#include "base/runtime.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazy-logits -m MODEL (--ids \"1 2 3\" | --ids-file FILE) [options]\n"
            "\n"
            "Prints {\"logits\": [...], \"greedy\": [...], ...} as JSON on stdout.\n"
            "\n"
            "  -m, --model PATH     .gguf file or Hugging Face folder\n"
            "      --ids LIST       prompt token ids separated by spaces or commas\n"
            "      --ids-file FILE  the same, read from a file\n"
            "      --pos0 P         position of the first prompt token (default 0)\n"
            "  -n N                 greedy tokens to generate after the prompt (default 20)\n"
            "      --no-logits      leave the logits out of the JSON\n"
            "      --tokenize-file F  print {\"ids\": [...]} of the text in F (no BOS) and exit\n"
            "      --threads N      CPU threads (default: all cores)\n"
            "      --batch N        prefill batch (default 512)\n"
            "  -h, --help           this help\n");
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
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

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 2) {
            char *p = realloc(buf, cap *= 2);
            if (!p) { free(buf); buf = NULL; }
            else buf = p;
        }
    }
    fclose(f);
    if (buf) buf[len] = 0;
    return buf;
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
    char err[512] = "", *text = read_file(path);
    lz_llama *m;
    if (!text) { fprintf(stderr, "lazy-logits: cannot read %s\n", path); return 2; }
    if (lz_llama_load(model_path, &m, err, sizeof err)) { fprintf(stderr, "lazy-logits: %s\n", err); free(text); return 1; }
    int *ids = NULL, n = 0, rc = 1;
    if (!m->tok) fprintf(stderr, "lazy-logits: %s has no tokenizer\n", model_path);
    else if (lz_tokenizer_encode(m->tok, text, strlen(text), 0, &ids, &n)) fprintf(stderr, "lazy-logits: out of memory\n");
    else {
        printf("{\"ids\": [");
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]}\n");
        rc = 0;
    }
    free(ids);
    free(text);
    lz_llama_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    const char *model_path = NULL, *ids_s = NULL, *ids_file = NULL, *tok_file = NULL;
    long long pos0 = 0;
    long n_gen = 20, threads = 0, batch = 512;
    int with_logits = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "lazy-logits: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model_path = v; }
        else if (!strcmp(a, "--ids")) { NEED(); ids_s = v; }
        else if (!strcmp(a, "--ids-file")) { NEED(); ids_file = v; }
        else if (!strcmp(a, "--pos0")) { NEED(); pos0 = strtoll(v, NULL, 10); }
        else if (!strcmp(a, "-n")) { NEED(); n_gen = strtol(v, NULL, 10); }
        else if (!strcmp(a, "--threads")) { NEED(); threads = strtol(v, NULL, 10); }
        else if (!strcmp(a, "--batch")) { NEED(); batch = strtol(v, NULL, 10); }
        else if (!strcmp(a, "--no-logits")) with_logits = 0;
        else if (!strcmp(a, "--tokenize-file")) { NEED(); tok_file = v; }
        else { fprintf(stderr, "lazy-logits: unknown option '%s' (try --help)\n", a); return 2; }
#undef NEED
    }
    if (model_path && tok_file) return tokenize(model_path, tok_file);
    if (!model_path || (!ids_s == !ids_file) || n_gen < 0 || n_gen > (1 << 20) || batch <= 0 || pos0 < 0) {
        fprintf(stderr, "lazy-logits: need -m MODEL and exactly one of --ids / --ids-file (try --help)\n");
        return 2;
    }
    char *text = ids_file ? read_file(ids_file) : NULL;
    if (ids_file && !text) { fprintf(stderr, "lazy-logits: cannot read %s\n", ids_file); return 2; }
    int *ids = NULL, n_ids = 0;
    if (parse_ids(ids_file ? text : ids_s, &ids, &n_ids) || n_ids == 0) {
        fprintf(stderr, "lazy-logits: the token ids must be non-negative integers (and at least one)\n");
        free(text); free(ids);
        return 2;
    }
    free(text);
    lz_llama_set_threads((int)threads);
    char err[512] = "";
    lz_llama *m;
    double t0 = now_s();
    if (lz_llama_load(model_path, &m, err, sizeof err)) { fprintf(stderr, "lazy-logits: %s\n", err); free(ids); return 1; }
    double t_load = now_s() - t0;
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
    double t1 = now_s();
    if (lz_llama_forward(m, s, &cache, NULL, 0, ids, n_ids, logits, LZ_LOGITS_LAST)) {
        fprintf(stderr, "lazy-logits: forward pass failed (token id >= vocab %d?)\n", V);
        goto done;
    }
    double t_prefill = now_s() - t1;
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
    printf(" \"vocab\": %d, \"n_prompt\": %d, \"pos0\": %lld, \"load_s\": %.3f, \"prefill_s\": %.3f,\n", V, n_ids, pos0,
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
