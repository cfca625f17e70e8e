/* summary.h - what a run's rows add up to: the official answer metrics
 * overall and per question type; the failed questions counted apart; TTFT
 * mean and percentiles, decode speed and the latency from arrival over the
 * requests after the warm-up (the first request, reported apart); the cache
 * tiers' hit rates over the same requests; recall@k of the gold passages in
 * the open setting. What it leaves out: writing it (eval/report.h). */
#ifndef LZ_EVAL_SUMMARY_H
#define LZ_EVAL_SUMMARY_H

#include "eval/dataset.h"
#include "eval/run.h"

typedef struct {
    char type[64];      /* the question type ("bridge", ...; "" when the file has none) */
    int n;              /* questions scored */
    int failed;         /* its failed questions (not in n) */
    double em, f1;      /* means over them, in percent */
} lz_eval_type_score;

/* mean and percentiles of a set of values (linear interpolation between order statistics, as
 * numpy.percentile); all 0 when n is 0 */
typedef struct {
    int n;
    double mean, p50, p95, p99, min, max;
} lz_eval_dist;

/* Distribution of v[0..n) (v is sorted in place). */
void lz_eval_dist_of(double *v, int n, lz_eval_dist *out);

typedef struct {
    int requests, answered, failed; /* failed: an error row (its documents missing, the prompt too long, ...) */
    int scored, unscored;           /* answered with a gold answer and their own documents; the others */
    int no_docs;                    /* answered from the question alone */
    double em, f1;                  /* percent over the scored questions */
    double em_all, f1_all;          /* percent over scored + failed-with-gold (a failure counting 0, as the
                                       official scripts count a missing prediction) */
    lz_eval_type_score *types;      /* per type, in the order first seen; malloc'd */
    int n_types;
    /* speed: the answered requests after the warm-up */
    lz_eval_dist ttft;              /* seconds to the first answer token (KV load included) */
    lz_eval_dist latency;           /* seconds from arrival to first token (queueing and retrieval included) */
    lz_eval_dist load;              /* seconds loading KV */
    double decode_tok_s;            /* answer tokens after the first / decode seconds, summed */
    double throughput;              /* requests answered a second over the run's wall time */
    int has_warmup;
    lz_eval_row warmup;             /* a copy of the first request's row (its strings not owned) */
    /* cache tiers: lookups between the end of the warm-up and the end of the run */
    int64_t host_hits, host_misses, gpu_hits, gpu_misses;
    double host_hit_rate, gpu_hit_rate; /* -1 when no lookups */
    int has_gpu;
    /* open setting: questions with gold titles */
    int recall_n;
    double recall_at_k;             /* mean share of the gold titles among the top k, percent */
    double all_gold_at_k;           /* percent of questions with every gold title among the top k */
} lz_eval_summary;

/* Sums up res (rows of d's questions). 0, or -1 when out of memory. */
int lz_eval_summarize(const lz_eval_dataset *d, const lz_eval_run_result *res, lz_eval_summary *s);
void lz_eval_summary_free(lz_eval_summary *s);

#endif /* LZ_EVAL_SUMMARY_H */
