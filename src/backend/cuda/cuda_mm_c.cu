/* cuda_mm_c.cu - exact matmul kernels for Q4_K, Q5_K, Q6_K. */
#include "backend/cuda/cuda_mm.cuh"

LSC_MM_INSTANTIATE(LSC_Q4_K)
LSC_MM_INSTANTIATE(LSC_Q5_K)
LSC_MM_INSTANTIATE(LSC_Q6_K)
