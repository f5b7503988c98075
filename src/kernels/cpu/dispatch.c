/* dispatch.c - the one table that maps an instruction set to its kernels.
 * Chosen per call from ls_kctx.isa; there is no process-wide switch. */
#include "kernels/cpu/internal.h"

#define LS_VTAB(sfx) \
    { ls_mm_##sfx, ls_rmsnorm_row_##sfx, ls_swiglu_row_##sfx, ls_rope_row_##sfx, ls_attn_head_##sfx, ls_expf_n_##sfx }

static const ls_kvtab ls_vt_scalar = LS_VTAB(scalar);
static const ls_kvtab ls_vt_avx2 = LS_VTAB(avx2);
static const ls_kvtab ls_vt_avx512 = LS_VTAB(avx512);

const ls_kvtab *ls_kvtab_for(ls_isa isa) {
    LS_ASSERT(ls_isa_supported(isa)); /* a kctx must carry an ISA this CPU runs (ls_isa_from_env checks) */
    switch (isa) {
    case LS_ISA_SCALAR: return &ls_vt_scalar;
    case LS_ISA_AVX2: return &ls_vt_avx2;
    case LS_ISA_AVX512: return &ls_vt_avx512;
    }
    LS_ASSERT(!"ls_kvtab_for: unknown isa");
    return NULL;
}
