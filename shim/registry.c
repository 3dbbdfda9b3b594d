/* Kernel registry. Two structures:
 *  - a name table (chained, mutex-protected, only touched on registration);
 *  - a pointer -> record open-addressing table read without locks. Writers
 *    (under the mutex) publish a slot by storing the record, then the key with
 *    release order; readers load the key with acquire order. Growing builds a
 *    new table and publishes it with one atomic pointer store; old tables are
 *    leaked on purpose, because a reader may still be probing them (they add
 *    up to less than the live table). A reader on a stale table may miss a
 *    key: callers then take the slow path, which rechecks under the mutex. */
#include "shim/registry.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/hook.h"

struct pt_slot {
  uintptr_t key;
  struct pt_kernel *rec;
};
struct pt_table {
  size_t mask;
  size_t used;
  struct pt_slot slots[];
};

#define PT_NAME_BUCKETS 16384
#define PT_TABLE_MIN 4096

static pthread_mutex_t pt_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pt_table *pt_reg_table;        /* atomic */
static struct pt_kernel *pt_reg_names[PT_NAME_BUCKETS];
static struct pt_kernel *pt_reg_all;         /* atomic head */
static size_t pt_reg_count;                  /* atomic */

static inline size_t pt_ptr_hash(uintptr_t k) {
  /* Fibonacci hashing; the low bits of code/handle pointers are aligned. */
  return (size_t)((k >> 4) * 0x9E3779B97F4A7C15ull >> 17);
}

static size_t pt_name_hash(const char *s) {
  size_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

struct pt_kernel *pt_registry_lookup(const void *key) {
  struct pt_table *t = __atomic_load_n(&pt_reg_table, __ATOMIC_ACQUIRE);
  if (__builtin_expect(!t || !key, 0)) return NULL;
  uintptr_t k = (uintptr_t)key;
  size_t i = pt_ptr_hash(k) & t->mask;
  for (;;) {
    uintptr_t s = __atomic_load_n(&t->slots[i].key, __ATOMIC_ACQUIRE);
    if (s == k) return __atomic_load_n(&t->slots[i].rec, __ATOMIC_ACQUIRE);
    if (!s) return NULL;
    i = (i + 1) & t->mask;
  }
}

/* Under the lock. Inserts or replaces without growing. */
static void pt_table_put(struct pt_table *t, uintptr_t k, struct pt_kernel *rec) {
  size_t i = pt_ptr_hash(k) & t->mask;
  for (;;) {
    uintptr_t s = t->slots[i].key;
    if (s == k) {
      __atomic_store_n(&t->slots[i].rec, rec, __ATOMIC_RELEASE);
      return;
    }
    if (!s) {
      __atomic_store_n(&t->slots[i].rec, rec, __ATOMIC_RELAXED);
      __atomic_store_n(&t->slots[i].key, k, __ATOMIC_RELEASE);
      t->used++;
      return;
    }
    i = (i + 1) & t->mask;
  }
}

static struct pt_table *pt_table_new(size_t cap) {
  struct pt_table *t = calloc(1, sizeof *t + cap * sizeof(struct pt_slot));
  if (t) t->mask = cap - 1;
  return t;
}

void pt_registry_bind(const void *key, struct pt_kernel *k) {
  if (!key || !k) return;
  pthread_mutex_lock(&pt_reg_lock);
  struct pt_table *t = pt_reg_table;
  /* Keep the load factor at most 1/2 so probes stay short. */
  if (!t || (t->used + 1) * 2 > t->mask + 1) {
    size_t cap = t ? (t->mask + 1) * 2 : PT_TABLE_MIN;
    struct pt_table *nt = pt_table_new(cap);
    if (!nt) {
      pthread_mutex_unlock(&pt_reg_lock);
      return; /* out of memory: the kernel stays unnamed */
    }
    if (t)
      for (size_t i = 0; i <= t->mask; i++)
        if (t->slots[i].key) pt_table_put(nt, t->slots[i].key, t->slots[i].rec);
    __atomic_store_n(&pt_reg_table, nt, __ATOMIC_RELEASE);
    t = nt; /* the old table is leaked: readers may hold it */
  }
  pt_table_put(t, (uintptr_t)key, k);
  pthread_mutex_unlock(&pt_reg_lock);
}

struct pt_kernel *pt_registry_kernel(const char *name) {
  if (!name) name = "";
  size_t b = pt_name_hash(name) % PT_NAME_BUCKETS;
  pthread_mutex_lock(&pt_reg_lock);
  for (struct pt_kernel *k = pt_reg_names[b]; k; k = k->next_by_name)
    if (!strcmp(k->name, name)) {
      pthread_mutex_unlock(&pt_reg_lock);
      return k;
    }
  pthread_mutex_unlock(&pt_reg_lock);
  /* Match outside the lock: hooks may take their time (and may log). */
  int hook = name[0] ? pt_hooks_match(name) : 0;
  struct pt_kernel *nk = calloc(1, sizeof *nk);
  char *copy = strdup(name);
  if (!nk || !copy) {
    free(nk);
    free(copy);
    return NULL;
  }
  nk->name = copy;
  nk->hook_id = hook > 0 ? hook : 0;
  nk->param_bytes = PT_PARAM_UNSET;
  pthread_mutex_lock(&pt_reg_lock);
  for (struct pt_kernel *k = pt_reg_names[b]; k; k = k->next_by_name)
    if (!strcmp(k->name, name)) { /* another thread registered it meanwhile */
      pthread_mutex_unlock(&pt_reg_lock);
      free(copy);
      free(nk);
      return k;
    }
  nk->index = (uint32_t)__atomic_load_n(&pt_reg_count, __ATOMIC_RELAXED);
  nk->next_by_name = pt_reg_names[b];
  pt_reg_names[b] = nk;
  nk->next_all = pt_reg_all;
  __atomic_store_n(&pt_reg_all, nk, __ATOMIC_RELEASE);
  __atomic_fetch_add(&pt_reg_count, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&pt_reg_lock);
  return nk;
}

size_t pt_registry_count(void) { return __atomic_load_n(&pt_reg_count, __ATOMIC_RELAXED); }

void pt_registry_foreach(void (*fn)(struct pt_kernel *k, void *arg), void *arg) {
  for (struct pt_kernel *k = __atomic_load_n(&pt_reg_all, __ATOMIC_ACQUIRE); k; k = k->next_all) fn(k, arg);
}

const char *pt_kernel_action_name(const struct pt_kernel *k) {
  uint64_t sw = __atomic_load_n(&k->swapped, __ATOMIC_RELAXED) + __atomic_load_n(&k->skipped, __ATOMIC_RELAXED);
  uint64_t fb = __atomic_load_n(&k->fallbacks, __ATOMIC_RELAXED);
  if (sw && sw >= fb) return "swapped";
  if (fb) return "fallback";
  return "passthrough";
}

void pt_registry_atfork_prepare(void) { pthread_mutex_lock(&pt_reg_lock); }
void pt_registry_atfork_parent(void) { pthread_mutex_unlock(&pt_reg_lock); }
void pt_registry_atfork_child(void) {
  /* Only the forking thread exists in the child and it held the lock. */
  pthread_mutex_init(&pt_reg_lock, NULL);
}
