/* ingest_record.c - lazyingest's corpus records (ingest/ingest_run.h): pass
 * 1's map of ids (each id's last occurrence, so a duplicate's earlier copies
 * are skipped), and one record into the batch: unchanged, changed or new
 * (content hash and payload key under this run's model, prefix and KV
 * policy; unchanged only while the store holds its payload: one lost is
 * encoded again), split into passages past --max-doc-tokens, bad ones reported with
 * their file and line. */
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_run.h"
#include "ingest/split.h"
#include "model/prompt.h"

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* Returns the slot of id (inserting it with ordinal -1 when absent), NULL on OOM. */
id_slot *ingest_id_map_get(id_map *m, const char *id, int insert)
{
    if (insert && (m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        id_slot *v = calloc(cap, sizeof *v);
        if (!v) return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->v[i].id) continue;
            size_t j = hash_str(m->v[i].id) & (cap - 1);
            while (v[j].id) j = (j + 1) & (cap - 1);
            v[j] = m->v[i];
        }
        free(m->v);
        m->v = v;
        m->cap = cap;
    }
    if (!m->cap) return NULL;
    size_t j = hash_str(id) & (m->cap - 1);
    while (m->v[j].id) {
        if (strcmp(m->v[j].id, id) == 0) return &m->v[j];
        j = (j + 1) & (m->cap - 1);
    }
    if (!insert) return NULL;
    m->v[j].id = strdup(id);
    if (!m->v[j].id) return NULL;
    m->v[j].ordinal = -1;
    m->n++;
    return &m->v[j];
}

void ingest_id_map_free(id_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->v[i].id);
    free(m->v);
}

/* Payload key of a document under this run's model, prefix and policy. */
static void doc_key(const ingest *g, const int *ids, int n, uint8_t key[LZ_META_KEY_LEN])
{
    char spec[LZ_KVPOLICY_SPEC_MAX];
    ingest_doc_kv(g, n, spec);
    lz_store_doc_key_kv(g->m->fingerprint, g->prefix, g->n_prefix, ids, n, spec, key);
}

static pend_doc *new_pending(ingest *g)
{
    if (g->n_docs == g->cap_docs) {
        int cap = g->cap_docs ? g->cap_docs * 2 : 64;
        pend_doc *d = realloc(g->docs, sizeof *d * (size_t)cap);
        if (!d) return NULL;
        g->docs = d;
        g->cap_docs = cap;
    }
    pend_doc *d = &g->docs[g->n_docs++];
    memset(d, 0, sizeof *d);
    return d;
}

typedef struct {
    const lz_tokenizer *tok;
    const char *title;
} count_ctx;

static int count_tokens(void *p, const char *s, size_t n)
{
    count_ctx *c = p;
    int *ids = NULL, k = 0;
    if (lz_prompt_doc_tokens(c->tok, c->title, s, n, &ids, &k)) return -1;
    free(ids);
    return k;
}

/* Whether the store holds the payload of key: what a re-run checks of an unchanged
 * document (one B-tree lookup, no read of the payload), so that one whose payload was lost
 * (a damaged or edited store) is encoded again. 1, 0, or -1 on error (g->err). */
static int payload_present(ingest *g, const uint8_t key[LZ_META_KEY_LEN])
{
    return lz_store_has_payload(g->s, key, NULL, g->err, sizeof g->err);
}

/* The split fast path: rows of a source, checked in passage order. */
typedef struct {
    ingest *g;
    const uint8_t *hash;
    int64_t *ids;
    int n, cap, ok;
    int64_t tokens;
} split_check;

static int split_visit(const lz_meta_doc *d, void *p)
{
    split_check *c = p;
    ingest *g = c->g;
    uint8_t key[LZ_META_KEY_LEN];
    if (!d->token_ids || !d->has_source_hash || memcmp(d->source_hash, c->hash, 32) != 0 || d->passage != c->n ||
        d->model_id != g->model_id) {
        c->ok = 0;
        return 1;
    }
    doc_key(g, d->token_ids, d->n_tokens, key);
    if (memcmp(key, d->payload_key, LZ_META_KEY_LEN) != 0 || payload_present(g, key) != 1) {
        c->ok = 0; /* (a payload missing: the slow path encodes that passage again) */
        return 1;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        int64_t *v = realloc(c->ids, sizeof *v * (size_t)cap);
        if (!v) {
            c->ok = 0;
            return 1;
        }
        c->ids = v;
        c->cap = cap;
    }
    c->ids[c->n++] = d->id;
    c->tokens += d->n_tokens;
    return 0;
}

/* Processes one valid record. Returns 0, 1 when it was bad (message in
 * g->err), -1 on a fatal error. */
int ingest_do_record(ingest *g, const lz_corpus_record *r, const id_map *ids_seen, const char *where)
{
    const lz_tokenizer *tok = g->m->tok;
    lz_meta_doc row;
    char src[LZ_CORPUS_MAX_ID + 1];
    uint8_t hash[32];
    /* fast path: an unsplit document whose text and prefix are unchanged and
     * that still fits --max-doc-tokens */
    lz_store_content_hash(r->title, r->text, hash);
    int rc = lz_store_doc_find(g->s, r->id, &row, src, sizeof src, g->err, sizeof g->err);
    if (rc && rc != LZ_ENOTFOUND) return -1;
    if (!rc && strcmp(src, r->id) != 0) {
        snprintf(g->err, sizeof g->err, "%s: id '%s' collides with passage %d of document '%s'", where, r->id,
                 row.passage, src);
        return 1;
    }
    int same = 0;
    if (!rc && row.passage < 0 && memcmp(row.content_hash, hash, 32) == 0 && row.model_id == g->model_id &&
        row.n_tokens <= g->o.max_doc_tokens) {
        /* same text: unchanged if its payload key is the one this model and
         * prefix give its tokens (a new prompt prefix changes every key) */
        int *old = NULL, n_old = 0;
        uint8_t key[LZ_META_KEY_LEN];
        int st = lz_store_doc_tokens(g->s, row.id, &old, &n_old, g->err, sizeof g->err);
        if (st && st != LZ_ECORRUPT) return -1;
        if (!st) {
            doc_key(g, old, n_old, key);
            same = memcmp(key, row.payload_key, LZ_META_KEY_LEN) == 0;
        }
        free(old);
        int have = same ? payload_present(g, row.payload_key) : 1;
        if (have < 0) return -1;
        same = same && have; /* its payload lost: the slow path below encodes it again */
    }
    if (same) {
        pend_doc *d = new_pending(g);
        if (!d || !(d->source_id = strdup(r->id))) return -1;
        d->kind = K_UNCHANGED;
        d->row_id = row.id;
        g->n_corpus_tokens += row.n_tokens;
        return ingest_push_ptr(&g->sources, &g->n_src, &g->cap_src, r->id) ? -1 : 0;
    }

    /* fast path: a split record whose passages all carry this record's hash
     * (same text, same budget) and keys valid under this model and prefix */
    uint8_t split_hash[32];
    lz_store_split_hash(r->title, r->text, r->text_len, g->o.max_doc_tokens, split_hash);
    if (rc == LZ_ENOTFOUND) {
        split_check sc = { g, split_hash, NULL, 0, 0, 1, 0 };
        if (lz_store_source_rows(g->s, r->id, split_visit, &sc, g->err, sizeof g->err)) {
            free(sc.ids);
            return -1;
        }
        if (sc.ok && sc.n > 0) {
            for (int k = 0; k < sc.n; k++) {
                pend_doc *d = new_pending(g);
                if (!d) {
                    free(sc.ids);
                    return -1;
                }
                d->kind = K_UNCHANGED;
                d->row_id = sc.ids[k];
            }
            free(sc.ids);
            g->n_corpus_tokens += sc.tokens;
            return ingest_push_ptr(&g->sources, &g->n_src, &g->cap_src, r->id) ? -1 : 0;
        }
        free(sc.ids);
    }

    /* tokenize, split when over budget */
    int *all = NULL, n_all = 0;
    if (lz_prompt_doc_tokens(tok, r->title, r->text, r->text_len, &all, &n_all)) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    lz_split_span *spans = NULL;
    int n_spans = 0, split = n_all > g->o.max_doc_tokens;
    if (split) {
        count_ctx cc = { tok, r->title };
        int st = lz_split_passages(r->text, r->text_len, g->o.max_doc_tokens, count_tokens, &cc, &spans, &n_spans);
        if (st) {
            free(all);
            snprintf(g->err, sizeof g->err, "%s: id '%s': cannot split into passages of %d tokens (%s)", where,
                     r->id, g->o.max_doc_tokens,
                     st == LZ_EINVAL ? "the title alone is longer" : "out of memory");
            return st == LZ_EINVAL ? 1 : -1;
        }
    }
    int n_parts = split ? n_spans : 1, first = g->n_docs;
    /* passage ids must not collide with other records' ids */
    for (int k = 0; split && k < n_parts; k++) {
        char pid[LZ_CORPUS_MAX_ID + 32];
        snprintf(pid, sizeof pid, "%s#%d", r->id, k);
        if (ingest_id_map_get((id_map *)ids_seen, pid, 0)) {
            snprintf(g->err, sizeof g->err, "%s: id '%s': passage id '%s' collides with a record of that id",
                     where, r->id, pid);
            free(all);
            free(spans);
            return 1;
        }
    }
    for (int k = 0; k < n_parts; k++) {
        char pid[LZ_CORPUS_MAX_ID + 32];
        const char *text = r->text;
        size_t text_len = r->text_len;
        int *ids = all, n = n_all;
        if (split) {
            snprintf(pid, sizeof pid, "%s#%d", r->id, k);
            text = r->text + spans[k].off;
            text_len = spans[k].len;
            ids = NULL;
            if (lz_prompt_doc_tokens(tok, r->title, text, text_len, &ids, &n)) {
                free(all);
                free(spans);
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
        } else {
            snprintf(pid, sizeof pid, "%s", r->id);
        }
        pend_doc *d = new_pending(g);
        if (!d) return -1;
        d->ext_id = strdup(pid);
        d->source_id = strdup(r->id);
        d->title = r->title ? strdup(r->title) : NULL;
        d->text = strndup(text, text_len);
        d->ids = split ? ids : malloc(sizeof(int) * (size_t)(n ? n : 1));
        if (!d->ext_id || !d->source_id || (r->title && !d->title) || !d->text || !d->ids) return -1;
        if (!split) memcpy(d->ids, all, sizeof(int) * (size_t)n);
        d->n_tokens = n;
        d->passage = split ? k : -1;
        d->has_source_hash = split;
        if (split) memcpy(d->source_hash, split_hash, 32);
        lz_store_content_hash(d->title, d->text, d->content_hash);
        doc_key(g, d->ids, n, d->key);
        d->kv_kept = ingest_doc_kv(g, n, d->kv_spec);
        g->n_corpus_tokens += n;
        rc = lz_store_doc_find(g->s, pid, &row, src, sizeof src, g->err, sizeof g->err);
        if (rc && rc != LZ_ENOTFOUND) return -1;
        if (!rc && strcmp(src, r->id) != 0) {
            snprintf(g->err, sizeof g->err, "%s: id '%s': passage id '%s' collides with document '%s'", where,
                     r->id, pid, src);
            for (int j = first; j < g->n_docs; j++) ingest_pend_doc_free(&g->docs[j]); /* drop this record's passages */
            g->n_docs = first;
            while (g->n_jobs > 0 && g->jobs[g->n_jobs - 1].doc >= first) g->n_jobs--; /* nothing encoded yet */
            free(all);
            free(spans);
            return 1;
        }
        int present = 1;
        if (!rc && row.passage == d->passage && memcmp(row.content_hash, d->content_hash, 32) == 0 &&
            memcmp(row.payload_key, d->key, LZ_META_KEY_LEN) == 0 && row.model_id == g->model_id &&
            (present = payload_present(g, d->key)) < 0)
            return -1;
        if (!present) g->n_restored++; /* unchanged, but its payload is gone: encoded again (an update) */
        if (!rc && present && row.passage == d->passage && memcmp(row.content_hash, d->content_hash, 32) == 0 &&
            memcmp(row.payload_key, d->key, LZ_META_KEY_LEN) == 0 && row.model_id == g->model_id) {
            int hash_same = row.has_source_hash == d->has_source_hash &&
                            (!split || memcmp(row.source_hash, d->source_hash, 32) == 0);
            d->kind = hash_same ? K_UNCHANGED : K_REHASH;
            d->row_id = row.id;
            d->raw_bytes = row.raw_bytes;
            d->stored_bytes = row.stored_bytes;
            continue;
        }
        d->kind = rc ? K_ADDED : K_UPDATED;
        d->row_id = rc ? 0 : row.id;
        if (ingest_encode_doc(g, (int)(d - g->docs))) {
            free(all);
            free(spans);
            return -1;
        }
    }
    free(all);
    free(spans);
    return ingest_push_ptr(&g->sources, &g->n_src, &g->cap_src, r->id) ? -1 : 0;
}
