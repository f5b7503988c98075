/* matmul_avx2.c - the canonical matmul recipe with AVX2 + FMA + F16C.
 *
 * The panel types read the panel copy (below, "the panel copy"); MXFP4 reads the group
 * records, the same record layout as the AVX-512 kernel; a group of 16 units is processed as
 * two halves of 8 lanes (one ymm of int32 lanes each).  Unit b = 16G + 8h + l
 * lands in recipe group g = b mod 32, i.e. accumulator S[(2G + h) mod 4], lane l.
 * Integer dot products use vpmaddubsw (u8 x s8 -> s16 pairs) and vpmaddwd with
 * ones; the number of s16 products summed before widening is chosen per type so
 * that no s16 sum can saturate (bounds beside LS_Y_PAIRS), so isum is exact. */
/* The same file, compiled with LS_Y_VNNI = 1 (matmul_avxvnni.c, -mavxvnni), is the
 * AVX-VNNI level: one vpdpbusd (ymm) per slot replaces the vpmaddubsw + vpmaddwd pairs;
 * the integer sums are the same exact integers, so the bits are the same. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/tree_avx2.h"

#ifndef LS_Y_VNNI
#define LS_Y_VNNI 0
#define LS_Y_SFX avx2
#else
#define LS_Y_SFX avxvnni
#endif
#define LS_Y_CAT2(a, b) a##b
#define LS_Y_CAT(a, b) LS_Y_CAT2(a, b)

#define AI static inline __attribute__((always_inline))
/* An accumulator's value as it stands, opaque to the compiler: GCC's reassociation turns
 * a chain of s16 adds (p16 += a + b, slot after slot) into one tree over every product of
 * the unit, which keeps all of them live at once and spilled 32 of them to the stack (the
 * AVX2 Q4_K tile ran at 1.4x the time).  The sums are exact integers in any order; this
 * only keeps the chain a chain. */
#define LS_Y_KEEP(v) __asm__("" : "+x"(v))

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
    __m256i acc = _mm256_setzero_si256(), acc2 = _mm256_setzero_si256();
#if LS_Y_VNNI
    /* two dpbusd chains (slots 0-3, 4-7); Q6_K keeps them apart (its two half scales) */
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        __m256i xs = ls_y_ldb(full, lm, xg + s * ps);
        if (s >= 4)
            acc2 = _mm256_dpbusd_avx_epi32(acc2, W->w[s], xs);
        else
            acc = _mm256_dpbusd_avx_epi32(acc, W->w[s], xs);
    }
    if (type != LS_TYPE_Q6_K) acc = _mm256_add_epi32(acc, acc2);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    const int P = ls_y_pairs(type);
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
#endif
    int64_t u0 = G * LS_GROUP + 8 * h;
    __m256 dx = ls_y_ldf(full, lm, x->dx + u0);
#if LS_Y_VNNI
    if (type == LS_TYPE_Q8_0) /* dpbusd took the unsigned codes u = w + 128: subtract 128 * sum q */
        acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(ls_y_ldi(full, lm, x->sq + u0), 7));
#endif
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q5_0: case LS_TYPE_MXFP4: {
        int off = type == LS_TYPE_Q4_0 ? 8 : type == LS_TYPE_Q5_0 ? 16 : 12;
        __m256i sq = ls_y_ldi(full, lm, x->sq + u0);
        __m256i isum = _mm256_sub_epi32(acc, _mm256_mullo_epi32(sq, _mm256_set1_epi32(off)));
        return _mm256_mul_ps(_mm256_mul_ps(W->f0, dx), _mm256_cvtepi32_ps(isum));
    }
    case LS_TYPE_Q8_0: /* the sign trick (AVX-VNNI: the correction above) gives sum w*q */
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

/* ---- the panel copy (internal.h, docs/numerics.md) -------------------------------------
 * The same layout as the AVX-512 kernels read: a panel of 16 weight rows, per unit b its
 * codes as planes of 16 lanes x 4 bytes (lane r = row 16P + r), then the rows' fp16 d (and
 * m; Q4_K: sc, mn and the super-block d, dmin; its nibble codes are read as Q4_1's; the
 * other types' below, ls_yp_byte_sums, ls_yp_byte_c), the panel types' only layout, read at
 * every M: M = 1 of the nibble types and Q8_0 reads the activations' xq layout, everything
 * else the tile-packed copy (M = 1: a tile of one row).  Here a panel is two halves of 8 lanes (h = 0: rows
 * 0..7, bytes 0..31 of each 64-byte plane; h = 1: rows 8..15).  One unit's integer dot products for the 16 rows come out
 * lane-wise: AVX-VNNI, one vpdpbusd per slot and half against the activation's 4-byte
 * chunk broadcast; AVX2, vpmaddubsw of the nibble operands (Q8_0's byte codes u = w + 128
 * split into their two nibbles, u = 16 hi + lo) summed in s16 over the unit's 8 slots
 * (<= 8 * 2 * 15 * 127 = 30480: no saturation), widened once with vpmaddwd.  Both give the
 * exact isum (Q8_0: minus 128 * sum q).  c_b is lane-wise step 2 (d, m per lane; dx, sx
 * broadcast); S_g = (+0 + c_g) + c_{g+32} + ... in increasing b; the 32-leaf tree is
 * formed as the groups complete (a binary counter of pending left subtrees), vertical adds
 * only, so every lane is its row's scalar recipe.  Tiles of up to LS_YP_R activation rows
 * share each loaded weight operand (rows from the tile-packed activation copy);
 * M >= 2 runs column blocks of ~256 KiB of panels with every row tile passing over each;
 * the next panel is prefetched while one is computed. */
#ifndef LS_YP_R /* at most 6 */
#define LS_YP_R 4
#endif
/* Rows per tile by type: AVX2's 5-bit tiles (both halves per slot, ls_yp_byte_sums: 4
 * accumulators per row) take 3 rows (measured, Q5_0 2048 x 640 at M = 512: 0.97x the time
 * of the group-record path, against 1.04x with 4 rows); the others 4 (Q6_K, measured at
 * 8192 x 2048: 3 rows the same on AVX2, 1.05x the time of 4 on AVX-VNNI at M = 64). */
#define LS_YP_RCAP 6
#ifndef LS_YP_R_B5
#define LS_YP_R_B5 3
#endif
#define LS_YP_RMAX(type) (!LS_Y_VNNI && LS_YP_B5(type) ? LS_YP_R_B5 : LS_YP_R)

/* AVX2 Q4_K tiles of R >= 2 rows apply the sub-block scale in the integer widening
 * (ls_yp_unit); one row does not (measured, 4096 x 2048, this file's kp_mm: M = 64 0.94x
 * the time with it, M = 1 1.03x: one row cannot share the scale's preparation). */
#define LS_YP_KFOLD(type, R) (!LS_Y_VNNI && (type) == LS_TYPE_Q4_K && (R) > 1)

/* Panel types with nibble codes (the others have byte codes). */
#define LS_YP_NIB(type) ((type) == LS_TYPE_Q4_0 || (type) == LS_TYPE_Q4_1 || (type) == LS_TYPE_Q4_K)
/* Panel types with 5-bit byte codes (u <= 31). */
#define LS_YP_B5(type) ((type) == LS_TYPE_Q5_0 || (type) == LS_TYPE_Q5_1 || (type) == LS_TYPE_Q5_K)

/* Prefetch of the next panel's unit b (codes and scale lines); pn = NULL: none. */
AI void ls_yp_pf_unit(const uint32_t type, const ls_wmat *w, const uint8_t *pn, int64_t b) {
    if (!pn) return;
    const char *c = (const char *)(pn + (size_t)b * w->pcode);
    _mm_prefetch(c, LS_PANEL_PF_HINT);
    _mm_prefetch(c + 64, LS_PANEL_PF_HINT);
    _mm_prefetch(c + 128, LS_PANEL_PF_HINT);
    _mm_prefetch(c + 192, LS_PANEL_PF_HINT);
    if (!LS_YP_NIB(type)) { /* byte codes: 512 bytes */
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

AI __m256i ls_yp_bc(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
AI float ls_yp_f(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* Byte-code panels other than Q8_0 (Q5_0, Q5_1, Q5_K: u = w + 16 or u <= 31; Q6_K: u = w + 32).
 * The integer sums of unit b for R rows of packed activations at xu (the unit's records),
 * both panel halves per slot, so each activation broadcast serves its two weight operands
 * at once (one half at a time, GCC kept every broadcast for the second half and spilled
 * it): acc[r][h], h = 0 for panel rows 0..7, 1 for rows 8..15.
 *   5-bit: acc = sum u q.  AVX-VNNI: one vpdpbusd per slot and half (one row: two chains,
 *          slots 0..3 and 4..7, added); AVX2: vpmaddubsw products summed in s16 over 4
 *          slots (<= 4 * 2 * 31 * 127 = 31496: no saturation), each 4-slot sum widened with
 *          vpmaddwd.
 *   Q6_K:  AVX-VNNI: acc = A (elements 0..15: slots 0..3), acc2 = B (16..31: slots 4..7);
 *          AVX2: vpmaddubsw products summed in s16 over 2 slots (<= 2 * 2 * 63 * 127 =
 *          32004: no saturation), each 2-slot sum widened by a vpmaddwd with (s0, s0) or
 *          (s1, s1), which applies the half's scale in the same instruction (|s * 32004| * 2
 *          < 2^31), so acc = s0 A + s1 B.
 * Every partial value is an exact int32. */
AI void ls_yp_byte_sums(const uint32_t type, const int R, const ls_wmat *w, const uint8_t *p, const uint8_t *xu,
                        int64_t b, __m256i acc[][2], __m256i acc2[][2]) {
    const uint8_t *codes = p + (size_t)b * w->pcode;
#define LS_YB_X(r, s) ls_yp_bc(xu + (r) * LS_XP_ROW + 4 * (s))
#if LS_Y_VNNI
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc2[r][0] = acc2[r][1] = _mm256_setzero_si256();
    const bool two = type == LS_TYPE_Q6_K || R == 1; /* slots 4..7 in acc2 */
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s + 32));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m256i x = LS_YB_X(r, s);
            if (two && s >= 4) {
                acc2[r][0] = _mm256_dpbusd_avx_epi32(acc2[r][0], w0, x);
                acc2[r][1] = _mm256_dpbusd_avx_epi32(acc2[r][1], w1, x);
            } else {
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], w0, x);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], w1, x);
            }
        }
    }
    if (type != LS_TYPE_Q6_K && R == 1) {
        acc[0][0] = _mm256_add_epi32(acc[0][0], acc2[0][0]);
        acc[0][1] = _mm256_add_epi32(acc[0][1], acc2[0][1]);
    }
#else
    (void)acc2;
    if (type == LS_TYPE_Q6_K) {
        const uint8_t *dp = p + (size_t)w->nb * w->pcode + 32 * (size_t)b;
        const __m256i ilo = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5,
                                             8, 9, 8, 9, 12, 13, 12, 13);
        __m256i scv[2][2]; /* [half][slots 0..3: (s0, s0); 4..7: (s1, s1)] */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(dp + 16 * h)));
            scv[h][0] = _mm256_shuffle_epi8(sc16, ilo);
            scv[h][1] = _mm256_shuffle_epi8(sc16, _mm256_add_epi8(ilo, _mm256_set1_epi8(2)));
        }
#pragma GCC unroll 4
        for (int s = 0; s < 8; s += 2) {
            const __m256i w00 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s));
            const __m256i w01 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s + 32));
            const __m256i w10 = _mm256_loadu_si256((const __m256i *)(codes + 64 * (s + 1)));
            const __m256i w11 = _mm256_loadu_si256((const __m256i *)(codes + 64 * (s + 1) + 32));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m256i x0 = LS_YB_X(r, s), x1 = LS_YB_X(r, s + 1);
                const __m256i t0 = _mm256_madd_epi16(
                    _mm256_add_epi16(_mm256_maddubs_epi16(w00, x0), _mm256_maddubs_epi16(w10, x1)), scv[0][s >> 2]);
                const __m256i t1 = _mm256_madd_epi16(
                    _mm256_add_epi16(_mm256_maddubs_epi16(w01, x0), _mm256_maddubs_epi16(w11, x1)), scv[1][s >> 2]);
                acc[r][0] = s == 0 ? t0 : _mm256_add_epi32(acc[r][0], t0);
                acc[r][1] = s == 0 ? t1 : _mm256_add_epi32(acc[r][1], t1);
                LS_Y_KEEP(acc[r][0]);
                LS_Y_KEEP(acc[r][1]);
            }
        }
        return;
    }
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int s0 = 0; s0 < 8; s0 += 4) {
        __m256i p16[LS_YP_RCAP][2];
#pragma GCC unroll 4
        for (int s = s0; s < s0 + 4; s++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s));
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s + 32));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m256i x = LS_YB_X(r, s);
                const __m256i a = _mm256_maddubs_epi16(w0, x), c = _mm256_maddubs_epi16(w1, x);
                p16[r][0] = s == s0 ? a : _mm256_add_epi16(p16[r][0], a);
                p16[r][1] = s == s0 ? c : _mm256_add_epi16(p16[r][1], c);
                LS_Y_KEEP(p16[r][0]);
                LS_Y_KEEP(p16[r][1]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i t = _mm256_madd_epi16(p16[r][h], ones);
                acc[r][h] = s0 == 0 ? t : _mm256_add_epi32(acc[r][h], t);
            }
    }
#endif
#undef LS_YB_X
}

/* c_b of half h (panel rows 8h..8h+7) of unit b of a byte-code panel from its sums
 * (ls_yp_byte_sums) for R rows: c[r][h], lane-wise the recipe's step 2.
 *   Q5_0: isum = sum u q - 16 sq (16 sq = 128 sq >> 3, exact); c = (d * dx) * (float)isum.
 *   Q5_1: c = fma(d * dx, (float)isum, m * sx).
 *   Q5_K: as Q4_K, c = fma(d * dx, (float)isum * (float)sc, (-(dmin * mn)) * sx): |isum| <=
 *         32 * 31 * 127 and sc <= 63, so the product is the recipe's integer isum * sc.
 *   Q6_K: isum = s0 * (A - 32 sqlo) + s1 * (B - 32 sqhi) (s0, s1 the row's int8 scales of
 *         elements 0..15, 16..31), formed as s0 A + s1 B minus one vpmaddwd of the rows'
 *         (32 s0, 32 s1) int16 pairs (|32 s| <= 4096) with the activation's (sqlo, sqhi)
 *         pair (|sq| <= 16 * 127): every partial value is an exact int32 (|s A| <= 128 * 16
 *         * 63 * 127) and isum is the recipe's integer (|isum| < 2^24); c = (d * dx) *
 *         (float)isum. */
AI void ls_yp_byte_c(const uint32_t type, const int R, const int h, const ls_wmat *w, const uint8_t *p,
                     const uint8_t *xu, int64_t b, __m256i acc[][2], __m256i acc2[][2], __m256 c[][2]) {
    const int64_t nb = w->nb;
    const uint8_t *dp = p + (size_t)nb * w->pcode + 32 * (size_t)b;
    if (type == LS_TYPE_Q6_K) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(dp + 16 * h)));
        const __m256i sc32 = _mm256_slli_epi16(sc16, 5);
        const __m256 d = _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(p + (size_t)nb * (w->pcode + 32) + 4 * (size_t)(b & ~(int64_t)7) + 16 * h)));
#if LS_Y_VNNI
        const __m256i s0 = _mm256_srai_epi32(_mm256_slli_epi32(sc16, 16), 16), s1 = _mm256_srai_epi32(sc16, 16);
#else
        (void)acc2;
#endif
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = xu + r * LS_XP_ROW;
#if LS_Y_VNNI
            const __m256i sab = _mm256_add_epi32(_mm256_mullo_epi32(acc[r][h], s0), _mm256_mullo_epi32(acc2[r][h], s1));
#else
            const __m256i sab = acc[r][h];
#endif
            const __m256i isum = _mm256_sub_epi32(sab, _mm256_madd_epi16(sc32, ls_yp_bc(xr + LS_XP_SQP)));
            c[r][h] = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(ls_yp_f(xr + LS_XP_DX))), _mm256_cvtepi32_ps(isum));
        }
        return;
    }
    (void)acc2;
    if (type == LS_TYPE_Q5_K) {
        const uint8_t *kp = p + (size_t)nb * (w->pcode + 32) + 8 * (size_t)(b & ~(int64_t)7);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kp + 16 * h)));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kp + 32 + 16 * h)));
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(dp + 8 * h))));
        const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(dp + 16 + 8 * h))));
        const __m256 nmt = _mm256_xor_ps(_mm256_mul_ps(dmin, mn), _mm256_set1_ps(-0.0f));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = xu + r * LS_XP_ROW;
            c[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ls_yp_f(xr + LS_XP_DX))),
                                      _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][h]), sc),
                                      _mm256_mul_ps(nmt, _mm256_set1_ps(ls_yp_f(xr + LS_XP_SX))));
        }
        return;
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + 16 * h)));
    if (type == LS_TYPE_Q5_1) {
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + 32 * (size_t)nb + 16 * h)));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = xu + r * LS_XP_ROW;
            c[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ls_yp_f(xr + LS_XP_DX))), _mm256_cvtepi32_ps(acc[r][h]),
                                      _mm256_mul_ps(m, _mm256_set1_ps(ls_yp_f(xr + LS_XP_SX))));
        }
        return;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) { /* Q5_0 */
        const uint8_t *xr = xu + r * LS_XP_ROW;
        int32_t sq128;
        memcpy(&sq128, xr + LS_XP_SQ, 4);
        const __m256i isum = _mm256_sub_epi32(acc[r][h], _mm256_set1_epi32(sq128 >> 3)); /* 16 sq, exact */
        c[r][h] = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(ls_yp_f(xr + LS_XP_DX))), _mm256_cvtepi32_ps(isum));
    }
}

/* c_b of unit b for R activation rows x the 16 rows of panel p: c[r][h] (lanes = rows
 * 8h..8h+7).  packed: row r's activations are the packed records at xpb (row r at
 * r * LS_XP_ROW); else one row, x1 (xq layout). */
AI void ls_yp_unit(const uint32_t type, const int R, const bool packed, const ls_wmat *w, const uint8_t *p,
                   const uint8_t *xpb, const ls_xq *x1, int64_t b, const uint8_t *pn, __m256 c[][2]) {
    const int64_t nb = w->nb;
    ls_yp_pf_unit(type, w, pn, b);
    if (LS_YP_B5(type) || type == LS_TYPE_Q6_K) { /* packed rows only (M >= 2) */
        const uint8_t *xu = xpb + (size_t)b * LS_XP_UNIT;
        __m256i acc[LS_YP_RCAP][2], acc2[LS_YP_RCAP][2];
        ls_yp_byte_sums(type, R, w, p, xu, b, acc, acc2);
        ls_yp_byte_c(type, R, 0, w, p, xu, b, acc, acc2, c);
        ls_yp_byte_c(type, R, 1, w, p, xu, b, acc, acc2, c);
        return;
    }
    const uint8_t *codes = p + (size_t)b * w->pcode;
    const uint8_t *xu;
    int64_t xst; /* bytes between a unit's slots */
    if (packed) {
        xu = xpb + (size_t)b * LS_XP_UNIT;
        xst = 4;
    } else {
        const int64_t G = b / LS_GROUP, l = b % LS_GROUP;
        const int64_t L = (G + 1) * LS_GROUP <= nb ? LS_GROUP : nb % LS_GROUP;
        xu = (const uint8_t *)x1->q + G * (LS_GROUP * 32) + l * 4;
        xst = L * 4;
    }
#define LS_YP_X(r, s) ls_yp_bc(xu + (r) * LS_XP_ROW + (s) * xst)
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i acc[LS_YP_RCAP][2];
#if LS_Y_VNNI
    /* one or (R = 1) two dpbusd chains per row and half; integer sums are exact in any order */
    __m256i acc2[LS_YP_RCAP][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc2[r][0] = acc2[r][1] = _mm256_setzero_si256();
    if (LS_YP_NIB(type)) { /* nibble codes */
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(codes + 64 * q));
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(codes + 64 * q + 32));
            __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
            __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
            __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m256i xa = LS_YP_X(r, q), xb = LS_YP_X(r, q + 4);
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], lo0, xa);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], lo1, xa);
                if (R == 1) {
                    acc2[r][0] = _mm256_dpbusd_avx_epi32(acc2[r][0], hi0, xb);
                    acc2[r][1] = _mm256_dpbusd_avx_epi32(acc2[r][1], hi1, xb);
                } else {
                    acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], hi0, xb);
                    acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], hi1, xb);
                }
            }
        }
    } else {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m256i w0 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s));
            __m256i w1 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s + 32));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m256i xs = LS_YP_X(r, s);
                if (R == 1 && s >= 4) {
                    acc2[r][0] = _mm256_dpbusd_avx_epi32(acc2[r][0], w0, xs);
                    acc2[r][1] = _mm256_dpbusd_avx_epi32(acc2[r][1], w1, xs);
                } else {
                    acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], w0, xs);
                    acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], w1, xs);
                }
            }
        }
    }
    if (R == 1) {
        acc[0][0] = _mm256_add_epi32(acc[0][0], acc2[0][0]);
        acc[0][1] = _mm256_add_epi32(acc[0][1], acc2[0][1]);
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p16[LS_YP_RCAP][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) p16[r][0] = p16[r][1] = _mm256_setzero_si256();
    if (LS_YP_NIB(type)) { /* nibble codes */
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(codes + 64 * q));
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(codes + 64 * q + 32));
            __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
            __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
            __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m256i xa = LS_YP_X(r, q), xb = LS_YP_X(r, q + 4);
                p16[r][0] = _mm256_add_epi16(p16[r][0], _mm256_add_epi16(_mm256_maddubs_epi16(lo0, xa),
                                                                          _mm256_maddubs_epi16(hi0, xb)));
                p16[r][1] = _mm256_add_epi16(p16[r][1], _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xa),
                                                                          _mm256_maddubs_epi16(hi1, xb)));
                LS_Y_KEEP(p16[r][0]);
                LS_Y_KEEP(p16[r][1]);
            }
        }
        /* Q4_K tiles of 2 or more rows (LS_YP_KFOLD): the widening vpmaddwd multiplies by
         * the lanes' sub-block scale (sc, sc) instead of (1, 1), so acc = isum * sc, the
         * recipe's integer (|isum * sc| <= 32 * 15 * 127 * 63 < 2^24, every partial exact in
         * int32), and step 2 has no sc multiply */
        __m256i wd[2] = {ones, ones};
        if (LS_YP_KFOLD(type, R)) {
            const uint8_t *sp = p + (size_t)nb * w->pcode + 32 * (size_t)b;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sp + 8 * h)));
                wd[h] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            acc[r][0] = _mm256_madd_epi16(p16[r][0], wd[0]);
            acc[r][1] = _mm256_madd_epi16(p16[r][1], wd[1]);
        }
    } else { /* Q8_0: u = 16 hi + lo, each nibble product summed in s16 */
        __m256i h16[LS_YP_RCAP][2];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) h16[r][0] = h16[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m256i u0 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s));
            __m256i u1 = _mm256_loadu_si256((const __m256i *)(codes + 64 * s + 32));
            __m256i lo0 = _mm256_and_si256(u0, m4), lo1 = _mm256_and_si256(u1, m4);
            __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(u0, 4), m4);
            __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(u1, 4), m4);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m256i xs = LS_YP_X(r, s);
                p16[r][0] = _mm256_add_epi16(p16[r][0], _mm256_maddubs_epi16(lo0, xs));
                p16[r][1] = _mm256_add_epi16(p16[r][1], _mm256_maddubs_epi16(lo1, xs));
                h16[r][0] = _mm256_add_epi16(h16[r][0], _mm256_maddubs_epi16(hi0, xs));
                h16[r][1] = _mm256_add_epi16(h16[r][1], _mm256_maddubs_epi16(hi1, xs));
                LS_Y_KEEP(p16[r][0]);
                LS_Y_KEEP(p16[r][1]);
                LS_Y_KEEP(h16[r][0]);
                LS_Y_KEEP(h16[r][1]);
            }
        }
        const __m256i sixteen = _mm256_set1_epi16(16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            acc[r][0] = _mm256_add_epi32(_mm256_madd_epi16(p16[r][0], ones), _mm256_madd_epi16(h16[r][0], sixteen));
            acc[r][1] = _mm256_add_epi32(_mm256_madd_epi16(p16[r][1], ones), _mm256_madd_epi16(h16[r][1], sixteen));
        }
    }
#endif
#undef LS_YP_X
    const uint8_t *dp = p + (size_t)nb * w->pcode + 32 * (size_t)b;
    if (type == LS_TYPE_Q4_K) {
        /* c_b = fma(d * dx, (float)(isum * sc), (-(dmin * mn)) * sx), as c_kq: with
         * LS_YP_KFOLD acc holds isum * sc already; otherwise it is formed as (float)isum *
         * (float)sc, the same value, since |isum| <= 32 * 15 * 127 and sc <= 63 make the
         * product an integer below 2^24 (exact in float either way). */
        const uint8_t *kp = p + (size_t)nb * (w->pcode + 32) + 8 * (size_t)(b & ~(int64_t)7);
        __m256 d[2], sc[2], nmt[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kp + 16 * h)));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kp + 32 + 16 * h)));
            sc[h] = !LS_YP_KFOLD(type, R)
                        ? _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(dp + 8 * h))))
                        : _mm256_setzero_ps(); /* applied in the integer sums */
            const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(dp + 16 + 8 * h))));
            nmt[h] = _mm256_xor_ps(_mm256_mul_ps(dmin, mn), _mm256_set1_ps(-0.0f));
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = xu + r * LS_XP_ROW;
            const __m256 dx = _mm256_set1_ps(packed ? ls_yp_f(xr + LS_XP_DX) : x1->dx[b]);
            const __m256 sx = _mm256_set1_ps(packed ? ls_yp_f(xr + LS_XP_SX) : x1->sx[b]);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                c[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(d[h], dx),
                                          !LS_YP_KFOLD(type, R) ? _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][h]), sc[h])
                                                                : _mm256_cvtepi32_ps(acc[r][h]),
                                          _mm256_mul_ps(nmt[h], sx));
        }
        return;
    }
    __m256 d[2], m[2];
    d[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dp));
    d[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + 16)));
    if (type == LS_TYPE_Q4_1) {
        m[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + 32 * (size_t)nb)));
        m[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + 32 * (size_t)nb + 16)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const uint8_t *xr = xu + r * LS_XP_ROW;
        const __m256 dx = _mm256_set1_ps(packed ? ls_yp_f(xr + LS_XP_DX) : x1->dx[b]);
        if (type == LS_TYPE_Q4_1) {
            const __m256 sx = _mm256_set1_ps(packed ? ls_yp_f(xr + LS_XP_SX) : x1->sx[b]);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                c[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(d[h], dx), _mm256_cvtepi32_ps(acc[r][h]), _mm256_mul_ps(m[h], sx));
        } else {
            int32_t sq128;
            if (packed)
                memcpy(&sq128, xr + LS_XP_SQ, 4);
            else
                sq128 = 128 * x1->sq[b];
            const __m256i o = _mm256_set1_epi32(type == LS_TYPE_Q4_0 ? sq128 >> 4 : sq128); /* off * sq, exact */
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                c[r][h] = _mm256_mul_ps(_mm256_mul_ps(d[h], dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][h], o)));
        }
    }
}

/* Adds group g's sums S (R rows) to the tree: stk[r][.][l] holds the pending left subtree
 * of 2^l leaves; bit l of *zst says it is a subtree of empty groups (exactly +0). */
AI void ls_yp_push(const int R, __m256 stk[][2][6], unsigned *zst, int g, __m256 S[][2]) {
    int lvl = 0;
    for (; (g >> lvl) & 1; lvl++) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            S[r][0] = _mm256_add_ps(stk[r][0][lvl], S[r][0]);
            S[r][1] = _mm256_add_ps(stk[r][1][lvl], S[r][1]);
        }
    }
    *zst &= ~(1u << lvl);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        stk[r][0][lvl] = S[r][0];
        stk[r][1][lvl] = S[r][1];
    }
}

/* The same for an empty group g (S_g = +0): a real left subtree x joined with a subtree
 * of empty groups is the single add x + (+0). */
AI void ls_yp_push_empty(const int R, __m256 stk[][2][6], unsigned *zst, int g) {
    __m256 T[LS_YP_RCAP][2];
    bool tz = true;
    int lvl = 0;
    for (; (g >> lvl) & 1; lvl++) {
        if (*zst >> lvl & 1) continue; /* +0 + +0 */
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            for (int h = 0; h < 2; h++) T[r][h] = _mm256_add_ps(stk[r][h][lvl], tz ? _mm256_setzero_ps() : T[r][h]);
        tz = false;
    }
    if (tz) {
        *zst |= 1u << lvl;
    } else {
        *zst &= ~(1u << lvl);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            stk[r][0][lvl] = T[r][0];
            stk[r][1][lvl] = T[r][1];
        }
    }
}

/* R activation rows x the 16 rows of panel P; writes columns [16P + lo, 16P + hi). */
AI void ls_yp_tile(const uint32_t type, const int R, const bool packed, const ls_wmat *w, int64_t P,
                   const uint8_t *xpb, const ls_xq *x1, float *const *yr, int lo, int hi, const uint8_t *pn) {
    const uint8_t *p = w->panel + (size_t)P * w->panel_bytes;
    const int64_t nb = w->nb;
    __m256 stk[LS_YP_RCAP][2][6];
    unsigned zst = 0;
    for (int g = 0; g < LS_NGRP; g++) {
        if (g >= nb) {
            ls_yp_push_empty(R, stk, &zst, g);
            continue;
        }
        __m256 S[LS_YP_RCAP][2], c[LS_YP_RCAP][2];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) S[r][0] = S[r][1] = _mm256_setzero_ps();
        for (int64_t b = g; b < nb; b += LS_NGRP) {
            ls_yp_unit(type, R, packed, w, p, xpb, x1, b, pn, c);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                S[r][0] = _mm256_add_ps(S[r][0], c[r][0]);
                S[r][1] = _mm256_add_ps(S[r][1], c[r][1]);
            }
        }
        ls_yp_push(R, stk, &zst, g, S);
    }
    if (lo == 0 && hi == 16) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            _mm256_storeu_ps(yr[r] + P * 16, stk[r][0][5]);
            _mm256_storeu_ps(yr[r] + P * 16 + 8, stk[r][1][5]);
        }
        return;
    }
    const __m256i ix = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h = 0; h < 2; h++) {
        const __m256i j = _mm256_add_epi32(ix, _mm256_set1_epi32(8 * h));
        const __m256i km = _mm256_and_si256(_mm256_cmpgt_epi32(j, _mm256_set1_epi32(lo - 1)),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), j));
        for (int r = 0; r < R; r++) _mm256_maskstore_ps(yr[r] + P * 16 + 8 * h, km, stk[r][h][5]);
    }
}

/* All M rows x columns [n0, n1) over the panel copy. */
AI void ls_yp_mm(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    const ls_wmat *w = job->w;
    const int64_t M = job->M;
    LS_ASSERT(w->panel); /* ls_wmat_prepare built it */
    const int64_t P0 = n0 / 16, P1 = (n1 + 15) / 16;
    if (M == 1 && !LS_YP_B5(type) && type != LS_TYPE_Q6_K) { /* one row from the xq layout */
        for (int64_t m = 0; m < M; m++) {
            ls_xq x = ls_xq_row(job->xq, w->K, m);
            float *yr[1] = {job->y + m * w->N};
            for (int64_t P = P0; P < P1; P++) {
                int64_t lo = P * 16 > n0 ? P * 16 : n0, hi = P * 16 + 16 < n1 ? P * 16 + 16 : n1;
                const uint8_t *pn = P + 1 < P1 ? w->panel + (size_t)(P + 1) * w->panel_bytes : NULL;
                ls_yp_tile(type, 1, false, w, P, NULL, &x, yr, (int)(lo - P * 16), (int)(hi - P * 16), pn);
            }
        }
        return;
    }
    LS_ASSERT(job->xp); /* ls_matmul_multi_rows packs the activations */
    int64_t pblk = (int64_t)(256 * 1024 / w->panel_bytes);
    if (pblk < 1) pblk = 1;
    for (int64_t q0 = P0; q0 < P1; q0 += pblk) {
        int64_t q1 = q0 + pblk < P1 ? q0 + pblk : P1;
        for (int64_t m0 = 0; m0 < M;) { /* row tiles inside the packed tiles */
            const int64_t a = job->xp_row0 + m0;
            int R = LS_XP_R - (int)(a % LS_XP_R);
            if (R > LS_YP_RMAX(type)) R = LS_YP_RMAX(type);
            if (R > M - m0) R = (int)(M - m0);
            const uint8_t *xpb = job->xp + (size_t)(a / LS_XP_R) * ls_xp_tile_bytes(w->K) + (size_t)(a % LS_XP_R) * LS_XP_ROW;
            float *yr[LS_YP_RCAP];
            for (int r = 0; r < R; r++) yr[r] = job->y + (m0 + r) * w->N;
            for (int64_t P = q0; P < q1; P++) {
                int lo = (int)((P * 16 > n0 ? P * 16 : n0) - P * 16), hi = (int)((P * 16 + 16 < n1 ? P * 16 + 16 : n1) - P * 16);
                /* the panel computed next: P + 1 in this block, or after the last row tile the
                 * next block's first (a block of one large panel still streams ahead) */
                const int64_t Pn = P + 1 < q1 || m0 + R >= M ? P + 1 : P1;
                const uint8_t *pn = Pn < P1 ? w->panel + (size_t)Pn * w->panel_bytes : NULL;
                switch (R) {
                case 6: if (LS_YP_RMAX(type) >= 6) ls_yp_tile(type, 6, true, w, P, xpb, NULL, yr, lo, hi, pn); break;
                case 5: if (LS_YP_RMAX(type) >= 5) ls_yp_tile(type, 5, true, w, P, xpb, NULL, yr, lo, hi, pn); break;
                case 4: if (LS_YP_RMAX(type) >= 4) ls_yp_tile(type, 4, true, w, P, xpb, NULL, yr, lo, hi, pn); break;
                case 3: if (LS_YP_RMAX(type) >= 3) ls_yp_tile(type, 3, true, w, P, xpb, NULL, yr, lo, hi, pn); break;
                case 2: ls_yp_tile(type, 2, true, w, P, xpb, NULL, yr, lo, hi, pn); break;
                default: ls_yp_tile(type, 1, true, w, P, xpb, NULL, yr, lo, hi, pn); break;
                }
            }
            m0 += R;
        }
    }
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

/* The panel kernel of each panel type as a function of its own, not inlined into the
 * type's entry beside the group-record paths (as matmul_avx512.c: the one large function
 * gets a worse register allocation). */
#define LS_YP_MM_FN(T, nm)                                                                             \
    static __attribute__((noinline)) void ls_yp_mm_##nm(const ls_mm_job *job, int64_t n0, int64_t n1) { \
        ls_yp_mm(T, job, n0, n1);                                                                      \
    }
LS_PANEL_TYPE_LIST(LS_YP_MM_FN)

AI void ls_yp_mm_call(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
#define LS_YP_MM_CASE(T, nm) case T: ls_yp_mm_##nm(job, n0, n1); break;
    switch (type) {
    LS_PANEL_TYPE_LIST(LS_YP_MM_CASE)
    default: break;
    }
#undef LS_YP_MM_CASE
}

AI void ls_y_mm_type(const uint32_t type, const ls_mm_job *job, int64_t n0, int64_t n1) {
    if (ls_panel_type(type)) { /* the panel copy (the type's only layout), every M */
        ls_yp_mm_call(type, job, n0, n1);
        return;
    }
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

#define LS_Y_ENTRY(T, nm)                                                                 \
    void LS_Y_CAT(ls_mm_##nm##_, LS_Y_SFX)(const ls_mm_job *job, int64_t n0, int64_t n1) { \
        ls_y_mm_type(T, job, n0, n1);                                                     \
    }
LS_WTYPE_LIST(LS_Y_ENTRY)

#if !LS_Y_VNNI /* the AVX-VNNI level uses the AVX2 quantizer */

/* ---- step 1 of the recipe (matmul.c's ls_quantize_x_row) with AVX2, the same bits ----
 * A block at a time: |x| as integer bits (non-negative floats order as their patterns,
 * every NaN above +inf), so one unsigned maximum gives amax and finiteness; d and id are
 * the same correctly rounded scalar divisions; x * id and the rounding (+1.5*2^23, the
 * integer bits) are lane-wise the scalar operations; the sums are exact integers.  The 8
 * slots of 4 codes go to their xq places (ls_xq_chunk; a full group: (t*16 + l)*4). */
AI __m256i ls_y_absbits(const float *p) {
    return _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(p)), _mm256_set1_epi32(0x7fffffff));
}
AI uint32_t ls_y_hmaxu(__m256i v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(m);
}
AI int32_t ls_y_hsum(__m256i v) {
    __m128i m = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0xB1));
    return _mm_cvtsi128_si32(m);
}
/* 8 int32 lanes (each in -127..127) -> 8 int8 in lane order. */
AI __m128i ls_y_pack8(__m256i v) {
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_packs_epi16(w, w);
}

void ls_quantize_x_row_avx2(const float *x, int64_t K, void *row_out, uint8_t *xp) {
    const int64_t nb = K / 32;
    uint8_t *base = row_out;
    int8_t *q = (int8_t *)base;
    float *dx = (float *)(base + K), *sx = dx + nb;
    int32_t *sq = (int32_t *)(sx + nb), *sqlo = sq + nb;
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    const __m256i mbits = _mm256_set1_epi32(0x4B400000);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        __m256i am = _mm256_max_epu32(_mm256_max_epu32(ls_y_absbits(xb), ls_y_absbits(xb + 8)),
                                      _mm256_max_epu32(ls_y_absbits(xb + 16), ls_y_absbits(xb + 24)));
        uint32_t ab = ls_y_hmaxu(am);
        float amax;
        memcpy(&amax, &ab, 4);
        int32_t s = 0, slo = 0;
        float d = 0.0f;
        uint32_t qd[8] = {0};
        if (ab <= 0x7f7fffffu && amax >= LS_QX_TINY) {
            d = amax / 127.0f;
            const __m256 id = _mm256_set1_ps(127.0f / amax);
            __m256i v[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                v[j] = _mm256_sub_epi32(
                    _mm256_castps_si256(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * j), id), magic)), mbits);
            slo = ls_y_hsum(_mm256_add_epi32(v[0], v[1]));
            s = slo + ls_y_hsum(_mm256_add_epi32(v[2], v[3]));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) _mm_storel_epi64((__m128i *)(qd + 2 * j), ls_y_pack8(v[j]));
        } else if (ab > 0x7f7fffffu) {
            d = NAN;
        }
        const int64_t G = b / LS_GROUP, l = b % LS_GROUP;
        const int64_t L = (G + 1) * LS_GROUP <= nb ? LS_GROUP : nb % LS_GROUP;
        int8_t *qg = q + G * (LS_GROUP * 32) + l * 4;
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) memcpy(qg + t * L * 4, &qd[t], 4);
        dx[b] = d;
        sx[b] = d * (float)s;
        sq[b] = s;
        sqlo[b] = slo;
        if (xp) { /* the tile-packed record of unit b (internal.h) */
            uint8_t *rec = xp + (size_t)b * LS_XP_UNIT;
            int32_t sq128 = 128 * s;
            int16_t sqp[2] = {(int16_t)slo, (int16_t)(s - slo)};
            memcpy(rec, qd, 32);
            memcpy(rec + LS_XP_DX, &dx[b], 4);
            memcpy(rec + LS_XP_SX, &sx[b], 4);
            memcpy(rec + LS_XP_SQ, &sq128, 4);
            memcpy(rec + LS_XP_SQP, sqp, 4);
        }
    }
}
#endif
