/* `ponytail bench`: the A/B of examples/generate.py, stock (A) then with the
 * shim (B), same seed and settings, repeated alternately; medians in a table
 * and every run's full result (timelines included) in RESULT.json. Then the
 * correctness verdict: untimed runs that save the first steps' logits (A, B,
 * R = stock on another SDPA backend, optionally S = stock on the shim's
 * attention path), judged by examples/verdict.py; its lines are printed first.
 * This file holds the flags, the single A/B and its table; the runs and the
 * verdict are in tools/commands/bench_run.c, the medians and RESULT.json in
 * tools/commands/bench_result.c, shared (tools/commands/bench.h) with --sweep
 * (tools/commands/bench_sweep.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "tools/commands/bench.h"
#include "tools/cmd.h"
#include "tools/lib/gpu_probe.h"
#include "tools/lib/json.h"
#include "tools/lib/shimpath.h"
#include "tools/lib/spawn.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ponytail bench [options]\n"
          "\n"
          "A/B test of examples/generate.py (a random-weight Hugging Face Llama, greedy decoding):\n"
          "run A without the shim, run B with it, same seed and settings, alternating for\n"
          "--repeats rounds (progress on stderr). Prints medians of peak device memory (torch\n"
          "allocated and reserved, NVML used), tokens/s, prefill time and decode step p50/p99,\n"
          "and whether the generated token ids match; writes every run's result, memory\n"
          "timeline included, to --out (plot it with `ponytail timeline`). Needs a GPU.\n"
          "\n"
          "First it prints the correctness verdict: untimed runs A, B and R (stock with another\n"
          "SDPA backend) save their logits of the first --verdict-steps decode steps, and\n"
          "examples/verdict.py compares B against A (max and mean relative difference) next to\n"
          "PyTorch's own backend spread (R against A): \"within PyTorch's own backend spread\" or\n"
          "\"OUTSIDE\" it; a NaN or Inf in any logits fails it. Token agreement: the share of\n"
          "positions before the first divergence and the first divergent step, per sequence.\n"
          "\n"
          "Workload (passed to generate.py; defaults are its own: workload W):\n"
          "  --layers N --hidden N --heads N --kv-heads N --head-dim N --vocab N\n"
          "  --batch N --prompt N --new-tokens N --dtype bf16|fp16|fp32\n"
          "  --pad F             left-pad this fraction of the batch with shorter prompts\n"
          "                      (--dtype fp32: greedy tokens should stay identical A vs B)\n"
          "  --seed N            (default 0)\n"
          "  --config FILE       Hugging Face config.json overrides\n"
          "Bench:\n"
          "  --repeats N         A/B rounds (default 1)\n"
          "  --timeline-ms N     memory sampling period (default 50; 0 = no timeline)\n"
          "  --no-warmup         skip generate.py's warm-up generate (same prompt shape, 2 new\n"
          "                      tokens), which keeps first-shape costs out of the TTFT\n"
          "  --shim-env K=V      extra environment for the shim run (repeatable)\n"
          "  --stock-env K=V     extra environment for the stock run (repeatable), e.g.\n"
          "                      TORCH_CUDNN_SDPA_DEPRIORITIZED=1 to compare with torch's flash path\n"
          "  --out FILE          result JSON (default ponytail-bench.json)\n"
          "  --python EXE        interpreter (default python3)\n"
          "  --script PATH       generate.py to run (default: the one next to ponytail)\n"
          "  --shim PATH         shim to preload (default: the one next to ponytail)\n"
          "  -h, --help          this help\n"
          "Verdict:\n"
          "  --verdict-steps N   decode steps whose logits are compared (default 8; 0 = no\n"
          "                      verdict and no extra runs)\n"
          "  --reference-sdpa B  R's backend: flash|math|efficient|cudnn|default (default: flash\n"
          "                      for bf16/fp16, the path the shim takes; math for fp32)\n"
          "  --same-path         also S, stock on the shim's attention path (flash; fp32: torch's\n"
          "                      default): with --shim-env PONYTAIL_ATTN=off B must equal S\n"
          "  --verdict-margin F  within = B's max and mean rel diff <= F x R's (default 2)\n"
          "  (--stock-env applies to A, R and S, --shim-env to B)\n"
          "Sweep:\n"
          "  --sweep SPEC        the A/B at every point of SPEC, e.g. prompt=512,2048,8192,32768\n"
          "                      or prompt=512,4k,batch=1,8 (k = x1024; every batch with every\n"
          "                      prompt; a key left out takes --prompt / --batch); A then B at\n"
          "                      each point, one table per point as it finishes, then a summary\n"
          "                      (speed-ups, TTFT ratio, memory saved, verdict per point); every\n"
          "                      result in one --out (default ponytail-sweep.json; plot it with\n"
          "                      `ponytail plot-sweep`). The verdict runs at the first and the\n"
          "                      last point, its arms generating --verdict-steps tokens only\n"
          "  --verdict-every     judge every point of a sweep\n"
          "\n"
          "Exit status: 0 done (verdict within, or no verdict), 1 a run failed or no GPU,\n"
          "2 usage error, 3 verdict OUTSIDE PyTorch's own backend spread, 4 NaN/Inf in the\n"
          "logits (3 and 4 still print the table and write --out). A sweep exits with the\n"
          "worst over its points: 4, then 3, then 1.\n");
}

static int bad(const char *msg, const char *arg) { return pt_cmd_usage_error("bench", usage, msg, arg); }

static void pt_bench_cell(char *buf, size_t len, double v, int bytes) {
  if (!isfinite(v)) snprintf(buf, len, "n/a");
  else if (bytes) snprintf(buf, len, "%.3f GiB", v / (1024.0 * 1024.0 * 1024.0));
  else snprintf(buf, len, "%.3f", v);
}

static int pt_bench_write(const struct pt_bench *bn, double med[2][PT_BENCH_NMETRICS], int match) {
  FILE *f = fopen(bn->out, "w");
  if (!f) {
    fprintf(stderr, "ponytail bench: cannot write %s: %s\n", bn->out, strerror(errno));
    return -1;
  }
  struct pt_jw w;
  pt_jw_init(&w, f, true);
  pt_jw_obj_begin(&w, NULL);
  pt_jw_str(&w, "tool", "ponytail bench");
  pt_bench_write_setup(&w, bn);
  pt_bench_write_body(&w, bn, (const double(*)[PT_BENCH_NMETRICS])med, match);
  pt_bench_swaps_json(&w, bn);
  pt_jw_obj_end(&w);
  pt_jw_finish(&w);
  int bad_io = ferror(f);
  if (fclose(f) != 0 || bad_io) {
    fprintf(stderr, "ponytail bench: error writing %s\n", bn->out);
    return -1;
  }
  return 0;
}

int pt_cmd_bench(int argc, char **argv) {
  struct pt_bench bn = {.repeats = 1, .timeline_ms = 50, .warmup = 1, .python = "python3",
                        .out = "ponytail-bench.json", .verdict_steps = 8, .margin = 2.0};
  const char *envs[64], *stock_envs[64];
  bn.shim_env = envs;
  bn.stock_env = stock_envs;
  /* The workload flags (pt_bench_fwd_flag(k)) are O_FWD + k. */
  enum { O_NO_WARMUP = 256, O_REPEATS, O_TIMELINE_MS, O_SHIM_ENV, O_STOCK_ENV, O_OUT, O_PYTHON, O_SCRIPT,
         O_SHIM, O_VERDICT_STEPS, O_REFERENCE_SDPA, O_SAME_PATH, O_VERDICT_MARGIN, O_SWEEP, O_VERDICT_EVERY,
         O_FWD };
  static const struct option own[] = {
      {"help", no_argument, NULL, 'h'},
      {"no-warmup", no_argument, NULL, O_NO_WARMUP},
      {"repeats", required_argument, NULL, O_REPEATS},
      {"timeline-ms", required_argument, NULL, O_TIMELINE_MS},
      {"shim-env", required_argument, NULL, O_SHIM_ENV},
      {"stock-env", required_argument, NULL, O_STOCK_ENV},
      {"out", required_argument, NULL, O_OUT},
      {"python", required_argument, NULL, O_PYTHON},
      {"script", required_argument, NULL, O_SCRIPT},
      {"shim", required_argument, NULL, O_SHIM},
      {"verdict-steps", required_argument, NULL, O_VERDICT_STEPS},
      {"reference-sdpa", required_argument, NULL, O_REFERENCE_SDPA},
      {"same-path", no_argument, NULL, O_SAME_PATH},
      {"verdict-margin", required_argument, NULL, O_VERDICT_MARGIN},
      {"sweep", required_argument, NULL, O_SWEEP},
      {"verdict-every", no_argument, NULL, O_VERDICT_EVERY},
  };
  struct option opts[sizeof own / sizeof own[0] + PT_BENCH_NFWD + 1];
  memcpy(opts, own, sizeof own);
  for (size_t k = 0; k < PT_BENCH_NFWD; k++)
    opts[sizeof own / sizeof own[0] + k] = (struct option){pt_bench_fwd_flag(k) + 2, required_argument, NULL, O_FWD + (int)k};
  opts[sizeof opts / sizeof opts[0] - 1] = (struct option){NULL, 0, NULL, 0};
  const char *w;
  int c, out_set = 0;
  char sweep_why[256];
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    const char *v = optarg;
    char *end;
    long x;
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_NO_WARMUP: bn.warmup = 0; break;
    case O_REPEATS:
    case O_TIMELINE_MS:
      x = strtol(v, &end, 10);
      if (*end || end == v || x < (c == O_REPEATS ? 1 : 0) || x > 100000)
        return bad("bad value", c == O_REPEATS ? "--repeats" : "--timeline-ms");
      if (c == O_REPEATS) bn.repeats = (int)x;
      else bn.timeline_ms = (int)x;
      break;
    case O_SHIM_ENV:
      if (!strchr(v, '=') || v[0] == '=') return bad("--shim-env takes KEY=VALUE", v);
      if (bn.nshim_env >= sizeof envs / sizeof envs[0]) return bad("too many --shim-env", v);
      envs[bn.nshim_env++] = v;
      break;
    case O_STOCK_ENV:
      if (!strchr(v, '=') || v[0] == '=') return bad("--stock-env takes KEY=VALUE", v);
      if (bn.nstock_env >= sizeof stock_envs / sizeof stock_envs[0]) return bad("too many --stock-env", v);
      stock_envs[bn.nstock_env++] = v;
      break;
    case O_OUT:
      bn.out = v;
      out_set = 1;
      break;
    case O_PYTHON: bn.python = v; break;
    case O_SCRIPT: bn.script_arg = v; break;
    case O_SHIM: bn.shim_arg = v; break;
    case O_VERDICT_STEPS:
      x = strtol(v, &end, 10);
      if (*end || end == v || x < 0 || x > 100000) return bad("bad value", "--verdict-steps");
      bn.verdict_steps = (int)x;
      break;
    case O_REFERENCE_SDPA:
      if (strcmp(v, "flash") && strcmp(v, "math") && strcmp(v, "efficient") && strcmp(v, "cudnn") &&
          strcmp(v, "default"))
        return bad("--reference-sdpa takes flash|math|efficient|cudnn|default", v);
      bn.ref_sdpa = v;
      break;
    case O_SAME_PATH: bn.same_path = 1; break;
    case O_VERDICT_MARGIN: {
      double m = strtod(v, &end);
      if (*end || end == v || !(m >= 1.0) || m > 1e6) return bad("bad value (>= 1)", "--verdict-margin");
      bn.margin = m;
      break;
    }
    case O_SWEEP:
      if (pt_sweep_parse(v, &bn.sweep, sweep_why, sizeof sweep_why)) {
        char msg[320];
        snprintf(msg, sizeof msg, "--sweep: %s", sweep_why);
        return bad(msg, v);
      }
      bn.sweeping = 1;
      break;
    case O_VERDICT_EVERY: bn.verdict_every = 1; break;
    case ':': return bad("missing value after", w);
    case '?': return bad("unknown option", w);
    default: /* O_FWD + k */
      if (!pt_bench_fwd_ok((size_t)(c - O_FWD), v)) return bad("bad value", pt_bench_fwd_flag((size_t)(c - O_FWD)));
      bn.fwd_val[c - O_FWD] = v;
      break;
    }
  }
  if (optind < argc) return bad("unexpected argument", argv[optind]);
  if (bn.sweeping) {
    /* A swept key replaces its flag: both would leave one of them unused. */
    if (bn.sweep.nprompt && bn.fwd_val[pt_bench_fwd_index("--prompt")])
      return bad("--prompt and --sweep prompt=... both set the prompt length", NULL);
    if (bn.sweep.nbatch && bn.fwd_val[pt_bench_fwd_index("--batch")])
      return bad("--batch and --sweep batch=... both set the batch size", NULL);
    if (!out_set) bn.out = "ponytail-sweep.json";
  } else if (bn.verdict_every) {
    return bad("--verdict-every applies to --sweep only", NULL);
  }
  /* R: flash for 16-bit models (what the shim runs, cuDNN being stock's pick on the
   * H200); fp32 has neither flash nor cuDNN, so math. S: the shim's path. */
  const char *dtype = bn.fwd_val[pt_bench_fwd_index("--dtype")];
  if (!dtype) dtype = "bf16";
  int fp32 = !strcmp(dtype, "fp32");
  if (!bn.ref_sdpa) bn.ref_sdpa = fp32 ? "math" : "flash";
  bn.same_sdpa = fp32 ? "default" : "flash";

  char why[PATH_MAX * 3];
  if (!pt_gpu_probe(why, sizeof why)) {
    fprintf(stderr, "ponytail bench: %s; the A/B needs a GPU\n", why);
    return 1;
  }
  if (pt_tool_find_script(bn.script_arg, bn.script, sizeof bn.script, why, sizeof why) ||
      pt_tool_find_shim(bn.shim_arg, bn.shim, sizeof bn.shim, why, sizeof why)) {
    fprintf(stderr, "ponytail bench: %s\n", why);
    return 1;
  }
  if (bn.verdict_steps && pt_bench_find_verdict(&bn, why, sizeof why)) {
    fprintf(stderr, "ponytail bench: %s\n", why);
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(bn.dir, sizeof bn.dir, "%s/ponytail-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(bn.dir)) {
    fprintf(stderr, "ponytail bench: cannot create a temporary directory: %s\n", strerror(errno));
    return 1;
  }
  if (bn.sweeping) {
    int src = pt_bench_sweep(&bn);
    rmdir(bn.dir);
    return src;
  }
  bn.a = calloc((size_t)bn.repeats, sizeof *bn.a);
  bn.b = calloc((size_t)bn.repeats, sizeof *bn.b);
  int rc = 1;
  if (!bn.a || !bn.b) goto out;
  /* Alternate A and B so drift (clocks, thermals) hits both alike. */
  for (int r = 0; r < bn.repeats; r++) {
    if (!(bn.a[r] = pt_bench_run(&bn, 0, r + 1, -1, NULL))) goto out;
    if (!(bn.b[r] = pt_bench_run(&bn, 1, r + 1, -1, NULL))) goto out;
  }
  /* A failed verdict still leaves the table and the result (exit 1). */
  int verdict_failed = bn.verdict_steps && pt_bench_verdict(&bn) != 0;
  double med[2][PT_BENCH_NMETRICS];
  pt_bench_medians(&bn, med);
  const char *sha = NULL;
  int match = pt_bench_tokens_match(&bn, &sha);

  /* The verdict first: correctness before speed. */
  const char *vstatus = bn.verdict ? pt_json_str(pt_json_get(bn.verdict, "status")) : NULL;
  pt_bench_print_verdict(&bn, verdict_failed);
  printf("ponytail bench: %s, median of %d round%s\n\n", bn.script, bn.repeats, bn.repeats > 1 ? "s" : "");
  printf("  %-26s %14s %14s %8s\n", "", "A stock", "B ponytail", "B/A");
  for (size_t m = 0; m < PT_BENCH_NMETRICS; m++) {
    char ca[32], cb[32], cr[16] = "";
    pt_bench_cell(ca, sizeof ca, med[0][m], pt_bench_metrics[m].bytes);
    pt_bench_cell(cb, sizeof cb, med[1][m], pt_bench_metrics[m].bytes);
    if (isfinite(med[0][m]) && isfinite(med[1][m]) && med[0][m] != 0)
      snprintf(cr, sizeof cr, "%.3f", med[1][m] / med[0][m]);
    printf("  %-26s %14s %14s %8s\n", pt_bench_metrics[m].label, ca, cb, cr);
  }
  printf("  %-26s %s\n", "generated token ids",
         match ? "identical (sha256 equal in every run)" : "DIFFER between runs (see token_ids in the result)");
  pt_bench_swaps_print(stdout, &bn);
  if (pt_bench_write(&bn, med, match) != 0) goto out;
  printf("\nwrote %s (plot: ponytail timeline %s -o timeline.png)\n", bn.out, bn.out);
  rc = verdict_failed ? 1 : !vstatus ? 0 : !strcmp(vstatus, "outside") ? 3 : !strcmp(vstatus, "nonfinite") ? 4 : 0;
  if (rc == 3 || rc == 4) fprintf(stderr, "ponytail bench: %s\n", pt_json_str(pt_json_get(bn.verdict, "line")));
out:
  pt_bench_free_results(&bn);
  free(bn.a);
  free(bn.b);
  rmdir(bn.dir);
  return rc;
}

