/* kvcache.h - the paged KV cache's bookkeeping: fixed-size blocks with reference
 * counts, a free list, and the prefix cache.
 *
 * The bits live in an ls_kv_store; this module only decides which block is whose.
 * A block is "shared" when more than one sequence references it or when the prefix
 * cache indexes it; a sequence must copy a shared block before writing into it
 * (copy-on-write).
 *
 * The prefix cache is a trie of blocks: a cached block records its parent (the
 * cached block before it, or the root) and the tokens whose K/V it holds, LS_KV_BLOCK
 * of them for a full block, fewer for the partial last block of a finished
 * sequence.  A block's K/V depend only on the tokens up to its last position (the
 * parity contract), so any sequence with the same token prefix may reuse it, bit
 * for bit.  Unreferenced cached blocks stay in an LRU list and are evicted, leaves
 * first, when the free list runs dry. */
#ifndef LS_ENGINE_KVCACHE_H
#define LS_ENGINE_KVCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

typedef struct ls_kvcache ls_kvcache;

ls_kvcache *ls_kvc_create(int32_t n_blocks, bool prefix_cache, ls_err *err);
void ls_kvc_free(ls_kvcache *c);

/* A block with one reference, or -1 when every block is referenced.  Takes a free
 * block, else evicts the least recently used unreferenced cached leaf. */
int32_t ls_kvc_alloc(ls_kvcache *c);
void ls_kvc_release(ls_kvcache *c, int32_t b); /* drops one reference */
bool ls_kvc_shared(const ls_kvcache *c, int32_t b);
/* Uncaches every unreferenced cached block and frees it (the probe's leftovers). */
void ls_kvc_drop_idle(ls_kvcache *c);

/* Longest cached prefix of toks[0..limit): fills table[] with referenced blocks
 * (full blocks, then possibly one block used for its first few positions) and
 * returns the number of positions covered.  0 when the cache is off. */
int32_t ls_kvc_match(ls_kvcache *c, const int32_t *toks, int32_t limit, int32_t *table, int32_t *n_blocks);

/* Offers block index i of a sequence (table[0..i] referenced by the caller, toks its
 * tokens from position i*LS_KV_BLOCK) to the cache, n_tok positions filled.  A full
 * block (n_tok == LS_KV_BLOCK) whose twin is already cached is swapped for the twin
 * (table[i] changes; same bits by the parity contract).  Needs table[i-1] cached. */
void ls_kvc_commit(ls_kvcache *c, int32_t *table, int32_t i, const int32_t *toks, int32_t n_tok);

/* Extends ls_kvc_match past the cached full blocks (the persistent prefix cache,
 * engine/kvdisk.h): toks[0..n) is a prefix whose last LS_KV_BLOCK tokens have no cached
 * block.  Called with b < 0 it only answers whether it could fill one; called with a
 * fresh block b (one reference, the caller's) it writes the prefix's K/V for those
 * positions into b and returns true, which caches b like a committed block. */
typedef bool (*ls_kvc_fill_fn)(void *ud, const int32_t *toks, int32_t n, int32_t b);
void ls_kvc_set_fill(ls_kvcache *c, ls_kvc_fill_fn fill, void *ud);

typedef struct {
    int32_t total;       /* blocks */
    int32_t free;        /* on the free list */
    int32_t cached_idle; /* cached and unreferenced (evictable) */
    int32_t cached;      /* indexed by the prefix cache */
    uint64_t evictions;
} ls_kvc_stats;
void ls_kvc_get_stats(const ls_kvcache *c, ls_kvc_stats *s);

/* Checks every invariant (reference counts vs the given tables, lists, trie);
 * returns false and describes the first violation in err.  For tests. */
bool ls_kvc_check(const ls_kvcache *c, const int32_t *const *tables, const int32_t *n_blocks, int32_t n_tables,
                  ls_err *err);

#endif
