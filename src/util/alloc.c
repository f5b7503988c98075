/* alloc.c - see alloc.h. */
#include "util/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int g_active;        /* counting or armed: the slow path runs */
static atomic_uint_fast64_t g_count; /* allocation calls since arm / count_start */
static atomic_uint_fast64_t g_fail_at; /* 0: nothing armed, else the call number that fails */
static atomic_int g_fired;

/* Returns 1 when this allocation call must fail. */
static int inject(void) {
    if (!atomic_load_explicit(&g_active, memory_order_relaxed)) return 0;
    uint64_t k = atomic_fetch_add(&g_count, 1) + 1;
    uint64_t at = atomic_load(&g_fail_at);
    if (at != 0 && k == at) {
        atomic_store(&g_fired, 1);
        return 1;
    }
    return 0;
}

void *ls_malloc(size_t n) { return inject() ? NULL : malloc(n); }
void *ls_calloc(size_t n, size_t size) { return inject() ? NULL : calloc(n, size); }
void *ls_realloc(void *p, size_t n) { return inject() ? NULL : realloc(p, n); }

void *ls_aligned_alloc(size_t align, size_t n) {
    if (inject()) return NULL;
    size_t r = (n + align - 1) / align * align; /* C11 wants a multiple of the alignment */
    return aligned_alloc(align, r ? r : align);
}

char *ls_strdup(const char *s) {
    if (inject()) return NULL;
    return strdup(s);
}

void ls_alloc_fail_nth(uint64_t n) {
    atomic_store(&g_fired, 0);
    atomic_store(&g_count, 0);
    atomic_store(&g_fail_at, n);
    atomic_store(&g_active, n != 0);
}

void ls_alloc_count_start(void) {
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_fired, 0);
    atomic_store(&g_count, 0);
    atomic_store(&g_active, 1);
}

void ls_alloc_count_stop(void) {
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_active, 0);
}

uint64_t ls_alloc_count(void) { return atomic_load(&g_count); }
int ls_alloc_failed(void) { return atomic_load(&g_fired); }
