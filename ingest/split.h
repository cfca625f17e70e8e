/* split.h - splits a document longer than a token budget into passages at
 * sentence or line boundaries (falling back to word, then UTF-8 character
 * boundaries for a single sentence or word over the budget). Tokenization is
 * the caller's: a callback counts the tokens of a candidate passage exactly
 * as it will be encoded (title and formatting included). Passages are
 * trimmed of surrounding whitespace and never empty.
 */
#ifndef LZ_SPLIT_H
#define LZ_SPLIT_H

#include <stddef.h>
#include "base/status.h"

typedef struct {
    size_t off, len; /* bytes of the passage within the text */
} lz_split_span;

/* Tokens of s[0..n) as a passage would be encoded, or -1 on error. */
typedef int (*lz_split_count_fn)(void *ctx, const char *s, size_t n);

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

/* Splits text[0..len) into passages of at most max_tokens tokens each.
 * A text within the budget gives one span covering it (trimmed). *spans is
 * malloc'd. EINVAL when max_tokens leaves no room for text beyond the
 * formatting (count of an empty passage); ECOUNT when count fails. */
int lz_split_passages(const char *text, size_t len, int max_tokens, lz_split_count_fn count,
                      void *ctx, lz_split_span **spans, int *n_spans);

#endif /* LZ_SPLIT_H */
