/* tokenizer.h - the tokenizers of GGUF files: GPT-2 byte-level BPE built from the
 * vocab and merges (tokenizer.ggml.model = "gpt2") with the pre-tokenizer that the
 * file names (tokenizer.ggml.pre), and SentencePiece-style BPE driven by the token
 * scores with byte fallback (tokenizer.ggml.model = "llama": Llama 2, Mistral,
 * Gemma 3; spm.c).  Both have special and control tokens, BOS/EOS flags, and
 * streaming-safe detokenization. */
#ifndef LS_TOKENIZER_TOKENIZER_H
#define LS_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

/* GGUF tokenizer.ggml.token_type values */
enum {
    LS_TOKTYPE_NORMAL = 1,
    LS_TOKTYPE_UNKNOWN = 2,
    LS_TOKTYPE_CONTROL = 3,
    LS_TOKTYPE_USER_DEFINED = 4,
    LS_TOKTYPE_UNUSED = 5,
    LS_TOKTYPE_BYTE = 6,
};

/* Which algorithm a vocabulary uses (tokenizer.ggml.model). */
typedef enum {
    LS_TOKMODEL_GPT2 = 0, /* "gpt2": byte-level BPE over merges, after a regex pre-tokenizer */
    LS_TOKMODEL_SPM = 1,  /* "llama": SentencePiece BPE over scores, U+2581 for spaces, <0xXX> bytes */
} ls_tok_model;

typedef struct {
    uint32_t n_vocab;
    const gguf_str *tokens;     /* n_vocab token strings, as in the file (GPT2: byte-level encoded) */
    const int32_t *token_types; /* n_vocab entries, or NULL (all normal) */
    uint32_t n_merges;
    const gguf_str *merges;     /* "left right", in rank order */
    const char *pre;            /* pre-tokenizer name, e.g. "smollm", "gpt2", "llama3"; NULL = "gpt2" */
    int32_t bos_id, eos_id;     /* -1 when absent */
    int32_t eot_id;             /* extra end-of-turn token (e.g. <|im_end|>), -1 when absent */
    bool add_bos, add_eos;
    /* The fields below are read for LS_TOKMODEL_SPM only (zero for GPT2). */
    ls_tok_model model;
    const float *scores;        /* n_vocab merge scores (tokenizer.ggml.scores), or NULL (all 0) */
    int32_t unk_id;             /* token for a byte without a <0xXX> token; -1 when none
                                 * (note: 0, the zero-initialised value, is llama.cpp's default) */
    bool add_space_prefix;      /* prefix the text (and the text after each special token) with a space */
} ls_tokenizer_params;

typedef struct ls_tokenizer ls_tokenizer;

/* Copies what it needs from params.  Caller owns the result (ls_tokenizer_free). */
ls_tokenizer *ls_tokenizer_create(const ls_tokenizer_params *p, ls_err *err);
/* Reads tokenizer.ggml.* from a GGUF file. Unsupported models/pre-tokenizers give a clear error. */
ls_tokenizer *ls_tokenizer_from_gguf(const gguf_file *f, ls_err *err);
void ls_tokenizer_free(ls_tokenizer *t);
/* Convenience (tests, ctypes): gguf_open + ls_tokenizer_from_gguf + gguf_close. */
ls_tokenizer *ls_tokenizer_open_file(const char *path, ls_err *err);

uint32_t ls_tokenizer_n_vocab(const ls_tokenizer *t);
int32_t ls_tokenizer_bos(const ls_tokenizer *t);
int32_t ls_tokenizer_eos(const ls_tokenizer *t);
int32_t ls_tokenizer_eot(const ls_tokenizer *t); /* -1 when none */
/* Whether ls_tokenize's add_special prepends BOS / appends EOS (the file's flags). */
bool ls_tokenizer_adds_bos(const ls_tokenizer *t);
bool ls_tokenizer_adds_eos(const ls_tokenizer *t);
/* The token's LS_TOKTYPE_*, or 0 for an invalid id. */
int32_t ls_tokenizer_token_type(const ls_tokenizer *t, int32_t id);
/* true for EOS, EOT and any other token that ends generation (e.g. <|im_end|>, <|eot_id|>) */
bool ls_tokenizer_is_eog(const ls_tokenizer *t, int32_t id);
/* Id of an exact token string (e.g. "<|im_end|>"), or -1. */
int32_t ls_tokenizer_find(const ls_tokenizer *t, const char *piece);

/* Tokenizes len bytes of text.
 *   add_special:   prepend BOS / append EOS as the file's flags say
 *   parse_special: recognise control/user-defined token strings in the text
 *                  (e.g. "<|im_start|>") as single tokens.  SPM vocabularies
 *                  recognise their user-defined tokens (Gemma's "\n\n", "  ",
 *                  "<table>", ...) even without it, as llama.cpp and
 *                  SentencePiece do: they are part of the segmentation there.
 * Writes up to cap ids; *n_out gets the full count even when it exceeds cap
 * (then LS_E_RANGE is returned and the caller can retry with a larger buffer). */
ls_status ls_tokenize(const ls_tokenizer *t, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, size_t cap, size_t *n_out, ls_err *err);

/* The raw bytes a token stands for (GPT2: byte-level decoded; SPM: U+2581 as a
 * space, <0xXX> as its byte), as llama.cpp's token_to_piece gives them: control
 * tokens render as their text when `special` is true, else as nothing; SPM's
 * unused-type tokens render as nothing.  Returns the byte count, which may exceed
 * cap (then only cap bytes were written).  Invalid id: returns 0. */
size_t ls_token_bytes(const ls_tokenizer *t, int32_t id, bool special, char *buf, size_t cap);
/* The text of a whole sequence, as llama.cpp's llama_detokenize writes it:
 *   remove_special:  drop a leading BOS when the file adds BOS, and a trailing
 *                    EOS when it adds EOS
 *   unparse_special: render control tokens as their text (ls_token_bytes' special)
 * SPM vocabularies with add_space_prefix lose one leading space of the first
 * token's text -- the space the tokenizer prefixed -- except when remove_special
 * dropped a leading BOS (llama.cpp keeps it then).  No other clean-up (llama.cpp's
 * clean_spaces pass for GPT2 vocabularies is not applied).  Returns the byte count,
 * which may exceed cap (then only the first cap bytes were written). */
size_t ls_detokenize(const ls_tokenizer *t, const int32_t *ids, size_t n, bool remove_special,
                     bool unparse_special, char *out, size_t cap);
/* ls_utf8_valid_len: lockstep.h. */

/* Streaming detokenizer: holds back an incomplete UTF-8 sequence at a token
 * boundary until the bytes that complete it arrive.  It prints a continuation
 * (generated text), so it strips no leading space, as llama.cpp's per-token
 * token_to_piece does when it streams. */
typedef ls_detok ls_detok_stream; /* lockstep.h: ls_detok, ls_detok_init, ls_detok_flush */

/* Appends the printable text for token id to out (cap bytes); returns bytes written.
 * Only complete UTF-8 sequences are emitted; a byte that can never become valid
 * UTF-8 is emitted as U+FFFD. */
size_t ls_detok_push(ls_detok_stream *s, const ls_tokenizer *t, int32_t id, char *out, size_t cap);

#endif
