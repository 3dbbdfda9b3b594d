/* Replay core: see replay.h. The trace is parsed whole before the run, so
 * timing covers pool operations only. */
#include "allocator/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "allocator/backend_host.h"
#include "common/now_ns.h"
#include "allocator/trace.h"

struct rp_op {
  char kind;     /* 'A', 'R', 'P', 'Q' */
  uint32_t slot; /* the allocation this event creates or frees */
  uint64_t bytes, stream;
};

struct pt_replay_trace {
  struct rp_op *ops;
  uint64_t n, cap;
  uint32_t nslots;
  uint64_t peak_live;
};

/* Live trace pointer -> slot, while loading (open addressing, tombstones
 * are not needed: deletion uses backward shift). */
struct rp_map {
  uint64_t *keys; /* 0 = empty */
  uint32_t *slots;
  uint8_t *pooled;
  uint64_t *bytes;
  uint64_t cap, n;
};

static uint64_t rp_hash(uint64_t k, uint64_t cap) { return (k * 0x9E3779B97F4A7C15ull >> 24) & (cap - 1); }

static int rp_map_grow(struct rp_map *m) {
  struct rp_map g = {.cap = m->cap ? m->cap * 2 : 4096};
  g.keys = calloc(g.cap, sizeof *g.keys);
  g.slots = calloc(g.cap, sizeof *g.slots);
  g.pooled = calloc(g.cap, 1);
  g.bytes = calloc(g.cap, sizeof *g.bytes);
  if (!g.keys || !g.slots || !g.pooled || !g.bytes) {
    free(g.keys), free(g.slots), free(g.pooled), free(g.bytes);
    return -1;
  }
  for (uint64_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    uint64_t j = rp_hash(m->keys[i], g.cap);
    while (g.keys[j]) j = (j + 1) & (g.cap - 1);
    g.keys[j] = m->keys[i], g.slots[j] = m->slots[i], g.pooled[j] = m->pooled[i], g.bytes[j] = m->bytes[i];
  }
  g.n = m->n;
  free(m->keys), free(m->slots), free(m->pooled), free(m->bytes);
  *m = g;
  return 0;
}

static int64_t rp_find(const struct rp_map *m, uint64_t k) {
  if (!m->cap) return -1;
  for (uint64_t j = rp_hash(k, m->cap); m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (m->keys[j] == k) return (int64_t)j;
  return -1;
}

static void rp_del(struct rp_map *m, uint64_t j) {
  uint64_t mask = m->cap - 1, hole = j;
  for (uint64_t k = (j + 1) & mask; m->keys[k]; k = (k + 1) & mask) {
    uint64_t home = rp_hash(m->keys[k], m->cap);
    bool stays = hole <= k ? (hole < home && home <= k) : (hole < home || home <= k);
    if (stays) continue;
    m->keys[hole] = m->keys[k], m->slots[hole] = m->slots[k];
    m->pooled[hole] = m->pooled[k], m->bytes[hole] = m->bytes[k];
    hole = k;
  }
  m->keys[hole] = 0;
  m->n--;
}

static int rp_push(struct pt_replay_trace *t, struct rp_op op) {
  if (t->n == t->cap) {
    uint64_t cap = t->cap ? t->cap * 2 : 65536;
    struct rp_op *n = realloc(t->ops, cap * sizeof *n);
    if (!n) return -1;
    t->ops = n;
    t->cap = cap;
  }
  t->ops[t->n++] = op;
  return 0;
}

int pt_replay_load(const char *path, struct pt_replay_trace **out, char *err, size_t errlen) {
  char msg[256];
  struct pt_trace_reader *r = NULL;
  struct pt_replay_trace *t = calloc(1, sizeof *t);
  struct rp_map m = {0};
  uint64_t live = 0;
  if (!t) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  if (pt_trace_reader_open(path, &r, msg, sizeof msg)) {
    snprintf(err, errlen, "%s: %s", path, msg);
    free(t);
    return -1;
  }
  struct pt_trace_event ev;
  int rc;
  while ((rc = pt_trace_next(r, &ev, msg, sizeof msg)) == 1) {
    bool alloc = ev.kind == 'A' || ev.kind == 'P', pooled = ev.kind == 'A' || ev.kind == 'R';
    if (!ev.ptr) continue; /* a NULL result or cudaFree(NULL): nothing to replay */
    int64_t j = rp_find(&m, ev.ptr);
    if (alloc) {
      if (j >= 0) {
        snprintf(msg, sizeof msg, "pointer %#llx allocated again while live", (unsigned long long)ev.ptr);
        rc = -1;
        break;
      }
      if (t->nslots == UINT32_MAX || ((m.n + 1) * 2 > m.cap && rp_map_grow(&m))) {
        snprintf(msg, sizeof msg, "out of memory");
        rc = -1;
        break;
      }
      uint64_t h = rp_hash(ev.ptr, m.cap);
      while (m.keys[h]) h = (h + 1) & (m.cap - 1);
      m.keys[h] = ev.ptr, m.slots[h] = t->nslots, m.pooled[h] = pooled, m.bytes[h] = ev.bytes;
      m.n++;
      if (rp_push(t, (struct rp_op){ev.kind, t->nslots++, ev.bytes, ev.stream})) {
        snprintf(msg, sizeof msg, "out of memory");
        rc = -1;
        break;
      }
      if (pooled && (live += ev.bytes) > t->peak_live) t->peak_live = live;
    } else {
      if (j < 0 || m.pooled[j] != pooled) {
        snprintf(msg, sizeof msg, "free of unknown pointer %#llx", (unsigned long long)ev.ptr);
        rc = -1;
        break;
      }
      if (rp_push(t, (struct rp_op){ev.kind, m.slots[j], m.bytes[j], ev.stream})) {
        snprintf(msg, sizeof msg, "out of memory");
        rc = -1;
        break;
      }
      if (pooled) live -= m.bytes[j];
      rp_del(&m, (uint64_t)j);
    }
  }
  uint64_t line = pt_trace_reader_line(r);
  pt_trace_reader_close(r);
  free(m.keys), free(m.slots), free(m.pooled), free(m.bytes);
  if (rc < 0) {
    snprintf(err, errlen, "%s:%llu: %s", path, (unsigned long long)line, msg);
    pt_replay_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

void pt_replay_free(struct pt_replay_trace *t) {
  if (!t) return;
  free(t->ops);
  free(t);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(uint32_t *v, uint64_t n, double q) {
  if (!n) return 0;
  uint64_t i = (uint64_t)(q * (double)(n - 1) + 0.5);
  return v[i];
}

/* The cost of reading the clock twice, to subtract from every sample. */
static uint32_t timer_cost(void) {
  uint32_t s[1001];
  for (int i = 0; i < 1001; i++) {
    uint64_t a = pt_now_ns();
    s[i] = (uint32_t)(pt_now_ns() - a);
  }
  qsort(s, 1001, sizeof s[0], cmp_u32);
  return s[500];
}

int pt_replay_run(const struct pt_replay_trace *t, const struct pt_replay_opts *o,
                  struct pt_replay_result *res, char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  struct pt_backend bk;
  struct pt_pool *pool;
  struct pt_pool_config cfg = {.keep_bytes = o->keep_bytes,
                               .limit_bytes = o->limit_bytes,
                               .chunk_bytes = pt_pool_chunk_auto(o->chunk_bytes, o->limit_bytes)};
  if (pt_backend_host_create(&bk, 0, 0)) {
    snprintf(err, errlen, "cannot create the host backend");
    return -1;
  }
  struct pt_backend bk_view = bk; /* the pool owns bk; this is for the marker hold */
  if (pt_pool_create(bk, 0, &cfg, &pool)) {
    bk.ops->destroy(bk.ctx);
    snprintf(err, errlen, "cannot create the pool");
    return -1;
  }
  void **ptrs = calloc(t->nslots ? t->nslots : 1, sizeof *ptrs);
  uint32_t *ta = o->time_ops ? malloc((t->n + 1) * sizeof *ta) : NULL;
  uint32_t *tf = o->time_ops ? malloc((t->n + 1) * sizeof *tf) : NULL;
  uint32_t *tall = o->time_ops ? malloc((t->n + 1) * sizeof *tall) : NULL;
  if (!ptrs || (o->time_ops && (!ta || !tf || !tall))) {
    free(ptrs), free(ta), free(tf), free(tall);
    pt_pool_destroy(pool);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  /* Peak live of what the pool is given: the whole trace's unless min_bytes
   * moves small events to pass-through. */
  uint64_t peak_live = t->peak_live;
  if (o->min_bytes) {
    uint64_t live = 0;
    peak_live = 0;
    for (uint64_t i = 0; i < t->n; i++) {
      const struct rp_op *op = &t->ops[i];
      if (op->bytes < o->min_bytes) continue;
      if (op->kind == 'A' && (live += op->bytes) > peak_live) peak_live = live;
      if (op->kind == 'R') live -= op->bytes;
    }
  }
  uint32_t cost = o->time_ops ? timer_cost() : 0;
  uint64_t na = 0, nf = 0, pooled_ops = 0;
  if (o->lag_ops) pt_backend_host_hold_markers(&bk_view, true);
  for (uint64_t i = 0; i < t->n; i++) {
    const struct rp_op *op = &t->ops[i];
    char kind = op->kind;
    /* Below min_bytes, A/R become what the shim makes of them: P/Q. */
    if (op->bytes < o->min_bytes) kind = kind == 'A' ? 'P' : kind == 'R' ? 'Q' : kind;
    if (o->lag_ops && (kind == 'A' || kind == 'R') && ++pooled_ops % o->lag_ops == 0)
      pt_backend_host_complete_markers(&bk_view); /* the device catches up */
    switch (kind) {
    case 'A': {
      uint64_t t0 = o->time_ops ? pt_now_ns() : 0;
      int rc = pt_pool_alloc(pool, op->bytes, op->stream, &ptrs[op->slot]);
      if (o->time_ops) {
        uint64_t d = pt_now_ns() - t0;
        ta[na++] = (uint32_t)(d > cost ? (d - cost > UINT32_MAX ? UINT32_MAX : d - cost) : 0);
      }
      if (rc) {
        ptrs[op->slot] = NULL;
        res->failed_allocs++;
      } else {
        res->allocs++;
      }
      break;
    }
    case 'R': {
      if (!ptrs[op->slot]) break; /* its allocation failed */
      uint64_t t0 = o->time_ops ? pt_now_ns() : 0;
      int rc = pt_pool_free(pool, ptrs[op->slot], op->stream);
      if (o->time_ops) {
        uint64_t d = pt_now_ns() - t0;
        tf[nf++] = (uint32_t)(d > cost ? (d - cost > UINT32_MAX ? UINT32_MAX : d - cost) : 0);
      }
      if (!rc) res->frees++;
      ptrs[op->slot] = NULL;
      break;
    }
    case 'P': {
      /* A pass-through allocation: it only counts against the limit. Over
       * the limit, the shim would trim the pool and retry. */
      pt_pool_note_passthrough(pool, (int64_t)op->bytes);
      struct pt_pool_stats st;
      pt_pool_stats(pool, &st);
      if (o->limit_bytes && st.physical_bytes + st.passthrough_bytes > o->limit_bytes)
        pt_pool_trim(pool, 0);
      res->pass_allocs++;
      break;
    }
    case 'Q':
      pt_pool_note_passthrough(pool, -(int64_t)op->bytes);
      res->pass_frees++;
      break;
    }
  }
  pt_pool_stats(pool, &res->pool);
  struct pt_host_counters hc;
  pt_backend_host_counters(&bk_view, &hc);
  res->creates = hc.creates, res->maps = hc.maps, res->unmaps = hc.unmaps, res->releases = hc.releases;
  res->peak_live_bytes = peak_live;
  res->peak_physical_bytes = res->pool.peak_physical_bytes;
  res->overhead = peak_live ? (double)res->peak_physical_bytes / (double)peak_live - 1.0 : 0.0;
  if (o->time_ops) {
    memcpy(tall, ta, na * sizeof *ta);
    memcpy(tall + na, tf, nf * sizeof *tf);
    qsort(ta, na, sizeof *ta, cmp_u32);
    qsort(tf, nf, sizeof *tf, cmp_u32);
    qsort(tall, na + nf, sizeof *tall, cmp_u32);
    res->alloc_p50 = pct(ta, na, 0.5), res->alloc_p99 = pct(ta, na, 0.99);
    res->free_p50 = pct(tf, nf, 0.5), res->free_p99 = pct(tf, nf, 0.99);
    res->op_p50 = pct(tall, na + nf, 0.5), res->op_p99 = pct(tall, na + nf, 0.99);
  }
  free(ptrs), free(ta), free(tf), free(tall);
  pt_pool_destroy(pool);
  return 0;
}
