/* parity.h - CPU references and random batch mixes on the GPU (tests/cuda, bench/cuda). */
#ifndef LS_TESTS_CUDA_PARITY_H
#define LS_TESTS_CUDA_PARITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_fwd.h"
#include "model/model.h"

typedef struct {
    ls_model *m;
    int V, nseq, nctx;
    int *len;
    int32_t **tok;
    float **ref; /* per sequence: len x V, the CPU's logits of the sequence run alone */
} parity_refs;

/* nseq random token sequences of min_len..max_len tokens (sequence 0 gets max_len) and
 * their CPU logits (a CPU forward of n_threads threads, the best ISA, chunks of 64 rows). */
bool parity_refs_make(parity_refs *r, ls_model *m, int nseq, int nctx, int min_len, int max_len, int n_threads,
                      uint64_t seed, ls_err *err);
void parity_refs_free(parity_refs *r);

/* Runs every sequence to its end on the GPU in random batch mixes of up to bmax rows
 * (decode rows, verify blocks of 2..9 rows, prefill chunks of up to 33), each sequence on
 * shuffled blocks of kv (which needs nseq * nctx / 16 blocks); a share fast_frac of the
 * sequences (never sequence 0) runs without a parity need, all their rows.  Returns the differing bytes of the rows
 * with a parity need (*cmp: bytes compared; *rows: rows run; *fast_err: the fast rows'
 * relative L2 error, or 0). */
size_t parity_run_mix(const parity_refs *r, ls_cuda_fwd *g, ls_cuda_kv *kv, uint64_t seed, double fast_frac, int bmax,
                      size_t *cmp, size_t *rows, double *fast_err);

/* The same with fast_run > 0: every forward first gathers the fast sequences' next rows
 * into one contiguous run of fast_run..fast_run+32 rows (prefill chunks of several fast
 * sequences side by side, as long as they have rows left), so that a fast family that
 * needs long runs (cuBLAS from fast_min_rows) really serves them, then adds up to
 * bmax - fast_run rows of the other sequences, before or after that run (bmax: at least
 * fast_run + 33). */
size_t parity_run_mix_runs(const parity_refs *r, ls_cuda_fwd *g, ls_cuda_kv *kv, uint64_t seed, double fast_frac,
                           int fast_run, int bmax, size_t *cmp, size_t *rows, double *fast_err);

size_t parity_diff_bytes(const void *a, const void *b, size_t n);

#endif
