/* wmat.c - weight matrices: validation and repacking of ggml blocks into the layouts
 * described in internal.h: the panel copy for the panel types (built by the prepare step),
 * the group records for MXFP4 (built here; the per-type parts are the type's row in
 * wtypes.c).  Repacking is a lossless permutation of
 * each block's integer codes and scale fields; nothing is rounded here. */
#include <stdlib.h>

#include "kernels/cpu/internal.h"
#include "util/alloc.h"

bool ls_matmul_type_supported(uint32_t type) { return ls_wtype_get(type) != NULL; }

/* Writes unit `un` as lane l of a group record with L lanes at rec. */
static void ls_put_unit(const ls_wtype *wt, const ls_rec *r, uint32_t L, uint32_t l, const ls_unit *un,
                        uint8_t *rec) {
    wt->put_scales(r, l, un, rec);
    uint8_t *bits = rec + r->bits;
    if (wt->st == LS_ST_BYTE) {
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 4; j++) bits[(s * L + l) * 4 + j] = un->u[4 * s + j];
        return;
    }
    /* NIB, and the low 4 bits of Q6 */
    for (int q = 0; q < 4; q++)
        for (int j = 0; j < 4; j++)
            bits[(q * L + l) * 4 + j] = (uint8_t)((un->u[4 * q + j] & 0xF) | ((un->u[16 + 4 * q + j] & 0xF) << 4));
    if (wt->st == LS_ST_Q6) {
        uint8_t *hb = rec + r->hb;
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++) {
                uint8_t v = 0;
                for (int k = 0; k < 4; k++) v |= (uint8_t)((un->u[4 * (4 * h + k) + j] >> 4) << (2 * k));
                hb[(h * L + l) * 4 + j] = v;
            }
    }
}

void ls_wmat_decode_block(const ls_wmat *w, int64_t n, int64_t blk, ls_unit *un) {
    const ls_type_info *ti = ls_type_get(w->type);
    memset(un, 0, sizeof *un * (size_t)(w->wt->block / 32));
    w->wt->decode(w->src + (size_t)n * w->src_row_bytes + (size_t)blk * ti->block_bytes, un);
}

ls_wmat *ls_wmat_create(uint32_t type, int64_t N, int64_t K, const void *data, ls_err *err) {
    const ls_type_info *ti = ls_type_get(type);
    const ls_wtype *wt = ls_wtype_get(type);
    if (!wt) {
        ls_err_set(err, LS_E_UNSUPPORTED, "matmul does not support weight type %s (ggml type id %u)",
                   ti ? ti->name : "unknown", type);
        return NULL;
    }
    if (N < 1 || K < 1 || N > ((int64_t)1 << 40) || K > ((int64_t)1 << 30)) {
        ls_err_set(err, LS_E_INVALID, "matmul weight shape %lld x %lld out of range", (long long)N, (long long)K);
        return NULL;
    }
    const int64_t bk = wt->block;
    if (K % bk != 0) {
        ls_err_set(err, LS_E_INVALID, "weight type %s needs K a multiple of %lld, got K=%lld", ti ? ti->name : "?",
                   (long long)bk, (long long)K);
        return NULL;
    }
    ls_wmat *w = ls_calloc(1, sizeof *w);
    if (!w) {
        ls_err_set(err, LS_E_NOMEM, "out of memory (ls_wmat)");
        return NULL;
    }
    w->type = type;
    w->wt = wt;
    w->N = N;
    w->K = K;
    w->st = wt->st;
    w->src = data;
    uint64_t rb = 0;
    (void)ls_type_nbytes(type, (uint64_t)K, &rb, NULL); /* K was checked above */
    w->src_row_bytes = (size_t)rb;
    if (wt->st == LS_ST_FLOAT) {
        w->row_bytes = (size_t)K * (type == LS_TYPE_F32 ? 4 : 2);
        w->data = data;
        return w;
    }
    w->nb = K / 32;
    w->tail = (int)(w->nb % LS_GROUP); /* (also the activations' last group) */
    if (ls_panel_type(type)) /* the panel copy is its one repacked layout (ls_wmat_prepare builds it) */
        return w;
    w->rec16 = wt->layout(LS_GROUP);
    w->rec_tail = w->tail ? wt->layout((uint32_t)w->tail) : (ls_rec){0};
    w->row_bytes = (size_t)(w->nb / LS_GROUP) * w->rec16.size + (w->tail ? w->rec_tail.size : 0);
    uint64_t total;
    if (ls_mul_u64((uint64_t)N, w->row_bytes, &total) || total > SIZE_MAX - 256) {
        ls_err_set(err, LS_E_INVALID, "matmul weight %lld x %lld too large", (long long)N, (long long)K);
        free(w);
        return NULL;
    }
    w->owned = ls_aligned_alloc(64, ((size_t)total + 128 + 63) & ~(size_t)63); /* +128: slack for wide tail loads */
    if (!w->owned) {
        ls_err_set(err, LS_E_NOMEM, "out of memory repacking a %lld x %lld %s matrix (%llu bytes)", (long long)N,
                   (long long)K, ti->name, (unsigned long long)total);
        free(w);
        return NULL;
    }
    memset((uint8_t *)w->owned + total, 0, 128);
    const int upb = (int)(bk / 32); /* units per ggml block */
    ls_unit un[8];
    for (int64_t n = 0; n < N; n++) {
        uint8_t *drow = (uint8_t *)w->owned + (size_t)n * w->row_bytes;
        for (int64_t blk = 0; blk < w->nb / upb; blk++) {
            ls_wmat_decode_block(w, n, blk, un);
            for (int t = 0; t < upb; t++) {
                int64_t b = blk * upb + t, G = b / LS_GROUP;
                uint32_t l = (uint32_t)(b % LS_GROUP);
                bool full = (G + 1) * LS_GROUP <= w->nb;
                const ls_rec *r = full ? &w->rec16 : &w->rec_tail;
                uint32_t L = full ? LS_GROUP : (uint32_t)w->tail;
                ls_put_unit(wt, r, L, l, &un[t], drow + (size_t)G * w->rec16.size);
            }
        }
    }
    w->data = w->owned;
    return w;
}

/* ---- the panel copy (internal.h), read by the scalar, AVX2, AVX-VNNI and AVX-512 kernels
 * alike (one layout: the 256-bit kernels take a 16-row panel as two halves of 8 lanes), the
 * panel types' only repacked layout: a matrix holds one copy whichever ISAs use it.  Codes are nibble planes
 * (Q4_0, Q4_1, Q4_K) or byte planes (Q5_0, Q5_1, Q8_0, Q5_K, Q6_K: the unsigned code u as
 * one byte); the per-type part is what follows the codes: the scale fields of the 16 rows. */
/* Bytes of one panel unit's codes (NIB: 4 planes of 64 bytes, BYTE: 8). */
static size_t ls_panel_pcode(uint32_t type) {
    return type == LS_TYPE_Q4_0 || type == LS_TYPE_Q4_1 || type == LS_TYPE_Q4_K ? 256 : 512;
}
/* Bytes of one panel unit: 16 rows' codes, then their scale fields: fp16 d (Q4_0, Q5_0,
 * Q8_0), fp16 d and m (Q4_1, Q5_1), u8 sc and mn (32 bytes per unit) plus the super-block
 * fp16 d and dmin (64 bytes per 8 units: Q4_K, Q5_K), int8 sc pairs (32 bytes per unit)
 * plus the super-block fp16 d (32 bytes per 8 units: Q6_K). */
static size_t ls_panel_unit_bytes(uint32_t type) {
    size_t f;
    switch (type) {
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1: f = 64; break;
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: f = 32 + 8; break;
    case LS_TYPE_Q6_K: f = 32 + 4; break;
    default: f = 32; break;
    }
    return ls_panel_pcode(type) + f;
}

size_t ls_panel_bytes(const ls_wmat *w) {
    if (!ls_panel_type(w->type)) return 0;
    uint64_t np = (uint64_t)(w->N + 15) / 16, b; /* N <= 2^40, nb <= 2^25 (ls_wmat_create) */
    if (ls_mul_u64(np, (uint64_t)w->nb * ls_panel_unit_bytes(w->type), &b) || b > SIZE_MAX - 64) return 0;
    return ((size_t)b + 63) & ~(size_t)63;
}

static void ls_w16p(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Row n of w into lane r of its panel p, through the type's decoder (any panel type; the
 * reference the per-type builders below are checked against, byte for byte). */
static void panel_row_ref(const ls_wmat *w, int64_t n, uint8_t *p, size_t r) {
    const int upb = (int)(w->wt->block / 32); /* units per ggml block (8 for K-quants) */
    const bool kq = w->type == LS_TYPE_Q4_K || w->type == LS_TYPE_Q5_K;
    ls_unit un[8];
    for (int64_t blk = 0; blk < w->nb / upb; blk++) {
        ls_wmat_decode_block(w, n, blk, un);
        for (int t = 0; t < upb; t++) {
            const ls_unit *x = &un[t];
            const int64_t b = blk * upb + t;
            uint8_t *codes = p + (size_t)b * w->pcode;
            if (w->pcode == 512) {
                for (int s = 0; s < 8; s++)
                    for (int j = 0; j < 4; j++) codes[64 * s + 4 * r + j] = x->u[4 * s + j];
            } else {
                for (int q = 0; q < 4; q++)
                    for (int j = 0; j < 4; j++)
                        codes[64 * q + 4 * r + j] =
                            (uint8_t)((x->u[4 * q + j] & 0xF) | ((x->u[16 + 4 * q + j] & 0xF) << 4));
            }
            uint8_t *dp = p + (size_t)w->nb * w->pcode + 32 * (size_t)b;
            uint8_t *sp = p + (size_t)w->nb * (w->pcode + 32); /* the super-block fields (K-quants) */
            if (kq) {
                dp[r] = x->sc;
                dp[16 + r] = x->mn;
                if (t == 0) { /* the super-block's d and dmin */
                    ls_w16p(sp + 64 * (size_t)blk + 2 * r, x->d);
                    ls_w16p(sp + 64 * (size_t)blk + 32 + 2 * r, x->dmin);
                }
                continue;
            }
            if (w->type == LS_TYPE_Q6_K) {
                dp[2 * r] = (uint8_t)x->sc6[0];
                dp[2 * r + 1] = (uint8_t)x->sc6[1];
                if (t == 0) ls_w16p(sp + 32 * (size_t)blk + 2 * r, x->d); /* the super-block's d */
                continue;
            }
            ls_w16p(dp + 2 * r, x->d);
            if (w->type == LS_TYPE_Q4_1 || w->type == LS_TYPE_Q5_1) ls_w16p(dp + 32 * (size_t)w->nb + 2 * r, x->m);
        }
    }
}

/* ---- per-type builders, one per panel type: the same bytes as panel_row_ref, 8 code
 * bytes at a time (the load's repack of an 8B file took 12.8 s of CPU through the
 * decoder, most of the time to the first token).  A ggml block's fields are
 * little-endian, as the panel's are, so the scale fields are copied as they are; on a
 * big-endian host every type takes the reference. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LS_PANEL_FAST 1
static const uint64_t k_lo4 = 0x0F0F0F0F0F0F0F0Full, k_lo2 = 0x0303030303030303ull, k_lo1 = 0x0101010101010101ull;
static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
/* Code bytes 8i..8i+7 of lane r: the first four into plane 2i, the others into 2i + 1. */
static inline void put8(uint8_t *codes, size_t r, int i, uint64_t v) {
    const uint32_t a = (uint32_t)v, b = (uint32_t)(v >> 32);
    memcpy(codes + 128 * i + 4 * r, &a, 4);
    memcpy(codes + 128 * i + 64 + 4 * r, &b, 4);
}
/* Q4_0 (18-byte blocks: d, 16 bytes of codes) and Q4_1 (20: d, m, codes): a block's code
 * bytes are the panel's (element j in the low nibble, j + 16 in the high one). */
static void panel_row_q4(const ls_wmat *w, const uint8_t *s, uint8_t *p, size_t r, bool one) {
    const size_t nb = (size_t)w->nb, o = one ? 4 : 2;
    uint8_t *dp = p + nb * 256 + 2 * r, *mp = dp + 32 * nb;
    for (size_t b = 0; b < nb; b++, s += o + 16) {
        put8(p + 256 * b, r, 0, ld64(s + o));
        put8(p + 256 * b, r, 1, ld64(s + o + 8));
        memcpy(dp + 32 * b, s, 2);
        if (one) memcpy(mp + 32 * b, s + 2, 2);
    }
}
/* Q8_0 (34 bytes: d, 32 int8 codes w): u = w + 128 in byte planes. */
static void panel_row_q8_0(const ls_wmat *w, const uint8_t *s, uint8_t *p, size_t r) {
    uint8_t *dp = p + (size_t)w->nb * 512 + 2 * r;
    for (size_t b = 0; b < (size_t)w->nb; b++, s += 34) {
        for (int i = 0; i < 4; i++) put8(p + 512 * b, r, i, ld64(s + 2 + 8 * i) ^ 0x8080808080808080ull);
        memcpy(dp + 32 * b, s, 2);
    }
}
/* Bits 0..7 of b, each to bit 0 of its own byte. */
static inline uint64_t spread8(uint32_t b) {
    const uint64_t x = ((uint64_t)(b & 0xFF) * 0x0101010101010101ull) & 0x8040201008040201ull;
    return ((x + 0x7F7F7F7F7F7F7F7Full) >> 7) & k_lo1;
}
/* Q5_0 (22 bytes: d, 4 bytes of fifth bits, 16 of codes) and Q5_1 (24: d, m, then the
 * same): element j < 16 is the low nibble of code byte j, j + 16 its high nibble, each
 * with fifth bit j of the 32. */
static void panel_row_q5(const ls_wmat *w, const uint8_t *s, uint8_t *p, size_t r, bool one) {
    const size_t nb = (size_t)w->nb, o = one ? 4 : 2;
    uint8_t *dp = p + nb * 512 + 2 * r, *mp = dp + 32 * nb;
    for (size_t b = 0; b < nb; b++, s += o + 20) {
        uint32_t qh;
        memcpy(&qh, s + o, 4);
        const uint64_t lo0 = ld64(s + o + 4), lo1 = ld64(s + o + 12);
        uint8_t *c = p + 512 * b;
        put8(c, r, 0, (lo0 & k_lo4) | spread8(qh) << 4);
        put8(c, r, 1, (lo1 & k_lo4) | spread8(qh >> 8) << 4);
        put8(c, r, 2, ((lo0 >> 4) & k_lo4) | spread8(qh >> 16) << 4);
        put8(c, r, 3, ((lo1 >> 4) & k_lo4) | spread8(qh >> 24) << 4);
        memcpy(dp + 32 * b, s, 2);
        if (one) memcpy(mp + 32 * b, s + 2, 2);
    }
}
/* Q4_K (144 bytes: d, dmin, 12 bytes of 6-bit scales and mins, 128 of codes) and Q5_K
 * (176: the same, with 32 bytes of fifth bits before the codes): unit t's codes are the
 * low (even t) or high (odd t) nibbles of code bytes 32 (t / 2)..+31, plus bit t of the
 * fifth-bit bytes (Q5_K). */
static void panel_row_kq(const ls_wmat *w, const uint8_t *s, uint8_t *p, size_t r, bool five) {
    const size_t nb = (size_t)w->nb, pc = five ? 512 : 256, bb = five ? 176 : 144;
    uint8_t *dp = p + nb * pc + r, *sp = p + nb * (pc + 32) + 2 * r;
    for (size_t blk = 0; blk < nb / 8; blk++, s += bb) {
        memcpy(sp + 64 * blk, s, 2);
        memcpy(sp + 64 * blk + 32, s + 2, 2);
        const uint8_t *qh = s + 16, *ql = five ? s + 48 : s + 16;
        for (int t = 0; t < 8; t++) {
            const size_t b = 8 * blk + (size_t)t;
            ls_k_scale_min(t, s + 4, &dp[32 * b], &dp[32 * b + 16]);
            const uint8_t *q = ql + 32 * (t / 2);
            const int sh = 4 * (t & 1);
            uint8_t *c = p + pc * b;
            if (five) {
                for (int i = 0; i < 4; i++)
                    put8(c, r, i, ((ld64(q + 8 * i) >> sh) & k_lo4) | (((ld64(qh + 8 * i) >> t) & k_lo1) << 4));
            } else {
                for (int i = 0; i < 2; i++)
                    put8(c, r, i, ((ld64(q + 8 * i) >> sh) & k_lo4) | (((ld64(q + 16 + 8 * i) >> sh) & k_lo4) << 4));
            }
        }
    }
}
/* Q6_K (210 bytes: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, d):
 * unit t = 4 h + m (h: which 128 elements) takes the low (m < 2) or high nibbles of low
 * bytes 64 h + 32 (m & 1)..+31 and bits 2 m..2 m + 1 of high bytes 32 h..+31. */
static void panel_row_q6_k(const ls_wmat *w, const uint8_t *s, uint8_t *p, size_t r) {
    const size_t nb = (size_t)w->nb;
    uint8_t *dp = p + nb * 512 + 2 * r, *sp = p + nb * (512 + 32) + 2 * r;
    for (size_t blk = 0; blk < nb / 8; blk++, s += 210) {
        memcpy(sp + 32 * blk, s + 208, 2);
        for (int t = 0; t < 8; t++) {
            const size_t b = 8 * blk + (size_t)t;
            const int h = t / 4, m = t % 4;
            const uint8_t *lo = s + 64 * h + 32 * (m & 1), *hi = s + 128 + 32 * h;
            const int sl = 4 * (m >> 1), shh = 2 * m;
            uint8_t *c = p + 512 * b;
            for (int i = 0; i < 4; i++)
                put8(c, r, i, ((ld64(lo + 8 * i) >> sl) & k_lo4) | (((ld64(hi + 8 * i) >> shh) & k_lo2) << 4));
            memcpy(dp + 32 * b, s + 192 + 2 * t, 2);
        }
    }
}
#endif

/* Row n of w into lane r of panel p: the type's builder, else the reference. */
static void panel_row(const ls_wmat *w, int64_t n, uint8_t *p, size_t r) {
#ifdef LS_PANEL_FAST
    const uint8_t *s = w->src + (size_t)n * w->src_row_bytes;
    switch (w->type) {
    case LS_TYPE_Q4_0: panel_row_q4(w, s, p, r, false); return;
    case LS_TYPE_Q4_1: panel_row_q4(w, s, p, r, true); return;
    case LS_TYPE_Q8_0: panel_row_q8_0(w, s, p, r); return;
    case LS_TYPE_Q4_K: panel_row_kq(w, s, p, r, false); return;
    case LS_TYPE_Q5_K: panel_row_kq(w, s, p, r, true); return;
    case LS_TYPE_Q5_0: panel_row_q5(w, s, p, r, false); return;
    case LS_TYPE_Q5_1: panel_row_q5(w, s, p, r, true); return;
    case LS_TYPE_Q6_K: panel_row_q6_k(w, s, p, r); return;
    default: break;
    }
#endif
    panel_row_ref(w, n, p, r);
}

static void panel_build(ls_wmat *w, void *mem, bool ref) {
    w->pcode = ls_panel_pcode(w->type);
    w->panel_bytes = (size_t)w->nb * ls_panel_unit_bytes(w->type);
    w->panel = mem;
    if (w->N % 16) /* the last panel's padding rows; the rows write every other byte */
        memset(w->panel + (size_t)(w->N / 16) * w->panel_bytes, 0, w->panel_bytes);
    for (int64_t n = 0; n < w->N; n++) {
        uint8_t *p = w->panel + (size_t)(n / 16) * w->panel_bytes;
        if (ref) panel_row_ref(w, n, p, (size_t)(n % 16));
        else panel_row(w, n, p, (size_t)(n % 16));
        if (w->src_done) { /* rows 0..n are read: hand back whole 4 KiB pieces, about 1 MiB at a time */
            const uintptr_t end = (uintptr_t)(w->src + (size_t)(n + 1) * w->src_row_bytes);
            const uintptr_t cut = n + 1 == w->N ? end : end & ~(uintptr_t)4095;
            if (cut >= (uintptr_t)w->src_next + ((size_t)1 << 20) || (n + 1 == w->N && cut > (uintptr_t)w->src_next)) {
                w->src_done(w->src_done_ctx, w->src_next, (size_t)(cut - (uintptr_t)w->src_next));
                w->src_next = (const uint8_t *)cut;
            }
        }
    }
}

void ls_panel_build(ls_wmat *w, void *mem) { panel_build(w, mem, false); }
void ls_panel_build_ref(ls_wmat *w, void *mem) { panel_build(w, mem, true); }

void ls_panel_unit(const ls_wmat *w, int64_t n, int64_t b, ls_unit *x) {
    const uint8_t *p = w->panel + (size_t)(n / 16) * w->panel_bytes;
    const size_t r = (size_t)(n % 16);
    const uint8_t *codes = p + (size_t)b * w->pcode;
    memset(x, 0, sizeof *x);
    if (w->pcode == 512) {
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 4; j++) x->u[4 * s + j] = codes[64 * s + 4 * r + j];
    } else {
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++) {
                uint8_t v = codes[64 * q + 4 * r + j];
                x->u[4 * q + j] = v & 0xF;
                x->u[16 + 4 * q + j] = v >> 4;
            }
    }
    const uint8_t *dp = p + (size_t)w->nb * w->pcode + 32 * (size_t)b;
    const uint8_t *sp = p + (size_t)w->nb * (w->pcode + 32); /* the super-block fields (K-quants) */
    const size_t blk = (size_t)(b / 8);
    switch (w->type) {
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K:
        x->sc = dp[r];
        x->mn = dp[16 + r];
        x->d = ls_k_rd16(sp + 64 * blk + 2 * r);
        x->dmin = ls_k_rd16(sp + 64 * blk + 32 + 2 * r);
        break;
    case LS_TYPE_Q6_K:
        x->sc6[0] = (int8_t)dp[2 * r];
        x->sc6[1] = (int8_t)dp[2 * r + 1];
        x->d = ls_k_rd16(sp + 32 * blk + 2 * r);
        break;
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1:
        x->m = ls_k_rd16(dp + 32 * (size_t)w->nb + 2 * r);
        /* fall through */
    default: x->d = ls_k_rd16(dp + 2 * r); break;
    }
}

/* What preparing w for isa still needs: the panel copy, for a panel type whose copy is
 * not built yet (one copy, read by every ISA: the scalar kernels read it too); else 0. */
size_t ls_wmat_prepare_bytes(const ls_wmat *w, ls_isa isa) {
    const ls_kvtab *vt = ls_kvtab_for(isa);
    if (!vt->prepare_bytes || (vt->prepare == ls_panel_build && w->panel)) return 0;
    return vt->prepare_bytes(w);
}

ls_status ls_wmat_prepare(ls_wmat *w, ls_isa isa, void *mem, ls_err *err) {
    return ls_wmat_prepare_ex(w, isa, mem, NULL, NULL, err);
}

ls_status ls_wmat_prepare_ex(ls_wmat *w, ls_isa isa, void *mem, ls_src_done_fn done, void *ctx, ls_err *err) {
    if (ls_wmat_prepared(w, isa)) return LS_OK;
    const ls_kvtab *vt = ls_kvtab_for(isa);
    size_t b = ls_wmat_prepare_bytes(w, isa);
    if (b) {
        LS_ASSERT(((uintptr_t)mem & 63) == 0);
        if (!mem) {
            LS_ASSERT(!w->prep_owned); /* one ISA-specific layout per matrix (the shared panel copy) */
            if (!(mem = w->prep_owned = ls_aligned_alloc(64, b)))
                return ls_err_set(err, LS_E_NOMEM, "out of memory preparing a %lld x %lld matrix for %s (%zu bytes)",
                                  (long long)w->N, (long long)w->K, ls_isa_name(isa), b);
        }
        w->src_done = done;
        w->src_done_ctx = ctx;
        w->src_next = w->src;
        vt->prepare(w, mem);
        w->src_done = NULL;
        w->src_done_ctx = NULL;
    }
    w->prepared |= 1u << isa;
    return LS_OK;
}

bool ls_wmat_prepared(const ls_wmat *w, ls_isa isa) { return (w->prepared >> isa) & 1u; }

ls_status ls_wmat_prepare_all(ls_wmat *w, ls_err *err) {
    for (int isa = LS_ISA_SCALAR; isa < LS_ISA_COUNT; isa++) {
        ls_status st = ls_isa_supported((ls_isa)isa) ? ls_wmat_prepare(w, (ls_isa)isa, NULL, err) : LS_OK;
        if (st) return st;
    }
    return LS_OK;
}

void ls_wmat_free(ls_wmat *w) {
    if (!w) return;
    free(w->prep_owned);
    free(w->owned);
    free(w);
}

int64_t ls_wmat_rows(const ls_wmat *w) { return w->N; }
uint32_t ls_wmat_type(const ls_wmat *w) { return w->type; }
const void *ls_wmat_src_row(const ls_wmat *w, int64_t n) { return w->src + (size_t)n * w->src_row_bytes; }
int64_t ls_wmat_cols(const ls_wmat *w) { return w->K; }
size_t ls_wmat_repacked_bytes(const ls_wmat *w) {
    return (w->owned ? (size_t)w->N * w->row_bytes : 0) + (w->panel ? ls_panel_bytes(w) : 0);
}
