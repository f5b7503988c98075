/* probe.h - the startup parity check on the live configuration.
 *
 * It runs the same tokens through the same forward path as serving, shaped
 * differently, and compares the logits byte for byte:
 *   P3 chunking:   one chunk vs chunks of 3 vs token by token (which is also P1's
 *                  block-vs-chain shape: a block of width n vs n single steps)
 *   P4 threads:    the live thread count vs 1 thread
 *   P5 ISA:        the live instruction set vs the scalar reference (first 2 rows)
 * (Speculation and batch-mix axes join when those features exist.) */
#ifndef LS_ENGINE_PROBE_H
#define LS_ENGINE_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

typedef struct {
    bool chunked;   /* P3 (and the P1 shape) */
    bool threads;   /* P4 */
    bool isa;       /* P5 */
    bool ok;        /* all of the above */
    int32_t n_tokens;
    double ms;
    char detail[256]; /* the first mismatch, or "" */
} ls_probe_result;

/* Checks tokens[0..n) (n clamped to 8) under (n_threads, isa) against the other
 * shapes.  Returns an error only if it could not run; a mismatch is a result. */
ls_status ls_probe_run(const ls_model *m, const int32_t *tokens, int32_t n, int n_threads, ls_isa isa,
                       ls_probe_result *out, ls_err *err);

#endif
