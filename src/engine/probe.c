/* probe.c - the parity probe, through the serving engine itself (lockstep.h,
 * ls_engine_probe).
 *
 * Per draw (prompt tokens drawn uniformly from the model's vocabulary; draw 0 greedy,
 * the others sampled at temperature 0.9 with a random seed):
 *   R        the reference: a prompt P of 17..24 tokens and G = 5 generated tokens,
 *            alone in the engine, prefilled in one chunk, every position's logits;
 *   the mix  submitted together, so their rows share every step (decode rows, prefill
 *            chunks and verify blocks in one forward; paged blocks as the allocator
 *            hands them out):
 *              F  an unrelated prompt of 1..4 tokens whose rows need no parity (they
 *                 may run the engine's free family), submitted first so the others are
 *                 later sequences of each batch (short: its rows are not compared);
 *              M  P again, one chunk, every position's logits       -> batch_mix
 *              C  P again in chunks of 2..8 tokens, every position  -> chunked_prefill
 *              H  P again, served from the prefix cache R left      -> prefix_cache
 *              S  P again with a drafter proposing R's tokens, on odd draws one of
 *                 them wrong (partial acceptance): verify blocks    -> block_vs_chain
 *   T        R's prompt on a one-thread engine of the same configuration: the logits of
 *            its last prompt row (a multi-row forward: every earlier row reaches it
 *            through the K/V) and of one decode step (the one-row kernels)  -> threads
 *   X        the first 2 prompt positions on a scalar engine (the recipe's definition,
 *            slow): every draw's 2 rows in one forward after the draws, since the
 *            scalar matmul decodes each weight unit once for all rows -> isa
 * Every comparison is memcmp of whole logits rows, position by position, plus the tokens.
 * A failing non-canonical parity family is withdrawn for the rows that need parity and
 * the probe runs again (scoped); a failing canonical family fails the verdict. */
#include "util/alloc.h"
#include "util/util.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/engine_test.h"

#define P_GEN 5      /* tokens each request generates */
#define P_GEN_T 2    /* ... but T: its prefill and one decode row (both kernel shapes, at one thread) */
#define P_LMIN 17    /* prompt length: at least one full KV block, so the prefix cache has one to serve */
#define P_LSPAN 8
#define P_LMAX (P_LMIN + P_LSPAN)
#define P_SCALAR 2   /* rows checked against the scalar reference per draw (the definition is slow) */
#define P_XBATCH 8   /* draws per scalar forward */
#define P_ROWS (P_LMAX + P_GEN) /* positions a request can have logits for */

const char *ls_verdict_name(ls_verdict v) {
    switch (v) {
    case LS_VERDICT_VERIFIED: return "verified";
    case LS_VERDICT_SCOPED: return "scoped";
    case LS_VERDICT_FAILED: return "failed";
    case LS_VERDICT_UNPROBED: return "unprobed";
    }
    return "?";
}

const char *ls_axis_name(ls_axis a) {
    static const char *names[LS_AXIS_COUNT] = {"batch_mix", "chunked_prefill", "prefix_cache",
                                               "block_vs_chain", "threads", "isa"};
    return (unsigned)a < LS_AXIS_COUNT ? names[a] : "?";
}

/* ---- one request's output, collected from its events --------------------------- */
typedef struct {
    size_t V;
    int32_t rows;              /* positions lg holds (P_ROWS, or fewer for X) */
    float *lg;                 /* (rows, V): the logits of position p at row p */
    bool have[P_ROWS];
    int32_t tok[P_GEN + 1], n_tok;
    int32_t n_cached, drafted, accepted;
    bool done;
    ls_finish finish;
} coll;

static void coll_event(void *ud, const ls_event *ev) {
    coll *c = ud;
    if (ev->logits && ev->pos >= 1 && ev->pos <= c->rows) {
        memcpy(c->lg + (size_t)(ev->pos - 1) * c->V, ev->logits, c->V * sizeof(float));
        c->have[ev->pos - 1] = true;
    }
    if (!ev->prompt && ev->token >= 0 && c->n_tok < P_GEN + 1) c->tok[c->n_tok++] = ev->token;
    c->n_cached = ev->n_cached;
    c->drafted = ev->n_drafted;
    c->accepted = ev->n_accepted;
    if (ev->done) {
        c->done = true;
        c->finish = ev->finish;
    }
}

static void coll_reset(coll *c) {
    float *lg = c->lg;
    size_t V = c->V;
    int32_t rows = c->rows;
    memset(c, 0, sizeof *c);
    c->lg = lg;
    c->V = V;
    c->rows = rows;
}

/* The drafter of S: it proposes the reference's own continuation, so verification accepts
 * it; on odd draws one proposed token (at a random place) is made wrong, so the block is
 * partly accepted and the rest rejected (every probe of 2+ draws has both). */
typedef struct {
    const int32_t *ref;        /* R's generated tokens */
    int32_t n_ref, n_prompt, n_vocab;
    bool wrong;
    uint64_t rs;
} pdraft;

static int32_t probe_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    pdraft *d = ud;
    (void)hist;
    int32_t a = n_hist - d->n_prompt, k = d->n_ref - a < max ? d->n_ref - a : max;
    if (k <= 0) return 0;
    memcpy(out, d->ref + a, (size_t)k * sizeof *out);
    if (d->wrong) {
        d->wrong = false; /* one wrong token per draw */
        int32_t c = (int32_t)(ls_splitmix64(&d->rs) % (uint64_t)k);
        out[c] = (out[c] + 1) % d->n_vocab;
    }
    return k;
}

/* ---- the probe ----------------------------------------------------------------------- */
typedef struct {
    ls_engine *e, *e1, *es;    /* the live engine; one thread; scalar */
    size_t V;
    int32_t n_vocab, n_ctx;
    coll ref, mix[4], alt;     /* mix: M, C, H, S */
    coll other;                /* F */
    coll xref[P_XBATCH], xout[P_XBATCH]; /* X: R's first rows per draw, and the scalar engine's */
    int32_t xp[P_XBATCH][P_SCALAR], xn[P_XBATCH], xd[P_XBATCH], n_x; /* their prompts, lengths, draws */
    ls_probe_result *r;
    int32_t lmax;              /* longest prompt this engine's context allows */
} probe;

static void fail_axis(probe *p, ls_axis a, const char *fmt, int draw, int32_t pos) {
    if (p->r->axis[a] != LS_AXIS_FAILED && !p->r->detail[0]) {
        snprintf(p->r->detail, sizeof p->r->detail, "%s: draw %d, position %d: ", ls_axis_name(a), draw, pos);
        size_t n = strlen(p->r->detail);
        snprintf(p->r->detail + n, sizeof p->r->detail - n, "%s", fmt);
    }
    p->r->axis[a] = LS_AXIS_FAILED;
}

/* Compares b's logits with the reference at positions [p0, p1) and b's generated tokens
 * with the reference's first n_tok (-1: all of them; 0: none): b must have exactly those. */
static void compare_to(probe *p, ls_axis a, const coll *ref, const coll *b, int32_t p0, int32_t p1, int32_t n_tok,
                       int draw) {
    if (p->r->axis[a] == LS_AXIS_NOT_CHECKED) return;
    for (int32_t pos = p0; pos < p1; pos++) {
        if (!ref->have[pos] || !b->have[pos]) {
            fail_axis(p, a, "no logits were delivered", draw, pos);
            return;
        }
        p->r->n_rows++;
        if (memcmp(ref->lg + (size_t)pos * p->V, b->lg + (size_t)pos * p->V, p->V * sizeof(float))) {
            fail_axis(p, a, "logits differ", draw, pos);
            return;
        }
    }
    if (n_tok < 0 || n_tok > ref->n_tok) n_tok = ref->n_tok; /* a reference that stopped early */
    if (n_tok && (b->n_tok != n_tok || memcmp(b->tok, ref->tok, (size_t)n_tok * sizeof(int32_t))))
        fail_axis(p, a, "tokens differ", draw, p1);
}

static void compare(probe *p, ls_axis a, const coll *b, int32_t p0, int32_t p1, int32_t n_tok, int draw) {
    compare_to(p, a, &p->ref, b, p0, p1, n_tok, draw);
}

/* Submits a request collecting into c. */
static ls_status submit(ls_engine *e, const int32_t *prompt, int32_t n, int32_t max_tokens, const ls_sampler_params *sp,
                        bool prompt_logits, int32_t chunk, bool no_parity, pdraft *d, coll *c, ls_err *err) {
    coll_reset(c);
    ls_request q = LS_REQUEST_INIT;
    q.prompt = prompt;
    q.n_prompt = n;
    q.sampling = *sp;
    q.max_tokens = max_tokens;
    q.ignore_eos = true;
    q.no_parity = no_parity;
    q.prefill_chunk = chunk;
    q.want_logits = true;
    q.want_prompt_logits = prompt_logits;
    if (d) {
        q.draft = probe_draft;
        q.draft_ud = d;
    }
    q.on_event = coll_event;
    q.ud = c;
    return ls_engine_submit(e, &q, NULL, err);
}

/* Steps e until every collector in cs is done. */
static ls_status run(ls_engine *e, coll *const *cs, int n, ls_err *err) {
    for (int steps = 0;; steps++) {
        bool all = true;
        for (int i = 0; i < n; i++) all = all && cs[i]->done;
        if (all) return LS_OK;
        if (steps > 100000) return ls_err_set(err, LS_E_INVALID, "the probe's requests did not finish");
        ls_status st = ls_engine_step(e, NULL, err);
        if (st) return st;
    }
}

/* X: the queued draws' first rows on the scalar engine, all in one forward. */
static ls_status run_scalar(probe *p, ls_err *err) {
    if (!p->n_x) return LS_OK;
    const double t0 = ls_now_ms();
    ls_sampler_params g = {.temperature = 0.0f, .top_p = 1.0f};
    coll *cs[P_XBATCH];
    ls_status st = LS_OK;
    for (int i = 0; i < p->n_x && !st; i++) {
        cs[i] = &p->xout[i];
        st = submit(p->es, p->xp[i], p->xn[i], 1, &g, true, 0, false, NULL, cs[i], err);
    }
    if (!st) st = run(p->es, cs, p->n_x, err);
    for (int i = 0; i < p->n_x && !st; i++) compare_to(p, LS_AXIS_ISA, &p->xref[i], &p->xout[i], 0, p->xn[i], 0, p->xd[i]);
    p->n_x = 0;
    p->r->ms_isa += ls_now_ms() - t0;
    return st;
}

/* Submits a request collecting into c. */
/* One pass over all draws with the engine's current families. */
static ls_status probe_pass(probe *p, int draws, uint64_t seed, ls_err *err) {
    ls_probe_result *r = p->r;
    const ls_engine_params *ep = ls_engine_params_of(p->e);
    for (int a = 0; a < LS_AXIS_COUNT; a++)
        if (r->axis[a] != LS_AXIS_NOT_CHECKED) r->axis[a] = LS_AXIS_PASSED;
    r->detail[0] = '\0';
    r->n_rows = r->drafted = r->accepted = 0;
    uint64_t rs = seed;
    ls_status st = LS_OK;
    p->n_x = 0;
    for (int d = 0; d < draws && !st; d++) {
        int32_t P[P_LMAX], Q[P_LMAX];
        int32_t lp = P_LMIN + (int32_t)(ls_splitmix64(&rs) % P_LSPAN);
        if (lp > p->lmax) lp = p->lmax;
        for (int32_t i = 0; i < lp; i++) P[i] = (int32_t)(ls_splitmix64(&rs) % (uint64_t)p->n_vocab);
        int32_t lf = 1 + (int32_t)(ls_splitmix64(&rs) % 4);
        for (int32_t i = 0; i < lf; i++) Q[i] = (int32_t)(ls_splitmix64(&rs) % (uint64_t)p->n_vocab);
        ls_sampler_params sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
        if (d > 0) sp = (ls_sampler_params){.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = ls_splitmix64(&rs)};
        const int32_t nlog = lp + P_GEN - 1; /* positions with logits: 0 .. lp + G - 2 */

        /* R: alone, one chunk */
        coll *cr = &p->ref;
        double t0 = ls_now_ms();
        if ((st = submit(p->e, P, lp, P_GEN, &sp, true, 0, false, NULL, cr, err)) || (st = run(p->e, &cr, 1, err))) break;
        r->ms_ref += ls_now_ms() - t0;
        t0 = ls_now_ms();
        /* the mix */
        pdraft dr = {.ref = p->ref.tok, .n_ref = p->ref.n_tok, .n_prompt = lp, .n_vocab = p->n_vocab,
                     .wrong = d & 1, .rs = ls_splitmix64(&rs)};
        int32_t chunk = 2 + (int32_t)(ls_splitmix64(&rs) % 7);
        coll *cs[5] = {&p->other, &p->mix[0], &p->mix[1], &p->mix[2], &p->mix[3]};
        if ((st = submit(p->e, Q, lf, P_GEN, &sp, false, 0, true, NULL, &p->other, err)) ||
            (st = submit(p->e, P, lp, P_GEN, &sp, true, 0, false, NULL, &p->mix[0], err)) ||
            (st = submit(p->e, P, lp, P_GEN, &sp, true, chunk, false, NULL, &p->mix[1], err)) ||
            (st = submit(p->e, P, lp, P_GEN, &sp, false, 0, false, NULL, &p->mix[2], err)) ||
            (st = submit(p->e, P, lp, P_GEN, &sp, false, 0, false, ep->draft_max > 0 ? &dr : NULL, &p->mix[3], err)) ||
            (st = run(p->e, cs, 5, err)))
            break;
        compare(p, LS_AXIS_BATCH_MIX, &p->mix[0], 0, nlog, -1, d);
        compare(p, LS_AXIS_CHUNKED_PREFILL, &p->mix[1], 0, nlog, -1, d);
        if (r->axis[LS_AXIS_PREFIX_CACHE] != LS_AXIS_NOT_CHECKED && p->mix[2].n_cached == 0) {
            r->axis[LS_AXIS_PREFIX_CACHE] = LS_AXIS_NOT_CHECKED;
            snprintf(r->why_not[LS_AXIS_PREFIX_CACHE], sizeof r->why_not[0], "no prefix-cache hit (cache too small?)");
        }
        compare(p, LS_AXIS_PREFIX_CACHE, &p->mix[2], lp - 1, nlog, -1, d);
        compare(p, LS_AXIS_BLOCK_VS_CHAIN, &p->mix[3], lp - 1, nlog, -1, d);
        r->drafted += p->mix[3].drafted;
        r->accepted += p->mix[3].accepted;
        r->ms_mix += ls_now_ms() - t0;
        /* T: one thread */
        if (p->e1) {
            t0 = ls_now_ms();
            coll *ca = &p->alt;
            if ((st = submit(p->e1, P, lp, P_GEN_T, &sp, false, 0, false, NULL, ca, err)) || (st = run(p->e1, &ca, 1, err)))
                break;
            compare(p, LS_AXIS_THREADS, ca, lp - 1, lp + P_GEN_T - 1, P_GEN_T, d);
            r->ms_threads += ls_now_ms() - t0;
        }
        /* X: queued (R's first rows kept), run for P_XBATCH draws at once */
        if (p->es) {
            int i = p->n_x++;
            int32_t ns = lp < P_SCALAR ? lp : P_SCALAR;
            memcpy(p->xp[i], P, (size_t)ns * sizeof *P);
            p->xn[i] = ns;
            p->xd[i] = d;
            coll *x = &p->xref[i];
            coll_reset(x);
            memcpy(x->lg, p->ref.lg, (size_t)ns * p->V * sizeof(float));
            memcpy(x->have, p->ref.have, (size_t)ns * sizeof *x->have);
            if (p->n_x == P_XBATCH || d == draws - 1) st = run_scalar(p, err);
        }
    }
    if (!st && r->axis[LS_AXIS_BLOCK_VS_CHAIN] == LS_AXIS_PASSED && (r->drafted == 0 || r->accepted == 0)) {
        r->axis[LS_AXIS_BLOCK_VS_CHAIN] = LS_AXIS_NOT_CHECKED; /* nothing was verified in a block */
        snprintf(r->why_not[LS_AXIS_BLOCK_VS_CHAIN], sizeof r->why_not[0], "no draft was accepted");
    }
    return st;
}

static bool all_pass(const ls_probe_result *r) {
    for (int a = 0; a < LS_AXIS_COUNT; a++)
        if (r->axis[a] == LS_AXIS_FAILED) return false;
    return true;
}

/* A reference engine of the live one's configuration, one thread or the scalar ISA. */
static ls_engine *ref_engine(ls_engine *e, bool one_thread, int32_t n_seq, ls_err *err) {
    const ls_engine_params *ep = ls_engine_params_of(e);
    ls_backend_info bi;
    ls_engine_backend_info(e, &bi);
    ls_engine_params q = LS_ENGINE_PARAMS_INIT; /* the default device: the CPU's kernels are the reference */
    q.n_ctx = P_ROWS + 1 < ep->n_ctx ? P_ROWS + 1 : ep->n_ctx;
    q.n_seq_max = n_seq;
    q.step_tokens = 64;
    q.kv_mem = (int64_t)ls_kv_block_bytes(ls_engine_model(e)) * ((q.n_ctx + LS_KV_BLOCK - 1) / LS_KV_BLOCK + 1) * n_seq;
    q.no_prefix_cache = true;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    q.n_threads = one_thread       ? 1
                  : bi.n_threads   ? bi.n_threads
                  : online > 0     ? (int32_t)(online < 16 ? online : 16)
                                   : 1;
    q.isa = one_thread ? (ls_isa)bi.isa : LS_ISA_SCALAR;
    /* threads: the live families (the test knobs, and a withdrawal); the ISA's reference:
     * the canonical definition (the faults only) */
    ls_engine_test t = *ls_engine_test_of(e);
    if (!one_thread) t.fam = t.fam_parity = NULL;
    else q.kernels = ep->kernels;
    ls_engine *r = ls_engine_create_test(ls_engine_model(e), &q, &t, err);
    if (r && one_thread && ls_engine_withdrawn(e)) ls_engine_withdraw(r);
    return r;
}

static ls_status probe_run(ls_engine *e, int draws, uint64_t seed, ls_probe_result *r, ls_err *err) {
    const ls_engine_params *ep = ls_engine_params_of(e);
    ls_backend_info bi;
    ls_engine_backend_info(e, &bi);
    probe p = {.e = e, .r = r, .n_vocab = (int32_t)ls_model_hparams(ls_engine_model(e))->n_vocab, .n_ctx = ep->n_ctx};
    p.V = (size_t)p.n_vocab;
    p.lmax = ep->n_ctx - P_GEN - 1;
    if (p.lmax > P_LMAX) p.lmax = P_LMAX;
    if (p.lmax < 2)
        return ls_err_set(err, LS_E_INVALID, "the probe needs a context of at least %d positions (have %d)", P_GEN + 3,
                          ep->n_ctx);
    if (!ls_engine_idle(e)) return ls_err_set(err, LS_E_INVALID, "the probe needs an idle engine");
#define NOT(a, why)                                                            \
    do {                                                                       \
        r->axis[a] = LS_AXIS_NOT_CHECKED;                                      \
        snprintf(r->why_not[a], sizeof r->why_not[a], "%s", why);              \
    } while (0)
    if (ep->n_seq_max < 2) NOT(LS_AXIS_BATCH_MIX, "one sequence per step (-np 1)");
    if (ep->no_prefix_cache) NOT(LS_AXIS_PREFIX_CACHE, "the prefix cache is off");
    else if (p.lmax < LS_KV_BLOCK + 1) NOT(LS_AXIS_PREFIX_CACHE, "the context is shorter than a cached block");
    if (ep->draft_max < 1) NOT(LS_AXIS_BLOCK_VS_CHAIN, "speculation is off (no verify blocks serve)");
    if (!bi.n_threads) NOT(LS_AXIS_THREADS, "the device has no thread count");
    else if (bi.n_threads == 1) NOT(LS_AXIS_THREADS, "one thread is live");
    if (bi.isa == LS_ISA_SCALAR) NOT(LS_AXIS_ISA, "the scalar reference is live");
#undef NOT
    ls_status st = LS_OK;
    coll *all[7 + 2 * P_XBATCH] = {&p.ref, &p.mix[0], &p.mix[1], &p.mix[2], &p.mix[3], &p.alt, &p.other};
    const int n_xb = draws < P_XBATCH ? draws : P_XBATCH;
    size_t n_all = 7;
    for (int i = 0; i < n_xb; i++) all[n_all++] = &p.xref[i], all[n_all++] = &p.xout[i];
    for (size_t i = 0; i < n_all; i++) {
        all[i]->V = p.V;
        all[i]->rows = i < 7 ? P_ROWS : P_SCALAR + 1; /* X: its rows, and the one token's */
        if (!(all[i]->lg = ls_malloc((size_t)all[i]->rows * p.V * sizeof(float)))) st = LS_E_NOMEM;
    }
    if (st) {
        ls_err_set(err, LS_E_NOMEM, "out of memory for the probe's logits");
        goto done;
    }
    const double t_setup = ls_now_ms();
    if (r->axis[LS_AXIS_THREADS] != LS_AXIS_NOT_CHECKED && !(p.e1 = ref_engine(e, true, 1, err))) {
        st = err ? err->code : LS_E_NOMEM;
        goto done;
    }
    if (r->axis[LS_AXIS_ISA] != LS_AXIS_NOT_CHECKED && !(p.es = ref_engine(e, false, n_xb, err))) {
        st = err ? err->code : LS_E_NOMEM;
        goto done;
    }
    r->ms_setup = ls_now_ms() - t_setup;
    snprintf(r->kernels_before, sizeof r->kernels_before, "%s", bi.kernels);
    r->draws = draws;
    if ((st = probe_pass(&p, draws, seed, err))) goto done;
    if (all_pass(r)) {
        r->verdict = LS_VERDICT_VERIFIED;
    } else if (!bi.parity_canonical && ls_engine_withdraw(e)) { /* withdrawn for the rows that need parity */
        if (p.e1) ls_engine_withdraw(p.e1);
        char first[256];
        snprintf(first, sizeof first, "%s", r->detail);
        if ((st = probe_pass(&p, draws, seed + 1, err))) goto done;
        r->verdict = all_pass(r) ? LS_VERDICT_SCOPED : LS_VERDICT_FAILED;
        if (r->verdict == LS_VERDICT_SCOPED) snprintf(r->detail, sizeof r->detail, "%.200s (before scoping)", first);
    } else {
        r->verdict = LS_VERDICT_FAILED;
    }
    ls_engine_backend_info(e, &bi);
    snprintf(r->kernels_after, sizeof r->kernels_after, "%s", bi.kernels);
done:
    for (size_t i = 0; i < n_all; i++) free(all[i]->lg);
    ls_engine_free(p.e1);
    ls_engine_free(p.es);
    return st;
}

/* ---- memoization ----------------------------------------------------------------- */
/* What defines the configuration the verdict is about. */
static bool memo_desc(ls_engine *e, const ls_probe_params *pp, int draws, uint64_t seed, char *desc, size_t cap) {
    ls_model_info mi = LS_MODEL_INFO_INIT;
    char esha[65];
    if (ls_model_get_info(ls_engine_model(e), &mi, NULL) || !mi.sha256[0] || !ls_sha256_file("/proc/self/exe", esha))
        return false;
    const ls_engine_params *ep = ls_engine_params_of(e);
    ls_engine_info ei = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(e, &ei);
    int n = snprintf(desc, cap,
                     "v3 model=%s exe=%s device=%s isa=%s threads=%d fam=%s fam_parity=%s np=%d step=%d ctx=%d K=%d "
                     "cache=%d faults=%u draws=%d seed=%llu %s",
                     mi.sha256, esha, ei.device, ls_isa_name(ei.isa), ei.n_threads, ei.kernels_free, ei.kernels,
                     ep->n_seq_max, ep->step_tokens, ep->n_ctx, ep->draft_max, !ep->no_prefix_cache, ls_engine_test_of(e)->faults, draws,
                     (unsigned long long)seed, pp->config ? pp->config : "");
    return n > 0 && (size_t)n < cap;
}

static bool memo_read(const char *path, const char *desc, ls_engine *e, ls_probe_result *r) {
    FILE *fh = fopen(path, "rb");
    if (!fh) return false;
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fh);
    fclose(fh);
    text[n] = 0;
    cJSON *j = cJSON_Parse(text);
    bool ok = false;
    const cJSON *d = cJSON_GetObjectItem(j, "desc"), *v = cJSON_GetObjectItem(j, "verdict");
    const cJSON *ka = cJSON_GetObjectItem(j, "kernels_after"), *ax = cJSON_GetObjectItem(j, "axes");
    ls_backend_info bi;
    ls_engine_backend_info(e, &bi);
    const char *now = bi.kernels;
    if (cJSON_IsString(d) && !strcmp(d->valuestring, desc) && cJSON_IsNumber(v) && v->valueint >= 0 &&
        v->valueint <= LS_VERDICT_FAILED && cJSON_IsString(ka) && cJSON_IsArray(ax) &&
        cJSON_GetArraySize(ax) == LS_AXIS_COUNT &&
        (!strcmp(ka->valuestring, now) || (bi.kernels_withdrawn[0] && !strcmp(ka->valuestring, bi.kernels_withdrawn)))) {
        r->verdict = (ls_verdict)v->valueint;
        for (int a = 0; a < LS_AXIS_COUNT; a++) {
            const cJSON *x = cJSON_GetArrayItem(ax, a);
            const cJSON *s = cJSON_GetObjectItem(x, "state"), *w = cJSON_GetObjectItem(x, "why_not");
            r->axis[a] = cJSON_IsNumber(s) ? (ls_axis_state)s->valueint : LS_AXIS_FAILED;
            if (cJSON_IsString(w)) snprintf(r->why_not[a], sizeof r->why_not[a], "%s", w->valuestring);
        }
        const cJSON *det = cJSON_GetObjectItem(j, "detail"), *kb = cJSON_GetObjectItem(j, "kernels_before");
        if (cJSON_IsString(det)) snprintf(r->detail, sizeof r->detail, "%s", det->valuestring);
        if (cJSON_IsString(kb)) snprintf(r->kernels_before, sizeof r->kernels_before, "%s", kb->valuestring);
        snprintf(r->kernels_after, sizeof r->kernels_after, "%s", ka->valuestring);
#define NUM(field)                                                         \
    do {                                                                   \
        const cJSON *x = cJSON_GetObjectItem(j, #field);                   \
        r->field = cJSON_IsNumber(x) ? x->valueint : 0;                    \
    } while (0)
        NUM(draws);
        NUM(n_rows);
        NUM(drafted);
        NUM(accepted);
#undef NUM
        if (strcmp(ka->valuestring, now)) ls_engine_withdraw(e);
        ok = true;
    }
    cJSON_Delete(j);
    return ok;
}

static void memo_write(const char *dir, const char *path, const char *desc, const ls_probe_result *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "desc", desc);
    cJSON_AddNumberToObject(j, "verdict", r->verdict);
    cJSON *ax = cJSON_AddArrayToObject(j, "axes");
    for (int a = 0; a < LS_AXIS_COUNT; a++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", ls_axis_name((ls_axis)a));
        cJSON_AddNumberToObject(x, "state", r->axis[a]);
        cJSON_AddStringToObject(x, "why_not", r->why_not[a]);
        cJSON_AddItemToArray(ax, x);
    }
    cJSON_AddStringToObject(j, "kernels_before", r->kernels_before);
    cJSON_AddStringToObject(j, "kernels_after", r->kernels_after);
    cJSON_AddNumberToObject(j, "draws", r->draws);
    cJSON_AddNumberToObject(j, "n_rows", r->n_rows);
    cJSON_AddNumberToObject(j, "drafted", r->drafted);
    cJSON_AddNumberToObject(j, "accepted", r->accepted);
    cJSON_AddStringToObject(j, "detail", r->detail);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    ls_mkdirs(dir);
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *fh = text ? fopen(tmp, "wb") : NULL;
    if (fh) { /* write-then-rename: a reader never sees half a file */
        bool ok = fputs(text, fh) >= 0;
        ok = fclose(fh) == 0 && ok;
        if (!ok || rename(tmp, path) != 0) remove(tmp);
    }
    free(text); /* a memo that cannot be written is only a slower next start */
}

/* The result is filled whole here, then copied into the caller's struct up to its size:
 * a caller built against an older, shorter ls_probe_result (no phase times) gets the
 * fields it knows. */
static ls_status probe_full(ls_engine *e, const ls_probe_params *ppa, ls_probe_result *out, ls_err *err) {
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    ls_status st = ls_params_take(&pp, sizeof pp, ppa, "probe params", err);
    if (st) return st;
    const double t0 = ls_now_ms();
    const int draws = pp.draws < 3 ? 3 : pp.draws;
    const uint64_t seed = pp.seed ? pp.seed : 0x5EEDull;
    char desc[1024], path[4200] = "", key[65];
    if (pp.memo_dir && memo_desc(e, &pp, draws, seed, desc, sizeof desc)) {
        ls_sha256_str(desc, key);
        snprintf(path, sizeof path, "%s/probe-%.32s.json", pp.memo_dir, key);
        if (!pp.refresh && memo_read(path, desc, e, out)) {
            out->memoized = true;
            ls_engine_set_verdict(e, out->verdict);
            out->ms = ls_now_ms() - t0; /* the model and binary hashes, mostly */
            return LS_OK;
        }
    }
    ls_engine_disk_pause(e, true); /* the probe's random prompts stay out of --cache-dir */
    st = probe_run(e, draws, seed, out, err);
    ls_engine_disk_pause(e, false);
    ls_engine_reset_stats(e); /* the probe's requests leave no trace in the statistics */
    out->ms = ls_now_ms() - t0;
    if (st) return st;
    ls_engine_set_verdict(e, out->verdict);
    if (path[0]) memo_write(pp.memo_dir, path, desc, out);
    return LS_OK;
}

ls_status ls_engine_probe(ls_engine *e, const ls_probe_params *ppa, ls_probe_result *out, ls_err *err) {
    if (!out || out->size < offsetof(ls_probe_result, ms_setup))
        return ls_err_set(err, LS_E_INVALID, "result.size is %zu: initialize it with LS_PROBE_RESULT_INIT",
                          out ? out->size : 0);
    size_t n = out->size < sizeof *out ? out->size : sizeof *out;
    ls_probe_result r = LS_PROBE_RESULT_INIT;
    ls_status st = probe_full(e, ppa, &r, err);
    r.size = n;
    memcpy(out, &r, n);
    return st;
}
