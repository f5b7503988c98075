/* budget.c - where the time of the engine's decode steps goes: the matmul calls, the
 * attention calls, RMSNorm, SwiGLU, and the rest (RoPE, K/V writes, residual adds,
 * sampling, scheduling, thread hand-offs), for
 *   - batched decode: B = 1 and B = 8 sequences (distinct prompts) at about P positions;
 *   - verify blocks: one sequence whose every step carries k drafts the target rejects
 *     (k + 1 rows, one token per step), k = 0, 1, 2, 4, 8, from P positions on.
 * The two open speed goals are ratios of such steps (B = 8 against B = 1; a verify step
 * against a plain one); this splits each step into what its kernels cost and what the
 * engine adds, in the same steps.  The kernels are timed by wrapping their entry points at
 * link time (-Wl,--wrap), so the engine runs unmodified; configurations alternate, round
 * by round; each figure is the total over all rounds divided by the steps.  Every run's
 * tokens are checked against plain decoding (a mismatch is reported and exits 1).
 *
 *   make lib && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/budget.c build/liblockstep.a \
 *     -Wl,--wrap=ls_matmul_multi_rows,--wrap=ls_attention,--wrap=ls_rmsnorm,--wrap=ls_swiglu \
 *     -lpcre2-8 -lcjson -lcrypto -lm -pthread -o build/budget && build/budget [P] [rounds] [threads] [MODEL]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "kernels/cpu/kernels.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* ---- the wrapped kernels: time spent inside each ---------------------------------- */
enum { T_MM, T_ATT, T_RMS, T_SWI, T_N };
static double g_t[T_N];

void __real_ls_matmul_multi_rows(const ls_kctx *kc, int n, const ls_wmat *const *w, const float *x, int64_t M,
                                 float *const *y, const uint8_t *need);
void __wrap_ls_matmul_multi_rows(const ls_kctx *kc, int n, const ls_wmat *const *w, const float *x, int64_t M,
                                 float *const *y, const uint8_t *need) {
    double t0 = now_ms();
    __real_ls_matmul_multi_rows(kc, n, w, x, M, y, need);
    g_t[T_MM] += now_ms() - t0;
}
void __real_ls_attention(const ls_kctx *kc, const float *q, int64_t M, const int32_t *pos, const ls_kv_view *kv,
                         int n_head, int n_kv_head, int head_dim, float scale, int32_t window, float *out,
                         float *scratch, size_t per);
void __wrap_ls_attention(const ls_kctx *kc, const float *q, int64_t M, const int32_t *pos, const ls_kv_view *kv,
                         int n_head, int n_kv_head, int head_dim, float scale, int32_t window, float *out,
                         float *scratch, size_t per) {
    double t0 = now_ms();
    __real_ls_attention(kc, q, M, pos, kv, n_head, n_kv_head, head_dim, scale, window, out, scratch, per);
    g_t[T_ATT] += now_ms() - t0;
}
void __real_ls_rmsnorm(const ls_kctx *kc, const float *x, const float *w, float eps, int64_t M, int64_t n, float *out);
void __wrap_ls_rmsnorm(const ls_kctx *kc, const float *x, const float *w, float eps, int64_t M, int64_t n, float *out) {
    double t0 = now_ms();
    __real_ls_rmsnorm(kc, x, w, eps, M, n, out);
    g_t[T_RMS] += now_ms() - t0;
}
void __real_ls_swiglu(const ls_kctx *kc, const float *g, const float *u, int64_t M, int64_t n, float *out);
void __wrap_ls_swiglu(const ls_kctx *kc, const float *g, const float *u, int64_t M, int64_t n, float *out) {
    double t0 = now_ms();
    __real_ls_swiglu(kc, g, u, M, n, out);
    g_t[T_SWI] += now_ms() - t0;
}

/* ---- runs -------------------------------------------------------------------------- */
typedef struct {
    double tot, t[T_N];
    long steps;
} acc;

typedef struct {
    int32_t *toks;
    int32_t n, cap;
    bool first, done;
} run_out;

static void on_event(void *ud, const ls_event *ev) {
    run_out *r = ud;
    if (ev->token >= 0) {
        if (r->n < r->cap) r->toks[r->n++] = ev->token;
        r->first = true;
    }
    if (ev->done) r->done = true;
}

typedef struct {
    const int32_t *ref;
    int32_t n_ref, n_prompt, k;
} rejecter;

/* k drafts, each differing from the reference continuation: all rejected */
static int32_t reject_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    (void)hist;
    const rejecter *d = ud;
    int32_t k = d->k < max ? d->k : max;
    for (int32_t j = 0; j < k; j++) {
        int32_t i = n_hist - d->n_prompt + j;
        out[j] = ((i < d->n_ref ? d->ref[i] : 0) + 1) % 1000;
    }
    return k;
}

/* Runs B requests (prompt b = base prompt with token 0 set to 300 + b) to completion; the
 * steps after every sequence has its first token are accounted into a. */
static int run(ls_engine *e, int B, const int32_t *prompt, int32_t np, int32_t gen, int k, const int32_t *ref,
               int32_t n_ref, run_out *outs, acc *a) {
    ls_err err = {0};
    int32_t pb[8][2048];
    rejecter rj[8];
    for (int b = 0; b < B; b++) {
        memcpy(pb[b], prompt, sizeof(int32_t) * (size_t)np);
        pb[b][0] = 300 + b;
        outs[b].n = 0;
        outs[b].first = outs[b].done = false;
        rj[b] = (rejecter){ref, n_ref, np, k};
        ls_request q = {.size = sizeof(ls_request), .prompt = pb[b], .n_prompt = np, .sampling = {.temperature = 0.0f, .top_p = 1.0f},
                        .max_tokens = gen, .ignore_eos = true, .on_event = on_event, .ud = &outs[b],
                        .draft = k ? reject_draft : NULL, .draft_ud = &rj[b]};
        if (ls_engine_submit(e, &q, NULL, &err)) {
            fprintf(stderr, "budget: %s\n", err.msg);
            return 1;
        }
    }
    for (;;) { /* prefill until every sequence has its first token */
        bool all = true;
        for (int b = 0; b < B; b++) all = all && outs[b].first;
        if (all) break;
        if (ls_engine_step(e, NULL, &err)) {
            fprintf(stderr, "budget: %s\n", err.msg);
            return 1;
        }
    }
    double t0 = now_ms(), t[T_N];
    memcpy(t, g_t, sizeof t);
    while (!ls_engine_idle(e)) {
        if (ls_engine_step(e, NULL, &err)) {
            fprintf(stderr, "budget: %s\n", err.msg);
            return 1;
        }
        a->steps++;
    }
    a->tot += now_ms() - t0;
    for (int i = 0; i < T_N; i++) a->t[i] += g_t[i] - t[i];
    return 0;
}

static void row(const char *label, const acc *a, const acc *base) {
    double s = (double)a->steps, tot = a->tot / s, k = (a->t[T_MM] + a->t[T_ATT]) / s;
    double rest = tot - (a->t[T_MM] + a->t[T_ATT] + a->t[T_RMS] + a->t[T_SWI]) / s;
    printf("%-22s %7.2f %8.2f %9.2f %8.3f %7.3f %6.2f", label, tot, a->t[T_MM] / s, a->t[T_ATT] / s,
           a->t[T_RMS] / s, a->t[T_SWI] / s, rest);
    if (base) {
        double bs = (double)base->steps;
        printf("   %5.2fx %5.2fx", tot / (base->tot / bs), k / ((base->t[T_MM] + base->t[T_ATT]) / bs));
    }
    printf("\n");
}

int main(int argc, char **argv) {
    const int P = argc > 1 ? atoi(argv[1]) : 80, rounds = argc > 2 ? atoi(argv[2]) : 5,
              threads = argc > 3 ? atoi(argv[3]) : 2;
    const char *path = argc > 4 ? argv[4] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (P < 16 || P > 1800 || rounds < 1 || rounds > 100 || threads < 1 || threads > 64) {
        fprintf(stderr, "usage: budget [P 16..1800] [rounds 1..100] [threads 1..64] [MODEL]\n");
        return 2;
    }
    ls_err err = {0};
    ls_model *m = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = path}, &err);
    if (!m) {
        fprintf(stderr, "budget: %s (run `make model` first)\n", err.msg);
        return 1;
    }
    enum { GEN = 48 };
    int32_t prompt[2048];
    for (int i = 0; i < P; i++) prompt[i] = 200 + (i * 13) % 5000;
    ls_engine_params ep = {.size = sizeof(ls_engine_params), .n_ctx = P + GEN + 16, .n_seq_max = 8, .step_tokens = 512, .n_threads = threads, .isa = -1,
                           .draft_max = 8, .no_prefix_cache = true};
    ls_engine *e = ls_engine_create(m, &ep, &err);
    if (!e) {
        fprintf(stderr, "budget: %s\n", err.msg);
        return 1;
    }
    int32_t toks[8][GEN + 8], ref[8][GEN + 8];
    run_out outs[8];
    for (int b = 0; b < 8; b++) outs[b] = (run_out){toks[b], 0, GEN + 8, false, false};
    acc warm = {0};
    if (run(e, 8, prompt, P, GEN, 0, NULL, 0, outs, &warm)) return 1; /* the reference tokens, and a warm-up */
    for (int b = 0; b < 8; b++) memcpy(ref[b], toks[b], sizeof(int32_t) * (size_t)outs[b].n);
    const int32_t n_ref = outs[0].n;

    static const int ks[] = {0, 1, 2, 4, 8};
    enum { NK = 5 };
    acc dec1 = {0}, dec8 = {0}, ver[NK] = {{0}};
    for (int r = 0; r < rounds; r++) {
        if (run(e, 1, prompt, P, GEN, 0, NULL, 0, outs, &dec1)) return 1;
        if (memcmp(toks[0], ref[0], sizeof(int32_t) * (size_t)n_ref)) goto mismatch;
        if (run(e, 8, prompt, P, GEN, 0, NULL, 0, outs, &dec8)) return 1;
        for (int b = 0; b < 8; b++)
            if (outs[b].n != n_ref || memcmp(toks[b], ref[b], sizeof(int32_t) * (size_t)n_ref)) goto mismatch;
        for (int i = 0; i < NK; i++) {
            if (run(e, 1, prompt, P, GEN, ks[i], ref[0], n_ref, outs, &ver[i])) return 1;
            if (outs[0].n != n_ref || memcmp(toks[0], ref[0], sizeof(int32_t) * (size_t)n_ref)) goto mismatch;
        }
    }
    printf("engine decode steps from %d positions, %d threads, %d rounds; ms per step\n", P, threads, rounds);
    printf("%-22s %7s %8s %9s %8s %7s %6s   %6s %6s\n", "step", "total", "matmuls", "attention", "rmsnorm",
           "swiglu", "rest", "ratio", "kernels");
    row("decode B=1", &dec1, NULL);
    row("decode B=8", &dec8, &dec1);
    printf("  aggregate B=8 / B=1: %.2fx (steps), %.2fx (matmul + attention alone)\n",
           8.0 * (dec1.tot / (double)dec1.steps) / (dec8.tot / (double)dec8.steps),
           8.0 * ((dec1.t[T_MM] + dec1.t[T_ATT]) / (double)dec1.steps) /
               ((dec8.t[T_MM] + dec8.t[T_ATT]) / (double)dec8.steps));
    for (int i = 0; i < NK; i++) {
        char label[40];
        snprintf(label, sizeof label, "verify k=%d (%d rows)", ks[i], ks[i] + 1);
        row(label, &ver[i], i ? &ver[0] : NULL);
    }
    ls_engine_free(e);
    ls_model_free(m);
    return 0;
mismatch:
    fprintf(stderr, "budget: PARITY FAILURE: a run's tokens differ from plain decoding\n");
    return 1;
}
