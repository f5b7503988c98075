/* cuda_recipe.h - the canonical recipe's per-unit pieces for the GPU, written once for
 * the host and the device (plain C; nvcc compiles the same functions for both).
 *
 * The GPU weight layout ("unit-major, field-split"): a matrix of N rows and K columns
 * of a quantized type is nb = K/32 units per row (the recipe's blocks b), stored in
 * separate arrays so that 32 lanes reading units b..b+31 of one row read one
 * contiguous run of each:
 *   codes [N][nbp][CB]   CB = 16 (4-bit codes: byte 4r+j holds element 4r+j in the low
 *                        nibble and element 16+4r+j in the high nibble; the low 4 bits
 *                        for 5- and 6-bit types) or 32 (Q8_0: the int8 values in order)
 *   hi    [N][nbp][HB]   the high bits: Q5_*: one u32, bit 8j+r = bit 4 of element
 *                        4r+j, bit 8j+4+r = bit 4 of element 16+4r+j; Q6_K: two u32,
 *                        x bits 8j+2r..8j+2r+1 = bits 4-5 of element 4r+j, y the same
 *                        for element 16+4r+j
 *   sc    [N][nbp][SCB]  per-unit fields: fp16 d (Q4_0, Q5_0, Q8_0), fp16 d + fp16 m
 *                        (Q4_1, Q5_1), the E8M0 byte as u16 (MXFP4), u8 scale + u8 min
 *                        (Q4_K, Q5_K), two int8 scales (Q6_K)
 *   sb    [N][nbp/8][4]  per 256-element super-block: fp16 d + fp16 dmin (Q4_K, Q5_K),
 *                        fp16 d + 2 zero bytes (Q6_K)
 * nbp = nb rounded up to a multiple of 2 (the padding unit is zero and never added).
 * With this packing a 32-bit code word r gives the 8-bit integers of elements
 * 4r..4r+3 (low nibbles) and 16+4r..16+4r+3 (high nibbles): exactly the two B
 * registers a thread holds in an int8 m16n8k32 tensor-core fragment, and two dp4a
 * operands against the activation words r and 4+r.
 *
 * Quantized activations (step 1 of the recipe), per row: q [nbp][32] int8 in element
 * order, and dxs [nbp] float2 (dx, sx).
 *
 * Float matrices (F32, F16, BF16) keep ggml's row-major layout [N][K].
 *
 * Every function here performs the recipe's roundings one at a time
 * (docs/numerics.md): on the device through __fmul_rn/__fadd_rn/__fmaf_rn, on the
 * host through C built with -ffp-contract=off. */
#ifndef LS_BACKEND_CUDA_RECIPE_H
#define LS_BACKEND_CUDA_RECIPE_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define LS_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#define LS_HD static inline
#endif

/* ggml type ids (quant.h) */
enum {
    LSC_F32 = 0, LSC_F16 = 1, LSC_Q4_0 = 2, LSC_Q4_1 = 3, LSC_Q5_0 = 6, LSC_Q5_1 = 7, LSC_Q8_0 = 8,
    LSC_Q4_K = 12, LSC_Q5_K = 13, LSC_Q6_K = 14, LSC_BF16 = 30, LSC_MXFP4 = 39
};

LS_HD int lsc_is_float(int t) { return t == LSC_F32 || t == LSC_F16 || t == LSC_BF16; }
LS_HD int lsc_is_kquant(int t) { return t == LSC_Q4_K || t == LSC_Q5_K || t == LSC_Q6_K; }
LS_HD int lsc_supported(int t) {
    switch (t) {
    case LSC_F32: case LSC_F16: case LSC_BF16: case LSC_Q4_0: case LSC_Q4_1: case LSC_Q5_0: case LSC_Q5_1:
    case LSC_Q8_0: case LSC_Q4_K: case LSC_Q5_K: case LSC_Q6_K: case LSC_MXFP4: return 1;
    default: return 0;
    }
}
/* bytes per unit of each array */
LS_HD int lsc_cb(int t) { return t == LSC_Q8_0 ? 32 : 16; }
LS_HD int lsc_hb(int t) { return (t == LSC_Q5_0 || t == LSC_Q5_1 || t == LSC_Q5_K) ? 4 : t == LSC_Q6_K ? 8 : 0; }
LS_HD int lsc_scb(int t) { return (t == LSC_Q4_1 || t == LSC_Q5_1) ? 4 : 2; }
LS_HD int lsc_sbb(int t) { return lsc_is_kquant(t) ? 4 : 0; }
/* ggml block: elements and bytes */
LS_HD int lsc_blk_elems(int t) { return lsc_is_kquant(t) ? 256 : 32; }
LS_HD int lsc_blk_bytes(int t) {
    switch (t) {
    case LSC_Q4_0: return 18; case LSC_Q4_1: return 20; case LSC_Q5_0: return 22; case LSC_Q5_1: return 24;
    case LSC_Q8_0: return 34; case LSC_MXFP4: return 17; case LSC_Q4_K: return 144; case LSC_Q5_K: return 176;
    case LSC_Q6_K: return 210; default: return 0;
    }
}
LS_HD int64_t lsc_nbp(int64_t nb) { return (nb + 1) & ~(int64_t)1; }

/* ---- exact scalar helpers ---------------------------------------------------- */
LS_HD float lsc_bits2f(uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    float f;
    memcpy(&f, &b, 4);
    return f;
#endif
}
LS_HD uint32_t lsc_f2bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
#endif
}
LS_HD float lsc_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
LS_HD float lsc_add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
LS_HD float lsc_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
LS_HD float lsc_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
LS_HD float lsc_div(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
LS_HD float lsc_i2f(int32_t i) { /* exact for |i| < 2^24 */
#if defined(__CUDA_ARCH__)
    return __int2float_rn(i);
#else
    return (float)i;
#endif
}
/* (float)i for |i| < 2^22, exactly: 1.5 * 2^23 + i is a float whose last mantissa unit is 1,
 * so the integer add builds it and the float subtraction is exact.  On the GPU this is
 * an integer add and a float add instead of a conversion (16 per clock per SM on sm_90). */
LS_HD float lsc_i2f_small(int32_t i) { return lsc_sub(lsc_bits2f((uint32_t)(i + 0x4B400000)), 12582912.0f); }
/* exact IEEE half -> float (subnormals included) */
LS_HD float lsc_f16(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else {
            int sh = 0;
            while (!(m & 0x400)) { m <<= 1; sh++; }
            m &= 0x3ff;
            bits = s | ((uint32_t)(127 - 15 + 1 - sh) << 23) | (m << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13);
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    return lsc_bits2f(bits);
#endif
}
LS_HD float lsc_bf16(uint16_t h) { return lsc_bits2f((uint32_t)h << 16); }
/* ggml_e8m0_to_fp32_half: 2^(e-128) */
LS_HD float lsc_e8m0_half(uint32_t e) { return lsc_bits2f(e < 2 ? 0x00200000u << e : (e - 1) << 23); }

/* integer byte-lane helpers (dp4a and friends) */
LS_HD int32_t lsc_dp4a(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++) c += (int32_t)(int8_t)(a >> (8 * i)) * (int32_t)(int8_t)(b >> (8 * i));
    return c;
#endif
}
/* per-byte a - b mod 256 */
LS_HD uint32_t lsc_vsub4(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xFFu) << (8 * i);
    return r;
#endif
}
/* per-byte a - o mod 256 for bytes a <= 127 and 0 < o <= 128: a + (128 - o) stays under 256 in
 * every byte (no carry into the next), and the xor with 128 takes 128 back off mod 256; two
 * instructions where __vsub4 takes more (test_layout checks it against lsc_vsub4 for every
 * byte and offset used) */
LS_HD uint32_t lsc_vsub_half(uint32_t a, uint32_t o) { return (a + (0x80u - o) * 0x01010101u) ^ 0x80808080u; }
/* byte k of the result = byte (s >> 4k) & 7 of {y:x} */
LS_HD uint32_t lsc_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s & 0x7777u);
#else
    uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)((v >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k);
    return r;
#endif
}
/* MXFP4: bytes of v hold table indices 0..15; returns the int8 values kvalues_mxfp4[i] */
LS_HD uint32_t lsc_mxfp4_lookup(uint32_t v) {
    const uint32_t t0 = 0x03020100u, t1 = 0x0C080604u, t2 = 0xFDFEFF00u, t3 = 0xF4F8FAFCu;
    uint32_t s = (v & 0x7u) | ((v >> 4) & 0x70u) | ((v >> 8) & 0x700u) | ((v >> 12) & 0x7000u);
    uint32_t lo = lsc_perm(t0, t1, s), hi = lsc_perm(t2, t3, s);
    uint32_t mask = ((v & 0x08080808u) >> 3) * 0xFFu;
    return (hi & mask) | (lo & ~mask);
}

/* ---- one unit of a weight row: its 8 code words (signed bytes) and fields ---- */
typedef struct {
    uint32_t w[8];  /* w[s]: int8 weight integers of elements 4s..4s+3 */
    float d, m;     /* d (super-block d for K-quants); m (Q4_1/Q5_1) or dmin (K-quants) */
    int32_t s0, s1; /* Q4_K/Q5_K: s0 = 6-bit scale, s1 = 6-bit min; Q6_K: the two int8 scales */
} lsc_unit;

/* Weight-integer words of a 4-bit code word c (+ high bits) for word index r. */
LS_HD void lsc_expand(int t, uint32_t c, uint32_t h0, uint32_t h1, int r, uint32_t *lo, uint32_t *hi) {
    uint32_t a = c & 0x0F0F0F0Fu, b = (c >> 4) & 0x0F0F0F0Fu;
    if (t == LSC_Q5_0 || t == LSC_Q5_1 || t == LSC_Q5_K) {
        a |= ((h0 >> r) & 0x01010101u) << 4;
        b |= ((h0 >> (4 + r)) & 0x01010101u) << 4;
    } else if (t == LSC_Q6_K) {
        a |= ((h0 >> (2 * r)) & 0x03030303u) << 4;
        b |= ((h1 >> (2 * r)) & 0x03030303u) << 4;
    }
    switch (t) {
    case LSC_Q4_0: a = lsc_vsub_half(a, 0x08u); b = lsc_vsub_half(b, 0x08u); break;
    case LSC_Q5_0: a = lsc_vsub_half(a, 0x10u); b = lsc_vsub_half(b, 0x10u); break;
    case LSC_Q6_K: a = lsc_vsub_half(a, 0x20u); b = lsc_vsub_half(b, 0x20u); break;
    case LSC_MXFP4: a = lsc_mxfp4_lookup(a); b = lsc_mxfp4_lookup(b); break;
    default: break; /* Q4_1, Q5_1, Q4_K, Q5_K: unsigned codes */
    }
    *lo = a;
    *hi = b;
}

/* The per-unit float fields from the unit's sc record (2 or 4 bytes, little-endian)
 * and its super-block's sb record. */
LS_HD void lsc_fields(int t, uint32_t scv, uint32_t sbv, lsc_unit *u) {
    u->m = 0.0f;
    u->s0 = u->s1 = 0;
    switch (t) {
    case LSC_Q4_0: case LSC_Q5_0: case LSC_Q8_0: u->d = lsc_f16((uint16_t)scv); break;
    case LSC_Q4_1: case LSC_Q5_1:
        u->d = lsc_f16((uint16_t)scv);
        u->m = lsc_f16((uint16_t)(scv >> 16));
        break;
    case LSC_MXFP4: u->d = lsc_e8m0_half(scv & 0xFF); break;
    case LSC_Q4_K: case LSC_Q5_K:
        u->s0 = (int32_t)(scv & 0xFF);
        u->s1 = (int32_t)((scv >> 8) & 0xFF);
        u->d = lsc_f16((uint16_t)sbv);
        u->m = lsc_f16((uint16_t)(sbv >> 16));
        break;
    case LSC_Q6_K:
        u->s0 = (int8_t)(scv & 0xFF);
        u->s1 = (int8_t)((scv >> 8) & 0xFF);
        u->d = lsc_f16((uint16_t)sbv);
        break;
    default: u->d = 0.0f; break;
    }
}

/* Step 2: the unit's contribution from its two exact half sums (elements 0..15 and
 * 16..31; any instruction order) and the activation block's dx, sx. */
/* (|isum| bounds, docs/numerics.md: Q4_0 32*8*127, Q4_1 32*15*127, Q5_x 32*31*127, Q8_0
 * 32*128*127, MXFP4 32*12*127, Q4_K 63*32*15*127 < 2^22; Q5_K, Q6_K < 2^24: a conversion) */
LS_HD float lsc_contrib(int t, const lsc_unit *u, int32_t lo, int32_t hi, float dx, float sx) {
    switch (t) {
    case LSC_Q4_1: case LSC_Q5_1:
        return lsc_fma(lsc_mul(u->d, dx), lsc_i2f_small(lo + hi), lsc_mul(u->m, sx));
    case LSC_Q4_K: {
        float mt = lsc_mul(u->m, lsc_i2f_small(u->s1));
        return lsc_fma(lsc_mul(u->d, dx), lsc_i2f_small(u->s0 * (lo + hi)), lsc_mul(-mt, sx));
    }
    case LSC_Q5_K: {
        float mt = lsc_mul(u->m, lsc_i2f_small(u->s1));
        return lsc_fma(lsc_mul(u->d, dx), lsc_i2f(u->s0 * (lo + hi)), lsc_mul(-mt, sx));
    }
    case LSC_Q6_K: return lsc_mul(lsc_mul(u->d, dx), lsc_i2f(u->s0 * lo + u->s1 * hi));
    default: return lsc_mul(lsc_mul(u->d, dx), lsc_i2f_small(lo + hi)); /* Q4_0, Q5_0, Q8_0, MXFP4 */
    }
}

/* lsc_contrib for the types whose isum converts with lsc_i2f_small (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, MXFP4), given the integer that conversion adds its bias to already added
 * (biased = lo + hi + 0x4B400000: a dp4a chain or an mma accumulator started at the bias):
 * the same operations on the same values, so the same bits. */
LS_HD float lsc_contrib_biased(int t, const lsc_unit *u, int32_t biased, float dx, float sx) {
    const float v = lsc_sub(lsc_bits2f((uint32_t)biased), 12582912.0f); /* lsc_i2f_small(lo + hi) */
    return t == LSC_Q4_1 || t == LSC_Q5_1 ? lsc_fma(lsc_mul(u->d, dx), v, lsc_mul(u->m, sx)) : lsc_mul(lsc_mul(u->d, dx), v);
}

/* ---- repacking one ggml block into the GPU layout (lossless) ----------------- */

LS_HD void lsc_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Writes unit `b` of a destination row from its 32 unsigned codes u (ls_decode_block's
 * u, Q8_0: the raw int8 bytes) into codes/hi (row pointers already offset to the row). */
LS_HD void lsc_put_codes(int t, const uint8_t *u, uint8_t *codes, uint8_t *hi, int64_t b) {
    if (t == LSC_Q8_0) {
        for (int i = 0; i < 32; i++) codes[b * 32 + i] = u[i];
        return;
    }
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 4; j++)
            codes[b * 16 + 4 * r + j] = (uint8_t)((u[4 * r + j] & 0xF) | ((u[16 + 4 * r + j] & 0xF) << 4));
    if (t == LSC_Q5_0 || t == LSC_Q5_1 || t == LSC_Q5_K) {
        uint32_t h = 0;
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) {
                h |= (uint32_t)((u[4 * r + j] >> 4) & 1) << (8 * j + r);
                h |= (uint32_t)((u[16 + 4 * r + j] >> 4) & 1) << (8 * j + 4 + r);
            }
        for (int i = 0; i < 4; i++) hi[b * 4 + i] = (uint8_t)(h >> (8 * i));
    } else if (t == LSC_Q6_K) {
        uint32_t hx = 0, hy = 0;
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) {
                hx |= (uint32_t)((u[4 * r + j] >> 4) & 3) << (8 * j + 2 * r);
                hy |= (uint32_t)((u[16 + 4 * r + j] >> 4) & 3) << (8 * j + 2 * r);
            }
        for (int i = 0; i < 4; i++) {
            hi[b * 8 + i] = (uint8_t)(hx >> (8 * i));
            hi[b * 8 + 4 + i] = (uint8_t)(hy >> (8 * i));
        }
    }
}

/* Repacks ggml block `blk` (at src) of one row into the row's arrays (each already
 * offset to the destination row: codes, hi, sc per unit, sb per super-block). */
LS_HD void lsc_repack_block(int t, const uint8_t *src, int64_t blk, uint8_t *codes, uint8_t *hi, uint8_t *sc,
                            uint8_t *sb) {
    uint8_t u[32];
    switch (t) {
    case LSC_Q4_0: case LSC_Q4_1: case LSC_MXFP4: case LSC_Q5_0: case LSC_Q5_1: case LSC_Q8_0: {
        const int64_t b = blk;
        const uint8_t *qs;
        uint32_t qh = 0;
        if (t == LSC_MXFP4) {
            sc[b * 2] = src[0];
            sc[b * 2 + 1] = 0;
            qs = src + 1;
        } else if (t == LSC_Q4_1 || t == LSC_Q5_1) {
            for (int i = 0; i < 4; i++) sc[b * 4 + i] = src[i];
            qs = src + 4;
        } else {
            sc[b * 2] = src[0];
            sc[b * 2 + 1] = src[1];
            qs = src + 2;
        }
        if (t == LSC_Q5_0 || t == LSC_Q5_1) {
            qh = (uint32_t)qs[0] | (uint32_t)qs[1] << 8 | (uint32_t)qs[2] << 16 | (uint32_t)qs[3] << 24;
            qs += 4;
        }
        if (t == LSC_Q8_0) {
            lsc_put_codes(t, qs, codes, hi, b);
            return;
        }
        for (int j = 0; j < 16; j++) {
            u[j] = qs[j] & 0xF;
            u[j + 16] = qs[j] >> 4;
            if (t == LSC_Q5_0 || t == LSC_Q5_1) {
                u[j] |= (uint8_t)(((qh >> j) & 1) << 4);
                u[j + 16] |= (uint8_t)(((qh >> (j + 16)) & 1) << 4);
            }
        }
        lsc_put_codes(t, u, codes, hi, b);
        return;
    }
    case LSC_Q4_K: case LSC_Q5_K: {
        for (int i = 0; i < 4; i++) sb[blk * 4 + i] = src[i]; /* d, dmin */
        const uint8_t *scales = src + 4, *qh = src + 16, *ql = t == LSC_Q4_K ? src + 16 : src + 48;
        for (int j = 0; j < 8; j++) {
            uint8_t s, mn;
            lsc_scale_min_k4(j, scales, &s, &mn);
            const int64_t b = blk * 8 + j;
            sc[b * 2] = s;
            sc[b * 2 + 1] = mn;
            const uint8_t *q = ql + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
                if (t == LSC_Q5_K && ((qh[l] >> j) & 1)) v += 16;
                u[l] = (uint8_t)v;
            }
            lsc_put_codes(t, u, codes, hi, b);
        }
        return;
    }
    case LSC_Q6_K: {
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *s6 = (const int8_t *)(src + 192);
        sb[blk * 4] = src[208];
        sb[blk * 4 + 1] = src[209];
        sb[blk * 4 + 2] = 0;
        sb[blk * 4 + 3] = 0;
        for (int j = 0; j < 8; j++) { /* unit j: elements 32j..32j+31 of the block */
            const int n = j / 4, part = j % 4; /* 128-element half, 32-element quarter */
            const uint8_t *l0 = ql + 64 * n, *h0 = qh + 32 * n;
            for (int l = 0; l < 32; l++) {
                int v;
                switch (part) {
                case 0: v = (l0[l] & 0xF) | ((h0[l] & 3) << 4); break;
                case 1: v = (l0[l + 32] & 0xF) | (((h0[l] >> 2) & 3) << 4); break;
                case 2: v = (l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4); break;
                default: v = (l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4); break;
                }
                u[l] = (uint8_t)v;
            }
            const int64_t b = blk * 8 + j;
            sc[b * 2] = (uint8_t)s6[2 * j];
            sc[b * 2 + 1] = (uint8_t)s6[2 * j + 1];
            lsc_put_codes(t, u, codes, hi, b);
        }
        return;
    }
    default: return;
    }
}

/* Unit b of a row from its arrays (row pointers): the code words and fields. */
LS_HD void lsc_load_unit(int t, const uint8_t *codes, const uint8_t *hi, const uint8_t *sc, const uint8_t *sb,
                         int64_t b, lsc_unit *u) {
    if (t == LSC_Q8_0) {
        for (int s = 0; s < 8; s++) memcpy(&u->w[s], codes + b * 32 + 4 * s, 4);
    } else {
        uint32_t h0 = 0, h1 = 0;
        if (lsc_hb(t) == 4) memcpy(&h0, hi + b * 4, 4);
        if (lsc_hb(t) == 8) {
            memcpy(&h0, hi + b * 8, 4);
            memcpy(&h1, hi + b * 8 + 4, 4);
        }
        for (int r = 0; r < 4; r++) {
            uint32_t c;
            memcpy(&c, codes + b * 16 + 4 * r, 4);
            lsc_expand(t, c, h0, h1, r, &u->w[r], &u->w[4 + r]);
        }
    }
    uint32_t scv = 0, sbv = 0;
    memcpy(&scv, sc + b * lsc_scb(t), (size_t)lsc_scb(t));
    if (lsc_sbb(t)) memcpy(&sbv, sb + (b / 8) * 4, 4);
    lsc_fields(t, scv, sbv, u);
}

/* ---- ls_expf (mathfn.c), the same operations in the same order ------------- */
LS_HD float lsc_expf(float x) {
    if (x != x) return lsc_add(x, x);
    if (x > 104.0f) return lsc_bits2f(0x7f800000u);
    if (x < -104.0f) return 0.0f;
    float n = lsc_sub(lsc_add(lsc_mul(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float s = lsc_fma(n, -0.693145751953125f, x);
    s = lsc_fma(n, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = lsc_fma(u, s, 0.00139304355252534151077271f);
    u = lsc_fma(u, s, 0.00833336077630519866943359f);
    u = lsc_fma(u, s, 0.0416664853692054748535156f);
    u = lsc_fma(u, s, 0.166666671633720397949219f);
    u = lsc_fma(u, s, 0.5f);
    u = lsc_add(1.0f, lsc_fma(lsc_mul(s, s), u, s));
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1, n2 = ni - n1;
    u = lsc_mul(u, lsc_bits2f((uint32_t)(n1 + 127) << 23));
    return lsc_mul(u, lsc_bits2f((uint32_t)(n2 + 127) << 23));
}

/* ---- the gated activations (docs/numerics.md), output times up --------------- */
/* SwiGLU (ops_scalar.c): silu = g / (1 + ls_expf(-g)); out = silu * u */
LS_HD float lsc_silu_mul(float g, float u) {
    float silu = lsc_div(g, lsc_add(1.0f, lsc_expf(-g)));
    return lsc_mul(silu, u);
}
/* GeGLU (geglu.c, ls_gelu_tanh): g2 = g*g; c1 = 1 + 0.044715f*g2; u2 = (2 sqrt(2/pi))f * (g*c1);
 * y = g / (1 + ls_expf(-u2)); out = y * u */
LS_HD float lsc_gelu_mul(float g, float u) {
    float g2 = lsc_mul(g, g);
    float c1 = lsc_add(1.0f, lsc_mul(0.044715f, g2));
    float u2 = lsc_mul(1.5957691216057308f, lsc_mul(g, c1));
    float y = lsc_div(g, lsc_add(1.0f, lsc_expf(-u2)));
    return lsc_mul(y, u);
}
/* the matmul epilogue's gate: gelu nonzero GeGLU, else SwiGLU */
LS_HD float lsc_glu(int gelu, float g, float u) { return gelu ? lsc_gelu_mul(g, u) : lsc_silu_mul(g, u); }

#endif
