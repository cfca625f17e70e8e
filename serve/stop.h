/* stop.h - how much of an answer being generated may be streamed: text is
 * held back while it could still become the start of a stop string, or
 * while it ends inside a UTF-8 sequence (the next token completes it); a
 * stop string found ends the answer where it starts (OpenAI's `stop`: the
 * string itself is not returned). Pure functions of the text so far. */
#ifndef LZ_SERVE_STOP_H
#define LZ_SERVE_STOP_H

#include <stddef.h>

#define LZ_SERVE_MAX_STOP 4        /* stop strings a request may give (OpenAI's limit) */
#define LZ_SERVE_MAX_STOP_LEN 256  /* bytes each */

/* text[0..len) is the answer so far, of which [0, emitted) was already streamed.
 * Returns the end of what may be streamed now (>= emitted): at the first stop string
 * that ends in the text after emitted (then *hit = 1: the answer ends there), else before
 * the longest tail that is a proper prefix of a stop string or an unfinished UTF-8
 * sequence (*hit = 0). stop[0..n_stop) non-empty strings; NULL / 0: none. */
size_t lz_serve_stop_scan(const char *text, size_t len, size_t emitted, const char *const *stop, int n_stop, int *hit);

/* Bytes at the end of text[0..len) that start a UTF-8 sequence not yet complete
 * (0..3): held back until the next piece completes them. */
size_t lz_serve_utf8_tail(const char *text, size_t len);

#endif /* LZ_SERVE_STOP_H */
