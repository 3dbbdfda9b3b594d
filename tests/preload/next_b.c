/* Helper for the RTLD_NEXT test (see next_a.c). */
char pt_test_marker(void) { return 'B'; }
int pt_next_b_present(void) { return 1; }
