/* safetensors.h - reads (and, for tests and tools, writes) safetensors files:
 * an 8-byte little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data section. Files are mmapped; tensors point into the mapping.
 * Every offset is checked against the file size and every byte count against
 * dtype x shape at open, so a corrupt file gives an error naming the file and
 * the tensor and never an out-of-bounds read.
 *
 * A model's weights are one file (model.safetensors) or shards listed by
 * model.safetensors.index.json ("weight_map": {tensor: shard file}); an
 * lz_st_set opens either from a folder. Conversion to fp32 covers F32, F16
 * and BF16; other dtypes are recognised (sizes checked) but not converted.
 */
#ifndef LZ_SAFETENSORS_H
#define LZ_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "base/status.h"

typedef enum {
    LZ_ST_F32 = 0, LZ_ST_F16, LZ_ST_BF16, LZ_ST_F64, LZ_ST_I64, LZ_ST_I32, LZ_ST_I16, LZ_ST_I8,
    LZ_ST_U64, LZ_ST_U32, LZ_ST_U16, LZ_ST_U8, LZ_ST_BOOL, LZ_ST_F8_E4M3, LZ_ST_F8_E5M2,
    LZ_ST_DTYPE_COUNT
} lz_st_dtype;

#define LZ_ST_MAX_DIMS 8

typedef struct {
    const char *name;               /* NUL-terminated copy */
    int dtype;                      /* lz_st_dtype */
    int n_dims;
    int64_t shape[LZ_ST_MAX_DIMS];  /* row-major: shape[n_dims-1] varies fastest */
    int64_t n_elements;
    const void *data;               /* inside the mapping */
    uint64_t nbytes;
    const char *file;               /* path of the file holding it */
} lz_st_tensor;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

typedef struct lz_safetensors lz_safetensors;

/* Opens and validates one file. Errors: EIO (cannot open/map), ECORRUPT
 * (header length, JSON, dtype, shape or offsets invalid), ENOMEM. */
int lz_st_open(const char *path, lz_safetensors **out, char *err, size_t errlen);
void lz_st_close(lz_safetensors *f); /* NULL is a no-op */
int64_t lz_st_n_tensors(const lz_safetensors *f);
const lz_st_tensor *lz_st_tensor_at(const lz_safetensors *f, int64_t i); /* sorted by name */
const lz_st_tensor *lz_st_find(const lz_safetensors *f, const char *name); /* NULL if absent */

/* The weights of a Hugging Face folder: model.safetensors, or the shards of
 * model.safetensors.index.json (every tensor of weight_map must be in the
 * shard it names; a name in two shards is an error). */
typedef struct lz_st_set lz_st_set;
int lz_st_set_open_dir(const char *dir, lz_st_set **out, char *err, size_t errlen);
void lz_st_set_close(lz_st_set *s); /* NULL is a no-op */
const lz_st_tensor *lz_st_set_find(const lz_st_set *s, const char *name);
int lz_st_set_n_files(const lz_st_set *s);

const char *lz_st_dtype_name(int dtype);
size_t lz_st_dtype_size(int dtype); /* bytes per element, 0 if unknown */

/* Converts t to fp32 into out[t->n_elements]. Returns 0, or
 * LZ_EUNSUPPORTED for dtypes other than F32, F16, BF16. */
int lz_st_to_f32(const lz_st_tensor *t, float *out);

/* Writing (tests and tools): n tensors given as raw little-endian data of
 * their dtype. Data is laid out in the order given. Returns 0 or -1 with a
 * message in err. */
typedef struct {
    const char *name;
    int dtype;
    int n_dims;
    const int64_t *shape;
    const void *data;
} lz_st_out;
int lz_st_write(const char *path, const lz_st_out *ts, int n, char *err, size_t errlen);

#endif /* LZ_SAFETENSORS_H */
