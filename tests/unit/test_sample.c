/* Sampling: argmax at T=0, top-k/top-p truncation, the draw keyed only by
 * (seed, pos), and the empirical distribution against softmax computed here in
 * double precision (an independent reference). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "sample/sample.h"

#define V 6
static const float logits[V] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

static void *scratch(void) { return malloc(ls_sampler_scratch_bytes(V)); }

static void test_greedy_is_argmax_lowest_id_on_ties(void **st) {
    void *s = scratch();
    ls_sampler_params p = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 1};
    for (uint64_t pos = 0; pos < 50; pos++) assert_int_equal(ls_sample(&p, logits, V, pos, s), 1);
    free(s);
}

/* Greedy against the plain loop `if (l[i] > l[best]) best = i` on vectors with ties,
 * +-0, NaN (first and elsewhere), -inf and +inf, at lengths around the 16-wide blocks. */
static void test_greedy_matches_plain_loop(void **st) {
    (void)st;
    const int32_t lens[] = {1, 2, 15, 16, 17, 31, 33, 100, 1000, 49152};
    uint64_t r = 12345;
    void *s = malloc(ls_sampler_scratch_bytes(49152));
    float *l = malloc(sizeof(float) * 49152);
    ls_sampler_params p = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 1};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int trial = 0; trial < 40; trial++) {
            int32_t n = lens[li];
            for (int32_t i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t k = (uint32_t)(r >> 33) % 16;
                /* few distinct values so ties are common; some specials */
                l[i] = k == 0 ? 0.0f : k == 1 ? -0.0f : k == 2 && trial % 3 == 0 ? NAN
                     : k == 3 && trial % 5 == 0 ? INFINITY : k == 4 ? -INFINITY : (float)(k % 7) - 3.0f;
            }
            if (trial % 7 == 0) l[0] = NAN;
            if (trial % 11 == 1) /* all values equal zeros of mixed signs */
                for (int32_t i = 0; i < n; i++) l[i] = i % 2 ? 0.0f : -0.0f;
            int32_t best = 0;
            for (int32_t i = 1; i < n; i++)
                if (l[i] > l[best]) best = i;
            assert_int_equal(ls_sample(&p, l, n, 0, s), best);
        }
    free(l);
    free(s);
}

static void test_top_k_1_is_argmax(void **st) {
    void *s = scratch();
    ls_sampler_params p = {.temperature = 5.0f, .top_k = 1, .top_p = 1, .seed = 3};
    for (uint64_t pos = 0; pos < 200; pos++) assert_int_equal(ls_sample(&p, logits, V, pos, s), 1);
    free(s);
}

static void test_top_k_restricts_support(void **st) {
    void *s = scratch();
    ls_sampler_params p = {.temperature = 10.0f, .top_k = 3, .top_p = 1, .seed = 5};
    int seen[V] = {0};
    for (uint64_t pos = 0; pos < 3000; pos++) seen[ls_sample(&p, logits, V, pos, s)]++;
    /* top 3 by (logit desc, id asc): ids 1, 3, 2 */
    assert_true(seen[1] > 0 && seen[3] > 0 && seen[2] > 0);
    assert_int_equal(seen[0] + seen[4] + seen[5], 0);
    free(s);
}

static void test_top_p_keeps_shortest_prefix(void **st) {
    void *s = scratch();
    /* T=1: probs of ids 1 and 3 are equal and together ~0.58; top_p 0.5 keeps both, not id 2 */
    ls_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .seed = 9};
    int seen[V] = {0};
    for (uint64_t pos = 0; pos < 2000; pos++) seen[ls_sample(&p, logits, V, pos, s)]++;
    assert_true(seen[1] > 800 && seen[3] > 800);
    assert_int_equal(seen[0] + seen[2] + seen[4] + seen[5], 0);
    free(s);
}

static void test_draw_depends_only_on_seed_and_pos(void **st) {
    void *s = scratch();
    ls_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1, .seed = 42};
    int32_t a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = ls_sample(&p, logits, V, (uint64_t)i, s);
    /* Same positions visited in a different order give the same tokens. */
    for (int i = 99; i >= 0; i--) b[i] = ls_sample(&p, logits, V, (uint64_t)i, s);
    assert_memory_equal(a, b, sizeof a);
    p.seed = 43;
    int diff = 0;
    for (int i = 0; i < 100; i++) diff += ls_sample(&p, logits, V, (uint64_t)i, s) != a[i];
    assert_true(diff > 20);
    free(s);
}

static void test_uniform_is_in_range_and_spread(void **st) {
    double sum = 0;
    int bins[10] = {0};
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = ls_rand_uniform(7, (uint64_t)i, 0);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        bins[(int)(u * 10)]++;
    }
    assert_true(fabs(sum / n - 0.5) < 0.01);
    for (int i = 0; i < 10; i++) assert_true(abs(bins[i] - n / 10) < n / 100 * 2);
}

static void test_distribution_matches_softmax(void **st) {
    void *s = scratch();
    const float T = 0.7f;
    ls_sampler_params p = {.temperature = T, .top_k = 0, .top_p = 1, .seed = 2024};
    double z = 0, want[V];
    for (int i = 0; i < V; i++) z += want[i] = exp((double)logits[i] / T);
    const int n = 200000;
    int seen[V] = {0};
    for (int i = 0; i < n; i++) seen[ls_sample(&p, logits, V, (uint64_t)i, s)]++;
    double chi2 = 0;
    for (int i = 0; i < V; i++) {
        double e = want[i] / z * n;
        chi2 += (seen[i] - e) * (seen[i] - e) / e;
    }
    /* 5 degrees of freedom: P(chi2 > 20.5) ~ 0.001 */
    assert_true(chi2 < 20.5);
    free(s);
}

/* The full-vocabulary path (top-k off) must draw exactly what sorting every candidate
 * with qsort by (logit descending, id ascending) draws: an independent reference. */
typedef struct {
    float logit;
    int32_t id;
} ref_cand;
static int ref_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}
static int32_t ref_sample(const ls_sampler_params *p, const float *lg, int32_t n, uint64_t pos) {
    ref_cand *c = malloc(sizeof *c * (size_t)n);
    float *pr = malloc(sizeof *pr * (size_t)n);
    for (int32_t i = 0; i < n; i++) c[i] = (ref_cand){lg[i], i};
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    float total = 0.0f;
    for (int32_t i = 0; i < n; i++) total += (pr[i] = ls_expf((c[i].logit - c[0].logit) / p->temperature));
    int32_t m = n;
    if (p->top_p < 1.0f) {
        float cum = 0.0f, target = p->top_p * total;
        for (int32_t i = 0; i < n; i++)
            if ((cum += pr[i]) >= target) {
                m = i + 1;
                break;
            }
        total = 0.0f;
        for (int32_t i = 0; i < m; i++) total += pr[i];
    }
    double u = ls_rand_uniform(p->seed, pos, 0) * (double)total, cum = 0.0;
    int32_t out = c[m - 1].id;
    for (int32_t i = 0; i < m; i++)
        if ((cum += (double)pr[i]) > u) {
            out = c[i].id;
            break;
        }
    free(c);
    free(pr);
    return out;
}

static void test_full_vocab_order_matches_qsort(void **st) {
    (void)st;
    const int32_t n = 5000;
    float *lg = malloc(sizeof *lg * (size_t)n);
    void *scratch = malloc(ls_sampler_scratch_bytes(n));
    uint64_t s = 99;
    for (int trial = 0; trial < 300; trial++) {
        for (int32_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int kind = (int)((s >> 60) & 7);
            float v = (float)((int64_t)(s >> 40) % 4000) / 100.0f - 20.0f; /* many exact ties */
            lg[i] = kind == 0 ? 0.0f : kind == 1 ? -0.0f : v;
        }
        ls_sampler_params p = {.temperature = 0.2f + (float)(trial % 9) / 4.0f, .top_k = 0,
                               .top_p = trial % 3 ? 1.0f : 0.9f, .seed = (uint64_t)trial};
        for (uint64_t pos = 0; pos < 4; pos++)
            assert_int_equal(ls_sample(&p, lg, n, pos, scratch), ref_sample(&p, lg, n, pos));
    }
    free(lg);
    free(scratch);
}

static void test_param_check_names_field(void **st) {
    ls_err err;
    ls_sampler_params p = {.temperature = -1, .top_p = 1};
    assert_int_equal(ls_sampler_params_check(&p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "temperature"));
    p = (ls_sampler_params){.temperature = 1, .top_p = 0};
    assert_int_equal(ls_sampler_params_check(&p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "top-p"));
    p = (ls_sampler_params){.temperature = 1, .top_p = 1, .top_k = -2};
    assert_int_equal(ls_sampler_params_check(&p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "top-k"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax_lowest_id_on_ties),
        cmocka_unit_test(test_greedy_matches_plain_loop),
        cmocka_unit_test(test_top_k_1_is_argmax),
        cmocka_unit_test(test_top_k_restricts_support),
        cmocka_unit_test(test_top_p_keeps_shortest_prefix),
        cmocka_unit_test(test_draw_depends_only_on_seed_and_pos),
        cmocka_unit_test(test_uniform_is_in_range_and_spread),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_full_vocab_order_matches_qsort),
        cmocka_unit_test(test_param_check_names_field),
    };
    return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
