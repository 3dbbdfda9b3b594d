/* Bookkeeping shared by the fake libcuda and libcudart: per-symbol counters
 * and error injection. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FC_MAX 512
#define FC_FAILS 32

static pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;
static char *fc_names[FC_MAX];
static uint64_t fc_counts[FC_MAX];
static int fc_n;
static struct {
  int id;
  uint64_t nth;
  int err;
} fc_fails[FC_FAILS];
static int fc_nfails;
static int fc_env_done;

static int fc_id_locked(const char *s) {
  for (int i = 1; i <= fc_n; i++)
    if (!strcmp(fc_names[i], s)) return i;
  if (fc_n + 1 >= FC_MAX) return 0;
  fc_names[++fc_n] = strdup(s);
  return fc_n;
}

static void fc_add_fail_locked(const char *s, uint64_t nth, int err) {
  if (fc_nfails >= FC_FAILS) return;
  int id = fc_id_locked(s);
  fc_fails[fc_nfails].id = id;
  fc_fails[fc_nfails].nth = nth;
  fc_fails[fc_nfails].err = err;
  __atomic_store_n(&fc_nfails, fc_nfails + 1, __ATOMIC_RELEASE);
}

static void fc_env_locked(void) {
  if (fc_env_done) return;
  fc_env_done = 1;
  const char *env = getenv("FAKECUDA_FAIL");
  if (!env) return;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", env);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *c1 = strchr(tok, ':');
    if (!c1) continue;
    *c1 = 0;
    char *c2 = strchr(c1 + 1, ':');
    int err = 2;
    if (c2) {
      *c2 = 0;
      err = atoi(c2 + 1);
    }
    fc_add_fail_locked(tok, strtoull(c1 + 1, NULL, 10), err);
  }
}

int fakecuda_id(const char *s) {
  pthread_mutex_lock(&fc_lock);
  fc_env_locked();
  int id = fc_id_locked(s);
  pthread_mutex_unlock(&fc_lock);
  return id;
}

int fakecuda_hit(int id) {
  uint64_t n = __atomic_add_fetch(&fc_counts[id], 1, __ATOMIC_RELAXED);
  int nf = __atomic_load_n(&fc_nfails, __ATOMIC_ACQUIRE);
  for (int i = 0; i < nf; i++)
    if (fc_fails[i].id == id && fc_fails[i].nth == n) return fc_fails[i].err;
  return 0;
}

uint64_t fakecuda_count(const char *s) {
  pthread_mutex_lock(&fc_lock);
  uint64_t n = 0;
  for (int i = 1; i <= fc_n; i++)
    if (!strcmp(fc_names[i], s)) n = __atomic_load_n(&fc_counts[i], __ATOMIC_RELAXED);
  pthread_mutex_unlock(&fc_lock);
  return n;
}

void fakecuda_fail(const char *s, uint64_t nth, int err) {
  pthread_mutex_lock(&fc_lock);
  fc_env_locked();
  fc_add_fail_locked(s, nth, err);
  pthread_mutex_unlock(&fc_lock);
}

