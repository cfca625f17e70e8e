/* runtime.h - process setup shared by the command-line tools.
 *
 * OpenMP threads that spin while waiting at barriers (libgomp's default)
 * collapse throughput as soon as another process competes for the cores:
 * measured on 2 shared cores, decode of a 100M model fell from 27 to 8.5
 * tok/s. libgomp reads OMP_WAIT_POLICY once, before main() runs, so
 * lz_runtime_init re-executes the program with OMP_WAIT_POLICY=passive when
 * the user has not chosen a policy. Set OMP_WAIT_POLICY=active to keep
 * spinning (best on a dedicated machine). */
#ifndef LZ_RUNTIME_H
#define LZ_RUNTIME_H

/* Call first in main(). Returns only in the process that goes on (the exec
 * replaces the first one; if exec fails the program simply continues). */
void lz_runtime_init(int argc, char **argv);

/* The environment variables every model-loading tool honours, for --help. */
#define LZ_RUNTIME_ENV_HELP                                                                     \
    "Environment: LAZY_F32_WEIGHTS=1 widens bf16/fp16/Q8_0 weights to fp32 copies at load\n"   \
    "(twice to four times the memory; they are otherwise used in place from the model file);\n" \
    "OMP_WAIT_POLICY=active keeps OpenMP threads spinning (default passive).\n"

#endif /* LZ_RUNTIME_H */
