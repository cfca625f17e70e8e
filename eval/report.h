/* report.h - lazyeval's outputs of a run: a JSON object (its settings, the
 * summary, the warm-up, the tiers, the failures, and optionally a row per
 * question) for report.json, every run's rows as one CSV (RFC 4180 quoting,
 * a header row), and the few lines of text it prints. The top of
 * report.json (model, store, dataset, machine) is eval/report_header.h and
 * eval/machine.h; the plots are eval/plot.h. */
#ifndef LZ_EVAL_REPORT_H
#define LZ_EVAL_REPORT_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "eval/dataset.h"
#include "eval/run.h"
#include "eval/summary.h"

typedef struct {
    const char *label;         /* "lazy 1 GiB", unique among the runs */
    int mode;                  /* lz_query_mode */
    int setting;               /* lz_eval_setting */
    int top_k;
    size_t host_budget;        /* the host tier's bytes */
    size_t gpu_budget;         /* the GPU tier's bytes, as the engine set them (0: no GPU) */
    size_t gpu_budget_asked;   /* --gpu-cache-bytes of this run (0: the engine's default) */
    int gpu;                   /* answered on the GPU */
    int poisson;               /* the requests arrived at Poisson times (else back to back) */
    const char *policy;        /* the cache policy's name */
    const lz_eval_run_result *res;
    const lz_eval_summary *sum;
} lz_eval_report_run;

/* The run as a JSON object (NULL when out of memory); with_rows: its
 * "questions" array too. */
json_t *lz_eval_run_json(const lz_eval_dataset *d, const lz_eval_report_run *r, int with_rows);

/* The run in a few lines of text on f (what lazyeval prints on standard output). */
void lz_eval_print_run(FILE *f, const lz_eval_report_run *r);

/* The rows of runs[0..n) into path as CSV. 0, or -1 with err. */
int lz_eval_write_csv(const char *path, const lz_eval_dataset *d, const lz_eval_report_run *runs, int n, char *err,
                      size_t errlen);

#endif /* LZ_EVAL_REPORT_H */
