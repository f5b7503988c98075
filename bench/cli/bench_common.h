/* bench_common.h - helpers the `lockstep-bench` suites share. */
#ifndef LS_CLI_BENCH_COMMON_H
#define LS_CLI_BENCH_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "model/model.h"

/* The online CPU count (at least 1): the default of -t. */
int bench_default_threads(void);

/* Loads the model a suite measures: a readable file, then the load; on failure prints
 * "lockstep CMD: ..." naming the file and returns NULL (exit LS_EXIT_USAGE).  Sets
 * *threads to the online CPU count when it is 0. */
ls_model *bench_load_model(const char *cmd, const char *path, long long *threads);

/* Prints root as one line of JSON (the suites' --json output) and frees it. */
void bench_print_json(cJSON *root);

/* A user message in the model's chat template with the assistant header, tokenized
 * (BOS as the file says, special tokens parsed), into out[0..cap).  On failure prints
 * "lockstep CMD: ..." and returns false. */
bool bench_chat_tokens(const char *cmd, const ls_model *m, const char *msg, int32_t *out, int32_t cap, int32_t *n);

/* Parses "1,2,4" into v[0..max); false (after printing the usage error) on a bad list
 * or a value outside [lo, hi]. */
bool bench_parse_list(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *v, int max,
                      int *n);

#endif
