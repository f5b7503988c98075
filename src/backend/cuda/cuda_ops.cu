/* cuda_ops.cu - the per-row operations (RMSNorm, activation quantization, RoPE, SwiGLU,
 * attention over paged KV), the float-weight matmul, weight repacking and the fast
 * family's helpers.  Each exact kernel performs docs/numerics.md's operations in its
 * order; where the recipe has 16 lanes (dot16) a lane is a thread and the tree the xor
 * butterfly 1, 2, 4, 8 over 16 consecutive threads. */
#include <cuda_fp16.h>
#include <float.h>

#include "backend/cuda/cuda_internal.h"

namespace lsc {

#define FULL 0xffffffffu

/* Step 1 for one unit: lane i holds element i.  Writes q (32 bytes) and dxs. */
__device__ __forceinline__ void quant_unit(float x, int lane, int8_t *q, float2 *dxs) {
    const float a = fabsf(x);
    const bool fin = __all_sync(FULL, a <= FLT_MAX); /* false for inf and NaN */
    float amax = a;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, off));
    int qi = 0;
    float d = 0.0f;
    if (fin && amax >= 0x1p-100f) {
        d = lsc_div(amax, 127.0f);
        const float id = lsc_div(127.0f, amax);
        qi = __float2int_rn(lsc_mul(x, id)); /* round half to even, |x * id| <= 127 (1 + 2^-23) */
    } else if (!fin) {
        d = __uint_as_float(0x7fc00000u);
    }
    int s = qi;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) s += __shfl_xor_sync(FULL, s, off);
    q[lane] = (int8_t)qi;
    if (lane == 0) *dxs = make_float2(d, lsc_mul(d, lsc_i2f(s)));
}

/* ---- RMSNorm (+ quantization) --------------------------------------------------- */
__global__ void k_rmsnorm_quant(const float *__restrict__ x, int ldx, const int32_t *__restrict__ rowidx,
                                const float *__restrict__ w, float eps, int n, float *__restrict__ xn, int ldxn,
                                int8_t *__restrict__ q, float2 *__restrict__ dxs, int xs) {
    extern __shared__ float buf[]; /* the row, then the normed row */
    lsc_pdl_trigger();
    lsc_pdl_wait();
    __shared__ float scale_s;
    const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const float *xr = x + (size_t)(rowidx ? rowidx[r] : r) * ldx;
    for (int i = tid; i < n / 4; i += blockDim.x) ((float4 *)buf)[i] = ((const float4 *)xr)[i]; /* n % 4 == 0 */
    __syncthreads();
    if (warp == 0) { /* dot16(x, x): lane l < 16 sums k = l, l + 16, ... in order */
        float acc = 0.0f;
        if (lane < 16) {
            int k = lane;
            for (; k + 16 * 15 < n; k += 16 * 16) { /* the loads run ahead of the fma chain */
                float v[16];
#pragma unroll
                for (int j = 0; j < 16; j++) v[j] = buf[k + 16 * j];
#pragma unroll
                for (int j = 0; j < 16; j++) acc = lsc_fma(v[j], v[j], acc);
            }
            for (; k < n; k += 16) acc = lsc_fma(buf[k], buf[k], acc);
        }
#pragma unroll
        for (int off = 1; off <= 8; off <<= 1) acc = lsc_add(acc, __shfl_xor_sync(FULL, acc, off));
        if (lane == 0) {
            const float mean = lsc_div(acc, (float)n);
            scale_s = lsc_div(1.0f, __fsqrt_rn(lsc_add(mean, eps)));
        }
    }
    __syncthreads();
    const float scale = scale_s;
    for (int i = tid; i < n / 4; i += blockDim.x) {
        const float4 a = ((const float4 *)buf)[i], g = __ldg((const float4 *)w + i);
        const float4 v = make_float4(lsc_mul(lsc_mul(a.x, scale), g.x), lsc_mul(lsc_mul(a.y, scale), g.y),
                                     lsc_mul(lsc_mul(a.z, scale), g.z), lsc_mul(lsc_mul(a.w, scale), g.w));
        ((float4 *)buf)[i] = v;
        if (xn) ((float4 *)(xn + (size_t)r * ldxn))[i] = v;
    }
    if (!q) return;
    __syncthreads();
    for (int b = warp; b < n / 32; b += nw)
        quant_unit(buf[32 * b + lane], lane, q + ((size_t)r * xs + b) * 32, dxs + (size_t)r * xs + b);
}

__global__ void k_quant(const float *__restrict__ x, int ldx, int n, int8_t *__restrict__ q,
                        float2 *__restrict__ dxs, int xs) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.y, lane = threadIdx.x & 31, b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (b >= n / 32) return; /* warp-uniform */
    quant_unit(x[(size_t)r * ldx + 32 * b + lane], lane, q + ((size_t)r * xs + b) * 32, dxs + (size_t)r * xs + b);
}

__global__ void k_glu(const float *__restrict__ g, const float *__restrict__ u, int ld, int n,
                      float *__restrict__ out, int ldo, int gelu) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[(size_t)r * ldo + i] = lsc_glu(gelu, g[(size_t)r * ld + i], u[(size_t)r * ld + i]);
}

/* dot16(x, x) of a row of n floats in shared memory by warp 0 (lane l < 16: the fma chain
 * over k = l, l + 16, ...; the tree as the xor butterfly 1, 2, 4, 8), then the RMSNorm
 * scale 1 / sqrtf(ss / n + eps): returned to every thread of the block. */
__device__ __forceinline__ float row_rms_scale(const float *buf, int n, float eps, float *scale_s) {
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
        float acc = 0.0f;
        if (lane < 16)
            for (int k = lane; k < n; k += 16) acc = lsc_fma(buf[k], buf[k], acc);
#pragma unroll
        for (int off = 1; off <= 8; off <<= 1) acc = lsc_add(acc, __shfl_xor_sync(FULL, acc, off));
        if (lane == 0) *scale_s = lsc_div(1.0f, __fsqrt_rn(lsc_add(lsc_div(acc, (float)n), eps)));
    }
    __syncthreads();
    return *scale_s;
}

/* x[r] = x[r] + rmsnorm(t[r], w): one block per row */
__global__ void k_norm_add(const float *__restrict__ t, int ldt, const float *__restrict__ w, float eps, int n,
                           float *__restrict__ x, int ldx) {
    extern __shared__ float buf[];
    __shared__ float scale_s;
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.x;
    const float *tr = t + (size_t)r * ldt;
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = tr[i];
    __syncthreads();
    const float scale = row_rms_scale(buf, n, eps, &scale_s);
    float *xr = x + (size_t)r * ldx;
    for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = lsc_add(xr[i], lsc_mul(lsc_mul(buf[i], scale), w[i]));
}

/* ---- bias, q/k norms, RoPE, K/V into the paged store ---------------------------- */
__global__ void k_rope_kv(float *__restrict__ qkv, int ldq, int n_head, int n_kv, int D, int rope_dim, int neox,
                          const float *__restrict__ cs, const float *__restrict__ sn, lsc_kvargs kv, lsc_qkpre pre) {
    extern __shared__ float hb[]; /* the head (bias and norm applied), when pre has either */
    __shared__ float scale_s;
    lsc_pdl_trigger();
    lsc_pdl_wait();
    /* block (row r, head h): h < n_head a query head (rotated in place), else kv head h - n_head:
     * its key rotated into the store and its value copied */
    const int r = blockIdx.x, h = blockIdx.y, half = rope_dim / 2;
    const int p = kv.pos[r];
    float *row = qkv + (size_t)r * ldq;
    float *xh = row + (size_t)h * D;
    const float *c = cs + (size_t)p * half, *s = sn + (size_t)p * half;
    float *kd = NULL, *vd = NULL;
    const float *vsrc = NULL;
    if (h >= n_head) {
        const int kh = h - n_head;
        const int blk = kv.tbl[kv.tbl_off[r] + (p >> 4)];
        float *base = kv.kv + (size_t)blk * kv.block_floats + kv.layer_off;
        const size_t off = (size_t)kh * 16 * D + (size_t)(p & 15) * D;
        kd = base + off;
        vd = base + (size_t)16 * n_kv * D + off;
        vsrc = row + (size_t)(n_head + n_kv) * D + (size_t)kh * D;
    }
    const float *src = xh; /* what the rotation reads */
    if (pre.bqkv || pre.qn) {
        /* the plan's steps 3 and 4 on this head: y = y + b (one rounding), then rmsnorm over
         * head_dim (ls_rmsnorm's row recipe: (x * scale) * w) */
        const float *b = pre.bqkv ? pre.bqkv + (size_t)h * D : NULL;
        for (int d = threadIdx.x; d < D; d += blockDim.x) hb[d] = b ? lsc_add(xh[d], b[d]) : xh[d];
        __syncthreads();
        const float *nw = h < n_head ? pre.qn : pre.kn;
        if (nw) {
            const float scale = row_rms_scale(hb, D, pre.eps, &scale_s);
            for (int d = threadIdx.x; d < D; d += blockDim.x) hb[d] = lsc_mul(lsc_mul(hb[d], scale), nw[d]);
            __syncthreads();
        }
        src = hb;
        if (!kd) /* a query head: its dims past rope_dim are final now */
            for (int d = rope_dim + threadIdx.x; d < D; d += blockDim.x) xh[d] = hb[d];
    }
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float x0 = src[i0], x1 = src[i1], ci = c[i], si = s[i];
        const float y0 = lsc_fma(x0, ci, -lsc_mul(x1, si)), y1 = lsc_fma(x0, si, lsc_mul(x1, ci));
        if (kd) {
            kd[i0] = y0;
            kd[i1] = y1;
        } else {
            xh[i0] = y0;
            xh[i1] = y1;
        }
    }
    if (kd) {
        for (int d = rope_dim + threadIdx.x; d < D; d += blockDim.x) kd[d] = src[d]; /* dims past rope_dim */
        const float *bv = pre.bqkv ? pre.bqkv + (size_t)(n_head + n_kv) * D + (size_t)(h - n_head) * D : NULL;
        for (int d = threadIdx.x; d < D; d += blockDim.x) vd[d] = bv ? lsc_add(vsrc[d], bv[d]) : vsrc[d];
    }
}

/* ---- attention: one block per (row, kv head), its nq = n_head / n_kv query heads ---- */
struct AttnLayout {
    int nka, nca; /* score slots per head (max keys rounded up to 4), chunk partials per head */
};
__host__ __device__ inline AttnLayout attn_layout(int max_keys) {
    AttnLayout a;
    a.nka = (max_keys + 3) & ~3;
    a.nca = ((max_keys + 63) / 64 + 3) & ~3;
    return a;
}

__global__ void __launch_bounds__(1024) k_attn(const float *__restrict__ qkv, int ldq, int n_head, int n_kv, int D, float scale, int window,
                       lsc_kvargs kv, int max_keys, float *__restrict__ out, int8_t *__restrict__ q8,
                       float2 *__restrict__ dxs, int xs) {
    extern __shared__ float sm[];
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.x, kvh = blockIdx.y, nq = n_head / n_kv;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const AttnLayout L = attn_layout(max_keys);
    float *qs = sm, *sc = qs + nq * D, *part = sc + (size_t)nq * L.nka, *mx = part + (size_t)nq * L.nca,
          *inv = mx + nq;
    /* keys k0..pos, as keys 0..nk-1 of the recipe (key j is key k0 + j of the sequence) */
    const int k0 = window > 0 && kv.pos[r] - window + 1 > 0 ? kv.pos[r] - window + 1 : 0;
    const int nk = kv.pos[r] + 1 - k0;
    const int32_t *table = kv.tbl + kv.tbl_off[r];
    const size_t bf = kv.block_floats, KVD = (size_t)n_kv * D;
    const float *kb = kv.kv + kv.layer_off + (size_t)kvh * 16 * D, *vb = kb + 16 * KVD;
    const float *qr = qkv + (size_t)r * ldq + (size_t)kvh * nq * D;
    for (int i = tid; i < nq * D; i += blockDim.x) qs[i] = qr[i];
    __syncthreads();
    /* 1. s_j = dot16(q, k_j) * scale */
    const int total = nq * nk;
    if (D % 16 == 0) { /* one thread per (head, key): the 16 recipe lanes in registers, then the tree */
        for (int t = tid; t < total; t += blockDim.x) {
            const int hh = t / nk, j = t % nk;
            const int ja = k0 + j;
            const float4 *kr = (const float4 *)(kb + (size_t)table[ja >> 4] * bf + (size_t)(ja & 15) * D);
            const float *qh = qs + hh * D;
            float acc[16];
#pragma unroll
            for (int l = 0; l < 16; l++) acc[l] = 0.0f;
            for (int d0 = 0; d0 < D; d0 += 16) {
                float4 k4[4];
#pragma unroll
                for (int i = 0; i < 4; i++) k4[i] = __ldg(kr + d0 / 4 + i);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    acc[4 * i + 0] = lsc_fma(qh[d0 + 4 * i + 0], k4[i].x, acc[4 * i + 0]);
                    acc[4 * i + 1] = lsc_fma(qh[d0 + 4 * i + 1], k4[i].y, acc[4 * i + 1]);
                    acc[4 * i + 2] = lsc_fma(qh[d0 + 4 * i + 2], k4[i].z, acc[4 * i + 2]);
                    acc[4 * i + 3] = lsc_fma(qh[d0 + 4 * i + 3], k4[i].w, acc[4 * i + 3]);
                }
            }
#pragma unroll
            for (int n = 16; n > 1; n /= 2)
#pragma unroll
                for (int i = 0; i < n / 2; i++) acc[i] = lsc_add(acc[2 * i], acc[2 * i + 1]);
            sc[(size_t)hh * L.nka + j] = lsc_mul(acc[0], scale);
        }
    } else { /* 16 threads per (head, key), the tree as the xor butterfly 1, 2, 4, 8 */
        for (int base = warp * 2; base < total; base += nw * 2) {
            const int pr = base + (lane >> 4), l = lane & 15;
            const bool ok = pr < total;
            const int hh = ok ? pr / nk : 0, j = ok ? pr % nk : 0;
            float acc = 0.0f;
            if (ok) {
                const int ja = k0 + j;
                const float *kr = kb + (size_t)table[ja >> 4] * bf + (size_t)(ja & 15) * D;
                const float *qh = qs + hh * D;
                for (int d = l; d < D; d += 16) acc = lsc_fma(qh[d], kr[d], acc);
            }
#pragma unroll
            for (int off = 1; off <= 8; off <<= 1) acc = lsc_add(acc, __shfl_xor_sync(FULL, acc, off));
            if (ok && l == 0) sc[(size_t)hh * L.nka + j] = lsc_mul(acc, scale);
        }
    }
    __syncthreads();
    /* 2. mx = max_j s_j (s > m ? s : m from s_0: the same value in any order) */
    for (int hh = warp; hh < nq; hh += nw) {
        const float *s = sc + (size_t)hh * L.nka;
        float m = s[0];
        for (int j = lane; j < nk; j += 32) m = s[j] > m ? s[j] : m;
#pragma unroll
        for (int off = 16; off >= 1; off >>= 1) {
            const float o = __shfl_xor_sync(FULL, m, off);
            m = o > m ? o : m;
        }
        if (lane == 0) mx[hh] = m;
    }
    __syncthreads();
    /* 3. p_j = ls_expf(s_j - mx) */
    for (int t = tid; t < total; t += blockDim.x) {
        const int hh = t / nk, j = t % nk;
        float *s = sc + (size_t)hh * L.nka + j;
        *s = lsc_expf(lsc_sub(*s, mx[hh]));
    }
    __syncthreads();
    /* 4. sum: chunks of 64 keys summed in order, then the chunks in order */
    const int nch = (nk + 63) / 64;
    for (int t = tid; t < nq * nch; t += blockDim.x) {
        const int hh = t / nch, c = t % nch;
        const float *s = sc + (size_t)hh * L.nka;
        const int e = (c + 1) * 64 < nk ? (c + 1) * 64 : nk;
        float a = 0.0f;
        for (int j = c * 64; j < e; j++) a = lsc_add(a, s[j]);
        part[(size_t)hh * L.nca + c] = a;
    }
    __syncthreads();
    if (tid < nq) {
        float a = 0.0f;
        for (int c = 0; c < nch; c++) a = lsc_add(a, part[(size_t)tid * L.nca + c]);
        inv[tid] = lsc_div(1.0f, a);
    }
    __syncthreads();
    /* 5, 6. acc_d = fma(p_j, v_j[d], acc_d) in key order; out = acc * (1 / sum) */
    const bool fuse = q8 && blockDim.x == nq * D && D % 32 == 0;
    for (int t = tid; t < nq * D; t += blockDim.x) {
        const int hh = t / D, d = t % D;
        const float *p = sc + (size_t)hh * L.nka;
        float acc = 0.0f;
        if (k0 & 15) { /* a window that starts inside a block: key by key, the same chain */
            for (int j = 0; j < nk; j++) {
                const int ja = k0 + j;
                acc = lsc_fma(p[j], vb[(size_t)table[ja >> 4] * bf + (size_t)(ja & 15) * D + d], acc);
            }
        } else {
        /* the key blocks' 16 V rows: the next block's loads are in flight while this one adds
         * (k0 is a multiple of 16 here: block-aligned groups of 16 keys) */
        const int32_t *tv = table + (k0 >> 4);
        float v[16], vn[16];
        {
            const float *vr = vb + (size_t)tv[0] * bf + d;
#pragma unroll
            for (int jj = 0; jj < 16; jj++) v[jj] = vr[(size_t)jj * D];
        }
        for (int j0 = 0; j0 < nk; j0 += 16) {
            if (j0 + 16 < nk) {
                const float *vr = vb + (size_t)tv[(j0 + 16) >> 4] * bf + d;
#pragma unroll
                for (int jj = 0; jj < 16; jj++) vn[jj] = vr[(size_t)jj * D];
            }
            if (j0 + 16 <= nk) {
#pragma unroll
                for (int jj = 0; jj < 16; jj++) acc = lsc_fma(p[j0 + jj], v[jj], acc);
            } else {
#pragma unroll
                for (int jj = 0; jj < 16; jj++)
                    if (j0 + jj < nk) acc = lsc_fma(p[j0 + jj], v[jj], acc);
            }
#pragma unroll
            for (int jj = 0; jj < 16; jj++) v[jj] = vn[jj];
        }
        }
        const float o = lsc_mul(acc, inv[hh]);
        const size_t col = (size_t)kvh * nq * D + t;
        out[(size_t)r * n_head * D + col] = o;
        if (fuse) { /* a warp holds 32 consecutive outputs: one activation unit of the wo matmul */
            const size_t b = col / 32;
            quant_unit(o, lane, q8 + ((size_t)r * xs + b) * 32, dxs + (size_t)r * xs + b);
        }
    }
}

/* The same recipe with the keys streamed through shared memory in chunks of ATT_CH keys,
 * a ring of ATT_ST chunks filled by cp.async (for D % 16 == 0, nq * D <= 1024): the scores
 * (4 threads per (head, key), each 4 of the 16 recipe lanes; the tree's first two levels in
 * the thread, the last two as xor 1, 2), then, after the max, exp and sums, the V rows
 * through the same ring for the fma chain of each (head, dim) in key order. */
#define ATT_CH 32
#define ATT_ST 4

__device__ __forceinline__ void att_cp16(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void att_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void att_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(ATT_ST - 2)); }

/* chunk c of the keys (or values) of kv head base `b` into ring slot `ring` */
__device__ __forceinline__ void att_load(float *ring, const float *b, const int32_t *table, size_t bf, int D, int k0,
                                         int nk, int c) {
    const int j0 = c * ATT_CH, n = nk - j0 < ATT_CH ? nk - j0 : ATT_CH, per = D / 4;
    for (int t = threadIdx.x; t < n * per; t += blockDim.x) {
        const int jj = t / per, q = t % per, j = k0 + j0 + jj; /* the sequence's key */
        att_cp16(ring + (size_t)jj * D + 4 * q, b + (size_t)table[j >> 4] * bf + (size_t)(j & 15) * D + 4 * q);
    }
}

__global__ void k_attn2(const float *__restrict__ qkv, int ldq, int n_head, int n_kv, int D, float scale, int window,
                        lsc_kvargs kv, int max_keys, float *__restrict__ out, int8_t *__restrict__ q8,
                        float2 *__restrict__ dxs, int xs) {
    extern __shared__ __align__(16) float sm[];
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.x, kvh = blockIdx.y, nq = n_head / n_kv;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const AttnLayout L = attn_layout(max_keys);
    float *ring = sm; /* ATT_ST x ATT_CH x D */
    float *qs = ring + ATT_ST * ATT_CH * D, *sc = qs + nq * D, *part = sc + (size_t)nq * L.nka,
          *mx = part + (size_t)nq * L.nca, *inv = mx + nq;
    const int k0 = window > 0 && kv.pos[r] - window + 1 > 0 ? kv.pos[r] - window + 1 : 0; /* as k_attn */
    const int nk = kv.pos[r] + 1 - k0, nchunk = (nk + ATT_CH - 1) / ATT_CH;
    const int32_t *table = kv.tbl + kv.tbl_off[r];
    const size_t bf = kv.block_floats, KVD = (size_t)n_kv * D;
    const float *kb = kv.kv + kv.layer_off + (size_t)kvh * 16 * D, *vb = kb + 16 * KVD;
    const float *qr = qkv + (size_t)r * ldq + (size_t)kvh * nq * D;
    for (int i = tid; i < nq * D; i += blockDim.x) qs[i] = qr[i];
    /* 1. scores */
#pragma unroll
    for (int c = 0; c < ATT_ST - 1; c++) {
        if (c < nchunk) att_load(ring + (size_t)c * ATT_CH * D, kb, table, bf, D, k0, nk, c);
        att_commit();
    }
    for (int c = 0; c < nchunk; c++) {
        att_wait();
        __syncthreads();
        if (c + ATT_ST - 1 < nchunk)
            att_load(ring + (size_t)((c + ATT_ST - 1) % ATT_ST) * ATT_CH * D, kb, table, bf, D, k0, nk, c + ATT_ST - 1);
        att_commit();
        const float *kc = ring + (size_t)(c % ATT_ST) * ATT_CH * D;
        const int j0 = c * ATT_CH, n = nk - j0 < ATT_CH ? nk - j0 : ATT_CH;
        for (int base = 0; base < nq * ATT_CH; base += blockDim.x / 4) { /* (head, key) tasks, 4 threads each */
            const int task = base + tid / 4, t = tid & 3;
            const int hh = task / ATT_CH, jj = task % ATT_CH;
            const bool ok = task < nq * ATT_CH && jj < n;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            if (ok) {
                const float *kr = kc + (size_t)jj * D, *qh = qs + hh * D;
                for (int d = 4 * t; d < D; d += 16) {
                    const float4 k4 = *(const float4 *)(kr + d), q4 = *(const float4 *)(qh + d);
                    a0 = lsc_fma(q4.x, k4.x, a0);
                    a1 = lsc_fma(q4.y, k4.y, a1);
                    a2 = lsc_fma(q4.z, k4.z, a2);
                    a3 = lsc_fma(q4.w, k4.w, a3);
                }
            }
            float a = lsc_add(lsc_add(a0, a1), lsc_add(a2, a3));
            a = lsc_add(a, __shfl_xor_sync(FULL, a, 1));
            a = lsc_add(a, __shfl_xor_sync(FULL, a, 2));
            if (ok && t == 0) sc[(size_t)hh * L.nka + j0 + jj] = lsc_mul(a, scale);
        }
    }
    __syncthreads();
    /* the V ring's first chunks load while the softmax runs */
#pragma unroll
    for (int c = 0; c < ATT_ST - 1; c++) {
        if (c < nchunk) att_load(ring + (size_t)c * ATT_CH * D, vb, table, bf, D, k0, nk, c);
        att_commit();
    }
    /* 2. max, 3. exp, 4. sums: as k_attn */
    for (int hh = warp; hh < nq; hh += nw) {
        const float *sh = sc + (size_t)hh * L.nka;
        float m = sh[0];
        for (int j = lane; j < nk; j += 32) m = sh[j] > m ? sh[j] : m;
#pragma unroll
        for (int off = 16; off >= 1; off >>= 1) {
            const float o = __shfl_xor_sync(FULL, m, off);
            m = o > m ? o : m;
        }
        if (lane == 0) mx[hh] = m;
    }
    __syncthreads();
    const int total = nq * nk;
    for (int t = tid; t < total; t += blockDim.x) {
        const int hh = t / nk, j = t % nk;
        float *sp = sc + (size_t)hh * L.nka + j;
        *sp = lsc_expf(lsc_sub(*sp, mx[hh]));
    }
    __syncthreads();
    const int nch = (nk + 63) / 64;
    for (int t = tid; t < nq * nch; t += blockDim.x) {
        const int hh = t / nch, c = t % nch;
        const float *sh = sc + (size_t)hh * L.nka;
        const int e = (c + 1) * 64 < nk ? (c + 1) * 64 : nk;
        float a = 0.0f;
        int j = c * 64;
        for (; j + 16 <= e; j += 16) {
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = sh[j + i];
#pragma unroll
            for (int i = 0; i < 16; i++) a = lsc_add(a, v[i]);
        }
        for (; j < e; j++) a = lsc_add(a, sh[j]);
        part[(size_t)hh * L.nca + c] = a;
    }
    __syncthreads();
    if (tid < nq) {
        float a = 0.0f;
        for (int c = 0; c < nch; c++) a = lsc_add(a, part[(size_t)tid * L.nca + c]);
        inv[tid] = lsc_div(1.0f, a);
    }
    /* 5. acc_d = fma(p_j, v_j[d], acc_d) in key order, thread (head, dim) */
    const int hh = tid / D, d = tid % D;
    const bool act = tid < nq * D;
    const float *ph = sc + (size_t)(act ? hh : 0) * L.nka;
    float acc = 0.0f;
    for (int c = 0; c < nchunk; c++) {
        att_wait();
        __syncthreads();
        if (c + ATT_ST - 1 < nchunk)
            att_load(ring + (size_t)((c + ATT_ST - 1) % ATT_ST) * ATT_CH * D, vb, table, bf, D, k0, nk, c + ATT_ST - 1);
        att_commit();
        const float *vc = ring + (size_t)(c % ATT_ST) * ATT_CH * D;
        const int j0 = c * ATT_CH, n = nk - j0 < ATT_CH ? nk - j0 : ATT_CH;
        if (act) {
            if (n == ATT_CH) {
#pragma unroll
                for (int jj = 0; jj < ATT_CH; jj++) acc = lsc_fma(ph[j0 + jj], vc[(size_t)jj * D + d], acc);
            } else {
                for (int jj = 0; jj < n; jj++) acc = lsc_fma(ph[j0 + jj], vc[(size_t)jj * D + d], acc);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    if (!act) return; /* whole warps: nq * D is a multiple of 32 when fused */
    /* 6. out = acc * (1 / sum) */
    const float o = lsc_mul(acc, inv[hh]);
    const size_t col = (size_t)kvh * nq * D + tid;
    out[(size_t)r * n_head * D + col] = o;
    if (q8) {
        const size_t b = col / 32;
        quant_unit(o, lane, q8 + ((size_t)r * xs + b) * 32, dxs + (size_t)r * xs + b);
    }
}

/* ---- attention for many rows of one sequence (prefill) ----------------------------------
 * k_attn4: a work item is (group of rows, kv head); the group's rows of one sequence (a
 * segment) and their query heads, up to A4_RH (row, head) pairs, share every K and V chunk of
 * A4_CH keys the block streams through shared memory.  The blocks are persistent (as many as
 * fit on the GPU at once, each with its own score slab in the scratch) and take the items
 * with a stride, the last group (the most keys, in a prompt) first.  The recipe is k_attn's,
 * value for value; only the schedule differs:
 *   A. scores: a 16 x 16 thread grid, thread (lane l, tile t) holds recipe lane l of the dot16
 *      of 8 (row, head) pairs x 8 keys (elements l, l + 16, ... in order, from +0); the tree
 *      is a reduce-scatter butterfly over the 16 lanes (xor 1, 2, 4, 8: adjacent pairs first,
 *      as dot16's tree; at each level a lane keeps half its outputs), after which the thread
 *      holds 4 keys of one pair; times scale, they go to the scratch `sg` (global memory, one
 *      A4_RH x nkp slab per block);
 *   B. the max of each pair's scores, seeded with s_0 (as k_attn3);
 *   C. p = ls_expf(s - mx) in place, and the sums: a thread per (pair, 64-key chunk) adds its
 *      chunk in key order, a thread per pair adds the chunks in order;
 *   D. each (pair, dim)'s fma chain over the keys in order, V and p chunks streamed together;
 *      thread (dim tid % D) holds the chains of pairs tid / D, + G, ...
 * Built for D = 64 and 128; used for window == 0 (lsc_attention decides). */
#define A4_THR 256
#define A4_RH 32 /* (row, head) pairs per block */
#define A4_CH 32 /* keys per streamed chunk (a recipe sum chunk of 64 is two of them) */

struct A4Layout {
    int QP, nch64;
    size_t qs, kv, pc, mx, inv, ptab, part, total; /* offsets (floats) */
};
__host__ __device__ inline A4Layout a4_layout(int D, int max_keys) {
    A4Layout a;
    a.QP = D + 2; /* the two tiles of a warp read pair rows 8 apart: 16 banks apart */
    a.nch64 = (max_keys + 31) / 32; /* room for sum chunks of 32 (the mutant build) */
    a.qs = 0;
    a.kv = ((size_t)A4_RH * a.QP + 3) / 4 * 4;
    a.pc = a.kv + 2 * (size_t)A4_CH * D;
    a.mx = a.pc + 2 * (size_t)A4_RH * A4_CH;
    a.inv = a.mx + A4_RH;
    a.ptab = a.inv + A4_RH; /* per pair: its row, head, and key count (ints) */
    a.part = a.ptab + 3 * A4_RH;
    a.total = a.part + (size_t)A4_RH * a.nch64;
    return a;
}

/* keys j0..j0+n-1 of one head's store into dst rows of D floats: a whole chunk (n = A4_CH,
 * j0 a multiple of A4_CH, so two KV blocks of 16 keys) with the two blocks looked up once and
 * the copies unrolled; a partial one key by key */
template <int D>
__device__ __forceinline__ void a4_load(float *dst, const float *b, const int32_t *table, size_t bf, int j0, int n) {
    constexpr int per = D / 4;
    static_assert(A4_CH == 32 && A4_CH * per % A4_THR == 0, "a4_load: a chunk is two KV blocks");
    if (n == A4_CH) {
        constexpr int IT = A4_CH * per / A4_THR, KS = A4_THR / per; /* copies a thread, keys apart */
        const int j = threadIdx.x / per, q = threadIdx.x % per;
        const float *b0 = b + (size_t)table[j0 >> 4] * bf, *b1 = b + (size_t)table[(j0 >> 4) + 1] * bf;
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int jj = j + i * KS;
            att_cp16(dst + (size_t)jj * D + 4 * q, (jj < 16 ? b0 : b1) + (size_t)(jj & 15) * D + 4 * q);
        }
        return;
    }
    for (int t = threadIdx.x; t < n * per; t += A4_THR) {
        const int jj = t / per, q = t % per, j = j0 + jj;
        att_cp16(dst + (size_t)jj * D + 4 * q, b + (size_t)table[j >> 4] * bf + (size_t)(j & 15) * D + 4 * q);
    }
}

/* one level of the butterfly: N outputs -> N / 2, the upper half kept where lane bit `m` is set */
template <int N>
__device__ __forceinline__ void a4_fold(float *v, int lane, int m) {
    const bool up = (lane & m) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const float send = up ? v[i] : v[i + N / 2], keep = up ? v[i + N / 2] : v[i];
        v[i] = lsc_add(keep, __shfl_xor_sync(FULL, send, m));
    }
}

template <int D>
__global__ void __launch_bounds__(A4_THR, 2) k_attn4(const float *__restrict__ qkv, int ldq, int r0, int rows, int qb,
                                                      int n_head, int n_kv, float scale, lsc_kvargs kv,
                                                      float *__restrict__ out, float *__restrict__ sg, int nkp,
                                                      int max_keys) {
    extern __shared__ __align__(16) float sm[];
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int nq = n_head / n_kv, tid = threadIdx.x;
    const A4Layout L = a4_layout(D, max_keys);
    const int QP = L.QP;
    float *qs = sm + L.qs, *kvb = sm + L.kv, *pc = sm + L.pc, *mx = sm + L.mx, *sinv = sm + L.inv, *part = sm + L.part;
    int *prow = (int *)(sm + L.ptab), *phd = prow + A4_RH, *pnk = phd + A4_RH; /* pair -> row, head, keys */
    float *sgb = sg + (size_t)blockIdx.x * A4_RH * (size_t)nkp;
    /* step D reads the p rows of all A4_RH pairs (a segment's unused ones are never stored):
     * zeroed once so they hold defined values */
    for (int i = tid; i < 2 * A4_RH * A4_CH; i += A4_THR) pc[i] = 0.0f;
    const size_t bf = kv.block_floats, KVD = (size_t)n_kv * D;
    const int lane = tid & 15, tile = tid >> 4, trh = (tile & 3) * 8, tkey = (tile >> 2) * 8;
    constexpr int G = A4_THR / D, NC = A4_RH / G; /* step D: chains per thread */
    const int pd = tid % D, pg = tid / D;
    const int ngroups = (rows + qb - 1) / qb, nwork = ngroups * n_kv;

    for (int wi = blockIdx.x; wi < nwork; wi += gridDim.x) {
        const int kvh = wi % n_kv, grp = ngroups - 1 - wi / n_kv;
        const float *kb = kv.kv + kv.layer_off + (size_t)kvh * 16 * D, *vb = kb + 16 * KVD;
        const int rA = r0 + grp * qb, rE = rA + qb < r0 + rows ? rA + qb : r0 + rows;
        for (int ra = rA; ra < rE;) {
            /* the segment ra..rb-1: consecutive rows with one table */
            const int to = kv.tbl_off[ra];
            int rb = ra + 1, pmax = kv.pos[ra];
            while (rb < rE && kv.tbl_off[rb] == to) {
                pmax = kv.pos[rb] > pmax ? kv.pos[rb] : pmax;
                rb++;
            }
            const int nih = (rb - ra) * nq, nkmax = pmax + 1, nchunk = (nkmax + A4_CH - 1) / A4_CH;
            const int32_t *table = kv.tbl + to;
            __syncthreads(); /* the previous segment is done with the buffers */
            if (tid < A4_RH) { /* the divisions by nq, once a segment */
                const int ih = tid < nih ? tid : nih - 1, r = ra + ih / nq;
                prow[tid] = r;
                phd[tid] = ih % nq;
                pnk[tid] = kv.pos[r] + 1;
            }
            __syncthreads();
            for (int i = tid; i < A4_RH * D; i += A4_THR) {
                const int ih = i / D, d = i % D;
                qs[(size_t)ih * QP + d] =
                    ih < nih ? qkv[(size_t)prow[ih] * ldq + (size_t)(kvh * nq + phd[ih]) * D + d] : 0.0f;
            }
            /* A. scores */
            a4_load<D>(kvb, kb, table, bf, 0, nkmax < A4_CH ? nkmax : A4_CH);
            att_commit();
            for (int c = 0; c < nchunk; c++) {
                asm volatile("cp.async.wait_group 0;\n" ::);
                __syncthreads();
                if (c + 1 < nchunk) {
                    const int j1 = (c + 1) * A4_CH;
                    a4_load<D>(kvb + (size_t)((c + 1) & 1) * A4_CH * D, kb, table, bf, j1,
                               nkmax - j1 < A4_CH ? nkmax - j1 : A4_CH);
                }
                att_commit();
                const float *kc = kvb + (size_t)(c & 1) * A4_CH * D;
                float v[64];
#pragma unroll
                for (int i = 0; i < 64; i++) v[i] = 0.0f;
#pragma unroll 2
                for (int d0 = 0; d0 < D; d0 += 16) {
                    const int d = d0 + lane;
                    float qv[8], kv8[8];
#pragma unroll
                    for (int a = 0; a < 8; a++) qv[a] = qs[(size_t)(trh + a) * QP + d];
#pragma unroll
                    for (int b = 0; b < 8; b++) kv8[b] = kc[(size_t)(tkey + b) * D + d];
#pragma unroll
                    for (int a = 0; a < 8; a++)
#pragma unroll
                        for (int b = 0; b < 8; b++) v[a * 8 + b] = lsc_fma(qv[a], kv8[b], v[a * 8 + b]);
                }
                a4_fold<64>(v, lane, 1);
                a4_fold<32>(v, lane, 2);
                a4_fold<16>(v, lane, 4);
                a4_fold<8>(v, lane, 8);
                /* v[i] is pair trh + a, key tkey + b0 + i */
                const int a = (lane & 1) * 4 + (lane & 2) + ((lane >> 2) & 1), b0 = ((lane >> 3) & 1) * 4;
                const int ih = trh + a;
                if (ih < nih)
                    *(float4 *)(sgb + (size_t)ih * nkp + c * A4_CH + tkey + b0) =
                        make_float4(lsc_mul(v[0], scale), lsc_mul(v[1], scale), lsc_mul(v[2], scale),
                                    lsc_mul(v[3], scale));
            }
            __syncthreads(); /* every score is in sg */
            /* B. the max: 8 threads per pair, from s_0 (any order: a max); thread k reads the keys
             * 4k..4k+3 of every 32, two float4 loads in flight per step */
            {
                const int ih = tid / 8 < nih ? tid / 8 : nih - 1, k = tid % 8;
                const int nk = pnk[ih];
                const float *sp = sgb + (size_t)ih * nkp;
                float m = __ldcg(sp), m1 = m;
                int j = 4 * k;
                for (; j + 36 <= nk; j += 64) {
                    const float4 x = __ldcg((const float4 *)(sp + j)), y = __ldcg((const float4 *)(sp + j + 32));
                    m = x.x > m ? x.x : m;
                    m1 = y.x > m1 ? y.x : m1;
                    m = x.y > m ? x.y : m;
                    m1 = y.y > m1 ? y.y : m1;
                    m = x.z > m ? x.z : m;
                    m1 = y.z > m1 ? y.z : m1;
                    m = x.w > m ? x.w : m;
                    m1 = y.w > m1 ? y.w : m1;
                }
                for (; j < nk; j += 32)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (j + e < nk) {
                            const float x = __ldcg(sp + j + e);
                            m = x > m ? x : m;
                        }
                m = m1 > m ? m1 : m;
#pragma unroll
                for (int off = 1; off <= 4; off <<= 1) {
                    const float o = __shfl_xor_sync(FULL, m, off);
                    m = o > m ? o : m;
                }
                if (tid < nih * 8 && k == 0) mx[ih] = m;
            }
            __syncthreads();
            /* C. p in place; the sums of 64-key chunks, then of the chunks */
#ifdef LS_CUDA_MUTATE_ATTN /* sum chunks of 32 keys, not the recipe's 64 (make test-cuda: must fail) */
#define A4_SUM 32
#else
#define A4_SUM 64
#endif
            const int nch = (nkmax + A4_SUM - 1) / A4_SUM;
            for (int t = tid; t < A4_RH * nch; t += A4_THR) { /* task t: pair t % A4_RH, chunk t / A4_RH */
                const int ih = t % A4_RH, c = t / A4_RH;
                if (ih >= nih) continue;
                const int nk = pnk[ih];
                if (c * A4_SUM >= nk) continue;
                const int e = (c + 1) * A4_SUM < nk ? (c + 1) * A4_SUM : nk;
                float *sp = sgb + (size_t)ih * nkp;
                const float m = mx[ih];
                float acc = 0.0f;
                int j = c * A4_SUM;
                for (; j + 16 <= e; j += 16) {
                    float x[16];
#pragma unroll
                    for (int i = 0; i < 16; i++) x[i] = __ldcg(sp + j + i);
#pragma unroll
                    for (int i = 0; i < 16; i++) {
                        x[i] = lsc_expf(lsc_sub(x[i], m));
                        acc = lsc_add(acc, x[i]);
                    }
#pragma unroll
                    for (int i = 0; i < 16; i += 4)
                        __stcg((float4 *)(sp + j + i), make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]));
                }
                for (; j < e; j++) {
                    const float p = lsc_expf(lsc_sub(__ldcg(sp + j), m));
                    __stcg(sp + j, p);
                    acc = lsc_add(acc, p);
                }
                part[(size_t)ih * L.nch64 + c] = acc;
            }
            __syncthreads();
            if (tid < nih) {
                const int nk = pnk[tid];
                float a = 0.0f;
                for (int c = 0; c * A4_SUM < nk; c++) a = lsc_add(a, part[(size_t)tid * L.nch64 + c]);
                sinv[tid] = lsc_div(1.0f, a);
            }
            /* D. acc = fma(p_j, v_j[d], acc) in key order: V and p chunks through shared memory */
            auto load_pv = [&](int c, int buf) {
                const int j1 = c * A4_CH;
                a4_load<D>(kvb + (size_t)buf * A4_CH * D, vb, table, bf, j1, nkmax - j1 < A4_CH ? nkmax - j1 : A4_CH);
                for (int t = tid; t < nih * (A4_CH / 4); t += A4_THR) {
                    const int ih = t / (A4_CH / 4), q = t % (A4_CH / 4);
                    att_cp16(pc + (size_t)buf * A4_RH * A4_CH + (size_t)ih * A4_CH + 4 * q,
                             sgb + (size_t)ih * nkp + j1 + 4 * q);
                }
            };
            float acc[NC];
            int nkt = 0x7fffffff; /* the fewest keys among this thread's chains */
#pragma unroll
            for (int k = 0; k < NC; k++) {
                acc[k] = 0.0f;
                if (pg + k * G < nih) nkt = pnk[pg + k * G] < nkt ? pnk[pg + k * G] : nkt;
            }
            __syncthreads(); /* step C's p are in sg (the cp.async below reads them from L2) */
            load_pv(0, 0);
            att_commit();
            for (int c = 0; c < nchunk; c++) {
                asm volatile("cp.async.wait_group 0;\n" ::);
                __syncthreads();
                if (c + 1 < nchunk) load_pv(c + 1, (c + 1) & 1);
                att_commit();
                const float *vc = kvb + (size_t)(c & 1) * A4_CH * D, *pcc = pc + (size_t)(c & 1) * A4_RH * A4_CH;
                if ((c + 1) * A4_CH <= nkt) { /* every chain of this thread takes all keys of the chunk;
                                                * chains past nih run on stale p (never stored) */
#pragma unroll 2
                    for (int jj = 0; jj < A4_CH; jj += 4) {
                        const float v0 = vc[(size_t)jj * D + pd], v1 = vc[(size_t)(jj + 1) * D + pd],
                                    v2 = vc[(size_t)(jj + 2) * D + pd], v3 = vc[(size_t)(jj + 3) * D + pd];
#pragma unroll
                        for (int k = 0; k < NC; k++) {
                            const float4 p4 = *(const float4 *)(pcc + (size_t)(pg + k * G) * A4_CH + jj);
                            float a = acc[k];
                            a = lsc_fma(p4.x, v0, a);
                            a = lsc_fma(p4.y, v1, a);
                            a = lsc_fma(p4.z, v2, a);
                            a = lsc_fma(p4.w, v3, a);
                            acc[k] = a;
                        }
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < NC; k++) {
                        const int ih = pg + k * G;
                        if (ih >= nih) continue;
                        const int lim = pnk[ih] - c * A4_CH;
                        if (lim <= 0) continue;
                        const int n = lim < A4_CH ? lim : A4_CH;
                        const float *ph = pcc + (size_t)ih * A4_CH;
                        float a = acc[k];
                        for (int jj = 0; jj < n; jj++) a = lsc_fma(ph[jj], vc[(size_t)jj * D + pd], a);
                        acc[k] = a;
                    }
                }
            }
            asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
            for (int k = 0; k < NC; k++) {
                const int ih = pg + k * G;
                if (ih >= nih) break;
                out[(size_t)prow[ih] * n_head * D + (size_t)(kvh * nq + phd[ih]) * D + pd] = lsc_mul(acc[k], sinv[ih]);
            }
            ra = rb;
        }
    }
}

/* ---- float-weight matmul: 16 fma lanes, then the tree ---------------------------- */
/* A warp computes 8 outputs; thread t = lane & 3 of an output owns recipe lanes 4t..4t+3
 * (elements k = 16 i + 4t + j).  Level 1-2 of the tree inside the thread, 3-4 across the
 * output's 4 threads (xor 1, 2).  K must be a multiple of 4. */
template <int WT>
__device__ __forceinline__ float4 load_w4(const void *f, size_t off) {
    if (WT == LSC_F32) return __ldg((const float4 *)((const float *)f + off));
    const uint2 h = __ldg((const uint2 *)((const uint16_t *)f + off));
    if (WT == LSC_F16)
        return make_float4(lsc_f16((uint16_t)h.x), lsc_f16((uint16_t)(h.x >> 16)), lsc_f16((uint16_t)h.y),
                           lsc_f16((uint16_t)(h.y >> 16)));
    return make_float4(lsc_bf16((uint16_t)h.x), lsc_bf16((uint16_t)(h.x >> 16)), lsc_bf16((uint16_t)h.y),
                       lsc_bf16((uint16_t)(h.y >> 16)));
}

template <int WT, int R>
__global__ void __launch_bounds__(256) k_gemv_f(const lsc_mat w, const float *__restrict__ x, int ldx, int rows,
                                                float *__restrict__ y, int ldy, int mode) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int lane = threadIdx.x & 31, t = lane & 3;
    const int o = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 8 + (lane >> 2);
    if ((o & ~7) >= w.N) return; /* warp-uniform */
    const int oc = o < w.N ? o : w.N - 1;
    const float *xr[R];
#pragma unroll
    for (int r = 0; r < R; r++) xr[r] = x + (size_t)(r < rows ? r : rows - 1) * ldx;
    float acc[R][4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[r][j] = 0.0f;
    const size_t wrow = (size_t)oc * w.K;
    for (int k = 4 * t; k < w.K; k += 16) {
        const float4 wv = load_w4<WT>(w.f, wrow + k);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float4 xv = __ldg((const float4 *)(xr[r] + k));
            acc[r][0] = lsc_fma(xv.x, wv.x, acc[r][0]);
            acc[r][1] = lsc_fma(xv.y, wv.y, acc[r][1]);
            acc[r][2] = lsc_fma(xv.z, wv.z, acc[r][2]);
            acc[r][3] = lsc_fma(xv.w, wv.w, acc[r][3]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float a = lsc_add(lsc_add(acc[r][0], acc[r][1]), lsc_add(acc[r][2], acc[r][3]));
        a = lsc_add(a, __shfl_xor_sync(FULL, a, 1));
        a = lsc_add(a, __shfl_xor_sync(FULL, a, 2));
        if (t == 0 && r < rows && o < w.N) {
            float *yp = y + (size_t)r * ldy + o;
            *yp = mode == LSC_MODE_ADD ? lsc_add(*yp, a) : a;
        }
    }
}

template <int WT>
static cudaError_t gemv_f_t(const lsc_mat &w, const float *x, int ldx, int rows, float *y, int ldy, int mode,
                            lsc_stream s) {
    const int blocks = (w.N + 63) / 64; /* 8 warps x 8 outputs */
    for (int m0 = 0; m0 < rows; m0 += 4) {
        const int n = rows - m0 < 4 ? rows - m0 : 4;
        const float *xm = x + (size_t)m0 * ldx;
        float *ym = y + (size_t)m0 * ldy;
        cudaError_t e;
        if (n == 1)
            e = lsc_launch(k_gemv_f<WT, 1>, dim3(blocks), dim3(256), 0, s, w, xm, ldx, n, ym, ldy, mode);
        else
            e = lsc_launch(k_gemv_f<WT, 4>, dim3(blocks), dim3(256), 0, s, w, xm, ldx, n, ym, ldy, mode);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- repack ---------------------------------------------------------------------- */
__global__ void k_repack(lsc_mat w, const uint8_t *__restrict__ src, int n_src, size_t row_bytes, int base,
                         int chunk, int cstride) {
    const int blocks = w.K / lsc_blk_elems(w.type);
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n_src * blocks) return;
    const int n = (int)(t / blocks), blk = (int)(t % blocks);
    const int dr = base + (n / chunk) * cstride + n % chunk;
    uint8_t *codes = (uint8_t *)w.codes + (size_t)dr * w.nbp * lsc_cb(w.type);
    uint8_t *hi = w.hi ? (uint8_t *)w.hi + (size_t)dr * w.nbp * lsc_hb(w.type) : NULL;
    uint8_t *sc = (uint8_t *)w.sc + (size_t)dr * w.nbp * lsc_scb(w.type);
    uint8_t *sb = w.sb ? (uint8_t *)w.sb + (size_t)dr * (w.nbp / 8) * 4 : NULL;
    lsc_repack_block(w.type, src + (size_t)n * row_bytes + (size_t)blk * lsc_blk_bytes(w.type), blk, codes, hi, sc, sb);
}

/* ---- fast family helpers --------------------------------------------------------- */
__global__ void k_f2h(const float *__restrict__ x, int ldx, int n, __half *__restrict__ out) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[(size_t)r * n + i] = __float2half_rn(x[(size_t)r * ldx + i]);
}

__global__ void k_epilogue(const float *__restrict__ t, int N, float *__restrict__ y, int ldy, int mode) {
    lsc_pdl_trigger();
    lsc_pdl_wait();
    const int r = blockIdx.y;
    const int n_out = lsc_gated(mode) ? N / 2 : N;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_out; i += gridDim.x * blockDim.x) {
        float *yp = y + (size_t)r * ldy + i;
        const float *tr = t + (size_t)r * N;
        if (lsc_gated(mode)) {
            const int g = 2 * LSC_GU_CHUNK * (i / LSC_GU_CHUNK) + i % LSC_GU_CHUNK;
            *yp = lsc_glu(mode == LSC_MODE_GEGLU, tr[g], tr[g + LSC_GU_CHUNK]);
        } else {
            *yp = mode == LSC_MODE_ADD ? *yp + tr[i] : tr[i];
        }
    }
}

__global__ void k_gather(const float *__restrict__ x, int ld, const int32_t *__restrict__ idx, int n,
                         float *__restrict__ out) {
    const int r = blockIdx.x;
    lsc_pdl_trigger();
    lsc_pdl_wait();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[(size_t)r * n + i] = x[(size_t)idx[r] * ld + i];
}

/* bandwidth probe: every byte read once, 16 bytes per load */
__global__ void k_read(const uint4 *__restrict__ p, size_t n, unsigned *out) {
    uint4 a = make_uint4(0, 0, 0, 0);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldg(p + i);
        a.x ^= v.x;
        a.y ^= v.y;
        a.z ^= v.z;
        a.w ^= v.w;
    }
    if ((a.x ^ a.y ^ a.z ^ a.w) == 0x12345678u) out[blockIdx.x] = a.x; /* keeps the loads */
}

} /* namespace lsc */

using namespace lsc;

cudaError_t lsc_read_probe(const void *p, size_t bytes, unsigned *out, int blocks, lsc_stream s) {
    k_read<<<blocks, 512, 0, s>>>((const uint4 *)p, bytes / 16, out);
    return cudaGetLastError();
}

static size_t g_attn_smem_max = 48 * 1024;
static int g_sm_count; /* k_attn4's persistent grid: two blocks per multiprocessor */

cudaError_t lsc_gemv_float(const lsc_mat &w, const float *x, int ldx, int rows, float *y, int ldy, int mode,
                           lsc_stream s) {
    switch (w.type) {
    case LSC_F32: return gemv_f_t<LSC_F32>(w, x, ldx, rows, y, ldy, mode, s);
    case LSC_F16: return gemv_f_t<LSC_F16>(w, x, ldx, rows, y, ldy, mode, s);
    case LSC_BF16: return gemv_f_t<LSC_BF16>(w, x, ldx, rows, y, ldy, mode, s);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t lsc_repack(const lsc_mat &w, const uint8_t *src, int n_src, size_t row_bytes, int base, int chunk,
                       int cstride, lsc_stream s) {
    const int64_t n = (int64_t)n_src * (w.K / lsc_blk_elems(w.type));
    k_repack<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(w, src, n_src, row_bytes, base, chunk, cstride);
    return cudaGetLastError();
}

cudaError_t lsc_rmsnorm_quant(const float *x, int ldx, const int32_t *rowidx, const float *w, float eps, int rows,
                              int n, float *xn, int ldxn, int8_t *q, float2 *dxs, int xs, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    const size_t smem = (size_t)n * sizeof(float);
    if (smem > 160 * 1024) return cudaErrorInvalidValue;
    return lsc_launch(k_rmsnorm_quant, dim3(rows), dim3(1024), smem, s, x, ldx, rowidx, w, eps, n, xn, ldxn,
                      (n % 32) ? (int8_t *)NULL : q, dxs, xs);
}

cudaError_t lsc_ops_init(void) {
    cudaError_t e = cudaFuncSetAttribute(k_rmsnorm_quant, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(k_norm_add, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
}

cudaError_t lsc_quant(const float *x, int ldx, int rows, int n, int8_t *q, float2 *dxs, int xs, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    return lsc_launch(k_quant, dim3((n / 32 + 7) / 8, rows), dim3(256), 0, s, x, ldx, n, q, dxs, xs);
}

cudaError_t lsc_glu(const float *g, const float *u, int ld, int rows, int n, float *out, int ldo, int mode,
                    lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    dim3 grid((n + 255) / 256 < 64 ? (n + 255) / 256 : 64, rows);
    return lsc_launch(k_glu, grid, dim3(256), 0, s, g, u, ld, n, out, ldo, mode == LSC_MODE_GEGLU ? 1 : 0);
}

cudaError_t lsc_norm_add(const float *t, int ldt, const float *w, float eps, int rows, int n, float *x, int ldx,
                         lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    const size_t smem = (size_t)n * sizeof(float);
    if (smem > 160 * 1024) return cudaErrorInvalidValue;
    return lsc_launch(k_norm_add, dim3(rows), dim3(256), smem, s, t, ldt, w, eps, n, x, ldx);
}

cudaError_t lsc_rope_kv(float *qkv, int ldq, int rows, int n_head, int n_kv, int D, int rope_dim, int neox,
                        const float *cs, const float *sn, lsc_kvargs kv, lsc_qkpre pre, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    const int thr = D / 2 < 32 ? 32 : ((D / 2 + 31) / 32) * 32;
    const size_t smem = pre.bqkv || pre.qn ? (size_t)D * sizeof(float) : 0;
    if (smem > 48 * 1024) return cudaErrorInvalidValue;
    return lsc_launch(k_rope_kv, dim3(rows, n_head + n_kv), dim3(thr > 256 ? 256 : thr), smem, s, qkv, ldq, n_head, n_kv,
                      D, rope_dim, neox, cs, sn, kv, pre);
}

static bool attn_ring(int n_head, int n_kv, int D) { return D % 16 == 0 && (n_head / n_kv) * D <= 1024; }

size_t lsc_attn_smem(int n_head, int n_kv, int D, int max_keys) {
    const int nq = n_head / n_kv;
    const AttnLayout L = attn_layout(max_keys);
    const size_t ring = attn_ring(n_head, n_kv, D) ? (size_t)ATT_ST * ATT_CH * D : 0;
    return sizeof(float) * (ring + (size_t)nq * D + (size_t)nq * L.nka + (size_t)nq * L.nca + 2 * (size_t)nq);
}

cudaError_t lsc_attn_init(size_t max_smem, int sm_count) {
    g_attn_smem_max = max_smem;
    g_sm_count = sm_count;
    cudaError_t e = cudaFuncSetAttribute(k_attn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem);
    if (e != cudaSuccess) return e;
    if ((e = cudaFuncSetAttribute(k_attn4<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem)) != cudaSuccess ||
        (e = cudaFuncSetAttribute(k_attn4<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem)) != cudaSuccess)
        return e;
    return cudaFuncSetAttribute(k_attn2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem);
}

cudaError_t lsc_attention(const float *qkv, int ldq, int rows, int n_head, int n_kv, int D, float scale, int window,
                          lsc_kvargs kv, int max_keys, float *out, int8_t *q, float2 *dxs, int xs, float *scratch,
                          size_t scratch_floats, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    const int nq = n_head / n_kv;
    if (s.attn_mr && window == 0 && (D == 64 || D == 128) && nq <= A4_RH && rows >= 16 && scratch) { /* k_attn4, in launches whose score slabs fit the scratch */
        const int qb = A4_RH / nq, nbx = (rows + qb - 1) / qb, nkp = (max_keys + A4_CH - 1) / A4_CH * A4_CH;
        const size_t slab = (size_t)A4_RH * nkp, sm4 = a4_layout(D, max_keys).total * sizeof(float);
        const size_t fit = scratch_floats / slab, nwork = (size_t)nbx * n_kv;
        if (fit >= 1 && sm4 <= g_attn_smem_max) {
            /* persistent blocks: at most two per multiprocessor, each with its own slab */
            size_t nblk = nwork < fit ? nwork : fit;
            if (g_sm_count > 0 && nblk > (size_t)2 * g_sm_count) nblk = (size_t)2 * g_sm_count;
            if (s.attn_mr == 3 && nblk > 3) nblk = 3; /* tests: several work items a block */
            cudaError_t e = lsc_launch(D == 64 ? k_attn4<64> : k_attn4<128>, dim3((unsigned)nblk), dim3(A4_THR), sm4, s,
                                       qkv, ldq, 0, rows, qb, n_head, n_kv, scale, kv, out, scratch, nkp, max_keys);
            if (e != cudaSuccess) return e;
            return q ? lsc_quant(out, n_head * D, rows, n_head * D, q, dxs, xs, s) : cudaSuccess;
        }
    }
    const size_t smem = lsc_attn_smem(n_head, n_kv, D, max_keys);
    if (smem > g_attn_smem_max) return cudaErrorInvalidValue;
    const bool ring = attn_ring(n_head, n_kv, D);
    const int thr = nq * D <= 1024 ? ((nq * D + 31) / 32) * 32 : 1024;
    /* fused quantization: every warp holds 32 consecutive outputs of one unit */
    const bool fuse = q && D % 32 == 0 && (ring || thr == nq * D);
    dim3 grid(rows, n_kv);
    cudaError_t e = lsc_launch(ring ? k_attn2 : k_attn, grid, dim3(ring && thr < 128 ? 128 : thr), smem, s, qkv, ldq,
                               n_head, n_kv, D, scale, window, kv, max_keys, out, fuse ? q : (int8_t *)NULL, dxs, xs);
    if (e != cudaSuccess || !q || fuse) return e;
    return lsc_quant(out, n_head * D, rows, n_head * D, q, dxs, xs, s);
}

cudaError_t lsc_f2h(const float *x, int ldx, int rows, int n, void *out_half, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    dim3 grid((n + 255) / 256 < 64 ? (n + 255) / 256 : 64, rows);
    return lsc_launch(k_f2h, grid, dim3(256), 0, s, x, ldx, n, (__half *)out_half);
}

cudaError_t lsc_epilogue(const float *t, int N, int rows, float *y, int ldy, int mode, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    const int n_out = lsc_gated(mode) ? N / 2 : N;
    dim3 grid((n_out + 255) / 256 < 128 ? (n_out + 255) / 256 : 128, rows);
    return lsc_launch(k_epilogue, grid, dim3(256), 0, s, t, N, y, ldy, mode);
}

cudaError_t lsc_gather(const float *x, int ld, const int32_t *idx, int rows, int n, float *out, lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    return lsc_launch(k_gather, dim3(rows), dim3(256), 0, s, x, ld, idx, n, out);
}
