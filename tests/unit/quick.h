/* quick.h - test sizes.  LOCKSTEP_TEST_QUICK unset: the full sweeps (make test).
 * LOCKSTEP_TEST_QUICK=1: the sanitizer runs' subset (make test-asan), which still
 * reaches every kernel path and tail.  LOCKSTEP_TEST_QUICK=2: smoke sizes, for the
 * sanitizer runs in CI (.ci/run): every path is still reached, each about once. */
#ifndef LOCKSTEP_TEST_QUICK_H
#define LOCKSTEP_TEST_QUICK_H
#include <stdio.h>
#include <stdlib.h>

static inline int test_quick(void) {
    const char *e = getenv("LOCKSTEP_TEST_QUICK");
    if (!e || !*e) return 0;
    return atoi(e) >= 2 ? 2 : 1;
}

/* Skips the calling test at smoke size.  For tests that repeat whole engine runs, each
 * seconds long under ASan; make test and make test-asan still run them.  The test file
 * must include cmocka.h (print_message, skip). */
#define SKIP_AT_SMOKE()                                                       \
    do {                                                                      \
        if (test_quick() == 2) {                                              \
            printf("SKIPPED: %s at smoke size (LOCKSTEP_TEST_QUICK=2)\n", __func__); \
            skip();                                                           \
        }                                                                     \
    } while (0)

#endif
