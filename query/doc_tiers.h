/* doc_tiers.h - private to query/: a question's documents on their way through
 * the tiers below the backend: the host tier's entry of a document (from the
 * host tier, or read and decoded from the store; block mode without a backend
 * that rotates: its copy rotated to its placement), all of a question's misses
 * read in one snapshot and decoded together, and cold documents recomputed on
 * the backend instead when that is asked for or costs less. The modes
 * (answer_run.c) decide which segments they want; this is how an entry is had.
 */
#ifndef LZ_QUERY_DOC_TIERS_H
#define LZ_QUERY_DOC_TIERS_H

#include "query/session_priv.h"

/* The host tier's key of document d placed at offset p: its payload key, plus the offset in
 * BLOCK mode (one rotated copy per position). Returns its length. */
size_t tiers_cache_key(int mode, const lz_query_doc *d, int64_t p, uint8_t key[LZ_META_KEY_LEN + 8]);

/* Document d's token ids as stored (checked against its row). 0 or -1. */
int tiers_doc_tokens(lz_query_session *q, const lz_query_doc *d, int **ids, int *n, char *err, size_t errlen);

/* The entry of d under host-tier key ckey: the host tier's (a hit), else pre (decoded ahead by
 * tiers_load_misses) or read from the store now, rotated by rotate (BLOCK on the CPU) and
 * offered to the host tier; *owned = 1 when the tier did not take it (the caller frees it after
 * the answer). Counts r's hits, misses and bytes. NULL with err naming the document and
 * *status LZ_QUERY_ENOMEM when its entry's memory could not be had, else -1. */
kv_entry *tiers_fetch(lz_query_session *q, const void *ckey, size_t ckey_len, const lz_query_doc *d, int64_t rotate,
                      kv_entry *pre, int *owned, int *status, lz_query_result *r, char *err, size_t errlen);

/* Lazy mode, opts.cold LZ_COLD_RECOMPUTE / AUTO: the documents at offsets p.. that neither the
 * backend nor the host tier holds, stored whole (AUTO: and cheaper to recompute than to load),
 * recomputed on be from their token ids in one call; those it then holds marked 2 in held. 0, -1,
 * or LZ_QUERY_ENOMEM (an allocation here, or be->encode's). */
int tiers_recompute_cold(lz_query_session *q, const lz_query_backend *be, const lz_query_doc *docs, int n_docs,
                         int64_t p, uint8_t *held, const lz_kv_segment *prefix, uint8_t (*digest)[32],
                         lz_query_result *r, char *err, size_t errlen);

/* The documents of docs (placed from offset p0, keys of mode) that no tier above the store
 * holds (held[i] 0, not in the host tier, not a repeat), read in one snapshot and decoded
 * together on all threads into pre[i]; one that fails is left NULL (tiers_fetch loads it
 * alone and says why). */
void tiers_load_misses(lz_query_session *q, const lz_query_doc *docs, int n_docs, int mode, int64_t p0,
                       const uint8_t *held, kv_entry **pre);

#endif /* LZ_QUERY_DOC_TIERS_H */
