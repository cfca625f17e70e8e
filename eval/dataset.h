/* dataset.h - the questions of the official HotpotQA and 2WikiMultihopQA
 * files, read into one table with their context passages (eval/passages.h).
 *
 *   HotpotQA (distractor, fullwiki): a JSON array of {_id, question, answer,
 *     type, level, supporting_facts [[title, sentence]], context [[title,
 *     [sentences]]]}; a test file may lack answer and supporting_facts.
 *   2WikiMultihopQA (dev, test): the same context, plus evidences [[subject,
 *     relation, object]] and answer_id; type is comparison, inference,
 *     compositional or bridge_comparison. Aliases of the answer come from the
 *     record (answer_aliases, or answer given as a list) or from the dataset's
 *     id_aliases.json (lz_eval_dataset_read_aliases, by answer_id).
 *
 * A context pair lazyingest would skip (blank title or text, a title past
 * 512 bytes) is dropped from its question and counted. What it leaves out:
 * the store, answering, scoring. */
#ifndef LZ_EVAL_DATASET_H
#define LZ_EVAL_DATASET_H

#include <stddef.h>

#include "eval/passages.h"

typedef enum { LZ_EVAL_FORMAT_AUTO = 0, LZ_EVAL_FORMAT_HOTPOTQA = 1, LZ_EVAL_FORMAT_2WIKI = 2 } lz_eval_format;

const char *lz_eval_format_name(lz_eval_format f); /* "auto", "hotpotqa", "2wiki" */
int lz_eval_format_parse(const char *s);           /* -1 when unknown */

typedef struct {
    char *id;           /* _id (its index when absent) */
    char *question;
    char **golds;       /* the answer, then its aliases; n_golds 0: no answer in the file (unscored) */
    int n_golds;
    char *type, *level; /* "" when absent */
    char *answer_id;    /* 2Wiki's answer_id (the alias file's key), NULL when absent */
    int *passages;      /* its context's passages (indices into the table), in context order */
    int n_passages;
    char **gold_titles; /* titles of the gold passages (supporting_facts; 2Wiki without them: the evidences'
                           subjects), distinct, in order */
    int n_gold_titles;
    int n_dropped;      /* context pairs dropped (blank title or text, title too long) */
    int file;           /* which file read it (0, 1, ...) */
} lz_eval_question;

typedef struct {
    lz_eval_format format;       /* of the first file read */
    lz_eval_question *q;
    int n_q, cap_q;
    lz_eval_passages *passages;  /* every context passage, ids as lazyingest gives them */
    int n_renamed;               /* passages stored as "title (k)" */
    int n_dropped;               /* context pairs dropped */
    int n_aliases;               /* gold aliases added */
    char **warnings;             /* the first few warnings ("file: record [i]: ..."), malloc'd */
    int n_warnings, n_warnings_total;
} lz_eval_dataset;

/* An empty dataset. 0, or -1 when out of memory. */
int lz_eval_dataset_init(lz_eval_dataset *d);
void lz_eval_dataset_free(lz_eval_dataset *d);

/* Reads the questions of path (a JSON array) into d, at most limit questions
 * in d in all (0: no limit). fmt AUTO: 2wiki when the first record has
 * "evidences", else hotpotqa. 0, or -1 with err naming the file and the
 * record (not a JSON array, a record without a question or with a malformed
 * context, out of memory). */
int lz_eval_dataset_read(lz_eval_dataset *d, const char *path, lz_eval_format fmt, int limit, char *err,
                         size_t errlen);

/* 2Wiki's id_aliases.json (one JSON object a line: Q_id, aliases, demonyms):
 * each question whose answer_id is a Q_id gets those names as further gold
 * answers. 0, or -1 with err. */
int lz_eval_dataset_read_aliases(lz_eval_dataset *d, const char *path, char *err, size_t errlen);

#endif /* LZ_EVAL_DATASET_H */
