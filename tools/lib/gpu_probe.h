/* Is there a usable NVIDIA GPU here? For `bench` and `trace`, which must say
 * so clearly (exit 1) on machines without one. */
#ifndef PT_TOOLS_GPU_PROBE_H
#define PT_TOOLS_GPU_PROBE_H
#include <stddef.h>

/* 1 when libcuda.so.1 loads, cuInit succeeds and at least one device exists;
 * 0 otherwise with the reason in `why`. Probes in a child process so this
 * process never initialises CUDA (it forks workloads afterwards). */
int pt_gpu_probe(char *why, size_t whylen);

#endif
