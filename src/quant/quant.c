/* quant.c - the ggml type table, tensor byte sizes, and scalar fp16/bf16 conversions.
 *
 * Names and (block_elems, block_bytes) are exactly those of the gguf Python package's
 * GGML_QUANT_SIZES (gguf 0.19.0), which mirror ggml's type_traits.  Ids that ggml never
 * assigned or retired (4, 5: Q4_2/Q4_3; 31-33: Q4_0_4_4/Q4_0_4_8/Q4_0_8_8; 36-38:
 * IQ4_NL_4_4/_4_8/_8_8) and ids >= LS_TYPE_COUNT are unknown here. */
#include "quant/quant.h"

#include <string.h>

#define T(id, nm, be, bb, dq) [LS_TYPE_##id] = {.name = nm, .block_elems = be, .block_bytes = bb, .can_dequant = dq}

static const ls_type_info k_types[LS_TYPE_COUNT] = {
    T(F32, "F32", 1, 4, true),
    T(F16, "F16", 1, 2, true),
    T(Q4_0, "Q4_0", 32, 18, true),
    T(Q4_1, "Q4_1", 32, 20, true),
    T(Q5_0, "Q5_0", 32, 22, true),
    T(Q5_1, "Q5_1", 32, 24, true),
    T(Q8_0, "Q8_0", 32, 34, true),
    T(Q8_1, "Q8_1", 32, 40, false),
    T(Q2_K, "Q2_K", 256, 84, false),
    T(Q3_K, "Q3_K", 256, 110, false),
    T(Q4_K, "Q4_K", 256, 144, true),
    T(Q5_K, "Q5_K", 256, 176, true),
    T(Q6_K, "Q6_K", 256, 210, true),
    T(Q8_K, "Q8_K", 256, 292, false),
    T(IQ2_XXS, "IQ2_XXS", 256, 66, false),
    T(IQ2_XS, "IQ2_XS", 256, 74, false),
    T(IQ3_XXS, "IQ3_XXS", 256, 98, false),
    T(IQ1_S, "IQ1_S", 256, 50, false),
    T(IQ4_NL, "IQ4_NL", 32, 18, false),
    T(IQ3_S, "IQ3_S", 256, 110, false),
    T(IQ2_S, "IQ2_S", 256, 82, false),
    T(IQ4_XS, "IQ4_XS", 256, 136, false),
    T(I8, "I8", 1, 1, false),
    T(I16, "I16", 1, 2, false),
    T(I32, "I32", 1, 4, false),
    T(I64, "I64", 1, 8, false),
    T(F64, "F64", 1, 8, false),
    T(IQ1_M, "IQ1_M", 256, 56, false),
    T(BF16, "BF16", 1, 2, true),
    T(TQ1_0, "TQ1_0", 256, 54, false),
    T(TQ2_0, "TQ2_0", 256, 66, false),
    T(MXFP4, "MXFP4", 32, 17, true),
};

#undef T

const ls_type_info *ls_type_get(uint32_t type) {
    if (type >= LS_TYPE_COUNT || k_types[type].name == NULL)
        return NULL;
    return &k_types[type];
}

ls_status ls_type_nbytes(uint32_t type, uint64_t n_elems, uint64_t *out, ls_err *err) {
    const ls_type_info *ti = ls_type_get(type);
    if (!ti)
        return ls_err_set(err, LS_E_FORMAT, "unknown tensor type id %u", type);
    if (n_elems % ti->block_elems != 0)
        return ls_err_set(err, LS_E_FORMAT,
                          "tensor type %s: element count %llu is not a multiple of its block size %u",
                          ti->name, (unsigned long long)n_elems, ti->block_elems);
    uint64_t nbytes;
    if (ls_mul_u64(n_elems / ti->block_elems, ti->block_bytes, &nbytes))
        return ls_err_set(err, LS_E_FORMAT, "tensor type %s: byte size of %llu elements overflows 64 bits",
                          ti->name, (unsigned long long)n_elems);
    *out = nbytes;
    return LS_OK;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE binary16 -> binary32, exact for every input.  Subnormal halves are normalised;
 * inf keeps its sign; NaN keeps sign and payload bits (shifted into the top of the
 * binary32 mantissa, as numpy does: a signalling NaN stays signalling). */
float ls_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        /* subnormal: man * 2^-24; shift the leading one up to bit 10 */
        uint32_t e = 127 - 15 + 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    return f32_from_bits(bits);
}

/* binary32 -> binary16, round to nearest, ties to even; overflow goes to inf, tiny
 * values to (signed) subnormals or zero.  NaN stays NaN (quiet bit set, top payload
 * bits kept). */
uint16_t ls_f32_to_fp16(float f) {
    uint32_t x = f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 = halfway between 65504 and 2^16: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal half: >= 2^-14 */
        uint32_t h = (ax >> 13) - ((127u - 15u) << 10);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is the correct result */
        return (uint16_t)(sign | h);
    }
    if (ax < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 itself ties to even 0 below) */
        return sign;
    /* subnormal half: result = round(value / 2^-24); value = m * 2^(E-23) */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    int e = (int)(ax >> 23) - 127; /* -25 .. -15 */
    unsigned s = (unsigned)(-e - 1); /* 14 .. 24 */
    uint32_t h = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

float ls_bf16_to_f32(uint16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}
