/* backend_cuda.c - the CUDA backend behind the engine's seam (engine/backend.h); in the
 * library only in a CUDA build (`make CUDA=1` adds cuda to the Makefile's BACKENDS). */
#include <stdio.h>

#include "backend/cuda/cuda_fwd.h"
#include "engine/backend.h"

static void *cu_fwd_create(const ls_model *m, const ls_backend_params *p, ls_err *err) {
    if (!ls_cuda_available(NULL, 0, err)) return NULL;
    return ls_cuda_fwd_create(m, p, err);
}
static void cu_fwd_free(void *f) { ls_cuda_fwd_free(f); }
static void *cu_kv_create(const ls_model *m, int32_t n_blocks, int32_t n_layers, ls_err *err) {
    return ls_cuda_kv_create(m, n_blocks, n_layers, err);
}
static void cu_kv_free(void *kv) { ls_cuda_kv_free(kv); }
static ls_status cu_kv_block_copy(void *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err) {
    return ls_cuda_kv_block_copy(kv, dst, src, n_pos, err);
}
static ls_status cu_kv_block_get(void *kv, int32_t b, void *out, ls_err *err) {
    return ls_cuda_kv_block_get(kv, b, out, err);
}
static ls_status cu_kv_block_put(void *kv, int32_t b, const void *in, ls_err *err) {
    return ls_cuda_kv_block_put(kv, b, in, err);
}
static ls_status cu_run(void *f, void *kv, const ls_batch *b, float *logits, ls_err *err) {
    return ls_cuda_fwd_run(f, kv, b, logits, err);
}
static void cu_info(void *fwd, ls_backend_info *o) {
    (void)fwd;
    if (!ls_cuda_available(o->device, sizeof o->device, NULL)) snprintf(o->device, sizeof o->device, "no usable CUDA device");
    o->isa = LS_ISA_AUTO; /* no host kernels */
    o->n_threads = 0;     /* no thread count */
    snprintf(o->kernels, sizeof o->kernels, "exact");
    snprintf(o->kernels_free, sizeof o->kernels_free, "fast");
    o->parity_canonical = true; /* rows that need parity always run the exact family */
    o->kernels_withdrawn[0] = 0;
    o->pool = NULL;
}
static bool cu_withdraw(void *fwd) {
    (void)fwd;
    return false;
}

const ls_backend ls_backend_cuda = {"cuda", cu_fwd_create, cu_fwd_free, cu_kv_create, cu_kv_free,
                                    cu_kv_block_copy, cu_run, cu_info, cu_withdraw,
                                    cu_kv_block_get, cu_kv_block_put};
