/* store_inner.h - the store's inner handles, for tests that inspect or damage
 * a store below its API (rows read in bulk, payloads deleted, rows pointed
 * at another payload). Product code never does this: store.h hands out no
 * inner handle. */
#ifndef LZ_TEST_STORE_INNER_H
#define LZ_TEST_STORE_INNER_H

#include "store/store.h"
#include "store/store_impl.h"

static inline lz_meta *test_store_meta(lz_store *s) { return s->meta; }
static inline lz_kvdb *test_store_kvdb(lz_store *s) { return s->kv; }

#endif /* LZ_TEST_STORE_INNER_H */
