/* The shim's own background threads (control socket, IPC export server,
 * stats snapshots): detached, and started with every signal blocked, so that
 * a signal meant for the application is never delivered to one of them. */
#ifndef PT_THREAD_H
#define PT_THREAD_H

/* Starts fn(arg) on such a thread. Returns 0, or pthread_create's error. */
int pt_thread_start(void *(*fn)(void *), void *arg);

#endif
