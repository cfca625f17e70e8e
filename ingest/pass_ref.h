/* pass_ref.h - the reference of a multi-document backend (encode.h's
 * lz_encode_backend with start / finish / fetch, which lazyingest --gpu's
 * device implements): each document of a pass runs after the prefix on the
 * CPU engine's document table (engine/cpu_encode.h), the table the encoder
 * itself runs it on, so a document fetched from it packs to the same bytes
 * as one encoded on the CPU. It runs the pipeline of passes without a GPU: the tests, and
 * lazyingest with LAZY_INGEST_REF_PASSES=N (N tokens a pass).
 */
#ifndef LZ_PASS_REF_H
#define LZ_PASS_REF_H

#include "ingest/encode.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_pass_ref lz_pass_ref;

/* Over model m and the prefix KV pc (both kept by the caller, alive as long
 * as the result); NULL when out of memory. */
lz_pass_ref *lz_pass_ref_new(const lz_llama *m, const lz_kv_cache *pc);
void lz_pass_ref_free(lz_pass_ref *r); /* NULL is a no-op */
/* The backend: r's start / finish / fetch (and encode: a pass of one, one
 * call at a time, destroying the pass fetched before), documents of at most
 * max_tokens, passes of at most pass_tokens. */
lz_encode_backend lz_pass_ref_backend(lz_pass_ref *r, int max_tokens, int pass_tokens);
/* Makes the start of pass number k (counted from 0, encode's included) fail,
 * as a device error would (tests of the pipeline's failure path); -1: none. */
void lz_pass_ref_fail_at(lz_pass_ref *r, long k);

#ifdef __cplusplus
}
#endif
#endif /* LZ_PASS_REF_H */
