/* kernels.h - the CPU kernel layer: canonical recipes, one per operation.
 *
 * The scalar C implementation of each recipe is its definition (docs/numerics.md).
 * The AVX2 and AVX-512 paths, the narrow (M=1), wide and GEMM paths, and every
 * thread count produce the same bits for a given row.  Threads split N only.
 * Selection is per call (the ls_kctx passed in), never a process-wide switch. */
#ifndef LS_KERNELS_CPU_KERNELS_H
#define LS_KERNELS_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* ---- instruction sets ---------------------------------------------------
 * ls_isa, ls_isa_supported (CPUID + OS xsave support, minus LOCKSTEP_CPU_HIDE),
 * ls_isa_best, ls_isa_name and ls_isa_from_name are public (lockstep.h).
 * LOCKSTEP_ISA=scalar|avx2|avxvnni|avx512|amx forces one; unset means the best the CPU has.
 * Forcing one the CPU lacks, or an unknown name, is LS_E_UNSUPPORTED/LS_E_INVALID.
 * LOCKSTEP_CPU_HIDE=avx512|avx2 (tests) makes the process see a CPU without that
 * instruction set and those above it; another value is LS_E_INVALID. */
ls_status ls_isa_from_env(ls_isa *out, ls_err *err);

/* ---- thread pool: persistent workers; nothing allocates per call --------- */
typedef struct ls_pool ls_pool;
ls_pool *ls_pool_create(int n_threads, ls_err *err); /* n_threads >= 1; caller owns */
void ls_pool_free(ls_pool *p);
int ls_pool_size(const ls_pool *p);
/* Runs fn(arg, ith, nth) for ith in [0, nth) on the pool (the caller is thread 0)
 * and returns when all are done. */
void ls_pool_run(ls_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);
/* For work that fn claims from a shared counter (so any number of participants, the
 * caller alone included, completes it): runs fn(arg, 0, nth) on the caller and
 * fn(arg, ith, nth) on each worker that joins before the caller's call returns, with
 * distinct ith in [1, nth) (per-thread scratch may be indexed by ith).  Returns when the
 * caller's call and every joined worker's are done; a worker that wakes later never runs
 * it.  Every kernel dispatch uses this: a worker descheduled by another process costs
 * the step nothing but its share. */
void ls_pool_run_dyn(ls_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* ---- matmul kernel families ----------------------------------------------
 * Every matmul kernel belongs to a family with a recipe id.  The canonical families
 * compute the canonical recipe (docs/numerics.md) and so agree bit for bit:
 *   ls_mm_wide    the default dispatch: the single-row kernel for one row, the multi-row
 *                 (wide) and cache-blocked (GEMM) kernels for more, per call;
 *   ls_mm_narrow  the single-row kernel applied row by row.
 * A non-canonical family (a faster recipe, or a test family) is a caller-made struct
 * with a run function.  A call uses the families its kernel context names: rows that
 * need parity run kc->fam_parity, the others kc->fam.  Nothing here is process-wide:
 * the built-in families are constants, and the context that selects a family belongs
 * to one forward workspace (model.h), which the probe may re-scope. */
typedef struct ls_wmat ls_wmat;
typedef struct ls_mm_family {
    const char *name;
    bool canonical;
    /* y[m*N + n] for m < M, n in [n0, n1): x is M x K floats.  Called from pool threads
     * with disjoint column ranges.  NULL for the built-in canonical families. */
    void (*run)(const ls_wmat *w, const float *x, int64_t M, float *y, int64_t n0, int64_t n1);
} ls_mm_family;
extern const ls_mm_family ls_mm_wide, ls_mm_narrow;
/* The built-in family of that name ("wide", "narrow"), or NULL. */
const ls_mm_family *ls_mm_family_builtin(const char *name);

/* Test-only fault injection: each bit plants one deliberate parity bug in the live code
 * path, so tests can show the probe catches it (engine_test.h says how tests set them). */
enum {
    LS_FAULT_KV_SKIP = 1u << 0,  /* the K/V write of the first row of a later sequence in a batch is skipped */
    LS_FAULT_THREADS = 1u << 1,  /* RMSNorm output 0 of each row one ulp off when the pool has more than one thread */
    LS_FAULT_ISA = 1u << 2,      /* SwiGLU output 0 of each row one ulp off on every ISA but scalar */
};
/* The LS_FAULT_* bits in ls_kctx.faults plant
 * deliberate parity bugs in the live code path; always 0 outside tests. */

/* ---- execution context: what one call runs with ------------------------- */
typedef struct {
    ls_isa isa;
    ls_pool *pool;      /* NULL = single-threaded */
    void *scratch;      /* activation-quantization scratch, see ls_matmul_scratch_bytes */
    size_t scratch_bytes;
    bool narrow;        /* run every matmul row through the single-row (M = 1) kernel:
                         * the same bits, at the cost of re-reading W per row (the
                         * "narrow pin" other engines use; here only for benchmarks) */
    const ls_mm_family *fam;        /* family for rows that do not need parity (NULL = ls_mm_wide) */
    const ls_mm_family *fam_parity; /* family for rows that need parity (NULL = ls_mm_wide) */
    uint64_t *rows;     /* optional counters, added to atomically: [0] matmul rows run with
                         * fam_parity, [1] rows run with fam (tests, /metrics) */
    unsigned faults;    /* LS_FAULT_* (tests only) */
} ls_kctx;

/* ---- weight matrices ------------------------------------------------------ */
/* W is N rows of K elements in ggml layout (row n at data + n*row_bytes).
 * Creation repacks MXFP4 into the group records every ISA reads (owned by the ls_wmat);
 * the other quantized types get their one repacked layout, the panel copy, from
 * ls_wmat_prepare; float types are read in place.  `data` must outlive the matrix either
 * way. */
ls_wmat *ls_wmat_create(uint32_t type, int64_t N, int64_t K, const void *data, ls_err *err);
/* The layout the kernels read beyond what creation built: the panel copy of the Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K matrices, one copy read by every ISA (the
 * first prepare builds it, the others find it built).  It must run once for each ISA a
 * matrix is used with, before the first such call (ls_matmul asserts it), and not
 * concurrently with calls on the matrix.  prepare_bytes: what it needs (a multiple of 64;
 * 0: nothing).
 * mem: that many bytes, 64-byte aligned, owned by the caller and outliving the matrix
 * (a model puts every panel in one arena of huge pages), or NULL to allocate them with
 * the matrix.  Preparing again for the same ISA is a no-op. */
size_t ls_wmat_prepare_bytes(const ls_wmat *w, ls_isa isa);
ls_status ls_wmat_prepare(ls_wmat *w, ls_isa isa, void *mem, ls_err *err);
/* The same, calling done(ctx, p, n) as the build finishes reading the source rows: the
 * pieces [p, p + n) come in row order, each once, about 1 MiB each (all but the last end on
 * a 4 KiB boundary), and cover the rows the build read (a model gives a file's pages back
 * with it, so a large matrix's file pages and its new copy are not resident together).
 * done is not called when nothing is built. */
typedef void (*ls_src_done_fn)(void *ctx, const void *p, size_t n);
ls_status ls_wmat_prepare_ex(ls_wmat *w, ls_isa isa, void *mem, ls_src_done_fn done, void *ctx, ls_err *err);
bool ls_wmat_prepared(const ls_wmat *w, ls_isa isa);
/* ls_wmat_prepare (mem NULL) for every ISA this CPU supports: for tests and benchmarks
 * that use one matrix with several ISAs. */
ls_status ls_wmat_prepare_all(ls_wmat *w, ls_err *err);
void ls_wmat_free(ls_wmat *w);
bool ls_matmul_type_supported(uint32_t type);
int64_t ls_wmat_rows(const ls_wmat *w);
int64_t ls_wmat_cols(const ls_wmat *w);
uint32_t ls_wmat_type(const ls_wmat *w);
const void *ls_wmat_src_row(const ls_wmat *w, int64_t n); /* row n in ggml layout */
/* The bytes of repacked weights w holds (its group records and its panel copy, owned or
 * in a caller's memory; 0 for float types, read in place): one layout per matrix, so
 * a prepared panel-type matrix holds exactly its panel copy. */
size_t ls_wmat_repacked_bytes(const ls_wmat *w);

/* Scratch needed by ls_matmul for up to M rows of K columns (any supported type). */
size_t ls_matmul_scratch_bytes(int64_t M, int64_t K);

/* y[m*N + n] = sum_k x[m*K + k] * W[n][k]  for m < M, n < N   (x: M×K, y: M×N).
 * Every y row is bit-identical to what M=1 gives for that x row, on any ISA and
 * any pool size. */
void ls_matmul(const ls_kctx *kc, const ls_wmat *w, const float *x, int64_t M, float *y);

/* Several matrices with the same K applied to the same x (e.g. the Q/K/V projections):
 * y[i] = x · w[i]^T for i < n (n <= LS_MATMUL_MULTI_MAX).  x is quantized once and all
 * matrices run in one pool dispatch; each y[i] is bit-identical to
 * ls_matmul(kc, w[i], x, M, y[i]). */
#define LS_MATMUL_MULTI_MAX 4
void ls_matmul_multi(const ls_kctx *kc, int n, const ls_wmat *const *w, const float *x, int64_t M,
                     float *const *y);
/* The same with each row's parity need: row m runs kc->fam_parity when need[m] is
 * nonzero (or need is NULL), else kc->fam. */
void ls_matmul_multi_rows(const ls_kctx *kc, int n, const ls_wmat *const *w, const float *x, int64_t M,
                          float *const *y, const uint8_t *need);

/* ---- per-row operations (each row independent of the others in the call) -- */
/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   for M rows of n  */
void ls_rmsnorm(const ls_kctx *kc, const float *x, const float *w, float eps, int64_t M, int64_t n,
                float *out);
/* out[i] = silu(gate[i]) * up[i] for M rows of n */
void ls_swiglu(const ls_kctx *kc, const float *gate, const float *up, int64_t M, int64_t n, float *out);
/* out[i] = gelu_tanh(gate[i]) * up[i] for M rows of n (GeGLU, gemma; geglu.c): one scalar
 * recipe on every ISA, gelu_tanh(g) = g / (1 + ls_expf(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3). */
void ls_geglu(const ls_kctx *kc, const float *gate, const float *up, int64_t M, int64_t n, float *out);
float ls_gelu_tanh(float g);

/* RoPE tables, computed once: cos/sin for positions [0, n_ctx) and head_dim/2 freqs.
 * NeoX-style (neox=true) rotates pairs (i, i+d/2); normal style rotates (2i, 2i+1). */
typedef struct ls_rope ls_rope;
typedef struct {
    int32_t n_ctx;
    int32_t head_dim;      /* rotated dims (rope.dimension_count) */
    float freq_base;       /* rope.freq_base */
    float freq_scale;      /* 1/rope.scaling.factor for linear and YaRN scaling, else 1 */
    bool neox;
    /* YaRN (rope.scaling.type = yarn; docs/numerics.md): each frequency mixes the
     * interpolated (freq_scale) and the original angle by a ramp over the dims between the
     * correction dims of beta_fast and beta_slow rotations in n_ctx_orig positions, and
     * cos/sin are scaled by attn_factor * (1 + 0.1 ln(1/freq_scale)) (when freq_scale < 1). */
    bool yarn;
    int32_t yarn_n_ctx_orig;
    float yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
} ls_rope_params;
ls_rope *ls_rope_create(ls_rope_params p, ls_err *err);
/* The same with head_dim/2 factors dividing each frequency (rope_freqs.weight, Llama
 * 3.1+: theta_i = pos * freq_scale * base^(-2i/d) / factors[i], in double); factors
 * NULL is ls_rope_create.  factors is read only here. */
ls_rope *ls_rope_create_factors(ls_rope_params p, const float *factors, ls_err *err);
/* Fills cs and sn (n_ctx * head_dim/2 floats each) with the tables ls_rope_create_factors
 * builds (p.n_ctx is not read; p must be valid as ls_rope_create_factors checks). */
void ls_rope_fill(ls_rope_params p, const float *factors, int32_t n_ctx, float *cs, float *sn);
void ls_rope_free(ls_rope *r);
/* Rotates, in place, M rows each holding n_heads heads of head_stride floats, row m
 * at position pos[m].  Rotates the first head_dim dims of each head. */
void ls_rope_apply(const ls_kctx *kc, const ls_rope *r, float *x, int64_t M, int n_heads,
                   int head_stride, const int32_t *pos);

/* A sequence's keys and values for one layer, in blocks of 2^block_shift positions
 * (paged KV).  Key j of kv head h is the head_dim floats at
 *     k + blocks[j >> block_shift] * block_stride + (j & (2^block_shift - 1)) * row_stride
 *       + h * head_stride
 * and value j likewise from v.  Position-major blocks ([pos][kv head][dim]) have
 * row_stride = n_kv_head * head_dim, head_stride = head_dim; head-major blocks
 * ([kv head][pos][dim], what the model's KV store uses: one head's keys of a block are
 * contiguous) have row_stride = head_dim, head_stride = 2^block_shift * head_dim.  A
 * contiguous cache is the table {0, 1, 2, ...} with block_stride = 2^block_shift *
 * row_stride (position-major).  block_shift >= 4 (16-position blocks or larger), so the
 * SIMD paths' 16-key groups never straddle a block. */
typedef struct {
    const float *k, *v;
    const int32_t *blocks;
    int64_t block_stride;  /* floats */
    int block_shift;
    int row_stride;        /* floats */
    int head_stride;       /* floats */
} ls_kv_view;

/* Attention for M query rows.  Row m is at position pos[m] and attends keys
 * 0..pos[m] of its own sequence, kv[m].  q: M rows of n_head*head_dim; out likewise.
 * GQA: query head h uses kv head h / (n_head/n_kv_head).  The recipe is fixed by key
 * index (scores, max, exp, sums in chunks of LS_ATTN_CHUNK keys, then p.v in key
 * order), so a row's result does not depend on the other rows, on the pool, on the
 * ISA, or on where the blocks live.
 * window > 0 (a sliding-window layer): the row at position p reads keys
 * max(0, p - window + 1)..p only, and runs the same recipe over that list of keys as
 * if they were keys 0..n-1 (docs/numerics.md); 0: every key 0..p.
 * scratch: at least ls_attention_scratch_floats(max_pos+1) floats per pool thread. */
#define LS_ATTN_CHUNK 64
size_t ls_attention_scratch_floats(int64_t n_keys);
void ls_attention(const ls_kctx *kc, const float *q, int64_t M, const int32_t *pos, const ls_kv_view *kv,
                  int n_head, int n_kv_head, int head_dim, float scale, int32_t window, float *out, float *scratch,
                  size_t scratch_floats_per_thread);

/* The project's own transcendentals: identical bits on every ISA. */
float ls_expf(float x);

#endif
