/* gguf.h - read-only GGUF v2/v3 reader over mmap.
 *
 * Parses the header, every metadata key (all 13 value types, nested arrays)
 * and the tensor table, and checks every length, offset and dimension against
 * the file size before anything is read: a corrupt or truncated file gets an
 * error naming the key or tensor and the byte offset, never an out-of-bounds
 * read. Tensor data stays in the mapping; lz_gguf_tensor_to_f32 dequantizes
 * F32, F16, BF16 and Q8_0. Writing GGUF lives in gguf_write.h.
 */
#ifndef LZ_GGUF_H
#define LZ_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "base/status.h"

typedef enum {
    LZ_GGUF_UINT8 = 0, LZ_GGUF_INT8 = 1, LZ_GGUF_UINT16 = 2, LZ_GGUF_INT16 = 3,
    LZ_GGUF_UINT32 = 4, LZ_GGUF_INT32 = 5, LZ_GGUF_FLOAT32 = 6, LZ_GGUF_BOOL = 7,
    LZ_GGUF_STRING = 8, LZ_GGUF_ARRAY = 9, LZ_GGUF_UINT64 = 10, LZ_GGUF_INT64 = 11,
    LZ_GGUF_FLOAT64 = 12,
    LZ_GGUF_TYPE_COUNT = 13
} lz_gguf_type;

/* ggml tensor types this project reads or writes. */
typedef enum {
    LZ_GGML_F32 = 0, LZ_GGML_F16 = 1, LZ_GGML_Q8_0 = 8, LZ_GGML_BF16 = 30
} lz_ggml_type;

#define LZ_GGUF_MAX_DIMS 4

/* One metadata value. Scalars are decoded into num; strings point into the
 * mapping (NOT NUL-terminated: use len); arrays of scalars point at their raw
 * little-endian elements; arrays of strings or arrays have parsed elems. */
typedef struct lz_gguf_value {
    uint32_t type;                     /* lz_gguf_type */
    uint32_t elem_type;                /* element type when type == ARRAY */
    uint64_t n;                        /* ARRAY: element count; STRING: byte length */
    const uint8_t *data;               /* STRING bytes, or ARRAY raw elements */
    const struct lz_gguf_value *elems; /* ARRAY of STRING/ARRAY: n parsed values, else NULL */
    union { uint64_t u; int64_t i; double f; } num; /* scalars (bool as u) */
} lz_gguf_value;

typedef struct {
    const char *key; /* NUL-terminated copy */
    lz_gguf_value value;
} lz_gguf_kv;

typedef struct {
    const char *name;            /* NUL-terminated copy */
    uint32_t type;               /* lz_ggml_type */
    int n_dims;
    int64_t ne[LZ_GGUF_MAX_DIMS];/* ne[0] is the fastest-varying (row length) */
    int64_t n_elements;
    uint64_t offset;             /* relative to the data section */
    const void *data;            /* inside the mapping */
    size_t nbytes;
} lz_gguf_tensor;

typedef struct lz_gguf lz_gguf;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

/* Opens and validates path. On failure returns a status and writes a message
 * naming the file, the key or tensor and the offset into err. */
int lz_gguf_open(const char *path, lz_gguf **out, char *err, size_t errlen);
/* Same over a caller-owned buffer (kept, not copied); name is used in errors. */
int lz_gguf_open_buffer(const void *buf, size_t size, const char *name, lz_gguf **out,
                        char *err, size_t errlen);
void lz_gguf_close(lz_gguf *g); /* NULL is a no-op */

uint32_t lz_gguf_version(const lz_gguf *g);
uint64_t lz_gguf_file_size(const lz_gguf *g);
int64_t lz_gguf_n_kv(const lz_gguf *g);
const lz_gguf_kv *lz_gguf_kv_at(const lz_gguf *g, int64_t i);
const lz_gguf_value *lz_gguf_get(const lz_gguf *g, const char *key); /* NULL if absent */

/* Typed getters: return LZ_ENOTFOUND when absent, LZ_ETYPE when the
 * value is not convertible (any integer type to int64, any number to double). */
int lz_gguf_get_int(const lz_gguf *g, const char *key, int64_t *out);
int lz_gguf_get_float(const lz_gguf *g, const char *key, double *out);
int lz_gguf_get_str(const lz_gguf *g, const char *key, const char **s, size_t *len);
/* Array element as integer/double (numeric arrays), or string element. */
int lz_gguf_arr_int(const lz_gguf_value *arr, uint64_t i, int64_t *out);
int lz_gguf_arr_float(const lz_gguf_value *arr, uint64_t i, double *out);
int lz_gguf_arr_str(const lz_gguf_value *arr, uint64_t i, const char **s, size_t *len);

int64_t lz_gguf_n_tensors(const lz_gguf *g);
const lz_gguf_tensor *lz_gguf_tensor_at(const lz_gguf *g, int64_t i);
const lz_gguf_tensor *lz_gguf_find_tensor(const lz_gguf *g, const char *name);

/* Dequantizes t into out[t->n_elements]. Returns LZ_EUNSUPPORTED for
 * other types. */
int lz_gguf_tensor_to_f32(const lz_gguf_tensor *t, float *out);
const char *lz_ggml_type_name(uint32_t type);
/* Bytes of n elements of a (supported) type; 0 if unsupported, n not a
 * multiple of the block size, or the byte count past SIZE_MAX. */
size_t lz_ggml_nbytes(uint32_t type, int64_t n);
/* Bytes of one scalar metadata value of type t (lz_gguf_type); 0 for
 * STRING, ARRAY and unknown types. */
size_t lz_gguf_type_size(uint32_t t);

#endif /* LZ_GGUF_H */
