/* grammar.h - GBNF grammars (the syntax llama.cpp's llama-server accepts) and a
 * matcher over Unicode code points that constrains sampling (docs/engine.md,
 * "Constrained decoding").
 *
 * Syntax: `name ::= body` rules (names: letters, digits, '-', '_'); alternatives `|`;
 * sequences; grouping `( )`; literals "..." with escapes \n \r \t \" \\ \[ \] \xHH
 * \uHHHH \UHHHHHHHH; character classes [a-z0-9_] and negated [^...] (same escapes);
 * `.` any code point; quantifiers `*` `+` `?` `{m}` `{m,}` `{m,n}`; `#` comments to the
 * end of the line.  The start rule is `root`.  Refused with an error naming the line
 * and column: syntax errors, an undefined or redefined rule, no `root`, and left
 * recursion (the matcher would not terminate), a grammar whose start is too
 * ambiguous (more than 2^20 stack steps or 8,192 stacks before the first character),
 * and one past a size limit (grammar.c: groups nested 256 deep, 32,768 rules, chains of
 * 1,024 rules, 2^22 elements, ...), each LS_E_INVALID with a message naming the limit.
 *
 * The matcher keeps a set of pushdown stacks, as llama.cpp's llama-grammar does.  A
 * state is a pure function of the bytes accepted so far (so of the token sequence),
 * including a UTF-8 sequence a token left incomplete (the next token's bytes continue
 * it).  Nothing here depends on how tokens were computed. */
#ifndef LS_SAMPLE_GRAMMAR_H
#define LS_SAMPLE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

typedef struct ls_grammar ls_grammar;             /* a compiled grammar (immutable, shareable) */
typedef struct ls_grammar_state ls_grammar_state; /* where a sequence is in it */
typedef struct ls_grammar_vocab ls_grammar_vocab; /* a vocabulary's byte pieces as a trie */

/* Compiles GBNF text (len bytes).  NULL on error: err (LS_E_INVALID) says
 * "grammar line L, column C: expected ..." or names the rule.  Caller frees. */
ls_grammar *ls_grammar_compile(const char *text, size_t len, ls_err *err);
void ls_grammar_free(ls_grammar *g);

/* The state before anything is accepted (at `root`).  NULL: out of memory. */
ls_grammar_state *ls_grammar_state_new(const ls_grammar *g);
ls_grammar_state *ls_grammar_state_clone(const ls_grammar_state *s);
/* Makes dst a copy of src (same grammar); false: out of memory (dst unchanged). */
bool ls_grammar_state_copy(ls_grammar_state *dst, const ls_grammar_state *src);
void ls_grammar_state_free(ls_grammar_state *s);

/* Advances over n bytes.  false (state unchanged) when the grammar does not allow
 * them, out of memory, or when one code point's expansion takes more than 2^20 stack
 * steps (an ambiguous grammar: its paths multiply before they merge; refused rather
 * than left to run for hours). */
bool ls_grammar_accept_bytes(ls_grammar_state *s, const char *bytes, size_t n);
/* Whether the text so far is a complete sentence of the grammar (no UTF-8 pending). */
bool ls_grammar_complete(const ls_grammar_state *s);
/* Whether nothing more can follow (complete, and no stack can take another character;
 * also after an end-of-generation token was accepted). */
bool ls_grammar_final(const ls_grammar_state *s);
/* Whether the whole of bytes[0..n) is a complete sentence (tests, the FFI). */
bool ls_grammar_matches(const ls_grammar *g, const char *bytes, size_t n);

/* The vocabulary: token_bytes(ud, id, buf, cap) returns the token's raw bytes (the
 * count, which may exceed cap), is_eog(ud, id) whether it ends generation.  Tokens with
 * no bytes that do not end generation are never allowed. */
ls_grammar_vocab *ls_grammar_vocab_new(int32_t n_vocab, size_t (*token_bytes)(void *ud, int32_t id, char *buf, size_t cap),
                                       bool (*is_eog)(void *ud, int32_t id), void *ud, ls_err *err);
void ls_grammar_vocab_free(ls_grammar_vocab *v);
int32_t ls_grammar_vocab_size(const ls_grammar_vocab *v);

/* Words of the allowed mask for n_vocab tokens: bit (id & 31) of word id >> 5. */
static inline size_t ls_grammar_mask_words(int32_t n_vocab) { return ((size_t)n_vocab + 31) / 32; }
static inline bool ls_grammar_mask_get(const uint32_t *mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1u; }

/* Fills mask (ls_grammar_mask_words words) with the tokens allowed next: a token whose
 * bytes the grammar accepts from s (its last UTF-8 sequence may stay incomplete if some
 * continuation could match), and the end-of-generation tokens only when s is complete.
 * When s is final only end-of-generation tokens are allowed (none after one was
 * accepted).  Returns how many are allowed (0: nothing can follow), or a negative value
 * when the mask could not be computed: -1 out of memory, LS_GRAMMAR_MASK_OVER over its
 * work budget (LS_GRAMMAR_MASK_WORK steps); the request must end with an error, not as
 * if the grammar had finished. */
#define LS_GRAMMAR_MASK_OVER (-2)
#define LS_GRAMMAR_MASK_WORK ((int64_t)1 << 26)
int32_t ls_grammar_mask(const ls_grammar_state *s, const ls_grammar_vocab *v, uint32_t *mask);
/* Accepts token id (which the mask allowed): its bytes, or for an end-of-generation
 * token the end (the state becomes final).  false (state unchanged) if not allowed. */
bool ls_grammar_accept_token(ls_grammar_state *s, const ls_grammar_vocab *v, int32_t id);

#endif
