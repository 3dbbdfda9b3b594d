#include "common/thread.h"

#include <pthread.h>
#include <signal.h>

int pt_thread_start(void *(*fn)(void *), void *arg) {
  /* The new thread inherits this mask; the caller's own is put back. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &at, fn, arg);
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}
