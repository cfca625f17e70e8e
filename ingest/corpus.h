/* corpus.h - reads a corpus for lazyingest: JSONL (one object per line with
 * "id" (string or integer), "text", optional "title") or CSV with a header
 * row naming those columns (RFC 4180 quoting, embedded newlines, CRLF), from
 * a file or standard input. Every record comes with its file:line; a bad
 * record is reported (what is wrong, its id when known) and skipped, the
 * reader goes on. Text must be valid UTF-8 without NUL bytes. What a record
 * means (splitting, hashing, storing) is not this file's business.
 */
#ifndef LZ_CORPUS_H
#define LZ_CORPUS_H

#include <stddef.h>

typedef struct lz_corpus lz_corpus;

typedef enum { LZ_CORPUS_AUTO = 0, LZ_CORPUS_JSONL = 1, LZ_CORPUS_CSV = 2 } lz_corpus_format;

/* Status codes of lz_corpus_next (and open). */
enum {
    LZ_CORPUS_OK = 0,     /* a valid record */
    LZ_CORPUS_EOF = 1,    /* no more records */
    LZ_CORPUS_BAD = 2,    /* a bad record, skipped: rec->line (and rec->id when known) set */
    LZ_CORPUS_EIO = 3,    /* cannot read the input (fatal) */
    LZ_CORPUS_ENOMEM = 4,
    LZ_CORPUS_EFORMAT = 5 /* the input as a whole is unusable, e.g. CSV header without id/text */
};

#define LZ_CORPUS_MAX_ID 512 /* bytes */

typedef struct {
    const char *id;    /* NUL-terminated; NULL for a bad record whose id is unknown */
    const char *title; /* NULL when absent, null or empty */
    const char *text;  /* never empty for a valid record */
    size_t text_len;
    long line;         /* first line of the record, 1-based */
    long ordinal;      /* 0-based index among all records, valid or bad */
} lz_corpus_record;

/* Opens path ("-" = standard input, spooled to a temporary file so the
 * corpus can be read twice). AUTO picks CSV for *.csv, JSONL for
 * *.jsonl / *.ndjson / *.json, else by the first byte ('{' = JSONL). */
int lz_corpus_open(const char *path, lz_corpus_format fmt, lz_corpus **out, char *err, size_t errlen);
void lz_corpus_close(lz_corpus *c); /* NULL is a no-op */
/* Reads the next record. Pointers in rec stay valid until the next call.
 * BAD: err holds "file:line: [id 'x': ]what is wrong". EIO/EFORMAT: err
 * says why; the reader is done. */
int lz_corpus_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen);
/* Starts over from the first record. Errors: EIO. */
int lz_corpus_rewind(lz_corpus *c, char *err, size_t errlen);
lz_corpus_format lz_corpus_get_format(const lz_corpus *c);
const char *lz_corpus_name(const lz_corpus *c); /* the path, or "<stdin>" */

/* Offset of the first invalid UTF-8 byte or NUL in s[0..n), or n when clean. */
size_t lz_corpus_check_text(const char *s, size_t n);

#endif /* LZ_CORPUS_H */
