/* sample.h - token sampling whose random draw for position p depends only on
 * (seed, p), so a token does not depend on how it was computed (plain decoding,
 * speculative verification, batching).  Temperature 0 is argmax. */
#ifndef LS_SAMPLE_SAMPLE_H
#define LS_SAMPLE_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* ls_sampler_params: lockstep.h. */

/* Checks ranges; names the offending field. */
ls_status ls_sampler_params_check(const ls_sampler_params *p, ls_err *err);

/* Scratch the sampler needs for a vocabulary of n_vocab (caller-allocated; reused). */
size_t ls_sampler_scratch_bytes(int32_t n_vocab);

/* Picks the token for sequence position `pos` from logits[n_vocab]
 * (logits are not modified).  scratch: ls_sampler_scratch_bytes(n_vocab) bytes. */
int32_t ls_sample(const ls_sampler_params *p, const float *logits, int32_t n_vocab, uint64_t pos,
                  void *scratch);

/* The same with the history the penalties need: toks[0..n_toks) is the sequence so far
 * (its first n_prompt are the prompt), and the token is for position n_toks.  With toks
 * NULL the penalties see no history (logit_bias still applies). */
int32_t ls_sample_seq(const ls_sampler_params *p, const float *logits, int32_t n_vocab, const int32_t *toks,
                      int32_t n_toks, int32_t n_prompt, void *scratch);

/* The same over the tokens mask allows (bit id & 31 of mask[id >> 5]; grammar.h): the
 * recipe runs on the allowed candidates only, in id order, with the draw keyed by
 * (seed, n_toks) as always; disallowed tokens can never be drawn.  mask NULL is exactly
 * ls_sample_seq.  Returns -1 when the mask allows nothing. */
int32_t ls_sample_seq_masked(const ls_sampler_params *p, const float *logits, int32_t n_vocab, const int32_t *toks,
                             int32_t n_toks, int32_t n_prompt, const uint32_t *mask, void *scratch);

/* Whether p changes the logits before the draw (bias or a penalty in effect). */
bool ls_sampler_modifies(const ls_sampler_params *p);

/* The counter-based generator: a uniform float in [0, 1) keyed by (seed, pos, stream). */
double ls_rand_uniform(uint64_t seed, uint64_t pos, uint64_t stream);

#endif
