/* gguf.c - GGUF v2/v3 reader over mmap (see gguf.h).
 *
 * A cursor walks the file; every read checks the remaining length first, so
 * a truncated or corrupt file yields an error (key or tensor name, byte
 * offset) and never an out-of-bounds read. Nesting of arrays is capped.
 */
#include "formats/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/half.h"
#include "formats/weights.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DEPTH 8

struct lz_gguf {
    const uint8_t *base;
    size_t size;
    int mapped;
    uint32_t version;
    int64_t n_kv, n_tensors;
    lz_gguf_kv *kvs;
    lz_gguf_tensor *tensors;
    /* every allocation the parse made (names, element tables) */
    void **allocs;
    size_t n_allocs, cap_allocs;
    size_t alignment;
    uint64_t data_offset;
};

typedef struct {
    lz_gguf *g;
    size_t pos;
    const char *name; /* file name for errors */
    char *err;
    size_t errlen;
    char what[160];   /* what is being parsed: key or tensor name */
} cursor;

static int fail(cursor *c, int status, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->err && c->errlen)
        snprintf(c->err, c->errlen, "%s: %s%s%s at offset %zu", c->name, c->what[0] ? c->what : "",
                 c->what[0] ? ": " : "", msg, c->pos);
    return status;
}

static void *track(lz_gguf *g, void *p)
{
    if (!p) return NULL;
    if (g->n_allocs == g->cap_allocs) {
        size_t cap = g->cap_allocs ? g->cap_allocs * 2 : 64;
        void **a = realloc(g->allocs, cap * sizeof *a);
        if (!a) { free(p); return NULL; }
        g->allocs = a;
        g->cap_allocs = cap;
    }
    g->allocs[g->n_allocs++] = p;
    return p;
}

static int need(cursor *c, uint64_t n)
{
    if (n > c->g->size - c->pos) return fail(c, LZ_ECORRUPT, "needs %llu bytes, %zu left (truncated?)",
                                             (unsigned long long)n, c->g->size - c->pos);
    return 0;
}

static int rd(cursor *c, void *out, size_t n)
{
    int rc = need(c, n);
    if (rc) return rc;
    memcpy(out, c->g->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v) { return rd(c, v, 4); }
static int rd_u64(cursor *c, uint64_t *v) { return rd(c, v, 8); }

/* String: u64 length + bytes; returns a pointer into the mapping. */
static int rd_str(cursor *c, const uint8_t **s, uint64_t *len)
{
    int rc = rd_u64(c, len);
    if (rc) return rc;
    if (*len > c->g->size - c->pos)
        return fail(c, LZ_ECORRUPT, "string length %llu past end of file", (unsigned long long)*len);
    *s = c->g->base + c->pos;
    c->pos += *len;
    return 0;
}

static char *dup_str(lz_gguf *g, const uint8_t *s, uint64_t len)
{
    char *p = malloc(len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = 0;
    return track(g, p);
}

size_t lz_gguf_type_size(uint32_t t)
{
    switch (t) {
    case LZ_GGUF_UINT8: case LZ_GGUF_INT8: case LZ_GGUF_BOOL: return 1;
    case LZ_GGUF_UINT16: case LZ_GGUF_INT16: return 2;
    case LZ_GGUF_UINT32: case LZ_GGUF_INT32: case LZ_GGUF_FLOAT32: return 4;
    case LZ_GGUF_UINT64: case LZ_GGUF_INT64: case LZ_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Decodes a scalar of type t at p into v->num. */
static void decode_scalar(uint32_t t, const uint8_t *p, lz_gguf_value *v)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
            uint64_t u64; int64_t i64; double f64; } x;
    memcpy(&x, p, lz_gguf_type_size(t));
    switch (t) {
    case LZ_GGUF_UINT8: case LZ_GGUF_BOOL: v->num.u = x.u8; break;
    case LZ_GGUF_INT8: v->num.i = x.i8; break;
    case LZ_GGUF_UINT16: v->num.u = x.u16; break;
    case LZ_GGUF_INT16: v->num.i = x.i16; break;
    case LZ_GGUF_UINT32: v->num.u = x.u32; break;
    case LZ_GGUF_INT32: v->num.i = x.i32; break;
    case LZ_GGUF_FLOAT32: v->num.f = x.f32; break;
    case LZ_GGUF_UINT64: v->num.u = x.u64; break;
    case LZ_GGUF_INT64: v->num.i = x.i64; break;
    case LZ_GGUF_FLOAT64: v->num.f = x.f64; break;
    }
}

static int rd_value(cursor *c, uint32_t type, lz_gguf_value *v, int depth)
{
    int rc;
    memset(v, 0, sizeof *v);
    v->type = type;
    if (type >= LZ_GGUF_TYPE_COUNT) return fail(c, LZ_ECORRUPT, "unknown value type %u", type);
    if (type == LZ_GGUF_STRING) return rd_str(c, &v->data, &v->n);
    if (type != LZ_GGUF_ARRAY) {
        size_t n = lz_gguf_type_size(type);
        if ((rc = need(c, n))) return rc;
        v->data = c->g->base + c->pos;
        decode_scalar(type, v->data, v);
        c->pos += n;
        return 0;
    }
    if (depth >= GGUF_MAX_DEPTH) return fail(c, LZ_ECORRUPT, "arrays nested deeper than %d", GGUF_MAX_DEPTH);
    if ((rc = rd_u32(c, &v->elem_type)) || (rc = rd_u64(c, &v->n))) return rc;
    if (v->elem_type >= LZ_GGUF_TYPE_COUNT)
        return fail(c, LZ_ECORRUPT, "unknown array element type %u", v->elem_type);
    v->data = c->g->base + c->pos;
    size_t es = lz_gguf_type_size(v->elem_type);
    if (es) {
        if (v->n > (c->g->size - c->pos) / es)
            return fail(c, LZ_ECORRUPT, "array of %llu elements past end of file", (unsigned long long)v->n);
        c->pos += v->n * es;
        return 0;
    }
    /* strings or nested arrays: each element takes at least 8 bytes */
    if (v->n > (c->g->size - c->pos) / 8)
        return fail(c, LZ_ECORRUPT, "array of %llu elements past end of file", (unsigned long long)v->n);
    lz_gguf_value *elems = track(c->g, calloc(v->n ? v->n : 1, sizeof *elems));
    if (!elems) return fail(c, LZ_ENOMEM, "out of memory for %llu array elements", (unsigned long long)v->n);
    for (uint64_t i = 0; i < v->n; i++) {
        uint32_t et = v->elem_type;
        if (et == LZ_GGUF_ARRAY) {
            /* nested array: element header is its own type + count */
            if ((rc = rd_value(c, LZ_GGUF_ARRAY, &elems[i], depth + 1))) return rc;
        } else if ((rc = rd_value(c, et, &elems[i], depth + 1))) {
            return rc;
        }
    }
    v->elems = elems;
    return 0;
}

size_t lz_ggml_nbytes(uint32_t type, int64_t n)
{
    if (n < 0) return 0;
    /* n * size must not wrap: a shape of 2^62 + 1 F32 elements would give 4 */
    switch (type) {
    case LZ_GGML_F32: return (uint64_t)n > SIZE_MAX / 4 ? 0 : (size_t)n * 4;
    case LZ_GGML_F16: case LZ_GGML_BF16: return (uint64_t)n > SIZE_MAX / 2 ? 0 : (size_t)n * 2;
    case LZ_GGML_Q8_0: return n % 32 || (uint64_t)(n / 32) > SIZE_MAX / 34 ? 0 : (size_t)(n / 32) * 34;
    default: return 0;
    }
}

/* Whether type is one lz_ggml_nbytes knows (so that its 0 means overflow or a partial block). */
static int ggml_type_known(uint32_t type)
{
    return type == LZ_GGML_F32 || type == LZ_GGML_F16 || type == LZ_GGML_BF16 || type == LZ_GGML_Q8_0;
}

const char *lz_ggml_type_name(uint32_t type)
{
    switch (type) {
    case LZ_GGML_F32: return "F32";
    case LZ_GGML_F16: return "F16";
    case LZ_GGML_Q8_0: return "Q8_0";
    case LZ_GGML_BF16: return "BF16";
    default: return "unsupported";
    }
}

static int parse(lz_gguf *g, const char *name, char *err, size_t errlen)
{
    cursor c = {.g = g, .pos = 0, .name = name, .err = err, .errlen = errlen};
    uint32_t magic;
    int rc;
    uint64_t n_tensors, n_kv;
    snprintf(c.what, sizeof c.what, "header");
    if ((rc = rd_u32(&c, &magic))) return rc;
    if (magic != GGUF_MAGIC) { c.pos = 0; return fail(&c, LZ_ECORRUPT, "bad magic 0x%08x (not a GGUF file)", magic); }
    if ((rc = rd_u32(&c, &g->version))) return rc;
    if (g->version < 2 || g->version > 3) {
        c.pos = 4;
        return fail(&c, LZ_EUNSUPPORTED, "unsupported GGUF version %u (2 and 3 are read)", g->version);
    }
    if ((rc = rd_u64(&c, &n_tensors)) || (rc = rd_u64(&c, &n_kv))) return rc;
    /* each kv takes >= 8+1+4 bytes, each tensor >= 8+1+4+4+8 */
    if (n_kv > g->size / 13 || n_tensors > g->size / 25)
        return fail(&c, LZ_ECORRUPT, "absurd counts: %llu keys, %llu tensors for a %zu-byte file",
                    (unsigned long long)n_kv, (unsigned long long)n_tensors, g->size);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kvs = track(g, calloc(n_kv ? n_kv : 1, sizeof *g->kvs));
    g->tensors = track(g, calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors));
    if (!g->kvs || !g->tensors) return fail(&c, LZ_ENOMEM, "out of memory");
    g->alignment = GGUF_DEFAULT_ALIGNMENT;

    for (uint64_t i = 0; i < n_kv; i++) {
        const uint8_t *k;
        uint64_t klen;
        uint32_t type;
        snprintf(c.what, sizeof c.what, "key #%llu", (unsigned long long)i);
        if ((rc = rd_str(&c, &k, &klen))) return rc;
        snprintf(c.what, sizeof c.what, "key '%.*s'", (int)(klen < 100 ? klen : 100), (const char *)k);
        if (!(g->kvs[i].key = dup_str(g, k, klen))) return fail(&c, LZ_ENOMEM, "out of memory");
        if ((rc = rd_u32(&c, &type))) return rc;
        if ((rc = rd_value(&c, type, &g->kvs[i].value, 0))) return rc;
        if (!strcmp(g->kvs[i].key, "general.alignment")) {
            const lz_gguf_value *v = &g->kvs[i].value;
            if (v->type != LZ_GGUF_UINT32 || v->num.u == 0 || (v->num.u & (v->num.u - 1)) || v->num.u > 1u << 20)
                return fail(&c, LZ_ECORRUPT, "alignment must be a u32 power of two");
            g->alignment = v->num.u;
        }
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        lz_gguf_tensor *t = &g->tensors[i];
        const uint8_t *nm;
        uint64_t nlen;
        uint32_t nd;
        snprintf(c.what, sizeof c.what, "tensor #%llu", (unsigned long long)i);
        if ((rc = rd_str(&c, &nm, &nlen))) return rc;
        snprintf(c.what, sizeof c.what, "tensor '%.*s'", (int)(nlen < 100 ? nlen : 100), (const char *)nm);
        if (!(t->name = dup_str(g, nm, nlen))) return fail(&c, LZ_ENOMEM, "out of memory");
        if ((rc = rd_u32(&c, &nd))) return rc;
        if (nd < 1 || nd > LZ_GGUF_MAX_DIMS) return fail(&c, LZ_ECORRUPT, "%u dimensions (1..4 allowed)", nd);
        t->n_dims = (int)nd;
        int64_t ne = 1;
        for (int d = 0; d < LZ_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t x;
            if ((rc = rd_u64(&c, &x))) return rc;
            if (x == 0 || x > (uint64_t)INT64_MAX || (uint64_t)ne > (uint64_t)INT64_MAX / x)
                return fail(&c, LZ_ECORRUPT, "dimension %u = %llu: zero or element count overflows", d,
                            (unsigned long long)x);
            t->ne[d] = (int64_t)x;
            ne *= (int64_t)x;
        }
        t->n_elements = ne;
        if ((rc = rd_u32(&c, &t->type)) || (rc = rd_u64(&c, &t->offset))) return rc;
        t->nbytes = lz_ggml_nbytes(t->type, ne);
        if (t->nbytes == 0) {
            if (t->type == LZ_GGML_Q8_0 && ne % 32)
                return fail(&c, LZ_ECORRUPT, "Q8_0 element count %lld not a multiple of 32", (long long)ne);
            if (ggml_type_known(t->type))
                return fail(&c, LZ_ECORRUPT, "%lld %s elements: byte size overflows", (long long)ne,
                            lz_ggml_type_name(t->type));
            return fail(&c, LZ_EUNSUPPORTED, "tensor type %u (%s) not supported (F32, F16, BF16, Q8_0 are)",
                        t->type, lz_ggml_type_name(t->type));
        }
        if (t->type == LZ_GGML_Q8_0 && t->ne[0] % 32)
            return fail(&c, LZ_ECORRUPT, "Q8_0 row length %lld not a multiple of 32", (long long)t->ne[0]);
    }
    snprintf(c.what, sizeof c.what, "tensor data");
    uint64_t data = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (data > g->size && n_tensors) return fail(&c, LZ_ECORRUPT, "data section starts past end of file");
    g->data_offset = data;
    for (uint64_t i = 0; i < n_tensors; i++) {
        lz_gguf_tensor *t = &g->tensors[i];
        snprintf(c.what, sizeof c.what, "tensor '%s'", t->name);
        if (t->offset % g->alignment) return fail(&c, LZ_ECORRUPT, "data offset %llu not aligned to %zu",
                                                  (unsigned long long)t->offset, g->alignment);
        if (t->offset > g->size - data || t->nbytes > g->size - data - t->offset) {
            c.pos = (size_t)(data + (t->offset < g->size ? t->offset : 0));
            return fail(&c, LZ_ECORRUPT, "data [%llu, +%zu) past end of file (%zu bytes)",
                        (unsigned long long)(data + t->offset), t->nbytes, g->size);
        }
        t->data = g->base + data + t->offset;
    }
    return 0;
}

int lz_gguf_open_buffer(const void *buf, size_t size, const char *name, lz_gguf **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_gguf *g = calloc(1, sizeof *g);
    if (!g) return LZ_ENOMEM;
    g->base = buf;
    g->size = size;
    int rc = parse(g, name ? name : "<buffer>", err, errlen);
    if (rc) { lz_gguf_close(g); return rc; }
    *out = g;
    return 0;
}

int lz_gguf_open(const char *path, lz_gguf **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return LZ_EIO; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return LZ_EIO;
    }
    if (st.st_size < 24) {
        snprintf(err, errlen, "%s: %lld bytes is too short for a GGUF header (24)", path, (long long)st.st_size);
        close(fd);
        return LZ_ECORRUPT;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno)); return LZ_EIO; }
    int rc = lz_gguf_open_buffer(p, (size_t)st.st_size, path, out, err, errlen);
    if (rc) { munmap(p, (size_t)st.st_size); return rc; }
    (*out)->mapped = 1;
    return 0;
}

void lz_gguf_close(lz_gguf *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n_allocs; i++) free(g->allocs[i]);
    free(g->allocs);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g);
}

uint32_t lz_gguf_version(const lz_gguf *g) { return g->version; }
uint64_t lz_gguf_file_size(const lz_gguf *g) { return g->size; }
int64_t lz_gguf_n_kv(const lz_gguf *g) { return g->n_kv; }
const lz_gguf_kv *lz_gguf_kv_at(const lz_gguf *g, int64_t i) { return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL; }
int64_t lz_gguf_n_tensors(const lz_gguf *g) { return g->n_tensors; }
const lz_gguf_tensor *lz_gguf_tensor_at(const lz_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const lz_gguf_value *lz_gguf_get(const lz_gguf *g, const char *key)
{
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kvs[i].key, key)) return &g->kvs[i].value;
    return NULL;
}

const lz_gguf_tensor *lz_gguf_find_tensor(const lz_gguf *g, const char *name)
{
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static int is_int_type(uint32_t t)
{
    return t == LZ_GGUF_UINT8 || t == LZ_GGUF_INT8 || t == LZ_GGUF_UINT16 || t == LZ_GGUF_INT16 ||
           t == LZ_GGUF_UINT32 || t == LZ_GGUF_INT32 || t == LZ_GGUF_UINT64 || t == LZ_GGUF_INT64 ||
           t == LZ_GGUF_BOOL;
}
static int is_signed_type(uint32_t t)
{
    return t == LZ_GGUF_INT8 || t == LZ_GGUF_INT16 || t == LZ_GGUF_INT32 || t == LZ_GGUF_INT64;
}

static int value_int(const lz_gguf_value *v, int64_t *out)
{
    if (!is_int_type(v->type)) return LZ_ETYPE;
    if (!is_signed_type(v->type) && v->num.u > (uint64_t)INT64_MAX) return LZ_ETYPE;
    *out = is_signed_type(v->type) ? v->num.i : (int64_t)v->num.u;
    return 0;
}

static int value_float(const lz_gguf_value *v, double *out)
{
    int64_t i;
    if (v->type == LZ_GGUF_FLOAT32 || v->type == LZ_GGUF_FLOAT64) { *out = v->num.f; return 0; }
    if (value_int(v, &i) == 0) { *out = (double)i; return 0; }
    return LZ_ETYPE;
}

int lz_gguf_get_int(const lz_gguf *g, const char *key, int64_t *out)
{
    const lz_gguf_value *v = lz_gguf_get(g, key);
    return v ? value_int(v, out) : LZ_ENOTFOUND;
}

int lz_gguf_get_float(const lz_gguf *g, const char *key, double *out)
{
    const lz_gguf_value *v = lz_gguf_get(g, key);
    return v ? value_float(v, out) : LZ_ENOTFOUND;
}

int lz_gguf_get_str(const lz_gguf *g, const char *key, const char **s, size_t *len)
{
    const lz_gguf_value *v = lz_gguf_get(g, key);
    if (!v) return LZ_ENOTFOUND;
    if (v->type != LZ_GGUF_STRING) return LZ_ETYPE;
    *s = (const char *)v->data;
    *len = v->n;
    return 0;
}

/* Element i of a numeric array, decoded as a scalar value. */
static int arr_elem(const lz_gguf_value *arr, uint64_t i, lz_gguf_value *e)
{
    if (arr->type != LZ_GGUF_ARRAY || i >= arr->n) return LZ_ENOTFOUND;
    if (arr->elems) { *e = arr->elems[i]; return 0; }
    size_t es = lz_gguf_type_size(arr->elem_type);
    memset(e, 0, sizeof *e);
    e->type = arr->elem_type;
    e->data = arr->data + i * es;
    decode_scalar(arr->elem_type, e->data, e);
    return 0;
}

int lz_gguf_arr_int(const lz_gguf_value *arr, uint64_t i, int64_t *out)
{
    lz_gguf_value e;
    int rc = arr_elem(arr, i, &e);
    return rc ? rc : value_int(&e, out);
}

int lz_gguf_arr_float(const lz_gguf_value *arr, uint64_t i, double *out)
{
    lz_gguf_value e;
    int rc = arr_elem(arr, i, &e);
    return rc ? rc : value_float(&e, out);
}

int lz_gguf_arr_str(const lz_gguf_value *arr, uint64_t i, const char **s, size_t *len)
{
    if (arr->type != LZ_GGUF_ARRAY || i >= arr->n) return LZ_ENOTFOUND;
    if (arr->elem_type != LZ_GGUF_STRING) return LZ_ETYPE;
    *s = (const char *)arr->elems[i].data;
    *len = arr->elems[i].n;
    return 0;
}

int lz_gguf_tensor_to_f32(const lz_gguf_tensor *t, float *out)
{
    const uint8_t *p = t->data;
    int64_t n = t->n_elements;
    switch (t->type) {
    case LZ_GGML_F32:
        memcpy(out, p, (size_t)n * 4);
        return 0;
    case LZ_GGML_F16:
        for (int64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = lz_f16_to_f32(h); }
        return 0;
    case LZ_GGML_BF16:
        for (int64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = lz_bf16_to_f32(h); }
        return 0;
    case LZ_GGML_Q8_0: /* the same dequantization as the engine's in-place Q8_0 rows */
        lz_mat_get_f32((lz_mat){p, LZ_MAT_Q8_0}, 0, (size_t)n, out);
        return 0;
    default:
        return LZ_EUNSUPPORTED;
    }
}

