/* geglu.c - GeGLU (gemma's FFN activation): one plain-C recipe, the same code on every
 * ISA, so its bits cannot depend on the ISA; rows split across the pool like the other
 * per-row operations (each row computed by one thread).
 *
 * gelu_tanh(g) = 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), computed as
 * g * sigmoid(2u) = g / (1 + exp(-2u)) (the same function, without the cancellation of
 * 1 + tanh(u) for negative g), with the project's ls_expf.  Order, all in float:
 *   g2 = g*g; c = 0.044715f*g2; c1 = 1 + c; t = g*c1; u2 = (2*sqrt(2/pi))f * t;
 *   e = ls_expf(-u2); y = g / (1 + e); out = y * up. */
#include "kernels/cpu/internal.h"

float ls_gelu_tanh(float g) {
    const float two_sqrt_2_over_pi = 1.5957691216057308f; /* 2 sqrt(2/pi), rounded to float */
    float g2 = g * g;
    float c1 = 1.0f + 0.044715f * g2;
    float u2 = two_sqrt_2_over_pi * (g * c1);
    return g / (1.0f + ls_expf(-u2));
}

typedef struct {
    const float *g, *u;
    int64_t M, n;
    float *out;
    int64_t next; /* rows claimed so far */
} ls_geglu_call;

static void ls_geglu_task(void *arg, int ith, int nth) {
    ls_geglu_call *c = arg;
    (void)ith;
    for (int64_t a, b; ls_claim(&c->next, c->M, nth, 1, &a, &b);)
        for (int64_t m = a; m < b; m++)
            for (int64_t i = 0; i < c->n; i++)
                c->out[m * c->n + i] = ls_gelu_tanh(c->g[m * c->n + i]) * c->u[m * c->n + i];
}

void ls_geglu(const ls_kctx *kc, const float *gate, const float *up, int64_t M, int64_t n, float *out) {
    LS_ASSERT(kc && gate && up && out && n >= 0 && M >= 0);
    ls_geglu_call c = {gate, up, M, n, out, 0};
    ls_pool_run_dyn(M * n * 8 >= 16384 ? kc->pool : NULL, ls_geglu_task, &c);
}
