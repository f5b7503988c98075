/* kv_store.h - the paged KV store: the bits of every sequence's keys and values.
 *
 * n_blocks blocks of LS_KV_BLOCK positions.  A block holds, for every layer, the K rows
 * then the V rows of its positions, head-major:
 *     [layer][K|V][n_head_kv][LS_KV_BLOCK][head_dim] floats
 * so one kv head's keys of a block are one contiguous run, which is how attention reads
 * them (kernels.h, ls_kv_view).  This file is the only place that knows the layout: the
 * forward writes rows with ls_kv_store_write and reads them through ls_kv_store_view.
 * Which block holds which positions of which sequence is the caller's block table
 * (engine/kvcache.h decides it); the store only holds the bits. */
#ifndef LS_BACKEND_CPU_KV_STORE_H
#define LS_BACKEND_CPU_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kernels.h"
#include "util/err.h"

#define LS_KV_BLOCK_SHIFT 4
#define LS_KV_BLOCK (1 << LS_KV_BLOCK_SHIFT)

typedef struct ls_model ls_model;
typedef struct ls_kv_store ls_kv_store;

/* Caller owns the result (ls_kv_store_free).  Memory is committed as blocks are first
 * written (calloc of fresh pages). */
ls_kv_store *ls_kv_store_create(const ls_model *m, int32_t n_blocks, ls_err *err);
/* The same for an explicit shape: n_layer layers of n_head_kv heads of head_dim floats. */
ls_kv_store *ls_kv_store_create_shape(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_blocks,
                                      ls_err *err);
void ls_kv_store_free(ls_kv_store *s);
int32_t ls_kv_store_blocks(const ls_kv_store *s);
size_t ls_kv_store_row_floats(const ls_kv_store *s); /* n_head_kv * head_dim: one position's K (or V) row */
size_t ls_kv_block_bytes(const ls_model *m);
/* Copies block src's first n_pos positions (all layers) into block dst. */
void ls_kv_block_copy(ls_kv_store *s, int32_t dst, int32_t src, int32_t n_pos);
/* A whole block's bytes (ls_kv_block_bytes of them, the layout above) out of and into
 * block b: the persistent prefix cache's payload (engine/kvdisk.h). */
void ls_kv_block_get(const ls_kv_store *s, int32_t b, void *out);
void ls_kv_block_put(ls_kv_store *s, int32_t b, const void *in);
/* Writes one position's K and V rows (n_head_kv * head_dim floats each, head after
 * head) of layer `layer` into slot `slot` (< LS_KV_BLOCK) of block `block`. */
void ls_kv_store_write(ls_kv_store *s, int32_t layer, int32_t block, int32_t slot, const float *k, const float *v);
/* Attention's view of layer `layer` through a sequence's block table. */
ls_kv_view ls_kv_store_view(const ls_kv_store *s, int32_t layer, const int32_t *table);

#endif
