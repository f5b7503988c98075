/* main.c - `lockstep <command> [flags]`. */
#include <stdarg.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: lockstep <command> [flags]\n"
            "\n"
            "commands:\n"
            "  run        generate text from a prompt or a chat message\n"
            "  info       show a model's architecture, hyperparameters and tensors\n"
            "  tokenize   show the token ids of a text\n"
            "  bench      benchmarks (`lockstep bench kernels|batch|spec|mixed|cache`)\n"
            "  probe      the exactness probe that gates speculative decoding\n"
            "  serve      an OpenAI-compatible HTTP server\n"
            "\n"
            "Run `lockstep <command> --help` for a command's flags.\n"
            "The default model is %s (`make model` fetches it).\n",
            LS_DEFAULT_MODEL);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    fprintf(stderr, "lockstep %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see `lockstep %s --help`)\n", cmd);
    return LS_EXIT_USAGE;
}

int cli_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cli_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "invalid value '%s' for %s (an integer in [%lld, %lld])", s, flag, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') {
        cli_usage_error(cmd, "invalid value '%s' for %s (a non-negative integer)", s, flag);
        return false;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) {
        cli_usage_error(cmd, "invalid value '%s' for %s (a non-negative integer)", s, flag);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(cmd, "invalid value '%s' for %s (a number in [%g, %g])", s, flag, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return LS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cli_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "probe")) return cli_probe(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 1, argv + 1);
    fprintf(stderr, "lockstep: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return LS_EXIT_USAGE;
}
