/* cuda_mm.cuh - the exact matmul kernels for quantized weights (templates; each
 * cuda_mm_*.cu instantiates a few types so the build runs in parallel).
 *
 * Both kernels compute docs/numerics.md's recipe: c_b per unit (step 2, lsc_contrib),
 * S_g = +0 + c_g + c_{g+32} + ... in increasing b (step 3), then the adjacent pairwise
 * tree over S_0..S_31 (step 4).
 *
 * k_gemv (few rows, memory-bound): one warp per output feature; lane g owns recipe group
 * g (units g, g+32, ...), so step 3 is each lane's own loop and step 4 is the xor
 * butterfly 1, 2, 4, 8, 16 (level k pairs lanes l and l^2^(k-1): adjacent subtrees; a + b
 * is commutative in IEEE arithmetic, so both lanes of a pair hold the same node).
 *
 * k_mma (many rows): int8 tensor cores (mma.sync m16n8k32 s8.s8.s32) give each unit's
 * integer dot product isum_b exactly, a fresh accumulator per unit; the float epilogue
 * runs step 2 per unit and element.  The K loop walks the units group-pair-major: pair p
 * = groups 2p, 2p+1, stage i = units 2p + 32i and 2p + 32i + 1 (128 contiguous bytes of
 * activations per row, 32 of 4-bit codes per column), so each group's units still arrive
 * in increasing b, only 2 running sums S live per output, and the tree is built as the
 * pairs complete (a binary counter of 4 pending left subtrees over the 16 pair nodes).
 */
#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.h"

namespace lsc {

template <int T> struct QT {
    static constexpr int CB = T == LSC_Q8_0 ? 32 : 16;
    static constexpr int HB = (T == LSC_Q5_0 || T == LSC_Q5_1 || T == LSC_Q5_K) ? 4 : T == LSC_Q6_K ? 8 : 0;
    static constexpr int SCB = (T == LSC_Q4_1 || T == LSC_Q5_1) ? 4 : 2;
    static constexpr int SBB = (T == LSC_Q4_K || T == LSC_Q5_K || T == LSC_Q6_K) ? 4 : 0;
};


/* step 1 for one unit, lane i holding element i (the same as cuda_ops.cu's quant_unit) */
__device__ __forceinline__ void quant_unit_mm(float x, int lane, int8_t *q, float2 *dxs) {
    const float a = fabsf(x);
    const bool fin = __all_sync(0xffffffffu, a <= 3.402823466e38f);
    float amax = a;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    int qi = 0;
    float d = 0.0f;
    if (fin && amax >= 0x1p-100f) {
        d = lsc_div(amax, 127.0f);
        const float id = lsc_div(127.0f, amax);
        qi = __float2int_rn(lsc_mul(x, id));
    } else if (!fin) {
        d = __uint_as_float(0x7fc00000u);
    }
    int s = qi;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    q[lane] = (int8_t)qi;
    if (lane == 0) *dxs = make_float2(d, lsc_mul(d, lsc_i2f(s)));
}

/* ---- one unit: raw loads, then expansion ------------------------------------- */
struct RawU {
    uint4 c, c2;
    uint32_t h0, h1, sc, sb;
};

template <int T>
__device__ __forceinline__ void raw_load(const lsc_mat &w, int row, int b, RawU &r) {
    const size_t ub = (size_t)row * w.nbp + b;
    if (T == LSC_Q8_0) {
        const uint4 *p = (const uint4 *)(w.codes + ub * 32);
        r.c = __ldg(p);
        r.c2 = __ldg(p + 1);
    } else {
        r.c = __ldg((const uint4 *)(w.codes + ub * 16));
    }
    if (QT<T>::HB == 4) r.h0 = __ldg((const uint32_t *)w.hi + ub);
    if (QT<T>::HB == 8) {
        uint2 h = __ldg((const uint2 *)w.hi + ub);
        r.h0 = h.x;
        r.h1 = h.y;
    }
    if (QT<T>::SCB == 4)
        r.sc = __ldg((const uint32_t *)w.sc + ub);
    else
        r.sc = __ldg((const uint16_t *)w.sc + ub);
    if (QT<T>::SBB) r.sb = __ldg((const uint32_t *)w.sb + (size_t)row * (w.nbp / 8) + b / 8);
}

template <int T>
__device__ __forceinline__ void raw_expand(const RawU &r, lsc_unit &u) {
    if (T == LSC_Q8_0) {
        u.w[0] = r.c.x; u.w[1] = r.c.y; u.w[2] = r.c.z; u.w[3] = r.c.w;
        u.w[4] = r.c2.x; u.w[5] = r.c2.y; u.w[6] = r.c2.z; u.w[7] = r.c2.w;
    } else {
        lsc_expand(T, r.c.x, r.h0, r.h1, 0, &u.w[0], &u.w[4]);
        lsc_expand(T, r.c.y, r.h0, r.h1, 1, &u.w[1], &u.w[5]);
        lsc_expand(T, r.c.z, r.h0, r.h1, 2, &u.w[2], &u.w[6]);
        lsc_expand(T, r.c.w, r.h0, r.h1, 3, &u.w[3], &u.w[7]);
    }
    lsc_fields(T, r.sc, QT<T>::SBB ? r.sb : 0u, &u);
}

/* a compile-time int as a type (k_mma2's push cases) */
template <int N> struct LscIC { static constexpr int value = N; };

/* ---- k_gemv ------------------------------------------------------------------ */
/* the types whose contribution is lsc_contrib's lsc_i2f_small(lo + hi) form: k_gemv's dp4a chain and
 * k_mma2's mma start at that conversion's bias */
template <int T> struct LscBiasChain {
    static constexpr bool on = T == LSC_Q4_0 || T == LSC_Q4_1 || T == LSC_Q5_0 || T == LSC_Q5_1 || T == LSC_Q8_0 ||
                               T == LSC_MXFP4;
};
/* NW weight rows per warp (SWIGLU: NW/2 outputs, each a gate and an up row), R activation
 * rows (rows >= `rows` repeat the last one and are not stored). */
template <int T, int R, int NW, bool FQ>
__global__ void __launch_bounds__(FQ ? 1024 : 256) k_gemv(const lsc_mat w, const int8_t *__restrict__ xq,
                                               const float2 *__restrict__ dxs, int xs, int rows,
                                               float *__restrict__ y, int ldy, int n_out, int mode,
                                               int8_t *__restrict__ q8, float2 *__restrict__ qd, int qxs) {
    const int lane = threadIdx.x & 31;
    const int no = lsc_gated(mode) ? NW / 2 : NW;
    const int o0 = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * no;
    lsc_pdl_trigger();
    if (o0 >= n_out && !FQ) { /* warp-uniform (fused: the grid covers n_out exactly) */
        lsc_pdl_wait();
        return;
    }
    int wr[NW];
#pragma unroll
    for (int i = 0; i < NW; i++) {
        int o = o0 + (lsc_gated(mode) ? i / 2 : i);
        o = o < n_out ? o : n_out - 1;
        wr[i] = lsc_gated(mode) ? 2 * LSC_GU_CHUNK * (o / LSC_GU_CHUNK) + o % LSC_GU_CHUNK + (i & 1) * LSC_GU_CHUNK
                                        : o;
    }
    const int8_t *xr[R];
    const float2 *dr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int rr = r < rows ? r : rows - 1;
        xr[r] = xq + (size_t)rr * xs * 32;
        dr[r] = dxs + (size_t)rr * xs;
    }
    float S[NW][R];
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) S[i][r] = 0.0f;
    __shared__ float hq[FQ ? R : 1][32]; /* SWIGLU with q8: the block's outputs, per row */

    const int nb = w.nb;
    /* one unit of every weight row against every activation row (steps 2-3).  One-row runs
     * (decode) keep two dp4a chains per weight row (lsc_contrib as written).  Runs of 2..8 rows,
     * for the types whose contribution converts lo + hi with lsc_i2f_small, run one dp4a chain
     * that starts at that conversion's bias: the same integer, so the same bits, two adds fewer;
     * with 1 or 2 weight rows a warp they take one row's activations at a time (R x 10 registers
     * otherwise, which caps the warps in flight). */
    auto two_chains = [&](const lsc_unit &u, const uint4 &a0, const uint4 &a1, const float2 &ds) -> float {
        int32_t lo = lsc_dp4a(u.w[0], a0.x, 0);
        lo = lsc_dp4a(u.w[1], a0.y, lo);
        lo = lsc_dp4a(u.w[2], a0.z, lo);
        lo = lsc_dp4a(u.w[3], a0.w, lo);
        int32_t hi = lsc_dp4a(u.w[4], a1.x, 0);
        hi = lsc_dp4a(u.w[5], a1.y, hi);
        hi = lsc_dp4a(u.w[6], a1.z, hi);
        hi = lsc_dp4a(u.w[7], a1.w, hi);
        return lsc_contrib(T, &u, lo, hi, ds.x, ds.y);
    };
    auto unit_contrib = [&](const lsc_unit &u, const uint4 &a0, const uint4 &a1, const float2 &ds) -> float {
        if (!LscBiasChain<T>::on) return two_chains(u, a0, a1, ds);
        int32_t c = lsc_dp4a(u.w[0], a0.x, 0x4B400000);
        c = lsc_dp4a(u.w[1], a0.y, c);
        c = lsc_dp4a(u.w[2], a0.z, c);
        c = lsc_dp4a(u.w[3], a0.w, c);
        c = lsc_dp4a(u.w[4], a1.x, c);
        c = lsc_dp4a(u.w[5], a1.y, c);
        c = lsc_dp4a(u.w[6], a1.z, c);
        c = lsc_dp4a(u.w[7], a1.w, c);
        return lsc_contrib_biased(T, &u, c, ds.x, ds.y);
    };
    auto step1 = [&](const RawU *cu, int b) {
        const uint4 *ap = (const uint4 *)(xr[0] + (size_t)b * 32);
        const uint4 a0 = __ldg(ap), a1 = __ldg(ap + 1);
        const float2 ds = __ldg(dr[0] + b);
#pragma unroll
        for (int i = 0; i < NW; i++) {
            lsc_unit u;
            raw_expand<T>(cu[i], u);
            S[i][0] = lsc_add(S[i][0], two_chains(u, a0, a1, ds));
        }
    };
    auto stepr = [&](const RawU *cu, int b) {
        lsc_unit u[NW];
#pragma unroll
        for (int i = 0; i < NW; i++) raw_expand<T>(cu[i], u[i]);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint4 *ap = (const uint4 *)(xr[r] + (size_t)b * 32);
            const uint4 a0 = __ldg(ap), a1 = __ldg(ap + 1);
            const float2 ds = __ldg(dr[r] + b);
#pragma unroll
            for (int i = 0; i < NW; i++) S[i][r] = lsc_add(S[i][r], unit_contrib(u[i], a0, a1, ds));
        }
    };
    /* 4 weight rows a warp (a long matrix: fewer warps) keep every row's activations in flight
     * at once, as one-row runs do; the per-row order was 1.2x slower there (down, M = 8) */
    auto stepa = [&](const RawU *cu, int b) {
        uint4 a0[R], a1[R];
        float2 ds[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint4 *ap = (const uint4 *)(xr[r] + (size_t)b * 32);
            a0[r] = __ldg(ap);
            a1[r] = __ldg(ap + 1);
            ds[r] = __ldg(dr[r] + b);
        }
#pragma unroll
        for (int i = 0; i < NW; i++) {
            lsc_unit u;
            raw_expand<T>(cu[i], u);
#pragma unroll
            for (int r = 0; r < R; r++) S[i][r] = lsc_add(S[i][r], unit_contrib(u, a0[r], a1[r], ds[r]));
        }
    };
    auto step = [&](const RawU *cu, int b) {
        if (R == 1) step1(cu, b);
        else if (NW >= 4) stepa(cu, b);
        else stepr(cu, b);
    };
    /* The first PRE units of each lane, and the one after, are requested before waiting for the
     * previous kernel (weights never change during a forward): with programmatic dependent launch
     * the weight stream overlaps the tail of the kernel that produces the activations. */
    constexpr int PRE = FQ ? 1 : (NW == 1 && R == 1) ? 4 : R <= 2 ? 2 : 1;
    RawU pre[PRE][NW], cur[NW];
#pragma unroll
    for (int k = 0; k < PRE; k++)
        if (lane + 32 * k < nb)
#pragma unroll
            for (int i = 0; i < NW; i++) raw_load<T>(w, wr[i], lane + 32 * k, pre[k][i]);
    const int bs = lane + 32 * PRE; /* the first unit of the stream */
    if (bs < nb)
#pragma unroll
        for (int i = 0; i < NW; i++) raw_load<T>(w, wr[i], bs, cur[i]);
    lsc_pdl_wait(); /* the activations come from the previous kernel */
#pragma unroll
    for (int k = 0; k < PRE; k++)
        if (lane + 32 * k < nb) step(pre[k], lane + 32 * k);
    for (int b = bs; b < nb; b += 32) {
        RawU nxt[NW];
        if (b + 32 < nb) /* the next unit's weights are in flight while this one computes */
#pragma unroll
            for (int i = 0; i < NW; i++) raw_load<T>(w, wr[i], b + 32, nxt[i]);
        step(cur, b);
#pragma unroll
        for (int i = 0; i < NW; i++) cur[i] = nxt[i];
    }
    /* step 4: the adjacent pairwise tree over the 32 lanes' S */
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = S[i][r];
#ifdef LS_CUDA_MUTATE_TREE /* deliberately wrong tree order (the parity tests must fail) */
#pragma unroll
            for (int off = 16; off >= 1; off >>= 1) v = lsc_add(v, __shfl_xor_sync(0xffffffffu, v, off));
#else
#pragma unroll
            for (int off = 1; off <= 16; off <<= 1) v = lsc_add(v, __shfl_xor_sync(0xffffffffu, v, off));
#endif
            S[i][r] = v;
        }
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (lane != (i * R + r) % 32 || r >= rows) continue;
            if (lsc_gated(mode)) {
                const int o = o0 + i / 2;
                if ((i & 1) == 0 && o < n_out) {
                    const float h = lsc_glu(mode == LSC_MODE_GEGLU, S[i][r], S[i + 1][r]);
                    y[(size_t)r * ldy + o] = h;
                    if (FQ) hq[FQ ? r : 0][threadIdx.x >> 5] = h;
                }
            } else {
                const int o = o0 + i;
                if (o >= n_out) continue;
                float *yp = y + (size_t)r * ldy + o;
                *yp = mode == LSC_MODE_ADD ? lsc_add(*yp, S[i][r]) : S[i][r];
            }
        }
    if (FQ) { /* the block's 32 warps made the 32 outputs of one activation unit of the next matmul */
        __syncthreads();
        const int wi = threadIdx.x >> 5, b = blockIdx.x;
        if (wi < R && wi < rows) quant_unit_mm(hq[wi][lane], lane, q8 + ((size_t)wi * qxs + b) * 32, qd + (size_t)wi * qxs + b);
    }
}

template <int T, int R, int NW>
cudaError_t launch_gemv_nw(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, lsc_qout qo,
                           lsc_stream s) {
    const int n_out = lsc_gated(mode) ? w.N / 2 : w.N;
    const int no = lsc_gated(mode) ? (NW / 2 > 0 ? NW / 2 : 1) : NW;
    const int warps = (n_out + no - 1) / no;
    if (qo.q) { /* 32 warps of one gate and one up row each = one unit of h per block (R = 1: 64 registers) */
        if constexpr (R == 1) {
            if (!lsc_gated(mode) || NW != 2 || n_out % 32) return cudaErrorInvalidValue;
            return lsc_launch(k_gemv<T, R, 2, true>, dim3(n_out / 32), dim3(1024), 0, s, w, a.q, a.dxs, a.xs, rows, y,
                              ldy, n_out, mode, qo.q, qo.dxs, qo.xs);
        }
        return cudaErrorInvalidValue;
    }
    return lsc_launch(k_gemv<T, R, NW, false>, dim3((warps + 7) / 8), dim3(256), 0, s, w, a.q, a.dxs, a.xs, rows, y, ldy,
                      n_out, mode, (int8_t *)NULL, (float2 *)NULL, 0);
}

template <int T, int R>
cudaError_t launch_gemv(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, lsc_qout qo, lsc_stream s) {
    if (R == 1 && !lsc_gated(mode) && s.gemv_nw1 == 1) return launch_gemv_nw<T, R, 1>(w, a, rows, y, ldy, mode, qo, s);
    if (R == 1 && !lsc_gated(mode) && s.gemv_nw1 == 4) return launch_gemv_nw<T, R, 4>(w, a, rows, y, ldy, mode, qo, s);
    if (lsc_gated(mode)) return launch_gemv_nw<T, R, 2>(w, a, rows, y, ldy, mode, qo, s);
    if (R == 1) return launch_gemv_nw<T, R, 2>(w, a, rows, y, ldy, mode, qo, s);
    /* runs of 2..8 rows: 2 weight rows a warp for a matrix at least as wide as it is long (q|k|v,
     * wo: 3-10 % faster than 4 at M = 2..8), 4 for a long one (down: 4 was 1.2-1.4x faster;
     * H100, bench/results/cuda/session37-h100) */
    const int nwr = s.gemv_nwr ? s.gemv_nwr : w.N >= w.K ? 2 : 4;
    if (nwr == 1) return launch_gemv_nw<T, R, 1>(w, a, rows, y, ldy, mode, qo, s);
    if (nwr == 2) return launch_gemv_nw<T, R, 2>(w, a, rows, y, ldy, mode, qo, s);
    return launch_gemv_nw<T, R, 4>(w, a, rows, y, ldy, mode, qo, s);
}

template <int T>
cudaError_t gemv_t(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, lsc_qout qo, lsc_stream s) {
    for (int m0 = 0; m0 < rows;) { /* runs of up to 8 rows; each row's bits do not depend on the split */
        const int n = rows - m0 > 8 ? 8 : rows - m0;
        lsc_act am = a;
        am.q = a.q + (size_t)m0 * a.xs * 32;
        am.dxs = a.dxs + (size_t)m0 * a.xs;
        lsc_qout qm = qo;
        if (qo.q) {
            qm.q = qo.q + (size_t)m0 * qo.xs * 32;
            qm.dxs = qo.dxs + (size_t)m0 * qo.xs;
        }
        float *ym = y + (size_t)m0 * ldy;
        cudaError_t e = n == 1   ? launch_gemv<T, 1>(w, am, n, ym, ldy, mode, qm, s)
                        : n == 2 ? launch_gemv<T, 2>(w, am, n, ym, ldy, mode, qm, s)
                        : n <= 4 ? launch_gemv<T, 4>(w, am, n, ym, ldy, mode, qm, s)
                                 : launch_gemv<T, 8>(w, am, n, ym, ldy, mode, qm, s);
        if (e != cudaSuccess) return e;
        m0 += n;
    }
    return cudaSuccess;
}

/* ---- k_mma --------------------------------------------------------------------- */
__device__ __forceinline__ void cp16(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp8(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp4(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma_k32(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                                        int32_t c[4]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}
__device__ __forceinline__ void mma_k16(uint32_t a0, uint32_t a1, uint32_t b0, int32_t c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

#define LSC_STAGES 4

template <int T, int BM, int BN> struct MmaSmem {
    static constexpr int AS = 80;                               /* A: 2 units x 32 bytes + 16 pad, per row */
    static constexpr int BS = T == LSC_Q8_0 ? 80 : 48;          /* B codes: 2 units + 16 pad, per column */
    static constexpr int HS = QT<T>::HB * 2, SS = QT<T>::SCB * 2, SBS = QT<T>::SBB;
    static constexpr int OFF_A = 0, OFF_D = OFF_A + BM * AS, OFF_B = OFF_D + BM * 16, OFF_H = OFF_B + BN * BS,
                         OFF_S = OFF_H + BN * HS, OFF_SB = OFF_S + BN * SS,
                         STG = (OFF_SB + BN * SBS + 15) / 16 * 16, BYTES = STG * LSC_STAGES;
};

/* units of pair p's stages: n_i(p) = |{i : 2p + 32 i < nb}| */
__device__ __forceinline__ int pair_stages(int nb, int p) { return nb > 2 * p ? (nb - 2 * p + 31) / 32 : 0; }

template <int T, int MT, int WM, int NT, int WN, int MINB>
__global__ void __launch_bounds__(32 * WM * WN, MINB) k_mma(const lsc_mat w, const int8_t *__restrict__ xq,
                                                      const float2 *__restrict__ dxs, int xs, int rows,
                                                      float *__restrict__ y, int ldy, int mode,
                                                      float *__restrict__ part) {
    constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN, NTHR = 32 * WM * WN;
    using L = MmaSmem<T, BM, BN>;
    extern __shared__ __align__(16) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, grp = lane >> 2, t4 = lane & 3;
    const int wm = warp / WN, wn = warp % WN;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int nb = w.nb, nbp = w.nbp;
    /* split z of gridDim.z runs pairs [p0, p1): an aligned subtree of 16 / gridDim.z pair nodes */
    const int pps = 16 / (int)gridDim.z, p0 = (int)blockIdx.z * pps, p1 = p0 + pps;
    lsc_pdl_trigger();
    lsc_pdl_wait();

    int ns = 0;
    for (int p = p0; p < p1; p++) ns += pair_stages(nb, p);

    /* producer: stage (lp, li) into buffer `buf` */
    auto load = [&](int lp, int li, int buf) {
        uint8_t *st = smem + buf * L::STG;
        const int b0 = 2 * lp + 32 * li;
        for (int c = tid; c < BM * 5; c += NTHR) { /* 4 A chunks + 1 dx/sx chunk per row */
            const int row = c / 5, part = c % 5;
            const int mr = m0 + row < rows ? m0 + row : rows - 1;
            if (part < 4)
                cp16(st + L::OFF_A + row * L::AS + part * 16, xq + ((size_t)mr * xs + b0) * 32 + part * 16);
            else
                cp16(st + L::OFF_D + row * 16, dxs + (size_t)mr * xs + b0);
        }
        constexpr int CC = QT<T>::CB / 8; /* 16-byte code chunks per column (2 units) */
        for (int c = tid; c < BN * CC; c += NTHR) {
            const int col = c / CC, part = c % CC;
            const int nr = n0 + col < w.N ? n0 + col : w.N - 1;
            cp16(st + L::OFF_B + col * L::BS + part * 16, w.codes + ((size_t)nr * nbp + b0) * QT<T>::CB + part * 16);
        }
        for (int col = tid; col < BN; col += NTHR) {
            const int nr = n0 + col < w.N ? n0 + col : w.N - 1;
            const size_t ub = (size_t)nr * nbp + b0;
            if (QT<T>::HB == 4) cp8(st + L::OFF_H + col * L::HS, w.hi + ub * 4);
            if (QT<T>::HB == 8) cp16(st + L::OFF_H + col * L::HS, w.hi + ub * 8);
            if (QT<T>::SCB == 2)
                cp4(st + L::OFF_S + col * L::SS, w.sc + ub * 2);
            else
                cp8(st + L::OFF_S + col * L::SS, w.sc + ub * 4);
            if (QT<T>::SBB) cp4(st + L::OFF_SB + col * 4, w.sb + ((size_t)nr * (nbp / 8) + b0 / 8) * 4);
        }
    };

    float S[2][MT][NT][4], Tr[4][MT][NT][4];
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[u][mt][nt][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) Tr[k][mt][nt][e] = 0.0f;

    /* pair p's node (S_2p + S_2p+1) joins the tree; S restarts at +0 */
    auto push = [&](int p) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = lsc_add(S[0][mt][nt][e], S[1][mt][nt][e]);
                    S[0][mt][nt][e] = 0.0f;
                    S[1][mt][nt][e] = 0.0f;
                    if (!(p & 1)) {
                        Tr[0][mt][nt][e] = v;
                        continue;
                    }
                    v = lsc_add(Tr[0][mt][nt][e], v);
                    if (!(p & 2)) {
                        Tr[1][mt][nt][e] = v;
                        continue;
                    }
                    v = lsc_add(Tr[1][mt][nt][e], v);
                    if (!(p & 4)) {
                        Tr[2][mt][nt][e] = v;
                        continue;
                    }
                    v = lsc_add(Tr[2][mt][nt][e], v);
                    if (!(p & 8)) {
                        Tr[3][mt][nt][e] = v;
                        continue;
                    }
                    Tr[3][mt][nt][e] = lsc_add(Tr[3][mt][nt][e], v); /* p = 15: the root */
                }
    };

    int lp = p0, li = 0; /* next stage to load */
#pragma unroll
    for (int s = 0; s < LSC_STAGES - 1; s++) {
        if (s < ns) {
            load(lp, li, s);
            if (++li == pair_stages(nb, lp)) { lp++; li = 0; }
        }
        cp_commit();
    }
    int cp = p0, ci = 0; /* the stage computed next */
    for (int it = 0; it < ns; it++) {
        cp_wait<LSC_STAGES - 2>();
        __syncthreads();
        if (it + LSC_STAGES - 1 < ns) {
            load(lp, li, (it + LSC_STAGES - 1) % LSC_STAGES);
            if (++li == pair_stages(nb, lp)) { lp++; li = 0; }
        }
        cp_commit();
        const uint8_t *st = smem + (it % LSC_STAGES) * L::STG;
        const int b0 = 2 * cp + 32 * ci;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (b0 + u >= nb) break; /* the padding unit of an odd nb: never added */
            uint32_t af[MT][4];
            float2 ds[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int r0 = wm * MT * 16 + mt * 16 + grp;
                const uint8_t *A0 = st + L::OFF_A + r0 * L::AS + u * 32 + 4 * t4;
                const uint8_t *A1 = A0 + 8 * L::AS;
                af[mt][0] = *(const uint32_t *)A0;
                af[mt][1] = *(const uint32_t *)A1;
                af[mt][2] = *(const uint32_t *)(A0 + 16);
                af[mt][3] = *(const uint32_t *)(A1 + 16);
                ds[mt][0] = *(const float2 *)(st + L::OFF_D + r0 * 16 + u * 8);
                ds[mt][1] = *(const float2 *)(st + L::OFF_D + (r0 + 8) * 16 + u * 8);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int cb = wn * NT * 8 + nt * 8;
                uint32_t blo, bhi;
                if (T == LSC_Q8_0) {
                    const uint8_t *B = st + L::OFF_B + (cb + grp) * L::BS + u * 32 + 4 * t4;
                    blo = *(const uint32_t *)B;
                    bhi = *(const uint32_t *)(B + 16);
                } else {
                    const uint32_t c = *(const uint32_t *)(st + L::OFF_B + (cb + grp) * L::BS + u * 16 + 4 * t4);
                    uint32_t h0 = 0, h1 = 0;
                    if (QT<T>::HB == 4) h0 = *(const uint32_t *)(st + L::OFF_H + (cb + grp) * L::HS + u * 4);
                    if (QT<T>::HB == 8) {
                        h0 = *(const uint32_t *)(st + L::OFF_H + (cb + grp) * L::HS + u * 8);
                        h1 = *(const uint32_t *)(st + L::OFF_H + (cb + grp) * L::HS + u * 8 + 4);
                    }
                    lsc_expand(T, c, h0, h1, t4, &blo, &bhi);
                }
                lsc_unit fu[2]; /* the fields of this thread's two output columns */
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = cb + 2 * t4 + e;
                    uint32_t scv = QT<T>::SCB == 4 ? *(const uint32_t *)(st + L::OFF_S + col * L::SS + u * 4)
                                                   : *(const uint16_t *)(st + L::OFF_S + col * L::SS + u * 2);
                    uint32_t sbv = QT<T>::SBB ? *(const uint32_t *)(st + L::OFF_SB + col * 4) : 0u;
                    lsc_fields(T, scv, sbv, &fu[e]);
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    int32_t lo[4], hi[4] = {0, 0, 0, 0};
                    if (T == LSC_Q6_K) { /* two 16-element halves, each with its own scale */
                        mma_k16(af[mt][0], af[mt][1], blo, lo);
                        mma_k16(af[mt][2], af[mt][3], bhi, hi);
                    } else {
                        mma_k32(af[mt][0], af[mt][1], af[mt][2], af[mt][3], blo, bhi, lo);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float2 d = ds[mt][e >> 1];
                        S[u][mt][nt][e] = lsc_add(S[u][mt][nt][e], lsc_contrib(T, &fu[e & 1], lo[e], hi[e], d.x, d.y));
                    }
                }
            }
        }
        if (++ci == pair_stages(nb, cp)) {
            push(cp - p0);
            cp++;
            ci = 0;
        }
    }
    for (; cp < p1; cp++) push(cp - p0); /* pairs that received no unit: +0 leaves */
    cp_wait<0>();

    if (gridDim.z > 1) { /* this split's subtree root: Tr[3] for 8 or 16 pairs, else Tr[log2 pairs] */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + wm * MT * 16 + mt * 16 + grp + 8 * (e >> 1);
                    const int n = n0 + wn * NT * 8 + nt * 8 + 2 * t4 + (e & 1);
                    const float v = pps >= 8 ? Tr[3][mt][nt][e] : pps == 4 ? Tr[2][mt][nt][e]
                                  : pps == 2 ? Tr[1][mt][nt][e] : Tr[0][mt][nt][e];
                    if (r < rows && n < w.N) part[((size_t)blockIdx.z * rows + r) * w.N + n] = v;
                }
        return;
    }
    /* epilogue: Tr[3] holds y */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + wm * MT * 16 + mt * 16 + grp + 8 * (e >> 1);
                const int n = n0 + wn * NT * 8 + nt * 8 + 2 * t4 + (e & 1);
                if (r >= rows) continue;
                if (lsc_gated(mode)) {
                    /* nt even: gate rows of a 16-row chunk, nt + 1: the same outputs' up rows */
                    if (nt & 1) continue;
                    const int o = LSC_GU_CHUNK * (n / (2 * LSC_GU_CHUNK)) + n % (2 * LSC_GU_CHUNK);
                    if (o < w.N / 2) y[(size_t)r * ldy + o] = lsc_glu(mode == LSC_MODE_GEGLU, Tr[3][mt][nt][e], Tr[3][mt][nt + 1][e]);
                } else if (n < w.N) {
                    float *yp = y + (size_t)r * ldy + n;
                    *yp = mode == LSC_MODE_ADD ? lsc_add(*yp, Tr[3][mt][nt][e]) : Tr[3][mt][nt][e];
                }
            }
}

/* the splits' roots joined by the adjacent pairwise tree (the top levels of the recipe's tree) */
static __global__ void k_combine(const float *__restrict__ part, int split, int rows, int N, float *__restrict__ y, int ldy,
                          int mode) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.y;
    const int n_out = lsc_gated(mode) ? N / 2 : N;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += gridDim.x * blockDim.x) {
        float v[2];
        for (int k = 0; k < (lsc_gated(mode) ? 2 : 1); k++) {
            const int n = lsc_gated(mode) ? 2 * LSC_GU_CHUNK * (o / LSC_GU_CHUNK) + o % LSC_GU_CHUNK + k * LSC_GU_CHUNK : o;
            float t[8];
            for (int z = 0; z < split; z++) t[z] = part[((size_t)z * rows + r) * N + n];
            for (int m = split; m > 1; m /= 2)
                for (int i = 0; i < m / 2; i++) t[i] = lsc_add(t[2 * i], t[2 * i + 1]);
            v[k] = t[0];
        }
        float *yp = y + (size_t)r * ldy + o;
        if (lsc_gated(mode)) *yp = lsc_glu(mode == LSC_MODE_GEGLU, v[0], v[1]);
        else *yp = mode == LSC_MODE_ADD ? lsc_add(*yp, v[0]) : v[0];
    }
}

template <int T, int MT, int WM, int NT, int WN, int MINB = 1>
cudaError_t launch_mma(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, float *part,
                       size_t part_floats, lsc_stream s) {
    constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
    using L = MmaSmem<T, BM, BN>;
    const int gx = (w.N + BN - 1) / BN, gy = (rows + BM - 1) / BM;
    int split = 1; /* enough blocks for two waves of 132 multiprocessors */
    while (split < 8 && gx * gy * split < 264 && (size_t)(2 * split) * rows * w.N <= part_floats && part) split *= 2;
    cudaError_t e = lsc_launch(k_mma<T, MT, WM, NT, WN, MINB>, dim3(gx, gy, split), dim3(32 * WM * WN), (size_t)L::BYTES, s,
                               w, a.q, a.dxs, a.xs, rows, y, ldy, mode, part);
    if (e != cudaSuccess || split == 1) return e;
    const int n_out = lsc_gated(mode) ? w.N / 2 : w.N;
    return lsc_launch(k_combine, dim3((n_out + 255) / 256, rows), dim3(256), 0, s, (const float *)part, split, rows, w.N,
                      y, ldy, mode);
}

template <int T, int MT, int WM, int NT, int WN, int MINB = 1>
cudaError_t init_mma() {
    constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
    return cudaFuncSetAttribute(k_mma<T, MT, WM, NT, WN, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                MmaSmem<T, BM, BN>::BYTES);
}

/* ---- k_mma2: the same recipe and K order as k_mma, laid out for more outputs per thread ----
 * - the tree's pending nodes (Tr) live in shared memory, each thread's own slots (written
 *   once per pair of groups, so rarely), so a thread can hold 32 outputs' running sums;
 * - activation fragments come from ldmatrix;
 * - for the types whose contribution converts lo + hi with the 2^23 + 2^22 trick
 *   (lsc_i2f_small), the mma's accumulator input is that bias: the tensor core adds it
 *   exactly (|isum| < 2^22), and the conversion is one subtraction.
 * Bits: identical to k_mma's (the same operations on the same values per output). */
__device__ __forceinline__ void mma_k32c(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                                         int32_t cin, int32_t c[4]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(cin));
}
/* shared-memory loads at 32-bit shared-window addresses (k_mma2's compute) */
__device__ __forceinline__ void ldsm_x4a(uint32_t a, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t a) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ float4 lds_f4(uint32_t a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ void mma_k16c(uint32_t a0, uint32_t a1, uint32_t b0, int32_t cin, int32_t c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(cin));
}
__device__ __forceinline__ void ldsm_x4(const void *p, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

template <int T, int MT, int WM, int NT, int WN, int MINB>
__global__ void __launch_bounds__(32 * WM * WN, MINB) k_mma2(const lsc_mat w, const int8_t *__restrict__ xq,
                                                       const float2 *__restrict__ dxs, int xs, int rows,
                                                       float *__restrict__ y, int ldy, int mode,
                                                       float *__restrict__ part) {
    constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN, NTHR = 32 * WM * WN, NO = MT * NT * 4;
    using L = MmaSmem<T, BM, BN>;
    extern __shared__ __align__(16) uint8_t smem[];
    float *trs = (float *)(smem + L::BYTES); /* [level 0..3][output NO][thread] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, grp = lane >> 2, t4 = lane & 3;
    const int wm = warp / WN, wn = warp % WN;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int nb = w.nb, nbp = w.nbp;
    const int pps = 16 / (int)gridDim.z, p0 = (int)blockIdx.z * pps, p1 = p0 + pps;
    lsc_pdl_trigger();
    lsc_pdl_wait();

    int ns = 0;
    for (int p = p0; p < p1; p++) ns += pair_stages(nb, p);

    /* The copy plan, worked out once per thread (the copies of a stage differ only by the
     * unit b0): every thread moves NAC 16-byte chunks of activation codes and NBC of weight
     * codes; threads [0, BM) a row's (dx, sx) pair, threads [BM, BM + BN) a column's fields.
     * Offsets are 32-bit (launch_mma2 checks that they fit). */
    constexpr int CC = QT<T>::CB / 8, NAC = (BM * 4 + NTHR - 1) / NTHR, NBC = (BN * CC + NTHR - 1) / NTHR;
    static_assert((BM * 4 % NTHR == 0 || BM * 4 < NTHR) && BM + BN <= NTHR, "k_mma2 copy plan");
    uint32_t a_src[NAC], a_dst[NAC], b_src[NBC], b_dst[NBC];
#pragma unroll
    for (int j = 0; j < NAC; j++) { /* a small tile (BM * 4 < NTHR): threads [BM * 4, NTHR) move no activations */
        const int c = tid + j * NTHR, row = c >> 2, pt = c & 3;
        const int mr = m0 + row < rows ? m0 + row : rows - 1;
        a_src[j] = (uint32_t)mr * (uint32_t)xs * 32u + (uint32_t)pt * 16u;
        a_dst[j] = c < BM * 4 ? (uint32_t)(L::OFF_A + row * L::AS + pt * 16) : 0xFFFFFFFFu;
    }
#pragma unroll
    for (int j = 0; j < NBC; j++) {
        const int c = tid + j * NTHR, col = c / CC, pt = c % CC;
        const int nr = n0 + col < w.N ? n0 + col : w.N - 1;
        b_src[j] = (uint32_t)nr * (uint32_t)nbp * (uint32_t)QT<T>::CB + (uint32_t)pt * 16u;
        b_dst[j] = c < BN * CC ? (uint32_t)(L::OFF_B + col * L::BS + pt * 16) : 0xFFFFFFFFu;
    }
    const int mrow = m0 + tid < rows ? m0 + tid : rows - 1;
    const uint32_t d_src = (uint32_t)mrow * (uint32_t)xs; /* threads [0, BM) */
    const int fcol = tid - BM, ncol = n0 + fcol < w.N ? n0 + fcol : w.N - 1;
    const uint32_t f_ub = (uint32_t)ncol * (uint32_t)nbp, f_sb = (uint32_t)ncol * (uint32_t)(nbp / 8);

    auto load = [&](int lp, int li, uint32_t so) {
        uint8_t *st = smem + so;
        const int b0 = 2 * lp + 32 * li;
        const int8_t *xb = xq + (size_t)b0 * 32;
#pragma unroll
        for (int j = 0; j < NAC; j++)
            if (NAC * NTHR == BM * 4 || a_dst[j] != 0xFFFFFFFFu) cp16(st + a_dst[j], xb + a_src[j]);
        const uint8_t *wb = w.codes + (size_t)b0 * QT<T>::CB;
#pragma unroll
        for (int j = 0; j < NBC; j++)
            if (NBC * NTHR == BN * CC || b_dst[j] != 0xFFFFFFFFu) cp16(st + b_dst[j], wb + b_src[j]);
        if (tid < BM) {
            cp16(st + L::OFF_D + tid * 16, dxs + d_src + b0);
        } else if (tid < BM + BN) {
            const size_t ub = (size_t)f_ub + b0;
            if (QT<T>::HB == 4) cp8(st + L::OFF_H + fcol * L::HS, w.hi + ub * 4);
            if (QT<T>::HB == 8) cp16(st + L::OFF_H + fcol * L::HS, w.hi + ub * 8);
            if (QT<T>::SCB == 2)
                cp4(st + L::OFF_S + fcol * L::SS, w.sc + ub * 2);
            else
                cp8(st + L::OFF_S + fcol * L::SS, w.sc + ub * 4);
            if (QT<T>::SBB) cp4(st + L::OFF_SB + fcol * 4, w.sb + ((size_t)f_sb + b0 / 8) * 4);
        }
    };

    float S[2][MT][NT][4];
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[u][mt][nt][e] = 0.0f;
    auto tr = [&](int lvl, int o) -> float & { return trs[(lvl * NO + o) * NTHR + tid]; };

    /* pair p's node joins the tree (k_mma's binary counter, its pending nodes in shared
     * memory): with c the trailing ones of p, the node adds the pending nodes of levels
     * 0..c-1 in turn (a left subtree plus its right sibling) and becomes level c's pending
     * node (p = 15: the root, added to level 3's).  One branch per push, not per output. */
    auto push_c = [&](auto C) {
        constexpr int c = decltype(C)::value;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int o = (mt * NT + nt) * 4 + e;
                    float v = lsc_add(S[0][mt][nt][e], S[1][mt][nt][e]);
                    S[0][mt][nt][e] = 0.0f;
                    S[1][mt][nt][e] = 0.0f;
                    if (c >= 1) v = lsc_add(tr(0, o), v);
                    if (c >= 2) v = lsc_add(tr(1, o), v);
                    if (c >= 3) v = lsc_add(tr(2, o), v);
                    if (c >= 4) v = lsc_add(tr(3, o), v);
                    tr(c < 4 ? c : 3, o) = v;
                }
    };
    auto push = [&](int p) {
        switch (__ffs(~p) - 1) {
        case 0: push_c(LscIC<0>()); break;
        case 1: push_c(LscIC<1>()); break;
        case 2: push_c(LscIC<2>()); break;
        case 3: push_c(LscIC<3>()); break;
        default: push_c(LscIC<4>()); break;
        }
    };

    /* this lane's shared-memory offsets in a stage (the fragments' rows and columns) */
    const int ra = wm * MT * 16, cbw = wn * NT * 8;
    uint32_t o_a = L::OFF_A + (ra + (lane & 7) + ((lane >> 3) & 1) * 8) * L::AS + (lane >> 4) * 16;
    uint32_t o_d = L::OFF_D + (ra + grp) * 16;
    uint32_t o_b = L::OFF_B + (cbw + grp) * L::BS + 4 * t4, o_h = L::OFF_H + (cbw + grp) * L::HS;
    uint32_t o_s = L::OFF_S + (cbw + 2 * t4) * L::SS, o_sb = L::OFF_SB + (cbw + 2 * t4) * 4;

    /* Loop invariants the compiler would otherwise rebuild every stage from the thread index
     * (it rematerializes what it can recompute rather than keep it in registers) */
    uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    asm("" : "+r"(sbase), "+r"(o_a), "+r"(o_d), "+r"(o_b), "+r"(o_h), "+r"(o_s), "+r"(o_sb));
#ifdef LS_CUDA_MUTATE_TREE /* a bias one too large: every k_mma2 contribution off by one (must fail) */
    constexpr int32_t bias = 0x4B400001;
#else
    constexpr int32_t bias = 0x4B400000;
#endif
    constexpr int32_t zero = 0;

    /* pair_stages(nb, p) for nb = 32 q + r: q, plus one where unit 2p + 32q exists (2p < r) */
    const int q32 = nb >> 5, r32 = nb & 31;
    int lp = p0, li = 0, lps = q32 + (2 * p0 < r32); /* the next stage to load: pair, stage, its stages */
    auto next_load = [&]() {
        if (++li == lps) {
            lp++;
            li = 0;
            lps = q32 + (2 * lp < r32);
        }
    };
    constexpr uint32_t LAST = (LSC_STAGES - 1) * L::STG;
#pragma unroll
    for (int s = 0; s < LSC_STAGES - 1; s++) {
        if (s < ns) {
            load(lp, li, s * L::STG);
            next_load();
        }
        cp_commit();
    }
    int cp = p0, ci = 0, cps = q32 + (2 * p0 < r32);
    uint32_t lso = LAST, cso = 0; /* byte offsets of the stage loaded next and the one computed */
    for (int it = 0; it < ns; it++) {
        cp_wait<LSC_STAGES - 2>();
        __syncthreads();
        if (it + LSC_STAGES - 1 < ns) {
            load(lp, li, lso);
            next_load();
        }
        cp_commit();
        lso = lso == LAST ? 0 : lso + L::STG;
        const uint32_t st = sbase + cso; /* shared-window addresses: no per-stage generic-pointer conversion */
        cso = cso == LAST ? 0 : cso + L::STG;
        const int b0 = 2 * cp + 32 * ci;
        /* both units' (dx, sx) per row in one load, and where the sc record is the f16 d
         * alone (for Q4_K and Q6_K the split costs more than the load it saves) both units' */
        constexpr bool SC2 = T == LSC_Q4_0 || T == LSC_Q5_0 || T == LSC_Q8_0;
        float4 dsu[MT][2];
        uint32_t sc2[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            dsu[mt][0] = lds_f4(st + o_d + mt * 16 * 16);
            dsu[mt][1] = lds_f4(st + o_d + (mt * 16 + 8) * 16);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) sc2[nt][e] = SC2 ? lds_u32(st + o_s + (nt * 8 + e) * L::SS) : 0u;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (b0 + u >= nb) break;
            uint32_t af[MT][4];
            float2 ds[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                /* ldmatrix x4: matrices (rows 0-7, bytes 0-15), (8-15, 0-15), (0-7, 16-31), (8-15, 16-31) */
                ldsm_x4a(st + o_a + mt * 16 * L::AS + u * 32, af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
#pragma unroll
                for (int h = 0; h < 2; h++)
                    ds[mt][h] = u ? make_float2(dsu[mt][h].z, dsu[mt][h].w) : make_float2(dsu[mt][h].x, dsu[mt][h].y);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                uint32_t blo, bhi;
                if (T == LSC_Q8_0) {
                    const uint32_t B = st + o_b + nt * 8 * L::BS + u * 32;
                    blo = lds_u32(B);
                    bhi = lds_u32(B + 16);
                } else {
                    const uint32_t c = lds_u32(st + o_b + nt * 8 * L::BS + u * 16);
                    uint32_t h0 = 0, h1 = 0;
                    if (QT<T>::HB == 4) h0 = lds_u32(st + o_h + nt * 8 * L::HS + u * 4);
                    if (QT<T>::HB == 8) {
                        h0 = lds_u32(st + o_h + nt * 8 * L::HS + u * 8);
                        h1 = lds_u32(st + o_h + nt * 8 * L::HS + u * 8 + 4);
                    }
                    lsc_expand(T, c, h0, h1, t4, &blo, &bhi);
                }
                lsc_unit fu[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const uint32_t sp = st + o_s + (nt * 8 + e) * L::SS;
                    uint32_t scv = QT<T>::SCB == 4 ? lds_u32(sp + u * 4) : SC2 ? sc2[nt][e] >> (16 * u) : lds_u16(sp + u * 2);
                    uint32_t sbv = QT<T>::SBB ? lds_u32(st + o_sb + (nt * 8 + e) * 4) : 0u;
                    lsc_fields(T, scv, sbv, &fu[e]);
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    int32_t lo[4], hi[4] = {0, 0, 0, 0};
                    if (T == LSC_Q6_K) {
                        mma_k16c(af[mt][0], af[mt][1], blo, zero, lo);
                        mma_k16c(af[mt][2], af[mt][3], bhi, zero, hi);
                    } else if (LscBiasChain<T>::on) {
                        mma_k32c(af[mt][0], af[mt][1], af[mt][2], af[mt][3], blo, bhi, bias, lo);
                    } else {
                        mma_k32c(af[mt][0], af[mt][1], af[mt][2], af[mt][3], blo, bhi, zero, lo);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float2 d = ds[mt][e >> 1];
                        const lsc_unit &f = fu[e & 1];
                        float c;
                        if (LscBiasChain<T>::on) { /* the mma started at lsc_i2f_small's bias */
                            c = lsc_contrib_biased(T, &f, lo[e], d.x, d.y);
                        } else {
                            c = lsc_contrib(T, &f, lo[e], hi[e], d.x, d.y);
                        }
                        S[u][mt][nt][e] = lsc_add(S[u][mt][nt][e], c);
                    }
                }
            }
        }
        if (++ci == cps) {
            push(cp - p0);
            cp++;
            ci = 0;
            cps = q32 + (2 * cp < r32);
        }
    }
    for (; cp < p1; cp++) push(cp - p0);
    cp_wait<0>();

    const int lvl = pps >= 8 ? 3 : pps == 4 ? 2 : pps == 2 ? 1 : 0; /* where this block's (sub)tree root is */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[0][mt][nt][e] = tr(lvl, (mt * NT + nt) * 4 + e);
    if (gridDim.z > 1) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + wm * MT * 16 + mt * 16 + grp + 8 * (e >> 1);
                    const int n = n0 + wn * NT * 8 + nt * 8 + 2 * t4 + (e & 1);
                    if (r < rows && n < w.N) part[((size_t)blockIdx.z * rows + r) * w.N + n] = S[0][mt][nt][e];
                }
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + wm * MT * 16 + mt * 16 + grp + 8 * (e >> 1);
                const int n = n0 + wn * NT * 8 + nt * 8 + 2 * t4 + (e & 1);
                if (r >= rows) continue;
                if (lsc_gated(mode)) {
                    if (nt & 1) continue;
                    const int o = LSC_GU_CHUNK * (n / (2 * LSC_GU_CHUNK)) + n % (2 * LSC_GU_CHUNK);
                    if (o < w.N / 2) y[(size_t)r * ldy + o] = lsc_glu(mode == LSC_MODE_GEGLU, S[0][mt][nt][e], S[0][mt][nt + 1][e]);
                } else if (n < w.N) {
                    float *yp = y + (size_t)r * ldy + n;
                    *yp = mode == LSC_MODE_ADD ? lsc_add(*yp, S[0][mt][nt][e]) : S[0][mt][nt][e];
                }
            }
}

template <int T, int MT, int WM, int NT, int WN, int MINB>
constexpr size_t mma2_smem() {
    return (size_t)MmaSmem<T, 16 * MT * WM, 8 * NT * WN>::BYTES + (size_t)4 * (MT * NT * 4) * (32 * WM * WN) * 4;
}
template <int T, int MT, int WM, int NT, int WN, int MINB>
cudaError_t launch_mma2(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, float *part,
                        size_t part_floats, lsc_stream s) {
    constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
    const int gx = (w.N + BN - 1) / BN, gy = (rows + BM - 1) / BM;
    int split = 1;
    while (split < 8 && gx * gy * split < 264 && (size_t)(2 * split) * rows * w.N <= part_floats && part)
        split *= 2;
    cudaError_t e = lsc_launch(k_mma2<T, MT, WM, NT, WN, MINB>, dim3(gx, gy, split), dim3(32 * WM * WN),
                               mma2_smem<T, MT, WM, NT, WN, MINB>(), s, w, a.q, a.dxs, a.xs, rows, y, ldy, mode, part);
    if (e != cudaSuccess || split == 1) return e;
    const int n_out = lsc_gated(mode) ? w.N / 2 : w.N;
    return lsc_launch(k_combine, dim3((n_out + 255) / 256, rows), dim3(256), 0, s, (const float *)part, split, rows, w.N,
                      y, ldy, mode);
}
template <int T, int MT, int WM, int NT, int WN, int MINB>
cudaError_t init_mma2() {
    return cudaFuncSetAttribute(k_mma2<T, MT, WM, NT, WN, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)mma2_smem<T, MT, WM, NT, WN, MINB>());
}
/* the k_mma2 configurations (lsc_stream.mma_v2; 4, the default, is 2): 1: 64 x 128 tile, 8 warps of
 * 32 x 32, one block per SM; 2: 64 x 64, 8 warps of 32 x 16, two blocks; 3: 128 x 64, 8 warps
 * of 64 x 16 */
#define LSC_MMA2_CFGS(X) X(1, 2, 2, 4, 4, 1) X(2, 2, 2, 2, 4, 2) X(3, 4, 2, 2, 4, 1)

/* configurations by run length: runs over 32 rows k_mma2 (configuration 2 by default); runs of up to 32
 * rows one tile row of 16 or 32 (k_mma2 beside 4 or 8 warps' columns, lsc_stream.mma_small; k_mma
 * with mma_v2 or mma_small 0) */
template <int T>
cudaError_t mma_t(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, float *part, size_t pf,
                  lsc_stream s) {
    /* k_mma2's copy plan keeps 32-bit byte offsets into the activation and weight codes */
    const bool fits = (uint64_t)rows * (uint64_t)a.xs * 32u < (1ull << 32) &&
                      (uint64_t)w.N * (uint64_t)w.nbp * QT<T>::CB < (1ull << 32);
    if (rows > 32 && s.mma_v2 && fits) {
        /* 4 (the forward's default): the two-blocks-per-SM tile (2) for every type; with the
         * per-thread copy plan it was the fastest of the three for each type measured (Q4_0,
         * Q4_K, Q6_K, Q8_0; H200, bench/results/cuda/session36-h200/run1) */
        const int v = s.mma_v2 != 4 ? s.mma_v2 : 2;
#define X(id, MT, WM, NT, WN, MB) \
        if (v == id) return launch_mma2<T, MT, WM, NT, WN, MB>(w, a, rows, y, ldy, mode, part, pf, s);
        LSC_MMA2_CFGS(X)
#undef X
    }
    if (rows <= 32 && s.mma_v2 && s.mma_small && fits) { /* one tile row of 16 or 32 */
        if (s.mma_small == 1 || (s.mma_small == 3 && rows > 24)) /* measured: docs/cuda.md, batched decode */
            return rows <= 16 ? launch_mma2<T, 1, 1, 2, 4, 4>(w, a, rows, y, ldy, mode, part, pf, s)
                              : launch_mma2<T, 2, 1, 2, 4, 4>(w, a, rows, y, ldy, mode, part, pf, s);
        return rows <= 16 ? launch_mma2<T, 1, 1, 2, 8, 2>(w, a, rows, y, ldy, mode, part, pf, s)
                          : launch_mma2<T, 2, 1, 2, 8, 2>(w, a, rows, y, ldy, mode, part, pf, s);
    }
    if (rows <= 16) return launch_mma<T, 1, 1, 2, 4>(w, a, rows, y, ldy, mode, part, pf, s);
    if (rows <= 32) return launch_mma<T, 2, 1, 2, 4>(w, a, rows, y, ldy, mode, part, pf, s);
    if (s.mma_minb == 2) return launch_mma<T, 2, 2, 2, 4, 2>(w, a, rows, y, ldy, mode, part, pf, s);
    return launch_mma<T, 2, 2, 2, 4>(w, a, rows, y, ldy, mode, part, pf, s);
}

/* ---- the fast family's weights: fp16, row-major [N][K] (any rounding will do) ---------- */
template <int T>
__global__ void k_dequant_half(const lsc_mat w, __half *__restrict__ out) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)w.N * w.nb) return;
    const int n = (int)(t / w.nb), b = (int)(t % w.nb);
    RawU r;
    raw_load<T>(w, n, b, r);
    lsc_unit u;
    raw_expand<T>(r, u);
    float a0 = u.d, a1 = u.d, c = 0.0f;
    if (T == LSC_Q4_1 || T == LSC_Q5_1) c = u.m;
    if (T == LSC_Q4_K || T == LSC_Q5_K) {
        a0 = a1 = u.d * (float)u.s0;
        c = -(u.m * (float)u.s1);
    }
    if (T == LSC_Q6_K) {
        a0 = u.d * (float)u.s0;
        a1 = u.d * (float)u.s1;
    }
    uint4 *o = (uint4 *)(out + (size_t)n * w.K + (size_t)b * 32);
#pragma unroll
    for (int q = 0; q < 4; q++) { /* elements 8q..8q+7: words 2q, 2q+1 */
        uint32_t h[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t word = u.w[2 * q + j / 2];
            const int i0 = 8 * q + 2 * j;
            const float s = i0 < 16 ? a0 : a1;
            const float v0 = s * (float)(int8_t)(word >> (16 * (j & 1))) + c;
            const float v1 = s * (float)(int8_t)(word >> (16 * (j & 1) + 8)) + c;
            const __half2 hv = __floats2half2_rn(v0, v1);
            h[j] = *(const uint32_t *)&hv;
        }
        o[q] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}
template <int T>
cudaError_t dequant_t(const lsc_mat &w, void *out, lsc_stream s) {
    const int64_t n = (int64_t)w.N * w.nb;
    return lsc_launch(k_dequant_half<T>, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, s, w, (__half *)out);
}
template <int T>
cudaError_t mma_init_t() {
    cudaError_t e;
    if ((e = init_mma<T, 1, 1, 2, 4>()) != cudaSuccess) return e;
    if ((e = init_mma<T, 2, 1, 2, 4>()) != cudaSuccess) return e;
    if ((e = init_mma<T, 2, 2, 2, 4, 2>()) != cudaSuccess) return e;
#define X(id, MT, WM, NT, WN, MB) \
    if ((e = init_mma2<T, MT, WM, NT, WN, MB>()) != cudaSuccess) return e;
    LSC_MMA2_CFGS(X)
    X(0, 1, 1, 2, 4, 4) X(0, 2, 1, 2, 4, 4) X(0, 1, 1, 2, 8, 2) X(0, 2, 1, 2, 8, 2) /* runs of up to 32 rows */
#undef X
    return init_mma<T, 2, 2, 2, 4>();
}

} /* namespace lsc */

#define LSC_MM_INSTANTIATE(T)                                                                                   \
    namespace lsc {                                                                                             \
    template cudaError_t gemv_t<T>(const lsc_mat &, lsc_act, int, float *, int, int, lsc_qout, lsc_stream);   \
    template cudaError_t mma_t<T>(const lsc_mat &, lsc_act, int, float *, int, int, float *, size_t, lsc_stream); \
    template cudaError_t mma_init_t<T>();                                                                       \
    template cudaError_t dequant_t<T>(const lsc_mat &, void *, lsc_stream);                                  \
    }
