/* wtypes.c - the weight-type table: one row per quantized or float type, with
 * everything about the type that is not SIMD code (internal.h, ls_wtype):
 *   - its group-record layout (the per-unit scale fields, then the integer codes),
 *   - how one ggml block decodes into units (codes and raw scale fields),
 *   - where a unit's scale fields go in a record, and how they are read back,
 *   - step 2 of the canonical recipe for one unit, in plain C (the definition that
 *     the AVX2 and AVX-512 kernels reproduce; docs/numerics.md),
 *   - the per-ISA matmul entry points (each ISA file instantiates its kernels per type).
 * A new type is a row here, its line in LS_WTYPE_LIST (internal.h) and the type's
 * cases in the SIMD kernels. */
#include <math.h>

#include "kernels/cpu/internal.h"

static void ls_w16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- record layouts: byte offsets of each field for L units ------------------- */
static ls_rec lay_q4_0(uint32_t L) { return (ls_rec){.d = 0, .bits = 2 * L, .size = 2 * L + 16 * L}; }
static ls_rec lay_q4_1(uint32_t L) { return (ls_rec){.d = 0, .m = 2 * L, .bits = 4 * L, .size = 4 * L + 16 * L}; }
static ls_rec lay_mxfp4(uint32_t L) { return (ls_rec){.e = 0, .bits = L, .size = L + 16 * L}; }
static ls_rec lay_q8_0(uint32_t L) { return (ls_rec){.d = 0, .bits = 2 * L, .size = 2 * L + 32 * L}; }
static ls_rec lay_q5_1(uint32_t L) { return (ls_rec){.d = 0, .m = 2 * L, .bits = 4 * L, .size = 4 * L + 32 * L}; }
static ls_rec lay_kq(uint32_t L, uint32_t code_bytes) {
    return (ls_rec){.dk = 0, .dmk = L / 4, .sc = L / 2, .mn = L / 2 + L, .bits = L / 2 + 2 * L,
                    .size = L / 2 + 2 * L + code_bytes * L};
}
static ls_rec lay_q4_k(uint32_t L) { return lay_kq(L, 16); }
static ls_rec lay_q5_k(uint32_t L) { return lay_kq(L, 32); }
static ls_rec lay_q6_k(uint32_t L) {
    return (ls_rec){.dk = 0, .sc = L / 4, .bits = L / 4 + 2 * L, .hb = L / 4 + 2 * L + 16 * L,
                    .size = L / 4 + 2 * L + 16 * L + 8 * L};
}

/* ---- ggml block -> units ---------------------------------------------------------- */
static void nib16(const uint8_t *qs, ls_unit *un) { /* element i < 16: low nibble of qs[i]; i + 16: high */
    for (int j = 0; j < 16; j++) {
        un->u[j] = qs[j] & 0xF;
        un->u[j + 16] = qs[j] >> 4;
    }
}
static void dec_q4_0(const uint8_t *blk, ls_unit *un) {
    un->d = ls_k_rd16(blk);
    nib16(blk + 2, un);
}
static void dec_q4_1(const uint8_t *blk, ls_unit *un) {
    un->d = ls_k_rd16(blk);
    un->m = ls_k_rd16(blk + 2);
    nib16(blk + 4, un);
}
static void dec_mxfp4(const uint8_t *blk, ls_unit *un) {
    un->e = blk[0];
    nib16(blk + 1, un);
}
static void dec_q5(const uint8_t *blk, ls_unit *un, int o) { /* o: bytes of scale fields before qh */
    uint32_t qh = (uint32_t)blk[o] | (uint32_t)blk[o + 1] << 8 | (uint32_t)blk[o + 2] << 16 | (uint32_t)blk[o + 3] << 24;
    const uint8_t *qs = blk + o + 4;
    for (int j = 0; j < 16; j++) {
        un->u[j] = (uint8_t)((qs[j] & 0xF) | (((qh >> j) << 4) & 0x10));
        un->u[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
    }
}
static void dec_q5_0(const uint8_t *blk, ls_unit *un) {
    un->d = ls_k_rd16(blk);
    dec_q5(blk, un, 2);
}
static void dec_q5_1(const uint8_t *blk, ls_unit *un) {
    un->d = ls_k_rd16(blk);
    un->m = ls_k_rd16(blk + 2);
    dec_q5(blk, un, 4);
}
static void dec_q8_0(const uint8_t *blk, ls_unit *un) {
    un->d = ls_k_rd16(blk);
    for (int j = 0; j < 32; j++) un->u[j] = (uint8_t)(blk[2 + j] ^ 0x80); /* u = w + 128 */
}
static void dec_kq(const uint8_t *blk, ls_unit *un, bool five) {
    uint16_t d = ls_k_rd16(blk), dmin = ls_k_rd16(blk + 2);
    const uint8_t *scales = blk + 4, *qh = blk + 16, *ql = five ? blk + 48 : blk + 16;
    for (int j = 0; j < 8; j++) {
        ls_unit *x = &un[j];
        x->d = d;
        x->dmin = dmin;
        ls_k_scale_min(j, scales, &x->sc, &x->mn);
        const uint8_t *q = ql + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
            if (five && (qh[l] >> j) & 1) v += 16;
            x->u[l] = (uint8_t)v;
        }
    }
}
static void dec_q4_k(const uint8_t *blk, ls_unit *un) { dec_kq(blk, un, false); }
static void dec_q5_k(const uint8_t *blk, ls_unit *un) { dec_kq(blk, un, true); }
static void dec_q6_k(const uint8_t *blk, ls_unit *un) {
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    uint16_t d = ls_k_rd16(blk + 208);
    uint8_t all[256];
    for (int n = 0; n < 2; n++) {
        const uint8_t *l0 = ql + 64 * n, *h0 = qh + 32 * n;
        uint8_t *y = all + 128 * n;
        for (int l = 0; l < 32; l++) {
            y[l] = (uint8_t)((l0[l] & 0xF) | ((h0[l] & 3) << 4));
            y[l + 32] = (uint8_t)((l0[l + 32] & 0xF) | (((h0[l] >> 2) & 3) << 4));
            y[l + 64] = (uint8_t)((l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4));
            y[l + 96] = (uint8_t)((l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4));
        }
    }
    for (int j = 0; j < 8; j++) {
        un[j].d = d;
        un[j].sc6[0] = sc[2 * j];
        un[j].sc6[1] = sc[2 * j + 1];
        memcpy(un[j].u, all + 32 * j, 32);
    }
}

/* ---- a unit's scale fields into lane l of a record ------------------------------- */
static void put_d(const ls_rec *r, uint32_t l, const ls_unit *un, uint8_t *rec) { ls_w16(rec + r->d + 2 * l, un->d); }
static void put_dm(const ls_rec *r, uint32_t l, const ls_unit *un, uint8_t *rec) {
    ls_w16(rec + r->d + 2 * l, un->d);
    ls_w16(rec + r->m + 2 * l, un->m);
}
static void put_e(const ls_rec *r, uint32_t l, const ls_unit *un, uint8_t *rec) { rec[r->e + l] = un->e; }
static void put_kq(const ls_rec *r, uint32_t l, const ls_unit *un, uint8_t *rec) {
    ls_w16(rec + r->dk + 2 * (l / 8), un->d);
    ls_w16(rec + r->dmk + 2 * (l / 8), un->dmin);
    rec[r->sc + l] = un->sc;
    rec[r->mn + l] = un->mn;
}
static void put_q6_k(const ls_rec *r, uint32_t l, const ls_unit *un, uint8_t *rec) {
    ls_w16(rec + r->dk + 2 * (l / 8), un->d);
    rec[r->sc + 2 * l] = (uint8_t)un->sc6[0];
    rec[r->sc + 2 * l + 1] = (uint8_t)un->sc6[1];
}

/* ---- a unit's scale fields out of lane l of a record (the inverse of put_*) --------- */
static void get_d(const ls_rec *r, uint32_t l, const uint8_t *rec, ls_unit *un) { un->d = ls_k_rd16(rec + r->d + 2 * l); }
static void get_dm(const ls_rec *r, uint32_t l, const uint8_t *rec, ls_unit *un) {
    un->d = ls_k_rd16(rec + r->d + 2 * l);
    un->m = ls_k_rd16(rec + r->m + 2 * l);
}
static void get_e(const ls_rec *r, uint32_t l, const uint8_t *rec, ls_unit *un) { un->e = rec[r->e + l]; }
static void get_kq(const ls_rec *r, uint32_t l, const uint8_t *rec, ls_unit *un) {
    un->d = ls_k_rd16(rec + r->dk + 2 * (l / 8));
    un->dmin = ls_k_rd16(rec + r->dmk + 2 * (l / 8));
    un->sc = rec[r->sc + l];
    un->mn = rec[r->mn + l];
}
static void get_q6_k(const ls_rec *r, uint32_t l, const uint8_t *rec, ls_unit *un) {
    un->d = ls_k_rd16(rec + r->dk + 2 * (l / 8));
    un->sc6[0] = (int8_t)rec[r->sc + 2 * l];
    un->sc6[1] = (int8_t)rec[r->sc + 2 * l + 1];
}

/* ---- step 2 of the recipe, per type: c_b from the unit's codes u and raw scale fields
 * f, the activation block's codes q and its dx, sx (docs/numerics.md, the c_b column;
 * each line one rounding, in the order written) ------------------------------------ */
/* Codes are int16 (|u - off| <= 255, |q| <= 128: every product and the 32-term sum are
 * exact in int32), so the compiler may form the sum with pmaddwd at any ISA: integer
 * arithmetic, the same value in any order. */
static int32_t isum_off(const int16_t *u, const int16_t *q, int off) {
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += (int16_t)(u[i] - off) * q[i];
    return s;
}
static float c_d(const ls_unit *f, int32_t isum, float dx) {
    float d = ls_k_fp16(f->d);
    return (d * dx) * (float)isum;
}
static float c_q4_0(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    (void)sx;
    return c_d(f, isum_off(u, q, 8), dx);
}
static float c_q5_0(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    (void)sx;
    return c_d(f, isum_off(u, q, 16), dx);
}
static float c_q8_0(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    (void)sx;
    return c_d(f, isum_off(u, q, 128), dx);
}
static float c_mxfp4(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    (void)sx;
    int32_t isum = 0;
    for (int i = 0; i < 32; i++) isum += ls_kvalues_mxfp4[u[i]] * q[i];
    float d = ls_k_e8m0_half(f->e);
    return (d * dx) * (float)isum;
}
static float c_q4_1(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    int32_t isum = isum_off(u, q, 0);
    float d = ls_k_fp16(f->d);
    float m = ls_k_fp16(f->m);
    return fmaf(d * dx, (float)isum, m * sx);
}
static float c_kq(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    int32_t isum = isum_off(u, q, 0) * f->sc;
    float d = ls_k_fp16(f->d);
    float dmin = ls_k_fp16(f->dmin);
    float mt = dmin * (float)f->mn;
    return fmaf(d * dx, (float)isum, (-mt) * sx);
}
static float c_q6_k(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx) {
    (void)sx;
    int32_t s0 = 0, s1 = 0;
    for (int i = 0; i < 16; i++) s0 += (int16_t)(u[i] - 32) * q[i];
    for (int i = 16; i < 32; i++) s1 += (int16_t)(u[i] - 32) * q[i];
    int32_t isum = f->sc6[0] * s0 + f->sc6[1] * s1;
    float d = ls_k_fp16(f->d);
    return (d * dx) * (float)isum;
}

/* ---- the table --------------------------------------------------------------------- */
#define LS_MM_ROW(nm) {ls_mm_##nm##_scalar, ls_mm_##nm##_avx2, ls_mm_##nm##_avxvnni, ls_mm_##nm##_avx512, ls_mm_##nm##_amx}
static const ls_wtype ls_wtypes[] = {
    {LS_TYPE_F32, LS_ST_FLOAT, 1, NULL, NULL, NULL, NULL, NULL, LS_MM_ROW(f32)},
    {LS_TYPE_F16, LS_ST_FLOAT, 1, NULL, NULL, NULL, NULL, NULL, LS_MM_ROW(f16)},
    {LS_TYPE_BF16, LS_ST_FLOAT, 1, NULL, NULL, NULL, NULL, NULL, LS_MM_ROW(bf16)},
    {LS_TYPE_Q4_0, LS_ST_NIB, 32, lay_q4_0, dec_q4_0, put_d, get_d, c_q4_0, LS_MM_ROW(q4_0)},
    {LS_TYPE_Q4_1, LS_ST_NIB, 32, lay_q4_1, dec_q4_1, put_dm, get_dm, c_q4_1, LS_MM_ROW(q4_1)},
    {LS_TYPE_Q5_0, LS_ST_BYTE, 32, lay_q8_0, dec_q5_0, put_d, get_d, c_q5_0, LS_MM_ROW(q5_0)},
    {LS_TYPE_Q5_1, LS_ST_BYTE, 32, lay_q5_1, dec_q5_1, put_dm, get_dm, c_q4_1, LS_MM_ROW(q5_1)},
    {LS_TYPE_Q8_0, LS_ST_BYTE, 32, lay_q8_0, dec_q8_0, put_d, get_d, c_q8_0, LS_MM_ROW(q8_0)},
    {LS_TYPE_Q4_K, LS_ST_NIB, 256, lay_q4_k, dec_q4_k, put_kq, get_kq, c_kq, LS_MM_ROW(q4_k)},
    {LS_TYPE_Q5_K, LS_ST_BYTE, 256, lay_q5_k, dec_q5_k, put_kq, get_kq, c_kq, LS_MM_ROW(q5_k)},
    {LS_TYPE_Q6_K, LS_ST_Q6, 256, lay_q6_k, dec_q6_k, put_q6_k, get_q6_k, c_q6_k, LS_MM_ROW(q6_k)},
    {LS_TYPE_MXFP4, LS_ST_NIB, 32, lay_mxfp4, dec_mxfp4, put_e, get_e, c_mxfp4, LS_MM_ROW(mxfp4)},
};

const ls_wtype *ls_wtype_get(uint32_t type) {
    for (size_t i = 0; i < sizeof ls_wtypes / sizeof ls_wtypes[0]; i++)
        if (ls_wtypes[i].type == type) return &ls_wtypes[i];
    return NULL;
}
