/* store.c - the store facade: folder layout, writer lock, model binding,
 * content keys, payload I/O, garbage collection and the consistency check.
 * Row-level SQL is in meta.c, LMDB in kvdb.c, the blob format in payload.c;
 * a sharded store's root is handed to store_shards.c at each call.
 */
#include "store/store.h"
#include "store/store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sha256.h"
#include "base/error.h"
#include "store/kvdb_pages.h"

int lz_store_from_meta(int st)
{
    switch (st) {
    case LZ_OK: return LZ_OK;
    case LZ_ENOTFOUND: return LZ_ENOTFOUND;
    case LZ_ESCHEMA: return LZ_ESCHEMA;
    case LZ_ENOMEM: return LZ_ENOMEM;
    case LZ_EINVAL: return LZ_EINVAL;
    default: return LZ_EIO;
    }
}

int lz_store_from_kvdb(int st)
{
    switch (st) {
    case LZ_OK: return LZ_OK;
    case LZ_ENOTFOUND: return LZ_ENOTFOUND;
    case LZ_ENOMEM: return LZ_ENOMEM;
    case LZ_EINVAL: return LZ_EINVAL;
    case LZ_EFULL: return LZ_EFULL;
    default: return LZ_EIO;
    }
}

int lz_store_open(const char *dir, int flags, lz_store **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_store *s = calloc(1, sizeof *s);
    if (!s) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->lock_fd = -1;
    s->rdonly = (flags & LZ_STORE_RDONLY) != 0;
    char path[4200];
    int st = LZ_OK;
    struct stat sb;
    if (lz_shards_is_root(dir)) { /* a sharded store's root: its shards opened as one (store_shards.c) */
        st = lz_store_sh_open(s, flags, err, errlen);
        goto out;
    }
    if (s->rdonly) {
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            st = lz_fail(err, errlen, LZ_ENOTFOUND, "store %s: no such folder", dir);
            goto out;
        }
    } else if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        st = lz_fail(err, errlen, LZ_EIO, "store %s: cannot create folder: %s", dir, strerror(errno));
        goto out;
    }
    if (flags & LZ_STORE_WRITER) {
        snprintf(path, sizeof path, "%s/writer.lock", dir);
        s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (s->lock_fd < 0) {
            st = lz_fail(err, errlen, LZ_EIO, "store %s: cannot open %s: %s", dir, path, strerror(errno));
            goto out;
        }
        if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
            st = errno == EWOULDBLOCK
                     ? lz_fail(err, errlen, LZ_EBUSY,
                            "store %s: another process is writing to it (%s is locked)", dir, path)
                     : lz_fail(err, errlen, LZ_EIO, "store %s: flock: %s", dir, strerror(errno));
            goto out;
        }
    }
    snprintf(path, sizeof path, "%s/meta.sqlite", dir);
    if (s->rdonly && access(path, R_OK) != 0) {
        st = lz_fail(err, errlen, LZ_ENOTFOUND, "store %s: %s not found (not a store?)", dir, path);
        goto out;
    }
    st = lz_store_from_meta(lz_meta_open(path, s->rdonly ? LZ_META_RDONLY : 0, &s->meta, err, errlen));
    if (st) goto out;
    snprintf(path, sizeof path, "%s/kv", dir);
    st = lz_store_from_kvdb(lz_kvdb_open(path, s->rdonly ? LZ_KVDB_RDONLY : (flags & LZ_STORE_WRITER) ? LZ_KVDB_WRITER : 0, &s->kv,
                                             err, errlen));
out:
    if (st) {
        lz_store_close(s);
        return st;
    }
    *out = s;
    return LZ_OK;
}

int lz_store_open_shared(const lz_store *base, lz_store **out, char *err, size_t errlen)
{
    *out = NULL;
    if (base->lock_fd >= 0)
        return lz_fail(err, errlen, LZ_EINVAL, "store %s: a writer's handle is not shared", base->dir);
    lz_store *s = calloc(1, sizeof *s);
    if (!s) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    snprintf(s->dir, sizeof s->dir, "%s", base->dir);
    s->lock_fd = -1;
    s->rdonly = base->rdonly;
    int st = LZ_OK;
    if (base->n_shards) { /* a handle per shard, each sharing that shard's environment */
        s->manifest = base->manifest;
        if (!(s->shard = calloc((size_t)base->n_shards, sizeof *s->shard))) {
            st = lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
        } else {
            s->n_shards = base->n_shards;
            for (int i = 0; i < s->n_shards && !st; i++) st = lz_store_open_shared(base->shard[i], &s->shard[i], err, errlen);
        }
    } else {
        char path[4200];
        snprintf(path, sizeof path, "%s/meta.sqlite", base->dir);
        st = lz_store_from_meta(lz_meta_open(path, s->rdonly ? LZ_META_RDONLY : 0, &s->meta, err, errlen));
        s->kv = base->kv;
        s->kv_shared = 1;
    }
    if (st) {
        lz_store_close(s);
        return st;
    }
    *out = s;
    return LZ_OK;
}

void lz_store_close(lz_store *s)
{
    if (!s) return;
    if (s->n_shards) lz_store_sh_close(s);
    if (!s->kv_shared) lz_kvdb_close(s->kv);
    lz_meta_close(s->meta);
    if (s->lock_fd >= 0) close(s->lock_fd); /* releases the flock */
    free(s->prefix);
    free(s);
}

const char *lz_store_dir(const lz_store *s) { return s->dir; }
const uint8_t *lz_store_model_fingerprint(const lz_store *s) { return s->fingerprint; }
int lz_store_kv_dtype(const lz_store *s) { return s->kv_dtype; }

/* ---- keys ---- */

static void sha_u32(lz_sha256_ctx *h, uint32_t x)
{
    uint8_t b[4] = { (uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24) };
    lz_sha256_update(h, b, 4);
}

static void sha_ids(lz_sha256_ctx *h, const int *ids, int n)
{
    sha_u32(h, (uint32_t)n);
    for (int i = 0; i < n; i++) sha_u32(h, (uint32_t)ids[i]);
}

void lz_store_doc_key(const uint8_t fp[32], const int *prefix, int n_prefix, const int *ids, int n,
                      uint8_t key[LZ_META_KEY_LEN])
{
    lz_store_doc_key_kv(fp, prefix, n_prefix, ids, n, NULL, key);
}

void lz_store_doc_key_kv(const uint8_t fp[32], const int *prefix, int n_prefix, const int *ids, int n,
                         const char *kv_spec, uint8_t key[LZ_META_KEY_LEN])
{
    lz_sha256_ctx h;
    lz_sha256_init(&h);
    lz_sha256_update(&h, "lazykv-doc-v1", 13);
    sha_ids(&h, prefix, n_prefix);
    sha_ids(&h, ids, n);
    if (kv_spec && *kv_spec) { /* compressed at ingest: the spec is part of the content */
        size_t len = strlen(kv_spec);
        lz_sha256_update(&h, "kv-policy", 9);
        sha_u32(&h, (uint32_t)len);
        lz_sha256_update(&h, kv_spec, len);
    }
    memcpy(key, fp, 32);
    lz_sha256_final(&h, key + 32);
}

void lz_store_prefix_key(const uint8_t fp[32], const int *prefix, int n_prefix,
                         uint8_t key[LZ_META_KEY_LEN])
{
    lz_sha256_ctx h;
    lz_sha256_init(&h);
    lz_sha256_update(&h, "lazykv-prefix-v1", 16);
    sha_ids(&h, prefix, n_prefix);
    memcpy(key, fp, 32);
    lz_sha256_final(&h, key + 32);
}

void lz_store_content_hash(const char *title, const char *text, uint8_t out[32])
{
    lz_sha256_ctx h;
    lz_sha256_init(&h);
    if (title) lz_sha256_update(&h, title, strlen(title));
    lz_sha256_update(&h, "", 1);
    lz_sha256_update(&h, text, strlen(text));
    lz_sha256_final(&h, out);
}

void lz_store_split_hash(const char *title, const char *text, size_t text_len, int max_doc_tokens,
                         uint8_t out[32])
{
    lz_sha256_ctx h;
    lz_sha256_init(&h);
    lz_sha256_update(&h, "lazysplit-v1", 12);
    sha_u32(&h, (uint32_t)max_doc_tokens);
    if (title) lz_sha256_update(&h, title, strlen(title));
    lz_sha256_update(&h, "", 1);
    lz_sha256_update(&h, text, text_len);
    lz_sha256_final(&h, out);
}

/* ---- model binding ---- */

static void describe(const lz_store_model_desc *m, lz_meta_model *o)
{
    memset(o, 0, sizeof *o);
    lz_sha256_hex(m->fingerprint, o->fingerprint);
    snprintf(o->arch, sizeof o->arch, "%s", m->arch ? m->arch : "llama");
    o->n_layers = m->n_layers;
    o->n_kv_heads = m->n_kv_heads;
    o->head_dim = m->head_dim;
    snprintf(o->rope_layout, sizeof o->rope_layout, "%s", m->rope_layout == 1 ? "half" : "adjacent");
    o->rope_theta = m->rope_theta;
    if (m->rope_divisors) {
        uint8_t d[32];
        char hex[65];
        lz_sha256(m->rope_divisors, sizeof(float) * (size_t)(m->head_dim / 2), d);
        lz_sha256_hex(d, hex);
        snprintf(o->rope_scaling, sizeof o->rope_scaling, "divisors:%s", hex);
    } else {
        snprintf(o->rope_scaling, sizeof o->rope_scaling, "none");
    }
    snprintf(o->source_path, sizeof o->source_path, "%s", m->source_path ? m->source_path : "");
    o->kv_dtype = m->kv_dtype;
}

/* Compares the recorded model with m; EMODEL with both named when they differ. */
static int compare_model(lz_store *s, const lz_meta_model *have, const lz_meta_model *want,
                         char *err, size_t errlen)
{
    const char *what = NULL;
    if (strcmp(have->fingerprint, want->fingerprint) != 0) what = "fingerprint";
    else if (have->n_layers != want->n_layers || have->n_kv_heads != want->n_kv_heads ||
             have->head_dim != want->head_dim) what = "shape";
    else if (strcmp(have->rope_layout, want->rope_layout) != 0) what = "rotary layout";
    else if (have->rope_theta != want->rope_theta) what = "rope theta";
    else if (strcmp(have->rope_scaling, want->rope_scaling) != 0) what = "rope scaling";
    if (!what && want->kv_dtype && want->kv_dtype != have->kv_dtype)
        return lz_fail(err, errlen, LZ_EMODEL,
                    "store %s holds %s KV payloads; refusing %s: a store has one KV dtype. "
                    "Use another --store.",
                    s->dir, lz_payload_dtype_name(have->kv_dtype), lz_payload_dtype_name(want->kv_dtype));
    if (!what) return LZ_OK;
    return lz_fail(err, errlen, LZ_EMODEL,
                "store %s was built with model %.16s (%s, %d layers, %s rotary, theta %g, %s) from '%s'; "
                "refusing model %.16s (%s, %d layers, %s rotary, theta %g, %s) from '%s': %s differs. "
                "Use another --store or the original model.",
                s->dir, have->fingerprint, have->arch, have->n_layers, have->rope_layout,
                have->rope_theta, have->rope_scaling, have->source_path, want->fingerprint, want->arch,
                want->n_layers, want->rope_layout, want->rope_theta, want->rope_scaling,
                want->source_path, what);
}

static void adopt(lz_store *s, const lz_store_model_desc *m, int64_t id, int kv_dtype)
{
    s->kv_dtype = kv_dtype;
    memcpy(s->fingerprint, m->fingerprint, 32);
    s->model_id = id;
    s->n_layers = m->n_layers;
    s->n_kv_heads = m->n_kv_heads;
    s->head_dim = m->head_dim;
    s->bound = 1;
}

static int set_prefix(lz_store *s, const int *prefix, int n)
{
    free(s->prefix);
    s->prefix = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!s->prefix) return LZ_ENOMEM;
    if (n) memcpy(s->prefix, prefix, sizeof(int) * (size_t)n);
    s->n_prefix = n;
    return LZ_OK;
}

int lz_store_bind_recorded(lz_store *s, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_bind_recorded(s, err, errlen);
    lz_meta_model have;
    int st = lz_store_from_meta(lz_meta_model_get(s->meta, &have, err, errlen));
    if (st == LZ_ENOTFOUND)
        return lz_fail(err, errlen, LZ_ENOTFOUND, "store %s is empty (no model recorded yet)", s->dir);
    if (st) return st;
    for (int i = 0; i < 32; i++) {
        unsigned b = 0;
        if (sscanf(have.fingerprint + 2 * i, "%2x", &b) != 1) {
            free(have.prefix_tokens);
            return lz_fail(err, errlen, LZ_ECORRUPT, "store %s: bad model fingerprint '%s'", s->dir,
                        have.fingerprint);
        }
        s->fingerprint[i] = (uint8_t)b;
    }
    s->model_id = have.id;
    s->kv_dtype = have.kv_dtype;
    s->n_layers = have.n_layers;
    s->n_kv_heads = have.n_kv_heads;
    s->head_dim = have.head_dim;
    s->bound = 1;
    st = set_prefix(s, have.prefix_tokens, have.n_prefix);
    free(have.prefix_tokens);
    return st;
}

int lz_store_check_model(lz_store *s, const lz_store_model_desc *m, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_check_model(s, m, err, errlen);
    lz_meta_model want, have;
    describe(m, &want);
    int st = lz_store_from_meta(lz_meta_model_get(s->meta, &have, err, errlen));
    if (st == LZ_ENOTFOUND)
        return lz_fail(err, errlen, LZ_ENOTFOUND, "store %s is empty (no model recorded yet)", s->dir);
    if (st) return st;
    st = compare_model(s, &have, &want, err, errlen);
    if (!st) {
        adopt(s, m, have.id, have.kv_dtype);
        st = set_prefix(s, have.prefix_tokens, have.n_prefix);
    }
    free(have.prefix_tokens);
    return st;
}

int lz_store_bind_model(lz_store *s, const lz_store_model_desc *m, const int *prefix, int n_prefix,
                        int64_t *model_id, uint8_t prefix_key[LZ_META_KEY_LEN], int *prefix_changed,
                        char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "binding a model", err, errlen);
    lz_meta_model want, have;
    describe(m, &want);
    lz_store_prefix_key(m->fingerprint, prefix, n_prefix, want.prefix_key);
    memcpy(prefix_key, want.prefix_key, LZ_META_KEY_LEN);
    want.prefix_tokens = (int *)prefix;
    want.n_prefix = n_prefix;
    *prefix_changed = 0;
    int st = lz_store_from_meta(lz_meta_begin(s->meta, err, errlen));
    if (st) return st;
    st = lz_store_from_meta(lz_meta_model_get(s->meta, &have, err, errlen));
    if (st == LZ_ENOTFOUND) {
        if (!want.kv_dtype) want.kv_dtype = LZ_PAYLOAD_DTYPE_BF16;
        st = lz_store_from_meta(lz_meta_model_insert(s->meta, &want, err, errlen));
        have.id = want.id;
        have.kv_dtype = want.kv_dtype;
    } else if (!st) {
        st = compare_model(s, &have, &want, err, errlen);
        if (!st && (have.n_prefix != n_prefix ||
                    memcmp(have.prefix_tokens, prefix, sizeof(int) * (size_t)n_prefix) != 0 ||
                    strcmp(have.source_path, want.source_path) != 0)) {
            *prefix_changed = have.n_prefix != n_prefix ||
                              memcmp(have.prefix_tokens, prefix, sizeof(int) * (size_t)n_prefix) != 0;
            st = lz_store_from_meta(lz_meta_model_set_prefix(s->meta, have.id, prefix, n_prefix, want.prefix_key,
                                                    want.source_path, err, errlen));
        }
        free(have.prefix_tokens);
    }
    if (!st) st = lz_store_from_meta(lz_meta_commit(s->meta, err, errlen));
    if (st) {
        lz_meta_rollback(s->meta);
        return st;
    }
    adopt(s, m, have.id, have.kv_dtype);
    *model_id = have.id;
    return set_prefix(s, prefix, n_prefix);
}

void lz_store_prefix(const lz_store *s, const int **ids, int *n, uint8_t key[LZ_META_KEY_LEN])
{
    *ids = s->prefix;
    *n = s->n_prefix;
    lz_store_prefix_key(s->fingerprint, s->prefix, s->n_prefix, key);
}

int lz_store_doc_tokens(lz_store *s, int64_t doc_id, int **ids, int *n, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_doc_tokens(s, doc_id, ids, n, err, errlen);
    int st = lz_meta_doc_tokens(s->meta, doc_id, ids, n, err, errlen);
    return st == LZ_EINVAL ? LZ_ECORRUPT : lz_store_from_meta(st);
}

int lz_store_top_accessed(lz_store *s, int limit, int all, lz_meta_top_fn fn, void *ctx,
                          char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_top_accessed(s, limit, all, fn, ctx, err, errlen);
    return lz_store_from_meta(lz_meta_stats_top(s->meta, limit, all, fn, ctx, err, errlen));
}

int lz_store_hit(lz_store *s, int64_t doc_id, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_hit(s, doc_id, err, errlen);
    return lz_store_from_meta(lz_meta_stats_hit(s->meta, doc_id, err, errlen));
}

/* ---- payloads ---- */

static int put_payloads(lz_store *s, const lz_store_payload *p, int n, int fixed, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing payloads", err, errlen);
    if (n <= 0) return LZ_OK;
    lz_kvdb_item *items = malloc(sizeof *items * (size_t)n);
    if (!items) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        items[i] = (lz_kvdb_item){ p[i].key, LZ_META_KEY_LEN, p[i].blob, p[i].len };
    int st = lz_store_from_kvdb(fixed ? lz_kvdb_put_batch_fixed(s->kv, items, n, err, errlen)
                             : lz_kvdb_put_batch(s->kv, items, n, err, errlen));
    free(items);
    return st;
}

int lz_store_put_payloads(lz_store *s, const lz_store_payload *p, int n, char *err, size_t errlen)
{
    return put_payloads(s, p, n, 0, err, errlen);
}

int lz_store_put_payloads_fixed(lz_store *s, const lz_store_payload *p, int n, char *err, size_t errlen)
{
    return put_payloads(s, p, n, 1, err, errlen);
}

int lz_store_reserve_payloads(lz_store *s, const lz_store_payload *p, int n, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_refuse(s, "writing payloads", err, errlen);
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += p[i].len + LZ_META_KEY_LEN + 4096; /* overflow pages, rounded up */
    return lz_store_from_kvdb(lz_kvdb_reserve(s->kv, bytes + bytes / 4 + ((uint64_t)1 << 20), err, errlen));
}

int lz_store_has_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], size_t *len, char *err,
                         size_t errlen)
{
    if (s->n_shards) return lz_store_sh_has_payload(s, key, len, err, errlen);
    lz_kvdb_reader *r;
    if (lz_kvdb_reader_begin(s->kv, &r, err, errlen)) return -1;
    const void *p;
    size_t n = 0;
    int rc = lz_kvdb_reader_get(r, key, LZ_META_KEY_LEN, &p, &n, err, errlen);
    lz_kvdb_reader_end(r);
    if (rc == LZ_OK && len) *len = n;
    return rc == LZ_OK ? 1 : rc == LZ_ENOTFOUND ? 0 : -1;
}

int lz_store_read_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN],
                          int (*fn)(const void *blob, size_t len, void *ctx), void *ctx, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_read_payload(s, key, fn, ctx, err, errlen);
    lz_kvdb_reader *r;
    int rc = lz_kvdb_reader_begin(s->kv, &r, err, errlen);
    if (rc) return lz_store_from_kvdb(rc);
    const void *p;
    size_t n = 0;
    rc = lz_kvdb_reader_get(r, key, LZ_META_KEY_LEN, &p, &n, err, errlen);
    rc = rc ? lz_store_from_kvdb(rc) : fn(p, n, ctx);
    lz_kvdb_reader_end(r);
    return rc;
}

int lz_store_read_payloads(lz_store *s, const uint8_t (*keys)[LZ_META_KEY_LEN], int n,
                           int (*fn)(const void *const *blobs, const size_t *lens, void *ctx), void *ctx, char *err,
                           size_t errlen)
{
    if (s->n_shards) return lz_store_sh_read_payloads(s, keys, n, fn, ctx, err, errlen);
    const void **blobs = calloc((size_t)(n > 0 ? n : 1), sizeof *blobs);
    size_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof *lens);
    if (!blobs || !lens) {
        free(blobs);
        free(lens);
        return lz_fail(err, errlen, LZ_ENOMEM, "out of memory for %d payload reads", n);
    }
    lz_kvdb_reader *r;
    int rc = lz_kvdb_reader_begin(s->kv, &r, err, errlen);
    if (!rc) {
        for (int i = 0; i < n; i++) {
            char e2[256];
            if (lz_kvdb_reader_get(r, keys[i], LZ_META_KEY_LEN, &blobs[i], &lens[i], e2, sizeof e2)) {
                blobs[i] = NULL;
                lens[i] = 0;
            }
        }
        rc = fn((const void *const *)blobs, lens, ctx);
        lz_kvdb_reader_end(r);
    } else {
        rc = lz_store_from_kvdb(rc);
    }
    free(blobs);
    free(lens);
    return rc;
}

int lz_store_get_payload(lz_store *s, const uint8_t key[LZ_META_KEY_LEN], void **blob, size_t *len,
                         char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_get_payload(s, key, blob, len, err, errlen);
    return lz_store_from_kvdb(lz_kvdb_get(s->kv, key, LZ_META_KEY_LEN, blob, len, err, errlen));
}

/* ---- garbage collection ---- */

typedef struct {
    lz_store *s;
    uint8_t (*keys)[LZ_KVDB_MAX_KEY];
    size_t *lens;
    int64_t n, cap;
    int64_t n_seen, bytes;
    int error;
    char *err;
    size_t errlen;
} gc_ctx;

static int gc_visit(const void *key, size_t key_len, size_t val_len, void *p)
{
    gc_ctx *g = p;
    g->n_seen++;
    int ref = lz_meta_key_referenced(g->s->meta, key, key_len, g->err, g->errlen);
    if (ref < 0) {
        g->error = LZ_EIO;
        return 1;
    }
    if (ref) return 0;
    if (g->n == g->cap) {
        int64_t cap = g->cap ? g->cap * 2 : 256;
        void *k = realloc(g->keys, (size_t)cap * LZ_KVDB_MAX_KEY);
        void *l = realloc(g->lens, (size_t)cap * sizeof(size_t));
        if (k) g->keys = k;
        if (l) g->lens = l;
        if (!k || !l) {
            g->error = lz_fail(g->err, g->errlen, LZ_ENOMEM, "out of memory");
            return 1;
        }
        g->cap = cap;
    }
    memcpy(g->keys[g->n], key, key_len);
    g->lens[g->n++] = key_len;
    g->bytes += (int64_t)val_len;
    return 0;
}

/* Lists unreferenced payload keys into g. */
static int gc_scan(lz_store *s, gc_ctx *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->s = s;
    g->err = err;
    g->errlen = errlen;
    int rc = lz_kvdb_foreach(s->kv, gc_visit, g, err, errlen);
    if (g->error) return g->error;
    return lz_store_from_kvdb(rc);
}

/* ---- rebuild: the payload database rewritten from its intact pages ---- */

typedef struct {
    lz_store *s;
    int error;
    char *err;
    size_t errlen;
} keep_ctx;

/* Keeps a payload a row (or the model's prefix) references and that passes its checks
 * (header, CRC32C, this store's model): a damaged one is as good as lost. */
static int keep_payload(const void *key, size_t key_len, const void *val, size_t val_len, void *p)
{
    keep_ctx *k = p;
    if (k->error) return 0;
    int ref = lz_meta_key_referenced(k->s->meta, key, key_len, k->err, k->errlen);
    if (ref < 0) {
        k->error = LZ_EIO;
        return 0;
    }
    if (!ref || key_len != LZ_META_KEY_LEN || memcmp(key, k->s->fingerprint, 32) != 0) return 0;
    lz_payload_info info;
    char e[256];
    return lz_payload_parse(val, val_len, 1, &info, e, sizeof e) == 0 && memcmp(info.model, k->s->fingerprint, 32) == 0;
}

int lz_store_rebuild_payloads(lz_store *s, lz_store_rebuild_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (s->n_shards) return lz_store_sh_refuse(s, "rebuilding payloads", err, errlen);
    if (!s->bound) return lz_fail(err, errlen, LZ_EINVAL, "store %s: rebuild before binding a model", s->dir);
    lz_kvdb_damage d;
    int rc = lz_store_from_kvdb(lz_kvdb_verify(s->kv, 0, &d, err, errlen));
    if (rc) return rc;
    keep_ctx k = { s, 0, err, errlen };
    lz_kvdb_rebuild_stats rs;
    rc = lz_store_from_kvdb(lz_kvdb_rebuild(s->kv, keep_payload, &k, &rs, err, errlen));
    if (!rc && k.error) rc = k.error;
    st->n_kept = rs.n_kept;
    st->n_dropped = rs.n_dropped;
    st->bytes_dropped = rs.bytes_dropped;
    st->n_lost = d.damaged && d.entries_recorded > d.entries_intact ? d.entries_recorded - d.entries_intact : 0;
    return rc;
}

int lz_store_payloads_damaged(lz_store *s, int tree_only, char *what, size_t whatlen, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_payloads_damaged(s, tree_only, what, whatlen, err, errlen);
    lz_kvdb_damage d;
    if (lz_kvdb_verify(s->kv, tree_only, &d, err, errlen)) return -1;
    if (what && whatlen) snprintf(what, whatlen, "%s", d.what);
    return d.damaged;
}

int lz_store_gc(lz_store *s, lz_store_gc_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (s->n_shards) return lz_store_sh_refuse(s, "garbage collection", err, errlen);
    /* LMDB trusts its pages: a damaged tree is rebuilt from what is intact instead (deleting through
     * it could miss what a cursor lists, or write a damaged free list further) */
    lz_kvdb_damage d;
    int rc = lz_store_from_kvdb(lz_kvdb_verify(s->kv, 0, &d, err, errlen));
    if (rc) return rc;
    if (!d.damaged) {
        gc_ctx g;
        rc = gc_scan(s, &g, err, errlen);
        st->n_payloads = g.n_seen;
        enum { BATCH = 1024 };
        lz_kvdb_item items[BATCH];
        for (int64_t i = 0; !rc && i < g.n; i += BATCH) {
            int n = (int)(g.n - i < BATCH ? g.n - i : BATCH), del = 0;
            for (int j = 0; j < n; j++) items[j] = (lz_kvdb_item){ g.keys[i + j], g.lens[i + j], NULL, 0 };
            rc = lz_store_from_kvdb(lz_kvdb_del_batch(s->kv, items, n, &del, err, errlen));
            st->n_removed += del;
        }
        if (!rc) st->bytes_removed = g.bytes;
        const int missed = !rc && st->n_removed < g.n; /* listed by the cursor, not found by key: the tree lies */
        free(g.keys);
        free(g.lens);
        if (!missed || !s->bound) return rc;
    }
    if (!s->bound) return lz_fail(err, errlen, LZ_EINVAL, "store %s: gc of a damaged store before binding a model", s->dir);
    lz_store_rebuild_stats rs;
    rc = lz_store_rebuild_payloads(s, &rs, err, errlen);
    st->rebuilt = 1;
    st->n_payloads = rs.n_kept + rs.n_dropped;
    st->n_removed += rs.n_dropped;
    st->bytes_removed += rs.bytes_dropped;
    return rc;
}

/* ---- check ---- */

typedef struct {
    lz_store *s;
    lz_kvdb_reader *rd;
    lz_kvdb_pages *pages; /* a damaged data file: payloads read from its intact pages, not through LMDB */
    int damaged;
    int (*fn)(const lz_store_issue *is, void *ctx);
    void *ctx;
    lz_store_check_stats *st;
    int stopped; /* the callback asked to stop */
    char msg[512];
    const char *kv_spec; /* the row being checked: its KV eviction spec */
} check_ctx;

static int report(check_ctx *c, lz_store_issue_kind kind, int64_t id, const char *ext_id,
                  const int *ids, int n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->st->n_issues++;
    lz_store_issue is = { kind, id, ext_id, ids, n, c->msg, c->kv_spec ? c->kv_spec : "" };
    if (c->fn && c->fn(&is, c->ctx)) c->stopped = 1;
    return c->stopped;
}

/* Checks one payload reference. Returns the callback's value (0 = go on). */
static int check_one(check_ctx *c, int64_t id, const char *ext_id, const uint8_t *key,
                     const uint8_t *want_key, const int *ids, int n, int pos_base, int *ok)
{
    lz_store *s = c->s;
    *ok = 0;
    if (memcmp(key, s->fingerprint, 32) != 0)
        return report(c, LZ_STORE_ISSUE_WRONG_MODEL, id, ext_id, ids, n,
                      "payload key names another model");
    if (memcmp(key, want_key, LZ_META_KEY_LEN) != 0)
        return report(c, LZ_STORE_ISSUE_MISMATCH, id, ext_id, ids, n,
                      "payload key does not match the row's token ids");
    const void *blob;
    size_t len;
    char e[256];
    int rc = c->damaged ? (c->pages && lz_kvdb_pages_find(c->pages, key, LZ_META_KEY_LEN, &blob, &len) ? LZ_OK
                                                                                                    : LZ_ENOTFOUND)
                        : lz_kvdb_reader_get(c->rd, key, LZ_META_KEY_LEN, &blob, &len, e, sizeof e);
    if (rc == LZ_ENOTFOUND)
        return report(c, LZ_STORE_ISSUE_MISSING, id, ext_id, ids, n, c->damaged ? "payload lost with a damaged LMDB page"
                                                                               : "payload missing from LMDB");
    if (rc) return report(c, LZ_STORE_ISSUE_MISSING, id, ext_id, ids, n, "payload unreadable: %s", e);
    lz_payload_info info;
    rc = lz_payload_parse(blob, len, 1, &info, e, sizeof e);
    if (rc) return report(c, LZ_STORE_ISSUE_CORRUPT, id, ext_id, ids, n, "%s", e);
    if (memcmp(info.model, s->fingerprint, 32) != 0)
        return report(c, LZ_STORE_ISSUE_WRONG_MODEL, id, ext_id, ids, n,
                      "payload header names another model");
    if (info.n_layers != s->n_layers || info.n_kv_heads != s->n_kv_heads || info.head_dim != s->head_dim)
        return report(c, LZ_STORE_ISSUE_MISMATCH, id, ext_id, ids, n,
                      "payload shape L=%d KV=%d d=%d, model has L=%d KV=%d d=%d", info.n_layers,
                      info.n_kv_heads, info.head_dim, s->n_layers, s->n_kv_heads, s->head_dim);
    if (info.dtype != s->kv_dtype)
        return report(c, LZ_STORE_ISSUE_MISMATCH, id, ext_id, ids, n, "payload dtype %d, the store's is %d",
                      info.dtype, s->kv_dtype);
    if (info.n_tokens != n || info.pos_base != pos_base)
        return report(c, LZ_STORE_ISSUE_MISMATCH, id, ext_id, ids, n,
                      "payload holds %d tokens at base %d, row says %d at base %d", info.n_tokens,
                      info.pos_base, n, pos_base);
    *ok = 1;
    return 0;
}

static int check_doc(const lz_meta_doc *d, void *p)
{
    check_ctx *c = p;
    c->kv_spec = d->kv_spec;
    c->st->n_docs++;
    if (!d->token_ids)
        return report(c, LZ_STORE_ISSUE_BAD_ROW, d->id, d->ext_id, NULL, 0,
                      "token_ids blob does not hold n_tokens = %d ids", d->n_tokens);
    if (d->model_id != c->s->model_id)
        return report(c, LZ_STORE_ISSUE_WRONG_MODEL, d->id, d->ext_id, d->token_ids, d->n_tokens,
                      "row belongs to model id %lld, store model is %lld", (long long)d->model_id,
                      (long long)c->s->model_id);
    uint8_t want[LZ_META_KEY_LEN];
    lz_store_doc_key_kv(c->s->fingerprint, c->s->prefix, c->s->n_prefix, d->token_ids, d->n_tokens, d->kv_spec,
                        want);
    int ok;
    int r = check_one(c, d->id, d->ext_id, d->payload_key, want, d->token_ids, d->n_tokens,
                      c->s->n_prefix, &ok);
    c->st->n_ok += ok;
    return r;
}

/* Counts the intact entries no row references (a damaged store's garbage). */
static int count_unreferenced(const void *key, size_t key_len, const void *val, size_t val_len, void *p)
{
    gc_ctx *g = p;
    g->n_seen++;
    int ref = lz_meta_key_referenced(g->s->meta, key, key_len, g->err, g->errlen);
    if (ref < 0) return g->error = LZ_EIO, 1;
    g->n += !ref;
    return 0;
}

int lz_store_check(lz_store *s, int (*fn)(const lz_store_issue *is, void *ctx), void *ctx,
                   lz_store_check_stats *st, char *err, size_t errlen)
{
    if (s->n_shards) return lz_store_sh_check(s, fn, ctx, st, err, errlen);
    memset(st, 0, sizeof *st);
    if (!s->bound) return lz_fail(err, errlen, LZ_EINVAL, "store %s: check before binding a model", s->dir);
    check_ctx c = { s, NULL, NULL, 0, fn, ctx, st, 0, "", NULL };
    /* an LMDB read snapshot first: a writer running beside this check reuses no page of it (the
     * pages read below without LMDB included) */
    int rc = lz_store_from_kvdb(lz_kvdb_reader_begin(s->kv, &c.rd, err, errlen));
    if (rc) return rc;
    /* then LMDB's own pages, without LMDB (it trusts them: a damaged leaf can crash it) */
    char path[4200];
    snprintf(path, sizeof path, "%s/kv/data.mdb", s->dir);
    rc = lz_store_from_kvdb(lz_kvdb_pages_open(path, 0, &c.pages, err, errlen));
    if (rc == LZ_ECORRUPT) { /* no valid meta page: nothing is readable, every payload is lost */
        st->kv_damaged = c.damaged = 1;
        rc = LZ_OK;
        if (report(&c, LZ_STORE_ISSUE_KV_DAMAGED, -1, "(payload database)", NULL, 0, "%s", err)) {
            lz_kvdb_reader_end(c.rd);
            return LZ_OK;
        }
    } else if (rc) {
        lz_kvdb_reader_end(c.rd);
        return rc;
    } else if (lz_kvdb_pages_damaged(c.pages)) {
        const lz_kvdb_pages_stats *ps = lz_kvdb_pages_get_stats(c.pages);
        st->kv_damaged = c.damaged = 1;
        if (report(&c, LZ_STORE_ISSUE_KV_DAMAGED, -1, "(payload database)", NULL, 0,
                   "LMDB %s: %s: %lld damaged pages; %lld of the %lld payloads are on intact pages (lazyingest "
                   "--repair rebuilds it)", path, ps->first, (long long)ps->damaged, (long long)ps->entries,
                   (long long)ps->meta_entries)) {
            lz_kvdb_pages_close(c.pages);
            lz_kvdb_reader_end(c.rd);
            return LZ_OK;
        }
    } else {
        lz_kvdb_pages_close(c.pages);
        c.pages = NULL;
    }
    uint8_t want[LZ_META_KEY_LEN];
    lz_store_prefix_key(s->fingerprint, s->prefix, s->n_prefix, want);
    lz_meta_model mm;
    rc = lz_store_from_meta(lz_meta_model_get(s->meta, &mm, err, errlen));
    int ok;
    if (!rc) {
        free(mm.prefix_tokens);
        check_one(&c, 0, "(prefix)", mm.prefix_key, want, s->prefix, s->n_prefix, 0, &ok);
    }
    if (!rc && !c.stopped) {
        int r = lz_meta_doc_foreach(s->meta, check_doc, &c, err, errlen);
        if (!c.stopped) rc = lz_store_from_meta(r);
    }
    gc_ctx g;
    if (c.damaged) { /* garbage among the intact pages (LMDB's cursor is not to be trusted here) */
        memset(&g, 0, sizeof g);
        g.s = s;
        g.err = err;
        g.errlen = errlen;
        if (!rc && !c.stopped && c.pages) lz_kvdb_pages_foreach(c.pages, count_unreferenced, &g);
        if (!rc) rc = g.error;
        st->n_payloads = g.n_seen;
        st->n_unreferenced = g.n;
        lz_kvdb_pages_close(c.pages);
        lz_kvdb_reader_end(c.rd);
        return rc;
    }
    lz_kvdb_reader_end(c.rd);
    if (rc || c.stopped) return rc;
    rc = gc_scan(s, &g, err, errlen);
    st->n_payloads = g.n_seen;
    st->n_unreferenced = g.n;
    free(g.keys);
    free(g.lens);
    return rc;
}
