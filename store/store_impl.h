/* store_impl.h - the store's private state, shared by the files of store/
 * (store.c: open, binding, keys, payloads, gc, check; store_rows.c: the
 * rows and their transactions; store_shards.c, store_shards_check.c: a
 * sharded store opened as one). Nothing outside store/ includes it. */
#ifndef LZ_STORE_IMPL_H
#define LZ_STORE_IMPL_H

#include <stdint.h>

#include "store/kvdb.h"
#include "store/meta.h"
#include "store/shards.h"
#include "store/store.h"

struct lz_store {
    char dir[4096];
    lz_meta *meta;
    lz_kvdb *kv;
    int kv_shared;              /* kv is another handle's (lz_store_open_shared): not closed here */
    int lock_fd;
    int rdonly;
    int bound;
    uint8_t fingerprint[32];
    int64_t model_id;
    int *prefix;
    int n_prefix;
    int n_layers, n_kv_heads, head_dim;
    int kv_dtype;
    /* a sharded store's root (store_shards.c): meta and kv are NULL, the
     * shards are whole stores; a row id is local id * n_shards + shard */
    int n_shards;               /* 0: a plain store */
    lz_store **shard;           /* (n_shards) */
    lz_shards_manifest manifest;
};

/* Status of a meta.c / kvdb.c call as an LZ_STORE_* status. */
int lz_store_from_meta(int st);
int lz_store_from_kvdb(int st);

/* ---- a sharded store (store_shards.c): what each facade call does on a root ---- */
int lz_store_sh_open(lz_store *s, int flags, char *err, size_t errlen); /* s->dir set; fills the rest */
void lz_store_sh_close(lz_store *s);
/* EINVAL: writes go to one shard at a time (lazyingest --shard I/N), never through the root. */
int lz_store_sh_refuse(lz_store *s, const char *what, char *err, size_t errlen);
int lz_store_sh_bind_recorded(lz_store *s, char *err, size_t errlen);
int lz_store_sh_check_model(lz_store *s, const lz_store_model_desc *m, char *err, size_t errlen);
int lz_store_sh_doc_tokens(lz_store *s, int64_t doc_id, int **ids, int *n, char *err, size_t errlen);
int lz_store_sh_top_accessed(lz_store *s, int limit, int all, lz_meta_top_fn fn, void *ctx, char *err, size_t errlen);
int lz_store_sh_hit(lz_store *s, int64_t doc_id, char *err, size_t errlen);
int lz_store_sh_doc_find(lz_store *s, const char *ext_id, lz_meta_doc *out, char *src, size_t srclen, char *err,
                         size_t errlen);
int lz_store_sh_source_rows(lz_store *s, const char *source_id, int (*fn)(const lz_meta_doc *d, void *ctx), void *ctx,
                            char *err, size_t errlen);
int lz_store_sh_doc_title(lz_store *s, int64_t id, char *buf, size_t len, char *err, size_t errlen);
int lz_store_sh_doc_count(lz_store *s, int64_t *n, char *err, size_t errlen);
int lz_store_sh_search(lz_store *s, const char *text, int k, int (*fn)(const lz_meta_hit *h, void *ctx), void *ctx,
                       char *err, size_t errlen);
int lz_store_sh_has_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], size_t *len, char *err, size_t errlen);
int lz_store_sh_read_payloads(lz_store *s, const uint8_t (*keys)[LZ_META_KEY_LEN], int n,
                              int (*fn)(const void *const *blobs, const size_t *lens, void *ctx), void *ctx, char *err,
                              size_t errlen);
int lz_store_sh_read_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN],
                             int (*fn)(const void *blob, size_t len, void *ctx), void *ctx, char *err, size_t errlen);
int lz_store_sh_get_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], void **blob, size_t *len, char *err,
                            size_t errlen);
int lz_store_sh_payloads_damaged(lz_store *s, int tree_only, char *what, size_t whatlen, char *err, size_t errlen);
/* store_shards_check.c: every shard's check, then the set's own (placement, duplicates, runs, folders). */
int lz_store_sh_check(lz_store *s, int (*fn)(const lz_store_issue *is, void *ctx), void *ctx,
                      lz_store_check_stats *st, char *err, size_t errlen);

#endif /* LZ_STORE_IMPL_H */
