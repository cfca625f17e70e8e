/* gguf_write.h - writes GGUF v3 files: metadata of every scalar type,
 * strings, arrays of scalars or strings, and tensors (F32, F16, BF16, Q8_0)
 * aligned to 32 bytes. Used by the random-model generator, the Hugging Face
 * converter and tests that build corrupt files. Data is written at close. */
#ifndef LZ_GGUF_WRITE_H
#define LZ_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"

typedef struct lz_gguf_writer lz_gguf_writer;

lz_gguf_writer *lz_gguf_writer_new(void);
void lz_gguf_writer_free(lz_gguf_writer *w); /* NULL is a no-op */

/* Metadata. Strings are copied. Return 0 or -1 on allocation failure. */
int lz_gguf_write_u32(lz_gguf_writer *w, const char *key, uint32_t v);
int lz_gguf_write_i32(lz_gguf_writer *w, const char *key, int32_t v);
int lz_gguf_write_f32(lz_gguf_writer *w, const char *key, float v);
int lz_gguf_write_bool(lz_gguf_writer *w, const char *key, int v);
int lz_gguf_write_str(lz_gguf_writer *w, const char *key, const char *v);
/* Array of n scalars of type elem_type (raw little-endian elements). */
int lz_gguf_write_arr(lz_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
int lz_gguf_write_arr_str(lz_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Tensor from fp32 data, converted to type (F32, F16, BF16, Q8_0). ne[0] is
 * the row length. The data is converted and copied immediately. */
int lz_gguf_write_tensor(lz_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                         const int64_t *ne, const float *data);

/* Writes everything to path (via a temporary file and rename). Returns 0 or
 * -1 with a message in err. */
int lz_gguf_writer_save(lz_gguf_writer *w, const char *path, char *err, size_t errlen);

#endif /* LZ_GGUF_WRITE_H */
