/* store_shards.c - a sharded store's root opened as one store (store.h,
 * store/shards.h): every shard opened (each a whole store) and checked to
 * belong to the set, each call routed to the shard that holds its row (a row
 * id is local id * N + shard; a document is in the shard its source id hashes
 * to), payloads found by key in whichever shard holds them, counts summed,
 * the most accessed documents merged, and BM25 search merged with global
 * statistics (see lz_store_sh_search). Writes are refused: each shard has its
 * own writer (lazyingest --shard I/N). The set's check: store_shards_check.c. */
#include "store/store.h"
#include "store/store_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sha256.h"
#include "store/fts_bm25.h"

/* ---- ids and messages ---- */

static int64_t gid(const lz_store *s, int i, int64_t local) { return local * s->n_shards + i; }

/* The shard of global row id (its local id in *local), NULL for an id no shard can hold. */
static lz_store *route(lz_store *s, int64_t id, int64_t *local)
{
    if (id <= 0) return NULL;
    *local = id / s->n_shards;
    return s->shard[id % s->n_shards];
}

/* err (a shard's message) prefixed with the root and the shard; returns st. */
static int sh_fail(lz_store *s, int i, int st, char *err, size_t errlen)
{
    char inner[2048];
    snprintf(inner, sizeof inner, "%s", err && errlen ? err : "");
    return lz_fail(err, errlen, st, "store %s: shard %d of %d: %s", s->dir, i, s->n_shards, inner);
}

static int no_row(lz_store *s, int64_t id, char *err, size_t errlen)
{
    return lz_fail(err, errlen, LZ_ENOTFOUND, "store %s: no document with row id %lld", s->dir, (long long)id);
}

int lz_store_n_shards(const lz_store *s) { return s->n_shards; }
lz_store *lz_store_shard(lz_store *s, int i) { return s->n_shards && i >= 0 && i < s->n_shards ? s->shard[i] : NULL; }

int lz_store_sh_refuse(lz_store *s, const char *what, char *err, size_t errlen)
{
    return lz_fail(err, errlen, LZ_EINVAL,
                   "store %s is sharded (%d shards): %s goes to one shard at a time (lazyingest --shard I/%d, or the "
                   "shard folder %s/shard-NNNN)", s->dir, s->n_shards, what, s->n_shards, s->dir);
}

/* ---- open, close ---- */

int lz_store_sh_open(lz_store *s, int flags, char *err, size_t errlen)
{
    if (flags & LZ_STORE_WRITER) return lz_store_sh_refuse(s, "writing", err, errlen);
    char path[4300], dir[4200];
    snprintf(path, sizeof path, "%s/meta.sqlite", s->dir);
    if (access(path, F_OK) == 0)
        return lz_fail(err, errlen, LZ_ECORRUPT, "store %s holds both a shard manifest and %s: neither sharded nor plain",
                       s->dir, path);
    int st = lz_shards_read(s->dir, &s->manifest, err, errlen);
    if (st) {
        char inner[2048];
        snprintf(inner, sizeof inner, "%s", err);
        return lz_fail(err, errlen, st, "store %s: %s", s->dir, inner);
    }
    const int N = s->manifest.n_shards;
    if (!(s->shard = calloc((size_t)N, sizeof *s->shard))) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    s->n_shards = N;
    for (int i = 0; i < N; i++) {
        lz_shards_dir(s->dir, i, dir, sizeof dir);
        snprintf(path, sizeof path, "%s/meta.sqlite", dir);
        if (access(path, F_OK) != 0) /* never created here: a reader must not make an empty shard */
            return lz_fail(err, errlen, LZ_ENOTFOUND,
                           "store %s: shard %d of %d is missing (%s not found): its ingest has not run yet "
                           "(lazyingest --shard %d/%d --store %s CORPUS)", s->dir, i, N, path, i, N, s->dir);
        if ((st = lz_shards_check_id(s->dir, &s->manifest, i, err, errlen))) return st;
        if ((st = lz_store_open(dir, flags & LZ_STORE_RDONLY, &s->shard[i], err, errlen)))
            return sh_fail(s, i, st, err, errlen);
    }
    return LZ_OK;
}

void lz_store_sh_close(lz_store *s)
{
    for (int i = 0; s->shard && i < s->n_shards; i++) lz_store_close(s->shard[i]);
    free(s->shard);
    s->shard = NULL;
}

/* ---- the model: every shard the manifest's, with one prompt prefix ---- */

/* After every shard was bound: the set's model is the manifest's, the root takes shard 0's binding. */
static int adopt(lz_store *s, char *err, size_t errlen)
{
    const lz_store *a = s->shard[0];
    char dir[4200], fp[65];
    for (int i = 0; i < s->n_shards; i++) {
        const lz_store *b = s->shard[i];
        lz_shards_dir(s->dir, i, dir, sizeof dir);
        lz_sha256_hex(b->fingerprint, fp);
        if (strcmp(fp, s->manifest.model))
            return lz_fail(err, errlen, LZ_EMODEL,
                           "store %s: shard %d of %d (%s) holds KV of model %.16s, but the set's manifest names model "
                           "%.16s: that shard belongs to another model; rebuild it (remove %s, then lazyingest --shard "
                           "%d/%d with the set's model)", s->dir, i, s->n_shards, dir, fp, s->manifest.model, dir, i,
                           s->n_shards);
        if (b->kv_dtype != s->manifest.kv_dtype)
            return lz_fail(err, errlen, LZ_EMODEL, "store %s: shard %d of %d (%s) holds %s payloads, the set's manifest "
                           "says %s", s->dir, i, s->n_shards, dir, lz_payload_dtype_name(b->kv_dtype),
                           lz_payload_dtype_name(s->manifest.kv_dtype));
        if (b->n_prefix != a->n_prefix || memcmp(b->prefix, a->prefix, sizeof(int) * (size_t)a->n_prefix))
            return lz_fail(err, errlen, LZ_EMODEL, "store %s: shard %d of %d (%s) was encoded after another prompt "
                           "prefix than shard 0 (%d tokens, not %d): run lazyingest --shard %d/%d again to re-encode it",
                           s->dir, i, s->n_shards, dir, b->n_prefix, a->n_prefix, i, s->n_shards);
    }
    free(s->prefix);
    if (!(s->prefix = malloc(sizeof(int) * (size_t)(a->n_prefix ? a->n_prefix : 1))))
        return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    if (a->n_prefix) memcpy(s->prefix, a->prefix, sizeof(int) * (size_t)a->n_prefix);
    s->n_prefix = a->n_prefix;
    memcpy(s->fingerprint, a->fingerprint, 32);
    s->model_id = a->model_id;
    s->n_layers = a->n_layers;
    s->n_kv_heads = a->n_kv_heads;
    s->head_dim = a->head_dim;
    s->kv_dtype = a->kv_dtype;
    s->bound = 1;
    return LZ_OK;
}

static int empty_shard(lz_store *s, int i, char *err, size_t errlen)
{
    char dir[4200];
    lz_shards_dir(s->dir, i, dir, sizeof dir);
    return lz_fail(err, errlen, LZ_ENOTFOUND, "store %s: shard %d of %d (%s) is empty, no model recorded: its ingest "
                   "has not run yet (lazyingest --shard %d/%d --store %s CORPUS)", s->dir, i, s->n_shards, dir, i,
                   s->n_shards, s->dir);
}

int lz_store_sh_bind_recorded(lz_store *s, char *err, size_t errlen)
{
    for (int i = 0; i < s->n_shards; i++) {
        int st = lz_store_bind_recorded(s->shard[i], err, errlen);
        if (st == LZ_ENOTFOUND) return empty_shard(s, i, err, errlen);
        if (st) return sh_fail(s, i, st, err, errlen);
    }
    return adopt(s, err, errlen);
}

int lz_store_sh_check_model(lz_store *s, const lz_store_model_desc *m, char *err, size_t errlen)
{
    for (int i = 0; i < s->n_shards; i++) {
        int st = lz_store_check_model(s->shard[i], m, err, errlen);
        if (st == LZ_ENOTFOUND) return empty_shard(s, i, err, errlen);
        if (st) return sh_fail(s, i, st, err, errlen);
    }
    return adopt(s, err, errlen);
}

/* ---- rows ---- */

int lz_store_sh_doc_tokens(lz_store *s, int64_t doc_id, int **ids, int *n, char *err, size_t errlen)
{
    int64_t local;
    lz_store *sh = route(s, doc_id, &local);
    return sh ? lz_store_doc_tokens(sh, local, ids, n, err, errlen) : no_row(s, doc_id, err, errlen);
}

int lz_store_sh_hit(lz_store *s, int64_t doc_id, char *err, size_t errlen)
{
    int64_t local;
    lz_store *sh = route(s, doc_id, &local);
    return sh ? lz_store_hit(sh, local, err, errlen) : no_row(s, doc_id, err, errlen);
}

int lz_store_sh_doc_title(lz_store *s, int64_t id, char *buf, size_t len, char *err, size_t errlen)
{
    int64_t local;
    lz_store *sh = route(s, id, &local);
    return sh ? lz_store_doc_title(sh, local, buf, len, err, errlen) : LZ_ENOTFOUND;
}

int lz_store_sh_doc_count(lz_store *s, int64_t *n, char *err, size_t errlen)
{
    *n = 0;
    for (int i = 0; i < s->n_shards; i++) {
        int64_t k = 0;
        int st = lz_store_doc_count(s->shard[i], &k, err, errlen);
        if (st) return sh_fail(s, i, st, err, errlen);
        *n += k;
    }
    return LZ_OK;
}

int lz_store_sh_doc_find(lz_store *s, const char *ext_id, lz_meta_doc *out, char *src, size_t srclen, char *err,
                         size_t errlen)
{
    /* a record's rows are in the shard of its id: an unsplit document's is its own, a passage's its source's */
    int cand[2], i = 0;
    const int nc = lz_shards_candidates(ext_id, s->n_shards, cand);
    int st = LZ_ENOTFOUND;
    for (int k = 0; k < nc && st == LZ_ENOTFOUND; k++)
        st = lz_store_doc_find(s->shard[i = cand[k]], ext_id, out, src, srclen, err, errlen);
    if (!st) out->id = gid(s, i, out->id);
    return st;
}

typedef struct {
    lz_store *s;
    int shard;
    int (*fn)(const lz_meta_doc *d, void *ctx);
    void *ctx;
} rows_ctx;

static int global_row(const lz_meta_doc *d, void *p)
{
    rows_ctx *c = p;
    lz_meta_doc g = *d;
    g.id = gid(c->s, c->shard, d->id);
    return c->fn(&g, c->ctx);
}

int lz_store_sh_source_rows(lz_store *s, const char *source_id, int (*fn)(const lz_meta_doc *d, void *ctx), void *ctx,
                            char *err, size_t errlen)
{
    rows_ctx c = { s, lz_shards_of(source_id, s->n_shards), fn, ctx };
    return lz_store_source_rows(s->shard[c.shard], source_id, global_row, &c, err, errlen);
}

/* ---- the most accessed documents, merged ---- */

typedef struct {
    int64_t id, hits;
    uint8_t key[LZ_META_KEY_LEN];
    int n_tokens;
} top_entry;

typedef struct {
    lz_store *s;
    int shard;
    top_entry *v;
    size_t n, cap;
    int oom;
} top_ctx;

static int top_collect(int64_t doc_id, int64_t hits, const uint8_t *key, int n_tokens, void *p)
{
    top_ctx *c = p;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        top_entry *v = realloc(c->v, sizeof *v * cap);
        if (!v) return c->oom = 1;
        c->v = v;
        c->cap = cap;
    }
    top_entry *e = &c->v[c->n++];
    e->id = gid(c->s, c->shard, doc_id);
    e->hits = hits;
    memcpy(e->key, key, LZ_META_KEY_LEN);
    e->n_tokens = n_tokens;
    return 0;
}

static int top_order(const void *a, const void *b)
{
    const top_entry *x = a, *y = b;
    if (x->hits != y->hits) return x->hits > y->hits ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int lz_store_sh_top_accessed(lz_store *s, int limit, int all, lz_meta_top_fn fn, void *ctx, char *err, size_t errlen)
{
    /* each shard's best `limit` hold the set's best `limit` */
    top_ctx c = { s, 0, NULL, 0, 0, 0 };
    int st = LZ_OK;
    for (int i = 0; !st && i < s->n_shards; i++) {
        c.shard = i;
        st = lz_store_top_accessed(s->shard[i], limit, all, top_collect, &c, err, errlen);
        if (st) st = sh_fail(s, i, st, err, errlen);
        else if (c.oom) st = lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    }
    if (!st) {
        if (c.n) qsort(c.v, c.n, sizeof *c.v, top_order);
        for (size_t k = 0; k < c.n && (int64_t)k < limit; k++)
            if (fn(c.v[k].id, c.v[k].hits, c.v[k].key, c.v[k].n_tokens, ctx)) break;
    }
    free(c.v);
    return st;
}

/* ---- search: BM25 with the set's statistics ----
 * SQLite's bm25() scores a row with its own table's statistics: the row
 * count N, the average row length and, per phrase, the rows matching it. A
 * shard's idf would then be the shard's, and the same document would score
 * differently in a set of 4 shards than in one store. So the search runs in
 * two rounds over the shards' FTS5 indexes: first each shard's statistics
 * (store/fts_bm25.h's lz_fts_totals, lz_fts_hits: rows, tokens, and rows per
 * phrase; the query's phrases are the same text in every shard), summed;
 * then each shard's best k scored with the sums by lz_bm25 (bm25()'s formula
 * and constants), and the shards' lists merged by (score, ext_id). A row's
 * score is then what it gets in one store holding the whole set, to the bit,
 * and the best k of the set are among the shards' best k. (A writer
 * committing between the two rounds moves the statistics by its rows: scores
 * stay consistent with one moment or the next.) The alternative, one shared
 * full-text index, would put every shard's writer behind one SQLite lock. */

typedef struct {
    int64_t id;
    double score;
    char *ext_id, *title;
} merged_hit;

typedef struct {
    lz_store *s;
    int shard;
    merged_hit *v;
    int n, cap;
    int oom;
} hit_ctx;

static int hit_collect(const lz_meta_hit *h, void *p)
{
    hit_ctx *c = p;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 32;
        merged_hit *v = realloc(c->v, sizeof *v * (size_t)cap);
        if (!v) return c->oom = 1;
        c->v = v;
        c->cap = cap;
    }
    merged_hit *m = &c->v[c->n];
    m->id = gid(c->s, c->shard, h->id);
    m->score = h->score;
    m->ext_id = strdup(h->ext_id ? h->ext_id : "");
    m->title = h->title ? strdup(h->title) : NULL;
    if (!m->ext_id || (h->title && !m->title)) {
        free(m->ext_id);
        free(m->title);
        return c->oom = 1;
    }
    c->n++;
    return 0;
}

static int hit_order(const void *a, const void *b)
{
    const merged_hit *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return strcmp(x->ext_id, y->ext_id);
}

int lz_store_sh_search(lz_store *s, const char *text, int k, int (*fn)(const lz_meta_hit *h, void *ctx), void *ctx,
                       char *err, size_t errlen)
{
    char *fts = lz_meta_fts_quote(text);
    if (!fts) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    if (!fts[0] || k <= 0) {
        free(fts);
        return LZ_OK;
    }
    int64_t N = 0, T = 0, *df = NULL;
    int P = 0, st = LZ_OK;
    for (int i = 0; !st && i < s->n_shards; i++) { /* round 1: the set's statistics */
        lz_meta_bm25_stats b;
        st = lz_store_from_meta(lz_meta_fts_stats(s->shard[i]->meta, fts, &b, err, errlen));
        if (st) {
            st = sh_fail(s, i, st, err, errlen);
            break;
        }
        N += b.n_docs;
        T += b.n_tokens;
        if (b.n_phrases > P) {
            int64_t *v = realloc(df, sizeof *v * (size_t)b.n_phrases);
            if (!v) st = lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
            else {
                memset(v + P, 0, sizeof *v * (size_t)(b.n_phrases - P));
                df = v;
                P = b.n_phrases;
            }
        }
        for (int j = 0; !st && j < b.n_phrases; j++) df[j] += b.phrase_docs[j];
        free(b.phrase_docs);
    }
    double *idf = !st && P ? malloc(sizeof *idf * (size_t)P) : NULL;
    if (!st && P && !idf) st = lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    hit_ctx c = { s, 0, NULL, 0, 0, 0 };
    if (!st && P && N > 0) { /* round 2: each shard's best k under them (no phrase matched anywhere: no hits) */
        for (int j = 0; j < P; j++) idf[j] = lz_fts_bm25_idf(N, df[j]);
        const double avgdl = (double)T / (double)N;
        for (int i = 0; !st && i < s->n_shards; i++) {
            c.shard = i;
            st = lz_store_from_meta(lz_meta_search_idf(s->shard[i]->meta, fts, k, avgdl, idf, P, hit_collect, &c,
                                                       err, errlen));
            if (c.oom) st = lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
            else if (st) st = sh_fail(s, i, st, err, errlen);
        }
        if (!st) {
            if (c.n) qsort(c.v, (size_t)c.n, sizeof *c.v, hit_order);
            for (int j = 0; j < c.n && j < k; j++) {
                lz_meta_hit h = { c.v[j].id, c.v[j].ext_id, c.v[j].title, c.v[j].score };
                if ((st = fn(&h, ctx))) break;
            }
        }
    }
    for (int j = 0; j < c.n; j++) free(c.v[j].ext_id), free(c.v[j].title);
    free(c.v);
    free(idf);
    free(df);
    free(fts);
    return st;
}

/* ---- payloads: found by key in whichever shard holds them ---- */

int lz_store_sh_has_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], size_t *len, char *err, size_t errlen)
{
    for (int i = 0; i < s->n_shards; i++) {
        int r = lz_store_has_payload(s->shard[i], key, len, err, errlen);
        if (r) return r < 0 ? (sh_fail(s, i, LZ_EIO, err, errlen), -1) : 1;
    }
    return 0;
}

int lz_store_sh_get_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], void **blob, size_t *len, char *err,
                            size_t errlen)
{
    for (int i = 0; i < s->n_shards; i++) {
        int st = lz_store_get_payload(s->shard[i], key, blob, len, err, errlen);
        if (st != LZ_ENOTFOUND) return st ? sh_fail(s, i, st, err, errlen) : LZ_OK;
    }
    return lz_fail(err, errlen, LZ_ENOTFOUND, "store %s: payload not found in any of its %d shards", s->dir, s->n_shards);
}

int lz_store_sh_read_payloads(lz_store *s, const uint8_t (*keys)[LZ_META_KEY_LEN], int n,
                              int (*fn)(const void *const *blobs, const size_t *lens, void *ctx), void *ctx, char *err,
                              size_t errlen)
{
    const size_t m = (size_t)(n > 0 ? n : 1);
    const void **blobs = calloc(m, sizeof *blobs);
    size_t *lens = calloc(m, sizeof *lens);
    lz_kvdb_reader **rd = calloc((size_t)s->n_shards, sizeof *rd);
    int st = !blobs || !lens || !rd ? lz_fail(err, errlen, LZ_ENOMEM, "out of memory for %d payload reads", n) : LZ_OK;
    for (int i = 0; !st && i < s->n_shards; i++) /* one snapshot a shard, all open while fn reads */
        if ((st = lz_store_from_kvdb(lz_kvdb_reader_begin(s->shard[i]->kv, &rd[i], err, errlen))))
            st = sh_fail(s, i, st, err, errlen);
    if (!st) {
        for (int k = 0; k < n; k++)
            for (int i = 0; i < s->n_shards; i++) {
                char e2[256];
                if (!lz_kvdb_reader_get(rd[i], keys[k], LZ_META_KEY_LEN, &blobs[k], &lens[k], e2, sizeof e2)) break;
                blobs[k] = NULL;
                lens[k] = 0;
            }
        st = fn((const void *const *)blobs, lens, ctx);
    }
    for (int i = 0; rd && i < s->n_shards; i++) lz_kvdb_reader_end(rd[i]);
    free(rd);
    free(blobs);
    free(lens);
    return st;
}

typedef struct {
    int (*fn)(const void *blob, size_t len, void *ctx);
    void *ctx;
    lz_store *s;
    char *err;
    size_t errlen;
} one_read;

static int read_one(const void *const *blobs, const size_t *lens, void *p)
{
    one_read *o = p;
    if (!blobs[0])
        return lz_fail(o->err, o->errlen, LZ_ENOTFOUND, "store %s: payload not found in any of its %d shards",
                       o->s->dir, o->s->n_shards);
    return o->fn(blobs[0], lens[0], o->ctx);
}

int lz_store_sh_read_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN],
                             int (*fn)(const void *blob, size_t len, void *ctx), void *ctx, char *err, size_t errlen)
{
    one_read o = { fn, ctx, s, err, errlen };
    return lz_store_sh_read_payloads(s, (const uint8_t(*)[LZ_META_KEY_LEN])key, 1, read_one, &o, err, errlen);
}

int lz_store_sh_payloads_damaged(lz_store *s, int tree_only, char *what, size_t whatlen, char *err, size_t errlen)
{
    for (int i = 0; i < s->n_shards; i++) {
        char w[1024] = "";
        int d = lz_store_payloads_damaged(s->shard[i], tree_only, w, sizeof w, err, errlen);
        if (d < 0) return sh_fail(s, i, LZ_EIO, err, errlen), -1;
        if (d) {
            if (what && whatlen) snprintf(what, whatlen, "shard %d of %d: %s", i, s->n_shards, w);
            return 1;
        }
    }
    return 0;
}
