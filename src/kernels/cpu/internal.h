/* internal.h - shared by the CPU kernel files only (not part of the contract).
 *
 * Repacked weight layouts, see docs/numerics.md: the panel copy (struct ls_wmat) for the
 * panel types (LS_PANEL_TYPE_LIST), the group records below for MXFP4; a matrix holds one.
 *
 * Group records (MXFP4):
 *   A row of K elements is nb = K/32 "units" of 32 elements (the recipe's blocks b).
 *   Units are grouped 16 at a time (group G holds units 16G..16G+15; the last group
 *   holds L = nb - 16*G < 16 units when nb is not a multiple of 16).  A group is a
 *   record of per-unit scale fields followed by the integer weights, "transposed"
 *   so that one 32-bit lane l holds 4 consecutive elements of unit l:
 *     NIB (4-bit):  4 planes r=0..3, plane r = L lanes x 4 bytes; byte j of lane l
 *                   holds u[4r+j] (low nibble) and u[16+4r+j] (high nibble).
 *     BYTE (8-bit): 8 planes s=0..7, byte j of lane l holds u[4s+j].
 *     Q6 (6-bit):   a NIB part (low 4 bits) + 2 planes h=0..1 of 2-bit fields:
 *                   byte j of lane l, bits 2k..2k+1 hold u[4(4h+k)+j] >> 4.
 *   u are unsigned codes (see ls_rec / docs: value = u - offset, or a table).
 *   Activations are stored in the same transposed order (8 planes of L lanes x 4),
 *   so a group's integer dot product is lane-wise (VNNI dpbusd, 16 lanes at once).
 */
#ifndef LS_KERNELS_CPU_INTERNAL_H
#define LS_KERNELS_CPU_INTERNAL_H

#include <string.h>

#include "kernels/cpu/kernels.h"
#include "quant/quant.h"

#define LS_GROUP 16     /* units per group record (one zmm of int32 lanes) */
#define LS_NGRP 32      /* accumulation groups of the canonical recipe */
#define LS_FLANES 16    /* lanes of the float (F32/F16/BF16) recipe */

/* Per-group record field offsets for L units; sizes in bytes. */
typedef struct {
    uint32_t d, m, e;       /* per-unit fp16 d / fp16 m / E8M0 byte (MXFP4) */
    uint32_t dk, dmk;       /* per-super-block fp16 d / dmin (K-quants): L/8 of each */
    uint32_t sc, mn;        /* per-unit u8 scale / u8 min (Q4_K, Q5_K); Q6_K: sc = 2L int8 */
    uint32_t bits, hb;      /* integer weights (NIB or BYTE planes) / Q6 2-bit planes */
    uint32_t size;
} ls_rec;

typedef enum { LS_ST_NIB, LS_ST_BYTE, LS_ST_Q6, LS_ST_FLOAT } ls_storage;

struct ls_wmat {
    uint32_t type;
    const struct ls_wtype_s *wt; /* the type's row (ls_wtype) */
    int64_t N, K;
    int64_t nb;             /* units per row (quantized types) */
    ls_storage st;
    size_t row_bytes;       /* stride between rows in data */
    ls_rec rec16, rec_tail; /* record layouts for a full group and for the last group */
    int tail;               /* units in the last group (nb % 16), 0 if none */
    const uint8_t *data;    /* group records (owned; MXFP4), the caller's data (float types), else NULL */
    const uint8_t *src;     /* the caller's ggml-layout rows (must outlive the matrix) */
    size_t src_row_bytes;
    void *owned;
    unsigned prepared;      /* bit isa: ls_wmat_prepare ran for that ISA */
    void *prep_owned;       /* what ls_wmat_prepare allocated itself (mem NULL), freed with the matrix */
    /* Panel copy (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K: their only repacked
     * layout; built by the first ls_wmat_prepare, of any ISA, read by every ISA; else NULL):
     * rows in panels of 16 (the last one zero-padded); panel P is panel_bytes long at
     * panel + P * panel_bytes and holds, for unit b = 0..nb-1, the codes of its 16 rows at
     * b * pcode (planes of 16 lanes x 4 bytes, lane r = row 16P + r: NIB (Q4_0, Q4_1, Q4_K)
     * 4 planes, byte j of a lane in plane q holding elements 4q+j (low nibble) and 16+4q+j
     * (high), as a group record's; BYTE (Q5_0, Q5_1, Q5_K: u <= 31; Q6_K: u <= 63; Q8_0:
     * u = w + 128) 8 planes, plane s holding elements 4s..4s+3), then the scale fields:
     *   Q4_0, Q5_0, Q8_0, Q4_1, Q5_1: the fp16 d of the 16 rows at nb * pcode + 32 b, then
     *               (Q4_1, Q5_1) the fp16 m at nb * (pcode + 32) + 32 b;
     *   Q4_K, Q5_K: the u8 6-bit scale sc of the 16 rows at nb * pcode + 32 b and their
     *               6-bit min mn at nb * pcode + 32 b + 16, then per super-block j = b / 8
     *               the rows' fp16 d at nb * (pcode + 32) + 64 j and fp16 dmin 32 bytes on;
     *   Q6_K:       the int8 scales of the unit's two halves, row r's at
     *               nb * pcode + 32 b + 2 r (elements 0..15) and + 1 (16..31), then per
     *               super-block j = b / 8 the rows' fp16 d at nb * (pcode + 32) + 32 j
     * (the raw fields: the kernels form d * dx, sc * isum and dmin * mn per unit exactly as
     * the recipe's c_b does). */
    uint8_t *panel;
    size_t panel_bytes, pcode;
    /* During ls_wmat_prepare_ex only: where the build hands back the source rows it has
     * read (ls_panel_build, in row order), and the first byte not handed back yet. */
    ls_src_done_fn src_done;
    void *src_done_ctx;
    const uint8_t *src_next;
};

/* One decoded unit of 32 elements: unsigned codes and its raw scale fields. */
typedef struct {
    uint8_t u[32];
    uint16_t d, m;      /* fp16 bits (d also the super-block d for K-quants) */
    uint16_t dmin;      /* K-quants */
    uint8_t e;          /* MXFP4 */
    uint8_t sc, mn;     /* Q4_K/Q5_K 6-bit scale and min */
    int8_t sc6[2];      /* Q6_K scales of the two 16-element halves */
} ls_unit;

/* One matmul call's work: all M rows, columns [n0, n1) per invocation. */
typedef struct {
    const ls_wmat *w;
    const float *x;         /* M x K (float types) */
    const void *xq;         /* quantized activations (quantized types) */
    const uint8_t *xp;      /* their tile-packed copy (AVX-512, M >= 2), or NULL */
    int64_t xp_row0;        /* the packed row of this job's row 0 */
    int64_t M;
    float *y;               /* M x N */
} ls_mm_job;

typedef void (*ls_mm_fn)(const ls_mm_job *job, int64_t n0, int64_t n1);

/* The weight types with a matmul kernel, and the per-ISA entry points each ISA file
 * defines for them (ls_mm_<name>_<isa>). */
#define LS_WTYPE_LIST(X)                                                                    \
    X(LS_TYPE_F32, f32) X(LS_TYPE_F16, f16) X(LS_TYPE_BF16, bf16) X(LS_TYPE_Q4_0, q4_0)      \
    X(LS_TYPE_Q4_1, q4_1) X(LS_TYPE_Q5_0, q5_0) X(LS_TYPE_Q5_1, q5_1) X(LS_TYPE_Q8_0, q8_0) \
    X(LS_TYPE_Q4_K, q4_k) X(LS_TYPE_Q5_K, q5_k) X(LS_TYPE_Q6_K, q6_k) X(LS_TYPE_MXFP4, mxfp4)
#define LS_DECL_MM(T, nm)                                                \
    void ls_mm_##nm##_scalar(const ls_mm_job *job, int64_t n0, int64_t n1); \
    void ls_mm_##nm##_avx2(const ls_mm_job *job, int64_t n0, int64_t n1);   \
    void ls_mm_##nm##_avxvnni(const ls_mm_job *job, int64_t n0, int64_t n1); \
    void ls_mm_##nm##_avx512(const ls_mm_job *job, int64_t n0, int64_t n1); \
    void ls_mm_##nm##_amx(const ls_mm_job *job, int64_t n0, int64_t n1);
LS_WTYPE_LIST(LS_DECL_MM)

/* The types with a panel copy (struct ls_wmat, wmat.c), their one repacked layout, read by
 * every ISA's kernels at every M.  Each SIMD file makes one panel kernel per entry. */
#define LS_PANEL_TYPE_LIST(X)                                                                  \
    X(LS_TYPE_Q4_0, q4_0) X(LS_TYPE_Q4_1, q4_1) X(LS_TYPE_Q5_0, q5_0) X(LS_TYPE_Q5_1, q5_1)     \
    X(LS_TYPE_Q8_0, q8_0) X(LS_TYPE_Q4_K, q4_k) X(LS_TYPE_Q5_K, q5_k) X(LS_TYPE_Q6_K, q6_k)
#define LS_PANEL_CASE_TRUE(T, nm) case T: return true;
static inline bool ls_panel_type(uint32_t type) {
    switch (type) {
    LS_PANEL_TYPE_LIST(LS_PANEL_CASE_TRUE)
    default: return false;
    }
}
#undef LS_PANEL_CASE_TRUE

/* A weight type's row (wtypes.c): everything about it that is not SIMD code. */
typedef struct ls_wtype_s {
    uint32_t type;
    ls_storage st;
    int32_t block;          /* elements per ggml block: 32, 256 (K-quants), 1 (float types) */
    ls_rec (*layout)(uint32_t L); /* a group record of L units (NULL for float types) */
    void (*decode)(const uint8_t *blk, ls_unit *un); /* one ggml block -> block / 32 units */
    void (*put_scales)(const ls_rec *r, uint32_t l, const ls_unit *un, uint8_t *rec); /* into lane l */
    void (*get_scales)(const ls_rec *r, uint32_t l, const uint8_t *rec, ls_unit *un); /* out of lane l */
    /* Step 2 of the recipe for one unit: f its raw scale fields, u its 32 codes, q the
     * activation block's 32 codes, dx and sx its scale and scaled sum (the scalar
     * definition). */
    float (*unit_c)(const ls_unit *f, const int16_t *u, const int16_t *q, float dx, float sx);
    ls_mm_fn mm[LS_ISA_COUNT]; /* the kernels, indexed by ls_isa */
} ls_wtype;
/* The row of a type with a matmul kernel, or NULL. */
const ls_wtype *ls_wtype_get(uint32_t type);
/* Decodes ggml block blk of weight row n (from the matrix's source data) into its
 * units (1, or 8 for K-quants). */
void ls_wmat_decode_block(const ls_wmat *w, int64_t n, int64_t blk, ls_unit *un);
/* Reads unit b of weight row n back out of the panel copy: its codes and raw scale
 * fields, as ls_wmat_decode_block gave them to ls_panel_build (the scalar kernels' reader
 * of the panel types). */
void ls_panel_unit(const ls_wmat *w, int64_t n, int64_t b, ls_unit *un);

/* Activation-quantization scratch, one row: transposed int8 q (K bytes, same plane
 * order as BYTE weights), then per unit: dx (float), sx (float), sq = sum q (int32),
 * sqlo = sum of the first 16 q (int32).  Rows are xq_row_bytes(K) apart. */
static inline size_t ls_xq_row_bytes(int64_t K) {
    size_t nb = (size_t)(K / 32);
    return ((size_t)K + 16 * nb + 63) & ~(size_t)63;
}
typedef struct {
    const int8_t *q;
    const float *dx, *sx;
    const int32_t *sq, *sqlo;
} ls_xq;
static inline ls_xq ls_xq_row(const void *scratch, int64_t K, int64_t m) {
    const uint8_t *base = (const uint8_t *)scratch + (size_t)m * ls_xq_row_bytes(K);
    size_t nb = (size_t)(K / 32);
    ls_xq r;
    r.q = (const int8_t *)base;
    r.dx = (const float *)(base + K);
    r.sx = r.dx + nb;
    r.sq = (const int32_t *)(r.sx + nb);
    r.sqlo = r.sq + nb;
    return r;
}
/* Byte offset in a row's q of chunk s (elements 4s..4s+3) of unit b: units are stored
 * in groups of LS_GROUP, chunk-major inside a group (chunk s of the group's L units,
 * then chunk s + 1), L = LS_GROUP but for a partial last group. */
static inline int64_t ls_xq_chunk(int64_t nb, int64_t b, int64_t s) {
    int64_t G = b / LS_GROUP, l = b % LS_GROUP;
    int64_t L = (G + 1) * LS_GROUP <= nb ? LS_GROUP : nb % LS_GROUP;
    return G * (LS_GROUP * 32) + (s * L + l) * 4;
}
/* Activation blocks with amax below this quantize to q = 0, d = 0 (as amax == 0). */
#define LS_QX_TINY 0x1p-100f
void ls_quantize_x_row(const float *x, int64_t K, void *row_out);
/* The same with AVX-512 (same bits: every step is exact or one lane-wise rounding), also
 * writing the row's tile-packed records (below) when xp is not NULL: xp is the row's
 * record of unit 0, unit b's at xp + b * LS_XP_UNIT. */
void ls_quantize_x_row_avx512(const float *x, int64_t K, void *row_out, uint8_t *xp);
/* The same with AVX2 (same bits), also writing the tile-packed records when xp is not NULL. */
void ls_quantize_x_row_avx2(const float *x, int64_t K, void *row_out, uint8_t *xp);
/* The prepare hook of every ISA's entry (wmat.c): the panel copy (struct ls_wmat), one
 * layout shared by all of them (built once per matrix). */
size_t ls_panel_bytes(const ls_wmat *w);
void ls_panel_build(ls_wmat *w, void *mem);
/* The same through the type's block decoder, for every type (tests: the per-type
 * builders of ls_panel_build must give its bytes). */
void ls_panel_build_ref(ls_wmat *w, void *mem);

/* Tile-packed copy of a call's quantized activations, read by the multi-row panel
 * kernels (AVX-512, AVX-VNNI, AVX2): rows in tiles of LS_XP_R (row m: tile m / LS_XP_R, lane m % LS_XP_R);
 * per tile, per unit b, an LS_XP_UNIT-byte record of LS_XP_ROW bytes per lane r: the
 * unit's 32 code bytes in slot order (slot s = elements 4s..4s+3 at 4s), then dx
 * (float), sx (float), 128 * sq (int32), and the sums of the two 16-element halves' q as
 * two int16 (|sum| <= 16 * 127).  A tile's rows are then read at constant
 * offsets from one pointer, with no per-row address arithmetic; 4 lanes fill 3 whole
 * cache lines, so threads packing rows in groups of 4 never write the same line. */
#define LS_XP_R 12
#define LS_XP_ROW 48

/* The panel kernels' prefetch hint for the next panel's units (matmul_avx2.c,
 * matmul_avx512.c): into L2, not L1.  The prefetch runs one panel ahead, and a panel of
 * 16 rows is 37 KiB at K = 4096 (Q4_K) and 129 KiB at 14336: more than an L1 holds (32
 * KiB on Zen 4), so lines fetched into L1 that far ahead were evicted before their use.
 * Measured on a 2-vCPU Zen 4 (EPYC) guest, kp_mm, one thread, a 4096 x 65536 matrix from
 * DRAM at M = 1: Q4_K 0.65x the time at AVX2 and 0.68x at AVX-512, Q6_K 0.68x and 0.70x;
 * M = 128 the same (the panel block sits in L2 there). */
#define LS_PANEL_PF_HINT _MM_HINT_T1
#define LS_XP_DX 32
#define LS_XP_SX 36
#define LS_XP_SQ 40
#define LS_XP_SQP 44 /* int16 sum of q_0..q_15, int16 sum of q_16..q_31 (Q6_K's halves) */
#define LS_XP_UNIT (LS_XP_R * LS_XP_ROW)
static inline size_t ls_xp_tile_bytes(int64_t K) { return (size_t)(K / 32) * LS_XP_UNIT; }
static inline size_t ls_xp_bytes(int64_t M, int64_t K) {
    return (size_t)((M + LS_XP_R - 1) / LS_XP_R) * ls_xp_tile_bytes(K);
}

/* An instruction set's entry in the dispatch table (dispatch.c): its per-row
 * operation kernels and what its matmul kernels need. */
typedef struct {
    ls_isa isa;
    /* Step 1 of the recipe for one row (same bits on every ISA); xp: the row's
     * tile-packed records, written only where packs_rows (else NULL). */
    void (*quantize_row)(const float *x, int64_t K, void *row_out, uint8_t *xp);
    bool packs_rows;        /* the multi-row kernel reads the tile-packed activation copy */
    /* The weight layout beyond the group records (every ISA: the shared panel copy of the
     * panel types), built once per matrix by ls_wmat_prepare: its size for w (0: none
     * needed) and the builder, into mem of that size (64-byte aligned). */
    size_t (*prepare_bytes)(const ls_wmat *w);
    void (*prepare)(ls_wmat *w, void *mem);
    void (*rmsnorm_row)(const float *x, const float *w, float eps, int64_t n, float *out);
    void (*swiglu_row)(const float *g, const float *u, int64_t n, float *out);
    void (*rope_row)(float *x, int n_heads, int head_stride, int head_dim, bool neox, const float *cs,
                     const float *sn);
    /* One query head against keys k0..n_keys-1 (scores[j - k0]: the recipe over those keys). */
    void (*attn_head)(const float *q, int64_t k0, int64_t n_keys, const ls_kv_view *kv, int kv_off, int kv_stride,
                      int head_dim, float scale, float *out, float *scores);
    void (*expf_n)(const float *x, int64_t n, float *out);
    /* Attention for blocks of rows x heads sharing loads (NULL: one (row, head) at a
     * time), for head_dim a multiple of 16 up to attn_block_head_dim. */
    void (*attn_block)(int nr, int nh, const float *q, int64_t row_stride, int q_stride, const int32_t *pos,
                       int32_t window, const ls_kv_view *kv, int kv_off, int kv_stride, int head_dim, float scale, float *out,
                       float *scores, size_t per);
    int attn_block_head_dim;
} ls_kvtab;

/* AVX-512 attention for a block of nr rows of one sequence x nh (<= LS_ATTN_HMAX) query
 * heads sharing a kv head, nr * nh <= LS_ATTN_VMAX vectors (same bits as
 * ls_attn_head_avx512 per row and head).  Row r's queries are q + r * row_stride + h *
 * q_stride (out likewise), at position pos[r], reading keys ls_attn_first(pos[r], window)..pos[r].
 * head_dim: a multiple of 16, at most 64.
 * scores: nr * nh x per floats. */
#define LS_ATTN_HMAX 4
#define LS_ATTN_VMAX 12
void ls_attn_block_avx512(int nr, int nh, const float *q, int64_t row_stride, int q_stride, const int32_t *pos,
                          int32_t window, const ls_kv_view *kv, int kv_off, int kv_stride, int head_dim, float scale, float *out,
                          float *scores, size_t per);

/* Work handed out by ls_pool_run_dyn's tasks: claims the next piece of [0, total) from
 * *next for one of nth participants, a 1/(2 nth) share of what is left and at least min
 * items (guided self-scheduling: a participant slowed by a neighbour on its core takes
 * fewer).  False when nothing is left.  Which participant computes an item never changes
 * its bits.  ls_claim_seg does the same inside segments of seg items ([0, seg), [seg,
 * 2 seg), ...): a piece never crosses a segment's end, and the share is of what is left of
 * the current segment. */
static inline bool ls_claim_seg(int64_t *next, int64_t total, int64_t seg, int nth, int64_t min, int64_t *a,
                                int64_t *b) {
    int64_t cur = __atomic_load_n(next, __ATOMIC_RELAXED), take;
    do {
        if (cur >= total) return false;
        const int64_t end = (cur / seg + 1) * seg, left = (end < total ? end : total) - cur;
        take = left / (2 * (int64_t)nth);
        if (take < min) take = min;
        if (take > left) take = left;
    } while (!__atomic_compare_exchange_n(next, &cur, cur + take, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    *a = cur;
    *b = cur + take;
    return true;
}
static inline bool ls_claim(int64_t *next, int64_t total, int nth, int64_t min, int64_t *a, int64_t *b) {
    return ls_claim_seg(next, total, total, nth, min, a, b);
}

/* The first key a row at position pos reads: pos - window + 1 in a sliding-window layer
 * (window > 0; never below 0), else 0. */
static inline int64_t ls_attn_first(int64_t pos, int32_t window) {
    return window > 0 && pos >= window ? pos - window + 1 : 0;
}

/* The same with AVX2 (ops_avx2.c; same bits as ls_attn_head_avx2 per row and head), for
 * the AVX2 and AVX-VNNI levels. */
void ls_attn_block_avx2(int nr, int nh, const float *q, int64_t row_stride, int q_stride, const int32_t *pos,
                        int32_t window, const ls_kv_view *kv, int kv_off, int kv_stride, int head_dim, float scale, float *out,
                        float *scores, size_t per);

/* Key row j of a paged view (kv_off selects the kv head inside the row). */
static inline const float *ls_kv_krow(const ls_kv_view *kv, int kv_off, int kv_stride, int64_t j) {
    return kv->k + (int64_t)kv->blocks[j >> kv->block_shift] * kv->block_stride +
           (j & (((int64_t)1 << kv->block_shift) - 1)) * kv_stride + kv_off;
}
static inline const float *ls_kv_vrow(const ls_kv_view *kv, int kv_off, int kv_stride, int64_t j) {
    return kv->v + (int64_t)kv->blocks[j >> kv->block_shift] * kv->block_stride +
           (j & (((int64_t)1 << kv->block_shift) - 1)) * kv_stride + kv_off;
}

/* The dispatch table: the one place that maps an ISA to its kernels. */
const ls_kvtab *ls_kvtab_for(ls_isa isa);

/* Per-ISA kernels (definitions in *_scalar.c / *_avx2.c / *_avx512.c). */
#define LS_DECL_ISA(sfx)                                                                        \
    void ls_rmsnorm_row_##sfx(const float *x, const float *w, float eps, int64_t n, float *out); \
    void ls_swiglu_row_##sfx(const float *g, const float *u, int64_t n, float *out);            \
    void ls_rope_row_##sfx(float *x, int n_heads, int head_stride, int head_dim, bool neox,     \
                           const float *cs, const float *sn);                                   \
    void ls_attn_head_##sfx(const float *q, int64_t k0, int64_t n_keys, const ls_kv_view *kv,   \
                            int kv_off, int kv_stride, int head_dim, float scale, float *out, float *scores); \
    void ls_expf_n_##sfx(const float *x, int64_t n, float *out);
LS_DECL_ISA(scalar)
LS_DECL_ISA(avx2)
LS_DECL_ISA(avx512)

/* ---- small exact helpers shared by all ISAs -------------------------------- */
static inline float ls_k_fp16(uint16_t h) { /* exact IEEE half -> float */
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else { /* subnormal: normalise */
            int sh = 0;
            while (!(m & 0x400)) { m <<= 1; sh++; }
            m &= 0x3ff;
            bits = s | ((uint32_t)(127 - 15 + 1 - sh) << 23) | (m << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13);
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline float ls_k_bits2f(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t ls_k_f2bits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static inline uint16_t ls_k_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
/* Q4_K/Q5_K: unit j's 6-bit scale and min from the block's 12 bytes of them. */
static inline void ls_k_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}
/* ggml_e8m0_to_fp32_half: 2^(e-128) */
static inline float ls_k_e8m0_half(uint8_t e) {
    return ls_k_bits2f(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}
static const int8_t ls_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Adjacent pairwise tree over n (a power of two) values, in place; returns the sum. */
static inline float ls_tree(float *v, int n) {
    for (; n > 1; n /= 2)
        for (int i = 0; i < n / 2; i++) v[i] = v[2 * i] + v[2 * i + 1];
    return v[0];
}

/* ls_expf pieces shared by the SIMD files (see mathfn.c for the recipe). */
#define LS_EXP_LOG2E 1.44269504088896341f
#define LS_EXP_L2U 0.693145751953125f
#define LS_EXP_L2L 1.428606765330187045e-06f
#define LS_EXP_C5 0.000198527617612853646278381f
#define LS_EXP_C4 0.00139304355252534151077271f
#define LS_EXP_C3 0.00833336077630519866943359f
#define LS_EXP_C2 0.0416664853692054748535156f
#define LS_EXP_C1 0.166666671633720397949219f
#define LS_EXP_C0 0.5f
#define LS_EXP_HI 104.0f
#define LS_EXP_LO -104.0f

#endif
