/* kvcache.c - block reference counts, free list, and the prefix-cache trie with
 * LRU eviction (see kvcache.h). */
#include "engine/kvcache.h"
#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

#define BS LS_KV_BLOCK
#define ROOT (-1)

typedef struct {
    int32_t ref;
    bool cached;
    int32_t parent;              /* cached parent block, or ROOT */
    int32_t n_tok;               /* positions the cache entry covers */
    int32_t first_child, next_sib;
    int32_t lru_prev, lru_next;  /* in the LRU list while cached and unreferenced */
    int32_t tokens[BS];
} blk;

struct ls_kvcache {
    blk *b;
    int32_t n;
    bool prefix;
    int32_t *free_stack;
    int32_t n_free;
    int32_t root_child;          /* first child of the root */
    int32_t lru_head, lru_tail;  /* head = least recently used */
    int32_t n_cached, n_idle;
    uint64_t evictions;
    ls_kvc_fill_fn fill;         /* NULL: no persistent cache behind this one */
    void *fill_ud;
};

void ls_kvc_set_fill(ls_kvcache *c, ls_kvc_fill_fn fill, void *ud) {
    c->fill = fill;
    c->fill_ud = ud;
}

ls_kvcache *ls_kvc_create(int32_t n_blocks, bool prefix_cache, ls_err *err) {
    ls_kvcache *c = ls_calloc(1, sizeof *c);
    if (c) {
        c->b = ls_calloc((size_t)n_blocks, sizeof *c->b);
        c->free_stack = ls_malloc((size_t)n_blocks * sizeof *c->free_stack);
    }
    if (!c || !c->b || !c->free_stack) {
        ls_kvc_free(c);
        ls_err_set(err, LS_E_NOMEM, "out of memory for the KV block table (%d blocks)", n_blocks);
        return NULL;
    }
    c->n = n_blocks;
    c->prefix = prefix_cache;
    c->root_child = c->lru_head = c->lru_tail = -1;
    for (int32_t i = 0; i < n_blocks; i++) {
        c->b[i].parent = ROOT;
        c->b[i].first_child = c->b[i].next_sib = c->b[i].lru_prev = c->b[i].lru_next = -1;
        c->free_stack[i] = n_blocks - 1 - i; /* pop order 0, 1, 2, ... */
    }
    c->n_free = n_blocks;
    return c;
}

void ls_kvc_free(ls_kvcache *c) {
    if (!c) return;
    free(c->b);
    free(c->free_stack);
    free(c);
}

static int32_t *child_head(ls_kvcache *c, int32_t parent) {
    return parent == ROOT ? &c->root_child : &c->b[parent].first_child;
}

static void lru_remove(ls_kvcache *c, int32_t i) {
    blk *x = &c->b[i];
    if (x->lru_prev >= 0) c->b[x->lru_prev].lru_next = x->lru_next; else c->lru_head = x->lru_next;
    if (x->lru_next >= 0) c->b[x->lru_next].lru_prev = x->lru_prev; else c->lru_tail = x->lru_prev;
    x->lru_prev = x->lru_next = -1;
    c->n_idle--;
}

static void lru_push(ls_kvcache *c, int32_t i) { /* most recently used end */
    blk *x = &c->b[i];
    x->lru_prev = c->lru_tail;
    x->lru_next = -1;
    if (c->lru_tail >= 0) c->b[c->lru_tail].lru_next = i; else c->lru_head = i;
    c->lru_tail = i;
    c->n_idle++;
}

/* Removes an unreferenced leaf from the trie (it keeps no children). */
static void uncache(ls_kvcache *c, int32_t i) {
    blk *x = &c->b[i];
    LS_ASSERT(x->cached && x->ref == 0 && x->first_child < 0);
    lru_remove(c, i);
    int32_t *p = child_head(c, x->parent);
    while (*p != i) p = &c->b[*p].next_sib;
    *p = x->next_sib;
    x->next_sib = -1;
    x->parent = ROOT;
    x->cached = false;
    x->n_tok = 0;
    c->n_cached--;
}

int32_t ls_kvc_alloc(ls_kvcache *c) {
    int32_t i = -1;
    if (c->n_free > 0) {
        i = c->free_stack[--c->n_free];
    } else {
        for (int32_t j = c->lru_head; j >= 0; j = c->b[j].lru_next)
            if (c->b[j].first_child < 0) { /* leaves first: an inner block is useless without its parent */
                i = j;
                break;
            }
        if (i < 0) return -1;
        uncache(c, i);
        c->evictions++;
    }
    c->b[i].ref = 1;
    return i;
}

void ls_kvc_drop_idle(ls_kvcache *c) {
    for (bool found = true; found;) { /* leaves first, until no unreferenced cached block is left */
        found = false;
        for (int32_t j = c->lru_head; j >= 0; j = c->b[j].lru_next)
            if (c->b[j].first_child < 0) {
                uncache(c, j);
                c->b[j].ref = 0;
                c->free_stack[c->n_free++] = j;
                found = true;
                break;
            }
    }
}

static void take_ref(ls_kvcache *c, int32_t i) {
    if (c->b[i].ref++ == 0) lru_remove(c, i); /* only cached blocks sit unreferenced outside the free list */
}

void ls_kvc_release(ls_kvcache *c, int32_t i) {
    blk *x = &c->b[i];
    LS_ASSERT(i >= 0 && i < c->n && x->ref > 0);
    if (--x->ref > 0) return;
    if (x->cached) lru_push(c, i);
    else c->free_stack[c->n_free++] = i;
}

bool ls_kvc_shared(const ls_kvcache *c, int32_t i) { return c->b[i].ref > 1 || c->b[i].cached; }

/* Makes referenced block me a cached child of parent holding toks[0..n_tok). */
static void link_cached(ls_kvcache *c, int32_t me, int32_t parent, const int32_t *toks, int32_t n_tok) {
    blk *x = &c->b[me];
    x->cached = true;
    x->parent = parent;
    x->n_tok = n_tok;
    memcpy(x->tokens, toks, (size_t)n_tok * sizeof *toks);
    int32_t *h = child_head(c, parent);
    x->next_sib = *h;
    *h = me;
    c->n_cached++;
}

static int32_t lcp(const int32_t *a, const int32_t *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static int32_t find_full(ls_kvcache *c, int32_t parent, const int32_t *toks) {
    for (int32_t j = *child_head(c, parent); j >= 0; j = c->b[j].next_sib)
        if (c->b[j].n_tok == BS && memcmp(c->b[j].tokens, toks, sizeof c->b[j].tokens) == 0) return j;
    return -1;
}

int32_t ls_kvc_match(ls_kvcache *c, const int32_t *toks, int32_t limit, int32_t *table, int32_t *n_blocks) {
    *n_blocks = 0;
    if (!c->prefix) return 0;
    int32_t parent = ROOT, matched = 0;
    while (matched + BS <= limit) {
        int32_t j = find_full(c, parent, toks + matched);
        if (j < 0) {
            /* not in memory: the persistent cache may have it (asked first, so that a miss
             * evicts nothing) */
            if (!c->fill || !c->fill(c->fill_ud, toks, matched + BS, -1) || (j = ls_kvc_alloc(c)) < 0) break;
            if (!c->fill(c->fill_ud, toks, matched + BS, j)) {
                ls_kvc_release(c, j);
                break;
            }
            link_cached(c, j, parent, toks + matched, BS);
        } else {
            take_ref(c, j);
        }
        table[(*n_blocks)++] = j;
        parent = j;
        matched += BS;
    }
    int32_t rem = limit - matched, best = -1, best_len = 0;
    if (rem > 0)
        for (int32_t j = *child_head(c, parent); j >= 0; j = c->b[j].next_sib) {
            int32_t l = lcp(c->b[j].tokens, toks + matched, c->b[j].n_tok < rem ? c->b[j].n_tok : rem);
            if (l > best_len) {
                best = j;
                best_len = l;
            }
        }
    if (best >= 0) {
        take_ref(c, best);
        table[(*n_blocks)++] = best;
        matched += best_len;
    }
    return matched;
}

void ls_kvc_commit(ls_kvcache *c, int32_t *table, int32_t i, const int32_t *toks, int32_t n_tok) {
    if (!c->prefix || n_tok <= 0) return;
    int32_t me = table[i], parent = i == 0 ? ROOT : table[i - 1];
    LS_ASSERT(n_tok <= BS && c->b[me].ref > 0);
    if (c->b[me].cached) return; /* came from the cache and was never written */
    if (parent != ROOT && !c->b[parent].cached) return;
    if (n_tok == BS) {
        int32_t twin = find_full(c, parent, toks);
        if (twin >= 0) { /* an identical block is cached: use it, free ours */
            take_ref(c, twin);
            table[i] = twin;
            ls_kvc_release(c, me);
            return;
        }
        /* partial siblings that this block extends are now redundant */
        for (int32_t j = *child_head(c, parent), nx; j >= 0; j = nx) {
            nx = c->b[j].next_sib;
            if (c->b[j].n_tok < BS && c->b[j].ref == 0 && c->b[j].first_child < 0 &&
                lcp(c->b[j].tokens, toks, c->b[j].n_tok) == c->b[j].n_tok) {
                uncache(c, j);
                c->free_stack[c->n_free++] = j;
            }
        }
    } else {
        for (int32_t j = *child_head(c, parent); j >= 0; j = c->b[j].next_sib)
            if (c->b[j].n_tok >= n_tok && lcp(c->b[j].tokens, toks, n_tok) == n_tok) return; /* covered */
    }
    link_cached(c, me, parent, toks, n_tok);
}

void ls_kvc_get_stats(const ls_kvcache *c, ls_kvc_stats *s) {
    s->total = c->n;
    s->free = c->n_free;
    s->cached_idle = c->n_idle;
    s->cached = c->n_cached;
    s->evictions = c->evictions;
}

bool ls_kvc_check(const ls_kvcache *c, const int32_t *const *tables, const int32_t *n_blocks, int32_t n_tables,
                  ls_err *err) {
    int32_t *refs = ls_calloc((size_t)c->n, sizeof *refs);
    char *seen = ls_calloc((size_t)c->n, 1);
    bool ok = false;
    if (!refs || !seen) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t t = 0; t < n_tables; t++)
        for (int32_t j = 0; j < n_blocks[t]; j++) {
            int32_t b = tables[t][j];
            if (b < 0 || b >= c->n) {
                ls_err_set(err, LS_E_FORMAT, "table %d entry %d is block %d, out of range", t, j, b);
                goto done;
            }
            refs[b]++;
        }
    for (int32_t b = 0; b < c->n; b++)
        if (refs[b] != c->b[b].ref) {
            ls_err_set(err, LS_E_FORMAT, "block %d has ref %d but %d tables use it", b, c->b[b].ref, refs[b]);
            goto done;
        }
    for (int32_t k = 0; k < c->n_free; k++) {
        int32_t b = c->free_stack[k];
        if (seen[b]++ || c->b[b].ref || c->b[b].cached) {
            ls_err_set(err, LS_E_FORMAT, "free block %d is listed twice, referenced or cached", b);
            goto done;
        }
    }
    int32_t idle = 0, cached = 0;
    for (int32_t b = c->lru_head; b >= 0; b = c->b[b].lru_next, idle++)
        if (seen[b]++ || c->b[b].ref || !c->b[b].cached) {
            ls_err_set(err, LS_E_FORMAT, "LRU block %d is listed twice, referenced or not cached", b);
            goto done;
        }
    for (int32_t b = 0; b < c->n; b++) {
        if (c->b[b].cached) {
            cached++;
            int32_t p = c->b[b].parent;
            if (p != ROOT && (!c->b[p].cached || c->b[p].n_tok != BS)) {
                ls_err_set(err, LS_E_FORMAT, "cached block %d has a parent %d that is not a cached full block", b, p);
                goto done;
            }
        }
        if (!seen[b] && c->b[b].ref == 0) {
            ls_err_set(err, LS_E_FORMAT, "block %d is lost: unreferenced, not free, not in the LRU list", b);
            goto done;
        }
    }
    if (idle != c->n_idle || cached != c->n_cached) {
        ls_err_set(err, LS_E_FORMAT, "counters: idle %d vs %d, cached %d vs %d", idle, c->n_idle, cached, c->n_cached);
        goto done;
    }
    ok = true;
done:
    free(refs);
    free(seen);
    return ok;
}
