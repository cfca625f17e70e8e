/* corpus.h - reads a corpus for lazyingest: JSONL (one object per line with
 * "id" (string or integer), "text", optional "title"), a JSON array of such
 * objects, or CSV with a header row naming those columns (RFC 4180 quoting,
 * embedded newlines, CRLF), from a file or standard input. The id field can
 * be another one (lz_corpus_set_id_field: "title"). A JSON record with no
 * "text" but a "context" list of [title, [sentences...]] pairs (HotpotQA)
 * gives one record per pair: id = title, text = the sentences joined. Every
 * record comes with its file:line (and its index in an array); a bad record
 * is reported (what is wrong, its id when known) and skipped, the reader goes
 * on. Text must be valid UTF-8 without NUL bytes. What a record means
 * (splitting, hashing, storing) is not this file's business.
 */
#ifndef LZ_CORPUS_H
#define LZ_CORPUS_H

#include <stddef.h>

typedef struct lz_corpus lz_corpus;

typedef enum {
    LZ_CORPUS_AUTO = 0,
    LZ_CORPUS_JSONL = 1,
    LZ_CORPUS_CSV = 2,
    LZ_CORPUS_JSON_ARRAY = 3 /* one JSON array of records; chosen when JSON input starts with '[' */
} lz_corpus_format;

/* Status codes of lz_corpus_next (and open). */
enum {
    LZ_CORPUS_OK = 0,     /* a valid record */
    LZ_CORPUS_EOF = 1,    /* no more records */
    LZ_CORPUS_BAD = 2,    /* a bad record, skipped: rec->line (and rec->id when known) set */
    LZ_CORPUS_EIO = 3,    /* cannot read the input (fatal) */
    LZ_CORPUS_ENOMEM = 4,
    LZ_CORPUS_EFORMAT = 5 /* the input as a whole is unusable, e.g. CSV header without id/text, or a
                             JSON array whose brackets do not close */
};

#define LZ_CORPUS_MAX_ID 512 /* bytes */
#define LZ_CORPUS_MAX_FIELD 64 /* bytes of an id field's name */

typedef struct {
    const char *id;    /* NUL-terminated; NULL for a bad record whose id is unknown */
    const char *title; /* NULL when absent, null or empty */
    const char *text;  /* never empty for a valid record */
    size_t text_len;
    long line;         /* first line of the record, 1-based */
    long ordinal;      /* 0-based index among all records, valid or bad */
    long index;        /* 0-based index of the record in a JSON array; -1 in JSONL and CSV */
    const char *warning; /* NULL, or a note on a valid record ("file:line: ...": a context title
                            seen before with other text, given the id "title (2)") */
} lz_corpus_record;

/* Opens path ("-" = standard input, spooled to a temporary file so the
 * corpus can be read twice). AUTO picks CSV for *.csv, JSON for *.jsonl /
 * *.ndjson / *.json, else by the first byte ('{' or '[' = JSON, else CSV).
 * JSON input (AUTO or JSONL) whose first byte past spaces and a BOM is '['
 * is read as a JSON array (the whole input in memory). Errors: EIO, ENOMEM,
 * EFORMAT (a JSON array that does not start with '['). */
int lz_corpus_open(const char *path, lz_corpus_format fmt, lz_corpus **out, char *err, size_t errlen);
void lz_corpus_close(lz_corpus *c); /* NULL is a no-op */
/* The field (JSON) or column (CSV, case-insensitive) holding each record's id
 * instead of "id"; call before the first lz_corpus_next. Integer ids work
 * for any field. Returns OK, or EFORMAT when name is empty or longer than
 * LZ_CORPUS_MAX_FIELD bytes. */
int lz_corpus_set_id_field(lz_corpus *c, const char *name);
/* Reads the next record. Pointers in rec stay valid until the next call.
 * BAD: err holds "file:line: [id 'x': ]what is wrong"; in a JSON array
 * "file:line: record [i]: ..." with the line where record i starts.
 * EIO/EFORMAT: err says why; the reader is done. Context records
 * (HotpotQA): a pair whose title and text were seen before is not returned
 * again; a title seen with other text gets the id "title (2)", "title (3)",
 * ... and rec->warning says so. */
int lz_corpus_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen);
/* Starts over from the first record. Errors: EIO. */
int lz_corpus_rewind(lz_corpus *c, char *err, size_t errlen);
lz_corpus_format lz_corpus_get_format(const lz_corpus *c); /* never AUTO */
/* "jsonl", "csv", "json-array" ("auto" for AUTO). */
const char *lz_corpus_format_name(lz_corpus_format fmt);
const char *lz_corpus_name(const lz_corpus *c); /* the path, or "<stdin>" */

/* Offset of the first invalid UTF-8 byte or NUL in s[0..n), or n when clean. */
size_t lz_corpus_check_text(const char *s, size_t n);

#endif /* LZ_CORPUS_H */
