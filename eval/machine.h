/* machine.h - what a report records about where it ran: the host name, the
 * operating system, the CPU's model and cores, the memory, and the NVIDIA
 * GPUs nvidia-smi lists (none when it is absent). What it leaves out: the
 * model and the store (the report's caller). */
#ifndef LZ_EVAL_MACHINE_H
#define LZ_EVAL_MACHINE_H

#include <jansson.h>

/* {"hostname", "os", "cpu", "cores", "memory_bytes", "gpus": [...]} (NULL
 * when out of memory). */
json_t *lz_eval_machine_json(void);

/* The CPU's model name (/proc/cpuinfo) into buf, "unknown" when not found. */
void lz_eval_cpu_name(char *buf, size_t n);

#endif /* LZ_EVAL_MACHINE_H */
