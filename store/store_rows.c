/* store_rows.c - the store's rows (documents, sources, ingest runs) and the
 * transactions around them, over meta.c's SQL. Enforces the durability rule
 * "payload first, row second": a row is never written pointing at a payload
 * LMDB does not hold. Payload I/O, binding and the check are in store.c;
 * through a sharded store's root (store_shards.c) reads are routed and writes refused. */
#include "store/store.h"
#include "store/store_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"

/* EINVAL unless the payload key is in LMDB (what every row that names a payload needs). */
static int payload_first(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], const char *what,
                         char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing rows", err, errlen);
    int rc = lz_kvdb_exists(s->kv, key, LZ_META_KEY_LEN, err, errlen); /* 1, 0 or -1 */
    if (rc == 1) return LZ_OK;
    if (rc == 0)
        return lz_fail(err, errlen, LZ_EINVAL,
                       "store %s: row of document '%s' refused: its payload is not written yet", s->dir, what);
    return LZ_EIO;
}

int lz_store_begin(lz_store *s, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "a write transaction", err, errlen);
    return lz_store_from_meta(lz_meta_begin(s->meta, err, errlen));
}

int lz_store_commit(lz_store *s, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "a write transaction", err, errlen);
    return lz_store_from_meta(lz_meta_commit(s->meta, err, errlen));
}

void lz_store_rollback(lz_store *s)
{
    if (!s->n_shards) lz_meta_rollback(s->meta); /* a root has no transaction to undo */
}

int lz_store_doc_insert(lz_store *s, lz_meta_doc *d, char *err, size_t errlen)
{
    int rc = payload_first(s, d->payload_key, d->ext_id, err, errlen);
    return rc ? rc : lz_store_from_meta(lz_meta_doc_insert(s->meta, d, err, errlen));
}

int lz_store_doc_update(lz_store *s, const lz_meta_doc *d, char *err, size_t errlen)
{
    int rc = payload_first(s, d->payload_key, d->ext_id, err, errlen);
    return rc ? rc : lz_store_from_meta(lz_meta_doc_update(s->meta, d, err, errlen));
}

int lz_store_doc_set_payload(lz_store *s, int64_t id, const uint8_t key[LZ_META_KEY_LEN],
                             int64_t raw_bytes, int64_t stored_bytes, char *err, size_t errlen)
{
    char what[32];
    snprintf(what, sizeof what, "row %lld", (long long)id);
    int rc = payload_first(s, key, what, err, errlen);
    return rc ? rc
              : lz_store_from_meta(lz_meta_doc_set_payload(s->meta, id, key, raw_bytes, stored_bytes, err, errlen));
}

int lz_store_doc_delete(lz_store *s, int64_t id, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing rows", err, errlen);
    return lz_store_from_meta(lz_meta_doc_delete(s->meta, id, err, errlen));
}

int lz_store_doc_touch(lz_store *s, int64_t id, int64_t run, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing rows", err, errlen);
    return lz_store_from_meta(lz_meta_doc_touch(s->meta, id, run, err, errlen));
}

int lz_store_source_touch(lz_store *s, const char *source_id, int64_t run, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing rows", err, errlen);
    return lz_store_from_meta(lz_meta_source_touch(s->meta, source_id, run, err, errlen));
}

int lz_store_source_prune(lz_store *s, const char *source_id, int64_t run, int64_t *n,
                          char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing rows", err, errlen);
    return lz_store_from_meta(lz_meta_source_prune(s->meta, source_id, run, n, err, errlen));
}

int lz_store_prune(lz_store *s, int64_t run, int64_t *n, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing rows", err, errlen);
    return lz_store_from_meta(lz_meta_prune(s->meta, run, n, err, errlen));
}

int lz_store_run_begin(lz_store *s, const char *args, int64_t model_id, int64_t *run,
                       char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "an ingest run", err, errlen);
    return lz_store_from_meta(lz_meta_run_begin(s->meta, args, model_id, run, err, errlen));
}

int lz_store_run_end(lz_store *s, int64_t run, const lz_meta_run_counts *c, const char *status,
                     char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "an ingest run", err, errlen);
    return lz_store_from_meta(lz_meta_run_end(s->meta, run, c, status, err, errlen));
}

int lz_store_doc_find(lz_store *s, const char *ext_id, lz_meta_doc *out, char *src, size_t srclen,
                      char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_doc_find(s, ext_id, out, src, srclen, err, errlen);
    return lz_store_from_meta(lz_meta_doc_find(s->meta, ext_id, out, src, srclen, err, errlen));
}

int lz_store_source_rows(lz_store *s, const char *source_id, int (*fn)(const lz_meta_doc *d, void *ctx),
                         void *ctx, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_source_rows(s, source_id, fn, ctx, err, errlen);
    return lz_store_from_meta(lz_meta_source_rows(s->meta, source_id, fn, ctx, err, errlen));
}

int lz_store_doc_title(lz_store *s, int64_t id, char *buf, size_t len, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_doc_title(s, id, buf, len, err, errlen);
    return lz_store_from_meta(lz_meta_doc_title(s->meta, id, buf, len, err, errlen));
}

int lz_store_doc_count(lz_store *s, int64_t *n, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_doc_count(s, n, err, errlen);
    return lz_store_from_meta(lz_meta_doc_count(s->meta, n, err, errlen));
}

int lz_store_search(lz_store *s, const char *text, int k, int (*fn)(const lz_meta_hit *h, void *ctx),
                    void *ctx, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_search(s, text, k, fn, ctx, err, errlen);
    char *fts = lz_meta_fts_quote(text);
    if (!fts) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    int rc = fts[0] ? lz_store_from_meta(lz_meta_search(s->meta, fts, k, fn, ctx, err, errlen)) : LZ_OK;
    free(fts);
    return rc;
}
