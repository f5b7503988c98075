/* cuda_mm_a.cu - exact matmul kernels for Q4_0, Q4_1, MXFP4, and the dispatch by type. */
#include "backend/cuda/cuda_mm.cuh"

LSC_MM_INSTANTIATE(LSC_Q4_0)
LSC_MM_INSTANTIATE(LSC_Q4_1)
LSC_MM_INSTANTIATE(LSC_MXFP4)

namespace lsc { /* defined in cuda_mm_b.cu and cuda_mm_c.cu */
#define LSC_MM_EXTERN(T)                                                                                     \
    extern template cudaError_t gemv_t<T>(const lsc_mat &, lsc_act, int, float *, int, int, lsc_qout, lsc_stream); \
    extern template cudaError_t mma_t<T>(const lsc_mat &, lsc_act, int, float *, int, int, float *, size_t,  \
                                         lsc_stream);                                                        \
    extern template cudaError_t mma_init_t<T>();                                                               \
    extern template cudaError_t dequant_t<T>(const lsc_mat &, void *, lsc_stream);
LSC_MM_EXTERN(LSC_Q5_0)
LSC_MM_EXTERN(LSC_Q5_1)
LSC_MM_EXTERN(LSC_Q8_0)
LSC_MM_EXTERN(LSC_Q4_K)
LSC_MM_EXTERN(LSC_Q5_K)
LSC_MM_EXTERN(LSC_Q6_K)
} /* namespace lsc */

#define LSC_TYPES(X) X(LSC_Q4_0) X(LSC_Q4_1) X(LSC_MXFP4) X(LSC_Q5_0) X(LSC_Q5_1) X(LSC_Q8_0) X(LSC_Q4_K) X(LSC_Q5_K) X(LSC_Q6_K)

cudaError_t lsc_gemv(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, lsc_stream s, lsc_qout qo) {
    if (rows <= 0) return cudaSuccess;
    switch (w.type) {
#define X(T) case T: return lsc::gemv_t<T>(w, a, rows, y, ldy, mode, qo, s);
        LSC_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t lsc_mma(const lsc_mat &w, lsc_act a, int rows, float *y, int ldy, int mode, float *part, size_t pf,
                    lsc_stream s) {
    if (rows <= 0) return cudaSuccess;
    switch (w.type) {
#define X(T) case T: return lsc::mma_t<T>(w, a, rows, y, ldy, mode, part, pf, s);
        LSC_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t lsc_mma_init(void) {
    cudaError_t e;
#define X(T) if ((e = lsc::mma_init_t<T>()) != cudaSuccess) return e;
    LSC_TYPES(X)
#undef X
    return cudaSuccess;
}

cudaError_t lsc_dequant_half(const lsc_mat &w, void *out, lsc_stream s) {
    switch (w.type) {
#define X(T) case T: return lsc::dequant_t<T>(w, out, s);
        LSC_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
}
