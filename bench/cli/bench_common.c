/* bench_common.c - helpers the `lockstep-bench` suites share. */
#include "bench/cli/bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/cli/bench.h"
#include "cli/cli.h"
#include "util/util.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

int bench_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

ls_model *bench_load_model(const char *cmd, const char *path, long long *threads) {
    if (access(path, R_OK) != 0) {
        cli_usage_error(cmd, "cannot read model file '%s'", path);
        return NULL;
    }
    if (*threads == 0) *threads = bench_default_threads();
    ls_err err;
    ls_model *m = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = path}, &err);
    if (!m) fprintf(stderr, "lockstep-bench %s: cannot load '%s': %s\n", cmd, path, err.msg);
    return m;
}

void bench_print_json(cJSON *root) {
    char *s = cJSON_PrintUnformatted(root);
    if (s) puts(s);
    free(s);
    cJSON_Delete(root);
}

bool bench_chat_tokens(const char *cmd, const ls_model *m, const char *msg, int32_t *out, int32_t cap, int32_t *n) {
    const ls_chat_template *tmpl = ls_model_chat_template(m);
    if (!tmpl) {
        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, ls_model_template_error(m));
        return false;
    }
    ls_err err;
    char *text = NULL;
    ls_chat_msg cm = {"user", msg};
    if (ls_chat_apply(tmpl, &cm, 1, true, &text, &err)) {
        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
        return false;
    }
    size_t nt = 0;
    ls_status st = ls_tokenize(ls_model_tokenizer(m), text, strlen(text), true, true, out, (size_t)cap, &nt, &err);
    free(text);
    if (st) {
        fprintf(stderr, "lockstep-bench %s: %s\n", cmd, err.msg);
        return false;
    }
    *n = (int32_t)nt;
    return true;
}

bool bench_parse_list(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *v, int max,
                      int *n) {
    *n = 0;
    for (const char *p = s;;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < lo || x > hi || (*end && *end != ',') || *n == max) {
            cli_usage_error(cmd, "invalid value '%s' for %s (up to %d comma-separated integers in [%d, %d])", s, flag,
                            max, lo, hi);
            return false;
        }
        v[(*n)++] = (int32_t)x;
        if (!*end) return true;
        p = end + 1;
    }
}
