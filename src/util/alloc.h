/* alloc.h - the library's allocator, with a fault-injection hook for tests.
 *
 * Every allocation in library code goes through ls_malloc / ls_calloc / ls_realloc /
 * ls_aligned_alloc / ls_strdup; memory is released with plain free().  In production
 * they are the libc calls plus one relaxed atomic load.  Tests arm the hook to make the
 * Nth allocation from now return NULL (once), then check that the operation returned an
 * error, the process stayed up, other sequences were unaffected and nothing leaked
 * (tests/unit/test_faults.c).  The hook is process-wide and meant for single test
 * programs only: never arm it in a server. */
#ifndef LS_UTIL_ALLOC_H
#define LS_UTIL_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *ls_malloc(size_t n);
void *ls_calloc(size_t n, size_t size);
void *ls_realloc(void *p, size_t n);
void *ls_aligned_alloc(size_t align, size_t n); /* n is rounded up to a multiple of align */
char *ls_strdup(const char *s);

/* Test hook.  ls_alloc_fail_nth(n), n >= 1: the nth allocation call from now fails (returns
 * NULL, and ls_realloc leaves its block untouched), every later one succeeds.  n = 0
 * disarms.  While armed, and after ls_alloc_count_start(), calls are counted:
 * ls_alloc_count() returns how many allocation calls happened since the last arm or
 * count_start; ls_alloc_failed() says whether the armed failure has fired. */
void ls_alloc_fail_nth(uint64_t n);
void ls_alloc_count_start(void);
void ls_alloc_count_stop(void);
uint64_t ls_alloc_count(void);
int ls_alloc_failed(void);

#endif
