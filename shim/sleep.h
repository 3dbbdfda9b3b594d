/* Sleep and wake requests (shim/sleep.c), answered by the control thread
 * (shim/control.c). */
#ifndef PT_SHIM_SLEEP_H
#define PT_SHIM_SLEEP_H
#include <stdbool.h>
#include <stddef.h>

/* Runs one request ("sleep", "sleep discard", "wake", "status") and writes the
 * answer: "ok" or "error: <reason>" on the first line, then key=value lines. */
void pt_sleep_request(const char *line, char *buf, size_t n);
bool pt_sleep_asleep(void);

#endif
