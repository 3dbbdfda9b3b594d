/* `ponytail sleep PID` and `ponytail wake PID` (issue 50): ask a process that
 * runs under the shim, through its control socket (shim/control.c), to give
 * its pooled GPU memory back and hold its CUDA work, or to take it back.
 * `ponytail stats PID` asks it for its statistics now (what PONYTAIL_STATS
 * writes at exit), for a process that runs long.
 *
 * Before anything is sent the target is checked here, so that each mistake
 * gets its own one-line answer and exit status 1: no such process, another
 * user's process, a process without the shim, a process with the shim but no
 * control socket. The socket's directory is computed from the target's own
 * environment (/proc/PID/environ), as the shim computed it there. What the
 * process says (asleep, awake, or why not) is printed readably, or as JSON
 * with --json; NVML's figure for the process, before and after, is added when
 * the driver's NVML is there. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/control_path.h"
#include "common/options.h"
#include "tools/cmd.h"
#include "tools/lib/nvml_proc.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

static void usage_sleep(FILE *f) {
  fprintf(f, "usage: ponytail sleep [--discard | --prepare | --unprepare | --status] [--json] PID\n"
             "\n"
             "Puts process PID, which runs under Ponytail, to sleep: its CUDA calls are held,\n"
             "its GPU work drains, the bytes of Ponytail's pool go to page-locked host memory\n"
             "and the pool's GPU memory is released; every address stays valid (CUDA graphs\n"
             "captured before replay after the wake). `ponytail wake PID` takes it back.\n"
             "\n"
             "  --discard   drop the pool's contents instead of copying them (its memory comes\n"
             "              back undefined: for a process that reloads or recomputes it)\n"
             "  --prepare   do not sleep: get now, while the process runs, the host memory its\n"
             "              next sleep copies into (getting it, the kernel zeroing and locking\n"
             "              every page, is most of a first sleep), so that the sleep only copies;\n"
             "              held until the wake after the next copying sleep (for good with\n"
             "              PONYTAIL_SLEEP_REUSE=1)\n"
             "  --unprepare free the host memory held for the next sleep (--prepare's, or the\n"
             "              last wake's under PONYTAIL_SLEEP_REUSE=1)\n"
             "  --status    only say whether the process is asleep\n"
             "  --json      print the process's answer as one JSON object\n"
             "\n"
             "Not covered: the CUDA context, allocations below PONYTAIL_KV_MIN, memory the\n"
             "program maps itself (cuMemCreate), the driver's own pools. Inside the process a\n"
             "script can do the same: os.system(f\"ponytail sleep {os.getpid()}\").\n"
             "\n"
             "Exit status: 0 done; 1 refused or failed (the reason on stderr; the process runs\n"
             "on as before); 2 usage error.\n");
}

static void usage_wake(FILE *f) {
  fprintf(f, "usage: ponytail wake [--json] PID\n"
             "\n"
             "Wakes process PID, put to sleep by `ponytail sleep`: new GPU memory at the same\n"
             "addresses, the bytes copied back, its held CUDA calls let go. If the GPU has no\n"
             "room (another process took the memory), the process stays asleep and the wake can\n"
             "be asked again.\n"
             "\n"
             "Exit status: 0 awake; 1 refused or failed (the reason on stderr); 2 usage error.\n");
}

/* The value of NAME in /proc/PID/environ into out ("" when absent); -1 when
 * the environment cannot be read. */
static int target_env(int pid, const char *name, char *out, size_t n) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/environ", pid);
  FILE *f = fopen(path, "r");
  out[0] = 0;
  if (!f) return -1;
  size_t nl = strlen(name);
  char buf[8192];
  int c, len = 0;
  for (;;) {
    c = fgetc(f);
    if (c == EOF || c == 0) {
      buf[len] = 0;
      if (!strncmp(buf, name, nl) && buf[nl] == '=') {
        snprintf(out, n, "%s", buf + nl + 1);
        break;
      }
      len = 0;
      if (c == EOF) break;
    } else if (len + 1 < (int)sizeof buf) {
      buf[len++] = (char)c;
    }
  }
  fclose(f);
  return 0;
}

/* The effective uid of pid from /proc/PID/status, or -1. */
static long target_euid(int pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long uid = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned r, e;
    if (sscanf(line, "Uid: %u %u", &r, &e) == 2) {
      uid = (long)e;
      break;
    }
  }
  fclose(f);
  return uid;
}

/* 1 when libponytail_shim.so is mapped in pid, 0 when not, -1 unknown. */
static int target_has_shim(int pid) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, "libponytail_shim") != NULL;
  fclose(f);
  return found;
}

/* Checks the target and finds its socket; prints the reason and returns -1. */
static int locate(const char *cmd, int pid, char *sock, size_t n) {
  if (kill(pid, 0) && errno == ESRCH) {
    fprintf(stderr, "ponytail %s: no process with pid %d\n", cmd, pid);
    return -1;
  }
  long uid = target_euid(pid);
  if (uid >= 0 && (uid_t)uid != geteuid() && geteuid() != 0) {
    fprintf(stderr, "ponytail %s: process %d belongs to another user (uid %ld); only its owner can put it to sleep\n",
            cmd, pid, uid);
    return -1;
  }
  int has = target_has_shim(pid);
  if (has == 0) {
    fprintf(stderr, "ponytail %s: process %d does not run under Ponytail (libponytail_shim.so is not loaded; "
                    "start it with `ponytail run` or LD_PRELOAD=$(ponytail shim-path))\n", cmd, pid);
    return -1;
  }
  char dir_opt[4096], xdg[4096], dir[4096];
  if (target_env(pid, "PONYTAIL_CONTROL_DIR", dir_opt, sizeof dir_opt)) {
    /* Unreadable environment: assume ours (same user, same session). */
    pt_opts_init();
    const char *x = getenv("XDG_RUNTIME_DIR");
    snprintf(dir_opt, sizeof dir_opt, "%s", pt_opt_str(PT_OPT_CONTROL_DIR));
    snprintf(xdg, sizeof xdg, "%s", x ? x : "");
  } else {
    target_env(pid, "XDG_RUNTIME_DIR", xdg, sizeof xdg);
  }
  if (pt_control_dir_of(dir_opt, xdg, uid >= 0 ? (unsigned)uid : (unsigned)geteuid(), dir, sizeof dir) ||
      pt_control_sock_of(dir, pid, sock, n)) {
    fprintf(stderr, "ponytail %s: the control socket's path is too long\n", cmd);
    return -1;
  }
  struct stat st;
  if (stat(sock, &st)) {
    fprintf(stderr, "ponytail %s: process %d runs under Ponytail but has no control socket (%s): it has not "
                    "allocated through Ponytail's pool yet, or runs with PONYTAIL_CONTROL=0 (its log says why)\n",
            cmd, pid, sock);
    return -1;
  }
  return 0;
}

/* Sends one request; the answer in rep, or -1 (printed). */
static int request(const char *cmd, const char *sock, const char *req, char *rep, size_t n) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t sl = strlen(sock);
  if (sl >= sizeof a.sun_path) {
    fprintf(stderr, "ponytail %s: the socket path %s is too long for a Unix socket\n", cmd, sock);
    return -1;
  }
  memcpy(a.sun_path, sock, sl + 1);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) {
    fprintf(stderr, "ponytail %s: cannot reach %s: %s%s\n", cmd, sock, strerror(errno),
            errno == ECONNREFUSED ? " (nothing listens: a stale socket of an ended process?)" : "");
    if (s >= 0) close(s);
    return -1;
  }
  /* A sleep waits for the process's CUDA calls (PONYTAIL_SLEEP_TIMEOUT) and
   * copies; the answer may take a while, never forever. */
  struct timeval tv = {.tv_sec = 600};
  (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char line[64];
  int k = snprintf(line, sizeof line, "%s\n", req);
  if (write(s, line, (size_t)k) != k) {
    fprintf(stderr, "ponytail %s: %s: %s\n", cmd, sock, strerror(errno));
    close(s);
    return -1;
  }
  size_t len = 0;
  ssize_t r;
  while (len + 1 < n && (r = read(s, rep + len, n - 1 - len)) > 0) len += (size_t)r;
  rep[len] = 0;
  close(s);
  if (!len) {
    fprintf(stderr, "ponytail %s: no answer from %s\n", cmd, sock);
    return -1;
  }
  return 0;
}

static bool num(const char *rep, const char *key, double *v) {
  char k[64];
  snprintf(k, sizeof k, "\n%s=", key);
  const char *p = strstr(rep, k);
  if (!p) return false;
  *v = strtod(p + strlen(k), NULL);
  return true;
}

static const char *str(const char *rep, const char *key, char *out, size_t n) {
  char k[64];
  snprintf(k, sizeof k, "\n%s=", key);
  const char *p = strstr(rep, k);
  out[0] = 0;
  if (p) {
    p += strlen(k);
    size_t i = 0;
    while (p[i] && p[i] != '\n' && i + 1 < n) {
      out[i] = p[i];
      i++;
    }
    out[i] = 0;
  }
  return out;
}

static void print_json(const char *rep, long long nv_before, long long nv_after) {
  bool ok = !strncmp(rep, "ok", 2);
  printf("{\"ok\": %s", ok ? "true" : "false");
  if (!ok) {
    const char *e = rep + (strncmp(rep, "error: ", 7) ? 0 : 7);
    printf(", \"error\": \"");
    for (; *e && *e != '\n'; e++) printf(*e == '"' || *e == '\\' ? "\\%c" : "%c", *e);
    printf("\"");
  }
  for (const char *p = strchr(rep, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
    const char *eq = strchr(p + 1, '='), *nl = strchr(p + 1, '\n');
    if (!eq || (nl && eq > nl)) continue;
    int kl = (int)(eq - p - 1), vl = (int)((nl ? nl : eq + strlen(eq)) - eq - 1);
    char *end;
    strtod(eq + 1, &end);
    bool isnum = vl > 0 && end == eq + 1 + vl;
    printf(isnum ? ", \"%.*s\": %.*s" : ", \"%.*s\": \"%.*s\"", kl, p + 1, vl, eq + 1);
  }
  if (nv_before >= 0) printf(", \"nvml_process_bytes_before\": %lld", nv_before);
  if (nv_after >= 0) printf(", \"nvml_process_bytes_after\": %lld", nv_after);
  printf("}\n");
}

static void print_sleep(int pid, const char *rep, long long nv_before, long long nv_after) {
  double s = 0, close_s = 0, bytes = 0, handles = 0, copied = 0, trimmed = 0, copy_s = 0, map_s = 0, host_s = 0,
         reused = 0;
  double du_b = 0, du_a = 0, pt = 0;
  char mode[32];
  num(rep, "seconds", &s), num(rep, "close_s", &close_s), num(rep, "bytes", &bytes), num(rep, "handles", &handles);
  num(rep, "copied_bytes", &copied), num(rep, "trimmed_bytes", &trimmed), num(rep, "copy_s", &copy_s);
  num(rep, "map_s", &map_s), num(rep, "host_s", &host_s), num(rep, "reused_bytes", &reused);
  num(rep, "before_device_used_bytes", &du_b), num(rep, "after_device_used_bytes", &du_a);
  num(rep, "passthrough_live", &pt);
  str(rep, "mode", mode, sizeof mode);
  printf("ponytail sleep %d: asleep (%s) in %.3f s (%.3f s waiting for its CUDA calls and GPU work)\n", pid, mode, s,
         close_s);
  /* PyTorch's own mapped memory (expandable segments), released beside the pool. */
  double tb = 0, th = 0, tc = 0, tk = 0, tcs = 0;
  num(rep, "torch_bytes", &tb), num(rep, "torch_handles", &th), num(rep, "torch_copied_bytes", &tc);
  num(rep, "torch_kept_bytes", &tk), num(rep, "torch_copy_s", &tcs);
  if (bytes > 0 || tb <= 0) {
    printf("  released  %.2f GiB of Ponytail's pool on the GPU (%.0f physical handles, unmapped in %.3f s)",
           bytes / GiB, handles, map_s);
    if (trimmed > 0) printf(", and %.2f GiB the pool held free", trimmed / GiB);
    printf("\n");
  }
  if (tb > 0 || tk > 0)
    printf("  released  %.2f GiB of PyTorch's own mapped memory (expandable segments, %.0f handles)%s\n", tb / GiB, th,
           tk > 0 ? "; some of it stays (mapped twice, or shared with another process)" : "");
  double tr = 0, ths = 0;
  num(rep, "torch_reused_bytes", &tr), num(rep, "torch_host_s", &ths);
  copied += tc, copy_s += tcs, reused += tr, host_s += ths;
  char host[32];
  str(rep, "host", host, sizeof host); /* absent from an older shim: pinned */
  if (!strcmp(mode, "copy"))
    printf("  kept      %.2f GiB in %s: copied in %.3f s (%.1f GB/s), host memory taken in %.3f s\n",
           copied / GiB, strcmp(host, "handles") ? "page-locked host memory" : "host memory handles", copy_s,
           copy_s > 0 ? copied / copy_s / 1e9 : 0.0, host_s);
  if (!strcmp(mode, "copy") && reused > 0)
    printf("            %.2f GiB of it in host memory kept ready (`ponytail sleep --prepare`, or\n"
           "            the last sleep's under PONYTAIL_SLEEP_REUSE)\n", reused / GiB);
  if (strcmp(mode, "copy"))
    printf("  dropped   the pool's contents (--discard): its memory comes back undefined\n");
  if (nv_before >= 0 && nv_after >= 0)
    printf("  process   %.2f GiB of GPU memory before, %.2f GiB asleep (NVML)\n", (double)nv_before / GiB,
           (double)nv_after / GiB);
  double other = nv_after >= 0 ? (double)nv_after : du_a;
  printf("  not covered%s: %.2f GiB still held by the process: the CUDA context, %.0f allocation(s) below "
         "PONYTAIL_KV_MIN passed to CUDA, memory it maps itself (cuMemCreate) other than PyTorch's, the driver's "
         "pools\n",
         nv_after >= 0 ? "" : " (device-wide, all processes)", other / GiB, pt);
  printf("  device    %.2f GiB used before, %.2f GiB after (all processes)\n", du_b / GiB, du_a / GiB);
  printf("  its CUDA calls wait until `ponytail wake %d`\n", pid);
}

static void print_wake(int pid, const char *rep) {
  double s = 0, bytes = 0, copied = 0, copy_s = 0, map_s = 0, slept = 0, release_s = -1;
  num(rep, "seconds", &s), num(rep, "bytes", &bytes), num(rep, "copied_bytes", &copied);
  num(rep, "copy_s", &copy_s), num(rep, "map_s", &map_s), num(rep, "slept_s", &slept);
  num(rep, "release_s", &release_s);
  printf("ponytail wake %d: awake in %.3f s after %.1f s asleep\n", pid, s, slept);
  double tb = 0, tc = 0, tcs = 0;
  num(rep, "torch_bytes", &tb), num(rep, "torch_copied_bytes", &tc), num(rep, "torch_copy_s", &tcs);
  if (bytes > 0 || tb <= 0) printf("  mapped    %.2f GiB back at the same addresses in %.3f s\n", bytes / GiB, map_s);
  if (tb > 0)
    printf("  mapped    %.2f GiB of PyTorch's own mapped memory (expandable segments) back at the same addresses\n",
           tb / GiB);
  copied += tc, copy_s += tcs;
  if (copied > 0)
    printf("  copied    %.2f GiB back in %.3f s (%.1f GB/s)\n", copied / GiB, copy_s,
           copy_s > 0 ? copied / copy_s / 1e9 : 0.0);
  if (copied > 0 && release_s >= 0)
    printf("  freed     the host memory that held them in %.3f s, after the process ran again\n", release_s);
  else if (copied > 0 && strstr(rep, "\nrelease=kept\n"))
    printf("  kept      the host memory that held them, for the next sleep (PONYTAIL_SLEEP_REUSE)\n");
  else if (copied > 0)
    printf("  freeing   the host memory that held them now, while the process runs (`ponytail sleep\n"
           "            --status %d` says how long it took)\n", pid);
}

static void print_prepare(int pid, const char *rep) {
  double s = 0, bytes = 0, handles = 0, reused = 0, pool = 0;
  char host[32];
  num(rep, "seconds", &s), num(rep, "bytes", &bytes), num(rep, "handles", &handles);
  num(rep, "reused_bytes", &reused), num(rep, "now_pool_bytes", &pool);
  str(rep, "host", host, sizeof host);
  printf("ponytail sleep %d: prepared in %.3f s; the process runs on\n", pid, s);
  printf("  got       %.2f GiB of %s for %.0f of the pool's handles%s\n", bytes / GiB,
         strcmp(host, "handles") ? "page-locked host memory" : "host memory handles", handles,
         bytes > 0 ? "" : " (none missing)");
  if (reused > 0) printf("  had       %.2f GiB kept ready already\n", reused / GiB);
  printf("  ready     for %.2f GiB of the pool's %.2f GiB now: the next `ponytail sleep %d` only copies\n",
         (bytes + reused) / GiB, pool / GiB, pid);
  double tb = 0, tr = 0;
  num(rep, "torch_bytes", &tb), num(rep, "torch_reused_bytes", &tr);
  if (tb > 0 || tr > 0)
    printf("            and for %.2f GiB of PyTorch's own mapped memory (expandable segments; %.2f GiB got now)\n",
           (tb + tr) / GiB, tb / GiB);
}

static void print_unprepare(int pid, const char *rep) {
  double s = 0, bytes = 0;
  num(rep, "seconds", &s), num(rep, "freed_bytes", &bytes);
  printf("ponytail sleep %d: freed %.2f GiB of host memory held for its next sleep in %.3f s\n", pid, bytes / GiB, s);
}

static void print_status(int pid, const char *rep) {
  char state[32], mode[32];
  double slept = 0, held = 0, pool = 0, rel = -1;
  num(rep, "last_release_s", &rel);
  str(rep, "state", state, sizeof state);
  str(rep, "mode", mode, sizeof mode);
  num(rep, "slept_s", &slept), num(rep, "held_threads", &held), num(rep, "now_pool_bytes", &pool);
  if (!strcmp(state, "asleep"))
    printf("ponytail sleep %d: asleep (%s) for %.1f s; %.0f thread(s) waiting at a CUDA call\n", pid, mode, slept,
           held);
  else
    printf("ponytail sleep %d: awake; Ponytail's pool holds %.2f GiB on the GPU\n", pid, pool / GiB);
  double torch = 0;
  num(rep, "now_torch_bytes", &torch);
  if (torch > 0 && strcmp(state, "asleep"))
    printf("  and PyTorch's own mapped memory (expandable segments) %.2f GiB\n", torch / GiB);
  if (rel >= 0 && strcmp(state, "asleep"))
    printf("  the last wake's host memory was released in %.3f s, after the process ran again\n", rel);
}

static void usage_stats(FILE *f) {
  fprintf(f, "usage: ponytail stats [--json] PID\n"
             "\n"
             "Prints the statistics of process PID, which runs under Ponytail, as they stand now:\n"
             "the table PONYTAIL_STATS=1 writes at exit (CUDA calls, kernels launched, attention\n"
             "launches swapped and fallbacks with their reasons, the SDPA policy, the pool), or\n"
             "with --json the object PONYTAIL_STATS=json writes. For a server that never exits,\n"
             "or figures between the phases of a run. The process must have its control socket\n"
             "(it has one once an allocation reached Ponytail's pool, or PyTorch mapped memory\n"
             "the shim keeps; PONYTAIL_CONTROL=1).\n"
             "\n"
             "Exit status: 0 printed; 1 refused or failed (the reason on stderr); 2 usage error.\n");
}

static int parse_pid(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return *s && !*end && v > 0 && v <= 0x3fffffff ? (int)v : -1;
}

static int run(const char *cmd, int pid, const char *req, bool json, int kind) {
  char sock[4096];
  if (locate(cmd, pid, sock, sizeof sock)) return 1;
  unsigned long long b = 0, a = 0;
  long long nv_before = kind == 's' && !pt_nvml_process_bytes(pid, &b) ? (long long)b : -1;
  static char rep[1 << 20]; /* the stats of a process with many kernels run to tens of KiB */
  if (request(cmd, sock, req, rep, sizeof rep)) return 1;
  bool ok = !strncmp(rep, "ok", 2);
  long long nv_after = ok && kind == 's' && !pt_nvml_process_bytes(pid, &a) ? (long long)a : -1;
  if (json && kind != 'x') print_json(rep, nv_before, nv_after);
  if (!ok) {
    const char *e = strncmp(rep, "error: ", 7) ? rep : rep + 7;
    const char *nl = strchr(e, '\n');
    fprintf(stderr, "ponytail %s: process %d: %.*s\n", cmd, pid, nl ? (int)(nl - e) : (int)strlen(e), e);
    return 1;
  }
  if (kind == 'x') {
    fputs(rep + 3, stdout); /* after "ok\n": the stats as the process wrote them */
    return 0;
  }
  if (!json) {
    if (kind == 's') print_sleep(pid, rep, nv_before, nv_after);
    else if (kind == 'w') print_wake(pid, rep);
    else if (kind == 'p') print_prepare(pid, rep);
    else if (kind == 'u') print_unprepare(pid, rep);
    else print_status(pid, rep);
  }
  return 0;
}

int pt_cmd_sleep(int argc, char **argv) {
  static const struct option opts[] = {{"discard", no_argument, NULL, 'd'}, {"status", no_argument, NULL, 's'},
                                       {"prepare", no_argument, NULL, 'p'}, {"unprepare", no_argument, NULL, 'u'},
                                       {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  bool discard = false, status = false, json = false, prepare = false, unprepare = false;
  const char *w;
  int c;
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    if (c == 'h') {
      usage_sleep(stdout);
      return 0;
    }
    if (c == 'd') discard = true;
    else if (c == 's') status = true;
    else if (c == 'p') prepare = true;
    else if (c == 'u') unprepare = true;
    else if (c == 'j') json = true;
    else return pt_cmd_usage_error("sleep", usage_sleep, "unknown option", w);
  }
  if (optind != argc - 1) return pt_cmd_usage_error("sleep", usage_sleep, "expected one PID", NULL);
  int pid = parse_pid(argv[optind]);
  if (pid < 0) return pt_cmd_usage_error("sleep", usage_sleep, "not a process id", argv[optind]);
  if (discard + status + prepare + unprepare > 1)
    return pt_cmd_usage_error("sleep", usage_sleep, "one of --discard, --prepare, --unprepare, --status at a time",
                              NULL);
  if (status) return run("sleep", pid, "status", json, 't');
  if (prepare) return run("sleep", pid, "prepare", json, 'p');
  if (unprepare) return run("sleep", pid, "prepare release", json, 'u');
  return run("sleep", pid, discard ? "sleep discard" : "sleep", json, 's');
}

/* The arguments of a command that takes [--json] PID (wake, stats): 0 with
 * *json and *pid set; 0 with *done after --help printed the usage; or a usage
 * error's exit status (2). */
static int json_pid_args(int argc, char **argv, const char *cmd, void (*usage)(FILE *), bool *json, int *pid,
                         bool *done) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *w;
  int c;
  *json = *done = false;
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    if (c == 'h') {
      usage(stdout);
      *done = true;
      return 0;
    }
    if (c == 'j') *json = true;
    else return pt_cmd_usage_error(cmd, usage, "unknown option", w);
  }
  if (optind != argc - 1) return pt_cmd_usage_error(cmd, usage, "expected one PID", NULL);
  *pid = parse_pid(argv[optind]);
  if (*pid < 0) return pt_cmd_usage_error(cmd, usage, "not a process id", argv[optind]);
  return 0;
}

int pt_cmd_wake(int argc, char **argv) {
  bool json, done;
  int pid, rc = json_pid_args(argc, argv, "wake", usage_wake, &json, &pid, &done);
  if (rc || done) return rc;
  return run("wake", pid, "wake", json, 'w');
}

int pt_cmd_stats(int argc, char **argv) {
  bool json, done;
  int pid, rc = json_pid_args(argc, argv, "stats", usage_stats, &json, &pid, &done);
  if (rc || done) return rc;
  return run("stats", pid, json ? "stats json" : "stats", json, 'x');
}
