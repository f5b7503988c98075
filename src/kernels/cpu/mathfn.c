/* mathfn.c - ls_expf, the project's own exp (recipe in docs/numerics.md).
 * The SIMD versions (ops_avx2.c, ops_avx512.c) perform the same operations in
 * the same order and give identical bits for every input. */
#include <math.h>

#include "kernels/cpu/internal.h"

float ls_expf(float x) {
    if (x != x) return x + x;            /* NaN (quieted) */
    if (x > LS_EXP_HI) return ls_k_bits2f(0x7f800000u);
    if (x < LS_EXP_LO) return 0.0f;
    /* n = rint(x * log2e), ties to even (|x*log2e| < 151, so the 1.5*2^23 trick is exact) */
    float n = (x * LS_EXP_LOG2E + 12582912.0f) - 12582912.0f;
    float s = fmaf(n, -LS_EXP_L2U, x);   /* Cody-Waite: x - n*ln2 in two fma steps */
    s = fmaf(n, -LS_EXP_L2L, s);
    float u = LS_EXP_C5;
    u = fmaf(u, s, LS_EXP_C4);
    u = fmaf(u, s, LS_EXP_C3);
    u = fmaf(u, s, LS_EXP_C2);
    u = fmaf(u, s, LS_EXP_C1);
    u = fmaf(u, s, LS_EXP_C0);
    u = 1.0f + fmaf(s * s, u, s);
    /* u * 2^n as two exact power-of-two factors: n1 = floor(n/2), n2 = n - n1 */
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1, n2 = ni - n1;
    u = u * ls_k_bits2f((uint32_t)(n1 + 127) << 23);
    return u * ls_k_bits2f((uint32_t)(n2 + 127) << 23);
}

void ls_expf_n_scalar(const float *x, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = ls_expf(x[i]);
}
