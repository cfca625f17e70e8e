/* corpus.c - JSONL (jansson) and CSV (libcsv) corpus readers with file:line
 * for every record, strict UTF-8 checks and one message per bad record.
 * CSV is fed to libcsv line by line so a record's first line is known even
 * when quoted fields span several lines.
 */
#include "ingest/corpus.h"

#include <csv.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/unicode.h"
#include "base/error.h"

/* A CSV record as libcsv hands it over. */
typedef struct {
    char **f;
    size_t *len;
    int n, cap;
    long line;
    int error;          /* 1 = malformed quoting */
} csv_rec;

struct lz_corpus {
    FILE *f;
    int own_file;
    char name[4096];
    lz_corpus_format fmt;
    char *line;          /* getline buffer */
    size_t line_cap;
    long lineno;
    long ordinal;
    /* JSONL */
    json_t *obj;
    char idbuf[64];
    /* CSV */
    struct csv_parser csv;
    int csv_ready;
    int header_done, n_cols, col_id, col_text, col_title;
    csv_rec cur;         /* being parsed */
    csv_rec *queue;      /* complete records not yet returned */
    int q_n, q_head, q_cap;
    csv_rec out;         /* the record last returned (owned until the next call) */
    long start_line;     /* first line of the record being parsed, 0 = none yet */
    int eof;
};

size_t lz_corpus_check_text(const char *s, size_t n)
{
    size_t ok = lz_utf8_valid_prefix((const unsigned char *)s, n);
    const char *z = memchr(s, 0, ok);
    return z ? (size_t)(z - s) : ok;
}

static void rec_clear(csv_rec *r)
{
    for (int i = 0; i < r->n; i++) free(r->f[i]);
    r->n = 0;
    r->error = 0;
    r->line = 0;
}

static void rec_free(csv_rec *r)
{
    rec_clear(r);
    free(r->f);
    free(r->len);
    memset(r, 0, sizeof *r);
}

/* ---- open / close ---- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

static void csv_field_cb(void *s, size_t len, void *p);
static void csv_record_cb(int c, void *p);

static int csv_start(lz_corpus *c)
{
    if (csv_init(&c->csv, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) return -1;
    c->csv_ready = 1;
    return 0;
}

int lz_corpus_open(const char *path, lz_corpus_format fmt, lz_corpus **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_corpus *c = calloc(1, sizeof *c);
    if (!c) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
    int is_stdin = strcmp(path, "-") == 0;
    snprintf(c->name, sizeof c->name, "%s", is_stdin ? "<stdin>" : path);
    if (is_stdin) {
        /* Spool: the corpus is read twice (duplicate ids, then records). */
        c->f = tmpfile();
        if (!c->f) {
            free(c);
            return lz_fail(err, errlen, LZ_CORPUS_EIO, "<stdin>: cannot create a spool file: %s", strerror(errno));
        }
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
            if (fwrite(buf, 1, n, c->f) != n) {
                fclose(c->f);
                free(c);
                return lz_fail(err, errlen, LZ_CORPUS_EIO, "<stdin>: spool write failed: %s", strerror(errno));
            }
        }
        if (ferror(stdin) || fflush(c->f) != 0) {
            fclose(c->f);
            free(c);
            return lz_fail(err, errlen, LZ_CORPUS_EIO, "<stdin>: read failed: %s", strerror(errno));
        }
        rewind(c->f);
    } else {
        c->f = fopen(path, "rb");
        if (!c->f) {
            int e = errno;
            free(c);
            return lz_fail(err, errlen, LZ_CORPUS_EIO, "%s: cannot open: %s", path, strerror(e));
        }
    }
    c->own_file = 1;
    if (fmt == LZ_CORPUS_AUTO) {
        if (!is_stdin && ends_with(path, ".csv")) fmt = LZ_CORPUS_CSV;
        else if (!is_stdin && (ends_with(path, ".jsonl") || ends_with(path, ".ndjson") ||
                               ends_with(path, ".json")))
            fmt = LZ_CORPUS_JSONL;
        else {
            int ch;
            while ((ch = fgetc(c->f)) != EOF && isspace(ch)) {}
            if (ch == 0xEF) { /* UTF-8 BOM */
                fgetc(c->f);
                fgetc(c->f);
                ch = fgetc(c->f);
            }
            fmt = ch == '{' ? LZ_CORPUS_JSONL : LZ_CORPUS_CSV;
            rewind(c->f);
        }
    }
    c->fmt = fmt;
    if (fmt == LZ_CORPUS_CSV && csv_start(c) != 0) {
        lz_corpus_close(c);
        return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
    }
    *out = c;
    return LZ_CORPUS_OK;
}

void lz_corpus_close(lz_corpus *c)
{
    if (!c) return;
    if (c->own_file && c->f) fclose(c->f);
    free(c->line);
    if (c->obj) json_decref(c->obj);
    if (c->csv_ready) csv_free(&c->csv);
    rec_free(&c->cur);
    rec_free(&c->out);
    for (int i = c->q_head; i < c->q_n; i++) rec_free(&c->queue[i]);
    free(c->queue);
    free(c);
}

int lz_corpus_rewind(lz_corpus *c, char *err, size_t errlen)
{
    if (fseek(c->f, 0, SEEK_SET) != 0)
        return lz_fail(err, errlen, LZ_CORPUS_EIO, "%s: cannot rewind: %s", c->name, strerror(errno));
    clearerr(c->f);
    c->lineno = 0;
    c->ordinal = 0;
    c->eof = 0;
    if (c->obj) {
        json_decref(c->obj);
        c->obj = NULL;
    }
    if (c->fmt == LZ_CORPUS_CSV) {
        if (c->csv_ready) csv_free(&c->csv);
        c->csv_ready = 0;
        rec_clear(&c->cur);
        rec_clear(&c->out);
        for (int i = c->q_head; i < c->q_n; i++) rec_free(&c->queue[i]);
        c->q_n = c->q_head = 0;
        c->header_done = 0;
        c->start_line = 0;
        if (csv_start(c) != 0) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
    }
    return LZ_CORPUS_OK;
}

lz_corpus_format lz_corpus_get_format(const lz_corpus *c) { return c->fmt; }
const char *lz_corpus_name(const lz_corpus *c) { return c->name; }

/* Reads one line (with its newline) into c->line; returns its length or -1 at EOF. */
static long read_line(lz_corpus *c)
{
    ssize_t n = getline(&c->line, &c->line_cap, c->f);
    if (n < 0) return -1;
    c->lineno++;
    /* a UTF-8 byte order mark at the start of the file is not content */
    if (c->lineno == 1 && n >= 3 && memcmp(c->line, "\xEF\xBB\xBF", 3) == 0) {
        memmove(c->line, c->line + 3, (size_t)n - 2);
        n -= 3;
    }
    return (long)n;
}

/* ---- JSONL ---- */

static int json_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    if (c->obj) {
        json_decref(c->obj);
        c->obj = NULL;
    }
    for (;;) {
        long n = read_line(c);
        if (n < 0) {
            if (ferror(c->f)) return lz_fail(err, errlen, LZ_CORPUS_EIO, "%s: read error: %s", c->name, strerror(errno));
            return LZ_CORPUS_EOF;
        }
        char *s = c->line;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
        long i = 0;
        while (i < n && isspace((unsigned char)s[i])) i++;
        if (i == n) continue; /* blank line */
        rec->line = c->lineno;
        rec->ordinal = c->ordinal++;
        size_t bad = lz_corpus_check_text(s, (size_t)n);
        if (bad != (size_t)n)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: %s at byte %zu", c->name, c->lineno,
                        s[bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
        json_error_t je;
        c->obj = json_loadb(s, (size_t)n, JSON_REJECT_DUPLICATES, &je);
        if (!c->obj)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: invalid JSON at column %d: %s", c->name,
                        c->lineno, je.column, je.text);
        if (!json_is_object(c->obj))
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: expected a JSON object, found %s", c->name,
                        c->lineno, json_is_array(c->obj) ? "an array" : "a scalar");
        json_t *id = json_object_get(c->obj, "id");
        if (!id) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: missing \"id\"", c->name, c->lineno);
        if (json_is_integer(id)) {
            snprintf(c->idbuf, sizeof c->idbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(id));
            rec->id = c->idbuf;
        } else if (json_is_string(id)) {
            rec->id = json_string_value(id);
            size_t len = json_string_length(id);
            if (len == 0) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"id\" is empty", c->name, c->lineno);
            if (len > LZ_CORPUS_MAX_ID) {
                rec->id = NULL;
                return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"id\" is %zu bytes, longer than %d",
                            c->name, c->lineno, len, LZ_CORPUS_MAX_ID);
            }
        } else {
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"id\" must be a string or an integer",
                        c->name, c->lineno);
        }
        json_t *text = json_object_get(c->obj, "text");
        if (!text)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: id '%s': missing \"text\"", c->name, c->lineno, rec->id);
        if (!json_is_string(text))
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: id '%s': \"text\" must be a string", c->name,
                        c->lineno, rec->id);
        rec->text = json_string_value(text);
        rec->text_len = json_string_length(text);
        size_t j = 0;
        while (j < rec->text_len && isspace((unsigned char)rec->text[j])) j++;
        if (j == rec->text_len)
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: id '%s': \"text\" is empty", c->name, c->lineno,
                        rec->id);
        json_t *title = json_object_get(c->obj, "title");
        rec->title = NULL;
        if (title && !json_is_null(title)) {
            if (!json_is_string(title))
                return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: id '%s': \"title\" must be a string",
                            c->name, c->lineno, rec->id);
            if (json_string_length(title) > 0) rec->title = json_string_value(title);
        }
        /* jansson validates UTF-8 and refuses \u0000 without JSON_ALLOW_NUL */
        return LZ_CORPUS_OK;
    }
}

/* ---- CSV ---- */

static void csv_field_cb(void *s, size_t len, void *p)
{
    lz_corpus *c = p;
    csv_rec *r = &c->cur;
    if (r->error) return;
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 8;
        char **f = realloc(r->f, sizeof *f * (size_t)cap);
        if (f) r->f = f;
        size_t *l = realloc(r->len, sizeof *l * (size_t)cap);
        if (l) r->len = l;
        if (!f || !l) {
            r->error = 2;
            return;
        }
        r->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        r->error = 2;
        return;
    }
    if (len) memcpy(copy, s, len);
    copy[len] = 0;
    r->f[r->n] = copy;
    r->len[r->n++] = len;
}

static void push_record(lz_corpus *c)
{
    if (c->q_head == c->q_n) c->q_head = c->q_n = 0;
    if (c->q_n == c->q_cap) {
        int cap = c->q_cap ? c->q_cap * 2 : 4;
        csv_rec *q = realloc(c->queue, sizeof *q * (size_t)cap);
        if (!q) {
            c->cur.error = 2;
            return;
        }
        c->queue = q;
        c->q_cap = cap;
    }
    c->cur.line = c->start_line ? c->start_line : c->lineno;
    c->queue[c->q_n++] = c->cur;
    memset(&c->cur, 0, sizeof c->cur);
    c->start_line = 0;
}

static void csv_record_cb(int ch, void *p)
{
    (void)ch;
    push_record((lz_corpus *)p);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* Reads the header record's column indices. */
static int csv_header(lz_corpus *c, csv_rec *r, char *err, size_t errlen)
{
    c->col_id = c->col_text = c->col_title = -1;
    c->n_cols = r->n;
    char found[512] = "";
    size_t o = 0;
    for (int i = 0; i < r->n; i++) {
        char *name = trim(r->f[i]);
        if (strcasecmp(name, "id") == 0) c->col_id = i;
        else if (strcasecmp(name, "text") == 0) c->col_text = i;
        else if (strcasecmp(name, "title") == 0) c->col_title = i;
        if (o < sizeof found)
            o += (size_t)snprintf(found + o, sizeof found - o, "%s'%.40s'", i ? ", " : "", name);
    }
    if (c->col_id < 0 || c->col_text < 0)
        return lz_fail(err, errlen, LZ_CORPUS_EFORMAT,
                    "%s:%ld: the CSV header must name the columns id and text (optional title); found %s",
                    c->name, r->line, r->n ? found : "nothing");
    c->header_done = 1;
    return LZ_CORPUS_OK;
}

/* Validates and returns one data record. */
static int csv_emit(lz_corpus *c, csv_rec *r, lz_corpus_record *rec, char *err, size_t errlen)
{
    rec->line = r->line;
    rec->ordinal = c->ordinal++;
    rec->id = NULL;
    if (r->n != c->n_cols)
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: expected %d fields as in the header, found %d",
                    c->name, r->line, c->n_cols, r->n);
    for (int i = 0; i < r->n; i++) {
        size_t bad = lz_corpus_check_text(r->f[i], r->len[i]);
        if (bad != r->len[i])
            return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: field %d: %s at byte %zu", c->name, r->line,
                        i + 1, r->f[i][bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
    }
    char *id = trim(r->f[c->col_id]);
    if (!*id) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"id\" is empty", c->name, r->line);
    if (strlen(id) > LZ_CORPUS_MAX_ID)
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"id\" is %zu bytes, longer than %d", c->name,
                    r->line, strlen(id), LZ_CORPUS_MAX_ID);
    rec->id = id;
    rec->text = r->f[c->col_text];
    rec->text_len = r->len[c->col_text];
    size_t j = 0;
    while (j < rec->text_len && isspace((unsigned char)rec->text[j])) j++;
    if (j == rec->text_len)
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: id '%s': \"text\" is empty", c->name, r->line, id);
    rec->title = NULL;
    if (c->col_title >= 0 && r->len[c->col_title] > 0) rec->title = r->f[c->col_title];
    return LZ_CORPUS_OK;
}

static int csv_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    for (;;) {
        rec_free(&c->out);
        if (c->q_head < c->q_n) {
            c->out = c->queue[c->q_head++];
            csv_rec *r = &c->out;
            if (r->error == 2) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
            if (r->error == 1) {
                rec->line = r->line;
                rec->ordinal = c->ordinal++;
                rec->id = NULL;
                return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: malformed CSV quoting (a quote inside an "
                            "unquoted field, text after a closing quote, or an unterminated quoted field)",
                            c->name, r->line);
            }
            if (!c->header_done) {
                int st = csv_header(c, r, err, errlen);
                if (st) return st;
                continue;
            }
            return csv_emit(c, r, rec, err, errlen);
        }
        if (c->eof) return LZ_CORPUS_EOF;
        long n = read_line(c);
        if (n < 0) {
            if (ferror(c->f)) return lz_fail(err, errlen, LZ_CORPUS_EIO, "%s: read error: %s", c->name, strerror(errno));
            c->eof = 1;
            if (csv_fini(&c->csv, csv_field_cb, csv_record_cb, c) != 0) {
                /* unterminated quoted field at the end of the file */
                c->cur.error = 1;
                push_record(c);
            }
            if (!c->header_done && c->q_n == c->q_head)
                return lz_fail(err, errlen, LZ_CORPUS_EFORMAT, "%s: empty CSV (no header row)", c->name);
            continue;
        }
        int blank = 1;
        for (long i = 0; i < n && blank; i++) blank = c->line[i] == '\n' || c->line[i] == '\r';
        if (!c->start_line && !blank) c->start_line = c->lineno;
        size_t used = csv_parse(&c->csv, c->line, (size_t)n, csv_field_cb, csv_record_cb, c);
        if (used != (size_t)n) {
            if (csv_error(&c->csv) != CSV_EPARSE)
                return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "%s:%ld: CSV parser: %s", c->name, c->lineno,
                            csv_strerror(csv_error(&c->csv)));
            /* Report the broken record, restart the parser on the next line. */
            rec_clear(&c->cur);
            c->cur.error = 1;
            push_record(c);
            csv_free(&c->csv);
            c->csv_ready = 0;
            if (csv_start(c) != 0) return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
        }
    }
}

int lz_corpus_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen)
{
    memset(rec, 0, sizeof *rec);
    return c->fmt == LZ_CORPUS_CSV ? csv_next(c, rec, err, errlen) : json_next(c, rec, err, errlen);
}
