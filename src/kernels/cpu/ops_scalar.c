/* ops_scalar.c - per-row operations in plain C: the definitions (docs/numerics.md). */
#include <math.h>

#include "kernels/cpu/internal.h"

/* The float dot product recipe: 16 fma lanes (lane k mod 16, increasing k), then the tree. */
static float ls_dot16(const float *a, const float *b, int64_t n) {
    float acc[LS_FLANES];
    for (int l = 0; l < LS_FLANES; l++) acc[l] = 0.0f;
    for (int64_t k = 0; k < n; k++) acc[k % LS_FLANES] = fmaf(a[k], b[k], acc[k % LS_FLANES]);
    return ls_tree(acc, LS_FLANES);
}

void ls_rmsnorm_row_scalar(const float *x, const float *w, float eps, int64_t n, float *out) {
    float ss = ls_dot16(x, x, n);
    float mean = ss / (float)n;
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

void ls_swiglu_row_scalar(const float *g, const float *u, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        float silu = g[i] / (1.0f + ls_expf(-g[i]));
        out[i] = silu * u[i];
    }
}

/* cs/sn: head_dim/2 entries for this row's position. */
void ls_rope_row_scalar(float *x, int n_heads, int head_stride, int head_dim, bool neox, const float *cs,
                        const float *sn) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_stride;
        for (int i = 0; i < half; i++) {
            int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            float x0 = xh[i0], x1 = xh[i1], c = cs[i], s = sn[i];
            xh[i0] = fmaf(x0, c, -(x1 * s));
            xh[i1] = fmaf(x0, s, x1 * c);
        }
    }
}

/* One query head against keys k0..n_keys-1 of a paged view (kv head at kv_off): the
 * recipe over that list of n = n_keys - k0 keys, key k0 + j in scores[j]. */
void ls_attn_head_scalar(const float *q, int64_t k0, int64_t n_keys, const ls_kv_view *kv, int kv_off,
                         int kv_stride, int head_dim, float scale, float *out, float *scores) {
    const int64_t n = n_keys - k0;
    for (int64_t j = 0; j < n; j++)
        scores[j] = ls_dot16(q, ls_kv_krow(kv, kv_off, kv_stride, k0 + j), head_dim) * scale;
    float mx = scores[0];
    for (int64_t j = 1; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
    for (int64_t j = 0; j < n; j++) scores[j] = ls_expf(scores[j] - mx);
    float sum = 0.0f;
    for (int64_t c = 0; c < n; c += LS_ATTN_CHUNK) {
        float part = 0.0f;
        int64_t e = c + LS_ATTN_CHUNK < n ? c + LS_ATTN_CHUNK : n;
        for (int64_t j = c; j < e; j++) part = part + scores[j];
        sum = sum + part;
    }
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float *vj = ls_kv_vrow(kv, kv_off, kv_stride, k0 + j);
        float p = scores[j];
        for (int d = 0; d < head_dim; d++) out[d] = fmaf(p, vj[d], out[d]);
    }
    float inv = 1.0f / sum;
    for (int d = 0; d < head_dim; d++) out[d] = out[d] * inv;
}
