/* cli.h - the lockstep command line: one file per subcommand. */
#ifndef LS_CLI_CLI_H
#define LS_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "lockstep.h"

#define LS_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define LS_EXIT_USAGE 2 /* bad flags, a missing or bad file, a prompt too long */

int cli_run(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_probe(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_mtp_data(int argc, char **argv);

/* Online CPUs (the default --threads). */
int cli_default_threads(void);
/* Where the probe memoizes its verdicts: $LOCKSTEP_CACHE, else $XDG_CACHE_HOME/lockstep,
 * else $HOME/.cache/lockstep, written into buf (cap bytes); NULL when none can be named. */
const char *cli_cache_dir(char *buf, size_t cap);
/* The probe's verdict on stderr: "parity: verified (...)", "parity: FAILED (...)". */
void cli_print_verdict(const ls_probe_result *r, const ls_engine_info *ei);

/* Strict numeric flag parsing: the whole string must be a number in range.
 * On failure prints "lockstep CMD: invalid value 'S' for FLAG (...)" and returns false. */
bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* qsort comparator for doubles, and the median of n values (sorts v in place;
 * the mean of the two middle values when n is even). */
int cli_cmp_double(const void *a, const void *b);
double cli_median(double *v, int n);
/* Prints "lockstep CMD: MSG" and returns LS_EXIT_USAGE. */
/* The program the messages name: "lockstep", or "lockstep-bench" (bench/cli/main.c). */
extern const char *cli_prog;
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
