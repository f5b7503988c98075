/* spec.c - the ngram, draft-model and layer-skip drafters, and the adaptive draft
 * length they share (see spec.h). */
#include "speculative/spec.h"
#include "util/alloc.h"
#include "util/util.h"

#include "engine/engine.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double spec_gain(double p, int32_t k, double draft_cost, double row_cost);

ls_status ls_spec_kind_from_name(const char *name, ls_spec_kind *out, ls_err *err) {
    static const char *names[] = {"off", "ngram", "draft", "layerskip", "mtp"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, names[i])) {
            *out = (ls_spec_kind)i;
            return LS_OK;
        }
    return ls_err_set(err, LS_E_INVALID, "unknown drafter '%s' (available: ngram, draft, layerskip, mtp, off)", name);
}

const char *ls_spec_kind_name(ls_spec_kind k) {
    return k == LS_SPEC_NGRAM       ? "ngram"
           : k == LS_SPEC_DRAFT     ? "draft"
           : k == LS_SPEC_LAYERSKIP ? "layerskip"
           : k == LS_SPEC_MTP       ? "mtp"
                                    : "off";
}

ls_status ls_spec_check(const ls_engine *e, const ls_spec_params *pp, ls_err *err) {
    ls_spec_params p = LS_SPEC_PARAMS_INIT;
    ls_status st = ls_params_take(&p, sizeof p, pp, "spec params", err);
    if (st) return st;
    return ls_spec_check_model(ls_engine_model(e), ls_engine_params_of(e)->n_ctx, &p, err);
}

ls_status ls_spec_check_model(const ls_model *target, int32_t n_ctx, const ls_spec_params *p, ls_err *err) {
    const ls_hparams *hp = ls_model_hparams(target);
    if (p->draft_max < 1 || p->draft_max > 64)
        return ls_err_set(err, LS_E_INVALID, "--draft-max %d is out of range (1..64)", p->draft_max);
    if (!(p->p_min >= 0.0f && p->p_min <= 1.0f))
        return ls_err_set(err, LS_E_INVALID, "--draft-p-min %g is out of range (0..1)", (double)p->p_min);
    if (p->draft_min < 0 || p->draft_min > p->draft_max)
        return ls_err_set(err, LS_E_INVALID, "--draft-min %d must be between 0 and --draft-max (%d)", p->draft_min,
                          p->draft_max);
    if (p->kind == LS_SPEC_NGRAM && (p->ngram_min < 1 || p->ngram_max < p->ngram_min || p->ngram_max > 16))
        return ls_err_set(err, LS_E_INVALID, "n-gram sizes %d..%d are out of range (1 <= min <= max <= 16)",
                          p->ngram_min, p->ngram_max);
    if (p->lookup_min != 0) {
        if (p->kind == LS_SPEC_OFF || p->kind == LS_SPEC_NGRAM)
            return ls_err_set(err, LS_E_INVALID, "--draft-lookup applies to --spec mtp, draft and layerskip (--spec "
                                                 "ngram always looks up)");
        if (p->lookup_min < 1 || p->ngram_max < p->lookup_min || p->ngram_max > 16)
            return ls_err_set(err, LS_E_INVALID, "--draft-lookup %d is out of range (1..--ngram-max, which is %d; "
                                                 "at most 16)", p->lookup_min, p->ngram_max);
    }
    if (p->kind == LS_SPEC_DRAFT) {
        if (!p->draft_model) return ls_err_set(err, LS_E_INVALID, "--spec draft needs --draft-model PATH");
        const ls_tokenizer *a = ls_model_tokenizer(target), *b = ls_model_tokenizer(p->draft_model);
        uint32_t na = ls_tokenizer_n_vocab(a), nb = ls_tokenizer_n_vocab(b);
        if (na != nb || ls_model_hparams(p->draft_model)->n_vocab != hp->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "the draft model's vocabulary (%u tokens) differs from the target's "
                                                 "(%u tokens)", nb, na);
        char x[256], y[256];
        for (uint32_t i = 0; i < na; i++) {
            size_t lx = ls_token_bytes(a, (int32_t)i, true, x, sizeof x), ly = ls_token_bytes(b, (int32_t)i, true, y, sizeof y);
            if (lx != ly || memcmp(x, y, lx < sizeof x ? lx : sizeof x) != 0)
                return ls_err_set(err, LS_E_INVALID, "the draft model's vocabulary differs from the target's at "
                                                     "token %u", i);
        }
        if (ls_model_hparams(p->draft_model)->n_ctx_train < (uint32_t)n_ctx)
            return ls_err_set(err, LS_E_INVALID, "the draft model's context (%u) is shorter than the target's (%d)",
                              ls_model_hparams(p->draft_model)->n_ctx_train, n_ctx);
    }
    if (p->kind == LS_SPEC_MTP && !ls_model_has_mtp(target))
        return ls_err_set(err, LS_E_UNSUPPORTED, "--spec mtp needs an MTP module: this model has none of its "
                                                 "own; give one fitted to it with --draft-model FILE "
                                                 "(tools/fit_mtp.py)");
    if (p->kind == LS_SPEC_LAYERSKIP) {
        if (p->layers) {
            if (p->n_layers < 1 || (uint32_t)p->n_layers > hp->n_layer)
                return ls_err_set(err, LS_E_INVALID, "the layer list has %d layers (the model has %u)", p->n_layers,
                                  hp->n_layer);
            for (int32_t i = 0; i < p->n_layers; i++)
                if (p->layers[i] < 0 || (uint32_t)p->layers[i] >= hp->n_layer)
                    return ls_err_set(err, LS_E_INVALID, "layer %d does not exist (the model has %u: 0..%u)",
                                      p->layers[i], hp->n_layer, hp->n_layer - 1);
        } else if (p->skip_first < 0 || (uint32_t)p->skip_first > hp->n_layer) {
            return ls_err_set(err, LS_E_INVALID, "--draft-layers %d is out of range (1..%u)", p->skip_first,
                              hp->n_layer);
        }
    }
    return LS_OK;
}

/* ---- ngram index: for n-gram size n, the latest end position e (exclusive, so the
 * n-gram is hist[e-n..e) and hist[e] follows it) of each n-gram seen. */
typedef struct {
    uint64_t *keys; /* 0 = empty */
    int32_t *ends;
    uint32_t cap, used;
} ng_index;

static uint64_t ng_hash(const int32_t *t, int32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)t[i] + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
    }
    return h | 1; /* never 0 */
}

static bool ng_put(ng_index *x, uint64_t k, int32_t e) {
    if (2 * (x->used + 1) > x->cap) {
        uint32_t nc = x->cap ? x->cap * 2 : 1024;
        uint64_t *nk = ls_calloc(nc, sizeof *nk);
        int32_t *ne = ls_malloc(nc * sizeof *ne);
        if (!nk || !ne) {
            free(nk);
            free(ne);
            return false;
        }
        for (uint32_t i = 0; i < x->cap; i++)
            if (x->keys[i]) {
                uint32_t j = (uint32_t)x->keys[i] & (nc - 1);
                while (nk[j]) j = (j + 1) & (nc - 1);
                nk[j] = x->keys[i];
                ne[j] = x->ends[i];
            }
        free(x->keys);
        free(x->ends);
        x->keys = nk;
        x->ends = ne;
        x->cap = nc;
    }
    uint32_t j = (uint32_t)k & (x->cap - 1);
    while (x->keys[j] && x->keys[j] != k) j = (j + 1) & (x->cap - 1);
    if (!x->keys[j]) x->used++;
    x->keys[j] = k;
    x->ends[j] = e;
    return true;
}

static int32_t ng_get(const ng_index *x, uint64_t k) {
    if (!x->cap) return -1;
    uint32_t j = (uint32_t)k & (x->cap - 1);
    while (x->keys[j]) {
        if (x->keys[j] == k) return x->ends[j];
        j = (j + 1) & (x->cap - 1);
    }
    return -1;
}

/* The draft-length rule's costs as this machine shows them: a step's wall time between two
 * calls for the sequence against the draft rows it verified, fitted as a + b k by
 * decayed least squares, and a draft call's time per drafted token.  On a CPU a verify
 * row costs 0.15-0.4 of a step; on a GPU a small model's step is launch-bound, so rows
 * and drafts cost a few percent of it, which the fixed prior cannot know. */
typedef struct {
    double w, sk, skk, sy, sky; /* decayed sums over steps: weight, k, k^2, gap, k gap */
    double tw, ty;              /* decayed sums over draft calls: weight, ms per drafted token */
    double t_end;               /* when the last call returned (< 0: none yet) */
    int32_t k_last;             /* the rows it proposed */
    int32_t n_steps, n_calls;
} cost_meter;

#define LS_COST_DECAY 0.95
#define LS_COST_MIN_STEPS 4

struct ls_drafter {
    ls_spec_params p;
    ls_sampler_params sp;
    /* ngram */
    ng_index idx[17];
    int32_t indexed; /* ends < indexed are in the indexes */
    /* draft / layerskip */
    ls_ctx *ctx;
    int32_t *done;   /* tokens whose K/V the draft context holds, in order */
    int32_t n_done;
    float *logits;
    void *sscratch;
    int32_t n_vocab;
    /* adaptation: a cost model of one decode step */
    int32_t *prop;           /* the last proposal */
    int32_t n_prop, prop_at; /* its length and the history length it followed */
    double acc_s, acc_t;     /* decayed counts of accepted draft tokens and of trials */
    double draft_cost;       /* one draft token's cost, in target single-row forwards (the prior) */
    cost_meter cm;           /* what drafts and verify rows cost here, measured */
    double (*clock)(void *); /* ls_now_ms, or a test's */
    void *clock_ud;
    int32_t idle, explore;   /* calls since the last draft; draft anyway after `explore` */
    bool again;              /* an exploring draft is followed by one more (cost_meter) */
    double draft_ms;         /* time spent proposing */
    double fwd_ms;           /* of it, in the drafter's forwards */
    int32_t n_props, pos_drafted[16], pos_accepted[16]; /* ls_drafter_stats */
    bool prop_lookup;        /* the last proposal came from lookup (lookup_min) */
    double lk_s, lk_t;       /* acc_s, acc_t of the lookup proposals */
    bool own_last;           /* the last call drafted with the drafter itself (not lookup) */
    int32_t lk_props, lk_drafted, lk_accepted;
    int32_t lk_idle;         /* matches declined since lookup last proposed */
    bool hopeless;           /* even at 90 % acceptance no draft length would pay: never draft */
    /* mtp: the module's forward and one-layer KV store, on the engine's backend */
    const ls_backend *mbe;
    void *mf, *mkv;
    int32_t *mtable;
    float *H;                /* (n_ctx, n_embd): the target's hidden state per observed position */
    float *hbuf, *hchain;    /* (LS_MTP_ROWS, n_embd) the module's outputs; one chained input */
    int32_t n_obs, n_mtp;    /* positions observed; positions whose MTP K/V is computed */
    int32_t n_ctx, n_embd;
    const int32_t *hv;       /* the module head's tokens (ls_model_mtp_vocab), n_hv of them; 0: all */
    int32_t n_hv;            /* the forward writes their n_hv logits, in that order */
    int32_t mtok[64], mpos[64], mseq[64], mlrow[64];
};

#define LS_MTP_ROWS 64

/* Extra cost of each additional row of a verify block, relative to a single-row
 * decode step, as the draft-length rule assumes it.  `lockstep bench spec` measures the
 * real one (its verify-cost table: 0.18-0.38 per row on a 2-vCPU AVX-512 host, varying
 * with the host's memory load).  0.15 is kept below that on purpose: a replay of the
 * grounded prompts' tokens at real costs of 0.3-0.45 gives within 0.08x of using the
 * true cost in the rule, and at a real 0.15 the higher constants lose 0.16-0.22x
 * (bench/results/HISTORY.md, "what a verify row costs"). */
#define LS_SPEC_ROW_COST 0.15

void ls_drafter_free(ls_drafter *d) {
    if (!d) return;
    for (int i = 0; i < 17; i++) {
        free(d->idx[i].keys);
        free(d->idx[i].ends);
    }
    ls_ctx_free(d->ctx);
    if (d->mbe) {
        d->mbe->fwd_free(d->mf);
        d->mbe->kv_free(d->mkv);
    }
    free(d->mtable);
    free(d->H);
    free(d->hbuf);
    free(d->hchain);
    free(d->done);
    free(d->logits);
    free(d->sscratch);
    free(d->prop);
    free(d);
}

ls_drafter *ls_drafter_create(ls_engine *e, const ls_spec_params *pp, const ls_sampler_params *sp, ls_err *err) {
    ls_spec_params p = LS_SPEC_PARAMS_INIT;
    if (ls_params_take(&p, sizeof p, pp, "spec params", err)) return NULL;
    ls_backend_info bi; /* a host pool to share, or none: the drafter gets a CPU thread of its own */
    ls_engine_backend_info(e, &bi);
    return ls_drafter_create_on(ls_engine_backend(e), ls_engine_model(e), ls_engine_params_of(e)->n_ctx, bi.pool,
                                (ls_isa)bi.isa, &p, sp, err);
}

void ls_drafter_attach(ls_drafter *d, ls_request *r) {
    r->draft = ls_drafter_draft;
    r->draft_ud = d;
    r->draft_observe = ls_drafter_wants_hidden(d) ? ls_drafter_observe : NULL;
}

ls_drafter *ls_drafter_create_for(const ls_model *target, int32_t n_ctx, ls_pool *pool, ls_isa isa,
                                  const ls_spec_params *p, const ls_sampler_params *sp, ls_err *err) {
    return ls_drafter_create_on(NULL, target, n_ctx, pool, isa, p, sp, err);
}

ls_drafter *ls_drafter_create_on(const ls_backend *be, const ls_model *target, int32_t n_ctx, ls_pool *pool,
                                 ls_isa isa, const ls_spec_params *p, const ls_sampler_params *sp, ls_err *err) {
    if (ls_spec_check_model(target, n_ctx, p, err)) return NULL;
    ls_drafter *d = ls_calloc(1, sizeof *d);
    if (!d) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    d->p = *p;

    d->p.layers = NULL; /* copied into the context below */
    d->sp = *sp;
    /* Drafts are proposals: the engine verifies them under the request's full sampler
     * (bias and penalties included), so the drafter samples without the modifiers and
     * keeps no pointer into the caller's request. */
    d->sp.logit_bias = NULL;
    d->sp.n_logit_bias = 0;
    d->sp.repeat_penalty = d->sp.frequency_penalty = d->sp.presence_penalty = 0.0f;
    d->acc_s = 2.0; /* prior: 2 of 3 drafted tokens accepted */
    d->acc_t = 3.0;
    d->lk_s = 2.0; /* lookup's: the same prior */
    d->lk_t = 3.0;
    d->explore = 8;
    d->cm.t_end = -1.0;
    d->prop = ls_malloc((size_t)p->draft_max * sizeof *d->prop);
    if (!d->prop) goto nomem;
    if (p->kind == LS_SPEC_MTP) {
        const ls_hparams *hp = ls_model_hparams(target);
        d->n_ctx = n_ctx;
        d->n_embd = (int32_t)hp->n_embd;
        d->n_vocab = (int32_t)hp->n_vocab;
        /* The module runs where the target does: its recipe is the backend's, so a draft is
         * the same wherever it was computed (and verification decides anyway). */
        if (!(d->mbe = be ? be : ls_backend_find(NULL, err))) goto fail;
        ls_backend_params bp = {.n_rows = LS_MTP_ROWS, .n_ctx = n_ctx, .n_threads = 1, .isa = (int32_t)isa,
                                .pool = pool, .mtp = true};
        if (!(d->mf = d->mbe->fwd_create(target, &bp, err))) goto fail;
        int32_t nb = (n_ctx + LS_KV_BLOCK - 1) / LS_KV_BLOCK;
        if (!(d->mkv = d->mbe->kv_create(target, nb, 1, err))) goto fail;
        d->mtable = ls_malloc((size_t)nb * sizeof *d->mtable);
        d->H = ls_malloc((size_t)n_ctx * hp->n_embd * sizeof(float));
        d->hbuf = ls_malloc((size_t)LS_MTP_ROWS * hp->n_embd * sizeof(float));
        d->hchain = ls_malloc((size_t)hp->n_embd * sizeof(float));
        d->logits = ls_malloc((size_t)d->n_vocab * sizeof *d->logits);
        d->sscratch = ls_malloc(ls_sampler_scratch_bytes(d->n_vocab));
        if (!d->mtable || !d->H || !d->hbuf || !d->hchain || !d->logits || !d->sscratch) goto nomem;
        for (int32_t i = 0; i < nb; i++) d->mtable[i] = i;
        d->n_hv = ls_model_mtp_vocab(target, &d->hv);
        /* one block, eh_proj and the head, as a fraction of a step's weight bytes (SmolLM2-135M
         * Q4_1 with its Q8_0 module: 0.36 with the whole vocabulary's head, 0.10 with 8,192 tokens') */
        d->draft_cost = ls_model_mtp_cost(target);
    }
    if (p->kind == LS_SPEC_DRAFT || p->kind == LS_SPEC_LAYERSKIP) {
        const ls_model *m = p->kind == LS_SPEC_DRAFT ? p->draft_model : target;
        int32_t first[1024];
        ls_ctx_params cp = {.n_ctx = n_ctx, .n_batch = 512, .n_threads = 1, .isa = (int32_t)isa, .pool = pool};
        if (p->kind == LS_SPEC_LAYERSKIP) {
            int32_t L = p->skip_first ? p->skip_first : (int32_t)ls_model_hparams(target)->n_layer / 2;
            if (p->layers) {
                cp.layers = p->layers;
                cp.n_layers = p->n_layers;
            } else {
                if (L > 1024) L = 1024;
                for (int32_t i = 0; i < L; i++) first[i] = i;
                cp.layers = first;
                cp.n_layers = L < 1 ? 1 : L;
            }
        }
        if (!(d->ctx = ls_ctx_create(m, cp, err))) goto fail;
        if (p->kind == LS_SPEC_DRAFT)
            d->draft_cost = (double)ls_model_weight_bytes(m) / (double)ls_model_weight_bytes(target);
        else /* the layers it runs, plus the head (about a third of this model's bytes per token) */
            d->draft_cost = 0.3 + 0.7 * (double)cp.n_layers / (double)ls_model_hparams(target)->n_layer;
        d->n_vocab = (int32_t)ls_model_hparams(m)->n_vocab;
        d->done = ls_malloc((size_t)n_ctx * sizeof *d->done);
        d->logits = ls_malloc((size_t)d->n_vocab * sizeof *d->logits);
        d->sscratch = ls_malloc(ls_sampler_scratch_bytes(d->n_vocab));
        if (!d->done || !d->logits || !d->sscratch) goto nomem;
    }
    if (!p->fixed_length) {
        double best = 0.0;
        for (int32_t k = 1; k <= p->draft_max; k++) {
            double g = spec_gain(0.9, k, d->draft_cost, LS_SPEC_ROW_COST);
            best = g > best ? g : best;
        }
        d->hopeless = best < 1.1;
    }
    return d;
nomem:
    ls_err_set(err, LS_E_NOMEM, "out of memory for the drafter");
fail:
    ls_drafter_free(d);
    return NULL;
}

/* Prompt lookup over n-grams of nmin..ngram_max tokens (ngram's drafts; lookup_min's). */
static int32_t draft_ngram(ls_drafter *d, const int32_t *h, int32_t n, int32_t *out, int32_t max, int32_t nmin) {
    const int32_t nmax = d->p.ngram_max;
    if (d->indexed > n) { /* a different history: start over */
        for (int i = 0; i < 17; i++) {
            free(d->idx[i].keys);
            free(d->idx[i].ends);
            memset(&d->idx[i], 0, sizeof d->idx[i]);
        }
        d->indexed = 0;
    }
    for (int32_t e = d->indexed; e < n; e++) /* n-grams ending before e, followed by h[e] */
        for (int32_t k = nmin; k <= nmax && k <= e; k++)
            if (!ng_put(&d->idx[k], ng_hash(h + e - k, k), e)) return 0;
    if (n > d->indexed) d->indexed = n;
    for (int32_t k = nmax; k >= nmin; k--) {
        if (k > n) continue;
        int32_t e = ng_get(&d->idx[k], ng_hash(h + n - k, k));
        if (e < 0 || e >= n || memcmp(h + e - k, h + n - k, (size_t)k * sizeof *h) != 0) continue;
        int32_t c = 0;
        while (c < max && e + c < n) {
            out[c] = h[e + c];
            c++;
        }
        return c;
    }
    return 0;
}

static int32_t draft_model(ls_drafter *d, const int32_t *h, int32_t n, int32_t *out, int32_t max) {
    ls_err err;
    int32_t n_ctx = ls_ctx_n_ctx(d->ctx);
    if (n >= n_ctx) return 0;
    if (max > n_ctx - n) max = n_ctx - n;
    int32_t keep = 0; /* the draft context's K/V that still match the history */
    while (keep < d->n_done && keep < n && d->done[keep] == h[keep]) keep++;
    if (keep == n) keep = n - 1; /* recompute the last token: its logits start the chain */
    double t0 = ls_now_ms();
    ls_status st = ls_ctx_eval(d->ctx, h + keep, n - keep, keep, d->logits, false, &err);
    d->fwd_ms += ls_now_ms() - t0;
    if (st) return 0;
    memcpy(d->done + keep, h + keep, (size_t)(n - keep) * sizeof *h);
    d->n_done = n;
    int32_t c = 0;
    for (; c < max; c++) {
        out[c] = ls_sample(&d->sp, d->logits, d->n_vocab, (uint64_t)(n + c), d->sscratch);
        if (c + 1 == max) {
            c++;
            break;
        }
        t0 = ls_now_ms();
        st = ls_ctx_eval(d->ctx, &out[c], 1, n + c, d->logits, false, &err);
        d->fwd_ms += ls_now_ms() - t0;
        if (st) {
            c++;
            break;
        }
        d->done[d->n_done++] = out[c];
    }
    return c;
}

bool ls_drafter_wants_hidden(const ls_drafter *d) { return d->p.kind == LS_SPEC_MTP; }

void ls_drafter_observe(void *ud, int32_t pos, const float *hidden) {
    ls_drafter *d = ud;
    if (d->p.kind != LS_SPEC_MTP || pos < 0 || pos >= d->n_ctx) return;
    memcpy(d->H + (size_t)pos * d->n_embd, hidden, (size_t)d->n_embd * sizeof(float));
    if (pos < d->n_mtp) d->n_mtp = pos; /* seen again (recomputed after a preemption) */
    d->n_obs = pos + 1;
}

/* One MTP forward over rows (token, position, input hidden); logits of the last.  false:
 * the backend failed (a device error): the drafter proposes nothing from then on. */
static bool mtp_run(ls_drafter *d, int32_t n, const float *hin, bool logits) {
    const int32_t *tables[1] = {d->mtable};
    for (int32_t j = 0; j < n; j++) {
        d->mseq[j] = 0;
        d->mlrow[j] = logits && j == n - 1 ? 0 : -1;
    }
    ls_batch b = {n, d->mtok, d->mpos, d->mseq, tables, d->mlrow, NULL, hin, d->hbuf};
    ls_err err;
    const double t0 = ls_now_ms();
    const ls_status st = d->mbe->run(d->mf, d->mkv, &b, logits ? d->logits : NULL, &err);
    d->fwd_ms += ls_now_ms() - t0;
    if (st != LS_OK) {
        d->hopeless = true; /* drafts are optional: plain decoding goes on */
        return false;
    }
    return true;
}

/* The module's pick from its last logits: over the head's tokens alone when it has a
 * head over part of the vocabulary (ascending ids, so ties break as over the whole). */
static int32_t mtp_pick(ls_drafter *d, uint64_t pos, int32_t *at) {
    *at = ls_sample(&d->sp, d->logits, d->n_hv ? d->n_hv : d->n_vocab, pos, d->sscratch);
    return d->n_hv && *at >= 0 && *at < d->n_hv ? d->hv[*at] : *at;
}

/* Whether softmax(l) gives l[t] less than p_min: the module doubts its draft.  Logits more
 * than 40 below the largest add under exp(-40) each, beneath float precision of the sum,
 * so only the few near the top are exponentiated (one pass to compare, not n exp()s). */
static bool mtp_doubts(const float *l, int32_t n, int32_t t, float p_min) {
    float mx = l[0];
    for (int32_t i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    const float cut = mx - 40.0f;
    double s = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (l[i] > cut) s += exp((double)l[i] - (double)mx);
    return exp((double)l[t] - (double)mx) < (double)p_min * s;
}

static int32_t draft_mtp(ls_drafter *d, const int32_t *h, int32_t n, int32_t *out, int32_t max) {
    const size_t E = (size_t)d->n_embd;
    if (n < 2 || d->n_obs != n - 1) return 0; /* every position but the last token's is observed */
    if (max > d->n_ctx - (n - 1)) max = d->n_ctx - (n - 1);
    if (max <= 0) return 0;
    /* Catch up: MTP position i continues h_i with token t_(i+1). */
    const float *hid = NULL;
    if (d->n_mtp == d->n_obs) d->n_mtp = d->n_obs - 1; /* nothing new: redo the last one for its logits */
    while (d->n_mtp < d->n_obs) {
        int32_t c = d->n_obs - d->n_mtp < LS_MTP_ROWS ? d->n_obs - d->n_mtp : LS_MTP_ROWS;
        for (int32_t j = 0; j < c; j++) {
            d->mtok[j] = h[d->n_mtp + j + 1];
            d->mpos[j] = d->n_mtp + j;
        }
        bool last = d->n_mtp + c == d->n_obs;
        if (!mtp_run(d, c, d->H + (size_t)d->n_mtp * E, last)) return 0;
        if (last) hid = d->hbuf + (size_t)(c - 1) * E;
        d->n_mtp += c;
    }
    int32_t k = 0;
    for (;;) { /* the chain: each draft continues the module's own last hidden state */
        int32_t at, t = mtp_pick(d, (uint64_t)(n + k), &at);
        if (at < 0) break;
        out[k] = t;
        if (++k == max) break;
        /* acceptance-aware: a token the module doubts is likely rejected, and the ones chained
         * after it more so; stop here rather than pay for them in the verify block */
        if (d->p.p_min > 0.0f && !d->p.fixed_length && mtp_doubts(d->logits, d->n_hv ? d->n_hv : d->n_vocab, at, d->p.p_min))
            break;
        memcpy(d->hchain, hid, E * sizeof(float));
        d->mtok[0] = out[k - 1];
        d->mpos[0] = n - 2 + k; /* past the observed positions: overwritten when they are observed */
        if (!mtp_run(d, 1, d->hchain, true)) return k;
        hid = d->hbuf;
    }
    return k;
}

/* Expected tokens per step with k drafts when each is accepted with probability p
 * (given the ones before it), over the step's cost. */
static double spec_gain(double p, int32_t k, double draft_cost, double row_cost) {
    double e = p >= 0.999 ? (double)(k + 1) : (1.0 - pow(p, (double)(k + 1))) / (1.0 - p);
    return e / (1.0 + (row_cost + draft_cost) * (double)k);
}

static void meter_step(cost_meter *m, double gap, int32_t k) {
    if (m->n_steps >= LS_COST_MIN_STEPS && m->sy > 0.0 && gap > 8.0 * (1 + k) * (m->sy / m->w))
        return; /* a preemption, or a prompt's prefill in the step: not what a row costs */
    const double q = LS_COST_DECAY;
    m->w = q * m->w + 1.0;
    m->sk = q * m->sk + k;
    m->skk = q * m->skk + (double)k * k;
    m->sy = q * m->sy + gap;
    m->sky = q * m->sky + k * gap;
    m->n_steps++;
}

/* The spread of the steps' draft lengths: the fit needs some; the drafter keeps some. */
static double meter_var(const cost_meter *m) {
    const double kbar = m->sk / m->w;
    return m->skk / m->w - kbar * kbar;
}

static bool meter_fit(const cost_meter *m, double *a, double *b) {
    if (m->n_steps < LS_COST_MIN_STEPS) return false;
    const double kbar = m->sk / m->w, var = meter_var(m), ybar = m->sy / m->w;
    if (var < 0.02) return false; /* every step verified about as many rows: b is not identified */
    *b = (m->sky / m->w - kbar * ybar) / var;
    *b = *b < 0.0 ? 0.0 : *b;
    *a = ybar - *b * kbar;
    return *a > 1e-6;
}

/* The costs the draft-length rule uses, in single-row steps of the target: measured once
 * there are enough steps (the row cost from the fit when the steps' draft lengths vary,
 * else the prior's share of the mean step), the fixed prior before that. */
void ls_drafter_costs(const ls_drafter *d, double *draft_cost, double *row_cost) {
    const cost_meter *m = &d->cm;
    *draft_cost = d->draft_cost;
    *row_cost = LS_SPEC_ROW_COST;
    double a, b;
    if (d->p.static_costs || m->tw <= 0.0) return;
    if (!meter_fit(m, &a, &b)) {
        if (m->n_steps < LS_COST_MIN_STEPS) return;
        a = (m->sy / m->w) / (1.0 + LS_SPEC_ROW_COST * (m->sk / m->w)); /* the prior's row share */
        b = LS_SPEC_ROW_COST * a;
        if (!(a > 1e-6)) return;
    }
    *row_cost = b / a;
    *draft_cost = (m->ty / m->tw) / a;
}

void ls_drafter_set_clock(ls_drafter *d, double (*clock)(void *), void *ud) {
    d->clock = clock;
    d->clock_ud = ud;
}

static double drafter_now(const ls_drafter *d) { return d->clock ? d->clock(d->clock_ud) : ls_now_ms(); }

static int32_t drafter_draft(ls_drafter *d, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max);

int32_t ls_drafter_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    ls_drafter *d = ud;
    cost_meter *m = &d->cm;
    double t0 = drafter_now(d);
    if (m->t_end >= 0.0) meter_step(m, t0 - m->t_end, m->k_last);
    int32_t n = drafter_draft(d, hist, n_hist, out, max);
    double t1 = drafter_now(d);
    d->draft_ms += t1 - t0;
    /* A draft call also catches up with the tokens since the last one (mtp: the module's K/V),
     * so only a call right after a drafting call shows what drafting at every step costs; one
     * after an idle spell (or the prompt, or lookup's proposals) would charge the whole spell to
     * its drafts.  Lookup's own proposals cost nothing to draft and are not the drafter's. */
    const bool own = n > 0 && !d->prop_lookup;
    if (own && d->own_last) {
        m->tw = LS_COST_DECAY * m->tw + 1.0;
        m->ty = LS_COST_DECAY * m->ty + (t1 - t0) / n;
    }
    d->own_last = own;
    m->t_end = t1;
    m->k_last = n;
    m->n_calls++;
    return n;
}

double ls_drafter_ms(const ls_drafter *d) { return d->draft_ms; }

/* How much of the last proposal hist accepted (the token after the accepted prefix is the
 * target's own, which differs from the proposal by construction), counted per position. */
static int32_t settle(ls_drafter *d, const int32_t *hist, int32_t n_hist) {
    int32_t a = 0;
    while (a < d->n_prop && d->prop_at + a < n_hist && hist[d->prop_at + a] == d->prop[a]) a++;
    d->n_props++;
    if (d->prop_lookup) {
        d->lk_props++;
        d->lk_drafted += d->n_prop;
        d->lk_accepted += a;
    }
    for (int32_t j = 0; j < d->n_prop && j < 16; j++) {
        d->pos_drafted[j]++;
        d->pos_accepted[j] += j < a;
    }
    return a;
}

void ls_drafter_get_stats(ls_drafter *d, const int32_t *hist, int32_t n_hist, ls_drafter_stats *out) {
    if (hist && d->n_prop > 0 && n_hist > d->prop_at) {
        settle(d, hist, n_hist);
        d->n_prop = 0;
    }
    ls_drafter_stats s = LS_DRAFTER_STATS_INIT;
    s.n_proposals = d->n_props;
    memcpy(s.drafted, d->pos_drafted, sizeof s.drafted);
    memcpy(s.accepted, d->pos_accepted, sizeof s.accepted);
    ls_drafter_costs(d, &s.draft_cost, &s.row_cost);
    s.draft_ms = d->draft_ms;
    s.forward_ms = d->fwd_ms;
    s.lookup_proposals = d->lk_props;
    s.lookup_drafted = d->lk_drafted;
    s.lookup_accepted = d->lk_accepted;
    size_t n = out->size < sizeof s ? out->size : sizeof s;
    memcpy(out, &s, n);
    out->size = n;
}

/* The draft length 1..max with the best expected tokens per unit of cost at acceptance p
 * (*best: that ratio; under 1, plain decoding is faster). */
static int32_t best_length(double p, int32_t max, double dc, double rc, double *best) {
    int32_t k = max;
    *best = 0.0;
    for (int32_t j = 1; j <= max; j++) {
        const double g = spec_gain(p, j, dc, rc);
        if (g > *best) {
            *best = g;
            k = j;
        }
    }
    return k;
}

/* lookup_min: where the sequence repeats itself, what followed before is the proposal, at the
 * length its own acceptance (kept apart from the drafter's) pays for; a lookup costs nothing
 * to draft, only its verify rows.  0: no match, or none that pays (the drafter's turn; one
 * token in 16 such matches is proposed anyway, so the estimate can recover). */
static int32_t draft_lookup(ls_drafter *d, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    int32_t n = draft_ngram(d, hist, n_hist, out, max, d->p.lookup_min);
    if (n <= 0 || d->p.fixed_length) return n;
    double dc, rc, best;
    ls_drafter_costs(d, &dc, &rc);
    const int32_t k = best_length(d->lk_s / d->lk_t, n, 0.0, rc, &best);
    if (best >= 1.0) return k;
    if (++d->lk_idle < 16) return 0;
    d->lk_idle = 0;
    return 1;
}

/* Records out[0..n) as the proposal that follows n_hist tokens (settled at the next call);
 * one shorter than draft_min is not worth a verify block: 0. */
static int32_t propose(ls_drafter *d, const int32_t *out, int32_t n, int32_t n_hist, bool lookup) {
    if (n < d->p.draft_min || n <= 0) return 0;
    memcpy(d->prop, out, (size_t)n * sizeof *out);
    d->n_prop = n;
    d->prop_at = n_hist;
    d->prop_lookup = lookup;
    return n;
}

static int32_t drafter_draft(ls_drafter *d, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    if (d->n_prop > 0 && n_hist > d->prop_at) {
        const int32_t a = settle(d, hist, n_hist);
        double *s = d->prop_lookup ? &d->lk_s : &d->acc_s, *t = d->prop_lookup ? &d->lk_t : &d->acc_t;
        *s = 0.8 * *s + a;
        *t = 0.8 * *t + a + (a < d->n_prop ? 1 : 0);
        d->n_prop = 0;
    }
    if (max > d->p.draft_max) max = d->p.draft_max;
    if (max <= 0) return 0;
    int32_t n = 0;
    if (d->p.kind != LS_SPEC_NGRAM && d->p.lookup_min > 0 && (n = draft_lookup(d, hist, n_hist, out, max)) > 0)
        return propose(d, out, n, n_hist, true);
    if (d->hopeless) return 0;
    int32_t k = max;
    if (!d->p.fixed_length) { /* the length with the best expected tokens per unit of cost */
        double best, dc, rc;
        ls_drafter_costs(d, &dc, &rc);
        k = best_length(d->acc_s / d->acc_t, max, dc, rc, &best);
        if (best < 1.0 && !d->again) { /* not worth it now: draft only now and then, to notice a change */
            if (++d->idle < d->explore) return 0;
            d->explore = d->explore * 2 > 64 ? 64 : d->explore * 2;
            d->again = !d->p.static_costs; /* and at the next step too: that one's cost is a fair sample */
        } else {
            d->again = false;
            if (best >= 1.0) d->explore = 8;
        }
        d->idle = 0;
        /* steps that all verify as many rows cannot tell a row's cost: draft one fewer at one
         * step in 8 while the lengths barely vary (above the fit's threshold, so it stays fitted) */
        if (!d->p.static_costs && d->cm.n_steps >= LS_COST_MIN_STEPS && meter_var(&d->cm) < 0.06 &&
            (d->cm.n_calls & 7) == 7 && --k == 0)
            return 0;
    }
    n = d->p.kind == LS_SPEC_NGRAM  ? draft_ngram(d, hist, n_hist, out, k, d->p.ngram_min)
        : d->p.kind == LS_SPEC_MTP ? draft_mtp(d, hist, n_hist, out, k)
                                   : draft_model(d, hist, n_hist, out, k);
    return propose(d, out, n, n_hist, false);
}

