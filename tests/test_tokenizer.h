/* test_tokenizer.h - helpers of the tokenizer tests (SPM and byte-level BPE):
 * id comparison and printing, the encode/decode/stream round trip, and a
 * tokenizer built from a GGUF writer's vocabulary. Include after tests/test.h. */
#ifndef LZ_TEST_TOKENIZER_H
#define LZ_TEST_TOKENIZER_H

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "tokenizer/tokenizer.h"

static int same_ids(const int *a, int na, const int *b, int nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int *ids, int n)
{
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* decode(encode(s)) == s bytewise, and the streamed pieces agree with decode
 * (through an 8-byte buffer: longer pieces are asked for again with room). */
static void check_round_trip(const lz_tokenizer *t, const char *s, size_t len, int flags, const char *name)
{
    int *ids = NULL, n = 0;
    char *out = NULL;
    size_t olen = 0;
    CHECK(lz_tokenizer_encode(t, s, len, flags, &ids, &n) == 0, "%s: encode", name);
    CHECK(lz_tokenizer_decode(t, ids, n, &out, &olen) == 0, "%s: decode", name);
    CHECK(out && olen == len && memcmp(out, s, len) == 0, "%s: round trip gave %zu of %zu bytes '%.80s'", name, olen,
          len, out ? out : "");
    char *acc = malloc(olen + 16), buf[8];
    size_t k = 0;
    int ok = acc != NULL;
    for (int i = 0; i < n && ok; i++) {
        int m = lz_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], buf, sizeof buf);
        if (m < 0) { ok = 0; break; }
        if (m > (int)sizeof buf) { /* long piece: ask again with room */
            char *big = malloc((size_t)m);
            ok = big && lz_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], big, (size_t)m) == m;
            if (ok && k + (size_t)m <= olen) memcpy(acc + k, big, (size_t)m);
            free(big);
        } else if (k + (size_t)m <= olen) {
            memcpy(acc + k, buf, (size_t)m);
        }
        k += (size_t)m;
    }
    CHECK(ok && k == olen && memcmp(acc, out, olen) == 0, "%s: pieces differ from decode", name);
    free(acc);
    free(out);
    free(ids);
}

/* Saves w (and frees it) to path, then builds *t from that file. Returns 0 or
 * the first error's code, with err set; *t stays NULL on error. */
static int tokenizer_from_writer(lz_gguf_writer *w, const char *path, lz_tokenizer **t, char *err, size_t errlen)
{
    *t = NULL;
    err[0] = '\0';
    int rc = lz_gguf_writer_save(w, path, err, errlen);
    lz_gguf_writer_free(w);
    if (rc) return rc;
    lz_gguf *g = NULL;
    if ((rc = lz_gguf_open(path, &g, err, errlen))) return rc;
    rc = lz_tokenizer_from_gguf(g, t, err, errlen);
    lz_gguf_close(g);
    return rc;
}

#endif /* LZ_TEST_TOKENIZER_H */
