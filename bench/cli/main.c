/* main.c - `lockstep-bench <suite> [flags]` (bench/README.md). */
#include <stdio.h>
#include <string.h>

#include "bench/cli/bench.h"
#include "cli/cli.h"

static const char *usage =
    "usage: lockstep-bench <suite> [flags]   (each suite has --help)\n"
    "\n"
    "  kernels   matmul speed on every weight shape of a model, the narrow pin's tax\n"
    "  lab       the kernel lab: single-thread matmul per ISA, path and SmolLM2 shape\n"
    "  batch     aggregate decode at batch sizes 1..32, wide vs narrow kernels\n"
    "  spec      speculative decoding: drafters, verify cost per block width\n"
    "  mixed     one speculative stream amid classic ones\n"
    "  cache     prefix-cache time to first token\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? LS_EXIT_USAGE : 0;
    }
    cli_prog = "lockstep-bench";
    const char *s = argv[1];
    if (!strcmp(s, "kernels")) return cli_bench_kernels(argc - 1, argv + 1);
    if (!strcmp(s, "lab")) return cli_bench_lab(argc - 1, argv + 1);
    if (!strcmp(s, "batch")) return cli_bench_batch(argc - 1, argv + 1);
    if (!strcmp(s, "spec")) return cli_bench_spec(argc - 1, argv + 1);
    if (!strcmp(s, "mixed")) return cli_bench_mixed(argc - 1, argv + 1);
    if (!strcmp(s, "cache")) return cli_bench_cache(argc - 1, argv + 1);
    fprintf(stderr, "lockstep-bench: unknown suite '%s'\n\n%s", s, usage);
    return LS_EXIT_USAGE;
}
