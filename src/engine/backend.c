/* backend.c - the CPU backend (src/kernels/cpu through ls_fwd) and backend lookup. */
#include "engine/backend.h"

#include <stdio.h>
#include <string.h>

static void *cpu_fwd_create(const ls_model *m, const ls_fwd_params *p, ls_err *err) { return ls_fwd_create(m, *p, err); }
static void cpu_fwd_free(void *f) { ls_fwd_free(f); }
static void *cpu_kv_create(const ls_model *m, int32_t n_blocks, ls_err *err) { return ls_kv_store_create(m, n_blocks, err); }
static void cpu_kv_free(void *kv) { ls_kv_store_free(kv); }
static ls_status cpu_kv_block_copy(void *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err) {
    (void)err;
    ls_kv_block_copy(kv, dst, src, n_pos);
    return LS_OK;
}
static ls_status cpu_run(void *f, void *kv, const ls_batch *b, float *logits, ls_err *err) {
    (void)err;
    ls_fwd_run(f, kv, b, logits);
    return LS_OK;
}
static void cpu_describe(char *buf, size_t cap) { snprintf(buf, cap, "%s", ""); }

static const ls_backend ls_be_cpu = {"cpu", cpu_fwd_create, cpu_fwd_free, cpu_kv_create, cpu_kv_free,
                                     cpu_kv_block_copy, cpu_run, cpu_describe};

const ls_backend *ls_backend_cpu(void) { return &ls_be_cpu; }

const ls_backend *ls_backend_find(const char *name, ls_err *err) {
    if (!name || !*name || !strcmp(name, "cpu")) return &ls_be_cpu;
    if (!strcmp(name, "cuda")) return ls_backend_cuda(err);
    ls_err_set(err, LS_E_INVALID, "unknown device '%s' (available: cpu, cuda)", name);
    return NULL;
}
