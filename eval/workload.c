/* workload.c - lazyeval's request streams (workload.h): the plain order, or
 * Zipf draws from the shared generator, and Poisson arrival times. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/workload.h"
#include "eval/zipf.h"

const char *lz_eval_popularity_name(int popularity)
{
    return popularity == LZ_EVAL_POP_QUESTIONS ? "questions" : popularity == LZ_EVAL_POP_DOCUMENTS ? "documents" : "none";
}

void lz_eval_poisson_arrivals(double *t, int n, double rate, uint64_t seed)
{
    lz_eval_rng r = {seed * 0x2545F4914F6CDD1Dull + 13};
    double now = 0;
    for (int i = 0; i < n; i++) {
        if (rate > 0) now += -log(1.0 - lz_eval_rng_u01(&r)) / rate;
        t[i] = now;
    }
}

void lz_eval_stream_free(lz_eval_stream *s)
{
    free(s->question);
    free(s->docs);
    free(s->arrival);
    memset(s, 0, sizeof *s);
}

int lz_eval_stream_make(const lz_eval_workload *w, int n_questions, int n_passages, const int *owner,
                        lz_eval_stream *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (n_questions <= 0) return lz_fail(err, errlen, -1, "no questions to ask");
    const int n = w->popularity == LZ_EVAL_POP_NONE ? n_questions : w->n_requests > 0 ? w->n_requests : n_questions;
    s->n = n;
    s->question = malloc(sizeof *s->question * (size_t)n);
    s->arrival = malloc(sizeof *s->arrival * (size_t)n);
    if (!s->question || !s->arrival) goto oom;
    if (w->popularity == LZ_EVAL_POP_NONE) {
        for (int i = 0; i < n; i++) s->question[i] = i;
    } else if (w->popularity == LZ_EVAL_POP_QUESTIONS) {
        int *st = lz_eval_zipf_stream(n_questions, n, 1, w->alpha, w->seed, w->seed);
        if (!st) goto oom;
        memcpy(s->question, st, sizeof *st * (size_t)n);
        free(st);
    } else {
        if (w->docs < 1 || w->docs > n_passages) {
            lz_eval_stream_free(s);
            return lz_fail(err, errlen, -1, "--workload-docs %d: expected 1 to the %d passages of the dataset", w->docs,
                           n_passages);
        }
        s->K = w->docs;
        if (!(s->docs = lz_eval_zipf_stream(n_passages, n, w->docs, w->alpha, w->seed, w->seed))) goto oom;
        for (int i = 0; i < n; i++) {
            const int q = owner[s->docs[(size_t)i * w->docs]];
            s->question[i] = q >= 0 && q < n_questions ? q : 0;
        }
    }
    lz_eval_poisson_arrivals(s->arrival, n, w->rate, w->seed);
    s->back_to_back = !(w->rate > 0);
    return 0;
oom:
    lz_eval_stream_free(s);
    return lz_fail(err, errlen, -1, "out of memory");
}
