/* cpu_encode.h - the CPU engine's document table (engine/backend.h's
 * lz_encode_backend) over model/: a document runs after the prompt prefix
 * through lz_llama_forward in calls of LZ_ENCODE_CHUNK tokens, the KV policy's
 * window queries captured on the way, a probe's tokens run after it when
 * asked (encode_probe). Callable from any number of threads at once: each
 * call takes a scratch of its own from the table's (made on demand, kept
 * for the next call), so one table serves every encoder of a run and its
 * OpenMP threads. What it leaves out: passes of several documents (start /
 * finish / fetch: the GPU's, ingest/pass_ref.h's), masses and planes.
 *
 * Legend: s = prefix length, n = document tokens, L/H/d = layers, query
 * heads, head_dim.
 */
#ifndef LZ_ENGINE_CPU_ENCODE_H
#define LZ_ENGINE_CPU_ENCODE_H

#include "engine/backend.h"
#include "model/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens per forward call. Fixed, so a payload depends only on the model,
 * the prefix and the document's tokens (chunking changes float rounding). */
#define LZ_ENCODE_CHUNK 256

typedef struct lz_engine_cpu_encode lz_engine_cpu_encode;

/* Over model m (borrowed; it outlives the table), with one scratch made now.
 * NULL when out of memory. */
lz_engine_cpu_encode *lz_engine_cpu_encode_new(const lz_llama *m);
void lz_engine_cpu_encode_free(lz_engine_cpu_encode *c); /* NULL is a no-op */
/* The prompt prefix the documents run after: prefix's rows (borrowed, alive
 * while the table is used; keys rotated at 0..s-1). NULL or none set: a
 * document runs at positions 0..n-1 (the prefix's own pass). */
void lz_engine_cpu_encode_set_prefix(lz_engine_cpu_encode *c, const lz_kv_cache *prefix);
/* The table over c: encode and encode_probe, documents of at most max_tokens
 * (<= 0: any length). */
lz_encode_backend lz_engine_cpu_encode_table(lz_engine_cpu_encode *c, int max_tokens);

#ifdef __cplusplus
}
#endif
#endif /* LZ_ENGINE_CPU_ENCODE_H */
