/* matmul_avx512.c - the canonical matmul recipe with AVX-512 + VNNI.
 *
 * A group record (16 units) fills one zmm of int32 lanes: lane l = unit l.  One
 * vpdpbusd per 4-element slot accumulates all 16 units' exact integer dot products
 * at once (u8 weight codes x s8 activations), so isum_b comes out lane-wise with no
 * horizontal reduction.  Groups alternate between two accumulators: S[0] holds
 * recipe groups g = 0..15, S[1] g = 16..31 (unit b = 16G + l lands in g = b mod 32).
 * The last, partial group (L < 16 units) uses masked loads and a masked add.
 * Paths: narrow (one row, two columns interleaved), wide (tiles of 4 rows sharing each
 * weight group), GEMM (wide tiles inside column blocks that stay in L2).  All run
 * the same per-row instruction sequence, hence the same bits as the scalar code. */
#include <immintrin.h>

#include "kernels/cpu/internal.h"

#define AI static inline __attribute__((always_inline))

typedef struct {
    __m512i w[8];   /* u8 code operand per slot s (elements 4s..4s+3 of each unit) */
    __m512 f0, f1;  /* float scale fields (see ls_z_c) */
    __m512i i0, i1; /* integer scale fields */
} ls_zw;

AI __m512i ls_z_ldb(bool full, __mmask64 kb, const void *p) {
    return full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(kb, p);
}
AI __m512 ls_z_ldf(bool full, __mmask16 k, const float *p) {
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}
AI __m512i ls_z_ldi(bool full, __mmask16 k, const int32_t *p) {
    return full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(k, p);
}
AI __m512 ls_z_ldh(bool full, __mmask16 k, const uint8_t *p) { /* 16 fp16 -> float (exact) */
    return _mm512_cvtph_ps(full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p));
}
AI __m512i ls_z_ldu8(bool full, __mmask16 k, const uint8_t *p) { /* 16 u8 -> int32 */
    return _mm512_cvtepu8_epi32(full ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(k, p));
}
/* Super-block fp16 fields (one per 8 units) broadcast to their 8 lanes. */
AI __m512 ls_z_ldh8(const uint8_t *p, bool full) {
    uint32_t v = full ? ((uint32_t)ls_k_rd16(p) | (uint32_t)ls_k_rd16(p + 2) << 16) : ls_k_rd16(p);
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)v));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

/* Loads one group's weights: code operands and scale fields. */
AI void ls_z_load_w(const uint32_t type, bool full, __mmask16 k, uint32_t L, const ls_rec *r, const uint8_t *rec,
                    ls_zw *W) {
    __mmask64 kb = full ? ~(__mmask64)0 : (((__mmask64)1 << (L * 4)) - 1);
    uint32_t ps = L * 4;
    const uint8_t *bits = rec + r->bits;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    if (type == LS_TYPE_Q5_0 || type == LS_TYPE_Q5_1 || type == LS_TYPE_Q8_0 || type == LS_TYPE_Q5_K) {
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) W->w[s] = ls_z_ldb(full, kb, bits + s * ps);
    } else {
        #pragma GCC unroll 8
        for (int q = 0; q < 4; q++) {
            __m512i v = ls_z_ldb(full, kb, bits + q * ps);
            W->w[q] = _mm512_and_si512(v, m4);
            W->w[q + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        if (type == LS_TYPE_Q6_K) {
            const __m512i m2 = _mm512_set1_epi8(0x03);
            #pragma GCC unroll 8
            for (int h = 0; h < 2; h++) {
                __m512i hb = ls_z_ldb(full, kb, rec + r->hb + h * ps);
                W->w[4 * h + 0] = _mm512_or_si512(W->w[4 * h + 0], _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4));
                W->w[4 * h + 1] = _mm512_or_si512(
                    W->w[4 * h + 1], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2), m2), 4));
                W->w[4 * h + 2] = _mm512_or_si512(
                    W->w[4 * h + 2], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), m2), 4));
                W->w[4 * h + 3] = _mm512_or_si512(
                    W->w[4 * h + 3], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 6), m2), 4));
            }
        }
        if (type == LS_TYPE_MXFP4) { /* code -> kvalue + 12 (0..24) */
            const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
            #pragma GCC unroll 8
            for (int s = 0; s < 8; s++) W->w[s] = _mm512_shuffle_epi8(tbl, W->w[s]);
        }
    }
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_Q8_0: W->f0 = ls_z_ldh(full, k, rec + r->d); break;
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1:
        W->f0 = ls_z_ldh(full, k, rec + r->d);
        W->f1 = ls_z_ldh(full, k, rec + r->m);
        break;
    case LS_TYPE_MXFP4: { /* ggml_e8m0_to_fp32_half */
        __m512i e = ls_z_ldu8(full, k, rec + r->e);
        __mmask16 lo = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        __m512i hi = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        W->f0 = _mm512_castsi512_ps(_mm512_mask_sllv_epi32(hi, lo, _mm512_set1_epi32(0x00200000), e));
        break;
    }
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: {
        W->f0 = ls_z_ldh8(rec + r->dk, full);
        __m512 dmin = ls_z_ldh8(rec + r->dmk, full);
        W->i0 = ls_z_ldu8(full, k, rec + r->sc);
        __m512 mt = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(ls_z_ldu8(full, k, rec + r->mn)));
        W->f1 = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(mt), _mm512_set1_epi32((int)0x80000000)));
        break;
    }
    case LS_TYPE_Q6_K: {
        W->f0 = ls_z_ldh8(rec + r->dk, full);
        __m256i sc8 = full ? _mm256_loadu_si256((const __m256i *)(rec + r->sc))
                           : _mm256_maskz_loadu_epi8((__mmask32)(((uint64_t)1 << (2 * L)) - 1), rec + r->sc);
        __m512i sc16 = _mm512_cvtepi8_epi16(sc8); /* lane l: [A_l | B_l] as two int16 */
        W->i0 = _mm512_srai_epi32(_mm512_slli_epi32(sc16, 16), 16);
        W->i1 = _mm512_srai_epi32(sc16, 16);
        break;
    }
    default: break;
    }
}

/* c_b for the 16 units of group G against one activation row (step 2). */
AI __m512 ls_z_c(const uint32_t type, bool full, __mmask16 k, uint32_t L, const ls_zw *W, const ls_xq *x, int64_t G) {
    __mmask64 kb = full ? ~(__mmask64)0 : (((__mmask64)1 << (L * 4)) - 1);
    uint32_t ps = L * 4;
    const int8_t *xg = x->q + G * (LS_GROUP * 32);
    /* two independent dpbusd chains (slots 0-3, 4-7) halve the latency; integer sums are exact */
    __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        __m512i xs = ls_z_ldb(full, kb, xg + s * ps);
        if (s >= 4)
            acc2 = _mm512_dpbusd_epi32(acc2, W->w[s], xs);
        else
            acc = _mm512_dpbusd_epi32(acc, W->w[s], xs);
    }
    if (type != LS_TYPE_Q6_K) acc = _mm512_add_epi32(acc, acc2);
    __m512 dx = ls_z_ldf(full, k, x->dx + G * LS_GROUP);
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_Q8_0: case LS_TYPE_MXFP4: {
        int off = type == LS_TYPE_Q4_0 ? 8 : type == LS_TYPE_Q5_0 ? 16 : type == LS_TYPE_Q8_0 ? 128 : 12;
        __m512i sq = ls_z_ldi(full, k, x->sq + G * LS_GROUP);
        __m512i isum = _mm512_sub_epi32(acc, _mm512_mullo_epi32(sq, _mm512_set1_epi32(off)));
        return _mm512_mul_ps(_mm512_mul_ps(W->f0, dx), _mm512_cvtepi32_ps(isum));
    }
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1: {
        __m512 sx = ls_z_ldf(full, k, x->sx + G * LS_GROUP);
        return _mm512_fmadd_ps(_mm512_mul_ps(W->f0, dx), _mm512_cvtepi32_ps(acc), _mm512_mul_ps(W->f1, sx));
    }
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: {
        __m512 sx = ls_z_ldf(full, k, x->sx + G * LS_GROUP);
        __m512i isum = _mm512_mullo_epi32(acc, W->i0);
        return _mm512_fmadd_ps(_mm512_mul_ps(W->f0, dx), _mm512_cvtepi32_ps(isum), _mm512_mul_ps(W->f1, sx));
    }
    case LS_TYPE_Q6_K: {
        __m512i sq = ls_z_ldi(full, k, x->sq + G * LS_GROUP), sqlo = ls_z_ldi(full, k, x->sqlo + G * LS_GROUP);
        __m512i a = _mm512_sub_epi32(acc, _mm512_slli_epi32(sqlo, 5));
        __m512i b = _mm512_sub_epi32(acc2, _mm512_slli_epi32(_mm512_sub_epi32(sq, sqlo), 5));
        __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(a, W->i0), _mm512_mullo_epi32(b, W->i1));
        return _mm512_mul_ps(_mm512_mul_ps(W->f0, dx), _mm512_cvtepi32_ps(isum));
    }
    default: return _mm512_setzero_ps();
    }
}

/* Adjacent pairwise tree over 16 lanes (lane order), as ls_tree. */
AI float ls_z_tree16(__m512 t) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int i = 0; i < 4; i++) t = _mm512_add_ps(_mm512_permutexvar_ps(ev, t), _mm512_permutexvar_ps(od, t));
    return _mm512_cvtss_f32(t);
}
/* Tree over S_0..S_31 held as a = S_0..15, b = S_16..31. */
AI float ls_z_tree32(__m512 a, __m512 b) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return ls_z_tree16(_mm512_add_ps(_mm512_permutex2var_ps(a, ev, b), _mm512_permutex2var_ps(a, od, b)));
}

/* R activation rows x one weight row n: y[i][n] for i < R. */
AI void ls_z_tile_q(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *wrow, const ls_xq *xr,
                    float *const *yr, int64_t n) {
    __m512 S[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) S[i][0] = S[i][1] = _mm512_setzero_ps();
    int64_t nfull = w->nb / LS_GROUP;
    ls_zw W;
    /* groups alternate S[i][0] (even G) and S[i][1] (odd G); unrolled so the index is constant */
    int64_t G = 0;
    for (; G + 2 <= nfull; G += 2) {
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            ls_z_load_w(type, true, 0xFFFF, LS_GROUP, &w->rec16, wrow + (size_t)(G + p) * w->rec16.size, &W);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) S[i][p] = _mm512_add_ps(S[i][p], ls_z_c(type, true, 0xFFFF, LS_GROUP, &W, &xr[i], G + p));
        }
    }
    if (G < nfull) {
        ls_z_load_w(type, true, 0xFFFF, LS_GROUP, &w->rec16, wrow + (size_t)G * w->rec16.size, &W);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) S[i][0] = _mm512_add_ps(S[i][0], ls_z_c(type, true, 0xFFFF, LS_GROUP, &W, &xr[i], G));
    }
    if (w->tail) {
        uint32_t L = (uint32_t)w->tail;
        __mmask16 k = (__mmask16)((1u << L) - 1);
        ls_z_load_w(type, false, k, L, &w->rec_tail, wrow + (size_t)nfull * w->rec16.size, &W);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m512 c = ls_z_c(type, false, k, L, &W, &xr[i], nfull);
            if (nfull & 1)
                S[i][1] = _mm512_mask_add_ps(S[i][1], k, S[i][1], c);
            else
                S[i][0] = _mm512_mask_add_ps(S[i][0], k, S[i][0], c);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) yr[i][n] = ls_z_tree32(S[i][0], S[i][1]);
}

/* Narrow path: one activation row, two weight rows n, n+1 interleaved (more independent work
 * in flight); each column's operation sequence is exactly ls_z_tile_q's with R = 1. */
AI void ls_z_narrow2_q(const uint32_t type, const ls_wmat *w, const uint8_t *wr0, const uint8_t *wr1, const ls_xq *x,
                       float *y) {
    __m512 S0a = _mm512_setzero_ps(), S0b = _mm512_setzero_ps(), S1a = _mm512_setzero_ps(), S1b = _mm512_setzero_ps();
    int64_t nfull = w->nb / LS_GROUP;
    ls_zw W0, W1;
    for (int64_t G = 0; G < nfull; G++) {
        ls_z_load_w(type, true, 0xFFFF, LS_GROUP, &w->rec16, wr0 + (size_t)G * w->rec16.size, &W0);
        ls_z_load_w(type, true, 0xFFFF, LS_GROUP, &w->rec16, wr1 + (size_t)G * w->rec16.size, &W1);
        __m512 c0 = ls_z_c(type, true, 0xFFFF, LS_GROUP, &W0, x, G);
        __m512 c1 = ls_z_c(type, true, 0xFFFF, LS_GROUP, &W1, x, G);
        if (G & 1) {
            S0b = _mm512_add_ps(S0b, c0);
            S1b = _mm512_add_ps(S1b, c1);
        } else {
            S0a = _mm512_add_ps(S0a, c0);
            S1a = _mm512_add_ps(S1a, c1);
        }
    }
    if (w->tail) {
        uint32_t L = (uint32_t)w->tail;
        __mmask16 k = (__mmask16)((1u << L) - 1);
        ls_z_load_w(type, false, k, L, &w->rec_tail, wr0 + (size_t)nfull * w->rec16.size, &W0);
        ls_z_load_w(type, false, k, L, &w->rec_tail, wr1 + (size_t)nfull * w->rec16.size, &W1);
        __m512 c0 = ls_z_c(type, false, k, L, &W0, x, nfull);
        __m512 c1 = ls_z_c(type, false, k, L, &W1, x, nfull);
        if (nfull & 1) {
            S0b = _mm512_mask_add_ps(S0b, k, S0b, c0);
            S1b = _mm512_mask_add_ps(S1b, k, S1b, c1);
        } else {
            S0a = _mm512_mask_add_ps(S0a, k, S0a, c0);
            S1a = _mm512_mask_add_ps(S1a, k, S1a, c1);
        }
    }
    y[0] = ls_z_tree32(S0a, S0b);
    y[1] = ls_z_tree32(S1a, S1b);
}

/* Float weights: lane l of one zmm accumulates k = l mod 16 with fma, then the tree. */
AI __m512 ls_z_ldw(const uint32_t type, const uint8_t *wrow, int64_t k, bool full, __mmask16 m) {
    if (type == LS_TYPE_F32)
        return full ? _mm512_loadu_ps((const float *)wrow + k) : _mm512_maskz_loadu_ps(m, (const float *)wrow + k);
    __m256i h = full ? _mm256_loadu_si256((const __m256i *)(wrow + 2 * k)) : _mm256_maskz_loadu_epi16(m, wrow + 2 * k);
    if (type == LS_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void ls_z_tile_f(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *wrow, const float *const *xr,
                    float *const *yr, int64_t n) {
    __m512 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    int64_t K = w->K, k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv = ls_z_ldw(type, wrow, k, true, 0xFFFF);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr[i] + k), wv, acc[i]);
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 wv = ls_z_ldw(type, wrow, k, false, m);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) acc[i] = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, xr[i] + k), wv, acc[i], m);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) yr[i][n] = ls_z_tree16(acc[i]);
}

#define LS_WIDE_R 4      /* rows per wide tile */
#define LS_GEMM_MIN_M 16 /* from here on, columns are blocked for L2 */
#define LS_GEMM_L2_BYTES (256 * 1024)

/* Rows [m0, m0+R) x columns [n0, n1) with a tile of R rows. */
AI void ls_z_rows(const uint32_t type, const int R, const ls_mm_job *job, int64_t m0, int64_t n0, int64_t n1) {
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
    int64_t n = n0;
    if (R == 1 && !(type == LS_TYPE_F32 || type == LS_TYPE_F16 || type == LS_TYPE_BF16))
        for (; n + 2 <= n1; n += 2)
            ls_z_narrow2_q(type, w, w->data + (size_t)n * w->row_bytes, w->data + (size_t)(n + 1) * w->row_bytes,
                           &xq[0], yr[0] + n);
    for (; n < n1; n++) {
        const uint8_t *wrow = w->data + (size_t)n * w->row_bytes;
        if (type == LS_TYPE_F32 || type == LS_TYPE_F16 || type == LS_TYPE_BF16)
            ls_z_tile_f(type, R, w, wrow, xf, yr, n);
        else
            ls_z_tile_q(type, R, w, wrow, xq, yr, n);
    }
}

AI void ls_z_mm_type(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    int64_t M = job->M;
    int64_t nblk = n1 - n0;
    if (M >= LS_GEMM_MIN_M) { /* keep a block of weight rows in L2 while all row tiles pass over it */
        nblk = (int64_t)(LS_GEMM_L2_BYTES / (job->w->row_bytes + 1));
        if (nblk < 4) nblk = 4;
    }
    for (int64_t c0 = n0; c0 < n1; c0 += nblk) {
        int64_t c1 = c0 + nblk < n1 ? c0 + nblk : n1;
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) ls_z_rows(type, 4, job, m, c0, c1);
        if (M - m >= 2) {
            ls_z_rows(type, 2, job, m, c0, c1);
            m += 2;
        }
        if (m < M) ls_z_rows(type, 1, job, m, c0, c1);
    }
}

#define LS_Z_CASE(T) \
    case T: ls_z_mm_type(T, job, n0, n1); break;

void ls_mm_avx512(const ls_mm_job *job, int64_t n0, int64_t n1) {
    switch (job->w->type) {
        LS_Z_CASE(LS_TYPE_Q4_0)
        LS_Z_CASE(LS_TYPE_Q4_1)
        LS_Z_CASE(LS_TYPE_Q5_0)
        LS_Z_CASE(LS_TYPE_Q5_1)
        LS_Z_CASE(LS_TYPE_Q8_0)
        LS_Z_CASE(LS_TYPE_Q4_K)
        LS_Z_CASE(LS_TYPE_Q5_K)
        LS_Z_CASE(LS_TYPE_Q6_K)
        LS_Z_CASE(LS_TYPE_MXFP4)
        LS_Z_CASE(LS_TYPE_F32)
        LS_Z_CASE(LS_TYPE_F16)
        LS_Z_CASE(LS_TYPE_BF16)
    default: LS_ASSERT(!"ls_mm_avx512: type");
    }
}
