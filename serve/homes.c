/* homes.c - a document's home engine by its home key (homes.h): FNV-1a
 * hashes, linear probing, the table doubled at 70% full; the start-up plan
 * over the store's access counts. */
#include "serve/homes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *id;   /* NULL: an empty slot */
    int engine;
} slot;

struct lz_serve_homes {
    slot *t;    /* (cap), cap a power of two */
    long cap, n;
    int64_t docs[LZ_SERVE_HOMES_MAX_ENGINES], tokens[LZ_SERVE_HOMES_MAX_ENGINES]; /* homed on each engine */
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

lz_serve_homes *lz_serve_homes_new(void)
{
    lz_serve_homes *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->cap = 256;
    if (!(h->t = calloc((size_t)h->cap, sizeof *h->t))) { free(h); return NULL; }
    return h;
}

void lz_serve_homes_free(lz_serve_homes *h)
{
    if (!h) return;
    for (long i = 0; i < h->cap; i++) free(h->t[i].id);
    free(h->t);
    free(h);
}

/* The slot of id, or the empty one where it would go. */
static slot *find(const slot *t, long cap, const char *id)
{
    for (uint64_t i = hash(id) & (uint64_t)(cap - 1);; i = (i + 1) & (uint64_t)(cap - 1))
        if (!t[i].id || !strcmp(t[i].id, id)) return (slot *)&t[i];
}

int lz_serve_homes_get(const lz_serve_homes *h, const char *id)
{
    const slot *s = find(h->t, h->cap, id);
    return s->id ? s->engine : -1;
}

static int grow(lz_serve_homes *h)
{
    const long cap = h->cap * 2;
    slot *t = calloc((size_t)cap, sizeof *t);
    if (!t) return -1;
    for (long i = 0; i < h->cap; i++)
        if (h->t[i].id) *find(t, cap, h->t[i].id) = h->t[i];
    free(h->t);
    h->t = t;
    h->cap = cap;
    return 0;
}

int lz_serve_homes_set(lz_serve_homes *h, const char *id, int engine, int64_t tokens)
{
    if (engine < 0 || engine >= LZ_SERVE_HOMES_MAX_ENGINES) return -1;
    if ((h->n + 1) * 10 > h->cap * 7 && grow(h)) return -1;
    slot *s = find(h->t, h->cap, id);
    if (s->id) return 0;
    if (!(s->id = strdup(id))) return -1;
    s->engine = engine;
    h->n++;
    h->docs[engine]++;
    h->tokens[engine] += tokens > 0 ? tokens : 1;
    return 1;
}

void lz_serve_homes_engine(const lz_serve_homes *h, int engine, int64_t *docs, int64_t *tokens)
{
    const int ok = engine >= 0 && engine < LZ_SERVE_HOMES_MAX_ENGINES;
    *docs = ok ? h->docs[engine] : 0;
    *tokens = ok ? h->tokens[engine] : 0;
}

void lz_serve_home_key_payload(const uint8_t pk[LZ_META_KEY_LEN], char key[LZ_SERVE_HOME_KEY])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < LZ_META_KEY_LEN; i++) key[2 * i] = hex[pk[i] >> 4], key[2 * i + 1] = hex[pk[i] & 15];
    key[2 * LZ_META_KEY_LEN] = 0;
}

void lz_serve_home_key(const lz_query_doc *d, char key[LZ_SERVE_HOME_KEY])
{
    int any = 0;
    for (int i = 0; i < LZ_META_KEY_LEN && !any; i++) any = d->payload_key[i] != 0;
    if (any) lz_serve_home_key_payload(d->payload_key, key);
    else snprintf(key, LZ_SERVE_HOME_KEY, "id:%s", d->ext_id);
}

typedef struct {
    lz_serve_homes *h;
    int n;
    int failed;
} plan_ctx;

static int plan_one(int64_t doc_id, int64_t hits, const uint8_t *pk, int n_tokens, void *ctx)
{
    plan_ctx *p = ctx;
    (void)doc_id, (void)hits;
    int e = 0;
    for (int i = 1; i < p->n; i++)
        if (p->h->tokens[i] < p->h->tokens[e]) e = i;
    char key[LZ_SERVE_HOME_KEY];
    lz_serve_home_key_payload(pk, key);
    if (lz_serve_homes_set(p->h, key, e, n_tokens) < 0) {
        p->failed = 1;
        return 1;
    }
    return 0;
}

int lz_serve_homes_plan(lz_serve_homes *h, lz_store *st, int n_engines, int all, char *err, size_t errlen)
{
    if (n_engines < 1 || n_engines > LZ_SERVE_HOMES_MAX_ENGINES) {
        snprintf(err, errlen, "%d engines to plan homes for", n_engines);
        return -1;
    }
    plan_ctx p = {h, n_engines, 0};
    err[0] = 0;
    const int rc = lz_store_top_accessed(st, all ? INT32_MAX : 100000, all, plan_one, &p, err, errlen);
    if (p.failed) snprintf(err, errlen, "out of memory planning the documents' homes");
    return rc || p.failed ? -1 : 0;
}

long lz_serve_homes_count(const lz_serve_homes *h) { return h->n; }
