/* cuda_test.h - test hooks into the CUDA backend's kernels (tests/cuda only). */
#ifndef LS_BACKEND_CUDA_TEST_H
#define LS_BACKEND_CUDA_TEST_H

#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LS_CUDA_K_GEMV = 0, LS_CUDA_K_MMA = 1, LS_CUDA_K_FAST = 2 };
/* kernel LS_CUDA_K_MMA2 + c (c = 1..3): the tensor-core GEMM in k_mma2's configuration c for
 * runs over 32 rows (shorter runs take k_mma as always) */
enum { LS_CUDA_K_MMA2 = 10 };
/* kernel LS_CUDA_K_MMA2S + s (s = 1, 2): runs of up to 32 rows on k_mma2's one-tile-row configuration s
 * (16 or 32 rows by 64 columns on 4 warps, by 128 on 8; ls_cuda_opts.mma_small); longer runs take
 * k_mma2's default configuration */
enum { LS_CUDA_K_MMA2S = 30 };
/* kernel LS_CUDA_K_GEMV_NWR + n (n = 1, 2, 4): the warp kernel with n weight rows per warp in
 * its runs of 2..8 rows (by default 2 for a matrix at least as wide as long, else 4) */
enum { LS_CUDA_K_GEMV_NWR = 20 };
/* y (M x N) = x (M x K) . W^T on the GPU through one kernel family: W is N ggml rows of
 * `type`; quantized types quantize x on the GPU first.  Float types always run their one
 * exact kernel. */
ls_status ls_cuda_test_matmul(uint32_t type, int64_t N, int64_t K, const void *w, int M, const float *x, int kernel,
                              float *y, ls_err *err);
/* The GPU's activation quantization of x (M x K): q (M x K, element order), dxs (M x K/32 x 2). */
ls_status ls_cuda_test_quant(const float *x, int M, int K, int8_t *q, float *dxs, ls_err *err);

/* One exact matmul kernel alone: M rows against N x K of `type` (ggml rows w), launched
 * `reps` times over copies of the matrix that together exceed the L2 cache; *ms the mean
 * time per launch, *gbs the matrix's device bytes per second.  nw: weight rows per warp of
 * the one-row warp kernel (0 = default); pdl: launches with programmatic dependent launch.
 * kernel 3: the tensor-core GEMM with its 64 x 64 tile capped at two blocks per SM. */
ls_status ls_cuda_test_mm_bench(uint32_t type, int64_t N, int64_t K, const void *w, int M, int kernel, int nw, int pdl,
                                int reps, double *ms, double *gbs, ls_err *err);
/* Device memory bandwidth over a buffer of `bytes`: a device-to-device copy (bytes read +
 * written per second) and a read-only kernel, each the median of `reps` timed runs. */
ls_status ls_cuda_test_bandwidth(size_t bytes, int reps, double *copy_gbs, double *read_gbs, ls_err *err);

#ifdef __cplusplus
}
#endif
#endif
