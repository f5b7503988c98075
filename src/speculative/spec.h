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
 * lookup_min (mtp, draft, layerskip): where the history's last lookup_min..ngram_max tokens
 * occurred before, ngram's proposal comes first and the drafter runs only where nothing
 * matches; lookup keeps an acceptance estimate of its own for its length.
 *
 * Every drafter adapts its length with a cost model: from a decayed estimate p of
 * how often a drafted token is accepted it picks the k (1..draft_max) that maximizes
 * the expected tokens per step, (1 - p^(k+1)) / (1 - p), over the step's cost,
 * 1 + (row_cost + draft_cost) k, in single-row forwards of the target.  Both costs are
 * measured as the sequence runs (the wall time between calls against the rows verified,
 * and the calls' own time), so the rule fits the backend: on a GPU a small model's step
 * is launch-bound and its rows and drafts cost a few percent of it, on a CPU a row costs
 * 0.15-0.4.  A fixed prior (row 0.15; a draft, its weight bytes over the target's)
 * serves until a few steps are measured.  When no k
 * beats plain decoding it stops drafting, trying again after 8, 16, ... 64 steps,
 * so speculation is never much slower than plain decoding.  A drafter whose drafts
 * cost too much to pay off even at 90 % acceptance (a draft model as large as the
 * target, layer-skip over half of a small model) never drafts at all; fixed_length
 * (tests) overrides all of this. */
#ifndef LS_SPECULATIVE_SPEC_H
#define LS_SPECULATIVE_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "model/model.h"
#include "sample/sample.h"
#include "util/err.h"

/* Public (lockstep.h): ls_spec_kind, ls_spec_params, ls_spec_kind_from_name / _name,
 * ls_spec_check, ls_drafter_create (over an engine: its model, context and thread
 * pool), ls_drafter_free, ls_drafter_attach, ls_drafter_ms. */

/* ls_spec_check against a target model and the context the draft side needs. */
ls_status ls_spec_check_model(const ls_model *target, int32_t n_ctx, const ls_spec_params *p, ls_err *err);
/* ls_drafter_create without an engine: n_ctx positions, drafting with `isa` (LS_ISA_AUTO:
 * $LOCKSTEP_ISA or the best) on `pool` (NULL: one thread of its own).  p is taken whole
 * (this header's layout).  ls_drafter_create goes through it with the engine's. */
ls_drafter *ls_drafter_create_for(const ls_model *target, int32_t n_ctx, ls_pool *pool, ls_isa isa,
                                  const ls_spec_params *p, const ls_sampler_params *sp, ls_err *err);
/* The same on a backend (NULL: the CPU): an mtp drafter runs its module there. */
ls_drafter *ls_drafter_create_on(const ls_backend *be, const ls_model *target, int32_t n_ctx, ls_pool *pool,
                                 ls_isa isa, const ls_spec_params *p, const ls_sampler_params *sp, ls_err *err);
/* The engine's draft callback (ls_request.draft), with ud = the drafter. */
int32_t ls_drafter_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max);
/* What the draft-length rule takes a draft token and a verify row to cost, in single-row
 * steps of the target: measured from the calls' timing once there are a few steps (see
 * cost_meter in spec.c), the fixed prior before that or with static_costs. */
void ls_drafter_costs(const ls_drafter *d, double *draft_cost, double *row_cost);
/* Tests: the drafter reads time (ms) from clock(ud) instead of the monotonic clock. */
void ls_drafter_set_clock(ls_drafter *d, double (*clock)(void *), void *ud);
/* The engine's draft_observe callback (needed by mtp; a no-op for the others). */
void ls_drafter_observe(void *ud, int32_t pos, const float *hidden);
bool ls_drafter_wants_hidden(const ls_drafter *d);

#endif
