/* tree_avx2.h - the canonical adjacent pairwise tree over 16 lanes held in two AVX2
 * registers, shared by the AVX2 matmul and ops files (include only from *_avx2.c). */
#ifndef LS_KERNELS_CPU_TREE_AVX2_H
#define LS_KERNELS_CPU_TREE_AVX2_H

#include <immintrin.h>

/* One tree level: out lane i = (a:b)[2i] + (a:b)[2i+1] for the 16 values a:b. */
static inline __attribute__((always_inline)) __m256 ls_y_pairs_add(__m256 a, __m256 b) {
    __m256 t = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
    return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

/* The adjacent pairwise tree over the 16 lanes a:b. */
static inline __attribute__((always_inline)) float ls_y_tree16(__m256 a, __m256 b) {
    const __m256 z = _mm256_setzero_ps();
    __m256 t = ls_y_pairs_add(a, b);
    t = ls_y_pairs_add(t, z);
    t = ls_y_pairs_add(t, z);
    t = ls_y_pairs_add(t, z);
    return _mm256_cvtss_f32(t);
}

#endif
