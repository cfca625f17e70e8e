/* make_seeds.c - writes the fuzz targets' seed corpora, made by the project's
 * own code and data: GGUF files and tiny models (formats/gguf_write.h,
 * model/mkmodel.h), safetensors files and a shard index (lz_st_write),
 * tokenizer.json files (a reduced copy of datasets/tokenizer/tokenizer.json:
 * its 256 byte tokens, the first merges, its added tokens, pre-tokenizer and
 * template; and small hand-made ones, one per pre-tokenizer kind), payloads
 * of every dtype and codec (lz_payload_encode), corpus files (records of
 * datasets/demo/corpus.jsonl as JSONL, a JSON array, CSV and HotpotQA
 * context records) and questions (datasets/demo/questions.json).
 *   make_seeds OUT_DIR      -> OUT_DIR/<target>/seed-*   (nothing is committed)
 * Run from the repository root (it reads datasets/). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "formats/safetensors.h"
#include "model/mkmodel.h"
#include "store/payload.h"
#include "fuzz/fuzz_common.h"

static const char *out_dir;
static int n_written;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "make_seeds: %s: %s\n", what, why);
    exit(1);
}

static void target_dir(const char *target)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", out_dir, target);
    if (mkdir(p, 0777) != 0 && errno != EEXIST) die(p, strerror(errno));
}

/* Writes one seed: a selector byte (unless sel < 0), then the parts joined by FUZZ_PART_SEP. */
static void seed_parts(const char *target, const char *name, int sel, const void *const *parts, const size_t *lens,
                       int n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/seed-%s", out_dir, target, name);
    FILE *f = fopen(p, "wb");
    if (!f) die(p, strerror(errno));
    if (sel >= 0) fputc(sel, f);
    for (int i = 0; i < n; i++) {
        if (i) fputs(FUZZ_PART_SEP, f);
        if (lens[i] && fwrite(parts[i], 1, lens[i], f) != lens[i]) die(p, "write failed");
    }
    if (fclose(f) != 0) die(p, strerror(errno));
    n_written++;
}

static void seed(const char *target, const char *name, int sel, const void *data, size_t len)
{
    seed_parts(target, name, sel, &data, &len, 1);
}

static void seed_str(const char *target, const char *name, int sel, const char *s)
{
    seed(target, name, sel, s, strlen(s));
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) die(path, "read failed");
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* A file the library wrote, as a seed. */
static void seed_file(const char *target, const char *name, int sel, const char *path)
{
    size_t n;
    char *b = slurp(path, &n);
    seed(target, name, sel, b, n);
    free(b);
}

/* ---- GGUF and models ---- */

static void tiny_model(const char *path, int type, int tied, int llama3, uint64_t seed_v)
{
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    o.dim = 32; o.n_layers = 1; o.n_heads = 2; o.n_kv_heads = 1; o.head_dim = 16; o.ffn_dim = 64;
    o.vocab = 360; o.ctx = 64;
    o.tensor_type = type;
    o.tied = tied;
    o.llama3_freqs = llama3;
    o.seed = seed_v;
    char err[512];
    if (lz_mkmodel_write(&o, path, err, sizeof err)) die(path, err);
}

static void seeds_gguf(void)
{
    target_dir("gguf");
    target_dir("model");
    char path[1024];
    static const struct { int type, tied, llama3; const char *name; } models[] = {
        { LZ_GGML_F32, 0, 0, "f32" }, { LZ_GGML_F16, 1, 0, "f16-tied" },
        { LZ_GGML_BF16, 0, 1, "bf16-llama3" }, { LZ_GGML_Q8_0, 0, 0, "q8_0" },
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(path, sizeof path, "%s/tmp-model.gguf", out_dir);
        tiny_model(path, models[i].type, models[i].tied, models[i].llama3, 1 + i);
        seed_file("model", models[i].name, -1, path);
        seed_file("gguf", models[i].name, -1, path);
        remove(path);
    }
    /* every metadata type, nested arrays, every tensor type, 1-4 dimensions */
    lz_gguf_writer *w = lz_gguf_writer_new();
    int32_t ia[4] = { -1, 0, 7, 1 << 30 };
    float fa[3] = { 0.5f, -2.0f, 1e30f };
    const char *sa[3] = { "a", "", "\xe2\x96\x81word" };
    lz_gguf_write_u32(w, "general.alignment", 64);
    lz_gguf_write_str(w, "general.architecture", "llama");
    lz_gguf_write_u32(w, "a.u32", 7);
    lz_gguf_write_i32(w, "a.i32", -9);
    lz_gguf_write_f32(w, "a.f32", 1.5f);
    lz_gguf_write_bool(w, "a.bool", 1);
    lz_gguf_write_arr(w, "a.ia", LZ_GGUF_INT32, ia, 4);
    lz_gguf_write_arr(w, "a.fa", LZ_GGUF_FLOAT32, fa, 3);
    lz_gguf_write_arr_str(w, "a.sa", sa, 3);
    float data[256];
    for (int i = 0; i < 256; i++) data[i] = (float)i / 16 - 8;
    const int64_t ne1[1] = { 64 }, ne2[2] = { 32, 4 }, ne3[3] = { 32, 2, 2 }, ne4[4] = { 32, 2, 2, 2 };
    lz_gguf_write_tensor(w, "t.f32", LZ_GGML_F32, 1, ne1, data);
    lz_gguf_write_tensor(w, "t.f16", LZ_GGML_F16, 2, ne2, data);
    lz_gguf_write_tensor(w, "t.bf16", LZ_GGML_BF16, 3, ne3, data);
    lz_gguf_write_tensor(w, "t.q8", LZ_GGML_Q8_0, 4, ne4, data);
    snprintf(path, sizeof path, "%s/tmp-meta.gguf", out_dir);
    char err[512];
    if (lz_gguf_writer_save(w, path, err, sizeof err)) die(path, err);
    lz_gguf_writer_free(w);
    seed_file("gguf", "every-type", -1, path);
    remove(path);
    /* issue #32: an F32 tensor of shape [2^62 + 1] with 4 bytes of data (must be refused) */
    uint8_t b[128];
    size_t n = 0;
#define PUT(v, sz) do { uint64_t x_ = (uint64_t)(v); memcpy(b + n, &x_, sz); n += sz; } while (0)
    PUT(0x46554747u, 4); PUT(3, 4); PUT(1, 8); PUT(0, 8);
    PUT(1, 8); b[n++] = 'w';
    PUT(1, 4); PUT(((uint64_t)1 << 62) + 1, 8);
    PUT(LZ_GGML_F32, 4); PUT(0, 8);
    while (n % 32) b[n++] = 0;
    PUT(0x3f800000u, 4);
    seed("gguf", "nbytes-wrap", -1, b, n);
    /* a nested array: array of arrays of u8 */
    n = 0;
    PUT(0x46554747u, 4); PUT(3, 4); PUT(0, 8); PUT(1, 8);
    PUT(4, 8); memcpy(b + n, "nest", 4); n += 4;
    PUT(LZ_GGUF_ARRAY, 4); PUT(LZ_GGUF_ARRAY, 4); PUT(2, 8);
    PUT(LZ_GGUF_UINT8, 4); PUT(2, 8); PUT(5, 1); PUT(6, 1);
    PUT(LZ_GGUF_UINT8, 4); PUT(1, 8); PUT(7, 1);
#undef PUT
    seed("gguf", "nested", -1, b, n);
}

/* ---- safetensors ---- */

static void seeds_safetensors(void)
{
    target_dir("safetensors");
    char path[1024], err[512];
    float f[64];
    uint16_t h[64];
    int32_t i32[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    for (int i = 0; i < 64; i++) { f[i] = (float)i * 0.25f; h[i] = (uint16_t)(0x3c00 + i); }
    const int64_t s2[2] = { 4, 16 }, s1[1] = { 8 }, s0[1] = { 0 }, s3[3] = { 2, 2, 4 };
    lz_st_out one[] = {
        { "model.embed_tokens.weight", LZ_ST_F32, 2, s2, f },
        { "model.norm.weight", LZ_ST_BF16, 3, s3, h },
        { "lm_head.weight", LZ_ST_F16, 1, s1, h },
        { "counts", LZ_ST_I32, 1, s1, i32 },
        { "empty", LZ_ST_F32, 1, s0, f },
    };
    snprintf(path, sizeof path, "%s/tmp.safetensors", out_dir);
    if (lz_st_write(path, one, 5, err, sizeof err)) die(path, err);
    seed_file("safetensors", "single", 0, path);
    /* a shard index over two shards */
    size_t n1, n2;
    if (lz_st_write(path, one, 2, err, sizeof err)) die(path, err);
    char *sh1 = slurp(path, &n1);
    if (lz_st_write(path, one + 2, 2, err, sizeof err)) die(path, err);
    char *sh2 = slurp(path, &n2);
    remove(path);
    const char *index = "{\"metadata\": {\"total_size\": 448}, \"weight_map\": {"
                        "\"model.embed_tokens.weight\": \"shard-1.safetensors\", "
                        "\"model.norm.weight\": \"shard-1.safetensors\", "
                        "\"lm_head.weight\": \"shard-2.safetensors\", \"counts\": \"shard-2.safetensors\"}}";
    const void *parts[3] = { index, sh1, sh2 };
    size_t lens[3] = { strlen(index), n1, n2 };
    seed_parts("safetensors", "index", 1, parts, lens, 3);
    free(sh1);
    free(sh2);
}

/* ---- tokenizer.json ---- */

/* A copy of the project's tokenizer.json cut to its byte tokens, the merges
 * among its first `keep` tokens, and its added tokens renumbered after them. */
static char *reduced_tokenizer(int keep)
{
    json_error_t je;
    json_t *t = json_load_file("datasets/tokenizer/tokenizer.json", 0, &je);
    if (!t) die("datasets/tokenizer/tokenizer.json", je.text);
    json_t *model = json_object_get(t, "model"), *vocab = json_object_get(model, "vocab");
    json_t *nv = json_object(), *nm = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) if (json_integer_value(v) < keep) json_object_set(nv, k, v);
    size_t i;
    json_array_foreach(json_object_get(model, "merges"), i, v) {
        const char *a, *b;
        char ab[512];
        if (json_is_string(v)) { /* "a b" */
            const char *s = json_string_value(v), *sp = strchr(s, ' ');
            if (!sp) continue;
            snprintf(ab, sizeof ab, "%.*s%s", (int)(sp - s), s, sp + 1);
            char left[256];
            snprintf(left, sizeof left, "%.*s", (int)(sp - s), s);
            if (json_object_get(nv, left) && json_object_get(nv, sp + 1) && json_object_get(nv, ab))
                json_array_append(nm, v);
            continue;
        }
        a = json_string_value(json_array_get(v, 0));
        b = json_string_value(json_array_get(v, 1));
        if (!a || !b) continue;
        snprintf(ab, sizeof ab, "%s%s", a, b);
        if (json_object_get(nv, a) && json_object_get(nv, b) && json_object_get(nv, ab)) json_array_append(nm, v);
    }
    json_object_set_new(model, "vocab", nv);
    json_object_set_new(model, "merges", nm);
    /* added tokens: ids keep, keep + 1, ...; the template's ids follow them */
    json_t *added = json_object_get(t, "added_tokens");
    json_t *pp = json_object_get(t, "post_processor");
    json_array_foreach(added, i, v) {
        const json_int_t old = json_integer_value(json_object_get(v, "id")), id = keep + (json_int_t)i;
        json_object_set_new(v, "id", json_integer(id));
        json_t *procs = json_object_get(pp, "processors"), *p;
        size_t j;
        json_array_foreach(procs, j, p) {
            json_t *st = json_object_get(p, "special_tokens"), *e;
            const char *name;
            json_object_foreach(st, name, e) {
                json_t *ids = json_object_get(e, "ids"), *x;
                size_t q;
                json_array_foreach(ids, q, x) if (json_integer_value(x) == old) json_array_set_new(ids, q, json_integer(id));
            }
        }
        if (i >= 15) { /* the rest of the reserved tokens add nothing a fuzzer needs */
            while (json_array_size(added) > i + 1) json_array_remove(added, i + 1);
            break;
        }
    }
    char *s = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    return s;
}

/* A hand-made byte-level vocabulary: 256 byte tokens, "ab", "bc", "abc", "Ġa", with pre_tokenizer pre. */
static char *tiny_tokenizer(json_t *pre, int with_added)
{
    json_t *vocab = json_object(), *merges = json_array();
    for (unsigned b = 0, k = 0; b < 256; b++) {
        unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b : 256 + k++;
        char u[4] = { 0 };
        if (cp < 0x80) u[0] = (char)cp;
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); }
        json_object_set_new(vocab, u, json_integer(b));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "bc", json_integer(257));
    json_object_set_new(vocab, "abc", json_integer(258));
    json_object_set_new(vocab, "\xc4\xa0" "a", json_integer(259));
    json_array_append_new(merges, json_string("a b"));
    json_array_append_new(merges, json_pack("[ss]", "b", "c"));
    json_array_append_new(merges, json_string("ab c"));
    json_array_append_new(merges, json_string("\xc4\xa0 a"));
    json_t *root = json_pack("{s{sssoso}so}", "model", "type", "BPE", "vocab", vocab, "merges", merges,
                             "pre_tokenizer", pre);
    if (with_added) {
        json_object_set_new(root, "added_tokens",
                            json_pack("[{sisssb}{sisssb}]", "id", 260, "content", "<|end|>", "special", 1, "id", 261,
                                      "content", "[[user]]", "special", 0));
        json_object_set_new(root, "post_processor",
                            json_pack("{sss[{s{ss}}{s{ss}}]}", "type", "TemplateProcessing", "single", "SpecialToken",
                                      "id", "<|end|>", "Sequence", "id", "A"));
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static void seeds_tokenizer(void)
{
    target_dir("tokenizer_json");
    size_t cn;
    char *config = slurp("datasets/tokenizer/tokenizer_config.json", &cn);
    const char *text = "The capital of Foxaria is Oriasville. It's 1684!\n<|eot_id|> caf\xc3\xa9 \xff";
    char *red = reduced_tokenizer(400);
    const void *p3[3] = { red, config, text };
    size_t l3[3] = { strlen(red), cn, strlen(text) };
    seed_parts("tokenizer_json", "project-reduced", -1, p3, l3, 3);
    l3[1] = 0; /* without its config */
    seed_parts("tokenizer_json", "project-reduced-noconfig", -1, p3, l3, 3);
    free(red);
    struct { const char *name; json_t *pre; int added; } tiny[] = {
        { "bytelevel", json_pack("{ss}", "type", "ByteLevel"), 1 },
        { "split-regex", json_pack("{sss[{sss{ss}ss}{sssb}]}", "type", "Sequence", "pretokenizers", "type", "Split",
                                   "pattern", "Regex", "\\p{L}+|\\s+|\\p{N}{1,3}", "behavior", "Isolated", "type",
                                   "ByteLevel", "use_regex", 0), 0 },
        { "split-string", json_pack("{sss[{sss{ss}ss}{sssb}]}", "type", "Sequence", "pretokenizers", "type", "Split",
                                    "pattern", "String", " ", "behavior", "Isolated", "type", "ByteLevel",
                                    "use_regex", 0), 1 },
    };
    const char *tcfg = "{\"bos_token\": {\"content\": \"<|end|>\"}, \"eos_token\": \"<|end|>\", \"add_bos_token\": false}";
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
        char *s = tiny_tokenizer(tiny[i].pre, tiny[i].added);
        const void *p[3] = { s, tcfg, "abc [[user]] bcb a b" };
        size_t l[3] = { strlen(s), tiny[i].added ? strlen(tcfg) : 0, 20 };
        seed_parts("tokenizer_json", tiny[i].name, -1, p, l, 3);
        free(s);
    }
    free(config);
}

/* ---- payloads ---- */

static void seeds_payload(void)
{
    target_dir("payload");
    lz_payload_codec *c = lz_payload_codec_new();
    if (!c) die("payload", "out of memory");
    enum { L = 2, KV = 2, T = 5, D = 8 };
    static float k[L * KV * T * D], v[L * KV * T * D];
    for (int i = 0; i < L * KV * T * D; i++) { k[i] = (float)((i * 37) % 101) / 50 - 1; v[i] = (float)((i * 53) % 89) / 40 - 1; }
    const int kept[L * KV] = { 5, 3, 0, 1 };
    uint8_t model[32];
    for (int i = 0; i < 32; i++) model[i] = (uint8_t)(i * 7);
    for (int dtype = LZ_PAYLOAD_DTYPE_BF16; dtype <= LZ_PAYLOAD_DTYPE_F32; dtype++)
        for (int codec = LZ_PAYLOAD_CODEC_RAW; codec <= LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD; codec++)
            for (int kv = 0; kv < 2; kv++) {
                lz_payload_src s = { k, v, T, 0, L, KV, D, T, kv ? kept : NULL, 3, model, dtype };
                void *blob;
                size_t len;
                char err[256], name[64];
                if (lz_payload_encode(c, &s, codec, 1, &blob, &len, err, sizeof err)) die("payload", err);
                snprintf(name, sizeof name, "%s-%s%s", dtype == LZ_PAYLOAD_DTYPE_F32 ? "f32" : "bf16",
                         lz_payload_codec_name(codec), kv ? "-kept" : "");
                for (char *p = name; *p; p++) if (*p == '+') *p = '_';
                seed("payload", name, 1, blob, len);      /* the CRC written by the target */
                strcat(name, "-crc");
                seed("payload", name, 0, blob, len);      /* as stored */
                free(blob);
            }
    lz_payload_codec_free(c);
}

/* ---- corpus ---- */

/* selector: bits 0-1 file name (.jsonl .csv .json none), 2-3 format (auto jsonl csv json-array), 4 --id-field title */
static void seeds_corpus(void)
{
    target_dir("corpus");
    size_t n;
    char *all = slurp("datasets/demo/corpus.jsonl", &n);
    /* the first 4 records */
    char *end = all;
    for (int i = 0; i < 4 && end; i++) end = strchr(end + 1, '\n');
    size_t head = end ? (size_t)(end - all) + 1 : n;
    seed("corpus", "demo-jsonl", 0, all, head);
    seed("corpus", "demo-jsonl-idfield", 0x10 | 4, all, head);
    /* the same as one JSON array, and as CSV */
    json_t *arr = json_array();
    json_t *csvrows = json_array();
    for (char *line = all; line < all + head;) {
        char *nl = strchr(line, '\n');
        json_error_t je;
        json_t *r = json_loadb(line, (size_t)(nl - line), 0, &je);
        if (r) { json_array_append(arr, r); json_array_append_new(csvrows, r); }
        line = nl + 1;
    }
    char *js = json_dumps(arr, JSON_INDENT(1));
    seed("corpus", "demo-array", 2, js, strlen(js));
    seed("corpus", "demo-array-forced", 3 << 2 | 3, js, strlen(js));
    free(js);
    json_decref(arr);
    char csv[8192];
    size_t o = (size_t)snprintf(csv, sizeof csv, "id,title,text\n");
    size_t i;
    json_t *r;
    json_array_foreach(csvrows, i, r) {
        o += (size_t)snprintf(csv + o, sizeof csv - o, "%s,\"%s\",\"%s\"\n", json_string_value(json_object_get(r, "id")),
                              json_string_value(json_object_get(r, "title")), json_string_value(json_object_get(r, "text")));
    }
    json_decref(csvrows);
    seed("corpus", "demo-csv", 1, csv, o);
    seed_str("corpus", "csv-quotes", 2 << 2 | 3, "ID,Text\n1,\"a \"\"quoted\"\" text, with a comma\"\n2,\"two\nlines\"\n,empty id\n3,\n");
    /* HotpotQA context records, with a repeated pair and a title seen with other text */
    seed_str("corpus", "context", 0,
             "{\"_id\": \"q1\", \"context\": [[\"Foxaria\", [\"The capital is Oriasville.\", \" It is old.\"]], "
             "[\"Hartendland\", [\"A country.\"]]]}\n"
             "{\"_id\": \"q2\", \"context\": [[\"Foxaria\", [\"The capital is Oriasville.\", \" It is old.\"]], "
             "[\"Foxaria\", [\"Another text.\"]]]}\n");
    seed_str("corpus", "bad-records", 3, "{\"id\": 1, \"text\": \"integer id\"}\n{\"id\": \"x\"}\n[1, 2]\n{\"id\": \"y\", "
                                         "\"text\": \"\\u00e9\\ud83d\\ude00 ok\", \"title\": null}\n\xef\xbb\xbf{broken\n");
    free(all);
}

/* ---- questions ---- */

static void seeds_questions(void)
{
    target_dir("fts_query");
    json_error_t je;
    json_t *qs = json_load_file("datasets/demo/questions.json", 0, &je);
    if (!qs) die("datasets/demo/questions.json", je.text);
    size_t i;
    json_t *q;
    json_array_foreach(qs, i, q) {
        if (i >= 8) break;
        char name[32];
        snprintf(name, sizeof name, "demo-%zu", i);
        const char *s = json_string_value(json_object_get(q, "question"));
        if (s) seed_str("fts_query", name, -1, s);
    }
    json_decref(qs);
    static const char *const hard[] = {
        "\"quoted\" AND OR NOT NEAR(a b) title:x * ^start col:\"y\"",
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 \xe2\x80\x94" "dash\xe2\x80\x94",
        "a\xff\xfe b\x80 (unbalanced ( parens",
        "---  ...  ???",
        "x'y\"z{}[]:;-+",
    };
    for (size_t k = 0; k < sizeof hard / sizeof hard[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "syntax-%zu", k);
        seed_str("fts_query", name, -1, hard[k]);
    }
}

/* ---- lazyserve's request bodies ---- */

static void seeds_openai(void)
{
    target_dir("openai");
    static const struct {
        int chat; /* the selector byte: 0 completions, 1 chat */
        const char *body;
    } bodies[] = {
        {0, "{\"prompt\": \"Who founded Foxaria?\", \"max_tokens\": 8}"},
        {0, "{\"prompt\": \"q\", \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"stop\": [\"\\n\", \"END\"]}"},
        {0, "{\"prompt\": \"q\", \"documents\": [\"doc1\", \"Ackworth, West Yorkshire\"], \"temperature\": 0.7, \"top_p\": 0.9, \"seed\": 7}"},
        {0, "{\"prompt\": \"q\", \"top_p\": 1e-60}"}, /* below float's range: must stay positive */
        {0, "{\"prompt\": \"q\", \"retrieve\": {\"k\": 10}, \"unknown\": {\"x\": [1, 2]}, \"stop\": \"a\"}"},
        {0, "{\"prompt\": [\"a\", \"b\"], \"max_tokens\": -1, \"retrieve\": false}"},
        {1, "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"Who?\"}]}"},
        {1, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"caf\\u00e9\"}]}], \"stream\": true}"},
        {1, "{\"messages\": [], \"max_tokens\": 1e9}"},
    };
    for (size_t k = 0; k < sizeof bodies / sizeof bodies[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s-%zu", bodies[k].chat ? "chat" : "completions", k);
        seed_str("openai", name, bodies[k].chat, bodies[k].body);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds OUT_DIR (run from the repository root)\n");
        return 2;
    }
    out_dir = argv[1];
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) die(out_dir, strerror(errno));
    seeds_gguf();
    seeds_safetensors();
    seeds_tokenizer();
    seeds_payload();
    seeds_corpus();
    seeds_questions();
    seeds_openai();
    printf("make_seeds: %d seeds in %s\n", n_written, out_dir);
    return 0;
}
