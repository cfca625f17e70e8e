/* kvdb.c - LMDB environment for KV payloads: batched durable writes with
 * map growth on MDB_MAP_FULL, snapshot reads, iteration for garbage
 * collection; the check of its pages and the rebuild of a damaged one
 * (store/kvdb_pages.c reads them). Every LMDB return value is checked and
 * reported with the path; a full file system is named as such.
 *
 * Several threads may use one environment (store handles opened by
 * lz_store_open_shared: the serving engines): every transaction holds the
 * read side of the environment's lock while it is open, and a change of the
 * map size (adopting a map another process grew, growing it for a write)
 * takes the write side, since LMDB allows mdb_env_set_mapsize only while no
 * transaction of the process is open. A thread that already holds a
 * transaction of that environment resizes without the lock (as LMDB alone
 * would: never deadlocked on itself); one holding transactions of other
 * environments (a sharded store's reads, one snapshot a shard, taken in
 * shard order) takes it.
 *
 * The store's writer (LZ_KVDB_WRITER) maps the file writable (MDB_WRITEMAP):
 * a payload's bytes are pwritten into its reserved overflow pages and their
 * writeback started at once (sync_file_range), so the commit's sync finds
 * them mostly on disk; LMDB's own copies (malloc'd dirty pages, written at
 * the commit) are skipped. Writes through a map that find the disk full are
 * a SIGBUS, not an error, so each transaction's room is allocated on disk
 * first (fallocate: a full disk is an error before anything is written), and
 * the map only grows after the file was made that large here (LMDB's own
 * ftruncate failing would leave its map unmapped). Where the file system
 * cannot allocate ahead, or the file cannot be as large as the map (a file
 * size limit), the writer uses LMDB's default writes.
 */
#define _GNU_SOURCE /* fallocate, sync_file_range */
#include "store/kvdb.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <pthread.h>
#include <unistd.h>

#include "base/error.h"
#include "store/kvdb_pages.h"

struct lz_kvdb {
    MDB_env *env;
    MDB_dbi dbi;
    int rdonly;
    int writer;  /* LZ_KVDB_WRITER: the store's one writer */
    int wmap;    /* opened with MDB_WRITEMAP (the writer, where the file system allows it) */
    int fd;      /* wmap: LMDB's file descriptor of data.mdb */
    size_t psize;
    uint64_t direct_bytes; /* wmap: value bytes pwritten into overflow pages */
    pthread_rwlock_t lock; /* transactions (read side) against map resizes (write side) */
    char path[4096];
};

/* the environments the calling thread holds transactions of (a resize of one of them skips
 * the lock rather than wait for itself; past HELD_MAX nested ones, every resize skips it) */
#define HELD_MAX 64
static __thread const lz_kvdb *held[HELD_MAX];
static __thread int n_held, n_over;

static int holds(const lz_kvdb *db)
{
    if (n_over) return 1;
    for (int i = 0; i < n_held; i++)
        if (held[i] == db) return 1;
    return 0;
}
static void hold(const lz_kvdb *db)
{
    if (n_held < HELD_MAX) held[n_held++] = db;
    else n_over++;
}
static void unhold(const lz_kvdb *db)
{
    for (int i = n_held - 1; i >= 0; i--)
        if (held[i] == db) {
            held[i] = held[--n_held];
            return;
        }
    if (n_over) n_over--;
}

struct lz_kvdb_reader {
    lz_kvdb *db;
    MDB_txn *txn;
};

static int lmdb_fail(lz_kvdb *db, char *err, size_t errlen, const char *what, int rc)
{
    return lz_fail(err, errlen, rc == ENOMEM ? LZ_ENOMEM : LZ_EIO, "LMDB %s: %s: %s",
                db ? db->path : "?", what, mdb_strerror(rc));
}

/* A failed write's message: when the file system of the store is (nearly) full, say so,
 * whatever LMDB made of it (a short write is EIO, a refused one ENOSPC); need is the bytes
 * the write wanted (0: unknown; then less than 1 MiB free counts as full). */
static int write_fail(lz_kvdb *db, char *err, size_t errlen, const char *what, int rc, uint64_t need)
{
    struct statvfs vs;
    if ((rc == EIO || rc == ENOSPC || rc == EDQUOT) && statvfs(db->path, &vs) == 0) {
        const uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
        const uint64_t want = need + (1u << 20);
        if (rc == ENOSPC || rc == EDQUOT || avail < want)
            return lz_fail(err, errlen, LZ_EIO,
                           "LMDB %s: %s: no space left on device (%.1f MB free on the store's file system, the "
                           "write needed %.1f MB; LMDB said: %s). Free some space and run again: what was "
                           "committed is kept",
                           db->path, what, avail / 1e6, need / 1e6, mdb_strerror(rc));
    }
    return lmdb_fail(db, err, errlen, what, rc);
}

/* The size data.mdb has now (0 when absent). */
static uint64_t data_file_size(const lz_kvdb *db)
{
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/data.mdb", db->path);
    return stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* mdb_env_open with flags (and a map size, 0: LMDB's); on failure the environment is closed. */
static int open_flags(lz_kvdb *db, unsigned flags, size_t map)
{
    int rc = mdb_env_create(&db->env);
    if (rc) {
        db->env = NULL;
        return rc;
    }
    rc = mdb_env_set_maxreaders(db->env, 256);
    if (!rc && map) rc = mdb_env_set_mapsize(db->env, map);
    if (!rc) rc = mdb_env_open(db->env, db->path, flags, 0666);
    if (rc) {
        mdb_env_close(db->env);
        db->env = NULL;
    }
    return rc;
}

/* The writer's map: MDB_WRITEMAP (LMDB makes the file as large as the map)
 * where the file can be that large and its blocks can be allocated ahead;
 * 0, or nonzero with db->env closed (then LMDB's default writes are used). */
static int open_writemap(lz_kvdb *db)
{
    uint64_t map = data_file_size(db);
    if (map < LZ_KVDB_INITIAL_MAP) map = LZ_KVDB_INITIAL_MAP;
    int rc = open_flags(db, MDB_NOTLS | MDB_WRITEMAP, (size_t)map);
    if (rc) return rc;
    MDB_stat ms;
    rc = mdb_env_get_fd(db->env, &db->fd);
    if (!rc) rc = mdb_env_stat(db->env, &ms);
    if (!rc && fallocate(db->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)ms.ms_psize) != 0) rc = errno ? errno : EIO;
    if (rc) {
        mdb_env_close(db->env);
        db->env = NULL;
        return rc;
    }
    db->psize = ms.ms_psize;
    db->wmap = 1;
    return 0;
}

/* Opens db->env on db->path (the folder exists). */
static int env_open(lz_kvdb *db, char *err, size_t errlen)
{
    db->wmap = 0;
    int rc = db->writer && !db->rdonly ? open_writemap(db) : -1;
    if (rc) rc = open_flags(db, MDB_NOTLS | (db->rdonly ? MDB_RDONLY : 0), 0);
    if (rc) return lmdb_fail(db, err, errlen, "mdb_env_open", rc);
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
        db->env = NULL;
        return st;
    }
    return LZ_OK;
}

/* Removes folder dir and the files in it (LMDB's two); a missing one is fine. */
static void remove_env_dir(const char *dir)
{
    char p[4300];
    static const char *const files[] = { "data.mdb", "lock.mdb" };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* A rebuild (lz_kvdb_rebuild) stopped between its two renames leaves no dir but a complete
 * dir.rebuilt: finished here; what it left behind otherwise is removed. */
static void finish_rebuild(const char *dir)
{
    char built[4200], old[4200];
    snprintf(built, sizeof built, "%s.rebuilt", dir);
    snprintf(old, sizeof old, "%s.old", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0 && errno == ENOENT && stat(built, &sb) == 0) {
        if (rename(built, dir) != 0) return;
    }
    remove_env_dir(old);
}

int lz_kvdb_open(const char *dir, int flags, lz_kvdb **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_kvdb *db = calloc(1, sizeof *db);
    if (!db) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    snprintf(db->path, sizeof db->path, "%s", dir);
    db->rdonly = (flags & LZ_KVDB_RDONLY) != 0;
    db->writer = (flags & LZ_KVDB_WRITER) != 0;
    if (pthread_rwlock_init(&db->lock, NULL)) {
        free(db);
        return lz_fail(err, errlen, LZ_ENOMEM, "LMDB %s: no lock", dir);
    }
    if (!db->rdonly) finish_rebuild(dir);
    if (!db->rdonly && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        pthread_rwlock_destroy(&db->lock);
        free(db);
        return lz_fail(err, errlen, LZ_EIO, "cannot create %s: %s", dir, strerror(e));
    }
    int st = env_open(db, err, errlen);
    if (st) {
        pthread_rwlock_destroy(&db->lock);
        free(db);
        return st;
    }
    *out = db;
    return LZ_OK;
}

void lz_kvdb_close(lz_kvdb *db)
{
    if (!db) return;
    if (db->env) mdb_env_close(db->env);
    pthread_rwlock_destroy(&db->lock);
    free(db);
}

/* mdb_env_set_mapsize(size; 0: adopt the file's) with no transaction of the process open */
static int set_mapsize(lz_kvdb *db, size_t size)
{
    const int locked = !holds(db) && !pthread_rwlock_wrlock(&db->lock);
    int rc = 0;
    /* writemap: the file first made as large (LMDB's own ftruncate failing would leave its map unmapped) */
    if (db->wmap && size > data_file_size(db) && ftruncate(db->fd, (off_t)size) != 0) rc = errno ? errno : EIO;
    if (!rc) rc = mdb_env_set_mapsize(db->env, size);
    if (locked) pthread_rwlock_unlock(&db->lock);
    return rc;
}

/* Begins a transaction (ended by end()), adopting a map another process grew. */
static int begin(lz_kvdb *db, unsigned flags, MDB_txn **txn)
{
    if (!db->env) return EBADF; /* a rebuild could not open the new file */
    pthread_rwlock_rdlock(&db->lock);
    int rc = mdb_txn_begin(db->env, NULL, flags, txn);
    if (rc == MDB_MAP_RESIZED) {
        pthread_rwlock_unlock(&db->lock);
        rc = set_mapsize(db, 0);
        pthread_rwlock_rdlock(&db->lock);
        if (!rc) rc = mdb_txn_begin(db->env, NULL, flags, txn);
    }
    if (rc) pthread_rwlock_unlock(&db->lock);
    else hold(db);
    return rc;
}

/* Commits (commit) or aborts a transaction of begin(); the commit's result. */
static int end(lz_kvdb *db, MDB_txn *txn, int commit)
{
    int rc = 0;
    if (commit) rc = mdb_txn_commit(txn); /* frees txn whatever the result */
    else mdb_txn_abort(txn);
    unhold(db);
    pthread_rwlock_unlock(&db->lock);
    return rc;
}

static int grow(lz_kvdb *db)
{
    MDB_envinfo info;
    int rc = mdb_env_info(db->env, &info);
    if (!rc) rc = set_mapsize(db, info.me_mapsize * 2);
    return rc;
}

static int check_key(const lz_kvdb_item *it, char *err, size_t errlen)
{
    if (!it->key || it->key_len == 0 || it->key_len > LZ_KVDB_MAX_KEY)
        return lz_fail(err, errlen, LZ_EINVAL, "kvdb: key length %zu not in [1, %d]", it->key_len,
                    LZ_KVDB_MAX_KEY);
    return 0;
}

/* writemap: the blocks of bytes more past the last page in use allocated on
 * disk (within the file: the map's end); 0 or an errno value. */
static int preallocate(lz_kvdb *db, uint64_t bytes)
{
    MDB_envinfo info;
    int rc = mdb_env_info(db->env, &info);
    if (rc) return rc;
    const uint64_t from = ((uint64_t)info.me_last_pgno + 1) * db->psize, size = data_file_size(db);
    const uint64_t to = from + bytes < size ? from + bytes : size;
    if (to <= from) return 0;
    return fallocate(db->fd, FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(to - from)) ? (errno ? errno : EIO) : 0;
}

/* LMDB's page header (the on-disk format of its data version 1): a value
 * of a page or more lives in overflow pages, reserved data starting right
 * after the first page's header (its own page number, flags, page count);
 * page 0 is a meta page with LMDB's magic. */
enum { PAGE_HDR = 16, P_OVERFLOW = 0x04, P_META = 0x08 };
#define LMDB_MAGIC 0xBEEFC0DEu

/* The file offset of reserved value data d of len bytes in the writable map,
 * or -1 when d is not (verifiably) the start of an overflow page's data. */
static int64_t overflow_offset(const lz_kvdb *db, const uint8_t *d, size_t len, size_t map)
{
    if (len < db->psize || ((uintptr_t)d - PAGE_HDR) % db->psize) return -1;
    const uint8_t *pg = d - PAGE_HDR;
    uint64_t pgno;
    uint16_t flags;
    uint32_t pages;
    memcpy(&pgno, pg, 8);
    memcpy(&flags, pg + 10, 2);
    memcpy(&pages, pg + 12, 4);
    if (!(flags & P_OVERFLOW) || pgno < 2 || pgno >= map / db->psize || (uint64_t)pages * db->psize < len + PAGE_HDR ||
        (uintptr_t)pg < pgno * db->psize)
        return -1;
    const uint8_t *base = pg - pgno * db->psize;
    uint16_t mflags;
    uint32_t magic;
    memcpy(&mflags, base + 10, 2);
    memcpy(&magic, base + PAGE_HDR, 4);
    if (!(mflags & P_META) || magic != LMDB_MAGIC) return -1;
    return (int64_t)(d - base);
}

/* writemap: value val of len bytes into its reserved place d: pwritten with
 * its writeback started when d is an overflow page's data (no page faults
 * on the map, the disk busy before the commit's sync), else copied; 0 or an
 * errno value. */
static int fill_reserved(lz_kvdb *db, uint8_t *d, const void *val, size_t len)
{
    MDB_envinfo info;
    const int64_t off = mdb_env_info(db->env, &info) ? -1 : overflow_offset(db, d, len, info.me_mapsize);
    if (off < 0) {
        memcpy(d, val, len);
        return 0;
    }
    for (size_t done = 0; done < len;) {
        const ssize_t w = pwrite(db->fd, (const uint8_t *)val + done, len - done, (off_t)(off + (int64_t)done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 && errno ? errno : EIO;
        done += (size_t)w;
    }
    sync_file_range(db->fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE); /* a hint: the commit syncs anyway */
    db->direct_bytes += len;
    return 0;
}

/* One write transaction over items: put (del == 0) or delete. Retries the
 * whole batch after doubling the map on MDB_MAP_FULL (fixed: EFULL instead). */
static int write_batch(lz_kvdb *db, const lz_kvdb_item *items, int n, int del, int fixed, int *n_deleted,
                       char *err, size_t errlen)
{
    if (db->rdonly) return lz_fail(err, errlen, LZ_EREADONLY, "LMDB %s: opened read-only", db->path);
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (check_key(&items[i], err, errlen)) return LZ_EINVAL;
        bytes += del ? 0 : items[i].key_len + items[i].val_len;
    }
    for (int attempt = 0; attempt < 40; attempt++) {
        /* writemap: the transaction's pages (values rounded up, each put's copied tree path) on disk first */
        int rc = db->wmap && !del ? preallocate(db, bytes + (uint64_t)n * 8 * db->psize + (1u << 20)) : 0;
        if (rc) return write_fail(db, err, errlen, "allocating room for a write", rc, bytes);
        MDB_txn *txn;
        rc = begin(db, 0, &txn);
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
                rc = mdb_put(txn, db->dbi, &k, &v, db->wmap ? MDB_RESERVE : 0);
                /* before the next put (which may move a small value's node) */
                if (!rc && db->wmap) rc = fill_reserved(db, v.mv_data, items[i].val, items[i].val_len);
            }
        }
        if (rc) {
            end(db, txn, 0);
        } else {
            rc = end(db, txn, 1);
            if (!rc) {
                if (n_deleted) *n_deleted = deleted;
                return LZ_OK;
            }
        }
        if (rc != MDB_MAP_FULL) return write_fail(db, err, errlen, del ? "delete" : "put", rc, bytes);
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
    rc = set_mapsize(db, size);
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
    end(r->db, r->txn, 0);
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
        end(db, txn, 0);
        return lmdb_fail(db, err, errlen, "mdb_cursor_open", rc);
    }
    MDB_val k, v;
    int ret = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ret = fn(k.mv_data, k.mv_size, v.mv_size, ctx);
        if (ret) break;
    }
    mdb_cursor_close(cur);
    end(db, txn, 0);
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
    end(db, txn, 0);
    if (rc) return lmdb_fail(db, err, errlen, "mdb_stat", rc);
    st->entries = ms.ms_entries;
    st->map_size = info.me_mapsize;
    st->used_bytes = (uint64_t)(info.me_last_pgno + 1) * ms.ms_psize;
    st->writemap = db->wmap;
    st->direct_bytes = db->direct_bytes;
    return LZ_OK;
}

/* ---- damage: the data file checked without LMDB, and rebuilt from what is intact ---- */

int lz_kvdb_verify(lz_kvdb *db, int tree_only, lz_kvdb_damage *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", db->path);
    lz_kvdb_pages *p;
    /* a read snapshot meanwhile: a writer in another process reuses none of the pages read */
    MDB_txn *txn = NULL;
    int mrc = begin(db, MDB_RDONLY, &txn);
    if (mrc) return lmdb_fail(db, err, errlen, "read transaction", mrc);
    int rc = lz_kvdb_pages_open(path, tree_only ? LZ_KVDB_PAGES_TREE_ONLY : 0, &p, err, errlen);
    end(db, txn, 0);
    if (rc == LZ_ECORRUPT) { /* not even a meta page: everything is lost */
        d->damaged = 1;
        snprintf(d->what, sizeof d->what, "%.600s", err);
        return LZ_OK;
    }
    if (rc) return rc;
    const lz_kvdb_pages_stats *st = lz_kvdb_pages_get_stats(p);
    d->damaged = lz_kvdb_pages_damaged(p);
    d->pages_damaged = st->damaged;
    d->entries_intact = st->entries;
    d->entries_recorded = st->meta_entries;
    if (d->damaged)
        snprintf(d->what, sizeof d->what, "%.280s: %.300s (%lld damaged pages; %lld of the %lld entries on intact pages)",
                 path, st->first, (long long)st->damaged, (long long)st->entries, (long long)st->meta_entries);
    lz_kvdb_pages_close(p);
    return LZ_OK;
}

typedef struct {
    MDB_env *env;
    MDB_dbi dbi;
    const char *dir;
    int (*keep)(const void *key, size_t key_len, const void *val, size_t val_len, void *ctx);
    void *ctx;
    lz_kvdb_item *batch;  /* entries waiting for the next transaction */
    int n, cap;
    uint64_t batch_bytes;
    lz_kvdb_rebuild_stats *st;
    int rc;               /* first LMDB error */
    char *err;
    size_t errlen;
} rebuild_ctx;

/* Writes the batch in one transaction of the new environment, growing its map when full. */
static int rebuild_flush(rebuild_ctx *r)
{
    for (int attempt = 0; r->n && attempt < 40; attempt++) {
        MDB_txn *txn;
        int rc = mdb_txn_begin(r->env, NULL, 0, &txn);
        for (int i = 0; !rc && i < r->n; i++) {
            MDB_val k = { r->batch[i].key_len, (void *)r->batch[i].key }, v = { r->batch[i].val_len, (void *)r->batch[i].val };
            rc = mdb_put(txn, r->dbi, &k, &v, 0);
        }
        if (rc) mdb_txn_abort(txn);
        else rc = mdb_txn_commit(txn);
        if (!rc) break;
        if (rc != MDB_MAP_FULL) {
            r->rc = lz_fail(r->err, r->errlen, LZ_EIO, "LMDB %s: writing the rebuilt payloads: %s", r->dir, mdb_strerror(rc));
            return -1;
        }
        MDB_envinfo info;
        if ((rc = mdb_env_info(r->env, &info)) || (rc = mdb_env_set_mapsize(r->env, info.me_mapsize * 2))) {
            r->rc = lz_fail(r->err, r->errlen, LZ_EIO, "LMDB %s: growing the map: %s", r->dir, mdb_strerror(rc));
            return -1;
        }
    }
    r->n = 0;
    r->batch_bytes = 0;
    return 0;
}

static int rebuild_visit(const void *key, size_t key_len, const void *val, size_t val_len, void *p)
{
    rebuild_ctx *r = p;
    r->st->n_seen++;
    if (key_len == 0 || key_len > LZ_KVDB_MAX_KEY || !r->keep(key, key_len, val, val_len, r->ctx)) {
        r->st->n_dropped++;
        r->st->bytes_dropped += (int64_t)val_len;
        return 0;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 256;
        lz_kvdb_item *b = realloc(r->batch, sizeof *b * (size_t)cap);
        if (!b) return r->rc = lz_fail(r->err, r->errlen, LZ_ENOMEM, "out of memory"), 1;
        r->batch = b;
        r->cap = cap;
    }
    r->batch[r->n++] = (lz_kvdb_item){ key, key_len, val, val_len };
    r->batch_bytes += val_len;
    r->st->n_kept++;
    if ((r->batch_bytes >= (64u << 20) || r->n >= 4096) && rebuild_flush(r)) return 1;
    return 0;
}

int lz_kvdb_rebuild(lz_kvdb *db, int (*keep)(const void *key, size_t key_len, const void *val, size_t val_len, void *ctx),
                    void *ctx, lz_kvdb_rebuild_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (db->rdonly) return lz_fail(err, errlen, LZ_EREADONLY, "LMDB %s: opened read-only", db->path);
    char data[4200], tmp[4200], built[4200], old[4200];
    snprintf(data, sizeof data, "%s/data.mdb", db->path);
    snprintf(tmp, sizeof tmp, "%s.rebuild", db->path);
    snprintf(built, sizeof built, "%s.rebuilt", db->path);
    snprintf(old, sizeof old, "%s.old", db->path);
    remove_env_dir(tmp);
    remove_env_dir(built);
    if (mkdir(tmp, 0777) != 0) return lz_fail(err, errlen, LZ_EIO, "cannot create %s: %s", tmp, strerror(errno));
    lz_kvdb_pages *p = NULL;
    int rc = lz_kvdb_pages_open(data, 0, &p, err, errlen);
    if (rc && rc != LZ_ECORRUPT) { remove_env_dir(tmp); return rc; }
    /* the new environment: as large a map as the old file, grown when needed */
    struct stat sb;
    uint64_t map = stat(data, &sb) == 0 ? (uint64_t)sb.st_size + (uint64_t)sb.st_size / 4 : 0;
    if (map < LZ_KVDB_INITIAL_MAP) map = LZ_KVDB_INITIAL_MAP;
    rebuild_ctx r = { .dir = tmp, .keep = keep, .ctx = ctx, .st = st, .err = err, .errlen = errlen };
    MDB_txn *txn = NULL;
    int mrc = mdb_env_create(&r.env);
    if (!mrc) mrc = mdb_env_set_mapsize(r.env, map);
    if (!mrc) mrc = mdb_env_open(r.env, tmp, MDB_NOTLS, 0666);
    if (!mrc) mrc = mdb_txn_begin(r.env, NULL, 0, &txn);
    if (!mrc) mrc = mdb_dbi_open(txn, NULL, 0, &r.dbi);
    if (!mrc) { mrc = mdb_txn_commit(txn); txn = NULL; }
    if (mrc) {
        if (txn) mdb_txn_abort(txn);
        r.rc = lz_fail(err, errlen, LZ_EIO, "LMDB %s: a new environment: %s", tmp, mdb_strerror(mrc));
    }
    if (!r.rc && p) lz_kvdb_pages_foreach(p, rebuild_visit, &r);
    if (!r.rc) rebuild_flush(&r);
    if (!r.rc && (mrc = mdb_env_sync(r.env, 1)))
        r.rc = lz_fail(err, errlen, LZ_EIO, "LMDB %s: sync: %s", tmp, mdb_strerror(mrc));
    if (r.env) mdb_env_close(r.env);
    free(r.batch);
    lz_kvdb_pages_close(p);
    if (r.rc) {
        remove_env_dir(tmp);
        return r.rc;
    }
    /* the swap: tmp complete as .rebuilt, the damaged folder out as .old, .rebuilt in
     * (lz_kvdb_open finishes one stopped between the two renames) */
    mdb_env_close(db->env);
    db->env = NULL;
    if (rename(tmp, built) != 0 || rename(db->path, old) != 0 || rename(built, db->path) != 0) {
        int e = errno;
        finish_rebuild(db->path);
        env_open(db, err, errlen);
        return lz_fail(err, errlen, LZ_EIO, "LMDB %s: replacing it with the rebuilt payloads: %s", db->path, strerror(e));
    }
    remove_env_dir(old);
    return env_open(db, err, errlen);
}
