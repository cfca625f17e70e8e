/* session.h - answers questions over cached documents: places each retrieved
 * document's stored KV at its offset in the prompt and runs the question and
 * the answer through the model, in one of four comparison modes that share
 * the same answer path:
 *
 *   LAZY    one cached copy per document; the missing rotation R(p - s) is
 *           applied inside attention (to the query), never to stored keys
 *   BLOCK   position-aware cache (Block-Attention): a re-rotated materialised
 *           copy per (document, offset)
 *   PREFIX  exact-prefix reuse (vLLM automatic prefix caching): the KV of a
 *           document computed in context is reused only after the very same
 *           preceding documents; the rest is computed with full attention
 *   FULL    recompute the whole prompt every time, nothing reused
 *
 * LAZY and BLOCK give the same logits up to fp32 rounding; PREFIX equals FULL.
 * Prompt layout (model/prompt.h): [prefix s tokens][doc 1]..[doc k][question].
 *
 * Legend: s = prefix length, p = a document's offset in the prompt,
 * L/KV/d = layers, kv heads, head_dim.
 */
#ifndef LZ_QUERY_SESSION_H
#define LZ_QUERY_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/backend.h"
#include "model/llama.h"
#include "cache/doc_cache.h"
#include "store/store.h"

typedef enum { LZ_MODE_LAZY = 0, LZ_MODE_BLOCK = 1, LZ_MODE_PREFIX = 2, LZ_MODE_FULL = 3 } lz_query_mode;

const char *lz_query_mode_name(int mode);
int lz_query_mode_parse(const char *s); /* -1 if unknown */
/* Own rows a GPU engine's sequence needs for one question in mode (lz_engine_opts.own_tokens):
 * the question and the answer, 4,096, or in full and prefix modes the prompt's documents too, 16,384. */
int lz_query_engine_rows(int mode);

/* A document to place in the prompt (from retrieval or --docs). */
typedef struct {
    int64_t id;
    char ext_id[256];
    char title[256];
    double score;                          /* retrieval score (bm25, lower is better), 0 for --docs */
    uint8_t payload_key[LZ_META_KEY_LEN];
    int n_tokens;
    int whole;                             /* stored whole (no KV eviction at ingest): may be recomputed */
} lz_query_doc;

/* The engine's question pass (lz_query_backend) and the status its hooks return for want of
 * memory (LZ_QUERY_ENOMEM): engine/backend.h. */

/* What lazy mode does with a cold document (in neither the CPU's nor the backend's cache). */
enum {
    LZ_COLD_LOAD = 0,      /* read and decode its stored KV */
    LZ_COLD_RECOMPUTE = 1, /* recompute it on the backend (backend->encode), when it is stored whole and fits */
    LZ_COLD_AUTO = 2       /* per document, whichever costs less: its KV bytes over the store's measured
                              decode rate, or its tokens over the backend's measured recompute rate
                              (lz_query_cold_rates; both start from priors and follow each measurement) */
};

typedef struct {
    int mode;                /* lz_query_mode */
    size_t cache_bytes;      /* KV cache budget (the host tier) */
    int cache_policy;        /* lz_cache_policy: LZ_CACHE_LFU (default) or LZ_CACHE_LRU */
    int max_new_tokens;
    float temperature;       /* 0 = greedy */
    float top_p;
    uint64_t seed;
    int batch;               /* forward chunk (tokens) of the session's own CPU engine (backend NULL; an
                                engine's table has its own: lz_engine_opts.batch) */
    int max_positions;       /* refuse prompts (+ answer) longer than this; 0 = no limit */
    int keep_logits;         /* copy the first answer token's logits into the result */
    int cache_f32;           /* 1: cached KV in fp32 even from a bf16 store (widened: twice the memory, the
                                same lazy results; block / prefix copies then not rounded to bf16) */
    const lz_query_backend *backend; /* the engine's question table (engine/engine.h's lz_engine_query)
                                        every mode runs the question and the answer on (prefix: with
                                        keep_own, else the CPU engine's); NULL: the session's own
                                        CPU engine (engine/cpu_query.h, forward calls of batch tokens) */
    int cold;                /* LZ_COLD_LOAD (default), LZ_COLD_RECOMPUTE or LZ_COLD_AUTO (lazy mode, a backend
                                with encode) */
    /* streaming: called with each piece of the answer as it is generated */
    void (*on_piece)(const char *piece, int len, void *ctx);
    void *ctx;
} lz_query_opts;

void lz_query_opts_default(lz_query_opts *o);

typedef struct {
    char *answer;            /* malloc'd, NUL-terminated */
    int *answer_ids;         /* malloc'd */
    int n_answer;
    float *logits;           /* (V) first answer token logits when keep_logits, malloc'd */
    int n_prompt;            /* tokens of the whole prompt */
    int n_computed;          /* tokens this query ran through the model before the first answer token */
    double t_load;           /* seconds fetching/decoding/rotating KV */
    double t_ttft;           /* seconds from the start to the first answer token (load included) */
    double t_decode;         /* seconds generating the rest */
    int64_t hits, misses;    /* cache lookups of this query */
    int64_t bytes_loaded;    /* bytes decoded from the store by this query */
    int n_recomputed;        /* cold documents recomputed on the backend instead of loaded (misses too) */
    double t_recompute;      /* seconds of that (inside t_load) */
} lz_query_result;

void lz_query_result_free(lz_query_result *r);

typedef struct lz_query_session lz_query_session;

/* Binds model m and store s (checked: same model, same prompt prefix). The
 * session borrows both. Errors: LZ_EMODEL and others, with a message. */
int lz_query_session_new(lz_llama *m, lz_store *s, const lz_query_opts *o, lz_query_session **out,
                         char *err, size_t errlen);
void lz_query_session_free(lz_query_session *q);

/* Answers question over docs[0..n_docs) placed in that order (the last one
 * nearest the question). Returns 0, or -1 with a message naming the document
 * or what failed (empty question, prompt too long, corrupt payload, ...), or
 * LZ_QUERY_ENOMEM with a message when memory ran out (a backend hook's, or an
 * allocation for the answer). */
int lz_query_answer(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                    lz_query_result *r, char *err, size_t errlen);

/* What a start-up preload did: documents (and bytes) into the backend's cache and the host
 * tier, those that could not be read, and its seconds. */
typedef struct {
    int gpu, host, failed;
    int64_t gpu_bytes, host_bytes;
    double seconds;
    int host_share; /* lz_query_preload_only: of host, the documents of its own share */
} lz_query_preload_result;

/* Preloads the most frequently hit documents (SQLite access counts), hottest first: into the
 * backend's cache while it has room (backend->preload), and into the host tier until it is
 * full; seeds both caches' frequencies with those counts. all: then the documents never hit
 * too, into the host tier only, while there is room (a host tier that holds the corpus; the
 * backend's cache fills from the questions). 0, or -1 with a message (*res still counts what
 * was done). */
int lz_query_preload(lz_query_session *q, int all, lz_query_preload_result *res, char *err, size_t errlen);
/* The same with a share of the hot set (an engine among several, serve/homes.h): the documents
 * keep (payload key, ctx) says 1 for go into both tiers as above; then the others, hottest
 * first, into the host tier only while it has room (what a request spilled from another
 * engine finds in host memory; the backend's cache holds only the share). Every document's
 * frequency is seeded. */
int lz_query_preload_only(lz_query_session *q, int all, int (*keep)(const uint8_t *payload_key, void *ctx), void *ctx,
                          lz_query_preload_result *res, char *err, size_t errlen);

/* Positions left for documents once the prefix, the question and the answer
 * are placed (max_positions - s - question - max_new_tokens); a large number
 * when max_positions is 0; -1 on allocation failure. */
int64_t lz_query_doc_budget(const lz_query_session *q, const char *question);

void lz_query_cache_stats(const lz_query_session *q, lz_doc_cache_stats *st);
/* The options the session was opened with (max_new_tokens, max_positions, mode, backend, ...). */
const lz_query_opts *lz_query_session_opts(const lz_query_session *q);
/* The rates LZ_COLD_AUTO weighs: decoded KV bytes a second from the store, tokens a second
 * recomputed on the backend (moving averages of what this session measured, or the priors). */
void lz_query_cold_rates(const lz_query_session *q, double *decode_bps, double *recompute_tps);
/* Sets them (rates of an earlier run, or a test's); values <= 0 leave a rate as it is. */
void lz_query_set_cold_rates(lz_query_session *q, double decode_bps, double recompute_tps);
int lz_query_prefix_len(const lz_query_session *q);

#endif /* LZ_QUERY_SESSION_H */
