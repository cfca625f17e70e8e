/* normalize.h - the answer normalisation of the official HotpotQA and
 * 2WikiMultihopQA evaluation scripts (normalize_answer, the same function in
 * both), in C: lower case, ASCII punctuation removed, the whole words a / an /
 * the replaced by a space, whitespace collapsed to single spaces. What it
 * leaves out: Python's few one-to-many lower-case mappings (U+0130 'İ' gives
 * 'i' here, "i̇" there); every other code point is lowered as towlower does
 * in the C.UTF-8 locale, ASCII only when that locale is missing. */
#ifndef LZ_EVAL_NORMALIZE_H
#define LZ_EVAL_NORMALIZE_H

#include <stdint.h>

/* normalize_answer(s): a malloc'd NUL-terminated string, NULL when out of
 * memory. Python's steps, in its order:
 *   lower(s)                       Unicode lower case
 *   remove_punc                    drops !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ (string.punctuation)
 *   re.sub(r'\b(a|an|the)\b', ' ') a maximal run of word characters (Unicode letters and
 *                                  digits) that is exactly a, an or the becomes ' '
 *   ' '.join(s.split())            split at Unicode whitespace (str.isspace: also U+00A0,
 *                                  U+2000..U+200A, U+3000, ...), joined by one space
 * Bytes that are not valid UTF-8 are kept as they are (neither letters nor
 * spaces). */
char *lz_eval_normalize(const char *s);

/* 1 when code point cp is whitespace as Python's str.isspace() says. */
int lz_eval_is_space(uint32_t cp);

#endif /* LZ_EVAL_NORMALIZE_H */
