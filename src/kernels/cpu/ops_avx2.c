/* ops_avx2.c - per-row operations with AVX2/FMA: the scalar recipes lane for lane.
 * The 16-lane dot product recipe uses two ymm (lanes 0..7 and 8..15). */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/tree_avx2.h"

#define AI static inline __attribute__((always_inline))

AI __m256i ls_y_lanemask(int64_t cnt) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ls_expf on 8 lanes (mathfn.c). */
AI __m256 ls_y_expf(__m256 x) {
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 hi = _mm256_cmp_ps(x, _mm256_set1_ps(LS_EXP_HI), _CMP_GT_OQ);
    __m256 lo = _mm256_cmp_ps(x, _mm256_set1_ps(LS_EXP_LO), _CMP_LT_OQ);
    __m256 xc = _mm256_andnot_ps(_mm256_or_ps(nan, _mm256_or_ps(hi, lo)), x);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(LS_EXP_LOG2E)), magic), magic);
    __m256 s = _mm256_fmadd_ps(n, _mm256_set1_ps(-LS_EXP_L2U), xc);
    s = _mm256_fmadd_ps(n, _mm256_set1_ps(-LS_EXP_L2L), s);
    __m256 u = _mm256_set1_ps(LS_EXP_C5);
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(LS_EXP_C4));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(LS_EXP_C3));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(LS_EXP_C2));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(LS_EXP_C1));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(LS_EXP_C0));
    u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
    u = _mm256_blendv_ps(u, _mm256_set1_ps(INFINITY), hi);
    u = _mm256_andnot_ps(lo, u);
    return _mm256_blendv_ps(u, _mm256_add_ps(x, x), nan);
}

void ls_expf_n_avx2(const float *x, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, ls_y_expf(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i m = ls_y_lanemask(n - i);
        _mm256_maskstore_ps(out + i, m, ls_y_expf(_mm256_maskload_ps(x + i, m)));
    }
}


AI float ls_y_dot16(const float *a, const float *b, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), a1);
    }
    if (k < n) {
        int64_t r = n - k, c0 = r < 8 ? r : 8, c1 = r - c0;
        __m256i m0 = ls_y_lanemask(c0), m1 = ls_y_lanemask(c1);
        __m256 f0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + k, m0), _mm256_maskload_ps(b + k, m0), a0);
        __m256 f1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + k + 8, m1), _mm256_maskload_ps(b + k + 8, m1), a1);
        a0 = _mm256_blendv_ps(a0, f0, _mm256_castsi256_ps(m0));
        a1 = _mm256_blendv_ps(a1, f1, _mm256_castsi256_ps(m1));
    }
    return ls_y_tree16(a0, a1);
}

void ls_rmsnorm_row_avx2(const float *x, const float *w, float eps, int64_t n, float *out) {
    float ss = ls_y_dot16(x, x, n);
    float mean = ss / (float)n;
    float scale = 1.0f / sqrtf(mean + eps);
    __m256 sc = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sc), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

AI __m256 ls_y_swiglu(__m256 g, __m256 u) {
    __m256 ng = _mm256_xor_ps(g, _mm256_set1_ps(-0.0f));
    __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), ls_y_expf(ng)));
    return _mm256_mul_ps(silu, u);
}

void ls_swiglu_row_avx2(const float *g, const float *u, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, ls_y_swiglu(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        __m256i m = ls_y_lanemask(n - i);
        _mm256_maskstore_ps(out + i, m, ls_y_swiglu(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
    }
}

void ls_rope_row_avx2(float *x, int n_heads, int head_stride, int head_dim, bool neox, const float *cs,
                      const float *sn) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_stride;
        int i = 0;
        if (neox)
            for (; i + 8 <= half; i += 8) {
                __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
                __m256 x0 = _mm256_loadu_ps(xh + i), x1 = _mm256_loadu_ps(xh + i + half);
                __m256 t = _mm256_xor_ps(_mm256_mul_ps(x1, s), _mm256_set1_ps(-0.0f));
                _mm256_storeu_ps(xh + i, _mm256_fmadd_ps(x0, c, t));
                _mm256_storeu_ps(xh + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
            }
        for (; i < half; i++) { /* same operations, one pair at a time */
            int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            float x0 = xh[i0], x1 = xh[i1], c = cs[i], s = sn[i];
            xh[i0] = fmaf(x0, c, -(x1 * s));
            xh[i1] = fmaf(x0, s, x1 * c);
        }
    }
}

/* out[d0 .. d0 + 8 NA) of one head: each dim's chain fma(p_j, v_j[d], acc) over the keys
 * in order, times inv.  NA chains side by side: the FMA's latency, not its throughput,
 * bounds one chain, so 8 (64 dims per pass over the keys) keep both FMA units busy where 4
 * left half idle (each dim's chain, and so its bits, is the same at any NA). */
AI void ls_y_pv_dims(const int NA, const float *scores, int64_t n, int64_t k0, const ls_kv_view *kv, int kv_off,
                     int kv_stride, int d0, __m256 inv, float *out) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t jj = 0; jj < n; jj++) {
        const float *vj = ls_kv_vrow(kv, kv_off, kv_stride, k0 + jj) + d0;
        __m256 p = _mm256_set1_ps(scores[jj]);
#pragma GCC unroll 8
        for (int t = 0; t < NA; t++) acc[t] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * t), acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) _mm256_storeu_ps(out + d0 + 8 * t, _mm256_mul_ps(acc[t], inv));
}

/* ls_y_tree16 of 8 keys at once: lane j of the result is the tree over a0[j]:a1[j]. */
AI __m256 ls_y_tree16_x8(const __m256 *a0, const __m256 *a1) {
    __m256 l1[8], l2[4];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) l1[j] = ls_y_pairs_add(a0[j], a1[j]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) l2[j] = ls_y_pairs_add(l1[2 * j], l1[2 * j + 1]);
    return ls_y_pairs_add(ls_y_pairs_add(l2[0], l2[1]), ls_y_pairs_add(l2[2], l2[3]));
}

/* s = dot16(q, k_j) * scale for the 8 keys j0..j0+7 (one KV block holds them all), their
 * 16 recipe lanes as ls_y_dot16 runs them (x0: elements 16 t + 0..7, x1: 16 t + 8..15, in
 * increasing t), 4 keys' chains side by side (8 chains: the FMA's latency hidden), then the
 * 8 trees together (ls_y_tree16_x8: the same adjacent pairs). */
AI void ls_y_qk8(const float *q, const float *kb, int kv_stride, int nq, float scale, float *s) {
    __m256 a0[8], a1[8];
    for (int h = 0; h < 8; h += 4) {
        __m256 x0[4], x1[4];
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; jj++) x0[jj] = x1[jj] = _mm256_setzero_ps();
        for (int t = 0; t < nq; t++) {
            const __m256 q0 = _mm256_loadu_ps(q + 16 * t), q1 = _mm256_loadu_ps(q + 16 * t + 8);
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++) {
                const float *kj = kb + (int64_t)(h + jj) * kv_stride + 16 * t;
                x0[jj] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kj), x0[jj]);
                x1[jj] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kj + 8), x1[jj]);
            }
        }
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; jj++) {
            a0[h + jj] = x0[jj];
            a1[h + jj] = x1[jj];
        }
    }
    _mm256_storeu_ps(s, _mm256_mul_ps(ls_y_tree16_x8(a0, a1), _mm256_set1_ps(scale)));
}

void ls_attn_head_avx2(const float *q, int64_t k0, int64_t n_keys, const ls_kv_view *kv, int kv_off, int kv_stride,
                       int head_dim, float scale, float *out, float *scores) {
    const int64_t n = n_keys - k0; /* keys k0..n_keys-1, key k0 + j in scores[j] */
    /* 1. scores: 8-key slices from a multiple of 8 (never straddling a KV block: blocks are
     * >= 16 keys) where head_dim is a multiple of 16, the other keys one by one */
    int64_t ja = (k0 + 7) & ~(int64_t)7, jb = n_keys & ~(int64_t)7;
    if (head_dim % 16 || ja >= jb) ja = jb = n_keys;
    for (int64_t j = k0; j < ja; j++)
        scores[j - k0] = ls_y_dot16(q, ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
    for (int64_t j0 = ja; j0 < jb; j0 += 8)
        ls_y_qk8(q, ls_kv_krow(kv, kv_off, kv_stride, j0), kv_stride, head_dim / 16, scale, scores + (j0 - k0));
    for (int64_t j = jb; j < n_keys; j++)
        scores[j - k0] = ls_y_dot16(q, ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
    float mx = scores[0];
    for (int64_t j = 1; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
    __m256 vmx = _mm256_set1_ps(mx);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(scores + j, ls_y_expf(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmx)));
    if (j < n) {
        __m256i m = ls_y_lanemask(n - j);
        _mm256_maskstore_ps(scores + j, m, ls_y_expf(_mm256_sub_ps(_mm256_maskload_ps(scores + j, m), vmx)));
    }
    float sum = 0.0f;
    for (int64_t c = 0; c < n; c += LS_ATTN_CHUNK) {
        float part = 0.0f;
        int64_t e = c + LS_ATTN_CHUNK < n ? c + LS_ATTN_CHUNK : n;
        for (int64_t t = c; t < e; t++) part = part + scores[t];
        sum = sum + part;
    }
    float invs = 1.0f / sum;
    __m256 inv = _mm256_set1_ps(invs);
    int d0 = 0;
    for (; d0 + 64 <= head_dim; d0 += 64) ls_y_pv_dims(8, scores, n, k0, kv, kv_off, kv_stride, d0, inv, out);
    for (; d0 + 32 <= head_dim; d0 += 32) ls_y_pv_dims(4, scores, n, k0, kv, kv_off, kv_stride, d0, inv, out);
    if (d0 < head_dim) { /* remaining dims: the scalar sequence */
        for (int d = d0; d < head_dim; d++) out[d] = 0.0f;
        for (int64_t jj = 0; jj < n; jj++) {
            const float *vj = ls_kv_vrow(kv, kv_off, kv_stride, k0 + jj);
            for (int d = d0; d < head_dim; d++) out[d] = fmaf(scores[jj], vj[d], out[d]);
        }
        for (int d = d0; d < head_dim; d++) out[d] = out[d] * invs;
    }
}

/* ---- attention for a block of rows x heads (ls_kvtab.attn_block; as ls_attn_block_avx512)
 * nv = nr * nh query vectors v = r * nh + h (row r at pos[r], head h of one kv head), each
 * running exactly ls_attn_head_avx2's operation sequence over its own keys (0..pos[r], or
 * the window's: ls_attn_first(pos[r], window)..pos[r], as if they were keys 0..n-1).
 * What is shared: every 8-key slice of K is loaded once for all vectors (it stays in L1),
 * and its 8 dot16 trees are formed together (ls_y_tree16_x8: the same adjacent pairs, 15
 * pair steps for 8 keys instead of 32); the vectors' chunk-sum chains are interleaved; a
 * row's V rows are loaded once for its heads, 16 dims at a time (2 fma chains per head). */

/* Step 4 for nv vectors at once (ls_attn_chunk_sums in ops_avx512.c): vector v's sum over
 * keys 0..nk[v]-1 in chunks of LS_ATTN_CHUNK, the nv sequential chains interleaved. */
AI void ls_y_chunk_sums(int nv, float *const *sc, const int64_t *nk, int64_t nmin, int64_t nmax, float *sum) {
    float s[LS_ATTN_VMAX], part[LS_ATTN_VMAX];
    for (int v = 0; v < nv; v++) s[v] = 0.0f;
    for (int64_t c = 0; c < nmax; c += LS_ATTN_CHUNK) {
        for (int v = 0; v < nv; v++) part[v] = 0.0f;
        int64_t e = c + LS_ATTN_CHUNK < nmax ? c + LS_ATTN_CHUNK : nmax, ec = e < nmin ? e : nmin, t = c;
        for (; t < ec; t++)
#pragma GCC unroll 12
            for (int v = 0; v < nv; v++) part[v] = part[v] + sc[v][t];
        for (; t < e; t++)
            for (int v = 0; v < nv; v++)
                if (t < nk[v]) part[v] = part[v] + sc[v][t];
        for (int v = 0; v < nv; v++)
            if (c < nk[v]) s[v] = s[v] + part[v];
    }
    for (int v = 0; v < nv; v++) sum[v] = s[v];
}

void ls_attn_block_avx2(int nr, int nh, const float *q, int64_t row_stride, int q_stride, const int32_t *pos,
                        int32_t window, const ls_kv_view *kv, int kv_off, int kv_stride, int head_dim, float scale, float *out,
                        float *scores, size_t per) {
    const int nv = nr * nh;
    LS_ASSERT(nr >= 1 && nh >= 1 && nh <= LS_ATTN_HMAX && nv <= LS_ATTN_VMAX);
    LS_ASSERT(head_dim % 16 == 0 && head_dim <= 64); /* ls_attention sends other sizes to the per-head kernel */
    const int nq = head_dim / 16;
    const __m256 vsc = _mm256_set1_ps(scale);
    float *sc[LS_ATTN_VMAX];
    const float *qp[LS_ATTN_VMAX];
    /* vector v reads keys k0[v]..end[v]-1, nk[v] = end[v] - k0[v] of them, key k0[v] + j
     * in sc[v][j] */
    int64_t k0[LS_ATTN_VMAX], end[LS_ATTN_VMAX], nk[LS_ATTN_VMAX], nmax = 0, nmin = INT64_MAX, emax = 0,
        kmin = INT64_MAX;
    for (int v = 0; v < nv; v++) {
        sc[v] = scores + (size_t)v * per;
        qp[v] = q + (v / nh) * row_stride + (int64_t)(v % nh) * q_stride;
        end[v] = (int64_t)pos[v / nh] + 1;
        k0[v] = ls_attn_first(pos[v / nh], window);
        nk[v] = end[v] - k0[v];
        nmax = nk[v] > nmax ? nk[v] : nmax;
        nmin = nk[v] < nmin ? nk[v] : nmin;
        emax = end[v] > emax ? end[v] : emax;
        kmin = k0[v] < kmin ? k0[v] : kmin;
    }
    /* 1. scores: each 8-key slice (from a multiple of 8; never straddling a KV block:
     * blocks are >= 16 keys) for every vector that has all 8 keys, then each vector's
     * other keys (before its first slice, after its last) one by one */
    for (int64_t j0 = kmin & ~(int64_t)7; j0 + 8 <= emax; j0 += 8) {
        const float *kb = ls_kv_krow(kv, kv_off, kv_stride, j0);
        for (int v = 0; v < nv; v++) {
            if (j0 < k0[v] || j0 + 8 > end[v]) continue;
            __m256 qv[8];
            for (int t = 0; t < 2 * nq; t++) qv[t] = _mm256_loadu_ps(qp[v] + 8 * t);
            __m256 a0[8], a1[8];
#pragma GCC unroll 8
            for (int jj = 0; jj < 8; jj++) {
                const float *kj = kb + jj * kv_stride;
                __m256 x0 = _mm256_setzero_ps(), x1 = _mm256_setzero_ps();
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    if (t >= nq) break;
                    x0 = _mm256_fmadd_ps(qv[2 * t], _mm256_loadu_ps(kj + 16 * t), x0);
                    x1 = _mm256_fmadd_ps(qv[2 * t + 1], _mm256_loadu_ps(kj + 16 * t + 8), x1);
                }
                a0[jj] = x0;
                a1[jj] = x1;
            }
            _mm256_storeu_ps(sc[v] + (j0 - k0[v]), _mm256_mul_ps(ls_y_tree16_x8(a0, a1), vsc));
        }
    }
    for (int v = 0; v < nv; v++) {
        float *sh = sc[v];
        const int64_t n = nk[v];
        int64_t ja = (k0[v] + 7) & ~(int64_t)7, jb = end[v] & ~(int64_t)7;
        if (ja >= jb) ja = jb = end[v]; /* no whole slice: every key one by one */
        for (int64_t j = k0[v]; j < ja; j++)
            sh[j - k0[v]] = ls_y_dot16(qp[v], ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
        for (int64_t j = jb; j < end[v]; j++)
            sh[j - k0[v]] = ls_y_dot16(qp[v], ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
        /* 2. mx: the scalar loop; 3. p_j = exp(s_j - mx) in place */
        float mx = sh[0];
        for (int64_t j = 1; j < n; j++) mx = sh[j] > mx ? sh[j] : mx;
        const __m256 vmx = _mm256_set1_ps(mx);
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) _mm256_storeu_ps(sh + j, ls_y_expf(_mm256_sub_ps(_mm256_loadu_ps(sh + j), vmx)));
        if (j < n) {
            __m256i m = ls_y_lanemask(n - j);
            _mm256_maskstore_ps(sh + j, m, ls_y_expf(_mm256_sub_ps(_mm256_maskload_ps(sh + j, m), vmx)));
        }
    }
    /* 4. each vector's sum in chunks of LS_ATTN_CHUNK keys */
    float sum[LS_ATTN_VMAX];
    switch (nv) { /* a constant count keeps the partial sums in registers */
#define LS_Y_SUMS_CASE(n) \
    case n: ls_y_chunk_sums(n, sc, nk, nmin, nmax, sum); break;
        LS_Y_SUMS_CASE(1) LS_Y_SUMS_CASE(2) LS_Y_SUMS_CASE(3) LS_Y_SUMS_CASE(4)
        LS_Y_SUMS_CASE(5) LS_Y_SUMS_CASE(6) LS_Y_SUMS_CASE(7) LS_Y_SUMS_CASE(8)
        LS_Y_SUMS_CASE(9) LS_Y_SUMS_CASE(10) LS_Y_SUMS_CASE(11) LS_Y_SUMS_CASE(12)
#undef LS_Y_SUMS_CASE
    default: LS_ASSERT(0);
    }
    /* 5, 6. p.v in key order, one row (its nh heads, same keys) and 16 dims at a time */
    const int64_t bs = (int64_t)1 << kv->block_shift;
    for (int r = 0; r < nr; r++) {
        const int64_t n = end[r * nh], kr = k0[r * nh];
        float *const *sr = sc + r * nh;
        for (int d0 = 0; d0 < head_dim; d0 += 16) {
            __m256 acc[LS_ATTN_HMAX][2];
            for (int h = 0; h < LS_ATTN_HMAX; h++) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
            for (int64_t b0 = kr, e; b0 < n; b0 = e) { /* key order, a block at a time */
                const float *vb = ls_kv_vrow(kv, kv_off, kv_stride, b0) + d0;
                e = (b0 | (bs - 1)) + 1;
                if (e > n) e = n;
                for (int64_t jj = b0; jj < e; jj++) {
                    const float *vj = vb + (jj - b0) * kv_stride;
                    const __m256 v0 = _mm256_loadu_ps(vj), v1 = _mm256_loadu_ps(vj + 8);
#pragma GCC unroll 4
                    for (int h = 0; h < LS_ATTN_HMAX; h++) {
                        if (h >= nh) break;
                        const __m256 p = _mm256_broadcast_ss(sr[h] + (jj - kr));
                        acc[h][0] = _mm256_fmadd_ps(p, v0, acc[h][0]);
                        acc[h][1] = _mm256_fmadd_ps(p, v1, acc[h][1]);
                    }
                }
            }
            for (int h = 0; h < nh; h++) {
                const __m256 inv = _mm256_set1_ps(1.0f / sum[r * nh + h]);
                float *o = out + r * row_stride + (int64_t)h * q_stride + d0;
                _mm256_storeu_ps(o, _mm256_mul_ps(acc[h][0], inv));
                _mm256_storeu_ps(o + 8, _mm256_mul_ps(acc[h][1], inv));
            }
        }
    }
}
