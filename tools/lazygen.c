/* lazygen.c - runs a Llama-family model on the CPU: tokenizes a prompt,
 * prefills it in one batch, then generates token by token (greedy or
 * temperature/top-p), streaming the text. Also prints token ids (--ids) or
 * only tokenizes (--tokenize). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/chat.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "base/runtime.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazygen -m MODEL [-p PROMPT] [-n N] [options]\n"
            "       lazygen -m MODEL --tokenize TEXT\n"
            "\n"
            "Runs a Llama-family model (GGUF file or Hugging Face folder) on the CPU.\n"
            "\n"
            "  -m, --model PATH     model: .gguf file or folder with config.json\n"
            "  -p, --prompt TEXT    prompt (default: empty, generation starts after BOS)\n"
            "  -n, --n-predict N    tokens to generate (default 64); stops early at end of text\n"
            "      --temp T         temperature; 0 = greedy (default 0)\n"
            "      --top-p P        nucleus sampling mass (default 0.9; used when --temp > 0)\n"
            "      --seed S         sampling seed (default 42)\n"
            "      --threads N      CPU threads (default: all cores)\n"
            "      --batch N        prefill batch size in tokens (default 512)\n"
            "      --ids            print 'prompt: <ids>' and 'output: <ids>' lines instead of text\n"
            "      --timings        print prefill and decode speed to stderr\n"
            "      --no-bos         do not prepend BOS to the prompt\n"
            "      --special        parse special tokens (e.g. <|eot_id|>) in the prompt\n"
            "      --chat           format the prompt as one user turn: the Llama-3 instruct format when\n"
            "                       the model's chat template is Llama-3's, a plain User:/Assistant: one otherwise\n"
            "                       (default: on when the model has a chat template)\n"
            "      --no-chat        use the prompt as it is\n"
            "      --system TEXT    system message for --chat\n"
            "      --tokenize TEXT  print the ids of TEXT (no BOS) and exit\n"
            "  -h, --help           this help\n"
            LZ_RUNTIME_ENV_HELP);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int parse_int(const char *s, const char *opt, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "lazygen: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *s, const char *opt, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "lazygen: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    const char *model_path = NULL, *prompt = "", *tokenize = NULL;
    long n_predict = 64, threads = 0, batch = 512, seed = 42;
    double temp = 0, top_p = 0.9;
    int print_ids = 0, timings = 0, bos = 1, special = 0;
    lz_chat_mode chat = LZ_CHAT_AUTO;
    const char *system_msg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!v) { fprintf(stderr, "lazygen: %s needs a value\n", a); return 1; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_VALUE(); model_path = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED_VALUE(); prompt = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { NEED_VALUE(); if (parse_int(v, a, 0, 1 << 24, &n_predict)) return 1; }
        else if (!strcmp(a, "--temp")) { NEED_VALUE(); if (parse_float(v, a, 0, 100, &temp)) return 1; }
        else if (!strcmp(a, "--top-p")) { NEED_VALUE(); if (parse_float(v, a, 1e-6, 1, &top_p)) return 1; }
        else if (!strcmp(a, "--seed")) { NEED_VALUE(); if (parse_int(v, a, 0, 0x7fffffffL, &seed)) return 1; }
        else if (!strcmp(a, "--threads")) { NEED_VALUE(); if (parse_int(v, a, 1, 1024, &threads)) return 1; }
        else if (!strcmp(a, "--batch")) { NEED_VALUE(); if (parse_int(v, a, 1, 1 << 16, &batch)) return 1; }
        else if (!strcmp(a, "--tokenize")) { NEED_VALUE(); tokenize = v; }
        else if (!strcmp(a, "--ids")) print_ids = 1;
        else if (!strcmp(a, "--timings")) timings = 1;
        else if (!strcmp(a, "--no-bos")) bos = 0;
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--chat")) chat = LZ_CHAT_ON;
        else if (!strcmp(a, "--no-chat")) chat = LZ_CHAT_OFF;
        else if (!strcmp(a, "--system")) { NEED_VALUE(); system_msg = v; }
        else { fprintf(stderr, "lazygen: unknown option '%s' (try --help)\n", a); return 1; }
#undef NEED_VALUE
    }
    if (!model_path) { fprintf(stderr, "lazygen: no model given (-m MODEL); try --help\n"); return 1; }
    lz_llama_set_threads((int)threads);

    char err[512] = "";
    lz_llama *m;
    double t0 = now_s();
    if (lz_llama_load(model_path, &m, err, sizeof err)) { fprintf(stderr, "lazygen: %s\n", err); return 1; }
    double t_load = now_s() - t0;
    if (!m->tok) { fprintf(stderr, "lazygen: %s has no tokenizer\n", model_path); lz_llama_free(m); return 1; }

    char *chat_text = NULL;
    int is_chat = 0;
    lz_chat_format chat_fmt;
    if (!tokenize && lz_chat_prompt(model_path, chat, system_msg, prompt, &chat_text, &is_chat, &chat_fmt, err, sizeof err)) {
        fprintf(stderr, "lazygen: chat template: %s\n", err);
        lz_llama_free(m);
        return 1;
    }
    if (is_chat && timings) fprintf(stderr, "chat format: %s\n", lz_chat_format_name(chat_fmt));
    int flags = special || is_chat ? LZ_TOK_SPECIAL : 0;
    int *ids = NULL, n_ids = 0;
    const char *text = tokenize ? tokenize : chat_text;
    if (lz_tokenizer_encode(m->tok, text, strlen(text), flags | (!tokenize && bos ? LZ_TOK_BOS : 0), &ids, &n_ids)) {
        fprintf(stderr, "lazygen: tokenizer failed (out of memory)\n");
        free(chat_text);
        lz_llama_free(m);
        return 1;
    }
    if (tokenize) {
        for (int i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
        lz_llama_free(m);
        return 0;
    }
    if (n_ids == 0) {
        fprintf(stderr, "lazygen: the prompt is empty and --no-bos was given: nothing to start from\n");
        free(chat_text);
        free(ids);
        lz_llama_free(m);
        return 1;
    }
    int rc = 1;
    lz_kv_cache cache = {0};
    lz_sampler sampler = {0};
    lz_llama_scratch *scratch = lz_llama_scratch_new(m, (int)batch);
    float *logits = malloc((size_t)m->cfg.vocab * sizeof(float));
    int *out = malloc((size_t)(n_predict + 1) * sizeof(int));
    if (!scratch || !logits || !out || lz_kv_cache_init(&cache, &m->cfg, n_ids + (int)n_predict) ||
        lz_sampler_init(&sampler, m->cfg.vocab, (float)temp, (float)top_p, (uint64_t)seed)) {
        fprintf(stderr, "lazygen: out of memory for a context of %ld tokens\n", n_ids + n_predict);
        goto done;
    }
    if (print_ids) {
        printf("prompt:");
        for (int i = 0; i < n_ids; i++) printf(" %d", ids[i]);
        printf("\n");
    } else {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    double t1 = now_s();
    if (lz_llama_forward(m, scratch, &cache, NULL, 0, ids, n_ids, logits, LZ_LOGITS_LAST)) {
        fprintf(stderr, "lazygen: forward pass failed (token id out of range?)\n");
        goto done;
    }
    double t_prefill = now_s() - t1, t2 = now_s();
    int n_out = 0, prev = ids[n_ids - 1];
    char piece[256];
    while (n_out < n_predict) {
        int next = lz_sample(&sampler, logits);
        out[n_out++] = next;
        if (lz_tokenizer_is_eog(m->tok, next)) break;
        if (!print_ids) {
            int len = lz_tokenizer_piece(m->tok, prev, next, piece, sizeof piece);
            if (len > 0) { fwrite(piece, 1, (size_t)(len < (int)sizeof piece ? len : (int)sizeof piece), stdout); fflush(stdout); }
        }
        prev = next;
        if (n_out == n_predict) break;
        if (lz_llama_forward(m, scratch, &cache, NULL, 0, &next, 1, logits, LZ_LOGITS_LAST)) {
            fprintf(stderr, "lazygen: forward pass failed\n");
            goto done;
        }
    }
    double t_decode = now_s() - t2;
    if (print_ids) {
        printf("output:");
        for (int i = 0; i < n_out; i++) printf(" %d", out[i]);
    }
    printf("\n");
    if (timings)
        fprintf(stderr, "load %.3f s | prefill %d tokens %.3f s (%.1f tok/s) | decode %d tokens %.3f s (%.1f tok/s)\n",
                t_load, n_ids, t_prefill, n_ids / t_prefill, n_out, t_decode, n_out > 1 ? (n_out - 1) / t_decode : 0.0);
    rc = 0;
done:
    free(chat_text);
    free(ids);
    free(out);
    free(logits);
    lz_sampler_free(&sampler);
    lz_kv_cache_free(&cache);
    lz_llama_scratch_free(scratch);
    lz_llama_free(m);
    return rc;
}
