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

#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "sample/grammar.h"
#include "speculative/spec.h"
#include "backend/cpu/kv_store.h"
#include "quick.h"

static uint64_t rng_next(uint64_t *s) { return ls_splitmix64(s); }

static ls_model *g_model;
static int32_t g_V;

static int group_setup(void **state) {
    (void)state;
    if (access(fx_model_path(), R_OK) != 0) return 0;
    ls_err err;
    g_model = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = fx_model_path()}, &err);
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
    FX_NEED(g_model);
    uint64_t rs = 7;
    for (int trial = 0; trial < 300; trial++) {
        ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_NGRAM, .draft_max = 8, .draft_min = 1, .ngram_min = 1 + trial % 2,
                            .ngram_max = 3 + trial % 3, .fixed_length = true};
        ls_sampler_params sp = {.top_p = 1.0f};
        ls_err err;
        ls_drafter *d = ls_drafter_create_for(g_model, 512, NULL, LS_ISA_AUTO, &p, &sp, &err);
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

/* lookup_min: where the history's last lookup_min..ngram_max tokens occurred before, the
 * proposal is what followed them (the brute-force search above, from lookup_min); elsewhere
 * it is the drafter's own (layer-skip over 2 layers here), and the stats count the settled
 * lookup proposals, their tokens and the accepted ones. */
static void test_lookup_first(void **state) {
    (void)state;
    FX_NEED(g_model);
    uint64_t rs = 11;
    int32_t matched = 0, own = 0;
    for (int trial = 0; trial < 6; trial++) {
        ls_spec_params p = LS_SPEC_PARAMS_INIT;
        p.kind = LS_SPEC_LAYERSKIP;
        p.skip_first = 2;
        p.draft_max = 6;
        p.fixed_length = true;
        p.lookup_min = 2 + trial % 2;
        p.ngram_max = 4;
        ls_sampler_params sp = {.top_p = 1.0f};
        ls_err err;
        ls_drafter *d = ls_drafter_create_for(g_model, 512, NULL, LS_ISA_AUTO, &p, &sp, &err);
        if (!d) fail_msg("drafter: %s", err.msg);
        int32_t h[24 * (5 + 6)], n = 0, n_lookup = 0, lk_tokens = 0, lk_acc = 0; /* 24 steps of <= 5 + 6 tokens */
        int32_t prev[6], n_prev = 0, prev_at = 0;
        bool prev_lookup = false;
        const int32_t alpha = trial < 3 ? 6 : 60; /* few tokens: mostly repeats; many: mostly not */
        for (int step = 0; step < 24; step++) {
            const int32_t add = 1 + (int32_t)(rng_next(&rs) % 5);
            for (int32_t i = 0; i < add; i++) h[n++] = 100 + (int32_t)(rng_next(&rs) % (uint64_t)alpha);
            int32_t want[6], nw = 0;
            for (int32_t k = p.ngram_max; k >= p.lookup_min && !nw; k--) {
                if (k > n) continue;
                for (int32_t e = n - 1; e >= k; e--)
                    if (!memcmp(h + e - k, h + n - k, sizeof(int32_t) * (size_t)k)) {
                        while (nw < 6 && e + nw < n) {
                            want[nw] = h[e + nw];
                            nw++;
                        }
                        break;
                    }
            }
            if (prev_lookup) { /* the last proposal is settled now: how much of it the history took */
                int32_t a = 0;
                while (a < n_prev && prev_at + a < n && h[prev_at + a] == prev[a]) a++;
                n_lookup++;
                lk_tokens += n_prev;
                lk_acc += a;
            }
            int32_t out[6];
            const int32_t got = ls_drafter_draft(d, h, n, out, 6);
            ls_drafter_stats s = LS_DRAFTER_STATS_INIT;
            ls_drafter_get_stats(d, NULL, 0, &s);
            if (nw) {
                assert_int_equal(got, nw);
                assert_memory_equal(out, want, sizeof(int32_t) * (size_t)nw);
                matched++;
            } else {
                assert_int_equal(got, 6); /* layer-skip's own chain, at the fixed length */
                own++;
            }
            assert_int_equal(s.lookup_proposals, n_lookup);
            assert_int_equal(s.lookup_drafted, lk_tokens);
            assert_int_equal(s.lookup_accepted, lk_acc);
            memcpy(prev, out, sizeof out);
            n_prev = got;
            prev_at = n;
            prev_lookup = nw > 0;
            if (got > 0 && (rng_next(&rs) & 1)) { /* accept a prefix of it: the next history continues with it */
                const int32_t a = (int32_t)(rng_next(&rs) % (uint64_t)(got + 1));
                for (int32_t i = 0; i < a; i++) h[n++] = out[i];
            }
        }
        ls_drafter_free(d);
    }
    print_message("lookup first: %d proposals by lookup, %d by the drafter\n", matched, own);
    assert_true(matched > 10 && own > 10);
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

static const char *g_grammar; /* run()'s requests are constrained by it when set */

static void run(const int32_t *prompt, int32_t n_prompt, ls_sampler_params sp, int32_t max_tokens,
                const ls_spec_params *spec, outcome *o) {
    ls_err err;
    ls_engine_params ep = {.size = sizeof(ls_engine_params), .n_ctx = 256, .n_seq_max = 1, .step_tokens = 256, .n_threads = 1, .isa = -1,
                           .draft_max = spec ? spec->draft_max : 0};
    ls_engine *e = ls_engine_create(g_model, &ep, &err);
    assert_non_null(e);
    ls_drafter *d = NULL;
    if (spec) {
        d = ls_drafter_create(e, spec, &sp, &err);
        if (!d) fail_msg("drafter: %s", err.msg);
    }
    ls_request q = {.size = sizeof(ls_request), .prompt = prompt, .n_prompt = n_prompt, .sampling = sp, .max_tokens = max_tokens,
                    .want_logits = true, .on_event = on_event, .ud = o, .grammar = g_grammar};
    if (d) {
        q.draft = ls_drafter_draft;
        q.draft_ud = d;
        if (ls_drafter_wants_hidden(d)) q.draft_observe = ls_drafter_observe;
    }
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    while (!ls_engine_idle(e)) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    assert_true(o->done);
    ls_drafter_free(d);
    ls_engine_free(e);
}

static void test_spec_equals_plain(void **state) {
    (void)state;
    FX_NEED(g_model);
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
    const int quick = test_quick(); /* sanitizer runs: draft-max 1, 3, 8; smoke: 3 */
    int64_t drafted = 0, accepted = 0;
    int runs = 0;
    for (int ti = 0; ti < 2; ti++) {
        ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 11};
        outcome ref = {0};
        ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        run(prompt, (int32_t)n, sp, max_tokens, NULL, &ref);
        for (int ki = 0; ki < 3; ki++)
            for (int32_t k = 1; k <= 8; k++) {
                if ((quick && k != 1 && k != 3 && k != 8) || (quick == 2 && k != 3)) continue;
                /* fixed_length: draft exactly k every step (the adaptive length would rightly
                 * never draft with the target as its own draft: nothing would be tested) */
                ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = kinds[ki], .draft_max = k, .draft_min = 1, .ngram_min = 2, .ngram_max = 4,
                                    .draft_model = g_model, .skip_first = 12,
                                    .fixed_length = kinds[ki] != LS_SPEC_NGRAM};
                outcome o = {0};
                o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
                run(prompt, (int32_t)n, sp, max_tokens, &p, &o);
                if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                    memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                    fail_msg("%s, draft-max %d, temperature %.1f: differs from plain decoding",
                             ls_spec_kind_name(kinds[ki]), k, (double)temps[ti]);
                drafted += o.n_drafted;
                accepted += o.n_accepted;
                runs++;
                if (kinds[ki] == LS_SPEC_DRAFT) { /* the target as its own draft: every draft accepted */
                    assert_true(o.n_drafted > 0);
                    assert_int_equal(o.n_accepted, o.n_drafted);
                }
                free(o.logits);
            }
        free(ref.logits);
    }
    print_message("spec parity: %d runs equal to plain decoding; %lld of %lld drafts accepted\n", runs, (long long)accepted,
                  (long long)drafted);
    assert_true(drafted > 0 && accepted > 0 && accepted < drafted);
}

/* The adaptive length: drafts that cannot pay off are not made (the target as its
 * own draft costs a full forward per draft token), while ngram drafts stay on. */
static void test_adaptive_declines_costly_drafter(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_sampler_params sp = {.top_p = 1.0f};
    ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_DRAFT, .draft_max = 8, .draft_min = 1, .draft_model = g_model};
    ls_drafter *d = ls_drafter_create_for(g_model, 64, NULL, LS_ISA_AUTO, &p, &sp, &err);
    int32_t h[40], out[8];
    for (int i = 0; i < 40; i++) h[i] = 100 + i % 5;
    for (int step = 0; step < 30; step++) assert_int_equal(ls_drafter_draft(d, h, 10 + step, out, 8), 0);
    ls_drafter_free(d);
    p.kind = LS_SPEC_NGRAM;
    p.ngram_min = 1;
    p.ngram_max = 3;
    d = ls_drafter_create_for(g_model, 64, NULL, LS_ISA_AUTO, &p, &sp, &err);
    assert_true(ls_drafter_draft(d, h, 20, out, 8) > 0); /* a repeating history: proposals */
    ls_drafter_free(d);
}

/* The measured cost model: an ngram drafter on a repeating history (every draft would be
 * accepted) under a fake clock where a step takes a + b k ms for k verified drafts and a
 * draft call call_ms.  The drafter recovers b / a and call_ms / (k a); where a verify row
 * costs 1.5 steps it stops drafting (exploring now and then), while the fixed prior
 * (static_costs) drafts the whole length at every step. */
typedef struct {
    double t, call_ms;
    int reads;
} fake_clock;
static double fake_now(void *ud) {
    fake_clock *c = ud;
    if (c->reads++ & 1) c->t += c->call_ms; /* ls_drafter_draft reads twice: start, end */
    return c->t;
}
static int drive(bool static_costs, double a, double b, double call_ms, double *dc, double *rc) {
    ls_err err;
    ls_sampler_params sp = {.top_p = 1.0f};
    ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_NGRAM, .draft_max = 8, .draft_min = 1,
                        .ngram_min = 1, .ngram_max = 3, .static_costs = static_costs};
    ls_drafter *d = ls_drafter_create_for(g_model, 2048, NULL, LS_ISA_AUTO, &p, &sp, &err);
    assert_non_null(d);
    fake_clock c = {.t = 1000.0, .call_ms = call_ms};
    ls_drafter_set_clock(d, fake_now, &c);
    int32_t h[2048], out[8], n = 12, late = 0;
    for (int i = 0; i < 2048; i++) h[i] = 100 + i % 11; /* a period past the longest draft */
    for (int step = 0; step < 200 && n + 9 < 2048; step++) {
        int32_t k = ls_drafter_draft(d, h, n, out, 8);
        for (int32_t j = 0; j < k; j++) assert_int_equal(out[j], h[n + j]); /* the target accepts them all */
        if (step >= 100) late += k > 0;
        n += k + 1;
        c.t += a + b * k; /* the engine's step */
    }
    ls_drafter_costs(d, dc, rc);
    ls_drafter_free(d);
    return late;
}
static void test_measured_costs(void **state) {
    (void)state;
    FX_NEED(g_model);
    double dc, rc;
    int late = drive(false, 10.0, 15.0, 2.0, &dc, &rc);
    print_message("rows at 1.5 steps: row cost %.3f, draft cost %.3f, drafted at %d of the last 100 steps\n", rc, dc, late);
    if (rc < 1.45 || rc > 1.55) fail_msg("measured row cost %.3f, the clock's 1.5", rc);
    assert_true(late <= 10);
    late = drive(false, 10.0, 0.2, 4.0, &dc, &rc); /* cheap rows: drafts every step; a call 4 ms for 8 drafts */
    print_message("rows at 0.02 steps: row cost %.3f, draft cost %.3f, drafted at %d of the last 100 steps\n", rc, dc, late);
    if (rc < 0.015 || rc > 0.025) fail_msg("measured row cost %.3f, the clock's 0.02", rc);
    if (dc < 0.045 || dc > 0.055) fail_msg("measured draft cost %.3f, the clock's 0.05", dc);
    assert_true(late >= 80);
    late = drive(true, 10.0, 15.0, 2.0, &dc, &rc);
    assert_true(rc == 0.15 && dc == 0.0); /* the prior, whatever the clock says */
    assert_int_equal(late, 100);
}

static void test_spec_bad_params(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_spec_kind k;
    assert_int_equal(ls_spec_kind_from_name("bogus", &k, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "unknown drafter 'bogus'"));
    assert_int_equal(ls_spec_kind_from_name("mtp", &k, &err), LS_OK);
    ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_DRAFT, .draft_max = 4};
    assert_int_equal(ls_spec_check_model(g_model, 64, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "--draft-model"));
    int32_t layers[2] = {0, 99};
    p = (ls_spec_params){.size = sizeof(ls_spec_params), .kind = LS_SPEC_LAYERSKIP, .draft_max = 4, .layers = layers, .n_layers = 2};
    assert_int_equal(ls_spec_check_model(g_model, 64, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "layer 99 does not exist"));
    p = (ls_spec_params){.size = sizeof(ls_spec_params), .kind = LS_SPEC_NGRAM, .draft_max = 0};
    assert_int_equal(ls_spec_check_model(g_model, 64, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "--draft-max"));
    p = (ls_spec_params){.size = sizeof(ls_spec_params), .kind = LS_SPEC_NGRAM, .draft_max = 4, .ngram_min = 2,
                         .ngram_max = 4, .lookup_min = 2};
    assert_int_equal(ls_spec_check_model(g_model, 64, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "--draft-lookup applies to"));
    p = (ls_spec_params){.size = sizeof(ls_spec_params), .kind = LS_SPEC_LAYERSKIP, .draft_max = 4, .ngram_min = 2,
                         .ngram_max = 4, .lookup_min = 5};
    assert_int_equal(ls_spec_check_model(g_model, 64, &p, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "--draft-lookup 5 is out of range"));
}

/* ---- MTP: a synthetic module written with the project's GGUF writer ---------
 * The default model plus blk.30 as an MTP block (block_count 31,
 * nextn_predict_layers 1): its attention/FFN copied from blk.29, eh_proj random
 * (seeded) with the identity on the hidden half, norms of ones, the shared head. */
static char g_mtp_path[256];

static void copy_kv(gguf_writer *w, const gguf_kv *kv) {
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
    const gguf_value *v = &kv->value;
    if (!strcmp(key, "general.alignment")) return; /* the writer's default */
    if (!strcmp(key, "llama.block_count")) {
        assert_int_equal(gguf_writer_add_u32(w, key, (uint32_t)v->v.u64 + 1), LS_OK);
        return;
    }
    ls_status st = gguf_writer_add_value(w, key, v);
    assert_int_equal(st, LS_OK);
}

/* copier: every block's attention and FFN output projections are zero, so the target's
 * hidden state is the current token's embedding and its next token a function of the
 * current one; the MTP module (eh_proj = [I 0]: the next token's embedding, its block's
 * outputs zero too, the target's output norm) then computes the target's own next logits
 * one position ahead, and its drafts are accepted (up to rounding: a near-tie can flip). */
/* hv: the module head's tokens (lockstep.mtp.head_vocab, written as an array of elem),
 * or NULL for the whole vocabulary. */
static void build_mtp_model_hv(bool copier, const void *hv, uint64_t n_hv, gguf_vtype elem);
static void build_mtp_model(bool copier) { build_mtp_model_hv(copier, NULL, 0, GGUF_VT_INT32); }
static void build_mtp_model_hv(bool copier, const void *hv, uint64_t n_hv, gguf_vtype elem) {
    ls_err err;
    gguf_file *f = gguf_open(fx_model_path(), &err);
    assert_non_null(f);
    gguf_writer *w = gguf_writer_create();
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) copy_kv(w, gguf_kv_at(f, i));
    assert_int_equal(gguf_writer_add_u32(w, "llama.nextn_predict_layers", 1), LS_OK);
    if (hv) assert_int_equal(gguf_writer_add_arr(w, "lockstep.mtp.head_vocab", elem, hv, n_hv), LS_OK);
    uint64_t E = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const bool zero = copier && (strstr(name, ".attn_output.") || strstr(name, ".ffn_down."));
        void *data = zero ? calloc(1, t->nbytes) : (void *)t->data; /* zero blocks: every weight 0 */
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data, t->nbytes), LS_OK);
        if (!strncmp(name, "blk.29.", 7)) { /* the MTP block: a copy of the last one */
            char mtp[128];
            snprintf(mtp, sizeof mtp, "blk.30.%s", name + 7);
            assert_int_equal(gguf_writer_add_tensor(w, mtp, t->type, t->n_dims, t->ne, data, t->nbytes), LS_OK);
        }
        if (zero) free(data);
        if (!strcmp(name, "output_norm.weight")) {
            E = t->ne[0];
            if (copier) { /* the module's head norm is the target's */
                assert_int_equal(t->type, 0); /* F32 */
                assert_int_equal(gguf_writer_add_tensor(w, "blk.30.nextn.shared_head_norm.weight", 0, 1, t->ne, t->data,
                                                        t->nbytes), LS_OK);
            }
        }
    }
    assert_true(E > 0);
    float *ones = malloc(sizeof(float) * E), *eh = malloc(sizeof(float) * 2 * E * E);
    for (uint64_t i = 0; i < E; i++) ones[i] = 1.0f;
    uint64_t rs = 42;
    for (uint64_t n = 0; n < E; n++)
        for (uint64_t k = 0; k < 2 * E; k++)
            eh[n * 2 * E + k] = copier ? (k == n ? 1.0f : 0.0f)
                                       : (k == E + n ? 1.0f : 0.0f) + 0.02f * ((float)(rng_next(&rs) >> 40) / 16777216.0f - 0.5f);
    uint64_t ne1[1] = {E}, ne2[2] = {2 * E, E};
    const char *vecs[] = {"blk.30.nextn.enorm.weight", "blk.30.nextn.hnorm.weight", "blk.30.nextn.shared_head_norm.weight"};
    for (int i = 0; i < (copier ? 2 : 3); i++)
        assert_int_equal(gguf_writer_add_tensor(w, vecs[i], 0 /* F32 */, 1, ne1, ones, sizeof(float) * E), LS_OK);
    assert_int_equal(gguf_writer_add_tensor(w, "blk.30.nextn.eh_proj.weight", 0, 2, ne2, eh, sizeof(float) * 2 * E * E),
                     LS_OK);
    snprintf(g_mtp_path, sizeof g_mtp_path, "/tmp/lockstep-test-mtp-%d.gguf", (int)getpid());
    assert_int_equal(gguf_writer_write_file(w, g_mtp_path, &err), LS_OK);
    gguf_writer_free(w);
    free(ones);
    free(eh);
    gguf_close(f);
}

static void test_mtp_equals_plain(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    assert_int_equal(ls_spec_check_model(g_model, 64, &(ls_spec_params){.size = sizeof(ls_spec_params), .kind = LS_SPEC_MTP, .draft_max = 4}, &err),
                     LS_E_UNSUPPORTED); /* the default model has no MTP module */
    assert_non_null(strstr(err.msg, "no"));
    build_mtp_model(false);
    ls_model *mm = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = g_mtp_path}, &err);
    remove(g_mtp_path);
    if (!mm) fail_msg("synthetic MTP model: %s", err.msg);
    assert_true(ls_model_has_mtp(mm));
    assert_int_equal(ls_model_hparams(mm)->n_layer, 30);
    ls_model *saved = g_model;
    g_model = mm; /* run() uses g_model */
    const char *text = "<|im_start|>user\nList the days of the week.<|im_end|>\n<|im_start|>assistant\n";
    int32_t prompt[128];
    size_t n;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(mm), text, strlen(text), false, true, prompt, 128, &n, &err), LS_OK);
    int64_t drafted = 0, accepted = 0;
    const float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 5};
        outcome ref = {0};
        ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        run(prompt, (int32_t)n, sp, 16, NULL, &ref);
        /* the trunk is the default model's: the same logits as with the plain file */
        outcome base = {0};
        base.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        g_model = saved;
        run(prompt, (int32_t)n, sp, 16, NULL, &base);
        g_model = mm;
        assert_int_equal(base.n, ref.n);
        assert_memory_equal(base.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)ref.n);
        for (int32_t k = 1; k <= 8; k++) {
            if ((test_quick() && k != 1 && k != 3 && k != 8) || (test_quick() == 2 && k != 3)) continue;
            ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_MTP, .draft_max = k, .draft_min = 1,
                                .fixed_length = true};
            outcome o = {0};
            o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
            run(prompt, (int32_t)n, sp, 16, &p, &o);
            if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                fail_msg("mtp, draft-max %d, temperature %.1f: differs from plain decoding", k, (double)temps[ti]);
            drafted += o.n_drafted;
            accepted += o.n_accepted;
            free(o.logits);
        }
        free(ref.logits);
        free(base.logits);
    }
    g_model = saved;
    print_message("mtp parity: 16 runs equal to plain decoding; %lld of %lld drafts accepted\n", (long long)accepted,
                  (long long)drafted);
    assert_true(drafted > 0);
    ls_model_free(mm);
}

/* MTP's accept path: a module that reproduces the target's next token (build_mtp_model's
 * copier), so drafts are accepted and verified in blocks, at temperature 0 and with a
 * seeded sampler; the tokens and logits equal plain decoding. */
static void test_mtp_drafts_accepted(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    build_mtp_model(true);
    ls_model *mm = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = g_mtp_path}, &err);
    remove(g_mtp_path);
    if (!mm) fail_msg("synthetic copier MTP model: %s", err.msg);
    ls_model *saved = g_model;
    g_model = mm; /* run() uses g_model */
    int32_t prompt[8] = {1, 504, 3120, 282, 5248, 30, 198, 2};
    int64_t drafted = 0, accepted = 0;
    const float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 9};
        outcome ref = {0};
        ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        run(prompt, 8, sp, 24, NULL, &ref);
        for (int32_t k = 2; k <= 6; k += 4) {
            ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_MTP, .draft_max = k, .draft_min = 1,
                                .fixed_length = true};
            outcome o = {0};
            o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
            run(prompt, 8, sp, 24, &p, &o);
            if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                fail_msg("copier mtp, draft-max %d, temperature %.1f: differs from plain decoding", k, (double)temps[ti]);
            drafted += o.n_drafted;
            accepted += o.n_accepted;
            free(o.logits);
        }
        free(ref.logits);
    }
    g_model = saved;
    print_message("mtp accept path: %lld of %lld drafts accepted, tokens and logits equal plain decoding\n",
                  (long long)accepted, (long long)drafted);
    assert_true(drafted > 0 && accepted * 2 > drafted); /* the accept path ran, mostly */
    ls_model_free(mm);
}

/* An MTP head over part of the vocabulary (lockstep.mtp.head_vocab):
 *  - the module's forward gives, for each of its tokens, the bytes of the logit the
 *    whole-vocabulary head gives that token (memcmp, every row of 20 positions);
 *  - the copier module (it predicts the target's next token) over a head that holds the
 *    plain answer's tokens has most drafts accepted; over one that holds none of them,
 *    none (a draft is never outside the head), and both answers equal plain decoding
 *    (tokens and logits, temperature 0 and 0.8);
 *  - a bad list (descending, repeated, out of the vocabulary, not integers, empty) is a
 *    load error that names the key. */
static ls_model *load_hv_model(bool copier, const int32_t *hv, int32_t n) {
    build_mtp_model_hv(copier, hv, (uint64_t)n, GGUF_VT_INT32);
    ls_err err;
    ls_model *mm = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = g_mtp_path}, &err);
    remove(g_mtp_path);
    if (!mm) fail_msg("MTP model with a head over %d tokens: %s", n, err.msg);
    return mm;
}

static void mtp_logits(ls_model *m, int32_t n, const int32_t *tok, const float *hin, float *logits) {
    ls_err err;
    const ls_hparams *hp = ls_model_hparams(m);
    ls_fwd *f = ls_fwd_create(m, (ls_fwd_params){.n_rows = 32, .n_ctx = 64, .n_threads = 1, .isa = -1, .mtp = true}, &err);
    if (!f) fail_msg("mtp forward: %s", err.msg);
    ls_kv_store *kv = ls_kv_store_create_shape(1, (int32_t)hp->n_head_kv, (int32_t)(hp->n_embd / hp->n_head), 64 / LS_KV_BLOCK + 1, &err);
    assert_non_null(kv);
    int32_t pos[32], seq[32] = {0}, lrow[32], table[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int32_t *tables[1] = {table};
    for (int32_t i = 0; i < n; i++) pos[i] = i, lrow[i] = i;
    ls_batch b = {n, tok, pos, seq, tables, lrow, NULL, hin, NULL};
    ls_fwd_run(f, kv, &b, logits);
    ls_kv_store_free(kv);
    ls_fwd_free(f);
}

static void test_mtp_head_vocab(void **state) {
    (void)state;
    FX_NEED(g_model);
    const int32_t V = g_V, E = (int32_t)ls_model_hparams(g_model)->n_embd;
    /* 1. the forward: a head over every 5th token and the last one */
    int32_t *hv = malloc(sizeof(int32_t) * (size_t)V), nh = 0;
    for (int32_t t = 0; t < V; t += 5) hv[nh++] = t;
    if (hv[nh - 1] != V - 1) hv[nh++] = V - 1;
    ls_model *full = load_hv_model(false, NULL, 0), *part = load_hv_model(false, hv, nh);
    enum { R = 20 };
    int32_t tok[R];
    float *hin = malloc(sizeof(float) * (size_t)R * E), *lf = malloc(sizeof(float) * (size_t)R * V),
          *lp = malloc(sizeof(float) * (size_t)R * nh);
    uint64_t rs = 17;
    for (int32_t i = 0; i < R; i++) tok[i] = (int32_t)(rng_next(&rs) % (uint64_t)V);
    for (int64_t i = 0; i < (int64_t)R * E; i++) hin[i] = (float)(rng_next(&rs) >> 40) / 4194304.0f - 2.0f;
    mtp_logits(full, R, tok, hin, lf);
    mtp_logits(part, R, tok, hin, lp);
    for (int32_t r = 0; r < R; r++)
        for (int32_t i = 0; i < nh; i++)
            if (memcmp(&lp[(size_t)r * nh + i], &lf[(size_t)r * V + hv[i]], sizeof(float)))
                fail_msg("row %d, head token %d (id %d): %.9g, the whole head's %.9g", r, i, hv[i],
                         (double)lp[(size_t)r * nh + i], (double)lf[(size_t)r * V + hv[i]]);
    const int32_t *ids;
    assert_int_equal(ls_model_mtp_vocab(part, &ids), nh);
    assert_memory_equal(ids, hv, sizeof(int32_t) * (size_t)nh);
    assert_int_equal(ls_model_mtp_vocab(full, &ids), 0);
    assert_true(ls_model_mtp_cost(part) < ls_model_mtp_cost(full)); /* the head is most of a draft */
    ls_model_free(full);
    ls_model_free(part);
    free(lf);
    free(lp);
    free(hin);

    /* 2. the copier over a head with the answer's tokens, and over one without them */
    int32_t prompt[8] = {1, 504, 3120, 282, 5248, 30, 198, 2};
    ls_model *saved = g_model, *copier = load_hv_model(true, NULL, 0);
    const float temps[2] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 9};
        outcome ref = {0};
        ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        g_model = copier; /* its trunk is not the default model's: plain decoding of it */
        run(prompt, 8, sp, 24, NULL, &ref);
        g_model = saved;
        for (int with = 0; with < 2; with++) {
            char *in = calloc((size_t)V, 1);
            for (int32_t i = 0; i < ref.n; i++) in[ref.toks[i]] = 1;
            nh = 0;
            for (int32_t t = 0; t < V; t++)
                if (with ? (in[t] || t % 7 == 0) : (!in[t] && t % 7 == 3)) hv[nh++] = t;
            free(in);
            ls_model *mm = load_hv_model(true, hv, nh);
            g_model = mm; /* run() uses g_model */
            ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_MTP, .draft_max = 3, .draft_min = 1,
                                .fixed_length = true};
            outcome o = {0};
            o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
            run(prompt, 8, sp, 24, &p, &o);
            g_model = saved;
            if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                fail_msg("copier mtp, head %s the answer's tokens, temperature %.1f: differs from plain decoding",
                         with ? "with" : "without", (double)temps[ti]);
            print_message("head of %d tokens %s the answer's, temperature %.1f: %d of %d drafts accepted\n", nh,
                          with ? "with" : "without", (double)temps[ti], o.n_accepted, o.n_drafted);
            assert_true(o.n_drafted > 0);
            if (with) assert_true(o.n_accepted * 2 > o.n_drafted);
            else assert_int_equal(o.n_accepted, 0);
            free(o.logits);
            ls_model_free(mm);
        }
        free(ref.logits);
    }
    ls_model_free(copier);

    /* 3. bad lists */
    const int32_t desc[3] = {5, 9, 7}, rep[3] = {5, 9, 9}, big[2] = {5, 1 << 30}, neg[2] = {-1, 5};
    const float flt[2] = {1.0f, 2.0f};
    struct { const void *v; uint64_t n; gguf_vtype t; const char *why; } bad[] = {
        {desc, 3, GGUF_VT_INT32, "not above"}, {rep, 3, GGUF_VT_INT32, "not above"},
        {big, 2, GGUF_VT_INT32, "not a token"}, {neg, 2, GGUF_VT_INT32, "not a token"},
        {flt, 2, GGUF_VT_FLOAT32, "not of token ids"}, {desc, 0, GGUF_VT_INT32, "has 0 tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        build_mtp_model_hv(false, bad[i].v, bad[i].n, bad[i].t);
        ls_err err;
        ls_model *mm = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = g_mtp_path}, &err);
        remove(g_mtp_path);
        if (mm) fail_msg("bad head_vocab %zu loaded", i);
        if (!strstr(err.msg, "lockstep.mtp.head_vocab") || !strstr(err.msg, bad[i].why))
            fail_msg("bad head_vocab %zu: '%s' (wanted the key and '%s')", i, err.msg, bad[i].why);
    }
    free(hv);
}

/* Drafts accepted under a grammar: the ngram drafter on a constrained, repetitive output
 * (a grammar of colour words, with a logit bias and a repeat penalty on top), at
 * temperature 0 and 0.8: drafts are accepted, and the tokens and logits equal plain
 * constrained decoding (memcmp); the plain reply is (a prefix of) a sentence of the grammar. */
static void test_grammar_drafts_accepted(void **state) {
    (void)state;
    FX_NEED(g_model);
    const char *text = "<|im_start|>user\nRepeat exactly, ten times: red, green, blue, red, green, blue, red, green, "
                       "blue,<|im_end|>\n<|im_start|>assistant\n";
    int32_t prompt[128];
    size_t n;
    ls_err err;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(g_model), text, strlen(text), false, true, prompt, 128, &n, &err),
                     LS_OK);
    const char *gram = "root ::= (\"red\" | \"green\" | \"blue\") (\", \" (\"red\" | \"green\" | \"blue\")){1,40} \".\"\n";
    int32_t comma[4];
    size_t nc;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(g_model), ",", 1, false, false, comma, 4, &nc, &err), LS_OK);
    const ls_logit_bias bias[2] = {{comma[0], 0.75f}, {(int32_t)prompt[n - 1], -1.0f}};
    const float temps[2] = {0.0f, 0.8f};
    int64_t drafted = 0, accepted = 0;
    g_grammar = gram;
    for (int ti = 0; ti < 2; ti++) {
        ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 21, .logit_bias = bias,
                                .n_logit_bias = 2, .repeat_penalty = 1.05f, .repeat_last_n = 8};
        outcome ref = {0};
        ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
        run(prompt, (int32_t)n, sp, 40, NULL, &ref);
        assert_true(ref.n >= 10);
        char out[1024];
        size_t len = 0;
        for (int32_t i = 0; i < ref.n; i++)
            if (!ls_model_is_eog(g_model, ref.toks[i]))
                len += ls_model_token_bytes(g_model, ref.toks[i], false, out + len, sizeof out - len);
        ls_grammar *g = ls_grammar_compile(gram, strlen(gram), &err);
        assert_non_null(g);
        ls_grammar_state *gs = ls_grammar_state_new(g); /* max_tokens may cut it: a prefix of a sentence */
        if (!ls_grammar_accept_bytes(gs, out, len)) fail_msg("not a prefix of the grammar's: %.*s", (int)len, out);
        ls_grammar_state_free(gs);
        ls_grammar_free(g);
        for (int32_t k = 2; k <= 6; k += 4) {
            ls_spec_params p = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_NGRAM, .draft_max = k, .draft_min = 1,
                                .ngram_min = 1, .ngram_max = 4};
            outcome o = {0};
            o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
            run(prompt, (int32_t)n, sp, 40, &p, &o);
            if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                fail_msg("ngram under a grammar, draft-max %d, temperature %.1f: differs from plain constrained decoding",
                         k, (double)temps[ti]);
            drafted += o.n_drafted;
            accepted += o.n_accepted;
            free(o.logits);
        }
        free(ref.logits);
    }
    g_grammar = NULL;
    print_message("grammar + ngram: %lld of %lld drafts accepted, tokens and logits equal plain constrained decoding\n",
                  (long long)accepted, (long long)drafted);
    assert_true(drafted > 0 && accepted > 0);
}

/* The MTP module shipped for the default model (mtp/, fitted by tools/fit_mtp.py), loaded
 * from its own file (ls_model_params.mtp_path): chat prompts at temperature 0 and 0.8 give
 * the tokens and logits of plain decoding, with the adaptive length and the confidence stop
 * (p_min) and with fixed chains, and the module's drafts are accepted.  Skipped when MODEL
 * is another model (the module refuses it) or the module is absent. */
static const char *mtp_shipped_path(void) {
    const char *p = getenv("LOCKSTEP_MTP_MODULE");
    return p && *p ? p : "mtp/SmolLM2-135M-Instruct.Q4_1.mtp.gguf";
}

static void test_mtp_shipped_module(void **state) {
    (void)state;
    FX_NEED(g_model);
    if (access(mtp_shipped_path(), R_OK) != 0) {
        print_message("no shipped MTP module at %s: skipped\n", mtp_shipped_path());
        skip();
    }
    ls_err err;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = fx_model_path();
    mp.mtp_path = mtp_shipped_path();
    ls_model *mm = ls_model_load(&mp, &err);
    if (!mm && err.code == LS_E_INVALID && strstr(err.msg, "fitted to another model")) {
        print_message("%s\n(skipped: MODEL is not the module's model)\n", err.msg);
        skip();
    }
    if (!mm) fail_msg("shipped MTP module: %s", err.msg);
    assert_true(ls_model_has_mtp(mm));
    ls_model *saved = g_model;
    g_model = mm; /* run() uses g_model */
    static const char *const chats[] = {"What is the capital of France?", "Write a haiku about the sea."};
    int64_t drafted = 0, accepted = 0;
    const float temps[2] = {0.0f, 0.8f};
    for (size_t ci = 0; ci < sizeof chats / sizeof chats[0]; ci++) {
        char text[256];
        snprintf(text, sizeof text, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", chats[ci]);
        int32_t prompt[128];
        size_t n;
        assert_int_equal(ls_tokenize(ls_model_tokenizer(mm), text, strlen(text), false, true, prompt, 128, &n, &err),
                         LS_OK);
        for (int ti = 0; ti < 2; ti++) {
            ls_sampler_params sp = {.temperature = temps[ti], .top_k = 40, .top_p = 0.95f, .seed = 11};
            outcome ref = {0};
            ref.logits = malloc(sizeof(float) * (size_t)g_V * 64);
            run(prompt, (int32_t)n, sp, 48, NULL, &ref);
            for (int v = 0; v < 3; v++) { /* adaptive with the confidence stop; a fixed chain of 3; adaptive
                                           * with prompt lookup first */
                ls_spec_params p = LS_SPEC_PARAMS_INIT;
                p.kind = LS_SPEC_MTP;
                p.draft_max = v == 1 ? 3 : 4;
                p.fixed_length = v == 1;
                p.lookup_min = v == 2 ? 2 : 0;
                outcome o = {0};
                o.logits = malloc(sizeof(float) * (size_t)g_V * 64);
                run(prompt, (int32_t)n, sp, 48, &p, &o);
                if (o.n != ref.n || memcmp(o.toks, ref.toks, sizeof(int32_t) * (size_t)o.n) ||
                    memcmp(o.logits, ref.logits, sizeof(float) * (size_t)g_V * (size_t)o.n))
                    fail_msg("shipped mtp, chat %zu, %s, temperature %.1f: differs from plain decoding", ci,
                             v == 1 ? "fixed 3" : v ? "adaptive, lookup first" : "adaptive", (double)temps[ti]);
                drafted += o.n_drafted;
                accepted += o.n_accepted;
                free(o.logits);
            }
            free(ref.logits);
        }
    }
    g_model = saved;
    print_message("shipped mtp module: %lld of %lld drafts accepted, tokens and logits equal plain decoding\n",
                  (long long)accepted, (long long)drafted);
    assert_true(drafted > 0 && accepted > 0);
    ls_model_free(mm);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_matches_brute_force),
        cmocka_unit_test(test_lookup_first),
        cmocka_unit_test(test_spec_bad_params),
        cmocka_unit_test(test_adaptive_declines_costly_drafter),
        cmocka_unit_test(test_measured_costs),
        cmocka_unit_test(test_spec_equals_plain),
        cmocka_unit_test(test_mtp_equals_plain),
        cmocka_unit_test(test_mtp_drafts_accepted),
        cmocka_unit_test(test_mtp_shipped_module),
        cmocka_unit_test(test_mtp_head_vocab),
        cmocka_unit_test(test_grammar_drafts_accepted),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
