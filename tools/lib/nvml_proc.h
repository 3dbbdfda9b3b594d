/* A process's GPU memory as NVML sees it (all its contexts, every device):
 * what `ponytail sleep` reports before and after. */
#ifndef PT_TOOLS_NVML_PROC_H
#define PT_TOOLS_NVML_PROC_H

/* 0 and *bytes, or -1 when NVML is absent or does not list the process (a
 * container may hide other processes' figures). */
int pt_nvml_process_bytes(int pid, unsigned long long *bytes);

#endif
