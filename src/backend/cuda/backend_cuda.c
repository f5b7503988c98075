/* backend_cuda.c - the CUDA backend behind the engine's seam (engine/backend.h); in the
 * library only in a CUDA build, in place of engine/backend_nocuda.c. */
#include <stdio.h>

#include "backend/cuda/cuda_fwd.h"
#include "engine/backend.h"

static void *cu_fwd_create(const ls_model *m, const ls_fwd_params *p, ls_err *err) {
    if (!ls_cuda_available(NULL, 0, err)) return NULL;
    return ls_cuda_fwd_create(m, p, err);
}
static void cu_fwd_free(void *f) { ls_cuda_fwd_free(f); }
static void *cu_kv_create(const ls_model *m, int32_t n_blocks, ls_err *err) { return ls_cuda_kv_create(m, n_blocks, err); }
static void cu_kv_free(void *kv) { ls_cuda_kv_free(kv); }
static ls_status cu_kv_block_copy(void *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err) {
    return ls_cuda_kv_block_copy(kv, dst, src, n_pos, err);
}
static ls_status cu_run(void *f, void *kv, const ls_batch *b, float *logits, ls_err *err) {
    return ls_cuda_fwd_run(f, kv, b, logits, err);
}
static void cu_describe(char *buf, size_t cap) {
    if (!ls_cuda_available(buf, cap, NULL)) snprintf(buf, cap, "no usable CUDA device");
}

static const ls_backend ls_be_cuda = {"cuda", cu_fwd_create, cu_fwd_free, cu_kv_create, cu_kv_free,
                                      cu_kv_block_copy, cu_run, cu_describe};

const ls_backend *ls_backend_cuda(ls_err *err) {
    (void)err;
    return &ls_be_cuda;
}
