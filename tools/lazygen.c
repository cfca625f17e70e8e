/* lazygen.c - runs a Llama-family model on the CPU: tokenizes a prompt,
 * prefills it in one batch, then generates token by token (greedy or
 * temperature/top-p), streaming the text. Also prints token ids (--ids) or
 * only tokenizes (--tokenize: the model's vocabulary alone is enough, as
 * lazy-tokenize). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/clock.h"
#include "base/env.h"
#include "base/runtime.h"
#include "model/chat.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "tools/tokenizer_file.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazygen -m MODEL [-p PROMPT] [-n N] [options]\n"
            "       lazygen -m MODEL --tokenize TEXT\n"
            "\n"
            "Runs a Llama-family model (GGUF file or Hugging Face folder) on the CPU.\n"
            "Options take their value as '--opt value' or '--opt=value'; '--' ends the options.\n"
            "\n"
            "  -m, --model PATH     model: .gguf file or folder with config.json\n"
            "  -p, --prompt TEXT    prompt (default: empty, generation starts after BOS); '-' reads it\n"
            "                       from standard input\n"
            "  -n, --max-tokens N   tokens to generate (default 64; alias --n-predict); stops early at\n"
            "                       end of text\n"
            "      --temp T         temperature; 0 = greedy (default 0)\n"
            "      --top-p P        nucleus sampling mass (default 0.9; used when --temp > 0)\n"
            "      --seed S         sampling seed (default 42)\n"
            "  -t, --threads N      CPU threads (default: all cores)\n"
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
            "      --tokenize TEXT  print the ids of TEXT (no BOS; '-': standard input) and exit; MODEL may\n"
            "                       be any vocabulary (a vocabulary-only GGUF, a tokenizer.json): see\n"
            "                       lazy-tokenize for more\n"
            LZ_CLI_COMMON_HELP
            "\n" LZ_ENV_HELP "\n" LZ_CLI_EXIT_HELP);
}

/* --tokenize: the vocabulary alone (no weights needed). */
static int tokenize_only(const char *model_path, const char *text, int special)
{
    char err[1024] = "";
    lz_tokenizer *t;
    if (lz_tool_load_tokenizer(model_path, &t, err, sizeof err)) return lz_cli_fail("%s", err);
    int *ids = NULL, n = 0;
    if (lz_tokenizer_encode(t, text, strlen(text), special ? LZ_TOK_SPECIAL : 0, &ids, &n)) {
        lz_tokenizer_free(t);
        return lz_cli_fail("tokenizer failed (out of memory)");
    }
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    lz_tokenizer_free(t);
    return LZ_EXIT_OK;
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    lz_cli_init("lazygen");
    const char *model_path = NULL, *prompt = "", *tokenize = NULL;
    long n_predict = 64, threads = 0, batch = 512, seed = 42;
    double temp = 0, top_p = 0.9;
    int print_ids = 0, timings = 0, bos = 1, special = 0;
    lz_chat_mode chat = LZ_CHAT_AUTO;
    const char *system_msg = NULL;
    enum { O_TEMP = 256, O_TOP_P, O_SEED, O_BATCH, O_TOKENIZE, O_IDS, O_TIMINGS, O_NO_BOS, O_SPECIAL, O_CHAT, O_NO_CHAT,
           O_SYSTEM };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_MODEL,
        LZ_OPT_ARG("prompt", 'p'),
        LZ_CLI_OPT_MAX_TOKENS,
        {"n-predict", required_argument, NULL, 'n'}, /* the earlier name */
        LZ_CLI_OPT_THREADS,
        LZ_OPT_ARG("temp", O_TEMP), LZ_OPT_ARG("top-p", O_TOP_P), LZ_OPT_ARG("seed", O_SEED),
        LZ_OPT_ARG("batch", O_BATCH), LZ_OPT_ARG("tokenize", O_TOKENIZE), LZ_OPT_FLAG("ids", O_IDS),
        LZ_OPT_FLAG("timings", O_TIMINGS), LZ_OPT_FLAG("no-bos", O_NO_BOS),
        LZ_OPT_FLAG("special", O_SPECIAL), LZ_OPT_FLAG("chat", O_CHAT), LZ_OPT_FLAG("no-chat", O_NO_CHAT),
        LZ_OPT_ARG("system", O_SYSTEM),
        {NULL, 0, NULL, 0}};
    int c;
    while ((c = lz_cli_getopt(argc, argv, "hVm:p:n:t:", longopts)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 'm': model_path = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': if (lz_cli_long("--max-tokens", optarg, 0, 1 << 24, &n_predict)) return LZ_EXIT_USAGE; break;
        case 't': if (lz_cli_long("--threads", optarg, 1, 4096, &threads)) return LZ_EXIT_USAGE; break;
        case O_TEMP: if (lz_cli_double("--temp", optarg, 0, 100, &temp)) return LZ_EXIT_USAGE; break;
        case O_TOP_P: if (lz_cli_double("--top-p", optarg, 1e-6, 1, &top_p)) return LZ_EXIT_USAGE; break;
        case O_SEED: if (lz_cli_long("--seed", optarg, 0, 0x7fffffffL, &seed)) return LZ_EXIT_USAGE; break;
        case O_BATCH: if (lz_cli_long("--batch", optarg, 1, 1 << 16, &batch)) return LZ_EXIT_USAGE; break;
        case O_TOKENIZE: tokenize = optarg; break;
        case O_IDS: print_ids = 1; break;
        case O_TIMINGS: timings = 1; break;
        case O_NO_BOS: bos = 0; break;
        case O_SPECIAL: special = 1; break;
        case O_CHAT: chat = LZ_CHAT_ON; break;
        case O_NO_CHAT: chat = LZ_CHAT_OFF; break;
        case O_SYSTEM: system_msg = optarg; break;
        default: return LZ_EXIT_USAGE; /* '?': lz_cli_getopt named it */
        }
    }
    if (optind < argc) return lz_cli_usage("unexpected argument '%s' (the prompt goes after -p)", argv[optind]);
    if (!model_path) return lz_cli_usage("no model given (-m MODEL)");
    int erc = lz_cli_check_env();
    if (erc) return erc;
    char *stdin_text = NULL, err[512] = "";
    if ((tokenize && !strcmp(tokenize, "-")) || !strcmp(prompt, "-")) { /* '-': standard input */
        if (!(stdin_text = lz_cli_read_file("-", NULL, err, sizeof err))) return lz_cli_fail("%s", err);
        if (tokenize && !strcmp(tokenize, "-")) tokenize = stdin_text;
        else prompt = stdin_text;
    }
    if (tokenize) {
        const int rc = tokenize_only(model_path, tokenize, special);
        free(stdin_text);
        return rc;
    }
    lz_llama_set_threads((int)threads);

    lz_llama *m;
    double t0 = lz_now_s();
    if (lz_llama_load(model_path, &m, err, sizeof err)) { free(stdin_text); return lz_cli_fail("%s", err); }
    double t_load = lz_now_s() - t0;
    if (!m->tok) { lz_llama_free(m); free(stdin_text); return lz_cli_fail("%s has no tokenizer", model_path); }

    char *chat_text = NULL;
    int is_chat = 0;
    lz_chat_format chat_fmt;
    if (lz_chat_prompt(model_path, chat, system_msg, prompt, &chat_text, &is_chat, &chat_fmt, err, sizeof err)) {
        fprintf(stderr, "lazygen: chat template: %s\n", err);
        lz_llama_free(m);
        free(stdin_text);
        return LZ_EXIT_RUNTIME;
    }
    if (is_chat && timings) fprintf(stderr, "chat format: %s\n", lz_chat_format_name(chat_fmt));
    int flags = special || is_chat ? LZ_TOK_SPECIAL : 0;
    int *ids = NULL, n_ids = 0;
    const char *text = chat_text;
    if (lz_tokenizer_encode(m->tok, text, strlen(text), flags | (bos ? LZ_TOK_BOS : 0), &ids, &n_ids)) {
        fprintf(stderr, "lazygen: tokenizer failed (out of memory)\n");
        free(chat_text);
        free(stdin_text);
        lz_llama_free(m);
        return LZ_EXIT_RUNTIME;
    }
    if (n_ids == 0) {
        fprintf(stderr, "lazygen: the prompt is empty and --no-bos was given: nothing to start from; try 'lazygen --help'\n");
        free(chat_text);
        free(stdin_text);
        free(ids);
        lz_llama_free(m);
        return LZ_EXIT_USAGE;
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
    double t1 = lz_now_s();
    if (lz_llama_forward(m, scratch, &cache, NULL, 0, ids, n_ids, logits, LZ_LOGITS_LAST)) {
        fprintf(stderr, "lazygen: forward pass failed (token id out of range?)\n");
        goto done;
    }
    double t_prefill = lz_now_s() - t1, t2 = lz_now_s();
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
    double t_decode = lz_now_s() - t2;
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
    free(stdin_text);
    free(ids);
    free(out);
    free(logits);
    lz_sampler_free(&sampler);
    lz_kv_cache_free(&cache);
    lz_llama_scratch_free(scratch);
    lz_llama_free(m);
    return rc;
}
