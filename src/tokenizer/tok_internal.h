/* tok_internal.h - shared between tokenizer.c (the vocabulary, GPT-2 BPE, the public
 * calls), pretok.c (pre-tokenizers) and spm.c (SentencePiece-style BPE).
 * Not part of the library's interface. */
#ifndef LS_TOKENIZER_TOK_INTERNAL_H
#define LS_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/err.h"

/* A pre-tokenizer: up to LS_PRETOK_MAX_STEPS steps applied in sequence, each
 * splitting every piece of the one before (pretok.c). */
#define LS_PRETOK_MAX_STEPS 6

typedef struct {
    int n;                           /* steps */
    int kind[LS_PRETOK_MAX_STEPS];   /* pretok.c's step kinds */
    void *re[LS_PRETOK_MAX_STEPS];   /* pcre2_code_8 * of each step */
} ls_pretok;

/* What a tokenizer.ggml.pre name selects. */
typedef struct {
    int def;            /* pretok.c's table of pre-tokenizers */
    bool ignore_merges; /* a piece that is a token is that token (llama.cpp's ignore_merges) */
    bool add_bos;       /* the default of tokenizer.ggml.add_bos_token */
} ls_pretok_info;

typedef struct {
    int32_t id;   /* -1: empty */
    uint32_t tag; /* the high half of the text's hash: most mismatches never touch the text */
} ls_str_slot;

typedef struct {
    uint64_t key; /* (left << 32) | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t id;   /* the merged token */
} ls_merge_slot;

/* SentencePiece-only state (model == LS_TOKMODEL_SPM), filled by ls_spm_init. */
typedef struct {
    float *scores;           /* n_vocab; a NaN score is stored as -inf */
    int32_t byte_tok[256];   /* byte fallback: the <0xXX> token, else the one-byte token, else -1 */
    uint64_t max_len;        /* longest token text in bytes: no longer bigram can be a token */
    bool add_space_prefix;
    /* special tokens (control, unknown, user-defined) for the text partition:
     * lens[lens_start[b] .. lens_start[b + 1]) are the distinct lengths, longest
     * first, of those whose text starts with byte b (lenmask[b]: bit L - 1 for
     * each length L <= 64); pair has bit (b0 << 8 | b1) set when one of length
     * >= 2 starts with bytes b0 b1. */
    uint32_t *lens;
    uint32_t lens_start[257];
    uint64_t lenmask[256];
    uint64_t pair[1024];
} ls_spm;

struct ls_tokenizer {
    ls_tok_model model;
    uint32_t n_vocab;
    char *text;          /* token strings as in the file, concatenated */
    uint64_t *text_off;  /* n_vocab + 1 */
    char *dec;           /* decoded bytes of each token (GPT2: byte-level; SPM: U+2581 -> ' ', <0xXX> -> byte) */
    uint64_t *dec_off;   /* n_vocab + 1 */
    int32_t *types;      /* n_vocab LS_TOKTYPE_* (SPM: after llama.cpp's by-name overrides, spm.c) */

    ls_str_slot *str_slots; /* string -> id, open addressing, load <= 1/2 */
    uint32_t str_mask;

    /* GPT2 only */
    ls_merge_slot *merges;
    uint32_t merge_mask;
    uint32_t n_merges;   /* usable merges */
    int32_t byte_tok[256]; /* token of each byte's byte-level char, or -1 */
    uint32_t byte_cp[256]; /* bytes_to_unicode */
    int32_t *special;    /* control/user-defined ids, by first byte, longest first */
    uint32_t special_start[257];
    ls_pretok pretok;
    bool ignore_merges;

    ls_spm spm;          /* SPM only */

    int32_t bos, eos, eot, unk;
    bool add_bos, add_eos;
    int32_t eog[16];
    int n_eog;
};

typedef struct ls_tok_run ls_tok_run;

/* Maps a tokenizer.ggml.pre name to a pre-tokenizer: 0 on success; -1 if the
 * name is unknown; -2 if llama.cpp knows it but this tokenizer cannot do what it
 * needs (*why says what). */
int ls_pretok_lookup(const char *name, ls_pretok_info *info, const char **why);
const char *ls_pretok_supported_names(void);
ls_status ls_pretok_init(ls_pretok *p, int def, ls_err *err);
void ls_pretok_free(ls_pretok *p);
/* Per-call PCRE2 match data (thread safety: never shared between calls). */
void *ls_pretok_match_data(const ls_pretok *p);
void ls_pretok_match_data_free(void *md);
/* Splits s[0..n) (valid UTF-8) into pieces, none empty, in order, and calls
 * piece(ctx, ...) on each. */
typedef void (*ls_pretok_piece_fn)(void *ctx, const char *s, size_t n);
void ls_pretok_run(const ls_pretok *p, void *md, const char *s, size_t n, ls_pretok_piece_fn piece, void *ctx);
/* For tests: the pieces of s[0..n) (valid UTF-8) under the named pre-tokenizer,
 * as end offsets in ends[0..*count).  0 on success, -1 for an unknown or
 * unsupported name, -2 if the regexes do not compile, -3 if cap is too small
 * (*count is then the number needed). */
int ls_pretok_split(const char *name, const char *s, size_t n, size_t *ends, size_t cap, size_t *count);
/* The number of pre-tokenizers in pretok.c's table, and the name of the
 * first name that selects each (tests and the fuzzer walk them all). */
int ls_pretok_count(void);
const char *ls_pretok_def_name(int def);

/* BPE over one piece of raw bytes, appending ids to the run (tokenizer.c). */
void ls_tok_bpe(ls_tok_run *r, const char *piece, size_t n);

/* tokenizer.c, for spm.c: the id of the token whose text is p[0..n), or -1 (a later
 * duplicate wins, as in llama.cpp); appending one id to the run's output; marking
 * the run failed (out of memory: ls_tokenize reports it). */
int32_t ls_tok_lookup(const ls_tokenizer *t, const char *p, size_t n);
void ls_tok_emit(ls_tok_run *r, int32_t id);
void ls_tok_fail(ls_tok_run *r);

/* spm.c.  ls_spm_init runs inside ls_tokenizer_create once the token strings, the
 * string table and the types are in place: it applies llama.cpp's by-name type
 * overrides, fills t->spm, t->dec/dec_off (allocated for the token text's size)
 * and adds the tokens that llama.cpp's names make end-of-generation.  ls_spm_free releases t->spm. */
ls_status ls_spm_init(ls_tokenizer *t, const ls_tokenizer_params *p, ls_err *err);
void ls_spm_free(ls_tokenizer *t);
/* Tokenizes text[0..len) (any bytes) between BOS and EOS: the special-token
 * partition, the space prefix and U+2581 escaping, the score-driven merges. */
void ls_spm_tokenize(const ls_tokenizer *t, ls_tok_run *r, const char *text, size_t len, bool parse_special);

#endif
