/* matmul_scalar.c - the canonical matmul recipe in plain C: the definition.
 * It reads the same repacked layout as the SIMD kernels (the panel copy; MXFP4's group
 * records), one unit at a time.  Every step is written out as in docs/numerics.md; -ffp-contract=off keeps each
 * * and + a separately rounded operation, and fmaf() is the only fused one. */
#include <math.h>

#include "kernels/cpu/internal.h"

/* Integer codes u[32] of unit l of a group record with L lanes. */
static void ls_unit_codes(ls_storage st, const ls_rec *r, uint32_t L, uint32_t l, const uint8_t *rec, int16_t u[32]) {
    const uint8_t *bits = rec + r->bits;
    if (st == LS_ST_BYTE) {
        for (int i = 0; i < 32; i++) u[i] = bits[((i / 4) * L + l) * 4 + i % 4];
        return;
    }
    for (int i = 0; i < 16; i++) {
        uint8_t v = bits[((i / 4) * L + l) * 4 + i % 4];
        u[i] = (int16_t)(v & 0xF);
        u[i + 16] = (int16_t)(v >> 4);
    }
    if (st == LS_ST_Q6) {
        const uint8_t *hb = rec + r->hb;
        for (int i = 0; i < 32; i++) {
            int s = i / 4, h = s / 4, k = s % 4;
            u[i] = (int16_t)(u[i] | ((hb[(h * L + l) * 4 + i % 4] >> (2 * k)) & 3) << 4);
        }
    }
}

/* Activation codes q[32] of unit b in natural order.  nat: the row already in natural
 * order (ls_xq_natural), or NULL to undo the group layout here. */
static void ls_unit_q(const ls_wmat *w, const ls_xq *xr, const int8_t *nat, int64_t b, int16_t q[32]) {
    if (nat) {
        for (int i = 0; i < 32; i++) q[i] = nat[b * 32 + i];
        return;
    }
    int64_t G = b / LS_GROUP;
    uint32_t L = (G + 1) * LS_GROUP <= w->nb ? LS_GROUP : (uint32_t)w->tail, l = (uint32_t)(b % LS_GROUP);
    const int8_t *qg = xr->q + G * LS_GROUP * 32;
    for (int i = 0; i < 32; i++) q[i] = qg[((i / 4) * L + l) * 4 + i % 4];
}

/* The whole row in natural order (nat[b * 32 + i]): the group layout undone once per
 * row rather than once per output. */
static void ls_xq_natural(const ls_wmat *w, const ls_xq *xr, int8_t *nat) {
    for (int64_t b = 0; b < w->nb; b++) {
        int16_t q[32];
        ls_unit_q(w, xr, NULL, b, q);
        for (int i = 0; i < 32; i++) nat[b * 32 + i] = (int8_t)q[i];
    }
}

/* Unit b of weight row n: its codes u[32] and raw scale fields f, from the panel copy
 * (the panel types) or the group records (MXFP4). */
static void ls_weight_unit(const ls_wmat *w, int64_t n, int64_t b, ls_unit *f, int16_t u[32]) {
    if (w->panel) {
        ls_panel_unit(w, n, b, f);
        for (int i = 0; i < 32; i++) u[i] = f->u[i];
        return;
    }
    int64_t G = b / LS_GROUP;
    bool full = (G + 1) * LS_GROUP <= w->nb;
    const ls_rec *r = full ? &w->rec16 : &w->rec_tail;
    uint32_t L = full ? LS_GROUP : (uint32_t)w->tail, l = (uint32_t)(b % LS_GROUP);
    const uint8_t *rec = w->data + (size_t)n * w->row_bytes + (size_t)G * w->rec16.size;
    ls_unit_codes(w->st, r, L, l, rec, u);
    w->wt->get_scales(r, l, rec, f);
}

/* Output n of rows 0..M-1 of a quantized matrix: steps 2-4.  Each weight unit's codes
 * are decoded once for all the rows; row m's sums S[m][g] take the units in order b. */
static void ls_dot_q_scalar(const ls_wmat *w, int64_t n, int64_t M, const ls_xq *xr, const int8_t *nat, float *S,
                            float *y, int64_t ldy) {
    for (int64_t i = 0; i < M * LS_NGRP; i++) S[i] = 0.0f;
    for (int64_t b = 0; b < w->nb; b++) {
        ls_unit f;
        int16_t u[32], q[32];
        ls_weight_unit(w, n, b, &f, u);
        for (int64_t m = 0; m < M; m++) { /* c_b (step 2: the type's row) */
            ls_unit_q(w, &xr[m], nat ? nat + m * w->nb * 32 : NULL, b, q);
            float c = w->wt->unit_c(&f, u, q, xr[m].dx[b], xr[m].sx[b]);
            S[m * LS_NGRP + b % LS_NGRP] = S[m * LS_NGRP + b % LS_NGRP] + c;
        }
    }
    for (int64_t m = 0; m < M; m++) y[m * ldy] = ls_tree(S + m * LS_NGRP, LS_NGRP);
}

static inline float ls_bf16f(uint16_t h) { return ls_k_bits2f((uint32_t)h << 16); }

/* One output element of a float matrix: 16 fma lanes, then the tree. */
static float ls_dot_f_scalar(const ls_wmat *w, const uint8_t *wrow, const float *x) {
    float acc[LS_FLANES];
    for (int l = 0; l < LS_FLANES; l++) acc[l] = 0.0f;
    int64_t K = w->K;
    switch (w->type) {
    case LS_TYPE_F32: {
        const float *wf = (const float *)wrow;
        for (int64_t k = 0; k < K; k++) acc[k % LS_FLANES] = fmaf(x[k], wf[k], acc[k % LS_FLANES]);
        break;
    }
    case LS_TYPE_F16:
        for (int64_t k = 0; k < K; k++)
            acc[k % LS_FLANES] = fmaf(x[k], ls_k_fp16(ls_k_rd16(wrow + 2 * k)), acc[k % LS_FLANES]);
        break;
    case LS_TYPE_BF16:
        for (int64_t k = 0; k < K; k++)
            acc[k % LS_FLANES] = fmaf(x[k], ls_bf16f(ls_k_rd16(wrow + 2 * k)), acc[k % LS_FLANES]);
        break;
    default: LS_ASSERT(!"ls_dot_f_scalar: type");
    }
    return ls_tree(acc, LS_FLANES);
}

static void ls_mm_scalar(const ls_mm_job *job, int64_t n0, int64_t n1) {
    const ls_wmat *w = job->w;
    if (w->st == LS_ST_FLOAT) {
        for (int64_t m = 0; m < job->M; m++) {
            float *y = job->y + m * w->N;
            const float *x = job->x + m * w->K;
            for (int64_t n = n0; n < n1; n++) y[n] = ls_dot_f_scalar(w, w->data + (size_t)n * w->row_bytes, x);
        }
        return;
    }
    /* rows in slices of up to MS, their codes un-grouped into 64 KiB of stack (a row
     * longer than that is read in place) */
    enum { MS = 64, NAT = 65536 };
    int8_t nat[NAT];
    float S[MS * LS_NGRP];
    ls_xq xr[MS];
    const int64_t rowb = w->nb * 32;
    const bool in_place = rowb > NAT;
    const int64_t ms_max = in_place ? MS : (NAT / rowb < MS ? NAT / rowb : MS);
    for (int64_t m0 = 0; m0 < job->M; m0 += ms_max) {
        int64_t ms = job->M - m0 < ms_max ? job->M - m0 : ms_max;
        for (int64_t m = 0; m < ms; m++) {
            xr[m] = ls_xq_row(job->xq, w->K, m0 + m);
            if (!in_place) ls_xq_natural(w, &xr[m], nat + m * rowb);
        }
        for (int64_t n = n0; n < n1; n++)
            ls_dot_q_scalar(w, n, ms, xr, in_place ? NULL : nat, S, job->y + m0 * w->N + n, w->N);
    }
}

#define LS_S_ENTRY(T, nm) \
    void ls_mm_##nm##_scalar(const ls_mm_job *job, int64_t n0, int64_t n1) { \
        LS_ASSERT(job->w->type == (T));                                       \
        ls_mm_scalar(job, n0, n1);                                            \
    }
LS_WTYPE_LIST(LS_S_ENTRY)
