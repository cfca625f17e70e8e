/* kvdb.h - the LMDB environment that holds KV payloads, keyed by content
 * (store/store.h builds the keys). One unnamed database, binary keys up to
 * LZ_KVDB_MAX_KEY bytes. Writers put or delete a whole batch in one write
 * transaction, which is durable when the call returns (fsync on commit); the
 * map doubles and the batch is retried on MDB_MAP_FULL. Readers in other
 * processes see a batch entirely or not at all, and never block the writer.
 * What lives in the payloads is store/payload.h's business, not this file's.
 * LMDB trusts its own pages; lz_kvdb_verify checks them without it and
 * lz_kvdb_rebuild rewrites a damaged environment from its intact pages. A
 * write that fails for a full file system says "no space left on device".
 */
#ifndef LZ_KVDB_H
#define LZ_KVDB_H

#include <stddef.h>
#include <stdint.h>
#include "base/status.h"

#define LZ_KVDB_MAX_KEY 128
#define LZ_KVDB_INITIAL_MAP (64ull << 20) /* bytes; grows by doubling */

typedef struct lz_kvdb lz_kvdb;
typedef struct lz_kvdb_reader lz_kvdb_reader;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

/* RDONLY: readers. WRITER: the store's one writer (its writer.lock held):
 * payloads written through a writable map (store/kvdb.c says how), which no
 * other process that opens the environment writable may do. */
enum { LZ_KVDB_RDONLY = 1, LZ_KVDB_WRITER = 2 };

/* Opens (creating unless RDONLY) the environment in folder dir.
 * Errors: EIO (with LMDB's message and the path in err), ENOMEM. */
int lz_kvdb_open(const char *dir, int flags, lz_kvdb **out, char *err, size_t errlen);
void lz_kvdb_close(lz_kvdb *db); /* NULL is a no-op; no reader may be open */

typedef struct {
    const void *key; size_t key_len;
    const void *val; size_t val_len; /* ignored by lz_kvdb_del_batch */
} lz_kvdb_item;

/* Writes n items in one transaction (overwriting equal keys). Errors: EIO,
 * EREADONLY, EINVAL (key too long or empty). */
int lz_kvdb_put_batch(lz_kvdb *db, const lz_kvdb_item *items, int n, char *err, size_t errlen);
/* The same from a thread other than the one that may open transactions
 * meanwhile (LMDB changes the map size only while no transaction is open in
 * the process): the map is never grown here; EFULL (nothing written) when it
 * is full: grow it with lz_kvdb_reserve, or write with lz_kvdb_put_batch, once
 * no other thread has a transaction open. */
int lz_kvdb_put_batch_fixed(lz_kvdb *db, const lz_kvdb_item *items, int n, char *err, size_t errlen);
/* Grows the map (doubling) until bytes more fit after what is used; only while
 * no transaction is open in the process. */
int lz_kvdb_reserve(lz_kvdb *db, uint64_t bytes, char *err, size_t errlen);
/* Deletes n keys in one transaction; absent keys are not an error.
 * *n_deleted (may be NULL) receives how many existed. */
int lz_kvdb_del_batch(lz_kvdb *db, const lz_kvdb_item *items, int n, int *n_deleted,
                      char *err, size_t errlen);

/* Copies the value of key into a malloc'd *val (caller frees). Errors:
 * ENOTFOUND, EIO, ENOMEM. */
int lz_kvdb_get(lz_kvdb *db, const void *key, size_t key_len, void **val, size_t *val_len,
                char *err, size_t errlen);
/* 1 if key exists, 0 if not, -1 on error (message in err). */
int lz_kvdb_exists(lz_kvdb *db, const void *key, size_t key_len, char *err, size_t errlen);

/* Zero-copy reads: a read snapshot; values returned by lz_kvdb_reader_get
 * point into the map and stay valid until lz_kvdb_reader_end. */
int lz_kvdb_reader_begin(lz_kvdb *db, lz_kvdb_reader **out, char *err, size_t errlen);
int lz_kvdb_reader_get(lz_kvdb_reader *r, const void *key, size_t key_len, const void **val,
                       size_t *val_len, char *err, size_t errlen);
void lz_kvdb_reader_end(lz_kvdb_reader *r); /* NULL is a no-op */

/* Calls fn(key, key_len, val_len, ctx) for every entry in key order, in
 * one read snapshot; fn returns non-zero to stop (then that value is
 * returned). Errors: EIO. */
int lz_kvdb_foreach(lz_kvdb *db, int (*fn)(const void *key, size_t key_len, size_t val_len, void *ctx),
                    void *ctx, char *err, size_t errlen);

typedef struct {
    uint64_t entries;
    uint64_t map_size;   /* bytes reserved */
    uint64_t used_bytes; /* pages in use * page size */
    int writemap;        /* the writer's writable map is in use (LZ_KVDB_WRITER, where the file system allows it) */
    uint64_t direct_bytes; /* value bytes written straight into their overflow pages since the open */
} lz_kvdb_stats;
int lz_kvdb_stat(lz_kvdb *db, lz_kvdb_stats *st, char *err, size_t errlen);

/* ---- damage (store/kvdb_pages.h reads the data file without LMDB) ---- */
typedef struct {
    int damaged;              /* 1 when a page (or a meta page, or the entry count) failed */
    int64_t pages_damaged;
    int64_t entries_intact;   /* entries on intact pages */
    int64_t entries_recorded; /* the entry count of the meta page */
    char what[640];           /* the data file, the first damage and the counts ("" when intact) */
} lz_kvdb_damage;
/* Checks every page of the data file LMDB would read (tree_only: not the
 * first page of each value, which key lookups and cursor walks never read).
 * Damage is no error: it is reported in d. Errors: EIO, ENOMEM. Call it before
 * any LMDB read of a store that may be damaged: LMDB trusts its pages. */
int lz_kvdb_verify(lz_kvdb *db, int tree_only, lz_kvdb_damage *d, char *err, size_t errlen);

typedef struct {
    int64_t n_seen;          /* entries found on intact pages */
    int64_t n_kept;          /* of which keep() kept */
    int64_t n_dropped;
    int64_t bytes_dropped;
} lz_kvdb_rebuild_stats;
/* Rewrites the environment into a new data file holding every entry of the
 * intact pages that keep(key, key_len, val, val_len, ctx) returns non-zero
 * for, then puts it in place of the old one (folder DIR.rebuild, renamed
 * DIR.rebuilt, swapped with DIR; a run stopped in between is completed by the
 * next lz_kvdb_open). No transaction of this process may be open; a reader in
 * another process keeps the old file until it reopens. Errors: EIO, ENOMEM,
 * EREADONLY. */
int lz_kvdb_rebuild(lz_kvdb *db, int (*keep)(const void *key, size_t key_len, const void *val, size_t val_len, void *ctx),
                    void *ctx, lz_kvdb_rebuild_stats *st, char *err, size_t errlen);


#endif /* LZ_KVDB_H */
