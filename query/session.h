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
#include "model/llama.h"
#include "cache/doc_cache.h"
#include "store/store.h"

typedef enum { LZ_MODE_LAZY = 0, LZ_MODE_BLOCK = 1, LZ_MODE_PREFIX = 2, LZ_MODE_FULL = 3 } lz_query_mode;

const char *lz_query_mode_name(int mode);
int lz_query_mode_parse(const char *s); /* -1 if unknown */

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

/* The status a backend hook returns instead of -1 when it failed for want of memory: device
 * memory for the KV of documents or sequences (the GPU's "no device memory for ..."), or an
 * allocation; its message says what, as for -1. Any hook with a status may return it; begin,
 * begin_block, begin_in, encode and keep_own(_in) are where a request's documents take the
 * backend's memory. lz_query_run_begin, lz_query_run_start (answer_run.h) and lz_query_answer
 * return it unchanged when a hook did, and when an allocation of their own for the request
 * failed: memory that other requests may give back (a scheduler then waits and begins it
 * again, serve/sched.h), where -1 is a failure of the request itself. Negative (-LZ_ENOMEM),
 * as the hooks that count (keep_own, preload: 1 or 0) keep >= 0 for success. */
#define LZ_QUERY_ENOMEM (-LZ_ENOMEM)

/* An accelerated forward pass for the question and the answer (the GPU's,
 * gpu/llama_cuda.h): begin takes the prompt's segments (the prefix and the
 * documents, each with its missing rotation), a 32-byte content key each (the
 * same key, the same KV: the backend may keep it resident) and the position
 * of the first own token; step runs tokens after them and everything stepped
 * before, writing the last token's logits (V floats) when logits is not NULL.
 * A hook that returns a status returns 0 (or its count), -1, or LZ_QUERY_ENOMEM. */
typedef struct {
    void *ctx;
    int (*begin)(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0, char *err,
                 size_t errlen);
    int (*step)(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen);
    /* optional: 1 when the backend still holds the KV of content key, 0 when not; the session
     * then neither loads nor decodes that document and hands begin a segment without data
     * (k, v, k16, v16 NULL; n and rot set). NULL: every document is loaded. */
    int (*resident)(void *ctx, const uint8_t key[32]);
    /* optional: computes the content-only KV of documents from their token ids (ids[i][0..n[i])
     * after the prompt prefix, as lazyingest did) and keeps it under keys[i], so that resident
     * then says 1 (lz_llama_gpu_encode_keep). Used for cold documents with opts.cold =
     * LZ_COLD_RECOMPUTE in lazy mode; NULL: cold documents are loaded. 0, -1 or LZ_QUERY_ENOMEM. */
    int (*encode)(void *ctx, const lz_kv_segment *prefix, const uint8_t *prefix_key, const int *const *ids,
                  const int *n, const uint8_t *const *keys, int n_docs, char *err, size_t errlen);
    /* optional (both or neither): memory for the session's cached KV that the backend copies
     * from fastest (the GPU's pinned host memory: an upload is then one DMA copy), thread-safe;
     * NULL when it has none left (malloc is used). host_free takes the bytes asked for. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p, size_t bytes);
    /* optional: the start-up preload (lz_query_preload): seeds the backend cache's frequency of
     * content key with hits (> 0), and with seg not NULL keeps seg resident while it has room:
     * 1 kept, 0 not (no room, or seg NULL), -1 on error (lz_llama_gpu_preload). */
    int (*preload)(void *ctx, const lz_kv_segment *seg, const uint8_t key[32], double hits, char *err, size_t errlen);
    /* optional: block mode's begin (lz_llama_gpu_begin_block): the same arguments, but a segment
     * comes as its content KV with its placement in rot and a key per (document, placement); the
     * backend makes and keeps the rotated copy itself. Then the host tier holds each document's
     * content KV once (shared by every placement) and never rotates. NULL: the session rotates
     * a copy per placement on the CPU and hands begin those, at rot 0. */
    int (*begin_block)(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                       char *err, size_t errlen);
    /* optional (with resident): prefix mode on the backend: keeps the KV of the own tokens
     * t0..t0+n-1 stepped so far (a document computed in its prompt) under key (the chain's),
     * offered to its cache; resident then finds it and begin takes it without data, at rot 0.
     * 1 kept, 0 not (turned away), -1 on error (lz_llama_gpu_keep_own). NULL: prefix mode runs
     * on the CPU. Full mode runs on any backend: its whole prompt in one step. */
    int (*keep_own)(void *ctx, int t0, int n, const uint8_t key[32], char *err, size_t errlen);
    /* optional: a question failed after begin: returns once the backend no longer reads the
     * segments' memory it was handed (copies in flight), before the session frees it */
    void (*settle)(void *ctx);
    /* optional (n_slots > 1 with idle_slot, begin_in, step_in, release and decode_many): several
     * sequences at once (continuous batching, serve/). The backend holds n_slots sequences, each
     * of up to seq_tokens own tokens (question and answer; the whole prompt in full mode, the
     * documents not reused and the question in prefix mode; 0: no bound). idle_slot: one no
     * sequence holds, or -1; begin_in / step_in / keep_own_in: begin (begin_block when block) /
     * step / keep_own in that slot; release: the slot's sequence ends (its documents unpinned;
     * a no-op on a slot not begun). prefill_many (optional: else step_in one by one) runs the
     * rows ids[i][0..n[i]) of slots[i] for i < n_seqs in one batched pass, logits[i] (V floats,
     * NULL: none) the last row's of each; decode_many runs one token ids[i] for each slots[i] in
     * one pass, logits[i] each one's. fits (optional): 1 when a new sequence whose documents
     * hold doc_tokens tokens can be begun now, 0 when it should wait for one to end. With
     * n_slots <= 1 the hooks above serve one sequence at a time. */
    int n_slots, seq_tokens;
    int (*idle_slot)(void *ctx);
    int (*begin_in)(void *ctx, int slot, int block, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                    int64_t pos0, char *err, size_t errlen);
    int (*step_in)(void *ctx, int slot, const int *ids, int n, float *logits, char *err, size_t errlen);
    int (*keep_own_in)(void *ctx, int slot, int t0, int n, const uint8_t key[32], char *err, size_t errlen);
    void (*release)(void *ctx, int slot);
    int (*prefill_many)(void *ctx, const int *slots, const int *const *ids, const int *n, int n_seqs,
                        float *const *logits, char *err, size_t errlen);
    int (*decode_many)(void *ctx, const int *slots, const int *ids, int n, float *const *logits, char *err,
                       size_t errlen);
    int (*fits)(void *ctx, int64_t doc_tokens);
    /* optional: a decode pass (decode_many over slots, or slots NULL: step of one token of the
     * one sequence) that also hands back each row's greedy tokens where its logits are:
     * next[2i] = lz_sample_argmax of row i's logits, next[2i + 1] the same with ban[0..n_ban)
     * at -inf (n_ban <= LZ_ARGMAX_MAX_BAN, kernels/lz_argmax.h); logits[i] NULL: row i's logits
     * are not wanted (none move). The session asks it for the answers that sample greedily. */
    int (*decode_next)(void *ctx, const int *slots, const int *ids, int n, float *const *logits, int *next,
                       const int *ban, int n_ban, char *err, size_t errlen);
    /* 1: begin and preload read fp8 segments (lz_kv_segment.k8; the GPU's kernels dequantise in
     * registers), so the host tier keeps an fp8 store's documents as stored: half the bytes of
     * bf16 to hold and to copy (as without a backend: the CPU engine reads fp8 too). 0: they are
     * dequantised to bf16 first. */
    int reads_fp8;
} lz_query_backend;

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
    int batch;               /* forward chunk (tokens) */
    int max_positions;       /* refuse prompts (+ answer) longer than this; 0 = no limit */
    int keep_logits;         /* copy the first answer token's logits into the result */
    int cache_f32;           /* 1: cached KV in fp32 even from a bf16 store (widened: twice the memory, the
                                same lazy results; block / prefix copies then not rounded to bf16) */
    const lz_query_backend *backend; /* lazy and block modes run the question and answer there; NULL: CPU */
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
