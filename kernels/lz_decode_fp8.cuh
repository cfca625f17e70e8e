/* lz_decode_fp8.cuh - the entry of the decode kernels for calls with fp8 blocks
 * (kernels/lz_decode_fp8.cu), called by lz_decode_lazy / lz_decode
 * (kernels/lz_decode.cu) when p->k_scales is set, after lz_decode_check.
 * CUDA C++ only; not part of the public API (lz_decode.h).
 */
#ifndef LZ_DECODE_FP8_CUH
#define LZ_DECODE_FP8_CUH

#include "kernels/lz_decode.h"

/* Launches the fp8-capable kernel (lazy when lazy != 0) on stream; 0, an
 * lz_attn_status or a cudaError_t. */
int lz_decode_fp8_launch(const lz_decode_params *p, int lazy, void *stream);

#endif /* LZ_DECODE_FP8_CUH */
