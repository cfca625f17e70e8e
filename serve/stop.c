/* stop.c - stop strings and UTF-8 boundaries of a streamed answer (stop.h). */
#include "serve/stop.h"

#include <string.h>

size_t lz_serve_utf8_tail(const char *text, size_t len)
{
    /* walk back over at most 3 continuation bytes to a lead byte; keep it back when the
     * sequence it starts is longer than what is there */
    for (size_t k = 1; k <= 4 && k <= len; k++) {
        const unsigned char c = (unsigned char)text[len - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation */
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k && c >= 0xC0 && c < 0xF8 ? k : 0;
    }
    return 0;
}

size_t lz_serve_stop_scan(const char *text, size_t len, size_t emitted, const char *const *stop, int n_stop, int *hit)
{
    *hit = 0;
    size_t best = len + 1; /* the earliest stop string's start */
    for (int i = 0; i < n_stop; i++) {
        const size_t sl = strlen(stop[i]);
        if (!sl || sl > len) continue;
        /* it may begin inside what was streamed only if it ends after it (held back so far) */
        size_t from = emitted >= sl ? emitted - sl + 1 : 0;
        for (size_t p = from; p + sl <= len && p < best; p++)
            if (!memcmp(text + p, stop[i], sl)) { best = p; break; }
    }
    if (best <= len) {
        *hit = 1;
        return best > emitted ? best : emitted;
    }
    size_t keep = lz_serve_utf8_tail(text, len);
    for (int i = 0; i < n_stop; i++) { /* the longest tail that a stop string starts with */
        const size_t sl = strlen(stop[i]);
        for (size_t k = sl > len + 1 ? len : sl - 1; k > keep; k--)
            if (!memcmp(text + len - k, stop[i], k)) { keep = k; break; }
    }
    const size_t end = len - keep;
    return end > emitted ? end : emitted;
}
