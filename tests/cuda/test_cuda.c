/* test_cuda.c - GPU parity: every comparison is memcmp against the CPU, printing the
 * number of differing bytes; exits non-zero if any exact comparison differs.
 *
 *  1. activation quantization: q, dx, sx of the GPU == ls_quantize_x_row (zero, tiny,
 *     denormal, large blocks);
 *  2. matmul, every weight type the CPU supports, several shapes (K with a partial group:
 *     576, 1280), M = 1..100, both exact kernels (warp-per-output, int8 tensor-core GEMM)
 *     == ls_matmul; the fast family's relative error is printed, not compared;
 *  3. whole forwards of synthetic models (type mixes of real files: Q4_1 + tied Q8_0 head,
 *     Q4_0 + Q6_K head, Q4_K_M-style, Q8_0 + F16 head, MXFP4/Q5_x, F32, F16/BF16): the
 *     logits of every position of every sequence, computed by random batch mixes (decode
 *     rows of up to 32 sequences, verify blocks of 2..9 rows, prefill chunks of up to 33)
 *     over shuffled paged KV, == the CPU forward of that sequence alone; under three
 *     kernel policies (default, tensor-core GEMM for every run, warp kernel for every
 *     run, no graphs); with random rows on the fast family (their rows not compared, the
 *     others must stay exact); with the fast sequences' rows side by side in runs of at
 *     least fast_min_rows beside exact rows: the exact rows compared, and the fast rows
 *     must have taken cuBLAS (stats.rows_cublas > 0, a relative error > 0 and < FAST_ERR_MAX);
 *     and a forked sequence whose partial block was copied with ls_cuda_kv_block_copy;
 *  4. the same for one synthetic file of every family (synth_families: llama with
 *     rope_freqs.weight, mistral, qwen2 with biases and with YaRN, qwen3 with q/k norms,
 *     gemma3 with GeGLU, post-norms, embedding scale and a window of 11 positions over
 *     sequences of up to 216): the GPU executes the model's plan, so every family must
 *     give the CPU's bytes;
 *  5. MTP modules (test_mtp): the trunk of a file with one as above, and the module's own
 *     forward (norms, eh_proj, its block on a one-layer store, its head) == the CPU's.
 *
 * --quick: a subset (the mutant build of `make test-cuda` runs it and must fail).
 * --attn: only the two quick models under the policy that sends every batch of 16+ rows to
 *   k_attn4 (the attention mutant of `make test-cuda` runs it and must fail). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_fwd.h"
#include "backend/cuda/cuda_test.h"
#include "kernels/cpu/internal.h"
#include "model/model.h"
#include "quant/quant.h"
#include "parity.h"
#include "synth.h"

static int g_quick, g_attn;
static size_t g_checks, g_failed;
static size_t g_bytes_cmp, g_bytes_diff;

static size_t diff_bytes(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    return d;
}

static void report(const char *what, size_t diff, size_t total) {
    g_checks++;
    g_bytes_cmp += total;
    g_bytes_diff += diff;
    if (diff) g_failed++;
    printf("%-4s %s: %zu differing bytes of %zu\n", diff ? "FAIL" : "ok", what, diff, total);
    fflush(stdout);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- 1. activation quantization ------------------------------------------------ */
static void test_quant(void) {
    const int M = 9, K = 4096, nb = K / 32;
    float *x = malloc((size_t)M * K * 4);
    uint64_t s = 11;
    for (int i = 0; i < M * K; i++) x[i] = (synth_unif(&s) * 2.0f - 1.0f) * powf(10.0f, (float)(i % 7) - 3.0f);
    for (int i = 0; i < 32; i++) {
        x[K + i] = 0.0f;                          /* row 1, unit 0: zero */
        x[K + 32 + i] = 1e-32f * (float)(i - 7);  /* unit 1: tiny (amax below 2^-100) */
        x[K + 64 + i] = 1e-39f * (float)(i + 1);  /* unit 2: denormals */
        x[K + 96 + i] = 3e38f * (i & 1 ? 1 : -1); /* unit 3: huge */
        x[K + 128 + i] = (float)(i - 16) * 0.5f;  /* unit 4: exact halves (ties to even) */
        x[K + 160 + i] = 1e-30f * (float)(i - 9); /* unit 5: small, amax just above 2^-100 */
    }
    const size_t rb = ls_xq_row_bytes(K);
    uint8_t *cpu = malloc(rb * M);
    int8_t *q = malloc((size_t)M * K), *qc = malloc((size_t)M * K);
    float *dxs = malloc((size_t)M * nb * 8), *dxc = malloc((size_t)M * nb * 8);
    ls_err err;
    if (ls_cuda_test_quant(x, M, K, q, dxs, &err)) {
        printf("FAIL quant: %s\n", err.msg);
        g_failed++;
        return;
    }
    for (int m = 0; m < M; m++) {
        ls_quantize_x_row(x + (size_t)m * K, K, cpu + rb * m);
        ls_xq r = ls_xq_row(cpu, K, m);
        for (int b = 0; b < nb; b++) {
            for (int i = 0; i < 32; i++) qc[(size_t)m * K + 32 * b + i] = r.q[ls_xq_chunk(nb, b, i / 4) + i % 4];
            dxc[((size_t)m * nb + b) * 2] = r.dx[b];
            dxc[((size_t)m * nb + b) * 2 + 1] = r.sx[b];
        }
    }
    report("quantize q (9 x 4096)", diff_bytes(q, qc, (size_t)M * K), (size_t)M * K);
    report("quantize dx, sx", diff_bytes(dxs, dxc, (size_t)M * nb * 8), (size_t)M * nb * 8);
    free(x);
    free(cpu);
    free(q);
    free(qc);
    free(dxs);
    free(dxc);
}

/* ---- 2. matmul kernels ------------------------------------------------------------- */
static void test_matmul(void) {
    static const struct { uint32_t t; const char *name; } types[] = {
        {LS_TYPE_Q4_0, "Q4_0"}, {LS_TYPE_Q4_1, "Q4_1"}, {LS_TYPE_Q5_0, "Q5_0"}, {LS_TYPE_Q5_1, "Q5_1"},
        {LS_TYPE_Q8_0, "Q8_0"}, {LS_TYPE_MXFP4, "MXFP4"}, {LS_TYPE_Q4_K, "Q4_K"}, {LS_TYPE_Q5_K, "Q5_K"},
        {LS_TYPE_Q6_K, "Q6_K"}, {LS_TYPE_F32, "F32"}, {LS_TYPE_F16, "F16"}, {LS_TYPE_BF16, "BF16"},
    };
    static const int Ms[] = {1, 2, 3, 5, 8, 9, 16, 17, 32, 33, 64, 100};
    const int nM = g_quick ? 4 : (int)(sizeof Ms / sizeof Ms[0]);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t t = types[ti].t;
        const bool kq = t == LS_TYPE_Q4_K || t == LS_TYPE_Q5_K || t == LS_TYPE_Q6_K;
        const int64_t shapes[3][2] = {{200, kq ? 1280 : 576}, {130, kq ? 768 : 1536}, {96, 4096}};
        for (int si = 0; si < (g_quick ? 1 : 3); si++) {
            const int64_t N = shapes[si][0], K = shapes[si][1];
            const int Mmax = 100;
            void *w = malloc(synth_bytes(t, N, K));
            synth_weights(t, 100 + ti * 7 + si, N, K, 1.0f / sqrtf((float)K), w);
            float *x = malloc((size_t)Mmax * K * 4), *yc = malloc((size_t)Mmax * N * 4), *yg = malloc((size_t)Mmax * N * 4);
            uint64_t s = 5 + ti;
            for (int64_t i = 0; i < Mmax * K; i++) x[i] = synth_unif(&s) * 2.0f - 1.0f;
            for (int i = 0; i < 32; i++) x[K + 32 + i] = 0.0f; /* a zero unit */
            ls_err err;
            ls_wmat *wm = ls_wmat_create(t, N, K, w, &err);
            if (wm) ls_wmat_prepare_all(wm, &err); /* every ISA this CPU has: the references below use them */
            const size_t sb = ls_matmul_scratch_bytes(Mmax, K);
            void *scratch = malloc(sb);
            ls_kctx kc;
            memset(&kc, 0, sizeof kc);
            kc.isa = LS_ISA_SCALAR;
            kc.scratch = scratch;
            kc.scratch_bytes = sb;
            ls_matmul(&kc, wm, x, Mmax, yc);
            const bool flt = t == LS_TYPE_F32 || t == LS_TYPE_F16 || t == LS_TYPE_BF16;
            static const int kernels[] = {LS_CUDA_K_GEMV, LS_CUDA_K_MMA, LS_CUDA_K_MMA2 + 1, LS_CUDA_K_MMA2 + 2,
                                          LS_CUDA_K_MMA2 + 3, LS_CUDA_K_GEMV_NWR + 1, LS_CUDA_K_GEMV_NWR + 2,
                                          LS_CUDA_K_GEMV_NWR + 4, LS_CUDA_K_MMA2S + 1, LS_CUDA_K_MMA2S + 2};
            for (int ki = 0; ki < (flt ? 1 : 10); ki++) {
                const int k = kernels[ki];
                const bool nwr = k > LS_CUDA_K_GEMV_NWR && k < LS_CUDA_K_MMA2S, sm = k > LS_CUDA_K_MMA2S;
                size_t diff = 0, tot = 0;
                for (int mi = 0; mi < nM; mi++) {
                    const int M = Ms[mi];
                    if (k > LS_CUDA_K_MMA2 && !nwr && !sm && M <= 32) continue; /* the same k_mma as LS_CUDA_K_MMA */
                    if (sm && M > 32) continue; /* k_mma2's configuration 2, checked above */
                    if (nwr && M == 1) continue; /* one row: the one-row kernel as always */
                    if (ls_cuda_test_matmul(t, N, K, w, M, x, k, yg, &err)) {
                        printf("FAIL matmul %s: %s\n", types[ti].name, err.msg);
                        g_failed++;
                        continue;
                    }
                    diff += diff_bytes(yc, yg, (size_t)M * N * 4);
                    tot += (size_t)M * N * 4;
                }
                char what[128];
                char kname[80];
                if (nwr)
                    snprintf(kname, sizeof kname, "warp-per-output, %d weight row(s) a warp, M = 2..100", k - LS_CUDA_K_GEMV_NWR);
                else if (sm)
                    snprintf(kname, sizeof kname, "k_mma2 on one tile row, %d columns, M = 1..32", 64 * (k - LS_CUDA_K_MMA2S));
                else
                    snprintf(kname, sizeof kname, "k_mma2 configuration %d, M = 33..100", k - LS_CUDA_K_MMA2);
                snprintf(what, sizeof what, "matmul %-5s %3lld x %4lld, %s%s", types[ti].name, (long long)N,
                         (long long)K, flt ? "float kernel" : k > LS_CUDA_K_MMA2 ? kname : k ? "int8 tensor-core GEMM" : "warp-per-output",
                         k > LS_CUDA_K_MMA2 ? "" : ", M = 1..100");
                report(what, diff, tot);
            }
            if (!flt && !g_quick && ls_cuda_test_matmul(t, N, K, w, 64, x, LS_CUDA_K_FAST, yg, &err) == LS_OK) {
                double num = 0, den = 0;
                for (int64_t i = 0; i < 64 * N; i++) {
                    num += (double)(yg[i] - yc[i]) * (yg[i] - yc[i]);
                    den += (double)yc[i] * yc[i];
                }
                printf("info matmul %-5s fast family (cuBLAS fp16, M = 64): relative error %.2e (not compared)\n",
                       types[ti].name, sqrt(num / den));
            }
            ls_wmat_free(wm);
            free(scratch);
            free(w);
            free(x);
            free(yc);
            free(yg);
        }
    }
}

/* ---- 3. whole forwards --------------------------------------------------------------- */
#define NSEQ 16
#define NCTX 256
/* The fast family's bound: logits' relative L2 error against the CPU's of a sequence whose
 * matmuls ran (in part) as fp16 GEMMs: weights and activations rounded to 11 significant
 * bits (relative 2^-11 = 4.9e-4 each; one matmul measured 3.7e-3 in test_matmul), compounded
 * over the layers and the sequence's own inexact K/V.  A wrong result (another row's, a
 * missing epilogue) is of order 1. */
#define FAST_ERR_MAX 0.1
/* A sequence forked from sequence 1 after P tokens: its full blocks are shared, its partial
 * block copied with ls_cuda_kv_block_copy; then it continues with its own tokens. */
static void test_fork(parity_refs *fx, ls_cuda_fwd *g, ls_cuda_kv *kv, const char *name) {
    const int bps = NCTX / LS_KV_BLOCK, src = 1, dst = 2;
    const int P = (fx->len[src] < fx->len[dst] ? fx->len[src] : fx->len[dst]) - 5;
    /* the fork's tokens: sequence src's first P, then dst's own; its reference is computed
     * on the CPU as a sequence of its own */
    const int L = fx->len[dst];
    int32_t *tk = malloc((size_t)L * 4);
    memcpy(tk, fx->tok[src], (size_t)P * 4);
    memcpy(tk + P, fx->tok[dst] + P, (size_t)(L - P) * 4);
    ls_err err;
    ls_fwd *cf = ls_fwd_create(fx->m, (ls_fwd_params){.n_rows = 64, .n_ctx = NCTX, .n_threads = 16, .isa = -1}, &err);
    ls_kv_store *ckv = ls_kv_store_create(fx->m, bps, &err);
    int32_t ct[NCTX / LS_KV_BLOCK];
    for (int i = 0; i < bps; i++) ct[i] = i;
    const int32_t *ctables[1] = {ct};
    float *ref = malloc((size_t)L * fx->V * 4), *got = malloc((size_t)64 * fx->V * 4);
    for (int p0 = 0; p0 < L; p0 += 64) {
        const int n = L - p0 < 64 ? L - p0 : 64;
        int32_t pos[64], seq[64], lr[64];
        for (int i = 0; i < n; i++) pos[i] = p0 + i, seq[i] = 0, lr[i] = i;
        ls_batch b = {.n = n, .token = tk + p0, .pos = pos, .seq = seq, .tables = ctables, .logit_row = lr};
        ls_fwd_run(cf, ckv, &b, ref + (size_t)p0 * fx->V);
    }
    ls_kv_store_free(ckv);
    ls_fwd_free(cf);
    /* GPU: prefill src's first P tokens in table A; the fork's table shares A's full blocks
     * and gets a copy of the partial one */
    int32_t ta[NCTX / LS_KV_BLOCK], tb[NCTX / LS_KV_BLOCK];
    for (int i = 0; i < bps; i++) ta[i] = 3 * i + 1, tb[i] = 3 * i + 2;
    const int full = P / LS_KV_BLOCK;
    for (int i = 0; i < full; i++) tb[i] = ta[i];
    const int32_t *tables[2] = {ta, tb};
    int32_t pos[64], seq[64], lr[64];
    for (int p0 = 0; p0 < P; p0 += 64) {
        const int n = P - p0 < 64 ? P - p0 : 64;
        for (int i = 0; i < n; i++) pos[i] = p0 + i, seq[i] = 0, lr[i] = -1;
        ls_batch b = {.n = n, .token = tk + p0, .pos = pos, .seq = seq, .tables = tables, .logit_row = lr};
        if (ls_cuda_fwd_run(g, kv, &b, NULL, &err)) printf("FAIL fork prefill: %s\n", err.msg);
    }
    if (ls_cuda_kv_block_copy(kv, tb[full], ta[full], P % LS_KV_BLOCK, &err)) printf("FAIL block copy: %s\n", err.msg);
    size_t diff = 0, tot = 0;
    for (int p = P; p < L; p++) {
        pos[0] = p;
        seq[0] = 1;
        lr[0] = 0;
        ls_batch b = {.n = 1, .token = tk + p, .pos = pos, .seq = seq, .tables = tables, .logit_row = lr};
        if (ls_cuda_fwd_run(g, kv, &b, got, &err)) {
            printf("FAIL fork decode: %s\n", err.msg);
            diff++;
            break;
        }
        diff += diff_bytes(ref + (size_t)p * fx->V, got, (size_t)fx->V * 4);
        tot += (size_t)fx->V * 4;
    }
    char what[160];
    snprintf(what, sizeof what, "%s: fork after %d tokens (shared blocks + ls_cuda_kv_block_copy), %d decode rows", name, P,
             L - P);
    report(what, diff, tot);
    free(tk);
    free(ref);
    free(got);
}

static int g_models = 1; /* 0 (--families): only the family files */

static void test_model(const synth_cfg *c, uint64_t seed) {
    parity_refs fx;
    void *buf = NULL;
    ls_err err;
    const double t0 = now_s();
    ls_model *m = synth_model(c, seed, &buf, &err);
    if (!m) {
        printf("FAIL model %s: %s\n", c->name, err.msg);
        g_failed++;
        return;
    }
    if (!parity_refs_make(&fx, m, NSEQ, NCTX, 20, g_quick ? 50 : NCTX - 40, 16, seed * 3 + 1, &err)) {
        printf("FAIL references %s: %s\n", c->name, err.msg);
        g_failed++;
        ls_model_free(m);
        free(buf);
        return;
    }
    const double t1 = now_s();
    ls_cuda_fwd *g = ls_cuda_fwd_create(fx.m, &(ls_backend_params){.n_rows = 160, .n_ctx = NCTX}, &err);
    ls_cuda_kv *kv = g ? ls_cuda_kv_create(fx.m, NSEQ * (NCTX / LS_KV_BLOCK), 0, &err) : NULL;
    if (!g || !kv) {
        printf("FAIL cuda fwd %s: %s\n", c->name, err.msg);
        g_failed++;
        ls_cuda_fwd_free(g);
        parity_refs_free(&fx);
        ls_model_free(m);
        free(buf);
        return;
    }
    size_t total_rows = 0;
    for (int q = 0; q < NSEQ; q++) total_rows += (size_t)fx.len[q];
    (void)total_rows;
    printf("model %s: %d layers, embd %d, heads %d/%d, ff %d, vocab %d; %d sequences, %zu positions; "
           "CPU references %.1f s\n",
           c->name, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->n_ff, c->n_vocab, NSEQ, total_rows, t1 - t0);
    static const struct { int gemv_max, graphs, v2, bmax, amr; const char *name; } pol[] = {
        {8, 1, 4, 64, 1, "default policy"},
        {0, 0, 0, 32, 0, "tensor-core GEMM (k_mma) for every run, per-row attention, no graphs"},
        {64, 1, 4, 32, 0, "warp kernel for every run, per-row attention"},
        {8, 1, 1, 64, 2, "k_mma2 configuration 1 for runs over 32 rows, k_attn4 for batches of 16+ rows"},
        {8, 0, 3, 64, 3, "k_mma2 configuration 3, k_attn4 on 3 persistent blocks (several work items each), no graphs"},
        {8, 0, 2, 64, 1, "k_mma2 configuration 2, k_attn4 where 8+ rows a sequence, no graphs"}};
    for (int pi = 0; pi < (g_attn ? 6 : g_quick ? 1 : 6); pi++) {
        if (g_attn && pol[pi].amr < 2) continue;
        ls_cuda_opts o, o0;
        ls_cuda_fwd_get_opts(g, &o0);
        o = o0;
        o.gemv_max_rows = pol[pi].gemv_max;
        o.graphs = pol[pi].graphs;
        o.mma_v2 = pol[pi].v2;
        o.attn_mr = pol[pi].amr;
        ls_cuda_fwd_set_opts(g, &o);
        size_t cmp, rows;
        const size_t d = parity_run_mix(&fx, g, kv, seed + 17 * pi, 0.0, pol[pi].bmax, &cmp, &rows, NULL);
        ls_cuda_fwd_set_opts(g, &o0);
        char what[200];
        snprintf(what, sizeof what, "%s: %zu rows in random batch mixes (B = 1..%d), %s", c->name, rows, pol[pi].bmax,
                 pol[pi].name);
        report(what, d, cmp);
    }
    if (!g_attn) {
        ls_cuda_opts o;
        ls_cuda_fwd_get_opts(g, &o);
        o.gemv_max_rows = 8; /* the default */
        o.graphs = 1;
        ls_cuda_fwd_set_opts(g, &o);
        size_t cmp, rows;
        double fe = 0;
        const size_t d = parity_run_mix(&fx, g, kv, seed + 99, 0.4, 64, &cmp, &rows, &fe);
        char what[200];
        snprintf(what, sizeof what, "%s: %zu rows, B = 1..64, 40%% of the sequences on the fast family (the "
                 "others compared; fast rows' relative error %.2e)", c->name, rows, fe);
        report(what, d, cmp);
    }
    if (!g_attn) { /* the fast family where it runs: the fast sequences' rows side by side in runs of at
         * least fast_min_rows (64), which cuBLAS serves, with exact sequences in the same
         * forwards; the exact rows compared, the fast ones checked to differ (they took a
         * free-order fp16 GEMM) and to stay within FAST_ERR_MAX of the CPU's logits */
        ls_cuda_opts o;
        ls_cuda_fwd_get_opts(g, &o);
        ls_cuda_stats s0, s1;
        ls_cuda_fwd_stats(g, &s0);
        size_t cmp, rows;
        double fe = 0;
        const size_t d = parity_run_mix_runs(&fx, g, kv, seed + 131, 0.4, o.fast_min_rows, o.fast_min_rows + 64, &cmp, &rows,
                                             &fe);
        ls_cuda_fwd_stats(g, &s1);
        const uint64_t blas_rows = s1.rows_cublas - s0.rows_cublas, fast_rows = s1.rows_fast - s0.rows_fast;
        char what[240];
        snprintf(what, sizeof what, "%s: %zu rows, fast runs of %d..%d rows beside exact rows (the exact compared)", c->name,
                 rows, o.fast_min_rows, o.fast_min_rows + 32);
        report(what, d, cmp);
        /* float matrices always take their one exact kernel: a model of only float
         * matrices must come out exact on the fast family too */
        const bool all_float = c->t_q <= 1 && c->t_k <= 1 && c->t_v <= 1 && c->t_o <= 1 &&
                               (c->t_gate <= 1 || c->t_gate == 30) && (c->t_up <= 1 || c->t_up == 30) &&
                               (c->t_down <= 1 || c->t_down == 30) &&
                               (c->t_out < 0 ? c->t_embd <= 1 || c->t_embd == 30 : c->t_out <= 1 || c->t_out == 30);
        const bool took = all_float ? blas_rows == 0 && fe == 0.0
                                    : s1.cublas && blas_rows > 0 && fe > 0.0 && fe < FAST_ERR_MAX;
        g_checks++;
        if (!took) g_failed++;
        printf("%-4s %s: fast family: %llu of %llu fast rows through cuBLAS (cuBLAS %s); fast rows' relative L2 error "
               "vs the CPU %.2e (must be > 0 and < %.0e)\n",
               took ? "ok" : "FAIL", c->name, (unsigned long long)blas_rows, (unsigned long long)fast_rows,
               s1.cublas ? "loaded" : "missing", fe, FAST_ERR_MAX);
        if (all_float) printf("     (float matrices only: the fast family is the exact one here, so 0 rows and 0 error)\n");
        fflush(stdout);
    }
    if (!g_quick) test_fork(&fx, g, kv, c->name);
    ls_cuda_stats st;
    ls_cuda_fwd_stats(g, &st);
    printf("info %s: device weights %.1f MiB, rows exact %llu, fast %llu (through cuBLAS %llu), cuBLAS %s\n", c->name,
           (double)st.weight_bytes / 1048576.0, (unsigned long long)st.rows_exact, (unsigned long long)st.rows_fast,
           (unsigned long long)st.rows_cublas, st.cublas ? "yes" : "no");
    ls_cuda_kv_free(kv);
    ls_cuda_fwd_free(g);
    parity_refs_free(&fx);
    ls_model_free(m);
    free(buf);
}

/* 5. An MTP module (SYNTH_MTP): the trunk of the file as test_model runs it, then the
 * module itself.  Three sequences of random tokens with random hidden states as the
 * module's inputs (what the target's forward would hand it), run to the end on the CPU
 * (chunks of 64) and on the GPU (chunks of 1..33 rows, both exact kernels), each on its
 * own blocks of a one-layer store: every row's logits and hidden output, memcmp. */
static void test_mtp(const synth_cfg *c, uint64_t seed) {
    test_model(c, seed);
    void *buf = NULL;
    ls_err err;
    ls_model *m = synth_model(c, seed, &buf, &err);
    if (!m || !ls_model_has_mtp(m)) {
        printf("FAIL model %s: %s\n", c->name, m ? "no MTP module" : err.msg);
        g_failed++;
        ls_model_free(m);
        free(buf);
        return;
    }
    enum { NS = 3, BPS = NCTX / LS_KV_BLOCK };
    const int32_t n_hv = ls_model_mtp_vocab(m, NULL); /* a head over part of the vocabulary: its width */
    const int E = c->n_embd, V = n_hv ? n_hv : c->n_vocab, len = g_quick ? 60 : NCTX - 16;
    ls_fwd *cf = ls_fwd_create(m, (ls_fwd_params){.n_rows = 64, .n_ctx = NCTX, .n_threads = 16, .isa = -1, .mtp = true},
                               &err);
    ls_kv_store *ckv = cf ? ls_kv_store_create_shape(1, c->n_head_kv, c->head_dim ? c->head_dim : E / c->n_head,
                                                     NS * BPS, &err)
                          : NULL;
    ls_cuda_fwd *g = ckv ? ls_cuda_fwd_create(m, &(ls_backend_params){.n_rows = 64, .n_ctx = NCTX, .mtp = true}, &err)
                         : NULL;
    ls_cuda_kv *gkv = g ? ls_cuda_kv_create(m, NS * BPS, 1, &err) : NULL;
    int32_t *tok = malloc((size_t)NS * len * sizeof *tok), *pos = malloc(64 * sizeof *pos), *seq = calloc(64, sizeof *seq),
            *lrow = malloc(64 * sizeof *lrow);
    float *hin = malloc((size_t)NS * len * E * sizeof *hin), *lc = malloc((size_t)NS * len * V * sizeof *lc),
          *lg = malloc((size_t)NS * len * V * sizeof *lg), *hc = malloc((size_t)NS * len * E * sizeof *hc),
          *hg = malloc((size_t)NS * len * E * sizeof *hg);
    if (!gkv || !tok || !pos || !seq || !lrow || !hin || !lc || !lg || !hc || !hg) {
        printf("FAIL mtp %s: %s\n", c->name, gkv ? "out of memory" : err.msg);
        g_failed++;
        goto done;
    }
    {
        uint64_t s = seed * 7 + 5;
        for (int i = 0; i < NS * len; i++) tok[i] = (int32_t)(synth_next(&s) % (uint64_t)V);
        for (size_t i = 0; i < (size_t)NS * len * E; i++) hin[i] = 4.0f * synth_unif(&s) - 2.0f;
        int32_t tables[NS][BPS];
        for (int q = 0; q < NS; q++) /* each sequence on its own blocks, in reverse order */
            for (int b = 0; b < BPS; b++) tables[q][b] = q * BPS + (BPS - 1 - b);
        for (int side = 0; side < 2; side++) { /* 0: CPU, 1: GPU */
            for (int pol = 0; pol < (side ? 2 : 1); pol++) {
                if (side) {
                    ls_cuda_opts o;
                    ls_cuda_fwd_get_opts(g, &o);
                    o.gemv_max_rows = pol ? 64 : 8; /* pol 0: the default; pol 1: the warp kernel for every run */
                    ls_cuda_fwd_set_opts(g, &o);
                }
                for (int q = 0; q < NS; q++) {
                    const int32_t *tb[1] = {tables[q]};
                    for (int at = 0, k = 0; at < len; at += k) {
                        k = side ? 1 + (int)(synth_next(&s) % 33) : 64;
                        if (k > len - at) k = len - at;
                        for (int j = 0; j < k; j++) {
                            pos[j] = at + j;
                            lrow[j] = j;
                        }
                        const size_t r0 = (size_t)q * len + at;
                        float *lo = (side ? lg : lc) + r0 * V, *ho = (side ? hg : hc) + r0 * E;
                        ls_batch b = {k, tok + r0, pos, seq, tb, lrow, NULL, hin + r0 * E, ho};
                        if (!side) {
                            ls_fwd_run(cf, ckv, &b, lo);
                        } else if (ls_cuda_fwd_run(g, gkv, &b, lo, &err)) {
                            printf("FAIL mtp %s: %s\n", c->name, err.msg);
                            g_failed++;
                            goto done;
                        }
                    }
                }
                if (side) {
                    char what[200];
                    snprintf(what, sizeof what, "%s: MTP module, %d rows in chunks of 1..33 (%s): logits", c->name,
                             NS * len, pol ? "warp kernel for every run" : "default policy");
                    report(what, parity_diff_bytes(lc, lg, (size_t)NS * len * V * sizeof *lc),
                           (size_t)NS * len * V * sizeof *lc);
                    snprintf(what, sizeof what, "%s: MTP module: hidden outputs", c->name);
                    report(what, parity_diff_bytes(hc, hg, (size_t)NS * len * E * sizeof *hc),
                           (size_t)NS * len * E * sizeof *hc);
                }
            }
        }
    }
done:
    free(tok);
    free(pos);
    free(seq);
    free(lrow);
    free(hin);
    free(lc);
    free(lg);
    free(hc);
    free(hg);
    ls_cuda_kv_free(gkv);
    ls_cuda_fwd_free(g);
    ls_kv_store_free(ckv);
    ls_fwd_free(cf);
    ls_model_free(m);
    free(buf);
}

static void cpu_info(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096], model[256] = "?";
    bool a512 = false, vnni = false;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10) && model[0] == '?') snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
        if (!strncmp(line, "flags", 5)) {
            a512 = strstr(line, " avx512f") != NULL;
            vnni = strstr(line, " avx512_vnni") != NULL;
        }
    }
    if (f) fclose(f);
    model[strcspn(model, "\n")] = 0;
    printf("cpu: %s; avx512f %s, avx512_vnni %s; CPU reference ISA: %s\n", model, a512 ? "yes" : "no", vnni ? "yes" : "no",
           ls_isa_name(ls_isa_best()));
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        g_quick |= !strcmp(argv[i], "--quick");
        if (!strcmp(argv[i], "--attn")) g_quick = g_attn = 1;
        if (!strcmp(argv[i], "--families")) g_models = 0; /* only the family files */
    }
    char name[256];
    ls_err err;
    if (!ls_cuda_available(name, sizeof name, &err)) {
        printf("SKIP test_cuda: %s\n", err.msg);
        return 77;
    }
    printf("gpu: %s\n", name);
    cpu_info();
    const double t0 = now_s();
    if (g_models && !g_attn) {
        test_quant();
        test_matmul();
    }
    /* name, vocab, embd, layers, heads, kv heads, ff, ctx; q k v o gate up down; embd; out; rope base */
    static const synth_cfg cfgs[] = {
        {"smol-q4_1 (Q4_1, tied Q8_0 head, embd 576)", 8192, 576, 3, 9, 3, 1536, 8192, 3, 3, 3, 3, 3, 3, 3, 8, -1, 100000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"q4_0 (Q6_K head, head dim 128)", 8192, 1024, 2, 8, 2, 2816, 4096, 2, 2, 2, 2, 2, 2, 2, 2, 14, 500000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"q4_k_m (Q4_K, Q6_K v/down/head)", 8192, 1024, 2, 16, 4, 2816, 4096, 12, 12, 14, 12, 12, 12, 14, 12, 14, 10000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"q8_0 (MHA, F16 head)", 4096, 768, 2, 12, 12, 2048, 4096, 8, 8, 8, 8, 8, 8, 8, 8, 1, 10000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"mxfp4/q5 (Q5_0 q/k, Q5_1 v/o, MXFP4 ffn, Q5_K head)", 4096, 768, 2, 12, 4, 2048, 4096, 6, 6, 7, 7, 39, 39, 39, 1, 13,
         10000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"f32", 2048, 256, 2, 4, 2, 512, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"f16/bf16 (BF16 ffn)", 2048, 256, 2, 4, 1, 512, 4096, 1, 1, 1, 1, 30, 30, 30, 1, 1, 10000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
    };
    const int nc = !g_models ? 0 : g_quick ? 2 : (int)(sizeof cfgs / sizeof cfgs[0]);
    for (int i = 0; i < nc; i++) test_model(&cfgs[i], 1000 + (uint64_t)i);
    {
        int nf;
        const synth_cfg *fam = synth_families(&nf);
        for (int i = 0; i < (g_attn ? 0 : g_quick ? 2 : nf); i++) test_model(&fam[i], 2000 + (uint64_t)i);
    }
    { /* MTP modules: a llama one sharing the tied head and embedding, a gemma3 one with its own */
        static const synth_cfg mtp[] = {
            {"llama + MTP (Q4_1 block, Q8_0 eh_proj, tied Q8_0 head)", 2048, 256, 2, 4, 2, 512, 4096, 3, 3, 3, 8, 3, 3, 3, 8,
             -1, 10000.0f, "llama", 0, 0, SYNTH_MTP, 0, 0, 0},
            {"gemma3 + MTP (window 11, Q4_0 eh_proj, its own F16 head and embedding)", 2048, 128, 6, 2, 1, 512, 4096, 8, 8,
             6, 2, 8, 8, 2, 8, 1, 1000000.0f, "gemma3", 256, 11, SYNTH_QK_NORM | SYNTH_POST | SYNTH_MTP, 0, 0, 0},
            {"llama + MTP, head over every third token (rows of the tied Q8_0 head)", 2048, 256, 2, 4, 2, 512, 4096, 3, 3,
             3, 8, 3, 3, 3, 8, -1, 10000.0f, "llama", 0, 0, SYNTH_MTP | SYNTH_MTP_VOCAB, 0, 0, 0},
            {"gemma3 + MTP, its own F16 head over every third token", 2048, 128, 6, 2, 1, 512, 4096, 8, 8, 6, 2, 8, 8, 2, 8,
             1, 1000000.0f, "gemma3", 256, 11, SYNTH_QK_NORM | SYNTH_POST | SYNTH_MTP | SYNTH_MTP_VOCAB, 0, 0, 0},
        };
        for (int i = 0; i < (g_attn ? 0 : g_quick ? 1 : 4); i++) test_mtp(&mtp[i], 3000 + (uint64_t)i);
    }
    printf("test_cuda: %zu checks, %zu failed; %zu differing bytes of %zu compared (%.1f s) %s\n", g_checks, g_failed,
           g_bytes_diff, g_bytes_cmp, now_s() - t0, g_failed ? "FAIL" : "ok");
    return g_failed ? 1 : 0;
}
