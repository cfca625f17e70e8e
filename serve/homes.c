/* homes.c - a document's home engine by its id (homes.h): FNV-1a hashes,
 * linear probing, the table doubled at 70% full. */
#include "serve/homes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *id;   /* NULL: an empty slot */
    int engine;
} slot;

struct lz_serve_homes {
    slot *t;    /* (cap), cap a power of two */
    long cap, n;
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

int lz_serve_homes_set(lz_serve_homes *h, const char *id, int engine)
{
    if ((h->n + 1) * 10 > h->cap * 7 && grow(h)) return -1;
    slot *s = find(h->t, h->cap, id);
    if (s->id) return 0;
    if (!(s->id = strdup(id))) return -1;
    s->engine = engine;
    h->n++;
    return 1;
}

long lz_serve_homes_count(const lz_serve_homes *h) { return h->n; }
