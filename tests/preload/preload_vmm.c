/* PyTorch's expandable segments under the shim (shim/route_vmm.c), against
 * the fake CUDA and a stand-in libc10_cuda.so (tests/preload/fake_c10.c) on a
 * 64 MiB fake device (FAKECUDA_DEVMEM, set by meson), 2 MiB segments:
 *
 *   preload_vmm SCENARIO DIR
 *
 * (keep, sleep, prepare, reuse and twodev run with PONYTAIL_TORCH_ALLOC=expandable,
 * limit and tier with their options: PONYTAIL_TORCH_VMM=auto keeps the handles.)
 * keep:  PyTorch's handles are the shim's (never a driver value), every call
 *        on them works (map, access, bytes, properties, export), its release
 *        before its unmap keeps the memory until the unmap, bad and double
 *        releases are refused as the driver refuses them, nothing leaks; the
 *        test program's own cuMemCreate (not PyTorch's) gets the driver's
 *        handle; the log says once what the shim does; the stats count it.
 * on:    PONYTAIL_TORCH_VMM=on without any memory option: as keep.
 * off:   PONYTAIL_TORCH_VMM=off: the driver's handles, nothing kept.
 * auto:  the default with no memory option of Ponytail's (PyTorch's own
 *        expandable_segments:True alone): as off.
 * limit: PONYTAIL_MEM_LIMIT=16M: the ninth segment is refused out-of-memory,
 *        as PyTorch's map expects it, and counted.
 * tier:  PONYTAIL_HOST_TIER=256M with an 8 MiB reserve: the device fills to
 *        its reserve, the first ask past it is answered out-of-memory, the
 *        next one (PyTorch's, after emptying its cache) lands on host memory
 *        at the segment's address, every byte kept (an ask while a graph
 *        capture is open is covered at once); when the host will pin no more,
 *        out-of-memory, said once, nothing lost; once PyTorch unmaps
 *        device segments, the mover brings the host segments back to the
 *        device at the same addresses, bytes intact.
 * sleep: `sleep` over the control socket releases PyTorch's segments (the
 *        fake device holds none), a segment PyTorch maps meanwhile waits for
 *        the wake (a wake without room fails whole and it stays asleep), `wake`
 *        brings every byte back at the same address; the
 *        same through `ponytail sleep` and `ponytail wake`, whose answers
 *        name PyTorch's part; an exported segment makes the next sleep refuse.
 * prepare: `prepare` gets the host memory of the next sleep while the process
 *        runs, and the sleep only copies into it; a wake frees it, `prepare
 *        release` frees a prepared one.
 * reuse: PONYTAIL_SLEEP_REUSE=1: a wake keeps it for the next sleep.
 * sleepfail: a sleep whose copy fails and one whose unmap fails midway are
 *        refused, the process runs on with every byte in place; then one works.
 * twodev: the segments on the second device: its context, its memory, its
 *        access after the wake. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/fakecuda/fakecuda.h"
#include "tests/pattern.h"
#include "tests/preload/preload_check.h"
#include "tests/preload/preload_ctl.h"

#define MiB (1ull << 20)
#define SEG (2 * MiB)

int fc10_init(int device, uint64_t segment_bytes);
int fc10_map(int first, int n);
int fc10_unmap(int first, int n);
void *fc10_ptr(int i);
uint64_t fc10_handle(int i);
int fc10_release(uint64_t h);
int fc10_export(int i, int *fd);
int fc10_props(int i, CUmemAllocationProp *prop);

static const char *g_dir;
static const char *g_scenario; /* argv[1] */

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}
static int ours(uint64_t h) { return (h >> 48) == 0x5054u; }
static void fill(int first, int n, uint64_t key) {
  for (int i = first; i < first + n; i++) pt_pat_fill(fc10_ptr(i), SEG, key + (uint64_t)i, 4096);
}
static int intact(int first, int n, uint64_t key) {
  for (int i = first; i < first + n; i++)
    if (pt_pat_bad(fc10_ptr(i), SEG, key + (uint64_t)i, 4096) != UINT64_MAX) return 0;
  return 1;
}

/* The device's primary context current, as PyTorch has it before it maps. */
static void context(void) {
  CUcontext c = NULL;
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CHECK_EQ(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  CHECK_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
  CHECK_EQ(fc10_init(0, SEG), 0);
}

/* PyTorch's first n segments mapped and filled with key's pattern, and the
 * control thread (which the first kept handle starts) answering. */
static void started(int n, uint64_t key) {
  context();
  CHECK_EQ(fc10_map(0, n), 0);
  fill(0, n, key);
  CHECK(ctl_wait());
}

/* The number after "key" in the stats' "torch_vmm" object, or -1. */
static long long vmm_stat(const char *js, const char *key) {
  const char *a = js ? strstr(js, "\"torch_vmm\":{") : NULL;
  if (!a) return -1;
  const char *end = strchr(a, '}');
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(a, k);
  return p && p < end ? atoll(p + strlen(k)) : -1;
}

/* ---- keep ----------------------------------------------------------------- */

static int sc_keep(void) {
  context();
  CHECK_EQ(fc10_map(0, 8), 0);
  for (int i = 0; i < 8; i++) CHECK(ours(fc10_handle(i)));
  CHECK_EQ(fakecuda_vmm_handles(), 8);
  CHECK_EQ(fakecuda_device_bytes(0), 8 * SEG);
  fill(0, 8, 11);
  CHECK(intact(0, 8, 11));
  CUmemAllocationProp prop;
  CHECK_EQ(fc10_props(0, &prop), CUDA_SUCCESS);
  CHECK(prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop.location.id == 0);
  CHECK(prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  int fd = -1;
  CHECK_EQ(fc10_export(0, &fd), CUDA_SUCCESS);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_EQ(fc10_unmap(4, 4), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 4);
  /* Released first, unmapped later: the memory stays until the unmap. */
  uint64_t h3 = fc10_handle(3);
  CHECK_EQ(fc10_release(h3), CUDA_SUCCESS);
  CHECK_EQ(fakecuda_vmm_handles(), 4);
  CHECK(intact(3, 1, 11));
  CHECK_EQ(fc10_release(h3), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(cuMemUnmap((CUdeviceptr)(uintptr_t)fc10_ptr(3), SEG), CUDA_SUCCESS);
  CHECK_EQ(fakecuda_vmm_handles(), 3);
  CHECK_EQ(fc10_release(0x5054000000009999ull), CUDA_ERROR_INVALID_VALUE);
  /* A stale value (h3's slot taken by a new segment) misses: the new one is not released. */
  CHECK_EQ(fc10_map(3, 1), 0);
  CHECK(fc10_handle(3) != h3);
  CHECK_EQ(fc10_release(h3), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(fakecuda_vmm_handles(), 4);
  CHECK_EQ(fc10_unmap(3, 1), 0);
  /* The program's own handle (not PyTorch's allocator): the driver's. */
  CUmemAllocationProp own;
  memset(&own, 0, sizeof own);
  own.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  own.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  CHECK_EQ(cuMemCreate(&h, SEG, &own, 0), CUDA_SUCCESS);
  CHECK(h && !ours(h));
  CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
  CHECK(intact(0, 3, 11));
  CHECK_EQ(fc10_unmap(0, 3), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  CHECK_EQ(fakecuda_device_bytes(0), 0);
  return g_failed;
}

static void check_keep(const char *js) {
  CHECK_EQ(vmm_stat(js, "creates"), 9);
  CHECK_EQ(vmm_stat(js, "releases"), 9);
  CHECK_EQ(vmm_stat(js, "handles"), 0);
  CHECK_EQ(vmm_stat(js, "peak_bytes"), 8 * SEG);
  CHECK_EQ(stat_call(js, "cuMemCreate"), 10);
}

/* ---- off ------------------------------------------------------------------ */

static int sc_off(void) {
  context();
  CHECK_EQ(fc10_map(0, 4), 0);
  for (int i = 0; i < 4; i++) CHECK(fc10_handle(i) && !ours(fc10_handle(i)));
  fill(0, 4, 5);
  CHECK(intact(0, 4, 5));
  CHECK_EQ(fc10_unmap(0, 4), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  return g_failed;
}

static void check_off(const char *js) { CHECK_EQ(vmm_stat(js, "creates"), 0); }

/* ---- limit ---------------------------------------------------------------- */

static int sc_limit(void) {
  context();
  CHECK_EQ(fc10_map(0, 8), 0);
  CHECK_EQ(fc10_map(8, 1), -2); /* past 16 MiB: out of memory, nothing mapped */
  CHECK_EQ(fakecuda_vmm_handles(), 8);
  CHECK_EQ(fc10_unmap(0, 8), 0);
  CHECK_EQ(fc10_map(0, 8), 0); /* the charge went back with the memory */
  CHECK_EQ(fc10_unmap(0, 8), 0);
  return g_failed;
}

static void check_limit(const char *js) {
  CHECK(vmm_stat(js, "limit_rejections") >= 1);
  CHECK_EQ(vmm_stat(js, "creates"), 16);
}

/* ---- tier ----------------------------------------------------------------- */

static int sc_tier(void) {
  context();
  /* 64 MiB less the 8 MiB reserve: 28 segments on the device. */
  CHECK_EQ(fc10_map(0, 28), 0);
  /* While a graph capture is open PyTorch does not empty its cache and ask again: covered at once. */
  CUstream cs = NULL;
  CUgraph cg = NULL;
  CHECK_EQ(cuStreamCreate(&cs, 0), CUDA_SUCCESS);
  CHECK_EQ(cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CHECK_EQ(fc10_map(28, 1), 0);
  CHECK_EQ(cuStreamEndCapture(cs, &cg), CUDA_SUCCESS);
  CHECK_EQ(fakecuda_host_vmm_bytes(), SEG);
  CHECK_EQ(fc10_unmap(28, 1), 0);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK_EQ(fc10_map(28, 4), -2); /* the first ask past it */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK_EQ(fc10_map(28, 4), 0); /* the second: on the host */
  CHECK_EQ(fakecuda_host_vmm_bytes(), 4 * SEG);
  CHECK_EQ(fakecuda_device_bytes(0), 28 * SEG);
  fill(0, 32, 77);
  CHECK(intact(0, 32, 77));
  /* The host will not pin more (FAKECUDA_HOSTMEM=12M): out of memory, as PyTorch's map expects
   * it (the segments it made in this call released), nothing mapped before touched. */
  CHECK_EQ(fc10_map(32, 4), -2);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 4 * SEG);
  CHECK(intact(0, 32, 77));
  /* Room on the device: the mover brings the host segments back. */
  CHECK_EQ(fc10_unmap(0, 8), 0);
  for (int t = 0; t < 300 && fakecuda_host_vmm_bytes(); t++) sleep_ms(10);
  CHECK_EQ(fakecuda_host_vmm_bytes(), 0);
  CHECK_EQ(fakecuda_device_bytes(0), 24 * SEG);
  CHECK(intact(8, 24, 77));
  CHECK_EQ(fc10_unmap(8, 24), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  return g_failed;
}

static void check_tier(const char *js) {
  CHECK_EQ(vmm_stat(js, "tier_allocs"), 7);
  CHECK_EQ(vmm_stat(js, "tier_refusals"), 1);
  CHECK_EQ(vmm_stat(js, "tier_deferrals"), 1);
  CHECK_EQ(vmm_stat(js, "tier_moved_bytes"), 4 * SEG);
  CHECK_EQ(vmm_stat(js, "peak_host_bytes"), 6 * SEG);
  CHECK_EQ(vmm_stat(js, "host_bytes"), 0);
}

/* ---- sleep ---------------------------------------------------------------- */

static int g_mapped_late = -1; /* atomic: the late map's result */

static void *late_map(void *arg) {
  (void)arg;
  CUcontext c = NULL;
  (void)cuDevicePrimaryCtxRetain(&c, 0);
  (void)cuCtxSetCurrent(c);
  __atomic_store_n(&g_mapped_late, fc10_map(8, 1), __ATOMIC_RELEASE);
  return NULL;
}

static int sc_sleep(void) {
  started(8, 31);
  char *rep = ask("sleep");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  CHECK_EQ(field(rep, "torch_bytes"), 8 * SEG);
  CHECK_EQ(field(rep, "torch_copied_bytes"), 8 * SEG);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  CHECK_EQ(fakecuda_device_bytes(0), 0);
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, late_map, NULL), 0);
  sleep_ms(200);
  CHECK_EQ(__atomic_load_n(&g_mapped_late, __ATOMIC_ACQUIRE), -1); /* held at the gate */
  /* Another process took the memory: the wake fails whole (what it mapped is undone), still asleep. */
  fakecuda_set_devmem(5 * SEG);
  rep = ask("wake");
  CHECK(rep && strstr(rep, "error: PyTorch's own mapped memory: CUDA error 2 while mapping memory back"));
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  CHECK_EQ(fakecuda_device_bytes(0), 0);
  CHECK_EQ(__atomic_load_n(&g_mapped_late, __ATOMIC_ACQUIRE), -1);
  fakecuda_set_devmem(64 * MiB);
  rep = ask("wake");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  CHECK_EQ(field(rep, "torch_bytes"), 8 * SEG);
  pthread_join(th, NULL);
  CHECK_EQ(g_mapped_late, 0);
  CHECK(intact(0, 8, 31));
  CHECK_EQ(fakecuda_device_bytes(0), 9 * SEG);
  /* The same through the CLI (PT_CLI, set by meson): it names PyTorch's part. */
  const char *cli = getenv("PT_CLI");
  CHECK(cli != NULL);
  if (cli) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s sleep %d > %s/cli.txt 2>&1 && %s wake %d >> %s/cli.txt 2>&1", cli, (int)getpid(),
             g_dir, cli, (int)getpid(), g_dir);
    CHECK_EQ(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/cli.txt", g_dir);
    const char *out = read_file(cmd);
    CHECK(out && strstr(out, "released  0.02 GiB of PyTorch's own mapped memory (expandable segments, 9 handles)\n"));
    CHECK(out && strstr(out, "kept      0.02 GiB in page-locked host memory"));
    CHECK(out && !strstr(out, "Ponytail's pool on the GPU (0"));
    CHECK(out && strstr(out, "mapped    0.02 GiB of PyTorch's own mapped memory (expandable segments) back"));
    if (g_failed && out) fprintf(stderr, "CLI:\n%s\n", out);
    snprintf(cmd, sizeof cmd, "%s sleep --status %d > %s/cli.txt 2>&1", cli, (int)getpid(), g_dir);
    CHECK_EQ(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/cli.txt", g_dir);
    out = read_file(cmd);
    CHECK(out && strstr(out, "and PyTorch's own mapped memory (expandable segments) 0.02 GiB"));

    CHECK(intact(0, 8, 31));
  }
  /* Shared with another process: refused. */
  int fd = -1;
  CHECK_EQ(fc10_export(2, &fd), CUDA_SUCCESS);
  if (fd >= 0) close(fd);
  rep = ask("sleep");
  CHECK(rep && strstr(rep, "shared with another process"));
  CHECK_EQ(fakecuda_device_bytes(0), 9 * SEG);
  CHECK_EQ(fc10_unmap(0, 9), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  return g_failed;
}

static void check_sleep(const char *js) {
  CHECK_EQ(vmm_stat(js, "sleeps"), 2);
  CHECK_EQ(vmm_stat(js, "wakes"), 2);
  CHECK_EQ(vmm_stat(js, "slept_bytes"), 17 * SEG);
  CHECK_EQ(vmm_stat(js, "errors"), 0);
}

/* ---- sleepfail ------------------------------------------------------------ */

/* A sleep whose copy fails, and one whose third unmap fails (two segments
 * already released): refused, the process runs on with every byte where it
 * was; then a sleep that works. */
static int sc_sleepfail(void) {
  started(6, 55);
  fakecuda_fail("cuMemcpyDtoH_v2", fakecuda_count("cuMemcpyDtoH_v2") + 2, CUDA_ERROR_UNKNOWN);
  char *rep = ask("sleep");
  CHECK(rep && strstr(rep, "error: CUDA error 999 while releasing PyTorch's own mapped memory"));
  CHECK_EQ(fakecuda_device_bytes(0), 6 * SEG);
  CHECK(intact(0, 6, 55));
  fakecuda_fail("cuMemUnmap", fakecuda_count("cuMemUnmap") + 3, CUDA_ERROR_UNKNOWN);
  rep = ask("sleep");
  CHECK(rep && strstr(rep, "error: CUDA error 999 while releasing PyTorch's own mapped memory"));
  CHECK_EQ(fakecuda_device_bytes(0), 6 * SEG); /* the two released first are back */
  CHECK_EQ(fakecuda_vmm_handles(), 6);
  CHECK(intact(0, 6, 55));
  fill(0, 6, 56); /* the process runs on: its memory takes writes */
  rep = ask("sleep");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  rep = ask("wake");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  CHECK(intact(0, 6, 56));
  CHECK_EQ(fc10_unmap(0, 6), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  return g_failed;
}

static void check_sleepfail(const char *js) {
  CHECK_EQ(vmm_stat(js, "sleeps"), 1);
  CHECK_EQ(vmm_stat(js, "errors"), 2);
}

/* ---- twodev --------------------------------------------------------------- */

/* PyTorch's segments on the second device: kept there, slept and woken in that
 * device's context, counted against that device's memory. */
static int sc_twodev(void) {
  CUcontext c = NULL;
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CHECK_EQ(cuDevicePrimaryCtxRetain(&c, 1), CUDA_SUCCESS);
  CHECK_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
  CHECK_EQ(fc10_init(1, SEG), 0);
  CHECK_EQ(fc10_map(0, 4), 0);
  CHECK(ours(fc10_handle(0)));
  CUmemAllocationProp prop;
  CHECK_EQ(fc10_props(0, &prop), CUDA_SUCCESS);
  CHECK_EQ(prop.location.id, 1);
  CHECK_EQ(fakecuda_device_bytes(1), 4 * SEG);
  CHECK_EQ(fakecuda_device_bytes(0), 0);
  fill(0, 4, 23);
  CHECK(ctl_wait());
  char *rep = ask("sleep");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  CHECK_EQ(fakecuda_device_bytes(1), 0);
  rep = ask("wake");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  CHECK_EQ(fakecuda_device_bytes(1), 4 * SEG);
  CHECK_EQ(fakecuda_access_mask(fc10_ptr(0)), 2u); /* device 1's access, as PyTorch set it */
  CHECK(intact(0, 4, 23));
  CHECK_EQ(fc10_unmap(0, 4), 0);
  CHECK_EQ(fakecuda_vmm_handles(), 0);
  return g_failed;
}

/* ---- prepare, reuse ------------------------------------------------------- */

static int sc_prepare(void) {
  started(8, 41);
  const int reuse = !strcmp(g_scenario, "reuse"); /* meson sets PONYTAIL_SLEEP_REUSE=1 for it */
  char *rep;
  if (!reuse) { /* host memory got ahead, while the process runs */
    rep = ask("prepare");
    CHECK(rep && !strncmp(rep, "ok\n", 3));
    CHECK_EQ(field(rep, "torch_bytes"), 8 * SEG);
    rep = ask("prepare");
    CHECK_EQ(field(rep, "torch_reused_bytes"), 8 * SEG); /* had it already */
  }
  for (int round = 0; round < 2; round++) {
    rep = ask("sleep");
    CHECK(rep && !strncmp(rep, "ok\n", 3));
    CHECK_EQ(field(rep, "torch_bytes"), 8 * SEG);
    /* Prepared, or kept from the last wake: the sleep only copies. */
    CHECK_EQ(field(rep, "torch_reused_bytes"), reuse && round == 0 ? 0 : 8 * SEG);
    CHECK_EQ(fakecuda_device_bytes(0), 0);
    rep = ask("wake");
    CHECK(rep && !strncmp(rep, "ok\n", 3));
    CHECK(intact(0, 8, 41));
    if (!reuse) {
      rep = ask("prepare");
      CHECK_EQ(field(rep, "torch_bytes"), 8 * SEG); /* the wake freed the last one */
    }
  }
  rep = ask("prepare release");
  CHECK(rep && !strncmp(rep, "ok\n", 3));
  CHECK_EQ(field(rep, "freed_bytes"), 8 * SEG);
  rep = ask("prepare release");
  CHECK_EQ(field(rep, "freed_bytes"), 0);
  CHECK_EQ(fc10_unmap(0, 8), 0);
  return g_failed;
}

int main(int argc, char **argv) {
  static const struct preload_scenario sc[] = {
      {"keep", sc_keep, check_keep}, {"on", sc_keep, check_keep}, {"off", sc_off, check_off},
      {"auto", sc_off, check_off}, {"limit", sc_limit, check_limit}, {"tier", sc_tier, check_tier},
      {"sleep", sc_sleep, check_sleep}, {"prepare", sc_prepare, NULL}, {"reuse", sc_prepare, NULL},
      {"twodev", sc_twodev, NULL}, {"sleepfail", sc_sleepfail, check_sleepfail}};
  const struct preload_scenario *s = preload_args(argc, argv, sc, sizeof sc / sizeof sc[0], &g_dir);
  if (!s) return 2;
  g_scenario = s->name;
  ctl_setup();
  pid_t pid;
  int rc = run_scenario(g_dir, s->name, s->run, s->check, &pid, 4000);
  const char *log = read_log(g_dir, (int)pid);
  if (s->run == sc_keep) CHECK(log && strstr(log, "PyTorch maps its own memory"));
  if (s->run == sc_off) CHECK(!log || !strstr(log, "PyTorch maps its own memory"));
  if (!strcmp(s->name, "tier")) {
    CHECK(log && strstr(log, "host tier: PyTorch's first mapping past device 0"));
    CHECK(log && strstr(log, "host tier in use on device 0: PyTorch's mapped memory"));
    CHECK(log && strstr(log, "bytes moved back to the device"));
    CHECK(log && strstr(log, "no page-locked host memory for PyTorch's mapped memory"));
  }
  return rc | g_failed;
}
