/* homes.h - the router's document homes (serve/router.h): a map from a
 * document's external id to the engine it was first placed on, assigned once
 * and kept (a hash table of copied ids, open addressing, grown at 70% full).
 * Not thread-safe: the router uses it under its lock. What it leaves out: the
 * routing rule (router.c). */
#ifndef LZ_SERVE_HOMES_H
#define LZ_SERVE_HOMES_H

typedef struct lz_serve_homes lz_serve_homes;

lz_serve_homes *lz_serve_homes_new(void); /* NULL when out of memory */
void lz_serve_homes_free(lz_serve_homes *h); /* NULL is a no-op */
/* The home engine of id, or -1 when it has none. */
int lz_serve_homes_get(const lz_serve_homes *h, const char *id);
/* Gives id (copied) the home engine (>= 0) unless it has one. 1 set, 0 it had one, -1 out of memory. */
int lz_serve_homes_set(lz_serve_homes *h, const char *id, int engine);
/* Documents with a home. */
long lz_serve_homes_count(const lz_serve_homes *h);

#endif /* LZ_SERVE_HOMES_H */
