/* homes.h - the router's document homes (serve/router.h): a map from a
 * document's home key (lz_serve_home_key: its payload key in hex, the same
 * for every id of one content, else its external id) to the engine it was
 * first placed on, assigned once and kept (a hash table of copied keys, open
 * addressing, grown at 70% full), with each engine's documents and tokens;
 * and the start-up plan that deals the hottest documents to the engines
 * before any request (so that each engine preloads only its own share).
 * Not thread-safe: the router uses it under its lock. What it leaves out: the
 * routing rule (router.c). */
#ifndef LZ_SERVE_HOMES_H
#define LZ_SERVE_HOMES_H

#include <stdint.h>

#include "query/session.h"
#include "store/store.h"

#define LZ_SERVE_HOME_KEY 272 /* "id:" and an external id of up to 255 bytes, or 64 hex digits */
#define LZ_SERVE_HOMES_MAX_ENGINES 64

typedef struct lz_serve_homes lz_serve_homes;

lz_serve_homes *lz_serve_homes_new(void); /* NULL when out of memory */
void lz_serve_homes_free(lz_serve_homes *h); /* NULL is a no-op */
/* The home engine of id, or -1 when it has none. */
int lz_serve_homes_get(const lz_serve_homes *h, const char *id);
/* Gives id (copied) the home engine (0 <= engine < LZ_SERVE_HOMES_MAX_ENGINES) unless it has
 * one, counting its tokens there. 1 set, 0 it had one, -1 out of memory. */
int lz_serve_homes_set(lz_serve_homes *h, const char *id, int engine, int64_t tokens);
/* Documents with a home. */
long lz_serve_homes_count(const lz_serve_homes *h);
/* The documents and tokens homed on engine (set and planned). */
void lz_serve_homes_engine(const lz_serve_homes *h, int engine, int64_t *docs, int64_t *tokens);

/* A document's home key into key: its payload key in hex when it has one (not all zero), else
 * its external id. */
void lz_serve_home_key(const lz_query_doc *d, char key[LZ_SERVE_HOME_KEY]);
/* The home key of payload key pk (what lz_serve_home_key gives a document with that payload). */
void lz_serve_home_key_payload(const uint8_t pk[LZ_META_KEY_LEN], char key[LZ_SERVE_HOME_KEY]);

/* Start-up plan: the store's documents in order of their recorded hits (lz_store_top_accessed:
 * those hit at least once; all: then every other), each given to the engine of n_engines with
 * the fewest homed tokens so far (ties: the lowest index), so that each engine's budget holds a
 * different share of the hot set. Documents already homed keep their home. 0, or -1 with a
 * message. */
int lz_serve_homes_plan(lz_serve_homes *h, lz_store *st, int n_engines, int all, char *err, size_t errlen);

#endif /* LZ_SERVE_HOMES_H */
