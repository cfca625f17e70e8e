/* test_model.h - tests' random-weight model in a temporary folder: written
 * by lz_mkmodel (model/mkmodel.h), loaded, and removed again afterwards.
 * Include after tests/test.h. */
#ifndef LZ_TEST_MODEL_H
#define LZ_TEST_MODEL_H

#include "model/llama.h"
#include "model/mkmodel.h"

/* A model of this shape at dir/m.gguf (dir: a fresh temporary folder, path:
 * the file), its matrices stored as tensor_type (an LZ_GGML_* type; < 0:
 * mkmodel's default). Returns it loaded, or NULL after a failed CHECK naming why. */
static inline lz_llama *lz_test_model_typed(int layers, int heads, int kv_heads, int head_dim, int dim,
                                            int tensor_type, char *dir, size_t dir_len, char *path, size_t path_len)
{
    char err[512];
    if (!lz_test_tmpdir(dir, dir_len)) { CHECK(0, "tmpdir"); return NULL; }
    snprintf(path, path_len, "%s/m.gguf", dir);
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    o.n_layers = layers, o.n_heads = heads, o.n_kv_heads = kv_heads, o.head_dim = head_dim, o.dim = dim;
    if (tensor_type >= 0) o.tensor_type = tensor_type;
    if (tensor_type == LZ_GGML_Q8_0) o.ffn_dim = (o.ffn_dim + 31) / 32 * 32; /* Q8_0 rows are blocks of 32 */
    lz_llama *m = NULL;
    if (lz_mkmodel_write(&o, path, err, sizeof err) || lz_llama_load(path, &m, err, sizeof err)) {
        CHECK(0, "test model: %s", err);
        return NULL;
    }
    return m;
}

/* The same with mkmodel's default tensor type. */
static inline lz_llama *lz_test_model(int layers, int heads, int kv_heads, int head_dim, int dim, char *dir,
                                      size_t dir_len, char *path, size_t path_len)
{
    return lz_test_model_typed(layers, heads, kv_heads, head_dim, dim, -1, dir, dir_len, path, path_len);
}

/* Frees m and removes its file and folder. */
static inline void lz_test_model_free(lz_llama *m, const char *dir, const char *path)
{
    lz_llama_free(m);
    unlink(path);
    rmdir(dir);
}

#endif /* LZ_TEST_MODEL_H */
