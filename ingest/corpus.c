/* corpus.c - the corpus reader (corpus.h): opening, format detection,
 * rewinding, and the CSV records (libcsv) with file:line for every record,
 * strict UTF-8 checks and one message per bad record. CSV is fed to libcsv
 * line by line so a record's first line is known even when quoted fields
 * span several lines. JSON records (JSONL and arrays): corpus_json.c.
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
#include "base/sha256.h"

#include "ingest/corpus_impl.h"

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

/* The first byte past a UTF-8 BOM and white space (EOF when none); the file is rewound. */
static int first_byte(FILE *f)
{
    int ch = fgetc(f);
    if (ch == 0xEF) { /* UTF-8 BOM */
        fgetc(f);
        fgetc(f);
        ch = fgetc(f);
    }
    while (ch != EOF && isspace(ch)) ch = fgetc(f);
    rewind(f);
    return ch;
}

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
    snprintf(c->id_field, sizeof c->id_field, "id");
    if (fmt == LZ_CORPUS_AUTO) {
        if (!is_stdin && ends_with(path, ".csv")) fmt = LZ_CORPUS_CSV;
        else if (!is_stdin && (ends_with(path, ".jsonl") || ends_with(path, ".ndjson") ||
                               ends_with(path, ".json")))
            fmt = LZ_CORPUS_JSONL;
        else {
            int ch = first_byte(c->f);
            fmt = ch == '{' || ch == '[' ? LZ_CORPUS_JSONL : LZ_CORPUS_CSV;
        }
    }
    if (fmt == LZ_CORPUS_JSONL && first_byte(c->f) == '[') fmt = LZ_CORPUS_JSON_ARRAY;
    c->fmt = fmt;
    if (fmt == LZ_CORPUS_CSV && csv_start(c) != 0) {
        lz_corpus_close(c);
        return lz_fail(err, errlen, LZ_CORPUS_ENOMEM, "out of memory");
    }
    if (fmt == LZ_CORPUS_JSON_ARRAY) {
        int st = corpus_array_load(c, err, errlen);
        if (st) {
            lz_corpus_close(c);
            return st;
        }
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
    if (c->ctx) json_decref(c->ctx);
    free(c->buf);
    free(c->text);
    corpus_titles_clear(c);
    free(c->titles);
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
    if (c->ctx) {
        json_decref(c->ctx);
        c->ctx = NULL;
    }
    corpus_titles_clear(c); /* the same context ids again: the titles are seen anew */
    c->pos = c->arr_pos;
    c->pos_line = c->arr_line;
    c->line_start = c->arr_line_start;
    c->index = 0;
    c->arr_state = 0;
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

const char *lz_corpus_format_name(lz_corpus_format fmt)
{
    switch (fmt) {
    case LZ_CORPUS_JSONL: return "jsonl";
    case LZ_CORPUS_CSV: return "csv";
    case LZ_CORPUS_JSON_ARRAY: return "json-array";
    default: return "auto";
    }
}

int lz_corpus_set_id_field(lz_corpus *c, const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > LZ_CORPUS_MAX_FIELD) return LZ_CORPUS_EFORMAT;
    memcpy(c->id_field, name, n + 1);
    return LZ_CORPUS_OK;
}

/* Reads one line (with its newline) into c->line; returns its length or -1 at EOF. */
long corpus_read_line(lz_corpus *c)
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
        if (strcasecmp(name, c->id_field) == 0) c->col_id = i;
        if (strcasecmp(name, "text") == 0) c->col_text = i;
        else if (strcasecmp(name, "title") == 0) c->col_title = i;
        if (o < sizeof found)
            o += (size_t)snprintf(found + o, sizeof found - o, "%s'%.40s'", i ? ", " : "", name);
    }
    if (c->col_id < 0 || c->col_text < 0)
        return lz_fail(err, errlen, LZ_CORPUS_EFORMAT,
                    "%s:%ld: the CSV header must name the columns %s and text (optional title); found %s",
                    c->name, r->line, c->id_field, r->n ? found : "nothing");
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
    if (!*id) return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"%s\" is empty", c->name, r->line, c->id_field);
    if (strlen(id) > LZ_CORPUS_MAX_ID)
        return lz_fail(err, errlen, LZ_CORPUS_BAD, "%s:%ld: \"%s\" is %zu bytes, longer than %d", c->name,
                    r->line, c->id_field, strlen(id), LZ_CORPUS_MAX_ID);
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
        long n = corpus_read_line(c);
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
    rec->index = -1;
    return c->fmt == LZ_CORPUS_CSV ? csv_next(c, rec, err, errlen) : corpus_json_next(c, rec, err, errlen);
}
