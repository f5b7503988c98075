/* dispatch.c - the one table that maps an instruction set to its kernels: the
 * per-row operations, the activation quantizer, the ISA's own weight layout (prepare)
 * and attention's row blocks.  Matmul kernels per weight type are the type's row in
 * wtypes.c, indexed by ISA.  Chosen per call from ls_kctx.isa; there is no
 * process-wide switch. */
#include "kernels/cpu/internal.h"

static void ls_quantize_row_plain(const float *x, int64_t K, void *row_out, uint8_t *xp) {
    LS_ASSERT(!xp); /* the scalar kernels read no packed copy */
    ls_quantize_x_row(x, K, row_out);
}

#define LS_ROWOPS(sfx) \
    ls_rmsnorm_row_##sfx, ls_swiglu_row_##sfx, ls_rope_row_##sfx, ls_attn_head_##sfx, ls_expf_n_##sfx

static const ls_kvtab ls_vt_scalar = {LS_ISA_SCALAR, ls_quantize_row_plain, false, ls_panel_bytes, ls_panel_build,
                                      LS_ROWOPS(scalar), NULL, 0};
static const ls_kvtab ls_vt_avx2 = {LS_ISA_AVX2,    ls_quantize_x_row_avx2, true, ls_panel_bytes, ls_panel_build,
                                    LS_ROWOPS(avx2), ls_attn_block_avx2,     64};
/* AVX-VNNI: the AVX2 row operations and quantizer; only the matmul kernels differ. */
static const ls_kvtab ls_vt_avxvnni = {LS_ISA_AVXVNNI, ls_quantize_x_row_avx2, true, ls_panel_bytes, ls_panel_build,
                                       LS_ROWOPS(avx2), ls_attn_block_avx2,     64};
static const ls_kvtab ls_vt_avx512 = {LS_ISA_AVX512,        ls_quantize_x_row_avx512, true, ls_panel_bytes,
                                      ls_panel_build,       LS_ROWOPS(avx512),        ls_attn_block_avx512,
                                      64};
/* AMX: the AVX-512 row operations and quantizer; only the multi-row matmul tiles differ. */
static const ls_kvtab ls_vt_amx = {LS_ISA_AMX,           ls_quantize_x_row_avx512, true, ls_panel_bytes,
                                   ls_panel_build,       LS_ROWOPS(avx512),        ls_attn_block_avx512,
                                   64};

const ls_kvtab *ls_kvtab_for(ls_isa isa) {
    LS_ASSERT(ls_isa_supported(isa)); /* a kctx must carry an ISA this CPU runs (ls_isa_from_env checks) */
    switch (isa) {
    case LS_ISA_SCALAR: return &ls_vt_scalar;
    case LS_ISA_AVX2: return &ls_vt_avx2;
    case LS_ISA_AVXVNNI: return &ls_vt_avxvnni;
    case LS_ISA_AVX512: return &ls_vt_avx512;
    case LS_ISA_AMX: return &ls_vt_amx;
    default: break;
    }
    LS_ASSERT(!"ls_kvtab_for: unknown isa");
    return NULL;
}
