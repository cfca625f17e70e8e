/* mkmodel.h - builds GGUF Llama models with random weights of any shape and
 * a small SentencePiece vocabulary (bytes, characters, letter pairs, common
 * words), so tests and benchmarks need no external model. */
#ifndef LZ_MKMODEL_H
#define LZ_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab, ctx;
    float rope_theta, norm_eps;
    int tensor_type;   /* lz_ggml_type for the matrices (norms stay F32) */
    int tied;          /* omit output.weight */
    int llama3_freqs;  /* write rope_freqs.weight with llama3 divisors (factor 8, 1, 4, 8192) */
    uint64_t seed;
} lz_mkmodel_opts;

/* Defaults: a tiny model (dim 64, 2 layers, 4/2 heads, vocab 512, F32). */
void lz_mkmodel_defaults(lz_mkmodel_opts *o);
/* Writes the model to path. Returns 0 or -1 with a message in err. */
int lz_mkmodel_write(const lz_mkmodel_opts *o, const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* LZ_MKMODEL_H */
