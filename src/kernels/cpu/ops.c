/* ops.c - the public per-row operations: argument checks, RoPE tables and the
 * split of rows (or row x head pairs) across the pool.  Each row's result is
 * computed by exactly one thread with the per-ISA row kernel. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/internal.h"
#include "util/alloc.h"

typedef struct {
    const ls_kvtab *vt;
    const float *x, *w, *u;
    float eps;
    int64_t M, n;
    float *out;
} ls_rowop;

static void ls_rmsnorm_task(void *arg, int ith, int nth) {
    ls_rowop *o = arg;
    for (int64_t m = o->M * ith / nth; m < o->M * (ith + 1) / nth; m++)
        o->vt->rmsnorm_row(o->x + m * o->n, o->w, o->eps, o->n, o->out + m * o->n);
}

static void ls_swiglu_task(void *arg, int ith, int nth) {
    ls_rowop *o = arg;
    for (int64_t m = o->M * ith / nth; m < o->M * (ith + 1) / nth; m++)
        o->vt->swiglu_row(o->x + m * o->n, o->u + m * o->n, o->n, o->out + m * o->n);
}

/* Rows are split across threads only when there is enough work to pay for a wake-up. */
static ls_pool *ls_pool_for(const ls_kctx *kc, int64_t work) { return work >= 16384 ? kc->pool : NULL; }

void ls_rmsnorm(const ls_kctx *kc, const float *x, const float *w, float eps, int64_t M, int64_t n, float *out) {
    LS_ASSERT(kc && x && w && out && n > 0 && M >= 0);
    ls_rowop o = {ls_kvtab_for(kc->isa), x, w, NULL, eps, M, n, out};
    ls_pool_run(ls_pool_for(kc, M * n), ls_rmsnorm_task, &o);
}

void ls_swiglu(const ls_kctx *kc, const float *gate, const float *up, int64_t M, int64_t n, float *out) {
    LS_ASSERT(kc && gate && up && out && n >= 0 && M >= 0);
    ls_rowop o = {ls_kvtab_for(kc->isa), gate, NULL, up, 0.0f, M, n, out};
    ls_pool_run(ls_pool_for(kc, M * n * 8), ls_swiglu_task, &o);
}

/* ---- RoPE ------------------------------------------------------------------ */
struct ls_rope {
    ls_rope_params p;
    float *cs, *sn; /* (n_ctx, head_dim/2) */
};

ls_rope *ls_rope_create(ls_rope_params p, ls_err *err) {
    if (p.n_ctx < 1 || p.head_dim < 2 || p.head_dim % 2 != 0 || p.head_dim > 4096 || !(p.freq_base > 0.0f) ||
        !(p.freq_scale > 0.0f)) {
        ls_err_set(err, LS_E_INVALID, "bad RoPE parameters (n_ctx=%d, head_dim=%d, freq_base=%g, freq_scale=%g)",
                   p.n_ctx, p.head_dim, (double)p.freq_base, (double)p.freq_scale);
        return NULL;
    }
    ls_rope *r = ls_calloc(1, sizeof *r);
    size_t half = (size_t)p.head_dim / 2, cnt = (size_t)p.n_ctx * half;
    if (r) {
        r->cs = ls_malloc(cnt * sizeof(float));
        r->sn = ls_malloc(cnt * sizeof(float));
    }
    if (!r || !r->cs || !r->sn) {
        ls_rope_free(r);
        ls_err_set(err, LS_E_NOMEM, "out of memory for RoPE tables (%d positions x %zu)", p.n_ctx, half);
        return NULL;
    }
    r->p = p;
    for (size_t i = 0; i < half; i++) {
        double inv_freq = pow((double)p.freq_base, -2.0 * (double)i / (double)p.head_dim);
        for (int32_t pos = 0; pos < p.n_ctx; pos++) {
            double theta = (double)pos * (double)p.freq_scale * inv_freq;
            r->cs[(size_t)pos * half + i] = (float)cos(theta);
            r->sn[(size_t)pos * half + i] = (float)sin(theta);
        }
    }
    return r;
}

void ls_rope_free(ls_rope *r) {
    if (!r) return;
    free(r->cs);
    free(r->sn);
    free(r);
}

typedef struct {
    const ls_kvtab *vt;
    const ls_rope *r;
    float *x;
    int64_t M;
    int n_heads, head_stride;
    const int32_t *pos;
} ls_rope_call;

static void ls_rope_task(void *arg, int ith, int nth) {
    ls_rope_call *c = arg;
    int half = c->r->p.head_dim / 2;
    for (int64_t m = c->M * ith / nth; m < c->M * (ith + 1) / nth; m++) {
        int32_t pos = c->pos[m];
        LS_ASSERT(pos >= 0 && pos < c->r->p.n_ctx);
        c->vt->rope_row(c->x + m * (int64_t)c->n_heads * c->head_stride, c->n_heads, c->head_stride,
                        c->r->p.head_dim, c->r->p.neox, c->r->cs + (size_t)pos * half, c->r->sn + (size_t)pos * half);
    }
}

void ls_rope_apply(const ls_kctx *kc, const ls_rope *r, float *x, int64_t M, int n_heads, int head_stride,
                   const int32_t *pos) {
    LS_ASSERT(kc && r && x && pos && head_stride >= r->p.head_dim && n_heads > 0);
    ls_rope_call c = {ls_kvtab_for(kc->isa), r, x, M, n_heads, head_stride, pos};
    ls_pool_run(ls_pool_for(kc, M * n_heads * r->p.head_dim * 4), ls_rope_task, &c);
}

/* ---- attention ------------------------------------------------------------ */
/* Room for LS_ATTN_HMAX heads' scores (heads sharing a kv head are computed together). */
size_t ls_attention_scratch_floats(int64_t n_keys) { return LS_ATTN_HMAX * (((size_t)n_keys + 15) & ~(size_t)15); }

typedef struct {
    const ls_kvtab *vt;
    ls_isa isa;
    const float *q;
    int64_t M;
    const int32_t *pos;
    const ls_kv_view *kv;
    int n_head, n_kv_head, head_dim;
    float scale;
    float *out, *scratch;
    size_t per_thread;
    int64_t next; /* the next unit to claim: threads take units one at a time (a slowed
                   * thread takes fewer); each unit's bits do not depend on who runs it */
} ls_attn_call;

/* AVX-512: units of (row, kv head, batch of <= LS_ATTN_HMAX query heads of that kv head). */
static void ls_attn_task_grouped(ls_attn_call *c, int ith, int nth) {
    int grp = c->n_head / c->n_kv_head;
    int nbat = (grp + LS_ATTN_HMAX - 1) / LS_ATTN_HMAX;
    int64_t per_m = (int64_t)c->n_kv_head * nbat, total = c->M * per_m;
    float *scores = c->scratch + (size_t)ith * c->per_thread;
    size_t per_head = c->per_thread / LS_ATTN_HMAX;
    int kv_stride = c->n_kv_head * c->head_dim;
    (void)nth;
    for (int64_t t; (t = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED)) < total;) {
        int64_t m = t / per_m;
        int kvh = (int)(t % per_m) / nbat, bi = (int)(t % per_m) % nbat;
        int h0 = kvh * grp + bi * LS_ATTN_HMAX;
        int nh = grp - bi * LS_ATTN_HMAX < LS_ATTN_HMAX ? grp - bi * LS_ATTN_HMAX : LS_ATTN_HMAX;
        int64_t n_keys = (int64_t)c->pos[m] + 1;
        LS_ASSERT(ls_attention_scratch_floats(n_keys) <= c->per_thread);
        int64_t row = m * c->n_head * c->head_dim + (int64_t)h0 * c->head_dim;
        ls_attn_heads_avx512(nh, c->q + row, c->head_dim, n_keys, &c->kv[m], kvh * c->head_dim, kv_stride,
                             c->head_dim, c->scale, c->out + row, scores, per_head);
    }
}

static void ls_attn_task(void *arg, int ith, int nth) {
    ls_attn_call *c = arg;
    /* (not c->vt == ls_kvtab_for(LS_ISA_AVX512): that asserts the CPU has AVX-512) */
    if (c->isa == LS_ISA_AVX512 && c->head_dim % 16 == 0 && c->head_dim <= 64) {
        ls_attn_task_grouped(c, ith, nth);
        return;
    }
    int64_t total = c->M * c->n_head;
    float *scores = c->scratch + (size_t)ith * c->per_thread;
    int grp = c->n_head / c->n_kv_head;
    int kv_stride = c->n_kv_head * c->head_dim;
    (void)nth;
    for (int64_t t; (t = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED)) < total;) {
        int64_t m = t / c->n_head;
        int h = (int)(t % c->n_head), kvh = h / grp;
        int64_t n_keys = (int64_t)c->pos[m] + 1;
        LS_ASSERT(ls_attention_scratch_floats(n_keys) <= c->per_thread);
        int64_t row = m * c->n_head * c->head_dim + (int64_t)h * c->head_dim;
        c->vt->attn_head(c->q + row, n_keys, &c->kv[m], kvh * c->head_dim, kv_stride, c->head_dim, c->scale,
                         c->out + row, scores);
    }
}

void ls_attention(const ls_kctx *kc, const float *q, int64_t M, const int32_t *pos, const ls_kv_view *kv,
                  int n_head, int n_kv_head, int head_dim, float scale, float *out, float *scratch,
                  size_t scratch_floats_per_thread) {
    LS_ASSERT(kc && q && pos && kv && out && scratch);
    LS_ASSERT(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && head_dim > 0);
    for (int64_t m = 0; m < M; m++) LS_ASSERT(pos[m] >= 0 && kv[m].block_shift >= 4 && kv[m].block_shift < 31);
    ls_attn_call c = {ls_kvtab_for(kc->isa), kc->isa, q, M, pos, kv, n_head, n_kv_head, head_dim,
                      scale, out, scratch, scratch_floats_per_thread, 0};
    int64_t work = 0;
    for (int64_t m = 0; m < M; m++) work += ((int64_t)pos[m] + 1) * n_head * head_dim * 2;
    ls_pool_run(ls_pool_for(kc, work), ls_attn_task, &c);
}
