/* lazy-tokenize.c - text <-> token ids with any vocabulary, no weights: a
 * GGUF (a model, or a vocabulary-only file such as llama.cpp's
 * ggml-vocab-*.gguf), a Hugging Face tokenizer.json (with the
 * tokenizer_config.json beside it) or a folder holding one. Prints the ids of
 * a text, of each line or of each piece of the input between separators
 * (batch use, e.g. llama.cpp's vocabulary test files), decodes ids, or
 * describes the vocabulary (--info). */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/env.h"
#include "model/prompt.h"
#include "tools/tokenizer_file.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazy-tokenize [-m VOCAB] [options] TEXT | -\n"
            "       lazy-tokenize [-m VOCAB] --decode \"IDS\" | -\n"
            "       lazy-tokenize [-m VOCAB] --info\n"
            "\n"
            "Prints the token ids of TEXT, space separated, on one line ('-': standard input, all of it\n"
            "one text, unless --lines or --separator cut it into pieces: one line of ids a piece).\n"
            "No weights are read: VOCAB is a GGUF (a model, or a vocabulary-only file such as llama.cpp's\n"
            "ggml-vocab-*.gguf), a Hugging Face tokenizer.json (with its tokenizer_config.json when beside\n"
            "it: <x>tokenizer_config.json for <x>tokenizer.json, else tokenizer_config.json in the same\n"
            "folder), or a folder holding tokenizer.json.\n"
            "Options take their value as '--opt value' or '--opt=value'; '--' ends the options.\n"
            "\n"
            "  -m, --model PATH       the vocabulary (default: $%s, else <repo>/%s)\n"
            "      --bos              prepend BOS (default: none, as lazygen --tokenize)\n"
            "      --special          parse special tokens in the text (<|eot_id|>); by default they are\n"
            "                         plain text\n"
            "      --lines            one piece a line (the newline is not part of it)\n"
            "      --separator SEP    pieces between occurrences of SEP (\\n, \\t and \\\\ are read as\n"
            "                         escapes; a separator at the very end ends the last piece)\n"
            "  -d, --decode           the input is token ids (spaces or commas between them): print\n"
            "                         their text (a piece's text and a newline with --lines/--separator)\n"
            "      --info             print the vocabulary's kind, size, BOS and EOS ids and exit\n"
            "      --json             JSON output: {\"ids\": [...]} or {\"text\": \"...\"} a piece, one a line\n"
            LZ_CLI_COMMON_HELP
            "\n" LZ_ENV_HELP "\n" LZ_CLI_EXIT_HELP,
            LZ_DEFAULT_MODEL_ENV, LZ_DEFAULT_MODEL);
}

/* SEP with \n, \t, \\ read as escapes, into a malloc'd string. */
static char *unescape(const char *s)
{
    char *out = malloc(strlen(s) + 1), *o = out;
    for (; out && *s; s++) {
        if (*s == '\\' && (s[1] == 'n' || s[1] == 't' || s[1] == '\\')) {
            *o++ = s[1] == 'n' ? '\n' : s[1] == 't' ? '\t' : '\\';
            s++;
        } else {
            *o++ = *s;
        }
    }
    if (out) *o = 0;
    return out;
}

static void print_json(json_t *j)
{
    char *line = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    puts(line ? line : "{}");
    free(line);
    json_decref(j);
}

/* One piece of len bytes: its ids (or, decoding, its text). 0, or an exit status. */
static int do_piece(const lz_tokenizer *t, const char *s, size_t len, int flags, int decode, int json, int pieces)
{
    if (decode) {
        int cap = 16, n = 0, *ids = malloc((size_t)cap * sizeof *ids);
        const char *p = s, *end = s + len;
        while (ids && p < end) {
            if (strchr(" ,\t\r\n[]", *p)) { p++; continue; }
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p || e > end || v < 0 || v >= lz_tokenizer_vocab_size(t)) {
                free(ids);
                return lz_cli_usage("--decode: '%.*s' is not a token id of this vocabulary (0..%d)",
                                    (int)strcspn(p, " ,\t\r\n"), p, lz_tokenizer_vocab_size(t) - 1);
            }
            if (n == cap) {
                int *q = realloc(ids, (size_t)(cap *= 2) * sizeof *q);
                if (!q) { free(ids); ids = NULL; break; }
                ids = q;
            }
            ids[n++] = (int)v;
            p = e;
        }
        char *text = NULL;
        size_t tl = 0;
        if (!ids || lz_tokenizer_decode(t, ids, n, &text, &tl)) {
            free(ids);
            return lz_cli_fail("out of memory");
        }
        if (json) print_json(json_pack("{s:s%}", "text", text, tl));
        else {
            fwrite(text, 1, tl, stdout);
            if (pieces) putchar('\n');
        }
        free(text);
        free(ids);
        return 0;
    }
    int *ids = NULL, n = 0;
    if (lz_tokenizer_encode(t, s, len, flags, &ids, &n)) return lz_cli_fail("tokenizer failed (out of memory)");
    if (json) {
        json_t *a = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
        print_json(json_pack("{s:o}", "ids", a));
    } else {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    return 0;
}

int main(int argc, char **argv)
{
    lz_cli_init("lazy-tokenize");
    const char *model = NULL, *sep_arg = NULL;
    int bos = 0, special = 0, decode = 0, info = 0, json = 0, c;
    enum { O_BOS = 256, O_SPECIAL, O_LINES, O_SEP, O_INFO, O_JSON };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_MODEL,
        LZ_OPT_FLAG("decode", 'd'), LZ_OPT_FLAG("bos", O_BOS), LZ_OPT_FLAG("special", O_SPECIAL),
        LZ_OPT_FLAG("lines", O_LINES), LZ_OPT_ARG("separator", O_SEP), LZ_OPT_FLAG("info", O_INFO),
        LZ_OPT_FLAG("json", O_JSON),
        {NULL, 0, NULL, 0}};
    while ((c = lz_cli_getopt(argc, argv, "hVm:d", longopts)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 'm': model = optarg; break;
        case 'd': decode = 1; break;
        case O_BOS: bos = 1; break;
        case O_SPECIAL: special = 1; break;
        case O_LINES: sep_arg = "\\n"; break;
        case O_SEP:
            if (!*optarg) return lz_cli_usage("--separator: expected a non-empty string");
            sep_arg = optarg;
            break;
        case O_INFO: info = 1; break;
        case O_JSON: json = 1; break;
        default: return LZ_EXIT_USAGE; /* '?': lz_cli_getopt named it */
        }
    }
    const char *arg = optind < argc ? argv[optind] : NULL;
    if (optind + 1 < argc) return lz_cli_usage("one text at a time (quote it), or '-' for standard input");
    if (!info && !arg) return lz_cli_usage("no text given (TEXT, or '-' for standard input)");
    if (info && arg) return lz_cli_usage("--info takes no text (got '%s')", arg);
    int rc = lz_cli_check_env();
    if (rc) return rc;
    char err[2048] = "", model_buf[4096];
    if (!model) {
        if (lz_prompt_default_model(model_buf, sizeof model_buf, err, sizeof err)) return lz_cli_fail("%s", err);
        model = model_buf;
    }
    lz_tokenizer *t;
    if (lz_tool_load_tokenizer(model, &t, err, sizeof err)) return lz_cli_fail("%s", err);
    if (info) {
        const char *kind = lz_tokenizer_type(t) == LZ_TOKENIZER_SPM ? "spm" : "bpe";
        if (json)
            print_json(json_pack("{s:s, s:i, s:i, s:i, s:b}", "kind", kind, "vocab", lz_tokenizer_vocab_size(t), "bos",
                                 lz_tokenizer_bos(t), "eos", lz_tokenizer_eos(t), "add_bos", lz_tokenizer_add_bos(t)));
        else
            printf("kind %s, vocab %d, bos %d, eos %d, add_bos %d\n", kind, lz_tokenizer_vocab_size(t),
                   lz_tokenizer_bos(t), lz_tokenizer_eos(t), lz_tokenizer_add_bos(t));
        lz_tokenizer_free(t);
        return LZ_EXIT_OK;
    }
    size_t len = strlen(arg);
    char *input = NULL, *sep = sep_arg ? unescape(sep_arg) : NULL;
    if (!strcmp(arg, "-") && !(input = lz_cli_read_file("-", &len, err, sizeof err))) {
        lz_tokenizer_free(t);
        free(sep);
        return lz_cli_fail("%s", err);
    }
    const char *text = input ? input : arg;
    const int flags = (bos ? LZ_TOK_BOS : 0) | (special ? LZ_TOK_SPECIAL : 0);
    if (!sep) {
        rc = do_piece(t, text, len, flags, decode, json, 0);
    } else { /* pieces between separators; one at the very end closes the last piece */
        const size_t sl = strlen(sep);
        const char *p = text, *end = text + len;
        while (!rc && p < end) {
            const char *q = memmem(p, (size_t)(end - p), sep, sl);
            const size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
            rc = do_piece(t, p, n, flags, decode, json, 1);
            p += n + (q ? sl : 0);
        }
    }
    fflush(stdout);
    free(sep);
    free(input);
    lz_tokenizer_free(t);
    return rc;
}
