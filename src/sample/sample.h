/* sample.h - token sampling whose random draw for position p depends only on
 * (seed, p), so a token does not depend on how it was computed (plain decoding,
 * speculative verification, batching).  Temperature 0 is argmax. */
#ifndef LS_SAMPLE_SAMPLE_H
#define LS_SAMPLE_SAMPLE_H

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

/* The counter-based generator: a uniform float in [0, 1) keyed by (seed, pos, stream). */
double ls_rand_uniform(uint64_t seed, uint64_t pos, uint64_t stream);

#endif
