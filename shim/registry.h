/* Kernel registry: one record per kernel name, reachable from every pointer
 * that identifies the kernel (runtime stub, cudaKernel_t handle, CUfunction,
 * CUkernel). Lookups are lock-free (the launch hot path); inserts take a
 * mutex. Records are never freed (the stats at exit read them). */
#ifndef PT_REGISTRY_H
#define PT_REGISTRY_H
#include <stddef.h>
#include <stdint.h>

enum pt_kernel_action { PT_ACTION_PASSTHROUGH, PT_ACTION_SWAPPED, PT_ACTION_FALLBACK };

#define PT_PARAM_UNSET ((size_t)-1)

struct pt_kernel {
  const char *name;      /* mangled name (owned copy); "" when unknown */
  uint64_t launches;     /* atomic; only launches not counted per thread (shim/counters.h):
                          * read totals with pt_launches_total */
  uint64_t swapped;      /* atomic: launches a hook replaced */
  uint64_t skipped;      /* atomic: launches a hook dropped */
  uint64_t fallbacks;    /* atomic: hooked launches that fell back */
  int hook_id;           /* pt_hooks_match(name), computed once */
  uint32_t index;        /* dense, in order of creation: the per-thread launch counters' slot */
  int logged_swap;       /* atomic once-flags for the info logs */
  int logged_fallback;
  size_t param_bytes;    /* atomic; PT_PARAM_UNSET until the first hooked launch */
  struct pt_kernel *next_by_name; /* registry internals */
  struct pt_kernel *next_all;
};

/* The record for this name, created (and matched against the hooks) on first
 * use. NULL only if out of memory. Thread-safe. */
struct pt_kernel *pt_registry_kernel(const char *name);
/* Makes key identify k (replacing an older binding: addresses are reused
 * after a module unload). key NULL is ignored. Thread-safe. */
void pt_registry_bind(const void *key, struct pt_kernel *k);
/* Lock-free lookup; NULL when unbound. */
struct pt_kernel *pt_registry_lookup(const void *key);
/* Number of records (distinct names). */
size_t pt_registry_count(void);
/* Calls fn for every record (exit stats). */
void pt_registry_foreach(void (*fn)(struct pt_kernel *k, void *arg), void *arg);
/* Action word for the stats: "passthrough" | "swapped" | "fallback". */
const char *pt_kernel_action_name(const struct pt_kernel *k);

/* fork handling: the child must not inherit a held lock. */
void pt_registry_atfork_prepare(void);
void pt_registry_atfork_parent(void);
void pt_registry_atfork_child(void);

#endif
