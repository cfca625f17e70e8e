/* workload.h - the order and times in which lazyeval asks its questions:
 * each question once in the file's order (the default), or a replay of n
 * requests whose popularity follows Zipf(alpha) (eval/zipf.h, the serving
 * benchmarks' generator) over the questions, or over the passages (K of them
 * a request, as bench/bench_workload.c draws them, asked with the question of
 * the first one drawn: then the answer is not scored), arriving as a Poisson
 * process of a given rate (or back to back). What it leaves out: answering
 * (eval/run.h). */
#ifndef LZ_EVAL_WORKLOAD_H
#define LZ_EVAL_WORKLOAD_H

#include <stdint.h>

enum {
    LZ_EVAL_POP_NONE = 0,      /* every question once, in order */
    LZ_EVAL_POP_QUESTIONS = 1, /* a request is a question drawn by Zipf(alpha), with its own documents */
    LZ_EVAL_POP_DOCUMENTS = 2  /* a request is K passages drawn by Zipf(alpha) (unscored) */
};

typedef struct {
    int popularity;     /* LZ_EVAL_POP_* */
    int n_requests;     /* requests of a replay (0: as many as questions) */
    double alpha;       /* Zipf exponent (0: uniform) */
    int docs;           /* K: passages a request (LZ_EVAL_POP_DOCUMENTS) */
    double rate;        /* Poisson arrivals a second; 0: back to back (each when the one before is done) */
    uint64_t seed;      /* the permutation, the draws and the arrivals */
} lz_eval_workload;

typedef struct {
    int n;              /* requests */
    int *question;      /* (n) the question each asks (index into the dataset) */
    int K;              /* passages a request when drawn by documents, else 0 */
    int *docs;          /* (n, K) passage indices, NULL unless LZ_EVAL_POP_DOCUMENTS */
    double *arrival;    /* (n) seconds from the start of the run (all 0 back to back) */
    int back_to_back;   /* no arrival times: each request arrives when the one before is answered */
} lz_eval_stream;

const char *lz_eval_popularity_name(int popularity); /* "none", "questions", "documents" */

/* The stream of w over n_questions questions and n_passages passages,
 * owner[p] being the question that asks passage p (eval/passages.h). 0, or
 * -1 with err (no questions, K out of range, out of memory). */
int lz_eval_stream_make(const lz_eval_workload *w, int n_questions, int n_passages, const int *owner,
                        lz_eval_stream *s, char *err, size_t errlen);
void lz_eval_stream_free(lz_eval_stream *s);

/* n arrival times of a Poisson process of rate (a second) from seed: gaps
 * Exp(rate), the first at its first gap; rate 0 gives all 0. */
void lz_eval_poisson_arrivals(double *t, int n, double rate, uint64_t seed);

#endif /* LZ_EVAL_WORKLOAD_H */
