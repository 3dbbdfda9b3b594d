/* Finding the files that belong to this `ponytail`: its shim and the example
 * workload, relative to the tool's own executable (build tree or install), so
 * two checkouts or installs never mix. */
#ifndef PT_TOOLS_SHIMPATH_H
#define PT_TOOLS_SHIMPATH_H
#include <stddef.h>

/* Directory of the running executable (from /proc/self/exe). 0 or -1. */
int pt_tool_self_dir(char *out, size_t len);

/* The shim to preload: `override` when non-NULL (must exist), else
 * <exedir>/../shim/libponytail_shim.so (build tree), else
 * <exedir>/../<shimdir>/libponytail_shim.so (install: shimdir is libdir, or
 * lib/ponytail in a wheel installed by pip). Writes an absolute path.
 * Returns 0, or -1 with a message in `why`. */
int pt_tool_find_shim(const char *override, char *out, size_t len, char *why, size_t whylen);

/* examples/generate.py: `override`, else <exedir>/../share/ponytail/examples/
 * (install), else the source tree this ponytail was built from. */
int pt_tool_find_script(const char *override, char *out, size_t len, char *why, size_t whylen);

#endif
