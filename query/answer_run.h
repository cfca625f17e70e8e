/* answer_run.h - one answer in progress over a query session, step by step,
 * so that many answers can decode together (continuous batching, serve/):
 *
 *   begin    places the documents (the mode's segments: cached, loaded, or
 *            computed in PREFIX / FULL), holds the cache entries it reads
 *   prefill  runs the questions of many begun answers in one batched pass:
 *            each one's first-token logits ready, its TTFT measured
 *   next     samples the answer's next token (its own sampler: seed,
 *            temperature, top-p) and appends its text
 *   step     runs the sampled tokens of many answers in one batched pass
 *
 * lz_query_run_start is begin + prefill of one answer. lz_query_answer
 * (session.h) is start, then next / step until the answer ends.
 *
 * Each answer owns its local KV cache (question and answer tokens), its
 * logits, its sampler and the documents it uses: entries of the session's
 * host tier are held (lz_doc_cache_hold) until the answer is freed, so one
 * answer's loads never evict what another running answer reads; entries
 * the tier did not admit are its own. With a backend (opts.backend, the GPU)
 * that holds one sequence, one answer runs at a time: begin + prefill of an
 * answer must follow each other, and prefill / step take one answer; with a
 * backend of slots (lz_query_backend.n_slots) up to that many, each answer in
 * a slot from begin to free, prefill and step batched there; on the CPU any
 * number. Every call runs on one thread (the session is not thread-safe).
 */
#ifndef LZ_QUERY_ANSWER_RUN_H
#define LZ_QUERY_ANSWER_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "query/session.h"

typedef struct lz_query_run lz_query_run;

/* An answer's own generation settings. */
typedef struct {
    int max_new_tokens; /* answer length limit, >= 0 */
    float temperature;  /* 0 = greedy */
    float top_p;        /* (0, 1] */
    uint64_t seed;
    int ignore_eos;     /* never sample an end-of-generation token, nor end a plain prompt's answer at
                           its line break: the answer runs to max_new_tokens (or is stopped); for
                           benchmarks of fixed output lengths (vLLM's ignore_eos) */
} lz_query_run_opts;

/* The session's settings (opts.max_new_tokens, temperature, top_p, seed). */
void lz_query_run_opts_default(const lz_query_session *q, lz_query_run_opts *o);

/* Places docs[0..n_docs) (the last one nearest the question) and prepares the question.
 * o NULL: the session's settings and its own sampler (lz_query_answer's generator, shared
 * by its questions); else the answer's own sampler seeded with o->seed. 0 with *out, or -1
 * with a message naming the document or what failed (empty question, prompt too long,
 * corrupt payload, ...), or LZ_QUERY_ENOMEM (session.h) with a message when memory ran out:
 * a backend hook's (begin, encode, keep_own, ...: the backend's memory for the documents)
 * or an allocation for the answer. */
int lz_query_run_begin(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                       const lz_query_run_opts *o, lz_query_run **out, char *err, size_t errlen);

/* The questions of runs[0..n) that begin left without logits, in one forward pass (on a
 * backend of one sequence: n == 1, right after its begin). 0, or -1 or LZ_QUERY_ENOMEM (as
 * begin) with a message: then every run of the call has failed (free them). */
int lz_query_run_prefill(lz_query_session *q, lz_query_run *const *runs, int n, char *err, size_t errlen);

/* Answers that can run at once over q: 0 on the CPU (any number), else the backend's
 * sequences (1, or its slots: lz_query_backend.n_slots). */
int lz_query_run_parallel(const lz_query_session *q);

/* begin + prefill of one answer: 0, or the status of the one that failed (-1 or
 * LZ_QUERY_ENOMEM, unchanged). */
int lz_query_run_start(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                       const lz_query_run_opts *o, lz_query_run **out, char *err, size_t errlen);

/* Samples the next token from the run's logits (prefilled or stepped; calling it twice
 * without a step between ends nothing: it returns 0). Returns 1 when a token was appended,
 * with the text it adds in *piece (*len bytes, possibly 0; valid until the next call);
 * 0 when none was (the answer has ended: an end-of-generation token, the line break that
 * ends a plain-prompt answer, or max_new_tokens reached before). After it, lz_query_run_done
 * says whether the answer needs no step. */
int lz_query_run_next(lz_query_run *r, const char **piece, int *len);

/* 1 when the answer has ended (nothing to step): by itself, by max_new_tokens, or by
 * lz_query_run_stop. */
int lz_query_run_done(const lz_query_run *r);

/* Ends the answer where it is (a stop string, a cancelled request): done from now on. */
void lz_query_run_stop(lz_query_run *r);

/* Runs the token that next sampled for each of runs[0..n) (none done), all in one batched
 * forward pass (on a backend of one sequence: n == 1); their logits are then ready for next.
 * 0, or -1 or LZ_QUERY_ENOMEM with a message: then every run of the call has failed (free
 * them). */
int lz_query_run_step(lz_query_session *q, lz_query_run *const *runs, int n, char *err, size_t errlen);

/* The answer so far: text, token ids, timings (t_ttft from begin; t_decode since the first
 * token), cache lookups. Owned by the run. */
const lz_query_result *lz_query_run_result(const lz_query_run *r);

/* Host memory the run holds: its own KV cache and logits, its own entries, and the held
 * entries of the host tier (those other answers may share). */
size_t lz_query_run_bytes(const lz_query_run *r);

/* What a run of this question over these documents will hold at most (lz_query_run_bytes
 * of it), for admission before anything is loaded; -1 when out of memory. */
int64_t lz_query_run_estimate(const lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                              int max_new_tokens);

/* Moves the result into *out (lz_query_result_free frees it) and frees the run. */
void lz_query_run_finish(lz_query_run *r, lz_query_result *out);

/* Frees the run (NULL: no-op), releasing what it holds; one that had not ended lets a
 * backend settle first (copies in flight may still read its documents). */
void lz_query_run_free(lz_query_run *r);

#endif /* LZ_QUERY_ANSWER_RUN_H */
