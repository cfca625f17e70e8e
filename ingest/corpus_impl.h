/* corpus_impl.h - the corpus reader's state, shared by its two files and
 * private to them: corpus.c (open, detection, rewind, CSV) and corpus_json.c
 * (JSONL lines, JSON arrays, HotpotQA context records). */
#ifndef LZ_CORPUS_IMPL_H
#define LZ_CORPUS_IMPL_H

#include <csv.h>
#include <jansson.h>
#include <stdio.h>

#include "ingest/corpus.h"

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
    char id_field[LZ_CORPUS_MAX_FIELD + 1]; /* the record field (CSV: column) of the id */
    /* JSONL and JSON array */
    json_t *obj;
    char idbuf[LZ_CORPUS_MAX_ID + 64];
    char where[4200];    /* "file:line" or "file:line: record [i]": the current record in messages */
    long rec_line, rec_index; /* the current JSON record's first line and array index (-1: JSONL) */
    /* JSON array: the whole input and the scan through it */
    char *buf;
    size_t buf_len, pos, line_start; /* pos: next byte; line_start: offset of pos's line */
    size_t arr_pos, arr_line_start; /* just after the opening '[' (rewind goes back there) */
    long pos_line, arr_line, index;
    int arr_state;       /* 0: before the first record, 1: after a record, 2: after the closing ']' */
    /* a HotpotQA record being expanded: its "context" pairs, the next one, the joined text */
    json_t *ctx;
    size_t ctx_i;
    char *text;
    size_t text_cap;
    char warn[6000];     /* rec->warning */
    struct title_slot *titles; /* context titles seen (their texts' hashes), open addressing */
    size_t titles_cap, titles_n;
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

/* corpus.c: one line (with its newline, a leading BOM dropped) into c->line; its length or -1 at EOF */
long corpus_read_line(lz_corpus *c);
/* corpus_json.c: the whole JSON array input loaded and its scan started; the context titles
 * forgotten (rewind, close); the next JSON record (JSONL or array) */
int corpus_array_load(lz_corpus *c, char *err, size_t errlen);
void corpus_titles_clear(lz_corpus *c);
int corpus_json_next(lz_corpus *c, lz_corpus_record *rec, char *err, size_t errlen);

#endif /* LZ_CORPUS_IMPL_H */
