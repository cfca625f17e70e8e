/* sched.h - the serving scheduler: many requests answered together over one
 * query session by continuous batching, on one engine thread that alone runs
 * the model and reads the store.
 *
 *   submit   (any thread) a request joins a bounded queue, or is refused
 *            when the queue is full (the caller answers 429 / 503)
 *   resolve  (engine) its documents: ids, or BM25 retrieval over the store;
 *            an unknown id (404), an id too long (400) or a prompt past the
 *            context (400) fails it here
 *   admit    (engine) queued requests join the running batch while their
 *            memory (their own KV plus the documents they place, estimated
 *            by lz_query_run_estimate) fits the budget and the batch has room
 *   prefill  (engine) the questions of the requests admitted since the last
 *            step, in one batched pass; each samples its first token
 *   step     (engine) one batched decode pass for every running request;
 *            each samples, streams its text, and leaves at its end (its end
 *            of generation, max_tokens, a stop string) or when cancelled
 *
 * A request is followed through its ticket: lz_serve_wait blocks until its
 * text grows or its state changes (the per-request queue of what it streams);
 * lz_serve_release hands it back, cancelling it if it is still running (a
 * client that disconnected): the engine frees its slot, its KV and its holds
 * on the documents before the next step. With a backend (the GPU) the batch
 * is at most the sequences it holds (lz_query_run_parallel: one, or its
 * slots), and a request is admitted only when the backend says the documents
 * it will pin fit its memory now (lz_query_backend.fits).
 *
 * A begin that still fails for memory after that check (lz_query_run_begin or
 * _start returns LZ_QUERY_ENOMEM, session.h: a backend hook found no memory,
 * say because the documents resident when fits answered were evicted,
 * fragmented, or pinned by requests begun in the same step, or an allocation
 * failed) does not fail the request while others run: it goes back to the head
 * of the queue (the requests admitted with it behind it, in order) and waits
 * there, holding admission back, until a running request ends; then it is
 * begun again. Each retry needs one more request to have ended, and none is
 * admitted past the head meanwhile, so it is retried at most as many times as
 * requests ran when it first failed. One that fails for memory with nothing
 * else running fails (500) with a message saying so.
 */
#ifndef LZ_SERVE_SCHED_H
#define LZ_SERVE_SCHED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "query/session.h"
#include "serve/hist.h"
#include "serve/stop.h"
#include "store/store.h"

typedef struct lz_serve_sched lz_serve_sched;

/* Requests running across several schedulers (lz_serve_sched_opts.shared): now, and the most at once. */
typedef struct {
    atomic_int now, peak;
} lz_serve_running;
typedef struct lz_serve_ticket lz_serve_ticket;

typedef struct {
    int max_running;      /* requests decoding at once (the batch), >= 1 */
    int max_queue;        /* requests waiting (not yet running) beyond which submit refuses */
    size_t mem_budget;    /* bytes the running requests may hold (lz_query_run_estimate's sum) */
    int max_prefill;      /* requests admitted between two decode steps, >= 1 */
    int record_hits;      /* count each used document in the store's access counts (lz_store_hit) */
    int best_first;       /* retrieved documents best first (default: best last, nearest the question) */
    /* optional: the backend's cache tier counters (the GPU's), read on the engine thread */
    void (*tier_stats)(void *ctx, lz_doc_cache_stats *st);
    void *tier_ctx;
    /* optional (with tier_ctx as ctx): the backend's batched decode counters (the GPU's): steps
     * whose attention ran grouped by document, their document blocks read and placed */
    void (*decode_stats)(void *ctx, int64_t *grouped_steps, int64_t *blocks_read, int64_t *blocks_placed);
    /* optional: called first on the engine thread, before anything else runs there (a GPU
     * engine makes its device current: CUDA's current device is per host thread) */
    void (*on_start)(void *ctx);
    void *start_ctx;
    /* optional: a count shared with other schedulers (serve/router.h): the requests running
     * across all of them now and the most that ever ran at once */
    lz_serve_running *shared;
} lz_serve_sched_opts;

void lz_serve_sched_opts_default(lz_serve_sched_opts *o);

/* Starts the engine thread over session q and its store st (both borrowed; from now on only
 * the engine thread uses them until lz_serve_sched_free). With a backend in the session's
 * options max_running is at most the sequences it holds. 0, or -1 with a message. */
int lz_serve_sched_new(lz_query_session *q, lz_store *st, const lz_serve_sched_opts *o, lz_serve_sched **out,
                       char *err, size_t errlen);
/* Stops the engine (running and queued requests end CANCELLED), joins it, frees it. Tickets
 * still held stay readable (and must still be released: the last release frees what is
 * left); the session and store are the caller's again. NULL is a no-op. */
void lz_serve_sched_free(lz_serve_sched *s);

/* A request. Every pointer is copied by submit. */
typedef struct {
    const char *question;         /* the prompt's question (non-empty) */
    const char *const *doc_ids;   /* documents to place, in order (the last nearest the question), */
    int n_doc_ids;
    int retrieve_k;               /* or, when > 0 and no ids: BM25's best k over the store */
    int max_tokens;               /* >= 0 */
    float temperature;            /* 0 = greedy */
    float top_p;                  /* (0, 1] */
    uint64_t seed;
    int ignore_eos;               /* run to max_tokens: no end-of-generation (answer_run.h) */
    const char *const *stop;      /* up to LZ_SERVE_MAX_STOP strings of up to LZ_SERVE_MAX_STOP_LEN bytes */
    int n_stop;
} lz_serve_req;

enum {
    LZ_SERVE_OK = 0,
    LZ_SERVE_EFULL = 1,    /* the queue is full: try again later */
    LZ_SERVE_EINVAL = 2,   /* a bad request (message says what) */
    LZ_SERVE_ESTOPPED = 3, /* the scheduler is stopping */
    LZ_SERVE_ENOMEM = 4
};

/* Queues req; *out is the caller's ticket (release it). LZ_SERVE_OK or an error above, with a
 * message. */
int lz_serve_submit(lz_serve_sched *s, const lz_serve_req *req, lz_serve_ticket **out, char *err, size_t errlen);

typedef enum {
    LZ_SERVE_PENDING = 0,   /* submitted: documents not resolved yet */
    LZ_SERVE_QUEUED = 1,    /* resolved, waiting for room */
    LZ_SERVE_RUNNING = 2,   /* in the batch */
    LZ_SERVE_DONE = 3,      /* answered (finish: "stop" or "length") */
    LZ_SERVE_FAILED = 4,    /* error and status say why */
    LZ_SERVE_CANCELLED = 5  /* released before its end, or the scheduler stopped */
} lz_serve_state;

/* Seconds and sizes of one request. */
typedef struct {
    double queue_s;        /* submit to admission */
    double ttft_s;         /* submit to the first token */
    double tpot_s;         /* mean time per output token after the first (0 with fewer than 2) */
    double total_s;        /* submit to the end */
    int n_prompt;          /* prompt tokens (prefix, documents, question) */
    int n_completion;      /* tokens generated */
    int64_t hits, misses;  /* document cache lookups */
} lz_serve_timing;

/* What lz_serve_wait returns. */
typedef struct {
    int state;             /* lz_serve_state */
    char *text;            /* the streamed text past `have` (malloc'd, NUL-terminated, free it), "" if none */
    size_t len;
    size_t total;          /* bytes streamed in all (have + len) */
    const char *finish;    /* DONE: "stop" or "length" (static) */
    int status;            /* FAILED: an HTTP status (400 bad input, 404 unknown document, 500 server) */
    char error[512];       /* FAILED: why */
    lz_serve_timing timing;/* final once state is DONE */
} lz_serve_update;

/* Waits until the ticket has streamed past `have` bytes, or its state differs from
 * `state_seen`, or timeout_s passes (<= 0: no wait); fills *u (u->text NULL when out of
 * memory). Returns 1 when something changed, 0 on timeout. */
int lz_serve_wait(lz_serve_ticket *t, size_t have, int state_seen, double timeout_s, lz_serve_update *u);

/* The documents placed (valid once the state is past QUEUED; the ticket owns them). */
const lz_query_doc *lz_serve_ticket_docs(const lz_serve_ticket *t, int *n);

/* The caller is done with t: a request not yet ended is cancelled (the engine frees its
 * slot and documents before its next step). NULL is a no-op. */
void lz_serve_release(lz_serve_ticket *t);

/* Totals since start, and the state now. */
typedef struct {
    int64_t submitted, ok, failed_client, failed_server, cancelled, rejected_full;
    int64_t prompt_tokens, completion_tokens;
    int64_t steps, step_rows;   /* decode passes and the rows they ran (mean batch = rows / steps) */
    int64_t prefills, prefill_rows;
    int queued, running;        /* now (queued: pending and queued) */
    int peak_running;           /* the most that ran at once */
    int64_t mem_retries;        /* begins that failed for memory and went back to the queue's head */
    int64_t reserved_bytes;     /* memory the running requests hold (their estimates) */
    int64_t mem_budget;
    lz_serve_hist ttft, tpot, queue;
    lz_doc_cache_stats host;    /* the session's host tier, as of the last step */
    lz_doc_cache_stats gpu;     /* the backend's tier (opts.tier_stats), as of the last step */
    int has_gpu;
    int64_t grouped_steps, grouped_blocks_read, grouped_blocks_placed; /* opts.decode_stats's, as of the last step */
    double busy_s;              /* engine time spent running the model */
    double decode_s, pass_s;    /* of busy_s: the decode steps (their passes, sampling, streaming),
                                 * and in them the model's passes alone */
} lz_serve_stats;

void lz_serve_sched_stats(lz_serve_sched *s, lz_serve_stats *st);

/* The load now, cheaper than the stats (serve/router.h balances on it): requests queued
 * (pending and queued), running, and the queue bound (max_queue). */
void lz_serve_sched_load(lz_serve_sched *s, int *queued, int *running, int *max_queue);
/* The batch it runs (max_running, cut to the backend's sequences). */
int lz_serve_sched_batch(const lz_serve_sched *s);

#endif /* LZ_SERVE_SCHED_H */
