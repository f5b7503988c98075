/* kernel_lab.h - the kernel lab: single-thread matmul speed per ISA, path and model shape. */
#ifndef LS_BENCH_CLI_KERNEL_LAB_H
#define LS_BENCH_CLI_KERNEL_LAB_H

#include <stdbool.h>
#include <stdio.h>

/* Runs the matmul benchmark (Q4_1 and Q8_0 weights; SmolLM2-135M shapes K=576 N in
 * {576, 192, 1536, 49152}, K=1536 N=576; M = 1, 2, 4, 8, 16, 64, 512) on every ISA the CPU
 * supports, one thread, and prints one line per case (a table, or JSON lines when json).
 * GB/s counts the repacked weight bytes read once per call.  Returns 0, or -1 if an
 * allocation failed. */
int ls_bench_kernels(bool json, FILE *out);

#endif
