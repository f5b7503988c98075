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

void ls_attn_head_avx2(const float *q, int64_t n_keys, const ls_kv_view *kv, int kv_off, int kv_stride,
                       int head_dim, float scale, float *out, float *scores) {
    for (int64_t j = 0; j < n_keys; j++)
        scores[j] = ls_y_dot16(q, ls_kv_krow(kv, kv_off, kv_stride, j), head_dim) * scale;
    float mx = scores[0];
    for (int64_t j = 1; j < n_keys; j++) mx = scores[j] > mx ? scores[j] : mx;
    __m256 vmx = _mm256_set1_ps(mx);
    int64_t j = 0;
    for (; j + 8 <= n_keys; j += 8)
        _mm256_storeu_ps(scores + j, ls_y_expf(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmx)));
    if (j < n_keys) {
        __m256i m = ls_y_lanemask(n_keys - j);
        _mm256_maskstore_ps(scores + j, m, ls_y_expf(_mm256_sub_ps(_mm256_maskload_ps(scores + j, m), vmx)));
    }
    float sum = 0.0f;
    for (int64_t c = 0; c < n_keys; c += LS_ATTN_CHUNK) {
        float part = 0.0f;
        int64_t e = c + LS_ATTN_CHUNK < n_keys ? c + LS_ATTN_CHUNK : n_keys;
        for (int64_t t = c; t < e; t++) part = part + scores[t];
        sum = sum + part;
    }
    float invs = 1.0f / sum;
    __m256 inv = _mm256_set1_ps(invs);
    int d0 = 0;
    for (; d0 + 32 <= head_dim; d0 += 32) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t jj = 0; jj < n_keys; jj++) {
            const float *vj = ls_kv_vrow(kv, kv_off, kv_stride, jj) + d0;
            __m256 p = _mm256_set1_ps(scores[jj]);
            for (int t = 0; t < 4; t++) acc[t] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * t), acc[t]);
        }
        for (int t = 0; t < 4; t++) _mm256_storeu_ps(out + d0 + 8 * t, _mm256_mul_ps(acc[t], inv));
    }
    if (d0 < head_dim) { /* remaining dims: the scalar sequence */
        for (int d = d0; d < head_dim; d++) out[d] = 0.0f;
        for (int64_t jj = 0; jj < n_keys; jj++) {
            const float *vj = ls_kv_vrow(kv, kv_off, kv_stride, jj);
            for (int d = d0; d < head_dim; d++) out[d] = fmaf(scores[jj], vj[d], out[d]);
        }
        for (int d = d0; d < head_dim; d++) out[d] = out[d] * invs;
    }
}
