/* fuzz_gguf.c - libFuzzer target: a GGUF file from a buffer
 * (lz_gguf_open_buffer), then every key and tensor read back through the
 * public getters. Invariants beside the sanitizers: a tensor the reader
 * accepts lies inside the buffer, its element count is the product of its
 * dimensions and its byte count is that count times the type's size (no
 * wrap: issue #32's [2^62 + 1] F32 tensor), and a small one dequantizes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "fuzz/fuzz_common.h"

/* Reads one metadata value through the getters (arrays: a few elements). */
static void read_value(const lz_gguf_value *v)
{
    if (v->type != LZ_GGUF_ARRAY) return;
    uint64_t n = v->n < 8 ? v->n : 8;
    for (uint64_t i = 0; i < n; i++) {
        int64_t iv;
        double fv;
        const char *s;
        size_t len;
        lz_gguf_arr_int(v, i, &iv);
        lz_gguf_arr_float(v, i, &fv);
        if (lz_gguf_arr_str(v, i, &s, &len) == 0 && len) FUZZ_CHECK(s != NULL, "string element %llu", (unsigned long long)i);
        if (v->elems) read_value(&v->elems[i]);
    }
}

/* Bytes of one element of a GGUF tensor type, as a fraction num/den (Q8_0: 34 bytes per 32). */
static int type_ratio(uint32_t t, uint64_t *num, uint64_t *den)
{
    switch (t) {
    case LZ_GGML_F32: *num = 4; *den = 1; return 1;
    case LZ_GGML_F16: case LZ_GGML_BF16: *num = 2; *den = 1; return 1;
    case LZ_GGML_Q8_0: *num = 34; *den = 32; return 1;
    default: return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy: ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    lz_gguf *g = NULL;
    char err[512];
    if (lz_gguf_open_buffer(buf, size, "fuzz.gguf", &g, err, sizeof err) == 0) {
        for (int64_t i = 0; i < lz_gguf_n_kv(g); i++) {
            const lz_gguf_kv *kv = lz_gguf_kv_at(g, i);
            FUZZ_CHECK(kv && kv->key, "key %lld", (long long)i);
            int64_t iv;
            double fv;
            const char *s;
            size_t len;
            lz_gguf_get_int(g, kv->key, &iv);
            lz_gguf_get_float(g, kv->key, &fv);
            lz_gguf_get_str(g, kv->key, &s, &len);
            read_value(&kv->value);
        }
        for (int64_t i = 0; i < lz_gguf_n_tensors(g); i++) {
            const lz_gguf_tensor *t = lz_gguf_tensor_at(g, i);
            FUZZ_CHECK(t && t->name, "tensor %lld", (long long)i);
            unsigned __int128 prod = 1;
            for (int d = 0; d < t->n_dims; d++) prod *= (unsigned __int128)(uint64_t)t->ne[d];
            FUZZ_CHECK(prod == (unsigned __int128)(uint64_t)t->n_elements, "tensor '%s': n_elements %lld is not the "
                       "product of its dimensions", t->name, (long long)t->n_elements);
            uint64_t num, den;
            FUZZ_CHECK(type_ratio(t->type, &num, &den), "tensor '%s': accepted type %u", t->name, t->type);
            unsigned __int128 want = (unsigned __int128)(uint64_t)t->n_elements * num / den;
            FUZZ_CHECK(want == t->nbytes, "tensor '%s': %zu bytes for %lld elements of type %u", t->name, t->nbytes,
                       (long long)t->n_elements, t->type);
            const uint8_t *p = t->data;
            FUZZ_CHECK(p >= buf && p <= buf + size && t->nbytes <= (size_t)(buf + size - p),
                       "tensor '%s': data outside the buffer", t->name);
            if (t->n_elements <= 4096) {
                float *out = malloc(sizeof(float) * (size_t)(t->n_elements ? t->n_elements : 1));
                if (out) FUZZ_CHECK(lz_gguf_tensor_to_f32(t, out) == 0, "tensor '%s': dequantize", t->name);
                free(out);
            }
            FUZZ_CHECK(lz_gguf_find_tensor(g, t->name) != NULL, "tensor '%s' not found by name", t->name);
        }
        lz_gguf_close(g);
    } else {
        FUZZ_CHECK(err[0] && strstr(err, "fuzz.gguf"), "a refusal names the file: '%s'", err);
    }
    free(buf);
    return 0;
}
