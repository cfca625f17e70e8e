/* retrieve.h - documents for a question: BM25 over title + text through the
 * store's FTS5 index (any user string is made safe first), or explicit
 * external ids (--docs, --doc), where the id of a record split into passages
 * stands for its passages. Fills lz_query_doc records the session places. */
#ifndef LZ_RETRIEVE_H
#define LZ_RETRIEVE_H

#include "query/session.h"
#include "store/store.h"

/* Best k documents for question, best first. *docs malloc'd, *n <= k (fewer
 * when the store has fewer matches; 0 is not an error). */
int lz_retrieve_search(lz_store *s, const char *question, int k, lz_query_doc **docs, int *n, char *err,
                       size_t errlen);
/* Documents by external id, in the given order. An unknown id is an error
 * naming it. */
int lz_retrieve_ids(lz_store *s, const char *const *ids, int n_ids, lz_query_doc **docs, char *err, size_t errlen);
/* The same, where an id that is no stored document but the source id of a
 * record split into passages (stored as "ID#0", "ID#1", ... with source_id
 * ID) stands for those passages in passage order. *docs malloc'd (also when
 * *n_docs is 0), *n_docs >= n_ids. Returns 0, or a status (base/status.h)
 * with a message naming the id: LZ_ENOTFOUND when an id is neither,
 * LZ_EINVAL when one is longer than an lz_query_doc's ext_id holds,
 * LZ_ENOMEM, or the store's status when reading it failed (LZ_EIO, ...). */
int lz_retrieve_resolve_ids(lz_store *s, const char *const *ids, int n_ids, lz_query_doc **docs, int *n_docs,
                            char *err, size_t errlen);

#endif /* LZ_RETRIEVE_H */
