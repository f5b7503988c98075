/* mm_quick.c - kernel lab: one matmul shape on every ISA, single thread.
 * Usage: mm_quick TYPE_ID K N M [ENVVAR]  (e.g. 3 576 1536 1 for Q4_1)
 * Times are thread CPU time (robust on a shared machine: descheduled time does not count).
 * With ENVVAR, the AVX-512 run is repeated interleaved with ENVVAR unset / set (A/B). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/kernels.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    uint32_t type = (uint32_t)atoi(argv[1]);
    int64_t K = atoll(argv[2]), N = atoll(argv[3]), M = atoll(argv[4]);
    uint64_t nb;
    if (ls_type_nbytes(type, (uint64_t)(N * K), &nb, NULL)) return 2;
    uint8_t *w = malloc(nb);
    for (size_t i = 0; i < nb; i++) w[i] = (uint8_t)rand();
    const ls_type_info *ti = ls_type_get(type);
    for (size_t i = 0; i < nb; i += ti->block_bytes) { w[i] = 0x1f; w[i + 1] = 0x21; }
    ls_wmat *W = ls_wmat_create(type, N, K, w, NULL);
    ls_wmat_prepare_all(W, NULL);
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *y = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M * K; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    size_t sb = ls_matmul_scratch_bytes(M, K);
    void *s = malloc(sb);
    const char *ab = argc > 5 ? argv[5] : NULL;
    double tab[2][9];
    for (int run = 0; run < (ab ? 18 : 2); run++) {
        int isa = ab ? 2 : run + 1;
        if (ab) {
            if (run % 2) setenv(ab, "1", 1);
            else unsetenv(ab);
        }
        if (!ls_isa_supported((ls_isa)isa)) continue;
        ls_kctx kc = {(ls_isa)isa, NULL, s, sb};
        ls_matmul(&kc, W, x, M, y);
        double t = 1e30; /* best of 15 short runs: robust on a shared machine */
        for (int rep = 0; rep < (ab ? 5 : 15); rep++) {
            int it = 0;
            double t0 = now(), dt;
            do { ls_matmul(&kc, W, x, M, y); it++; dt = now() - t0; } while (dt < 0.02);
            if (dt / it < t) t = dt / it;
        }
        if (ab) {
            tab[run % 2][run / 2] = t;
            continue;
        }
        printf("%s %s K=%lld N=%lld M=%lld: %.2f us/call  %.2f GB/s (ggml bytes)  %.1f GFLOP/s\n", ti->name,
               ls_isa_name((ls_isa)isa), (long long)K, (long long)N, (long long)M, t * 1e6, (double)nb / t * 1e-9,
               2.0 * (double)(M * N * K) / t * 1e-9);
    }
    if (ab) {
        for (int v = 0; v < 2; v++) { /* median of 9 (insertion sort) */
            for (int i = 1; i < 9; i++)
                for (int j = i; j > 0 && tab[v][j] < tab[v][j - 1]; j--) {
                    double tt = tab[v][j];
                    tab[v][j] = tab[v][j - 1];
                    tab[v][j - 1] = tt;
                }
        }
        printf("%s K=%lld N=%lld M=%lld: A (unset) %.2f us  B (%s=1) %.2f us  A/B speedup of A %.3f\n", ti->name,
               (long long)K, (long long)N, (long long)M, tab[0][4] * 1e6, ab, tab[1][4] * 1e6, tab[1][4] / tab[0][4]);
    }
    return 0;
}
