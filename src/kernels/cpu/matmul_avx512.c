/* matmul_avx512.c - the canonical matmul recipe with AVX-512 + VNNI.
 *
 * The panel types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) read the panel copy
 * at every M (ls_z_panel*, below; lanes = 16 weight rows): Q4_1 and Q8_0 at M = 1 with a
 * one-row kernel of their own over the xq layout, every other case with the panel tiles
 * (M = 1: a tile of one row) over the tile-packed activations.  The rest of this header
 * is the group-record path, which MXFP4 and the float types use:
 * a group record (16 units) fills one zmm of int32 lanes: lane l = unit l.  One
 * vpdpbusd per 4-element slot accumulates all 16 units' exact integer dot products
 * at once (u8 weight codes x s8 activations), so isum_b comes out lane-wise with no
 * horizontal reduction.  Groups alternate between two accumulators: S[0] holds
 * recipe groups g = 0..15, S[1] g = 16..31 (unit b = 16G + l lands in g = b mod 32).
 * The last, partial group (L < 16 units) uses masked loads and a masked add.
 * Paths: narrow (one row, two columns interleaved), wide (tiles of 4 rows sharing each
 * weight group), GEMM (wide tiles inside column blocks that stay in L2).  All run
 * the same per-row instruction sequence, hence the same bits as the scalar code. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/tree_avx512.h"

#define AI static inline __attribute__((always_inline))

/* The same file, compiled with LS_Z_AMX = 1 (matmul_amx.c), is the AMX level: every path
 * is this one but the integer dot products of a panel tile of LS_AMX_MIN_R rows or more,
 * which one AMX tile product per unit gives (ls_z_tile_units); the entry points are then
 * ls_mm_*_amx, and the quantizer is left to this level's object. */
#ifndef LS_Z_AMX
#define LS_Z_AMX 0
#endif
#if LS_Z_AMX
#define LS_Z_SFX amx
#else
#define LS_Z_SFX avx512
#endif
#define LS_Z_CAT2(a, b) a##b
#define LS_Z_CAT(a, b) LS_Z_CAT2(a, b)

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

/* 4-bit types whose high nibble is used as (16 * nibble): and(v, 0xF0) instead of a shift;
 * the slot 4..7 integer sum is then exactly 16x, and an arithmetic shift by 4 restores it. */
#define LS_Z_HI16(type) ((type) == LS_TYPE_Q4_0 || (type) == LS_TYPE_Q4_1 || (type) == LS_TYPE_Q4_K)

/* Code operands from the 4 nibble planes v[0..3] (NIB storage). */
AI void ls_z_nib(const uint32_t type, const __m512i *v, ls_zw *W) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8((char)0xF0);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        W->w[q] = _mm512_and_si512(v[q], m4);
        W->w[q + 4] = LS_Z_HI16(type) ? _mm512_and_si512(v[q], m4h) : _mm512_and_si512(_mm512_srli_epi16(v[q], 4), m4);
    }
    if (type == LS_TYPE_MXFP4) { /* code -> kvalue + 12 (0..24) */
        const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) W->w[s] = _mm512_shuffle_epi8(tbl, W->w[s]);
    }
}

/* ggml_e8m0_to_fp32_half on 16 int32 lanes. */
AI __m512 ls_z_e8m0(__m512i e) {
    __mmask16 lo = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    __m512i hi = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    return _mm512_castsi512_ps(_mm512_mask_sllv_epi32(hi, lo, _mm512_set1_epi32(0x00200000), e));
}

/* Loads one group's weights: code operands and scale fields. */
AI void ls_z_load_w(const uint32_t type, bool full, __mmask16 k, uint32_t L, const ls_rec *r, const uint8_t *rec,
                    ls_zw *W) {
    __mmask64 kb = full ? ~(__mmask64)0 : (((__mmask64)1 << (L * 4)) - 1);
    uint32_t ps = L * 4;
    const uint8_t *bits = rec + r->bits;
    if (type == LS_TYPE_Q5_0 || type == LS_TYPE_Q5_1 || type == LS_TYPE_Q8_0 || type == LS_TYPE_Q5_K) {
        #pragma GCC unroll 8
        for (int s = 0; s < 8; s++) W->w[s] = ls_z_ldb(full, kb, bits + s * ps);
    } else if (type == LS_TYPE_Q6_K) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        #pragma GCC unroll 8
        for (int q = 0; q < 4; q++) {
            __m512i v = ls_z_ldb(full, kb, bits + q * ps);
            W->w[q] = _mm512_and_si512(v, m4);
            W->w[q + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
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
    } else {
        __m512i v[4];
        #pragma GCC unroll 4
        for (int q = 0; q < 4; q++) v[q] = ls_z_ldb(full, kb, bits + q * ps);
        ls_z_nib(type, v, W);
    }
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_Q8_0: W->f0 = ls_z_ldh(full, k, rec + r->d); break;
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1:
        W->f0 = ls_z_ldh(full, k, rec + r->d);
        W->f1 = ls_z_ldh(full, k, rec + r->m);
        break;
    case LS_TYPE_MXFP4: W->f0 = ls_z_e8m0(ls_z_ldu8(full, k, rec + r->e)); break;
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

/* Activation operands of one group: lane l = unit l of x (mode 0: full group, 1: masked
 * partial group of L units), or (mode 2) the L = 2 tail group repeated for 8 weight rows. */
typedef struct {
    const int8_t *xg;
    __mmask64 kb;
    uint32_t ps;
    __m512 dx, sx;
    __m512i sq, sqlo;
} ls_zx;

AI __m512i ls_z_xs(int mode, const ls_zx *X, int s) {
    if (mode == 2) {
        int64_t t;
        memcpy(&t, X->xg + 8 * s, 8);
        return _mm512_set1_epi64(t);
    }
    return ls_z_ldb(mode == 0, X->kb, X->xg + s * X->ps);
}

AI void ls_z_load_x(const uint32_t type, bool full, __mmask16 k, uint32_t L, const ls_xq *x, int64_t G, ls_zx *X) {
    X->kb = full ? ~(__mmask64)0 : (((__mmask64)1 << (L * 4)) - 1);
    X->ps = L * 4;
    X->xg = x->q + G * (LS_GROUP * 32);
    X->dx = ls_z_ldf(full, k, x->dx + G * LS_GROUP);
    if (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q5_1 || type == LS_TYPE_Q4_K || type == LS_TYPE_Q5_K)
        X->sx = ls_z_ldf(full, k, x->sx + G * LS_GROUP);
    if (type == LS_TYPE_Q4_0 || type == LS_TYPE_Q5_0 || type == LS_TYPE_Q8_0 || type == LS_TYPE_MXFP4 ||
        type == LS_TYPE_Q6_K)
        X->sq = ls_z_ldi(full, k, x->sq + G * LS_GROUP);
    if (type == LS_TYPE_Q6_K) X->sqlo = ls_z_ldi(full, k, x->sqlo + G * LS_GROUP);
}

/* c_b lane-wise from weight and activation operands (step 2). */
AI __m512 ls_z_cc(const uint32_t type, int mode, const ls_zw *W, const ls_zx *X) {
    /* two independent dpbusd chains (slots 0-3, 4-7) halve the latency; integer sums are exact */
    __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        if (s >= 4)
            acc2 = _mm512_dpbusd_epi32(acc2, W->w[s], ls_z_xs(mode, X, s));
        else
            acc = _mm512_dpbusd_epi32(acc, W->w[s], ls_z_xs(mode, X, s));
    }
    if (LS_Z_HI16(type))
        acc = _mm512_add_epi32(acc, _mm512_srai_epi32(acc2, 4)); /* acc2 = 16 * (exact sum) */
    else if (type != LS_TYPE_Q6_K)
        acc = _mm512_add_epi32(acc, acc2);
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_Q8_0: case LS_TYPE_MXFP4: {
        int off = type == LS_TYPE_Q4_0 ? 8 : type == LS_TYPE_Q5_0 ? 16 : type == LS_TYPE_Q8_0 ? 128 : 12;
        __m512i isum = _mm512_sub_epi32(acc, _mm512_mullo_epi32(X->sq, _mm512_set1_epi32(off)));
        return _mm512_mul_ps(_mm512_mul_ps(W->f0, X->dx), _mm512_cvtepi32_ps(isum));
    }
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1:
        return _mm512_fmadd_ps(_mm512_mul_ps(W->f0, X->dx), _mm512_cvtepi32_ps(acc), _mm512_mul_ps(W->f1, X->sx));
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: {
        __m512i isum = _mm512_mullo_epi32(acc, W->i0);
        return _mm512_fmadd_ps(_mm512_mul_ps(W->f0, X->dx), _mm512_cvtepi32_ps(isum), _mm512_mul_ps(W->f1, X->sx));
    }
    case LS_TYPE_Q6_K: {
        __m512i a = _mm512_sub_epi32(acc, _mm512_slli_epi32(X->sqlo, 5));
        __m512i b = _mm512_sub_epi32(acc2, _mm512_slli_epi32(_mm512_sub_epi32(X->sq, X->sqlo), 5));
        __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(a, W->i0), _mm512_mullo_epi32(b, W->i1));
        return _mm512_mul_ps(_mm512_mul_ps(W->f0, X->dx), _mm512_cvtepi32_ps(isum));
    }
    default: return _mm512_setzero_ps();
    }
}

/* c_b for the 16 units of group G against one activation row. */
AI __m512 ls_z_c(const uint32_t type, bool full, __mmask16 k, uint32_t L, const ls_zw *W, const ls_xq *x, int64_t G) {
    ls_zx X;
    ls_z_load_x(type, full, k, L, x, G, &X);
    return ls_z_cc(type, full ? 0 : 1, W, &X);
}

/* Adjacent pairwise tree over 16 lanes (lane order), as ls_tree. */

/* Whether the last partial group is computed for 8 weight rows at once: L = 2 units, and
 * every scale field is per unit.  Lane 2j+l of the batch is unit l of row j. */
#define LS_Z_TAIL8(type, L)                                                                                    \
    ((L) == 2 && ((type) == LS_TYPE_Q4_0 || (type) == LS_TYPE_Q4_1 || (type) == LS_TYPE_Q5_0 ||            \
                  (type) == LS_TYPE_Q5_1 || (type) == LS_TYPE_Q8_0 || (type) == LS_TYPE_MXFP4))

/* Loads the L = 2 tail records of 8 weight rows (byte offsets off from data) as one group. */
AI void ls_z_load_w_tail8(const uint32_t type, const ls_rec *r, const uint8_t *data, __m512i off, ls_zw *W) {
    const uint8_t *bits = data + r->bits;
    if (type == LS_TYPE_Q5_0 || type == LS_TYPE_Q5_1 || type == LS_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) W->w[s] = _mm512_i64gather_epi64(off, (const void *)(bits + 8 * s), 1);
    } else {
        __m512i v[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) v[q] = _mm512_i64gather_epi64(off, (const void *)(bits + 8 * q), 1);
        ls_z_nib(type, v, W);
    }
    if (type == LS_TYPE_MXFP4) { /* 2 E8M0 bytes per row (4 read, within the record) */
        __m256i e = _mm512_i64gather_epi32(off, (const void *)(data + r->e), 1);
        W->f0 = ls_z_e8m0(_mm512_cvtepu8_epi32(_mm256_cvtepi32_epi16(e)));
    } else {
        W->f0 = _mm512_cvtph_ps(_mm512_i64gather_epi32(off, (const void *)(data + r->d), 1));
        if (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q5_1)
            W->f1 = _mm512_cvtph_ps(_mm512_i64gather_epi32(off, (const void *)(data + r->m), 1));
    }
}

/* Activation operands of the L = 2 tail group, repeated for the 8 rows of a tail batch. */
AI void ls_z_load_x_tail8(const uint32_t type, const ls_xq *x, int64_t G, ls_zx *X) {
    int64_t t;
    X->xg = x->q + G * (LS_GROUP * 32);
    memcpy(&t, x->dx + G * LS_GROUP, 8);
    X->dx = _mm512_castsi512_ps(_mm512_set1_epi64(t));
    memcpy(&t, x->sx + G * LS_GROUP, 8);
    X->sx = _mm512_castsi512_ps(_mm512_set1_epi64(t));
    memcpy(&t, x->sq + G * LS_GROUP, 8);
    X->sq = _mm512_set1_epi64(t);
}

/* Full groups of R activation rows x one weight row: S[i][0] (even G), S[i][1] (odd G). */
AI void ls_z_full_q(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *wrow, const ls_xq *xr,
                    __m512 S[][2]) {
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) S[i][0] = S[i][1] = _mm512_setzero_ps();
    int64_t nfull = w->nb / LS_GROUP;
    ls_zw W;
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
}

/* Full groups of one activation row x two weight rows, interleaved (more independent work in flight). */
AI void ls_z_full2_q(const uint32_t type, const ls_wmat *w, const uint8_t *wr0, const uint8_t *wr1, const ls_xq *x,
                     __m512 S0[2], __m512 S1[2]) {
    S0[0] = S0[1] = S1[0] = S1[1] = _mm512_setzero_ps();
    int64_t nfull = w->nb / LS_GROUP;
    ls_zw W0, W1;
    for (int64_t G = 0; G < nfull; G++) {
        ls_z_load_w(type, true, 0xFFFF, LS_GROUP, &w->rec16, wr0 + (size_t)G * w->rec16.size, &W0);
        ls_z_load_w(type, true, 0xFFFF, LS_GROUP, &w->rec16, wr1 + (size_t)G * w->rec16.size, &W1);
        __m512 c0 = ls_z_c(type, true, 0xFFFF, LS_GROUP, &W0, x, G);
        __m512 c1 = ls_z_c(type, true, 0xFFFF, LS_GROUP, &W1, x, G);
        if (G & 1) {
            S0[1] = _mm512_add_ps(S0[1], c0);
            S1[1] = _mm512_add_ps(S1[1], c1);
        } else {
            S0[0] = _mm512_add_ps(S0[0], c0);
            S1[0] = _mm512_add_ps(S1[0], c1);
        }
    }
}

/* The last partial group of one weight row, one activation row at a time (masked loads). */
AI void ls_z_tail_q(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *wrow, const ls_xq *xr,
                    __m512 S[][2]) {
    int64_t nfull = w->nb / LS_GROUP;
    uint32_t L = (uint32_t)w->tail;
    __mmask16 k = (__mmask16)((1u << L) - 1);
    ls_zw W;
    ls_z_load_w(type, false, k, L, &w->rec_tail, wrow + (size_t)nfull * w->rec16.size, &W);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
        __m512 c = ls_z_c(type, false, k, L, &W, &xr[i], nfull);
        int p = (int)(nfull & 1);
        S[i][p] = _mm512_mask_add_ps(S[i][p], k, S[i][p], c);
    }
}

/* R activation rows x the weight rows [nb0, nb0 + cnt), cnt <= 16: S_g by the recipe's
 * order (full groups, then the tail), then the tree of all cnt outputs at once. */
#define LS_Z_PF_ROWS 4 /* how far ahead the M = 1 group-record path prefetches (rows) */
AI void ls_z_block_q(const uint32_t type, const int R, const ls_wmat *w, const ls_xq *xr, float *const *yr,
                     int64_t nb0, int cnt) {
    __m512 L1[4][16];
    __m512 Ct[4][2];
    const int64_t nfull = w->nb / LS_GROUP;
    const bool tail8 = w->tail && LS_Z_TAIL8(type, w->tail);
    const int p = (int)(nfull & 1);
    if (tail8) { /* tails of 8 rows per batch; missing rows repeat the last one */
        ls_zx X[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) ls_z_load_x_tail8(type, &xr[i], nfull, &X[i]);
        for (int h = 0; h < 2; h++) {
            if (8 * h >= cnt) break;
            int64_t off[8];
            for (int j = 0; j < 8; j++) {
                int jj = 8 * h + j < cnt ? 8 * h + j : cnt - 1;
                off[j] = (nb0 + jj) * (int64_t)w->row_bytes + nfull * (int64_t)w->rec16.size;
            }
            ls_zw W;
            ls_z_load_w_tail8(type, &w->rec_tail, w->data, _mm512_loadu_si512(off), &W);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) Ct[i][h] = ls_z_cc(type, 2, &W, &X[i]);
        }
    }
    int j = 0;
    __m512 S[4][2], S1[4][2];
    if (R == 1) {
        for (; j + 2 <= cnt; j += 2) {
            const uint8_t *wr = w->data + (size_t)(nb0 + j) * w->row_bytes;
            { /* the pair LS_Z_PF_ROWS rows on: the weights stream from DRAM at M = 1, and some
               * CPUs' prefetchers (AMD Zen 4) leave two interleaved row streams half-fed */
                const char *pf = (const char *)wr + LS_Z_PF_ROWS * w->row_bytes;
                for (size_t o = 0; o < 2 * w->row_bytes; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
            }
            ls_z_full2_q(type, w, wr, wr + w->row_bytes, &xr[0], S[0], S1[0]);
            if (tail8) {
                const __mmask16 k = 0x3;
                __m512i i0 = _mm512_set1_epi64((int64_t)(2 * (j & 7)) | ((int64_t)(2 * (j & 7) + 1) << 32));
                __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(2));
                S[0][p] = _mm512_mask_add_ps(S[0][p], k, S[0][p], _mm512_permutexvar_ps(i0, Ct[0][j >> 3]));
                S1[0][p] = _mm512_mask_add_ps(S1[0][p], k, S1[0][p], _mm512_permutexvar_ps(i1, Ct[0][j >> 3]));
            } else if (w->tail) {
                ls_z_tail_q(type, 1, w, wr, xr, S);
                ls_z_tail_q(type, 1, w, wr + w->row_bytes, xr, S1);
            }
            L1[0][j] = ls_z_pair(S[0][0], S[0][1]);
            L1[0][j + 1] = ls_z_pair(S1[0][0], S1[0][1]);
        }
    }
    for (; j < cnt; j++) {
        const uint8_t *wr = w->data + (size_t)(nb0 + j) * w->row_bytes;
        ls_z_full_q(type, R, w, wr, xr, S);
        if (tail8) {
            const __mmask16 k = 0x3;
            __m512i ix = _mm512_set1_epi64((int64_t)(2 * (j & 7)) | ((int64_t)(2 * (j & 7) + 1) << 32));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                S[i][p] = _mm512_mask_add_ps(S[i][p], k, S[i][p], _mm512_permutexvar_ps(ix, Ct[i][j >> 3]));
        } else if (w->tail) {
            ls_z_tail_q(type, R, w, wr, xr, S);
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) L1[i][j] = ls_z_pair(S[i][0], S[i][1]);
    }
    for (; j < 16; j++)
        for (int i = 0; i < R; i++) L1[i][j] = _mm512_setzero_ps();
    __mmask16 km = (__mmask16)((1u << cnt) - 1);
    /* L1[i][j] holds output j's 16 level-1 sums (S_2i + S_2i+1); the x16 tree pairs
     * adjacent lanes of one output only, so lane j is exactly ls_tree over its S_0..S_31. */
    for (int i = 0; i < R; i++) _mm512_mask_storeu_ps(yr[i] + nb0, km, ls_z_tree16_x16(L1[i]));
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

/* ---- single-row path over the panel copy (Q4_1, Q8_0 at M = 1; see internal.h) ----
 * Lane r = weight row 16P + r.  A unit's integer dot products for the 16 rows are 8
 * vpdpbusd against the unit's 4-byte activation chunks broadcast; c_b is lane-wise the
 * scalar step 2 (d, m per lane; dx, sx broadcast).  S_g = (+0 + c_g) + c_{g+32} + ... in
 * increasing b, and the adjacent pairwise tree over S_0..S_31 is formed as the groups
 * complete (a binary counter: stk[l] holds the pending left subtree of 2^l leaves), so
 * every lane is exactly the scalar ls_tree of its row, with vertical adds only. */

/* Panel types with nibble codes (Q4_0, Q4_1, Q4_K): the same code operands, only c_b
 * differs; the others (Q8_0, Q5_0, Q5_1, Q5_K, Q6_K) have byte codes. */
#define LS_Z_PNIB(type) ((type) == LS_TYPE_Q4_0 || (type) == LS_TYPE_Q4_1 || (type) == LS_TYPE_Q4_K)

/* Prefetch of the next panel's unit b (codes and scale lines), one panel ahead, into L2
 * (LS_PANEL_PF_HINT): the weights stream from L3 or DRAM, and the hardware prefetcher
 * alone leaves the kernel waiting on them.  pn = NULL: no next panel. */
AI void ls_z_pf_unit(const uint32_t type, const ls_wmat *w, const uint8_t *pn, int64_t b) {
    if (!pn) return;
    const char *c = (const char *)(pn + (size_t)b * w->pcode);
    _mm_prefetch(c, LS_PANEL_PF_HINT);
    _mm_prefetch(c + 64, LS_PANEL_PF_HINT);
    _mm_prefetch(c + 128, LS_PANEL_PF_HINT);
    _mm_prefetch(c + 192, LS_PANEL_PF_HINT);
    if (!LS_Z_PNIB(type)) { /* byte codes: 512 bytes */
        _mm_prefetch(c + 256, LS_PANEL_PF_HINT);
        _mm_prefetch(c + 320, LS_PANEL_PF_HINT);
        _mm_prefetch(c + 384, LS_PANEL_PF_HINT);
        _mm_prefetch(c + 448, LS_PANEL_PF_HINT);
    }
    if (!(b & 1)) {
        const char *d = (const char *)(pn + (size_t)w->nb * w->pcode + 32 * (size_t)b);
        _mm_prefetch(d, LS_PANEL_PF_HINT);
        if (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q5_1) _mm_prefetch(d + 32 * (size_t)w->nb, LS_PANEL_PF_HINT);
    }
    if ((type == LS_TYPE_Q4_K || type == LS_TYPE_Q5_K) && !(b & 7)) /* the super-block's d, dmin line */
        _mm_prefetch((const char *)(pn + (size_t)w->nb * (w->pcode + 32) + 8 * (size_t)b), LS_PANEL_PF_HINT);
    if (type == LS_TYPE_Q6_K && !(b & 15)) /* two super-blocks' d */
        _mm_prefetch((const char *)(pn + (size_t)w->nb * (w->pcode + 32) + 4 * (size_t)b), LS_PANEL_PF_HINT);
}

/* Activation chunk s (elements 4s..4s+3) of unit b, broadcast to 16 lanes. */
AI __m512i ls_z_xb(const ls_xq *x, int64_t nb, int64_t b, int s) {
    int32_t v;
    memcpy(&v, x->q + ls_xq_chunk(nb, b, s), 4);
    return _mm512_set1_epi32(v);
}

/* c_b for the 16 rows of a panel (p = the panel's base). */
AI __m512 ls_z_pc(const uint32_t type, const ls_wmat *w, const uint8_t *p, const ls_xq *x, int64_t b) {
    const int64_t nb = w->nb;
    const uint8_t *codes = p + (size_t)b * w->pcode;
    const uint8_t *dp = p + (size_t)nb * w->pcode + 32 * (size_t)b;
    __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dp));
    __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(x->dx[b]));
    if (type == LS_TYPE_Q4_1) {
        const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8((char)0xF0);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i v = _mm512_loadu_si512(codes + 64 * q);
            acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(v, m4), ls_z_xb(x, nb, b, q));
            acc2 = _mm512_dpbusd_epi32(acc2, _mm512_and_si512(v, m4h), ls_z_xb(x, nb, b, q + 4));
        }
        __m512i isum = _mm512_add_epi32(acc, _mm512_srai_epi32(acc2, 4)); /* acc2 = 16 * (exact sum) */
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dp + 32 * (size_t)nb)));
        return _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), _mm512_mul_ps(m, _mm512_set1_ps(x->sx[b])));
    }
    /* Q8_0: codes u = w + 128 */
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++) {
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(codes + 64 * s), ls_z_xb(x, nb, b, s));
        acc2 = _mm512_dpbusd_epi32(acc2, _mm512_loadu_si512(codes + 64 * (s + 4)), ls_z_xb(x, nb, b, s + 4));
    }
    __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(acc, acc2), _mm512_set1_epi32(128 * x->sq[b]));
    return _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum));
}

/* y for the 16 rows of panel P against one activation row. */
AI __m512 ls_z_panel(const uint32_t type, const ls_wmat *w, int64_t P, const ls_xq *x, const uint8_t *pn) {
    const uint8_t *p = w->panel + (size_t)P * w->panel_bytes;
    const int64_t nb = w->nb;
    __m512 stk[6];
#pragma GCC unroll 32
    for (int g = 0; g < LS_NGRP; g++) {
        __m512 t = _mm512_setzero_ps();
        for (int64_t b = g; b < nb; b += LS_NGRP) {
            ls_z_pf_unit(type, w, pn, b);
            t = _mm512_add_ps(t, ls_z_pc(type, w, p, x, b));
        }
        int lvl = 0;
        for (; (g >> lvl) & 1; lvl++) t = _mm512_add_ps(stk[lvl], t);
        stk[lvl] = t;
    }
    return stk[5];
}

AI void ls_z_panel_rows1(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    const ls_wmat *w = job->w;
    ls_xq x = ls_xq_row(job->xq, w->K, 0);
    for (int64_t P = n0 / 16; P * 16 < n1; P++) {
        int64_t lo = P * 16 > n0 ? P * 16 : n0, hi = P * 16 + 16 < n1 ? P * 16 + 16 : n1;
        __mmask16 km = (__mmask16)((((1u << (hi - P * 16)) - 1) >> (lo - P * 16)) << (lo - P * 16));
        const uint8_t *pn = (P + 1) * 16 < n1 ? w->panel + (size_t)(P + 1) * w->panel_bytes : NULL;
        _mm512_mask_storeu_ps(job->y + P * 16, km, ls_z_panel(type, w, P, &x, pn));
    }
}

/* R activation rows x the 16 rows of panel P (the multi-row form of ls_z_panel): each
 * unit's weight operands are loaded once for all R rows, slot by slot, with R independent
 * dpbusd per slot; every row's c_b, S_g and tree are the scalar recipe's operations in its
 * order.  Q4_1's high nibbles are shifted down once per unit, so one integer sum per row
 * covers all 8 slots (the same exact integer as ls_z_pc's two).  Q4_1 tiles of up to
 * LS_PT_PAIR_R rows run groups in pairs (g, g + 1), so units b and b + 1 are computed side
 * by side: their dpbusd chains are independent, which keeps a few-row tile from waiting
 * on one chain's latency; each group still enters the tree in order.  Groups
 * past the last unit (nb < 32) are empty: S_g = +0, and a subtree of them is +0, so
 * joining one to a real subtree x is the single add x + (+0); the tree is not walked
 * for them. */
#define LS_PT_R LS_XP_R /* 12 */
/* Rows per tile: Q6_K keeps two accumulators per row (its two half scales), so fewer rows
 * fit the 32 registers (measured, 8192 x 2048 at M = 64 and 512: 6 rows 0.8-0.9x the time
 * of 8, 12 rows 1.15x, 4 rows 1.05x). */
#ifndef LS_PT_R_Q6K
#define LS_PT_R_Q6K 6
#endif
#if LS_Z_AMX /* the tile products keep no accumulators in registers: every type takes 12 rows */
#define LS_PT_RMAX(type) ((void)(type), LS_PT_R)
#else
#define LS_PT_RMAX(type) ((type) == LS_TYPE_Q6_K ? LS_PT_R_Q6K : LS_PT_R)
#endif
#ifndef LS_PT_PAIR_R
#define LS_PT_PAIR_R 3 /* Q4_1 tiles of up to 3 rows pair units (measured: slower for Q8_0; from 4 rows
                        * on two units' accumulators do not fit in 32 registers) */
#endif

#if LS_Z_AMX
/* ---- AMX: a unit's integer dot products as one tile product ---------------------------
 * Tile C (R x 16 int32) += A (R x 32 int8: the unit's activations of R rows, their packed
 * records LS_XP_ROW bytes apart) . B (8 x 64 bytes: row s = slot s of the 16 weight rows,
 * 4 codes each): tdpbsud multiplies signed activation bytes by unsigned weight codes and
 * adds 4 products at a time into int32 without saturation, exactly what vpdpbusd does
 * lane by lane, so C's row r is acc[u][r] bit for bit.  A panel's slot s is already that
 * B row (64 bytes: row n's codes 4s..4s+3 at 4n), for byte codes straight from the panel;
 * nibble codes are split into the 8 slot rows first (low nibbles slots 0..3, high ones
 * 4..7, as the vpdpbusd path splits them).  Q6_K's two halves (slots 0..3 and 4..7, each
 * with its own scale) are two products of 16-byte A and 4-row B tiles into two C tiles.
 * Tiles: 0, 1 = C (1 for Q6_K's second half), 2 = A, 3 = B, 4 = A half, 5 = B
 * half; ls_z_amx_config sets their shapes for R rows.  One unit at a time, the tile
 * unit's latency (loads, product, store, then the vector loads) sits on every unit's path:
 * measured 0.70-0.86x the AVX-512 level's prefill (docs/benchmarks.md), so the level runs
 * only when asked for.  GCC 12's tile intrinsics declare
 * no memory operands (the stores filling a B buffer could be dropped or moved past the
 * load), so these asm statements clobber memory. */
#ifndef LS_AMX_MIN_R
#define LS_AMX_MIN_R 4 /* fewer rows stay on vpdpbusd (the tile's fixed cost is not repaid) */
#endif
_Static_assert(LS_AMX_MIN_R > LS_PT_PAIR_R, "AMX tiles take one unit at a time (no paired units)");
#define LS_TZERO(t) __asm__ volatile("tilezero %%tmm" #t ::: "memory")
#define LS_TLOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)), "r"((long)(stride)) : "memory")
#define LS_TSTORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void *)(base)), "r"((long)(stride)) : "memory")
#define LS_TDPBSUD(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")

typedef struct {
    uint8_t palette, start_row, rsv[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} ls_amx_cfg;

static void ls_z_amx_config(int R) {
    ls_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = c.rows[1] = (uint8_t)R, c.colsb[0] = c.colsb[1] = 64;
    c.rows[2] = (uint8_t)R, c.colsb[2] = 32;
    c.rows[3] = 8, c.colsb[3] = 64;
    c.rows[4] = (uint8_t)R, c.colsb[4] = 16;
    c.rows[5] = 4, c.colsb[5] = 64;
    __asm__ volatile("ldtilecfg %0" ::"m"(c)); /* the whole struct is the operand */
}

AI void ls_z_amx_units(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *p, const uint8_t *xpb,
                       int64_t b, __m512i acc[2][LS_PT_R]) {
    _Alignas(64) int32_t cb[2][LS_PT_R][16];
    const uint8_t *codes = p + (size_t)b * w->pcode, *xu = xpb + (size_t)b * LS_XP_UNIT;
    if (type == LS_TYPE_Q6_K) {
        LS_TZERO(0);
        LS_TZERO(1);
        LS_TLOAD(4, xu, LS_XP_ROW);
        LS_TLOAD(5, codes, 64);
        LS_TDPBSUD(0, 4, 5);
        LS_TLOAD(4, xu + 16, LS_XP_ROW);
        LS_TLOAD(5, codes + 256, 64);
        LS_TDPBSUD(1, 4, 5);
        LS_TSTORE(0, cb[0], 64);
        LS_TSTORE(1, cb[1], 64);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            acc[0][r] = _mm512_load_si512(cb[0][r]);
            acc[1][r] = _mm512_load_si512(cb[1][r]);
        }
        return;
    }
    _Alignas(64) uint8_t wb[512];
    const uint8_t *bt = codes;
    if (LS_Z_PNIB(type)) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i v = _mm512_loadu_si512(codes + 64 * q);
            _mm512_store_si512(wb + 64 * q, _mm512_and_si512(v, m4));
            _mm512_store_si512(wb + 256 + 64 * q, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
        bt = wb;
    }
    LS_TLOAD(2, xu, LS_XP_ROW);
    LS_TLOAD(3, bt, 64);
    LS_TZERO(0);
    LS_TDPBSUD(0, 2, 3);
    LS_TSTORE(0, cb[0], 64);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[0][r] = _mm512_load_si512(cb[0][r]);
}
#endif

/* c_b for U (1 or 2) consecutive units b, b + 1 and R rows: c[u][r]. */
AI void ls_z_tile_units(const uint32_t type, const int R, const int U, const ls_wmat *w, const uint8_t *p,
                        const uint8_t *xpb, int64_t b, const uint8_t *pn, __m512 c[2][LS_PT_R]) {
    const int64_t nb = w->nb;
    const uint8_t *dbase = p + (size_t)nb * w->pcode;
    /* acc[u][r]: unit b + u, row r; Q6_K (U = 1): acc[0][r] slots 0..3 (elements 0..15),
     * acc[1][r] slots 4..7 (elements 16..31), the two halves of its two scales */
    __m512i acc[2][LS_PT_R];
    const int UA = type == LS_TYPE_Q6_K ? 2 : U;
    ls_z_pf_unit(type, w, pn, b);
    if (U == 2) ls_z_pf_unit(type, w, pn, b + 1);
#pragma GCC unroll 2
    for (int u = 0; u < UA; u++) {
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) acc[u][r] = _mm512_setzero_si512();
    }
#if LS_Z_AMX
    if (R >= LS_AMX_MIN_R) { /* the tile products of ls_z_amx_units: the same exact integers */
        ls_z_amx_units(type, R, w, p, xpb, b, acc); /* U = 1: units are paired only below LS_AMX_MIN_R rows */
        goto have_acc;
    }
#endif
    /* slot-major: U * R independent dpbusd per slot (the integer sums are exact in any order) */
#pragma GCC unroll 8
    for (int s2 = 0; s2 < 8; s2++) {
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            const uint8_t *codes = p + (size_t)(b + u) * w->pcode;
            const uint8_t *xu = xpb + (size_t)(b + u) * LS_XP_UNIT; /* this unit's packed activations */
            __m512i wv;
            if (LS_Z_PNIB(type)) {
                const __m512i m4 = _mm512_set1_epi8(0x0F);
                wv = s2 < 4 ? _mm512_and_si512(_mm512_loadu_si512(codes + 64 * s2), m4)
                            : _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(codes + 64 * (s2 - 4)), 4), m4);
            } else {
                wv = _mm512_loadu_si512(codes + 64 * s2);
            }
            const int ua = type == LS_TYPE_Q6_K ? s2 >> 2 : u;
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                int32_t v0;
                memcpy(&v0, xu + r * LS_XP_ROW + s2 * 4, 4);
                acc[ua][r] = _mm512_dpbusd_epi32(acc[ua][r], wv, _mm512_set1_epi32(v0));
            }
        }
    }
#if LS_Z_AMX
have_acc:
#endif
    if (type == LS_TYPE_Q4_K || type == LS_TYPE_Q5_K) {
        /* c_b = fma(d * dx, (float)(isum * sc), (-(dmin * mn)) * sx), as c_kq: isum * sc is
         * formed as (float)isum * (float)sc, the same value, since |isum| <= 32 * 31 * 127 and
         * sc <= 63 make the product an integer below 2^24 (exact in float either way). */
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            const uint8_t *xu = xpb + (size_t)(b + u) * LS_XP_UNIT;
            const uint8_t *sp = dbase + 32 * (size_t)(b + u);
            const uint8_t *kp = dbase + 32 * (size_t)nb + 8 * (size_t)((b + u) & ~(int64_t)7);
            const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)kp));
            const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kp + 32)));
            const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sp)));
            const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sp + 16))));
            const __m512 nmt = _mm512_castsi512_ps(
                _mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dmin, mn)), _mm512_set1_epi32((int)0x80000000)));
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                float dx, sx;
                memcpy(&dx, xu + r * LS_XP_ROW + LS_XP_DX, 4);
                memcpy(&sx, xu + r * LS_XP_ROW + LS_XP_SX, 4);
                const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(dx));
                const __m512 is = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[u][r]), sc);
                c[u][r] = _mm512_fmadd_ps(dd, is, _mm512_mul_ps(nmt, _mm512_set1_ps(sx)));
            }
        }
        return;
    }
    if (type == LS_TYPE_Q6_K) {
        /* isum = s0 * (A - 32 sqlo) + s1 * (B - 32 sqhi), A, B the halves' sums of u * q
         * (u = w + 32), formed as s0 * A + s1 * B - (32 s0 * sqlo + 32 s1 * sqhi): the last
         * term one vpmaddwd of the rows' (32 s0, 32 s1) int16 pairs (|32 s| <= 4096) with the
         * activation's (sqlo, sqhi) (|sq| <= 16 * 127).  Every partial value is an exact
         * int32 (|s * A| <= 128 * 16 * 63 * 127), and isum is the recipe's integer. */
        const uint8_t *xu = xpb + (size_t)b * LS_XP_UNIT;
        const __m512i sc16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(dbase + 32 * (size_t)b)));
        const __m512i s0 = _mm512_srai_epi32(_mm512_slli_epi32(sc16, 16), 16), s1 = _mm512_srai_epi32(sc16, 16);
        const __m512i sc32 = _mm512_slli_epi16(sc16, 5);
        const __m512 d = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(dbase + 32 * (size_t)nb + 4 * (size_t)(b & ~(int64_t)7))));
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            float dx;
            int32_t sqp;
            memcpy(&dx, xu + r * LS_XP_ROW + LS_XP_DX, 4);
            memcpy(&sqp, xu + r * LS_XP_ROW + LS_XP_SQP, 4);
            const __m512i corr = _mm512_madd_epi16(sc32, _mm512_set1_epi32(sqp));
            const __m512i isum = _mm512_sub_epi32(
                _mm512_add_epi32(_mm512_mullo_epi32(acc[0][r], s0), _mm512_mullo_epi32(acc[1][r], s1)), corr);
            c[0][r] = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(isum));
        }
        return;
    }
#pragma GCC unroll 2
    for (int u = 0; u < U; u++) {
        const uint8_t *xu = xpb + (size_t)(b + u) * LS_XP_UNIT;
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dbase + 32 * (size_t)(b + u))));
        __m512 m = _mm512_setzero_ps();
        if (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q5_1)
            m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dbase + 32 * (size_t)(nb + b + u))));
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            float dx, sx;
            int32_t sq128;
            memcpy(&dx, xu + r * LS_XP_ROW + LS_XP_DX, 4);
            __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(dx));
            if (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q5_1) {
                memcpy(&sx, xu + r * LS_XP_ROW + LS_XP_SX, 4);
                c[u][r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(acc[u][r]), _mm512_mul_ps(m, _mm512_set1_ps(sx)));
            } else { /* Q8_0, Q5_0, Q4_0: isum = acc - off * sq, off * sq = 128 * sq >> (7 - log2 off) */
                memcpy(&sq128, xu + r * LS_XP_ROW + LS_XP_SQ, 4);
                const int32_t osq = type == LS_TYPE_Q5_0 ? sq128 >> 3 : type == LS_TYPE_Q4_0 ? sq128 >> 4 : sq128; /* exact */
                __m512i isum = _mm512_sub_epi32(acc[u][r], _mm512_set1_epi32(osq));
                c[u][r] = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum));
            }
        }
    }
}

/* Adds group g's sums S (R rows) to the tree: stk[.][l] holds the pending left subtree
 * of 2^l leaves; bit l of *zst says it is a subtree of empty groups (exactly +0). */
AI void ls_z_tree_push(const int R, __m512 stk[][6], unsigned *zst, int g, __m512 *S) {
    int lvl = 0;
    for (; (g >> lvl) & 1; lvl++) {
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) S[r] = _mm512_add_ps(stk[r][lvl], S[r]);
    }
    *zst &= ~(1u << lvl);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) stk[r][lvl] = S[r];
}

/* The same for an empty group g (S_g = +0): combining a real left subtree x with a
 * subtree of empty groups is the single add x + (+0). */
AI void ls_z_tree_push_empty(const int R, __m512 stk[][6], unsigned *zst, int g) {
    __m512 T[LS_PT_R];
    bool tz = true;
    int lvl = 0;
    for (; (g >> lvl) & 1; lvl++) {
        if (*zst >> lvl & 1) continue; /* +0 + +0 */
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) T[r] = _mm512_add_ps(stk[r][lvl], tz ? _mm512_setzero_ps() : T[r]);
        tz = false;
    }
    if (tz) {
        *zst |= 1u << lvl;
    } else {
        *zst &= ~(1u << lvl);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) stk[r][lvl] = T[r];
    }
}

AI void ls_z_panel_tile(const uint32_t type, const int R, const ls_wmat *w, int64_t P, const uint8_t *xpb,
                         float *const *yr, __mmask16 km, const uint8_t *pn) {
    const uint8_t *p = w->panel + (size_t)P * w->panel_bytes;
    const int64_t nb = w->nb;
    __m512 stk[LS_PT_R][6];
    unsigned zst = 0;
    if (!LS_Z_PNIB(type) || R > LS_PT_PAIR_R) { /* one group at a time */
        for (int g = 0; g < LS_NGRP; g++) {
            if (g >= nb) {
                ls_z_tree_push_empty(R, stk, &zst, g);
                continue;
            }
            __m512 S[LS_PT_R], c[2][LS_PT_R];
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) S[r] = _mm512_setzero_ps();
            for (int64_t b = g; b < nb; b += LS_NGRP) {
                ls_z_tile_units(type, R, 1, w, p, xpb, b, pn, c);
#pragma GCC unroll 16
                for (int r = 0; r < R; r++) S[r] = _mm512_add_ps(S[r], c[0][r]);
            }
            ls_z_tree_push(R, stk, &zst, g, S);
        }
    } else { /* groups g, g + 1 side by side */
        for (int g = 0; g < LS_NGRP; g += 2) {
            if (g >= nb) {
                ls_z_tree_push_empty(R, stk, &zst, g);
                ls_z_tree_push_empty(R, stk, &zst, g + 1);
                continue;
            }
            __m512 S[2][LS_PT_R], c[2][LS_PT_R];
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) S[0][r] = S[1][r] = _mm512_setzero_ps();
            for (int64_t b = g; b < nb; b += LS_NGRP) {
                if (b + 1 < nb) { /* units b (group g) and b + 1 (group g + 1) */
                    ls_z_tile_units(type, R, 2, w, p, xpb, b, pn, c);
#pragma GCC unroll 16
                    for (int r = 0; r < R; r++) {
                        S[0][r] = _mm512_add_ps(S[0][r], c[0][r]);
                        S[1][r] = _mm512_add_ps(S[1][r], c[1][r]);
                    }
                } else { /* b is the last unit: group g + 1 has none in this round */
                    ls_z_tile_units(type, R, 1, w, p, xpb, b, pn, c);
#pragma GCC unroll 16
                    for (int r = 0; r < R; r++) S[0][r] = _mm512_add_ps(S[0][r], c[0][r]);
                }
            }
            ls_z_tree_push(R, stk, &zst, g, S[0]);
            if (g + 1 < nb)
                ls_z_tree_push(R, stk, &zst, g + 1, S[1]);
            else
                ls_z_tree_push_empty(R, stk, &zst, g + 1);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(yr[r] + P * 16, km, stk[r][5]);
}

/* All M rows x columns [n0, n1) over the panel copy: column blocks that stay in L2, row
 * tiles of up to LS_PT_R rows inside each. */
AI void ls_z_panel_mm(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    const ls_wmat *w = job->w;
    const int64_t M = job->M;
    LS_ASSERT(job->xp); /* ls_matmul_multi_rows packs the activations */
    int64_t pblk = (int64_t)(256 * 1024 / w->panel_bytes);
    if (pblk < 1) pblk = 1;
    int64_t P0 = n0 / 16, P1 = (n1 + 15) / 16;
#if LS_Z_AMX
    int cfg_r = 0; /* the rows the tile shapes are set for (0: none yet) */
#endif
    for (int64_t q0 = P0; q0 < P1; q0 += pblk) {
        int64_t q1 = q0 + pblk < P1 ? q0 + pblk : P1;
        /* row tiles follow the packed tiles: rows a .. the next multiple of LS_PT_R */
        for (int64_t m0 = 0; m0 < M;) {
            const int64_t a = job->xp_row0 + m0;
            int R = LS_PT_R - (int)(a % LS_PT_R);
            if (R > LS_PT_RMAX(type)) R = LS_PT_RMAX(type);
            if (R > M - m0) R = (int)(M - m0);
            const uint8_t *xpb = job->xp + (size_t)(a / LS_PT_R) * ls_xp_tile_bytes(w->K) + (size_t)(a % LS_PT_R) * LS_XP_ROW;
            float *yr[LS_PT_R];
            for (int r = 0; r < R; r++) yr[r] = job->y + (m0 + r) * w->N;
#if LS_Z_AMX
            if (R >= LS_AMX_MIN_R && R != cfg_r) ls_z_amx_config(cfg_r = R);
#endif
            for (int64_t P = q0; P < q1; P++) {
                int64_t lo = P * 16 > n0 ? P * 16 : n0, hi = P * 16 + 16 < n1 ? P * 16 + 16 : n1;
                __mmask16 km = (__mmask16)((((1u << (hi - P * 16)) - 1) >> (lo - P * 16)) << (lo - P * 16));
                /* the panel computed next: P + 1 in this block, or after the last row tile the
                 * next block's first (a block of one large panel still streams ahead) */
                const int64_t Pn = P + 1 < q1 || m0 + R >= M ? P + 1 : P1;
                const uint8_t *pn = Pn < P1 ? w->panel + (size_t)Pn * w->panel_bytes : NULL;
                switch (R) {
                case 12: if (LS_PT_RMAX(type) >= 12) ls_z_panel_tile(type, 12, w, P, xpb, yr, km, pn); break;
                case 11: if (LS_PT_RMAX(type) >= 11) ls_z_panel_tile(type, 11, w, P, xpb, yr, km, pn); break;
                case 10: if (LS_PT_RMAX(type) >= 10) ls_z_panel_tile(type, 10, w, P, xpb, yr, km, pn); break;
                case 9: if (LS_PT_RMAX(type) >= 9) ls_z_panel_tile(type, 9, w, P, xpb, yr, km, pn); break;
                case 8: ls_z_panel_tile(type, 8, w, P, xpb, yr, km, pn); break;
                case 7: ls_z_panel_tile(type, 7, w, P, xpb, yr, km, pn); break;
                case 6: ls_z_panel_tile(type, 6, w, P, xpb, yr, km, pn); break;
                case 5: ls_z_panel_tile(type, 5, w, P, xpb, yr, km, pn); break;
                case 4: ls_z_panel_tile(type, 4, w, P, xpb, yr, km, pn); break;
                case 3: ls_z_panel_tile(type, 3, w, P, xpb, yr, km, pn); break;
                case 2: ls_z_panel_tile(type, 2, w, P, xpb, yr, km, pn); break;
                default: ls_z_panel_tile(type, 1, w, P, xpb, yr, km, pn); break;
                }
            }
            m0 += R;
        }
    }
#if LS_Z_AMX
    if (cfg_r) __asm__ volatile("tilerelease" ::: "memory"); /* the thread's tile state back to its initial, empty form */
#endif
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
    const bool flt = type == LS_TYPE_F32 || type == LS_TYPE_F16 || type == LS_TYPE_BF16;
    for (int i = 0; i < R; i++) {
        yr[i] = job->y + (m0 + i) * w->N;
        if (flt)
            xf[i] = job->x + (m0 + i) * w->K;
        else
            xq[i] = ls_xq_row(job->xq, w->K, m0 + i);
    }
    if (!flt) {
        for (int64_t n = n0; n < n1; n += 16) ls_z_block_q(type, R, w, xq, yr, n, n1 - n < 16 ? (int)(n1 - n) : 16);
        return;
    }
    for (int64_t n = n0; n < n1; n++) ls_z_tile_f(type, R, w, w->data + (size_t)n * w->row_bytes, xf, yr, n);
}

/* The multi-row panel kernel of each panel type as a function of its own: inlined into
 * the type's entry next to the group-record paths, the one function grew past what GCC's
 * register allocator handles well, and the tile's accumulators went to the stack (Q5_0 at
 * 640 x 2048, M = 512: 1.65x the time of the same tile code in Q8_0's smaller entry). */
#define LS_Z_PANEL_MM_FN(T, nm)                                                                             \
    static __attribute__((noinline)) void ls_z_panel_mm_##nm(const ls_mm_job *job, int64_t n0, int64_t n1) { \
        ls_z_panel_mm(T, job, n0, n1);                                                                      \
    }
LS_PANEL_TYPE_LIST(LS_Z_PANEL_MM_FN)

AI void ls_z_panel_mm_call(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
#define LS_Z_PANEL_MM_CASE(T, nm) case T: ls_z_panel_mm_##nm(job, n0, n1); break;
    switch (type) {
    LS_PANEL_TYPE_LIST(LS_Z_PANEL_MM_CASE)
    default: break;
    }
#undef LS_Z_PANEL_MM_CASE
}

AI void ls_z_mm_type(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    int64_t M = job->M;
    if (ls_panel_type(type)) { /* the panel copy (the type's only layout), every M */
        LS_ASSERT(job->w->panel); /* ls_wmat_prepare built it */
        if (M == 1 && (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q8_0))
            ls_z_panel_rows1(type, job, n0, n1);
        else
            ls_z_panel_mm_call(type, job, n0, n1);
        return;
    }
    int64_t nblk = n1 - n0;
    if (M >= LS_GEMM_MIN_M) { /* keep a block of weight rows in L2 while all row tiles pass over it */
        nblk = (int64_t)(LS_GEMM_L2_BYTES / (job->w->row_bytes + 1)) & ~(int64_t)15; /* whole 16-row blocks */
        if (nblk < 16) nblk = 16;
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

#define LS_Z_ENTRY(T, nm) \
    void LS_Z_CAT(ls_mm_##nm##_, LS_Z_SFX)(const ls_mm_job *job, int64_t n0, int64_t n1) { ls_z_mm_type(T, job, n0, n1); }
LS_WTYPE_LIST(LS_Z_ENTRY)

#if !LS_Z_AMX /* the AMX level uses this level's quantizer */

/* Step 1 of the recipe (matmul.c's ls_quantize_x_row) with AVX-512, the same bits:
 * amax is an exact maximum, d and id are the same correctly rounded divisions, x * id and
 * the rounding (x*id + 1.5*2^23, then the integer bits) are lane-wise the scalar
 * operations, and the sums are exact integers.  Full groups of 16 blocks run 16 blocks at
 * once: the per-block maxima come out of one transposing reduction (lane l = block l,
 * every lane reducing only its own block), d, id, sx are vector operations, and the codes
 * are gathered into the slot vectors of the xq layout, whose vpdpbusd with 1s gives the
 * block sums.
 * The last, partial group runs a block at a time.  With xp (the tile-packed record of this
 * row's unit 0; unit b at xp + b * LS_XP_UNIT), the same pass writes the packed copy. */

/* |x| as integers: for non-negative floats the bit patterns order as the values do, and
 * every NaN pattern is above +inf, so one unsigned maximum gives amax and finiteness. */
AI __m512i ls_z_absbits(const float *p) {
    return _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(p)), _mm512_set1_epi32(0x7fffffff));
}

/* One level of a transposing maximum over a|b: lanes 0..7 take the maxima of a's adjacent
 * lane pairs, lanes 8..15 b's. */
AI __m512i ls_z_pair_maxu(__m512i a, __m512i b) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_max_epu32(_mm512_permutex2var_epi32(a, ev, b), _mm512_permutex2var_epi32(a, od, b));
}

/* Lane j of the result is the unsigned maximum of v[j]'s 16 lanes. */
AI __m512i ls_z_max16_x16u(const __m512i *v) {
    __m512i u[8], t[4];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) u[j] = ls_z_pair_maxu(v[2 * j], v[2 * j + 1]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) t[j] = ls_z_pair_maxu(u[2 * j], u[2 * j + 1]);
    return ls_z_pair_maxu(ls_z_pair_maxu(t[0], t[1]), ls_z_pair_maxu(t[2], t[3]));
}

/* One block at a time (the partial last group). */
static void ls_quantize_block_avx512(const float *xb, int64_t nb, int64_t b, int8_t *q, float *dx, float *sx,
                                     int32_t *sq, int32_t *sqlo, uint8_t *rec) {
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512i mbits = _mm512_set1_epi32(0x4B400000);
    uint32_t ab = (uint32_t)_mm512_reduce_max_epu32(_mm512_max_epu32(ls_z_absbits(xb), ls_z_absbits(xb + 16)));
    float amax;
    memcpy(&amax, &ab, 4);
    int32_t s = 0, slo = 0;
    float d = 0.0f;
    uint32_t qd[8] = {0};
    if (ab <= 0x7f7fffffu && amax >= LS_QX_TINY) {
        d = amax / 127.0f;
        __m512 id = _mm512_set1_ps(127.0f / amax);
        __m512i v0 = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(xb), id), magic)), mbits);
        __m512i v1 = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), id), magic)), mbits);
        slo = _mm512_reduce_add_epi32(v0);
        s = slo + _mm512_reduce_add_epi32(v1);
        _mm_storeu_si128((__m128i *)qd, _mm512_cvtepi32_epi8(v0));
        _mm_storeu_si128((__m128i *)(qd + 4), _mm512_cvtepi32_epi8(v1));
    } else if (ab > 0x7f7fffffu) {
        d = NAN;
    }
    for (int t = 0; t < 8; t++) memcpy(q + ls_xq_chunk(nb, b, t), &qd[t], 4);
    dx[b] = d;
    sx[b] = d * (float)s;
    sq[b] = s;
    sqlo[b] = slo;
    if (rec) {
        int32_t sq128 = 128 * s;
        int16_t sqp[2] = {(int16_t)slo, (int16_t)(s - slo)};
        memcpy(rec, qd, 32);
        memcpy(rec + LS_XP_DX, &dx[b], 4);
        memcpy(rec + LS_XP_SX, &sx[b], 4);
        memcpy(rec + LS_XP_SQ, &sq128, 4);
        memcpy(rec + LS_XP_SQP, sqp, 4);
    }
}

void ls_quantize_x_row_avx512(const float *x, int64_t K, void *row_out, uint8_t *xp) {
    const int64_t nb = K / 32;
    uint8_t *base = row_out;
    int8_t *q = (int8_t *)base;
    float *dx = (float *)(base + K), *sx = dx + nb;
    int32_t *sq = (int32_t *)(sx + nb), *sqlo = sq + nb;
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512i mbits = _mm512_set1_epi32(0x4B400000);
    int64_t G = 0;
    for (; (G + 1) * LS_GROUP <= nb; G++) {
        const float *xg = x + G * LS_GROUP * 32;
        __m512i am[16];
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) am[l] = _mm512_max_epu32(ls_z_absbits(xg + 32 * l), ls_z_absbits(xg + 32 * l + 16));
        const __m512i abits = ls_z_max16_x16u(am);
        const __mmask16 fin = _mm512_cmple_epu32_mask(abits, _mm512_set1_epi32(0x7f7fffff));
        const __m512 amax = _mm512_castsi512_ps(abits);
        const __mmask16 ok = fin & _mm512_cmp_ps_mask(amax, _mm512_set1_ps(LS_QX_TINY), _CMP_GE_OQ);
        __m512 d = _mm512_maskz_div_ps(ok, amax, _mm512_set1_ps(127.0f));
        d = _mm512_mask_mov_ps(d, (__mmask16)~fin, _mm512_set1_ps(NAN));
        const __m512 id = _mm512_maskz_div_ps(ok, _mm512_set1_ps(127.0f), amax);
        int8_t *qg = q + G * (LS_GROUP * 32);
        uint8_t *recg = xp ? xp + (size_t)G * LS_GROUP * LS_XP_UNIT : NULL;
        uint32_t tq[16][8]; /* block l's 32 codes in element order (without xp) */
        uint8_t *qb = recg ? recg : (uint8_t *)tq;
        const int qstride = recg ? LS_XP_UNIT : 32;
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            const __mmask16 k = (ok >> l & 1) ? 0xFFFF : 0;
            const __m512 idl = _mm512_permutexvar_ps(_mm512_set1_epi32(l), id);
            __m512i lo = _mm512_maskz_sub_epi32(k, _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(xg + 32 * l), idl), magic)), mbits);
            __m512i hi = _mm512_maskz_sub_epi32(k, _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(xg + 32 * l + 16), idl), magic)), mbits);
            _mm_storeu_si128((__m128i *)(qb + l * qstride), _mm512_cvtepi32_epi8(lo));
            _mm_storeu_si128((__m128i *)(qb + l * qstride + 16), _mm512_cvtepi32_epi8(hi));
        }
        /* the xq layout of a full group: slot t of block l at (t * 16 + l) * 4 (ls_xq_chunk) */
        const __m512i gidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(qstride / 4));
        /* slot vectors: lane l = block l's 4 codes; a vpdpbusd with 1s sums them (exact) */
        const __m512i ones = _mm512_set1_epi8(1);
        __m512i slo = _mm512_setzero_si512(), shi = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            __m512i o = _mm512_i32gather_epi32(_mm512_add_epi32(gidx, _mm512_set1_epi32(t)), qb, 4);
            _mm512_storeu_si512(qg + t * 64, o);
            if (t < 4)
                slo = _mm512_dpbusd_epi32(slo, ones, o);
            else
                shi = _mm512_dpbusd_epi32(shi, ones, o);
        }
        const __m512i s = _mm512_add_epi32(slo, shi);
        const __m512 sxv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s));
        const int64_t b0 = G * LS_GROUP;
        _mm512_storeu_ps(dx + b0, d);
        _mm512_storeu_ps(sx + b0, sxv);
        _mm512_storeu_si512(sq + b0, s);
        _mm512_storeu_si512(sqlo + b0, slo);
        if (recg) {
            int32_t s128[16], sqp[16];
            _mm512_storeu_si512(s128, _mm512_slli_epi32(s, 7));
            /* the two halves' sums as int16 (|sum| <= 16 * 127): slo | shi << 16 */
            _mm512_storeu_si512(sqp, _mm512_or_si512(_mm512_and_si512(slo, _mm512_set1_epi32(0xFFFF)),
                                                     _mm512_slli_epi32(shi, 16)));
            for (int l = 0; l < 16; l++) {
                uint8_t *rec = recg + (size_t)l * LS_XP_UNIT;
                memcpy(rec + LS_XP_DX, &dx[b0 + l], 4);
                memcpy(rec + LS_XP_SX, &sx[b0 + l], 4);
                memcpy(rec + LS_XP_SQ, &s128[l], 4);
                memcpy(rec + LS_XP_SQP, &sqp[l], 4);
            }
        }
    }
    for (int64_t b = G * LS_GROUP; b < nb; b++)
        ls_quantize_block_avx512(x + 32 * b, nb, b, q, dx, sx, sq, sqlo, xp ? xp + (size_t)b * LS_XP_UNIT : NULL);
}

#endif /* !LS_Z_AMX */
