/* store_map.h - which document of the store holds each passage of the
 * dataset, checked by content rather than trusted by name: a passage is the
 * row whose content hash is that of its title and text (or, split into
 * passages at ingest, whose rows carry the hash of its whole text and the
 * split budget), looked for under its title and the 'title (k)' variants. A
 * store built from another file, where 'Bob' is another Bob, then gives a
 * failed question naming the mismatch, never an answer over the wrong
 * passage. What it leaves out: building the store (eval/build_store.h). */
#ifndef LZ_EVAL_STORE_MAP_H
#define LZ_EVAL_STORE_MAP_H

#include <stddef.h>

#include "eval/passages.h"
#include "store/store.h"

enum {
    LZ_EVAL_PASSAGE_OK = 0,      /* id[p] is the document (or the source id of its passages) */
    LZ_EVAL_PASSAGE_MISSING = 1, /* no document under its title */
    LZ_EVAL_PASSAGE_OTHER = 2    /* documents under its title, none with its text (or another split budget) */
};

typedef struct {
    int n;                /* passages */
    char **id;            /* (n) the store id of each passage (malloc'd), NULL unless OK */
    unsigned char *state; /* (n) LZ_EVAL_PASSAGE_* */
    int n_missing, n_other;
    int n_unchecked;      /* split passages taken without their check (budget_known 0, another budget) */
} lz_eval_store_map;

/* Maps every passage of t to its document in st, split passages checked
 * against max_doc_tokens (lazyingest's --max-doc-tokens the store was built
 * with). budget_known 0 (a store built elsewhere, its budget not given):
 * split passages whose hash does not match are taken unchecked (counted)
 * when no document under the title matches. 0, or -1 with err when the
 * store cannot be read. */
int lz_eval_store_map_build(lz_store *st, const lz_eval_passages *t, int max_doc_tokens, int budget_known,
                            lz_eval_store_map *m, char *err, size_t errlen);
void lz_eval_store_map_free(lz_eval_store_map *m);

/* Why passage p cannot be placed, for a failed question's row. */
void lz_eval_store_map_why(const lz_eval_store_map *m, const lz_eval_passages *t, int p, int max_doc_tokens, char *buf,
                           size_t n);

#endif /* LZ_EVAL_STORE_MAP_H */
