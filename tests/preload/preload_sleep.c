/* Sleep and wake of a process under the shim (issue 50), against the fake
 * CUDA: a worker thread launches kernels and copies while the main thread
 * talks to the process's own control socket (as `ponytail sleep` does).
 *
 *   preload_sleep SCENARIO DIR   (PONYTAIL_CONTROL_DIR is set by meson)
 *
 * cycle:   sleep, the device memory falls to what is not pooled, the worker's
 *          launches and copies are held, status says so, a second sleep and
 *          a wake of an awake process are refused, wake: every byte back at
 *          the same address, the worker runs on; then sleep --discard/wake.
 *          In the default kind of host memory (registered); "handles" and
 *          "pinned" scenarios name another, "threads" several helper threads,
 *          "reuse" memory kept between sleeps (tests/preload/meson.build)
 * timeout: a copy that does not return within PONYTAIL_SLEEP_TIMEOUT: the
 *          sleep is refused, the process runs on (launches continue)
 * nobody:  a peer of another user reaches no socket (run as root only)
 * baddir:  PONYTAIL_CONTROL_DIR open to others: no socket, the process works
 * off:     PONYTAIL_CONTROL=0: no socket, the process works */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "common/control_path.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/pattern.h"
#include "tests/preload/preload_check.h"
#include "tests/preload/preload_ctl.h"

extern void **__cudaRegisterFatBinary(void *);
extern void __cudaRegisterFatBinaryEnd(void **);
extern void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
                                   int *);

#define MiB (1ull << 20)
#define NBUF 6

static const char *g_dir;
static const char *g_scenario; /* argv[1] */
static void stub(void) {}
static uint64_t g_launches, g_copies; /* atomic: the worker's successful calls */
static int g_stop;
static void *g_buf[NBUF];
static size_t g_size[NBUF];
static void *g_small;

/* Live page-locked host buffers of either kind (cuMemHostAlloc,
 * cuMemHostRegister). */
static uint64_t buffers(void) { return fakecuda_host_allocs() + fakecuda_host_registered(); }
/* Driver calls that get host memory for a sleep, of any kind. */
static uint64_t host_memory_calls(void) {
  return fakecuda_count("cuMemHostAlloc") + fakecuda_count("cuMemCreate") + fakecuda_count("cuMemHostRegister_v2");
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void *worker(void *arg) {
  (void)arg;
  dim3 g = {1, 1, 1}, b = {32, 1, 1};
  void *args[1] = {&g_small};
  char host[4096];
  while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
    if (cudaLaunchKernel((const void *)stub, g, b, args, 0, 0) == cudaSuccess)
      __atomic_fetch_add(&g_launches, 1, __ATOMIC_RELAXED);
    /* A driver copy out of pooled memory: held while asleep, as the launch. */
    if (cuMemcpyDtoH_v2(host, (CUdeviceptr)(uintptr_t)g_buf[0], sizeof host) == CUDA_SUCCESS)
      __atomic_fetch_add(&g_copies, 1, __ATOMIC_RELAXED);
    sleep_ms(1);
  }
  return NULL;
}

static void fill(int key) {
  for (int i = 0; i < NBUF; i++) pt_pat_fill(g_buf[i], g_size[i], (uint64_t)(i + key), 4096);
}

static int intact(int key) {
  for (int i = 0; i < NBUF; i++)
    if (pt_pat_bad(g_buf[i], g_size[i], (uint64_t)(i + key), 4096) != UINT64_MAX) return 0;
  return 1;
}

static void setup(void) {
  void **h = __cudaRegisterFatBinary((void *)"fatbin");
  __cudaRegisterFunction(h, (const char *)stub, (char *)"_Z6workerv", "_Z6workerv", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(h);
  for (int i = 0; i < NBUF; i++) {
    g_size[i] = (size_t)(i + 1) * 5 * MiB;
    CHECK_EQ(cudaMalloc(&g_buf[i], g_size[i]), cudaSuccess);
  }
  CHECK_EQ(cudaMalloc(&g_small, 4096), cudaSuccess); /* below PONYTAIL_KV_MIN: passed through */
}

static uint64_t wait_counter(uint64_t *c, uint64_t above) {
  for (int i = 0; i < 2000 && __atomic_load_n(c, __ATOMIC_RELAXED) <= above; i++) sleep_ms(1);
  return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static int sc_cycle(void) {
  setup();
  fill(0);
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  wait_counter(&g_copies, 5);
  uint64_t dev_before = fakecuda_device_bytes(0);
  char *r = ask("status");
  CHECK(r && !strncmp(r, "ok\nstate=awake", 14));
  CHECK_EQ(field(r, "pid"), getpid());

  /* The kind of host memory the scenario's PONYTAIL_SLEEP_HOST names
   * (tests/preload/meson.build: "handles" or "pinned" in its name, else the
   * default, registered); "reuse" scenarios set PONYTAIL_SLEEP_REUSE=1. */
  bool handles = strstr(g_scenario, "handles") != NULL;
  bool registered = !handles && !strstr(g_scenario, "pinned");
  bool reuse = strstr(g_scenario, "reuse") != NULL;
  if (registered) {
    /* The driver cannot page-lock the second buffer: the sleep is refused
     * with the driver's reason, no host memory stays held and the process
     * runs on with every byte. */
    fakecuda_fail("cuMemHostRegister_v2", fakecuda_count("cuMemHostRegister_v2") + 2, CUDA_ERROR_OUT_OF_MEMORY);
    uint64_t l0 = __atomic_load_n(&g_launches, __ATOMIC_RELAXED);
    r = ask("sleep");
    CHECK(r && !strncmp(r, "error: ", 7) && strstr(r, "out of host memory for the copy: try --discard"));
    if (r && strncmp(r, "error", 5)) fprintf(stderr, "failing sleep answered: %s", r);
    CHECK_EQ(buffers(), 0);
    r = ask("status");
    CHECK(r && strstr(r, "state=awake"));
    CHECK(wait_counter(&g_launches, l0 + 5) > l0);
    CHECK(intact(0));
  }

  /* A stream capturing a CUDA graph: the device cannot be drained (it would
   * invalidate the capture), so the sleep is refused and the process runs on;
   * once the capture ends, the sleep goes ahead. */
  CUstream cu_cs;
  CHECK_EQ(cuStreamCreate(&cu_cs, 0), CUDA_SUCCESS);
  cudaStream_t cs = (cudaStream_t)cu_cs;
  CHECK_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal), cudaSuccess);
  r = ask("sleep");
  CHECK(r && !strncmp(r, "error: 1 CUDA graph capture(s) in progress", 42));
  if (r && strncmp(r, "error", 5)) fprintf(stderr, "sleep during a capture answered: %s", r);
  r = ask("status");
  CHECK(r && strstr(r, "state=awake"));
  cudaGraph_t cg;
  CHECK_EQ(cudaStreamEndCapture(cs, &cg), cudaSuccess);
  CHECK_EQ(cudaStreamEndCapture(cs, &cg) != cudaSuccess, 1); /* no capture: the count stays at 0 */
  CHECK_EQ(cuStreamDestroy_v2(cu_cs), CUDA_SUCCESS);
  /* Captures that end otherwise: one the driver ended (an error: the stream no
   * longer captures), which leaves the set at its thread's next end call
   * whatever that call returns, and a stream destroyed while it captured.
   * Neither keeps the process from sleeping. */
  CUstream s2, s3;
  CHECK_EQ(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
  CHECK_EQ(cuStreamCreate(&s3, 0), CUDA_SUCCESS);
  CHECK_EQ(cudaStreamBeginCapture((cudaStream_t)s2, cudaStreamCaptureModeGlobal), cudaSuccess);
  CHECK_EQ(cudaStreamBeginCapture((cudaStream_t)s3, cudaStreamCaptureModeGlobal), cudaSuccess);
  r = ask("sleep");
  CHECK(r && !strncmp(r, "error: 2 CUDA graph capture(s) in progress", 42));
  fakecuda_set_capturing(s2, 0);
  r = ask("sleep"); /* the set is only ever updated by the capturing thread: still 2 */
  CHECK(r && !strncmp(r, "error: 2 CUDA graph capture(s) in progress", 42));
  cudaGraph_t g2;
  CHECK_EQ(cudaStreamEndCapture((cudaStream_t)s2, &g2) != cudaSuccess, 1); /* no capture to end: an error */
  CHECK_EQ(cuStreamDestroy_v2(s3), CUDA_SUCCESS);

  r = ask("sleep");
  CHECK(r && !strncmp(r, "ok\nstate=asleep\nmode=copy", 25));
  if (r && strncmp(r, "ok", 2)) fprintf(stderr, "sleep answered: %s", r);
  long long released = field(r, "bytes");
  CHECK(released >= (long long)(105 * MiB)); /* 5+10+...+30 MiB, rounded to granules */
  CHECK_EQ(field(r, "copied_bytes"), released);
  CHECK_EQ(field(r, "after_pool_bytes"), 0);
  CHECK_EQ(field(r, "passthrough_live"), 1);
  /* The bytes wait in that kind of host memory: one page-locked buffer per
   * handle (ordinary memory given to cuMemHostRegister, or cuMemHostAlloc),
   * or host handles of as many bytes. */
  CHECK(strstr(r, handles ? "\nhost=handles\n" : registered ? "\nhost=registered\n" : "\nhost=pinned\n") != NULL);
  uint64_t nbuf = handles ? 0 : (uint64_t)field(r, "handles");
  CHECK_EQ(fakecuda_host_allocs(), registered ? 0 : nbuf);
  CHECK_EQ(fakecuda_host_registered(), registered ? nbuf : 0);
  CHECK_EQ(fakecuda_host_vmm_bytes(), handles ? (uint64_t)released : 0);
  /* The device holds what was not pooled: the 4 KiB buffer. */
  CHECK(fakecuda_device_bytes(0) <= dev_before - (uint64_t)released);
  CHECK(fakecuda_device_bytes(0) < 1 * MiB);
  /* The worker is held: no launch, no copy while asleep. */
  sleep_ms(30);
  uint64_t l0 = __atomic_load_n(&g_launches, __ATOMIC_RELAXED), c0 = __atomic_load_n(&g_copies, __ATOMIC_RELAXED);
  sleep_ms(200);
  CHECK_EQ(__atomic_load_n(&g_launches, __ATOMIC_RELAXED), l0);
  CHECK_EQ(__atomic_load_n(&g_copies, __ATOMIC_RELAXED), c0);
  r = ask("status");
  CHECK(r && strstr(r, "state=asleep"));
  CHECK_EQ(field(r, "held_threads"), 1);
  r = ask("sleep");
  CHECK(r && !strncmp(r, "error: already asleep", 21));
  r = ask("sleep discard");
  CHECK(r && !strncmp(r, "error: already asleep", 21));
  r = ask("dance");
  CHECK(r && !strncmp(r, "error: unknown request", 22));

  r = ask("wake");
  CHECK(r && !strncmp(r, "ok\nstate=awake", 14));
  if (r && strncmp(r, "ok", 2)) fprintf(stderr, "wake answered: %s", r);
  CHECK_EQ(field(r, "bytes"), released);
  /* The answer comes once the process runs again; the host memory is freed
   * after it (kept for the next sleep under PONYTAIL_SLEEP_REUSE), by the
   * control thread, before it answers the next request: a status says when. */
  CHECK(strstr(r, reuse ? "\nrelease=kept\n" : "\nrelease=after_answer\n") != NULL);
  long long wake_handles = field(r, "handles");
  r = ask("status");
  CHECK(r && strstr(r, "state=awake") && field(r, "last_release_s") >= 0);
  CHECK_EQ(buffers(), reuse && !handles ? (uint64_t)wake_handles : 0);
  CHECK_EQ(fakecuda_host_vmm_bytes(), reuse && handles ? (uint64_t)released : 0);
  CHECK(intact(0)); /* every byte back, at the same address */
  if (reuse) { /* a second sleep takes all of it again, and nothing new */
    fill(3);
    uint64_t calls = host_memory_calls();
    r = ask("sleep");
    CHECK(r && !strncmp(r, "ok\nstate=asleep", 15));
    CHECK_EQ(field(r, "reused_bytes"), released);
    CHECK_EQ(host_memory_calls(), calls);
    r = ask("wake");
    CHECK(r && !strncmp(r, "ok", 2));
    CHECK(intact(3));
  }
  wait_counter(&g_launches, l0 + 5);
  CHECK(__atomic_load_n(&g_launches, __ATOMIC_RELAXED) > l0);
  CHECK(__atomic_load_n(&g_copies, __ATOMIC_RELAXED) > c0);
  r = ask("wake");
  CHECK(r && !strncmp(r, "error: not asleep", 17));

  /* prepare: the host memory got while the process runs (the worker goes on),
   * so that the sleep after only copies; refused while asleep. */
  fill(5);
  r = ask("prepare");
  CHECK(r && !strncmp(r, "ok\nstate=awake\nmode=prepare", 27));
  if (r && strncmp(r, "ok", 2)) fprintf(stderr, "prepare answered: %s", r);
  CHECK(field(r, "bytes") + field(r, "reused_bytes") >= released);
  CHECK(reuse || field(r, "bytes") > 0);
  uint64_t lp = __atomic_load_n(&g_launches, __ATOMIC_RELAXED);
  CHECK(wait_counter(&g_launches, lp + 5) > lp);
  uint64_t calls = host_memory_calls();
  r = ask("sleep");
  CHECK(r && !strncmp(r, "ok\nstate=asleep", 15));
  CHECK_EQ(field(r, "reused_bytes"), released);
  CHECK_EQ(host_memory_calls(), calls); /* none got by the sleep */
  r = ask("prepare");
  CHECK(r && !strncmp(r, "error: asleep", 13));
  r = ask("wake");
  CHECK(r && !strncmp(r, "ok", 2));
  CHECK(intact(5));

  /* --discard: nothing kept on the host; the memory comes back usable. */
  r = ask("sleep discard");
  CHECK(r && strstr(r, "mode=discard"));
  CHECK_EQ(field(r, "copied_bytes"), 0);
  CHECK_EQ(buffers(), reuse && !handles ? (uint64_t)field(r, "handles") : 0);
  CHECK(fakecuda_device_bytes(0) < 1 * MiB);
  r = ask("wake");
  CHECK(r && !strncmp(r, "ok", 2));
  fill(7);
  CHECK(intact(7));
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  for (int i = 0; i < NBUF; i++) CHECK_EQ(cudaFree(g_buf[i]), cudaSuccess);
  CHECK_EQ(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
  return g_failed;
}

static void check_cycle(const char *js) {
  /* The exit stats count the three sleeps and wakes and the prepare, and
   * nothing is asleep. */
  CHECK(strstr(js, "\"sleeps\":3") != NULL);
  CHECK(strstr(js, "\"wakes\":3") != NULL);
  CHECK(strstr(js, "\"prepares\":1") != NULL);
  CHECK(strstr(js, "\"asleep_bytes\":0") != NULL);
  CHECK(strstr(js, "\"internal_errors\":0") != NULL);
}

/* With PONYTAIL_SLEEP_REUSE the cycle sleeps a fourth time, and the host
 * memory is still held at exit (the pool frees it when destroyed). */
static void check_reuse(const char *js) {
  CHECK(strstr(js, "\"sleeps\":4") != NULL);
  CHECK(strstr(js, "\"wakes\":4") != NULL);
  CHECK(strstr(js, "\"host_reused_bytes\":0,") == NULL);
  CHECK(strstr(js, "\"internal_errors\":0") != NULL);
}

/* A copy that outlasts PONYTAIL_SLEEP_TIMEOUT (1 s; the fake's copies take
 * FAKECUDA_COPY_DELAY_MS, 2500): the sleep gives up, nothing changes. */
static void *slow_copy(void *arg) {
  (void)arg;
  char host[64];
  CHECK_EQ(cuMemcpyDtoH_v2(host, (CUdeviceptr)(uintptr_t)g_buf[1], sizeof host), CUDA_SUCCESS);
  return NULL;
}

static int sc_timeout(void) {
  setup();
  fill(3);
  pthread_t t;
  pthread_create(&t, NULL, slow_copy, NULL);
  sleep_ms(200); /* inside the copy */
  char *r = ask("sleep");
  CHECK(r && strstr(r, "error: 1 CUDA call(s) of the process still running after 1 s") == r);
  if (r && strncmp(r, "error", 5)) fprintf(stderr, "sleep answered: %s", r);
  r = ask("status");
  CHECK(r && strstr(r, "state=awake"));
  pthread_join(t, NULL);
  /* The gate is open again: calls go through at once. */
  dim3 g = {1, 1, 1}, b = {1, 1, 1};
  void *args[1] = {&g_small};
  CHECK_EQ(cudaLaunchKernel((const void *)stub, g, b, args, 0, 0), cudaSuccess);
  CHECK(intact(3));
  return g_failed;
}

/* Another user cannot reach the socket: the directory is the owner's alone. */
static int sc_nobody(void) {
  setup();
  char *r = ask("status");
  CHECK(r && !strncmp(r, "ok", 2));
  if (geteuid() != 0) {
    fprintf(stderr, "nobody: not root, only the directory mode is checked\n");
  } else {
    pid_t parent = getpid();
    pid_t c = fork();
    if (c == 0) {
      if (setgid(65534) || setuid(65534)) _exit(3);
      struct sockaddr_un a;
      if (sock_addr(&a, (int)parent)) _exit(4);
      int s = socket(AF_UNIX, SOCK_STREAM, 0);
      int rc = connect(s, (struct sockaddr *)&a, sizeof a);
      _exit(rc == 0 ? 1 : errno == EACCES ? 0 : 2);
    }
    int st = 0;
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  struct stat sd, ss;
  char sock[4200];
  snprintf(sock, sizeof sock, "%s/%d.sock", g_ctl, (int)getpid());
  CHECK_EQ(stat(g_ctl, &sd), 0);
  CHECK_EQ(sd.st_mode & 0777, 0700);
  CHECK_EQ(stat(sock, &ss), 0);
  CHECK_EQ(ss.st_mode & 0777, 0600);
  return g_failed;
}

/* No socket, and the process runs as ever. */
static int sc_nosocket(void) {
  setup();
  fill(5);
  errno = 0;
  CHECK(ask("status") == NULL);
  CHECK(errno == ENOENT || errno == EACCES);
  dim3 g = {1, 1, 1}, b = {1, 1, 1};
  void *args[1] = {&g_small};
  CHECK_EQ(cudaLaunchKernel((const void *)stub, g, b, args, 0, 0), cudaSuccess);
  CHECK(intact(5));
  return g_failed;
}

/* A process for the CLI test (tests/preload/sleep_cli.sh): pooled buffers
 * with patterns, a worker launching, "DIR/ready" holding its pid; it runs
 * until DIR/stop appears. When DIR/check appears it checks every byte and
 * answers in DIR/checked ("intact" or "broken"). */
static int sc_serve(void) {
  setup();
  fill(11);
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/ready", g_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return 1;
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  rename(tmp, path);
  char stop[4200], chk[4200], ans[4300];
  snprintf(stop, sizeof stop, "%s/stop", g_dir);
  snprintf(chk, sizeof chk, "%s/check", g_dir);
  snprintf(ans, sizeof ans, "%s/checked", g_dir);
  for (int i = 0; i < 60000 && access(stop, F_OK); i++) {
    if (!access(chk, F_OK)) {
      FILE *a = fopen(tmp, "w");
      if (a) {
        fprintf(a, "%s\n", intact(11) ? "intact" : "broken");
        fclose(a);
        unlink(chk);
        rename(tmp, ans);
      }
    }
    sleep_ms(1);
  }
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CHECK(__atomic_load_n(&g_launches, __ATOMIC_RELAXED) > 0);
  return g_failed;
}

int main(int argc, char **argv) {
  static const struct preload_scenario sc[] = {
      {"cycle", sc_cycle, check_cycle}, {"handles", sc_cycle, check_cycle}, {"threads", sc_cycle, check_cycle},
      {"handles_threads", sc_cycle, check_cycle}, {"reuse", sc_cycle, check_reuse},
      {"handles_reuse", sc_cycle, check_reuse}, {"pinned", sc_cycle, check_cycle},
      {"pinned_threads", sc_cycle, check_cycle}, {"pinned_reuse", sc_cycle, check_reuse}, {"timeout", sc_timeout, NULL},
      {"nobody", sc_nobody, NULL}, {"baddir", sc_nosocket, NULL}, {"off", sc_nosocket, NULL}, {"serve", sc_serve, NULL}};
  const struct preload_scenario *s = preload_args(argc, argv, sc, sizeof sc / sizeof sc[0], &g_dir);
  if (!s) return 2;
  g_scenario = s->name;
  ctl_setup();
  if (!strcmp(s->name, "baddir")) {
    /* A directory open to others: the shim must refuse it. */
    mkdir(g_ctl, 0755);
    chmod(g_ctl, 0755);
  }
  return run_scenario(g_dir, s->name, s->run, s->check, NULL, 3000);
}
