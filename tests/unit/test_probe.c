/* The exactness probe and per-row kernel scoping, proved with a test-only matmul
 * family injected through the registry: it reduces in a different order whenever a
 * call has more than one row (as batch-variant GEMMs do), so block-vs-chain differs.
 *   - the probe catches it;
 *   - scoping moves only the rows that need parity to the canonical family;
 *   - a follow-up probe passes;
 *   - rows that do not need parity still run the test family, while rows that do get
 *     the canonical bits (memcmp against the single-sequence path).
 * A family that claims to be canonical but is not makes the probe decline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/spec_probe.h"
#include "quant/quant.h"
#include "quick.h"

static const char *model_path(void) {
    const char *p = getenv("MODEL");
    return p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}
static ls_model *g_model;

/* One row: the canonical kernel (no pool; the best ISA: every ISA gives the canonical bits,
 * test_kernels checks that, and the scalar one made this test 3x slower). */
static void canonical_rows(const ls_wmat *w, const float *x, int64_t M, float *y, int64_t n0, int64_t n1) {
    int64_t K = ls_wmat_cols(w), N = ls_wmat_rows(w);
    size_t sb = ls_matmul_scratch_bytes(1, K);
    void *scratch = malloc(sb);
    float *row = malloc(sizeof(float) * (size_t)N);
    ls_kctx kc = {.isa = ls_isa_best(), .scratch = scratch, .scratch_bytes = sb};
    for (int64_t m = 0; m < M; m++) {
        ls_matmul(&kc, w, x + m * K, 1, row);
        memcpy(y + m * N + n0, row + n0, sizeof(float) * (size_t)(n1 - n0));
    }
    free(row);
    free(scratch);
}

/* M > 1: a plain sequential float dot product of x with the dequantized row. */
static void reordered(const ls_wmat *w, const float *x, int64_t M, float *y, int64_t n0, int64_t n1) {
    if (M == 1) {
        canonical_rows(w, x, M, y, n0, n1);
        return;
    }
    int64_t K = ls_wmat_cols(w), N = ls_wmat_rows(w);
    float *wr = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = n0; n < n1; n++) {
        ls_dequant_row(ls_wmat_type(w), ls_wmat_src_row(w, n), wr, K);
        for (int64_t m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += x[m * K + k] * wr[k];
            y[m * N + n] = acc;
        }
    }
    free(wr);
}

static const ls_mm_family fam_test = {"test-reordered", false, reordered};
static const ls_mm_family fam_liar = {"test-liar", true, reordered}; /* claims canonical, is not */
static const ls_mm_family *g_test = &fam_test, *g_liar = &fam_liar;

static int group_setup(void **state) {
    (void)state;
    if (access(model_path(), R_OK) != 0) return 0;
    ls_err err;
    g_model = ls_model_load((ls_model_params){.path = model_path()}, &err);
    return g_model ? 0 : -1;
}
static int group_teardown(void **state) {
    (void)state;
    ls_model_free(g_model);
    return 0;
}

static void test_builtin_families(void **state) {
    (void)state;
    assert_ptr_equal(ls_mm_family_builtin("wide"), &ls_mm_wide);
    assert_ptr_equal(ls_mm_family_builtin("narrow"), &ls_mm_narrow);
    assert_null(ls_mm_family_builtin("test-reordered")); /* a caller's family is not global */
    assert_null(ls_mm_family_builtin("nope"));
    assert_true(ls_mm_wide.canonical && ls_mm_narrow.canonical);
}

static void test_probe_exact_on_canonical(void **state) {
    (void)state;
    if (!g_model) skip();
    SKIP_AT_SMOKE();
    ls_err err;
    const ls_mm_family *fams[2] = {&ls_mm_wide, &ls_mm_narrow};
    for (int fi = 0; fi < 2; fi++) {
        const ls_mm_family *fam = fams[fi];
        ls_fwd *f = ls_fwd_create(g_model, (ls_fwd_params){.n_rows = 64, .n_ctx = 128, .n_threads = 2, .isa = -1,
                                                             .fam = fam, .fam_parity = fam}, &err);
        assert_non_null(f);
        ls_spec_probe_result r;
        assert_int_equal(ls_spec_probe(g_model, f, 8, 3, 1, &r, &err), LS_OK);
        if (r.verdict != LS_VERDICT_EXACT) fail_msg("family %s: %s", fam->name, r.detail);
        assert_true(r.block_vs_chain && r.batch_mix && r.chunked_prefill);
        print_message("probe on %s: exact in %.0f ms\n", fam->name, r.ms);
        ls_fwd_free(f);
    }
}

static void test_probe_scopes_a_failing_family(void **state) {
    (void)state;
    if (!g_model) skip();
    SKIP_AT_SMOKE();
    ls_err err;
    ls_fwd *f = ls_fwd_create(g_model, (ls_fwd_params){.n_rows = 64, .n_ctx = 128, .n_threads = 2, .isa = -1,
                                                         .fam = g_test, .fam_parity = g_test}, &err);
    assert_non_null(f);
    ls_spec_probe_result r;
    assert_int_equal(ls_spec_probe(g_model, f, 4, 3, 7, &r, &err), LS_OK);
    assert_int_equal(r.verdict, LS_VERDICT_SCOPED);            /* caught, then scoped */
    assert_true(strstr(r.detail, "block vs chain") || strstr(r.detail, "chunked"));
    assert_ptr_equal(r.fam_parity_before, g_test);
    assert_ptr_equal(r.fam_parity_after, &ls_mm_wide);
    assert_ptr_equal(ls_fwd_parity_family(f), &ls_mm_wide);
    assert_ptr_equal(ls_fwd_family(f), g_test);                /* rows without a parity need keep it */
    assert_true(r.block_vs_chain && r.batch_mix && r.chunked_prefill);
    ls_spec_probe_result again;                                 /* a follow-up probe passes */
    assert_int_equal(ls_spec_probe(g_model, f, 4, 3, 99, &again, &err), LS_OK);
    assert_int_equal(again.verdict, LS_VERDICT_EXACT);

    /* One batch: 3 rows that need parity, 3 that do not (another sequence). */
    const int32_t V = (int32_t)ls_model_hparams(g_model)->n_vocab;
    ls_kv_store *kv = ls_kv_store_create(g_model, 4, &err);
    int32_t ta[2] = {0, 1}, tb[2] = {2, 3};
    const int32_t *tables[2] = {ta, tb};
    int32_t tok[6] = {1000, 2000, 3000, 1000, 2000, 3000}, pos[6] = {0, 1, 2, 0, 1, 2}, seq[6] = {0, 0, 0, 1, 1, 1};
    int32_t lrow[6] = {0, 1, 2, 3, 4, 5};
    uint8_t need[6] = {1, 1, 1, 0, 0, 0};
    float *lg = malloc(sizeof(float) * (size_t)V * 6), *ref = malloc(sizeof(float) * (size_t)V * 3);
    uint64_t before = ls_fwd_rows(f, false), before_wide = ls_fwd_rows(f, true);
    ls_fwd_run(f, kv, &(ls_batch){6, tok, pos, seq, tables, lrow, need, NULL, NULL}, lg);
    assert_true(ls_fwd_rows(f, false) > before);               /* the free rows ran the test family */
    assert_true(ls_fwd_rows(f, true) > before_wide);           /* the parity rows the canonical one */
    ls_ctx *c = ls_ctx_create(g_model, (ls_ctx_params){.n_ctx = 16, .n_threads = 1, .isa = -1}, &err);
    assert_int_equal(ls_ctx_eval(c, tok, 3, 0, ref, true, &err), LS_OK);
    assert_memory_equal(lg, ref, sizeof(float) * (size_t)V * 3); /* parity rows: canonical bits */
    assert_true(memcmp(lg + (size_t)V * 3, ref, sizeof(float) * (size_t)V * 3) != 0); /* free rows: not */
    ls_ctx_free(c);
    free(lg);
    free(ref);
    ls_kv_store_free(kv);
    ls_fwd_free(f);
}

static void test_probe_declines_a_lying_canonical_family(void **state) {
    (void)state;
    if (!g_model) skip();
    SKIP_AT_SMOKE();
    ls_err err;
    ls_fwd *f = ls_fwd_create(g_model, (ls_fwd_params){.n_rows = 64, .n_ctx = 128, .n_threads = 1, .isa = -1,
                                                         .fam = g_liar, .fam_parity = g_liar}, &err);
    ls_spec_probe_result r;
    assert_int_equal(ls_spec_probe(g_model, f, 2, 3, 3, &r, &err), LS_OK);
    assert_int_equal(r.verdict, LS_VERDICT_DECLINED);
    assert_ptr_equal(ls_fwd_parity_family(f), g_liar); /* nothing to scope to: declined */
    ls_fwd_free(f);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_families),
        cmocka_unit_test(test_probe_exact_on_canonical),
        cmocka_unit_test(test_probe_scopes_a_failing_family),
        cmocka_unit_test(test_probe_declines_a_lying_canonical_family),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
