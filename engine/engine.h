/* engine.h - the compute engine every program runs its forward passes on,
 * opened by one call for the CPU or a GPU and used through the same calls:
 * lazyingest's documents (lz_engine_encoder), lazyquery's, lazyeval's and
 * lazyserve's questions (lz_engine_query), the GPU tier's figures. The two
 * tables it hands out are engine/backend.h's, filled by either engine: the
 * CPU engine's run model/'s forward pass on the caller's threads and their
 * OpenMP threads (engine/cpu_query.h: any number of sequences in host
 * memory; engine/cpu_encode.h: documents from any number of threads), the
 * GPU engine's gpu/llama_cuda.h. The encoder and the query session make a
 * CPU table of their own when they are given none, and hand it what the
 * given one does not take (ingest/encode.h, query/session.h).
 *
 * Which engines a program has is settled at link time, not by #ifdef: the
 * programs of 'make cuda' link engine/engine_gpu.c (the GPU engine,
 * gpu/llama_cuda.h); the others get the library's engine_cpu_only.c, where
 * lz_engine_gpu_built() is 0, lz_engine_gpu_count() is 0 and opening a GPU
 * engine fails with a message saying which build has one.
 *
 * Threads: CUDA's current device is a property of the host thread. Opening
 * a GPU engine makes its device current on the calling thread; a thread that
 * then drives its question table must make it current first
 * (lz_engine_use_device: serve/'s engine threads do at start). The encoder
 * table's hooks make it current themselves on every call (lazyingest calls
 * them from many threads), and take turns on the engine for whole-document
 * passes.
 */
#ifndef LZ_ENGINE_ENGINE_H
#define LZ_ENGINE_ENGINE_H

#include <stddef.h>

#include "cache/doc_cache.h"
#include "engine/backend.h"
#include "model/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_engine lz_engine;

typedef struct {
    int gpu;            /* 0: the CPU engine; 1: a GPU engine */
    int device;         /* its CUDA device (-1: the thread's current one, device 0 unless set) */
    int own_tokens;     /* GPU: rows of its sequence (the question and the answer, or in full and
                           prefix modes the prompt's documents too; ingest: its longest pass or
                           document); 0: 4,096 */
    size_t gpu_cache;   /* GPU: its document tier's budget in bytes (0: the engine's default) */
    int cache_policy;   /* GPU: the tier's policy, LZ_CACHE_LFU (0) or LZ_CACHE_LRU */
    int batch;          /* CPU: tokens a forward call of its question table takes (lz_query_opts.batch;
                           0: 256) */
} lz_engine_opts;

/* 1 when this program can open GPU engines (it was linked by 'make cuda'), else 0. */
int lz_engine_gpu_built(void);
/* CUDA devices the GPU engine can use (0 without any, and in a CPU build). */
int lz_engine_gpu_count(void);
/* Makes device dev current on the calling thread; dev < 0 and the CPU build: a no-op. 0 or -1. */
int lz_engine_use_device(int dev, char *err, size_t errlen);

/* Opens an engine over model m (borrowed; it outlives the engine). A GPU engine uploads the
 * weights (seconds at 8B); the CPU engine makes its question table's scratch. 0, or -1 with a
 * message in err (a GPU in a CPU build, no device, not enough device or host memory). */
int lz_engine_open(const lz_llama *m, const lz_engine_opts *o, lz_engine **out, char *err, size_t errlen);
void lz_engine_free(lz_engine *e); /* NULL is a no-op */

int lz_engine_is_gpu(const lz_engine *e);
int lz_engine_device(const lz_engine *e); /* as opened (-1: the current one; the CPU: -1) */
/* The GPU tier's budget as granted: below the one asked for when the device had less memory
 * free (the caller says so), else that one; 0 for the CPU engine. */
size_t lz_engine_gpu_cache(const lz_engine *e);

/* ---- questions ---- */

/* The query session's table (lz_query_opts.backend), owned by e, at a fixed address: every hook
 * the engine has, its slots as lz_engine_set_slots made them (the CPU engine: engine/cpu_query.h,
 * any number of sequences; one session at a time reads it, as a GPU engine's). */
const lz_query_backend *lz_engine_query(lz_engine *e);
/* Several sequences at once: n slots of seq_tokens own rows each, sized against the device's free
 * memory (the GPU tier lowered to what is left). Updates the table in place (n_slots,
 * seq_tokens). 0, LZ_QUERY_ENOMEM (the message says how many fit) or -1; the CPU engine: -1 (its
 * table holds any number, each sized when it begins). */
int lz_engine_set_slots(lz_engine *e, int n, int seq_tokens, char *err, size_t errlen);

/* The GPU tier's figures: its policy's counts and its memory and copies. Zeros for the CPU engine. */
typedef struct {
    int64_t copies, bytes_in;     /* documents copied into device memory, and their bytes */
    double copy_s;                /* device seconds those copies took */
    size_t pool_bytes, pool_used; /* the device pool: its regions' bytes, those in documents */
    int pool_regions;
    int64_t pool_grows, pool_evictions; /* how often it grew; documents that left only for fragmentation */
    size_t pinned_bytes, pinned_used;   /* the pinned host pool the host tier copies from */
    /* batched decode steps whose attention ran grouped by document (kernels/lz_decode_group.h),
     * and their document blocks read against those their rows placed */
    int64_t grouped_steps, grouped_blocks_read, grouped_blocks_placed;
} lz_engine_tiers;
void lz_engine_tier_stats(lz_engine *e, lz_doc_cache_stats *policy, lz_engine_tiers *t);
/* The tier's policy counts with e as a void * (serve/sched.h's tier_stats, eval's gpu_tier). */
void lz_engine_policy_stats(void *e, lz_doc_cache_stats *st);
/* The grouped-decode counts of lz_engine_tiers with e as a void * (serve/sched.h's decode_stats). */
void lz_engine_decode_stats(void *e, int64_t *grouped_steps, int64_t *blocks_read, int64_t *blocks_placed);

/* ---- documents ---- */

typedef struct {
    int max_tokens;   /* the longest document a whole-document pass takes */
    int pass_tokens;  /* > 0: several documents in a pass of that many tokens (start / finish / fetch) */
    int masses;       /* 1: KV eviction's attention masses from the engine (fetch_mass) */
    int planes;       /* 1 (with passes): stored-dtype planes from the engine (fetch_planes) */
} lz_engine_encode_opts;
/* The encoder's table (lz_encoder_set_backend) over e, its ctx e's. The CPU engine's
 * (engine/cpu_encode.h): encode and encode_probe for documents of at most o->max_tokens, callable
 * from every thread at once, no passes, masses or planes (o's other fields unused); a table
 * without hooks when out of memory (the encoder then uses its own). */
lz_encode_backend lz_engine_encoder(lz_engine *e, const lz_engine_encode_opts *o);
/* The prompt prefix's KV on the engine, which the document passes run after; fp8: the passes'
 * planes quantised to e4m3 on the device (an fp8 store; 2: read back as fp8 planes only, every
 * document stored whole: llama_cuda.h). 0 or -1. The CPU engine reads prefix
 * where it is (borrowed: alive while documents run; fp8 unused, the encoder packs its payloads). */
int lz_engine_set_prefix(lz_engine *e, const lz_kv_cache *prefix, int fp8, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* LZ_ENGINE_ENGINE_H */
