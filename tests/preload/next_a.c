/* Helper for the RTLD_NEXT test: looked up from here, "next" must be
 * next_b.so (a dependency of this object, so loaded after it), whatever the
 * shim does. */
#include <dlfcn.h>
int pt_next_b_present(void);
char pt_test_marker(void) { return 'a'; }
char next_a_lookup(void) {
  char (*m)(void) = (char (*)(void))dlsym(RTLD_NEXT, "pt_test_marker");
  return m && pt_next_b_present() ? m() : '?';
}
