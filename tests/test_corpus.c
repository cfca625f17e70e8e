/* test_corpus.c - JSONL and CSV corpus readers: valid records with their
 * lines, every bad-input case (one message each, naming file:line and the id
 * when known), quoting, embedded newlines, CRLF, BOM, stdin spooling, rewind,
 * and a bad line after a context record whose pairs were all seen (no stale id). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingest/corpus.h"
#include "ingest/split.h"
#include "tests/test.h"

static char dir[256];

static const char *write_file(const char *name, const char *data, size_t n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    return path;
}

typedef struct {
    int n_ok, n_bad;
    char ids[16][64];
    long lines[16];
    char texts[16][128];
    char titles[16][64];
    char errs[16][512];
    long bad_lines[16];
    int status; /* last non-OK/BAD status */
} result;

static void read_all(const char *path, lz_corpus_format fmt, result *r)
{
    memset(r, 0, sizeof *r);
    lz_corpus *c;
    char err[512];
    int rc = lz_corpus_open(path, fmt, &c, err, sizeof err);
    if (rc) {
        r->status = rc;
        snprintf(r->errs[0], sizeof r->errs[0], "%s", err);
        return;
    }
    lz_corpus_record rec;
    for (;;) {
        rc = lz_corpus_next(c, &rec, err, sizeof err);
        if (rc == LZ_CORPUS_OK) {
            if (r->n_ok < 16) {
                snprintf(r->ids[r->n_ok], 64, "%s", rec.id);
                snprintf(r->texts[r->n_ok], 128, "%s", rec.text);
                snprintf(r->titles[r->n_ok], 64, "%s", rec.title ? rec.title : "(null)");
                r->lines[r->n_ok] = rec.line;
            }
            r->n_ok++;
        } else if (rc == LZ_CORPUS_BAD) {
            if (r->n_bad < 16) {
                snprintf(r->errs[r->n_bad], 512, "%s", err);
                r->bad_lines[r->n_bad] = rec.line;
            }
            r->n_bad++;
        } else {
            if (rc != LZ_CORPUS_EOF) {
                r->status = rc;
                snprintf(r->errs[r->n_bad < 16 ? r->n_bad : 15], 512, "%s", err);
            }
            break;
        }
    }
    lz_corpus_close(c);
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static void test_jsonl(void)
{
    const char data[] =
        "{\"id\": \"a\", \"text\": \"Alpha text.\", \"title\": \"A\"}\n"   /* 1 ok */
        "\n"                                                               /* 2 blank */
        "{\"id\": 7, \"text\": \"Seven\"}\r\n"                             /* 3 ok, int id, CRLF */
        "{\"id\": \"b\", \"text\": \"caf\xc3\xa9 \xe2\x82\xac\", \"title\": null}\n" /* 4 ok UTF-8 */
        "{\"id\": \"c\", \"text\": \"bad \xff byte\"}\n"                   /* 5 invalid UTF-8 */
        "{\"id\": \"d\", \"text\": \"x\\u0000y\"}\n"                        /* 6 NUL escape */
        "{\"id\": \"e\" \"text\": 1}\n"                                    /* 7 invalid JSON */
        "[1, 2]\n"                                                         /* 8 not an object */
        "{\"text\": \"no id\"}\n"                                          /* 9 missing id */
        "{\"id\": 1.5, \"text\": \"x\"}\n"                                 /* 10 float id */
        "{\"id\": \"f\"}\n"                                                /* 11 missing text */
        "{\"id\": \"g\", \"text\": \"   \"}\n"                             /* 12 empty text */
        "{\"id\": \"h\", \"text\": 3}\n"                                   /* 13 text not string */
        "{\"id\": \"i\", \"text\": \"ok\", \"title\": 5}\n"                /* 14 title not string */
        "{\"id\": \"\", \"text\": \"x\"}\n"                                /* 15 empty id */
        "{\"id\": \"j\", \"text\": \"x\", \"text\": \"y\"}\n"              /* 16 duplicate key */
        "{\"id\": \"k\", \"text\": \"last\"}";                             /* 17 ok, no newline */
    const char *p = write_file("c.jsonl", data, sizeof data - 1);
    result r;
    read_all(p, LZ_CORPUS_AUTO, &r);
    CHECK(r.status == 0, "status %d: %s", r.status, r.errs[0]);
    CHECK(r.n_ok == 4, "ok %d", r.n_ok);
    CHECK(r.n_bad == 12, "bad %d", r.n_bad);
    CHECK(strcmp(r.ids[0], "a") == 0 && r.lines[0] == 1 && strcmp(r.titles[0], "A") == 0, "rec a");
    CHECK(strcmp(r.ids[1], "7") == 0 && r.lines[1] == 3 && strcmp(r.texts[1], "Seven") == 0, "int id");
    CHECK(strcmp(r.ids[2], "b") == 0 && strcmp(r.texts[2], "caf\xc3\xa9 \xe2\x82\xac") == 0 &&
              strcmp(r.titles[2], "(null)") == 0, "utf8 rec");
    CHECK(strcmp(r.ids[3], "k") == 0 && r.lines[3] == 17, "last line without newline");
    static const char *want[12] = {
        ":5: invalid UTF-8", ":6: invalid JSON", ":7: invalid JSON", ":8: expected a JSON object",
        ":9: missing \"id\"", ":10: \"id\" must be", ":11: id 'f': missing \"text\"",
        ":12: id 'g': \"text\" is empty", ":13: id 'h': \"text\" must be a string",
        ":14: id 'i': \"title\" must be", ":15: \"id\" is empty", ":16: invalid JSON"
    };
    for (int i = 0; i < 12 && i < r.n_bad; i++) {
        CHECK(has(r.errs[i], want[i]), "bad %d: got '%s', want '%s'", i, r.errs[i], want[i]);
        CHECK(has(r.errs[i], "c.jsonl"), "file name in '%s'", r.errs[i]);
        CHECK(r.bad_lines[i] == 5 + i, "bad line %ld", r.bad_lines[i]);
    }
}

static void test_csv(void)
{
    const char data[] =
        "\xEF\xBB\xBFid,title,text\r\n"                          /* 1 header with BOM, CRLF */
        "1,One,\"Plain, with comma\"\r\n"                         /* 2 */
        "2,,\"Multi\r\nline \"\"quoted\"\" text\"\r\n"            /* 3-4 embedded CRLF */
        "\r\n"                                                    /* 5 blank */
        "3,Three\r\n"                                             /* 6 too few fields */
        "4,Four,caf\xc3\xa9\r\n"                                  /* 7 ok */
        ",Five,no id\r\n"                                         /* 8 empty id */
        "6,Six,   \r\n"                                           /* 9 empty text */
        "7,Seven,bad \xc3\x28 utf8\r\n"                           /* 10 invalid UTF-8 */
        "8,Eight,\"a\"b\r\n"                                      /* 11 text after closing quote */
        "9,Nine,\"fine\nacross\n\nthree\"\n"                      /* 12-15 ok */
        "10,Ten,\"never closed\n";                                /* 16- unterminated */
    const char *p = write_file("c.csv", data, sizeof data - 1);
    result r;
    read_all(p, LZ_CORPUS_AUTO, &r);
    CHECK(r.status == 0, "status %d: %s", r.status, r.errs[0]);
    CHECK(r.n_ok == 4, "ok %d", r.n_ok);
    CHECK(strcmp(r.ids[0], "1") == 0 && strcmp(r.texts[0], "Plain, with comma") == 0 && r.lines[0] == 2,
          "rec 1: '%s' line %ld", r.texts[0], r.lines[0]);
    CHECK(strcmp(r.ids[1], "2") == 0 && strcmp(r.texts[1], "Multi\r\nline \"quoted\" text") == 0 &&
              strcmp(r.titles[1], "(null)") == 0 && r.lines[1] == 3, "rec 2: '%s'", r.texts[1]);
    CHECK(strcmp(r.ids[2], "4") == 0 && r.lines[2] == 7, "rec 4 at line %ld", r.lines[2]);
    CHECK(strcmp(r.ids[3], "9") == 0 && strcmp(r.texts[3], "fine\nacross\n\nthree") == 0 &&
              r.lines[3] == 12, "rec 9 line %ld", r.lines[3]);
    CHECK(r.n_bad == 6, "bad %d", r.n_bad);
    static const char *want[6] = { ":6: expected 3 fields", ":8: \"id\" is empty",
                                   ":9: id '6': \"text\" is empty", ":10: field 3: invalid UTF-8",
                                   ":11: malformed CSV", ":16: malformed CSV" };
    for (int i = 0; i < 6 && i < r.n_bad; i++)
        CHECK(has(r.errs[i], want[i]), "bad %d: got '%s', want '%s'", i, r.errs[i], want[i]);

    const char nohdr[] = "name,body\nx,y\n";
    p = write_file("nohdr.csv", nohdr, sizeof nohdr - 1);
    read_all(p, LZ_CORPUS_AUTO, &r);
    CHECK(r.status == LZ_CORPUS_EFORMAT && has(r.errs[0], "must name the columns id and text") &&
              has(r.errs[0], "'name', 'body'"), "header error: %s", r.errs[0]);
    p = write_file("empty.csv", "", 0);
    read_all(p, LZ_CORPUS_AUTO, &r);
    CHECK(r.status == LZ_CORPUS_EFORMAT, "empty csv status %d", r.status);
    read_all("/nonexistent/x.csv", LZ_CORPUS_AUTO, &r);
    CHECK(r.status == LZ_CORPUS_EIO && has(r.errs[0], "/nonexistent/x.csv"), "missing file: %s", r.errs[0]);
}

static void test_stdin_and_rewind(void)
{
    const char data[] = "  {\"id\": \"s1\", \"text\": \"from stdin\"}\n{\"id\": \"s2\", \"text\": \"two\"}\n";
    const char *p = write_file("in.txt", data, sizeof data - 1);
    FILE *saved = stdin;
    stdin = fopen(p, "rb");
    lz_corpus *c;
    char err[256];
    int rc = lz_corpus_open("-", LZ_CORPUS_AUTO, &c, err, sizeof err);
    fclose(stdin);
    stdin = saved;
    CHECK(rc == 0, "open stdin: %s", err);
    if (rc) return;
    CHECK(lz_corpus_get_format(c) == LZ_CORPUS_JSONL, "sniffed JSONL");
    CHECK(strcmp(lz_corpus_name(c), "<stdin>") == 0, "name");
    lz_corpus_record rec;
    for (int pass = 0; pass < 2; pass++) {
        CHECK(lz_corpus_next(c, &rec, err, sizeof err) == 0 && strcmp(rec.id, "s1") == 0 && rec.line == 1,
              "pass %d first", pass);
        CHECK(lz_corpus_next(c, &rec, err, sizeof err) == 0 && strcmp(rec.id, "s2") == 0 && rec.ordinal == 1,
              "pass %d second", pass);
        CHECK(lz_corpus_next(c, &rec, err, sizeof err) == LZ_CORPUS_EOF, "pass %d eof", pass);
        CHECK(lz_corpus_rewind(c, err, sizeof err) == 0, "rewind");
    }
    lz_corpus_close(c);

    /* CSV sniffed from content, read twice */
    const char csv[] = "id,text\nq,\"multi\nline\"\nr,plain\n";
    p = write_file("noext", csv, sizeof csv - 1);
    rc = lz_corpus_open(p, LZ_CORPUS_AUTO, &c, err, sizeof err);
    CHECK(rc == 0 && lz_corpus_get_format(c) == LZ_CORPUS_CSV, "sniffed CSV");
    if (rc) return;
    for (int pass = 0; pass < 2; pass++) {
        CHECK(lz_corpus_next(c, &rec, err, sizeof err) == 0 && strcmp(rec.text, "multi\nline") == 0, "csv q");
        CHECK(lz_corpus_next(c, &rec, err, sizeof err) == 0 && strcmp(rec.id, "r") == 0 && rec.line == 4,
              "csv r line %ld", rec.line);
        CHECK(lz_corpus_next(c, &rec, err, sizeof err) == LZ_CORPUS_EOF, "csv eof");
        CHECK(lz_corpus_rewind(c, err, sizeof err) == 0, "rewind");
    }
    lz_corpus_close(c);
    lz_corpus_close(NULL);
}

static void test_check_text(void)
{
    CHECK(lz_corpus_check_text("abc", 3) == 3, "ascii");
    CHECK(lz_corpus_check_text("a\0c", 3) == 1, "nul");
    CHECK(lz_corpus_check_text("\xed\xa0\x80", 3) == 0, "surrogate");
    CHECK(lz_corpus_check_text("\xc0\xaf", 2) == 0, "overlong");
    CHECK(lz_corpus_check_text("ok\xf4\x90\x80\x80", 6) == 2, "> U+10FFFF");
    CHECK(lz_corpus_check_text("\xf0\x9f\x98\x80", 4) == 4, "emoji");
}

/* Fake tokenizer: 2 tokens of formatting + one per 4 bytes (rounded up). */
static int fake_count(void *ctx, const char *s, size_t n)
{
    (*(int *)ctx)++;
    return 2 + (int)((n + 3) / 4);
}

static void test_split(void)
{
    int calls = 0;
    lz_split_span *sp;
    int n;
    const char *small = "  Short text.  ";
    CHECK(lz_split_passages(small, strlen(small), 100, fake_count, &calls, &sp, &n) == 0 && n == 1 &&
              sp[0].off == 2 && sp[0].len == 11, "within budget: one trimmed span");
    free(sp);
    char text[4096];
    size_t o = 0;
    for (int i = 0; i < 40; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "Sentence %d is here!%s", i, i % 7 == 6 ? "\n" : " ");
    o += (size_t)snprintf(text + o, sizeof text - o, "Averyveryverylongwordwithoutanyspaceatallthatgoesonandon%s",
                          "andonandonandonandonandonandonandonandonandonandonandonandon.");
    CHECK(lz_split_passages(text, o, 30, fake_count, &calls, &sp, &n) == 0, "split");
    int ok = 1, boundary = 1;
    size_t covered = 0, last_end = 0;
    for (int i = 0; i < n; i++) {
        ok &= fake_count(&calls, text + sp[i].off, sp[i].len) <= 30 && sp[i].len > 0 && sp[i].off >= last_end;
        last_end = sp[i].off + sp[i].len;
        for (size_t j = 0; j < sp[i].len; j++) covered += text[sp[i].off + j] != ' ' && text[sp[i].off + j] != '\n';
        /* sentence passages end at a sentence end, except the long word's chunks */
        char e = text[sp[i].off + sp[i].len - 1];
        if (sp[i].off < 600 && e != '!') boundary = 0;
    }
    size_t nonspace = 0;
    for (size_t j = 0; j < o; j++) nonspace += text[j] != ' ' && text[j] != '\n';
    CHECK(ok && n > 5, "%d passages, each within budget, in order", n);
    CHECK(covered == nonspace, "passages cover every non-space byte (%zu of %zu)", covered, nonspace);
    CHECK(boundary, "sentence passages end at sentence ends");
    free(sp);
    /* budget below the formatting overhead */
    CHECK(lz_split_passages(text, o, 2, fake_count, &calls, &sp, &n) == LZ_EINVAL, "too small a budget");
    /* UTF-8 never cut inside a character */
    char u[400];
    size_t k = 0;
    for (int i = 0; i < 60; i++) k += (size_t)snprintf(u + k, sizeof u - k, "\xc3\xa9");
    CHECK(lz_split_passages(u, k, 10, fake_count, &calls, &sp, &n) == 0 && n > 1, "utf8 split");
    int whole = 1;
    for (int i = 0; i < n; i++) whole &= (sp[i].off % 2) == 0 && (sp[i].len % 2) == 0;
    CHECK(whole, "chunks on character boundaries");
    free(sp);
}

/* fuzz/fuzz_corpus.c's first find: a context record whose pairs were all seen
 * before, then a line that is no JSON. The bad line's record came back with
 * the id of the last pair, pointing into the context record already freed
 * (a use after free that lazyingest reads to keep a bad record's old rows). */
static void test_context_then_bad_line(void)
{
    const char *data =
        "{\"_id\": \"q1\", \"context\": [[\"Foxaria\", [\"The capital is Oriasville.\"]]]}\n"
        "{\"_id\": \"q2\", \"context\": [[\"Foxaria\", [\"The capital is Oriasville.\"]]]}\n"
        "{broken\n";
    const char *path = write_file("ctxbad.jsonl", data, strlen(data));
    lz_corpus *c;
    char err[512];
    CHECK(lz_corpus_open(path, LZ_CORPUS_AUTO, &c, err, sizeof err) == 0, "open: %s", err);
    lz_corpus_record rec;
    int st = lz_corpus_next(c, &rec, err, sizeof err);
    CHECK(st == LZ_CORPUS_OK && strcmp(rec.id, "Foxaria") == 0, "the pair once: %d", st);
    st = lz_corpus_next(c, &rec, err, sizeof err); /* q2: its pair seen, then the broken line */
    CHECK(st == LZ_CORPUS_BAD && strstr(err, "ctxbad.jsonl:3"), "the broken line is bad: %d '%s'", st, err);
    CHECK(rec.id == NULL && rec.title == NULL && rec.warning == NULL, "the bad line has no id (got a stale one)");
    CHECK(lz_corpus_next(c, &rec, err, sizeof err) == LZ_CORPUS_EOF, "then the end");
    lz_corpus_close(c);
}

int main(void)
{
    if (!lz_test_tmpdir(dir, sizeof dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_check_text();
    test_split();
    test_jsonl();
    test_csv();
    test_stdin_and_rewind();
    test_context_then_bad_line();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return lz_test_done();
}
