/* vnni_ports.c - how many 512-bit vector operations per nanosecond this CPU issues: vpdpbusd
 * alone, vfmadd alone, and the two interleaved.  The multi-row matmul's cost per unit and
 * row is 8 vpdpbusd plus the recipe's float steps (bench/results/HISTORY.md, "what bounds B = 8");
 * when the interleaved rate equals either alone, the two kinds share the same ports and a
 * float step costs as much as a vpdpbusd.
 *
 *   cc -O2 -mavx512f -mavx512vnni bench/vnni_ports.c -o build/vnni_ports && build/vnni_ports
 *
 * One thread; 16 independent chains of each kind (more than latency x ports), 2e8
 * iterations each, best of 3. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
    const long n = 200000000;
    __m512i a[16];
    __m512 f[16];
    const __m512i y = _mm512_set1_epi32(0x01010101);
    const __m512 b = _mm512_set1_ps(0.9999f);
    for (int i = 0; i < 16; i++) {
        a[i] = _mm512_set1_epi32(i);
        f[i] = _mm512_set1_ps((float)i);
    }
    double best[3] = {0, 0, 0};
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) a[i] = _mm512_dpbusd_epi32(a[i], y, y);
            __asm__ volatile("" ::"v"(a[0]), "v"(a[7]));
        }
        double t1 = now();
        for (long k = 0; k < n; k++) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) f[i] = _mm512_fmadd_ps(f[i], b, b);
            __asm__ volatile("" ::"v"(f[0]), "v"(f[7]));
        }
        double t2 = now();
        for (long k = 0; k < n; k++) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                a[i] = _mm512_dpbusd_epi32(a[i], y, y);
                f[i] = _mm512_fmadd_ps(f[i], b, b);
            }
            __asm__ volatile("" ::"v"(a[0]), "v"(f[0]));
        }
        double t3 = now();
        double r[3] = {16.0 * n / (t1 - t0) / 1e9, 16.0 * n / (t2 - t1) / 1e9, 16.0 * n / (t3 - t2) / 1e9};
        for (int i = 0; i < 3; i++) best[i] = r[i] > best[i] ? r[i] : best[i];
    }
    long sink = 0;
    for (int i = 0; i < 16; i++) sink += _mm512_reduce_add_epi32(a[i]) + (long)_mm512_reduce_add_ps(f[i]);
    printf("vpdpbusd alone:           %.2f per ns\n", best[0]);
    printf("vfmadd alone:             %.2f per ns\n", best[1]);
    printf("both, interleaved 1:1:    %.2f per ns (sum of both kinds)\n", best[2]);
    printf("(checksum %ld)\n", sink);
    return 0;
}
