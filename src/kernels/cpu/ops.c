/* ops.c - the public per-row operations: argument checks, RoPE tables and the
 * split of rows (or row x head pairs) across the pool, claimed by the threads that
 * join (ls_pool_run_dyn, ls_claim).  Each row's result is computed by exactly one
 * thread with the per-ISA row kernel. */
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
    int64_t next; /* rows claimed so far */
} ls_rowop;

static void ls_rmsnorm_task(void *arg, int ith, int nth) {
    ls_rowop *o = arg;
    (void)ith;
    for (int64_t a, b; ls_claim(&o->next, o->M, nth, 1, &a, &b);)
        for (int64_t m = a; m < b; m++) o->vt->rmsnorm_row(o->x + m * o->n, o->w, o->eps, o->n, o->out + m * o->n);
}

static void ls_swiglu_task(void *arg, int ith, int nth) {
    ls_rowop *o = arg;
    (void)ith;
    for (int64_t a, b; ls_claim(&o->next, o->M, nth, 1, &a, &b);)
        for (int64_t m = a; m < b; m++) o->vt->swiglu_row(o->x + m * o->n, o->u + m * o->n, o->n, o->out + m * o->n);
}

/* Rows are split across threads only when there is enough work to pay for a wake-up. */
static ls_pool *ls_pool_for(const ls_kctx *kc, int64_t work) { return work >= 16384 ? kc->pool : NULL; }

/* Test-only faults (kernels.h): output 0 of each row one ulp off. */
static void ls_fault_ulp(float *out, int64_t M, int64_t n) {
    for (int64_t m = 0; m < M; m++) out[m * n] = nextafterf(out[m * n], INFINITY);
}

void ls_rmsnorm(const ls_kctx *kc, const float *x, const float *w, float eps, int64_t M, int64_t n, float *out) {
    LS_ASSERT(kc && x && w && out && n > 0 && M >= 0);
    ls_rowop o = {ls_kvtab_for(kc->isa), x, w, NULL, eps, M, n, out, 0};
    ls_pool_run_dyn(ls_pool_for(kc, M * n), ls_rmsnorm_task, &o);
    if ((kc->faults & LS_FAULT_THREADS) && kc->pool && ls_pool_size(kc->pool) > 1) ls_fault_ulp(out, M, n);
}

void ls_swiglu(const ls_kctx *kc, const float *gate, const float *up, int64_t M, int64_t n, float *out) {
    LS_ASSERT(kc && gate && up && out && n >= 0 && M >= 0);
    ls_rowop o = {ls_kvtab_for(kc->isa), gate, NULL, up, 0.0f, M, n, out, 0};
    ls_pool_run_dyn(ls_pool_for(kc, M * n * 8), ls_swiglu_task, &o);
    if ((kc->faults & LS_FAULT_ISA) && kc->isa != LS_ISA_SCALAR && n > 0) ls_fault_ulp(out, M, n);
}

/* ---- RoPE ------------------------------------------------------------------ */
struct ls_rope {
    ls_rope_params p;
    float *cs, *sn; /* (n_ctx, head_dim/2) */
};

/* The tables of positions 0..n_ctx-1: cs/sn[pos * head_dim/2 + i], in double then rounded
 * once.  The one definition: the CPU's ls_rope and the CUDA backend's tables (cuda_src.c)
 * both call it. */
void ls_rope_fill(ls_rope_params p, const float *factors, int32_t n_ctx, float *cs, float *sn) {
    size_t half = (size_t)p.head_dim / 2;
    /* YaRN (docs/numerics.md): the correction dims of beta_fast and beta_slow rotations,
     * the ramp between them, the magnitude scale; all in double like the rest. */
    double lo = 0.0, hi = 0.0, mscale = 1.0;
    if (p.yarn) {
        const double d = (double)p.head_dim, two_pi = 6.283185307179586476925;
        double cf = d * log((double)p.yarn_n_ctx_orig / ((double)p.yarn_beta_fast * two_pi)) / (2.0 * log((double)p.freq_base));
        double cs_ = d * log((double)p.yarn_n_ctx_orig / ((double)p.yarn_beta_slow * two_pi)) / (2.0 * log((double)p.freq_base));
        lo = floor(cf) > 0.0 ? floor(cf) : 0.0;
        hi = ceil(cs_) < d - 1.0 ? ceil(cs_) : d - 1.0;
        mscale = (double)p.yarn_attn_factor * (p.freq_scale < 1.0f ? 1.0 + 0.1 * log(1.0 / (double)p.freq_scale) : 1.0);
    }
    for (size_t i = 0; i < half; i++) {
        double inv_freq = pow((double)p.freq_base, -2.0 * (double)i / (double)p.head_dim);
        double ramp = 0.0; /* YaRN: 1 keeps the original angle, 0 takes the interpolated one */
        if (p.yarn) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            ramp = 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
        }
        for (int32_t pos = 0; pos < n_ctx; pos++) {
            double theta;
            if (p.yarn) {
                double extrap = (double)pos * inv_freq;
                if (factors) extrap /= (double)factors[i];
                double interp = (double)p.freq_scale * extrap;
                theta = interp * (1.0 - ramp) + extrap * ramp;
            } else {
                theta = (double)pos * (double)p.freq_scale * inv_freq;
                if (factors) theta /= (double)factors[i];
            }
            cs[(size_t)pos * half + i] = (float)(cos(theta) * mscale);
            sn[(size_t)pos * half + i] = (float)(sin(theta) * mscale);
        }
    }
}

ls_rope *ls_rope_create(ls_rope_params p, ls_err *err) { return ls_rope_create_factors(p, NULL, err); }

ls_rope *ls_rope_create_factors(ls_rope_params p, const float *factors, ls_err *err) {
    if (p.n_ctx < 1 || p.head_dim < 2 || p.head_dim % 2 != 0 || p.head_dim > 4096 || !(p.freq_base > 0.0f) ||
        !(p.freq_scale > 0.0f) ||
        (p.yarn && (p.yarn_n_ctx_orig < 1 || !(p.yarn_beta_fast > 0.0f) || !(p.yarn_beta_slow > 0.0f) ||
                    !(p.yarn_attn_factor > 0.0f) || p.freq_base == 1.0f))) {
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
    ls_rope_fill(p, factors, p.n_ctx, r->cs, r->sn);
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
    int64_t next; /* rows claimed so far */
} ls_rope_call;

static void ls_rope_task(void *arg, int ith, int nth) {
    ls_rope_call *c = arg;
    int half = c->r->p.head_dim / 2;
    (void)ith;
    for (int64_t a, b; ls_claim(&c->next, c->M, nth, 1, &a, &b);)
        for (int64_t m = a; m < b; m++) {
            int32_t pos = c->pos[m];
            LS_ASSERT(pos >= 0 && pos < c->r->p.n_ctx);
            c->vt->rope_row(c->x + m * (int64_t)c->n_heads * c->head_stride, c->n_heads, c->head_stride,
                            c->r->p.head_dim, c->r->p.neox, c->r->cs + (size_t)pos * half,
                            c->r->sn + (size_t)pos * half);
        }
}

void ls_rope_apply(const ls_kctx *kc, const ls_rope *r, float *x, int64_t M, int n_heads, int head_stride,
                   const int32_t *pos) {
    LS_ASSERT(kc && r && x && pos && head_stride >= r->p.head_dim && n_heads > 0);
    ls_rope_call c = {ls_kvtab_for(kc->isa), r, x, M, n_heads, head_stride, pos, 0};
    ls_pool_run_dyn(ls_pool_for(kc, M * n_heads * r->p.head_dim * 4), ls_rope_task, &c);
}

/* ---- attention ------------------------------------------------------------ */
/* Room for LS_ATTN_VMAX query vectors' scores (AVX-512 computes a block of rows x heads
 * sharing a kv head together). */
size_t ls_attention_scratch_floats(int64_t n_keys) { return LS_ATTN_VMAX * (((size_t)n_keys + 15) & ~(size_t)15); }

/* Row blocks per pool dispatch of the AVX-512 path (a call with more runs several). */
#define LS_ATTN_WIN 256

typedef struct {
    const ls_kvtab *vt;
    const float *q;
    int64_t M;
    const int32_t *pos;
    const ls_kv_view *kv;
    int n_head, n_kv_head, head_dim;
    float scale;
    int32_t window;
    float *out, *scratch;
    size_t per_thread;
    const int64_t *bstart; /* AVX-512: row blocks [bstart[i], bstart[i + 1]) */
    int64_t nblk;
    int64_t next; /* the next unit to claim: threads take units one at a time (a slowed
                   * thread takes fewer); each unit's bits do not depend on who runs it */
} ls_attn_call;

/* ISAs with a block kernel (AVX-512): units of (row block, kv head, batch of <= LS_ATTN_HMAX query heads of that
 * kv head).  A row block is up to LS_ATTN_VMAX / heads-per-batch rows of one sequence. */
static void ls_attn_task_grouped(void *arg, int ith, int nth) {
    ls_attn_call *c = arg;
    int grp = c->n_head / c->n_kv_head;
    int nbat = (grp + LS_ATTN_HMAX - 1) / LS_ATTN_HMAX;
    int64_t per_b = (int64_t)c->n_kv_head * nbat, total = c->nblk * per_b;
    float *scores = c->scratch + (size_t)ith * c->per_thread;
    size_t per_vec = c->per_thread / LS_ATTN_VMAX;
    int64_t row_stride = (int64_t)c->n_head * c->head_dim;
    (void)nth;
    for (int64_t t; (t = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED)) < total;) {
        int64_t m0 = c->bstart[t / per_b];
        int nr = (int)(c->bstart[t / per_b + 1] - m0);
        int kvh = (int)(t % per_b) / nbat, bi = (int)(t % per_b) % nbat;
        int h0 = kvh * grp + bi * LS_ATTN_HMAX;
        int nh = grp - bi * LS_ATTN_HMAX < LS_ATTN_HMAX ? grp - bi * LS_ATTN_HMAX : LS_ATTN_HMAX;
        for (int r = 0; r < nr; r++)
            LS_ASSERT(ls_attention_scratch_floats((int64_t)c->pos[m0 + r] + 1 - ls_attn_first(c->pos[m0 + r], c->window)) <=
                      c->per_thread);
        int64_t off = m0 * row_stride + (int64_t)h0 * c->head_dim;
        const ls_kv_view *kv = &c->kv[m0];
        c->vt->attn_block(nr, nh, c->q + off, row_stride, c->head_dim, c->pos + m0, c->window, kv, kvh * kv->head_stride,
                             kv->row_stride, c->head_dim, c->scale, c->out + off, scores, per_vec);
    }
}

static void ls_attn_task(void *arg, int ith, int nth) {
    ls_attn_call *c = arg;
    int64_t total = c->M * c->n_head;
    float *scores = c->scratch + (size_t)ith * c->per_thread;
    int grp = c->n_head / c->n_kv_head;
    (void)nth;
    for (int64_t t; (t = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED)) < total;) {
        int64_t m = t / c->n_head;
        int h = (int)(t % c->n_head), kvh = h / grp;
        int64_t n_keys = (int64_t)c->pos[m] + 1, k0 = ls_attn_first(c->pos[m], c->window);
        LS_ASSERT(ls_attention_scratch_floats(n_keys - k0) <= c->per_thread);
        int64_t row = m * c->n_head * c->head_dim + (int64_t)h * c->head_dim;
        const ls_kv_view *kv = &c->kv[m];
        c->vt->attn_head(c->q + row, k0, n_keys, kv, kvh * kv->head_stride, kv->row_stride, c->head_dim, c->scale,
                         c->out + row, scores);
    }
}

static bool ls_kv_same(const ls_kv_view *a, const ls_kv_view *b) {
    return a->k == b->k && a->v == b->v && a->blocks == b->blocks && a->block_stride == b->block_stride &&
           a->block_shift == b->block_shift && a->row_stride == b->row_stride && a->head_stride == b->head_stride;
}

void ls_attention(const ls_kctx *kc, const float *q, int64_t M, const int32_t *pos, const ls_kv_view *kv,
                  int n_head, int n_kv_head, int head_dim, float scale, int32_t window, float *out, float *scratch,
                  size_t scratch_floats_per_thread) {
    LS_ASSERT(kc && q && pos && kv && out && scratch);
    LS_ASSERT(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && head_dim > 0 && window >= 0);
    for (int64_t m = 0; m < M; m++)
        LS_ASSERT(pos[m] >= 0 && kv[m].block_shift >= 4 && kv[m].block_shift < 31 && kv[m].row_stride >= head_dim &&
                  kv[m].head_stride >= 0);
    ls_attn_call c = {ls_kvtab_for(kc->isa), q, M, pos, kv, n_head, n_kv_head, head_dim,
                      scale, window, out, scratch, scratch_floats_per_thread, NULL, 0, 0};
    int64_t work = 0;
    for (int64_t m = 0; m < M; m++) work += ((int64_t)pos[m] + 1 - ls_attn_first(pos[m], window)) * n_head * head_dim * 2;
    ls_pool *pool = ls_pool_for(kc, work);
    if (!(c.vt->attn_block && head_dim % 16 == 0 && head_dim <= c.vt->attn_block_head_dim)) {
        ls_pool_run_dyn(pool, ls_attn_task, &c);
        return;
    }
    /* Consecutive rows with the same view (a sequence's prefill chunk or verify block)
     * form runs; a run is cut into near-equal blocks of at most rmax rows. */
    int grp = n_head / n_kv_head, hb = grp < LS_ATTN_HMAX ? grp : LS_ATTN_HMAX;
    int64_t rmax = LS_ATTN_VMAX / hb, bstart[LS_ATTN_WIN + 1];
    for (int64_t m = 0; m < M;) {
        int64_t nb = 0;
        bstart[0] = m;
        while (m < M && nb < LS_ATTN_WIN) {
            int64_t e = m + 1;
            while (e < M && e - m < (LS_ATTN_WIN - nb) * rmax && ls_kv_same(&kv[e], &kv[m])) e++;
            int64_t n = e - m, k = (n + rmax - 1) / rmax;
            for (int64_t i = 1; i <= k; i++) bstart[nb + i] = m + n * i / k;
            nb += k;
            m = e;
        }
        c.bstart = bstart;
        c.nblk = nb;
        c.next = 0;
        ls_pool_run_dyn(pool, ls_attn_task_grouped, &c);
    }
}
