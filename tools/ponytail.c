/* `ponytail`: the command-line front of Ponytail. Dispatches to tools/commands/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "tools/cmd.h"

const char *pt_tool_argv0;

struct pt_cmd {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
};

static const struct pt_cmd cmds[] = {
  {"run", pt_cmd_run, "run a command with the shim preloaded"},
  {"config", pt_cmd_config, "list every PONYTAIL_* option with its value, default and doc"},
  {"capacity", pt_cmd_capacity, "KV-cache size, largest batch and longest sequence for a GPU"},
  {"kernels", pt_cmd_kernels, "list the CUDA kernels embedded in an ELF file, cubin or fatbin"},
  {"trace", pt_cmd_trace, "run a command under the shim with CUPTI and rank kernels by GPU time"},
  {"replay", pt_cmd_replay, "replay an allocation trace through the pool (host backend)"},
  {"bench", pt_cmd_bench, "A/B a generation run without and with the shim"},
  {"timeline", pt_cmd_timeline, "plot the memory timelines of a bench result (PNG or SVG)"},
  {"plot-sweep", pt_cmd_plot_sweep, "plot a bench --sweep result: speed-up and memory saved by prompt length"},
  {"doctor", pt_cmd_doctor, "check driver, GPU, torch, shim and kernels; say what is missing"},
  {"shim-path", pt_cmd_shim_path, "print the shim's path, for LD_PRELOAD=$(ponytail shim-path) CMD"},
  {"sleep", pt_cmd_sleep, "give a running process's pooled GPU memory back and hold its CUDA work"},
  {"wake", pt_cmd_wake, "wake a process put to sleep: its memory back at the same addresses"},
  {"stats", pt_cmd_stats, "a running process's statistics now: swaps, fallbacks, the pool"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: ponytail COMMAND [ARGS...]\n\nCommands:\n");
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
  fprintf(f, "\n`ponytail COMMAND --help` documents each command's flags.\n");
}

int main(int argc, char **argv) {
  pt_tool_argv0 = argv[0];
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ponytail %s\n", PT_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "ponytail: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
