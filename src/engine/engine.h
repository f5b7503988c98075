/* engine.h - the batched engine: many sequences, one forward per step.
 *
 * Requests are submitted to (and cancelled from) an engine behind an opaque
 * handle, from any thread.  One driver thread calls ls_engine_step(); each step
 * builds one ragged batch from
 *   - decode rows, one per running sequence (or a verify block [last, d1..dk] when
 *     the request has a drafter),
 *   - prefill chunks, under a per-step token budget (chunked prefill),
 * and runs every linear layer once over all its rows.  The KV cache is paged (fixed
 * blocks, a block table per sequence, a free list) with a prefix cache (full-block
 * sharing with reference counts, copy-on-write for a shared partial block, LRU
 * eviction of unreferenced blocks).  When blocks run out the newest sequence is
 * preempted: its blocks are released and it is recomputed later from its tokens.
 *
 * Parity: a sequence's logits and tokens are byte-identical to those it gets when
 * run alone, whatever else shares its steps, how its prompt is chunked, whether
 * its prefix came from the cache, and whether it was preempted (tests/unit/
 * test_engine.c checks this against solo runs). */
#ifndef LS_ENGINE_ENGINE_H
#define LS_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "sample/sample.h"

/* The public half of this module is in lockstep.h: ls_engine, ls_engine_params,
 * ls_request, ls_event, ls_engine_create / _free / _submit / _cancel / _cancel_all /
 * _step / _idle / _get_stats / _get_info, ls_engine_generate, ls_engine_score. */

#include "engine/backend.h"

/* What the engine's forward runs on (backend.h): device, host ISA and threads, families,
 * a host pool drafters may share. */
void ls_engine_backend_info(const ls_engine *e, ls_backend_info *out);
/* The backend itself (drafters that run forwards of their own: mtp). */
const ls_backend *ls_engine_backend(const ls_engine *e);
/* Withdraws a non-canonical family from the rows that need parity (the probe); false:
 * nothing to withdraw.  ls_engine_withdrawn: whether that happened. */
bool ls_engine_withdraw(ls_engine *e);
bool ls_engine_withdrawn(const ls_engine *e);
const ls_model *ls_engine_model(const ls_engine *e);
/* The engine's parameters as resolved at creation (defaults filled in). */
const ls_engine_params *ls_engine_params_of(const ls_engine *e);
/* The probe's verdict, recorded by ls_engine_probe (engine/probe.c): a failed verdict
 * without allow_inexact makes the engine ignore draft hooks from then on. */
void ls_engine_set_verdict(ls_engine *e, ls_verdict v);
/* Clears the statistics (the probe's own requests leave no trace in them) and drops the
 * prefix cache's idle blocks. */
void ls_engine_reset_stats(ls_engine *e);

/* While paused (the probe's random prompts), the persistent prefix cache (--cache-dir)
 * neither loads nor writes blocks. */
void ls_engine_disk_pause(ls_engine *e, bool paused);

/* LS_OK when a prompt of n_prompt tokens leaves room for one new token in n_ctx
 * positions; else the error every entry point reports (empty, or too long). */
ls_status ls_check_prompt_room(int32_t n_prompt, int32_t n_ctx, ls_err *err);

/* For tests: checks the block bookkeeping against every live block table. */
bool ls_engine_check(ls_engine *e, ls_err *err);

#endif
