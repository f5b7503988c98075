/* budget.c - what the kernels alone cost in a decode step, and the ratios they allow.
 *
 * The two speed goals still open are ratios: aggregate decode at B = 8 against B = 1
 * (issue 4), and a speculative step of k + 1 rows against a plain one (issue 5).  This
 * times only the kernels a step runs, on the default model's real weights in forward
 * order (so they stream from L3/DRAM as in the engine), with the engine's thread count:
 *   - the 30 layers' matmuls (Q|K|V as one call, O, gate|up as one call, down) at M rows,
 *     activation quantization included;
 *   - the output head at M rows;
 *   - attention over 30 layers' KV: B decode rows of B different sequences at about P
 *     positions, or one sequence's verify block of M rows ending at P.
 * Configurations take turns, round by round (each runs three steps back to back per
 * round, the last one timed, so its own working set is as warm as in the engine's run of
 * steps); medians and minima over the rounds are printed.  A real step adds norms, RoPE, the residual adds, SwiGLU, sampling,
 * scheduling and thread hand-offs to these; so "8 x B=1 / B=8" over the kernels alone is
 * an upper bound on what the engine's B = 8 / B = 1 ratio can be with these kernels,
 * and the verify ratios are lower bounds on what a verify step costs.
 *
 *   make lib && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/budget.c build/liblockstep.a \
 *       -lm -pthread -o build/budget && build/budget [P] [reps] [threads]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "kernels/cpu/kernels.h"

#define NL 30
#define NH 9
#define NKV 3
#define HD 64
#define MAXM 9

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static ls_wmat *load(const gguf_file *f, const char *name) {
    ls_err err;
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        fprintf(stderr, "budget: no tensor %s\n", name);
        exit(1);
    }
    ls_wmat *w = ls_wmat_create(t->type, (int64_t)t->ne[1], (int64_t)t->ne[0], t->data, &err);
    if (!w) {
        fprintf(stderr, "budget: %s: %s\n", name, err.msg);
        exit(1);
    }
    return w;
}

int main(int argc, char **argv) {
    const int P = argc > 1 ? atoi(argv[1]) : 80, reps = argc > 2 ? atoi(argv[2]) : 21,
              nth = argc > 3 ? atoi(argv[3]) : 2;
    if (P < 16 || P > 2000 || reps < 1 || reps > 1000 || nth < 1 || nth > 64) {
        fprintf(stderr, "usage: budget [P 16..2000] [reps 1..1000] [threads 1..64]\n");
        return 2;
    }
    ls_err err;
    gguf_file *f = gguf_open("models/SmolLM2-135M-Instruct.Q4_1.gguf", &err);
    if (!f) {
        fprintf(stderr, "budget: %s (run `make model` first)\n", err.msg);
        return 1;
    }
    static const char *nm[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    ls_wmat *W[NL][7];
    char name[64];
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < 7; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, nm[i]);
            W[l][i] = load(f, name);
        }
    ls_wmat *head = load(f, gguf_find_tensor(f, "output.weight") ? "output.weight" : "token_embd.weight");
    ls_pool *pool = ls_pool_create(nth, &err);
    const size_t sb = ls_matmul_scratch_bytes(MAXM, 1536);
    void *scr = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    ls_kctx kc = {.isa = ls_isa_best(), .pool = pool, .scratch = scr, .scratch_bytes = sb};
    float *x = malloc(sizeof(float) * MAXM * 1536), *y0 = malloc(sizeof(float) * MAXM * 49152),
          *y1 = malloc(sizeof(float) * MAXM * 1536), *y2 = malloc(sizeof(float) * MAXM * 1536);
    for (int i = 0; i < MAXM * 1536; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;

    /* KV: 8 sequences x 30 layers, head-major 16-position blocks as the engine stores them */
    const int nblk = P / 16 + 2;
    const size_t bf = (size_t)16 * NKV * HD, tot = (size_t)NL * 8 * nblk * bf;
    float *kv_k = aligned_alloc(4096, sizeof(float) * tot), *kv_v = aligned_alloc(4096, sizeof(float) * tot);
    for (size_t i = 0; i < tot; i++) {
        kv_k[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        kv_v[i] = (float)((i * 40503u) % 1000) / 1000.0f;
    }
    int32_t tab[8][128];
    for (int s = 0; s < 8; s++)
        for (int b = 0; b < nblk; b++) tab[s][b] = s * nblk + b;
    float *q = malloc(sizeof(float) * MAXM * NH * HD), *o = malloc(sizeof(float) * MAXM * NH * HD);
    for (int i = 0; i < MAXM * NH * HD; i++) q[i] = (float)((i * 7919) % 1000) / 300.0f - 1.6f;
    const size_t per = ls_attention_scratch_floats(P + 1);
    float *ascr = malloc(sizeof(float) * per * (size_t)nth);
    if (!pool || !scr || !x || !y0 || !y1 || !y2 || !kv_k || !kv_v || !q || !o || !ascr) {
        fprintf(stderr, "budget: out of memory\n");
        return 1;
    }

    /* configurations: B = 1 and B = 8 decode (distinct sequences), verify blocks k = 1..8 */
    enum { NC = 10 };
    int rows[NC], dec[NC];
    for (int c = 0; c < NC; c++) {
        rows[c] = c == 0 ? 1 : c == 1 ? 8 : c; /* c = 2..9: verify block of c rows (k = c - 1) */
        dec[c] = c <= 1;
    }
    double *t[NC][3];
    for (int c = 0; c < NC; c++)
        for (int k = 0; k < 3; k++) t[c][k] = malloc(sizeof(double) * (size_t)reps);
    /* rounds of every configuration in turn; inside a round, a configuration runs RUN
     * steps back to back (its own working set warm, as in the engine) and keeps the last */
    enum { RUN = 3 };
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < NC; c++)
            for (int rr = 0; rr < RUN; rr++) {
            const int M = rows[c];
            double t0 = now_ms();
            for (int l = 0; l < NL; l++) {
                const ls_wmat *qkv[3] = {W[l][0], W[l][1], W[l][2]}, *gu[2] = {W[l][4], W[l][5]};
                float *yq[3] = {y0, y1, y2}, *yg[2] = {y0, y1};
                ls_matmul_multi(&kc, 3, qkv, x, M, yq);
                ls_matmul(&kc, W[l][3], x, M, y0);
                ls_matmul_multi(&kc, 2, gu, x, M, yg);
                ls_matmul(&kc, W[l][6], x, M, y0);
            }
            double t1 = now_ms();
            ls_matmul(&kc, head, x, M, y0);
            double t2 = now_ms();
            int32_t pos[MAXM];
            ls_kv_view vw[MAXM];
            for (int l = 0; l < NL; l++) {
                for (int m = 0; m < M; m++) {
                    int s = dec[c] ? m : 0;
                    pos[m] = dec[c] ? P - 3 * m : P - (M - 1) + m;
                    vw[m] = (ls_kv_view){kv_k + (size_t)(l * 8) * nblk * bf, kv_v + (size_t)(l * 8) * nblk * bf, tab[s],
                                         (int64_t)bf, 4, HD, 16 * HD};
                }
                ls_attention(&kc, q, M, pos, vw, NH, NKV, HD, 0.125f, o, ascr, per);
            }
            double t3 = now_ms();
            t[c][0][r] = t1 - t0;
            t[c][1][r] = t2 - t1;
            t[c][2][r] = t3 - t2;
        }
    double med[NC][4];
    printf("kernels of one step, %s, %d threads, P = %d, median (min) of %d interleaved reps, ms\n",
           ls_isa_name(kc.isa), nth, P, reps);
    printf("%-22s %15s %15s %15s %9s\n", "step", "layer matmuls", "head", "attention", "sum");
    for (int c = 0; c < NC; c++) {
        double sum = 0;
        char label[32];
        if (dec[c])
            snprintf(label, sizeof label, "decode B=%d", rows[c]);
        else
            snprintf(label, sizeof label, "verify k=%d (%d rows)", rows[c] - 1, rows[c]);
        printf("%-22s", label);
        for (int k = 0; k < 3; k++) {
            qsort(t[c][k], (size_t)reps, sizeof(double), cmpd);
            med[c][k] = t[c][k][reps / 2];
            sum += med[c][k];
            printf(" %7.3f (%5.3f)", med[c][k], t[c][k][0]);
        }
        med[c][3] = sum;
        printf(" %9.3f\n", sum);
    }
    printf("\nkernels alone: 8 x (B=1) / (B=8) = %.2fx (the B = 8 goal is 4x)\n", 8.0 * med[0][3] / med[1][3]);
    printf("verify step / plain step (kernels alone):");
    for (int c = 2; c < NC; c++) printf("  k=%d %.2fx", rows[c] - 1, med[c][3] / med[0][3]);
    printf("\n");
    return 0;
}
