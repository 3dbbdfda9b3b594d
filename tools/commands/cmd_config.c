/* `ponytail config`: every PONYTAIL_* option with its current value (from
 * this environment), default, type and doc. --json for tools, --markdown for
 * the options table of docs/options.md. Generated from common/options.def. */
#include <stdio.h>
#include <string.h>

#include "common/jsonw.h"
#include "common/options.h"
#include "tools/cmd.h"

static const char *pt_type_word(enum pt_opt_type t) {
  switch (t) {
  case PT_OPT_BOOL: return "bool";
  case PT_OPT_SIZE: return "size";
  case PT_OPT_INT: return "int";
  case PT_OPT_STR: return "string";
  case PT_OPT_ENUM: return "enum";
  }
  return "?";
}

/* "bool", "size", or the choices "a|b|c" for enums. */
static void pt_type_text(const struct pt_opt_info *o, char *buf, size_t len) {
  if (o->type == PT_OPT_ENUM) snprintf(buf, len, "%s", o->choices);
  else snprintf(buf, len, "%s", pt_type_word(o->type));
}

static void usage(FILE *f) {
  fprintf(f, "usage: ponytail config [--json | --markdown]\n\n"
             "Lists every PONYTAIL_* option: its value in this environment, default,\n"
             "type and documentation. --json writes one JSON array; --markdown the\n"
             "options table of docs/options.md.\n");
}

int pt_cmd_config(int argc, char **argv) {
  enum { O_JSON = 256, O_MARKDOWN };
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'},
      {"json", no_argument, NULL, O_JSON},
      {"markdown", no_argument, NULL, O_MARKDOWN},
      {NULL, 0, NULL, 0},
  };
  int json = 0, md = 0, c;
  const char *w;
  optind = 0;
  while ((c = pt_getopt(argc, argv, "+:h", opts, &w)) != -1) {
    if (c == 'h') {
      usage(stdout);
      return 0;
    } else if (c == O_JSON) {
      json = 1;
    } else if (c == O_MARKDOWN) {
      md = 1;
    } else {
      break;
    }
  }
  if (c != -1 || optind < argc) {
    fprintf(stderr, "ponytail config: unknown argument '%s'\n", c != -1 ? w : argv[optind]);
    usage(stderr);
    return 2;
  }
  if (json && md) {
    fprintf(stderr, "ponytail config: --json and --markdown are exclusive\n");
    return 2;
  }
  pt_opts_init();
  char val[4096], type[128];
  if (json) {
    struct pt_jw w;
    pt_jw_init(&w, stdout, true);
    pt_jw_arr_begin(&w, NULL);
    for (int i = 0; i < PT_OPT_COUNT; i++) {
      const struct pt_opt_info *o = &pt_opt_table[i];
      pt_jw_obj_begin(&w, NULL);
      pt_jw_str(&w, "name", o->name);
      pt_jw_str(&w, "value", pt_opt_value_text((enum pt_opt_id)i, val, sizeof val));
      pt_jw_bool(&w, "set", pt_opt_is_set((enum pt_opt_id)i));
      pt_jw_str(&w, "default", o->def);
      pt_jw_str(&w, "type", pt_type_word(o->type));
      if (o->type == PT_OPT_ENUM) pt_jw_str(&w, "choices", o->choices);
      pt_jw_str(&w, "doc", o->doc);
      pt_jw_obj_end(&w);
    }
    pt_jw_arr_end(&w);
    pt_jw_finish(&w);
    return 0;
  }
  if (md) {
    printf("| Option | Values | Default | Description |\n|---|---|---|---|\n");
    for (int i = 0; i < PT_OPT_COUNT; i++) {
      const struct pt_opt_info *o = &pt_opt_table[i];
      pt_type_text(o, type, sizeof type);
      /* '|' inside a table cell must be escaped */
      printf("| `%s` | ", o->name);
      for (const char *c = type; *c; c++) fputs(*c == '|' ? "\\|" : (char[]){*c, 0}, stdout);
      printf(" | `%s` | %s |\n", o->def[0] ? o->def : "\"\"", o->doc);
    }
    return 0;
  }
  for (int i = 0; i < PT_OPT_COUNT; i++) {
    const struct pt_opt_info *o = &pt_opt_table[i];
    pt_type_text(o, type, sizeof type);
    pt_opt_value_text((enum pt_opt_id)i, val, sizeof val);
    printf("%s=%s%s\n    default %s, %s\n    %s\n", o->name, val, pt_opt_is_set((enum pt_opt_id)i) ? "" : " (default)",
           o->def[0] ? o->def : "\"\"", type, o->doc);
  }
  return 0;
}
