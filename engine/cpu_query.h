/* cpu_query.h - the CPU engine's question table (engine/backend.h's
 * lz_query_backend) over model/: any number of sequences at once, each its
 * own KV in host memory (reserved for the rows it will hold) over the
 * segments its begin was handed, run through lz_llama_forward (one sequence,
 * in calls of the table's batch tokens) or lz_llama_forward_batch (several
 * in one pass), on the caller's thread and its OpenMP threads. One caller
 * at a time (a query session's thread). What it leaves out: every hook of
 * a device's cache (resident, encode, preload, begin_block, keep_own, fits,
 * host memory of its own) and greedy tokens chosen on it (decode_next): the
 * session keeps its host tier and samples.
 *
 * Legend: n = a call's tokens, V = vocabulary.
 */
#ifndef LZ_ENGINE_CPU_QUERY_H
#define LZ_ENGINE_CPU_QUERY_H

#include "engine/backend.h"
#include "model/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_engine_cpu_query lz_engine_cpu_query;

/* Over model m (borrowed; it outlives the table), forward calls of at most
 * batch tokens (a longer step runs in chunks of batch; <= 0: 256). NULL when
 * out of memory. */
lz_engine_cpu_query *lz_engine_cpu_query_new(const lz_llama *m, int batch);
void lz_engine_cpu_query_free(lz_engine_cpu_query *c); /* NULL is a no-op; every sequence's memory goes */
/* The table over c: idle_slot, reserve, begin_in, step_in, own_kv, release, prefill_many,
 * decode_many; n_slots 0 (any number), seq_tokens 0 (no bound), reads_fp8 1 (model/attention.c
 * reads e4m3 segments as stored). */
void lz_engine_cpu_query_table(lz_engine_cpu_query *c, lz_query_backend *b);

#ifdef __cplusplus
}
#endif
#endif /* LZ_ENGINE_CPU_QUERY_H */
