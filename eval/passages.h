/* passages.h - the passages of a dataset's contexts under the document ids
 * lazyingest gives them (ingest/corpus_json.c, HotpotQA context records): a
 * [title, [sentences]] pair is one passage, its text the sentences joined by
 * a space (none added where one side already has whitespace); the same title
 * and text seen again is the same passage; the first text seen under a title
 * has the id title, each other text "title (2)", "title (3)", ... in the
 * order first seen. What it leaves out: reading files (eval/dataset.h) and
 * the store (eval/build_store.h). */
#ifndef LZ_EVAL_PASSAGES_H
#define LZ_EVAL_PASSAGES_H

#include <stddef.h>

typedef struct {
    char *title; /* as the dataset gives it */
    char *text;  /* the sentences joined (never empty) */
    char *id;    /* the document id in the store: title, or "title (k)" */
    int owner;   /* the first question whose context holds it (its index), -1 when none */
} lz_eval_passage;

typedef struct lz_eval_passages lz_eval_passages;

/* An empty table; NULL when out of memory. */
lz_eval_passages *lz_eval_passages_new(void);
void lz_eval_passages_free(lz_eval_passages *t); /* NULL is a no-op */

/* The index of passage (title, text), added when new (owner recorded);
 * *renamed = 1 when it is new and its id is "title (k)" (another text came
 * first under that title). -1 when out of memory. */
int lz_eval_passages_add(lz_eval_passages *t, const char *title, const char *text, int owner, int *renamed);
int lz_eval_passages_count(const lz_eval_passages *t);
const lz_eval_passage *lz_eval_passages_get(const lz_eval_passages *t, int i);

/* sentences[0..n) joined as lazyingest joins a context pair's sentences (empty
 * ones skipped; a space between two unless the text so far ends, or the next
 * sentence starts, with whitespace). malloc'd; NULL when out of memory. */
char *lz_eval_join_sentences(const char *const *sentences, int n);

#endif /* LZ_EVAL_PASSAGES_H */
