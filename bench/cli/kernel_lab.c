/* bench.c - see bench.h.  Prediction for M = 1: the weights (~0.56 bytes/element for Q4_1)
 * are streamed once, so GB/s is the figure of merit; for large M, GFLOP/s. */
#include "bench/cli/kernel_lab.h"
#include "util/alloc.h"
#include "util/util.h"

#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/internal.h"

static double ls_bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t ls_bench_rng(uint64_t *s) { return ls_splitmix64(s); }

static const char *ls_bench_path(int64_t M) { return M == 1 ? "narrow" : M < 16 ? "wide" : "gemm"; }

int ls_bench_kernels(bool json, FILE *out) {
    static const uint32_t types[] = {LS_TYPE_Q4_1, LS_TYPE_Q8_0};
    static const int64_t shapes[][2] = {{576, 576}, {576, 192}, {576, 1536}, {576, 49152}, {1536, 576}};
    static const int64_t Ms[] = {1, 2, 4, 8, 16, 64, 512};
    const int64_t maxM = 512, maxK = 1536;
    float *x = ls_malloc(sizeof(float) * (size_t)(maxM * maxK));
    float *y = ls_malloc(sizeof(float) * (size_t)(maxM * 49152));
    size_t sb = ls_matmul_scratch_bytes(maxM, maxK);
    void *scratch = ls_malloc(sb);
    if (!x || !y || !scratch) {
        free(x);
        free(y);
        free(scratch);
        return -1;
    }
    uint64_t s = 1;
    for (int64_t i = 0; i < maxM * maxK; i++) x[i] = (float)((int64_t)(ls_bench_rng(&s) % 2001) - 1000) * 1e-3f;
    if (!json)
        fprintf(out, "%-5s %-7s %5s %6s %4s %-7s %10s %8s %9s\n", "type", "isa", "K", "N", "M", "path", "us/call",
                "GB/s", "GFLOP/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            uint32_t type = types[ti];
            int64_t K = shapes[si][0], N = shapes[si][1];
            uint64_t nbytes;
            if (ls_type_nbytes(type, (uint64_t)(N * K), &nbytes, NULL) != LS_OK) continue;
            uint8_t *wq = ls_malloc(nbytes);
            if (!wq) continue;
            for (uint64_t i = 0; i < nbytes; i++) wq[i] = (uint8_t)ls_bench_rng(&s);
            const ls_type_info *info = ls_type_get(type);
            for (uint64_t i = 0; i < nbytes; i += info->block_bytes) { /* d = 0.01, m = -0.05 (fp16) */
                wq[i] = 0x1f;
                wq[i + 1] = 0x21;
                if (type == LS_TYPE_Q4_1) {
                    wq[i + 2] = 0x66;
                    wq[i + 3] = 0xaa;
                }
            }
            ls_wmat *w = ls_wmat_create(type, N, K, wq, NULL);
            if (!w || ls_wmat_prepare_all(w, NULL)) {
                ls_wmat_free(w);
                free(wq);
                continue;
            }
            double wbytes = (double)w->row_bytes * (double)N;
            for (int isa = 0; isa <= LS_ISA_AVX512; isa++) {
                if (!ls_isa_supported((ls_isa)isa)) continue;
                for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                    int64_t M = Ms[mi];
                    if (isa == LS_ISA_SCALAR && M > 1) continue;   /* the reference is slow */
                    if (N >= 49152 && M > 64) continue;
                    ls_kctx kc = {(ls_isa)isa, NULL, scratch, sb, .narrow = false};
                    ls_matmul(&kc, w, x, M, y); /* warm-up */
                    int iters = 0;
                    double t0 = ls_bench_now(), t;
                    do {
                        ls_matmul(&kc, w, x, M, y);
                        iters++;
                        t = ls_bench_now() - t0;
                    } while (t < 0.05 && iters < 100000);
                    double per = t / iters;
                    double gbs = wbytes / per * 1e-9, gfl = 2.0 * (double)M * (double)N * (double)K / per * 1e-9;
                    if (json)
                        fprintf(out,
                                "{\"bench\":\"matmul\",\"type\":\"%s\",\"isa\":\"%s\",\"K\":%lld,\"N\":%lld,\"M\":%lld,"
                                "\"path\":\"%s\",\"threads\":1,\"us_per_call\":%.3f,\"GBps\":%.3f,\"GFLOPs\":%.3f}\n",
                                info->name, ls_isa_name((ls_isa)isa), (long long)K, (long long)N, (long long)M,
                                ls_bench_path(M), per * 1e6, gbs, gfl);
                    else
                        fprintf(out, "%-5s %-7s %5lld %6lld %4lld %-7s %10.2f %8.2f %9.2f\n", info->name,
                                ls_isa_name((ls_isa)isa), (long long)K, (long long)N, (long long)M, ls_bench_path(M),
                                per * 1e6, gbs, gfl);
                    fflush(out);
                }
            }
            ls_wmat_free(w);
            free(wq);
        }
    free(x);
    free(y);
    free(scratch);
    return 0;
}
