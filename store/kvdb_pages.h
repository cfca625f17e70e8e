/* kvdb_pages.h - the LMDB data file (kv/data.mdb) read page by page without
 * LMDB, trusting nothing in it: for finding damage (--check) and salvaging
 * what is intact (--repair, --gc). LMDB trusts its own pages: a damaged leaf
 * can make it crash, or put a new entry where no lookup finds it. Here every
 * page reached from the newest valid meta page (both trees: the payloads and
 * LMDB's free list) is checked before anything in it is used: its number and
 * kind, header bounds, every node inside the page, keys in order and inside
 * the range their parent gives them, children and overflow runs inside the
 * file, no page reached twice, and the entry count the meta page records.
 * A page that fails is skipped with what is below it; the entries of the
 * pages that pass are handed out. The format is LMDB 0.9's (mdb.c: MDB_page,
 * MDB_meta, MDB_db, MDB_node), 64-bit, little-endian.
 * store/kvdb.c uses it; nothing outside store/ does. */
#ifndef LZ_KVDB_PAGES_H
#define LZ_KVDB_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct lz_kvdb_pages lz_kvdb_pages;

enum {
    /* skip the first page of each overflow run (a value's own header): the check then reads
     * only branch and leaf pages, which is what a key lookup through LMDB reads */
    LZ_KVDB_PAGES_TREE_ONLY = 1
};

typedef struct {
    int64_t pages;         /* pages checked (branch, leaf, overflow headers) */
    int64_t entries;       /* entries of the payload tree on intact pages */
    int64_t damaged;       /* pages that failed (each skipped with what is below it) */
    int64_t meta_entries;  /* the entry count the meta page records */
    uint64_t txnid;        /* the transaction of the meta page used */
    int meta_damaged;      /* the newest meta page failed: the other one was used */
    char first[320];       /* the first damage found: "page N (leaf): what" ("" when intact) */
} lz_kvdb_pages_stats;

/* Maps path (a data.mdb) read-only and checks its trees. Errors: EIO (cannot
 * open or map), ECORRUPT (neither meta page is valid: nothing can be read),
 * ENOMEM. Damage below the meta pages is no error: see lz_kvdb_pages_stats. */
int lz_kvdb_pages_open(const char *path, int flags, lz_kvdb_pages **out, char *err, size_t errlen);
void lz_kvdb_pages_close(lz_kvdb_pages *p); /* NULL is a no-op */
const lz_kvdb_pages_stats *lz_kvdb_pages_get_stats(const lz_kvdb_pages *p);
/* 1 when anything failed (a page, a meta page, the entry count), else 0. */
int lz_kvdb_pages_damaged(const lz_kvdb_pages *p);

/* Calls fn(key, key_len, val, val_len, ctx) for every entry of the payload
 * tree on an intact page, in key order; val points into the mapping (valid
 * until lz_kvdb_pages_close). With LZ_KVDB_PAGES_TREE_ONLY a value's bytes
 * are unchecked: their length is bounded by the file only. fn returns non-zero
 * to stop (returned). */
int lz_kvdb_pages_foreach(const lz_kvdb_pages *p,
                          int (*fn)(const void *key, size_t key_len, const void *val, size_t val_len, void *ctx),
                          void *ctx);

/* The value of key among the intact entries (binary search): 1 with *val,
 * *val_len set, or 0 when it is not on an intact page. */
int lz_kvdb_pages_find(const lz_kvdb_pages *p, const void *key, size_t key_len, const void **val, size_t *val_len);

#endif /* LZ_KVDB_PAGES_H */
