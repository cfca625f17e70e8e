/* env.h - the LAZY_* environment switches, read once, in one place.
 *
 * lz_env_get() parses the environment at its first call (thread-safe) into a
 * const struct; every reader in the product takes its value from there, so a
 * switch means the same thing for the whole run. A malformed value leaves
 * the default and names the variable in error (the tools refuse to start:
 * lz_cli_check_env in base/cli.h). LZ_ENV_HELP is the --help paragraph.
 *
 * Switches that were experiments or test hooks and are gone from the
 * environment (retired; lz_cli_check_env warns when one is set):
 *   LAZY_INGEST_SERIAL=1        -> lazyingest --serial
 *   LAZY_INGEST_SYNC_COMMIT=1   -> lazyingest --sync-commit
 *   LAZY_INGEST_REF_FAIL_PASS=K -> test builds only (build/tests/lazyingest-hooks --test-fail-pass K)
 */
#ifndef LZ_ENV_H
#define LZ_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_ENV_ERROR_MAX 320

typedef struct {
    /* LAZY_MODEL: the model used when no --model is given ("" = unset or empty) */
    char model[4096];
    /* LAZY_F32_WEIGHTS: 1 when set to anything but "" or "0": 16-bit and Q8_0
     * weights widened to fp32 copies at load instead of used in place */
    int f32_weights;
    /* LAZY_GPU_DECODE: "prefill" (gpu_decode_prefill = 1): a decode step's attention by the
     * one-row prefill kernel; N >= 0: the decode kernel on N split-KV parts (0: its choice) */
    int gpu_decode_prefill, gpu_decode_split;
    /* LAZY_GPU_DECODE_GROUP: a batched decode step's attention grouped by document
     * (kernels/lz_decode_group.h): 0 never, 1 whenever it can, 2 (default, "auto") when the
     * step reads at most 4/5 of the document blocks its rows place (2/5 with fp8 documents) */
    int gpu_decode_group;
    /* LAZY_GPU_GEMV=B,S: persistent blocks a SM of the decode products, B for every product
     * of the engine's step, S for lz_gemv_silu's (the down product staging the silu gate
     * itself, no longer in the step; 0, 0: the kernels' defaults) */
    int gpu_gemv_bps, gpu_gemv_silu_bps;
    /* LAZY_INGEST_GPU_PASS: lazyingest --gpu's tokens a multi-document pass (default 2048;
     * 0: one document a pass) */
    int ingest_gpu_pass;
    /* LAZY_INGEST_GPU_MASS=0: --gpu's KV eviction scored from attention masses made on the
     * CPU (default 1: on the GPU) */
    int ingest_gpu_mass;
    /* LAZY_INGEST_PLANES=0: --gpu's documents widened to fp32 on the host before packing, as
     * the CPU's (default 1: packed from the device's bf16 or fp8 planes as they are) */
    int ingest_planes;
    /* LAZY_INGEST_REF_PASSES=N: lazyingest runs --gpu's pipeline of passes of N tokens on the
     * CPU reference backend, ingest/pass_ref.h (0: off) */
    int ingest_ref_passes;
    /* the first malformed variable, "LAZY_X='v': expected ..." ("" when all are well-formed) */
    char error[LZ_ENV_ERROR_MAX];
    /* a retired variable that is set, with what replaced it ("" when none) */
    char retired[LZ_ENV_ERROR_MAX];
} lz_env;

/* The switches, parsed at the first call. */
const lz_env *lz_env_get(void);

/* Parses with get(name, ctx) as the environment (NULL: unset) into *out;
 * returns 0, or -1 when a value is malformed (out->error says which). */
int lz_env_parse(lz_env *out, const char *(*get)(const char *name, void *ctx), void *ctx);

/* Test API: parses the process environment again (after setenv), for the
 * programs that change their own environment (tests). Not thread-safe
 * against readers running at the same time. */
void lz_env_reload(void);

/* The --help paragraph. */
#define LZ_ENV_HELP                                                                                        \
    "Environment (read once at start; a malformed value is a usage error):\n"                             \
    "  LAZY_MODEL=PATH           the model when no --model is given (else <repo>/models/default.gguf)\n"  \
    "  LAZY_F32_WEIGHTS=1        widen bf16/fp16/Q8_0 weights to fp32 copies at load (by default they\n"  \
    "                            are used in place from the model file)\n"                                \
    "  OMP_WAIT_POLICY=active    keep OpenMP threads spinning while they wait (default passive)\n"        \
    " developer knobs (benchmarks, tests):\n"                                                              \
    "  LAZY_INGEST_GPU_PASS=N    lazyingest --gpu: tokens a multi-document pass (default 2048;\n"         \
    "                            0: one document a pass)\n"                                               \
    "  LAZY_INGEST_GPU_MASS=0    lazyingest --gpu: KV eviction's attention masses made on the CPU\n"      \
    "  LAZY_INGEST_PLANES=0      lazyingest --gpu: documents widened to fp32 on the host before packing\n"\
    "                            (default: packed from the device's bf16 / fp8 bytes; the same payloads)\n"\
    "  LAZY_INGEST_REF_PASSES=N  lazyingest: --gpu's pipeline of N-token passes, on the CPU reference\n"  \
    "                            backend (no GPU; the same bytes as the CPU)\n"                            \
    "  LAZY_GPU_DECODE=prefill|N lazyquery --gpu: decode attention by the one-row prefill kernel, or\n"   \
    "                            the decode kernel on N split-KV parts (default 0: its choice)\n"         \
    "  LAZY_GPU_GEMV=B,S         lazyquery --gpu: decode products' blocks a SM (B; S: lz_gemv_silu's,\n"\
    "                            which the step no longer runs; 0,0: the defaults)\n"                    \
    "  LAZY_GPU_DECODE_GROUP=0|1|auto  batched decode (lazyserve --gpu): attention grouped by document,\n"\
    "                            each shared document read once a step for the rows placing it: never,\n"\
    "                            whenever possible, or (auto, default) when it reads at most 4/5 of\n"\
    "                            the blocks the rows place (2/5 with fp8 documents)\n"

#ifdef __cplusplus
}
#endif
#endif /* LZ_ENV_H */
