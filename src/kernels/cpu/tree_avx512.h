/* tree_avx512.h - the canonical adjacent pairwise trees in AVX-512, shared by the
 * AVX-512 matmul and ops files (include only from *_avx512.c). */
#ifndef LS_KERNELS_CPU_TREE_AVX512_H
#define LS_KERNELS_CPU_TREE_AVX512_H

#include <immintrin.h>

/* The adjacent pairwise tree over the 16 lanes of t. */
static inline __attribute__((always_inline)) float ls_z_tree16(__m512 t) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int i = 0; i < 4; i++) t = _mm512_add_ps(_mm512_permutexvar_ps(ev, t), _mm512_permutexvar_ps(od, t));
    return _mm512_cvtss_f32(t);
}

/* One level of the adjacent pairwise tree over the concatenation a|b: lanes 0..7 are the
 * sums of a's adjacent lane pairs, lanes 8..15 those of b. */
static inline __attribute__((always_inline)) __m512 ls_z_pair(__m512 a, __m512 b) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(a, ev, b), _mm512_permutex2var_ps(a, od, b));
}

/* ls_z_tree16 of 16 vectors at once: lane j of the result is the tree over v[j]'s lanes. */
static inline __attribute__((always_inline)) __m512 ls_z_tree16_x16(const __m512 *v) {
    __m512 u[8], t[4];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) u[j] = ls_z_pair(v[2 * j], v[2 * j + 1]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) t[j] = ls_z_pair(u[2 * j], u[2 * j + 1]);
    return ls_z_pair(ls_z_pair(t[0], t[1]), ls_z_pair(t[2], t[3]));
}

#endif
