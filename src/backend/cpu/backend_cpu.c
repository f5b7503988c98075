/* backend_cpu.c - the CPU backend behind the engine's seam (engine/backend.h): the
 * canonical kernels of src/kernels/cpu through this folder's forward (forward.c) and
 * paged KV store (kv_store.c). */
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/engine_test.h"

static void *cpu_fwd_create(const ls_model *m, const ls_backend_params *p, ls_err *err) {
    const ls_engine_test *t = p->test;
    const ls_mm_family *named = NULL;
    if (p->kernels && *p->kernels && strcmp(p->kernels, "auto") && !(named = ls_mm_family_builtin(p->kernels))) {
        ls_err_set(err, LS_E_INVALID, "no kernel family '%s' (available: auto, wide, narrow)", p->kernels);
        return NULL;
    }
    ls_fwd_params fp = {.n_rows = p->n_rows, .n_ctx = p->n_ctx, .n_threads = p->n_threads, .isa = p->isa,
                        .layers = p->layers, .n_layers = p->n_layers,
                        .fam = t && t->fam ? t->fam : named, .fam_parity = t && t->fam_parity ? t->fam_parity : named,
                        .faults = t ? t->faults : 0, .pool = p->pool, .mtp = p->mtp};
    return ls_fwd_create(m, fp, err);
}
static void cpu_fwd_free(void *f) { ls_fwd_free(f); }
static void *cpu_kv_create(const ls_model *m, int32_t n_blocks, int32_t n_layers, ls_err *err) {
    const ls_hparams *hp = ls_model_hparams(m);
    return ls_kv_store_create_shape(n_layers ? n_layers : (int32_t)hp->n_layer, (int32_t)hp->n_head_kv,
                                    (int32_t)hp->head_dim, n_blocks, err);
}
static void cpu_kv_free(void *kv) { ls_kv_store_free(kv); }
static ls_status cpu_kv_block_copy(void *kv, int32_t dst, int32_t src, int32_t n_pos, ls_err *err) {
    (void)err;
    ls_kv_block_copy(kv, dst, src, n_pos);
    return LS_OK;
}
static ls_status cpu_kv_block_get(void *kv, int32_t b, void *out, ls_err *err) {
    (void)err;
    ls_kv_block_get(kv, b, out);
    return LS_OK;
}
static ls_status cpu_kv_block_put(void *kv, int32_t b, const void *in, ls_err *err) {
    (void)err;
    ls_kv_block_put(kv, b, in);
    return LS_OK;
}
static ls_status cpu_run(void *f, void *kv, const ls_batch *b, float *logits, ls_err *err) {
    (void)err;
    ls_fwd_run(f, kv, b, logits);
    return LS_OK;
}
static void cpu_info(void *fwd, ls_backend_info *o) {
    ls_fwd *f = fwd;
    const ls_mm_family *fp = ls_fwd_parity_family(f);
    o->device[0] = 0;
    o->isa = ls_fwd_isa(f);
    o->n_threads = ls_fwd_n_threads(f);
    snprintf(o->kernels, sizeof o->kernels, "%s", fp->name);
    snprintf(o->kernels_free, sizeof o->kernels_free, "%s", ls_fwd_family(f)->name);
    o->parity_canonical = fp->canonical;
    snprintf(o->kernels_withdrawn, sizeof o->kernels_withdrawn, "%s", ls_mm_wide.name);
    o->pool = ls_fwd_pool(f);
}
static bool cpu_withdraw(void *fwd) {
    if (ls_fwd_parity_family(fwd)->canonical) return false;
    ls_fwd_set_parity_family(fwd, &ls_mm_wide);
    return true;
}

const ls_backend ls_backend_cpu = {"cpu", cpu_fwd_create, cpu_fwd_free, cpu_kv_create, cpu_kv_free,
                                   cpu_kv_block_copy, cpu_run, cpu_info, cpu_withdraw, cpu_kv_block_get,
                                   cpu_kv_block_put};
