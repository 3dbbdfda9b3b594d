/* The control socket of `ponytail sleep` / `ponytail wake` (shim/control.c). */
#ifndef PT_SHIM_CONTROL_H
#define PT_SHIM_CONTROL_H
#include <stddef.h>

/* Starts the control thread and socket (PONYTAIL_CONTROL), once per process;
 * called when the process's first pool is created. */
void pt_control_start(void);
/* At exit: removes the socket file. */
void pt_control_stop(void);
/* In a forked child: forgets the parent's socket. */
void pt_control_atfork_child(void);

#endif
