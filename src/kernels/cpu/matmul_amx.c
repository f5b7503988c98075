/* matmul_amx.c - the AMX level (Sapphire Rapids and later): matmul_avx512.c compiled
 * with LS_Z_AMX (see there), with -mamx-tile -mamx-int8 beside the AVX-512 flags. */
#define LS_Z_AMX 1
#include "kernels/cpu/matmul_avx512.c"
