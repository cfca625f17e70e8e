/* store.h - a store folder: LMDB payloads (kv/) + SQLite metadata
 * (meta.sqlite), bound to one model. The facade ingest and query use: open
 * and lock, model check, content keys, payload put/get, and the consistency
 * rules: payload first, row second (enforced here: a row whose payload is
 * not in LMDB is refused, see "rows" below); SQLite is the truth; gc
 * removes unreferenced payloads; check finds rows whose payload is missing,
 * corrupt or of another model, and damaged LMDB pages (store/kvdb_pages.h),
 * which a rebuild of the payload database from its intact pages removes.
 *
 * Folder layout:  <dir>/kv/data.mdb, lock.mdb   LMDB environment
 *                 <dir>/meta.sqlite (+ -wal, -shm)   SQLite, WAL mode
 *                 <dir>/writer.lock                  flock: one writer at a time
 *
 * A sharded store (store/shards.h: <dir>/shards.manifest and shard folders,
 * each a store as above) opens as one: reads are routed to the shard that
 * holds a row (row ids are local id * N + shard), searched and merged across
 * shards with global BM25 statistics, checked shard by shard and as a set.
 * Its writes go to one shard at a time (open the shard folder): through the
 * root every row and payload write, gc and rebuild returns EINVAL.
 */
#ifndef LZ_STORE_H
#define LZ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "store/kvdb.h"
#include "store/meta.h"
#include "store/payload.h"
#include "store/shards.h"
#include "base/status.h"

typedef struct lz_store lz_store;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

enum {
    LZ_STORE_RDONLY = 1, /* readers (queries): no create, no writes */
    LZ_STORE_WRITER = 2  /* take <dir>/writer.lock; EBUSY when another writer holds it */
};

/* Opens (creating unless RDONLY) the store folder dir. Errors: EIO, EBUSY,
 * ESCHEMA, ENOMEM; err names the folder and what failed. A sharded root
 * (dir/shards.manifest) is opened as one store, never created here: every
 * shard must be there and belong to the set (ENOTFOUND, EINVAL, ECORRUPT
 * naming the shard); WRITER on a root is EINVAL (one shard at a time). */
int lz_store_open(const char *dir, int flags, lz_store **out, char *err, size_t errlen);
void lz_store_close(lz_store *s); /* NULL is a no-op */
/* Another handle on the store base is open on, for another thread (lazyserve's engines,
 * serve/router.h): a store handle serves one thread at a time (its SQLite connection is
 * opened SQLITE_OPEN_NOMUTEX and its statements are prepared once and reused), so each
 * thread takes its own. The new handle has its own SQLite connection(s) (a sharded store:
 * one per shard) and shares base's LMDB environment (LMDB forbids opening one environment
 * twice in a process; its read transactions are per call, MDB_NOTLS, so threads read
 * payloads at once). It is opened as base was (RDONLY or not: access counts are SQLite
 * writes, WAL), unbound (lz_store_check_model binds it, as after lz_store_open). base must
 * outlive it and must not be a writer's (LZ_STORE_WRITER: EINVAL); payload writes, gc and
 * rebuilds go through base alone. What it does not cover: another process growing the LMDB
 * map while several threads read (LMDB adopts a grown map only with no read transaction of
 * this process active). Errors: as lz_store_open's. */
int lz_store_open_shared(const lz_store *base, lz_store **out, char *err, size_t errlen);
const char *lz_store_dir(const lz_store *s);
/* A sharded store's shard count (0 for a plain store) and shard i, a store
 * of its own (owned by s; its row ids are the shard's local ones). */
int lz_store_n_shards(const lz_store *s);
lz_store *lz_store_shard(lz_store *s, int i);

/* What the store records about a model (filled by the caller from the engine;
 * ingest/model_desc.h fills it from a loaded lz_llama). */
typedef struct {
    uint8_t fingerprint[32];
    const char *arch;            /* "llama" */
    int n_layers, n_kv_heads, head_dim;
    int rope_layout;             /* lz_rope_layout: 0 adjacent, 1 half */
    float rope_theta;
    const float *rope_divisors;  /* (head_dim / 2) or NULL */
    const char *source_path;     /* informational */
    int kv_dtype;                /* payload dtype (LZ_PAYLOAD_DTYPE_*); 0 = the store's, bf16 for a new one */
} lz_store_model_desc;

/* Binds the store to a model: records it in an empty store; in a store built
 * with another model, returns EMODEL with a message naming both (fingerprint,
 * architecture, source path). Also records the prompt prefix tokens and sets
 * *prefix_key; *prefix_changed is 1 when the prefix differs from the recorded
 * one (every document key changes). Needs a writable store unless the model
 * is already recorded with this prefix. */
int lz_store_bind_model(lz_store *s, const lz_store_model_desc *m, const int *prefix, int n_prefix,
                        int64_t *model_id, uint8_t prefix_key[LZ_META_KEY_LEN], int *prefix_changed,
                        char *err, size_t errlen);
/* Binds to the model the store records, without loading it (maintenance:
 * --check, --gc). Errors: ENOTFOUND for a store without a model. */
int lz_store_bind_recorded(lz_store *s, char *err, size_t errlen);
/* Checks only (readers): EMODEL when the store's model is not m. */
int lz_store_check_model(lz_store *s, const lz_store_model_desc *m, char *err, size_t errlen);
/* The bound model's fingerprint (valid after bind/check). */
const uint8_t *lz_store_model_fingerprint(const lz_store *s);
/* The element type of the store's payloads (LZ_PAYLOAD_DTYPE_*), valid after
 * bind/check; fixed when the store is created. */
int lz_store_kv_dtype(const lz_store *s);

/* The prompt prefix the store is bound to (valid after bind/check/bind_recorded):
 * its token ids (owned by s) and the LMDB key of its payload. */
void lz_store_prefix(const lz_store *s, const int **ids, int *n, uint8_t key[LZ_META_KEY_LEN]);

/* ---- query side ---- */
/* Token ids of document row doc_id, *ids malloc'd. Errors: ENOTFOUND, ECORRUPT. */
int lz_store_doc_tokens(lz_store *s, int64_t doc_id, int **ids, int *n, char *err, size_t errlen);
/* The most hit documents first (SQLite access statistics), at most limit;
 * all: then every document never hit (hits 0, by row id). fn returns
 * non-zero to stop. */
int lz_store_top_accessed(lz_store *s, int limit, int all, lz_meta_top_fn fn, void *ctx,
                          char *err, size_t errlen);
/* Counts one hit of document doc_id (hits + 1, last_hit = now). Needs a
 * store opened without RDONLY (no writer lock needed: SQLite WAL). */
int lz_store_hit(lz_store *s, int64_t doc_id, char *err, size_t errlen);

/* ---- keys ---- */
/* Document payload key: fingerprint || sha256("lazykv-doc-v1", n_prefix,
 * prefix ids, n, doc ids) (counts u32 LE, ids int32 LE). Identical prefix +
 * document tokens under one model share a payload. */
void lz_store_doc_key(const uint8_t fingerprint[32], const int *prefix, int n_prefix,
                      const int *ids, int n, uint8_t key[LZ_META_KEY_LEN]);
/* The same for a document compressed at ingest: kv_spec (ingest/kvpolicy.h
 * canonical text, recorded in the row) is hashed after the ids; NULL or ""
 * gives lz_store_doc_key's key. */
void lz_store_doc_key_kv(const uint8_t fingerprint[32], const int *prefix, int n_prefix,
                         const int *ids, int n, const char *kv_spec, uint8_t key[LZ_META_KEY_LEN]);
/* Prefix payload key: fingerprint || sha256("lazykv-prefix-v1", n, ids). */
void lz_store_prefix_key(const uint8_t fingerprint[32], const int *prefix, int n_prefix,
                         uint8_t key[LZ_META_KEY_LEN]);
/* Change detection: sha256(title or "", 0x00, text). */
void lz_store_content_hash(const char *title, const char *text, uint8_t out[32]);
/* Change detection of a record split into passages under a token budget:
 * sha256("lazysplit-v1", u32 max_doc_tokens, title or "", 0x00, text). */
void lz_store_split_hash(const char *title, const char *text, size_t text_len, int max_doc_tokens,
                         uint8_t out[32]);

/* ---- rows (SQLite) and their transactions ----
 * Every change to rows happens inside lz_store_begin .. lz_store_commit (or
 * lz_store_rollback, which undoes all of it). The store keeps its durability
 * rule itself: a row that points at a payload (insert, update, set_payload)
 * is refused with EINVAL, naming the document, unless that payload is
 * already in LMDB, so a crash never leaves a row without its payload. The
 * row and run types are meta.h's (lz_meta_doc, lz_meta_hit,
 * lz_meta_run_counts); the handles stay inside the store. Errors: EIO
 * (SQLite), ENOMEM, EINVAL, ENOTFOUND where a lookup finds nothing. */
int lz_store_begin(lz_store *s, char *err, size_t errlen);
int lz_store_commit(lz_store *s, char *err, size_t errlen);
void lz_store_rollback(lz_store *s);

/* Inserts row d (sets d->id) or rewrites row d->id; its payload must exist. */
int lz_store_doc_insert(lz_store *s, lz_meta_doc *d, char *err, size_t errlen);
int lz_store_doc_update(lz_store *s, const lz_meta_doc *d, char *err, size_t errlen);
/* Points row id at payload key (repair); the payload must exist. */
int lz_store_doc_set_payload(lz_store *s, int64_t id, const uint8_t key[LZ_META_KEY_LEN],
                             int64_t raw_bytes, int64_t stored_bytes, char *err, size_t errlen);
int lz_store_doc_delete(lz_store *s, int64_t id, char *err, size_t errlen);
/* Marks row id, or every row of source_id, as seen by ingest run `run`. */
int lz_store_doc_touch(lz_store *s, int64_t id, int64_t run, char *err, size_t errlen);
int lz_store_source_touch(lz_store *s, const char *source_id, int64_t run, char *err, size_t errlen);
/* Deletes the rows of source_id (or of the whole store) not seen by run;
 * *n receives the count. */
int lz_store_source_prune(lz_store *s, const char *source_id, int64_t run, int64_t *n,
                          char *err, size_t errlen);
int lz_store_prune(lz_store *s, int64_t run, int64_t *n, char *err, size_t errlen);
/* Ingest runs: marks runs a killed process left 'running' as 'aborted',
 * then starts one (inside a transaction); run_end records its counts. */
int lz_store_run_begin(lz_store *s, const char *args, int64_t model_id, int64_t *run,
                       char *err, size_t errlen);
int lz_store_run_end(lz_store *s, int64_t run, const lz_meta_run_counts *c, const char *status,
                     char *err, size_t errlen);

/* Reads (no transaction needed). lz_store_doc_find: row of ext_id without
 * its text and tokens (meta.h's lz_meta_doc_find), source id copied into
 * src; ENOTFOUND when absent. */
int lz_store_doc_find(lz_store *s, const char *ext_id, lz_meta_doc *out, char *src, size_t srclen,
                      char *err, size_t errlen);
/* Every row of source_id in passage order (meta.h's lz_meta_source_rows). */
int lz_store_source_rows(lz_store *s, const char *source_id, int (*fn)(const lz_meta_doc *d, void *ctx),
                         void *ctx, char *err, size_t errlen);
/* Title of row id into buf ("" when it has none); ENOTFOUND. */
int lz_store_doc_title(lz_store *s, int64_t id, char *buf, size_t len, char *err, size_t errlen);
int lz_store_doc_count(lz_store *s, int64_t *n, char *err, size_t errlen);
/* BM25 full-text search over title + text of plain text (every word a
 * quoted term, OR-ed; never FTS5 syntax from the caller); best k, fn per hit
 * in rank order, equal scores by ext_id. A text without words finds nothing.
 * A sharded store scores with the whole set's statistics (store_shards.c):
 * the same hits, order and scores as one store of the same documents. */
int lz_store_search(lz_store *s, const char *text, int k, int (*fn)(const lz_meta_hit *h, void *ctx),
                    void *ctx, char *err, size_t errlen);

/* ---- payloads ---- */
typedef struct {
    uint8_t key[LZ_META_KEY_LEN];
    void *blob;       /* encoded by lz_payload_encode */
    size_t len;
} lz_store_payload;
/* Writes n payloads in one durable LMDB transaction (before their rows commit). */
int lz_store_put_payloads(lz_store *s, const lz_store_payload *p, int n, char *err, size_t errlen);
/* Payloads written by a thread while the caller's thread goes on reading the
 * store (lazyingest commits one batch while it encodes the next): first, on
 * the caller's thread with no read open, lz_store_reserve_payloads makes room
 * in the map for p[0..n); then the other thread calls
 * lz_store_put_payloads_fixed, which never grows the map (EFULL, nothing
 * written, when the room was not enough: write them with
 * lz_store_put_payloads once that thread is done). */
int lz_store_reserve_payloads(lz_store *s, const lz_store_payload *p, int n, char *err, size_t errlen);
int lz_store_put_payloads_fixed(lz_store *s, const lz_store_payload *p, int n, char *err, size_t errlen);
/* 1 when a payload with key exists (its size in *len when len is not
 * NULL), 0 when not, -1 on error. */
int lz_store_has_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], size_t *len, char *err,
                         size_t errlen);
/* Zero-copy read of payload key: fn(blob, len, ctx) sees the bytes where LMDB's
 * map holds them (read-only, valid during the call only; a read snapshot is
 * open meanwhile). Returns fn's return value, or ENOTFOUND / EIO (message in
 * err) when the payload cannot be read. */
int lz_store_read_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN],
                          int (*fn)(const void *blob, size_t len, void *ctx), void *ctx, char *err, size_t errlen);
/* Zero-copy reads of n payloads in one read snapshot: fn(blobs, lens, ctx) sees them all at
 * once (blobs[i] NULL and lens[i] 0 where keys[i] is not stored), valid during the call only.
 * Returns fn's return value, or EIO / ENOMEM (message in err) when nothing could be read. */
int lz_store_read_payloads(lz_store *s, const uint8_t (*keys)[LZ_META_KEY_LEN], int n,
                           int (*fn)(const void *const *blobs, const size_t *lens, void *ctx), void *ctx, char *err,
                           size_t errlen);
/* Copies payload key into a malloc'd buffer. Errors: ENOTFOUND, EIO. */
int lz_store_get_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], void **blob, size_t *len,
                         char *err, size_t errlen);

/* ---- maintenance ---- */
typedef struct {
    int64_t n_payloads;   /* payloads examined */
    int64_t n_removed;    /* unreferenced ones deleted */
    int64_t bytes_removed;
    int rebuilt;          /* the payload database was damaged: rebuilt (lz_store_rebuild_payloads) */
} lz_store_gc_stats;
/* Deletes every payload no row references. Call with the writer lock and no
 * payload written whose row is not committed yet. LMDB's pages are checked
 * first (store/kvdb_pages.h); a damaged database (or one whose cursor lists
 * what no lookup finds) is rebuilt instead, which keeps only the referenced
 * payloads that pass their checks (needs a bound store). */
int lz_store_gc(lz_store *s, lz_store_gc_stats *st, char *err, size_t errlen);

typedef struct {
    int64_t n_kept;        /* payloads copied into the new data file */
    int64_t n_dropped;     /* intact entries left out: unreferenced, or failing their checks */
    int64_t bytes_dropped;
    int64_t n_lost;        /* entries the damaged pages held (the meta page's count less the intact) */
} lz_store_rebuild_stats;
/* Rewrites the payload database (kv/) from the intact pages of its data file
 * (read without LMDB), keeping every payload a row or the model's prefix
 * references whose header, CRC32C and model pass; whatever LMDB damage there
 * was is gone after it, and a row whose payload was lost is then MISSING for
 * lz_store_check (lazyingest --repair re-encodes it). Writer lock, a bound
 * store, no read open. Errors: EIO, ENOMEM. */
int lz_store_rebuild_payloads(lz_store *s, lz_store_rebuild_stats *st, char *err, size_t errlen);
/* 1 when LMDB's pages fail their check (what: the data file, the first
 * damage, counts), 0 when intact, -1 when the check cannot run (err).
 * tree_only: branch and leaf pages only, what key lookups read (cheap: about
 * a page per 30 payloads); else the first page of every value too. */
int lz_store_payloads_damaged(lz_store *s, int tree_only, char *what, size_t whatlen, char *err, size_t errlen);

typedef enum {
    LZ_STORE_ISSUE_MISSING = 1,    /* row without payload */
    LZ_STORE_ISSUE_CORRUPT = 2,    /* payload fails header or checksum validation */
    LZ_STORE_ISSUE_WRONG_MODEL = 3,/* payload of another model, or key of another model */
    LZ_STORE_ISSUE_MISMATCH = 4,   /* payload shape/tokens or key disagree with the row */
    LZ_STORE_ISSUE_BAD_ROW = 5,    /* row itself unusable (token ids blob malformed) */
    LZ_STORE_ISSUE_KV_DAMAGED = 6, /* LMDB's own pages are damaged (doc_id -1): rebuild with lz_store_rebuild_payloads */
    /* a sharded store's set (store_shards_check.c) */
    LZ_STORE_ISSUE_MISPLACED = 7,  /* row in a shard its source id does not hash to, or in two shards */
    LZ_STORE_ISSUE_SHARD = 8       /* a shard as a whole (doc_id -1): its last ingest did not finish, a stray folder */
} lz_store_issue_kind;

typedef struct {
    lz_store_issue_kind kind;
    int64_t doc_id;               /* 0 for the model prefix */
    const char *ext_id;           /* "(prefix)" for the model prefix */
    const int *token_ids;         /* the row's tokens, NULL when BAD_ROW */
    int n_tokens;
    const char *message;
    const char *kv_spec;          /* the row's KV eviction spec ("" = stored whole) */
} lz_store_issue;

typedef struct {
    int64_t n_docs, n_ok, n_issues;
    int64_t n_payloads, n_unreferenced; /* LMDB entries, of which garbage */
    int kv_damaged;                     /* LMDB's pages failed their check: payloads were read from the intact ones */
} lz_store_check_stats;
/* Verifies LMDB's own pages first (store/kvdb_pages.h: without LMDB; damage
 * is one KV_DAMAGED issue, and the payloads are then read from the intact
 * pages), then every row (and the model's prefix payload): payload present,
 * header and CRC32C valid, model fingerprint, shape, token count and key
 * match. Calls fn per issue (may be NULL). Counts unreferenced payloads
 * without deleting them. Errors only when the check itself cannot run.
 * A sharded store: every shard so (issues name the shard, row ids global),
 * then the set: each row in the shard its source id hashes to and in no
 * other, each shard's last ingest run finished, no folder beside the
 * manifest's shards. */
int lz_store_check(lz_store *s, int (*fn)(const lz_store_issue *is, void *ctx), void *ctx,
                   lz_store_check_stats *st, char *err, size_t errlen);


#endif /* LZ_STORE_H */
