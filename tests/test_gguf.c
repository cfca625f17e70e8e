/* test_gguf.c - GGUF reader and writer: round trip of every metadata type
 * (nested arrays too) and tensor type, and corrupt files (truncations at every
 * 1/16, bad magic/version, offsets past the end, unknown types, overflowing
 * dims, byte sizes that wrap, string lengths past the end, a model's
 * block_count past its tensors) rejected with a message, never a crash. */
#include <stdint.h>

#include "formats/gguf.h"
#include "formats/gguf_write.h"
#include "base/half.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "tests/test.h"

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) { free(p); p = NULL; }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

/* Opens buf as GGUF; expects failure with a non-empty message containing want. */
static void expect_reject(const uint8_t *buf, size_t n, const char *want, const char *what)
{
    lz_gguf *g = NULL;
    char err[512] = "";
    int rc = lz_gguf_open_buffer(buf, n, "t.gguf", &g, err, sizeof err);
    CHECK(rc != 0 && g == NULL, "%s: accepted", what);
    CHECK(strstr(err, "t.gguf") != NULL, "%s: message lacks file name: %s", what, err);
    CHECK(!want || strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", what, err, want ? want : "");
    lz_gguf_close(g);
}

static void test_roundtrip(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    lz_gguf_writer *w = lz_gguf_writer_new();
    int32_t ia[3] = {-1, 2, 300000};
    const char *sa[3] = {"alpha", "", "\xe2\x96\x81x"};
    float data[64];
    for (int i = 0; i < 64; i++) data[i] = (float)i * 0.25f - 3.0f;
    int64_t ne[2] = {32, 2};
    CHECK(lz_gguf_write_u32(w, "a.u32", 7) == 0, "u32");
    CHECK(lz_gguf_write_i32(w, "a.i32", -9) == 0, "i32");
    CHECK(lz_gguf_write_f32(w, "a.f32", 1.5f) == 0, "f32");
    CHECK(lz_gguf_write_bool(w, "a.bool", 1) == 0, "bool");
    CHECK(lz_gguf_write_str(w, "a.str", "hello") == 0, "str");
    CHECK(lz_gguf_write_arr(w, "a.ia", LZ_GGUF_INT32, ia, 3) == 0, "arr");
    CHECK(lz_gguf_write_arr_str(w, "a.sa", sa, 3) == 0, "arr str");
    uint32_t types[4] = {LZ_GGML_F32, LZ_GGML_F16, LZ_GGML_BF16, LZ_GGML_Q8_0};
    const char *names[4] = {"t.f32", "t.f16", "t.bf16", "t.q8"};
    for (int t = 0; t < 4; t++) CHECK(lz_gguf_write_tensor(w, names[t], types[t], 2, ne, data) == 0, "tensor");
    int64_t ne_bad[2] = {16, 4}; /* 64 values, but rows of 16: the reader refuses Q8_0 rows that are not whole blocks */
    CHECK(lz_gguf_write_tensor(w, "t.q8.bad", LZ_GGML_Q8_0, 2, ne_bad, data) == -1, "Q8_0 rows of 16 written");
    char err[512];
    CHECK(lz_gguf_writer_save(w, path, err, sizeof err) == 0, "save: %s", err);
    lz_gguf_writer_free(w);

    lz_gguf *g;
    int rc = lz_gguf_open(path, &g, err, sizeof err);
    CHECK(rc == 0, "open: %s", err);
    if (rc) return;
    int64_t iv;
    double fv;
    const char *s;
    size_t sl;
    CHECK(lz_gguf_version(g) == 3, "version");
    CHECK(lz_gguf_get_int(g, "a.u32", &iv) == 0 && iv == 7, "u32 value");
    CHECK(lz_gguf_get_int(g, "a.i32", &iv) == 0 && iv == -9, "i32 value");
    CHECK(lz_gguf_get_float(g, "a.f32", &fv) == 0 && fv == 1.5, "f32 value");
    CHECK(lz_gguf_get_int(g, "a.bool", &iv) == 0 && iv == 1, "bool value");
    CHECK(lz_gguf_get_str(g, "a.str", &s, &sl) == 0 && sl == 5 && !memcmp(s, "hello", 5), "str value");
    CHECK(lz_gguf_get_int(g, "a.str", &iv) == LZ_ETYPE, "type mismatch reported");
    CHECK(lz_gguf_get_int(g, "missing", &iv) == LZ_ENOTFOUND, "missing reported");
    const lz_gguf_value *a = lz_gguf_get(g, "a.ia");
    CHECK(a && a->type == LZ_GGUF_ARRAY && a->n == 3, "array");
    for (int i = 0; a && i < 3; i++) CHECK(lz_gguf_arr_int(a, (uint64_t)i, &iv) == 0 && iv == ia[i], "array elem %d", i);
    a = lz_gguf_get(g, "a.sa");
    for (int i = 0; a && i < 3; i++)
        CHECK(lz_gguf_arr_str(a, (uint64_t)i, &s, &sl) == 0 && sl == strlen(sa[i]) && !memcmp(s, sa[i], sl), "str elem");
    float out[64];
    for (int t = 0; t < 4; t++) {
        const lz_gguf_tensor *tt = lz_gguf_find_tensor(g, names[t]);
        CHECK(tt && tt->ne[0] == 32 && tt->ne[1] == 2 && tt->n_elements == 64, "tensor %s shape", names[t]);
        if (!tt) continue;
        CHECK(((uintptr_t)tt->data - (uintptr_t)lz_gguf_tensor_at(g, 0)->data) % 32 == 0, "alignment");
        CHECK(lz_gguf_tensor_to_f32(tt, out) == 0, "dequant");
        for (int i = 0; i < 64; i++) {
            /* F16: half an ulp of 11 bits; BF16: of 8 bits; Q8_0: half a step d = amax/127
             * of the 32-block, plus the f16 rounding of d itself (127 * d * 2^-11) */
            float amax = 0;
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(data[j]));
            double tol = t == 0 ? 0 : t == 1 ? fabs(data[i]) * 0x1p-11 : t == 2 ? fabs(data[i]) * 0x1p-8
                                                                           : amax / 127 * (0.5 + 127 * 0x1p-11);
            CHECK_CLOSE(out[i], data[i], tol + 1e-7, 0);
        }
    }
    lz_gguf_close(g);
}

/* Hand-built file with a nested array (array of arrays of u8). */
static void test_nested(void)
{
    uint8_t b[256];
    size_t n = 0;
#define PUT(v, sz) do { uint64_t x_ = (uint64_t)(v); memcpy(b + n, &x_, sz); n += sz; } while (0)
    PUT(0x46554747u, 4); PUT(3, 4); PUT(0, 8); PUT(1, 8);
    PUT(4, 8); memcpy(b + n, "nest", 4); n += 4;
    PUT(LZ_GGUF_ARRAY, 4); PUT(LZ_GGUF_ARRAY, 4); PUT(2, 8);
    PUT(LZ_GGUF_UINT8, 4); PUT(2, 8); PUT(5, 1); PUT(6, 1);
    PUT(LZ_GGUF_UINT8, 4); PUT(1, 8); PUT(7, 1);
    lz_gguf *g;
    char err[256];
    int rc = lz_gguf_open_buffer(b, n, "nest.gguf", &g, err, sizeof err);
    CHECK(rc == 0, "nested open: %s", err);
    if (rc) return;
    const lz_gguf_value *v = lz_gguf_get(g, "nest");
    int64_t x;
    CHECK(v && v->n == 2 && v->elems && v->elems[0].n == 2 && v->elems[1].n == 1, "nested shape");
    CHECK(v && lz_gguf_arr_int(&v->elems[0], 1, &x) == 0 && x == 6, "nested value");
    CHECK(v && lz_gguf_arr_int(&v->elems[1], 0, &x) == 0 && x == 7, "nested value 2");
    lz_gguf_close(g);
    /* depth bomb: arrays nested 100 deep */
    n = 0;
    PUT(0x46554747u, 4); PUT(3, 4); PUT(0, 8); PUT(1, 8);
    PUT(1, 8); b[n++] = 'x';
    PUT(LZ_GGUF_ARRAY, 4);
    while (n + 12 < sizeof b) { PUT(LZ_GGUF_ARRAY, 4); PUT(1, 8); }
    expect_reject(b, n, NULL, "deep nesting");
#undef PUT
}

/* Issue #32: an F32 tensor of shape [2^62 + 1] with 4 bytes of data. Its
 * byte size, n * 4, wraps to 4 in 64 bits; the reader must refuse the shape. */
static void test_nbytes_overflow(void)
{
    uint8_t b[128];
    size_t n = 0;
#define PUT(v, sz) do { uint64_t x_ = (uint64_t)(v); memcpy(b + n, &x_, sz); n += sz; } while (0)
    PUT(0x46554747u, 4); PUT(3, 4); PUT(1, 8); PUT(0, 8); /* 1 tensor, 0 keys */
    PUT(1, 8); b[n++] = 'w';                               /* name "w" */
    PUT(1, 4); PUT(((uint64_t)1 << 62) + 1, 8);            /* 1 dim: 2^62 + 1 */
    PUT(LZ_GGML_F32, 4); PUT(0, 8);                        /* F32 at offset 0 */
    while (n % 32) b[n++] = 0;                             /* data section, aligned */
    PUT(0x3f800000u, 4);                                   /* 4 bytes of data */
#undef PUT
    CHECK(lz_ggml_nbytes(LZ_GGML_F32, ((int64_t)1 << 62) + 1) == 0, "nbytes of 2^62+1 F32 does not wrap");
    CHECK(lz_ggml_nbytes(LZ_GGML_F32, INT64_MAX) == 0, "nbytes of INT64_MAX F32 does not wrap");
    CHECK(lz_ggml_nbytes(LZ_GGML_F32, 8) == 32, "nbytes of 8 F32");
    expect_reject(b, n, "overflows", "F32 shape [2^62 + 1] with 4 bytes of data");
}

/* fuzz/fuzz_model.c's find: a tiny model whose block_count says 2^26 + 1
 * layers made the loader allocate 8.6 GB for their table before looking
 * for their tensors; it must be refused at once, naming the key and file. */
static void test_block_count_bomb(const char *dir)
{
    char path[512], err[1024] = "";
    snprintf(path, sizeof path, "%s/bomb.gguf", dir);
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    CHECK(lz_mkmodel_write(&o, path, err, sizeof err) == 0, "mkmodel: %s", err);
    size_t n;
    uint8_t *buf = read_file(path, &n);
    CHECK(buf != NULL, "read back");
    if (!buf) return;
    static const char key[] = "llama.block_count";
    size_t at = 0;
    for (size_t i = 0; i + sizeof key + 4 < n && !at; i++)
        if (!memcmp(buf + i, key, sizeof key - 1)) at = i + sizeof key - 1;
    uint32_t type = 0;
    if (at) memcpy(&type, buf + at, 4);
    CHECK(at && type == LZ_GGUF_UINT32, "block_count found as a u32");
    if (at && type == LZ_GGUF_UINT32) {
        uint32_t layers = (1u << 26) + 1;
        memcpy(buf + at + 4, &layers, 4);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(buf, 1, n, f) == n, "write %s", path);
        if (f) fclose(f);
        lz_llama *m = NULL;
        int rc = lz_llama_load_gguf(path, &m, err, sizeof err);
        CHECK(rc == LZ_ECORRUPT && !m, "2^26 + 1 layers refused (rc %d)", rc);
        CHECK(strstr(err, "block_count") && strstr(err, "bomb.gguf"), "the refusal names the key and file: %s", err);
        lz_llama_free(m);
    }
    free(buf);
}

static void test_corrupt(const char *dir)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    CHECK(lz_mkmodel_write(&o, path, err, sizeof err) == 0, "mkmodel: %s", err);
    size_t n;
    uint8_t *buf = read_file(path, &n);
    CHECK(buf != NULL, "read back");
    if (!buf) return;
    lz_gguf *g;
    CHECK(lz_gguf_open_buffer(buf, n, "t.gguf", &g, err, sizeof err) == 0, "valid file opens: %s", err);
    /* locate the tensor table: offsets of fields in the copy for targeted damage */
    const lz_gguf_tensor *t0 = lz_gguf_tensor_at(g, 0);
    size_t data_start = (size_t)((const uint8_t *)t0->data - buf) - (size_t)t0->offset;
    lz_gguf_close(g);

    for (int k = 0; k < 16; k++) {
        size_t cut = n * (size_t)k / 16;
        char what[64];
        snprintf(what, sizeof what, "truncated at %d/16", k);
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, buf, cut);
        expect_reject(c, cut, NULL, what); /* exact copy: ASan catches any overread */
        free(c);
    }
    uint8_t *c = malloc(n);
    memcpy(c, buf, n); c[0] = 'X';
    expect_reject(c, n, "bad magic", "bad magic");
    memcpy(c, buf, n); c[4] = 9;
    expect_reject(c, n, "version", "bad version");
    /* absurd key count */
    memcpy(c, buf, n); memset(c + 16, 0xff, 8);
    expect_reject(c, n, "absurd", "huge kv count");
    /* first key's string length past the end */
    memcpy(c, buf, n); memset(c + 24, 0x7f, 8);
    expect_reject(c, n, "past end", "key length past end");
    /* damage the tensor table: find "token_embd.weight" in the header */
    const char *tn = "token_embd.weight";
    size_t at = 0;
    for (size_t i = 0; i + strlen(tn) < data_start; i++)
        if (!memcmp(buf + i, tn, strlen(tn))) { at = i + strlen(tn); break; }
    CHECK(at > 0, "tensor name found");
    if (at) {
        /* layout after name: u32 n_dims, u64 ne[n_dims], u32 type, u64 offset */
        uint32_t nd;
        memcpy(&nd, buf + at, 4);
        size_t type_at = at + 4 + 8 * nd, off_at = type_at + 4;
        memcpy(c, buf, n); { uint32_t t = 77; memcpy(c + type_at, &t, 4); }
        expect_reject(c, n, "type 77", "unknown tensor type");
        memcpy(c, buf, n); { uint64_t off = (uint64_t)n * 4; memcpy(c + off_at, &off, 8); }
        expect_reject(c, n, "past end", "tensor offset past end");
        memcpy(c, buf, n); { uint64_t big = (uint64_t)1 << 40; memcpy(c + at + 4, &big, 8); memcpy(c + at + 12, &big, 8); }
        expect_reject(c, n, "overflow", "dims overflow");
        memcpy(c, buf, n); { uint32_t bad = 9; memcpy(c + at, &bad, 4); }
        expect_reject(c, n, "dimensions", "too many dims");
        memcpy(c, buf, n); { uint64_t off = 3; memcpy(c + off_at, &off, 8); }
        expect_reject(c, n, "aligned", "misaligned offset");
    }
    free(c);
    free(buf);
    /* the CLI reports a corrupt model and exits non-zero */
    const char *bin = getenv("LZ_BIN");
    if (bin) {
        char tpath[600];
        snprintf(tpath, sizeof tpath, "%s/trunc.gguf", dir);
        int rc = lz_test_sh("head -c 1000 %s > %s && %s/lazygen -m %s -n 1 > %s/out.txt 2>&1", path, tpath, bin, tpath, dir);
        CHECK(rc != 0, "lazygen exits non-zero on a truncated model");
        CHECK(lz_test_sh("grep -q 'trunc.gguf' %s/out.txt", dir) == 0, "lazygen names the file");
    }
}

int main(void)
{
    char dir[256];
    if (!lz_test_tmpdir(dir, sizeof dir)) { printf("cannot make temp dir\n"); return 1; }
    test_roundtrip(dir);
    test_nested();
    test_nbytes_overflow();
    test_block_count_bomb(dir);
    test_corrupt(dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return lz_test_done();
}
