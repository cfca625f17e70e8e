/* retrieve.c - BM25 retrieval and id lookup (see retrieve.h). The question
 * is never handed to FTS5 as syntax: lz_meta_fts_quote turns every word into
 * a quoted term, so operators, column filters, quotes and parentheses in
 * user input are plain words. A source id is expanded to its passages through
 * the store's rows of that source (lz_store_source_rows). */
#include "query/retrieve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    lz_query_doc *docs;
    int n, cap;
    int oom; /* a push failed */
} hits;

static int on_hit(const lz_meta_hit *h, void *ctx)
{
    hits *H = ctx;
    if (H->n == H->cap) return 1;
    lz_query_doc *d = &H->docs[H->n++];
    memset(d, 0, sizeof *d);
    d->id = h->id;
    snprintf(d->ext_id, sizeof d->ext_id, "%s", h->ext_id ? h->ext_id : "");
    snprintf(d->title, sizeof d->title, "%s", h->title ? h->title : "");
    d->score = h->score;
    return 0;
}

/* Completes d (payload key, tokens) from its row. 0, LZ_ENOTFOUND, or the store's status. */
static int complete(lz_store *s, lz_query_doc *d, char *err, size_t errlen)
{
    lz_meta_doc row;
    char e2[256] = "";
    int rc = lz_store_doc_find(s, d->ext_id, &row, NULL, 0, e2, sizeof e2);
    if (rc == LZ_ENOTFOUND) { snprintf(err, errlen, "document '%s' is not in the store", d->ext_id); return rc; }
    if (rc) { snprintf(err, errlen, "document '%s': %s", d->ext_id, e2); return rc; }
    d->id = row.id;
    if (!d->title[0]) { /* --docs: the title is not known yet */
        int trc = lz_store_doc_title(s, row.id, d->title, sizeof d->title, e2, sizeof e2);
        if (trc && trc != LZ_ENOTFOUND) { snprintf(err, errlen, "document '%s': %s", d->ext_id, e2); return trc; }
    }
    memcpy(d->payload_key, row.payload_key, LZ_META_KEY_LEN);
    d->n_tokens = row.n_tokens;
    d->whole = row.kv_spec[0] == 0; /* no KV eviction: the stored KV is the encoder's whole output */
    return 0;
}

int lz_retrieve_search(lz_store *s, const char *question, int k, lz_query_doc **docs, int *n, char *err,
                       size_t errlen)
{
    *docs = NULL;
    *n = 0;
    if (k <= 0) return 0;
    hits H = {.docs = calloc((size_t)k, sizeof(lz_query_doc)), .cap = k};
    if (!H.docs) { snprintf(err, errlen, "out of memory"); return -1; }
    int rc = lz_store_search(s, question, k, on_hit, &H, err, errlen);
    for (int i = 0; !rc && i < H.n; i++) rc = complete(s, &H.docs[i], err, errlen);
    if (rc) { free(H.docs); return -1; }
    *docs = H.docs;
    *n = H.n;
    return 0;
}

int lz_retrieve_ids(lz_store *s, const char *const *ids, int n_ids, lz_query_doc **docs, char *err, size_t errlen)
{
    *docs = calloc((size_t)(n_ids > 0 ? n_ids : 1), sizeof(lz_query_doc));
    if (!*docs) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int i = 0; i < n_ids; i++) {
        lz_query_doc *d = &(*docs)[i];
        snprintf(d->ext_id, sizeof d->ext_id, "%s", ids[i]);
        if (complete(s, d, err, errlen)) { free(*docs); *docs = NULL; return -1; }
    }
    return 0;
}

/* Appends an empty document to H (growing it). NULL when out of memory. */
static lz_query_doc *hits_push(hits *H)
{
    if (H->n == H->cap) {
        int cap = H->cap ? H->cap * 2 : 8;
        lz_query_doc *v = realloc(H->docs, sizeof *v * (size_t)cap);
        if (!v) return NULL;
        H->docs = v;
        H->cap = cap;
    }
    lz_query_doc *d = &H->docs[H->n++];
    memset(d, 0, sizeof *d);
    return d;
}

/* lz_store_source_rows' callback: each passage of the source into H (completed afterwards). */
static int on_passage(const lz_meta_doc *row, void *ctx)
{
    hits *H = ctx;
    if (row->passage < 0) return 0; /* the source's unsplit row: found by its own id already */
    lz_query_doc *d = hits_push(H);
    if (!d) return H->oom = 1;
    snprintf(d->ext_id, sizeof d->ext_id, "%s", row->ext_id);
    return 0;
}

int lz_retrieve_resolve_ids(lz_store *s, const char *const *ids, int n_ids, lz_query_doc **docs, int *n_docs,
                            char *err, size_t errlen)
{
    hits H = {0};
    *docs = NULL;
    *n_docs = 0;
    int rc = 0;
    for (int i = 0; !rc && i < n_ids; i++) {
        if (strlen(ids[i]) >= sizeof H.docs[0].ext_id) {
            snprintf(err, errlen, "document id '%.60s...' is longer than %zu bytes", ids[i], sizeof H.docs[0].ext_id - 1);
            rc = LZ_EINVAL;
            break;
        }
        lz_meta_doc row;
        char e2[256] = "";
        int frc = lz_store_doc_find(s, ids[i], &row, NULL, 0, e2, sizeof e2);
        const int first = H.n;
        if (frc == 0) {
            lz_query_doc *d = hits_push(&H);
            if (!d) { snprintf(err, errlen, "out of memory"); rc = LZ_ENOMEM; break; }
            snprintf(d->ext_id, sizeof d->ext_id, "%s", ids[i]);
        } else if (frc == LZ_ENOTFOUND) { /* the id of a split record: its passages */
            const int src = lz_store_source_rows(s, ids[i], on_passage, &H, e2, sizeof e2);
            if (src || H.oom) {
                snprintf(err, errlen, "document '%s': %s", ids[i], H.oom ? "out of memory" : e2);
                rc = H.oom ? LZ_ENOMEM : src;
                break;
            }
            if (H.n == first) {
                snprintf(err, errlen, "document '%s' is not in the store", ids[i]);
                rc = LZ_ENOTFOUND;
                break;
            }
        } else {
            snprintf(err, errlen, "document '%s': %s", ids[i], e2);
            rc = frc;
            break;
        }
        for (int k = first; !rc && k < H.n; k++) rc = complete(s, &H.docs[k], err, errlen);
    }
    if (!rc && !H.docs && !(H.docs = calloc(1, sizeof *H.docs))) { snprintf(err, errlen, "out of memory"); rc = LZ_ENOMEM; }
    if (rc) { free(H.docs); return rc; }
    *docs = H.docs;
    *n_docs = H.n;
    return 0;
}
