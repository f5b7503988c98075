/* The batched engine: block bookkeeping and the prefix cache on their own, then
 * parity on the real model (P2-P4 in DESIGN.md): a sequence's logits and tokens
 * are byte-identical (memcmp) to its solo run inside random mixes of up to 32
 * other sequences, with random arrivals, prompt lengths, prefill chunks, step
 * budgets, prefix-cache hits, preemption under a small KV cache, verify blocks and
 * cancellations, and the real drafters (ngram, layer-skip, the target as its own
 * draft), at 1 and 2 threads.  Every failure prints the seed that
 * reproduces it:  build/tests/test_engine random_parity  with LOCKSTEP_CASE_SEED=N.
 * The solo runs are themselves checked against the single-sequence ls_ctx path.
 * Model tests are skipped when MODEL does not name a readable file. */
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
#include "engine/kvcache.h"
#include "model/model.h"
#include "speculative/spec.h"

#define BS LS_KV_BLOCK

static uint64_t rng_next(uint64_t *s) { return ls_splitmix64(s); }
static int32_t rng_int(uint64_t *s, int32_t lo, int32_t hi) { /* [lo, hi] */
    return lo + (int32_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* ======================= block bookkeeping, no model ======================= */

static void test_kvc_alloc_release(void **state) {
    (void)state;
    ls_err err;
    ls_kvcache *c = ls_kvc_create(4, false, &err);
    assert_non_null(c);
    int32_t b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = ls_kvc_alloc(c);
        assert_true(b[i] >= 0 && b[i] < 4);
        for (int j = 0; j < i; j++) assert_int_not_equal(b[i], b[j]);
    }
    assert_int_equal(ls_kvc_alloc(c), -1);
    ls_kvc_release(c, b[2]);
    assert_int_equal(ls_kvc_alloc(c), b[2]);
    const int32_t *tabs[1] = {b};
    int32_t nb[1] = {4};
    assert_true(ls_kvc_check(c, tabs, nb, 1, &err));
    for (int i = 0; i < 4; i++) ls_kvc_release(c, b[i]);
    assert_true(ls_kvc_check(c, NULL, NULL, 0, &err));
    int32_t t[4], n;
    int32_t toks[40] = {0};
    assert_int_equal(ls_kvc_match(c, toks, 39, t, &n), 0); /* cache off */
    assert_int_equal(n, 0);
    ls_kvc_free(c);
}

/* A shadow of the KV contents: slot s of block b "holds" the hash of the token
 * prefix whose last position it was computed for.  The cache must only ever hand a
 * sequence blocks whose slots hold its own prefix hashes. */
typedef struct {
    int32_t toks[200];
    int32_t n_toks, n_past, table[16], n_blocks, registered;
} mseq;

static uint64_t prefix_hash(const int32_t *t, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)t[i]) * 1099511628211ull;
    return h;
}

static void mseq_write(ls_kvcache *c, uint64_t (*shadow)[BS], mseq *s, int32_t upto, bool *ok) {
    /* copy-on-write, then allocate, as the engine does */
    if (s->n_past % BS) {
        int32_t bi = s->n_past / BS, b = s->table[bi];
        if (ls_kvc_shared(c, b)) {
            int32_t nb = ls_kvc_alloc(c);
            if (nb < 0) { *ok = false; return; }
            memcpy(shadow[nb], shadow[b], sizeof shadow[b]);
            ls_kvc_release(c, b);
            s->table[bi] = nb;
        }
    }
    while (s->n_blocks * BS < upto) {
        int32_t nb = ls_kvc_alloc(c);
        if (nb < 0) { *ok = false; return; }
        s->table[s->n_blocks++] = nb;
    }
    for (int32_t p = s->n_past; p < upto; p++)
        shadow[s->table[p / BS]][p % BS] = prefix_hash(s->toks, p + 1);
    s->n_past = upto;
    for (; (s->registered + 1) * BS <= s->n_past; s->registered++)
        ls_kvc_commit(c, s->table, s->registered, s->toks + s->registered * BS, BS);
    *ok = true;
}

static void mseq_finish(ls_kvcache *c, mseq *s) {
    if (s->n_blocks && s->n_past % BS && s->registered == s->n_blocks - 1)
        ls_kvc_commit(c, s->table, s->n_blocks - 1, s->toks + (s->n_blocks - 1) * BS, s->n_past % BS);
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) ls_kvc_release(c, s->table[i]);
    s->n_blocks = 0;
}

static void test_kvc_prefix_cache_random(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t rs = seed;
        const int32_t NB = rng_int(&rs, 12, 40);
        ls_err err;
        ls_kvcache *c = ls_kvc_create(NB, true, &err);
        uint64_t (*shadow)[BS] = calloc((size_t)NB, sizeof *shadow);
        mseq live[6];
        int n_live = 0;
        uint64_t hits = 0, cows = 0;
        for (int op = 0; op < 400; op++) {
            int kind = rng_int(&rs, 0, 2);
            if (kind == 0 && n_live < 6) { /* new sequence: tokens from a tiny alphabet share prefixes */
                mseq *s = &live[n_live];
                memset(s, 0, sizeof *s);
                s->n_toks = rng_int(&rs, 2, 120);
                int32_t alpha = rng_int(&rs, 1, 3);
                for (int32_t i = 0; i < s->n_toks; i++) s->toks[i] = i < 40 ? (int32_t)(seed % 3) : rng_int(&rs, 0, alpha);
                s->n_past = ls_kvc_match(c, s->toks, s->n_toks - 1, s->table, &s->n_blocks);
                s->registered = s->n_past / BS;
                assert_true(s->n_past <= s->n_toks - 1);
                assert_int_equal(s->n_blocks, (s->n_past + BS - 1) / BS);
                hits += s->n_past > 0;
                for (int32_t p = 0; p < s->n_past; p++) /* what the cache handed out is this prefix's K/V */
                    if (shadow[s->table[p / BS]][p % BS] != prefix_hash(s->toks, p + 1)) {
                        fail_msg("seed %llu op %d: cached position %d holds another prefix's K/V",
                                 (unsigned long long)seed, op, p);
                    }
                n_live++;
            } else if (kind == 1 && n_live > 0) { /* extend one by a chunk */
                mseq *s = &live[rng_int(&rs, 0, n_live - 1)];
                if (s->n_past < s->n_toks) {
                    int32_t upto = s->n_past + rng_int(&rs, 1, s->n_toks - s->n_past);
                    bool shared = s->n_past % BS && ls_kvc_shared(c, s->table[s->n_past / BS]);
                    bool ok;
                    mseq_write(c, shadow, s, upto, &ok);
                    cows += ok && shared;
                    if (!ok) { /* out of blocks: drop it like a preemption */
                        mseq_finish(c, s);
                        *s = live[--n_live];
                    }
                }
            } else if (n_live > 0) { /* finish one */
                int i = rng_int(&rs, 0, n_live - 1);
                mseq_finish(c, &live[i]);
                live[i] = live[--n_live];
            }
            const int32_t *tabs[6];
            int32_t nb[6];
            for (int i = 0; i < n_live; i++) {
                tabs[i] = live[i].table;
                nb[i] = live[i].n_blocks;
            }
            if (!ls_kvc_check(c, tabs, nb, n_live, &err))
                fail_msg("seed %llu op %d: %s", (unsigned long long)seed, op, err.msg);
        }
        assert_true(hits > 0);
        (void)cows;
        for (int i = 0; i < n_live; i++) mseq_finish(c, &live[i]);
        ls_kvc_stats st;
        ls_kvc_get_stats(c, &st);
        assert_int_equal(st.free + st.cached_idle, NB); /* nothing lost */
        free(shadow);
        ls_kvc_free(c);
    }
}

static void test_kvc_lru_evicts_leaves_first(void **state) {
    (void)state;
    ls_err err;
    ls_kvcache *c = ls_kvc_create(3, true, &err);
    mseq s = {0};
    s.n_toks = 3 * BS + 1;
    for (int32_t i = 0; i < s.n_toks; i++) s.toks[i] = i;
    uint64_t shadow[3][BS];
    bool ok;
    mseq_write(c, shadow, &s, 3 * BS, &ok);
    assert_true(ok);
    int32_t chain[3] = {s.table[0], s.table[1], s.table[2]};
    mseq_finish(c, &s);
    ls_kvc_stats st;
    ls_kvc_get_stats(c, &st);
    assert_int_equal(st.cached, 3);
    assert_int_equal(st.cached_idle, 3);
    /* evictions take the chain from its end: an inner block is useless without its parent */
    assert_int_equal(ls_kvc_alloc(c), chain[2]);
    assert_int_equal(ls_kvc_alloc(c), chain[1]);
    /* the root block is still a hit */
    mseq t = {0};
    t.n_toks = 3 * BS;
    memcpy(t.toks, s.toks, sizeof t.toks);
    t.n_past = ls_kvc_match(c, t.toks, t.n_toks - 1, t.table, &t.n_blocks);
    assert_int_equal(t.n_past, BS);
    assert_int_equal(t.table[0], chain[0]);
    ls_kvc_free(c);
}

/* ============================ the real model ============================== */


static ls_model *g_model;
static int32_t g_V;

static int group_setup(void **state) {
    (void)state;
    if (access(fx_model_path(), R_OK) != 0) return 0;
    ls_err err;
    g_model = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = fx_model_path()}, &err);
    if (!g_model) {
        fprintf(stderr, "load: %s\n", err.msg);
        return -1;
    }
    g_V = (int32_t)ls_model_hparams(g_model)->n_vocab;
    return 0;
}
static int group_teardown(void **state) {
    (void)state;
    ls_model_free(g_model);
    return 0;
}

/* What one request produced. */
#define MAXGEN 16
typedef struct {
    int32_t toks[MAXGEN + 1];   /* sampled tokens, including a final stop token */
    int32_t n;
    float *logits;              /* (MAXGEN + 1) x V */
    bool done, cancelled;
    ls_finish finish;
    int32_t n_cached, n_drafted, n_accepted;
    char text[2048];
    size_t text_len;
    /* oracle drafter: proposes the solo run's continuation, with corruption */
    const int32_t *oracle;
    int32_t n_oracle, n_prompt;
    uint64_t draft_rng;
} outcome;

static void on_event(void *ud, const ls_event *ev) {
    outcome *o = ud;
    assert_false(o->done);
    if (ev->token >= 0) {
        assert_true(o->n <= MAXGEN);
        if (o->logits) {
            assert_non_null(ev->logits);
            memcpy(o->logits + (size_t)o->n * g_V, ev->logits, sizeof(float) * (size_t)g_V);
        }
        o->toks[o->n++] = ev->token;
    }
    assert_true(o->text_len + ev->text_len < sizeof o->text);
    memcpy(o->text + o->text_len, ev->text, ev->text_len);
    o->text_len += ev->text_len;
    if (ev->done) {
        o->done = true;
        o->finish = ev->finish;
        o->cancelled = ev->finish == LS_FINISH_CANCELLED;
    }
    o->n_cached = ev->n_cached > o->n_cached ? ev->n_cached : o->n_cached;
    o->n_drafted = ev->n_drafted;
    o->n_accepted = ev->n_accepted;
}

static int32_t oracle_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    outcome *o = ud;
    int32_t g = n_hist - o->n_prompt, k = 0; /* tokens generated so far */
    (void)hist;
    for (; k < max && g + k < o->n_oracle; k++) {
        out[k] = o->oracle[g + k];
        if (rng_next(&o->draft_rng) % 4 == 0) out[k] = (int32_t)(rng_next(&o->draft_rng) % 1000); /* wrong guess */
    }
    if (rng_next(&o->draft_rng) % 3 == 0) /* sometimes guess past the real end */
        for (; k < max; k++) out[k] = (int32_t)(rng_next(&o->draft_rng) % (uint64_t)g_V); /* 49152 for SmolLM2 */
    return k;
}

typedef struct {
    int32_t prompt[300];
    int32_t n_prompt;
    ls_sampler_params sp;
    int32_t max_tokens;
} req_spec;

static ls_request make_request(const req_spec *r, outcome *o) {
    ls_request q = LS_REQUEST_INIT;
    q.prompt = r->prompt;
    q.n_prompt = r->n_prompt;
    q.sampling = r->sp;
    q.max_tokens = r->max_tokens;
    q.want_logits = o->logits != NULL;
    q.on_event = on_event;
    q.ud = o;
    return q;
}

static void run_to_idle(ls_engine *e) {
    ls_err err;
    for (int guard = 0; !ls_engine_idle(e); guard++) {
        assert_true(guard < 100000);
        assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
        if (!ls_engine_check(e, &err)) fail_msg("engine invariant: %s", err.msg);
    }
}

/* The solo run: one request alone, one chunk, no prefix cache, 1 thread. */
static void run_solo(const req_spec *r, outcome *o) {
    ls_err err;
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 512, .n_seq_max = 1, .step_tokens = 512, .n_threads = 1, .isa = -1,
                          .no_prefix_cache = true};
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    assert_non_null(e);
    ls_request q = make_request(r, o);
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    assert_true(o->done);
    ls_engine_free(e);
}

static void tokenize(const char *text, int32_t *out, int32_t cap, int32_t *n) {
    ls_err err;
    size_t nn;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(g_model), text, strlen(text), false, true, out, (size_t)cap, &nn,
                                 &err), LS_OK);
    *n = (int32_t)nn;
}

static void test_engine_rejects_bad_requests(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 64, .n_seq_max = 2, .step_tokens = 32, .n_threads = 1, .isa = -1,
                          .kv_mem = (int64_t)ls_kv_block_bytes(g_model) * 3};
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    assert_non_null(e);
    int32_t prompt[80];
    for (int i = 0; i < 80; i++) prompt[i] = 100 + i;
    outcome o = {0};
    req_spec r = {.n_prompt = 5, .max_tokens = 4, .sp = {.top_p = 1.0f}};
    memcpy(r.prompt, prompt, sizeof prompt);
    struct { int32_t n_prompt, max_tokens, bad_tok; float temp; const char *msg; ls_status code; } cases[] = {
        {0, 4, -1, 0.0f, "prompt is empty", LS_E_INVALID},
        {5, 4, 99999, 0.0f, "outside the vocabulary", LS_E_INVALID},
        {5, 4, -7, 0.0f, "outside the vocabulary", LS_E_INVALID},
        {64, 4, -1, 0.0f, "context holds 64", LS_E_RANGE},
        {40, 20, -1, 0.0f, "whole cache holds 48", LS_E_RANGE},   /* 60 positions > 3 blocks */
        {5, 0, -1, 0.0f, "max_tokens is 0", LS_E_INVALID},
        {5, 4, -1, -1.0f, "temperature", LS_E_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        req_spec rr = r;
        rr.n_prompt = cases[i].n_prompt;
        rr.max_tokens = cases[i].max_tokens;
        if (cases[i].bad_tok != -1) rr.prompt[2] = cases[i].bad_tok;
        rr.sp.temperature = cases[i].temp;
        ls_request q = make_request(&rr, &o);
        memset(&err, 0, sizeof err);
        ls_status got = ls_engine_submit(e, &q, NULL, &err);
        if (got != cases[i].code) fail_msg("case %zu: status %d (%s), want %d", i, got, err.msg, cases[i].code);
        if (!strstr(err.msg, cases[i].msg)) fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].msg);
    }
    assert_true(ls_engine_idle(e));
    ls_engine_free(e);
    /* bad engine parameters */
    const size_t z = sizeof(ls_engine_params);
    ls_engine_params bad[] = {
        {.size = z, .n_ctx = 999999, .isa = -1},
        {.size = z, .n_seq_max = 8, .step_tokens = 4, .isa = -1},
        {.size = z, .kv_mem = 1000, .isa = -1},
        {.size = z, .n_threads = -1, .isa = -1},
        {.size = z, .kernels = "fastest", .isa = -1},
        {.size = 0, .isa = -1},
    };
    const char *msgs[] = {"exceeds the model's trained context", "at least the number of parallel", "less than one KV block",
                          "negative", "no kernel family 'fastest'", "engine params.size is 0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(ls_engine_create(g_model, &bad[i], &err));
        if (!strstr(err.msg, msgs[i])) fail_msg("engine case %zu: '%s' lacks '%s'", i, err.msg, msgs[i]);
    }
}

/* The engine's solo run equals the single-sequence ls_ctx path, logits and tokens. */
static void test_engine_solo_matches_ctx(void **state) {
    (void)state;
    FX_NEED(g_model);
    const char *texts[] = {"<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
                           "The quick brown fox", "1, 2, 3, 4,"};
    for (int t = 0; t < 3; t++) {
        req_spec r = {.max_tokens = 8};
        tokenize(texts[t], r.prompt, 300, &r.n_prompt);
        r.sp = (ls_sampler_params){.temperature = t == 2 ? 0.9f : 0.0f, .top_k = 40, .top_p = 0.95f, .seed = 7};
        outcome o = {0};
        o.logits = malloc(sizeof(float) * (size_t)g_V * (MAXGEN + 1));
        run_solo(&r, &o);
        ls_err err;
        ls_ctx *c = ls_ctx_create(g_model, (ls_ctx_params){.n_ctx = 512, .n_threads = 1, .isa = -1}, &err);
        float *lg = malloc(sizeof(float) * (size_t)g_V);
        assert_int_equal(ls_ctx_eval(c, r.prompt, r.n_prompt, 0, lg, false, &err), LS_OK);
        void *scr = malloc(ls_sampler_scratch_bytes(g_V));
        for (int32_t i = 0; i < o.n; i++) {
            assert_memory_equal(lg, o.logits + (size_t)i * g_V, sizeof(float) * (size_t)g_V);
            int32_t tok = ls_sample(&r.sp, lg, g_V, (uint64_t)(r.n_prompt + i), scr);
            assert_int_equal(tok, o.toks[i]);
            if (i + 1 < o.n) assert_int_equal(ls_ctx_eval(c, &tok, 1, r.n_prompt + i, lg, false, &err), LS_OK);
        }
        assert_true(o.n >= 1);
        free(scr);
        free(lg);
        ls_ctx_free(c);
        free(o.logits);
    }
}

/* A drafter that proposes the oracle's tokens exactly. */
static int32_t exact_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    outcome *o = ud;
    int32_t g = n_hist - o->n_prompt, k = 0;
    (void)hist;
    for (; k < max && g + k < o->n_oracle; k++) out[k] = o->oracle[g + k];
    return k;
}

/* When a verify block's tokens end the request, its last event carries that block's
 * drafted and accepted counts (they were counted after the request had ended, so the
 * final event said 0 drafted: the probe then took a fully accepted block for none). */
static void test_engine_final_event_counts_the_last_block(void **state) {
    (void)state;
    FX_NEED(g_model);
    req_spec r = {.max_tokens = 6, .sp = {.temperature = 0.0f, .top_p = 1.0f}};
    tokenize("The quick brown fox", r.prompt, 300, &r.n_prompt);
    outcome solo_o = {0};
    run_solo(&r, &solo_o);
    assert_int_equal(solo_o.n, 6);
    ls_err err;
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 512, .n_seq_max = 1, .step_tokens = 64, .n_threads = 1,
                          .isa = -1, .draft_max = 8, .no_prefix_cache = true};
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    assert_non_null(e);
    outcome o = {.oracle = solo_o.toks, .n_oracle = solo_o.n, .n_prompt = r.n_prompt};
    ls_request q = make_request(&r, &o);
    q.draft = exact_draft;
    q.draft_ud = &o;
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    assert_true(o.done);
    assert_int_equal(o.n, 6);
    assert_memory_equal(o.toks, solo_o.toks, 6 * sizeof(int32_t));
    /* token 1 from the prefill, then one block: 4 drafts (max_tokens leaves room for 4
     * plus the bonus token), all accepted, and the request ends inside it */
    assert_int_equal(o.n_drafted, 4);
    assert_int_equal(o.n_accepted, 4);
    ls_engine_free(e);
}

static void test_engine_stops_and_cancel(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 256, .n_seq_max = 4, .step_tokens = 64, .n_threads = 1, .isa = -1};
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    req_spec r = {.max_tokens = 16, .sp = {.top_p = 1.0f}};
    tokenize("<|im_start|>user\nCount from 1 to 20, separated by commas.<|im_end|>\n<|im_start|>assistant\n",
             r.prompt, 300, &r.n_prompt);
    outcome full = {0};
    ls_request q = make_request(&r, &full);
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    assert_true(full.done && full.finish == LS_FINISH_LENGTH && full.n == 16);
    full.text[full.text_len] = '\0';
    /* a stop string taken from the middle of that text ends generation before it */
    const char *mid = full.text + full.text_len / 2;
    char stop[4] = {mid[0], mid[1], mid[2], 0};
    const char *stops[] = {stop};
    outcome o = {0};
    q = make_request(&r, &o);
    q.stop = stops;
    q.n_stop = 1;
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    o.text[o.text_len] = '\0';
    assert_true(o.done && o.finish == LS_FINISH_STOP);
    size_t at = (size_t)(strstr(full.text, stop) - full.text);
    assert_int_equal(o.text_len, at);
    assert_memory_equal(o.text, full.text, at);
    /* a stop token: the third generated token */
    outcome o2 = {0};
    q = make_request(&r, &o2);
    q.stop_tokens = &full.toks[2];
    q.n_stop_tokens = 1;
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    assert_true(o2.done && o2.finish == LS_FINISH_STOP);
    int32_t first = 0;
    while (full.toks[first] != full.toks[2]) first++;
    assert_int_equal(o2.n, first + 1); /* the stop token is reported, then generation ends */
    /* cancellation: mid-generation, then the blocks are back */
    outcome o3 = {0};
    q = make_request(&r, &o3);
    uint64_t id;
    assert_int_equal(ls_engine_submit(e, &q, &id, &err), LS_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    ls_engine_cancel(e, id);
    ls_engine_cancel(e, 999999); /* unknown ids are ignored */
    assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    assert_true(o3.done && o3.cancelled);
    assert_true(o3.n < 16);
    assert_true(ls_engine_idle(e));
    ls_engine_stats st = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(e, &st);
    assert_int_equal(st.kv_used, 0);
    assert_int_equal(st.n_running + st.n_waiting, 0);
    assert_true(st.steps > 0);
    /* a caller built against a shorter layout gets its fields and nothing past them */
    ls_engine_stats old;
    memset(&old, 0xAB, sizeof old);
    old.size = offsetof(ls_engine_stats, steps);
    ls_engine_get_stats(e, &old);
    assert_int_equal(old.size, offsetof(ls_engine_stats, steps));
    assert_int_equal(old.kv_blocks, st.kv_blocks);
    assert_true(old.steps == 0xABABABABABABABABull);
    ls_engine_free(e);
}

/* A request that finishes in the step that prefilled it still leaves its prompt's
 * blocks in the prefix cache; the next request with that prompt prefills only the
 * positions past the cached blocks and gets the same logits. */
static void test_engine_prefix_hit_after_one_step(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 256, .n_seq_max = 2, .step_tokens = 256, .n_threads = 1, .isa = -1};
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    req_spec r = {.max_tokens = 1, .sp = {.top_p = 1.0f}};
    tokenize("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is two plus "
             "two? Think step by step and explain.<|im_end|>\n<|im_start|>assistant\n", r.prompt, 300, &r.n_prompt);
    assert_true(r.n_prompt > 2 * BS);
    outcome a = {0}, b = {0};
    a.logits = malloc(sizeof(float) * (size_t)g_V * (MAXGEN + 1));
    b.logits = malloc(sizeof(float) * (size_t)g_V * (MAXGEN + 1));
    ls_request q = make_request(&r, &a);
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    assert_int_equal(a.n_cached, 0);
    q = make_request(&r, &b);
    assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    run_to_idle(e);
    assert_int_equal(b.n_cached, r.n_prompt - 1); /* full blocks, then the partial one left at the end */
    assert_int_equal(a.n, 1);
    assert_int_equal(b.n, 1);
    assert_int_equal(a.toks[0], b.toks[0]);
    assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)g_V);
    ls_engine_stats st = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(e, &st);
    assert_true(st.prefix_hit_tokens >= (uint64_t)(r.n_prompt - 1));
    free(a.logits);
    free(b.logits);
    ls_engine_free(e);
}

/* ---- the random parity suite ---- */
#define POOL 36
static req_spec g_pool[POOL];
static outcome g_solo[POOL];

static void build_pool(void) {
    static bool built;
    if (built) return;
    built = true;
    const char *corpus =
        "<|im_start|>system\nYou are a helpful assistant who answers briefly and precisely.<|im_end|>\n"
        "<|im_start|>user\nThe history of the printing press begins in the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based ink and a wooden screw press. Within decades, printing "
        "spread across Europe, books became cheaper, and literacy rose. Scholars could share identical copies of "
        "texts, which helped science advance; reformers spread pamphlets; and standard spellings emerged. Explain "
        "in two sentences why this mattered, then list three inventions that followed it, and say which one you "
        "think changed daily life the most and why. Also write a haiku about ink.<|im_end|>\n<|im_start|>assistant\n";
    int32_t toks[400], n;
    tokenize(corpus, toks, 400, &n);
    assert_true(n > 100);
    uint64_t rs = 12345;
    for (int i = 0; i < POOL; i++) {
        req_spec *r = &g_pool[i];
        /* a shared head (0, 21 or 40 tokens of the system prompt), then a window of the corpus */
        int32_t head = (int32_t[]){0, 21, 40}[i % 3];
        int32_t len = rng_int(&rs, 1, i % 5 == 0 ? 150 : 60);
        if (len > n - 40) len = n - 40;
        int32_t start = rng_int(&rs, 40, n - len);
        memcpy(r->prompt, toks, sizeof(int32_t) * (size_t)head);
        memcpy(r->prompt + head, toks + start, sizeof(int32_t) * (size_t)len);
        r->n_prompt = head + len;
        if (i % 7 == 3) { /* an exact duplicate of an earlier prompt */
            *r = g_pool[i - 2];
        }
        r->max_tokens = rng_int(&rs, 2, 10);
        if (i % 2)
            r->sp = (ls_sampler_params){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
        else
            r->sp = (ls_sampler_params){.temperature = 0.9f, .top_k = 50, .top_p = 0.9f, .seed = rng_next(&rs)};
    }
}

/* The solo reference of pool prompt i, computed the first time a case picks it (a few
 * cases, as under the sanitizers, need only a few of the 36). */
static const outcome *solo(int32_t i) {
    if (!g_solo[i].logits) {
        g_solo[i].logits = malloc(sizeof(float) * (size_t)g_V * (MAXGEN + 1));
        assert_non_null(g_solo[i].logits);
        run_solo(&g_pool[i], &g_solo[i]);
    }
    return &g_solo[i];
}

typedef struct {
    uint64_t preempted, prefix_hits, drafted, accepted, cancelled, compared;
} suite_totals;

/* One mix: n requests (pool prompts pick[i]) arriving at steps arrive[i], with their
 * prefill chunk, cancellation and drafter (0 none, 1 the oracle drafter with mistakes,
 * 2 ngram, 3 layer-skip, 4 the target as its own draft), on an engine with p. */
typedef struct {
    int32_t n;
    int32_t pick[33], arrive[33], chunk[33];
    bool cancel_it[33];
    int spec[33];
    ls_engine_params p;
} mix_case;

/* A random mix, from its seed. */
static mix_case random_case(uint64_t seed) {
    mix_case c = {0};
    uint64_t rs = seed * 0x2545F4914F6CDD1Dull + 1;
    int32_t n_others = rng_int(&rs, 0, 32);
    if (rng_int(&rs, 0, 3)) n_others = rng_int(&rs, 0, 12); /* mostly smaller mixes, to keep CI fast */
    int32_t n = c.n = n_others + 1;
    for (int32_t i = 0; i < n; i++) {
        c.pick[i] = rng_int(&rs, 0, POOL - 1);
        c.arrive[i] = rng_int(&rs, 0, 12);
        c.chunk[i] = rng_int(&rs, 0, 2) ? 0 : rng_int(&rs, 1, 40);
        c.cancel_it[i] = i > 0 && rng_int(&rs, 0, 9) == 0;
        c.spec[i] = rng_int(&rs, 0, 3) == 0 ? rng_int(&rs, 1, 4) : 0;
    }
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 256, .isa = -1};
    p.n_threads = rng_int(&rs, 1, 2);
    p.n_seq_max = rng_int(&rs, 1, n < 33 ? n : 33);
    p.step_tokens = rng_int(&rs, p.n_seq_max > 8 ? p.n_seq_max : 8, 160);
    p.no_prefix_cache = rng_int(&rs, 0, 3) == 0;
    p.draft_max = rng_int(&rs, 0, 2) ? rng_int(&rs, 1, 6) : 0;
    if (rng_int(&rs, 0, 2) == 0) /* a small cache: forces preemption and eviction */
        p.kv_mem = (int64_t)ls_kv_block_bytes(g_model) * rng_int(&rs, 11, 24);
    c.p = p;
    return c;
}

static void run_case(uint64_t seed, const mix_case *mc, suite_totals *tot) {
    const int32_t n = mc->n;
    const int32_t *pick = mc->pick, *arrive = mc->arrive, *chunk = mc->chunk;
    const bool *cancel_it = mc->cancel_it;
    const int *spec = mc->spec;
    const ls_engine_params p = mc->p;
    ls_err err;
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    if (!e) fail_msg("case seed %llu: engine: %s", (unsigned long long)seed, err.msg);
    outcome *o = calloc((size_t)n, sizeof *o);
    uint64_t *ids = calloc((size_t)n, sizeof *ids);
    ls_drafter **dr = calloc((size_t)n, sizeof *dr);
    for (int32_t i = 0; i < n; i++) {
        o[i].logits = malloc(sizeof(float) * (size_t)g_V * (MAXGEN + 1));
        o[i].oracle = solo(pick[i])->toks;
        o[i].n_oracle = solo(pick[i])->n;
        o[i].n_prompt = g_pool[pick[i]].n_prompt;
        o[i].draft_rng = seed ^ (uint64_t)i;
    }
    int32_t submitted = 0;
    for (int32_t step = 0; submitted < n || !ls_engine_idle(e); step++) {
        if (step > 20000) fail_msg("case seed %llu: no progress", (unsigned long long)seed);
        for (int32_t i = 0; i < n; i++)
            if (arrive[i] == step) {
                ls_request q = make_request(&g_pool[pick[i]], &o[i]);
                q.prefill_chunk = chunk[i];
                if (spec[i] == 1) {
                    q.draft = oracle_draft;
                    q.draft_ud = &o[i];
                } else if (spec[i] > 1) {
                    ls_spec_params sp = {.size = sizeof(ls_spec_params), .kind = spec[i] == 2 ? LS_SPEC_NGRAM : spec[i] == 3 ? LS_SPEC_LAYERSKIP : LS_SPEC_DRAFT,
                                         .draft_max = p.draft_max ? p.draft_max : 1, .draft_min = 1, .ngram_min = 1,
                                         .ngram_max = 3, .draft_model = g_model, .skip_first = 10,
                                         .fixed_length = true /* always draft: exercise them */};
                    dr[i] = ls_drafter_create(e, &sp, &q.sampling, &err);
                    if (!dr[i]) fail_msg("case seed %llu: drafter: %s", (unsigned long long)seed, err.msg);
                    q.draft = ls_drafter_draft;
                    q.draft_ud = dr[i];
                }
                if (ls_engine_submit(e, &q, &ids[i], &err))
                    fail_msg("case seed %llu: submit %d: %s", (unsigned long long)seed, i, err.msg);
                submitted++;
            }
        for (int32_t i = 0; i < n; i++)
            if (cancel_it[i] && ids[i] && step == arrive[i] + 3) ls_engine_cancel(e, ids[i]);
        if (ls_engine_step(e, NULL, &err)) fail_msg("case seed %llu: step: %s", (unsigned long long)seed, err.msg);
        if (!ls_engine_check(e, &err)) fail_msg("case seed %llu: step %d: %s", (unsigned long long)seed, step, err.msg);
    }
    for (int32_t i = 0; i < n; i++) {
        const outcome *ref = solo(pick[i]);
        if (!o[i].done) fail_msg("case seed %llu: sequence %d never finished", (unsigned long long)seed, i);
        tot->drafted += (uint64_t)o[i].n_drafted;
        tot->accepted += (uint64_t)o[i].n_accepted;
        tot->prefix_hits += o[i].n_cached > 0;
        if (o[i].cancelled) {
            tot->cancelled++;
            assert_true(o[i].n <= ref->n);
        } else if (o[i].n != ref->n || o[i].finish != ref->finish) {
            fail_msg("case seed %llu: sequence %d (pool %d) made %d tokens (%s), alone %d (%s)",
                     (unsigned long long)seed, i, pick[i], o[i].n, ls_finish_name(o[i].finish), ref->n,
                     ls_finish_name(ref->finish));
        }
        for (int32_t t = 0; t < o[i].n; t++) {
            if (o[i].toks[t] != ref->toks[t] ||
                memcmp(o[i].logits + (size_t)t * g_V, ref->logits + (size_t)t * g_V, sizeof(float) * (size_t)g_V))
                fail_msg("case seed %llu: sequence %d (pool %d) differs from its solo run at generated token %d "
                         "(threads %d, seqs %d, budget %d, prefix cache %d, kv %lld, chunk %d, drafter %d, draft-max %d)",
                         (unsigned long long)seed, i, pick[i], t, p.n_threads, p.n_seq_max, p.step_tokens,
                         !p.no_prefix_cache, (long long)p.kv_mem, chunk[i], spec[i], p.draft_max);
            tot->compared++;
        }
    }
    ls_engine_stats st = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(e, &st);
    assert_int_equal(st.kv_used, 0); /* every block came back */
    tot->preempted += st.preemptions;
    for (int32_t i = 0; i < n; i++) {
        free(o[i].logits);
        ls_drafter_free(dr[i]);
    }
    free(dr);
    free(o);
    free(ids);
    ls_engine_free(e);
}

/* A designed mix that reaches every path the random suite claims, at every test size
 * (the sanitizer runs in CI use one random case): a KV cache too small for the running
 * sequences (preemption and recomputation), an exact duplicate of an earlier prompt
 * arriving after it (a prefix-cache hit), the oracle drafter's blocks with mistakes
 * (partial acceptance), an ngram drafter, chunked prefill, a cancellation; each asserted. */
static void test_engine_every_path(void **state) {
    (void)state;
    FX_NEED(g_model);
    build_pool();
    /* pool 23 (79 prompt tokens, 8 generated: 5 blocks, then 6) and pool 16 (57, 9: 4, then
     * 5) on 8 blocks: pool 16 is admitted on the 3 blocks left and stalls mid-prefill,
     * and when pool 23 grows into its sixth block, the newest (pool 16) is preempted and
     * recomputed later.  Then pool 22 (with an ngram drafter) and pool 24, its exact
     * repeat, after it finished (a prefix-cache hit); pool 6 is cancelled mid-prefill; pool
     * 0 verifies the oracle drafter's blocks (its reference continuation with mistakes). */
    const int32_t want[][3] = {{23, 5, 6}, {16, 4, 5}}; /* pool, blocks after prefill, at the end */
    for (int i = 0; i < 2; i++) {
        const int32_t P = g_pool[want[i][0]].n_prompt, last_row = P + solo(want[i][0])->n - 2;
        assert_int_equal((P + LS_KV_BLOCK - 1) / LS_KV_BLOCK, want[i][1]);
        assert_int_equal(last_row / LS_KV_BLOCK + 1, want[i][2]);
    }
    assert_int_equal(g_pool[24].n_prompt, g_pool[22].n_prompt);
    assert_memory_equal(g_pool[24].prompt, g_pool[22].prompt, sizeof(int32_t) * (size_t)g_pool[22].n_prompt);
    assert_true(g_pool[22].n_prompt > LS_KV_BLOCK);
    mix_case c = {.n = 6,
                  .pick = {23, 16, 22, 24, 6, 0},
                  .arrive = {0, 0, 30, 40, 30, 31},
                  .chunk = {0, 0, 0, 0, 3, 0},
                  .cancel_it = {false, false, false, false, true, false},
                  .spec = {0, 0, 2, 0, 0, 1}};
    c.p = (ls_engine_params){.size = sizeof(ls_engine_params), .n_ctx = 256, .n_threads = 2, .n_seq_max = 4,
                             .step_tokens = 64, .draft_max = 4, .isa = -1};
    c.p.kv_mem = (int64_t)ls_kv_block_bytes(g_model) * 8;
    suite_totals tot = {0};
    run_case(0, &c, &tot);
    print_message("every path: %llu tokens compared bit for bit; %llu preemptions, %llu prefix-cache hits, "
                  "%llu/%llu drafts accepted, %llu cancelled\n",
                  (unsigned long long)tot.compared, (unsigned long long)tot.preempted,
                  (unsigned long long)tot.prefix_hits, (unsigned long long)tot.accepted,
                  (unsigned long long)tot.drafted, (unsigned long long)tot.cancelled);
    assert_true(tot.preempted > 0);
    assert_true(tot.prefix_hits > 0);
    assert_true(tot.accepted > 0 && tot.accepted < tot.drafted);
    assert_true(tot.cancelled > 0);
}

static void test_engine_random_parity(void **state) {
    (void)state;
    FX_NEED(g_model);
    build_pool();
    const char *one = getenv("LOCKSTEP_CASE_SEED"), *nc = getenv("LOCKSTEP_ENGINE_CASES");
    int n_cases = nc ? atoi(nc) : 200;
    suite_totals tot = {0};
    if (one) {
        mix_case c = random_case(strtoull(one, NULL, 10));
        run_case(strtoull(one, NULL, 10), &c, &tot);
        return;
    }
    for (int c = 1; c <= n_cases; c++) {
        mix_case mc = random_case((uint64_t)c);
        run_case((uint64_t)c, &mc, &tot);
    }
    print_message("engine parity: %d cases, %llu generated tokens compared bit for bit; %llu preemptions, "
                  "%llu prefix-cache hits, %llu/%llu drafts accepted, %llu cancelled\n",
                  n_cases, (unsigned long long)tot.compared, (unsigned long long)tot.preempted,
                  (unsigned long long)tot.prefix_hits, (unsigned long long)tot.accepted,
                  (unsigned long long)tot.drafted, (unsigned long long)tot.cancelled);
    if (n_cases >= 50) { /* the suite must actually exercise what it claims to */
        assert_true(tot.preempted > 0);
        assert_true(tot.prefix_hits > 0);
        assert_true(tot.accepted > 0 && tot.accepted < tot.drafted);
        assert_true(tot.cancelled > 0);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvc_alloc_release),
        cmocka_unit_test(test_kvc_prefix_cache_random),
        cmocka_unit_test(test_kvc_lru_evicts_leaves_first),
        cmocka_unit_test(test_engine_rejects_bad_requests),
        cmocka_unit_test(test_engine_solo_matches_ctx),
        cmocka_unit_test(test_engine_stops_and_cancel),
        cmocka_unit_test(test_engine_prefix_hit_after_one_step),
        cmocka_unit_test(test_engine_final_event_counts_the_last_block),
        cmocka_unit_test(test_engine_every_path),
        cmocka_unit_test(test_engine_random_parity),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
