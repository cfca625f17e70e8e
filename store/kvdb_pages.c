/* kvdb_pages.c - LMDB's data file checked page by page (see kvdb_pages.h).
 * A recursive walk from each tree's root: a page is read only after its
 * header and every node on it are known to lie inside it, so damage of any
 * shape is reported, never followed. Letters: P = page size, N = keys on a
 * page, pgno = page number (offset / P).
 *
 * LMDB 0.9 layout used here (mdb.c):
 *   page header (16): pgno u64 | pad u16 | flags u16 | lower u16, upper u16 (overflow: pages u32)
 *                     then N u16 node offsets; N = (lower - 16) / 2
 *   node (8 + key + data): lo u16 | hi u16 | flags u16 | ksize u16 | key | data
 *     branch: child pgno = lo | hi << 16 | flags << 32 (node 0's key is empty)
 *     leaf:   data size = lo | hi << 16; flag F_BIGDATA: data is the u64 pgno of an overflow run
 *   meta pages 0 and 1 (flags P_META), at offset 16: magic u32 0xBEEFC0DE | version u32 1 |
 *     address u64 | mapsize u64 | 2 x MDB_db (48: pad u32 (page size in the free db's) | flags u16 |
 *     depth u16 | branch, leaf, overflow pages u64 x3 | entries u64 | root u64) | last_pg u64 | txnid u64
 */
#include "store/kvdb_pages.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

enum { P_BRANCH = 0x01, P_LEAF = 0x02, P_OVERFLOW = 0x04, P_META = 0x08 };
enum { F_BIGDATA = 0x01 };
enum { PAGEHDR = 16, NODEHDR = 8, MAX_DEPTH = 32, MAX_KEY = 511 };
#define META_MAGIC 0xBEEFC0DEu
#define P_INVALID UINT64_MAX
enum { FREE_DBI = 0, MAIN_DBI = 1 };

typedef struct {
    const void *key, *val;
    size_t key_len, val_len;
} entry;

typedef struct {
    uint16_t flags, depth;
    uint64_t entries, root;
} db_rec;

struct lz_kvdb_pages {
    const uint8_t *map;
    size_t size;            /* file bytes */
    uint64_t psize;         /* P */
    uint64_t last_pg;       /* the meta page's last page in use */
    int flags;
    uint8_t *seen;          /* a bit per page: reached once already */
    entry *e;               /* the payload tree's intact entries, in key order */
    int64_t n, cap;
    int oom;
    lz_kvdb_pages_stats st;
};

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

/* Records damage on page pgno; the first one is kept as the message. */
static void damage(lz_kvdb_pages *p, uint64_t pgno, const char *kind, const char *fmt, ...)
{
    p->st.damaged++;
    if (p->st.first[0]) return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(p->st.first, sizeof p->st.first, "page %llu (%s): %s", (unsigned long long)pgno, kind, what);
}

/* Marks pages [pgno, pgno + n) reached; 0 when one of them was reached before. */
static int mark(lz_kvdb_pages *p, uint64_t pgno, uint64_t n)
{
    for (uint64_t i = pgno; i < pgno + n; i++)
        if (p->seen[i >> 3] & (1u << (i & 7))) return 0;
    for (uint64_t i = pgno; i < pgno + n; i++) p->seen[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 1;
}

/* Key order of a tree: the payloads' is memcmp then length (LMDB's default), the free
 * list's (MDB_INTEGERKEY) is the u64 value. */
static int cmp_key(int integer, const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    if (integer && an == 8 && bn == 8) {
        uint64_t x = u64(a), y = u64(b);
        return x < y ? -1 : x > y;
    }
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;
    return c ? c : an < bn ? -1 : an > bn;
}

typedef struct {
    const uint8_t *key; /* NULL: unbounded */
    size_t len;
} bound;

static int add_entry(lz_kvdb_pages *p, const void *k, size_t kn, const void *v, size_t vn)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 1024;
        entry *e = realloc(p->e, sizeof *e * (size_t)cap);
        if (!e) return p->oom = 1, -1;
        p->e = e;
        p->cap = cap;
    }
    p->e[p->n++] = (entry){ k, v, kn, vn };
    return 0;
}

/* Checks page pgno of a tree (main: the payloads) at depth (1 = root) whose keys must lie in
 * [lo, hi); adds its entries when it and everything below it are intact. */
static void walk(lz_kvdb_pages *p, const db_rec *db, int main, uint64_t pgno, int depth, bound lo, bound hi)
{
    const char *kind = "tree";
    if (depth > MAX_DEPTH || depth > db->depth)
        return damage(p, pgno, kind, "deeper than the tree's %d levels", db->depth);
    if (pgno < 2 || pgno > p->last_pg)
        return damage(p, pgno, kind, "a child outside the file's pages 2..%llu", (unsigned long long)p->last_pg);
    if (!mark(p, pgno, 1)) return damage(p, pgno, kind, "reached twice");
    const uint8_t *pg = p->map + pgno * p->psize;
    p->st.pages++;
    const uint16_t flags = u16(pg + 10), lower = u16(pg + 12), upper = u16(pg + 14);
    if (u64(pg) != pgno) return damage(p, pgno, kind, "its header says page %llu", (unsigned long long)u64(pg));
    if (flags != P_BRANCH && flags != P_LEAF) return damage(p, pgno, kind, "flags 0x%x: neither branch nor leaf", flags);
    const int leaf = flags == P_LEAF;
    kind = leaf ? "leaf" : "branch";
    if (leaf != (depth == db->depth))
        return damage(p, pgno, kind, "at level %d of a tree of %d levels", depth, db->depth);
    if (lower < PAGEHDR || (lower - PAGEHDR) % 2 || lower > upper || upper > p->psize)
        return damage(p, pgno, kind, "bounds lower %u, upper %u", lower, upper);
    const int n = (lower - PAGEHDR) / 2;
    if (n == 0 || (!leaf && n < 2 && depth > 1)) return damage(p, pgno, kind, "%d keys", n);
    /* every node inside the page, keys in order and in [lo, hi) */
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    for (int i = 0; i < n; i++) {
        const uint16_t off = u16(pg + PAGEHDR + 2 * i);
        if (off < upper || (uint64_t)off + NODEHDR > p->psize) return damage(p, pgno, kind, "node %d at offset %u", i, off);
        const uint8_t *nd = pg + off;
        const uint16_t ks = u16(nd + 6), nf = u16(nd + 4);
        const uint64_t ds = leaf ? (uint64_t)u16(nd) | (uint64_t)u16(nd + 2) << 16 : 0;
        if (ks > MAX_KEY || (uint64_t)off + NODEHDR + ks > p->psize)
            return damage(p, pgno, kind, "node %d: key of %u bytes", i, ks);
        if (leaf && (nf & ~F_BIGDATA)) return damage(p, pgno, kind, "node %d: flags 0x%x", i, nf);
        if (leaf && !(nf & F_BIGDATA) && (uint64_t)off + NODEHDR + ks + ds > p->psize)
            return damage(p, pgno, kind, "node %d: %llu bytes of data past the page", i, (unsigned long long)ds);
        if (leaf && (nf & F_BIGDATA) && (uint64_t)off + NODEHDR + ks + 8 > p->psize)
            return damage(p, pgno, kind, "node %d: overflow page number past the page", i);
        if (!leaf && i == 0) continue; /* a branch's first key is implicit (its parent's) */
        const uint8_t *k = nd + NODEHDR;
        if (leaf && ks == 0) return damage(p, pgno, kind, "node %d: an empty key", i);
        if (prev && cmp_key(!main, prev, prev_len, k, ks) >= 0) return damage(p, pgno, kind, "node %d: keys out of order", i);
        if ((lo.key && cmp_key(!main, k, ks, lo.key, lo.len) < 0) || (hi.key && cmp_key(!main, k, ks, hi.key, hi.len) >= 0))
            return damage(p, pgno, kind, "node %d: a key outside the range its parent gives", i);
        prev = k;
        prev_len = ks;
    }
    if (!leaf) {
        for (int i = 0; i < n; i++) {
            const uint8_t *nd = pg + u16(pg + PAGEHDR + 2 * i);
            const uint64_t child = (uint64_t)u16(nd) | (uint64_t)u16(nd + 2) << 16 | (uint64_t)u16(nd + 4) << 32;
            bound clo = lo, chi = hi;
            if (i > 0) clo = (bound){ nd + NODEHDR, u16(nd + 6) };
            if (i + 1 < n) {
                const uint8_t *nx = pg + u16(pg + PAGEHDR + 2 * (i + 1));
                chi = (bound){ nx + NODEHDR, u16(nx + 6) };
            }
            walk(p, db, main, child, depth + 1, clo, chi);
        }
        return;
    }
    /* a leaf: its values (overflow runs inside the file, their headers unless TREE_ONLY); a bad
     * run loses its own entry only: the leaf itself is sound */
    int64_t added = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *nd = pg + u16(pg + PAGEHDR + 2 * i);
        const uint16_t ks = u16(nd + 6);
        const uint64_t ds = (uint64_t)u16(nd) | (uint64_t)u16(nd + 2) << 16;
        const uint8_t *val = nd + NODEHDR + ks;
        if (u16(nd + 4) & F_BIGDATA) {
            const uint64_t ov = u64(nd + NODEHDR + ks), need = (PAGEHDR - 1 + ds) / p->psize + 1;
            if (ov < 2 || ov > p->last_pg || need > p->last_pg - ov + 1) {
                damage(p, pgno, kind, "node %d: overflow run at page %llu of %llu pages outside the file", i,
                       (unsigned long long)ov, (unsigned long long)need);
                continue;
            }
            const uint8_t *op = p->map + ov * p->psize;
            if (!(p->flags & LZ_KVDB_PAGES_TREE_ONLY)) {
                p->st.pages++;
                if (u64(op) != ov || u16(op + 10) != P_OVERFLOW || u32(op + 12) < need || u32(op + 12) > p->last_pg - ov + 1) {
                    damage(p, ov, "overflow", "not the overflow run of %llu pages that leaf page %llu names",
                           (unsigned long long)need, (unsigned long long)pgno);
                    continue;
                }
            }
            if (!mark(p, ov, need)) {
                damage(p, ov, "overflow", "a run reached twice (from leaf page %llu)", (unsigned long long)pgno);
                continue;
            }
            val = op + PAGEHDR;
        }
        if (main && add_entry(p, nd + NODEHDR, ks, val, (size_t)ds)) return;
        added++;
    }
    if (main) p->st.entries += added;
}

/* Reads meta page i (page size psize) into db[2], last_pg, txnid; 0 when it is valid. */
static int read_meta(const lz_kvdb_pages *p, int i, uint64_t psize, db_rec db[2], uint64_t *last_pg, uint64_t *txnid)
{
    if ((uint64_t)(i + 1) * psize > p->size) return -1;
    const uint8_t *pg = p->map + (uint64_t)i * psize, *m = pg + PAGEHDR;
    if (!(u16(pg + 10) & P_META) || u32(m) != META_MAGIC || u32(m + 4) != 1) return -1;
    if (u32(m + 24) != psize) return -1;
    for (int d = 0; d < 2; d++) {
        const uint8_t *r = m + 24 + 48 * d;
        db[d] = (db_rec){ u16(r + 4), u16(r + 6), u64(r + 32), u64(r + 40) };
    }
    *last_pg = u64(m + 120);
    *txnid = u64(m + 128);
    if (*last_pg < 1 || *last_pg >= p->size / psize) return -1; /* pages past the end of the file */
    return 0;
}

int lz_kvdb_pages_open(const char *path, int flags, lz_kvdb_pages **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lz_fail(err, errlen, LZ_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 2 * 512) {
        close(fd);
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: too short for LMDB's two meta pages", path);
    }
    lz_kvdb_pages *p = calloc(1, sizeof *p);
    if (!p) { close(fd); return lz_fail(err, errlen, LZ_ENOMEM, "out of memory"); }
    p->size = (size_t)sb.st_size;
    p->flags = flags;
    void *m = mmap(NULL, p->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        free(p);
        return lz_fail(err, errlen, LZ_EIO, "%s: mmap: %s", path, strerror(errno));
    }
    p->map = m;
    /* the page size from meta page 0, else the usual 4096 for meta page 1 */
    uint64_t psize = u32(p->map + PAGEHDR + 24);
    if (psize < 512 || psize > 65536 || (psize & (psize - 1))) psize = 4096;
    db_rec db[2][2];
    uint64_t last[2], txn[2];
    int ok[2];
    for (int i = 0; i < 2; i++) ok[i] = read_meta(p, i, psize, db[i], &last[i], &txn[i]) == 0;
    if (!ok[0] && !ok[1]) {
        lz_kvdb_pages_close(p);
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: neither LMDB meta page (the first 2 x %llu bytes) is valid", path,
                       (unsigned long long)psize);
    }
    const int use = ok[0] && ok[1] ? (txn[1] > txn[0]) : ok[1];
    p->st.meta_damaged = !ok[0] || !ok[1];
    if (p->st.meta_damaged) snprintf(p->st.first, sizeof p->st.first, "meta page %d is not valid", ok[0] ? 1 : 0);
    p->psize = psize;
    p->last_pg = last[use];
    p->st.txnid = txn[use];
    p->st.meta_entries = (int64_t)db[use][MAIN_DBI].entries;
    p->seen = calloc((size_t)(p->last_pg / 8 + 1), 1);
    if (!p->seen) {
        lz_kvdb_pages_close(p);
        return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    }
    const bound none = { NULL, 0 };
    for (int d = 0; d < 2; d++)
        if (db[use][d].root != P_INVALID) walk(p, &db[use][d], d == MAIN_DBI, db[use][d].root, 1, none, none);
    if (p->oom) {
        lz_kvdb_pages_close(p);
        return lz_fail(err, errlen, LZ_ENOMEM, "out of memory listing the entries of %s", path);
    }
    if (!p->st.damaged && !p->st.meta_damaged && p->st.entries != p->st.meta_entries) {
        p->st.damaged++;
        snprintf(p->st.first, sizeof p->st.first, "the payload tree holds %lld entries, its meta page says %lld",
                 (long long)p->st.entries, (long long)p->st.meta_entries);
    }
    *out = p;
    return LZ_OK;
}

void lz_kvdb_pages_close(lz_kvdb_pages *p)
{
    if (!p) return;
    if (p->map) munmap((void *)p->map, p->size);
    free(p->seen);
    free(p->e);
    free(p);
}

const lz_kvdb_pages_stats *lz_kvdb_pages_get_stats(const lz_kvdb_pages *p) { return &p->st; }

int lz_kvdb_pages_damaged(const lz_kvdb_pages *p) { return p->st.damaged > 0 || p->st.meta_damaged; }

int lz_kvdb_pages_foreach(const lz_kvdb_pages *p,
                          int (*fn)(const void *key, size_t key_len, const void *val, size_t val_len, void *ctx),
                          void *ctx)
{
    for (int64_t i = 0; i < p->n; i++) {
        int r = fn(p->e[i].key, p->e[i].key_len, p->e[i].val, p->e[i].val_len, ctx);
        if (r) return r;
    }
    return 0;
}

int lz_kvdb_pages_find(const lz_kvdb_pages *p, const void *key, size_t key_len, const void **val, size_t *val_len)
{
    int64_t lo = 0, hi = p->n; /* the entries are in the tree's key order */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int c = cmp_key(0, p->e[mid].key, p->e[mid].key_len, key, key_len);
        if (c == 0) {
            *val = p->e[mid].val;
            *val_len = p->e[mid].val_len;
            return 1;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}
