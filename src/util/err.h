/* err.h - error reporting for library code.
 *
 * Policy: a programmer error asserts with file:line (LS_ASSERT);
 * bad input (a file, a prompt, a request, a flag) returns a status code and fills
 * an ls_err that names what was wrong and, for files, the byte offset.
 * Library code never calls exit().  ls_err is caller-owned: no global state. */
#ifndef LS_UTIL_ERR_H
#define LS_UTIL_ERR_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lockstep.h" /* ls_status, ls_err, ls_status_name, ls_err_clear */

/* Sets err (if non-NULL) and returns code, so callers can `return ls_err_set(...)`. */
ls_status ls_err_set(ls_err *err, ls_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, recording a file byte offset; the message gets " (at byte offset N)" appended. */
ls_status ls_err_set_at(ls_err *err, ls_status code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Programmer errors only: never for input validation. */
#define LS_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* Overflow-checked 64-bit arithmetic: return 1 on overflow. */
static inline int ls_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_add_overflow(a, b, out); }
static inline int ls_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out); }

#endif
