/* tok_internal.h - shared between tokenizer.c (BPE) and pretok.c (pre-tokenizers).
 * Not part of the library's interface. */
#ifndef LS_TOKENIZER_TOK_INTERNAL_H
#define LS_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "tokenizer/tokenizer.h"
#include "util/err.h"

typedef enum {
    LS_PRETOK_GPT2,   /* GPT-2 regex */
    LS_PRETOK_SMOLLM, /* every \p{N} alone, then the GPT-2 regex on the pieces between */
    LS_PRETOK_LLAMA3, /* Llama 3 regex */
    LS_PRETOK_QWEN2,  /* Qwen2 regex (Llama 3's with single digits) */
} ls_pretok_kind;

typedef struct {
    ls_pretok_kind kind;
    void *re;     /* pcre2_code_8 *: the main split regex */
    void *digit;  /* pcre2_code_8 *: \p{N} (SMOLLM only) */
} ls_pretok;

typedef struct ls_tok_run ls_tok_run;

/* Maps a tokenizer.ggml.pre name to a kind; 0 on success, -1 if unknown. */
int ls_pretok_lookup(const char *name, ls_pretok_kind *kind, bool *ignore_merges);
const char *ls_pretok_supported_names(void);
ls_status ls_pretok_init(ls_pretok *p, ls_pretok_kind kind, ls_err *err);
void ls_pretok_free(ls_pretok *p);
/* Per-call PCRE2 match data (thread safety: never shared between calls). */
void *ls_pretok_match_data(const ls_pretok *p);
void ls_pretok_match_data_free(void *md);
/* Splits s[0..n) (valid UTF-8) into pieces and runs ls_tok_bpe on each. */
void ls_pretok_run(const ls_pretok *p, void *md, const char *s, size_t n, ls_tok_run *r);

/* BPE over one piece of raw bytes, appending ids to the run (tokenizer.c). */
void ls_tok_bpe(ls_tok_run *r, const char *piece, size_t n);

#endif
