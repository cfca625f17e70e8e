/* engine_cpu_only.c - the library's stand-in for the GPU engine: no table, so
 * lz_engine_gpu_built() is 0 and opening a GPU engine says which build has one.
 * The programs of 'make cuda' link engine_gpu.c before the library, whose
 * lz_engine_gpu_ops keeps this member out of the link (engine_gpu_ops.h).
 */
#include "engine/engine_gpu_ops.h"

const lz_engine_gpu_table *lz_engine_gpu_ops(void) { return NULL; }
