/* err.h - error reporting for library code.
 *
 * Policy (see STYLE.md): a programmer error asserts with file:line (LS_ASSERT);
 * bad input (a file, a prompt, a request, a flag) returns a status code and fills
 * an ls_err that names what was wrong and, for files, the byte offset.
 * Library code never calls exit().  ls_err is caller-owned: no global state. */
#ifndef LS_UTIL_ERR_H
#define LS_UTIL_ERR_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    LS_OK = 0,
    LS_E_IO = 1,          /* open/read/mmap failed */
    LS_E_FORMAT = 2,      /* malformed file contents */
    LS_E_UNSUPPORTED = 3, /* well-formed, but not something we implement */
    LS_E_NOMEM = 4,       /* allocation failed */
    LS_E_INVALID = 5,     /* bad argument, flag, prompt or request */
    LS_E_RANGE = 6,       /* value out of range (e.g. prompt longer than context) */
} ls_status;

#define LS_NO_OFFSET UINT64_MAX

typedef struct {
    ls_status code;
    uint64_t offset;      /* byte offset in the file the error refers to, or LS_NO_OFFSET */
    char msg[512];
} ls_err;

/* Sets err (if non-NULL) and returns code, so callers can `return ls_err_set(...)`. */
ls_status ls_err_set(ls_err *err, ls_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, recording a file byte offset; the message gets " (at byte offset N)" appended. */
ls_status ls_err_set_at(ls_err *err, ls_status code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ls_err_clear(ls_err *err);
const char *ls_status_name(ls_status code);

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
