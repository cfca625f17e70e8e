/* prompt.c - builds the shared RAG prompt pieces as token ids (see prompt.h)
 * and resolves the default model path. */
#include "model/prompt.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"

typedef struct {
    int *v;
    int n, cap;
} ids_vec;

static int push(ids_vec *a, const int *ids, int n)
{
    if (a->n + n > a->cap) {
        int cap = a->cap ? a->cap : 64;
        while (cap < a->n + n) cap *= 2;
        int *v = realloc(a->v, sizeof(int) * (size_t)cap);
        if (!v) return LZ_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, ids, sizeof(int) * (size_t)n);
    a->n += n;
    return 0;
}

static int push_id(ids_vec *a, int id) { return id >= 0 ? push(a, &id, 1) : 0; }

static int push_text(ids_vec *a, const lz_tokenizer *t, const char *s, size_t len)
{
    int *ids = NULL, n = 0;
    if (lz_tokenizer_encode(t, s, len, 0, &ids, &n) != 0) return LZ_ENOMEM;
    int rc = push(a, ids, n);
    free(ids);
    return rc;
}

static int push_str(ids_vec *a, const lz_tokenizer *t, const char *s)
{
    return push_text(a, t, s, strlen(s));
}

static int finish(ids_vec *a, int rc, int **ids, int *n)
{
    if (rc) {
        free(a->v);
        *ids = NULL;
        *n = 0;
        return rc;
    }
    if (!a->v) a->v = malloc(sizeof(int));
    if (!a->v) return LZ_ENOMEM;
    *ids = a->v;
    *n = a->n;
    return 0;
}

typedef struct { int start, end, eot; } llama3_ids;

static int llama3(const lz_tokenizer *t, llama3_ids *h)
{
    h->start = lz_tokenizer_find(t, "<|start_header_id|>");
    h->end = lz_tokenizer_find(t, "<|end_header_id|>");
    h->eot = lz_tokenizer_find(t, "<|eot_id|>");
    return h->start >= 0 && h->end >= 0 && h->eot >= 0;
}

lz_prompt_style lz_prompt_style_of(const lz_tokenizer *t)
{
    llama3_ids h;
    return llama3(t, &h) ? LZ_PROMPT_LLAMA3 : LZ_PROMPT_PLAIN;
}

/* <|start_header_id|>role<|end_header_id|> then "\n\n" + text */
static int header(ids_vec *a, const lz_tokenizer *t, const llama3_ids *h, const char *role)
{
    int rc = push_id(a, h->start);
    if (!rc) rc = push_str(a, t, role);
    if (!rc) rc = push_id(a, h->end);
    return rc;
}

int lz_prompt_prefix_tokens(const lz_tokenizer *t, int **ids, int *n)
{
    ids_vec a = { 0 };
    llama3_ids h;
    int rc = push_id(&a, lz_tokenizer_bos(t));
    if (llama3(t, &h)) {
        if (!rc) rc = header(&a, t, &h, "system");
        if (!rc) rc = push_str(&a, t, "\n\n" LZ_PROMPT_SYSTEM);
        if (!rc) rc = push_id(&a, h.eot);
        if (!rc) rc = header(&a, t, &h, "user");
        if (!rc) rc = push_str(&a, t, "\n\n");
    } else {
        if (!rc) rc = push_str(&a, t, LZ_PROMPT_SYSTEM "\n\n");
    }
    return finish(&a, rc, ids, n);
}

char *lz_prompt_doc_text(const char *title, const char *text, size_t text_len)
{
    size_t tl = title ? strlen(title) : 0;
    size_t n = strlen(LZ_PROMPT_DOC_HEAD) + tl + 1 + text_len + strlen(LZ_PROMPT_DOC_SEP) + 1;
    char *s = malloc(n);
    if (!s) return NULL;
    char *o = s;
    size_t hl = strlen(LZ_PROMPT_DOC_HEAD);
    memcpy(o, LZ_PROMPT_DOC_HEAD, hl);
    o += hl;
    if (tl) {
        memcpy(o, title, tl);
        o += tl;
    } else {
        o--; /* "Document:" without the trailing space */
    }
    *o++ = '\n';
    memcpy(o, text, text_len);
    o += text_len;
    memcpy(o, LZ_PROMPT_DOC_SEP, strlen(LZ_PROMPT_DOC_SEP));
    o += strlen(LZ_PROMPT_DOC_SEP);
    *o = 0;
    return s;
}

int lz_prompt_doc_tokens(const lz_tokenizer *t, const char *title, const char *text, size_t text_len,
                         int **ids, int *n)
{
    char *s = lz_prompt_doc_text(title, text, text_len);
    if (!s) return LZ_ENOMEM;
    *ids = NULL;
    *n = 0;
    int rc = lz_tokenizer_encode(t, s, strlen(s), 0, ids, n) != 0 ? LZ_ENOMEM : 0;
    free(s);
    return rc;
}

int lz_prompt_question_tokens(const lz_tokenizer *t, const char *question, int **ids, int *n)
{
    ids_vec a = { 0 };
    llama3_ids h;
    size_t ql = strlen(question);
    char *s = malloc(strlen(LZ_PROMPT_QUESTION) + ql + strlen(LZ_PROMPT_ANSWER) + 1);
    if (!s) return LZ_ENOMEM;
    int rc = 0;
    if (llama3(t, &h)) {
        sprintf(s, "%s%s", LZ_PROMPT_QUESTION, question);
        rc = push_str(&a, t, s);
        if (!rc) rc = push_id(&a, h.eot);
        if (!rc) rc = header(&a, t, &h, "assistant");
        if (!rc) rc = push_str(&a, t, "\n\n");
    } else {
        sprintf(s, "%s%s%s", LZ_PROMPT_QUESTION, question, LZ_PROMPT_ANSWER);
        rc = push_str(&a, t, s);
    }
    free(s);
    return finish(&a, rc, ids, n);
}

const char *lz_prompt_final_answer(const char *text, size_t *len, size_t *reasoning_len)
{
    const char *a = text;
    size_t why = 0;
    for (const char *m = strstr(text, LZ_PROMPT_FINAL); m; m = strstr(m + 1, LZ_PROMPT_FINAL)) {
        why = (size_t)(m - text);
        a = m + strlen(LZ_PROMPT_FINAL);
    }
    if (reasoning_len) *reasoning_len = why;
    while (*a && isspace((unsigned char)*a)) a++;
    size_t n = strlen(a);
    while (n && isspace((unsigned char)a[n - 1])) n--;
    *len = n;
    return a;
}

int lz_prompt_default_model(char *buf, size_t n, char *err, size_t errlen)
{
    const char *env = lz_env_get()->model; /* LAZY_MODEL (LZ_DEFAULT_MODEL_ENV), read once: base/env.h */
    if (*env) {
        if (access(env, R_OK) == 0) {
            snprintf(buf, n, "%s", env);
            return 0;
        }
        snprintf(err, errlen, "%s=%s: no such model file; set it to a GGUF file or pass --model",
                 LZ_DEFAULT_MODEL_ENV, env);
        return -1;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        /* <repo>/build/bin/tool, or <repo>/build/<variant>/bin/tool */
        for (int up = 3; up <= 4; up++) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s", exe);
            int ok = 1;
            for (int i = 0; i < up && ok; i++) {
                char *slash = strrchr(dir, '/');
                if (slash && slash != dir) *slash = 0;
                else ok = 0;
            }
            if (!ok) break;
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s/%s", dir, LZ_DEFAULT_MODEL);
            if (access(path, R_OK) == 0 && strlen(path) < n) {
                snprintf(buf, n, "%s", path);
                return 0;
            }
        }
    }
    snprintf(err, errlen,
             "no model given and the default model %s was not found next to the executable "
             "(%s); pass --model PATH.gguf or set %s",
             LZ_DEFAULT_MODEL, len > 0 ? exe : "/proc/self/exe unreadable", LZ_DEFAULT_MODEL_ENV);
    return -1;
}
