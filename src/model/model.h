/* model.h - a loaded model (weights, hyperparameters, tokenizer, chat template)
 * and a context that runs the forward pass over a batch of rows.
 *
 * Supported: the families of the architecture descriptor table (arch.h: llama and
 * mistral, qwen2, qwen3, gemma3).  Every hyperparameter comes from the GGUF
 * metadata. */
#ifndef LS_MODEL_MODEL_H
#define LS_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kernels/cpu/kernels.h"
#include "model/arch.h"
#include "backend/cpu/kv_store.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"

typedef struct {
    char arch[32];
    char name[128];         /* general.name, or "" */
    uint32_t n_vocab;
    uint32_t n_ctx_train;   /* {arch}.context_length */
    uint32_t n_embd;        /* {arch}.embedding_length */
    uint32_t n_layer;       /* {arch}.block_count */
    uint32_t n_head;        /* {arch}.attention.head_count */
    uint32_t n_head_kv;     /* {arch}.attention.head_count_kv (default n_head) */
    uint32_t n_ff;          /* {arch}.feed_forward_length */
    uint32_t head_dim;      /* n_embd / n_head, or {arch}.attention.key_length */
    uint32_t rope_dim;      /* {arch}.rope.dimension_count (default head_dim) */
    float rope_base;        /* {arch}.rope.freq_base (default 10000) */
    float rope_freq_scale;  /* 1 / {arch}.rope.scaling.factor for linear and YaRN scaling, else 1 */
    bool rope_yarn;         /* rope.scaling.type = yarn (the fields below; docs/numerics.md) */
    uint32_t yarn_n_ctx_orig; /* rope.scaling.original_context_length (default: context_length) */
    float yarn_beta_fast, yarn_beta_slow; /* rope.scaling.yarn_beta_fast / _slow (default 32, 1) */
    float yarn_attn_factor; /* rope.scaling.attn_factor (default 1) */
    float norm_eps;         /* {arch}.attention.layer_norm_rms_epsilon */
    bool tied_output;       /* no output.weight: the head reuses token_embd */
    uint32_t n_nextn;       /* {arch}.nextn_predict_layers: MTP modules after the n_layer blocks (0 or 1) */
    /* Family features (src/model/arch.c) */
    float rope_base_swa;    /* RoPE base of the sliding-window layers (gemma3: 10000) */
    uint32_t n_swa;         /* {arch}.attention.sliding_window, or 0 */
    uint32_t n_ctx_file;    /* {arch}.context_length as the file says (n_ctx_train is the same) */
    float embd_scale;       /* the embedding rows are multiplied by this (gemma: sqrt(n_embd)), or 1 */
} ls_hparams;

/* ls_model, ls_model_params, ls_model_load and ls_model_free are public (lockstep.h). */

/* ls_model_load from a file already open; takes g (closed on failure, else owned by the
 * model).  p->path names the file in messages.  The file must still have all its bytes
 * (gguf_check_intact) before the weights are read and after: one truncated while
 * mapped is an LS_E_IO error here, not a SIGBUS later. */
typedef struct gguf_file gguf_file;
ls_model *ls_model_load_gguf(gguf_file *g, const ls_model_params *p, ls_err *err);
/* The file the model was loaded from (for messages and the probe's memo key). */
const char *ls_model_path(const ls_model *m);

const ls_hparams *ls_model_hparams(const ls_model *m);
/* One row of n_embd floats through the model's output norm (RMSNorm, the scalar recipe):
 * what the head reads; the engine's on_hidden (embeddings). */
void ls_model_out_norm_row(const ls_model *m, const float *x, float *out);
const ls_tokenizer *ls_model_tokenizer(const ls_model *m);
const gguf_file *ls_model_gguf(const ls_model *m);
/* NULL when the file has no usable template and no override was given;
 * then ls_model_template_error says why. */
const ls_chat_template *ls_model_chat_template(const ls_model *m);
const char *ls_model_template_error(const ls_model *m);
uint64_t ls_model_weight_bytes(const ls_model *m); /* bytes of weights read per token */
/* Whether the file carries a DeepSeek-V3/GLM-style multi-token-prediction module
 * (llama.cpp's names: blk.{n_layer}.nextn.{eh_proj,enorm,hnorm,shared_head_norm}
 * plus that block's own attention and FFN; optional nextn.embed_tokens and
 * nextn.shared_head_head, else the model's embedding and head are shared). */
bool ls_model_has_mtp(const ls_model *m);
/* The tokens the MTP module's head covers (lockstep.mtp.head_vocab), ascending: its
 * forward's logits are theirs, in that order.  0 (and *ids NULL): the whole vocabulary. */
int32_t ls_model_mtp_vocab(const ls_model *m, const int32_t **ids);
/* A draft's weight bytes as a fraction of a target step's (0 without a module). */
double ls_model_mtp_cost(const ls_model *m);
/* Loaded with LS_MODEL_LOAD_META: metadata and tokenizer only, no weights to run. */
bool ls_model_meta_only(const ls_model *m);
/* Builds the weight layout an ISA's kernels need beyond the common one (kernels.h,
 * ls_wmat_prepare), once per (model, ISA); thread-safe.  ls_fwd_create calls it. */
ls_status ls_model_prepare(const ls_model *m, ls_isa isa, ls_err *err);

/* ---- the forward pass over a ragged batch ---------------------------------
 * One call runs n rows that may belong to different sequences, at any positions:
 * every linear layer executes once over all n rows; attention reads each row's own
 * sequence through its block table.  A row's K/V is written to its sequence's block
 * before any row reads it, so a sequence's rows in one batch are causal among
 * themselves.  Every kernel's per-row bits are independent of the other rows, so a
 * row's logits do not depend on what else is in the batch. */
typedef struct ls_fwd ls_fwd; /* workspace: thread pool, RoPE tables, activations */
typedef struct {
    int32_t n_rows;    /* max rows per call */
    int32_t n_ctx;     /* max position + 1 */
    int32_t n_threads; /* 0 = 1 */
    int32_t isa;       /* -1 = from LOCKSTEP_ISA or the best the CPU has; else an ls_isa */
    bool narrow;       /* force the single-row matmul kernel for every row (benchmarks) */
    const int32_t *layers; /* run only these layers, in this order (self-speculation); NULL = all */
    int32_t n_layers;
    const ls_mm_family *fam, *fam_parity; /* matmul families (kernels.h) for rows without / with a
                            * parity need; NULL = ls_mm_wide */
    unsigned faults;       /* LS_FAULT_* (kernels.h): tests only, 0 otherwise */
    bool mtp;              /* run the model's MTP module instead of its blocks: each row's input is
                            * eh_proj([enorm(embed(token)); hnorm(hidden)]), with ls_batch.embd_in as the
                            * hidden; its one block keeps K/V at layer 0 of the store; its own head */
    ls_pool *pool;         /* borrowed thread pool (n_threads ignored), or NULL: create one */
} ls_fwd_params;
ls_fwd *ls_fwd_create(const ls_model *m, ls_fwd_params p, ls_err *err);
void ls_fwd_free(ls_fwd *f);
ls_isa ls_fwd_isa(const ls_fwd *f);
/* The family rows that need parity run (the probe withdraws a failing family; NULL =
 * ls_mm_wide), and the one the others run. */
void ls_fwd_set_parity_family(ls_fwd *f, const ls_mm_family *fam);
const ls_mm_family *ls_fwd_parity_family(const ls_fwd *f);
const ls_mm_family *ls_fwd_family(const ls_fwd *f);
/* Matmul rows this workspace has run with the parity family (parity) or the other one. */
uint64_t ls_fwd_rows(const ls_fwd *f, bool parity);
unsigned ls_fwd_faults(const ls_fwd *f);
int32_t ls_fwd_n_rows(const ls_fwd *f);
ls_pool *ls_fwd_pool(ls_fwd *f);
int32_t ls_fwd_n_ctx(const ls_fwd *f);
int ls_fwd_n_threads(const ls_fwd *f);

typedef struct {
    int32_t n;                     /* rows, 1..n_rows */
    const int32_t *token;          /* (n) token ids, < n_vocab */
    const int32_t *pos;            /* (n) positions, < n_ctx */
    const int32_t *seq;            /* (n) index into tables */
    const int32_t *const *tables;  /* per sequence: its block table (block of position p: p >> LS_KV_BLOCK_SHIFT) */
    const int32_t *logit_row;      /* (n) row of `logits` that receives this row's logits, or -1 for none */
    const uint8_t *need_parity;    /* (n) nonzero: the row must get canonical bits; NULL = every row */
    const float *embd_in;          /* (n x n_embd) MTP only: the hidden state each row continues from */
    float *hidden_out;             /* (n x n_embd) optional: every row's last hidden state (before the
                                    * final norm): what an MTP drafter continues from */
} ls_batch;
void ls_fwd_run(ls_fwd *f, ls_kv_store *kv, const ls_batch *b, float *logits);

/* ---- context: one sequence over a contiguous set of KV blocks ------------ */
typedef struct ls_ctx ls_ctx;

typedef struct {
    int32_t n_ctx;     /* KV positions; 0 = min(model's n_ctx_train, 4096) */
    int32_t n_batch;   /* max rows per forward; 0 = 512 */
    int32_t n_threads; /* 0 = 1 */
    int32_t isa;       /* -1 = from LOCKSTEP_ISA or the best the CPU has; else an ls_isa */
    const int32_t *layers; /* run only these layers (a layer-skip draft); NULL = all */
    int32_t n_layers;
    ls_pool *pool;         /* borrowed thread pool (a drafter shares its engine's), or NULL */
} ls_ctx_params;

ls_ctx *ls_ctx_create(const ls_model *m, ls_ctx_params p, ls_err *err);
size_t ls_ctx_params_sizeof(void); /* for foreign-function bindings to check their mirror */
void ls_ctx_free(ls_ctx *c);
int32_t ls_ctx_n_ctx(const ls_ctx *c);
ls_isa ls_ctx_isa(const ls_ctx *c);
const ls_model *ls_ctx_model(const ls_ctx *c);
const ls_tokenizer *ls_ctx_tokenizer(const ls_ctx *c);
int ls_ctx_n_threads(const ls_ctx *c);

/* Runs tokens[0..n) at positions pos0..pos0+n-1 (in chunks of n_batch), writing
 * their K/V into the cache.  If logits is non-NULL it receives n_vocab floats:
 * all n rows when all_logits, else only the last row's.
 * Positions past n_ctx give LS_E_RANGE. */
ls_status ls_ctx_eval(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *logits,
                      bool all_logits, ls_err *err);
/* ls_ctx_eval, writing every row's last hidden state (before the final norm: what an MTP
 * module continues from) into hidden (n x n_embd) instead of logits. */
ls_status ls_ctx_eval_hidden(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *hidden,
                             ls_err *err);

#endif
