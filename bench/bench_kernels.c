/* bench_kernels.c - standalone driver for ls_bench_kernels (the CLI can call it too).
 * Build: make lib && cc -O2 -Isrc bench/bench_kernels.c build/liblockstep.a -lm -pthread -o build/bench_kernels
 * Usage: build/bench_kernels [--json] */
#include <string.h>

#include "kernels/cpu/bench.h"

int main(int argc, char **argv) {
    bool json = argc > 1 && strcmp(argv[1], "--json") == 0;
    return ls_bench_kernels(json, stdout) == 0 ? 0 : 1;
}
