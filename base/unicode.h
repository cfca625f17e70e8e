/* unicode.h - the few UTF-8 helpers the tokenizers need: strict sequence
 * validation (no overlongs, surrogates or code points past U+10FFFF), encode,
 * and GPT-2's byte <-> code point table. No normalisation, no case folding. */
#ifndef LZ_UNICODE_H
#define LZ_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Length (1-4) of the valid UTF-8 sequence at s[0..n), or 0 when the bytes
 * there do not start one (bad lead byte, bad or missing continuation bytes,
 * overlong form, surrogate, > U+10FFFF). n must be > 0. */
int lz_utf8_seq_len(const unsigned char *s, size_t n);
/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t lz_utf8_valid_prefix(const unsigned char *s, size_t n);
/* Writes the UTF-8 form of code point cp (<= U+10FFFF) into out[4] and
 * returns its length (1-4), or 0 for an invalid code point. */
int lz_utf8_encode(uint32_t cp, char out[4]);
/* Decodes the valid sequence of length len at s (as given by lz_utf8_seq_len). */
uint32_t lz_utf8_decode(const unsigned char *s, int len);

/* GPT-2 byte-level table: byte b is shown as code point lz_byte_to_cp(b)
 * (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143).
 * lz_cp_to_byte is the inverse: the byte, or -1 when cp is not in the table. */
uint32_t lz_byte_to_cp(uint8_t b);
int lz_cp_to_byte(uint32_t cp);

#endif /* LZ_UNICODE_H */
