/* gguf_write.c - GGUF v3 writer (see gguf_write.h). Metadata is serialised
 * into a growing buffer as it is added; tensors are converted to their type
 * at once and laid out with 32-byte alignment at save. */
#include "formats/gguf_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/half.h"

#define ALIGN 32

typedef struct { uint8_t *p; size_t n, cap; } buf;

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[LZ_GGUF_MAX_DIMS];
    uint8_t *data;
    size_t nbytes;
} wtensor;

struct lz_gguf_writer {
    buf kv;
    uint64_t n_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int oom;
};

static int put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}

static int put_str(buf *b, const char *s)
{
    uint64_t n = strlen(s);
    return put(b, &n, 8) || put(b, s, n) ? -1 : 0;
}

static int put_key(lz_gguf_writer *w, const char *key, uint32_t type)
{
    w->n_kv++;
    return put_str(&w->kv, key) || put(&w->kv, &type, 4) ? -1 : 0;
}

lz_gguf_writer *lz_gguf_writer_new(void) { return calloc(1, sizeof(lz_gguf_writer)); }

void lz_gguf_writer_free(lz_gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) { free(w->t[i].name); free(w->t[i].data); }
    free(w->t);
    free(w->kv.p);
    free(w);
}

int lz_gguf_write_u32(lz_gguf_writer *w, const char *key, uint32_t v)
{
    return put_key(w, key, LZ_GGUF_UINT32) || put(&w->kv, &v, 4) ? -1 : 0;
}
int lz_gguf_write_i32(lz_gguf_writer *w, const char *key, int32_t v)
{
    return put_key(w, key, LZ_GGUF_INT32) || put(&w->kv, &v, 4) ? -1 : 0;
}
int lz_gguf_write_f32(lz_gguf_writer *w, const char *key, float v)
{
    return put_key(w, key, LZ_GGUF_FLOAT32) || put(&w->kv, &v, 4) ? -1 : 0;
}
int lz_gguf_write_bool(lz_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v ? 1 : 0;
    return put_key(w, key, LZ_GGUF_BOOL) || put(&w->kv, &b, 1) ? -1 : 0;
}
int lz_gguf_write_str(lz_gguf_writer *w, const char *key, const char *v)
{
    return put_key(w, key, LZ_GGUF_STRING) || put_str(&w->kv, v) ? -1 : 0;
}

int lz_gguf_write_arr(lz_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n)
{
    size_t es = lz_gguf_type_size(elem_type);
    if (!es) return -1;
    return put_key(w, key, LZ_GGUF_ARRAY) || put(&w->kv, &elem_type, 4) || put(&w->kv, &n, 8) ||
                   put(&w->kv, data, es * n)
               ? -1 : 0;
}

int lz_gguf_write_arr_str(lz_gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    uint32_t t = LZ_GGUF_STRING;
    if (put_key(w, key, LZ_GGUF_ARRAY) || put(&w->kv, &t, 4) || put(&w->kv, &n, 8)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (put_str(&w->kv, strs[i])) return -1;
    return 0;
}

static void quantize_q8_0(uint8_t *out, const float *x, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) {
        const float *v = x + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t h = lz_f32_to_f16(d);
        memcpy(out + b * 34, &h, 2);
        for (int j = 0; j < 32; j++) out[b * 34 + 2 + j] = (uint8_t)(int8_t)roundf(v[j] * id);
    }
}

int lz_gguf_write_tensor(lz_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                         const int64_t *ne, const float *data)
{
    if (n_dims < 1 || n_dims > LZ_GGUF_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= ne[d];
    size_t nbytes = lz_ggml_nbytes(type, n);
    if (!nbytes || (type == LZ_GGML_Q8_0 && ne[0] % 32)) return -1; /* Q8_0 rows are whole blocks (the reader's rule) */
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return -1;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->data = malloc(nbytes);
    if (!t->name || !t->data) { free(t->name); free(t->data); return -1; }
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < LZ_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    switch (type) {
    case LZ_GGML_F32: memcpy(t->data, data, nbytes); break;
    case LZ_GGML_F16:
        for (int64_t i = 0; i < n; i++) { uint16_t h = lz_f32_to_f16(data[i]); memcpy(t->data + 2 * i, &h, 2); }
        break;
    case LZ_GGML_BF16:
        for (int64_t i = 0; i < n; i++) { uint16_t h = lz_f32_to_bf16(data[i]); memcpy(t->data + 2 * i, &h, 2); }
        break;
    case LZ_GGML_Q8_0: quantize_q8_0(t->data, data, n); break;
    }
    w->n_t++;
    return 0;
}

int lz_gguf_writer_save(lz_gguf_writer *w, const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) { snprintf(err, errlen, "%s: %s", tmp, strerror(errno)); return -1; }
    buf hdr = {0};
    uint32_t magic = 0x46554747u, version = 3;
    uint64_t nt = w->n_t;
    int bad = put(&hdr, &magic, 4) || put(&hdr, &version, 4) || put(&hdr, &nt, 8) || put(&hdr, &w->n_kv, 8) ||
              put(&hdr, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t && !bad; i++) {
        wtensor *t = &w->t[i];
        uint32_t nd = (uint32_t)t->n_dims;
        bad |= put_str(&hdr, t->name) || put(&hdr, &nd, 4);
        for (int d = 0; d < t->n_dims; d++) bad |= put(&hdr, &t->ne[d], 8);
        bad |= put(&hdr, &t->type, 4) || put(&hdr, &off, 8);
        off += (t->nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    static const uint8_t zeros[ALIGN];
    size_t pad = (ALIGN - hdr.n % ALIGN) % ALIGN;
    bad |= put(&hdr, zeros, pad);
    if (!bad) bad = fwrite(hdr.p, 1, hdr.n, f) != hdr.n;
    for (size_t i = 0; i < w->n_t && !bad; i++) {
        size_t tp = (ALIGN - w->t[i].nbytes % ALIGN) % ALIGN;
        bad = fwrite(w->t[i].data, 1, w->t[i].nbytes, f) != w->t[i].nbytes || fwrite(zeros, 1, tp, f) != tp;
    }
    free(hdr.p);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
