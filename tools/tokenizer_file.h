/* tokenizer_file.h - the tools' tokenizer without a model (lazy-tokenize,
 * lazygen --tokenize): from a GGUF, a model or a vocabulary-only file (no
 * tensors needed: llama.cpp's ggml-vocab-*.gguf), from a Hugging Face
 * tokenizer.json (with the tokenizer_config.json beside it when there is one),
 * or from a folder that holds tokenizer.json. Static functions, for tools/ only.
 */
#ifndef LZ_TOOLS_TOKENIZER_FILE_H
#define LZ_TOOLS_TOKENIZER_FILE_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

/* The tokenizer_config.json that goes with tokenizer.json path tj: "<dir>/<x>tokenizer_config.json"
 * for "<dir>/<x>tokenizer.json" (also "llama3.1-tokenizer.json"), else "<dir>/tokenizer_config.json";
 * into buf when it exists (returns buf), else NULL. */
static const char *lz_tool_tokenizer_config(const char *tj, char *buf, size_t n)
{
    const char *slash = strrchr(tj, '/');
    const size_t dir = slash ? (size_t)(slash - tj) + 1 : 0, len = strlen(tj);
    const char *suffix = "tokenizer.json";
    const size_t sl = strlen(suffix);
    if (len >= sl && len - sl >= dir && !strcmp(tj + len - sl, suffix))
        snprintf(buf, n, "%.*stokenizer_config.json", (int)(len - sl), tj);
    else
        snprintf(buf, n, "%.*stokenizer_config.json", (int)dir, tj);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* *out from path (GGUF, tokenizer.json or a folder with one). 0, or -1 with err set. */
static int lz_tool_load_tokenizer(const char *path, lz_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(err, errlen, "%.400s: no such file or folder", path);
        return -1;
    }
    char tj[4096], cfg[4200];
    if (S_ISDIR(sb.st_mode)) { /* a Hugging Face folder */
        snprintf(tj, sizeof tj, "%.4000s/tokenizer.json", path);
        if (access(tj, R_OK) != 0) {
            snprintf(err, errlen, "%.400s: a folder without tokenizer.json", path);
            return -1;
        }
        return lz_tokenizer_from_hf(tj, lz_tool_tokenizer_config(tj, cfg, sizeof cfg), out, err, errlen) ? -1 : 0;
    }
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    const size_t got = f ? fread(magic, 1, 4, f) : 0;
    if (f) fclose(f);
    if (!f) {
        snprintf(err, errlen, "%.400s: cannot open", path);
        return -1;
    }
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        lz_gguf *g = NULL;
        if (lz_gguf_open(path, &g, err, errlen)) return -1;
        const int rc = lz_tokenizer_from_gguf(g, out, err, errlen);
        lz_gguf_close(g);
        return rc ? -1 : 0;
    }
    /* anything else is read as a tokenizer.json (its loader names what is wrong) */
    snprintf(tj, sizeof tj, "%s", path);
    return lz_tokenizer_from_hf(tj, lz_tool_tokenizer_config(tj, cfg, sizeof cfg), out, err, errlen) ? -1 : 0;
}

#endif /* LZ_TOOLS_TOKENIZER_FILE_H */
