/* session_priv.h - private to query/: the query session's state, shared by
 * the session itself (session.c: opening, the host tier, preload) and the
 * answers that run over it (answer_run.c: placing documents, prefill,
 * sampling, batched decode steps). Nothing outside query/ includes it. */
#ifndef LZ_QUERY_SESSION_PRIV_H
#define LZ_QUERY_SESSION_PRIV_H

#include "engine/cpu_query.h"
#include "model/sampler.h"
#include "query/kv_entry.h"
#include "query/session.h"
#include "store/payload.h"

struct lz_query_session {
    lz_llama *m;
    lz_store *store;
    lz_query_opts o;
    lz_doc_cache *cache;
    lz_payload_codec *codec;
    kv_entry_env env;    /* how the host tier's entries are made (query/kv_entry.h) */
    /* the CPU engine's question table the answers run on when the backend does not run them: the
     * backend itself when it is one (host sequences: reserve), else the session's own (cpu, made
     * when there is no backend, or in PREFIX mode one without keep_own); NULL: not needed */
    lz_engine_cpu_query *cpu;
    lz_query_backend cpu_table;
    const lz_query_backend *cpu_be;
    lz_sampler sampler;  /* lz_query_answer's: one generator across the session's questions */
    int *prefix;         /* prompt prefix tokens (s) */
    int n_prefix;
    kv_entry prefix_kv;  /* stored once per model */
    int kv16;            /* the store's payloads (so every cached entry) are bf16 or fp8 */
    int kv_elem;         /* bytes an element of a cached entry takes: 1 (fp8 kept), 2 (bf16) or 4 */
    uint8_t prefix_digest[32]; /* the prefix payload's key, hashed (a backend's content key) */
    /* LZ_COLD_AUTO's costs: store decode (bytes/s) and backend recompute (tokens/s) */
    double decode_bps, recompute_tps;
};

/* rate <- the moving average with a new measurement (a weight of 0.3) */
static inline void session_rate_update(double *rate, double amount, double seconds)
{
    if (seconds > 1e-6 && amount > 0) *rate = 0.7 * *rate + 0.3 * (amount / seconds);
}

static inline void session_entry_free(lz_query_session *q, kv_entry *e) { kv_entry_free(&q->env, e); }

/* Reads (zero-copy, from LMDB's map) and decodes the payload of key; checks it belongs to
 * this model. what names the document in errors. NULL with a message on failure, *status
 * (when not NULL) LZ_QUERY_ENOMEM when its entry's memory could not be had, else -1. */
kv_entry *session_load_payload(lz_query_session *q, const uint8_t *key, const char *what, int *status, char *err,
                               size_t errlen);

#endif /* LZ_QUERY_SESSION_PRIV_H */
