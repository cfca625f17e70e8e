/* llama_cuda.h - the Llama forward pass on an NVIDIA GPU for ingest: runs a
 * document's tokens after the prompt prefix (an external KV segment at
 * positions 0..s-1) and returns their K (rotated at s..s+n-1) and V of every
 * layer, as lz_llama_forward does on the CPU. bf16 weights and activations
 * on the tensor cores (cuBLAS GEMMs, fp32 accumulation and residual stream),
 * attention by kernels/lz_prefill (the non-lazy kernel: every key is already
 * at its final position); it can capture the observation window's queries
 * for KV eviction (probes that run more tokens stay on the CPU). And the query side: a question and its
 * answer over cached documents placed anywhere (lz_prefill_lazy).
 *
 * Legend: s = prefix tokens, n = document tokens, L = layers, KV = kv heads,
 * d = head_dim.
 */
#ifndef LZ_LLAMA_CUDA_H
#define LZ_LLAMA_CUDA_H

#include "model/llama.h"
#include "cache/doc_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_llama_gpu lz_llama_gpu;

/* What the query side's calls below return instead of -1 when they failed for want of
 * memory, with the message as ever: device memory for documents' KV (the HBM pool could not
 * grow and nothing unpinned could leave: "GPU: no device memory for ..."), for the slots or a
 * batch's tables, or a host allocation. Returned by lz_llama_gpu_encode_keep, _keep_own(_slot),
 * _preload, _set_slots, _prefill_many, _decode_many(_rows) and the begins (lz_llama_gpu_begin,
 * _begin_block and their _slot forms). Negative (-LZ_ENOMEM), as the calls that count
 * (keep_own, preload: 1 or 0) keep >= 0 for success. */
#define LZ_LLAMA_GPU_ENOMEM (-LZ_ENOMEM)


/* Visible CUDA devices (0 without a driver or device), and making device dev
 * the calling thread's current one (0, or -1 with a message naming it). A g
 * lives on the device current at lz_llama_gpu_new; any thread calling it must
 * have made that device current. */
int lz_llama_gpu_device_count(void);
int lz_llama_gpu_use_device(int dev, char *err, size_t errlen);

/* Uploads m's weights (as bf16) to the current device for documents of up to
 * max_tokens tokens (m must outlive g: the output head follows at the first
 * question). Returns 0, or -1 with a message in err. */
int lz_llama_gpu_new(const lz_llama *m, int max_tokens, lz_llama_gpu **out, char *err, size_t errlen);
void lz_llama_gpu_free(lz_llama_gpu *g); /* NULL is a no-op */

/* The prompt prefix's KV (prefix->n tokens from position prefix->pos0 = 0),
 * uploaded as bf16 and attended by every later document. */
int lz_llama_gpu_set_prefix(lz_llama_gpu *g, const lz_kv_cache *prefix, char *err, size_t errlen);

/* Runs ids[0..n) at positions s..s+n-1 over the prefix; out (cap >= n)
 * receives their K and V (rows 0..n-1 of every (layer, kv head)), out->n = n,
 * out->pos0 = s. With qwin and cw > 0, qwin (L, cw, H, d) also receives the
 * rotated queries of rows c0..c0+cw-1 (KV eviction's observation window), as
 * lz_llama_scratch_capture does on the CPU. */
int lz_llama_gpu_encode(lz_llama_gpu *g, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw,
                        char *err, size_t errlen);
/* Several documents in one pass over the weights (lazyingest's batches):
 * runs each ids[i][0..n[i]) at positions s..s+n[i]-1 over the prefix, its
 * own causal attention (the documents' attention side by side on streams),
 * the n[i] summing to at most max_tokens; with cw (NULL: none) and cw[i] > 0
 * it captures document i's window rows c0[i]..c0[i]+cw[i]-1 as
 * lz_llama_gpu_encode does. The results stay in g's pinned memory until the
 * next call; lz_llama_gpu_encoded copies document i's into out (cap >= n[i],
 * K and V widened to fp32) and qwin ((L, cw[i], H, d)), and only reads g:
 * several threads may fetch side by side. lz_llama_gpu_encode is this with
 * one document. 0, or -1 with a message (nothing kept). */
int lz_llama_gpu_encode_many(lz_llama_gpu *g, const int *const *ids, const int *n, const int *c0, const int *cw,
                             int n_docs, char *err, size_t errlen);
/* encode_many in two halves, so that the host works while the device does:
 * start checks and enqueues a pass (nothing read back); finish waits for
 * it and reads it back, the previous pass's results staying fetchable until
 * then. 0, or -1 with a message (after a failed start, finish fails too,
 * and leaves the previous pass's results). */
int lz_llama_gpu_encode_start(lz_llama_gpu *g, const int *const *ids, const int *n, const int *c0, const int *cw,
                              int n_docs, char *err, size_t errlen);
int lz_llama_gpu_encode_finish(lz_llama_gpu *g, char *err, size_t errlen);
int lz_llama_gpu_encoded(const lz_llama_gpu *g, int i, lz_kv_cache *out, float *qwin, char *err, size_t errlen);
/* KV eviction's attention masses of document i of the last finished pass
 * (kernels/lz_kvmass.h: (L, KV, G, m), m = n - cw, or n when cw = n), made
 * when its window was its last cw rows (c0 + cw = n) and the shape suits
 * the kernel (G <= 8, head_dim 64 or 128): 1 and mass written, else 0. */
int lz_llama_gpu_encoded_mass(const lz_llama_gpu *g, int i, float *mass);
/* Passes finished from now on also quantise their documents to fp8 e4m3 on the device
 * (kernels/lz_fp8_quant.h: a scale a (K or V, layer, kv head), the store's fp8 payload), so
 * that encoded_planes can hand fp8 bytes; on (1) or off (0, the default). 2: on, and the
 * passes' documents are read back as fp8 planes only (every document is stored whole: no
 * bf16 copy crosses the bus; encoded then fails for a document of a pass, while one-document
 * calls, encode_one, still read back bf16). */
void lz_llama_gpu_set_encode_fp8(lz_llama_gpu *g, int on);
/* Document i (of n tokens) of the last finished pass as planes of payload dtype (store/payload.h's
 * LZ_PAYLOAD_DTYPE_BF16, or _FP8 after set_encode_fp8), in g's pinned memory until the next
 * finish: *k, *v (L, KV, n, d) back to back; fp8: *k_scales, *v_scales (L, KV). 1 with the
 * pointers set, 0 when g has none of that dtype, -1 with err (i out of range, another length; fp8: a NaN or
 * Inf in the document's K or V, named by part, layer and kv head). Only reads g. */
int lz_llama_gpu_encoded_planes(const lz_llama_gpu *g, int i, int n, int dtype, const void **k, const void **v,
                                const float **k_scales, const float **v_scales, char *err, size_t errlen);

/* Query side (lazy placement): begin takes a prompt's segments (the prefix
 * and cached documents as lz_kv_segment, bf16 or fp32, packed per-head kept
 * counts allowed, each with its missing rotation rot) and starts an own
 * sequence at position pos0. A segment with a key (keys[i], a 32-byte
 * content digest; keys or keys[i] NULL: none) is offered to the device cache
 * (cache/doc_cache.h: lz_llama_gpu_set_cache's budget, lz_llama_gpu_set_cache_policy's
 * policy), which keeps it for later questions or not; one without a key, or
 * one the policy turns away, is uploaded for this question only; step runs ids[0..n) after them and after the
 * sequence's earlier tokens (lz_prefill_lazy: keys never rotated, the query
 * once per segment), appends their K/V to the sequence and writes the last
 * row's logits (V floats) to logits when not NULL. lz_llama_gpu_new's
 * max_tokens bounds the tokens of one step and of the whole own sequence. */
int lz_llama_gpu_begin(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                       int64_t pos0, char *err, size_t errlen);
int lz_llama_gpu_step(lz_llama_gpu *g, const int *ids, int n, float *logits, char *err, size_t errlen);
/* Block mode's begin (Block-Attention: a copy of each document per placement): the same, but a
 * segment is attended at offset 0, and one not resident under its key (the key of the document
 * at that placement) is uploaded from its content KV (rotated at its own positions) and rotated
 * by its rot on the device (kernels/lz_rerotate.h), that copy kept under the key. */
int lz_llama_gpu_begin_block(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                             int64_t pos0, char *err, size_t errlen);
/* Query side, a cold document recomputed instead of loaded: runs each
 * document ids[i][0..n[i]) through the model at positions s..s+n[i]-1 after
 * the prompt prefix (the segment prefix, s = prefix->n tokens, content key
 * prefix_key), exactly as lazyingest encodes it, and keeps its K and V on the
 * device under content key keys[i] (bf16, every row: documents stored whole),
 * so that lz_llama_gpu_resident says 1 and the next begin takes a segment
 * without data for it. Documents go through in batches of up to max_tokens
 * rows (one pass over the weights a batch; each its own causal attention over
 * the prefix). Resident keys, repeats and documents longer than max_tokens
 * are skipped (not kept: the caller loads those); the prefix is kept too.
 * The next begin counts each as a miss, and its question's documents are not
 * evicted before it. Returns 0, -1 (an empty document, an id out of range),
 * or LZ_LLAMA_GPU_ENOMEM (no device memory): a document is kept whole or not
 * at all, and the batches before the failing one stay kept. */
int lz_llama_gpu_encode_keep(lz_llama_gpu *g, const lz_kv_segment *prefix, const uint8_t prefix_key[32],
                             const int *const *ids, const int *n, const uint8_t *const *keys, int n_docs, char *err,
                             size_t errlen);
/* Prefix mode (vLLM's automatic prefix caching): keeps the KV of this question's own tokens
 * t0..t0+n-1 (stepped already: a document computed in its prompt, keys at their final
 * positions) as a segment under key, offered to the device cache's policy (admitted: resident
 * for later questions, which hand it without data at rot 0; else kept for this question only).
 * 1 kept, 0 turned away, -1 on error (no question begun, rows not stepped), LZ_LLAMA_GPU_ENOMEM
 * (no memory). */
int lz_llama_gpu_keep_own(lz_llama_gpu *g, int t0, int n, const uint8_t key[32], char *err, size_t errlen);
/* Start-up preload (lazyquery --preload): seeds the device policy's frequency of content key
 * with hits (> 0: a prior, as the store's access counts), and with sg not NULL also uploads sg
 * and keeps it resident under key while the budget has room (no admission test, no eviction).
 * 1 kept (or already resident), 0 not (no room, or sg NULL), -1 on error, LZ_LLAMA_GPU_ENOMEM
 * (no device memory for it). */
int lz_llama_gpu_preload(lz_llama_gpu *g, const lz_kv_segment *sg, const uint8_t key[32], double hits, char *err,
                         size_t errlen);
/* Device bytes the keyed segments may keep (default: half the memory free after the
 * weights), clamped to what the device has free less 1 GiB of working room; returns the
 * budget in force. */
size_t lz_llama_gpu_set_cache(lz_llama_gpu *g, size_t bytes);
/* 1 when a segment with content key is resident (begin may then be handed
 * that segment without its data: only rot is read), else 0. */
int lz_llama_gpu_resident(const lz_llama_gpu *g, const uint8_t key[32]);
/* The device cache's policy: LZ_CACHE_LFU (default) or LZ_CACHE_LRU (cache/doc_cache.h). */
void lz_llama_gpu_set_cache_policy(lz_llama_gpu *g, int policy);
/* Segment lookups that found their key resident / uploaded it; bytes resident. */
void lz_llama_gpu_cache_stats(const lz_llama_gpu *g, long *hits, long *misses, size_t *bytes);
/* The device cache policy's own counts (admitted, rejected, evicted, bytes). */
void lz_llama_gpu_cache_policy_stats(const lz_llama_gpu *g, lz_doc_cache_stats *st);

/* The fast tiers' memory and traffic: documents copied into HBM (count,
 * bytes, seconds the copies took on the device), the HBM pool (bytes in its
 * regions and in documents, regions, how often it grew, documents that left
 * only because its free space was fragmented), the pinned host pool. */
typedef struct {
    int64_t uploads, bytes_up;
    double copy_s;
    size_t pool_capacity, pool_used;
    int pool_regions;
    int64_t pool_grows, pool_evictions;
    size_t pinned_capacity, pinned_used;
} lz_llama_gpu_tiers;
void lz_llama_gpu_tier_stats(lz_llama_gpu *g, lz_llama_gpu_tiers *t);

/* Waits for the copies a begin started from the caller's memory (the question failed before
 * its first step, which would have waited for them): the memory may then be freed. */
void lz_llama_gpu_settle(lz_llama_gpu *g);

/* Several sequences at once (continuous batching: lazyserve --gpu). The engine holds slots, each
 * one question and its answer (its segments, own K/V rows, position, decode words, the documents
 * it pins); the single-question calls above are slot 0's. Without set_slots there is one slot
 * of max_tokens own rows, made at the first question.
 *
 * set_slots makes n slots of max_seq_tokens own rows each (question and answer; the whole prompt
 * in full and prefix modes), replacing the old ones (none may be live), sized against the device
 * memory free now less 1 GiB of working room (the document budget then lowered to what is left):
 * LZ_LLAMA_GPU_ENOMEM with a message saying how many fit when they do not. slots: how many
 * there are; slot_tokens: their own rows; idle_slot: the lowest one not live (never begun, or
 * released), -1 when every one is.
 *
 * begin_slot / begin_block_slot / step_slot / keep_own_slot are begin / begin_block / step /
 * keep_own in slot `slot` (0 .. slots - 1): a begin makes the slot live and pins every document
 * it uses (held in the device cache's policy: never evicted nor moved while the slot lives; one
 * the policy turned away is the slot's own) until release (or the slot's next begin); a begin
 * that finds no device memory because every resident document is pinned fails with a message
 * saying so and LZ_LLAMA_GPU_ENOMEM (and leaves the slot released). release is a no-op on a
 * slot not live.
 *
 * prefill_many runs the rows ids[i][0..n[i]) of slots[i] (distinct, begun) for i < n_seqs in
 * passes over the weights of up to max_tokens rows (the questions concatenated for the products,
 * each one's attention over its own segments); logits[i] (V floats; logits or logits[i] NULL:
 * none) receives the last row's of each. decode_many runs one token ids[i] for each slots[i] in
 * one pass: the products as GEMMs over the n rows, each row's rotary at its own position and its
 * K/V appended to its slot, lz_decode_lazy with batch n over the slots' block words; logits is
 * (n, V) (decode_many_rows: one row pointer each, NULL rows skipped). A pass of one sequence is
 * the slot's step_slot exactly (its decode graph); slots whose decode runs by lz_prefill_lazy
 * (LAZY_GPU_DECODE=prefill, offsets past the words) or whose rows share no base are stepped one
 * by one. The batched results equal each sequence's alone to the products' summation order
 * (bf16 products: logits within the engine's tolerance). 0, or -1 with a message (a bad slot,
 * one twice, too many tokens, an id out of range: nothing run), or LZ_LLAMA_GPU_ENOMEM (no
 * memory for the pass's tables or the slots).
 *
 * fits: 1 when a new sequence whose documents hold doc_tokens tokens (counted as if none were
 * resident) can pin them now: the device's free memory less the working room, the pool's free
 * extents and the resident documents no live slot holds; else 0 (admission then waits for a
 * slot to leave). slot_stats: what the slots hold. */
int lz_llama_gpu_set_slots(lz_llama_gpu *g, int n, int max_seq_tokens, char *err, size_t errlen);
int lz_llama_gpu_slots(const lz_llama_gpu *g);
int lz_llama_gpu_slot_tokens(const lz_llama_gpu *g);
int lz_llama_gpu_idle_slot(const lz_llama_gpu *g);
int lz_llama_gpu_begin_slot(lz_llama_gpu *g, int slot, const lz_kv_segment *segs, const uint8_t *const *keys,
                            int n_segs, int64_t pos0, char *err, size_t errlen);
int lz_llama_gpu_begin_block_slot(lz_llama_gpu *g, int slot, const lz_kv_segment *segs, const uint8_t *const *keys,
                                  int n_segs, int64_t pos0, char *err, size_t errlen);
int lz_llama_gpu_step_slot(lz_llama_gpu *g, int slot, const int *ids, int n, float *logits, char *err, size_t errlen);
int lz_llama_gpu_keep_own_slot(lz_llama_gpu *g, int slot, int t0, int n, const uint8_t key[32], char *err,
                               size_t errlen);
void lz_llama_gpu_release(lz_llama_gpu *g, int slot);
int lz_llama_gpu_prefill_many(lz_llama_gpu *g, const int *slots, const int *const *ids, const int *n, int n_seqs,
                              float *const *logits, char *err, size_t errlen);
int lz_llama_gpu_decode_many(lz_llama_gpu *g, const int *slots, const int *ids, int n, float *logits, char *err,
                             size_t errlen);
int lz_llama_gpu_decode_many_rows(lz_llama_gpu *g, const int *slots, const int *ids, int n, float *const *logits,
                                  char *err, size_t errlen);
/* Greedy decoding on the device (kernels/lz_argmax.h): decode_next is decode_many_rows that
 * also hands back each row's greedy tokens, next[2i] = lz_sample_argmax of row i's logits and
 * next[2i + 1] the same with the ids of set_ban at -inf (ignore_eos), from the device, so a row
 * whose logits[i] is NULL moves no logits to the host. slots NULL: the one sequence of
 * lz_llama_gpu_begin / _step (n 1). set_ban: the ids (at most LZ_ARGMAX_MAX_BAN, else -1 with
 * a message) masked for next[2i + 1] from the next pass on (none at first). 0 or -1, or as
 * decode_many. */
int lz_llama_gpu_set_ban(lz_llama_gpu *g, const int *ids, int n, char *err, size_t errlen);
int lz_llama_gpu_decode_next(lz_llama_gpu *g, const int *slots, const int *ids, int n, float *const *logits, int *next,
                             char *err, size_t errlen);
int lz_llama_gpu_fits(const lz_llama_gpu *g, int64_t doc_tokens);
typedef struct {
    int slots, slot_tokens, live; /* slots, their own rows, those live now */
    int pins;                     /* documents the live slots use (one used by two counted twice) */
    size_t pinned_bytes;          /* and their K/V bytes */
} lz_llama_gpu_slot_info;
void lz_llama_gpu_slot_stats(const lz_llama_gpu *g, lz_llama_gpu_slot_info *st);
/* Batched decode steps whose attention ran grouped by document (LAZY_GPU_DECODE_GROUP), and
 * their document blocks read against those the rows placed (read once a row). Three counters,
 * cheap: read after every serving step. */
typedef struct {
    int64_t steps, blocks_read, blocks_placed;
} lz_llama_gpu_group_info;
void lz_llama_gpu_group_stats(const lz_llama_gpu *g, lz_llama_gpu_group_info *st);

/* Pinned host memory for the host tier's documents (held in the layout the
 * device reads, cache/kv_layout.h, so that uploading one is a DMA copy),
 * from regions pinned once; thread-safe. NULL when no more can be pinned
 * (the caller then uses pageable memory). host_free takes the bytes given. */
void *lz_llama_gpu_host_alloc(lz_llama_gpu *g, size_t bytes);
void lz_llama_gpu_host_free(lz_llama_gpu *g, void *p, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* LZ_LLAMA_CUDA_H */
