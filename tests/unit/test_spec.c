/* Speculative decoding never changes a byte: for every drafter (ngram, the target as
 * its own draft model, layer-skip), draft lengths 1..8, temperature 0 and 0.8 with a
 * seed, the tokens and the logits of every sampled position equal plain decoding
 * (memcmp).  The target drafting for itself is accepted 100 %.  The ngram drafter's
 * lookup is checked against a brute-force search.  Model tests are skipped when
 * MODEL does not name a readable file. */
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
#include "spec/spec.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *model_path(void) {
    const char *p = getenv("MODEL");
    return p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}
static ls_model *g_model;
static int32_t g_V;

static int group_setup(void **state) {
    (void)state;
    if (access(model_path(), R_OK) != 0) return 0;
    ls_err err;
    g_model = ls_model_load((ls_model_params){.path = model_path()}, &err);
    if (!g_model) return -1;
    g_V = (int32_t)ls_model_hparams(g_model)->n_vocab;
    return 0;
}
static int group_teardown(void **state) {
    (void)state;
    ls_model_free(g_model);
    return 0;
}

/* ngram: the proposal is what followed the latest earlier occurrence of the longest
 * matching suffix (n from max down to min), as a brute-force search finds it. */
static void test_ngram_matches_brute_force(void **state) {
    (void)state;
    if (!g_model) skip();
    uint64_t rs = 7;
    for (int trial = 0; trial < 300; trial++) {
        ls_spec_params p = {.kind = LS_SPEC_NGRAM, .draft_max = 8, .draft_min = 1, .ngram_min = 1 + trial % 2,
                            .ngram_max = 3 + trial % 3, .fixed_length = true};
        ls_sampler_params sp = {.top_p = 1.0f};
        ls_err err;
        ls_drafter *d = ls_drafter_create(g_model, &p, &sp, &err);
        assert_non_null(d);
        int32_t h[400];
        int32_t n = 0, alpha = 2 + (int32_t)(rng_next(&rs) % 6);
        for (int step = 0; step < 40; step++) {
            int32_t add = 1 + (int32_t)(rng_next(&rs) % 9);
            for (int32_t i = 0; i < add; i++) h[n++] = (int32_t)(rng_next(&rs) % (uint64_t)alpha);
            int32_t out[8], want[8], nw = 0;
            for (int32_t k = p.ngram_max; k >= p.ngram_min && !nw; k--) {
                if (k > n) continue;
                for (int32_t e = n - 1; e >= k; e--) /* latest earlier occurrence */
                    if (!memcmp(h + e - k, h + n - k, sizeof(int32_t) * (size_t)k)) {
                        while (nw < 8 && e + nw < n) {
                            want[nw] = h[e + nw];
                            nw++;
                        }
                        break;
                    }
            }
            int32_t got = ls_drafter_draft(d, h, n, out, 8);
            assert_int_equal(got, nw);
            assert_memory_equal(out, want, sizeof(int32_t) * (size_t)nw);
        }
        ls_drafter_free(d);
    }
}

typedef struct {
    int32_t toks[64];
    int32_t n;
    float *logits;
    int32_t n_drafted, n_accepted;
    bool done;
} outcome;

static void on_event(void *ud, const ls_event *ev) {
    outcome *o = ud;
    if (ev->token >= 0) {
        assert_true(o->n < 64);
        memcpy(o->logits + (size_t)o->n * g_V, ev->logits, sizeof(float) * (size_t)g_V);
        o->toks[o->n++] = ev->token;
    }
    o->n_drafted = ev->n_drafted;
    o->n_accepted = ev->n_accepted;
    o->done = ev->done;
}

static void run(const int32_t *prompt, int32_t n_prompt, ls_sampler_params sp, int32_t max_tokens,
                const ls_spec_params *spec, outcome *o) {
    ls_err err;
    ls_engine_params ep = {.n_ctx = 256, .n_seq_max = 1, .step_tokens = 256, .n_threads = 1, .isa = -1,
                           .draft_max = spec ? spec->draft_max : 0};
    ls_engine *e = ls_engine_create(g_model, ep, &err);
    assert_non_null(e);
    ls_drafter *d = NULL;
    if (spec) {
        d = ls_drafter_create(g_model, spec, &sp, &err);
        if (!d) fail_msg("drafter: %s", err.msg);
    }
    ls_request q = {.prompt = prompt, .n_prompt = n_prompt, .sampling = sp, .max_tokens = max_tokens,
                    .want_logits = true, .on_event = on_event, .ud = o};
    if (d) {
        q.draft = ls_drafter_draft;
        q.draft_ud = d;
    }
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    while (!ls_engine_idle(e)) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    assert_true(o->done);
    ls_drafter_free(d);
    ls_engine_free(e);
}

static void test_spec_equals_plain(void **state) {
    (void)state;
    if (!g_model) skip();
    const char *text = "<|im_start|>user\nHere is a list: red apple, green pear, yellow banana, purple plum, orange "
                       "orange. Repeat the list exactly, then say done.<|im_end|>\n<|im_start|>assistant\n";
    int32_t prompt[128];
    size_t n;
    ls_err err;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(g_model), text, strlen(text), false, true, prompt, 128, &n, &err),
                     LS_OK);
    const float temps[2] = {0.0f, 0.8f};
    const ls_spec_kind kinds[3] = {LS_SPEC_NGRAM, LS_SPEC_DRAFT, LS_SPEC_LAYERSKIP};
    const int32_t max_tokens = 20;
    int64_t drafted = 0, accepted = 0;
    for (int ti = 0; ti < 2; ti++) {
        ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 11};
        outcome ref = {0};
        ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        run(prompt, (int32_t)n, sp, max_tokens, NULL, &ref);
        for (int ki = 0; ki < 3; ki++)
            for (int32_t k = 1; k <= 8; k++) {
                ls_spec_params p = {.kind = kinds[ki], .draft_max = k, .draft_min = 1, .ngram_min = 2, .ngram_max = 4,
                                    .draft_model = g_model, .skip_first = 12, .n_ctx = 256, .n_threads = 1};
                outcome o = {0};
                o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
                run(prompt, (int32_t)n, sp, max_tokens, &p, &o);
                if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                    memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                    fail_msg("%s, draft-max %d, temperature %.1f: differs from plain decoding",
                             ls_spec_kind_name(kinds[ki]), k, (double)temps[ti]);
                drafted += o.n_drafted;
                accepted += o.n_accepted;
                if (kinds[ki] == LS_SPEC_DRAFT) /* the target as its own draft: every draft accepted */
                    assert_int_equal(o.n_accepted, o.n_drafted);
                free(o.logits);
            }
        free(ref.logits);
    }
    print_message("spec parity: 48 runs equal to plain decoding; %lld of %lld drafts accepted\n", (long long)accepted,
                  (long long)drafted);
    assert_true(drafted > 0 && accepted > 0 && accepted < drafted);
}

static void test_spec_bad_params(void **state) {
    (void)state;
    if (!g_model) skip();
    ls_err err;
    ls_spec_kind k;
    assert_int_equal(ls_spec_kind_from_name("bogus", &k, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "unknown drafter 'bogus'"));
    assert_int_equal(ls_spec_kind_from_name("mtp", &k, &err), LS_E_UNSUPPORTED);
    ls_spec_params p = {.kind = LS_SPEC_DRAFT, .draft_max = 4, .n_ctx = 64};
    assert_int_equal(ls_spec_check(g_model, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "--draft-model"));
    int32_t layers[2] = {0, 99};
    p = (ls_spec_params){.kind = LS_SPEC_LAYERSKIP, .draft_max = 4, .layers = layers, .n_layers = 2, .n_ctx = 64};
    assert_int_equal(ls_spec_check(g_model, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "layer 99 does not exist"));
    p = (ls_spec_params){.kind = LS_SPEC_NGRAM, .draft_max = 0, .n_ctx = 64};
    assert_int_equal(ls_spec_check(g_model, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "--draft-max"));
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_matches_brute_force),
        cmocka_unit_test(test_spec_bad_params),
        cmocka_unit_test(test_spec_equals_plain),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
