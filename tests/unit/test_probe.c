/* The parity probe (lockstep.h, ls_engine_probe) runs through the serving engine and
 * must catch every way the contract can break, each on the axis it breaks:
 *   - canonical families on a correct engine: verified, every axis checked;
 *   - a skipped K/V write of a later sequence in a batch (LS_FAULT_KV_SKIP): batch_mix;
 *   - a result that depends on the thread count (LS_FAULT_THREADS): threads;
 *   - a SIMD path whose bits differ from the scalar definition (LS_FAULT_ISA): isa;
 *   - a batch-variant kernel family (one ulp off when rows share a call) for rows that
 *     need parity: caught, withdrawn for
 *     those rows only (scoped); rows without a parity need keep running it, rows with
 *     one get the canonical bits (memcmp against a clean engine);
 *   - a family that claims to be canonical but is not: failed.
 * After a failed verdict the engine declines drafts (fail closed) unless allow_inexact;
 * the verdict is memoized per configuration, and a configuration with a fault never
 * reads a clean one's memo.  A probe that always said "verified" fails this file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/engine_test.h"
#include "quant/quant.h"
#include "quick.h"
#include "speculative/spec.h"
#include "fixture.h"

static ls_model *g_model;

/* One row: the canonical kernel (no pool; the best ISA: every ISA gives the canonical bits,
 * test_kernels checks that). */
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

/* A batch-variant kernel: for M > 1 every output is one ulp off the canonical bits (as
 * a GEMM that reduces in another order when rows share the call would be), so a row's
 * bits depend on whether it shares the call. */
static void reordered(const ls_wmat *w, const float *x, int64_t M, float *y, int64_t n0, int64_t n1) {
    canonical_rows(w, x, M, y, n0, n1);
    if (M == 1) return;
    int64_t N = ls_wmat_rows(w);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = n0; n < n1; n++) y[m * N + n] = nextafterf(y[m * N + n], INFINITY);
}

static const ls_mm_family fam_test = {"test-reordered", false, reordered};
static const ls_mm_family fam_liar = {"test-liar", true, reordered}; /* claims canonical, is not */

static int group_setup(void **state) {
    (void)state;
    g_model = fx_load_model(NULL);
    return 0;
}
static int group_teardown(void **state) {
    (void)state;
    ls_model_free(g_model);
    return 0;
}

/* The configuration `lockstep serve -np 6 --spec ...` would run (small context). */
static ls_engine *engine(unsigned faults, const ls_mm_family *fam, int threads, bool allow_inexact) {
    ls_err err;
    ls_engine_params p = LS_ENGINE_PARAMS_INIT;
    p.n_ctx = 256;
    p.n_seq_max = 6;
    p.step_tokens = 128;
    p.n_threads = threads;
    p.draft_max = 4;
    p.allow_inexact = allow_inexact;
    const ls_engine_test t = {.fam = fam, .fam_parity = fam, .faults = faults};
    ls_engine *e = ls_engine_create_test(g_model, &p, &t, &err);
    if (!e) fail_msg("engine: %s", err.msg);
    return e;
}

static ls_probe_result probe(ls_engine *e, const char *memo_dir) {
    ls_err err;
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    pp.memo_dir = memo_dir;
    ls_probe_result r = LS_PROBE_RESULT_INIT;
    if (ls_engine_probe(e, &pp, &r, &err)) fail_msg("probe could not run: %s", err.msg);
    print_message("probe: %s in %.0f ms (%d rows compared)%s%s\n", ls_verdict_name(r.verdict), r.ms, r.n_rows,
                  r.detail[0] ? ": " : "", r.detail);
    return r;
}

static void test_verified_on_canonical_families(void **state) {
    (void)state;
    FX_NEED(g_model);
    const ls_mm_family *fams[2] = {&ls_mm_wide, &ls_mm_narrow};
    for (int i = 0; i < (test_quick() == 2 ? 1 : 2); i++) { /* smoke size (ASan in CI): the default family */
        ls_engine *e = engine(0, fams[i], 2, false);
        assert_int_equal(ls_engine_verdict(e), LS_VERDICT_UNPROBED);
        ls_probe_result r = probe(e, NULL);
        if (r.verdict != LS_VERDICT_VERIFIED) fail_msg("family %s: %s", fams[i]->name, r.detail);
        for (int a = 0; a < LS_AXIS_COUNT; a++) {
            if (a == LS_AXIS_ISA && ls_isa_best() == LS_ISA_SCALAR) continue; /* nothing to compare on this CPU */
            if (r.axis[a] != LS_AXIS_PASSED)
                fail_msg("family %s: axis %s not passed: %s", fams[i]->name, ls_axis_name((ls_axis)a), r.why_not[a]);
        }
        assert_true(r.drafted > 0 && r.accepted > 0 && r.accepted < r.drafted); /* partial acceptance was verified */
        assert_true(r.n_rows > 100);
        assert_int_equal(ls_engine_verdict(e), LS_VERDICT_VERIFIED);
        ls_engine_stats st = LS_ENGINE_STATS_INIT;
        ls_engine_get_stats(e, &st); /* the probe's requests left no trace */
        assert_true(st.steps == 0 && st.rows == 0 && st.prefix_hit_tokens == 0 && st.kv_used == 0 &&
                    st.kv_cached_idle == 0);
        ls_engine_free(e);
    }
}

/* Each planted fault fails the verdict, on the axis it breaks. */
static void test_each_fault_fails_its_axis(void **state) {
    (void)state;
    FX_NEED(g_model);
    struct {
        unsigned fault;
        ls_axis axis;
        const char *name;
    } cases[] = {{LS_FAULT_KV_SKIP, LS_AXIS_BATCH_MIX, "skipped K/V write"},
                 {LS_FAULT_THREADS, LS_AXIS_THREADS, "thread-count dependent RMSNorm"},
                 {LS_FAULT_ISA, LS_AXIS_ISA, "ISA-dependent SwiGLU"}};
    for (size_t i = 0; i < (test_quick() == 2 ? 1 : sizeof cases / sizeof cases[0]); i++) { /* smoke: the K/V one */
        if (cases[i].fault == LS_FAULT_ISA && ls_isa_best() == LS_ISA_SCALAR) {
            print_message("ISA fault: not checked (this CPU has only the scalar kernels)\n");
            continue;
        }
        ls_engine *e = engine(cases[i].fault, NULL, 2, false);
        ls_probe_result r = probe(e, NULL);
        if (r.verdict != LS_VERDICT_FAILED) fail_msg("%s: verdict %s", cases[i].name, ls_verdict_name(r.verdict));
        if (r.axis[cases[i].axis] != LS_AXIS_FAILED)
            fail_msg("%s: axis %s did not fail (%s)", cases[i].name, ls_axis_name(cases[i].axis), r.detail);
        assert_non_null(strstr(r.detail, ls_axis_name(cases[i].axis)));
        if (cases[i].fault != LS_FAULT_KV_SKIP) /* a deterministic fault shifts every live run alike */
            assert_int_equal(r.axis[LS_AXIS_BATCH_MIX], LS_AXIS_PASSED);
        assert_int_equal(ls_engine_verdict(e), LS_VERDICT_FAILED);
        ls_engine_free(e);
    }
}

/* After a failed verdict the engine verifies no drafts (fail closed), unless allowed. */
static void test_failed_verdict_declines_drafts(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    for (int allow = 0; allow < 2; allow++) {
        ls_engine *e = engine(LS_FAULT_KV_SKIP, NULL, 2, allow);
        ls_probe_result r = probe(e, NULL);
        assert_int_equal(r.verdict, LS_VERDICT_FAILED);
        ls_err err;
        const char *text = "one two three one two three one two three one two three one two";
        int32_t toks[64];
        size_t n;
        assert_int_equal(ls_model_tokenize(g_model, text, strlen(text), false, false, toks, 64, &n, &err), LS_OK);
        ls_spec_params sp = LS_SPEC_PARAMS_INIT;
        sp.kind = LS_SPEC_NGRAM;
        sp.fixed_length = true;
        ls_request q = LS_REQUEST_INIT;
        q.prompt = toks;
        q.n_prompt = (int32_t)n;
        q.max_tokens = 16;
        q.ignore_eos = true;
        ls_drafter *d = ls_drafter_create(e, &sp, &q.sampling, &err);
        assert_non_null(d);
        ls_drafter_attach(d, &q);
        ls_result res = LS_RESULT_INIT;
        assert_int_equal(ls_engine_generate(e, &q, &res, &err), LS_OK);
        if (allow) assert_true(res.n_drafted > 0); /* --allow-inexact: it speculates anyway */
        else assert_int_equal(res.n_drafted, 0);
        ls_result_free(&res);
        ls_drafter_free(d);
        ls_engine_free(e);
    }
}

static void test_batch_variant_family_is_scoped(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    ls_engine *e = engine(0, &fam_test, 2, false);
    ls_probe_result r = probe(e, NULL);
    assert_int_equal(r.verdict, LS_VERDICT_SCOPED); /* caught, then withdrawn for parity rows */
    assert_string_equal(r.kernels_before, "test-reordered");
    assert_string_equal(r.kernels_after, "wide");
    ls_fwd *f = ls_engine_backend_fwd(e); /* the cpu backend's */
    assert_ptr_equal(ls_fwd_parity_family(f), &ls_mm_wide);
    assert_ptr_equal(ls_fwd_family(f), &fam_test); /* rows without a parity need keep it */
    for (int a = 0; a < LS_AXIS_COUNT; a++) assert_int_not_equal(r.axis[a], LS_AXIS_FAILED);

    /* One batch: a request that needs parity beside one that does not; the first must
     * get a clean engine's bits, the second runs the test family. */
    ls_err err;
    const int32_t V = (int32_t)ls_model_hparams(g_model)->n_vocab;
    int32_t a[6] = {1000, 2000, 3000, 4000, 5000, 6000}, b[6] = {700, 800, 900, 1000, 1100, 1200};
    float *got = malloc(sizeof(float) * (size_t)V * 6), *ref = malloc(sizeof(float) * (size_t)V * 6);
    uint64_t free0 = ls_fwd_rows(f, false), par0 = ls_fwd_rows(f, true);
    ls_request qb = LS_REQUEST_INIT; /* submitted first: they share the steps */
    qb.prompt = b;
    qb.n_prompt = 6;
    qb.max_tokens = 4;
    qb.no_parity = true;
    qb.on_event = fx_ignore_event;
    assert_int_equal(ls_engine_submit(e, &qb, NULL, &err), LS_OK);
    assert_int_equal(ls_engine_score(e, a, 6, got, &err), LS_OK);
    while (!ls_engine_idle(e)) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    assert_true(ls_fwd_rows(f, false) > free0); /* the free rows ran the test family */
    assert_true(ls_fwd_rows(f, true) > par0);   /* the parity rows the canonical one */
    ls_engine *clean = engine(0, NULL, 1, false);
    assert_int_equal(ls_engine_score(clean, a, 6, ref, &err), LS_OK);
    assert_memory_equal(got, ref, sizeof(float) * (size_t)V * 6);
    ls_engine_free(clean);
    free(got);
    free(ref);
    ls_engine_free(e);
}

/* Rows without a parity need may run a non-canonical family; the K/V they write must not
 * reach a request that needs parity through the prefix cache.  A no-parity request runs a
 * 40-token prompt on the test family; then a parity request with the same prompt must get
 * a clean engine's logits (with the bug it reuses the first two blocks' K/V). */
static void test_free_rows_stay_out_of_the_prefix_cache(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    ls_engine *e = engine(0, &fam_test, 2, false);
    assert_true(ls_engine_withdraw(e)); /* parity rows on the canonical family, free rows keep the test one */
    ls_err err;
    int32_t a[40];
    for (int i = 0; i < 40; i++) a[i] = 500 + 37 * i;
    ls_request q = LS_REQUEST_INIT;
    q.prompt = a;
    q.n_prompt = 40;
    q.max_tokens = 4;
    q.ignore_eos = true;
    q.no_parity = true;
    ls_result r0 = LS_RESULT_INIT, r1 = LS_RESULT_INIT, r2 = LS_RESULT_INIT;
    assert_int_equal(ls_engine_generate(e, &q, &r0, &err), LS_OK);
    q.no_parity = false;
    q.want_logits = true;
    assert_int_equal(ls_engine_generate(e, &q, &r1, &err), LS_OK);
    ls_engine *clean = engine(0, NULL, 1, false);
    assert_int_equal(ls_engine_generate(clean, &q, &r2, &err), LS_OK);
    const size_t V = ls_model_hparams(g_model)->n_vocab;
    assert_int_equal(r1.n_logits, r2.n_logits);
    assert_int_equal(r1.n_tokens, r2.n_tokens);
    assert_memory_equal(r1.logits, r2.logits, sizeof(float) * V * (size_t)r1.n_logits);
    ls_result_free(&r0);
    ls_result_free(&r1);
    ls_result_free(&r2);
    ls_engine_free(clean);
    ls_engine_free(e);
}

static void test_lying_canonical_family_fails(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    ls_engine *e = engine(0, &fam_liar, 1, false);
    ls_probe_result r = probe(e, NULL);
    assert_int_equal(r.verdict, LS_VERDICT_FAILED);
    assert_ptr_equal(ls_fwd_parity_family(ls_engine_backend_fwd(e)), &fam_liar); /* nothing to scope to */
    ls_engine_free(e);
}

/* The verdict is memoized per configuration; a faulty configuration has its own. */
static void test_memo_per_configuration(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    char dir[] = "/tmp/lockstep-memo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    ls_engine *e = engine(0, NULL, 2, false);
    ls_probe_result r1 = probe(e, dir);
    assert_false(r1.memoized);
    ls_engine_free(e);
    e = engine(0, NULL, 2, false);
    ls_probe_result r2 = probe(e, dir);
    assert_true(r2.memoized);
    assert_int_equal(r2.verdict, r1.verdict);
    assert_memory_equal(r2.axis, r1.axis, sizeof r1.axis);
    assert_int_equal(ls_engine_verdict(e), r1.verdict);
    /* A caller built against the shorter result (before the phase times): its fields are
     * filled, nothing past its size is written. */
    union {
        ls_probe_result r;
        unsigned char b[sizeof(ls_probe_result)];
    } old;
    memset(&old, 0xAB, sizeof old);
    old.r.size = offsetof(ls_probe_result, ms_setup);
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    pp.memo_dir = dir;
    ls_err err;
    assert_int_equal(ls_engine_probe(e, &pp, &old.r, &err), LS_OK);
    assert_int_equal(old.r.size, offsetof(ls_probe_result, ms_setup));
    assert_true(old.r.memoized);
    assert_int_equal(old.r.verdict, r1.verdict);
    for (size_t i = offsetof(ls_probe_result, ms_setup); i < sizeof old; i++) assert_int_equal(old.b[i], 0xAB);
    old.r.size = offsetof(ls_probe_result, ms_setup) - 1; /* shorter than any version */
    assert_int_equal(ls_engine_probe(e, &pp, &old.r, &err), LS_E_INVALID);
    ls_engine_free(e);
    e = engine(LS_FAULT_KV_SKIP, NULL, 2, false); /* another configuration: probed, not read from the memo */
    ls_probe_result r3 = probe(e, dir);
    assert_false(r3.memoized);
    assert_int_equal(r3.verdict, LS_VERDICT_FAILED);
    ls_engine_free(e);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Errors: a busy engine, a context too short for any prompt, an unset struct size. */
static void test_probe_errors(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_engine_params p = LS_ENGINE_PARAMS_INIT;
    p.n_ctx = 6;
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    assert_non_null(e);
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    ls_probe_result r = LS_PROBE_RESULT_INIT;
    assert_int_equal(ls_engine_probe(e, &pp, &r, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "context"));
    ls_probe_params bad = {0};
    assert_int_equal(ls_engine_probe(e, &bad, &r, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "size"));
    ls_engine_free(e);
    e = engine(0, NULL, 1, false);
    int32_t t[4] = {1, 2, 3, 4};
    ls_request q = LS_REQUEST_INIT;
    q.prompt = t;
    q.n_prompt = 4;
    q.max_tokens = 2;
    q.on_event = fx_ignore_event;
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    assert_int_equal(ls_engine_probe(e, &pp, &r, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "idle"));
    while (!ls_engine_idle(e)) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    ls_engine_free(e);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_errors),
        cmocka_unit_test(test_verified_on_canonical_families),
        cmocka_unit_test(test_each_fault_fails_its_axis),
        cmocka_unit_test(test_failed_verdict_declines_drafts),
        cmocka_unit_test(test_batch_variant_family_is_scoped),
        cmocka_unit_test(test_free_rows_stay_out_of_the_prefix_cache),
        cmocka_unit_test(test_lying_canonical_family_fails),
        cmocka_unit_test(test_memo_per_configuration),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
