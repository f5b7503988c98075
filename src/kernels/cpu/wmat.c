/* wmat.c - weight matrices: validation and repacking of ggml blocks into the
 * group records described in internal.h.  Repacking is a lossless permutation of
 * each block's integer codes and scale fields; nothing is rounded here. */
#include <stdlib.h>

#include "kernels/cpu/internal.h"
#include "util/alloc.h"

bool ls_matmul_type_supported(uint32_t type) {
    switch (type) {
    case LS_TYPE_F32: case LS_TYPE_F16: case LS_TYPE_BF16:
    case LS_TYPE_Q4_0: case LS_TYPE_Q4_1: case LS_TYPE_Q5_0: case LS_TYPE_Q5_1: case LS_TYPE_Q8_0:
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: case LS_TYPE_Q6_K: case LS_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

static ls_storage ls_type_storage(uint32_t type) {
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q4_1: case LS_TYPE_MXFP4: case LS_TYPE_Q4_K: return LS_ST_NIB;
    case LS_TYPE_Q5_0: case LS_TYPE_Q5_1: case LS_TYPE_Q8_0: case LS_TYPE_Q5_K: return LS_ST_BYTE;
    case LS_TYPE_Q6_K: return LS_ST_Q6;
    default: return LS_ST_FLOAT;
    }
}

/* One decoded unit of 32 elements: unsigned codes and its scale fields (raw). */
typedef struct {
    uint8_t u[32];
    uint16_t d, m;      /* fp16 bits (d also the super-block d for K-quants) */
    uint16_t dmin;      /* K-quants */
    uint8_t e;          /* MXFP4 */
    uint8_t sc, mn;     /* Q4_K/Q5_K 6-bit scale and min */
    int8_t sc6[2];      /* Q6_K scales of the two 16-element halves */
} ls_unit;

static void ls_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Decodes ggml block `blk` of `type` into its units (1, or 8 for K-quants). */
static void ls_decode_block(uint32_t type, const uint8_t *blk, ls_unit *un) {
    switch (type) {
    case LS_TYPE_Q4_0:
    case LS_TYPE_Q4_1:
    case LS_TYPE_MXFP4: {
        const uint8_t *qs;
        if (type == LS_TYPE_MXFP4) {
            un->e = blk[0];
            qs = blk + 1;
        } else if (type == LS_TYPE_Q4_0) {
            un->d = ls_k_rd16(blk);
            qs = blk + 2;
        } else {
            un->d = ls_k_rd16(blk);
            un->m = ls_k_rd16(blk + 2);
            qs = blk + 4;
        }
        for (int j = 0; j < 16; j++) {
            un->u[j] = qs[j] & 0xF;
            un->u[j + 16] = qs[j] >> 4;
        }
        break;
    }
    case LS_TYPE_Q5_0:
    case LS_TYPE_Q5_1: {
        int o = type == LS_TYPE_Q5_0 ? 2 : 4;
        un->d = ls_k_rd16(blk);
        if (type == LS_TYPE_Q5_1) un->m = ls_k_rd16(blk + 2);
        uint32_t qh = (uint32_t)blk[o] | (uint32_t)blk[o + 1] << 8 | (uint32_t)blk[o + 2] << 16 |
                      (uint32_t)blk[o + 3] << 24;
        const uint8_t *qs = blk + o + 4;
        for (int j = 0; j < 16; j++) {
            un->u[j] = (uint8_t)((qs[j] & 0xF) | (((qh >> j) << 4) & 0x10));
            un->u[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
        }
        break;
    }
    case LS_TYPE_Q8_0:
        un->d = ls_k_rd16(blk);
        for (int j = 0; j < 32; j++) un->u[j] = (uint8_t)(blk[2 + j] ^ 0x80); /* u = w + 128 */
        break;
    case LS_TYPE_Q4_K:
    case LS_TYPE_Q5_K: {
        uint16_t d = ls_k_rd16(blk), dmin = ls_k_rd16(blk + 2);
        const uint8_t *scales = blk + 4;
        const uint8_t *qh = blk + 16;
        const uint8_t *ql = type == LS_TYPE_Q4_K ? blk + 16 : blk + 48;
        for (int j = 0; j < 8; j++) {
            ls_unit *x = &un[j];
            x->d = d;
            x->dmin = dmin;
            ls_get_scale_min_k4(j, scales, &x->sc, &x->mn);
            const uint8_t *q = ql + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
                if (type == LS_TYPE_Q5_K && (qh[l] >> j) & 1) v += 16;
                x->u[l] = (uint8_t)v;
            }
        }
        break;
    }
    case LS_TYPE_Q6_K: {
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
        break;
    }
    default: LS_ASSERT(!"ls_decode_block: type");
    }
}

static void ls_w16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Writes unit `un` as lane l of a group record with L lanes at rec. */
static void ls_put_unit(uint32_t type, ls_storage st, const ls_rec *r, uint32_t L, uint32_t l, const ls_unit *un,
                        uint8_t *rec) {
    switch (type) {
    case LS_TYPE_Q4_0: case LS_TYPE_Q8_0: case LS_TYPE_Q5_0: ls_w16(rec + r->d + 2 * l, un->d); break;
    case LS_TYPE_Q4_1: case LS_TYPE_Q5_1:
        ls_w16(rec + r->d + 2 * l, un->d);
        ls_w16(rec + r->m + 2 * l, un->m);
        break;
    case LS_TYPE_MXFP4: rec[r->e + l] = un->e; break;
    case LS_TYPE_Q4_K: case LS_TYPE_Q5_K:
        ls_w16(rec + r->dk + 2 * (l / 8), un->d);
        ls_w16(rec + r->dmk + 2 * (l / 8), un->dmin);
        rec[r->sc + l] = un->sc;
        rec[r->mn + l] = un->mn;
        break;
    case LS_TYPE_Q6_K:
        ls_w16(rec + r->dk + 2 * (l / 8), un->d);
        rec[r->sc + 2 * l] = (uint8_t)un->sc6[0];
        rec[r->sc + 2 * l + 1] = (uint8_t)un->sc6[1];
        break;
    default: break;
    }
    uint8_t *bits = rec + r->bits;
    if (st == LS_ST_BYTE) {
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 4; j++) bits[(s * L + l) * 4 + j] = un->u[4 * s + j];
    } else { /* NIB, and the low 4 bits of Q6 */
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++)
                bits[(q * L + l) * 4 + j] =
                    (uint8_t)((un->u[4 * q + j] & 0xF) | ((un->u[16 + 4 * q + j] & 0xF) << 4));
        if (st == LS_ST_Q6) {
            uint8_t *hb = rec + r->hb;
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 4; j++) {
                    uint8_t v = 0;
                    for (int k = 0; k < 4; k++) v |= (uint8_t)((un->u[4 * (4 * h + k) + j] >> 4) << (2 * k));
                    hb[(h * L + l) * 4 + j] = v;
                }
        }
    }
}

/* Writes unit b of weight row n into the panel copy (see internal.h). */
static void ls_put_panel(const ls_wmat *w, int64_t n, int64_t b, const ls_unit *un) {
    uint8_t *p = w->panel + (size_t)(n / 16) * w->panel_bytes;
    size_t r = (size_t)(n % 16);
    uint8_t *codes = p + (size_t)b * w->pcode;
    if (w->type == LS_TYPE_Q8_0) {
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 4; j++) codes[64 * s + 4 * r + j] = un->u[4 * s + j];
    } else {
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++)
                codes[64 * q + 4 * r + j] = (uint8_t)((un->u[4 * q + j] & 0xF) | ((un->u[16 + 4 * q + j] & 0xF) << 4));
    }
    uint8_t *dp = p + (size_t)w->nb * w->pcode + 32 * (size_t)b;
    ls_w16(dp + 2 * r, un->d);
    if (w->type == LS_TYPE_Q4_1) ls_w16(dp + 32 * (size_t)w->nb + 2 * r, un->m);
}

/* Bytes of one panel of 16 rows: nb units of codes, then the fp16 d (and m) of the rows. */
static size_t ls_panel_unit_bytes(uint32_t type) { return type == LS_TYPE_Q4_1 ? 256 + 64 : 512 + 32; }

size_t ls_wmat_panel_bytes(uint32_t type, int64_t N, int64_t K) {
    if ((type != LS_TYPE_Q4_1 && type != LS_TYPE_Q8_0) || N < 1 || K < 32 || K % 32 || N > ((int64_t)1 << 40) ||
        K > ((int64_t)1 << 30))
        return 0;
    uint64_t np = (uint64_t)(N + 15) / 16, b;
    if (ls_mul_u64(np, (uint64_t)(K / 32) * ls_panel_unit_bytes(type), &b) || b > SIZE_MAX - 64) return 0;
    return ((size_t)b + 63) & ~(size_t)63;
}

ls_wmat *ls_wmat_create(uint32_t type, int64_t N, int64_t K, const void *data, ls_err *err) {
    return ls_wmat_create_in(type, N, K, data, NULL, err);
}

ls_wmat *ls_wmat_create_in(uint32_t type, int64_t N, int64_t K, const void *data, void *panel_mem, ls_err *err) {
    const ls_type_info *ti = ls_type_get(type);
    if (!ls_matmul_type_supported(type)) {
        ls_err_set(err, LS_E_UNSUPPORTED, "matmul does not support weight type %s (ggml type id %u)",
                   ti ? ti->name : "unknown", type);
        return NULL;
    }
    if (N < 1 || K < 1 || N > ((int64_t)1 << 40) || K > ((int64_t)1 << 30)) {
        ls_err_set(err, LS_E_INVALID, "matmul weight shape %lld x %lld out of range", (long long)N, (long long)K);
        return NULL;
    }
    ls_storage st = ls_type_storage(type);
    int64_t bk = st == LS_ST_FLOAT ? 1 : (type == LS_TYPE_Q4_K || type == LS_TYPE_Q5_K || type == LS_TYPE_Q6_K) ? 256 : 32;
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
    w->N = N;
    w->K = K;
    w->st = st;
    w->src = data;
    uint64_t rb = 0;
    (void)ls_type_nbytes(type, (uint64_t)K, &rb, NULL); /* K was checked above */
    w->src_row_bytes = (size_t)rb;
    if (st == LS_ST_FLOAT) {
        w->row_bytes = (size_t)K * (type == LS_TYPE_F32 ? 4 : 2);
        w->data = data;
        return w;
    }
    w->nb = K / 32;
    w->tail = (int)(w->nb % LS_GROUP);
    w->rec16 = ls_rec_layout(type, LS_GROUP);
    w->rec_tail = ls_rec_layout(type, (uint32_t)w->tail);
    w->row_bytes = (size_t)(w->nb / LS_GROUP) * w->rec16.size + (w->tail ? w->rec_tail.size : 0);
    uint64_t total;
    if (ls_mul_u64((uint64_t)N, w->row_bytes, &total) || total > SIZE_MAX - 64) {
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
    if (type == LS_TYPE_Q4_1 || type == LS_TYPE_Q8_0) {
        int64_t np = (N + 15) / 16;
        w->pcode = type == LS_TYPE_Q4_1 ? 256 : 512;
        w->panel_bytes = (size_t)w->nb * ls_panel_unit_bytes(type);
        LS_ASSERT(((uintptr_t)panel_mem & 63) == 0);
        w->panel_owned = !panel_mem;
        w->panel = panel_mem ? panel_mem : ls_aligned_alloc(64, ls_wmat_panel_bytes(type, N, K));
        if (!w->panel) {
            ls_err_set(err, LS_E_NOMEM, "out of memory repacking a %lld x %lld %s matrix (panels)", (long long)N,
                       (long long)K, ti->name);
            free(w->owned);
            free(w);
            return NULL;
        }
        memset(w->panel, 0, (size_t)np * w->panel_bytes);
    }
    const uint8_t *src = data;
    size_t src_row = (size_t)(K / ti->block_elems) * ti->block_bytes;
    int upb = (int)(bk / 32); /* units per ggml block */
    ls_unit un[8];
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *srow = src + (size_t)n * src_row;
        uint8_t *drow = (uint8_t *)w->owned + (size_t)n * w->row_bytes;
        for (int64_t blk = 0; blk < w->nb / upb; blk++) {
            memset(un, 0, sizeof un);
            ls_decode_block(type, srow + (size_t)blk * ti->block_bytes, un);
            for (int t = 0; t < upb; t++) {
                int64_t b = blk * upb + t, G = b / LS_GROUP;
                uint32_t l = (uint32_t)(b % LS_GROUP);
                bool full = (G + 1) * LS_GROUP <= w->nb;
                const ls_rec *r = full ? &w->rec16 : &w->rec_tail;
                uint32_t L = full ? LS_GROUP : (uint32_t)w->tail;
                ls_put_unit(type, st, r, L, l, &un[t], drow + (size_t)G * w->rec16.size);
                if (w->panel) ls_put_panel(w, n, b, &un[t]);
            }
        }
    }
    w->data = w->owned;
    return w;
}

void ls_wmat_free(ls_wmat *w) {
    if (!w) return;
    if (w->panel_owned) free(w->panel);
    free(w->owned);
    free(w);
}

int64_t ls_wmat_rows(const ls_wmat *w) { return w->N; }
uint32_t ls_wmat_type(const ls_wmat *w) { return w->type; }
const void *ls_wmat_src_row(const ls_wmat *w, int64_t n) { return w->src + (size_t)n * w->src_row_bytes; }
int64_t ls_wmat_cols(const ls_wmat *w) { return w->K; }
