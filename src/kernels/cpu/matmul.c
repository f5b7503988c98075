/* matmul.c - ls_matmul: activation quantization (once per row per call) and the
 * split of N across the pool.  The per-ISA kernels live in matmul_<isa>.c. */
#include <float.h>
#include <math.h>

#include "kernels/cpu/internal.h"

size_t ls_matmul_scratch_bytes(int64_t M, int64_t K) {
    /* quantized rows, alignment + slack for wide tail loads, the tile-packed copy */
    return (size_t)M * ls_xq_row_bytes(K) + 64 + 128 + ls_xp_bytes(M, K) + 64;
}

/* Rounds to nearest, ties to even, for |v| < 2^22 (same as nearbyintf). */
static inline int32_t ls_rint_small(float v) {
    float t = v + 12582912.0f; /* 1.5 * 2^23 */
    return (int32_t)(ls_k_f2bits(t) - 0x4B400000u);
}

/* Step 1 of the canonical recipe for one row (docs/numerics.md). */
void ls_quantize_x_row(const float *x, int64_t K, void *row_out) {
    int64_t nb = K / 32;
    uint8_t *base = row_out;
    int8_t *q = (int8_t *)base;
    float *dx = (float *)(base + K), *sx = dx + nb;
    int32_t *sq = (int32_t *)(sx + nb), *sqlo = sq + nb;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        bool finite = true;
        for (int i = 0; i < 32; i++) {
            float a = fabsf(xb[i]);
            finite = finite && a <= FLT_MAX; /* false for inf and NaN */
            amax = a > amax ? a : amax;
        }
        int32_t s = 0, slo = 0;
        float d = 0.0f;
        if (finite && amax >= LS_QX_TINY) {
            d = amax / 127.0f;
            float id = 127.0f / amax;
            for (int i = 0; i < 32; i++) {
                int32_t v = ls_rint_small(xb[i] * id); /* |x * id| <= 127 * (1 + 2^-23) */
                q[ls_xq_chunk(nb, b, i / 4) + i % 4] = (int8_t)v;
                s += v;
                if (i < 16) slo += v;
            }
        } else { /* all zero or tiny (q = 0, d = 0), or non-finite input (q = 0, d = NaN) */
            for (int i = 0; i < 32; i++) q[ls_xq_chunk(nb, b, i / 4) + i % 4] = 0;
            if (!finite) d = NAN;
        }
        dx[b] = d;
        sx[b] = d * (float)s;
        sq[b] = s;
        sqlo[b] = slo;
    }
}

/* ---- kernel families ----------------------------------------------------------- */
#include <string.h>

const ls_mm_family ls_mm_wide = {"wide", true, NULL}, ls_mm_narrow = {"narrow", true, NULL};

const ls_mm_family *ls_mm_family_builtin(const char *name) {
    if (name && !strcmp(name, ls_mm_wide.name)) return &ls_mm_wide;
    if (name && !strcmp(name, ls_mm_narrow.name)) return &ls_mm_narrow;
    return NULL;
}

typedef struct {
    const ls_kctx *kc;
    const ls_kvtab *vt;
    const ls_mm_family *fam;        /* family of this call's rows */
    int n;                          /* matrices sharing x */
    ls_mm_job job[LS_MATMUL_MULTI_MAX];
    const float *x;
    void *scratch;
    uint8_t *xp;                    /* the tile-packed copy, or NULL */
    int64_t *claimed;               /* work items handed out so far (ls_mm_task) */
    int64_t mblk;                   /* rows per row block (ls_mm_task), > 0 */
    int64_t qnext;                  /* 4-row groups claimed so far (ls_mm_quant_task) */
} ls_mm_call;

static void ls_mm_quant_task(void *arg, int ith, int nth) {
    ls_mm_call *c = arg;
    int64_t M = c->job[0].M, K = c->job[0].w->K;
    (void)ith;
    /* rows in groups of 4: their packed records fill whole cache lines */
    for (int64_t a, b; ls_claim(&c->qnext, (M + 3) / 4, nth, 1, &a, &b);)
        for (int64_t m = 4 * a; m < 4 * b && m < M; m++) {
            uint8_t *row = (uint8_t *)c->scratch + (size_t)m * ls_xq_row_bytes(K);
            uint8_t *rec = c->xp ? c->xp + (size_t)(m / LS_XP_R) * ls_xp_tile_bytes(K) +
                                       (size_t)(m % LS_XP_R) * LS_XP_ROW
                                 : NULL;
            c->vt->quantize_row(c->x + m * K, K, row, rec); /* same bits on every ISA */
        }
}

static void ls_mm_range(const ls_mm_call *c, int i, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

/* Columns go out in panels of 16, the call's matrices one after another, in shrinking
 * pieces (a 1/(2 nth) share of what is left, at least LS_MM_MIN_PANELS) claimed from one
 * counter: a thread slowed by a neighbour on its core (shared hosts) takes fewer, instead
 * of the others waiting for its fixed half.  Any split gives the same bits: each output
 * column is computed by one thread with the same per-row recipe.
 * With many rows the work items are (row block, panel) pairs, row block major (c->mblk,
 * ls_mm_run_rows): all threads work on one row block, whose packed activations stay in
 * cache, until its panels are all handed out, and only then on the next.  Otherwise every
 * L2 block of panels streams all M rows again (11 MiB at M = 512, K = 14336).  Measured on
 * a 2-vCPU Zen 4 guest, 2 threads, M = 512, blocks of 2 MiB: Q6_K 14336 -> 4096 0.83x the
 * time at AVX2 and 0.88x at AVX-512 (0.57x while the host's cache was busy), Q4_K 4096 ->
 * 2 x 14336 0.95-0.98x; an 8B pp512 0.92x at AVX2 and 0.91x at AVX-512.  Here, not in each
 * ISA's panel loop, so that every panel kernel gets it and the threads share one block. */
#define LS_MM_MIN_PANELS 8
#define LS_MM_XBLK (2 * 1024 * 1024) /* bytes of packed activations per row block */
static void ls_mm_task(void *arg, int ith, int nth) {
    ls_mm_call *c = arg;
    (void)ith;
    const int64_t M = c->job[0].M, nmb = (M + c->mblk - 1) / c->mblk;
    int64_t total = 0;
    for (int i = 0; i < c->n; i++) total += (c->job[i].w->N + 15) / 16;
    /* items: row block r's panel p is r * total + p; a claim stays inside one row block */
    for (int64_t q0, q1; ls_claim_seg(c->claimed, nmb * total, total, nth, LS_MM_MIN_PANELS, &q0, &q1);) {
        const int64_t m0 = q0 / total * c->mblk, m1 = m0 + c->mblk < M ? m0 + c->mblk : M;
        const int64_t p0 = q0 % total, p1 = p0 + (q1 - q0);
        for (int64_t i = 0, base = 0; i < c->n && base < p1; i++) { /* panels [p0, p1) */
            int64_t N = c->job[i].w->N, np = (N + 15) / 16;
            int64_t a = p0 > base ? p0 - base : 0, b = p1 - base < np ? p1 - base : np;
            if (a < b) ls_mm_range(c, (int)i, m0, m1, a * 16, b * 16 < N ? b * 16 : N);
            base += np;
        }
    }
}

/* Rows [m0, m1) x columns [n0, n1) of the call's matrix i. */
static void ls_mm_range(const ls_mm_call *c, int i, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const int64_t N = c->job[i].w->N;
    ls_mm_job rows = c->job[i];
    if (m0 > 0 || m1 < rows.M) { /* a row block: the same rows as ls_mm_run_rows gives */
        const int64_t K = rows.w->K;
        rows.M = m1 - m0;
        rows.x += m0 * K;
        rows.y += m0 * N;
        if (rows.xq) rows.xq = (const uint8_t *)rows.xq + (size_t)m0 * ls_xq_row_bytes(K);
        rows.xp_row0 += m0;
    }
    if (c->fam->run) { /* a caller-made family */
        c->fam->run(rows.w, rows.x, rows.M, rows.y, n0, n1);
        return;
    }
    const ls_mm_fn mm = rows.w->wt->mm[c->kc->isa];
    if (!(c->kc->narrow || c->fam == &ls_mm_narrow) || rows.M == 1) {
        mm(&rows, n0, n1);
        return;
    }
    /* Narrow pin (benchmarks only): each row alone through the M = 1 kernel. */
    const ls_mm_job *jb = &rows;
    int64_t K = jb->w->K;
    for (int64_t m = 0; m < jb->M; m++) {
        ls_mm_job one = *jb;
        one.M = 1;
        one.x = jb->x + m * K;
        one.xq = jb->xq ? (const uint8_t *)jb->xq + (size_t)m * ls_xq_row_bytes(K) : NULL;
        one.xp_row0 = jb->xp_row0 + m; /* (xp: the call's packed rows, this row among them) */
        one.y = jb->y + m * N;
        mm(&one, n0, n1);
    }
}

/* Rows [m0, m1) of a call, all with family fam; the quantized rows are at xq. */
static void ls_mm_run_rows(ls_mm_call *c, const ls_mm_family *fam, bool parity, int64_t m0, int64_t m1, const float *x, float *const *y) {
    ls_mm_call r = *c;
    r.fam = fam;
    for (int i = 0; i < r.n; i++) {
        int64_t K = r.job[i].w->K, N = r.job[i].w->N;
        r.job[i].M = m1 - m0;
        r.job[i].x = x + m0 * K;
        r.job[i].y = y[i] + m0 * N;
        if (c->job[i].xq) r.job[i].xq = (const uint8_t *)c->job[i].xq + (size_t)m0 * ls_xq_row_bytes(K);
        r.job[i].xp_row0 = m0;
    }
    int64_t claimed = 0;
    r.claimed = &claimed;
    /* row blocks (ls_mm_task) of at most LS_MM_XBLK bytes of packed activations, whole
     * packed tiles, as few as that allows and of near-equal size; one block of all the
     * rows where nothing reads the packed copy */
    r.mblk = r.job[0].M;
    if (r.xp && !fam->run) {
        const int64_t M = r.job[0].M;
        int64_t mblk = (int64_t)(LS_MM_XBLK / ls_xp_tile_bytes(r.job[0].w->K)) * LS_XP_R;
        if (mblk < LS_XP_R) mblk = LS_XP_R;
        const int64_t nmb = (M + mblk - 1) / mblk;
        r.mblk = ((M + nmb - 1) / nmb + LS_XP_R - 1) / LS_XP_R * LS_XP_R;
    }
    ls_pool_run_dyn(r.kc->pool, ls_mm_task, &r);
    if (r.kc->rows) __atomic_fetch_add(&r.kc->rows[parity ? 0 : 1], (uint64_t)(m1 - m0), __ATOMIC_RELAXED);
}

void ls_matmul_multi_rows(const ls_kctx *kc, int n, const ls_wmat *const *w, const float *x, int64_t M,
                          float *const *y, const uint8_t *need) {
    LS_ASSERT(kc && w && x && y && M >= 0 && n >= 1 && n <= LS_MATMUL_MULTI_MAX);
    if (M == 0) return;
    ls_mm_call c;
    c.kc = kc;
    c.vt = ls_kvtab_for(kc->isa);
    c.n = n;
    c.x = x;
    c.scratch = NULL;
    c.xp = NULL;
    c.fam = NULL;
    const ls_mm_family *fp = kc->fam_parity ? kc->fam_parity : &ls_mm_wide, *ff = kc->fam ? kc->fam : &ls_mm_wide;
    bool quant = false, builtin = false;
    for (int64_t m = 0; m < M; m++) builtin = builtin || !(need && !need[m] ? ff : fp)->run;
    for (int i = 0; i < n; i++) {
        LS_ASSERT(w[i] && y[i] && w[i]->K == w[0]->K);
        LS_ASSERT(ls_wmat_prepared(w[i], kc->isa)); /* ls_wmat_prepare ran for this ISA */
        c.job[i].w = w[i];
        c.job[i].x = x;
        c.job[i].xq = NULL;
        c.job[i].xp = NULL;
        c.job[i].xp_row0 = 0;
        c.job[i].M = M;
        c.job[i].y = y[i];
        quant = quant || w[i]->st != LS_ST_FLOAT;
    }
    if (quant && builtin) { /* the canonical families read quantized activations */
        LS_ASSERT(kc->scratch && kc->scratch_bytes >= ls_matmul_scratch_bytes(M, w[0]->K));
        c.scratch = (void *)(((uintptr_t)kc->scratch + 63) & ~(uintptr_t)63);
        if (c.vt->packs_rows) /* the panel tiles read the packed copy (M = 1 too) */
            c.xp = (uint8_t *)(((uintptr_t)c.scratch + (size_t)M * ls_xq_row_bytes(w[0]->K) + 128 + 63) &
                               ~(uintptr_t)63);
        for (int i = 0; i < n; i++) {
            c.job[i].xq = c.scratch;
            c.job[i].xp = c.xp;
        }
        /* in parallel from two 4-row groups on (a verify block of 5-8 rows: ~1 ns per
         * element on one thread is ~0.6 ms of an 8-row forward) */
        c.qnext = 0;
        if (M > 4 && kc->pool && ls_pool_size(kc->pool) > 1)
            ls_pool_run_dyn(kc->pool, ls_mm_quant_task, &c);
        else
            ls_mm_quant_task(&c, 0, 1);
    }
    /* Runs of consecutive rows with the same family, each one dispatch. */
    for (int64_t m0 = 0; m0 < M;) {
        const bool par = !need || need[m0];
        int64_t m1 = m0 + 1;
        while (m1 < M && (!need || need[m1]) == par) m1++;
        ls_mm_run_rows(&c, par ? fp : ff, par, m0, m1, x, y);
        m0 = m1;
    }
}

void ls_matmul_multi(const ls_kctx *kc, int n, const ls_wmat *const *w, const float *x, int64_t M,
                     float *const *y) {
    ls_matmul_multi_rows(kc, n, w, x, M, y, NULL);
}

void ls_matmul(const ls_kctx *kc, const ls_wmat *w, const float *x, int64_t M, float *y) {
    LS_ASSERT(kc && w && x && y && M >= 0);
    ls_matmul_multi(kc, 1, &w, x, M, &y);
}
