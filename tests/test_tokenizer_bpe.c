/* test_tokenizer_bpe.c - byte-level BPE (Llama-3): the 46 llama.cpp vocab
 * cases and the 25 llama3_vectors.json cases, exact through both the GGUF
 * (llama3-vocab.gguf) and the Hugging Face (tokenizer.json) paths; round
 * trips, invalid UTF-8, special tokens on/off, eog ids, long inputs. */
#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "base/clock.h"
#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "tokenizer/tokenizer.h"
#include "tests/test.h"
#include "tests/test_tokenizer.h"


/* One test case: text (len bytes) and expected ids. */
typedef struct {
    char *text;
    size_t len;
    int *ids;
    int n;
} tcase;

static int n_cases;
static tcase cases[128];

static void add_case(const char *text, size_t len, const int *ids, int n)
{
    if (n_cases >= 128) return;
    tcase *c = &cases[n_cases++];
    c->text = malloc(len + 1);
    memcpy(c->text, text, len);
    c->text[len] = '\0';
    c->len = len;
    c->ids = malloc((size_t)(n ? n : 1) * sizeof *c->ids);
    if (n) memcpy(c->ids, ids, (size_t)n * sizeof *ids);
    c->n = n;
}

/* .inp cases separated by "\n__ggml_vocab_test__\n" and .out lines of ids. */
static int load_ggml_cases(const char *ipath, const char *opath)
{
    size_t ilen, olen;
    char *inp = lz_test_read_file(ipath, &ilen), *out = lz_test_read_file(opath, &olen);
    int before = n_cases;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *op = out;
    while (inp && out && p < inp + ilen) {
        char *q = strstr(p, sep);
        if (!q) break;
        int ids[1024], n = 0;
        while (*op && *op != '\n') {
            if (*op == ' ') { op++; continue; }
            long v = strtol(op, &op, 10);
            if (n < 1024) ids[n++] = (int)v;
        }
        if (*op == '\n') op++;
        add_case(p, (size_t)(q - p), ids, n);
        p = q + sizeof sep - 1;
    }
    free(inp);
    free(out);
    return n_cases - before;
}

static int load_vectors(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return 0;
    int before = n_cases;
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *o = json_array_get(root, i), *ja = json_object_get(o, "ids"), *jt = json_object_get(o, "text");
        int ids[1024], n = 0;
        for (size_t k = 0; k < json_array_size(ja) && n < 1024; k++)
            ids[n++] = (int)json_integer_value(json_array_get(ja, k));
        add_case(json_string_value(jt), json_string_length(jt), ids, n);
    }
    json_decref(root);
    return n_cases - before;
}

static void run_cases(const lz_tokenizer *t, int first, int count, int flags, const char *what)
{
    int exact = 0;
    for (int c = first; c < first + count; c++) {
        int *got = NULL, ng = 0;
        int rc = lz_tokenizer_encode(t, cases[c].text, cases[c].len, flags, &got, &ng);
        int same = rc == 0 && same_ids(got, ng, cases[c].ids, cases[c].n);
        CHECK(same, "%s case %d '%.60s'", what, c - first, cases[c].text);
        if (!same) { print_ids("want", cases[c].ids, cases[c].n); print_ids("got ", got, ng); }
        exact += same;
        free(got);
        if (flags == 0) {
            char name[64];
            snprintf(name, sizeof name, "%s case %d", what, c - first);
            check_round_trip(t, cases[c].text, cases[c].len, 0, name);
        }
    }
    printf("%s: %d/%d exact\n", what, exact, count);
}

/* Everything that does not depend on which loader built t. */
static void check_tokenizer(const lz_tokenizer *t, const char *what, int ggml_first, int ggml_n, int vec_first,
                            int vec_n)
{
    char name[96];
    CHECK(lz_tokenizer_type(t) == LZ_TOKENIZER_BPE, "%s type", what);
    CHECK(lz_tokenizer_vocab_size(t) == 128256, "%s vocab %d", what, lz_tokenizer_vocab_size(t));
    CHECK(lz_tokenizer_bos(t) == 128000, "%s bos %d", what, lz_tokenizer_bos(t));
    CHECK(lz_tokenizer_eos(t) == 128009 || lz_tokenizer_eos(t) == 128001, "%s eos %d", what, lz_tokenizer_eos(t));
    /* the fixture is Llama 3's vocabulary: 128008 is a reserved token, not <|eom_id|> */
    CHECK(lz_tokenizer_is_eog(t, 128009) && lz_tokenizer_is_eog(t, 128001) && !lz_tokenizer_is_eog(t, 128008) &&
              !lz_tokenizer_is_eog(t, 128000) && !lz_tokenizer_is_eog(t, 13),
          "%s eog", what);
    CHECK(lz_tokenizer_find(t, "<|eot_id|>") == 128009 && lz_tokenizer_find(t, "<|start_header_id|>") == 128006,
          "%s find", what);
    CHECK(lz_tokenizer_add_bos(t), "%s add_bos", what);
    snprintf(name, sizeof name, "%s ggml cases", what);
    run_cases(t, ggml_first, ggml_n, 0, name);
    snprintf(name, sizeof name, "%s llama3 vectors", what);
    run_cases(t, vec_first, vec_n, LZ_TOK_SPECIAL, name);

    /* special tokens on and off */
    const char *chat = "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>";
    int *ids = NULL, n = 0;
    lz_tokenizer_encode(t, chat, strlen(chat), LZ_TOK_SPECIAL | LZ_TOK_BOS, &ids, &n);
    static const int want[] = {128000, 128006, 882, 128007, 271, 13347, 0, 128009};
    CHECK(same_ids(ids, n, want, 8), "%s chat with specials", what);
    if (!same_ids(ids, n, want, 8)) print_ids("got", ids, n);
    char *s = NULL;
    size_t sl = 0;
    lz_tokenizer_decode(t, ids, n, &s, &sl);
    CHECK(s && strcmp(s, "user\n\nHi!") == 0, "%s decode drops control tokens: '%s'", what, s ? s : "");
    free(s);
    free(ids);
    lz_tokenizer_encode(t, chat, strlen(chat), 0, &ids, &n);
    int special = 0;
    for (int i = 0; i < n; i++) special |= ids[i] >= 128000;
    CHECK(!special && n > 10, "%s specials off: plain text (%d ids)", what, n);
    free(ids);
    snprintf(name, sizeof name, "%s specials off", what);
    check_round_trip(t, chat, strlen(chat), 0, name);
    lz_tokenizer_encode(t, "<|begin_of_text|>", 17, LZ_TOK_SPECIAL, &ids, &n);
    CHECK(n == 1 && ids[0] == 128000, "%s begin_of_text parsed", what);
    free(ids);
    /* a special token cut short stays text */
    lz_tokenizer_encode(t, "<|eot_id", 8, LZ_TOK_SPECIAL, &ids, &n);
    CHECK(n > 1 && ids[n - 1] < 128000, "%s partial special", what);
    free(ids);
    char pb[32];
    CHECK(lz_tokenizer_piece(t, -1, 128009, pb, sizeof pb) == 0, "%s control piece empty", what);
    CHECK(lz_tokenizer_piece(t, -1, 22691, pb, sizeof pb) == 6 && memcmp(pb, " Hello", 6) == 0, "%s piece", what);
    CHECK(lz_tokenizer_piece(t, -1, 128256, pb, sizeof pb) == -1, "%s piece out of range", what);

    /* invalid UTF-8: every byte still encodes and comes back */
    static const char *const bad[] = {"\xff", "\xfe\xff", "a\x80z", "\xe2\x82", "caf\xc3", "\xf0\x9f\x98",
                                      "\xf0\x9f\x98 hi", "\xed\xa0\x80 x", "\xc0\xaf", "ok \xf4\x90\x80\x80 end",
                                      "  \x80  ", "\xe6\x97\xa5\xe6\x9c", "Hello\xc3(world)"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(name, sizeof name, "%s bad utf8 %zu", what, i);
        check_round_trip(t, bad[i], strlen(bad[i]), 0, name);
    }
    uint32_t seed = 777;
    char rnd[400];
    for (int r = 0; r < 300; r++) {
        size_t len = (size_t)(r * 13 % 400);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1664525u + 1013904223u;
            rnd[i] = (char)(seed >> 24);
        }
        snprintf(name, sizeof name, "%s random %d", what, r);
        check_round_trip(t, rnd, len, 0, name);
    }
    /* truncations of a mixed UTF-8 string at every byte */
    const char *mixed = "H\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\xa6\x99!";
    for (size_t cut = 0; cut <= strlen(mixed); cut++) {
        snprintf(name, sizeof name, "%s truncated %zu", what, cut);
        check_round_trip(t, mixed, cut, 0, name);
    }
    /* long runs: one huge pre-token each */
    size_t big = 100000;
    char *txt = malloc(big);
    static const char fills[] = {' ', 'a', '7', '\n', '!', '\t'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(txt, fills[f], big);
        snprintf(name, sizeof name, "%s run of 0x%02x", what, fills[f]);
        check_round_trip(t, txt, big, 0, name);
    }
    free(txt);
}

/* GPT-2's byte -> code point map, written here independently of the library. */
static unsigned byte_cp(unsigned b)
{
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) return b;
    unsigned k = 0;
    for (unsigned c = 0; c < b; c++)
        k += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return 256 + k;
}

/* Issue #32: a Split pre-tokenizer whose pattern is {"String": ...} (a
 * literal, not a regex) loads and splits on that string only: PCRE2 refused
 * PCRE2_LITERAL with PCRE2_UCP, so such a tokenizer.json never loaded. The
 * vocabulary is test_tiny_vocab's (260 tokens, 5 merges), written to path. */
static void test_split_string(const char *path, const char *const *toks, const char *const *merges)
{
    static const struct { const char *split, *text; int n, ids[4]; } cases[] = {
        {" ", " abc", 2, {' ', 258}},       /* " " isolated, then a+b, ab+c */
        {" ", "a bc", 3, {'a', ' ', 257}},
        {".", "ab.c", 3, {256, '.', 'c'}},  /* "." is a dot, not any character */
        {"b|c", "abc|b", 3, {258, '|', 'b'}}, /* no "b|c" in it: one piece, not five */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *vocab = json_object(), *jm = json_array();
        for (int k = 0; k < 260; k++) json_object_set_new(vocab, toks[k], json_integer(k));
        for (int k = 0; k < 5; k++) {
            const char *sp = strchr(merges[k], ' ');
            json_array_append_new(jm, json_pack("[s#s]", merges[k], (int)(sp - merges[k]), sp + 1));
        }
        json_t *pre = json_pack("{sss[{sss{ss}ss}{sssb}]}", "type", "Sequence", "pretokenizers", "type", "Split",
                                "pattern", "String", cases[i].split, "behavior", "Isolated", "type", "ByteLevel",
                                "use_regex", 0);
        json_t *root = json_pack("{s{sssoso}so}", "model", "type", "BPE", "vocab", vocab, "merges", jm,
                                 "pre_tokenizer", pre);
        CHECK(root && json_dump_file(root, path, 0) == 0, "write %s", path);
        json_decref(root);
        lz_tokenizer *t = NULL;
        char err[512] = "";
        int rc = lz_tokenizer_from_hf(path, NULL, &t, err, sizeof err);
        CHECK(rc == 0 && t, "Split {\"String\": \"%s\"} loads: %s", cases[i].split, err);
        if (!t) continue;
        int *ids = NULL, n = 0;
        lz_tokenizer_encode(t, cases[i].text, strlen(cases[i].text), 0, &ids, &n);
        CHECK(same_ids(ids, n, cases[i].ids, cases[i].n), "split '%s' of '%s'", cases[i].split, cases[i].text);
        if (!same_ids(ids, n, cases[i].ids, cases[i].n)) print_ids("got", ids, n);
        free(ids);
        check_round_trip(t, cases[i].text, strlen(cases[i].text), 0, "split string");
        lz_tokenizer_free(t);
    }
}

/* A hand-made byte-level vocabulary (no fixture needed): rank order, the
 * GPT-2 pre-tokenizer, byte tokens for invalid UTF-8, error paths. */
static void test_tiny_vocab(void)
{
    char dir[256], path[512], err[512] = "";
    CHECK(lz_test_tmpdir(dir, sizeof dir) != NULL, "tmpdir");
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    char names[256 + 4][8];
    const char *toks[256 + 4];
    for (unsigned b = 0; b < 256; b++) { /* token b = byte b's code point in UTF-8 */
        unsigned cp = byte_cp(b);
        if (cp < 0x80) { names[b][0] = (char)cp; names[b][1] = 0; }
        else { names[b][0] = (char)(0xC0 | (cp >> 6)); names[b][1] = (char)(0x80 | (cp & 0x3F)); names[b][2] = 0; }
        toks[b] = names[b];
    }
    toks[256] = "ab"; toks[257] = "bc"; toks[258] = "abc"; toks[259] = "\xc4\xa0" "a";
    static const char *const merges[] = {"a b", "b c", "ab c", "\xc4\xa0 a", "x y"};
    lz_gguf_writer *w = lz_gguf_writer_new();
    lz_gguf_write_str(w, "tokenizer.ggml.model", "gpt2");
    lz_gguf_write_str(w, "tokenizer.ggml.pre", "default");
    lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks, 260);
    lz_gguf_write_arr_str(w, "tokenizer.ggml.merges", merges, 5);
    lz_gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 259);
    lz_tokenizer *t = NULL;
    int rc = tokenizer_from_writer(w, path, &t, err, sizeof err);
    CHECK(rc == 0, "tiny: %s", err);
    if (t) {
        static const struct { const char *text; int n, ids[4]; } cases[] = {
            {"abc", 1, {258}},                 /* a+b (rank 0) then ab+c (rank 2) */
            {"bcb", 2, {257, 'b'}},            /* b+c, then nothing for bc+b */
            {" abc", 2, {' ', 258}}, /* a+b (rank 0) goes before the space merge (rank 3) */
            {" a", 1, {259}},
            {"xy", 2, {'x', 'y'}},             /* "xy" is no token: the merge is ignored */
            {"a b", 3, {'a', ' ', 'b'}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            int *ids = NULL, n = 0;
            lz_tokenizer_encode(t, cases[i].text, strlen(cases[i].text), 0, &ids, &n);
            CHECK(same_ids(ids, n, cases[i].ids, cases[i].n), "tiny '%s'", cases[i].text);
            if (!same_ids(ids, n, cases[i].ids, cases[i].n)) print_ids("got", ids, n);
            free(ids);
            check_round_trip(t, cases[i].text, strlen(cases[i].text), 0, "tiny");
        }
        check_round_trip(t, "\xff\xfe a\x80" "bc", 7, 0, "tiny invalid utf8");
        CHECK(lz_tokenizer_bos(t) == -1 && lz_tokenizer_eos(t) == 259 && lz_tokenizer_is_eog(t, 259), "tiny ids");
        int *ids = NULL, n = -1;
        CHECK(lz_tokenizer_encode(t, "abc", 3, LZ_TOK_BOS, &ids, &n) == 0 && n == 1, "BOS flag without a BOS");
        free(ids);
        CHECK(lz_tokenizer_encode(t, NULL, 3, 0, &ids, &n) == LZ_EINVAL && ids == NULL, "NULL text");
        lz_tokenizer_free(t);
    }
    /* a vocabulary without the 256 byte tokens is refused */
    w = lz_gguf_writer_new();
    lz_gguf_write_str(w, "tokenizer.ggml.model", "gpt2");
    lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks + 100, 160);
    lz_gguf_write_arr_str(w, "tokenizer.ggml.merges", merges, 5);
    rc = tokenizer_from_writer(w, path, &t, err, sizeof err);
    CHECK(rc != 0 && !t && strstr(err, "byte"), "no byte tokens: rc %d '%s'", rc, err);
    /* an unknown pre-tokenizer is refused by name */
    w = lz_gguf_writer_new();
    lz_gguf_write_str(w, "tokenizer.ggml.model", "gpt2");
    lz_gguf_write_str(w, "tokenizer.ggml.pre", "qwen2");
    lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks, 260);
    lz_gguf_write_arr_str(w, "tokenizer.ggml.merges", merges, 5);
    rc = tokenizer_from_writer(w, path, &t, err, sizeof err);
    CHECK(rc == LZ_EUNSUPPORTED && !t && strstr(err, "qwen2"), "pre qwen2: rc %d '%s'", rc, err);
    /* the same vocabulary as tokenizer.json, merges as ["a", "b"] pairs, added tokens */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *vocab = json_object(), *jm = json_array(), *added = json_array();
    for (int i = 0; i < 260; i++) json_object_set_new(vocab, toks[i], json_integer(i));
    for (int i = 0; i < 5; i++) {
        const char *sp = strchr(merges[i], ' ');
        json_array_append_new(jm, json_pack("[s#s]", merges[i], (int)(sp - merges[i]), sp + 1));
    }
    json_array_append_new(added, json_pack("{sisssb}", "id", 260, "content", "<|end|>", "special", 1));
    json_array_append_new(added, json_pack("{sisssb}", "id", 261, "content", "[[user]]", "special", 0));
    json_t *root = json_pack("{s{sssoso}s{ss}sn}", "model", "type", "BPE", "vocab", vocab, "merges", jm,
                             "pre_tokenizer", "type", "ByteLevel", "normalizer");
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(root, "post_processor",
                        json_pack("{sss[{s{ss}}{s{ss}}]}", "type", "TemplateProcessing", "single", "SpecialToken",
                                  "id", "<|end|>", "Sequence", "id", "A"));
    CHECK(json_dump_file(root, path, 0) == 0, "write %s", path);
    json_decref(root);
    t = NULL;
    rc = lz_tokenizer_from_hf(path, NULL, &t, err, sizeof err);
    CHECK(rc == 0 && t, "tiny tokenizer.json: %s", err);
    if (t) {
        int *ids = NULL, n = 0;
        const char *txt = "abc[[user]]<|end|>";
        lz_tokenizer_encode(t, txt, strlen(txt), 0, &ids, &n);
        /* the non-special added token always splits; the special one only with LZ_TOK_SPECIAL */
        CHECK(n > 3 && ids[0] == 258 && ids[1] == 261 && ids[2] != 260, "tiny hf plain (%d ids)", n);
        free(ids);
        lz_tokenizer_encode(t, txt, strlen(txt), LZ_TOK_SPECIAL, &ids, &n);
        static const int want[] = {258, 261, 260};
        CHECK(same_ids(ids, n, want, 3), "tiny hf special");
        free(ids);
        CHECK(lz_tokenizer_bos(t) == 260 && lz_tokenizer_add_bos(t), "bos from the template");
        char pb[16];
        CHECK(lz_tokenizer_piece(t, -1, 261, pb, sizeof pb) == 8 && memcmp(pb, "[[user]]", 8) == 0,
              "user-defined piece is its text");
        lz_tokenizer_free(t);
    }
    test_split_string(path, toks, merges);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_tiny_vocab();
    char gpath[512], ip[512], op[512], vp[512], hp[512], cp[512], err[512] = "";
    if (!lz_test_fixture("tokenizers/llama3-vocab.gguf", gpath, sizeof gpath) ||
        !lz_test_fixture("tokenizers/ggml-vocab-llama-bpe.gguf.inp", ip, sizeof ip) ||
        !lz_test_fixture("tokenizers/ggml-vocab-llama-bpe.gguf.out", op, sizeof op) ||
        !lz_test_fixture("tokenizers/llama3_vectors.json", vp, sizeof vp))
        return lz_test_done();
    int ng = load_ggml_cases(ip, op);
    CHECK(ng == 46, "%d ggml cases", ng);
    int nv = load_vectors(vp);
    CHECK(nv == 25, "%d vectors", nv);

    lz_gguf *g = NULL;
    lz_tokenizer *t = NULL;
    double t0 = lz_now_s();
    int rc = lz_gguf_open(gpath, &g, err, sizeof err);
    CHECK(rc == 0, "open: %s", err);
    if (rc == 0) {
        rc = lz_tokenizer_from_gguf(g, &t, err, sizeof err);
        CHECK(rc == 0, "gguf tokenizer: %s", err);
        lz_gguf_close(g);
    }
    printf("gguf load: %.1f ms\n", 1e3 * (lz_now_s() - t0));
    if (t) check_tokenizer(t, "gguf", 0, ng, ng, nv);

    lz_tokenizer *h = NULL;
    if (lz_test_fixture("tokenizers/llama3.1-tokenizer.json", hp, sizeof hp) &&
        lz_test_fixture("tokenizers/llama3.1-tokenizer_config.json", cp, sizeof cp)) {
        t0 = lz_now_s();
        rc = lz_tokenizer_from_hf(hp, cp, &h, err, sizeof err);
        CHECK(rc == 0, "hf tokenizer: %s", err);
        printf("tokenizer.json load: %.1f ms\n", 1e3 * (lz_now_s() - t0));
        if (h) {
            check_tokenizer(h, "hf", 0, ng, ng, nv);
            CHECK(lz_tokenizer_eos(h) == 128009, "hf eos from config");
        }
        /* without the config: bos from the post-processor template */
        lz_tokenizer *h2 = NULL;
        rc = lz_tokenizer_from_hf(hp, NULL, &h2, err, sizeof err);
        CHECK(rc == 0 && lz_tokenizer_bos(h2) == 128000 && lz_tokenizer_add_bos(h2), "hf without config: %s", err);
        lz_tokenizer_free(h2);
    }
    if (t && h) { /* both loaders agree on every token */
        int diff = 0;
        for (int id = 0; id < 128256; id++) {
            size_t a, b;
            const char *x = lz_tokenizer_token_text(t, id, &a), *y = lz_tokenizer_token_text(h, id, &b);
            if (!x || !y || a != b || memcmp(x, y, a) != 0) diff++;
        }
        CHECK(diff == 0, "%d tokens differ between GGUF and tokenizer.json", diff);
    }

    /* error paths of the HF loader */
    char dir[256], path[600];
    if (lz_test_tmpdir(dir, sizeof dir)) {
        lz_tokenizer *x = NULL;
        rc = lz_tokenizer_from_hf("/nonexistent/tokenizer.json", NULL, &x, err, sizeof err);
        CHECK(rc != 0 && !x && strstr(err, "/nonexistent/tokenizer.json"), "missing file: '%s'", err);
        static const struct { const char *json, *expect; } bad[] = {
            {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "Unigram"},
            {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": "
             "{\"type\": \"Metaspace\"}}", "Metaspace"},
            {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": "
             "{\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "NFC"},
            {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": "
             "{\"type\": \"ByteLevel\"}}", "0x00"},
            {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}", "bad id"},
            {"{\"model\": ", "tokenizer.json"},
        };
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            FILE *f = fopen(path, "w");
            fputs(bad[i].json, f);
            fclose(f);
            err[0] = '\0';
            x = NULL;
            rc = lz_tokenizer_from_hf(path, NULL, &x, err, sizeof err);
            CHECK(rc != 0 && !x && strstr(err, bad[i].expect), "bad json %zu: rc %d '%s'", i, rc, err);
        }
        unlink(path);
        rmdir(dir);
    }
    lz_tokenizer_free(t);
    lz_tokenizer_free(h);
    for (int i = 0; i < n_cases; i++) { free(cases[i].text); free(cases[i].ids); }
    return lz_test_done();
}
