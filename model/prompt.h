/* prompt.h - the ONE definition of the RAG prompt that ingest, query and the
 * trainer share, as token ids:
 *
 *   [prefix: BOS + instruction header][doc 1]...[doc k][question + answer cue]
 *
 * Documents are tokenized standalone (no BOS) so their ids, and therefore
 * their stored KV, do not depend on what precedes them; the prefix ends
 * where the first document starts. Two styles, picked by the vocabulary:
 *
 *   LZ_PROMPT_LLAMA3 (the tokenizer has <|start_header_id|>):
 *     <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n SYSTEM
 *     <|eot_id|><|start_header_id|>user<|end_header_id|>\n\n
 *     Document: title\ntext\n\n ...                       (one per document)
 *     Question: ...<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
 *   LZ_PROMPT_PLAIN:
 *     BOS SYSTEM\n\n  Document: title\ntext\n\n ...  Question: ...\nAnswer:
 *
 * Special tokens are inserted by id, never parsed out of user text, so a
 * document or question containing "<|eot_id|>" stays plain text.
 */
#ifndef LZ_PROMPT_H
#define LZ_PROMPT_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* The embedded default model, relative to the repository that holds the
 * executable (<repo>/build/bin/<tool>); the environment variable
 * LAZY_MODEL overrides it. */
#define LZ_DEFAULT_MODEL "models/default.gguf"
#define LZ_DEFAULT_MODEL_ENV "LAZY_MODEL"

#define LZ_PROMPT_SYSTEM                                                                  \
    "You are a helpful assistant. Answer the question using only the documents below. " \
    "Answer briefly."
#define LZ_PROMPT_DOC_HEAD "Document: " /* followed by the title (if any) and a newline */
#define LZ_PROMPT_DOC_SEP "\n\n"        /* ends every document */
#define LZ_PROMPT_QUESTION "Question: "
#define LZ_PROMPT_ANSWER "\nAnswer:"    /* plain style answer cue */
/* A generated answer may give a short reasoning first ("A 1871; B 1862 => B"):
 * the final answer is what follows the last marker (lz_prompt_final_answer). */
#define LZ_PROMPT_FINAL " => "

typedef enum { LZ_PROMPT_PLAIN = 0, LZ_PROMPT_LLAMA3 = 1 } lz_prompt_style;

/* LLAMA3 when t has <|start_header_id|>, <|end_header_id|> and <|eot_id|>. */
lz_prompt_style lz_prompt_style_of(const lz_tokenizer *t);

/* All functions below return 0, or LZ_ENOMEM; *ids is malloc'd. */

/* BOS + instruction header (system turn and the user header in LLAMA3). */
int lz_prompt_prefix_tokens(const lz_tokenizer *t, int **ids, int *n);
/* The text a document is encoded as: "Document: <title>\n<text>\n\n" (no
 * title: "Document:\n<text>\n\n"). *out malloc'd, NULL on OOM. */
char *lz_prompt_doc_text(const char *title, const char *text, size_t text_len);
/* Token ids of a document (lz_prompt_doc_text, no BOS). */
int lz_prompt_doc_tokens(const lz_tokenizer *t, const char *title, const char *text, size_t text_len,
                         int **ids, int *n);
/* The question and the answer cue, which follow the last document. */
int lz_prompt_question_tokens(const lz_tokenizer *t, const char *question, int **ids, int *n);

/* The final answer of a generated text: what follows the LAST LZ_PROMPT_FINAL
 * marker ("A 1871; B 1862 => B" gives "B"), else the whole text, without
 * leading or trailing white space. Points into text; *len is its length;
 * *reasoning_len (if not NULL) the bytes before that marker (0: no marker). */
const char *lz_prompt_final_answer(const char *text, size_t *len, size_t *reasoning_len);

/* Resolves the default model path: $LAZY_MODEL, else <repo>/models/default.gguf
 * found from /proc/self/exe. Returns 0 with the path in buf, or -1 with an
 * error telling the user to pass --model. */
int lz_prompt_default_model(char *buf, size_t n, char *err, size_t errlen);

#endif /* LZ_PROMPT_H */
