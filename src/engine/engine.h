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

#include "engine/generate.h"
#include "model/model.h"
#include "sample/sample.h"

typedef struct ls_engine ls_engine;

typedef struct {
    int32_t n_ctx;        /* max positions per sequence (--ctx-size); 0 = min(trained, 4096) */
    int64_t kv_mem;       /* bytes for the KV cache (--kv-mem); 0 = n_ctx * n_seq_max positions */
    int32_t n_seq_max;    /* sequences running at once; 0 = 8 */
    int32_t step_tokens;  /* per-step token budget (rows per forward); 0 = 512 */
    int32_t n_threads;    /* 0 = 1 */
    int32_t isa;          /* -1 = LOCKSTEP_ISA or the best the CPU has */
    bool narrow;          /* --kernels narrow: the single-row matmul kernel for every row */
    bool no_prefix_cache;
    int32_t draft_max;    /* largest draft a verify block may carry (0 = drafts off) */
    const ls_mm_family *fam;        /* matmul family (kernels.h) for rows of requests without a parity
                                     * need; NULL = ls_mm_wide */
    const ls_mm_family *fam_parity; /* matmul family for rows that need parity (NULL = ls_mm_wide) */
    unsigned faults;                /* LS_FAULT_* (kernels.h): tests only */
} ls_engine_params;

typedef struct {
    uint64_t id;
    int32_t token;          /* the sampled token, or -1 (finish-only event) */
    int32_t pos;            /* its position in the sequence */
    const float *logits;    /* with want_logits: the n_vocab logits it was sampled from
                             * (valid during the callback only) */
    const char *text;       /* newly final text (stop-string prefixes are held back) */
    size_t text_len;
    bool done;              /* last event of the request */
    ls_finish finish;       /* when done */
    int32_t n_prompt, n_gen;
    int32_t n_cached;       /* prompt positions served by the prefix cache (last admission) */
    int32_t n_drafted, n_accepted; /* drafted tokens so far, and how many were accepted */
    double prompt_ms;       /* submit to first token */
    double gen_ms;          /* first token to this event */
} ls_event;

typedef struct {
    const int32_t *prompt;
    int32_t n_prompt;
    ls_sampler_params sampling;
    int32_t max_tokens;       /* < 0 = until the context is full */
    const int32_t *stop_tokens; /* besides the model's end-of-generation tokens */
    int32_t n_stop_tokens;
    const char *const *stop;  /* stop strings: generation ends before the first match */
    int32_t n_stop;
    bool ignore_eos;
    bool no_parity;           /* this request's rows may run a non-canonical kernel family */
    int32_t prefill_chunk;    /* most prompt tokens per step for this request; 0 = the budget */
    bool want_logits;
    /* Speculation hook: propose up to `max` tokens to follow hist[0..n_hist) (prompt
     * and accepted tokens); returns the count.  The engine verifies them in one
     * block and keeps the longest prefix that plain decoding would have produced. */
    int32_t (*draft)(void *draft_ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max);
    void *draft_ud;
    /* Optional, for drafters that continue the target's hidden states (MTP): called
     * for each position as its K/V becomes part of the sequence (prompt rows, decode
     * rows, accepted drafts), in position order, with the row's last hidden state
     * (n_embd floats, before the final norm); again from 0 after a preemption. */
    void (*draft_observe)(void *draft_ud, int32_t pos, const float *hidden);
    void (*on_event)(void *ud, const ls_event *ev); /* called from the stepping thread */
    void *ud;
} ls_request;

ls_engine *ls_engine_create(const ls_model *m, ls_engine_params p, ls_err *err);
void ls_engine_free(ls_engine *e);

/* Thread-safe.  Checks the request (names what is wrong: empty prompt, bad token,
 * prompt beyond the context, more KV than the whole cache, bad sampling) and queues
 * it; the request's memory may be reused once this returns. */
ls_status ls_engine_submit(ls_engine *e, const ls_request *r, uint64_t *id, ls_err *err);
/* Thread-safe.  The request ends with LS_FINISH_CANCELLED at the next step and its
 * blocks are freed there.  Unknown or finished ids are ignored. */
void ls_engine_cancel(ls_engine *e, uint64_t id);

/* Thread-safe: cancels every queued and running request (shutdown). */
void ls_engine_cancel_all(ls_engine *e);

/* Runs one step (one forward, or none when there is nothing to do).  Not
 * reentrant: one driver thread.  *n_rows (optional) receives the batch size. */
ls_status ls_engine_step(ls_engine *e, int32_t *n_rows, ls_err *err);
/* True when nothing is queued or running (thread-safe). */
bool ls_engine_idle(ls_engine *e);

typedef struct {
    int32_t n_waiting, n_running;
    int32_t kv_blocks, kv_used, kv_cached_idle, kv_free;
    int32_t n_ctx, n_seq_max, step_tokens;
    uint64_t steps, rows, preemptions, prefix_hit_tokens, evictions;
    uint64_t drafted, accepted;
} ls_engine_stats;
void ls_engine_get_stats(ls_engine *e, ls_engine_stats *s); /* thread-safe */

/* The forward workspace (for the probe, which must run the serving configuration). */
ls_fwd *ls_engine_fwd(ls_engine *e);

/* For tests: checks the block bookkeeping against every live block table. */
bool ls_engine_check(ls_engine *e, ls_err *err);

#endif
