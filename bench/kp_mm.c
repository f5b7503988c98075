/* kp_mm.c - one matmul shape on one ISA, single thread, for interleaved A/B runs of two
 * builds (bench/kp_ab.sh links this file against each and alternates them).
 * Usage: kp_mm TYPE_ID K N M ISA [SAMPLES]   (ISA: scalar, avx2, avxvnni, avx512)
 * Prints the median over SAMPLES (default 7) of the thread CPU time per call, each sample
 * the mean of calls repeated for >= 50 ms.  Also prints a checksum of y (the bits of the
 * two builds must agree). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: kp_mm TYPE_ID K N M ISA [SAMPLES]\n");
        return 2;
    }
    uint32_t type = (uint32_t)atoi(argv[1]);
    int64_t K = atoll(argv[2]), N = atoll(argv[3]), M = atoll(argv[4]);
    int ns = argc > 6 ? atoi(argv[6]) : 7;
    if (ns < 1 || ns > 99) return 2;
    ls_isa isa;
    ls_err err;
    if (ls_isa_from_name(argv[5], &isa, &err) || !ls_isa_supported(isa)) {
        fprintf(stderr, "isa %s not available\n", argv[5]);
        return 3;
    }
    uint64_t nb;
    if (ls_type_nbytes(type, (uint64_t)(N * K), &nb, NULL)) return 2;
    uint8_t *w = malloc(nb);
    uint64_t s = 12345;
    for (size_t i = 0; i < nb; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (uint8_t)(s >> 56);
    }
    const ls_type_info *ti = ls_type_get(type);
    /* small finite fp16 scales where the block starts with them (Q4_K: d, dmin) */
    for (size_t i = 0; i < nb; i += ti->block_bytes) { w[i] = 0x1f; w[i + 1] = 0x21; w[i + 2] = 0x1f; w[i + 3] = 0x11; }
    if (type == LS_TYPE_Q6_K) /* its fp16 d ends the block */
        for (size_t i = 0; i < nb; i += ti->block_bytes) { w[i + 208] = 0x1f; w[i + 209] = 0x21; }
    ls_wmat *W = ls_wmat_create(type, N, K, w, &err);
    if (!W || ls_wmat_prepare(W, isa, NULL, &err)) return 4;
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *y = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M * K; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
    size_t sb = ls_matmul_scratch_bytes(M, K);
    void *scr = malloc(sb);
    ls_kctx kc = {isa, NULL, scr, sb, .narrow = false};
    ls_matmul(&kc, W, x, M, y);
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < M * N; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        h = (h ^ u) * 1099511628211ull;
    }
    double t[99];
    for (int r = 0; r < ns; r++) {
        int it = 0;
        double t0 = now(), dt;
        do {
            ls_matmul(&kc, W, x, M, y);
            it++;
            dt = now() - t0;
        } while (dt < 0.05);
        t[r] = dt / it;
    }
    qsort(t, (size_t)ns, sizeof t[0], cmpd);
    printf("%s %s K=%lld N=%lld M=%lld median %.1f us/call (%.2f ms)  %.1f GFLOP/s  y-hash %016llx\n", ti->name,
           ls_isa_name(isa), (long long)K, (long long)N, (long long)M, t[ns / 2] * 1e6, t[ns / 2] * 1e3,
           2.0 * (double)(M * N * K) / t[ns / 2] * 1e-9, (unsigned long long)h);
    ls_wmat_free(W);
    free(scr);
    free(x);
    free(y);
    free(w);
    return 0;
}
