/* args.c - strict flag parsing and the usage-error convention shared by the
 * subcommands (and the benchmark tool). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

const char *cli_prog = "lockstep";

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    fprintf(stderr, "%s %s: ", cli_prog, cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see `%s %s --help`)\n", cli_prog, cmd);
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

const char *cli_cache_dir(char *buf, size_t cap) {
    const char *d = getenv("LOCKSTEP_CACHE");
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (d && *d) n = snprintf(buf, cap, "%s", d);
    else if (x && *x) n = snprintf(buf, cap, "%s/lockstep", x);
    else if (h && *h) n = snprintf(buf, cap, "%s/.cache/lockstep", h);
    else return NULL;
    return n > 0 && (size_t)n < cap ? buf : NULL;
}

int cli_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

