/* backend.h - the two faces of a compute engine (engine/engine.h), as the
 * pipelines read them: the encoder's (lz_encode_backend: documents run after
 * the prompt prefix, ingest/encode.h) and the query session's
 * (lz_query_backend: a question and its answer over KV segments, several
 * sequences at once, query/session.h). Both engines fill both: the GPU
 * engine (engine/engine_gpu.c) and the CPU engine over model/
 * (engine/cpu_encode.h, engine/cpu_query.h), which the encoder and the
 * session also make for themselves, so every forward pass they run goes
 * through a table. Tests and the CPU reference of passes (ingest/pass_ref.h)
 * fill them too. Each hook says which engine has it; a table leaves out
 * what its engine does not do.
 */
#ifndef LZ_ENGINE_BACKEND_H
#define LZ_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A forward pass for documents (gpu/llama_cuda.h on a GPU, model/ on the
 * CPU): encode(ctx, ids, n, out, qwin, c0, cw) runs ids[0..n) after the
 * prefix into out, as lz_llama_forward with the prefix as a segment would
 * (to its own precision: bf16 on the GPU), and when cw > 0 writes the rotated
 * queries of rows c0..c0+cw-1 to qwin (L, cw, H, d), the KV policy's
 * observation window. lz_encoder_run uses it for documents of at most
 * max_tokens whose policy runs no probe after the document, or runs one and
 * the table has encode_probe (the GPU's has not: the cue and reconstruction
 * probes go to the encoder's CPU table). Not owned; NULL unsets it. */
typedef struct {
    void *ctx;
    int (*encode)(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                  size_t errlen);
    int max_tokens;
    /* Optional (NULL: one document a call): several documents in a pass of
     * at most pass_tokens tokens. start enqueues one: ids[i][0..n[i]) run as
     * encode would with window (c0[i], cw[i]); finish waits for it, and from
     * then until the next finish fetch writes document i's result into out
     * and qwin (as encode), on any number of threads at once (the host packs
     * one pass while the device runs the next). lz_encoder_run_fetched. */
    int (*start)(void *ctx, const int *const *ids, const int *n, const int *c0, const int *cw, int n_docs, char *err,
                 size_t errlen);
    int (*finish)(void *ctx, char *err, size_t errlen);
    int (*fetch)(void *ctx, int i, lz_kv_cache *out, float *qwin, char *err, size_t errlen);
    /* Optional: KV eviction's attention masses of document i of the finished
     * pass (lz_kvpolicy_mass's (L, KV, G, m)) when the backend made them (a
     * window of the document's last rows): 1 and mass written, else 0. The
     * encoder then only finishes the scoring (lz_kvpolicy_finish). */
    int (*fetch_mass)(void *ctx, int i, float *mass);
    int pass_tokens;
    /* Optional: document i of the finished pass as planes already of payload dtype
     * (lz_payload_src's k_planes ...: (L, KV, n, d) back to back; fp8 with its (L, KV)
     * scales), valid until the next finish, for a document of n tokens stored whole (no KV
     * eviction): 1 and the pointers set, 0 when the backend has none of that dtype, -1 on
     * error (err; document i has other than n rows, a NaN or Inf in its K or V). The
     * encoder copies them out at once (the next finish may overwrite them while it packs)
     * and packs them as they are, nothing widened or narrowed on the host: the payload's
     * bytes are those of fetch's path. */
    int (*fetch_planes)(void *ctx, int i, int n, int dtype, const void **k, const void **v, const float **k_scales,
                        const float **v_scales, char *err, size_t errlen);
    /* Optional (the CPU engine's): encode of ids[0..n) followed by the KV policy's probe
     * pids[0..n_pids) at rows n..n+n_pids-1 of out, whose rotated queries are written to qwin
     * (L, n_pids, H, d): out then holds n + n_pids rows (the encoder drops the probe's once it
     * has scored them). NULL: the encoder hands documents a probe follows to its own CPU table. */
    int (*encode_probe)(void *ctx, const int *ids, int n, const int *pids, int n_pids, lz_kv_cache *out, float *qwin,
                        char *err, size_t errlen);
} lz_encode_backend;

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
     * a copy per placement on the host and hands begin those, at rot 0. */
    int (*begin_block)(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                       char *err, size_t errlen);
    /* optional (with resident): prefix mode on the backend: keeps the KV of the own tokens
     * t0..t0+n-1 stepped so far (a document computed in its prompt) under key (the chain's),
     * offered to its cache; resident then finds it and begin takes it without data, at rot 0.
     * 1 kept, 0 not (turned away), -1 on error (lz_llama_gpu_keep_own). NULL: prefix mode runs
     * on the CPU engine's table (own_kv: its documents kept in the host tier). Full mode runs on
     * any backend: its whole prompt in one step (host sequences: a step a document, below). */
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
    /* optional (both or neither; with the slot hooks and prefill_many): sequences whose own KV
     * is host memory (the CPU engine's, engine/cpu_query.h). reserve: before begin_in, the slot's
     * sequence will hold n_own own rows, its memory taken now (0, or LZ_QUERY_ENOMEM with the
     * message); own_kv: the rows stepped so far, read-only until the next step or release. Such
     * a table holds any number of sequences (n_slots unused: idle_slot finds one while memory
     * lasts; lz_query_run_parallel 0) and reads the segments begin_in was handed until release
     * (the caller keeps them). The session counts the rows in the answer's memory
     * (lz_query_run_bytes) and steps FULL's prefix and each document computed in the prompt one
     * call each, the question apart (a forward pass's chunks set its rounding: these are where
     * the CPU always cut them); PREFIX copies each such document's rows from own_kv into the
     * host tier. */
    int (*reserve)(void *ctx, int slot, int64_t n_own, char *err, size_t errlen);
    const lz_kv_cache *(*own_kv)(void *ctx, int slot);
} lz_query_backend;

#ifdef __cplusplus
}
#endif
#endif /* LZ_ENGINE_BACKEND_H */
