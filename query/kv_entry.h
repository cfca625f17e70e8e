/* kv_entry.h - private to query/: a document's KV as the session's host tier
 * holds it, and how it is made from store payloads, one at a time or a whole
 * question's (or a preload's) at once, decoded on all threads together
 * (lz_payload_decode_batch).
 *
 * An entry is one block, K then V, in the store's element type (a bf16 store's
 * payloads stay bf16; an fp32 store's, or opts.cache_f32, fp32; an fp8 store's
 * stay fp8, with their scales after V: (L, KV) floats of K's, then of V's, for
 * the CPU engine and a backend that reads fp8 (lz_query_backend.reads_fp8);
 * for another backend they are dequantised to bf16), packed per head:
 * head (l, h) holds n_kept rows of d values from row head_row[l * KV + h], so a
 * document compressed at ingest (Ada-KV) takes only its kept rows. A document
 * stored whole is then in exactly the layout the GPU reads (cache/kv_layout.h),
 * and with a backend that offers it the block is its pinned host memory:
 * uploading it is one DMA copy. bytes (what the cache accounts) is the block's size.
 */
#ifndef LZ_QUERY_KV_ENTRY_H
#define LZ_QUERY_KV_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "query/session.h"
#include "store/payload.h"

typedef struct {
    float *k, *v;        /* (rows, d) fp32, or NULL */
    uint16_t *k16, *v16; /* (rows, d) bf16, or NULL */
    uint8_t *k8, *v8;    /* (rows, d) fp8 e4m3, or NULL */
    float *k_scales, *v_scales; /* with k8: (L, KV) each, in the block after V */
    void *block;         /* K then V (then fp8's scales) */
    int pinned;          /* block from the backend's host_alloc (else malloc) */
    int *n_kept;         /* (L, KV) */
    int64_t *head_row;   /* (L, KV) */
    int n;               /* tokens of the document (positions it occupies) */
    size_t bytes;
} kv_entry;

/* What entries are made for: the model (payloads of another are refused), the element
 * type, the backend's pinned memory (when it has host_alloc), a codec for one-at-a-time
 * and batch decodes (not shared between threads). */
typedef struct {
    const lz_llama_config *cfg;
    const uint8_t *fingerprint;      /* 32 bytes */
    int f32;                         /* decode bf16 payloads to fp32 (opts.cache_f32) */
    int fp8;                         /* keep fp8 payloads fp8 (the backend reads them; not with f32) */
    const lz_query_backend *backend; /* NULL, or one with host_alloc and host_free */
    lz_payload_codec *codec;
    void *(*heap)(size_t bytes);     /* the blocks not in pinned memory (NULL: malloc; freed by free) */
} kv_entry_env;

/* The most positions a prompt takes (documents, question and answer; lz_query_run_begin
 * refuses a longer one), and so the most tokens a payload's document may have. */
#define QUERY_MAX_POSITIONS (1 << 24)

/* An entry's element: its bytes. */
enum { KV_ENTRY_FP8 = 1, KV_ENTRY_BF16 = 2, KV_ENTRY_F32 = 4 };

/* An entry of n tokens whose heads keep kept[l * KV + h] rows (NULL: n each), packed,
 * of element elem (KV_ENTRY_*), n_kept and head_row filled, contents undefined. NULL when
 * out of memory. */
kv_entry *kv_entry_alloc(const kv_entry_env *env, int n, const int *kept, int elem);
void kv_entry_clear(const kv_entry_env *env, kv_entry *e); /* its memory, not e */
void kv_entry_free(const kv_entry_env *env, kv_entry *e);  /* NULL is a no-op */

/* Decodes one payload blob (not modified) into a new entry after checking it: its
 * format and checksum, its size (at most QUERY_MAX_POSITIONS tokens), and that this model
 * built it. what names the document in errors. NULL on failure, with *status (when not NULL)
 * LZ_QUERY_ENOMEM where the entry's memory could not be had (memory other requests may give
 * back), else -1 (the payload itself: corrupt, another model's). */
kv_entry *kv_entry_decode(const kv_entry_env *env, const void *blob, size_t len, const char *what, int *status,
                          char *err, size_t errlen);

/* n payload blobs at once (blobs[i] NULL: skipped), each checked as kv_entry_decode does,
 * the bf16 ones decoded as one batch on all threads: out[i] the entry, or NULL with why in
 * errs[i] (when errs is not NULL; "" for a skipped blob) and status[i] (when status is not
 * NULL: 0 made or skipped, else as kv_entry_decode's). Returns the entries made. */
int kv_entry_decode_many(const kv_entry_env *env, const void *const *blobs, const size_t *lens, int n,
                         kv_entry **out, char (*errs)[256], int *status);

/* The bytes an entry of blob takes (a document of n tokens; an unreadable blob: as if
 * stored whole in fp32, and decoding it then fails). */
size_t kv_entry_bytes_of(const kv_entry_env *env, const void *blob, size_t len, int n);

/* The entry as a segment of the prompt with its missing rotation. */
lz_kv_segment kv_entry_segment(const kv_entry *e, int64_t rot);

#endif /* LZ_QUERY_KV_ENTRY_H */
