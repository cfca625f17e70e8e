/* run.h - one measured run of lazyeval: a fresh query session (one mode, one
 * cache budget) answers every request of a stream in one process, so its
 * caches stay warm from question to question as a server's would, and each
 * answer becomes a row: the prediction and its score, or the error that
 * stopped it (a failed question is a row of its own, never an empty
 * answer), its timings, cache lookups and, in the open setting, which gold
 * passages retrieval found. Clean by default: no preload, no access counts
 * written (opts.preload, opts.record_hits). What it leaves out: summaries
 * and files (eval/summary.h, eval/report.h). */
#ifndef LZ_EVAL_RUN_H
#define LZ_EVAL_RUN_H

#include <stdint.h>

#include "cache/doc_cache.h"
#include "eval/dataset.h"
#include "eval/metrics.h"
#include "eval/store_map.h"
#include "eval/workload.h"
#include "model/llama.h"
#include "query/session.h"
#include "store/store.h"

typedef enum {
    LZ_EVAL_DISTRACTOR = 0, /* each question over its own context passages, in context order */
    LZ_EVAL_OPEN = 1        /* BM25 top-k over the whole store, the best nearest the question */
} lz_eval_setting;

const char *lz_eval_setting_name(int setting); /* "distractor", "open" */

typedef struct {
    int question;          /* index into the dataset */
    int ok;                /* answered */
    int warmup;            /* the run's first request: its timings are reported apart */
    int scorable;          /* has a gold answer and is asked over its own documents */
    int scored;            /* answered and scorable: score is set */
    char *error;           /* why it failed, malloc'd (NULL when ok) */
    char *prediction;      /* the final answer (after the model's last " => "), malloc'd */
    char *generated;       /* the whole generated text, malloc'd */
    char *sources;         /* the placed documents' ids as a JSON array, malloc'd */
    lz_eval_score score;   /* when scored */
    int n_docs;            /* documents placed in the prompt */
    int no_docs;           /* answered from the question alone (retrieval found none) */
    int n_retrieved;       /* open: documents BM25 returned (<= k) */
    double recall;         /* open: share of the gold titles among those; -1 when not measured */
    int all_gold;          /* open: every gold title among them */
    double t_retrieve;     /* seconds finding the documents */
    double t_load, t_ttft, t_decode; /* lz_query_result's: KV load, first token (load included), the rest */
    int n_prompt, n_computed, n_answer, n_recomputed;
    int64_t hits, misses, bytes_loaded; /* this question's cache lookups */
    double arrival;        /* seconds from the run's start when it arrived (its Poisson time; back to back:
                              when answering it began) */
    double start;          /* when answering it began (>= arrival) */
    double latency;        /* arrival to first token: the wait, retrieval and TTFT */
} lz_eval_row;

/* The cache tiers' counters at a moment: the host tier (the session's) and
 * the backend's (the GPU's) when there is one. */
typedef struct {
    lz_doc_cache_stats host, gpu;
} lz_eval_tiers;

typedef struct {
    int setting;           /* lz_eval_setting */
    int top_k;             /* open: documents retrieved */
    lz_query_opts qo;      /* the session's options (mode, host budget, policy, backend, ...) */
    int preload;           /* 0 none (default), 1 the hot documents, 2 all (lz_query_preload) */
    int record_hits;       /* count each placed document's hit in the store (needs a writable store) */
    const lz_eval_store_map *map; /* the store's document of each passage (NULL: the passages' own ids) */
    int max_doc_tokens;    /* the split budget map was checked with (its messages) */
    /* the backend's tier counters (GPU), NULL when none */
    void (*gpu_tier)(void *ctx, lz_doc_cache_stats *st);
    void *gpu_ctx;
    /* called after each request (progress), may be NULL */
    void (*on_row)(const lz_eval_row *row, int i, int n, void *ctx);
    void *row_ctx;
} lz_eval_run_opts;

typedef struct {
    lz_eval_row *rows;     /* (n_rows) in request order */
    int n_rows;
    int has_gpu;
    lz_eval_tiers after_warmup, at_end; /* counters after the first request and at the end */
    lz_query_preload_result preload;
    int preloaded;         /* a preload ran */
    char preload_error[256]; /* why it stopped early ("" when it did not) */
    double wall_s;         /* the stream, first arrival to last answer */
} lz_eval_run_result;

/* Answers the requests of s (questions of d) with model m over store st.
 * 0, or -1 with err when the run could not start (the session refused the
 * store, out of memory); a question that fails is a row, not an error. */
int lz_eval_run(lz_llama *m, lz_store *st, const lz_eval_dataset *d, const lz_eval_stream *s,
                const lz_eval_run_opts *o, lz_eval_run_result *res, char *err, size_t errlen);
void lz_eval_run_result_free(lz_eval_run_result *r);

#endif /* LZ_EVAL_RUN_H */
