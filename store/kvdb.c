/* kvdb.c - LMDB environment for KV payloads: batched durable writes with
 * map growth on MDB_MAP_FULL, snapshot reads, iteration for garbage
 * collection. Every LMDB return value is checked and reported with the path.
 */
#include "store/kvdb.h"

#include <errno.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"

struct lz_kvdb {
    MDB_env *env;
    MDB_dbi dbi;
    int rdonly;
    char path[4096];
};

struct lz_kvdb_reader {
    lz_kvdb *db;
    MDB_txn *txn;
};

static int lmdb_fail(lz_kvdb *db, char *err, size_t errlen, const char *what, int rc)
{
    return lz_fail(err, errlen, rc == ENOMEM ? LZ_ENOMEM : LZ_EIO, "LMDB %s: %s: %s",
                db ? db->path : "?", what, mdb_strerror(rc));
}

int lz_kvdb_open(const char *dir, int flags, lz_kvdb **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_kvdb *db = calloc(1, sizeof *db);
    if (!db) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    snprintf(db->path, sizeof db->path, "%s", dir);
    db->rdonly = (flags & LZ_KVDB_RDONLY) != 0;
    if (!db->rdonly && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        free(db);
        return lz_fail(err, errlen, LZ_EIO, "cannot create %s: %s", dir, strerror(e));
    }
    int rc = mdb_env_create(&db->env);
    if (rc) {
        free(db);
        return lz_fail(err, errlen, LZ_EIO, "LMDB %s: mdb_env_create: %s", dir, mdb_strerror(rc));
    }
    unsigned envflags = MDB_NOTLS | (db->rdonly ? MDB_RDONLY : 0);
    rc = mdb_env_set_maxreaders(db->env, 256);
    if (!rc) rc = mdb_env_open(db->env, dir, envflags, 0666);
    if (rc) {
        int st = lmdb_fail(db, err, errlen, "mdb_env_open", rc);
        mdb_env_close(db->env);
        free(db);
        return st;
    }
    int dead = 0;
    rc = mdb_reader_check(db->env, &dead); /* clear slots of killed readers */
    MDB_envinfo info;
    if (!rc) rc = mdb_env_info(db->env, &info);
    if (!rc && !db->rdonly && info.me_mapsize < LZ_KVDB_INITIAL_MAP)
        rc = mdb_env_set_mapsize(db->env, LZ_KVDB_INITIAL_MAP);
    MDB_txn *txn = NULL;
    if (!rc) rc = mdb_txn_begin(db->env, NULL, db->rdonly ? MDB_RDONLY : 0, &txn);
    if (!rc) rc = mdb_dbi_open(txn, NULL, 0, &db->dbi);
    if (!rc) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
    }
    if (rc) {
        int st = lmdb_fail(db, err, errlen, "open database", rc);
        if (txn) mdb_txn_abort(txn);
        mdb_env_close(db->env);
        free(db);
        return st;
    }
    *out = db;
    return LZ_OK;
}

void lz_kvdb_close(lz_kvdb *db)
{
    if (!db) return;
    mdb_env_close(db->env);
    free(db);
}

/* Begins a transaction, adopting a map another process grew. */
static int begin(lz_kvdb *db, unsigned flags, MDB_txn **txn)
{
    int rc = mdb_txn_begin(db->env, NULL, flags, txn);
    if (rc == MDB_MAP_RESIZED) {
        rc = mdb_env_set_mapsize(db->env, 0);
        if (!rc) rc = mdb_txn_begin(db->env, NULL, flags, txn);
    }
    return rc;
}

static int grow(lz_kvdb *db)
{
    MDB_envinfo info;
    int rc = mdb_env_info(db->env, &info);
    if (!rc) rc = mdb_env_set_mapsize(db->env, info.me_mapsize * 2);
    return rc;
}

static int check_key(const lz_kvdb_item *it, char *err, size_t errlen)
{
    if (!it->key || it->key_len == 0 || it->key_len > LZ_KVDB_MAX_KEY)
        return lz_fail(err, errlen, LZ_EINVAL, "kvdb: key length %zu not in [1, %d]", it->key_len,
                    LZ_KVDB_MAX_KEY);
    return 0;
}

/* One write transaction over items: put (del == 0) or delete. Retries the
 * whole batch after doubling the map on MDB_MAP_FULL (fixed: EFULL instead). */
static int write_batch(lz_kvdb *db, const lz_kvdb_item *items, int n, int del, int fixed, int *n_deleted,
                       char *err, size_t errlen)
{
    if (db->rdonly) return lz_fail(err, errlen, LZ_EREADONLY, "LMDB %s: opened read-only", db->path);
    for (int i = 0; i < n; i++)
        if (check_key(&items[i], err, errlen)) return LZ_EINVAL;
    for (int attempt = 0; attempt < 40; attempt++) {
        MDB_txn *txn;
        int rc = begin(db, 0, &txn);
        if (rc) return lmdb_fail(db, err, errlen, "mdb_txn_begin", rc);
        int deleted = 0;
        for (int i = 0; i < n && !rc; i++) {
            MDB_val k = { items[i].key_len, (void *)items[i].key };
            if (del) {
                rc = mdb_del(txn, db->dbi, &k, NULL);
                if (rc == MDB_NOTFOUND) rc = 0;
                else if (!rc) deleted++;
            } else {
                MDB_val v = { items[i].val_len, (void *)items[i].val };
                rc = mdb_put(txn, db->dbi, &k, &v, 0);
            }
        }
        if (rc) {
            mdb_txn_abort(txn);
        } else {
            rc = mdb_txn_commit(txn); /* frees txn whatever the result */
            if (!rc) {
                if (n_deleted) *n_deleted = deleted;
                return LZ_OK;
            }
        }
        if (rc != MDB_MAP_FULL) return lmdb_fail(db, err, errlen, del ? "delete" : "put", rc);
        if (fixed) return lz_fail(err, errlen, LZ_EFULL, "LMDB %s: map full", db->path);
        rc = grow(db);
        if (rc) return lmdb_fail(db, err, errlen, "grow map", rc);
    }
    return lz_fail(err, errlen, LZ_EIO, "LMDB %s: map still full after growing", db->path);
}

int lz_kvdb_put_batch(lz_kvdb *db, const lz_kvdb_item *items, int n, char *err, size_t errlen)
{
    return write_batch(db, items, n, 0, 0, NULL, err, errlen);
}

int lz_kvdb_put_batch_fixed(lz_kvdb *db, const lz_kvdb_item *items, int n, char *err, size_t errlen)
{
    return write_batch(db, items, n, 0, 1, NULL, err, errlen);
}

int lz_kvdb_reserve(lz_kvdb *db, uint64_t bytes, char *err, size_t errlen)
{
    if (db->rdonly) return lz_fail(err, errlen, LZ_EREADONLY, "LMDB %s: opened read-only", db->path);
    MDB_envinfo info;
    MDB_stat ms;
    int rc = mdb_env_info(db->env, &info);
    if (!rc) rc = mdb_env_stat(db->env, &ms);
    if (rc) return lmdb_fail(db, err, errlen, "mdb_env_info", rc);
    const uint64_t used = (uint64_t)(info.me_last_pgno + 1) * ms.ms_psize;
    uint64_t size = info.me_mapsize;
    while (size - used < bytes && size < ((uint64_t)1 << 50)) size *= 2;
    if (size == info.me_mapsize) return LZ_OK;
    rc = mdb_env_set_mapsize(db->env, size);
    return rc ? lmdb_fail(db, err, errlen, "grow map", rc) : LZ_OK;
}

int lz_kvdb_del_batch(lz_kvdb *db, const lz_kvdb_item *items, int n, int *n_deleted,
                      char *err, size_t errlen)
{
    return write_batch(db, items, n, 1, 0, n_deleted, err, errlen);
}

int lz_kvdb_reader_begin(lz_kvdb *db, lz_kvdb_reader **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_kvdb_reader *r = malloc(sizeof *r);
    if (!r) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    r->db = db;
    int rc = begin(db, MDB_RDONLY, &r->txn);
    if (rc) {
        free(r);
        return lmdb_fail(db, err, errlen, "read transaction", rc);
    }
    *out = r;
    return LZ_OK;
}

int lz_kvdb_reader_get(lz_kvdb_reader *r, const void *key, size_t key_len, const void **val,
                       size_t *val_len, char *err, size_t errlen)
{
    lz_kvdb_item it = { key, key_len, NULL, 0 };
    if (check_key(&it, err, errlen)) return LZ_EINVAL;
    MDB_val k = { key_len, (void *)key }, v;
    int rc = mdb_get(r->txn, r->db->dbi, &k, &v);
    if (rc == MDB_NOTFOUND) return lz_fail(err, errlen, LZ_ENOTFOUND, "payload not found");
    if (rc) return lmdb_fail(r->db, err, errlen, "mdb_get", rc);
    *val = v.mv_data;
    *val_len = v.mv_size;
    return LZ_OK;
}

void lz_kvdb_reader_end(lz_kvdb_reader *r)
{
    if (!r) return;
    mdb_txn_abort(r->txn);
    free(r);
}

int lz_kvdb_get(lz_kvdb *db, const void *key, size_t key_len, void **val, size_t *val_len,
                char *err, size_t errlen)
{
    *val = NULL;
    *val_len = 0;
    lz_kvdb_reader *r;
    int rc = lz_kvdb_reader_begin(db, &r, err, errlen);
    if (rc) return rc;
    const void *p;
    size_t n;
    rc = lz_kvdb_reader_get(r, key, key_len, &p, &n, err, errlen);
    if (!rc) {
        *val = malloc(n ? n : 1);
        if (!*val) rc = lz_fail(err, errlen, LZ_ENOMEM, "out of memory (%zu bytes)", n);
        else {
            memcpy(*val, p, n);
            *val_len = n;
        }
    }
    lz_kvdb_reader_end(r);
    return rc;
}

int lz_kvdb_exists(lz_kvdb *db, const void *key, size_t key_len, char *err, size_t errlen)
{
    lz_kvdb_reader *r;
    if (lz_kvdb_reader_begin(db, &r, err, errlen)) return -1;
    const void *p;
    size_t n;
    int rc = lz_kvdb_reader_get(r, key, key_len, &p, &n, err, errlen);
    lz_kvdb_reader_end(r);
    return rc == LZ_OK ? 1 : rc == LZ_ENOTFOUND ? 0 : -1;
}

int lz_kvdb_foreach(lz_kvdb *db, int (*fn)(const void *key, size_t key_len, size_t val_len, void *ctx),
                    void *ctx, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = begin(db, MDB_RDONLY, &txn);
    if (rc) return lmdb_fail(db, err, errlen, "read transaction", rc);
    MDB_cursor *cur;
    rc = mdb_cursor_open(txn, db->dbi, &cur);
    if (rc) {
        mdb_txn_abort(txn);
        return lmdb_fail(db, err, errlen, "mdb_cursor_open", rc);
    }
    MDB_val k, v;
    int ret = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ret = fn(k.mv_data, k.mv_size, v.mv_size, ctx);
        if (ret) break;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (ret) return ret;
    if (rc != MDB_NOTFOUND) return lmdb_fail(db, err, errlen, "mdb_cursor_get", rc);
    return LZ_OK;
}

int lz_kvdb_stat(lz_kvdb *db, lz_kvdb_stats *st, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = begin(db, MDB_RDONLY, &txn);
    if (rc) return lmdb_fail(db, err, errlen, "read transaction", rc);
    MDB_stat ms;
    MDB_envinfo info;
    rc = mdb_stat(txn, db->dbi, &ms);
    if (!rc) rc = mdb_env_info(db->env, &info);
    mdb_txn_abort(txn);
    if (rc) return lmdb_fail(db, err, errlen, "mdb_stat", rc);
    st->entries = ms.ms_entries;
    st->map_size = info.me_mapsize;
    st->used_bytes = (uint64_t)(info.me_last_pgno + 1) * ms.ms_psize;
    return LZ_OK;
}
