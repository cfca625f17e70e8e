/* test_tokenizer_spm.c - SentencePiece tokenizer: the 46 llama.cpp vocab cases
 * (ggml-vocab-llama-spm.gguf .inp/.out) exact and round-tripping, stories260K's
 * prompt, pieces for streaming, special tokens, invalid UTF-8, a tiny
 * hand-made vocabulary (score order, ties, byte fallback) and error paths. */
#include <stdint.h>

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "tokenizer/tokenizer.h"
#include "tests/test.h"
#include "tests/test_tokenizer.h"


/* Splits .inp into cases (pointers into buf, NUL-terminated in place). */
static int split_cases(char *buf, size_t len, char **cases, size_t *lens, int max)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n = 0;
    char *p = buf, *end = buf + len;
    while (p < end && n < max) {
        char *q = strstr(p, sep);
        if (!q) break;
        *q = '\0';
        cases[n] = p;
        lens[n++] = (size_t)(q - p);
        p = q + sizeof sep - 1;
    }
    return n;
}

/* Parses one line of ids from *p; advances past the newline. */
static int parse_ids(char **p, int *ids, int max)
{
    int n = 0;
    char *s = *p;
    while (*s && *s != '\n') {
        if (*s == ' ') { s++; continue; }
        long v = strtol(s, &s, 10);
        if (n < max) ids[n] = (int)v;
        n++;
    }
    if (*s == '\n') s++;
    *p = s;
    return n;
}

static void test_vocab_cases(void)
{
    char path[512], ipath[512], opath[512];
    if (!lz_test_fixture("tokenizers/ggml-vocab-llama-spm.gguf", path, sizeof path)) return;
    if (!lz_test_fixture("tokenizers/ggml-vocab-llama-spm.gguf.inp", ipath, sizeof ipath)) return;
    if (!lz_test_fixture("tokenizers/ggml-vocab-llama-spm.gguf.out", opath, sizeof opath)) return;
    char err[512] = "";
    lz_gguf *g = NULL;
    lz_tokenizer *t = NULL;
    int rc = lz_gguf_open(path, &g, err, sizeof err);
    CHECK(rc == 0, "open %s: %s", path, err);
    if (rc) return;
    rc = lz_tokenizer_from_gguf(g, &t, err, sizeof err);
    lz_gguf_close(g); /* the tokenizer keeps no pointer into the file */
    CHECK(rc == 0, "tokenizer: %s", err);
    if (rc) return;
    CHECK(lz_tokenizer_type(t) == LZ_TOKENIZER_SPM, "type");
    CHECK(lz_tokenizer_vocab_size(t) == 32000, "vocab %d", lz_tokenizer_vocab_size(t));
    CHECK(lz_tokenizer_bos(t) == 1 && lz_tokenizer_eos(t) == 2, "bos %d eos %d", lz_tokenizer_bos(t),
          lz_tokenizer_eos(t));
    CHECK(lz_tokenizer_is_eog(t, 2) && !lz_tokenizer_is_eog(t, 1), "eog");
    CHECK(lz_tokenizer_find(t, "<s>") == 1 && lz_tokenizer_find(t, "<0x0A>") == 13, "find");
    CHECK(lz_tokenizer_find(t, "no such token at all") == -1, "find missing");
    CHECK(lz_tokenizer_add_bos(t) == 1, "add_bos");

    size_t ilen, olen;
    char *inp = lz_test_read_file(ipath, &ilen), *outs = lz_test_read_file(opath, &olen);
    CHECK(inp && outs, "read fixtures");
    char *cases[128];
    size_t lens[128];
    int nc = inp ? split_cases(inp, ilen, cases, lens, 128) : 0;
    CHECK(nc == 46, "%d cases", nc);
    char *op = outs;
    int exact = 0;
    for (int c = 0; c < nc && op && *op; c++) {
        int want[1024], *got = NULL, ng = 0;
        int nw = parse_ids(&op, want, 1024);
        rc = lz_tokenizer_encode(t, cases[c], lens[c], 0, &got, &ng);
        int same = rc == 0 && same_ids(got, ng, want, nw);
        CHECK(same, "case %d '%.60s'", c, cases[c]);
        if (!same) { print_ids("want", want, nw); print_ids("got ", got, ng); }
        exact += same;
        free(got);
        char name[32];
        snprintf(name, sizeof name, "case %d", c);
        check_round_trip(t, cases[c], lens[c], 0, name);
    }
    printf("spm vocab cases: %d/%d exact\n", exact, nc);

    /* BOS flag, and BOS dropped by decode */
    int *ids = NULL, n = 0;
    char *s = NULL;
    size_t sl = 0;
    lz_tokenizer_encode(t, "Hello world", 11, LZ_TOK_BOS, &ids, &n);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186, "BOS Hello world (%d ids)", n);
    lz_tokenizer_decode(t, ids, n, &s, &sl);
    CHECK(s && strcmp(s, "Hello world") == 0, "decode with BOS: '%s'", s ? s : "");
    char pb[16];
    CHECK(lz_tokenizer_piece(t, 1, 15043, pb, sizeof pb) == 5 && memcmp(pb, "Hello", 5) == 0, "piece after BOS");
    CHECK(lz_tokenizer_piece(t, -1, 15043, pb, sizeof pb) == 5, "piece at start");
    CHECK(lz_tokenizer_piece(t, 15043, 3186, pb, sizeof pb) == 6 && memcmp(pb, " world", 6) == 0,
          "piece mid-text");
    CHECK(lz_tokenizer_piece(t, 15043, 3186, pb, 2) == 6 && memcmp(pb, " w", 2) == 0, "truncated piece");
    CHECK(lz_tokenizer_piece(t, -1, 2, pb, sizeof pb) == 0, "control piece is empty");
    CHECK(lz_tokenizer_piece(t, -1, 13, pb, sizeof pb) == 1 && pb[0] == '\n', "byte piece");
    CHECK(lz_tokenizer_piece(t, -1, 32000, pb, sizeof pb) == -1, "out of range piece");
    int bad = 99999;
    char *bs = NULL;
    CHECK(lz_tokenizer_decode(t, &bad, 1, &bs, &sl) == LZ_EINVAL && !bs, "decode bad id");
    free(s);
    free(ids);

    /* special tokens: parsed only with LZ_TOK_SPECIAL */
    const char *sp = "<s>Hi</s>";
    lz_tokenizer_encode(t, sp, strlen(sp), LZ_TOK_SPECIAL, &ids, &n);
    CHECK(n >= 3 && ids[0] == 1 && ids[n - 1] == 2, "special on: %d ids, first %d", n, n ? ids[0] : -1);
    if (n >= 2) CHECK(ids[1] == lz_tokenizer_find(t, "\xe2\x96\x81Hi"), "space prefix after special: %d", ids[1]);
    free(ids);
    lz_tokenizer_encode(t, sp, strlen(sp), 0, &ids, &n);
    int has = 0;
    for (int i = 0; i < n; i++) has |= ids[i] == 1 || ids[i] == 2;
    CHECK(!has && n > 3, "special off: text '<s>' must not become a control token");
    free(ids);
    check_round_trip(t, sp, strlen(sp), 0, "special off");
    /* "<0x0A>" spelled out stays text */
    lz_tokenizer_encode(t, "<0x0A>", 6, 0, &ids, &n);
    CHECK(n > 1, "'<0x0A>' as text gave %d ids", n);
    free(ids);
    check_round_trip(t, "<0x0A>", 6, 0, "byte token text");

    /* invalid UTF-8: bad bytes go through byte fallback and come back */
    static const char *const bad_utf8[] = {"\xff", "a\x80z", "\xe2\x82", "caf\xc3", "\xf0\x9f\x98",
                                           "\xed\xa0\x80 x", "\xc0\xaf", "ok \xf4\x90\x80\x80 end"};
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad utf8 %zu", i);
        check_round_trip(t, bad_utf8[i], strlen(bad_utf8[i]), 0, name);
    }
    uint32_t seed = 12345;
    char rnd[300];
    for (int r = 0; r < 200; r++) {
        size_t len = (size_t)(r * 7 % 300);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1664525u + 1013904223u;
            rnd[i] = (char)(seed >> 24);
            if (rnd[i] == (char)0xe2) rnd[i] = 'e'; /* U+2581 in the input decodes as ' ' */
        }
        char name[32];
        snprintf(name, sizeof name, "random %d", r);
        check_round_trip(t, rnd, len, 0, name);
        check_round_trip(t, rnd, len, LZ_TOK_BOS, name);
    }
    /* a long input (one merge session over 200 KB) */
    size_t big = 200000;
    char *txt = malloc(big);
    for (size_t i = 0; i < big; i++) txt[i] = "The quick brown fox jumps over the lazy dog. "[i % 45];
    check_round_trip(t, txt, big, 0, "200 KB");
    free(txt);
    free(inp);
    free(outs);
    lz_tokenizer_free(t);
}

static void test_stories(void)
{
    char path[512], err[512] = "";
    if (!lz_test_fixture("models/stories260K.gguf", path, sizeof path)) return;
    lz_gguf *g = NULL;
    lz_tokenizer *t = NULL;
    int rc = lz_gguf_open(path, &g, err, sizeof err);
    CHECK(rc == 0, "open: %s", err);
    if (rc) return;
    rc = lz_tokenizer_from_gguf(g, &t, err, sizeof err);
    CHECK(rc == 0, "tokenizer: %s", err);
    lz_gguf_close(g);
    if (rc) return;
    CHECK(lz_tokenizer_vocab_size(t) == 512, "vocab %d", lz_tokenizer_vocab_size(t));
    int *ids = NULL, n = 0;
    lz_tokenizer_encode(t, "Once upon a time", 16, LZ_TOK_BOS, &ids, &n);
    static const int want[] = {1, 403, 407, 261, 378};
    CHECK(same_ids(ids, n, want, 5), "stories260K prompt");
    if (!same_ids(ids, n, want, 5)) print_ids("got", ids, n);
    free(ids);
    check_round_trip(t, "Once upon a time, there was a little girl named Lily.", 53, LZ_TOK_BOS, "stories");
    lz_tokenizer_free(t);
}

/* A hand-made vocabulary: checks score order, leftmost ties and byte fallback
 * without any fixture. */
static void test_tiny_vocab(void)
{
    char dir[256], path[512], err[512] = "";
    CHECK(lz_test_tmpdir(dir, sizeof dir) != NULL, "tmpdir");
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "<0x61>", "<0x62>", "<0x0A>",
                                       "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a", "bb", "abb"};
    static const float scores[] = {0, 0, 0, 0, 0, 0, -1, -2, -2, -3, -1.5f, -3, -4};
    static const int32_t types[] = {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1};
    int nt = (int)(sizeof toks / sizeof toks[0]);
    lz_gguf_writer *w = lz_gguf_writer_new();
    lz_gguf_write_str(w, "tokenizer.ggml.model", "llama");
    lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)nt);
    lz_gguf_write_arr(w, "tokenizer.ggml.scores", LZ_GGUF_FLOAT32, scores, (uint64_t)nt);
    lz_gguf_write_arr(w, "tokenizer.ggml.token_type", LZ_GGUF_INT32, types, (uint64_t)nt);
    lz_gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 1);
    lz_gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 2);
    lz_gguf_write_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    lz_tokenizer *t = NULL;
    int rc = tokenizer_from_writer(w, path, &t, err, sizeof err);
    CHECK(rc == 0, "tiny tokenizer: %s", err);
    if (t) {
        /* "abb" -> ▁abb: pairs ▁a (-1.5) first, then bb (-3) vs ▁ab (absent): bb, then ▁a+bb absent -> [▁a, bb] */
        int *ids = NULL, n = 0;
        lz_tokenizer_encode(t, "abb", 3, 0, &ids, &n);
        static const int w1[] = {10, 11};
        CHECK(same_ids(ids, n, w1, 2), "tiny abb");
        if (!same_ids(ids, n, w1, 2)) print_ids("got", ids, n);
        free(ids);
        /* no space prefix after a newline: "\nab" -> ▁ <0x0A> ab */
        lz_tokenizer_encode(t, "\nab", 3, 0, &ids, &n);
        static const int w2[] = {6, 5, 9};
        CHECK(same_ids(ids, n, w2, 3), "tiny newline");
        if (!same_ids(ids, n, w2, 3)) print_ids("got", ids, n);
        free(ids);
        /* 'c' is no token and has no byte token: <unk> */
        lz_tokenizer_encode(t, "c", 1, 0, &ids, &n);
        static const int w3[] = {6, 0};
        CHECK(same_ids(ids, n, w3, 2), "tiny unk");
        free(ids);
        /* ties: "bbb" -> b b b; bb pairs at 0 and 1 tie -> the left one merges */
        lz_tokenizer_encode(t, "bbb", 3, 0, &ids, &n);
        static const int w4[] = {6, 11, 8};
        CHECK(same_ids(ids, n, w4, 3), "tiny tie");
        if (!same_ids(ids, n, w4, 3)) print_ids("got", ids, n);
        free(ids);
        lz_tokenizer_encode(t, "", 0, LZ_TOK_BOS, &ids, &n);
        CHECK(n == 1 && ids[0] == 1, "empty with BOS");
        free(ids);
        lz_tokenizer_encode(t, "", 0, 0, &ids, &n);
        CHECK(n == 0 && ids != NULL, "empty");
        free(ids);
        lz_tokenizer_free(t);
    }
    /* errors: no tokenizer, unknown model */
    w = lz_gguf_writer_new();
    lz_gguf_write_str(w, "general.architecture", "llama");
    rc = tokenizer_from_writer(w, path, &t, err, sizeof err);
    CHECK(rc != 0 && t == NULL && strstr(err, "tokenizer.ggml.model"), "no tokenizer: rc %d '%s'", rc, err);
    w = lz_gguf_writer_new();
    lz_gguf_write_str(w, "tokenizer.ggml.model", "t5");
    lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)nt);
    rc = tokenizer_from_writer(w, path, &t, err, sizeof err);
    CHECK(rc == LZ_EUNSUPPORTED && !t && strstr(err, "t5"), "unsupported model: rc %d '%s'", rc, err);
    unlink(path);
    rmdir(dir);
    lz_tokenizer_free(NULL);
}

int main(void)
{
    test_tiny_vocab();
    test_vocab_cases();
    test_stories();
    return lz_test_done();
}
