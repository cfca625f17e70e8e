/* corpus_json.c - the corpus reader's JSON records (corpus_impl.h): JSONL,
 * one record a line; a JSON array, read whole, split into its records by a
 * bracket scan (which also gives the line each starts on), each record
 * parsed alone so that one bad record is skipped as in JSONL; and HotpotQA
 * "context" records expanded into one passage a [title, sentences] pair. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/sha256.h"
#include "base/unicode.h"
#include "ingest/corpus_impl.h"

/* ---- JSON records (JSONL lines and array elements alike) ---- */

/* A context title seen in this pass and the hashes of its texts (variant k: id "title (k+1)"). */
struct title_slot {
    char *title;
    uint8_t (*hash)[32];
    int n;
};

void corpus_titles_clear(lz_corpus *c)
{
    for (size_t i = 0; i < c->titles_cap; i++) {
        free(c->titles[i].title);
        free(c->titles[i].hash);
    }
    if (c->titles) memset(c->titles, 0, sizeof *c->titles * c->titles_cap);
    c->titles_n = 0;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* The variant of title whose text hashes to h: its index (0 = the first text seen), *is_new = 1
 * when this text was not seen before (it is added). -1: out of memory. */
static int title_variant(lz_corpus *c, const char *title, const uint8_t h[32], int *is_new)
{
    if ((c->titles_n + 1) * 2 > c->titles_cap) {
        size_t cap = c->titles_cap ? c->titles_cap * 2 : 256;
        struct title_slot *v = calloc(cap, sizeof *v);
        if (!v) return -1;
        for (size_t i = 0; i < c->titles_cap; i++) {
            if (!c->titles[i].title) continue;
            size_t j = hash_str(c->titles[i].title) & (cap - 1);
            while (v[j].title) j = (j + 1) & (cap - 1);
            v[j] = c->titles[i];
        }
        free(c->titles);
        c->titles = v;
        c->titles_cap = cap;
    }
    size_t j = hash_str(title) & (c->titles_cap - 1);
    while (c->titles[j].title && strcmp(c->titles[j].title, title) != 0) j = (j + 1) & (c->titles_cap - 1);
    struct title_slot *t = &c->titles[j];
    if (!t->title) {
        if (!(t->title = strdup(title))) return -1;
        c->titles_n++;
    }
    for (int k = 0; k < t->n; k++)
        if (memcmp(t->hash[k], h, 32) == 0) {
            *is_new = 0;
            return k;
        }
    uint8_t (*v)[32] = realloc(t->hash, sizeof *v * (size_t)(t->n + 1));
    if (!v) return -1;
    t->hash = v;
    memcpy(t->hash[t->n], h, 32);
    *is_new = 1;
    return t->n++;
}

/* Appends n bytes of s to c->text at *len (NUL-terminated). 0 or -1 (out of memory). */
static int text_append(lz_corpus *c, size_t *len, const char *s, size_t n)
{
    if (*len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap : 4096;
        while (cap < *len + n + 1) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return -1;
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + *len, s, n);
    *len += n;
    c->text[*len] = 0;
    return 0;
}

static int is_blank(const char *s, size_t n)
{
    size_t j = 0;
    while (j < n && isspace((unsigned char)s[j])) j++;
    return j == n;
}

/* The next pair of the context record c->ctx as a record. EOF when its pairs are done. */
static int context_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    json_t *pairs = json_object_get(c->ctx, "context");
    while (c->ctx_i < json_array_size(pairs)) {
        size_t i = c->ctx_i++;
        json_t *pair = json_array_get(pairs, i), *title = json_array_get(pair, 0), *sents = json_array_get(pair, 1);
        rec->line = c->rec_line;
        rec->index = c->rec_index;
        rec->ordinal = c->ordinal++;
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(title) || !json_is_array(sents))
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"context\" [%zu]: expected [title, [sentences...]]",
                           c->where, i);
        const char *t = json_string_value(title);
        size_t tlen = json_string_length(title);
        if (tlen == 0 || is_blank(t, tlen))
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"context\" [%zu]: the title is empty", c->where, i);
        if (tlen > LZ_CORPUS_MAX_ID)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"context\" [%zu]: the title (the id) is %zu bytes, "
                           "longer than %d", c->where, i, tlen, LZ_CORPUS_MAX_ID);
        /* the sentences joined by a space, unless one is there already (HotpotQA's start with one) */
        size_t len = 0;
        if (text_append(c, &len, "", 0)) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
        for (size_t k = 0; k < json_array_size(sents); k++) {
            json_t *sv = json_array_get(sents, k);
            if (!json_is_string(sv))
                return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: id '%s': \"context\" [%zu]: sentence %zu is not a "
                               "string", c->where, t, i, k);
            const char *x = json_string_value(sv);
            size_t xn = json_string_length(sv);
            if (!xn) continue;
            int space = len && !isspace((unsigned char)c->text[len - 1]) && !isspace((unsigned char)x[0]);
            if ((space && text_append(c, &len, " ", 1)) || text_append(c, &len, x, xn))
                return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
        }
        rec->id = t;
        if (is_blank(c->text, len))
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: id '%s': \"context\" [%zu]: the sentences are empty",
                           c->where, t, i);
        uint8_t h[32];
        lz_sha256(c->text, len, h);
        int is_new, k = title_variant(c, t, h, &is_new);
        if (k < 0) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
        if (!is_new) continue; /* the same passage in another question's context: once */
        if (k > 0) {
            snprintf(c->idbuf, sizeof c->idbuf, "%s (%d)", t, k + 1);
            snprintf(c->warn, sizeof c->warn, "%s: warning: context title '%.600s' was seen before with other text; "
                     "this one is stored as '%.600s'", c->where, t, c->idbuf);
            rec->warning = c->warn;
            rec->id = c->idbuf;
            if (strlen(c->idbuf) > LZ_CORPUS_MAX_ID) {
                rec->id = NULL;
                return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"context\" [%zu]: the id '%.40s... (%d)' is longer "
                               "than %d bytes", c->where, i, t, k + 1, LZ_CORPUS_MAX_ID);
            }
        }
        rec->title = t;
        rec->text = c->text;
        rec->text_len = len;
        return LZ_CORPUS_OK;
    }
    json_decref(c->ctx);
    c->ctx = NULL;
    return LZ_CORPUS_EOF;
}

enum { JSON_CONTEXT = 100 }; /* json_record: the record is a context record, now in c->ctx */

/* Validates the parsed record c->obj into rec (c->where names it in messages). */
static int json_record(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    const char *w = c->where, *f = c->id_field;
    if (!json_is_object(c->obj))
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: expected a JSON object, found %s", w,
                       json_is_array(c->obj) ? "an array" : "a scalar");
    json_t *text = json_object_get(c->obj, "text"), *context = json_object_get(c->obj, "context");
    if (!text && json_is_array(context)) { /* HotpotQA: [[title, [sentences...]], ...] */
        c->ctx = json_incref(c->obj);
        c->ctx_i = 0;
        return JSON_CONTEXT;
    }
    json_t *id = json_object_get(c->obj, f);
    if (!id) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: missing \"%s\"", w, f);
    if (json_is_integer(id)) {
        snprintf(c->idbuf, sizeof c->idbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(id));
        rec->id = c->idbuf;
    } else if (json_is_string(id)) {
        rec->id = json_string_value(id);
        size_t len = json_string_length(id);
        if (len == 0) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"%s\" is empty", w, f);
        if (len > LZ_CORPUS_MAX_ID) {
            rec->id = NULL;
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"%s\" is %zu bytes, longer than %d", w, f, len,
                           LZ_CORPUS_MAX_ID);
        }
    } else {
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: \"%s\" must be a string or an integer", w, f);
    }
    if (!text) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: id '%s': missing \"text\"", w, rec->id);
    if (!json_is_string(text))
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: id '%s': \"text\" must be a string", w, rec->id);
    rec->text = json_string_value(text);
    rec->text_len = json_string_length(text);
    if (is_blank(rec->text, rec->text_len))
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: id '%s': \"text\" is empty", w, rec->id);
    json_t *title = json_object_get(c->obj, "title");
    rec->title = NULL;
    if (title && !json_is_null(title)) {
        if (!json_is_string(title))
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: id '%s': \"title\" must be a string", w, rec->id);
        if (json_string_length(title) > 0) rec->title = json_string_value(title);
    }
    /* jansson validates UTF-8 and refuses \u0000 without JSON_ALLOW_NUL */
    return LZ_CORPUS_OK;
}

/* The next JSONL line parsed into c->obj. OK, BAD (a line that is no JSON), EOF, EIO. */
static int jsonl_line(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    for (;;) {
        long n = corpus_read_line(c);
        if (n < 0) {
            if (ferror(c->f)) return lz_fail(err, errlen, LZ_CORPUS_EIO, "%s: read error: %s", c->name, strerror(errno));
            return LZ_CORPUS_EOF;
        }
        char *s = c->line;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
        if (is_blank(s, (size_t)n)) continue;
        rec->line = c->rec_line = c->lineno;
        rec->ordinal = c->ordinal++;
        c->rec_index = -1;
        snprintf(c->where, sizeof c->where, "%s:%ld", c->name, c->lineno);
        size_t bad = lz_corpus_check_text(s, (size_t)n);
        if (bad != (size_t)n)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: %s at byte %zu", c->where,
                           s[bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
        json_error_t je;
        c->obj = json_loadb(s, (size_t)n, JSON_REJECT_DUPLICATES, &je);
        if (!c->obj)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: invalid JSON at column %d: %s", c->where, je.column,
                           je.text);
        return LZ_CORPUS_OK;
    }
}

/* Reads the whole input into c->buf and checks it opens with '['. */
int corpus_array_load(lz_corpus *c, char *err, size_t errlen)
{
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    if (!b) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
    while ((k = fread(b + n, 1, cap - n, c->f)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = cap < ((size_t)1 << 40) ? realloc(b, cap * 2) : NULL;
            if (!nb) {
                free(b);
                return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "%s: out of memory reading the JSON array (%zu bytes "
                               "so far)", c->name, n);
            }
            b = nb;
            cap *= 2;
        }
    }
    if (ferror(c->f)) {
        free(b);
        return lz_fail(err, errlen, LZ_CORPUS_EIO, "%s: read error: %s", c->name, strerror(errno));
    }
    c->buf = b;
    c->buf_len = n;
    size_t p = n >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a UTF-8 byte order mark */
    long line = 1;
    size_t ls = 0;
    for (; p < n && isspace((unsigned char)b[p]); p++)
        if (b[p] == '\n') line++, ls = p + 1;
    if (p == n || b[p] != '[')
        return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s:%ld: a JSON array must start with '['", c->name, line);
    c->pos = c->arr_pos = p + 1;
    c->pos_line = c->arr_line = line;
    c->line_start = c->arr_line_start = ls;
    return LZ_CORPUS_OK;
}

/* Skips white space in the array, counting lines. */
static void array_skip_space(lz_corpus *c)
{
    for (; c->pos < c->buf_len && isspace((unsigned char)c->buf[c->pos]); c->pos++)
        if (c->buf[c->pos] == '\n') c->pos_line++, c->line_start = c->pos + 1;
}

/* Moves past one JSON value starting at c->pos: an object or array to its matching bracket
 * (strings skipped), a string to its closing quote, a scalar to the next ',' ']' or space.
 * 0, or -1 when the input ends first. */
static int array_skip_value(lz_corpus *c)
{
    const char *b = c->buf;
    const size_t n = c->buf_len;
    int depth = 0, in_str = 0;
    const char first = b[c->pos];
    const int scalar = first != '{' && first != '[' && first != '"';
    for (; c->pos < n; c->pos++) {
        const char ch = b[c->pos];
        if (ch == '\n') c->pos_line++, c->line_start = c->pos + 1;
        if (in_str) {
            if (ch == '\\' && c->pos + 1 < n && b[c->pos + 1] != '\n') c->pos++;
            else if (ch == '"') {
                in_str = 0;
                if (first == '"') return c->pos++, 0;
            }
            continue;
        }
        if (scalar) {
            if (ch == ',' || ch == ']' || isspace((unsigned char)ch)) return 0;
            continue;
        }
        if (ch == '"') in_str = 1;
        else if (ch == '{' || ch == '[') depth++;
        else if ((ch == '}' || ch == ']') && --depth == 0) return c->pos++, 0;
    }
    return scalar ? 0 : -1;
}

/* The next element of the JSON array parsed into c->obj. OK, BAD (an element that is no JSON
 * or no valid UTF-8), EOF (after the closing ']'), EFORMAT (the array's structure is broken). */
static int array_element(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    if (c->arr_state == 2) return LZ_CORPUS_EOF;
    array_skip_space(c);
    if (c->pos < c->buf_len && c->buf[c->pos] == ']' && (c->arr_state == 1 || c->index == 0)) {
        c->pos++;
        c->arr_state = 2;
        array_skip_space(c);
        if (c->pos < c->buf_len)
            return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s:%ld: text after the closing ']' of the JSON array",
                           c->name, c->pos_line);
        return LZ_CORPUS_EOF;
    }
    if (c->arr_state == 1) {
        if (c->pos >= c->buf_len)
            return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s:%ld: the JSON array is not closed (']' missing after "
                           "record [%ld])", c->name, c->pos_line, c->index - 1);
        if (c->buf[c->pos] != ',')
            return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s:%ld: ',' or ']' expected after record [%ld] of the "
                           "JSON array, found '%c'", c->name, c->pos_line, c->index - 1, c->buf[c->pos]);
        c->pos++;
        array_skip_space(c);
    }
    if (c->pos >= c->buf_len)
        return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s:%ld: the JSON array is not closed (']' missing)", c->name,
                       c->pos_line);
    if (c->buf[c->pos] == ']' || c->buf[c->pos] == ',')
        return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s:%ld: a record expected in the JSON array, found '%c'",
                       c->name, c->pos_line, c->buf[c->pos]);
    const size_t start = c->pos;
    const long line = c->pos_line;
    const int col = (int)(start - c->line_start) + 1;
    const long index = c->index++;
    rec->line = c->rec_line = line;
    rec->index = c->rec_index = index;
    rec->ordinal = c->ordinal++;
    snprintf(c->where, sizeof c->where, "%s:%ld: record [%ld]", c->name, line, index);
    if (array_skip_value(c))
        return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s: not closed before the end of the input (a '}' or ']' "
                       "missing, or a string not terminated)", c->where);
    c->arr_state = 1;
    const char *s = c->buf + start;
    const size_t n = c->pos - start;
    size_t bad = lz_corpus_check_text(s, n);
    if (bad != n) {
        long bl = line;
        size_t bs = 0;
        for (size_t i = 0; i < bad; i++)
            if (s[i] == '\n') bl++, bs = i + 1;
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: %s at line %ld, column %zu", c->where,
                       s[bad] ? "invalid UTF-8" : "NUL byte", bl, bl == line ? bad + (size_t)col : bad - bs + 1);
    }
    json_error_t je;
    c->obj = json_loadb(s, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!c->obj)
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s: invalid JSON at line %ld, column %d: %s", c->where,
                       line + je.line - 1, je.line == 1 ? je.column + col - 1 : je.column, je.text);
    return LZ_CORPUS_OK;
}

int corpus_json_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    for (;;) {
        if (c->ctx) {
            int st = context_next(c, rec, err, errlen);
            if (st != LZ_CORPUS_EOF) return st;
            /* every pair left was seen before: what they set in rec pointed into the record just
             * freed (a bad line after it would return that id: fuzz/fuzz_corpus.c found it) */
            rec->id = rec->title = rec->warning = NULL;
            rec->text = NULL;
            rec->text_len = 0;
            continue;
        }
        if (c->obj) {
            json_decref(c->obj);
            c->obj = NULL;
        }
        int st = c->fmt == LZ_CORPUS_JSON_ARRAY ? array_element(c, rec, err, errlen) : jsonl_line(c, rec, err, errlen);
        if (st) return st;
        st = json_record(c, rec, err, errlen);
        if (st != JSON_CONTEXT) return st;
        c->ordinal--; /* the record's pairs are the records (each its own ordinal) */
    }
}

