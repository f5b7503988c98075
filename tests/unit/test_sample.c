/* Sampling: argmax at T=0, top-k/top-p truncation, the draw keyed only by
 * (seed, pos), and the empirical distribution against softmax computed here in
 * double precision (an independent reference).  The logit modifiers (logit_bias,
 * repeat / frequency / presence penalties) and min-p: hand-made cases whose greedy
 * winner changes under a wrong order, sign, window or count, and a reference that
 * recomputes the modified logits by rescanning the history for every token. */
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
    if (p->min_p > 0.0f) {
        int32_t k = 0;
        while (k < m && pr[k] >= p->min_p * pr[0]) k++;
        if (k < m) {
            m = k;
            total = 0.0f;
            for (int32_t i = 0; i < m; i++) total += pr[i];
        }
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


/* Greedy on the modified logits: each case's winner flips under the wrong rule. */
static int32_t greedy_seq(const ls_sampler_params *p0, const float *lg, int32_t n, const int32_t *toks, int32_t nt,
                          int32_t np) {
    ls_sampler_params p = *p0;
    p.temperature = 0;
    p.top_p = 1;
    void *s = malloc(ls_sampler_scratch_bytes(n));
    int32_t t = ls_sample_seq(&p, lg, n, toks, nt, np, s);
    free(s);
    return t;
}

static void test_logit_bias(void **st) {
    (void)st;
    void *s = scratch();
    ls_logit_bias b1[] = {{4, 5.0f}};
    ls_sampler_params p = {.temperature = 0, .top_p = 1, .logit_bias = b1, .n_logit_bias = 1};
    assert_int_equal(ls_sample(&p, logits, V, 0, s), 4); /* -1 + 5 = 4 > 3 */
    ls_logit_bias b2[] = {{1, -100.0f}};
    p.logit_bias = b2;
    assert_int_equal(ls_sample(&p, logits, V, 0, s), 3); /* the tie at 3 goes to the other one */
    p.temperature = 1.0f; /* a ban holds when sampling too */
    for (uint64_t pos = 0; pos < 300; pos++) assert_int_not_equal(ls_sample(&p, logits, V, pos, s), 1);
    assert_int_equal(logits[1], 3.0f); /* the caller's logits are not modified */
    free(s);
}

static void test_repeat_penalty_sign_window_once(void **st) {
    (void)st;
    ls_sampler_params p = {.repeat_penalty = 2.0f, .repeat_last_n = 64};
    /* positive logits divide: 2.0 -> 1.0 loses to 1.5 (multiplying would keep 4.0) */
    const float a[] = {2.0f, 1.5f, -0.5f, -0.4f};
    const int32_t ha[] = {0, 3};
    assert_int_equal(greedy_seq(&p, a, 4, ha, 2, 2), 1);
    /* negative logits multiply: -0.9 -> -1.8 loses to -1.0 (dividing: -0.45 would win) */
    const float b[] = {-1.0f, -0.9f};
    const int32_t hb[] = {1};
    assert_int_equal(greedy_seq(&p, b, 2, hb, 1, 1), 0);
    /* each distinct token once: 3 -> 1.5 still beats 1.0 (three times: 0.375 would not) */
    const float c[] = {1.0f, 3.0f};
    const int32_t hc[] = {1, 1, 1};
    assert_int_equal(greedy_seq(&p, c, 2, hc, 3, 0), 1);
    /* the window: token 0 is 3 tokens back, outside repeat_last_n = 2, so not penalized */
    const float d[] = {2.0f, 1.5f, 0.0f};
    const int32_t hd[] = {0, 2, 2};
    p.repeat_last_n = 2;
    assert_int_equal(greedy_seq(&p, d, 3, hd, 3, 3), 0);
    p.repeat_last_n = 3;
    assert_int_equal(greedy_seq(&p, d, 3, hd, 3, 3), 1);
    p.repeat_last_n = -1; /* the whole sequence */
    assert_int_equal(greedy_seq(&p, d, 3, hd, 3, 3), 1);
    p.repeat_last_n = 0; /* off */
    assert_int_equal(greedy_seq(&p, d, 3, hd, 3, 3), 0);
}

static void test_frequency_presence_over_generated(void **st) {
    (void)st;
    ls_sampler_params p = {.frequency_penalty = 0.5f, .presence_penalty = 0.25f};
    /* prompt {2,2,2}, generated {1,1}: l1 = 3 - (2 * 0.5 + 0.25) = 1.75; token 2 only in the
     * prompt stays 1.9 and wins.  Counting the prompt: 0 would win; no presence: l1 = 2.0
     * wins; no count (presence + frequency once): l1 = 2.25 wins. */
    const float a[] = {1.8f, 3.0f, 1.9f};
    const int32_t h[] = {2, 2, 2, 1, 1};
    assert_int_equal(greedy_seq(&p, a, 3, h, 5, 3), 2);
    /* negative penalties encourage */
    p.frequency_penalty = -1.0f;
    p.presence_penalty = 0.0f;
    const float b[] = {2.5f, 1.0f};
    const int32_t hb[] = {1, 1};
    assert_int_equal(greedy_seq(&p, b, 2, hb, 2, 0), 1); /* 1 + 2 = 3 > 2.5 */
}

static void test_modifier_order(void **st) {
    (void)st;
    /* bias before the repeat penalty: (0 + 3) / 2 = 1.5 < 2 (penalty first: 0 * 2 + 3 = 3) */
    ls_logit_bias b[] = {{1, 3.0f}};
    ls_sampler_params p = {.logit_bias = b, .n_logit_bias = 1, .repeat_penalty = 2.0f, .repeat_last_n = 8};
    const float a[] = {2.0f, 0.0f};
    const int32_t h[] = {1};
    assert_int_equal(greedy_seq(&p, a, 2, h, 1, 0), 0);
    /* repeat before frequency: 4 / 2 - 1 = 1.0 < 1.2 (frequency first: (4 - 1) / 2 = 1.5) */
    ls_sampler_params q = {.repeat_penalty = 2.0f, .repeat_last_n = 8, .frequency_penalty = 1.0f};
    const float c[] = {1.2f, 4.0f};
    assert_int_equal(greedy_seq(&q, c, 2, h, 1, 0), 0);
}

static void test_min_p_support(void **st) {
    (void)st;
    void *s = scratch();
    /* relative probabilities at T = 1: 1, 0.5, 0.3, ...; min_p 0.4 keeps ids 0 and 1 */
    const float l[V] = {0.0f, logf(0.5f), logf(0.3f), logf(0.2f), -5.0f, -6.0f};
    ls_sampler_params p = {.temperature = 1, .top_p = 1, .min_p = 0.4f, .seed = 3};
    int seen[V] = {0};
    for (uint64_t pos = 0; pos < 2000; pos++) seen[ls_sample(&p, l, V, pos, s)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    for (int i = 2; i < V; i++) assert_int_equal(seen[i], 0);
    /* 2:1 odds between the two kept: 2000 draws, expect 1333 +- 4 sigma (84) */
    assert_true(seen[0] > 1249 && seen[0] < 1417);
    free(s);
}

/* Against a reference that rebuilds the modified logits by rescanning the history for
 * each token (counts by brute force), then draws with ref_sample: random vocabularies,
 * histories, biases and parameters, temperature > 0 and 0. */
static void ref_modify(const ls_sampler_params *p, const float *lg, int32_t n, const int32_t *h, int32_t nt,
                       int32_t np, float *out) {
    for (int32_t t = 0; t < n; t++) {
        float l = lg[t];
        for (int32_t i = 0; i < p->n_logit_bias; i++)
            if (p->logit_bias[i].id == t) l += p->logit_bias[i].bias;
        int32_t from = p->repeat_last_n < 0 || p->repeat_last_n > nt ? 0 : nt - p->repeat_last_n;
        bool in_window = false;
        for (int32_t i = from; i < nt && p->repeat_last_n != 0; i++) in_window = in_window || h[i] == t;
        if (in_window && p->repeat_penalty != 0.0f) l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
        int32_t c = 0;
        for (int32_t i = np; i < nt; i++) c += h[i] == t;
        if (c) l -= (float)c * p->frequency_penalty + p->presence_penalty;
        out[t] = l;
    }
}

static void test_modifiers_match_reference(void **st) {
    (void)st;
    const int32_t n = 300;
    float *lg = malloc(sizeof *lg * (size_t)n), *mod = malloc(sizeof *mod * (size_t)n);
    int32_t h[80];
    ls_logit_bias b[8];
    void *sc = malloc(ls_sampler_scratch_bytes(n));
    memset(sc, 0x5a, ls_sampler_scratch_bytes(n)); /* the counts must not rely on zeroed scratch */
    uint64_t s = 7;
#define RND() (s = s * 6364136223846793005ull + 1442695040888963407ull, s >> 33)
    for (int trial = 0; trial < 400; trial++) {
        for (int32_t i = 0; i < n; i++) lg[i] = (float)((int64_t)(RND() % 2000) - 1000) / 100.0f;
        int32_t nt = (int32_t)(RND() % 80), np = nt ? (int32_t)(RND() % (uint64_t)(nt + 1)) : 0;
        for (int32_t i = 0; i < nt; i++) h[i] = (int32_t)(RND() % 40); /* many repeats among 40 ids */
        int32_t nb = (int32_t)(RND() % 9);
        for (int32_t i = 0; i < nb; i++) b[i] = (ls_logit_bias){(int32_t)(RND() % (uint64_t)n), (float)((int64_t)(RND() % 200) - 100) / 10.0f};
        ls_sampler_params p = {.temperature = trial % 5 ? 0.3f + (float)(trial % 7) / 3.0f : 0.0f,
                               .top_p = trial % 3 ? 1.0f : 0.8f,
                               .seed = (uint64_t)trial,
                               .logit_bias = b,
                               .n_logit_bias = nb,
                               .repeat_penalty = trial % 4 ? 0.5f + (float)(RND() % 20) / 10.0f : 0.0f,
                               .repeat_last_n = (int32_t)(RND() % 100) - 1,
                               .frequency_penalty = (float)((int64_t)(RND() % 40) - 20) / 10.0f,
                               .presence_penalty = (float)((int64_t)(RND() % 40) - 20) / 10.0f,
                               .min_p = trial % 2 ? (float)(RND() % 50) / 100.0f : 0.0f};
        ref_modify(&p, lg, n, h, nt, np, mod);
        int32_t want;
        if (p.temperature == 0.0f) {
            want = 0;
            for (int32_t i = 1; i < n; i++)
                if (mod[i] > mod[want]) want = i;
        } else {
            want = ref_sample(&p, mod, n, (uint64_t)nt);
        }
        assert_int_equal(ls_sample_seq(&p, lg, n, h, nt, np, sc), want);
    }
#undef RND
    free(lg);
    free(mod);
    free(sc);
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
    p = (ls_sampler_params){.temperature = 1, .top_p = 1, .min_p = 1.5f};
    assert_int_equal(ls_sampler_params_check(&p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "min-p"));
    p = (ls_sampler_params){.temperature = 1, .top_p = 1, .repeat_penalty = -1};
    assert_int_equal(ls_sampler_params_check(&p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "repeat penalty"));
    p = (ls_sampler_params){.temperature = 1, .top_p = 1, .frequency_penalty = NAN};
    assert_int_equal(ls_sampler_params_check(&p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "frequency"));
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
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_repeat_penalty_sign_window_once),
        cmocka_unit_test(test_frequency_presence_over_generated),
        cmocka_unit_test(test_modifier_order),
        cmocka_unit_test(test_min_p_support),
        cmocka_unit_test(test_modifiers_match_reference),
        cmocka_unit_test(test_param_check_names_field),
    };
    return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
