/* normalize.c - HotpotQA's / 2WikiMultihopQA's normalize_answer in C (see
 * normalize.h): the text is decoded into code points, lowered, stripped of
 * ASCII punctuation, the article words dropped and the whitespace collapsed,
 * then encoded back. Invalid UTF-8 bytes travel through as raw bytes. */
#include <locale.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "base/unicode.h"
#include "eval/normalize.h"

#define RAW_BYTE 0x80000000u /* a unit that is an invalid byte, kept as it is */

static locale_t utf8_locale;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static void utf8_locale_open(void)
{
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!utf8_locale) utf8_locale = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", (locale_t)0);
}

static uint32_t lower(uint32_t cp)
{
    if (cp < 128) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    if (cp & RAW_BYTE || !utf8_locale) return cp;
    return (uint32_t)towlower_l((wint_t)cp, utf8_locale);
}

/* Python's \w: str.isalnum() or '_' (already removed as punctuation here) */
static int is_word(uint32_t cp)
{
    if (cp < 128) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
    if (cp & RAW_BYTE || !utf8_locale) return 0;
    return iswalnum_l((wint_t)cp, utf8_locale) != 0;
}

static int is_ascii_punct(uint32_t cp)
{
    return cp < 128 && cp > 32 && cp != 127 && !((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
                                                 (cp >= '0' && cp <= '9'));
}

int lz_eval_is_space(uint32_t cp)
{
    if (cp == ' ' || (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x1f)) return 1;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* the run u[0..n) is one of the words a, an, the */
static int is_article(const uint32_t *u, size_t n)
{
    if (n == 1) return u[0] == 'a';
    if (n == 2) return u[0] == 'a' && u[1] == 'n';
    return n == 3 && u[0] == 't' && u[1] == 'h' && u[2] == 'e';
}

char *lz_eval_normalize(const char *s)
{
    pthread_once(&utf8_once, utf8_locale_open);
    const size_t len = strlen(s);
    uint32_t *u = malloc((len + 1) * sizeof *u); /* (units) code points after lower + punctuation */
    char *out = malloc(len * 4 + 1);             /* lowering may lengthen a UTF-8 sequence */
    if (!u || !out) { free(u); free(out); return NULL; }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        const int l = lz_utf8_seq_len((const unsigned char *)s + i, len - i);
        uint32_t cp;
        if (l > 0) { cp = lower(lz_utf8_decode((const unsigned char *)s + i, l)); i += (size_t)l; }
        else cp = RAW_BYTE | (unsigned char)s[i++];
        if (!is_ascii_punct(cp)) u[n++] = cp;
    }
    /* articles: maximal word runs that are a / an / the become a space */
    for (size_t i = 0; i < n;) {
        if (!is_word(u[i])) { i++; continue; }
        size_t j = i;
        while (j < n && is_word(u[j])) j++;
        if (is_article(u + i, j - i))
            for (size_t k = i; k < j; k++) u[k] = ' ';
        i = j;
    }
    /* whitespace: words joined by one space */
    size_t o = 0;
    int pending = 0;
    for (size_t i = 0; i < n; i++) {
        if (lz_eval_is_space(u[i])) { pending = o > 0; continue; }
        if (pending) { out[o++] = ' '; pending = 0; }
        if (u[i] & RAW_BYTE) { out[o++] = (char)(u[i] & 0xff); continue; }
        char enc[4];
        const int el = lz_utf8_encode(u[i], enc);
        memcpy(out + o, enc, (size_t)el);
        o += (size_t)el;
    }
    out[o] = 0;
    free(u);
    return out;
}
