/* spec.h - drafters for speculative decoding.
 *
 * A drafter proposes tokens to follow a sequence's history; the engine verifies them
 * in one block (engine.h) and keeps the longest prefix that plain decoding would have
 * produced, so speculation never changes a token or a logit, only how many forward
 * passes it takes.
 *
 *   ngram      prompt lookup: the tokens that followed the latest earlier occurrence of
 *              the last n tokens (n from ngram_max down to ngram_min), found through
 *              incrementally built hash indexes, so a call costs O(new tokens + draft).
 *   draft      a second model with the target's vocabulary, in its own context; it
 *              samples its chain with the request's sampler (keyed by (seed, position)),
 *              so the target used as its own draft is accepted 100 % at any temperature.
 *   layerskip  self-speculation: the target's first L layers (or a list), then its
 *              final norm and head, in its own context; no extra weights.
 *   mtp        the model's own multi-token-prediction module (DeepSeek-V3 / GLM style,
 *              llama.cpp's nextn tensors): from the target's last hidden state h_i and
 *              the next token t_(i+1), eh_proj([enorm(embed(t)); hnorm(h)]), one block
 *              with its own K/V, the shared (or its own) head; chained on its own
 *              output hidden state for longer drafts.  It sees every position's hidden
 *              state through the engine's draft_observe hook.
 *
 * Every drafter adapts its length with a cost model: from a decayed estimate p of
 * how often a drafted token is accepted it picks the k (1..draft_max) that maximizes
 * the expected tokens per step, (1 - p^(k+1)) / (1 - p), over the step's cost,
 * 1 + (row_cost + draft_cost) k, in single-row forwards of the target.  When no k
 * beats plain decoding it stops drafting, trying again after 8, 16, ... 64 steps,
 * so speculation is never much slower than plain decoding.  A drafter whose drafts
 * cost too much to pay off even at 90 % acceptance (a draft model as large as the
 * target, layer-skip over half of a small model) never drafts at all; fixed_length
 * (tests) overrides all of this. */
#ifndef LS_SPEC_SPEC_H
#define LS_SPEC_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "sample/sample.h"
#include "util/err.h"

typedef enum { LS_SPEC_OFF = 0, LS_SPEC_NGRAM, LS_SPEC_DRAFT, LS_SPEC_LAYERSKIP, LS_SPEC_MTP } ls_spec_kind;

typedef struct {
    ls_spec_kind kind;
    int32_t draft_max;         /* longest draft (default 8) */
    int32_t draft_min;         /* shorter proposals are not worth a verify block (default 1) */
    int32_t ngram_min, ngram_max; /* n-gram sizes for ngram (default 2..4) */
    const ls_model *draft_model;  /* draft: the draft model (same vocabulary as the target) */
    int32_t skip_first;        /* layerskip: run the first skip_first layers (default n_layer / 2) */
    const int32_t *layers;     /* layerskip: or exactly these layers */
    int32_t n_layers;
    int32_t n_ctx;             /* positions the draft context needs (the target's context) */
    int32_t n_threads;
    ls_pool *pool;             /* the engine's pool, shared (drafting runs on the stepping thread) */
    bool fixed_length;         /* no adaptation: always draft_max (tests) */
} ls_spec_params;

ls_status ls_spec_kind_from_name(const char *name, ls_spec_kind *out, ls_err *err);
const char *ls_spec_kind_name(ls_spec_kind k);

/* Checks the parameters against the target (vocabulary of the draft model, layers). */
ls_status ls_spec_check(const ls_model *target, const ls_spec_params *p, ls_err *err);

typedef struct ls_drafter ls_drafter;
/* One drafter per sequence (it keeps the sequence's state); sp: the request's sampler. */
ls_drafter *ls_drafter_create(const ls_model *target, const ls_spec_params *p, const ls_sampler_params *sp,
                              ls_err *err);
void ls_drafter_free(ls_drafter *d);
/* The engine's draft callback (ls_request.draft), with ud = the drafter. */
int32_t ls_drafter_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max);
/* The engine's draft_observe callback (needed by mtp; a no-op for the others). */
void ls_drafter_observe(void *ud, int32_t pos, const float *hidden);
double ls_drafter_ms(const ls_drafter *d); /* time spent proposing so far */
bool ls_drafter_wants_hidden(const ls_drafter *d);

/* ---- single-stream speculative generation (lockstep run --spec) ---------- */
#include "engine/generate.h"

typedef struct {
    bool probe;          /* run the exactness probe before enabling speculation */
    bool allow_inexact;  /* keep speculating even if the probe declines */
    const char *model_path, *memo_dir; /* for the probe's memo (memo_dir NULL: none) */
} ls_spec_gate;

typedef struct {
    int32_t n_drafted;   /* draft tokens proposed and verified */
    int32_t n_accepted;  /* of which accepted */
    int32_t n_steps;     /* decode steps (forward passes of the target) after the first token */
    bool probed, probe_memo, declined; /* declined: the probe failed, speculation was turned off */
    int verdict;         /* ls_verdict, when probed */
    double probe_ms;
    double draft_ms;     /* time inside the drafter */
    char probe_detail[256];
} ls_spec_stats;

/* ls_generate's contract through the batched engine with a drafter (kind OFF: no
 * drafts): the same tokens as ls_generate for the same sampler, whatever the drafter.
 * res->n_decode counts tokens after the first (tokens per second, not forwards). */
ls_status ls_generate_spec(const ls_model *m, const ls_spec_params *sp, const ls_spec_gate *gate, int n_threads,
                           int32_t n_ctx, const int32_t *prompt, int32_t n_prompt, const ls_gen_params *gp,
                           ls_gen_result *res, ls_spec_stats *st, ls_err *err);

#endif
