/* CUPTI activity tracing inside the host process, for `ponytail trace`.
 * Enabled by PONYTAIL_CUPTI=path: libcupti is dlopen'ed at run time (the shim
 * links no CUDA library); kernel activity records are written to the file at
 * stop. Both calls are safe when CUPTI is absent or cannot attach: they log
 * why and return. */
#ifndef PT_CUPTI_H
#define PT_CUPTI_H
void pt_cupti_start(void); /* once, at shim init, when PONYTAIL_CUPTI is set */
void pt_cupti_stop(void);  /* at exit: flush and write the records */
#endif
