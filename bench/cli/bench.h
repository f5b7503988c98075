/* bench.h - `lockstep-bench`, the benchmark tool: one file per suite.  A tool, not the
 * product: it may use the library's internals (the forward, the kernels). */
#ifndef LS_BENCH_CLI_BENCH_H
#define LS_BENCH_CLI_BENCH_H

int cli_bench_kernels(int argc, char **argv);
int cli_bench_batch(int argc, char **argv);
int cli_bench_spec(int argc, char **argv);
int cli_bench_mixed(int argc, char **argv);
int cli_bench_cache(int argc, char **argv);
int cli_bench_lab(int argc, char **argv);

#endif
