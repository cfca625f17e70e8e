/* doc_cache.c - byte-budget document cache with frequency admission and
 * eviction (see doc_cache.h). Open-addressing hash of keys -> slot; a key's
 * frequency lives in the same table whether or not its value is cached.
 * Eviction scans cached entries for the minimum (n is small: documents in
 * memory, not tokens), which keeps the policy exact and simple. */
#include "query/doc_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t key[LZ_DOC_CACHE_KEY_MAX];
    uint8_t key_len;
    uint8_t used;      /* slot holds a key */
    double freq;       /* decayed access count (+ prior) */
    uint64_t last;     /* access clock of the last access */
    uint64_t epoch;    /* last request that used it: pinned while that request runs */
    void *value;       /* non-NULL when cached */
    size_t bytes;
} slot;

struct lz_doc_cache {
    slot *slots;
    size_t cap;        /* power of two */
    size_t n_keys;
    size_t budget;
    uint64_t clock;
    uint64_t epoch;    /* current request */
    uint64_t aging_period;
    void (*free_value)(void *, void *);
    void *ctx;
    lz_doc_cache_stats st;
};

static uint64_t hash(const void *k, size_t n)
{
    const uint8_t *p = k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

lz_doc_cache *lz_doc_cache_new(size_t budget, void (*free_value)(void *, void *), void *ctx)
{
    lz_doc_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cap = 1024;
    c->slots = calloc(c->cap, sizeof *c->slots);
    if (!c->slots) { free(c); return NULL; }
    c->budget = budget;
    c->free_value = free_value;
    c->ctx = ctx;
    c->aging_period = 1 << 16;
    c->epoch = 1;
    c->st.bytes_budget = (int64_t)budget;
    return c;
}

void lz_doc_cache_free(lz_doc_cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].value && c->free_value) c->free_value(c->slots[i].value, c->ctx);
    free(c->slots);
    free(c);
}

static slot *find(lz_doc_cache *c, const void *key, size_t n, int create);

static int grow(lz_doc_cache *c)
{
    slot *old = c->slots;
    size_t oldcap = c->cap;
    c->slots = calloc(oldcap * 2, sizeof *c->slots);
    if (!c->slots) { c->slots = old; return -1; }
    c->cap = oldcap * 2;
    c->n_keys = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].used) {
            slot *s = find(c, old[i].key, old[i].key_len, 1);
            *s = old[i];
        }
    free(old);
    return 0;
}

/* Slot of key; with create, inserts an empty one (NULL on allocation failure). */
static slot *find(lz_doc_cache *c, const void *key, size_t n, int create)
{
    if (n > LZ_DOC_CACHE_KEY_MAX) n = LZ_DOC_CACHE_KEY_MAX;
    if (create && (c->n_keys + 1) * 4 > c->cap * 3 && grow(c)) return NULL;
    size_t mask = c->cap - 1;
    for (size_t i = hash(key, n) & mask;; i = (i + 1) & mask) {
        slot *s = &c->slots[i];
        if (!s->used) {
            if (!create) return NULL;
            memset(s, 0, sizeof *s);
            s->used = 1;
            s->key_len = (uint8_t)n;
            memcpy(s->key, key, n);
            c->n_keys++;
            return s;
        }
        if (s->key_len == n && !memcmp(s->key, key, n)) return s;
    }
}

/* Halves every frequency (aging) so popularity drift is followed. */
static void age(lz_doc_cache *c)
{
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].used) c->slots[i].freq *= 0.5;
}

static void touch(lz_doc_cache *c, slot *s)
{
    s->freq += 1.0;
    s->epoch = c->epoch;
    s->last = ++c->clock;
    if (c->clock % c->aging_period == 0) age(c);
}

void lz_doc_cache_prior(lz_doc_cache *c, const void *key, size_t key_len, double freq)
{
    slot *s = find(c, key, key_len, 1);
    if (s) s->freq += freq;
}

void *lz_doc_cache_get(lz_doc_cache *c, const void *key, size_t key_len)
{
    slot *s = find(c, key, key_len, 1);
    if (!s) { c->st.misses++; return NULL; }
    touch(c, s);
    if (s->value) { c->st.hits++; return s->value; }
    c->st.misses++;
    return NULL;
}

static void evict(lz_doc_cache *c, slot *s)
{
    if (c->free_value) c->free_value(s->value, c->ctx);
    s->value = NULL;
    c->st.bytes_used -= (int64_t)s->bytes;
    c->st.n_entries--;
    c->st.evicted++;
    s->bytes = 0;
}

static void insert(lz_doc_cache *c, slot *s, void *value, size_t bytes)
{
    s->value = value;
    s->bytes = bytes;
    c->st.bytes_used += (int64_t)bytes;
    c->st.n_entries++;
}

int lz_doc_cache_put(lz_doc_cache *c, const void *key, size_t key_len, void *value, size_t bytes)
{
    c->st.bytes_loaded += (int64_t)bytes;
    slot *s = find(c, key, key_len, 1);
    if (!s || s->value || bytes > c->budget) { c->st.rejected++; return 0; }
    /* admission: would the entries we must evict all be less popular? */
    size_t free_bytes = c->budget - (size_t)c->st.bytes_used;
    if (bytes > free_bytes) {
        size_t need = bytes - free_bytes, freed = 0;
        /* dry run over victims in order, without evicting yet */
        slot **v = NULL;
        size_t nv = 0, capv = 0;
        int ok = 1;
        while (freed < need) {
            slot *w = NULL;
            for (size_t i = 0; i < c->cap; i++) {
                slot *x = &c->slots[i];
                if (!x->value || x == s || x->epoch == c->epoch) continue; /* pinned by this request */
                int taken = 0;
                for (size_t j = 0; j < nv; j++) if (v[j] == x) { taken = 1; break; }
                if (taken) continue;
                if (!w || x->freq < w->freq || (x->freq == w->freq && x->last < w->last)) w = x;
            }
            if (!w || w->freq >= s->freq) { ok = 0; break; }
            if (nv == capv) {
                capv = capv ? capv * 2 : 8;
                slot **nvv = realloc(v, capv * sizeof *nvv);
                if (!nvv) { ok = 0; break; }
                v = nvv;
            }
            v[nv++] = w;
            freed += w->bytes;
        }
        if (ok)
            for (size_t j = 0; j < nv; j++) evict(c, v[j]);
        free(v);
        if (!ok) { c->st.rejected++; return 0; }
    }
    insert(c, s, value, bytes);
    c->st.admitted++;
    return 1;
}

int lz_doc_cache_preload(lz_doc_cache *c, const void *key, size_t key_len, void *value, size_t bytes)
{
    slot *s = find(c, key, key_len, 1);
    if (!s || s->value || bytes > c->budget - (size_t)c->st.bytes_used) return 0;
    insert(c, s, value, bytes);
    return 1;
}

void lz_doc_cache_begin(lz_doc_cache *c) { c->epoch++; }

void lz_doc_cache_get_stats(const lz_doc_cache *c, lz_doc_cache_stats *st) { *st = c->st; }
