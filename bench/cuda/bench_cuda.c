/* bench_cuda.c - `make bench-cuda` (docs/cuda.md): on the GPU it is run on,
 *   - the device's memory bandwidth (a device-to-device copy, bytes read + written; and a
 *     read-only kernel);
 *   - decode at B = 1 on an 8B-shaped Q4_0 model (Llama-3-8B shapes, Q6_K head, random
 *     weights): device time per step, weight bytes read per step / that time, as a share
 *     of the copy bandwidth;
 *   - batched decode at B = 1..32, exact family vs fast family;
 *   - one sequence, n rows in one forward: verify blocks (n = 2..9, the cost of a
 *     speculative step against a decode step) and prompt-cache suffixes (16..64 rows),
 *     exact vs fast family;
 *   - prefill pp512 / pp2048, exact int8 tensor-core GEMM vs fast family (cuBLAS fp16);
 *   - CPU == GPU differing logits bytes on a 1B-shaped Q4_K_M-style and the 8B-shaped
 *     model over random prompts in random batch mixes.
 *   - the pin tax (issue 29 item 3, 8B-shaped): batched decode B = 1..32 and prompt-cache
 *     suffixes of 4..64 tokens after a 512-token prefix, the auto policy vs every row pinned to
 *     the one-row warp kernel (narrow); the mixed workload (one verify block of 4 drafts + N =
 *     1, 4, 8, 16 classic decode rows), the classic rows' throughput with per-row scoping vs a
 *     process-wide exact pin (and a narrow pin); the variants' logits of rows that need parity
 *     compared byte for byte (any difference fails: exit status 2).
 * Prints a table; with --out DIR also writes DIR/bench_cuda.json (one object per line), and the
 * pin sections DIR/bench_cuda_pin.json.
 * --suites LIST (comma-separated: kernels, decode, prefill, parity, pin-batch, pin-suffix,
 * pin-mixed; pin = the three pin sections; all = everything, the default) runs only those;
 * --no-8b / --no-1b skip those models; --quick shortens everything; --decode-only runs the
 * kernel and decode benchmarks alone (= --suites kernels,decode). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_fwd.h"
#include "backend/cuda/cuda_test.h"
#include "model/model.h"
#include "parity.h"
#include "quant/quant.h"
#include "synth.h"

static FILE *g_json;
static int g_quick;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define JSON(...)                                   \
    do {                                            \
        if (g_json) {                               \
            fprintf(g_json, __VA_ARGS__);           \
            fputc('\n', g_json);                    \
            fflush(g_json);                         \
        }                                           \
    } while (0)

static double g_copy_gbs, g_read_gbs;

/* one sequence's rows [p0, p0 + n) at once, all with the same parity need */
static int run_rows(ls_cuda_fwd *g, ls_cuda_kv *kv, const int32_t *const *tables, int nseq, const int *seq_of_row,
                    const int32_t *tok, const int32_t *pos, int n, int need, int logits_last_only, float *logits,
                    ls_cuda_stats *st) {
    int32_t *lr = malloc(4 * (size_t)n), *sq = malloc(4 * (size_t)n);
    uint8_t *nd = malloc((size_t)n);
    int o = 0;
    for (int i = 0; i < n; i++) {
        sq[i] = seq_of_row[i];
        lr[i] = !logits_last_only || i == n - 1 ? o++ : -1;
        nd[i] = (uint8_t)need;
    }
    (void)nseq;
    ls_batch b = {.n = n, .token = tok, .pos = pos, .seq = sq, .tables = tables, .logit_row = lr, .need_parity = nd};
    ls_err err;
    int rc = ls_cuda_fwd_run(g, kv, &b, logits, &err);
    if (rc) printf("run failed: %s\n", err.msg);
    if (st) ls_cuda_fwd_stats(g, st);
    free(lr);
    free(sq);
    free(nd);
    return rc;
}

/* ---- the matmul kernels alone -------------------------------------------------------------- */
static void bench_kernels(void) {
    printf("\n== matmul kernels alone (8B-shaped matrices, copies rotated past the L2; mean of 40 launches)\n");
    static const struct { uint32_t t; int N, K; const char *what; } mats[] = {
        {LS_TYPE_Q4_0, 4096, 4096, "Q4_0 4096 x 4096 (wq, wo)"},
        {LS_TYPE_Q4_0, 6144, 4096, "Q4_0 6144 x 4096 (q|k|v)"},
        {LS_TYPE_Q4_0, 28672, 4096, "Q4_0 28672 x 4096 (gate|up)"},
        {LS_TYPE_Q4_0, 4096, 14336, "Q4_0 4096 x 14336 (down)"},
        {LS_TYPE_Q6_K, 128256, 4096, "Q6_K 128256 x 4096 (head)"},
        {LS_TYPE_Q4_K, 28672, 4096, "Q4_K 28672 x 4096"},
        {LS_TYPE_Q8_0, 4096, 4096, "Q8_0 4096 x 4096"},
    };
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        void *w = malloc(synth_bytes(mats[i].t, mats[i].N, mats[i].K));
        synth_weights(mats[i].t, 5 + i, mats[i].N, mats[i].K, 0.02f, w);
        ls_err err;
        double ms, gbs;
        for (int nw = 1; nw <= 4; nw *= 2)
            for (int pdl = 0; pdl < 2; pdl++) {
                if (ls_cuda_test_mm_bench(mats[i].t, mats[i].N, mats[i].K, w, 1, LS_CUDA_K_GEMV, nw, pdl, 40, &ms, &gbs, &err)) {
                    printf("   %s: %s\n", mats[i].what, err.msg);
                    continue;
                }
                printf("   %-30s M = 1, warp kernel, %d row(s)/warp, PDL %d: %8.2f us, %6.0f GB/s (%.1f%% of copy)\n",
                       mats[i].what, nw, pdl, ms * 1e3, gbs, 100.0 * gbs / g_copy_gbs);
                JSON("{\"bench\":\"kernel\",\"mat\":\"%s\",\"M\":1,\"kernel\":\"gemv\",\"nw\":%d,\"pdl\":%d,\"us\":%.2f,\"gbs\":%.1f}",
                     mats[i].what, nw, pdl, ms * 1e3, gbs);
            }
        if (i < 4 && !g_quick) {
            static const int Ms[] = {2, 4, 8, 16, 24, 32};
            for (int mi = 0; mi < 6; mi++)
                for (int k = 0; k < 6; k++) { /* the warp kernel with 4, 2, 1 weight rows per warp; k_mma (split K);
                                               * k_mma2 on one tile row of 64 and of 128 columns */
                    static const int nwk[] = {4, 2, 1, 0, 0, 0};
                    static const char *kn[] = {"gemv", "gemv", "gemv", "mma", "mma2s64", "mma2s128"};
                    if (k < 3 && Ms[mi] > 8) continue;
                    const int kid = k == 3 ? LS_CUDA_K_MMA : k > 3 ? LS_CUDA_K_MMA2S + k - 3 : LS_CUDA_K_GEMV;
                    if (ls_cuda_test_mm_bench(mats[i].t, mats[i].N, mats[i].K, w, Ms[mi], kid, nwk[k], 1, 20, &ms, &gbs,
                                              &err))
                        continue;
                    char what[64];
                    if (k < 3)
                        snprintf(what, sizeof what, "warp kernel, %d row(s)/warp", nwk[k]);
                    else
                        snprintf(what, sizeof what, k == 3 ? "k_mma (split K)" : "k_mma2, 1 x %d tiles (split K)",
                                 64 * (k - 3));
                    printf("   %-30s M = %2d, %s: %8.2f us, %6.0f GB/s of weights\n", mats[i].what, Ms[mi], what, ms * 1e3,
                           gbs);
                    JSON("{\"bench\":\"kernel\",\"mat\":\"%s\",\"M\":%d,\"kernel\":\"%s\",\"nw\":%d,\"us\":%.2f,\"gbs\":%.1f}",
                         mats[i].what, Ms[mi], kn[k], nwk[k], ms * 1e3, gbs);
                }
        }
        if (!g_quick) {
            static const int ks[] = {1, 3, LS_CUDA_K_MMA2 + 1, LS_CUDA_K_MMA2 + 2, LS_CUDA_K_MMA2 + 3};
            static const char *kn[] = {"", "_minb2", "_v2c1", "_v2c2", "_v2c3"};
            for (int ki = 0; ki < 5; ki++) {
                const int k = ks[ki];
                if (ls_cuda_test_mm_bench(mats[i].t, mats[i].N, mats[i].K, w, 512, k, 0, 1, 10, &ms, &gbs, &err)) {
                    printf("   %s M = 512 mma%s: %s\n", mats[i].what, kn[ki], err.msg);
                    continue;
                }
                const double tops = 2.0 * mats[i].N * (double)mats[i].K * 512 / (ms * 1e-3) / 1e12;
                printf("   %-30s M = 512, tensor-core GEMM%s: %8.2f us, %5.0f TOPS\n", mats[i].what, kn[ki], ms * 1e3, tops);
                JSON("{\"bench\":\"kernel\",\"mat\":\"%s\",\"M\":512,\"kernel\":\"mma%s\",\"us\":%.2f,\"tops\":%.1f}",
                     mats[i].what, kn[ki], ms * 1e3, tops);
            }
        }
        free(w);
    }
}

static void print_profile(ls_cuda_fwd *g, int steps) {
    const char *names[32];
    double ms[32], tot = 0;
    const int n = ls_cuda_fwd_profile(g, names, ms, 32);
    for (int i = 0; i < n; i++) tot += ms[i];
    for (int i = 0; i < n; i++)
        printf("      %-26s %9.3f ms/step  %5.1f%%\n", names[i], ms[i] / steps, 100.0 * ms[i] / tot);
    printf("      %-26s %9.3f ms/step (kernels one by one, no graph, no PDL)\n", "total", tot / steps);
}

/* ---- decode and batched decode -------------------------------------------------------- */
static void bench_decode(ls_model *m, const char *name) {
    const int V = (int)ls_model_hparams(m)->n_vocab, P = 64, STEPS = g_quick ? 32 : 128, BMAX = 32;
    const int bps = 16; /* 256 positions per sequence */
    ls_err err;
    ls_cuda_fwd *g = ls_cuda_fwd_create(m, &(ls_backend_params){.n_rows = BMAX * P > 2048 ? 2048 : BMAX * P, .n_ctx = 256}, &err);
    ls_cuda_kv *kv = g ? ls_cuda_kv_create(m, BMAX * bps, 0, &err) : NULL;
    if (!g || !kv) {
        printf("decode: %s\n", err.msg);
        return;
    }
    ls_cuda_stats st;
    ls_cuda_fwd_stats(g, &st);
    int32_t *tabs[BMAX];
    int32_t tb[BMAX][16];
    for (int s = 0; s < BMAX; s++) {
        for (int i = 0; i < bps; i++) tb[s][i] = s * bps + i;
        tabs[s] = tb[s];
    }
    float *logits = malloc((size_t)BMAX * V * 4);
    int32_t tok[2048], pos[2048];
    int sq[2048];
    uint64_t rs = 42;
    /* prefill every sequence's prompt (P tokens each), 16 sequences a call */
    for (int s0 = 0; s0 < BMAX; s0 += 16) {
        int n = 0;
        for (int s = s0; s < s0 + 16; s++)
            for (int p = 0; p < P; p++, n++) {
                tok[n] = (int32_t)(synth_next(&rs) % (uint64_t)V);
                pos[n] = p;
                sq[n] = s;
            }
        if (run_rows(g, kv, (const int32_t *const *)tabs, BMAX, sq, tok, pos, n, 1, 1, logits, NULL)) return;
    }
    /* B = 1 decode: STEPS steps from position P */
    double *gms = malloc(sizeof(double) * STEPS), *wms = malloc(sizeof(double) * STEPS);
    for (int i = 0; i < STEPS + 8; i++) {
        tok[0] = (int32_t)(synth_next(&rs) % (uint64_t)V);
        pos[0] = P + (i < 8 ? i : i - 8); /* the 8 warm-up steps run positions the timed ones run again */
        sq[0] = 0;
        if (run_rows(g, kv, (const int32_t *const *)tabs, BMAX, sq, tok, pos, 1, 1, 0, logits, &st)) return;
        if (i >= 8) {
            gms[i - 8] = st.gpu_ms;
            wms[i - 8] = st.total_ms;
        }
    }
    const double gm = median(gms, STEPS), wm = median(wms, STEPS);
    const double gbs = (double)st.step_bytes / (gm * 1e-3) / 1e9;
    printf("\n== decode B = 1, %s (positions %d..%d, exact family, CUDA graph: %s)\n", name, P, P + STEPS - 1,
           st.graph ? "yes" : "no");
    printf("   weight bytes per step %.1f MiB (GPU layout); device time %.3f ms/step -> %.0f GB/s = %.1f%% of the "
           "copy bandwidth (%.0f GB/s), %.1f%% of read-only (%.0f GB/s)\n",
           (double)st.step_bytes / 1048576.0, gm, gbs, 100.0 * gbs / g_copy_gbs, g_copy_gbs,
           100.0 * gbs / g_read_gbs, g_read_gbs);
    printf("   wall time %.3f ms/step (with logits to host memory): %.1f tok/s\n", wm, 1e3 / wm);
    JSON("{\"bench\":\"decode_b1\",\"model\":\"%s\",\"steps\":%d,\"gpu_ms\":%.4f,\"wall_ms\":%.4f,\"step_bytes\":%llu,"
         "\"gbs\":%.1f,\"copy_gbs\":%.1f,\"read_gbs\":%.1f,\"pct_copy\":%.2f,\"graph\":%d}",
         name, STEPS, gm, wm, (unsigned long long)st.step_bytes, gbs, g_copy_gbs, g_read_gbs, 100.0 * gbs / g_copy_gbs,
         st.graph);
    { /* the same steps under other options: PDL off, graphs off, the profile */
        static const struct { int pdl, graphs, profile, nw; const char *what; } alt[] = {
            {0, 1, 0, 2, "graph, no PDL"}, {1, 0, 0, 2, "PDL, no graph"}, {1, 1, 0, 1, "1 row per warp"},
            {1, 1, 0, 4, "4 rows per warp"}, {0, 0, 1, 2, "profile"}};
        for (size_t a = 0; a < sizeof alt / sizeof alt[0]; a++) {
            ls_cuda_opts o, o0;
            ls_cuda_fwd_get_opts(g, &o0);
            o = o0;
            o.pdl = alt[a].pdl;
            o.graphs = alt[a].graphs;
            o.profile = alt[a].profile;
            o.gemv_nw = alt[a].nw;
            ls_cuda_fwd_set_opts(g, &o);
            const int S2 = 16;
            double *v = malloc(sizeof(double) * S2);
            for (int i = 0; i < S2 + 4; i++) {
                tok[0] = (int32_t)(synth_next(&rs) % (uint64_t)V);
                pos[0] = P + i;
                sq[0] = 0;
                if (i == 4 && alt[a].profile) ls_cuda_fwd_set_opts(g, &o); /* the profile counts the timed steps */
                if (run_rows(g, kv, (const int32_t *const *)tabs, BMAX, sq, tok, pos, 1, 1, 0, logits, &st)) return;
                if (i >= 4) v[i - 4] = st.gpu_ms;
            }
            const double m2 = median(v, S2), g2 = (double)st.step_bytes / (m2 * 1e-3) / 1e9;
            printf("   %-16s %.3f ms/step -> %.0f GB/s = %.1f%% of copy\n", alt[a].what, m2, g2, 100.0 * g2 / g_copy_gbs);
            JSON("{\"bench\":\"decode_b1_alt\",\"model\":\"%s\",\"variant\":\"%s\",\"gpu_ms\":%.4f,\"pct_copy\":%.2f}", name,
                 alt[a].what, m2, 100.0 * g2 / g_copy_gbs);
            if (alt[a].profile) print_profile(g, S2);
            free(v);
            ls_cuda_fwd_set_opts(g, &o0);
        }
    }
    /* batched decode: B sequences one row each, exact vs fast */
    static const int Bs[] = {1, 2, 4, 8, 12, 16, 24, 32};
    printf("\n== batched decode, %s: device ms per step (tok/s), exact vs fast family\n", name);
    printf("   %4s  %18s  %18s  %18s  %6s  %18s  %18s  %18s  %18s  %18s\n", "B", "exact", "exact (GEMM B>1)", "fast",
           "fast/exact tok/s", "exact, 4 rows/warp", "exact, warp to 16", "exact, k_mma 9-32", "exact, 64-col tile",
           "exact, 128-col tile");
    const int NS = g_quick ? 8 : 24;
    for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
        const int B = Bs[bi];
        double res[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int graph[8];
        for (int fam = 0; fam < 8; fam++) {
            if (fam == 3 && (B == 1 || B > 8)) continue;
            if (fam == 4 && (B <= 8 || B > 16)) continue; /* the warp kernel in runs of 8 rows up to 16 */
            if (fam >= 5 && B <= 8) continue; /* runs the GEMM takes: k_mma (before), k_mma2's 64- and 128-column tiles */
            ls_cuda_opts o, o0;
            ls_cuda_fwd_get_opts(g, &o0);
            o = o0;
            if (fam == 1) o.gemv_max_rows = 1;
            if (fam == 3) o.gemv_nwr = 4;
            if (fam == 4) o.gemv_max_rows = 16;
            if (fam == 5) o.mma_small = 0;
            if (fam == 6) o.mma_small = 1;
            if (fam == 7) o.mma_small = 2;
            ls_cuda_fwd_set_opts(g, &o);
            double *v = malloc(sizeof(double) * NS);
            for (int i = 0; i < NS + 4; i++) {
                for (int s = 0; s < B; s++) {
                    tok[s] = (int32_t)(synth_next(&rs) % (uint64_t)V);
                    pos[s] = P + STEPS + (i < 4 ? i : i - 4); /* all at the same depth */
                    sq[s] = s;
                }
                if (run_rows(g, kv, (const int32_t *const *)tabs, BMAX, sq, tok, pos, B, fam != 2, 0, logits, &st)) return;
                if (i >= 4) v[i - 4] = st.gpu_ms;
            }
            res[fam] = median(v, NS);
            graph[fam] = st.graph;
            free(v);
            ls_cuda_fwd_set_opts(g, &o0);
        }
        const double best = res[0] < res[1] ? res[0] : res[1];
        printf("   %4d  %8.3f (%7.0f)  %8.3f (%7.0f)  %8.3f (%7.0f)  %6.2fx  %8.3f (%7.0f)  %8.3f (%7.0f)  %8.3f (%7.0f)  "
               "%8.3f (%7.0f)  %8.3f (%7.0f)%s\n",
               B, res[0], B * 1e3 / res[0], res[1], B * 1e3 / res[1], res[2], B * 1e3 / res[2], best / res[2], res[3],
               res[3] > 0 ? B * 1e3 / res[3] : 0.0, res[4], res[4] > 0 ? B * 1e3 / res[4] : 0.0, res[5],
               res[5] > 0 ? B * 1e3 / res[5] : 0.0, res[6], res[6] > 0 ? B * 1e3 / res[6] : 0.0, res[7],
               res[7] > 0 ? B * 1e3 / res[7] : 0.0,
               graph[2] ? "" : " (fast: cuBLAS, no graph)");
        JSON("{\"bench\":\"batched_decode\",\"model\":\"%s\",\"B\":%d,\"exact_ms\":%.4f,\"exact_gemm_ms\":%.4f,\"fast_ms\":%.4f,"
             "\"exact_tok_s\":%.1f,\"fast_tok_s\":%.1f,\"fast_graph\":%d,\"exact_nwr4_ms\":%.4f,\"exact_warp16_ms\":%.4f,"
             "\"exact_kmma_ms\":%.4f,\"exact_small64_ms\":%.4f,\"exact_small128_ms\":%.4f}",
             name, B, res[0], res[1], res[2], B * 1e3 / best, B * 1e3 / res[2], graph[2], res[3], res[4], res[5], res[6], res[7]);
    }
    { /* one sequence, n rows in one forward after its prompt: a verify block (n - 1 drafts and
       * the token before them, every row's logits) up to n = 9, then a prompt-cache suffix
       * (16..64 rows, the last row's logits); exact vs rows without a parity need (the fast
       * family, which takes cuBLAS only for runs of fast_min_rows = 64 or more rows) */
        static const int Ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 32, 64};
        printf("\n== one sequence, n rows in one forward, %s: device ms (vs the n = 1 step), exact vs fast family;\n"
               "   9..16 rows also with the warp kernel in runs of 8 up to 16 rows (gemv_max_rows 16)\n", name);
        printf("   %4s  %16s  %16s  %10s  %16s\n", "n", "exact", "fast", "fast/exact", "exact, warp to 16");
        const int NV = g_quick ? 8 : 24;
        double base = 0.0;
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
            const int n = Ns[ni];
            double res[3] = {0, 0, 0};
            int graph[3];
            for (int fam = 0; fam < 3; fam++) {
                if (fam == 2 && (n < 9 || n > 16)) continue;
                ls_cuda_opts o, o0;
                ls_cuda_fwd_get_opts(g, &o0);
                o = o0;
                if (fam == 2) o.gemv_max_rows = 16;
                ls_cuda_fwd_set_opts(g, &o);
                double *v = malloc(sizeof(double) * NV);
                for (int i = 0; i < NV + 4; i++) {
                    for (int r = 0; r < n; r++) {
                        tok[r] = (int32_t)(synth_next(&rs) % (uint64_t)V);
                        pos[r] = P + r; /* after sequence 1's prompt */
                        sq[r] = 1;
                    }
                    if (run_rows(g, kv, (const int32_t *const *)tabs, BMAX, sq, tok, pos, n, fam != 1, n > 9, logits, &st))
                        return;
                    if (i >= 4) v[i - 4] = st.gpu_ms;
                }
                res[fam] = median(v, NV);
                graph[fam] = st.graph;
                free(v);
                ls_cuda_fwd_set_opts(g, &o0);
            }
            if (n == 1) base = res[0];
            printf("   %4d  %7.3f (%5.2fx)  %7.3f (%5.2fx)  %9.2fx  %7.3f (%5.2fx)%s\n", n, res[0], res[0] / base, res[1],
                   res[1] / base, res[1] / res[0], res[2], res[2] / base, graph[1] ? "" : " (fast: cuBLAS, no graph)");
            JSON("{\"bench\":\"rows_one_seq\",\"model\":\"%s\",\"n\":%d,\"exact_ms\":%.4f,\"fast_ms\":%.4f,"
                 "\"exact_vs_step\":%.3f,\"fast_graph\":%d}",
                 name, n, res[0], res[1], res[0] / base, graph[1]);
        }
    }
    free(gms);
    free(wms);
    free(logits);
    ls_cuda_kv_free(kv);
    ls_cuda_fwd_free(g);
}

/* ---- prefill ---------------------------------------------------------------------------- */
static void bench_prefill(ls_model *m, const char *name) {
    const ls_hparams *hp = ls_model_hparams(m);
    const int V = (int)hp->n_vocab;
    const int NMAX = 2048;
    ls_err err;
    ls_cuda_fwd *g = ls_cuda_fwd_create(m, &(ls_backend_params){.n_rows = NMAX, .n_ctx = NMAX}, &err);
    ls_cuda_kv *kv = g ? ls_cuda_kv_create(m, NMAX / 16, 0, &err) : NULL;
    if (!g || !kv) {
        printf("prefill: %s\n", err.msg);
        return;
    }
    int32_t *tab = malloc(sizeof(int32_t) * (NMAX / 16));
    for (int i = 0; i < NMAX / 16; i++) tab[i] = i;
    const int32_t *tabs[1] = {tab};
    int32_t *tok = malloc(4 * NMAX), *pos = malloc(4 * NMAX);
    int *sq = calloc(NMAX, sizeof(int));
    uint64_t rs = 7;
    for (int i = 0; i < NMAX; i++) {
        tok[i] = (int32_t)(synth_next(&rs) % (uint64_t)V);
        pos[i] = i;
    }
    float *logits = malloc((size_t)V * 4), *ref = malloc((size_t)V * 4);
    /* matmul operations per token: 2 x (parameters of the matrices run) */
    const double E = hp->n_embd, D = hp->head_dim, F = hp->n_ff;
    const double params = hp->n_layer * (E * hp->n_head * D * 2 + E * hp->n_head_kv * D * 2 + 3 * E * F);
    printf("\n== prefill, %s: one sequence, one chunk (logits of the last row), device time\n", name);
    static const int Ns[] = {512, 2048};
    for (int ni = 0; ni < 2; ni++) {
        const int n = Ns[ni];
        double res[9];
        for (int fam = 0; fam < 9; fam++) { /* exact (default), k_mma uncapped, fast, k_mma2 1..3,
                                             * exact and fast with the per-row attention kernel (the
                                             * default before k_attn4), k_mma capped (the default before
                                             * k_mma2) */
            const int R = g_quick ? 2 : 4;
            double v[8];
            ls_cuda_stats st;
            ls_cuda_opts o, o0;
            ls_cuda_fwd_get_opts(g, &o0);
            o = o0;
            o.mma_minblocks = fam == 1 ? 1 : 2;
            o.mma_v2 = fam >= 3 && fam <= 5 ? fam - 2 : fam == 1 || fam == 8 ? 0 : o0.mma_v2;
            o.attn_mr = fam == 6 || fam == 7 ? 0 : o0.attn_mr;
            ls_cuda_fwd_set_opts(g, &o);
            for (int i = 0; i < R + 1; i++) {
                if (run_rows(g, kv, tabs, 1, sq, tok, pos, n, fam != 2 && fam != 7, 1, logits, &st)) return;
                if (i >= 1) v[i - 1] = st.gpu_ms;
            }
            res[fam] = median(v, R);
            if (fam == 0) memcpy(ref, logits, (size_t)V * 4);
            else if (fam != 2 && fam != 7) /* every exact variant: the same bits as the first */
                printf("   pp%-5d variant %d: last row's logits %s the default exact kernels'\n", n, fam,
                       memcmp(ref, logits, (size_t)V * 4) ? "DIFFER FROM" : "byte-identical to");
            if ((fam == 0 || fam == 2 || fam == 3 || fam == 6) && n == 512) {
                o.profile = 1;
                ls_cuda_fwd_set_opts(g, &o);
                if (run_rows(g, kv, tabs, 1, sq, tok, pos, n, fam != 2 && fam != 7, 1, logits, &st)) return;
                printf("   pp512 %s, profile:\n", fam == 6 ? "exact, per-row attention" : fam == 3 ? "exact k_mma2 1" : fam ? "fast" : "exact");
                print_profile(g, 1);
            }
            ls_cuda_fwd_set_opts(g, &o0);
        }
        printf("   pp%-5d exact, k_mma (before k_mma2), two blocks/SM: %8.2f ms (%7.0f tok/s); uncapped: %8.2f ms (%7.0f tok/s)\n",
               n, res[8], n * 1e3 / res[8], res[1], n * 1e3 / res[1]);
        JSON("{\"bench\":\"prefill_kmma\",\"model\":\"%s\",\"n\":%d,\"minb2_ms\":%.3f,\"minb1_ms\":%.3f}", name, n, res[8], res[1]);
        for (int c = 1; c <= 3; c++) {
            printf("   pp%-5d exact, k_mma2 configuration %d: %8.2f ms (%7.0f tok/s)\n", n, c, res[2 + c], n * 1e3 / res[2 + c]);
            JSON("{\"bench\":\"prefill_v2\",\"model\":\"%s\",\"n\":%d,\"cfg\":%d,\"ms\":%.3f}", name, n, c, res[2 + c]);
        }
        printf("   pp%-5d per-row attention: exact %8.2f ms (%7.0f tok/s)   fast %8.2f ms (%7.0f tok/s)\n", n, res[6],
               n * 1e3 / res[6], res[7], n * 1e3 / res[7]);
        JSON("{\"bench\":\"prefill_attn_row\",\"model\":\"%s\",\"n\":%d,\"exact_ms\":%.3f,\"fast_ms\":%.3f}", name, n, res[6], res[7]);
        res[1] = res[2];
        const double tops_e = 2.0 * params * n / (res[0] * 1e-3) / 1e12, tops_f = 2.0 * params * n / (res[1] * 1e-3) / 1e12;
        printf("   pp%-5d exact %8.2f ms (%7.0f tok/s, %5.0f TOPS)   fast %8.2f ms (%7.0f tok/s, %5.0f TFLOPS)   "
               "exact/fast time %.2fx\n",
               n, res[0], n * 1e3 / res[0], tops_e, res[1], n * 1e3 / res[1], tops_f, res[0] / res[1]);
        JSON("{\"bench\":\"prefill\",\"model\":\"%s\",\"n\":%d,\"exact_ms\":%.3f,\"fast_ms\":%.3f,\"exact_tok_s\":%.1f,"
             "\"fast_tok_s\":%.1f,\"exact_tops\":%.1f,\"fast_tflops\":%.1f}",
             name, n, res[0], res[1], n * 1e3 / res[0], n * 1e3 / res[1], tops_e, tops_f);
    }
    free(tab);
    free(tok);
    free(pos);
    free(sq);
    free(ref);
    free(logits);
    ls_cuda_kv_free(kv);
    ls_cuda_fwd_free(g);
}

/* ---- parity ------------------------------------------------------------------------------- */
static void bench_parity(ls_model *m, const char *name, int nseq, int min_len, int max_len, uint64_t seed) {
    parity_refs r;
    ls_err err;
    const double t0 = now_s();
    if (!parity_refs_make(&r, m, nseq, 256, min_len, max_len, 16, seed, &err)) {
        printf("parity %s: %s\n", name, err.msg);
        return;
    }
    const double t1 = now_s();
    ls_cuda_fwd *g = ls_cuda_fwd_create(m, &(ls_backend_params){.n_rows = 160, .n_ctx = 256}, &err);
    ls_cuda_kv *kv = g ? ls_cuda_kv_create(m, nseq * 16, 0, &err) : NULL;
    if (!g || !kv) {
        printf("parity %s: %s\n", name, err.msg);
        parity_refs_free(&r);
        return;
    }
    size_t positions = 0;
    for (int q = 0; q < nseq; q++) positions += (size_t)r.len[q];
    printf("\n== CPU == GPU, %s: %d random prompts (%zu positions), CPU references %.1f s\n", name, nseq, positions, t1 - t0);
    for (int pass = 0; pass < 3; pass++) {
        size_t cmp, rows;
        double fe = 0;
        const double frac = pass == 2 ? 0.4 : 0.0;
        ls_cuda_stats s0, s1;
        ls_cuda_fwd_stats(g, &s0);
        /* pass 2: the fast sequences' rows side by side in runs of 64..96 (fast_min_rows: cuBLAS
         * serves them), exact rows of the others in the same forwards */
        const size_t d = pass == 2 ? parity_run_mix_runs(&r, g, kv, seed + 11 * (uint64_t)pass, frac, 64, 128, &cmp, &rows, &fe)
                                   : parity_run_mix(&r, g, kv, seed + 11 * (uint64_t)pass, frac, pass == 1 ? 8 : 32, &cmp,
                                                    &rows, &fe);
        ls_cuda_fwd_stats(g, &s1);
        const unsigned long long blas_rows = (unsigned long long)(s1.rows_cublas - s0.rows_cublas);
        printf("   pass %d: %zu rows in random batch mixes (B = 1..%d%s): %zu differing bytes of %zu\n", pass, rows,
               pass == 1 ? 8 : pass == 2 ? 128 : 32,
               frac > 0 ? ", 40% of the sequences on the fast family in runs of 64..96 rows, not compared" : "", d, cmp);
        if (frac > 0)
            printf("           fast rows: %llu of %llu through cuBLAS; relative L2 error vs the CPU: %.2e\n", blas_rows,
                   (unsigned long long)(s1.rows_fast - s0.rows_fast), fe);
        JSON("{\"bench\":\"parity\",\"model\":\"%s\",\"pass\":%d,\"rows\":%zu,\"bytes_compared\":%zu,\"bytes_differing\":%zu,"
             "\"fast_frac\":%.2f,\"fast_rel_err\":%.3e,\"rows_cublas\":%llu}",
             name, pass, rows, cmp, d, frac, fe, blas_rows);
    }
    ls_cuda_kv_free(kv);
    ls_cuda_fwd_free(g);
    parity_refs_free(&r);
}

/* ---- the pin tax (issue 29 item 3): the seed's Step 1 on the GPU ---------------------------
 * Every figure is a pair (or a triple) of variants that run the same rows (same tokens, same
 * positions, same K/V before the step), interleaved step by step (the order rotates), each on a
 * forward of its own (its own CUDA graphs: switching options on one forward would drop them):
 *   auto    the default policy: an exact run of up to gemv_max_rows (8) rows takes the multi-row
 *           warp kernel (each weight block loaded once for all rows), longer runs the int8
 *           tensor-core GEMM; rows without a parity need may take the fast family (cuBLAS fp16
 *           for runs of at least fast_min_rows = 64 rows, the exact kernels below that);
 *   narrow  ls_cuda_opts.narrow: every row through the one-row warp kernel, one launch per row and
 *           matrix: what a process that pinned the single-row (batch-invariant) kernel runs;
 *   exact   (mixed workload) every row needs parity: a process-wide exact pin.
 * Device time per step (CUDA events from the input upload to the last kernel), medians over the
 * timed steps after warm-up steps (which also capture each variant's CUDA graphs).  The logits of
 * every row that needs parity are compared byte for byte between the variants of each step. */
static FILE *g_json_pin;
#define JSONP(...)                                  \
    do {                                            \
        if (g_json_pin) {                           \
            fprintf(g_json_pin, __VA_ARGS__);       \
            fputc('\n', g_json_pin);                \
            fflush(g_json_pin);                     \
        }                                           \
    } while (0)

typedef struct {
    ls_cuda_fwd *g;
    const uint8_t *need; /* per row */
} pin_var;

typedef struct {
    ls_cuda_kv *kv;
    const int32_t *const *tabs;
    int V;
    uint64_t rs;
    float *lg[3];          /* logits per variant, PIN_MAXROWS rows each */
    size_t cmp_rows, cmp_bytes, diff_bytes;   /* rows that need parity, over every section */
    size_t other_rows, other_diff;            /* rows without a parity need in some variant (not required) */
} pin_env;

#define PIN_MAXROWS 64

static size_t bytes_differ(const void *a, const void *b, size_t n) {
    if (!memcmp(a, b, n)) return 0;
    const unsigned char *x = a, *y = b;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    return d;
}

/* Runs n rows (seq, pos0 + the step's offset, logit_row lr with n_out logits rows) through the nv
 * variants, W warm-up steps and S timed ones, tokens drawn per step and shared by the variants;
 * med / wmed: median device / wall ms per variant.  cmp[o]: logits row o needs parity (compared
 * between variant 0 and the others: diff must stay 0); other rows are compared too and counted
 * apart.  advance: the positions move one per step (decode); else every step reruns pos0. */
static int pin_time(pin_env *e, const pin_var *var, int nv, int n, const int32_t *seq, const int32_t *pos0,
                    int advance, const int32_t *lr, int n_out, const uint8_t *cmp, int W, int S, double *med,
                    double *wmed) {
    int32_t tok[PIN_MAXROWS], pos[PIN_MAXROWS];
    double *v = malloc(sizeof(double) * (size_t)nv * S), *w = malloc(sizeof(double) * (size_t)nv * S);
    int rc = 0;
    const size_t rowb = (size_t)e->V * 4;
    for (int i = 0; i < W + S && !rc; i++) {
        const int off = advance ? (i < W ? i : i - W) : 0; /* the timed steps rerun the warm-up positions */
        for (int r = 0; r < n; r++) {
            tok[r] = (int32_t)(synth_next(&e->rs) % (uint64_t)e->V);
            pos[r] = pos0[r] + off;
        }
        for (int j = 0; j < nv && !rc; j++) {
            const int k = (i + j) % nv; /* interleaved: the order rotates step by step */
            ls_batch b = {.n = n, .token = tok, .pos = pos, .seq = seq, .tables = e->tabs, .logit_row = lr,
                          .need_parity = var[k].need};
            ls_err err;
            if (ls_cuda_fwd_run(var[k].g, e->kv, &b, e->lg[k], &err)) {
                printf("   run failed: %s\n", err.msg);
                rc = 1;
                break;
            }
            ls_cuda_stats st;
            ls_cuda_fwd_stats(var[k].g, &st);
            if (i >= W) {
                v[(size_t)k * S + (i - W)] = st.gpu_ms;
                w[(size_t)k * S + (i - W)] = st.total_ms;
            }
        }
        for (int k = 1; k < nv && !rc; k++)
            for (int o = 0; o < n_out; o++) {
                const size_t d = bytes_differ(e->lg[0] + (size_t)o * e->V, e->lg[k] + (size_t)o * e->V, rowb);
                if (cmp[o]) {
                    e->cmp_rows++;
                    e->cmp_bytes += rowb;
                    e->diff_bytes += d;
                } else {
                    e->other_rows++;
                    e->other_diff += d;
                }
            }
    }
    if (!rc)
        for (int k = 0; k < nv; k++) {
            med[k] = median(v + (size_t)k * S, S);
            wmed[k] = median(w + (size_t)k * S, S);
        }
    free(v);
    free(w);
    return rc;
}

static void pin_parity_line(const pin_env *e, size_t rows0, size_t diff0) {
    printf("   parity, auto vs pinned: %zu logits rows that need parity compared: %zu bytes differ%s\n", e->cmp_rows - rows0,
           e->diff_bytes - diff0, e->diff_bytes - diff0 ? "  FAIL" : "");
}

enum { S_KERNELS = 1, S_DECODE = 2, S_PREFILL = 4, S_PARITY = 8, S_PIN_BATCH = 16, S_PIN_SUFFIX = 32, S_PIN_MIXED = 64 };
#define S_PIN (S_PIN_BATCH | S_PIN_SUFFIX | S_PIN_MIXED)

/* returns 0, 1 on a failed run, 2 when a row that needs parity differed between variants */
static int bench_pin(ls_model *m, const char *name, unsigned suites) {
    const int V = (int)ls_model_hparams(m)->n_vocab, P = 64, BMAX = 32, PREFIX = 512, LONG = BMAX;
    const int W = g_quick ? 2 : 3, S = g_quick ? 6 : 15;
    const double t0 = now_s();
    ls_err err;
    ls_cuda_fwd *ga = ls_cuda_fwd_create(m, &(ls_backend_params){.n_rows = 1024, .n_ctx = 1024}, &err);
    ls_cuda_fwd *gn = ga ? ls_cuda_fwd_create(m, &(ls_backend_params){.n_rows = PIN_MAXROWS, .n_ctx = 1024}, &err) : NULL;
    /* sequences 0..31: 16 blocks each (256 positions); sequence 32: the cached prefix, 40 blocks */
    ls_cuda_kv *kv = gn ? ls_cuda_kv_create(m, BMAX * 16 + 40, 0, &err) : NULL;
    if (!kv) {
        printf("pin: %s\n", err.msg);
        if (gn) ls_cuda_fwd_free(gn);
        if (ga) ls_cuda_fwd_free(ga);
        return 1;
    }
    {
        ls_cuda_opts o;
        ls_cuda_fwd_get_opts(gn, &o);
        o.narrow = 1;
        ls_cuda_fwd_set_opts(gn, &o);
    }
    static int32_t tb[33][40];
    const int32_t *tabs[33];
    for (int s = 0; s < BMAX; s++) {
        for (int i = 0; i < 16; i++) tb[s][i] = s * 16 + i;
        tabs[s] = tb[s];
    }
    for (int i = 0; i < 40; i++) tb[LONG][i] = BMAX * 16 + i;
    tabs[LONG] = tb[LONG];
    pin_env e = {.kv = kv, .tabs = tabs, .V = V, .rs = 4242};
    for (int k = 0; k < 3; k++) e.lg[k] = malloc((size_t)PIN_MAXROWS * V * 4);
    int rc = 0;
    { /* the prompts: 64 tokens for each of sequences 0..31 (16 a call), the 512-token prefix of 32 */
        const int NR = 1024;
        int32_t *tok = malloc(4 * NR), *pos = malloc(4 * NR), *sq = malloc(4 * NR), *lr = malloc(4 * NR);
        for (int c = 0; c < 3 && !rc; c++) {
            const int n = c < 2 ? 16 * P : PREFIX;
            for (int r = 0; r < n; r++) {
                tok[r] = (int32_t)(synth_next(&e.rs) % (uint64_t)V);
                sq[r] = c < 2 ? c * 16 + r / P : LONG;
                pos[r] = c < 2 ? r % P : r;
                lr[r] = r == n - 1 ? 0 : -1;
            }
            ls_batch b = {.n = n, .token = tok, .pos = pos, .seq = sq, .tables = tabs, .logit_row = lr, .need_parity = NULL};
            if (ls_cuda_fwd_run(ga, kv, &b, e.lg[0], &err)) {
                printf("pin: prompts: %s\n", err.msg);
                rc = 1;
            }
        }
        free(tok);
        free(pos);
        free(sq);
        free(lr);
    }
    printf("\n== the pin tax on the GPU, %s (issue 29 item 3; prompts written in %.1f s)\n", name, now_s() - t0);
    printf("   auto: the default policy (exact runs of <= 12 rows: the multi-row warp kernel; longer: the int8\n"
           "   tensor-core GEMM). narrow: every row through the one-row warp kernel, a launch per row and matrix\n"
           "   (a process that pinned the single-row kernel). Device ms per step, median of %d timed steps after %d\n"
           "   warm-up steps, variants interleaved step by step.\n", S, W);
    uint8_t need1[PIN_MAXROWS], cmp1[PIN_MAXROWS];
    memset(need1, 1, sizeof need1);
    memset(cmp1, 1, sizeof cmp1);
    int32_t seq[PIN_MAXROWS], pos0[PIN_MAXROWS], lr[PIN_MAXROWS];
    if (!rc && (suites & S_PIN_BATCH)) {
        const size_t rows0 = e.cmp_rows, diff0 = e.diff_bytes;
        static const int Bs[] = {1, 2, 4, 8, 16, 32};
        const pin_var var[2] = {{ga, need1}, {gn, need1}};
        printf("\n-- batched decode: B sequences, one row each, every row's logits (positions %d..)\n", P);
        printf("   %4s  %-12s  %18s  %18s  %9s\n", "B", "auto kernel", "auto ms (tok/s)", "narrow ms (tok/s)", "pin tax");
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0] && !rc; bi++) {
            const int B = Bs[bi];
            for (int s = 0; s < B; s++) {
                seq[s] = s;
                pos0[s] = P;
                lr[s] = s;
            }
            double med[2], wmed[2];
            if ((rc = pin_time(&e, var, 2, B, seq, pos0, 1, lr, B, cmp1, W, S, med, wmed))) break;
            const char *kern = B == 1 ? "warp, 1 row" : B <= 8 ? "warp, B rows" : "int8 GEMM";
            printf("   %4d  %-12s  %7.3f (%8.1f)  %7.3f (%8.1f)  %8.2fx\n", B, kern, med[0], B * 1e3 / med[0], med[1],
                   B * 1e3 / med[1], med[1] / med[0]);
            JSONP("{\"bench\":\"pin_batch\",\"model\":\"%s\",\"B\":%d,\"auto_kernel\":\"%s\",\"steps\":%d,\"auto_ms\":%.4f,"
                  "\"narrow_ms\":%.4f,\"auto_tok_s\":%.1f,\"narrow_tok_s\":%.1f,\"auto_wall_ms\":%.4f,\"narrow_wall_ms\":%.4f,"
                  "\"pin_tax\":%.3f}",
                  name, B, kern, S, med[0], med[1], B * 1e3 / med[0], B * 1e3 / med[1], wmed[0], wmed[1], med[1] / med[0]);
        }
        if (!rc) pin_parity_line(&e, rows0, diff0);
    }
    if (!rc && (suites & S_PIN_SUFFIX)) {
        const size_t rows0 = e.cmp_rows, diff0 = e.diff_bytes;
        static const int Ns[] = {4, 8, 16, 32, 64};
        const pin_var var[2] = {{ga, need1}, {gn, need1}};
        printf("\n-- prompt-cache suffix: n new tokens after a cached %d-token prefix, one forward, the last row's logits\n",
               PREFIX);
        printf("   %4s  %-12s  %18s  %18s  %9s\n", "n", "auto kernel", "auto ms (tok/s)", "narrow ms (tok/s)", "pin tax");
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0] && !rc; ni++) {
            const int n = Ns[ni];
            for (int r = 0; r < n; r++) {
                seq[r] = LONG;
                pos0[r] = PREFIX + r;
                lr[r] = r == n - 1 ? 0 : -1;
            }
            double med[2], wmed[2];
            if ((rc = pin_time(&e, var, 2, n, seq, pos0, 0, lr, 1, cmp1, W, S, med, wmed))) break;
            const char *kern = n <= 8 ? "warp, n rows" : "int8 GEMM";
            printf("   %4d  %-12s  %7.3f (%8.1f)  %7.3f (%8.1f)  %8.2fx\n", n, kern, med[0], n * 1e3 / med[0], med[1],
                   n * 1e3 / med[1], med[1] / med[0]);
            JSONP("{\"bench\":\"pin_suffix\",\"model\":\"%s\",\"prefix\":%d,\"n\":%d,\"auto_kernel\":\"%s\",\"steps\":%d,"
                  "\"auto_ms\":%.4f,\"narrow_ms\":%.4f,\"auto_tok_s\":%.1f,\"narrow_tok_s\":%.1f,\"auto_wall_ms\":%.4f,"
                  "\"narrow_wall_ms\":%.4f,\"pin_tax\":%.3f}",
                  name, PREFIX, n, kern, S, med[0], med[1], n * 1e3 / med[0], n * 1e3 / med[1], wmed[0], wmed[1],
                  med[1] / med[0]);
        }
        if (!rc) pin_parity_line(&e, rows0, diff0);
    }
    if (!rc && (suites & S_PIN_MIXED)) {
        const size_t rows0 = e.cmp_rows, diff0 = e.diff_bytes;
        static const int Ns[] = {1, 4, 8, 16};
        const int K = 4; /* drafts in the verify block: rows [last, d1..d4] */
        ls_cuda_stats s0, s1;
        ls_cuda_fwd_stats(ga, &s0);
        printf("\n-- mixed: one speculative sequence's verify block (%d drafts, %d rows, every row's logits) + N classic\n"
               "   decode rows in one forward. scoped: only the verify block needs parity, the classic rows run the\n"
               "   auto/fast choice; exact pin: every row needs parity (process-wide); narrow pin: every row needs\n"
               "   parity and runs the one-row kernel. Classic tok/s = N / step time.\n", K, K + 1);
        printf("   On the GPU the fast family differs from the exact one only in runs of >= fast_min_rows = 64 rows\n"
               "   (cuBLAS); a shorter fast run joins its exact neighbours (it would run the exact kernels anyway),\n"
               "   so here (N <= 16) scoped and exact pin run the same one run of 5 + N rows: a ratio near 1.0 is\n"
               "   the real result, not a missing fast path.\n");
        printf("   %4s  %-26s  %21s  %21s  %21s  %12s  %13s\n", "N", "kernels: scoped | pin", "scoped ms (classic/s)",
               "exact pin ms (cl./s)", "narrow pin ms (cl./s)", "exact/scoped", "narrow/scoped");
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0] && !rc; ni++) {
            const int N = Ns[ni], n = K + 1 + N;
            uint8_t need_s[PIN_MAXROWS], cmp_s[PIN_MAXROWS];
            for (int r = 0; r < n; r++) {
                const int spec = r <= K;
                seq[r] = spec ? 0 : r - K; /* the speculative sequence 0, classic ones 1..N */
                pos0[r] = spec ? P + r : P;
                lr[r] = r;
                need_s[r] = (uint8_t)spec;
                cmp_s[r] = (uint8_t)spec;
            }
            const pin_var var[3] = {{ga, need_s}, {ga, need1}, {gn, need1}};
            double med[3], wmed[3];
            if ((rc = pin_time(&e, var, 3, n, seq, pos0, 1, lr, n, cmp_s, W, S, med, wmed))) break;
            char kern[64]; /* the auto policy's kernels: one run of n rows either way (the classic rows' fast
                            * run is under fast_min_rows, so it joins the verify block's) */
            snprintf(kern, sizeof kern, "%s %d | %s %d", n <= 8 ? "warp" : "GEMM", n, n <= 8 ? "warp" : "GEMM", n);
            printf("   %4d  %-26s  %8.3f (%10.1f)  %8.3f (%10.1f)  %8.3f (%10.1f)  %11.3fx  %12.3fx\n", N, kern, med[0],
                   N * 1e3 / med[0], med[1], N * 1e3 / med[1], med[2], N * 1e3 / med[2], med[1] / med[0], med[2] / med[0]);
            JSONP("{\"bench\":\"pin_mixed\",\"model\":\"%s\",\"drafts\":%d,\"N\":%d,\"kernels\":\"%s\",\"steps\":%d,\"scoped_ms\":%.4f,"
                  "\"exact_pin_ms\":%.4f,\"narrow_pin_ms\":%.4f,\"scoped_classic_tok_s\":%.1f,\"exact_pin_classic_tok_s\":%.1f,"
                  "\"narrow_pin_classic_tok_s\":%.1f,\"scoped_wall_ms\":%.4f,\"exact_pin_wall_ms\":%.4f,"
                  "\"narrow_pin_wall_ms\":%.4f,\"exact_pin_tax\":%.3f,\"narrow_pin_tax\":%.3f}",
                  name, K, N, kern, S, med[0], med[1], med[2], N * 1e3 / med[0], N * 1e3 / med[1], N * 1e3 / med[2], wmed[0],
                  wmed[1], wmed[2], med[1] / med[0], med[2] / med[0]);
        }
        ls_cuda_fwd_stats(ga, &s1);
        printf("   rows through cuBLAS in these steps: %llu%s\n", (unsigned long long)(s1.rows_cublas - s0.rows_cublas),
               s1.rows_cublas == s0.rows_cublas ? " (the classic rows' fast family ran the exact kernels)" : "");
        JSONP("{\"bench\":\"pin_mixed_cublas\",\"model\":\"%s\",\"rows_cublas\":%llu}", name,
              (unsigned long long)(s1.rows_cublas - s0.rows_cublas));
        if (!rc) pin_parity_line(&e, rows0, diff0);
    }
    if (!rc) {
        printf("\n   parity between the variants: %zu logits rows that need parity, %zu bytes compared: %zu bytes differ%s\n",
               e.cmp_rows, e.cmp_bytes, e.diff_bytes, e.diff_bytes ? "  FAIL" : "");
        if (e.other_rows)
            printf("   (the classic rows, without a parity need in the scoped variant, compared too, not required to "
                   "match: %zu rows, %zu bytes differ)\n", e.other_rows, e.other_diff);
        JSONP("{\"bench\":\"pin_parity\",\"model\":\"%s\",\"rows\":%zu,\"bytes_compared\":%zu,\"bytes_differing\":%zu,"
              "\"other_rows\":%zu,\"other_bytes_differing\":%zu}",
              name, e.cmp_rows, e.cmp_bytes, e.diff_bytes, e.other_rows, e.other_diff);
        if (e.diff_bytes) rc = 2;
    }
    printf("   pin sections: %.1f s\n", now_s() - t0);
    for (int k = 0; k < 3; k++) free(e.lg[k]);
    ls_cuda_kv_free(kv);
    ls_cuda_fwd_free(gn);
    ls_cuda_fwd_free(ga);
    return rc;
}

/* --probe: a few kernel launches for a profiler (ncu) to read */
static int probe(void) {
    const int N = 4096, K = 14336;
    void *w = malloc(synth_bytes(LS_TYPE_Q4_0, N, K));
    synth_weights(LS_TYPE_Q4_0, 3, N, K, 0.02f, w);
    ls_err err;
    double ms, gbs;
    int rc = 0;
    rc |= ls_cuda_test_mm_bench(LS_TYPE_Q4_0, N, K, w, 1, LS_CUDA_K_GEMV, 1, 0, 2, &ms, &gbs, &err);
    printf("probe gemv M=1: %.2f us\n", ms * 1e3);
    rc |= ls_cuda_test_mm_bench(LS_TYPE_Q4_0, N, K, w, 16, LS_CUDA_K_MMA, 0, 0, 2, &ms, &gbs, &err);
    printf("probe mma M=16: %.2f us\n", ms * 1e3);
    rc |= ls_cuda_test_mm_bench(LS_TYPE_Q4_0, N, K, w, 512, 3, 0, 0, 2, &ms, &gbs, &err);
    printf("probe mma M=512: %.2f us\n", ms * 1e3);
    for (int c = 1; c <= 3; c++) {
        rc |= ls_cuda_test_mm_bench(LS_TYPE_Q4_0, N, K, w, 512, LS_CUDA_K_MMA2 + c, 0, 0, 2, &ms, &gbs, &err);
        printf("probe mma2 configuration %d M=512: %.2f us\n", c, ms * 1e3);
    }
    free(w);
    return rc;
}

static unsigned parse_suites(const char *list) {
    static const struct { const char *name; unsigned bits; } names[] = {
        {"kernels", S_KERNELS}, {"decode", S_DECODE}, {"prefill", S_PREFILL}, {"parity", S_PARITY},
        {"pin-batch", S_PIN_BATCH}, {"pin-suffix", S_PIN_SUFFIX}, {"pin-mixed", S_PIN_MIXED}, {"pin", S_PIN},
        {"all", S_KERNELS | S_DECODE | S_PREFILL | S_PARITY | S_PIN}};
    unsigned bits = 0;
    const char *p = list;
    while (*p) {
        const size_t n = strcspn(p, ",");
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && (strlen(names[i].name) != n || strncmp(names[i].name, p, n))) i++;
        if (i == sizeof names / sizeof names[0]) {
            printf("bench_cuda: unknown suite '%.*s' (kernels, decode, prefill, parity, pin-batch, pin-suffix, pin-mixed, "
                   "pin, all)\n", (int)n, p);
            return 0;
        }
        bits |= names[i].bits;
        p += n;
        if (*p == ',') p++;
    }
    return bits;
}

int main(int argc, char **argv) {
    const char *out = NULL;
    int no8 = 0, no1 = 0;
    unsigned suites = S_KERNELS | S_DECODE | S_PREFILL | S_PARITY | S_PIN;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--probe")) return probe();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--quick")) g_quick = 1;
        else if (!strcmp(argv[i], "--no-8b")) no8 = 1;
        else if (!strcmp(argv[i], "--no-1b")) no1 = 1;
        else if (!strcmp(argv[i], "--decode-only")) suites = S_KERNELS | S_DECODE;
        else if (!strcmp(argv[i], "--suites") && i + 1 < argc) {
            if (!(suites = parse_suites(argv[++i]))) return 2;
        } else {
            printf("bench_cuda: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (getenv("LS_BENCH_NO_KERNELS")) suites &= ~(unsigned)S_KERNELS;
    if (out) {
        char path[1024];
        if (suites & (S_KERNELS | S_DECODE | S_PREFILL | S_PARITY)) {
            snprintf(path, sizeof path, "%s/bench_cuda.json", out);
            g_json = fopen(path, "w");
        }
        if (suites & S_PIN) {
            snprintf(path, sizeof path, "%s/bench_cuda_pin.json", out);
            g_json_pin = fopen(path, "w");
        }
    }
    char name[256];
    ls_err err;
    if (!ls_cuda_available(name, sizeof name, &err)) {
        printf("bench_cuda: %s\n", err.msg);
        return 77;
    }
    if (ls_cuda_test_bandwidth((size_t)4 << 30, 9, &g_copy_gbs, &g_read_gbs, &err)) {
        printf("bandwidth: %s\n", err.msg);
        return 1;
    }
    printf("gpu: %s\ncopy bandwidth (4 GiB device-to-device, read + written bytes, median of 9): %.0f GB/s; "
           "read-only kernel: %.0f GB/s\n", name, g_copy_gbs, g_read_gbs);
    JSON("{\"bench\":\"bandwidth\",\"gpu\":\"%s\",\"copy_gbs\":%.1f,\"read_gbs\":%.1f}", name, g_copy_gbs, g_read_gbs);
    JSONP("{\"bench\":\"gpu\",\"gpu\":\"%s\",\"copy_gbs\":%.1f,\"quick\":%d}", name, g_copy_gbs, g_quick);
    if (suites & S_KERNELS) bench_kernels();

    /* name, vocab, embd, layers, heads, kv heads, ff, ctx; q k v o gate up down; embd; out; rope base */
    const synth_cfg c1 = {"1B-shaped Q4_K_M-style (Llama-3.2-1B shapes, tied Q6_K)", 128256, 2048, 16, 32, 8, 8192, 8192,
                          12, 12, 14, 12, 12, 12, 14, 14, -1, 500000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f};
    const synth_cfg c8 = {"8B-shaped Q4_0 (Llama-3-8B shapes, Q6_K head)", 128256, 4096, 32, 32, 8, 14336, 8192,
                          2, 2, 2, 2, 2, 2, 2, 2, 14, 500000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && no1) || (k == 1 && no8)) continue;
        /* the 1B-shaped model: decode (not with --quick) and parity; the 8B-shaped one: everything */
        const int dec = (suites & S_DECODE) && (k == 1 || !g_quick), pre = k == 1 && (suites & S_PREFILL) && !g_quick,
                  par = (suites & S_PARITY) != 0, pin = k == 1 && (suites & S_PIN);
        if (!dec && !pre && !par && !pin) continue;
        const synth_cfg *c = k == 0 ? &c1 : &c8;
        const double t0 = now_s();
        void *buf = NULL;
        ls_model *m = synth_model(c, 2024 + (uint64_t)k, &buf, &err);
        if (!m) {
            printf("model %s: %s\n", c->name, err.msg);
            rc = 1;
            continue;
        }
        printf("\nmodel %s: %.2f GiB of weights (ggml), built and loaded in %.1f s\n", c->name,
               (double)ls_model_weight_bytes(m) / 1073741824.0, now_s() - t0);
        if (dec) bench_decode(m, c->name);
        if (pin) {
            const int r = bench_pin(m, c->name, suites);
            if (r > rc) rc = r;
        }
        if (pre) bench_prefill(m, c->name);
        if (par) bench_parity(m, c->name, k == 0 ? 16 : 6, k == 0 ? 16 : 12, k == 0 ? 64 : 40, 99 + (uint64_t)k);
        ls_model_free(m);
        free(buf);
    }
    if (g_json) fclose(g_json);
    if (g_json_pin) fclose(g_json_pin);
    return rc;
}
