/* cuda_mm_b.cu - exact matmul kernels for Q5_0, Q5_1, Q8_0. */
#include "backend/cuda/cuda_mm.cuh"

LSC_MM_INSTANTIATE(LSC_Q5_0)
LSC_MM_INSTANTIATE(LSC_Q5_1)
LSC_MM_INSTANTIATE(LSC_Q8_0)
