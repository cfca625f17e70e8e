/* gpu_backend.h - the GPU engine (gpu/llama_cuda.h) as the query session's
 * backend (lz_query_backend): every hook the engine has, its slots (several
 * sequences at once, when lz_llama_gpu_set_slots made more than one) among
 * them, and that it reads fp8 documents; the engine's LZ_LLAMA_GPU_ENOMEM is
 * the hooks' LZ_QUERY_ENOMEM. The one wiring of the CUDA builds of
 * lazyquery, lazyeval, lazyserve and bench_serve. Compiled only with LZ_CUDA
 * (the Makefile's CUDA section); the CPU build sees nothing here. */
#ifndef LZ_QUERY_GPU_BACKEND_H
#define LZ_QUERY_GPU_BACKEND_H

#ifdef LZ_CUDA
#include "gpu/llama_cuda.h"
#include "query/session.h"

/* An engine call's status as a hook's: its shortage of memory as LZ_QUERY_ENOMEM, the rest as it is. */
static inline int lz_query_gpu_status(int rc) { return rc == LZ_LLAMA_GPU_ENOMEM ? LZ_QUERY_ENOMEM : rc; }

static inline int lz_query_gpu_begin(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                             int64_t pos0, char *err, size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_begin((lz_llama_gpu *)ctx, segs, keys, n_segs, pos0, err, errlen));
}
static inline int lz_query_gpu_begin_block(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                                   int64_t pos0, char *err, size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_begin_block((lz_llama_gpu *)ctx, segs, keys, n_segs, pos0, err, errlen));
}
static inline void lz_query_gpu_settle(void *ctx) { lz_llama_gpu_settle((lz_llama_gpu *)ctx); }
static inline int lz_query_gpu_keep_own(void *ctx, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_keep_own((lz_llama_gpu *)ctx, t0, n, key, err, errlen));
}
static inline int lz_query_gpu_step(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_step((lz_llama_gpu *)ctx, ids, n, logits, err, errlen));
}
static inline int lz_query_gpu_resident(void *ctx, const uint8_t key[32])
{
    return lz_llama_gpu_resident((lz_llama_gpu *)ctx, key);
}
static inline void *lz_query_gpu_host_alloc(void *ctx, size_t bytes)
{
    return lz_llama_gpu_host_alloc((lz_llama_gpu *)ctx, bytes);
}
static inline void lz_query_gpu_host_free(void *ctx, void *p, size_t bytes)
{
    lz_llama_gpu_host_free((lz_llama_gpu *)ctx, p, bytes);
}
static inline int lz_query_gpu_preload(void *ctx, const lz_kv_segment *seg, const uint8_t key[32], double hits, char *err,
                               size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_preload((lz_llama_gpu *)ctx, seg, key, hits, err, errlen));
}
static inline int lz_query_gpu_encode(void *ctx, const lz_kv_segment *prefix, const uint8_t *prefix_key,
                              const int *const *ids, const int *n, const uint8_t *const *keys, int n_docs, char *err,
                              size_t errlen)
{
    return lz_query_gpu_status(
        lz_llama_gpu_encode_keep((lz_llama_gpu *)ctx, prefix, prefix_key, ids, n, keys, n_docs, err, errlen));
}

/* the slots: several sequences at once */
static inline int lz_query_gpu_idle_slot(void *ctx) { return lz_llama_gpu_idle_slot((const lz_llama_gpu *)ctx); }
static inline int lz_query_gpu_begin_in(void *ctx, int slot, int block, const lz_kv_segment *segs, const uint8_t *const *keys,
                                int n_segs, int64_t pos0, char *err, size_t errlen)
{
    return lz_query_gpu_status((block ? lz_llama_gpu_begin_block_slot : lz_llama_gpu_begin_slot)(
        (lz_llama_gpu *)ctx, slot, segs, keys, n_segs, pos0, err, errlen));
}
static inline int lz_query_gpu_step_in(void *ctx, int slot, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_step_slot((lz_llama_gpu *)ctx, slot, ids, n, logits, err, errlen));
}
static inline int lz_query_gpu_keep_own_in(void *ctx, int slot, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    return lz_query_gpu_status(lz_llama_gpu_keep_own_slot((lz_llama_gpu *)ctx, slot, t0, n, key, err, errlen));
}
static inline void lz_query_gpu_release(void *ctx, int slot) { lz_llama_gpu_release((lz_llama_gpu *)ctx, slot); }
static inline int lz_query_gpu_prefill_many(void *ctx, const int *slots, const int *const *ids, const int *n, int n_seqs,
                                    float *const *logits, char *err, size_t errlen)
{
    return lz_query_gpu_status(
        lz_llama_gpu_prefill_many((lz_llama_gpu *)ctx, slots, ids, n, n_seqs, logits, err, errlen));
}
static inline int lz_query_gpu_decode_many(void *ctx, const int *slots, const int *ids, int n, float *const *logits, char *err,
                                   size_t errlen)
{
    return lz_query_gpu_status(
        lz_llama_gpu_decode_many_rows((lz_llama_gpu *)ctx, slots, ids, n, logits, err, errlen));
}
static inline int lz_query_gpu_decode_next(void *ctx, const int *slots, const int *ids, int n, float *const *logits,
                                           int *next, const int *ban, int n_ban, char *err, size_t errlen)
{
    lz_llama_gpu *g = (lz_llama_gpu *)ctx;
    const int rc = lz_llama_gpu_set_ban(g, ban, n_ban, err, errlen); /* a no-op when it is the same list */
    return lz_query_gpu_status(rc ? rc : lz_llama_gpu_decode_next(g, slots, ids, n, logits, next, err, errlen));
}
static inline int lz_query_gpu_fits(void *ctx, int64_t doc_tokens) { return lz_llama_gpu_fits((const lz_llama_gpu *)ctx, doc_tokens); }

/* The backend of engine g (every hook set; its slots as lz_llama_gpu_set_slots made them: one
 * sequence at a time unless it made several). */
static inline lz_query_backend lz_query_gpu_backend(lz_llama_gpu *g)
{
    lz_query_backend b = {.ctx = g, .begin = lz_query_gpu_begin, .step = lz_query_gpu_step,
                          .resident = lz_query_gpu_resident, .encode = lz_query_gpu_encode,
                          .host_alloc = lz_query_gpu_host_alloc, .host_free = lz_query_gpu_host_free,
                          .preload = lz_query_gpu_preload, .begin_block = lz_query_gpu_begin_block,
                          .keep_own = lz_query_gpu_keep_own, .settle = lz_query_gpu_settle,
                          .n_slots = lz_llama_gpu_slots(g), .seq_tokens = lz_llama_gpu_slot_tokens(g),
                          .idle_slot = lz_query_gpu_idle_slot, .begin_in = lz_query_gpu_begin_in,
                          .step_in = lz_query_gpu_step_in, .keep_own_in = lz_query_gpu_keep_own_in,
                          .release = lz_query_gpu_release, .prefill_many = lz_query_gpu_prefill_many,
                          .decode_many = lz_query_gpu_decode_many, .fits = lz_query_gpu_fits,
                          .decode_next = lz_query_gpu_decode_next,
                          .reads_fp8 = 1};
    return b;
}

/* The engine's cache tier counters, as lz_eval_run_opts.gpu_tier wants them. */
static inline void lz_query_gpu_tier(void *ctx, lz_doc_cache_stats *st)
{
    lz_llama_gpu_cache_policy_stats((const lz_llama_gpu *)ctx, st);
}
#endif /* LZ_CUDA */

#endif /* LZ_QUERY_GPU_BACKEND_H */
