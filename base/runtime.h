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

/* The --help paragraph of the environment (OMP_WAIT_POLICY and the LAZY_*
 * switches): LZ_ENV_HELP in base/env.h. */

#endif /* LZ_RUNTIME_H */
