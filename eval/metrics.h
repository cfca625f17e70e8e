/* metrics.h - the official answer metrics of HotpotQA (hotpot_evaluate_v1.py)
 * and 2WikiMultihopQA (its evaluate script, adapted from HotpotQA's): exact
 * match and token F1 over normalised answers (eval/normalize.h), with their
 * rule that a prediction or gold answer normalising to yes, no or noanswer
 * scores F1 0 unless both are equal, and the maximum over several gold
 * answers (2Wiki: the answer and its aliases) taken for EM and F1 apart.
 * Supporting-fact and evidence metrics are not here: the model does not
 * emit them. */
#ifndef LZ_EVAL_METRICS_H
#define LZ_EVAL_METRICS_H

typedef struct {
    double em;        /* 1 or 0 */
    double f1;        /* in [0, 1] */
    double precision; /* common tokens / prediction tokens (0 under the yes/no rule) */
    double recall;    /* common tokens / gold tokens */
} lz_eval_score;

/* One prediction against one gold answer (eval_answer of the scripts).
 * 0, or -1 when out of memory. */
int lz_eval_score_one(const char *prediction, const char *gold, lz_eval_score *out);

/* Against golds[0..n) (n >= 1): em, f1, precision and recall each the
 * maximum over the golds (update_answer of 2Wiki's script; HotpotQA has one
 * gold). 0, or -1 when out of memory or n < 1. */
int lz_eval_score_answer(const char *prediction, const char *const *golds, int n, lz_eval_score *out);

#endif /* LZ_EVAL_METRICS_H */
