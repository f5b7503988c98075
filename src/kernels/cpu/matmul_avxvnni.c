/* matmul_avxvnni.c - the AVX-VNNI level (vpdpbusd on ymm: Alder Lake and later, Zen 5):
 * matmul_avx2.c compiled with LS_Y_VNNI (see there), with -mavxvnni. */
#define LS_Y_VNNI 1
#include "kernels/cpu/matmul_avx2.c"
