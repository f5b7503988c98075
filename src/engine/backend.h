/* backend.h - the seam between the engine and the device that runs its forwards.
 *
 * The engine, scheduler, drafters and server are the same for every backend: a backend
 * owns the forward workspace and the paged KV store (the same block layout and block
 * ids on every backend, so block tables and the prefix cache carry over), and runs one
 * ragged batch per call with ls_fwd_run's contract (model.h): each row's K/V written
 * before any row reads it, logits for the rows that ask, a row's bits independent of
 * the rest of the batch.
 *   cpu   the canonical kernels of src/kernels/cpu (always built)
 *   cuda  src/backend/cuda (built with `make CUDA=1`; docs/cuda.md): the exact family
 *         gives the CPU's bits, rows without a parity need may take a fast family */
#ifndef LS_ENGINE_BACKEND_H
#define LS_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

typedef struct {
    const char *name;
    void *(*fwd_create)(const ls_model *m, const ls_fwd_params *p, ls_err *err);
    void (*fwd_free)(void *fwd);
    void *(*kv_create)(const ls_model *m, int32_t n_blocks, ls_err *err);
    void (*kv_free)(void *kv);
    ls_status (*kv_block_copy)(void *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err);
    ls_status (*run)(void *fwd, void *kv, const ls_batch *b, float *logits, ls_err *err);
    /* A description of the device ("NVIDIA H200"), or "" (into buf). */
    void (*describe)(char *buf, size_t cap);
} ls_backend;

/* The backend of that name ("cpu", "cuda"); NULL with err set when this build or this
 * machine has none (the message says which, and how to get one). */
const ls_backend *ls_backend_find(const char *name, ls_err *err);
const ls_backend *ls_backend_cpu(void);
/* The CUDA backend of this build, or NULL (a build without CUDA: backend_nocuda.c). */
const ls_backend *ls_backend_cuda(ls_err *err);

#endif
