/* matmul_avx2.c - the canonical matmul recipe with AVX2 + FMA + F16C.
 *
 * Same record layout as the AVX-512 kernel; a group of 16 units is processed as
 * two halves of 8 lanes (one ymm of int32 lanes each).  Unit b = 16G + 8h + l
 * lands in recipe group g = b mod 32, i.e. accumulator S[(2G + h) mod 4], lane l.
 * Integer dot products use vpmaddubsw (u8 x s8 -> s16 pairs) and vpmaddwd with
 * ones; the number of s16 products summed before widening is chosen per type so
 * that no s16 sum can saturate (bounds beside LS_Y_PAIRS), so isum is exact. */
#include <immintrin.h>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/tree_avx2.h"

#define AI static inline __attribute__((always_inline))

typedef struct {
    __m256i w[8];
    __m256 f0, f1;
    __m256i i0, i1;
} ls_yw;

/* Slots summed in s16 before vpmaddwd: |u| * 127 * 2 per vpmaddubsw lane.
 * NIB u<=15: 3810*8 = 30480; MXFP4 u<=24: 6096*4; Q5 u<=31: 7874*4 = 31496;
 * Q6 u<=63: 16002*2; Q8 (|w|<=128 via vpsignb): 32512*1. */
AI int ls_y_pairs(const uint32_t type) {
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q4_1: case LS_TYPE_Q4_K: return 8;
    case LS_TYPE_MXFP4: case LS_TYPE_Q5_0: case LS_TYPE_Q5_1: case LS_TYPE_Q5_K: return 4;
    case LS_TYPE_Q6_K: return 2;
    default: return 1;
    }
}

AI __m256i ls_y_lanemask(int cnt) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
AI __m256i ls_y_ldb(bool full, __m256i lm, const void *p) {
    return full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskload_epi32((const int *)p, lm);
}
AI __m256 ls_y_ldf(bool full, __m256i lm, const float *p) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lm);
}
AI __m256i ls_y_ldi(bool full, __m256i lm, const int32_t *p) {
    return full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskload_epi32((const int *)p, lm);
}
AI __m256 ls_y_ldh(bool full, int cnt, const uint8_t *p) {
    if (full) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    uint8_t t[16] = {0};
    memcpy(t, p, (size_t)cnt * 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}
AI __m256i ls_y_ldu8(bool full, int cnt, const uint8_t *p) {
    uint8_t t[16] = {0};
    memcpy(t, p, full ? 8 : (size_t)cnt);
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)t));
}

/* Half h (lanes 8h..8h+cnt-1) of a group record with L lanes. */
AI void ls_y_load_w(const uint32_t type, bool full, int cnt, __m256i lm, uint32_t L, int h, const ls_rec *r,
                    const uint8_t *rec, ls_yw *W) {
    uint32_t ps = L * 4;
    const uint8_t *bits = rec + r->bits + 32 * h;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (type == LS_TYPE_Q5_0 || type == LS_TYPE_Q5_1 || type == LS_TYPE_Q8_0 || type == LS_TYPE_Q5_K) {
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) W->w[s] = ls_y_ldb(full, lm, bits + s * ps);
    } else {
        #pragma GCC unroll 8
        for (int q = 0; q < 4; q++) {
            __m256i v = ls_y_ldb(full, lm, bits + q * ps);
            W->w[q] = _mm256_and_si256(v, m4);
            W->w[q + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        if (type == LS_TYPE_Q6_K) {
            const __m256i m2 = _mm256_set1_epi8(0x03);
            #pragma GCC unroll 8
            for (int hh = 0; hh < 2; hh++) {
                __m256i hb = ls_y_ldb(full, lm, rec + r->hb + 32 * h + hh * ps);
                #pragma GCC unroll 8
                for (int k = 0; k < 4; k++)
                    W->w[4 * hh + k] = _mm256_or_si256(
                        W->w[4 * hh + k],
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2), 4));
            }
        }
        if (type == LS_TYPE_MXFP4) {
            const __m256i tbl = _mm256_broadcastsi128_si256(
                _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
            #pragma GCC unroll 8
            for (int s = 0; s < 8; s++) W->w[s] = _mm256_shuffle_epi8(tbl, W->w[s]);
        }
    }
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_Q8_0: W->f0 = ls_y_ldh(full, cnt, rec + r->d + 16 * h); break;
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1:
        W->f0 = ls_y_ldh(full, cnt, rec + r->d + 16 * h);
        W->f1 = ls_y_ldh(full, cnt, rec + r->m + 16 * h);
        break;
    case LS_TYPE_MXFP4: {
        __m256i e = ls_y_ldu8(full, cnt, rec + r->e + 8 * h);
        __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        __m256i hi = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        __m256i de = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        W->f0 = _mm256_castsi256_ps(_mm256_blendv_epi8(hi, de, lo));
        break;
    }
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: {
        W->f0 = _mm256_set1_ps(_cvtsh_ss(ls_k_rd16(rec + r->dk + 2 * h)));
        __m256 dmin = _mm256_set1_ps(_cvtsh_ss(ls_k_rd16(rec + r->dmk + 2 * h)));
        W->i0 = ls_y_ldu8(full, cnt, rec + r->sc + 8 * h);
        __m256 mt = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ls_y_ldu8(full, cnt, rec + r->mn + 8 * h)));
        W->f1 = _mm256_xor_ps(mt, _mm256_set1_ps(-0.0f));
        break;
    }
    case LS_TYPE_Q6_K: {
        W->f0 = _mm256_set1_ps(_cvtsh_ss(ls_k_rd16(rec + r->dk + 2 * h)));
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(rec + r->sc + 16 * h)));
        W->i0 = _mm256_srai_epi32(_mm256_slli_epi32(sc16, 16), 16);
        W->i1 = _mm256_srai_epi32(sc16, 16);
        break;
    }
    default: break;
    }
}

AI __m256i ls_y_prod(const uint32_t type, __m256i w, __m256i x) {
    if (type == LS_TYPE_Q8_0) {
        __m256i ws = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); /* signed weight */
        return _mm256_maddubs_epi16(_mm256_sign_epi8(ws, ws), _mm256_sign_epi8(x, ws));
    }
    return _mm256_maddubs_epi16(w, x);
}

AI __m256 ls_y_c(const uint32_t type, bool full, int cnt, __m256i lm, uint32_t L, int h, const ls_yw *W, const ls_xq *x,
                 int64_t G) {
    uint32_t ps = L * 4;
    const int8_t *xg = x->q + G * (LS_GROUP * 32) + 32 * h;
    const __m256i ones = _mm256_set1_epi16(1);
    const int P = ls_y_pairs(type);
    __m256i acc = _mm256_setzero_si256(), acc2 = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int s0 = 0; s0 < 8; s0 += P) {
        __m256i p16 = ls_y_prod(type, W->w[s0], ls_y_ldb(full, lm, xg + s0 * ps));
        for (int s = s0 + 1; s < s0 + P; s++)
            p16 = _mm256_add_epi16(p16, ls_y_prod(type, W->w[s], ls_y_ldb(full, lm, xg + s * ps)));
        __m256i p32 = _mm256_madd_epi16(p16, ones);
        if (type == LS_TYPE_Q6_K && s0 >= 4)
            acc2 = _mm256_add_epi32(acc2, p32);
        else
            acc = _mm256_add_epi32(acc, p32);
    }
    int64_t u0 = G * LS_GROUP + 8 * h;
    __m256 dx = ls_y_ldf(full, lm, x->dx + u0);
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_MXFP4: {
        int off = type == LS_TYPE_Q4_0 ? 8 : type == LS_TYPE_Q5_0 ? 16 : 12;
        __m256i sq = ls_y_ldi(full, lm, x->sq + u0);
        __m256i isum = _mm256_sub_epi32(acc, _mm256_mullo_epi32(sq, _mm256_set1_epi32(off)));
        return _mm256_mul_ps(_mm256_mul_ps(W->f0, dx), _mm256_cvtepi32_ps(isum));
    }
    case LS_TYPE_Q8_0: /* the sign trick gives sum w*q directly */
        return _mm256_mul_ps(_mm256_mul_ps(W->f0, dx), _mm256_cvtepi32_ps(acc));
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1: {
        __m256 sx = ls_y_ldf(full, lm, x->sx + u0);
        return _mm256_fmadd_ps(_mm256_mul_ps(W->f0, dx), _mm256_cvtepi32_ps(acc), _mm256_mul_ps(W->f1, sx));
    }
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: {
        __m256 sx = ls_y_ldf(full, lm, x->sx + u0);
        __m256i isum = _mm256_mullo_epi32(acc, W->i0);
        return _mm256_fmadd_ps(_mm256_mul_ps(W->f0, dx), _mm256_cvtepi32_ps(isum), _mm256_mul_ps(W->f1, sx));
    }
    case LS_TYPE_Q6_K: {
        __m256i sq = ls_y_ldi(full, lm, x->sq + u0), sqlo = ls_y_ldi(full, lm, x->sqlo + u0);
        __m256i a = _mm256_sub_epi32(acc, _mm256_slli_epi32(sqlo, 5));
        __m256i b = _mm256_sub_epi32(acc2, _mm256_slli_epi32(_mm256_sub_epi32(sq, sqlo), 5));
        __m256i isum = _mm256_add_epi32(_mm256_mullo_epi32(a, W->i0), _mm256_mullo_epi32(b, W->i1));
        return _mm256_mul_ps(_mm256_mul_ps(W->f0, dx), _mm256_cvtepi32_ps(isum));
    }
    default: return _mm256_setzero_ps();
    }
}

AI float ls_y_tree32(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
    return ls_y_tree16(ls_y_pairs_add(s0, s1), ls_y_pairs_add(s2, s3));
}

AI void ls_y_tile_q(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *wrow, const ls_xq *xr,
                    float *const *yr, int64_t n) {
    __m256 S[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) S[i][0] = S[i][1] = S[i][2] = S[i][3] = _mm256_setzero_ps();
    int64_t nfull = w->nb / LS_GROUP;
    const __m256i all = _mm256_set1_epi32(-1);
    ls_yw W;
    for (int64_t G = 0; G < nfull; G++) {
        const uint8_t *rec = wrow + (size_t)G * w->rec16.size;
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            ls_y_load_w(type, true, 8, all, LS_GROUP, h, &w->rec16, rec, &W);
            int si = (int)((2 * G + h) & 3);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                S[i][si] = _mm256_add_ps(S[i][si], ls_y_c(type, true, 8, all, LS_GROUP, h, &W, &xr[i], G));
        }
    }
    if (w->tail) {
        uint32_t L = (uint32_t)w->tail;
        const uint8_t *rec = wrow + (size_t)nfull * w->rec16.size;
        for (int h = 0; h < 2 && 8 * h < (int)L; h++) {
            int cnt = (int)L - 8 * h < 8 ? (int)L - 8 * h : 8;
            __m256i lm = ls_y_lanemask(cnt);
            ls_y_load_w(type, false, cnt, lm, L, h, &w->rec_tail, rec, &W);
            int si = (int)((2 * nfull + h) & 3);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                __m256 c = ls_y_c(type, false, cnt, lm, L, h, &W, &xr[i], nfull);
                S[i][si] = _mm256_blendv_ps(S[i][si], _mm256_add_ps(S[i][si], c), _mm256_castsi256_ps(lm));
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) yr[i][n] = ls_y_tree32(S[i][0], S[i][1], S[i][2], S[i][3]);
}

/* Float weights: lanes 0..7 in a0, 8..15 in a1; fma in increasing k; then the tree. */
AI __m256 ls_y_ldw(const uint32_t type, const uint8_t *wrow, int64_t k, int cnt) {
    if (type == LS_TYPE_F32) {
        if (cnt == 8) return _mm256_loadu_ps((const float *)wrow + k);
        return _mm256_maskload_ps((const float *)wrow + k, ls_y_lanemask(cnt));
    }
    __m128i h;
    if (cnt == 8) {
        h = _mm_loadu_si128((const __m128i *)(wrow + 2 * k));
    } else {
        uint8_t t[16] = {0};
        if (cnt > 0) memcpy(t, wrow + 2 * k, (size_t)cnt * 2);
        h = _mm_loadu_si128((const __m128i *)t);
    }
    if (type == LS_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI void ls_y_tile_f(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *wrow, const float *const *xr,
                    float *const *yr, int64_t n) {
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    int64_t K = w->K, k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256 w0 = ls_y_ldw(type, wrow, k, 8), w1 = ls_y_ldw(type, wrow, k + 8, 8);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            a0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[i] + k), w0, a0[i]);
            a1[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[i] + k + 8), w1, a1[i]);
        }
    }
    if (k < K) {
        int r = (int)(K - k), c0 = r < 8 ? r : 8, c1 = r - c0;
        __m256i m0 = ls_y_lanemask(c0), m1 = ls_y_lanemask(c1);
        __m256 w0 = ls_y_ldw(type, wrow, k, c0), w1 = ls_y_ldw(type, wrow, k + 8, c1);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256 f0 = _mm256_fmadd_ps(_mm256_maskload_ps(xr[i] + k, m0), w0, a0[i]);
            __m256 f1 = _mm256_fmadd_ps(_mm256_maskload_ps(xr[i] + k + 8, m1), w1, a1[i]);
            a0[i] = _mm256_blendv_ps(a0[i], f0, _mm256_castsi256_ps(m0));
            a1[i] = _mm256_blendv_ps(a1[i], f1, _mm256_castsi256_ps(m1));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) yr[i][n] = ls_y_tree16(a0[i], a1[i]);
}

#define LS_GEMM_MIN_M 16
#define LS_GEMM_L2_BYTES (256 * 1024)

AI void ls_y_rows(const uint32_t type, const int R, const ls_mm_job *job, int64_t m0, int64_t n0, int64_t n1) {
    const ls_wmat *w = job->w;
    float *yr[4];
    ls_xq xq[4];
    const float *xf[4] = {0};
    memset(xq, 0, sizeof xq);
    for (int i = 0; i < R; i++) {
        yr[i] = job->y + (m0 + i) * w->N;
        if (type == LS_TYPE_F32 || type == LS_TYPE_F16 || type == LS_TYPE_BF16)
            xf[i] = job->x + (m0 + i) * w->K;
        else
            xq[i] = ls_xq_row(job->xq, w->K, m0 + i);
    }
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wrow = w->data + (size_t)n * w->row_bytes;
        if (type == LS_TYPE_F32 || type == LS_TYPE_F16 || type == LS_TYPE_BF16)
            ls_y_tile_f(type, R, w, wrow, xf, yr, n);
        else
            ls_y_tile_q(type, R, w, wrow, xq, yr, n);
    }
}

AI void ls_y_mm_type(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    int64_t M = job->M, nblk = n1 - n0;
    if (M >= LS_GEMM_MIN_M) {
        nblk = (int64_t)(LS_GEMM_L2_BYTES / (job->w->row_bytes + 1));
        if (nblk < 4) nblk = 4;
    }
    for (int64_t c0 = n0; c0 < n1; c0 += nblk) {
        int64_t c1 = c0 + nblk < n1 ? c0 + nblk : n1;
        int64_t m = 0;
        for (; m + 2 <= M; m += 2) ls_y_rows(type, 2, job, m, c0, c1);
        if (m < M) ls_y_rows(type, 1, job, m, c0, c1);
    }
}

#define LS_Y_ENTRY(T, nm) \
    void ls_mm_##nm##_avx2(const ls_mm_job *job, int64_t n0, int64_t n1) { ls_y_mm_type(T, job, n0, n1); }
LS_WTYPE_LIST(LS_Y_ENTRY)
