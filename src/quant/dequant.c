/* dequant.c - reference (scalar) dequantization: the definition of what each block means.
 *
 * Every function follows ggml's block layout (ggml-common.h) and the float operation
 * order of ggml's dequantize_row_* (ggml-quants.c); the gguf Python package
 * (gguf/quants.py) computes the same products, so results are bit-identical to it.
 * Build flags keep -ffp-contract=off, so each `a * b + c` below is two roundings,
 * exactly as written.
 *
 * Blocks are read byte by byte (multi-byte fields are little-endian, as in GGUF), so
 * `src` may have any alignment, and no load leaves the block it belongs to. */
#include "quant/quant.h"

#include <string.h>

#define QK_K 256

static inline uint16_t rd_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline float rd_f16(const uint8_t *p) {
    return ls_fp16_to_f32(rd_u16(p));
}

/* F32: 4 bytes little-endian IEEE binary32 per element; copied bit for bit. */
static void dq_f32(const uint8_t *x, float *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

/* F16: 2 bytes IEEE binary16 per element; exact widening (NaN payload kept). */
static void dq_f16(const uint8_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = rd_f16(x + 2 * i);
}

/* BF16: 2 bytes per element, the top half of a binary32: y bits = h << 16. */
static void dq_bf16(const uint8_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = ls_bf16_to_f32(rd_u16(x + 2 * i));
}

/* Q4_0 block (32 elements, 18 bytes):
 *   [0..1]   d       fp16 scale
 *   [2..17]  qs[16]  nibbles: element j (j < 16) is qs[j] & 0xF, element j+16 is qs[j] >> 4
 * y = (q - 8) * d */
static void dq_q4_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float d = rd_f16(x);
        const uint8_t *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0F) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

/* Q4_1 block (32 elements, 20 bytes):
 *   [0..1]   d       fp16 scale
 *   [2..3]   m       fp16 offset (block minimum)
 *   [4..19]  qs[16]  nibbles, low halves first as in Q4_0
 * y = q * d + m */
static void dq_q4_1(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 20, y += 32) {
        const float d = rd_f16(x);
        const float m = rd_f16(x + 2);
        const uint8_t *qs = x + 4;
        for (int j = 0; j < 16; j++) {
            const int x0 = qs[j] & 0x0F;
            const int x1 = qs[j] >> 4;
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    }
}

/* Q5_0 block (32 elements, 22 bytes):
 *   [0..1]   d       fp16 scale
 *   [2..5]   qh      u32 (little-endian): bit j is the 5th bit of element j
 *   [6..21]  qs[16]  low nibbles as in Q4_0
 * y = (q - 16) * d, q = low nibble | (qh bit << 4) */
static void dq_q5_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 22, y += 32) {
        const float d = rd_f16(x);
        const uint32_t qh = rd_u32(x + 2);
        const uint8_t *qs = x + 6;
        for (int j = 0; j < 16; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int32_t x0 = ((qs[j] & 0x0F) | xh0) - 16;
            const int32_t x1 = ((qs[j] >> 4) | xh1) - 16;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

/* Q5_1 block (32 elements, 24 bytes):
 *   [0..1]   d       fp16 scale
 *   [2..3]   m       fp16 offset
 *   [4..7]   qh      u32 (little-endian): bit j is the 5th bit of element j
 *   [8..23]  qs[16]  low nibbles as in Q4_0
 * y = q * d + m */
static void dq_q5_1(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 24, y += 32) {
        const float d = rd_f16(x);
        const float m = rd_f16(x + 2);
        const uint32_t qh = rd_u32(x + 4);
        const uint8_t *qs = x + 8;
        for (int j = 0; j < 16; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int x0 = (qs[j] & 0x0F) | xh0;
            const int x1 = (qs[j] >> 4) | xh1;
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    }
}

/* Q8_0 block (32 elements, 34 bytes):
 *   [0..1]   d       fp16 scale
 *   [2..33]  qs[32]  int8
 * y = q * d */
static void dq_q8_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 34, y += 32) {
        const float d = rd_f16(x);
        const uint8_t *qs = x + 2;
        for (int j = 0; j < 32; j++)
            y[j] = (float)(int8_t)qs[j] * d;
    }
}

/* The 12-byte K-quant scale field holds 8 (scale, min) pairs of 6 bits each:
 *   bytes 0..3   sc[0..3] in bits 0..5, bits 6..7 = bits 4..5 of sc[4..7]
 *   bytes 4..7   mn[0..3] in bits 0..5, bits 6..7 = bits 4..5 of mn[4..7]
 *   bytes 8..11  low nibble = bits 0..3 of sc[4..7], high nibble = bits 0..3 of mn[4..7]
 * (ggml's get_scale_min_k4) */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Q4_K super-block (256 elements, 144 bytes), 8 sub-blocks of 32:
 *   [0..1]     d           fp16 super-scale for the scales
 *   [2..3]     dmin        fp16 super-scale for the mins
 *   [4..15]    scales[12]  8 x (6-bit scale, 6-bit min), see get_scale_min_k4
 *   [16..143]  qs[128]     4 chunks of 32 bytes; chunk c holds sub-block 2c in its
 *                          low nibbles and sub-block 2c+1 in its high nibbles
 * d1 = d * sc, m1 = dmin * mn (floats), y = d1 * q - m1 */
static void dq_q4_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 144) {
        const float d = rd_f16(x);
        const float min = rd_f16(x + 2);
        const uint8_t *scales = x + 4;
        const uint8_t *q = x + 16;
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = min * (float)m;
            get_scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * (float)sc;
            const float m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/* Q5_K super-block (256 elements, 176 bytes), 8 sub-blocks of 32:
 *   [0..1]     d           fp16
 *   [2..3]     dmin        fp16
 *   [4..15]    scales[12]  as in Q4_K
 *   [16..47]   qh[32]      5th bits: element l of sub-block s has bit s of qh[l]
 *   [48..175]  qs[128]     low nibbles, arranged as Q4_K's qs
 * d1 = d * sc, m1 = dmin * mn (floats), y = d1 * q - m1 with q in 0..31 */
static void dq_q5_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 176) {
        const float d = rd_f16(x);
        const float min = rd_f16(x + 2);
        const uint8_t *scales = x + 4;
        const uint8_t *qh = x + 16;
        const uint8_t *ql = x + 48;
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = min * (float)m;
            get_scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * (float)sc;
            const float m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* Q6_K super-block (256 elements, 210 bytes), 16 sub-blocks of 16:
 *   [0..127]    ql[128]     low 4 bits; per 128-element half h: ql[64h + l] low nibble ->
 *                           element l, ql[64h + 32 + l] low -> l+32, ql[64h + l] high -> l+64,
 *                           ql[64h + 32 + l] high -> l+96 (l < 32)
 *   [128..191]  qh[64]      high 2 bits; qh[32h + l] bits 0-1, 2-3, 4-5, 6-7 -> elements
 *                           l, l+32, l+64, l+96 of half h
 *   [192..207]  scales[16]  int8, one per 16 elements
 *   [208..209]  d           fp16
 * y = (d * sc) * (q - 32): ggml's `d * sc[is] * q`, evaluated left to right */
static void dq_q6_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 210) {
        const float d = rd_f16(x + 208);
        const uint8_t *ql = x;
        const uint8_t *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* FP4 E2M1 code -> value, doubled (ggml's kvalues_mxfp4); the halved shared scale
 * below undoes the doubling. */
static const int8_t k_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* E8M0 exponent e -> 2^(e-127) / 2 as an exact float (ggml_e8m0_to_fp32_half):
 * e < 2 gives the subnormals 2^-128, 2^-127; e = 255 gives 2^127 (no NaN). */
static inline float e8m0_to_f32_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* MXFP4 block (32 elements, 17 bytes):
 *   [0]      e       E8M0 shared exponent
 *   [1..16]  qs[16]  FP4 E2M1 codes: element j (j < 16) is qs[j] & 0xF, j+16 is qs[j] >> 4
 * y = kvalues_mxfp4[code] * (2^(e-127) / 2) */
static void dq_mxfp4(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 17, y += 32) {
        const float d = e8m0_to_f32_half(x[0]);
        const uint8_t *qs = x + 1;
        for (int j = 0; j < 16; j++) {
            const int8_t x0 = k_mxfp4[qs[j] & 0x0F];
            const int8_t x1 = k_mxfp4[qs[j] >> 4];
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

void ls_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const ls_type_info *ti = ls_type_get(type);
    LS_ASSERT(ti != NULL && ti->can_dequant);
    LS_ASSERT(n >= 0 && n % ti->block_elems == 0);
    const uint8_t *x = (const uint8_t *)src;
    const int64_t nb = n / ti->block_elems;
    switch ((ls_type)type) {
    case LS_TYPE_F32: dq_f32(x, dst, n); break;
    case LS_TYPE_F16: dq_f16(x, dst, n); break;
    case LS_TYPE_BF16: dq_bf16(x, dst, n); break;
    case LS_TYPE_Q4_0: dq_q4_0(x, dst, nb); break;
    case LS_TYPE_Q4_1: dq_q4_1(x, dst, nb); break;
    case LS_TYPE_Q5_0: dq_q5_0(x, dst, nb); break;
    case LS_TYPE_Q5_1: dq_q5_1(x, dst, nb); break;
    case LS_TYPE_Q8_0: dq_q8_0(x, dst, nb); break;
    case LS_TYPE_Q4_K: dq_q4_k(x, dst, nb); break;
    case LS_TYPE_Q5_K: dq_q5_k(x, dst, nb); break;
    case LS_TYPE_Q6_K: dq_q6_k(x, dst, nb); break;
    case LS_TYPE_MXFP4: dq_mxfp4(x, dst, nb); break;
    default: LS_ASSERT(!"ls_dequant_row: type without a dequantizer");
    }
}
