/* engine_gpu_ops.h - private to engine/: what the GPU engine (engine_gpu.c,
 * linked into the programs of 'make cuda') gives engine.c, as one table behind
 * one symbol, so that the library's stand-in (engine_cpu_only.c: no table) is
 * replaced whole at link time: an object that defines lz_engine_gpu_ops,
 * linked before the library, keeps the archive's member out.
 */
#ifndef LZ_ENGINE_GPU_OPS_H
#define LZ_ENGINE_GPU_OPS_H

#include "engine/engine.h"

typedef struct {
    int (*count)(void);
    int (*use)(int dev, char *err, size_t errlen);
    /* a GPU engine's context on o->device (made current first), or NULL with err; *granted: its tier budget */
    void *(*open)(const lz_llama *m, const lz_engine_opts *o, size_t *granted, char *err, size_t errlen);
    void (*close)(void *ctx);
    void (*query)(void *ctx, lz_query_backend *b); /* fills the question table (again after set_slots) */
    int (*set_slots)(void *ctx, int n, int seq_tokens, char *err, size_t errlen);
    void (*tiers)(void *ctx, lz_doc_cache_stats *policy, lz_engine_tiers *t);
    lz_encode_backend (*encoder)(void *ctx, const lz_engine_encode_opts *o);
    int (*set_prefix)(void *ctx, const lz_kv_cache *prefix, int fp8, char *err, size_t errlen);
} lz_engine_gpu_table;

/* The GPU engine's table, or NULL in a program without one. */
const lz_engine_gpu_table *lz_engine_gpu_ops(void);

#endif /* LZ_ENGINE_GPU_OPS_H */
