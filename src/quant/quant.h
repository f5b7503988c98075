/* quant.h - tensor element types (ggml type ids, as stored in GGUF) and the
 * reference (scalar) dequantization that defines what each block means.
 *
 * Block layouts follow ggml exactly; each type's layout is documented beside its
 * dequant function in dequant.c.  Sizes are in bytes, counts in elements. */
#ifndef LS_QUANT_QUANT_H
#define LS_QUANT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef enum {
    LS_TYPE_F32 = 0,
    LS_TYPE_F16 = 1,
    LS_TYPE_Q4_0 = 2,
    LS_TYPE_Q4_1 = 3,
    LS_TYPE_Q5_0 = 6,
    LS_TYPE_Q5_1 = 7,
    LS_TYPE_Q8_0 = 8,
    LS_TYPE_Q8_1 = 9,
    LS_TYPE_Q2_K = 10,
    LS_TYPE_Q3_K = 11,
    LS_TYPE_Q4_K = 12,
    LS_TYPE_Q5_K = 13,
    LS_TYPE_Q6_K = 14,
    LS_TYPE_Q8_K = 15,
    LS_TYPE_IQ2_XXS = 16,
    LS_TYPE_IQ2_XS = 17,
    LS_TYPE_IQ3_XXS = 18,
    LS_TYPE_IQ1_S = 19,
    LS_TYPE_IQ4_NL = 20,
    LS_TYPE_IQ3_S = 21,
    LS_TYPE_IQ2_S = 22,
    LS_TYPE_IQ4_XS = 23,
    LS_TYPE_I8 = 24,
    LS_TYPE_I16 = 25,
    LS_TYPE_I32 = 26,
    LS_TYPE_I64 = 27,
    LS_TYPE_F64 = 28,
    LS_TYPE_IQ1_M = 29,
    LS_TYPE_BF16 = 30,
    LS_TYPE_TQ1_0 = 34,
    LS_TYPE_TQ2_0 = 35,
    LS_TYPE_MXFP4 = 39,
    LS_TYPE_COUNT = 40,
} ls_type;

typedef struct {
    const char *name;     /* "Q4_1" */
    uint32_t block_elems; /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
    bool can_dequant;     /* ls_dequant_row implements it */
} ls_type_info;

/* NULL when `type` is not a ggml type id this build knows (an "unknown tensor type"). */
const ls_type_info *ls_type_get(uint32_t type);

/* Bytes needed for a row-major tensor of n_elems elements of `type`.
 * Fails (LS_E_FORMAT) if n_elems is not a multiple of the block size or on overflow. */
ls_status ls_type_nbytes(uint32_t type, uint64_t n_elems, uint64_t *out, ls_err *err);

/* Reference dequantization of n elements (a multiple of the block size) from
 * src (ggml block layout, any alignment) into dst.  `type` must have can_dequant. */
void ls_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Scalar conversions (round-to-nearest-even for the narrowing one). */
float ls_fp16_to_f32(uint16_t h);
uint16_t ls_f32_to_fp16(float f);
float ls_bf16_to_f32(uint16_t h);

#endif
