/* doc_cache.c - byte-budget document cache with frequency admission and
 * eviction (see doc_cache.h), TinyLFU style: access frequencies of ALL keys
 * (cached or not) live in a fixed-size count-min sketch (4 rows of 64 Ki
 * counters, conservative update, halved every aging period), so memory stays
 * bounded however many distinct documents or (document, offset) pairs are
 * seen. Cached entries sit in a dense array (scanned for victims: they are
 * documents in memory, not tokens) indexed by an open-addressing hash. */
#include "query/doc_cache.h"

#include <stdlib.h>
#include <string.h>

#define SKETCH_ROWS 4
#define SKETCH_WIDTH (1u << 16)

typedef struct {
    uint8_t key[LZ_DOC_CACHE_KEY_MAX];
    uint8_t key_len;
    uint64_t last;     /* access clock of the last access */
    uint64_t epoch;    /* last request that used it: pinned while that request runs */
    void *value;
    size_t bytes;
} entry;

struct lz_doc_cache {
    float *sketch;          /* (ROWS, WIDTH) */
    entry *ents;            /* dense array of cached entries */
    size_t n_ents, cap_ents;
    int32_t *index;         /* open addressing: -1 empty, -2 deleted, else entry index */
    size_t index_cap;       /* power of two */
    size_t budget;
    uint64_t clock, epoch, aging_period, accesses;
    void (*free_value)(void *, void *);
    void *ctx;
    lz_doc_cache_stats st;
};

static uint64_t hash(const void *k, size_t n, uint64_t seed)
{
    const uint8_t *p = k;
    uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

static size_t clamp_len(size_t n) { return n > LZ_DOC_CACHE_KEY_MAX ? LZ_DOC_CACHE_KEY_MAX : n; }

/* ---- frequency sketch ---- */
static float freq_of(const lz_doc_cache *c, const void *key, size_t n)
{
    float m = 3.4e38f;
    for (int r = 0; r < SKETCH_ROWS; r++) {
        float v = c->sketch[(size_t)r * SKETCH_WIDTH + (hash(key, n, (uint64_t)r + 1) & (SKETCH_WIDTH - 1))];
        m = v < m ? v : m;
    }
    return m;
}

static void freq_add(lz_doc_cache *c, const void *key, size_t n, float x)
{
    float cur = freq_of(c, key, n) + x; /* conservative update: raise only counters below the new estimate */
    for (int r = 0; r < SKETCH_ROWS; r++) {
        float *v = &c->sketch[(size_t)r * SKETCH_WIDTH + (hash(key, n, (uint64_t)r + 1) & (SKETCH_WIDTH - 1))];
        if (*v < cur) *v = cur;
    }
}

static void age(lz_doc_cache *c)
{
    for (size_t i = 0; i < (size_t)SKETCH_ROWS * SKETCH_WIDTH; i++) c->sketch[i] *= 0.5f;
}

/* ---- index of cached entries ---- */
static int64_t lookup(const lz_doc_cache *c, const void *key, size_t n)
{
    size_t mask = c->index_cap - 1;
    for (size_t i = hash(key, n, 0) & mask;; i = (i + 1) & mask) {
        int32_t e = c->index[i];
        if (e == -1) return -1;
        if (e >= 0 && c->ents[e].key_len == n && !memcmp(c->ents[e].key, key, n)) return (int64_t)i;
    }
}

static int rebuild_index(lz_doc_cache *c, size_t cap)
{
    int32_t *idx = malloc(cap * sizeof *idx);
    if (!idx) return -1;
    for (size_t i = 0; i < cap; i++) idx[i] = -1;
    for (size_t e = 0; e < c->n_ents; e++) {
        size_t i = hash(c->ents[e].key, c->ents[e].key_len, 0) & (cap - 1);
        while (idx[i] != -1) i = (i + 1) & (cap - 1);
        idx[i] = (int32_t)e;
    }
    free(c->index);
    c->index = idx;
    c->index_cap = cap;
    return 0;
}

lz_doc_cache *lz_doc_cache_new(size_t budget, void (*free_value)(void *, void *), void *ctx)
{
    lz_doc_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->sketch = calloc((size_t)SKETCH_ROWS * SKETCH_WIDTH, sizeof(float));
    if (!c->sketch || rebuild_index(c, 64)) { lz_doc_cache_free(c); return NULL; }
    c->budget = budget;
    c->free_value = free_value;
    c->ctx = ctx;
    c->aging_period = 8 * SKETCH_WIDTH; /* accesses between halvings */
    c->epoch = 1;
    c->st.bytes_budget = (int64_t)budget;
    return c;
}

void lz_doc_cache_free(lz_doc_cache *c)
{
    if (!c) return;
    for (size_t e = 0; e < c->n_ents; e++)
        if (c->free_value) c->free_value(c->ents[e].value, c->ctx);
    free(c->ents);
    free(c->index);
    free(c->sketch);
    free(c);
}

void lz_doc_cache_begin(lz_doc_cache *c) { c->epoch++; }

void lz_doc_cache_prior(lz_doc_cache *c, const void *key, size_t key_len, double freq)
{
    freq_add(c, key, clamp_len(key_len), (float)freq);
}

void *lz_doc_cache_get(lz_doc_cache *c, const void *key, size_t key_len)
{
    size_t n = clamp_len(key_len);
    freq_add(c, key, n, 1.0f);
    if (++c->accesses % c->aging_period == 0) age(c);
    int64_t i = lookup(c, key, n);
    if (i < 0) { c->st.misses++; return NULL; }
    entry *e = &c->ents[c->index[i]];
    e->last = ++c->clock;
    e->epoch = c->epoch;
    c->st.hits++;
    return e->value;
}

int lz_doc_cache_contains(const lz_doc_cache *c, const void *key, size_t key_len)
{
    return lookup(c, key, clamp_len(key_len)) >= 0;
}

/* Removes entry e (index slot i) by moving the last entry into its place. */
static void remove_entry(lz_doc_cache *c, int64_t slot, int evicted)
{
    int32_t e = c->index[slot];
    entry *x = &c->ents[e];
    if (c->free_value && evicted) c->free_value(x->value, c->ctx);
    c->st.bytes_used -= (int64_t)x->bytes;
    c->st.n_entries--;
    if (evicted) c->st.evicted++;
    c->index[slot] = -2;
    size_t last = c->n_ents - 1;
    if ((size_t)e != last) {
        int64_t ls = lookup(c, c->ents[last].key, c->ents[last].key_len);
        c->ents[e] = c->ents[last];
        c->index[ls] = e;
    }
    c->n_ents--;
}

static int add_entry(lz_doc_cache *c, const void *key, size_t n, void *value, size_t bytes)
{
    if (c->n_ents == c->cap_ents) {
        size_t cap = c->cap_ents ? c->cap_ents * 2 : 16;
        entry *a = realloc(c->ents, cap * sizeof *a);
        if (!a) return -1;
        c->ents = a;
        c->cap_ents = cap;
    }
    if ((c->n_ents + 1) * 2 > c->index_cap && rebuild_index(c, c->index_cap * 2)) return -1;
    entry *e = &c->ents[c->n_ents];
    memset(e, 0, sizeof *e);
    memcpy(e->key, key, n);
    e->key_len = (uint8_t)n;
    e->value = value;
    e->bytes = bytes;
    e->last = ++c->clock;
    e->epoch = c->epoch;
    size_t i = hash(key, n, 0) & (c->index_cap - 1);
    while (c->index[i] >= 0) i = (i + 1) & (c->index_cap - 1);
    c->index[i] = (int32_t)c->n_ents++;
    c->st.bytes_used += (int64_t)bytes;
    c->st.n_entries++;
    return 0;
}

int lz_doc_cache_put(lz_doc_cache *c, const void *key, size_t key_len, void *value, size_t bytes)
{
    size_t n = clamp_len(key_len);
    c->st.bytes_loaded += (int64_t)bytes;
    if (bytes > c->budget || lookup(c, key, n) >= 0) { c->st.rejected++; return 0; }
    size_t free_bytes = c->budget - (size_t)c->st.bytes_used;
    if (bytes > free_bytes) {
        /* victims: unpinned entries by (frequency, recency) ascending, each less frequent than the newcomer */
        float fnew = freq_of(c, key, n);
        size_t need = bytes - free_bytes, freed = 0, nv = 0;
        size_t *v = malloc((c->n_ents ? c->n_ents : 1) * sizeof *v);
        float *vf = malloc((c->n_ents ? c->n_ents : 1) * sizeof *vf);
        if (!v || !vf) { free(v); free(vf); c->st.rejected++; return 0; }
        for (size_t e = 0; e < c->n_ents; e++)
            if (c->ents[e].epoch != c->epoch) { vf[nv] = freq_of(c, c->ents[e].key, c->ents[e].key_len); v[nv++] = e; }
        /* selection: repeatedly take the least valuable (n small; avoids sorting all) */
        size_t taken = 0;
        int ok = 1;
        while (freed < need) {
            size_t best = nv;
            for (size_t j = taken; j < nv; j++) {
                if (best == nv || vf[j] < vf[best] ||
                    (vf[j] == vf[best] && c->ents[v[j]].last < c->ents[v[best]].last))
                    best = j;
            }
            if (best == nv || vf[best] >= fnew) { ok = 0; break; }
            size_t te = v[taken]; float tf = vf[taken];
            v[taken] = v[best]; vf[taken] = vf[best];
            v[best] = te; vf[best] = tf;
            freed += c->ents[v[taken]].bytes;
            taken++;
        }
        if (ok) {
            /* evict by key (indices shift as entries move) */
            uint8_t (*keys)[LZ_DOC_CACHE_KEY_MAX] = malloc((taken ? taken : 1) * LZ_DOC_CACHE_KEY_MAX);
            uint8_t *lens = malloc(taken ? taken : 1);
            if (!keys || !lens) ok = 0;
            for (size_t j = 0; ok && j < taken; j++) {
                memcpy(keys[j], c->ents[v[j]].key, LZ_DOC_CACHE_KEY_MAX);
                lens[j] = c->ents[v[j]].key_len;
            }
            for (size_t j = 0; ok && j < taken; j++) remove_entry(c, lookup(c, keys[j], lens[j]), 1);
            free(keys);
            free(lens);
        }
        free(v);
        free(vf);
        if (!ok) { c->st.rejected++; return 0; }
    }
    if (add_entry(c, key, n, value, bytes)) { c->st.rejected++; return 0; }
    c->st.admitted++;
    return 1;
}

int lz_doc_cache_preload(lz_doc_cache *c, const void *key, size_t key_len, void *value, size_t bytes)
{
    size_t n = clamp_len(key_len);
    if (bytes > c->budget - (size_t)c->st.bytes_used || lookup(c, key, n) >= 0) return 0;
    return add_entry(c, key, n, value, bytes) == 0;
}

void lz_doc_cache_get_stats(const lz_doc_cache *c, lz_doc_cache_stats *st) { *st = c->st; }
