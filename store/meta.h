/* meta.h - the SQLite side of a store: schema migrations (the schema/NNN_name.sql
 * embedded at build time by schema/embed.sh), WAL journal, prepared
 * statements reused for every row, the FTS5 index and access statistics.
 * Rows only: KV payloads are kvdb.h's, keys and consistency rules store.h's.
 *
 * All functions return LZ_OK (0) or an LZ_META_E* status with
 * SQLite's message and the statement in err.
 */
#ifndef LZ_META_H
#define LZ_META_H

#include <stddef.h>
#include <stdint.h>
#include "base/status.h"

typedef struct lz_meta lz_meta;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

enum { LZ_META_RDONLY = 1 };

#define LZ_META_KEY_LEN 64 /* payload key: model fingerprint (32) || content digest (32) */

/* An embedded migration: schema/<NNN>_<name>.sql brings user_version to version. */
typedef struct { int version; const char *file; const char *sql; } lz_meta_migration;
extern const lz_meta_migration lz_meta_migrations[];
extern const int lz_meta_n_migrations;

/* Opens path (creating it and applying pending migrations unless RDONLY), in
 * WAL mode with synchronous=FULL and a 10 s busy timeout. Errors: EIO,
 * ESCHEMA (database newer than this build, or a migration failed). */
int lz_meta_open(const char *path, int flags, lz_meta **out, char *err, size_t errlen);
void lz_meta_close(lz_meta *m); /* NULL is a no-op */
/* Creates (or upgrades) the database at path to exactly schema version
 * `version` and closes it, for tests of upgrades from older stores. */
int lz_meta_create_at_version(const char *path, int version, char *err, size_t errlen);
int lz_meta_user_version(lz_meta *m); /* -1 on error */

/* Write transactions (BEGIN IMMEDIATE). */
int lz_meta_begin(lz_meta *m, char *err, size_t errlen);
int lz_meta_commit(lz_meta *m, char *err, size_t errlen);
void lz_meta_rollback(lz_meta *m);

/* ---- models ---- */
typedef struct {
    int64_t id;
    char fingerprint[65];
    char arch[32];
    int n_layers, n_kv_heads, head_dim;
    char rope_layout[16];    /* "adjacent" | "half" */
    double rope_theta;
    char rope_scaling[96];   /* "none" | "divisors:<hex>" */
    int *prefix_tokens;      /* malloc'd by lz_meta_model_get; caller frees */
    int n_prefix;
    uint8_t prefix_key[LZ_META_KEY_LEN];
    char source_path[1024];
    int kv_dtype;            /* LZ_PAYLOAD_DTYPE_* of the store's payloads */
} lz_meta_model;

/* The store's model (the first row), or ENOTFOUND. */
int lz_meta_model_get(lz_meta *m, lz_meta_model *out, char *err, size_t errlen);
/* Inserts a model (out id in m->id). */
int lz_meta_model_insert(lz_meta *m, lz_meta_model *model, char *err, size_t errlen);
/* Rewrites the prefix (tokens and key) and source path of model id. */
int lz_meta_model_set_prefix(lz_meta *m, int64_t id, const int *prefix, int n_prefix,
                             const uint8_t key[LZ_META_KEY_LEN], const char *source_path,
                             char *err, size_t errlen);

/* ---- documents ---- */
typedef struct {
    int64_t id;
    const char *ext_id, *source_id;
    int passage;                       /* -1 when the record was not split */
    const char *title;                 /* may be NULL */
    const char *text;
    uint8_t content_hash[32];
    const int *token_ids;
    int n_tokens;
    int64_t model_id;
    uint8_t payload_key[LZ_META_KEY_LEN];
    int64_t raw_bytes, stored_bytes;
    int64_t seen_run;
    int has_source_hash;               /* passages of a split record */
    uint8_t source_hash[32];           /* of the whole record and the split budget */
    /* KV eviction at ingest (schema v3; ingest/kvpolicy.h). kv_spec "" means
     * stored whole (written as kv_policy 'none', the rest NULL). */
    char kv_policy[16];                /* "snapkv", "ada-snapkv", ... */
    char kv_budget[24];                /* "0.2" or "128t" */
    int kv_window;
    char kv_spec[128];                 /* every parameter, canonical; enters the payload key */
    int64_t kv_kept;                   /* sum of the payload's kept table; 0 = unknown */
} lz_meta_doc;

/* Looks up ext_id; on success fills id, source_id (copied into src, srclen),
 * content_hash, payload_key, n_tokens, model_id, sizes, source_hash, the kv_*
 * fields; the text and token fields are left NULL. Errors: ENOTFOUND. */
int lz_meta_doc_find(lz_meta *m, const char *ext_id, lz_meta_doc *out, char *src, size_t srclen,
                     char *err, size_t errlen);
/* Inserts (sets d->id) or updates row d->id (every column; timestamps kept or set). */
int lz_meta_doc_insert(lz_meta *m, lz_meta_doc *d, char *err, size_t errlen);
int lz_meta_doc_update(lz_meta *m, const lz_meta_doc *d, char *err, size_t errlen);
/* Points row id at another payload (repair). */
int lz_meta_doc_set_payload(lz_meta *m, int64_t id, const uint8_t key[LZ_META_KEY_LEN],
                            int64_t raw_bytes, int64_t stored_bytes, char *err, size_t errlen);
/* Calls fn for every row of source_id in passage order with id, ext_id,
 * passage, source_hash, payload_key, model_id and token ids (NULL when the
 * blob is malformed); pointers valid during the call; fn returns non-zero
 * to stop early and must not use m. */
int lz_meta_source_rows(lz_meta *m, const char *source_id, int (*fn)(const lz_meta_doc *d, void *ctx),
                        void *ctx, char *err, size_t errlen);
/* Marks row id as seen by run. */
int lz_meta_doc_touch(lz_meta *m, int64_t id, int64_t run, char *err, size_t errlen);
/* Marks every row of source_id as seen by run (a bad record keeps its old rows). */
int lz_meta_source_touch(lz_meta *m, const char *source_id, int64_t run, char *err, size_t errlen);
int lz_meta_doc_delete(lz_meta *m, int64_t id, char *err, size_t errlen);
/* Deletes rows of source_id not seen by run (passages a shorter version
 * no longer has); *n receives the count. */
int lz_meta_source_prune(lz_meta *m, const char *source_id, int64_t run, int64_t *n,
                         char *err, size_t errlen);
/* Deletes every row not seen by run; *n receives the count. */
int lz_meta_prune(lz_meta *m, int64_t run, int64_t *n, char *err, size_t errlen);
/* Token ids of row id (the document after the prefix): *ids malloc'd.
 * Errors: ENOTFOUND, EINVAL (malformed blob). */
int lz_meta_doc_tokens(lz_meta *m, int64_t id, int **ids, int *n, char *err, size_t errlen);
/* Title of document row id into buf (empty when it has none). Errors: ENOTFOUND. */
int lz_meta_doc_title(lz_meta *m, int64_t id, char *buf, size_t len, char *err, size_t errlen);
/* Number of documents. */
int lz_meta_doc_count(lz_meta *m, int64_t *n, char *err, size_t errlen);
/* Calls fn for every row in id order with all columns (pointers valid during
 * the call only); fn returns non-zero to stop, and that value is returned.
 * Rows are read in one snapshot; fn must not write through m. */
int lz_meta_doc_foreach(lz_meta *m, int (*fn)(const lz_meta_doc *d, void *ctx), void *ctx,
                        char *err, size_t errlen);
/* Calls fn(id, ext_id, source_id) for every row in id order (one snapshot,
 * a private statement: fn may use m's other calls); non-zero stops and is returned. */
int lz_meta_doc_ids_foreach(lz_meta *m, int (*fn)(int64_t id, const char *ext_id, const char *source_id, void *ctx),
                            void *ctx, char *err, size_t errlen);
/* 1 when a document or model row references the payload key, 0 when none,
 * -1 on error (message in err). */
int lz_meta_key_referenced(lz_meta *m, const uint8_t *key, size_t key_len, char *err, size_t errlen);

/* ---- full-text search and access statistics (query side) ---- */
typedef struct {
    int64_t id;
    const char *ext_id, *title;
    double score; /* bm25: lower is better (SQLite's sign) */
} lz_meta_hit;
/* FTS5 query over title + text, best k by bm25 (equal scores by ext_id); fn is called per hit in
 * rank order. The query is FTS5 syntax; lz_meta_fts_quote makes plain
 * text safe (every word a quoted term, OR-ed). */
int lz_meta_search(lz_meta *m, const char *fts_query, int k,
                   int (*fn)(const lz_meta_hit *h, void *ctx), void *ctx, char *err, size_t errlen);
/* The statistics BM25 takes from an index, for scoring several stores' rows
 * as one index (a sharded store: store/fts_bm25.h): rows, tokens of all
 * rows (title + text), and the rows matching each phrase of fts_query
 * (phrase_docs malloc'd, n_phrases of them; NULL and 0 when no row of this
 * store matches any). */
typedef struct {
    int64_t n_docs, n_tokens;
    int64_t *phrase_docs;
    int n_phrases;
} lz_meta_bm25_stats;
int lz_meta_fts_stats(lz_meta *m, const char *fts_query, lz_meta_bm25_stats *out, char *err, size_t errlen);
/* lz_meta_search scored with the given statistics instead of this store's:
 * avgdl the average row length, idf[n_phrases] each phrase's idf
 * (lz_fts_bm25_idf of the summed counts). One store's own statistics give
 * bm25()'s scores exactly. Ties (equal scores) go by ext_id, in both. */
int lz_meta_search_idf(lz_meta *m, const char *fts_query, int k, double avgdl, const double *idf, int n_phrases,
                       int (*fn)(const lz_meta_hit *h, void *ctx), void *ctx, char *err, size_t errlen);
/* Turns free text into an FTS5 query "w1" OR "w2" ... (malloc'd; NULL on OOM). */
char *lz_meta_fts_quote(const char *text);
/* Adds one hit to doc id's statistics (hits + 1, last_hit = now). */
int lz_meta_stats_hit(lz_meta *m, int64_t doc_id, char *err, size_t errlen);
int lz_meta_stats_get(lz_meta *m, int64_t doc_id, int64_t *hits, char *err, size_t errlen);
/* Calls fn for the most hit documents, most hits first, at most limit; fn
 * returns non-zero to stop early (not an error). */
/* Called per document, most hit first: its row id, hit count, payload key
 * and token count; non-zero stops the walk. */
typedef int (*lz_meta_top_fn)(int64_t doc_id, int64_t hits, const uint8_t *payload_key, int n_tokens, void *ctx);
/* all: every document, those never hit after the others (by row id), hits 0. */
int lz_meta_stats_top(lz_meta *m, int limit, int all, lz_meta_top_fn fn, void *ctx, char *err, size_t errlen);

/* ---- ingest runs ---- */
typedef struct {
    int64_t n_added, n_updated, n_unchanged, n_removed, n_skipped;
    int64_t n_tokens, raw_bytes, stored_bytes, n_garbage;
} lz_meta_run_counts;
/* Marks runs left 'running' by a killed process as 'aborted' (call while
 * holding the writer lock), then starts a run. */
int lz_meta_run_begin(lz_meta *m, const char *args, int64_t model_id, int64_t *run,
                      char *err, size_t errlen);
/* The last ingest run (highest id): ENOTFOUND when the store has none. */
typedef struct {
    int64_t id;
    char status[16];      /* 'running', 'ok', 'partial', 'failed', 'aborted' */
    char started_at[40], ended_at[40]; /* ended_at "" while running or after a kill */
} lz_meta_run_info;
int lz_meta_run_last(lz_meta *m, lz_meta_run_info *out, char *err, size_t errlen);
int lz_meta_run_end(lz_meta *m, int64_t run, const lz_meta_run_counts *c, const char *status,
                    char *err, size_t errlen);


#endif /* LZ_META_H */
