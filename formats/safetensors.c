/* safetensors.c - safetensors reader over mmap, shard sets from an index
 * file, fp32 conversion and a small writer (see safetensors.h). The header
 * JSON is parsed with jansson; every tensor is validated at open. */
#include "formats/safetensors.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/half.h"

#define ST_MAX_HEADER (256u << 20) /* 256 MiB of JSON is far beyond any real model */

struct lz_safetensors {
    char *path;
    const uint8_t *base;  /* mapping of the whole file */
    size_t size;
    lz_st_tensor *tensors; /* sorted by name */
    int64_t n;
};

struct lz_st_set {
    lz_safetensors **files;
    int n_files;
};

static const struct { const char *name; size_t size; } dtypes[LZ_ST_DTYPE_COUNT] = {
    [LZ_ST_F32] = {"F32", 4},   [LZ_ST_F16] = {"F16", 2},   [LZ_ST_BF16] = {"BF16", 2},
    [LZ_ST_F64] = {"F64", 8},   [LZ_ST_I64] = {"I64", 8},   [LZ_ST_I32] = {"I32", 4},
    [LZ_ST_I16] = {"I16", 2},   [LZ_ST_I8] = {"I8", 1},     [LZ_ST_U64] = {"U64", 8},
    [LZ_ST_U32] = {"U32", 4},   [LZ_ST_U16] = {"U16", 2},   [LZ_ST_U8] = {"U8", 1},
    [LZ_ST_BOOL] = {"BOOL", 1}, [LZ_ST_F8_E4M3] = {"F8_E4M3", 1}, [LZ_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *lz_st_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < LZ_ST_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

size_t lz_st_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < LZ_ST_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

static int dtype_from_name(const char *s)
{
    for (int i = 0; i < LZ_ST_DTYPE_COUNT; i++)
        if (!strcmp(s, dtypes[i].name)) return i;
    return -1;
}

void lz_st_close(lz_safetensors *f)
{
    if (!f) return;
    for (int64_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    if (f->base) munmap((void *)f->base, f->size);
    free(f->path);
    free(f);
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const lz_st_tensor *)a)->name, ((const lz_st_tensor *)b)->name);
}

/* Validates one header entry and fills t. data_size is the data section's length. */
static int parse_entry(lz_safetensors *f, const char *name, json_t *e, const uint8_t *data, uint64_t data_size,
                       lz_st_tensor *t, char *err, size_t errlen)
{
    const char *p = f->path;
    if (!json_is_object(e)) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': header entry is not an object", p, name);
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"), *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd)) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': 'dtype' is missing or not a string", p, name);
    int dt = dtype_from_name(json_string_value(jd));
    if (dt < 0)
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': unknown dtype '%s'", p, name, json_string_value(jd));
    if (!json_is_array(js) || json_array_size(js) > LZ_ST_MAX_DIMS)
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': 'shape' is missing, not an array or has more than %d dims",
                    p, name, LZ_ST_MAX_DIMS);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': 'data_offsets' must be [begin, end]", p, name);
    t->dtype = dt;
    t->n_dims = (int)json_array_size(js);
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) {
        json_t *v = json_array_get(js, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((json_int_t)1 << 40))
            return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': shape[%d] is not a valid size", p, name, d);
        t->shape[d] = (int64_t)json_integer_value(v);
        if (t->shape[d] && n > ((uint64_t)1 << 50) / (uint64_t)t->shape[d])
            return lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s': shape is too large", p, name);
        n *= (uint64_t)t->shape[d];
    }
    json_int_t b = json_integer_value(json_array_get(jo, 0)), en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < b || (uint64_t)en > data_size)
        return lz_fail(err, errlen, LZ_ECORRUPT,
                    "%s: tensor '%s': data_offsets [%lld, %lld] are outside the data section (%llu bytes)", p, name,
                    (long long)b, (long long)en, (unsigned long long)data_size);
    uint64_t want = n * dtypes[dt].size;
    if ((uint64_t)(en - b) != want)
        return lz_fail(err, errlen, LZ_ECORRUPT,
                    "%s: tensor '%s': data_offsets span %llu bytes but dtype %s x shape needs %llu", p, name,
                    (unsigned long long)(en - b), dtypes[dt].name, (unsigned long long)want);
    t->n_elements = (int64_t)n;
    t->nbytes = want;
    t->data = data + b;
    t->file = f->path;
    t->name = strdup(name);
    if (!t->name) return lz_fail(err, errlen, LZ_ENOMEM, "%s: out of memory", p);
    return 0;
}

static int parse(lz_safetensors *f, char *err, size_t errlen)
{
    const char *p = f->path;
    if (f->size < 8) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: %zu bytes is too short for a safetensors file", p, f->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | f->base[i];
    if (hl > f->size - 8 || hl > ST_MAX_HEADER)
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: header length %llu exceeds the file size (%zu bytes)", p,
                    (unsigned long long)hl, f->size);
    if (hl < 2) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: header length %llu is too short", p, (unsigned long long)hl);
    json_error_t je;
    json_t *root = json_loadb((const char *)f->base + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!root) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: header JSON: %s (byte %d)", p, je.text, je.position);
    int rc = 0;
    if (!json_is_object(root)) { rc = lz_fail(err, errlen, LZ_ECORRUPT, "%s: header is not a JSON object", p); goto done; }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!f->tensors) { rc = lz_fail(err, errlen, LZ_ENOMEM, "%s: out of memory", p); goto done; }
    const uint8_t *data = f->base + 8 + hl;
    uint64_t data_size = f->size - 8 - hl;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        if ((rc = parse_entry(f, key, val, data, data_size, &f->tensors[f->n], err, errlen))) goto done;
        f->n++;
    }
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_tensor);
done:
    json_decref(root);
    return rc;
}

int lz_st_open(const char *path, lz_safetensors **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) { free(f); return lz_fail(err, errlen, LZ_ENOMEM, "%s: out of memory", path); }
    int fd = open(path, O_RDONLY);
    if (fd < 0) { lz_st_close(f); return lz_fail(err, errlen, LZ_EIO, "%s: %s", path, strerror(errno)); }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        lz_st_close(f);
        return lz_fail(err, errlen, LZ_EIO, "%s: not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            lz_st_close(f);
            return lz_fail(err, errlen, LZ_EIO, "%s: mmap: %s", path, strerror(e));
        }
        f->base = m;
    }
    close(fd);
    int rc = parse(f, err, errlen);
    if (rc) { lz_st_close(f); return rc; }
    *out = f;
    return 0;
}

int64_t lz_st_n_tensors(const lz_safetensors *f) { return f->n; }

const lz_st_tensor *lz_st_tensor_at(const lz_safetensors *f, int64_t i)
{
    return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

const lz_st_tensor *lz_st_find(const lz_safetensors *f, const char *name)
{
    lz_st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_tensor);
}

void lz_st_set_close(lz_st_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) lz_st_close(s->files[i]);
    free(s->files);
    free(s);
}

int lz_st_set_n_files(const lz_st_set *s) { return s->n_files; }

const lz_st_tensor *lz_st_set_find(const lz_st_set *s, const char *name)
{
    for (int i = 0; i < s->n_files; i++) {
        const lz_st_tensor *t = lz_st_find(s->files[i], name);
        if (t) return t;
    }
    return NULL;
}

static int set_add(lz_st_set *s, const char *path, char *err, size_t errlen)
{
    lz_safetensors **fs = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *fs);
    if (!fs) return lz_fail(err, errlen, LZ_ENOMEM, "%s: out of memory", path);
    s->files = fs;
    int rc = lz_st_open(path, &s->files[s->n_files], err, errlen);
    if (rc) return rc;
    s->n_files++;
    return 0;
}

/* Opens the shards named by an index file and checks its weight_map. */
static int open_index(lz_st_set *s, const char *dir, const char *index, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(index, 0, &je);
    if (!root) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: %s (line %d)", index, je.text, je.line);
    int rc = 0;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        rc = lz_fail(err, errlen, LZ_ECORRUPT, "%s: 'weight_map' is missing or empty", index);
        goto done;
    }
    const char *name;
    json_t *v;
    /* open every distinct shard once, in order of first mention */
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v)) { rc = lz_fail(err, errlen, LZ_ECORRUPT, "%s: weight_map['%s'] is not a string", index, name); goto done; }
        const char *shard = json_string_value(v);
        if (!shard[0] || strchr(shard, '/') || !strcmp(shard, "..")) {
            rc = lz_fail(err, errlen, LZ_ECORRUPT, "%s: weight_map['%s'] = '%s' is not a file name in the folder", index, name, shard);
            goto done;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, shard);
        int seen = 0;
        for (int i = 0; i < s->n_files && !seen; i++) seen = !strcmp(s->files[i]->path, path);
        if (!seen && (rc = set_add(s, path, err, errlen))) goto done;
    }
    json_object_foreach(wm, name, v) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
        int found = 0;
        for (int i = 0; i < s->n_files; i++) {
            if (!lz_st_find(s->files[i], name)) continue;
            if (strcmp(s->files[i]->path, path)) {
                rc = lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s' is in %s, but the index says %s", index, name,
                          s->files[i]->path, path);
                goto done;
            }
            found = 1;
        }
        if (!found) {
            rc = lz_fail(err, errlen, LZ_ECORRUPT, "%s: tensor '%s' is listed but missing from %s", index, name, path);
            goto done;
        }
    }
    /* a tensor present in two shards would make lookups ambiguous */
    for (int i = 0; i < s->n_files; i++)
        for (int64_t k = 0; k < s->files[i]->n; k++)
            for (int j = i + 1; j < s->n_files; j++)
                if (lz_st_find(s->files[j], s->files[i]->tensors[k].name)) {
                    rc = lz_fail(err, errlen, LZ_ECORRUPT, "tensor '%s' is in both %s and %s", s->files[i]->tensors[k].name,
                              s->files[i]->path, s->files[j]->path);
                    goto done;
                }
done:
    json_decref(root);
    return rc;
}

int lz_st_set_open_dir(const char *dir, lz_st_set **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_st_set *s = calloc(1, sizeof *s);
    if (!s) return lz_fail(err, errlen, LZ_ENOMEM, "%s: out of memory", dir);
    char single[4096], index[4096];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    int rc;
    if (access(single, F_OK) == 0)
        rc = set_add(s, single, err, errlen);
    else if (access(index, F_OK) == 0)
        rc = open_index(s, dir, index, err, errlen);
    else
        rc = lz_fail(err, errlen, LZ_EIO, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
    if (rc) { lz_st_set_close(s); return rc; }
    *out = s;
    return 0;
}

int lz_st_to_f32(const lz_st_tensor *t, float *out)
{
    const uint8_t *p = t->data;
    int64_t n = t->n_elements;
    switch (t->dtype) {
    case LZ_ST_F32:
        memcpy(out, p, (size_t)n * 4);
        return 0;
    case LZ_ST_F16:
        for (int64_t i = 0; i < n; i++) out[i] = lz_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case LZ_ST_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = lz_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    default:
        return LZ_EUNSUPPORTED;
    }
}

int lz_st_write(const char *path, const lz_st_out *ts, int n, char *err, size_t errlen)
{
    json_t *root = json_object();
    char *hdr = NULL;
    FILE *fp = NULL;
    int rc = -1;
    if (!root) { lz_fail(err, errlen, 0, "out of memory"); goto done; }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t es = lz_st_dtype_size(ts[i].dtype);
        if (!es || ts[i].n_dims < 0 || ts[i].n_dims > LZ_ST_MAX_DIMS) {
            lz_fail(err, errlen, 0, "%s: tensor '%s': bad dtype or rank", path, ts[i].name);
            goto done;
        }
        uint64_t ne = 1;
        json_t *shape = json_array();
        for (int d = 0; d < ts[i].n_dims; d++) {
            ne *= (uint64_t)ts[i].shape[d];
            json_array_append_new(shape, json_integer(ts[i].shape[d]));
        }
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(lz_st_dtype_name(ts[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + ne * es)));
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, ts[i].name, e)) { lz_fail(err, errlen, 0, "out of memory"); goto done; }
        off += ne * es;
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!hdr) { lz_fail(err, errlen, 0, "out of memory"); goto done; }
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    fp = fopen(path, "wb");
    if (!fp) { lz_fail(err, errlen, 0, "%s: %s", path, strerror(errno)); goto done; }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = fwrite(len8, 1, 8, fp) != 8 || fwrite(hdr, 1, hl, fp) != hl;
    for (size_t i = hl; i < padded; i++) bad |= fputc(' ', fp) == EOF;
    for (int i = 0; i < n && !bad; i++) {
        uint64_t ne = 1;
        for (int d = 0; d < ts[i].n_dims; d++) ne *= (uint64_t)ts[i].shape[d];
        size_t nb = (size_t)(ne * lz_st_dtype_size(ts[i].dtype));
        bad |= nb && fwrite(ts[i].data, 1, nb, fp) != nb;
    }
    if (fclose(fp) != 0) bad = 1;
    fp = NULL;
    if (bad) { lz_fail(err, errlen, 0, "%s: write failed: %s", path, strerror(errno)); goto done; }
    rc = 0;
done:
    if (fp) fclose(fp);
    free(hdr);
    json_decref(root);
    return rc;
}
