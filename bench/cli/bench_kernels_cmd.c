/* bench_kernels_cmd.c - `lockstep-bench kernels`: matmul speed on every weight shape of a model.
 *
 * For each distinct (type, K, N) matrix of the model and M = 1, 2, 4, 8, 16, 64, 512
 * it times ls_matmul on the live ISA and thread count and reports GB/s (weight bytes
 * read per call / time), GFLOP/s (2*M*N*K / time), the path (narrow M=1, wide,
 * GEMM), the speed-up per row over the narrow path, and GB/s as a percentage of the
 * machine's DRAM read bandwidth, which it measures first.  A benchmark, not a test:
 * the machine is shared, so it reports medians of repeated runs. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/cli/bench.h"
#include "bench/cli/bench_common.h"
#include "bench/cli/kernel_lab.h"
#include "cli/cli.h"
#include "util/util.h"
#include "model/model.h"
#include "quant/quant.h"

static const char *bench_help =
    "usage: lockstep-bench kernels [-m MODEL] [-t THREADS] [--reps N] [--json]\n"
    "\n"
    "  -m, --model PATH   model whose matrix shapes are measured (default " LS_DEFAULT_MODEL ")\n"
    "  -t, --threads N    threads (default: online CPUs)\n"
    "      --reps N       timed repetitions per case; the median is reported (default 7)\n"
    "      --json         one JSON object instead of a table\n"
    "  -h, --help         this help\n"
    "\n"
    "LOCKSTEP_ISA=scalar|avx2|avx512 picks the kernels measured.\n";

typedef struct {
    const uint64_t *buf;
    size_t n;        /* u64 words */
    uint64_t sums[256];
} bw_job;

static void bw_task(void *arg, int ith, int nth) {
    bw_job *j = arg;
    size_t per = j->n / (size_t)nth, lo = per * (size_t)ith, hi = ith == nth - 1 ? j->n : lo + per;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = lo; i + 4 <= hi; i += 4) {
        a += j->buf[i];
        b += j->buf[i + 1];
        c += j->buf[i + 2];
        d += j->buf[i + 3];
    }
    j->sums[ith] = a + b + c + d;
}

/* DRAM read bandwidth with all pool threads: best of 5 passes over 1 GiB. */
static double measure_dram_gbs(ls_pool *pool) {
    const size_t bytes = (size_t)1 << 30;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0.0;
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i;
    bw_job j = {.buf = buf, .n = bytes / 8};
    double best = 0.0;
    for (int r = 0; r < 5; r++) {
        double t0 = ls_now_ms();
        ls_pool_run(pool, bw_task, &j);
        double gbs = (double)bytes / ((ls_now_ms() - t0) * 1e6);
        if (gbs > best) best = gbs;
    }
    uint64_t s = 0;
    for (int i = 0; i < ls_pool_size(pool); i++) s += j.sums[i];
    if (s == 42) fputc(' ', stderr); /* keeps the reads */
    free(buf);
    return best;
}

typedef struct {
    uint32_t type;
    int64_t K, N;
    const void *data;
    uint64_t nbytes;
    char name[64];
} shape;

int cli_bench_lab(int argc, char **argv) {
    bool json = argc > 1 && !strcmp(argv[1], "--json");
    return ls_bench_kernels(json, stdout) == 0 ? 0 : 1;
}

int cli_bench_kernels(int argc, char **argv) {
    const char *cmd = "kernels";
    const char *model_path = LS_DEFAULT_MODEL;
    long long threads = 0, reps = 7;
    bool json = false;
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"threads", required_argument, 0, 't'},
                                         {"reps", required_argument, 0, 'r'},  {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case 'r': if (!cli_parse_int(cmd, "--reps", optarg, 1, 1000, &reps)) return LS_EXIT_USAGE; break;
        case 'j': json = true; break;
        case 'h': fputs(bench_help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    ls_err err;
    ls_model *m = bench_load_model(cmd, model_path, &threads);
    if (!m) return LS_EXIT_USAGE;
    ls_isa isa;
    if (ls_isa_from_env(&isa, &err)) {
        fprintf(stderr, "lockstep-bench: %s\n", err.msg);
        ls_model_free(m);
        return LS_EXIT_USAGE;
    }
    /* The distinct matrix shapes the forward pass multiplies by. */
    const gguf_file *f = ls_model_gguf(m);
    shape shapes[64];
    int ns = 0;
    bool has_output = gguf_find_tensor(f, "output.weight") != NULL;
    for (uint64_t i = 0; i < gguf_n_tensors(f) && ns < 64; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->n_dims != 2 || !ls_matmul_type_supported(t->type)) continue;
        if (gguf_str_eq(t->name, "token_embd.weight") && has_output) continue;
        bool dup = false;
        for (int k = 0; k < ns; k++)
            dup |= shapes[k].type == t->type && shapes[k].K == (int64_t)t->ne[0] && shapes[k].N == (int64_t)t->ne[1];
        if (dup) continue;
        shape *s = &shapes[ns++];
        *s = (shape){.type = t->type, .K = (int64_t)t->ne[0], .N = (int64_t)t->ne[1], .data = t->data, .nbytes = t->nbytes};
        snprintf(s->name, sizeof s->name, "%.*s", (int)(t->name.len < 63 ? t->name.len : 63), t->name.ptr);
    }
    static const int64_t Ms[] = {1, 2, 4, 8, 16, 64, 512};
    const int nM = (int)(sizeof Ms / sizeof Ms[0]);
    int64_t maxK = 0, maxN = 0;
    for (int k = 0; k < ns; k++) {
        if (shapes[k].K > maxK) maxK = shapes[k].K;
        if (shapes[k].N > maxN) maxN = shapes[k].N;
    }
    ls_pool *pool = ls_pool_create((int)threads, &err);
    float *x = malloc(sizeof(float) * 512 * (size_t)maxK);
    float *y = malloc(sizeof(float) * 512 * (size_t)maxN);
    size_t sb = ls_matmul_scratch_bytes(512, maxK);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    double *times = malloc(sizeof(double) * (size_t)reps);
    int rc = 1;
    if (!pool || !x || !y || !scratch || !times) {
        fprintf(stderr, "lockstep-bench: out of memory\n");
        goto out;
    }
    uint64_t seed = 12345;
    for (size_t i = 0; i < 512 * (size_t)maxK; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23);
    }
    const double dram = measure_dram_gbs(pool);
    ls_kctx kc = {.isa = isa, .pool = pool, .scratch = scratch, .scratch_bytes = sb};
    cJSON *root = cJSON_CreateObject(), *cases = NULL;
    if (json) {
        cJSON_AddStringToObject(root, "model", model_path);
        cJSON_AddStringToObject(root, "isa", ls_isa_name(isa));
        cJSON_AddNumberToObject(root, "threads", (double)threads);
        cJSON_AddNumberToObject(root, "dram_read_gbs", dram);
        cases = cJSON_AddArrayToObject(root, "cases");
    } else {
        printf("matmul on %s, %lld threads; DRAM read bandwidth %.1f GB/s (measured, 1 GiB, best of 5)\n",
               ls_isa_name(isa), threads, dram);
        printf("%-26s %-5s %5s %6s %4s %-6s %9s %9s %8s %8s %9s\n", "tensor", "type", "K", "N", "M", "path", "ms",
               "GB/s", "GFLOP/s", "%DRAM", "x narrow");
    }
    for (int k = 0; k < ns; k++) {
        shape *s = &shapes[k];
        ls_wmat *w = ls_wmat_create(s->type, s->N, s->K, s->data, &err);
        if (!w || ls_wmat_prepare_all(w, &err)) {
            ls_wmat_free(w);
            fprintf(stderr, "lockstep-bench: %s: %s\n", s->name, err.msg);
            continue;
        }
        double t_narrow = 0;
        for (int mi = 0; mi < nM; mi++) {
            const int64_t M = Ms[mi];
            ls_matmul(&kc, w, x, M, y); /* warm-up */
            for (long long r = 0; r < reps; r++) {
                double t0 = ls_now_ms();
                ls_matmul(&kc, w, x, M, y);
                times[r] = ls_now_ms() - t0;
            }
            qsort(times, (size_t)reps, sizeof *times, cli_cmp_double);
            const double ms = times[reps / 2];
            if (M == 1) t_narrow = ms;
            const double gbs = (double)s->nbytes / (ms * 1e6);
            const double gflops = 2.0 * (double)M * (double)s->N * (double)s->K / (ms * 1e6);
            const double speedup = t_narrow * (double)M / ms; /* rows per second vs narrow */
            const char *path = M == 1 ? "narrow" : M < 16 ? "wide" : "gemm";
            const ls_type_info *ti = ls_type_get(s->type);
            if (json) {
                cJSON *c = cJSON_CreateObject();
                cJSON_AddStringToObject(c, "tensor", s->name);
                cJSON_AddStringToObject(c, "type", ti->name);
                cJSON_AddNumberToObject(c, "K", (double)s->K);
                cJSON_AddNumberToObject(c, "N", (double)s->N);
                cJSON_AddNumberToObject(c, "M", (double)M);
                cJSON_AddStringToObject(c, "path", path);
                cJSON_AddNumberToObject(c, "ms", ms);
                cJSON_AddNumberToObject(c, "gbs", gbs);
                cJSON_AddNumberToObject(c, "gflops", gflops);
                cJSON_AddNumberToObject(c, "pct_dram", dram > 0 ? 100.0 * gbs / dram : 0.0);
                cJSON_AddNumberToObject(c, "wide_vs_narrow", speedup);
                cJSON_AddItemToArray(cases, c);
            } else {
                printf("%-26s %-5s %5lld %6lld %4lld %-6s %9.3f %9.2f %8.1f %7.0f%% %9.2f\n", s->name, ti->name,
                       (long long)s->K, (long long)s->N, (long long)M, path, ms, gbs, gflops,
                       dram > 0 ? 100.0 * gbs / dram : 0.0, speedup);
            }
        }
        ls_wmat_free(w);
    }
    if (json) bench_print_json(root);
    else cJSON_Delete(root);
    rc = 0;
out:
    free(times);
    free(scratch);
    free(x);
    free(y);
    ls_pool_free(pool);
    ls_model_free(m);
    return rc;
}
