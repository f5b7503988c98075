/* ops_avx512.c - per-row operations with AVX-512: the scalar recipes of
 * ops_scalar.c / mathfn.c, lane for lane (each lane performs the scalar
 * operation sequence of one element, so the bits are the same). */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/tree_avx512.h"

#define AI static inline __attribute__((always_inline))

/* ls_expf on 16 lanes (mathfn.c). */
AI __m512 ls_z_expf(__m512 x) {
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LS_EXP_HI), _CMP_GT_OQ);
    __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LS_EXP_LO), _CMP_LT_OQ);
    __m512 xc = _mm512_mask_mov_ps(x, nan | hi | lo, _mm512_setzero_ps());
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(LS_EXP_LOG2E)), magic), magic);
    __m512 s = _mm512_fmadd_ps(n, _mm512_set1_ps(-LS_EXP_L2U), xc);
    s = _mm512_fmadd_ps(n, _mm512_set1_ps(-LS_EXP_L2L), s);
    __m512 u = _mm512_set1_ps(LS_EXP_C5);
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(LS_EXP_C4));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(LS_EXP_C3));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(LS_EXP_C2));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(LS_EXP_C1));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(LS_EXP_C0));
    u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23)));
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23)));
    u = _mm512_mask_mov_ps(u, hi, _mm512_set1_ps(INFINITY));
    u = _mm512_mask_mov_ps(u, lo, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(u, nan, _mm512_add_ps(x, x));
}

AI __mmask16 ls_z_tailmask(int64_t r) { return (__mmask16)((1u << r) - 1); }

void ls_expf_n_avx512(const float *x, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, ls_z_expf(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = ls_z_tailmask(n - i);
        _mm512_mask_storeu_ps(out + i, m, ls_z_expf(_mm512_maskz_loadu_ps(m, x + i)));
    }
}


/* The float dot product recipe (16 fma lanes, tree). */
AI float ls_z_dot16(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) {
        __mmask16 m = ls_z_tailmask(n - k);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc, m);
    }
    return ls_z_tree16(acc);
}

void ls_rmsnorm_row_avx512(const float *x, const float *w, float eps, int64_t n, float *out) {
    float ss = ls_z_dot16(x, x, n);
    float mean = ss / (float)n;
    float scale = 1.0f / sqrtf(mean + eps);
    __m512 sc = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), sc), _mm512_loadu_ps(w + i)));
    if (i < n) {
        __mmask16 m = ls_z_tailmask(n - i);
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sc), _mm512_maskz_loadu_ps(m, w + i)));
    }
}

AI __m512 ls_z_swiglu(__m512 g, __m512 u) {
    __m512 ng = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)0x80000000)));
    __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), ls_z_expf(ng)));
    return _mm512_mul_ps(silu, u);
}

void ls_swiglu_row_avx512(const float *g, const float *u, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, ls_z_swiglu(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = ls_z_tailmask(n - i);
        _mm512_mask_storeu_ps(out + i, m, ls_z_swiglu(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* x0' = fma(x0, c, -(x1*s)), x1' = fma(x0, s, x1*c) */
AI void ls_z_rot(__m512 x0, __m512 x1, __m512 c, __m512 s, __m512 *o0, __m512 *o1) {
    __m512 t = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(x1, s)), _mm512_set1_epi32((int)0x80000000)));
    *o0 = _mm512_fmadd_ps(x0, c, t);
    *o1 = _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c));
}

void ls_rope_row_avx512(float *x, int n_heads, int head_stride, int head_dim, bool neox, const float *cs,
                        const float *sn) {
    int half = head_dim / 2;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_stride;
        int i = 0;
        for (; i + 16 <= half; i += 16) {
            __m512 c = _mm512_loadu_ps(cs + i), s = _mm512_loadu_ps(sn + i), x0, x1, o0, o1;
            if (neox) {
                x0 = _mm512_loadu_ps(xh + i);
                x1 = _mm512_loadu_ps(xh + i + half);
            } else {
                __m512 a = _mm512_loadu_ps(xh + 2 * i), b = _mm512_loadu_ps(xh + 2 * i + 16);
                x0 = _mm512_permutex2var_ps(a, ev, b);
                x1 = _mm512_permutex2var_ps(a, od, b);
            }
            ls_z_rot(x0, x1, c, s, &o0, &o1);
            if (neox) {
                _mm512_storeu_ps(xh + i, o0);
                _mm512_storeu_ps(xh + i + half, o1);
            } else {
                _mm512_storeu_ps(xh + 2 * i, _mm512_permutex2var_ps(o0, lo, o1));
                _mm512_storeu_ps(xh + 2 * i + 16, _mm512_permutex2var_ps(o0, hi, o1));
            }
        }
        for (; i < half; i++) { /* same operations, one pair at a time */
            int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            float x0 = xh[i0], x1 = xh[i1], c = cs[i], s = sn[i];
            xh[i0] = fmaf(x0, c, -(x1 * s));
            xh[i1] = fmaf(x0, s, x1 * c);
        }
    }
}

/* The 16 partial-sum vectors of 16 keys' dot products with q (NQ vectors of 16 dims):
 * key jj's chain a = fma(q_t, k_jj,t, a) in t order, as ls_z_dot16 forms it; the 16
 * chains side by side (t outer), so the FMA's latency is hidden where one key's chain at a
 * time (a loop of runtime length) waited on it. */
AI void ls_z_qk16(const int NQ, const __m512 *qv, const float *kb, int kv_stride, __m512 *acc) {
#pragma GCC unroll 16
    for (int jj = 0; jj < 16; jj++) acc[jj] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int t = 0; t < NQ; t++)
#pragma GCC unroll 16
        for (int jj = 0; jj < 16; jj++)
            acc[jj] = _mm512_fmadd_ps(qv[t], _mm512_loadu_ps(kb + (int64_t)jj * kv_stride + 16 * t), acc[jj]);
}

/* out[d0 .. d0 + nd) of one head, nd <= 16 NA: each dim's chain fma(p_j, v_j[d], acc) over
 * the keys in order, a KV block at a time, times inv.  NA chains side by side, NA a
 * constant and no branch in the key loop, so the accumulators live in registers (with an
 * "if (mask)" per vector GCC kept them on the stack: a load, an FMA and a store per key);
 * up to 8: each chain is bound by the FMA's latency, 8 keep both FMA units busy.  A lane
 * past nd loads +0 and is never stored.  Every dim's chain, and so its bits, is the same at
 * any NA. */
AI void ls_z_pv_pass(const int NA, const float *scores, int64_t k0, int64_t n_keys, const ls_kv_view *kv,
                     int kv_off, int kv_stride, int d0, int nd, __m512 inv, float *out) {
    __mmask16 mk[8];
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) {
        const int r = nd - 16 * t;
        mk[t] = r >= 16 ? 0xFFFF : ls_z_tailmask(r);
        acc[t] = _mm512_setzero_ps();
    }
    const int64_t bs = (int64_t)1 << kv->block_shift;
    for (int64_t b0 = k0, e; b0 < n_keys; b0 = e) { /* key order, a block at a time */
        const float *vb = ls_kv_vrow(kv, kv_off, kv_stride, b0) + d0;
        e = (b0 | (bs - 1)) + 1;
        if (e > n_keys) e = n_keys;
        for (int64_t jj = b0; jj < e; jj++) {
            const float *vj = vb + (jj - b0) * kv_stride;
            const __m512 p = _mm512_set1_ps(scores[jj - k0]);
#pragma GCC unroll 8
            for (int t = 0; t < NA; t++) acc[t] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(mk[t], vj + 16 * t), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NA; t++) _mm512_mask_storeu_ps(out + d0 + 16 * t, mk[t], _mm512_mul_ps(acc[t], inv));
}

void ls_attn_head_avx512(const float *q, int64_t k0, int64_t n_keys, const ls_kv_view *kv, int kv_off,
                         int kv_stride, int head_dim, float scale, float *out, float *scores) {
    const int64_t n = n_keys - k0; /* keys k0..n_keys-1, key k0 + j in scores[j] */
    /* Scores key by key up to a multiple of 16, then 16 keys at a time (their trees batched:
     * the same bits as one by one), then the last < 16. */
    int64_t ja = (k0 + 15) & ~(int64_t)15, jb = ja;
    if (ja > n_keys) ja = jb = n_keys;
    for (int64_t j = k0; j < ja; j++)
        scores[j - k0] = ls_z_dot16(q, ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
    if (head_dim % 16 == 0 && head_dim <= 256) {
        __m512 qv[16];
        int nq = head_dim / 16;
        for (int t = 0; t < nq; t++) qv[t] = _mm512_loadu_ps(q + 16 * t);
        const __m512 vsc = _mm512_set1_ps(scale);
        for (; jb + 16 <= n_keys; jb += 16) {
            const float *kb = ls_kv_krow(kv, kv_off, kv_stride, jb); /* 16 keys from a multiple of 16 never straddle a block */
            __m512 acc[16];
            switch (nq) { /* the common head sizes with a constant count: 16 chains side by side */
            case 4: ls_z_qk16(4, qv, kb, kv_stride, acc); break;
            case 8: ls_z_qk16(8, qv, kb, kv_stride, acc); break;
            case 16: ls_z_qk16(16, qv, kb, kv_stride, acc); break;
            default: ls_z_qk16(nq, qv, kb, kv_stride, acc); break; /* the same chains, a runtime count */
            }
            _mm512_storeu_ps(scores + (jb - k0), _mm512_mul_ps(ls_z_tree16_x16(acc), vsc));
        }
    }
    for (int64_t j = jb; j < n_keys; j++)
        scores[j - k0] = ls_z_dot16(q, ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
    float mx = scores[0];
    for (int64_t j = 1; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
    __m512 vmx = _mm512_set1_ps(mx);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(scores + j, ls_z_expf(_mm512_sub_ps(_mm512_loadu_ps(scores + j), vmx)));
    if (j < n) {
        __mmask16 m = ls_z_tailmask(n - j);
        _mm512_mask_storeu_ps(scores + j, m, ls_z_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), vmx)));
    }
    float sum = 0.0f;
    for (int64_t c = 0; c < n; c += LS_ATTN_CHUNK) {
        float part = 0.0f;
        int64_t e = c + LS_ATTN_CHUNK < n ? c + LS_ATTN_CHUNK : n;
        for (int64_t t = c; t < e; t++) part = part + scores[t];
        sum = sum + part;
    }
    __m512 inv = _mm512_set1_ps(1.0f / sum);
    /* up to 8 zmm of output dims a pass (ls_z_pv_pass) */
    for (int d0 = 0; d0 < head_dim; d0 += 128) {
        const int nd = head_dim - d0 < 128 ? head_dim - d0 : 128;
        switch ((nd + 15) / 16) {
        case 8: ls_z_pv_pass(8, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        case 7: ls_z_pv_pass(7, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        case 6: ls_z_pv_pass(6, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        case 5: ls_z_pv_pass(5, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        case 4: ls_z_pv_pass(4, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        case 3: ls_z_pv_pass(3, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        case 2: ls_z_pv_pass(2, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        default: ls_z_pv_pass(1, scores, k0, n_keys, kv, kv_off, kv_stride, d0, nd, inv, out); break;
        }
    }
}

/* Step 4 for nv vectors at once: vector v's sum over keys 0..nk[v]-1 in chunks of
 * LS_ATTN_CHUNK (part = +0, part += p_t in key order; sum = +0, sum += part in chunk
 * order), the nv sequential chains interleaved.  A vector takes part in chunk c only if
 * it has key c, and in key t only if t < nk[v].  Inlined with a constant nv. */
AI void ls_attn_chunk_sums(int nv, float *const *sc, const int64_t *nk, int64_t nmin, int64_t nmax, float *sum) {
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

/* A block of nr rows of one sequence (one kv view; row r at position pos[r]), each with
 * nh (<= LS_ATTN_HMAX) query heads sharing one kv head: nv = nr * nh <= LS_ATTN_VMAX
 * query vectors v = r * nh + h.  Each vector runs exactly ls_attn_head_avx512's
 * operation sequence over its own keys (0..pos[r], or the window's); what is shared is loads and latency:
 * every 16-key slice of K is loaded once for all vectors (it stays in L1 while they use
 * it), the vectors' chunk-sum chains are interleaved, and each row's v rows are loaded
 * once for its heads. */
void ls_attn_block_avx512(int nr, int nh, const float *q, int64_t row_stride, int q_stride, const int32_t *pos,
                          int32_t window, const ls_kv_view *kv, int kv_off, int kv_stride, int head_dim, float scale, float *out,
                          float *scores, size_t per) {
    const int nv = nr * nh;
    LS_ASSERT(nr >= 1 && nh >= 1 && nh <= LS_ATTN_HMAX && nv <= LS_ATTN_VMAX);
    LS_ASSERT(head_dim % 16 == 0 && head_dim <= 64); /* ls_attention sends other sizes to the per-head kernel */
    const int nq = head_dim / 16;
    const __m512 vsc = _mm512_set1_ps(scale);
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
    /* 1. scores: each 16-key slice (from a multiple of 16) for every vector that has all
     * 16 keys (the batched trees: same bits as ls_z_dot16), then each vector's other keys
     * (before its first slice, after its last) one by one */
    for (int64_t j0 = kmin & ~(int64_t)15; j0 + 16 <= emax; j0 += 16) {
        const float *kb = ls_kv_krow(kv, kv_off, kv_stride, j0); /* 16 keys never straddle a block */
        for (int v = 0; v < nv; v++) {
            if (j0 < k0[v] || j0 + 16 > end[v]) continue;
            __m512 acc[16];
            if (nq == 4) { /* head_dim 64: the same fma chain, unrolled */
                const __m512 q0 = _mm512_loadu_ps(qp[v]), q1 = _mm512_loadu_ps(qp[v] + 16),
                             q2 = _mm512_loadu_ps(qp[v] + 32), q3 = _mm512_loadu_ps(qp[v] + 48);
#pragma GCC unroll 16
                for (int jj = 0; jj < 16; jj++) {
                    const float *kj = kb + jj * kv_stride;
                    __m512 a = _mm512_fmadd_ps(q0, _mm512_loadu_ps(kj), _mm512_setzero_ps());
                    a = _mm512_fmadd_ps(q1, _mm512_loadu_ps(kj + 16), a);
                    a = _mm512_fmadd_ps(q2, _mm512_loadu_ps(kj + 32), a);
                    acc[jj] = _mm512_fmadd_ps(q3, _mm512_loadu_ps(kj + 48), a);
                }
            } else {
                __m512 qv[4];
                for (int t = 0; t < nq; t++) qv[t] = _mm512_loadu_ps(qp[v] + 16 * t);
#pragma GCC unroll 16
                for (int jj = 0; jj < 16; jj++) {
                    const float *kj = kb + jj * kv_stride;
                    __m512 a = _mm512_setzero_ps();
                    for (int t = 0; t < nq; t++) a = _mm512_fmadd_ps(qv[t], _mm512_loadu_ps(kj + 16 * t), a);
                    acc[jj] = a;
                }
            }
            _mm512_storeu_ps(sc[v] + (j0 - k0[v]), _mm512_mul_ps(ls_z_tree16_x16(acc), vsc));
        }
    }
    for (int v = 0; v < nv; v++) {
        float *sh = sc[v];
        const int64_t n = nk[v];
        int64_t ja = (k0[v] + 15) & ~(int64_t)15, jb = end[v] & ~(int64_t)15;
        if (ja >= jb) ja = jb = end[v]; /* no whole slice: every key one by one */
        for (int64_t j = k0[v]; j < ja; j++)
            sh[j - k0[v]] = ls_z_dot16(qp[v], ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
        for (int64_t j = jb; j < end[v]; j++)
            sh[j - k0[v]] = ls_z_dot16(qp[v], ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
        /* 2. mx: lane-wise max_ps(s, m) = s > m ? s : m, the scalar loop's step (a NaN
         * score is skipped; a NaN sh[0] stays), every lane seeded with sh[0].  It can
         * differ from the scalar loop only in the sign of a zero maximum, which
         * exp(s - mx) does not see (s - (+0) and s - (-0) differ only for s = -0, and
         * ls_expf(+-0) = 1).  3. p_j = exp(s_j - mx) in place. */
        __m512 vmx = _mm512_set1_ps(sh[0]);
        {
            int64_t j = 1;
            for (; j + 16 <= n; j += 16) vmx = _mm512_max_ps(_mm512_loadu_ps(sh + j), vmx);
            if (j < n) {
                __mmask16 m = ls_z_tailmask(n - j);
                vmx = _mm512_mask_max_ps(vmx, m, _mm512_maskz_loadu_ps(m, sh + j), vmx);
            }
            float lanes[16], mx = sh[0];
            _mm512_storeu_ps(lanes, vmx);
            for (int l = 0; l < 16; l++) mx = lanes[l] > mx ? lanes[l] : mx;
            vmx = _mm512_set1_ps(mx);
        }
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) _mm512_storeu_ps(sh + j, ls_z_expf(_mm512_sub_ps(_mm512_loadu_ps(sh + j), vmx)));
        if (j < n) {
            __mmask16 m = ls_z_tailmask(n - j);
            _mm512_mask_storeu_ps(sh + j, m, ls_z_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sh + j), vmx)));
        }
    }
    /* 4. each vector's sum in chunks of LS_ATTN_CHUNK keys; the nv chains interleaved */
    float sum[LS_ATTN_VMAX];
    switch (nv) { /* a constant count keeps the partial sums in registers */
#define LS_ATTN_SUMS_CASE(n) \
    case n: ls_attn_chunk_sums(n, sc, nk, nmin, nmax, sum); break;
        LS_ATTN_SUMS_CASE(1) LS_ATTN_SUMS_CASE(2) LS_ATTN_SUMS_CASE(3) LS_ATTN_SUMS_CASE(4)
        LS_ATTN_SUMS_CASE(5) LS_ATTN_SUMS_CASE(6) LS_ATTN_SUMS_CASE(7) LS_ATTN_SUMS_CASE(8)
        LS_ATTN_SUMS_CASE(9) LS_ATTN_SUMS_CASE(10) LS_ATTN_SUMS_CASE(11) LS_ATTN_SUMS_CASE(12)
#undef LS_ATTN_SUMS_CASE
    default: LS_ASSERT(0);
    }
    /* 5, 6. p.v in key order, one row (its nh heads, same keys) at a time */
    const int nd = head_dim / 16;
    const int64_t bs = (int64_t)1 << kv->block_shift;
    for (int r = 0; r < nr; r++) {
        const int64_t n = end[r * nh], kr = k0[r * nh];
        float *const *sr = sc + r * nh;
        __m512 acc[LS_ATTN_HMAX][4];
        for (int h = 0; h < LS_ATTN_HMAX; h++)
            for (int t = 0; t < 4; t++) acc[h][t] = _mm512_setzero_ps();
        for (int64_t b0 = kr, e; b0 < n; b0 = e) { /* key order, a block at a time */
            const float *vb = ls_kv_vrow(kv, kv_off, kv_stride, b0);
            e = (b0 | (bs - 1)) + 1;
            if (e > n) e = n;
            for (int64_t jj = b0; jj < e; jj++) {
                const float *vj = vb + (jj - b0) * kv_stride;
                __m512 vv[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    if (t < nd) vv[t] = _mm512_loadu_ps(vj + 16 * t);
#pragma GCC unroll 4
                for (int h = 0; h < LS_ATTN_HMAX; h++) {
                    if (h >= nh) break;
                    __m512 p = _mm512_set1_ps(sr[h][jj - kr]);
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++)
                        if (t < nd) acc[h][t] = _mm512_fmadd_ps(p, vv[t], acc[h][t]);
                }
            }
        }
        for (int h = 0; h < nh; h++) {
            __m512 inv = _mm512_set1_ps(1.0f / sum[r * nh + h]);
            float *o = out + r * row_stride + (int64_t)h * q_stride;
            for (int t = 0; t < nd; t++) _mm512_storeu_ps(o + 16 * t, _mm512_mul_ps(acc[h][t], inv));
        }
    }
}
