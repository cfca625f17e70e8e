/* llama_gpu.cuh - the GPU forward pass's own state and pieces, shared by
 * its files (gpu/llama_cuda.h is the interface; this is not):
 *   gpu/llama_cuda.cu        the weights on the device, the forward layer
 *   gpu/llama_cuda_encode.cu ingest: the prefix, documents in multi-document passes
 *   gpu/llama_cuda_docs.cu   documents resident on the device; cold ones recomputed there
 *   gpu/llama_cuda_query.cu  a question's begin and its steps in a slot (decode: one graph a token)
 *   gpu/llama_cuda_slots.cu  the slots: sequences held at once, their memory, pins and release
 *   gpu/llama_cuda_batch.cu  several slots in one pass: batched prefill and decode
 *   gpu/llama_cuda_pool.cu   the tiers' memory: the HBM pool, pinned host memory, the copies
 * Everything but the lz_llama_gpu struct (llama_cuda.h's opaque type) lives
 * in namespace lzgpu. CUDA C++ only.
 *
 * Legend: n = tokens, D = width, H/KV = heads, d = head_dim, F = FFN width,
 * V = vocabulary, L = layers, s = prefix tokens.
 */
#ifndef LLAMA_GPU_CUH
#define LLAMA_GPU_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

#include "kernels/lz_argmax.h"
#include "kernels/lz_batch_ops.h"
#include "kernels/lz_decode.h"
#include "kernels/lz_decode_group.h"
#include "kernels/lz_prefill.h"
#include "gpu/llama_cuda.h"
#include "cache/doc_cache.h"
#include "cache/kv_pool.h"

typedef __nv_bfloat16 bf16;

namespace lzgpu {

struct Layer {
    bf16 *wq, *wk, *wv, *wo, *wg, *wu, *wd; /* (out, in) row-major; wk, wv follow wq and wu follows wg
                                               in memory: one product computes q|k|v, one gate|up */
    float *attn_norm, *ffn_norm;
};

/* A segment resident on the device: per layer l, its heads' rows from row
 * first[l] of k and v, head (l, h) kept[l * KV + h] rows from hrow[l * KV + h]
 * after it (cache/kv_layout.h, the host tier's layout; v = k + rows * d, one
 * extent of the HBM pool); kept (L, KV). An fp8 doc (an fp8 store's, as stored) has
 * e4m3 rows k8, v8 in the same layout instead, then its scales in the same
 * extent: ks (L, KV) of K, vs of V (a copy on the host in hsc: K's, then V's).
 * Keyed by a 32-byte content digest (a store payload's key), or unkeyed: then
 * it lives for one question. */
struct GpuDoc {
    uint8_t key[32];
    int keyed;
    bf16 *k, *v;       /* bf16 rows, or NULL (fp8) */
    uint8_t *k8, *v8;  /* fp8 rows, or NULL (bf16) */
    float *ks, *vs;    /* fp8: the scales, device */
    float *hsc;        /* fp8: (2, L, KV) the scales, host */
    void *ext;         /* its pool extent */
    size_t rows, ext_bytes; /* ext_bytes: its pool extent's bytes (K, V, fp8's scales), 0 before it has one */
    int32_t *hrow; /* (L, KV) */
    size_t *first; /* (L) */
    int32_t *kept; /* (L, KV) */
    int64_t keys; /* rows of its longest (layer, head) */
    uint64_t id;   /* unique: entries move when others are dropped */
    int fresh;     /* computed here (lz_llama_gpu_encode_keep) and not yet used: its first lookup is a miss */
    int pending;   /* fresh and not yet offered to the cache's policy (key set, keyed 0): kept for the next begin */
};

/* One sequence among a layer's n rows: rows off..off+n-1 at positions pos0..,
 * its keys and values written (KV, n, d) to kh, vh (its own keys in the
 * attention). Several documents recomputed together are several parts; so
 * are the questions of several slots prefilled together (attn set). */
struct Part {
    int off, n;
    bf16 *kh, *vh;
    bf16 *own_k, *own_v; /* a query step: the layer's own rows (KV, N, d), where k and v are also appended */
    const lz_decode_params *dec; /* a decode step: its attention by lz_decode_lazy (own rows appended first) */
    float *qcap;   /* ingest: the rotated queries of rows c0..c0+cw-1 written here (cw, H, d) when cw > 0 */
    int c0, cw;
    int N;         /* own_k's rows per kv head (0: max_tokens) */
    /* a sequence of its own (a slot among several in one pass): its attention parameters (segments
     * and lengths of this layer), its position pos0 (+ *count) instead of the layer's; NULL: the layer's */
    const lz_prefill_params *attn;
    int64_t pos0;
    const int *count;
};

/* A sequence the engine holds (llama_cuda.h's slots): one question and its answer. Its own rows,
 * the attention's descriptors over its segments (the documents it placed, then its own rows), the
 * decode block words over them, its decode graph, and the documents it pins. */
struct Slot {
    int live;            /* begun and not released: its documents are pinned */
    int ready;           /* its last begin succeeded (a failed one leaves nothing to step) */
    int N;               /* own rows it holds per (layer, kv head) */
    bf16 *own_k, *own_v; /* (L, KV, N, d) its tokens so far (inside g->own_all) */
    int *dn_own;         /* device: its own length (g->dcount + index; read by the kernels, so graphs replay) */
    lz_attn_segment *qsegs; /* (L, S + 1) device: the segments then the own sequence */
    int32_t *qlen, *hqlen;  /* (L, S + 1, KV) device / host */
    int32_t *qrow, *hqrow;  /* (L, S + 1, KV) device / host: each head's first row in its segment (seg_row) */
    float *qcs;             /* (S + 2, d) device: the slots' cos/sin (lz_prefill_rope_table), every layer's */
    int S, n_own, qcap;     /* qcap: S + 1 the descriptor arrays hold */
    int fp8;                /* some of its segments are fp8 (the attention's seg_fp8) */
    int64_t pos0, seg_keys;
    /* a decode step's attention by lz_decode_lazy: block words (L, KV, dNB) over its segments then
     * the own rows, the values' rows beside them, the blocks in use (L, KV) and the segments'
     * share of them; rows counted from dk0 / dv0 (spans: the rows past them the words reach).
     * dec = 0 when its rows or offsets do not fit the words (decode by lz_prefill_lazy) */
    uint64_t *dwords, *dvrows; /* one allocation: words, values' rows, dnf, dnb (then dks, dvs) */
    int32_t *dnb, *dnf;
    float *dks, *dvs;          /* with fp8 segments: (L, KV, dNB) each block's scales (<= 0: bf16), else NULL */
    const uint8_t *dk08, *dv08; /* with fp8 segments: the base of their rows (the fp8 words count from there) */
    size_t dcap;               /* its bytes, and those of the pinned staging hdw */
    uint64_t *hdw;
    int dNB, dec, dsplit;      /* dsplit: lz_decode's split-KV parts (0: its choice) */
    const bf16 *dk0, *dv0;
    uint64_t kspan, vspan, kspan8, vspan8; /* kspan8, vspan8: the fp8 rows past dk08 / dv08 the words reach */
    /* the grouped decode of a batched step (gpu/llama_cuda_group.cu, kernels/lz_decode_group.h):
     * its segments' first blocks (L, KV, S + 1) on the device (dsegf, staged in hsegf) and per
     * document its key (the identity of its rows), offset and most blocks; gn = S + 1 when made,
     * 0 when not (the step then runs per row) */
    int32_t *dsegf, *hsegf;
    uint64_t *gkey;
    int32_t *goff, *gblk;
    int gn, gcap;
    cudaGraphExec_t decode[2]; /* one decode step of this question, captured at its first one: [0]
                                  its logits copied back and its greedy tokens, [1] the tokens alone */
    /* the documents it uses (ids): held in the policy (keyed) or its own (unkeyed, dropped with it) */
    struct Pin { uint64_t id; int held; } *pins;
    int n_pins, cap_pins;
};

/* One slot of a batched decode step, as its kernels read it (device memory, g->bseq). */
typedef lz_op_batch_seq BatchSeq; /* kernels/lz_batch_ops.h */

/* Ingest: a document of the last multi-document pass, read back into the pinned host16: its K
 * (L, KV, n, d) from element off * L * KV * d, its V max_tokens * L * KV * d further, its window
 * queries (L, cw, H, d) from hwq + wq. */
struct EncDoc {
    int off, n, cw;
    size_t wq;
    int mm;    /* KV eviction's attention masses computed (kernels/lz_kvmass.h): their m, or 0 */
    size_t mo; /* their (L, KV, G, m) from dmass / hmass + mo */
};

/* Ingest in fp8 (llama_cuda_encode.cu): the passes' K / V quantised on the device, (2, L, KV,
 * max_tokens, d) bytes laid out as kall / vall, read back into pinned h8; the scales (2, docs,
 * L, KV) and each document's first non-finite group + 1 (0: none). */
struct EncFp8 {
    int on;          /* 1: quantised; 2: and the passes read back as fp8 planes only */
    int need16;      /* a one-document call: its bf16 read back whatever on says */
    uint8_t *d8, *h8;
    float *dsc, *hsc;
    int *dbad, *hbad;
    int cap_docs;
};
void enc_fp8_free(EncFp8 *f);

} /* namespace lzgpu */

#define LZ_GPU_STAGE ((size_t)64 << 20)

#define LZ_GPU_SIDE 4

struct lz_llama_gpu {
    const lz_llama *m; /* the caller's, alive as long as g: the output head uploads at the first question */
    lz_llama_config cfg;
    int max_tokens;
    cublasHandle_t blas;
    cudaStream_t st;
    bf16 *tok_embd;
    lzgpu::Layer *layers; /* host array of device pointers */
    float *inv_freq;
    float *x, *q, *gate; /* (N, D); (N, (H + 2 KV) d): rows q | k | v; (N, 2 F): rows gate | up */
    bf16 *xb, *qh, *oh, *ot, *hb;
    bf16 *kall, *vall; /* ingest: (L, KV, n, d) a document's K and V, documents back to back, read back at the end */
    int *ids;
    bf16 *pk, *pv;     /* prefix (L, KV, s, d) */
    int s;
    lz_attn_segment *dsegs; /* (L) one prefix segment a layer */
    int32_t *dlen;          /* (KV) = s */
    float *work;
    size_t work_bytes;
    bf16 *host16;      /* pinned staging (2, L, KV, max_tokens, d) */
    /* query side */
    bf16 *out_w;       /* (V, D) output head (the embedding when tied) */
    float *out_norm, *logits, *hlogits; /* (D), (V) device, (V) pinned */
    int *dban;         /* (1 + LZ_ARGMAX_MAX_BAN) device: lz_argmax's ban list (count, ids) */
    int hban[1 + LZ_ARGMAX_MAX_BAN]; /* what dban holds */
    bf16 *tk, *tv;     /* (KV, max_tokens, d) a step's own keys / values */
    /* the slots (gpu/llama_cuda_slots.cu): n_slots sequences of slot_tokens own rows each, their
     * rows in one allocation, their lengths side by side on the device; the batched passes'
     * buffers (gpu/llama_cuda_batch.cu): the slots' table, block words, last rows and logits */
    lzgpu::Slot *slots;
    int n_slots, slot_tokens;
    bf16 *own_all;       /* (n_slots, 2, L, KV, slot_tokens, d) */
    int *dcount;         /* (n_slots) device */
    lzgpu::BatchSeq *bseq, *hbseq; /* (n_slots) device / pinned */
    uint64_t *bwords;    /* (L, B, KV, NB) words, then values' rows, then (L, B, KV) blocks in use */
    size_t bwords_bytes;
    float *blast, *blogits, *hblogits; /* (n_slots, D) last rows; (gemm rows of n_slots, V) device, (n_slots, V) pinned */
    int *bnext, *hbnext; /* (n_slots, 2) greedy tokens of a pass's rows (lz_argmax), device / pinned */
    lzgpu::GpuDoc *docs;        /* resident segments; the keyed ones are those cache/'s policy admitted */
    int n_docs, cap_docs;
    size_t cache_bytes, used_bytes; /* budget and use of the keyed ones */
    lz_doc_cache *pol;   /* the policy over the keyed docs (values: doc ids), made at the first question */
    int policy;          /* lz_cache_policy */
    uint64_t next_id;
    long hits, misses;
    /* the tiers' memory (gpu/llama_cuda_pool.cu): the HBM pool the docs' extents come from,
     * the pinned host pool (host_lock: taken by the store tier's decoding threads), and the
     * copies into HBM (events around a question's copies, counted at the next question) */
    lz_kv_pool *hbm, *hostp;
    pthread_mutex_t host_lock;
    int host_lock_made;
    cudaEvent_t up_ev[2];
    int up_open;
    cudaStream_t cp;     /* the copy stream */
    cudaEvent_t *lev;    /* (L) a layer's copies done */
    int layer_wait;      /* the question's copies in flight: its first step waits per layer */
    /* a doc's layer-by-layer copy: es bytes an element (2 bf16, 1 fp8); fp8's scales (sc bytes
     * from hsc) go with layer 0 */
    struct UpDoc {
        void *k, *v;
        const void *sk, *sv;
        size_t es;
        const size_t *first; /* (L) the doc's; layer l's rows end where l + 1's start (rows at the last) */
        size_t rows;
        void *sc;
        const void *hsc;
        size_t sc_bytes;
    } *upq;
    int n_upq, cap_upq;
    int materialise; /* the begin in progress is block mode's (lz_llama_gpu_begin_block) */
    int no_evict; /* set while documents are recomputed ahead of a begin: the session has seen
                     which docs are resident, so none may leave before that begin pins them */
    int64_t uploads, up_bytes, pool_grows, pool_evictions;
    double up_s;
    int *hids;           /* pinned: a step's token ids */
    void *blas_ws;       /* cuBLAS workspace (no allocation inside a captured graph) */
    float *wq, *hwq;     /* ingest: the KV-eviction windows' rotated queries, device / pinned (a document's (L, cw, H, d)) */
    size_t wq_n, hwq_n;
    /* ingest: the documents of the last finished multi-document pass (fetchable) and of the one
     * started after it (pending: rows and window floats in pend_rows, pend_wq) */
    lzgpu::EncDoc *enc, *pend;
    lzgpu::EncFp8 *fp8; /* ingest: the passes' fp8 quantisation (llama_cuda_encode.cu), or NULL */
    cudaEvent_t enc_ev; /* a pass read back; waited on asleep (the host's cores pack meanwhile) */
    float *dmass, *hmass;  /* the pass's attention masses, device / pinned */
    size_t dmass_n, hmass_n, pend_mass;
    int enc_docs, enc_cap, pend_docs, pend_cap, pend_rows;
    int enc_no16;       /* the finished pass was read back as fp8 planes only (EncFp8::on == 2) */
    size_t pend_wq;
    void **owned;
    int n_owned;
    lz_attn_segment *esegs; /* (L) device: the prefix doc, for documents recomputed on the query side */
    int32_t *elen;          /* (2, L, KV) device: its kept lengths, then its heads' rows (seg_row) */
    /* several parts in a layer (documents recomputed together): their rotary, attention and
     * token-major copies run on LZ_GPU_SIDE streams side by side, each with its own slot of
     * the attention workspace (work_slot bytes apart) */
    cudaStream_t side[4];
    cudaEvent_t fork, join[4];
    size_t work_slot;
    unsigned char *stage[2]; /* pinned, LZ_GPU_STAGE bytes each: weights on their way up (upload_bytes) */
    cudaEvent_t stage_ev[2];
    /* the environment's A/B switches (base/env.h), taken at lz_llama_gpu_new: LAZY_GPU_DECODE
     * (prefill: decode attention by lz_prefill_lazy; else split-KV parts) and LAZY_GPU_GEMV
     * (the decode products' blocks a SM, set with lz_gemv_tune before each step) */
    int env_dec_prefill, env_dsplit, gemv_bps, gemv_silu_bps;
    int env_group; /* LAZY_GPU_DECODE_GROUP: 0 never, 1 whenever possible, 2 auto */
    /* a grouped step's items and rows' partial counts (pinned hgrp, device dgrp; grp_bytes
     * each), its partials' workspace, and the steps run grouped with their document blocks
     * read against those a per-row step reads */
    void *hgrp, *dgrp;
    size_t grp_bytes;
    float *gwork;
    size_t gwork_bytes;
    int64_t group_steps, group_reads, group_placed;
    float *dwork;        /* lz_decode's split-KV workspace, shared by the slots (one call at a time) */
    size_t dwork_bytes;
};

namespace lzgpu {

/* err = "GPU: <what> failed (<code>)"; returns -1 */
static inline int fail(char *err, size_t errlen, const char *what, int code)
{
    snprintf(err, errlen, "GPU: %s failed (%d)", what, code);
    return -1;
}

#define CUDA_OK(call, what)                                                                                       \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) {                                                                                  \
            snprintf(err, errlen, "GPU: %s: %s", what, cudaGetErrorString(e_));                                   \
            return -1;                                                                                            \
        }                                                                                                         \
    } while (0)

/* gpu/llama_cuda.cu */
void *dalloc_bytes(lz_llama_gpu *g, size_t bytes); /* cudaMalloc owned by g (freed with it), or NULL */
template <class T> static inline T *dalloc(lz_llama_gpu *g, size_t count) { return (T *)dalloc_bytes(g, count * sizeof(T)); }
void doc_free(lz_llama_gpu *g, GpuDoc *x); /* its extent back to the pool, its tables freed */
int ensure_query(lz_llama_gpu *g, char *err, size_t errlen); /* the query side's buffers, at the first question */
/* y (n, out) (+)= x (n, in) @ W (out, in)^T (one row: lz_gemv) */
int gemm(lz_llama_gpu *g, float *y, const bf16 *x, const bf16 *w, int n, int in, int out, float beta);
lz_prefill_params attn_params(const lz_llama_gpu *g, int n); /* ingest's and query's shared attention parameters */
/* Layer l over the n rows of g->x (its parts' rotary and attention, then o and the FFN). 0 or -1. */
int layer(lz_llama_gpu *g, int l, int n, int64_t pos0, const int *count, const Part *parts, int n_parts,
          const lz_prefill_params *p, int lazy, char *err, size_t errlen);
/* Layer l's rest over n rows (n > 1) from the attention's output o (n, H * d) token-major: x += o Wo^T,
 * then the FFN, every product by cuBLAS. 0 or -1. */
int layer_out(lz_llama_gpu *g, int l, int n, const bf16 *o, char *err, size_t errlen);
/* Rows a product of n rows runs (n rounded up to a multiple of 64, at most max_tokens). */
int gemm_rows(const lz_llama_gpu *g, int n);
int ensure_side(lz_llama_gpu *g, char *err, size_t errlen); /* the side streams several parts run on */
int ensure_work(lz_llama_gpu *g, lz_prefill_params *p, char *err, size_t errlen); /* p's attention workspace */

/* gpu/llama_cuda_pool.cu */
/* An extent of bytes from the HBM pool (an unpinned doc may leave for it when the pool is
 * fragmented; the pool grows when its docs outgrow it). 0, LZ_LLAMA_GPU_ENOMEM (the device is
 * full), or -1 (the device failed otherwise). */
int pool_take(lz_llama_gpu *g, size_t bytes, void **at, char *err, size_t errlen);
void pool_give(lz_llama_gpu *g, void *at, size_t bytes);
void pool_free_all(lz_llama_gpu *g); /* both pools' regions, the copy stream and its events, at lz_llama_gpu_free */
/* bytes from host src to device dst on g->st, asynchronously (pinned src: a DMA at PCIe
 * speed; src must live until the stream reaches it), timed with the question's copies */
int upload_async(lz_llama_gpu *g, void *dst, const void *src, size_t bytes, char *err, size_t errlen);
void upload_account(lz_llama_gpu *g); /* the last question's copy time counted */
/* Queues a doc's copy from host rows in its own layout (u: sk, sv K's and V's rows, cap / first
 * its layer tables, fp8's scales, all alive until the question's first step) for upload_layers. 0,
 * -1, or LZ_LLAMA_GPU_ENOMEM (no memory for the queue). */
int upload_defer(lz_llama_gpu *g, const lz_llama_gpu::UpDoc *u, char *err, size_t errlen);
/* The queued copies on the copy stream, layer by layer (every doc's layer l, then l + 1),
 * an event after each layer: the question's first step waits for layer l's before computing
 * layer l, so the later layers arrive while the earlier compute. 0, -1, or LZ_LLAMA_GPU_ENOMEM. */
int upload_layers(lz_llama_gpu *g, char *err, size_t errlen);
/* Makes g->st wait for layer l's copies (when a question's are in flight). 0 or -1. */
int upload_wait(lz_llama_gpu *g, int l, char *err, size_t errlen);

/* gpu/llama_cuda_docs.cu */
void doc_drop(lz_llama_gpu *g, int i); /* removes doc i (the last one takes its place) */
/* The resident doc of segment sg (key: its payload's; NULL: this question only), uploaded when
 * absent. 0, -1, or LZ_LLAMA_GPU_ENOMEM (no device memory for it). */
int doc_for(lz_llama_gpu *g, const lz_kv_segment *sg, const uint8_t *key, int cached, uint64_t *id, char *err,
            size_t errlen);
/* Layer l of doc x as an attention segment placed at offset (fp8: its bytes and scales). */
lz_attn_segment doc_segment(const lz_llama_gpu *g, const GpuDoc *x, int l, int64_t offset);
/* The index of doc id in g->docs, or -1. */
int doc_by_id(const lz_llama_gpu *g, uint64_t id);
/* Counts one access of key and pins it for this question when the policy holds it: 1, else 0.
 * A question pins all its keys before any doc_for, so no upload evicts a document it is about to use. */
int doc_pin(lz_llama_gpu *g, const uint8_t *key);
/* A new question in slot s: what s held before released (slot_unpin), the policy's pins of
 * the request in flight moved to this one. 0, -1, or LZ_LLAMA_GPU_ENOMEM. */
int doc_question(lz_llama_gpu *g, Slot *s, char *err, size_t errlen);
/* After a question's lookups: unpinned docs out while the keyed ones exceed the budget. */
void doc_trim(lz_llama_gpu *g);
/* Slot s uses doc id from now until it is released: a hold in the policy when the doc is keyed,
 * else the doc is s's own. 0 or LZ_LLAMA_GPU_ENOMEM. */
int doc_use(lz_llama_gpu *g, Slot *s, uint64_t id, char *err, size_t errlen);
/* Keeps own rows t0..t0+n-1 of slot s as a document under key (lz_llama_gpu_keep_own). */
int doc_keep_own(lz_llama_gpu *g, Slot *s, int t0, int n, const uint8_t key[32], char *err, size_t errlen);

/* gpu/llama_cuda_slots.cu */
/* The slots' memory and bookkeeping: slot i of g (made at the first question: one of max_tokens
 * rows, unless lz_llama_gpu_set_slots made others), or NULL with err. */
Slot *slot_get(lz_llama_gpu *g, int i, char *err, size_t errlen);
int ensure_slots(lz_llama_gpu *g, char *err, size_t errlen);
/* Everything s pins given back: holds released, its own docs dropped (their copies finished first). */
void slot_unpin(lz_llama_gpu *g, Slot *s);
void slots_free(lz_llama_gpu *g); /* at lz_llama_gpu_free and before set_slots makes new ones */
/* Every slot's decode graph dropped (they point at a workspace about to move). */
void graphs_drop(lz_llama_gpu *g);
/* Slot s's decode graphs dropped (its question changed, or it is freed). */
void slot_graphs_drop(Slot *s);

/* gpu/llama_cuda_query.cu */
/* A question's begin in slot s (block: Block-Attention's copies, lz_llama_gpu_begin_block). 0 or -1. */
int slot_begin(lz_llama_gpu *g, Slot *s, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
               int64_t pos0, int block, char *err, size_t errlen);
/* n rows in slot s (a decode token by its captured graph); logits (V) of the last row, or NULL;
 * next (2), or NULL: its greedy tokens (lz_llama_gpu_decode_next). 0 or -1. */
int slot_step(lz_llama_gpu *g, Slot *s, const int *ids, int n, float *logits, int *next, char *err, size_t errlen);
/* The attention parameters of a query step of n rows in slot s (segments and lengths per layer set by the caller). */
lz_prefill_params step_params(const lz_llama_gpu *g, const Slot *s, int n);
/* The split-KV workspace lz_decode needs for p, grown (zero-filled; the slots' graphs dropped when it moves). 0 or -1. */
int ensure_dwork(lz_llama_gpu *g, const lz_decode_params *p, char *err, size_t errlen);

/* gpu/llama_cuda_group.cu */
/* Slot s's grouped-decode tables for its S segments hs (L, S + 1): made at its begin, after its
 * block words. 0 or -1 (s->gn stays 0 where they cannot be made: its steps run per row). */
int group_slot(lz_llama_gpu *g, Slot *s, const lz_attn_segment *hs, int S, char *err, size_t errlen);
void group_slot_free(Slot *s);
void group_free(lz_llama_gpu *g); /* the steps' items and workspace */
/* A batched step of ss[0..B) grouped by document: 1 with *gp ready but for dec and layer
 * (items uploaded on g->st), 0 when the step runs per row (switched off, a slot without its
 * tables, or (auto) too little shared), -1 on error. */
int group_step(lz_llama_gpu *g, Slot *const *ss, int B, const lz_decode_params *p, lz_decode_group_params *gp,
               char *err, size_t errlen);

} /* namespace lzgpu */
#endif /* LLAMA_GPU_CUH */
