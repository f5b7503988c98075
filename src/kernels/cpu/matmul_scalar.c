/* matmul_scalar.c - the canonical matmul recipe in plain C: the definition.
 * Every step is written out as in docs/numerics.md; -ffp-contract=off keeps each
 * * and + a separately rounded operation, and fmaf() is the only fused one. */
#include <math.h>

#include "kernels/cpu/internal.h"

/* Integer codes u[32] of unit l of a group record with L lanes. */
static void ls_unit_codes(ls_storage st, const ls_rec *r, uint32_t L, uint32_t l, const uint8_t *rec, int u[32]) {
    const uint8_t *bits = rec + r->bits;
    if (st == LS_ST_BYTE) {
        for (int i = 0; i < 32; i++) u[i] = bits[((i / 4) * L + l) * 4 + i % 4];
        return;
    }
    for (int i = 0; i < 16; i++) {
        uint8_t v = bits[((i / 4) * L + l) * 4 + i % 4];
        u[i] = v & 0xF;
        u[i + 16] = v >> 4;
    }
    if (st == LS_ST_Q6) {
        const uint8_t *hb = rec + r->hb;
        for (int i = 0; i < 32; i++) {
            int s = i / 4, h = s / 4, k = s % 4;
            u[i] |= ((hb[(h * L + l) * 4 + i % 4] >> (2 * k)) & 3) << 4;
        }
    }
}

/* c_b for unit l of the record against activation block b (step 2: the type's row). */
static float ls_unit_c(const ls_wmat *w, const ls_rec *r, uint32_t L, uint32_t l, const uint8_t *rec,
                       const ls_xq *xr, int64_t b) {
    int u[32], q[32];
    const int8_t *qg = xr->q + (b / LS_GROUP) * LS_GROUP * 32;
    for (int i = 0; i < 32; i++) q[i] = qg[((i / 4) * L + l) * 4 + i % 4];
    ls_unit_codes(w->st, r, L, l, rec, u);
    return w->wt->unit_c(r, l, rec, u, q, xr->dx[b], xr->sx[b]);
}

/* One output element of a quantized matrix: steps 2-4. */
static float ls_dot_q_scalar(const ls_wmat *w, const uint8_t *wrow, const ls_xq *xr) {
    float S[LS_NGRP];
    for (int g = 0; g < LS_NGRP; g++) S[g] = 0.0f;
    for (int64_t b = 0; b < w->nb; b++) {
        int64_t G = b / LS_GROUP;
        bool full = (G + 1) * LS_GROUP <= w->nb;
        const ls_rec *r = full ? &w->rec16 : &w->rec_tail;
        uint32_t L = full ? LS_GROUP : (uint32_t)w->tail;
        float c = ls_unit_c(w, r, L, (uint32_t)(b % LS_GROUP), wrow + (size_t)G * w->rec16.size, xr, b);
        S[b % LS_NGRP] = S[b % LS_NGRP] + c;
    }
    return ls_tree(S, LS_NGRP);
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
    for (int64_t m = 0; m < job->M; m++) {
        float *y = job->y + m * w->N;
        if (w->st == LS_ST_FLOAT) {
            const float *x = job->x + m * w->K;
            for (int64_t n = n0; n < n1; n++) y[n] = ls_dot_f_scalar(w, w->data + (size_t)n * w->row_bytes, x);
        } else {
            ls_xq xr = ls_xq_row(job->xq, w->K, m);
            for (int64_t n = n0; n < n1; n++) y[n] = ls_dot_q_scalar(w, w->data + (size_t)n * w->row_bytes, &xr);
        }
    }
}

#define LS_S_ENTRY(T, nm) \
    void ls_mm_##nm##_scalar(const ls_mm_job *job, int64_t n0, int64_t n1) { \
        LS_ASSERT(job->w->type == (T));                                       \
        ls_mm_scalar(job, n0, n1);                                            \
    }
LS_WTYPE_LIST(LS_S_ENTRY)
