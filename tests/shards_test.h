/* shards_test.h - what the sharded-store tests share (tests/test_shards.c,
 * tests/test_slurm.c): a plain store compared with a sharded one document by
 * document (ids, titles, token ids, payload keys and payload bytes), the
 * number of a plain store's documents that belong to one shard, and the row
 * count of a store folder being written (a shard under a running task).
 * Header-only, like tests/test.h. */
#ifndef LZ_SHARDS_TEST_H
#define LZ_SHARDS_TEST_H

#include "base/clock.h"
#include "store/store.h"
#include "tests/store_inner.h"
#include "tests/test.h"

typedef struct {
    lz_store *b;
    int64_t n, bad;
} same_ctx;

static inline int same_doc(const lz_meta_doc *d, void *p)
{
    same_ctx *c = p;
    lz_store *b = c->b;
    char e[1024] = "", title[256];
    lz_meta_doc r;
    c->n++;
    if (lz_store_doc_find(b, d->ext_id, &r, NULL, 0, e, sizeof e)) {
        if (c->bad++ < 5) CHECK(0, "document '%s' is not in the other store: %s", d->ext_id, e);
        return 0;
    }
    int *ids = NULL, n = 0;
    int ok = !memcmp(r.payload_key, d->payload_key, LZ_META_KEY_LEN) && r.n_tokens == d->n_tokens &&
             r.passage == d->passage && !lz_store_doc_tokens(b, r.id, &ids, &n, e, sizeof e) && n == d->n_tokens &&
             !memcmp(ids, d->token_ids, sizeof(int) * (size_t)n) &&
             !lz_store_doc_title(b, r.id, title, sizeof title, e, sizeof e) && !strcmp(title, d->title ? d->title : "");
    if (!ok && c->bad++ < 5) CHECK(0, "document '%s' differs (key, tokens, passage or title) %s", d->ext_id, e);
    free(ids);
    return 0;
}

/* Payload bytes of every row of plain store a and of the same key in b: equal. */
typedef struct {
    lz_store *a, *b;
    int64_t n, bad;
} bytes_ctx;

static inline int same_bytes(const lz_meta_doc *d, void *p)
{
    bytes_ctx *c = p;
    char e[1024];
    void *pa = NULL, *pb = NULL;
    size_t la = 0, lb = 0;
    c->n++;
    int ok = !lz_store_get_payload(c->a, d->payload_key, &pa, &la, e, sizeof e) &&
             !lz_store_get_payload(c->b, d->payload_key, &pb, &lb, e, sizeof e) && la == lb && !memcmp(pa, pb, la);
    if (!ok && c->bad++ < 5) CHECK(0, "payload of '%s' differs between the stores (%zu and %zu bytes) %s", d->ext_id, la, lb, e);
    free(pa);
    free(pb);
    return 0;
}

/* Every document of plain store a is in b (same key, tokens, title, payload bytes) and b holds no
 * other. Returns the mismatches (each also a failed check). */
static inline int64_t lz_test_same_docs(lz_store *a, lz_store *b, const char *what)
{
    char e[1024];
    same_ctx c = { b, 0, 0 };
    bytes_ctx bc = { a, b, 0, 0 };
    int rc = lz_meta_doc_foreach(test_store_meta(a), same_doc, &c, e, sizeof e);
    if (!rc) rc = lz_meta_doc_foreach(test_store_meta(a), same_bytes, &bc, e, sizeof e);
    CHECK(rc == 0, "%s: reading the rows: %s", what, e);
    int64_t na = -1, nb = -2;
    lz_store_doc_count(a, &na, e, sizeof e);
    lz_store_doc_count(b, &nb, e, sizeof e);
    CHECK(na == nb && na == c.n, "%s: %lld documents against %lld", what, (long long)na, (long long)nb);
    CHECK(c.bad == 0 && bc.bad == 0, "%s: %lld documents and %lld payloads differ", what, (long long)c.bad,
          (long long)bc.bad);
    return c.bad + bc.bad + (na != nb);
}

typedef struct {
    int shard, n;
    int64_t count;
} home_ctx;

static inline int count_home(const lz_meta_doc *d, void *p)
{
    home_ctx *h = p;
    h->count += lz_shards_of(d->source_id, h->n) == h->shard;
    return 0;
}

/* How many of plain store a's documents belong to shard i of n. */
static inline int64_t lz_test_shard_docs(lz_store *a, int i, int n)
{
    char e[512];
    home_ctx h = { i, n, 0 };
    lz_meta_doc_foreach(test_store_meta(a), count_home, &h, e, sizeof e);
    return h.count;
}

/* Rows of the store folder dir (a shard being written), -1 while it cannot be opened. */
static inline int64_t lz_test_rows_of(const char *dir)
{
    char e[1024], meta[1100];
    snprintf(meta, sizeof meta, "%s/meta.sqlite", dir);
    if (access(meta, F_OK) != 0) return -1;
    lz_store *s;
    if (lz_store_open(dir, LZ_STORE_RDONLY, &s, e, sizeof e)) return -1;
    int64_t n = -1;
    if (lz_store_doc_count(s, &n, e, sizeof e)) n = -1;
    lz_store_close(s);
    return n;
}

#endif /* LZ_SHARDS_TEST_H */
