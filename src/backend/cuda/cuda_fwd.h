/* cuda_fwd.h - the Llama forward pass on an NVIDIA GPU, mirroring ls_fwd_run (model.h).
 *
 * Built only with `make cuda` / `make CUDA=1` (docs/cuda.md).  The exact family
 * computes the canonical recipes of docs/numerics.md bit for bit: a row's logits equal
 * the CPU's (memcmp) whatever else shares the batch, at any batch size, in verify
 * blocks and chunked prefill.  Rows whose need_parity is 0 may take the fast family
 * (a free-order fp16 tensor-core GEMM through cuBLAS for runs of at least
 * fast_min_rows rows; the exact kernels below that).
 *
 * Nothing here calls exit() or aborts on a CUDA failure: every error comes back as an
 * ls_status with the message in ls_err.  Not thread-safe per object: one thread drives
 * one ls_cuda_fwd (several fwds may run on one model from different threads). */
#ifndef LS_BACKEND_CUDA_FWD_H
#define LS_BACKEND_CUDA_FWD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "model/model.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a CUDA device is usable (the driver answers and a device of compute
 * capability 8.0+ exists); on false, err says why.  `name` (may be NULL) gets the
 * device name. */
bool ls_cuda_available(char *name, size_t name_cap, ls_err *err);

/* ---- paged KV on the device: the same blocks as ls_kv_store -----------------
 * n_blocks blocks of LS_KV_BLOCK positions, each [layer][K|V][n_head_kv][LS_KV_BLOCK]
 * [head_dim] floats, so the engine's block tables and block bookkeeping carry over
 * unchanged (block ids index this store instead of the host one). */
typedef struct ls_cuda_kv ls_cuda_kv;
/* n_layers: the layers it holds (0: the model's n_layer; 1: an MTP module's store). */
ls_cuda_kv *ls_cuda_kv_create(const ls_model *m, int32_t n_blocks, int32_t n_layers, ls_err *err);
void ls_cuda_kv_free(ls_cuda_kv *kv);
int32_t ls_cuda_kv_blocks(const ls_cuda_kv *kv);
/* Copies block src's first n_pos positions (all layers) into block dst (device to device,
 * ordered after every ls_cuda_fwd_run issued before on any fwd: it synchronizes the device). */
ls_status ls_cuda_kv_block_copy(ls_cuda_kv *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err);
/* Block b's bytes to host memory and back (the persistent prefix cache, engine/kvdisk.h):
 * block_floats floats in the layout above; both synchronize the device first. */
ls_status ls_cuda_kv_block_get(ls_cuda_kv *kv, int32_t b, void *out, ls_err *err);
ls_status ls_cuda_kv_block_put(ls_cuda_kv *kv, int32_t b, const void *in, ls_err *err);

/* ---- the forward ------------------------------------------------------------
 * Uses from the seam's ls_backend_params (engine/backend.h): n_rows, n_ctx, layers/n_layers,
 * mtp; n_threads, isa, kernels and pool are host-kernel matters and ignored.  A forward
 * created with mtp runs the model's MTP module (forward.c's path: the rows' embd_in, a
 * one-layer KV store) and gives the CPU's bits as the trunk does.
 * The model's weights are uploaded at the first create for that model and shared by
 * every fwd of it (reference-counted; freed with the last fwd). */
typedef struct ls_cuda_fwd ls_cuda_fwd;
ls_cuda_fwd *ls_cuda_fwd_create(const ls_model *m, const ls_backend_params *p, ls_err *err);
void ls_cuda_fwd_free(ls_cuda_fwd *f);

/* Same contract as ls_fwd_run: b->n rows of any sequences at any positions; each row's
 * K/V is written to its block (in kv) before any row reads it; logits (host memory)
 * receive n_vocab floats for each row with logit_row >= 0 (numbered 0, 1, ... in row
 * order); b->hidden_out, when set, every row's last hidden state; embd_in is required by
 * an MTP forward and refused by the others.  Returns when the results are in host memory. */
ls_status ls_cuda_fwd_run(ls_cuda_fwd *f, ls_cuda_kv *kv, const ls_batch *b, float *logits, ls_err *err);

/* ---- knobs (tests, benchmarks) ----------------------------------------------- */
typedef struct {
    int fast;          /* 1: rows with need_parity == 0 may take the fast family (default 1) */
    int fast_min_rows; /* the fast family uses cuBLAS for runs of at least this many rows (default 64;
                        * shorter fast runs take the exact kernels) */
    int gemv_max_rows; /* exact runs of up to this many rows take the warp-per-output kernel (in runs
                        * of 8 rows), longer ones the int8 tensor-core GEMM (default 8; 0 = always
                        * the GEMM) */
    int graphs;        /* 1: batches of up to 64 rows replay a captured CUDA graph (default 1) */
    int pdl;           /* 1: programmatic dependent launch between the kernels (default 1) */
    int gemv_nw;       /* weight rows per warp of the one-row warp kernel: 1 (default), 2 or 4
                        * (the SwiGLU matmul always takes a gate and an up row per output) */
    int gemv_nwr;      /* weight rows per warp of the multi-row warp kernel (runs of 2..8 rows): 1, 2 or 4;
                        * 0 (default): 2 for a matrix at least as wide as long, else 4 (the SwiGLU matmul
                        * always takes a gate and an up row per output) */
    int profile;       /* 1: time every kernel with events (no graphs, no PDL); ls_cuda_fwd_profile */
    int mma_minblocks; /* 2 (default): the 64 x 64 tensor-core tile capped at 128 registers, two blocks
                        * per SM (spills a little; measured 12% faster); 1: uncapped, one block per SM */
    int mma_v2;        /* runs over 32 rows: 4 (default) k_mma2's 64 x 64 tile (configuration 2),
                        * 1..3 k_mma2 in that configuration, 0 the older k_mma for every run (cuda_mm.cuh) */
    int mma_small;     /* runs of 9..32 rows (those the GEMM takes) with mma_v2 != 0: k_mma2 on one tile row of
                        * 16 or 32 rows, 2: 128 columns wide (8 warps), 1: 64 columns wide (4 warps), 3 (default):
                        * 128 columns up to 24 rows, 64 above; 0: k_mma (the tile before) */
    int attn_mr;       /* 1 (default): a batch of at least 16 rows that averages 8 or more rows per sequence
                        * runs attention with k_attn4 (cuda_ops.cu), rows of one sequence sharing each K/V
                        * chunk; 2: every batch of at least 16 rows does (tests); 3: as 2, on a grid of at
                        * most 3 persistent blocks, so each block takes several work items (tests; no graphs);
                        * 0: the per-row kernel */
    int narrow;        /* 1: every exact run of a quantized matrix takes the one-row warp kernel, one launch
                        * per row (the "narrow pin": what a process that pinned the single-row, batch-invariant
                        * kernel for every row would run; the same bits; benchmarks; default 0) */
} ls_cuda_opts;
void ls_cuda_fwd_get_opts(const ls_cuda_fwd *f, ls_cuda_opts *o);
void ls_cuda_fwd_set_opts(ls_cuda_fwd *f, const ls_cuda_opts *o);

typedef struct {
    double gpu_ms;             /* last run: device time from the input upload to the last kernel */
    double total_ms;           /* last run: wall time of ls_cuda_fwd_run */
    bool graph;                /* last run replayed a CUDA graph */
    uint64_t weight_bytes;     /* device bytes of the uploaded weights (GPU layout) */
    uint64_t step_bytes;       /* weight bytes one forward reads (all layers run + head) */
    bool cublas;               /* the fast family has cuBLAS */
    uint64_t rows_exact, rows_fast; /* rows of forwards so far by family (a fast row may still have run the
                                     * exact kernels: a run shorter than fast_min_rows, or no cuBLAS) */
    uint64_t rows_cublas;      /* rows of forwards so far whose matmuls cuBLAS ran (fast runs of at least
                                * fast_min_rows quantized-matrix rows) */
} ls_cuda_stats;
void ls_cuda_fwd_stats(const ls_cuda_fwd *f, ls_cuda_stats *s);
/* With opts.profile: device ms per kernel kind summed over the runs since the options were
 * set; returns the number of kinds (names[i], ms[i] for i < min(it, cap)). */
int ls_cuda_fwd_profile(const ls_cuda_fwd *f, const char **names, double *ms, int cap);

#ifdef __cplusplus
}
#endif
#endif
