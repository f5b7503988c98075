/* spec_probe.h - the exactness probe that gates speculative decoding.
 *
 * Through the exact serving configuration (the forward workspace serving uses: its
 * ISA, threads and kernel families), over `draws` random token sequences, it checks
 * byte for byte (memcmp of every row's logits):
 *   P1 block vs chain:   a verify block of width w (2..K+1) in one forward against w
 *                        single-row forwards;
 *   P2 batch mix:        the width-(K+1) block sharing its forward with other
 *                        sequences' rows (a prefill chunk and decode rows that do not
 *                        need parity) against the block alone;
 *   P3 chunked prefill:  a prompt in one forward against random chunks.
 * Verdicts: "exact" (the configured families pass), "scoped" (the family for rows
 * that need parity is not canonical and failed; it was withdrawn for those rows only
 * and the canonical family then passed), "declined" (a canonical family failed:
 * speculation must not run unless inexact output is allowed). */
#ifndef LS_ENGINE_SPEC_PROBE_H
#define LS_ENGINE_SPEC_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

typedef enum { LS_VERDICT_EXACT = 0, LS_VERDICT_SCOPED, LS_VERDICT_DECLINED } ls_verdict;
const char *ls_verdict_name(ls_verdict v);

typedef struct {
    ls_verdict verdict;
    bool block_vs_chain, batch_mix, chunked_prefill; /* the axes of the final (after any scoping) run */
    const ls_mm_family *fam_parity_before, *fam_parity_after; /* families rows that need parity ran */
    const ls_mm_family *fam_free;                     /* family for rows without a parity need */
    int draws;
    double ms;
    char detail[256];                                 /* the first mismatch seen, or "" */
} ls_spec_probe_result;

/* Probes f (withdrawing a failing non-canonical parity family from it: on return,
 * ls_fwd_parity_family(f) is what serving must use).  draft_max = K.  Needs a KV
 * store of its own (allocated here).  Returns an error only if it could not run. */
ls_status ls_spec_probe(const ls_model *m, ls_fwd *f, int32_t draft_max, int draws, uint64_t seed,
                        ls_spec_probe_result *out, ls_err *err);

/* The probe, memoized per (model sha256, lockstep binary, configuration) in
 * memo_dir/probe-<key>.json (memo_dir NULL: no disk memo).  On a hit the recorded
 * result is applied (its parity family is set on f) without running the forward.
 * config: what else defines the configuration (drafter, ...). */
ls_status ls_spec_probe_cached(const ls_model *m, const char *model_path, const char *memo_dir, const char *config,
                               ls_fwd *f, int32_t draft_max, int draws, ls_spec_probe_result *out, bool *from_memo,
                               ls_err *err);
/* $LOCKSTEP_CACHE, else $XDG_CACHE_HOME/lockstep, else $HOME/.cache/lockstep (static buffer), or NULL. */
const char *ls_probe_memo_dir(void);

#endif
