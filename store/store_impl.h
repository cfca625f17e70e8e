/* store_impl.h - the store's private state, shared by the files of store/
 * (store.c: open, binding, keys, payloads, gc, check; store_rows.c: the
 * rows and their transactions). Nothing outside store/ includes it. */
#ifndef LZ_STORE_IMPL_H
#define LZ_STORE_IMPL_H

#include <stdint.h>

#include "store/kvdb.h"
#include "store/meta.h"

struct lz_store {
    char dir[4096];
    lz_meta *meta;
    lz_kvdb *kv;
    int lock_fd;
    int rdonly;
    int bound;
    uint8_t fingerprint[32];
    int64_t model_id;
    int *prefix;
    int n_prefix;
    int n_layers, n_kv_heads, head_dim;
    int kv_dtype;
};

/* Status of a meta.c / kvdb.c call as an LZ_STORE_* status. */
int lz_store_from_meta(int st);
int lz_store_from_kvdb(int st);

#endif /* LZ_STORE_IMPL_H */
