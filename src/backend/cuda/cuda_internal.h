/* cuda_internal.h - shared by the backend's .cu files only: device matrices, the
 * launchers of every kernel, and error plumbing. */
#ifndef LS_BACKEND_CUDA_INTERNAL_H
#define LS_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include <utility>

#include "backend/cuda/cuda_recipe.h"

/* A matrix on the device (by value in kernel parameters).  Quantized: the arrays of
 * cuda_recipe.h; float types: f, row-major [N][K] of F32/F16/BF16. */
struct lsc_mat {
    int type;
    int N, K, nb, nbp;
    const uint8_t *codes, *hi, *sc, *sb;
    const void *f;
};

/* Quantized activations of a run of rows: q [rows][xs*32], dxs [rows][xs] (xs = nbp of K). */
struct lsc_act {
    const int8_t *q;
    const float2 *dxs;
    int xs;
};

/* matmul epilogues */
enum { LSC_MODE_STORE = 0, LSC_MODE_ADD = 1, LSC_MODE_SWIGLU = 2, LSC_MODE_GEGLU = 3 };
/* SWIGLU, GEGLU (the gated modes): the stacked gate/up matrix interleaves 8-row chunks:
 * stacked row 16c + i is gate row 8c + i, 16c + 8 + i is up row 8c + i (i < 8); output
 * o = act(gate o) * up o (lsc_glu: silu, or gelu_tanh for GEGLU). */
static inline __host__ __device__ bool lsc_gated(int mode) { return mode == LSC_MODE_SWIGLU || mode == LSC_MODE_GEGLU; }
#define LSC_GU_CHUNK 8

/* ---- launches ---------------------------------------------------------------------
 * Kernels of a forward are launched with programmatic dependent launch (Hopper) when
 * the stream's pdl is set: each kernel lets its successor start at once (lsc_pdl_trigger) and
 * waits for its predecessor's results (lsc_pdl_wait) only after the work that reads none
 * of them (the matmuls' first weight loads).  Without the attribute both are no-ops. */
/* A stream and the launch settings of the kernels launched on it: passed with every launch
 * (a forward keeps one, ls_cuda_fwd.ls; nothing lives in thread-local or global state). */
struct lsc_stream {
    cudaStream_t st;
    int pdl;      /* launch with programmatic dependent launch (the launch follows a kernel) */
    int gemv_nw1; /* weight rows per warp of the one-row warp kernel (1, 2, 4) */
    int mma_minb; /* 2: the 64 x 64 GEMM tile capped at 128 registers (two blocks per SM) */
    int mma_v2;   /* runs over 32 rows: 0 k_mma, 1..3 a k_mma2 configuration, 4 the default, k_mma2 configuration 2 (cuda_mm.cuh) */
    int attn_mr;  /* 1: attention may take k_attn4 (many rows of one sequence share each K/V chunk); 3: so, on
                   * at most 3 persistent blocks (tests) */
    int gemv_nwr = 0; /* weight rows per warp of the multi-row warp kernel (2..8 rows): 1, 2, 4; 0 the default
                       * (2 for a matrix at least as wide as long, else 4) */
    int mma_small = 3; /* runs of up to 32 rows in the GEMM (mma_v2 != 0): 1 k_mma2's 16/32 x 64 tile (4 warps),
                        * 2 its 16/32 x 128 tile (8 warps), 3 the 128-column tile up to 24 rows, the 64-column
                        * one above, 0 k_mma (cuda_mm.cuh) */
    explicit lsc_stream(cudaStream_t s = 0, int pdl_ = 0, int nw = 1, int minb = 1, int v2 = 0, int mr = 0)
        : st(s), pdl(pdl_), gemv_nw1(nw), mma_minb(minb), mma_v2(v2), attn_mr(mr) {}
    operator cudaStream_t() const { return st; }
};

#ifdef __CUDACC__
__device__ __forceinline__ void lsc_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void lsc_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#endif

template <typename... K, typename... A>
static inline cudaError_t lsc_launch(void (*k)(K...), dim3 g, dim3 b, size_t smem, const lsc_stream &s, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = g;
    cfg.blockDim = b;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s.st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = s.pdl ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* Exact family.  y: output rows (row r at y + r * ldy), n_out outputs (SWIGLU: N / 2).
 * lsc_mma splits K over up to 8 blocks when the grid would be small (few rows): each
 * block's pairs form an aligned subtree of the recipe's tree, written to `part` (at most
 * part_floats floats) and joined by the same tree in a second kernel. */
/* where a SWIGLU warp-kernel matmul also writes its outputs' quantization (q == NULL: not) */
struct lsc_qout {
    int8_t *q;
    float2 *dxs;
    int xs;
};
cudaError_t lsc_gemv(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, lsc_stream s,
                     lsc_qout qo = lsc_qout{NULL, NULL, 0});
cudaError_t lsc_mma(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, float *part,
                    size_t part_floats, lsc_stream s);
cudaError_t lsc_gemv_float(const lsc_mat &w, const float *x, int ldx, int rows, float *y, int ldy, int mode,
                           lsc_stream s);
cudaError_t lsc_mma_init(void); /* shared-memory limits of the GEMM kernels (once) */

/* repacking on the device: ggml rows src[n] (row_bytes apart) of a quantized matrix into
 * destination rows dst_row(n) = base + (n / chunk) * cstride + n % chunk of w. */
cudaError_t lsc_repack(const lsc_mat &w, const uint8_t *src, int n_src, size_t row_bytes, int base, int chunk,
                       int cstride, lsc_stream s);

/* per-row operations (docs/numerics.md) */
/* out rows: xn = rmsnorm(x[rowidx[r]] or x[r]) (optional), quantized into a (q, dxs). */
cudaError_t lsc_rmsnorm_quant(const float *x, int ldx, const int32_t *rowidx, const float *w, float eps, int rows,
                              int n, float *xn, int ldxn, int8_t *q, float2 *dxs, int xs, lsc_stream s);
cudaError_t lsc_ops_init(void); /* shared-memory limits (once, outside graph capture) */
cudaError_t lsc_quant(const float *x, int ldx, int rows, int n, int8_t *q, float2 *dxs, int xs, lsc_stream s);
/* out = act(g) * u, mode LSC_MODE_SWIGLU or LSC_MODE_GEGLU */
cudaError_t lsc_glu(const float *g, const float *u, int ld, int rows, int n, float *out, int ldo, int mode,
                    lsc_stream s);
/* x[r] = x[r] + rmsnorm(t[r], w) (a post-norm and its residual add: two roundings per element
 * after the norm's, as forward.c's ls_rmsnorm then add_rows) */
cudaError_t lsc_norm_add(const float *t, int ldt, const float *w, float eps, int rows, int n, float *x, int ldx,
                         lsc_stream s);

/* RoPE + K/V into the paged cache for rows: qkv row r holds q (n_head heads), k, v
 * (n_kv heads each) at column offsets 0, qd, qd + kvd.  Before the rotation, in the plan's
 * order: + bias (bqkv: qd + 2 kvd floats, q|k|v, or NULL), then the per-head RMSNorm of q
 * and k (qn, kn: head_dim floats, or NULL). */
struct lsc_qkpre {
    const float *bqkv;
    const float *qn, *kn;
    float eps;
};
struct lsc_kvargs {
    float *kv;                 /* the store */
    size_t block_floats;       /* one block, all layers */
    size_t layer_off;          /* floats from a block's start to this layer's K */
    const int32_t *tbl;        /* flattened block tables */
    const int32_t *tbl_off;    /* (rows) where row r's table starts in tbl */
    const int32_t *pos;        /* (rows) */
};
cudaError_t lsc_rope_kv(float *qkv, int ldq, int rows, int n_head, int n_kv, int D, int rope_dim, int neox,
                        const float *cs, const float *sn, lsc_kvargs kv, lsc_qkpre pre, lsc_stream s);
/* attention per (row, kv head): out (rows x n_head*D) and, when q != NULL, its quantized
 * activations (fused when D % 32 == 0 and n_head/n_kv*D <= 1024; else a separate pass).
 * window > 0: the row at position p reads keys max(0, p - window + 1)..p only, as keys
 * 0..n-1 of the recipe (docs/numerics.md); 0: keys 0..p. */
size_t lsc_attn_smem(int n_head, int n_kv, int D, int max_keys);
cudaError_t lsc_attention(const float *qkv, int ldq, int rows, int n_head, int n_kv, int D, float scale, int window,
                          lsc_kvargs kv, int max_keys, float *out, int8_t *q, float2 *dxs, int xs, float *scratch,
                          size_t scratch_floats, lsc_stream s);
cudaError_t lsc_attn_init(size_t max_smem, int sm_count);

/* fast family helpers */
cudaError_t lsc_dequant_half(const lsc_mat &w, void *out_half, lsc_stream s); /* [N][K] fp16 */
cudaError_t lsc_f2h(const float *x, int ldx, int rows, int n, void *out_half, lsc_stream s);
/* y (rows x ldy) from a dense fp32 result t (rows x N): STORE/ADD copy, SWIGLU de-interleaves */
cudaError_t lsc_epilogue(const float *t, int N, int rows, float *y, int ldy, int mode, lsc_stream s);
cudaError_t lsc_read_probe(const void *p, size_t bytes, unsigned *out, int blocks, lsc_stream s);
cudaError_t lsc_gather(const float *x, int ld, const int32_t *idx, int rows, int n, float *out, lsc_stream s);

#endif
