/* util.h - small helpers shared across the library: a monotonic clock, the
 * splitmix64 generator, a growable byte buffer, and defaults used by several layers. */
#ifndef LS_UTIL_UTIL_H
#define LS_UTIL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/err.h"

/* Milliseconds on CLOCK_MONOTONIC. */
double ls_now_ms(void);

/* splitmix64: advances *state and returns the next 64-bit value (tests, probes, benches:
 * reproducible pseudo-random draws; not the sampler, which is keyed by (seed, pos)). */
static inline uint64_t ls_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A growable byte buffer, always NUL-terminated when non-empty (amortised doubling;
 * never on the per-token forward path).  Free p with free(). */
typedef struct {
    char *p;
    size_t len, cap;
} ls_buf;
/* Appends n bytes; false (buffer unchanged) when memory runs out. */
bool ls_buf_append(ls_buf *b, const void *s, size_t n);

/* SHA-256 of a file's contents as 64 hex digits (+ NUL); false when it cannot be read. */
bool ls_sha256_file(const char *path, char hex[65]);
/* One SHA-256 over k byte ranges in order (p[i], n[i] bytes each). */
bool ls_sha256_parts(const void *const *p, const uint64_t *n, size_t k, char hex[65]);
/* SHA-256 of a string, hex. */
void ls_sha256_str(const char *s, char hex[65]);
/* mkdir -p (0755); failures are left to the caller's next open to report. */
void ls_mkdirs(const char *dir);

/* The context a sequence gets when none is asked for: the trained context, capped at 4096. */
static inline int32_t ls_default_ctx(uint32_t n_ctx_train) {
    return (int32_t)(n_ctx_train < 4096 ? n_ctx_train : 4096);
}

/* Takes a caller's versioned struct (public API: its first field is `size_t size`) into
 * *dst, which holds the defaults: the first min(src->size, dst_size) bytes are copied, so
 * a caller built against an older, shorter layout gets defaults for the fields it lacks.
 * A NULL src, or a size below the first field after `size`, is LS_E_INVALID naming what. */
static inline ls_status ls_params_take(void *dst, size_t dst_size, const void *src, const char *what, ls_err *err) {
    if (!src) return ls_err_set(err, LS_E_INVALID, "no %s given", what);
    size_t n = *(const size_t *)src;
    if (n <= sizeof(size_t))
        return ls_err_set(err, LS_E_INVALID, "%s.size is %zu: initialize it with its _INIT macro (or sizeof)", what, n);
    memcpy(dst, src, n < dst_size ? n : dst_size);
    *(size_t *)dst = dst_size;
    return LS_OK;
}

#endif
