/* fuzz_tokenizer_json.c - libFuzzer target: a Hugging Face tokenizer.json
 * with and without its tokenizer_config.json (tokenizer/tokenizer_hf.c,
 * tokenizer_bpe.c). The input splits at FUZZ_PART_SEP into tokenizer.json,
 * tokenizer_config.json (used when present and not empty) and a text; a
 * tokenizer that loads encodes the text (and a fixed one with every kind of
 * character), decodes it and streams its pieces. Invariants beside the
 * sanitizers: a refusal names the file; every id is in the vocabulary;
 * byte-level BPE gives the text back bytewise (its promise, invalid UTF-8
 * included; unless the ids hold BOS, which decode drops by contract); the
 * streamed pieces add up to the decoded text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "fuzz/fuzz_common.h"

static const char fixed_text[] = "Hello, world! It's 2026: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82\n\t  x\xff\xfe end";

/* Encodes text[len], checks ids, decode and pieces. */
static void round_trip(const lz_tokenizer *t, const char *text, size_t len)
{
    int *ids = NULL, n = 0;
    if (lz_tokenizer_encode(t, text, len, 0, &ids, &n) != 0) return; /* out of memory */
    const int V = lz_tokenizer_vocab_size(t);
    for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < V, "id %d of %d outside the vocabulary (%d)", ids[i], i, V);
    char *out = NULL;
    size_t olen = 0;
    int rc = lz_tokenizer_decode(t, ids, n, &out, &olen);
    FUZZ_CHECK(rc == 0, "decode of its own ids: %d", rc);
    /* decode drops BOS (tokenizer.h): a tokenizer.json whose BOS is a non-special added token
     * encodes its text to BOS, which then decodes to nothing (the fuzzer's first find; by contract) */
    int has_bos = 0;
    for (int i = 0; i < n; i++) has_bos |= ids[i] == lz_tokenizer_bos(t);
    if (lz_tokenizer_type(t) == LZ_TOKENIZER_BPE && !has_bos)
        FUZZ_CHECK(olen == len && memcmp(out, text, len) == 0, "byte-level round trip: %zu bytes back of %zu", olen, len);
    size_t k = 0;
    char buf[64];
    for (int i = 0; i < n; i++) {
        int m = lz_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], buf, sizeof buf);
        FUZZ_CHECK(m >= 0, "piece of id %d", ids[i]);
        if (m <= (int)sizeof buf && k + (size_t)m <= olen) FUZZ_CHECK(memcmp(out + k, buf, (size_t)m) == 0, "piece %d differs", i);
        k += (size_t)m;
    }
    FUZZ_CHECK(k == olen, "pieces add up to %zu bytes, decode gave %zu", k, olen);
    free(out);
    free(ids);
    if (lz_tokenizer_encode(t, text, len, LZ_TOK_SPECIAL | LZ_TOK_BOS, &ids, &n) == 0) {
        for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < V, "special: id %d outside the vocabulary", ids[i]);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[3];
    size_t len[3];
    int n = fuzz_split(data, size, part, len, 3);
    const char *tj = fuzz_write("tokenizer.json", part[0], len[0]);
    const char *cj = n > 1 && len[1] ? fuzz_write("tokenizer_config.json", part[1], len[1]) : NULL;
    lz_tokenizer *t = NULL;
    char err[1024] = "";
    if (lz_tokenizer_from_hf(tj, cj, &t, err, sizeof err) != 0) {
        FUZZ_CHECK(t == NULL && (strstr(err, "tokenizer.json") || strstr(err, "tokenizer_config.json")),
                   "a refusal names the file: '%s'", err);
        return 0;
    }
    round_trip(t, fixed_text, sizeof fixed_text - 1);
    if (n > 2) round_trip(t, (const char *)part[2], len[2] < 4096 ? len[2] : 4096);
    int bos = lz_tokenizer_bos(t), eos = lz_tokenizer_eos(t), V = lz_tokenizer_vocab_size(t);
    FUZZ_CHECK(bos >= -1 && bos < V && eos >= -1 && eos < V, "bos %d eos %d of %d", bos, eos, V);
    lz_tokenizer_free(t);
    return 0;
}
