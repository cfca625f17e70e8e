/* build_store.h - builds or updates the store lazyeval answers from: the
 * dataset's passages written as a lazyingest JSONL corpus (explicit ids:
 * the titles, "title (k)" where a title has several texts; eval/passages.h),
 * then the lazyingest program run on it, so that splitting, encoding, the
 * incremental re-run (unchanged passages cost a hash) and the store's
 * durability rules are lazyingest's own. What it leaves out: answering. */
#ifndef LZ_EVAL_BUILD_STORE_H
#define LZ_EVAL_BUILD_STORE_H

#include <stddef.h>

#include "eval/passages.h"

/* Writes every passage of t as one {"id", "title", "text"} line. 0, or -1 with err. */
int lz_eval_write_corpus(const lz_eval_passages *t, const char *path, char *err, size_t errlen);

typedef struct {
    const char *program;      /* the lazyingest program */
    const char *model, *store, *corpus;
    int threads;              /* --threads, 0: lazyingest's default */
    int gpu;                  /* --gpu (a CUDA build's lazyingest) */
    const char *const *extra; /* more arguments, as given (--ingest-arg) */
    int n_extra;
    const char *summary_path; /* where lazyingest's --json summary goes (its standard output) */
} lz_eval_ingest_opts;

typedef struct {
    int exit_status;          /* lazyingest's (2: some records skipped, the rest stored) */
    double seconds;
    char command[4096];       /* the command line, for the report (arguments quoted) */
} lz_eval_ingest_result;

/* Runs lazyingest on o->corpus (its standard error passes through). 0 when it
 * exited 0 or 2 (r says which), else -1 with err (could not run, or its
 * exit status with what it means). */
int lz_eval_run_ingest(const lz_eval_ingest_opts *o, lz_eval_ingest_result *r, char *err, size_t errlen);

/* The lazyingest to run: $LZ_BIN/lazyingest when LZ_BIN is set, else the one
 * next to the running program (/proc/self/exe), else "lazyingest" on PATH. */
void lz_eval_find_lazyingest(char *buf, size_t n);

#endif /* LZ_EVAL_BUILD_STORE_H */
