/* tok_check.c - encodes text lines with the engine's tokenizer (tokenizer/tokenizer.h)
 * from a Hugging Face tokenizer.json, for comparison with datasets/bpe_train.py.
 * Input: one text a line with "\n" and "\\" escaped; output: ids a line.
 * Build: cc -O2 -I. datasets/tools/tok_check.c build/liblazy.a -ljansson -lpcre2-8 -lm -o build/tok_check
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: tok_check TOKENIZER.json LINES.txt\n");
        return 2;
    }
    char err[512] = "";
    lz_tokenizer *t;
    if (lz_tokenizer_from_hf(argv[1], NULL, &t, err, sizeof err)) {
        fprintf(stderr, "tok_check: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) { fprintf(stderr, "tok_check: cannot open %s\n", argv[2]); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        size_t o = 0;
        for (ssize_t i = 0; i < len; i++) { /* unescape \n and \\ */
            if (line[i] == '\\' && i + 1 < len && (line[i + 1] == 'n' || line[i + 1] == '\\')) {
                line[o++] = line[i + 1] == 'n' ? '\n' : '\\';
                i++;
            } else line[o++] = line[i];
        }
        int *ids, n;
        if (lz_tokenizer_encode(t, line, o, 0, &ids, &n)) { fprintf(stderr, "tok_check: encode failed\n"); return 1; }
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    }
    free(line);
    fclose(f);
    lz_tokenizer_free(t);
    return 0;
}
