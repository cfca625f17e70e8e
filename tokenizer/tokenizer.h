/* tokenizer.h - text <-> token ids for Llama-family models.
 *
 * Two algorithms behind one handle:
 *   SentencePiece BPE (GGUF tokenizer.ggml.model = "llama"): score-ordered
 *     merges, byte fallback <0xNN>, the leading-space rule (a space is
 *     prepended and spaces become U+2581).
 *   Byte-level BPE (GGUF "gpt2" with pre = "llama-bpe", or a Hugging Face
 *     tokenizer.json): Llama-3 pre-tokenizer regex (PCRE2, UTF+UCP), GPT-2
 *     byte-to-unicode table, merges by rank, added/special tokens.
 * Special tokens in the input text are recognised only with LZ_TOK_SPECIAL.
 */
#ifndef LZ_TOKENIZER_H
#define LZ_TOKENIZER_H

#include <stddef.h>

#include "formats/gguf.h"
#include "base/status.h"

typedef struct lz_tokenizer lz_tokenizer;

enum { LZ_TOK_BOS = 1, LZ_TOK_SPECIAL = 2 }; /* encode flags */

typedef enum { LZ_TOKENIZER_SPM = 0, LZ_TOKENIZER_BPE = 1 } lz_tokenizer_kind;


/* Builds a tokenizer from GGUF metadata (tokenizer.ggml.*). Returns 0 or a
 * non-zero status with a message in err. */
int lz_tokenizer_from_gguf(const lz_gguf *g, lz_tokenizer **out, char *err, size_t errlen);
/* Builds a byte-level BPE tokenizer from a Hugging Face tokenizer.json (and
 * optional tokenizer_config.json, may be NULL, for bos/eos). */
int lz_tokenizer_from_hf(const char *tokenizer_json, const char *config_json,
                         lz_tokenizer **out, char *err, size_t errlen);
void lz_tokenizer_free(lz_tokenizer *t); /* NULL is a no-op */

/* Encodes len bytes of text. *ids is malloc'd (caller frees), *n its count.
 * Invalid UTF-8 never fails: SPM maps the bytes through byte fallback, BPE is
 * byte-level. Returns 0, or non-zero on allocation failure. */
int lz_tokenizer_encode(const lz_tokenizer *t, const char *text, size_t len, int flags,
                        int **ids, int *n);
/* Decodes ids to text (malloc'd, NUL-terminated, *len bytes). Drops BOS; SPM
 * removes the one leading space that encoding added. Control tokens give
 * nothing. Returns 0, LZ_EINVAL for an id out of range, or LZ_ENOMEM. */
int lz_tokenizer_decode(const lz_tokenizer *t, const int *ids, int n, char **out, size_t *len);
/* Bytes of token id as it appears in text when it follows token prev (for
 * streaming; prev = -1 at the start). Writes at most cap bytes into buf and
 * returns the piece length (possibly > cap, then truncated), or -1 if id is
 * out of range. Special/control tokens give an empty piece. */
int lz_tokenizer_piece(const lz_tokenizer *t, int prev, int id, char *buf, size_t cap);

lz_tokenizer_kind lz_tokenizer_type(const lz_tokenizer *t);
int lz_tokenizer_vocab_size(const lz_tokenizer *t);
int lz_tokenizer_bos(const lz_tokenizer *t); /* -1 if none */
int lz_tokenizer_eos(const lz_tokenizer *t); /* -1 if none */
/* True for tokens that end generation (eos, eot, eom). */
int lz_tokenizer_is_eog(const lz_tokenizer *t, int id);
/* Id of a token by its exact text (e.g. "<|eot_id|>"), or -1. */
int lz_tokenizer_find(const lz_tokenizer *t, const char *text);
/* Whether the model's metadata asks for BOS at the start of a prompt
 * (tokenizer.ggml.add_bos_token, or the tokenizer.json post-processor). */
int lz_tokenizer_add_bos(const lz_tokenizer *t);
/* The vocabulary form of id (U+2581 "the", U+0120 "the", "<0x0A>"): *len bytes,
 * NUL-terminated, owned by t. NULL if id is out of range. */
const char *lz_tokenizer_token_text(const lz_tokenizer *t, int id, size_t *len);

#endif /* LZ_TOKENIZER_H */
