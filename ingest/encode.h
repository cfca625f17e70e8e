/* encode.h - turns token ids into stored KV: the prompt prefix is run once
 * (its KV kept in fp32 as an external segment), then every document runs
 * standalone after it, its keys rotated at positions s..s+n-1 (s = prefix
 * length), and is packed into a payload (store/payload.h). One encoder per
 * thread; the model is shared read-only.
 */
#ifndef LZ_ENCODE_H
#define LZ_ENCODE_H

#include <stddef.h>

#include "engine/backend.h"
#include "engine/cpu_encode.h"
#include "ingest/kvlearn.h"
#include "ingest/kvpolicy.h"
#include "model/llama.h"
#include "store/payload.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_encoder lz_encoder;

/* Tokens per forward call on the CPU: LZ_ENCODE_CHUNK (engine/cpu_encode.h). */

/* Runs the prefix through m. Returns 0, or -1 with a message in err. */
int lz_encoder_new(const lz_llama *m, const int *prefix, int n_prefix, lz_encoder **out, char *err,
                   size_t errlen);
void lz_encoder_free(lz_encoder *e); /* NULL is a no-op */

/* Computes the KV of a document of n tokens after the prefix. The result
 * stays in lz_encoder_doc_cache until the next call. */
int lz_encoder_run(lz_encoder *e, const int *ids, int n, char *err, size_t errlen);
const lz_kv_cache *lz_encoder_doc_cache(const lz_encoder *e);
const lz_kv_cache *lz_encoder_prefix_cache(const lz_encoder *e);

/* The key-importance model of policy probe LEARNED (kept by the caller, not
 * copied); NULL unsets it. */
void lz_encoder_set_scorer(lz_encoder *e, const lz_kvlearn *m);
/* Calibration: every run with the reconstruction probe adds its documents'
 * keys and attention-only scores to a (the caller fits and frees it). */
void lz_encoder_set_learn(lz_encoder *e, lz_kvlearn_acc *a);

/* The engine's document pass (lz_encode_backend): engine/backend.h. The
 * encoder runs every forward pass through a table: b's for the documents it
 * takes (at most b->max_tokens, and no probe after them unless it has
 * encode_probe), its own CPU engine's (engine/cpu_encode.h, made with the
 * encoder) for the rest and when none is set. */
void lz_encoder_set_backend(lz_encoder *e, const lz_encode_backend *b);
/* 1 when a document of n tokens may be run in the backend's passes (start,
 * then lz_encoder_run_fetched), with the rows of it the KV policy's window
 * captures (c0, cw; cw = 0: none); else 0 (no backend, too long, or a probe
 * run after it: a pass runs none). */
int lz_encoder_backend_plan(const lz_encoder *e, int n, int *c0, int *cw);
/* lz_encoder_run for a document the backend has already run: document i of
 * its last finished pass (started with lz_encoder_backend_plan's window),
 * taken by fetch instead of computed. Needs a backend with fetch and a plan
 * of 1. */
int lz_encoder_run_fetched(lz_encoder *e, const int *ids, int n, int i, char *err, size_t errlen);
/* lz_encoder_new with the prefix run by b (b->encode before any prefix was
 * set on it: the prefix is then a document at positions 0..n_prefix-1) when
 * n_prefix <= b->max_tokens, else by the encoder's CPU table. An 8B model's
 * prefix takes seconds on the CPU. b is not kept (lz_encoder_set_backend
 * sets one). */
int lz_encoder_new_on(const lz_llama *m, const int *prefix, int n_prefix, const lz_encode_backend *b,
                      lz_encoder **out, char *err, size_t errlen);
/* A new encoder over the same model and prefix as src, the prefix's KV copied
 * (no forward pass); settings (dtype, policy, probe, backend) are not copied.
 * For encoders working side by side (lazyingest's documents in parallel). */
int lz_encoder_new_like(const lz_encoder *src, lz_encoder **out, char *err, size_t errlen);
/* Documents the backend encoded since the encoder was made; those of them
 * scored from the backend's attention masses (fetch_mass). */
long lz_encoder_backend_docs(const lz_encoder *e);
long lz_encoder_mass_docs(const lz_encoder *e);
/* ... of them packed from the backend's planes (fetch_planes). */
long lz_encoder_plane_docs(const lz_encoder *e);

/* Element type of packed payloads: LZ_PAYLOAD_DTYPE_BF16 (default), _F32 or _FP8. */
void lz_encoder_set_dtype(lz_encoder *e, int dtype);

/* KV eviction applied by lz_encoder_run from now on (copied; NULL or kind
 * NONE stores every token). A document it compresses keeps, per (layer, kv
 * head), only the kept tokens, compacted at the front of the cache rows. */
void lz_encoder_set_kvpolicy(lz_encoder *e, const lz_kvpolicy *p);
/* Tokens run after a document only to score it when the policy has
 * probe = LZ_KVPOLICY_PROBE_CUE (e.g. the prompt's question cue,
 * lz_prompt_question_tokens; PROBE_RECONSTRUCT uses the document instead):
 * their queries are the observation window, their keys are dropped.
 * Copied; n = 0 clears. Returns 0 or -1 (out of memory). */
int lz_encoder_set_probe(lz_encoder *e, const int *ids, int n);
/* Kept tokens per (layer, kv head) of the last document, (L, KV), or NULL
 * when it was stored whole. */
const int *lz_encoder_kept(const lz_encoder *e);
/* Seconds spent scoring and selecting (not encoding) since the encoder was made. */
double lz_encoder_policy_seconds(const lz_encoder *e);

/* Packs the last document (doc != 0) or the prefix (doc == 0) into a
 * malloc'd payload blob with codec and zstd level. */
int lz_encoder_pack(lz_encoder *e, int doc, lz_payload_codec *c, int codec, int level, void **blob,
                    size_t *len, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* LZ_ENCODE_H */
