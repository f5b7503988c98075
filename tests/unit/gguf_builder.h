/* gguf_builder.h - a raw byte builder for hand-made (often deliberately corrupt)
 * GGUF files in tests.  Unlike gguf_writer it validates nothing: every field is
 * written exactly as given.  Header-only; all functions are static.
 * Allocation failure aborts (tests only). */
#ifndef LS_TESTS_GGUF_BUILDER_H
#define LS_TESTS_GGUF_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p; /* (cap) owned; release with gb_free */
    size_t n;
    size_t cap;
} gb_buf;

static inline void gb_put(gb_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            fprintf(stderr, "gguf_builder: out of memory\n");
            abort();
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static inline void gb_u8(gb_buf *b, uint8_t v) { gb_put(b, &v, 1); }
static inline void gb_u32(gb_buf *b, uint32_t v) { gb_put(b, &v, 4); }
static inline void gb_u64(gb_buf *b, uint64_t v) { gb_put(b, &v, 8); }
static inline void gb_str(gb_buf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}
static inline void gb_zeros(gb_buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) gb_u8(b, 0);
}
/* Zero-pads to a multiple of align. */
static inline void gb_pad(gb_buf *b, size_t align) {
    while (b->n % align) gb_u8(b, 0);
}
static inline void gb_patch_u32(gb_buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }
static inline void gb_patch_u64(gb_buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }
static inline void gb_free(gb_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* "GGUF", version, tensor count, KV count. */
static inline void gb_header(gb_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_u32(b, 0x46554747u);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

static inline void gb_kv_str(gb_buf *b, const char *key, const char *v) {
    gb_str(b, key);
    gb_u32(b, 8 /* STRING */);
    gb_str(b, v);
}

static inline void gb_kv_u32(gb_buf *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, 4 /* UINT32 */);
    gb_u32(b, v);
}

/* A tensor info record; ne has n_dims entries. */
static inline void gb_tensor_info(gb_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                                  uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

#endif
