/* prompt_check.c - prints the token ids model/prompt.c builds, for comparison
 * with datasets/train/prompt.py (train.py --check-prompt runs it).
 * Input lines (\n and \\ escaped): "P" (the prefix), "D<TAB>title<TAB>text" (a
 * document), "Q<TAB>question". Output: the ids of each, one line each.
 * Build: cc -O2 -I. datasets/tools/prompt_check.c build/liblazy.a -ljansson -lpcre2-8 -lm -o build/prompt_check
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/prompt.h"

static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '\\' && (p[1] == 'n' || p[1] == '\\')) { *o++ = p[1] == 'n' ? '\n' : '\\'; p++; }
        else *o++ = *p;
    }
    *o = 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: prompt_check TOKENIZER.json LINES.txt\n"); return 2; }
    char err[512] = "";
    lz_tokenizer *t;
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s", argv[1]);
    char *slash = strrchr(cfg, '/');
    snprintf(slash ? slash + 1 : cfg, sizeof cfg - (slash ? (size_t)(slash + 1 - cfg) : 0), "tokenizer_config.json");
    if (lz_tokenizer_from_hf(argv[1], cfg, &t, err, sizeof err)) { fprintf(stderr, "prompt_check: %s\n", err); return 1; }
    if (lz_prompt_style_of(t) != LZ_PROMPT_LLAMA3) { fprintf(stderr, "prompt_check: not the LLAMA3 style\n"); return 1; }
    FILE *f = fopen(argv[2], "rb");
    if (!f) { fprintf(stderr, "prompt_check: cannot open %s\n", argv[2]); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        int *ids = NULL, n = 0, rc;
        if (line[0] == 'P') rc = lz_prompt_prefix_tokens(t, &ids, &n);
        else if (line[0] == 'Q' && line[1] == '\t') { unescape(line + 2); rc = lz_prompt_question_tokens(t, line + 2, &ids, &n); }
        else if (line[0] == 'D' && line[1] == '\t' && strchr(line + 2, '\t')) {
            char *title = line + 2, *text = strchr(title, '\t');
            *text++ = 0;
            unescape(title);
            unescape(text);
            rc = lz_prompt_doc_tokens(t, *title ? title : NULL, text, strlen(text), &ids, &n);
        } else { fprintf(stderr, "prompt_check: bad line '%s'\n", line); return 1; }
        if (rc) { fprintf(stderr, "prompt_check: prompt builder failed (%d)\n", rc); return 1; }
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    }
    free(line);
    fclose(f);
    lz_tokenizer_free(t);
    return 0;
}
