/* test_layout.c - the GPU weight layout and per-unit recipe pieces (cuda_recipe.h),
 * checked on the host, no GPU needed: every supported type is repacked with
 * lsc_repack_block, decoded with lsc_load_unit, and the recipe is run in the two orders
 * the GPU kernels use (k_gemv: lane g owns group g, xor-butterfly tree; k_mma:
 * group-pair-major with the tree built as pairs complete); both must equal ls_matmul on
 * the scalar CPU path byte for byte.  Also checks lsc_expf against ls_expf on 2^24
 * inputs.  Prints the differing bytes; exits non-zero if any differ. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_recipe.h"
#include "kernels/cpu/kernels.h"
#include "quant/quant.h"
#include "synth.h"

static size_t diff_bytes(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    return d;
}

/* step 1 (docs/numerics.md) in element order, as the GPU's quant_unit */
static void quant_row(const float *x, int64_t K, int8_t *q, float *dx, float *sx) {
    for (int64_t b = 0; b < K / 32; b++) {
        float amax = 0.0f;
        int fin = 1;
        for (int i = 0; i < 32; i++) {
            float a = fabsf(x[32 * b + i]);
            fin = fin && a <= FLT_MAX;
            amax = a > amax ? a : amax;
        }
        int32_t s = 0;
        float d = 0.0f;
        if (fin && amax >= 0x1p-100f) {
            d = amax / 127.0f;
            float id = 127.0f / amax;
            for (int i = 0; i < 32; i++) {
                int32_t v = (int32_t)nearbyintf(x[32 * b + i] * id);
                q[32 * b + i] = (int8_t)v;
                s += v;
            }
        } else {
            for (int i = 0; i < 32; i++) q[32 * b + i] = 0;
            if (!fin) d = NAN;
        }
        dx[b] = d;
        sx[b] = d * (float)s;
    }
}

static inline float tree(float *v, int n) {
    for (; n > 1; n /= 2)
        for (int i = 0; i < n / 2; i++) v[i] = v[2 * i] + v[2 * i + 1];
    return v[0];
}

typedef struct {
    int type;
    int64_t N, K, nb, nbp;
    uint8_t *codes, *hi, *sc, *sb;
} hmat;

static void hmat_build(hmat *m, int type, int64_t N, int64_t K, const uint8_t *src) {
    m->type = type;
    m->N = N;
    m->K = K;
    m->nb = K / 32;
    m->nbp = lsc_nbp(m->nb);
    const size_t u = (size_t)N * m->nbp;
    m->codes = calloc(u, (size_t)lsc_cb(type));
    m->hi = calloc(u + 1, (size_t)(lsc_hb(type) ? lsc_hb(type) : 1));
    m->sc = calloc(u, (size_t)lsc_scb(type));
    m->sb = calloc((size_t)N * (m->nbp / 8) + 1, 4);
    const size_t rb = (size_t)(K / lsc_blk_elems(type)) * lsc_blk_bytes(type);
    for (int64_t n = 0; n < N; n++)
        for (int64_t blk = 0; blk < K / lsc_blk_elems(type); blk++)
            lsc_repack_block(type, src + n * rb + blk * lsc_blk_bytes(type), blk, m->codes + n * m->nbp * lsc_cb(type),
                             m->hi + n * m->nbp * lsc_hb(type), m->sc + n * m->nbp * lsc_scb(type),
                             m->sb + n * (m->nbp / 8) * 4);
}

static void hmat_free(hmat *m) {
    free(m->codes);
    free(m->hi);
    free(m->sc);
    free(m->sb);
}

static void unit_at(const hmat *m, int64_t n, int64_t b, lsc_unit *u) {
    lsc_load_unit(m->type, m->codes + n * m->nbp * lsc_cb(m->type), m->hi + n * m->nbp * lsc_hb(m->type),
                  m->sc + n * m->nbp * lsc_scb(m->type), m->sb + n * (m->nbp / 8) * 4, b, u);
}

static float unit_c(const hmat *m, int64_t n, int64_t b, const int8_t *q, const float *dx, const float *sx) {
    lsc_unit u;
    unit_at(m, n, b, &u);
    uint32_t a[8];
    memcpy(a, q + 32 * b, 32);
    int32_t lo = 0, hi = 0;
    for (int s = 0; s < 4; s++) lo = lsc_dp4a(u.w[s], a[s], lo);
    for (int s = 4; s < 8; s++) hi = lsc_dp4a(u.w[s], a[s], hi);
    return lsc_contrib(m->type, &u, lo, hi, dx[b], sx[b]);
}

/* k_gemv's order: lane g sums units g, g + 32, ...; then the xor butterfly */
static float out_gemv(const hmat *m, int64_t n, const int8_t *q, const float *dx, const float *sx) {
    float S[32];
    for (int g = 0; g < 32; g++) {
        S[g] = 0.0f;
        for (int64_t b = g; b < m->nb; b += 32) S[g] = S[g] + unit_c(m, n, b, q, dx, sx);
    }
    for (int off = 1; off <= 16; off <<= 1) {
        float t[32];
        for (int l = 0; l < 32; l++) t[l] = S[l] + S[l ^ off];
        memcpy(S, t, sizeof S);
    }
    return S[0];
}

/* k_mma's order: pair p = groups 2p, 2p+1, stages i (units 2p + 32 i, +1), the tree built
 * with 4 pending left subtrees */
static float out_mma(const hmat *m, int64_t n, const int8_t *q, const float *dx, const float *sx) {
    float T[4] = {0, 0, 0, 0}, root = 0.0f;
    for (int p = 0; p < 16; p++) {
        float S0 = 0.0f, S1 = 0.0f;
        for (int64_t b0 = 2 * p; b0 < m->nb; b0 += 32) {
            S0 = S0 + unit_c(m, n, b0, q, dx, sx);
            if (b0 + 1 < m->nb) S1 = S1 + unit_c(m, n, b0 + 1, q, dx, sx);
        }
        float v = S0 + S1;
        int k = 0;
        for (; k < 4 && (p >> k) & 1; k++) v = T[k] + v;
        if (k < 4) T[k] = v;
        else root = v;
    }
    return root;
}

/* k_gemv_f's order for float weights: 4 threads x 4 recipe lanes, tree inside then across */
static float out_float(int type, const uint8_t *w, int64_t K, const float *x) {
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++) {
        float wv = type == LSC_F32 ? ((const float *)w)[k]
                 : type == LSC_F16 ? lsc_f16((uint16_t)(w[2 * k] | w[2 * k + 1] << 8))
                                   : lsc_bf16((uint16_t)(w[2 * k] | w[2 * k + 1] << 8));
        acc[k % 16] = fmaf(x[k], wv, acc[k % 16]);
    }
    float t[4];
    for (int i = 0; i < 4; i++) t[i] = (acc[4 * i] + acc[4 * i + 1]) + (acc[4 * i + 2] + acc[4 * i + 3]);
    float u0 = t[0] + t[1], u1 = t[2] + t[3];
    return u0 + u1;
}

int main(void) {
    static const struct { int type; const char *name; } types[] = {
        {LSC_F32, "F32"}, {LSC_F16, "F16"}, {LSC_BF16, "BF16"}, {LSC_Q4_0, "Q4_0"}, {LSC_Q4_1, "Q4_1"},
        {LSC_Q5_0, "Q5_0"}, {LSC_Q5_1, "Q5_1"}, {LSC_Q8_0, "Q8_0"}, {LSC_MXFP4, "MXFP4"}, {LSC_Q4_K, "Q4_K"},
        {LSC_Q5_K, "Q5_K"}, {LSC_Q6_K, "Q6_K"},
    };
    static const int64_t Ks[] = {576, 1536, 4096, 96};
    static const int64_t KKs[] = {768, 1280, 4096, 256};
    const int M = 3;
    size_t total = 0, bad = 0;
    uint64_t seed = 7;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int t = types[ti].type;
        for (int ki = 0; ki < 4; ki++) {
            const int64_t K = lsc_is_kquant(t) ? KKs[ki] : Ks[ki], N = 37;
            uint8_t *w = malloc(synth_bytes((uint32_t)t, N, K));
            synth_weights((uint32_t)t, seed++, N, K, 1.0f / sqrtf((float)K), w);
            float *x = malloc((size_t)M * K * sizeof(float)), *yc = malloc((size_t)M * N * 4), *yg = malloc((size_t)M * N * 4),
                  *ym = malloc((size_t)M * N * 4);
            uint64_t s = seed * 31;
            for (int64_t i = 0; i < M * K; i++) x[i] = (synth_unif(&s) * 2.0f - 1.0f) * (1.0f + 3.0f * (i % 97 == 0));
            for (int i = 0; i < 32; i++) x[K + i] = 0.0f;  /* row 1, unit 0: all zero */
            for (int i = 0; i < 32; i++) x[2 * K + 32 + i] = 1e-35f * (float)(i - 16); /* row 2, unit 1: tiny */
            ls_err err;
            ls_wmat *wm = ls_wmat_create((uint32_t)t, N, K, w, &err);
            if (wm) ls_wmat_prepare_all(wm, &err); /* every ISA this CPU has: the references below use them */
            if (!wm) {
                fprintf(stderr, "%s: %s\n", types[ti].name, err.msg);
                return 1;
            }
            size_t sb = ls_matmul_scratch_bytes(M, K);
            void *scratch = malloc(sb);
            ls_kctx kc;
            memset(&kc, 0, sizeof kc);
            kc.isa = LS_ISA_SCALAR;
            kc.scratch = scratch;
            kc.scratch_bytes = sb;
            ls_matmul(&kc, wm, x, M, yc);
            if (lsc_is_float(t)) {
                const size_t rb = (size_t)K * (t == LSC_F32 ? 4 : 2);
                for (int m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) yg[m * N + n] = ym[m * N + n] = out_float(t, w + n * rb, K, x + m * K);
            } else {
                hmat hm;
                hmat_build(&hm, t, N, K, w);
                int8_t *q = malloc((size_t)K);
                float *dx = malloc((size_t)K / 32 * 4), *sx = malloc((size_t)K / 32 * 4);
                for (int m = 0; m < M; m++) {
                    quant_row(x + m * K, K, q, dx, sx);
                    for (int64_t n = 0; n < N; n++) {
                        yg[m * N + n] = out_gemv(&hm, n, q, dx, sx);
                        ym[m * N + n] = out_mma(&hm, n, q, dx, sx);
                    }
                }
                free(q);
                free(dx);
                free(sx);
                hmat_free(&hm);
            }
            const size_t dg = diff_bytes(yc, yg, (size_t)M * N * 4), dm = diff_bytes(yc, ym, (size_t)M * N * 4);
            total += 2 * (size_t)M * N * 4;
            bad += dg + dm;
            printf("layout %-5s K=%5lld: gemv order %zu, mma order %zu differing bytes of %zu\n", types[ti].name,
                   (long long)K, dg, dm, (size_t)M * N * 4);
            ls_wmat_free(wm);
            free(scratch);
            free(w);
            free(x);
            free(yc);
            free(yg);
            free(ym);
        }
    }
    /* lsc_expf vs ls_expf over a sweep of 2^24 inputs in [-110, 110] and specials */
    size_t ebad = 0, en = 0;
    for (uint32_t i = 0; i < (1u << 24); i++) {
        float v = -110.0f + 220.0f * (float)i / (float)(1u << 24);
        float a = ls_expf(v), b = lsc_expf(v);
        ebad += memcmp(&a, &b, 4) != 0;
        en++;
    }
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, 88.7f, -87.3f, 104.0f, -104.0f, 1e-30f};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        float a = ls_expf(sp[i]), b = lsc_expf(sp[i]);
        ebad += memcmp(&a, &b, 4) != 0;
        en++;
    }
    printf("lsc_expf: %zu of %zu results differ from ls_expf\n", ebad, en);
    size_t ibad = 0;
    for (int32_t i = -(1 << 22) + 1; i < (1 << 22); i++) {
        float a = (float)i, b = lsc_i2f_small(i);
        ibad += memcmp(&a, &b, 4) != 0;
    }
    printf("lsc_i2f_small: %zu of %d conversions differ from (float)i\n", ibad, (1 << 23) - 1);
    ebad += ibad;
    /* lsc_vsub_half (the code offsets of Q4_0, Q5_0, Q6_K) against the byte-wise reference, every
     * byte value 0..127 in every byte position, beside every other byte value */
    size_t vbad = 0, vn = 0;
    static const uint32_t offs[] = {0x08u, 0x10u, 0x20u};
    for (int oi = 0; oi < 3; oi++)
        for (uint32_t a = 0; a < 128; a++)
            for (uint32_t b = 0; b < 128; b++) {
                const uint32_t o = offs[oi], v = a | b << 8 | (127u - a) << 16 | (a ^ b) << 24;
                vbad += lsc_vsub_half(v, o) != lsc_vsub4(v, o * 0x01010101u);
                vn++;
            }
    printf("lsc_vsub_half: %zu of %zu words differ from lsc_vsub4\n", vbad, vn);
    ebad += vbad;
    /* the gated activations of the matmul epilogues vs the CPU's (ls_swiglu's scalar row
     * kernel, ls_geglu) over 2^22 gate values in [-60, 60] x several up values, and specials */
    size_t gbad = 0, gn = 0;
    {
        const float ups[] = {1.0f, -0.37f, 3.5e-3f, 1234.5f, -0.0f};
        const int NG = 1 << 22;
        float *g = malloc((size_t)NG * sizeof *g), *u = malloc((size_t)NG * sizeof *u);
        float *cs = malloc((size_t)NG * sizeof *cs), *cg = malloc((size_t)NG * sizeof *cg);
        ls_kctx kc = {0};
        kc.isa = LS_ISA_SCALAR;
        for (size_t ui = 0; ui < sizeof ups / sizeof ups[0]; ui++) {
            for (int i = 0; i < NG; i++) {
                g[i] = -60.0f + 120.0f * (float)i / (float)NG;
                u[i] = ups[ui];
            }
            const float gs[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-30f, -1e-30f, 0x1p-149f, 3e38f, -3e38f, 104.5f, -104.5f};
            for (size_t k = 0; k < sizeof gs / sizeof gs[0]; k++) g[k] = gs[k];
            ls_swiglu(&kc, g, u, 1, NG, cs);
            ls_geglu(&kc, g, u, 1, NG, cg);
            for (int i = 0; i < NG; i++) {
                const float a = lsc_glu(0, g[i], u[i]), b = lsc_glu(1, g[i], u[i]);
                const int nan_ok_a = isnan(a) && isnan(cs[i]), nan_ok_b = isnan(b) && isnan(cg[i]);
                gbad += !nan_ok_a && memcmp(&a, &cs[i], 4) != 0;
                gbad += !nan_ok_b && memcmp(&b, &cg[i], 4) != 0;
                gn += 2;
            }
        }
        free(g);
        free(u);
        free(cs);
        free(cg);
    }
    printf("lsc_silu_mul / lsc_gelu_mul: %zu of %zu results differ from ls_swiglu / ls_geglu\n", gbad, gn);
    ebad += gbad;
    printf("test_layout: %zu differing bytes of %zu (matmul), %s\n", bad, total, bad || ebad ? "FAIL" : "ok");
    return bad || ebad ? 1 : 0;
}
