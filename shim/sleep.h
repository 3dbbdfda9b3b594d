/* Sleep and wake requests (shim/sleep.c), answered by the control thread
 * (shim/control.c). */
#ifndef PT_SHIM_SLEEP_H
#define PT_SHIM_SLEEP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Runs one request ("sleep", "sleep discard", "prepare", "prepare release",
 * "wake", "status") and writes the answer: "ok" or "error: <reason>" on the
 * first line, then key=value lines. */
void pt_sleep_request(const char *line, char *buf, size_t n);
/* After an answer went out: frees the host memory of the wake it answered
 * (the process runs meanwhile), so that `ponytail wake` returns when the
 * process runs again. A later request does it first if this was not called. */
void pt_sleep_after_reply(void);
/* At exit, before the stats: waits for the request in progress, and refuses
 * the ones after (a wake's deferred release of host memory included). */
void pt_sleep_exit(void);
/* In a forked child: the parent's lock state and pending release dropped. */
void pt_sleep_atfork_child(void);
bool pt_sleep_asleep(void);
/* Holds the process at its gate (up to timeout_ms for the calls in flight)
 * and runs fn, unless the process sleeps or a sleep request runs meanwhile;
 * *ran says whether fn ran. Returns fn's result (0 when it did not run). For
 * the host tier's move back (shim/tier.c). */
int pt_sleep_hold_and_run(uint64_t timeout_ms, int (*fn)(void *), void *arg, bool *ran);

#endif
