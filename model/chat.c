/* chat.c - chat template detection and the Llama-3 / plain chat formats
 * (see chat.h). No Jinja: the template is only inspected for its markers. */
#include "model/chat.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf.h"

/* A growing string. */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->oom = 1; return; }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Appends s without leading/trailing whitespace (Jinja's |trim). */
static void put_trim(sbuf *b, const char *s)
{
    if (!s) return;
    const char *e = s + strlen(s);
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v') s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\f' || e[-1] == '\v')) e--;
    put(b, s, (size_t)(e - s));
}

static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    sbuf b = {0};
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) put(&b, buf, r);
    fclose(f);
    if (b.oom) { free(b.s); return NULL; }
    if (!b.s) return strdup("");
    return b.s;
}

int lz_chat_template_hf(const char *dir, char **out, char *err, size_t errlen)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (access(path, R_OK) == 0) {
        json_error_t je;
        /* model_max_length is often 1e30 written as an integer: read numbers as reals */
        json_t *root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
        if (!root) return errf(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
        json_t *t = json_object_get(root, "chat_template");
        const char *s = NULL;
        if (json_is_string(t)) s = json_string_value(t);
        else if (json_is_array(t)) {
            size_t i;
            json_t *e;
            json_array_foreach(t, i, e) {
                json_t *name = json_object_get(e, "name"), *tt = json_object_get(e, "template");
                if (json_is_string(name) && !strcmp(json_string_value(name), "default") && json_is_string(tt))
                    s = json_string_value(tt);
            }
        }
        if (s) *out = strdup(s);
        json_decref(root);
        if (s && !*out) return errf(err, errlen, "out of memory");
        if (s) return 0;
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (access(path, R_OK) == 0 && !(*out = read_text(path))) return errf(err, errlen, "%s: cannot read", path);
    return 0;
}

int lz_chat_template_load(const char *model_path, char **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (stat(model_path, &st) != 0) return errf(err, errlen, "%s: no such file or folder", model_path);
    if (S_ISDIR(st.st_mode)) return lz_chat_template_hf(model_path, out, err, errlen);
    lz_gguf *g;
    if (lz_gguf_open(model_path, &g, err, errlen)) return -1;
    const char *s;
    size_t n;
    int rc = 0;
    if (lz_gguf_get_str(g, "tokenizer.chat_template", &s, &n) == 0) {
        *out = malloc(n + 1);
        if (*out) { memcpy(*out, s, n); (*out)[n] = 0; }
        else rc = errf(err, errlen, "out of memory");
    }
    lz_gguf_close(g);
    return rc;
}

lz_chat_format lz_chat_detect(const char *tmpl)
{
    if (!tmpl || !strstr(tmpl, "<|start_header_id|>") || !strstr(tmpl, "<|end_header_id|>") || !strstr(tmpl, "<|eot_id|>"))
        return LZ_CHAT_PLAIN;
    return strstr(tmpl, "Cutting Knowledge Date") ? LZ_CHAT_LLAMA31 : LZ_CHAT_LLAMA3;
}

const char *lz_chat_format_name(lz_chat_format f)
{
    return f == LZ_CHAT_LLAMA3 ? "llama3" : f == LZ_CHAT_LLAMA31 ? "llama3.1" : "plain";
}

static void llama3_turn(sbuf *b, const char *role, const char *content)
{
    puts_(b, "<|start_header_id|>");
    puts_(b, role);
    puts_(b, "<|end_header_id|>\n\n");
    put_trim(b, content);
    puts_(b, "<|eot_id|>");
}

int lz_chat_format_msgs(lz_chat_format f, const lz_chat_msg *msgs, int n, int add_assistant, char **out)
{
    sbuf b = {0};
    *out = NULL;
    int i = 0;
    if (f == LZ_CHAT_LLAMA31) {
        /* Llama-3.1's template always opens with a system block */
        puts_(&b, "<|start_header_id|>system<|end_header_id|>\n\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (n > 0 && msgs[0].role && !strcmp(msgs[0].role, "system")) put_trim(&b, msgs[i++].content);
        puts_(&b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        const char *role = msgs[i].role ? msgs[i].role : "user";
        if (f != LZ_CHAT_PLAIN) { llama3_turn(&b, role, msgs[i].content); continue; }
        if (!strcmp(role, "system")) {
            put_trim(&b, msgs[i].content);
            puts_(&b, "\n\n");
        } else {
            char head[64];
            snprintf(head, sizeof head, "%c%s: ", role[0] >= 'a' && role[0] <= 'z' ? role[0] - 32 : role[0], role + 1);
            puts_(&b, head);
            put_trim(&b, msgs[i].content);
            puts_(&b, "\n");
        }
    }
    if (add_assistant) puts_(&b, f == LZ_CHAT_PLAIN ? "Assistant:" : "<|start_header_id|>assistant<|end_header_id|>\n\n");
    if (!b.s) puts_(&b, "");
    if (b.oom) { free(b.s); return -1; }
    *out = b.s;
    return 0;
}

int lz_chat_prompt(const char *model_path, lz_chat_mode mode, const char *system, const char *user, char **out,
                   int *is_chat, lz_chat_format *fmt, char *err, size_t errlen)
{
    *out = NULL;
    *is_chat = 0;
    *fmt = LZ_CHAT_PLAIN;
    char *tmpl = NULL;
    if (mode != LZ_CHAT_OFF && lz_chat_template_load(model_path, &tmpl, err, errlen)) return -1;
    lz_chat_format f = lz_chat_detect(tmpl);
    int apply = mode == LZ_CHAT_ON || (mode == LZ_CHAT_AUTO && tmpl != NULL);
    free(tmpl);
    if (!apply) {
        *out = strdup(user ? user : "");
        return *out ? 0 : errf(err, errlen, "out of memory");
    }
    lz_chat_msg msgs[2];
    int n = 0;
    if (system && system[0]) msgs[n++] = (lz_chat_msg){"system", system};
    msgs[n++] = (lz_chat_msg){"user", user ? user : ""};
    if (lz_chat_format_msgs(f, msgs, n, 1, out)) return errf(err, errlen, "out of memory");
    *is_chat = 1;
    *fmt = f;
    return 0;
}
