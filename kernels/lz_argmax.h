/* lz_argmax.h - greedy decoding on the device: the next token of each row of
 * logits without moving the logits to the host (a row of Llama 3's vocabulary
 * is 513 KB; a batch of 32 is 16 MB a step, and its argmax on the host costs
 * more than the step's attention). The CUDA launcher (kernels/lz_argmax.cu;
 * device pointers, asynchronous on stream) has a CPU reference with the same
 * signature (kernels/lz_argmax_ref.c; host pointers, stream ignored);
 * tests/cuda/test_ops.cu compares them on random rows with ties, NaN and
 * banned ids. Plain C. Return 0, a cudaError_t, or LZ_ARGMAX_EINVAL. */
#ifndef LZ_ARGMAX_H
#define LZ_ARGMAX_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_ARGMAX_MAX_BAN 64 /* ids a ban list holds */
#define LZ_ARGMAX_EINVAL (-2) /* rows < 0, V < 1, ld < V, or a ban count past LZ_ARGMAX_MAX_BAN */

/* For each row i < rows of logits (rows of V floats, ld floats apart): next[2i] is
 * lz_sample_argmax's choice (model/sampler.h: the first index of the largest value; a NaN is
 * never chosen, except at index 0, where it is), next[2i + 1] the same with the ids of ban
 * taken as -inf (the ignore_eos mask). ban: a count ban[0] <= LZ_ARGMAX_MAX_BAN, then that many
 * ids (out-of-range ids ignored); NULL: none. On the device the count is read there, so a
 * captured graph follows a list rewritten in place. */
int lz_argmax(int *next, const float *logits, int rows, int V, size_t ld, const int *ban, void *stream);
int lz_argmax_ref(int *next, const float *logits, int rows, int V, size_t ld, const int *ban, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* LZ_ARGMAX_H */
