/* lockstep.h - the public API of lockstep, an inference engine for quantized LLMs in
 * GGUF files whose promise is parity: a request's logits and tokens are byte-identical
 * however it is computed (plainly or speculatively, alone or batched, prefilled in one
 * chunk or many, served from the prefix cache, on any thread count and instruction set).
 *
 * Everything a program needs to embed lockstep is here; nothing else under src/ is
 * part of the interface (the shared library exports these symbols only).  A worked
 * example: docs/embedding.md.
 *
 * Conventions
 *   - Long-lived objects are opaque handles, each created from a params struct and
 *     released by its _free: ls_model, ls_engine, ls_drafter.
 *   - Every params, request, result and info struct starts with `size`: set it with
 *     the _INIT macro (or to sizeof the struct).  The library reads only the fields a
 *     caller's struct has, so a program built against an older header keeps working.
 *   - Functions that can fail return an ls_status and fill a caller-owned ls_err whose
 *     message names what was wrong (a flag, a tensor, a byte offset).  Nothing calls
 *     exit(); a programmer error (a broken invariant) aborts with file:line.
 *   - Ownership is written beside each function that hands out memory; free such
 *     memory with the paired _free, or with free() where it says so.
 *   - No global mutable state: two engines in one process share nothing but the
 *     read-only model they were created from.
 *
 * Threads: an ls_model is immutable once loaded and may be shared by engines in any
 * threads.  ls_engine_submit / _cancel / _cancel_all / _idle / _get_stats may be
 * called from any thread; ls_engine_step, ls_engine_generate, ls_engine_score and
 * ls_engine_probe from one driving thread at a time. */
#ifndef LOCKSTEP_H
#define LOCKSTEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LS_API __attribute__((visibility("default")))
#else
#define LS_API
#endif

#define LOCKSTEP_VERSION "0.10.0"
/* The canonical numeric recipes' version (docs/numerics.md): two builds with the same
 * recipe version give the same bits for the same model file and request. */
#define LOCKSTEP_RECIPE_VERSION 1

/* ---- errors --------------------------------------------------------------------- */
typedef enum {
    LS_OK = 0,
    LS_E_IO = 1,          /* open/read/mmap failed */
    LS_E_FORMAT = 2,      /* malformed file contents */
    LS_E_UNSUPPORTED = 3, /* well-formed, but not something lockstep implements */
    LS_E_NOMEM = 4,       /* allocation failed */
    LS_E_INVALID = 5,     /* bad argument, flag, prompt or request */
    LS_E_RANGE = 6,       /* value out of range (e.g. a prompt longer than the context) */
} ls_status;

#define LS_NO_OFFSET UINT64_MAX

typedef struct {
    ls_status code;
    uint64_t offset;      /* byte offset in the file the error refers to, or LS_NO_OFFSET */
    char msg[512];
} ls_err;

LS_API const char *ls_status_name(ls_status code);
LS_API void ls_err_clear(ls_err *err);

/* ---- instruction sets ------------------------------------------------------------- */
/* LS_ISA_AMX: the AVX-512 kernels, with Intel AMX tile products in multi-row matmuls. */
typedef enum {
    LS_ISA_AUTO = -1,
    LS_ISA_SCALAR = 0,
    LS_ISA_AVX2 = 1,
    LS_ISA_AVXVNNI = 2,
    LS_ISA_AVX512 = 3,
    LS_ISA_AMX = 4
} ls_isa;
#define LS_ISA_COUNT 5

LS_API const char *ls_isa_name(ls_isa isa);
/* The best instruction set this CPU (and OS) supports, minus LOCKSTEP_CPU_HIDE (AMX
 * only when asked for: LOCKSTEP_ISA=amx). */
LS_API ls_isa ls_isa_best(void);
LS_API bool ls_isa_supported(ls_isa isa);
/* "scalar", "avx2", "avxvnni", "avx512", "amx"; LS_E_UNSUPPORTED when the CPU lacks it. */
LS_API ls_status ls_isa_from_name(const char *name, ls_isa *out, ls_err *err);

/* ---- sampling ------------------------------------------------------------------------
 * The random draw for position p depends only on (seed, p), so a token never depends on
 * how it was computed. */
typedef struct {
    int32_t id;
    float bias;        /* added to the token's logit */
} ls_logit_bias;
typedef struct {
    float temperature; /* 0 = greedy (argmax, lowest id on ties) */
    int32_t top_k;     /* 0 = off */
    float top_p;       /* 1 = off; (0, 1] */
    uint64_t seed;
    /* Logit modifiers, applied in this order before everything above (docs/numerics.md);
     * zero-initialized = off.  The engine copies logit_bias at submission. */
    const ls_logit_bias *logit_bias;
    int32_t n_logit_bias;
    float repeat_penalty;    /* 0 or 1 = off: l > 0 ? l / r : l * r, each distinct token of the window once */
    int32_t repeat_last_n;   /* the window: the last n tokens of the sequence (prompt included); -1 = all */
    float frequency_penalty; /* over the generated tokens: l -= count * frequency + presence */
    float presence_penalty;
    float min_p;             /* 0 = off: after top-p, keeps p >= min_p * p_max */
} ls_sampler_params;

/* A sampled token's log-probabilities under the (unmodified) logits, and the n_top best
 * (higher logit first, the lower id on ties): log-softmax with the max found by `>` from
 * logits[0], a sequential double sum of exp(l - max), each result rounded to float once.
 * What the server returns as `logprobs`; a pure function of the logits row. */
#define LS_LOGPROBS_TOP_MAX 20
typedef struct ls_logprobs {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_tok[LS_LOGPROBS_TOP_MAX];
    float top_lp[LS_LOGPROBS_TOP_MAX];
} ls_logprobs;
/* n_top is clamped to 0..LS_LOGPROBS_TOP_MAX; token must be in [0, n_vocab). */
LS_API void ls_sample_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top, ls_logprobs *out);

/* ---- constrained decoding (ls_request.grammar) ------------------------------------------
 * GBNF text as llama.cpp accepts it; docs/server.md lists the syntax and the schema
 * keywords.  The results are NUL-terminated; free them with free(). */
/* LS_OK when gbnf (len bytes) compiles; else LS_E_INVALID naming the line, column and
 * what was expected (or LS_E_NOMEM). */
LS_API ls_status ls_grammar_check(const char *gbnf, size_t len, ls_err *err);
/* The GBNF of a JSON Schema (len bytes of JSON text).  NULL on error, err naming the
 * keyword or the path ("at /properties/a: ..."); unsupported keywords are errors. */
LS_API char *ls_json_schema_to_gbnf(const char *schema_json, size_t len, ls_err *err);
/* Any JSON object (response_format json_object): a static string. */
LS_API const char *ls_json_object_gbnf(void);

/* ---- models --------------------------------------------------------------------------- */
typedef struct ls_model ls_model;

typedef struct {
    size_t size;
    const char *path;           /* the GGUF file */
    const char *chat_template;  /* NULL: detect from the file; else a family name (override) */
    const char *chat_template_file; /* NULL: none; else a Jinja template file used in place of the
                                     * file's template (a bad file fails the load, naming it) */
    int32_t load;               /* LS_MODEL_LOAD_FULL (0), or LS_MODEL_LOAD_META: the metadata, the
                                 * tokenizer, the template and the checked tensor table, no weight
                                 * read or repacked (info, tokenize); no engine runs over it */
    const char *cache_dir;      /* NULL: none; else a directory where the file's SHA-256 is kept, keyed by
                                 * the file's identity (device, inode, size, modification and change
                                 * times), so a later load of the unchanged file need not read it all */
    const char *mtp_path;       /* NULL: none; else a GGUF file holding a multi-token-prediction module
                                 * fitted to this model (tools/fit_mtp.py; --spec mtp --draft-model):
                                 * its nextn block is loaded as the model's own.  Refused, naming both
                                 * files, when it was fitted to another model (its
                                 * lockstep.mtp.target_sha256) or the model has a module already */
} ls_model_params;
enum { LS_MODEL_LOAD_FULL = 0, LS_MODEL_LOAD_META = 1 };
#define LS_MODEL_PARAMS_INIT {.size = sizeof(ls_model_params)}

/* Loads and validates a model (every count, offset and shape is checked; a refused file
 * names the tensor, type or key).  A model split with gguf-split is loaded by its first
 * shard's path (NAME-00001-of-0000N.gguf; the others beside it).  Caller owns the result
 * (ls_model_free). */
LS_API ls_model *ls_model_load(const ls_model_params *p, ls_err *err);
LS_API void ls_model_free(ls_model *m);

typedef struct {
    size_t size;
    char arch[32];            /* general.architecture */
    char name[128];           /* general.name, or "" */
    uint32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim;
    uint64_t weight_bytes;    /* bytes of weights read per token */
    bool has_mtp;             /* carries a multi-token-prediction module (--spec mtp) */
    char chat_template[32];   /* the chat template family in use, or "" when none */
    char sha256[65];          /* of the model file, hex (computed on first call) */
    char tool_format[16];     /* how the chat template writes tool calls: "hermes" (its own <tool_call>
                               * format), "generic" (none of its own: JSON, docs/server.md), "" without a template */
} ls_model_info;
#define LS_MODEL_INFO_INIT {.size = sizeof(ls_model_info)}
LS_API ls_status ls_model_get_info(const ls_model *m, ls_model_info *out, ls_err *err);
/* Everything `lockstep info --json` prints: hyperparameters, metadata, tensors with
 * their types and whether each is supported.  Caller frees the string with free(). */
LS_API char *ls_model_describe_json(const ls_model *m, ls_err *err);

/* Tokenizes len bytes.  add_special: BOS/EOS as the file says; parse_special: control
 * token strings in the text (e.g. "<|im_start|>") become single tokens.  Writes up to
 * cap ids; *n_out gets the full count (LS_E_RANGE when it exceeds cap: retry larger). */
LS_API ls_status ls_model_tokenize(const ls_model *m, const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t *out, size_t cap, size_t *n_out, ls_err *err);
/* The raw bytes a token stands for (control tokens as their text when special, else
 * nothing); returns the count, which may exceed cap.  An invalid id gives 0. */
LS_API size_t ls_model_token_bytes(const ls_model *m, int32_t id, bool special, char *buf, size_t cap);
/* The text of a whole token sequence, as llama.cpp's llama_detokenize writes it
 * (remove_special: drop a leading BOS / trailing EOS the file adds; unparse_special:
 * control tokens as their text); returns the byte count, which may exceed cap. */
LS_API size_t ls_model_detokenize(const ls_model *m, const int32_t *ids, size_t n, bool remove_special,
                                  bool unparse_special, char *out, size_t cap);
/* Length of the well-formed UTF-8 sequence at p[0..n) (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), or 0 if p does not start with one. */
LS_API size_t ls_utf8_valid_len(const unsigned char *p, size_t n);
/* Whether a token ends generation (EOS, EOT, <|im_end|>, ...). */
LS_API bool ls_model_is_eog(const ls_model *m, int32_t id);

/* Streaming detokenization that never splits a UTF-8 character. */
typedef struct {
    char pending[8];
    int n_pending;
} ls_detok;
LS_API void ls_detok_init(ls_detok *s);
/* Appends the printable text for token id to out (cap bytes); returns bytes written. */
LS_API size_t ls_model_detok_push(const ls_model *m, ls_detok *s, int32_t id, char *out, size_t cap);
/* Flushes what is pending (an incomplete sequence becomes U+FFFD). */
LS_API size_t ls_detok_flush(ls_detok *s, char *out, size_t cap);

typedef struct {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content;
} ls_chat_msg;
/* Renders a conversation with the model's chat template (caller frees *out with free()).
 * add_generation_prompt appends the assistant turn header.  A model without a usable
 * template gives LS_E_UNSUPPORTED saying why (and that --chat-template overrides it). */
LS_API ls_status ls_model_apply_chat(const ls_model *m, const ls_chat_msg *msgs, size_t n, bool add_generation_prompt,
                                     char **out, ls_err *err);
/* Template variables, as a chat template reads them (vLLM's and llama-server's
 * `chat_template_kwargs`).  A template that does not use a variable ignores it, as jinja2
 * does. */
typedef struct {
    size_t size;         /* sizeof(ls_chat_opts) (LS_CHAT_OPTS_INIT) */
    int enable_thinking; /* Qwen 3's: -1 not passed (the template's default: thinking), 0 false
                          * (an empty think block opens the reply), 1 true */
} ls_chat_opts;
#define LS_CHAT_OPTS_INIT {.size = sizeof(ls_chat_opts), .enable_thinking = -1}
/* ls_model_apply_chat with template variables (opts NULL: LS_CHAT_OPTS_INIT). */
LS_API ls_status ls_model_apply_chat_opts(const ls_model *m, const ls_chat_msg *msgs, size_t n,
                                          bool add_generation_prompt, const ls_chat_opts *opts, char **out,
                                          ls_err *err);

/* ---- engines: many sequences, one forward per step -------------------------------------
 * An engine owns a paged KV cache with a prefix cache, a thread pool and its kernel
 * selection.  Each step runs every running sequence's rows (decode rows, prefill chunks,
 * verify blocks of drafted tokens) in one forward. */
typedef struct ls_engine ls_engine;

typedef struct {
    size_t size;
    int32_t n_ctx;        /* max positions per sequence; 0 = min(trained, 4096) */
    int64_t kv_mem;       /* bytes for the KV cache; 0 = n_ctx * n_seq_max positions */
    int32_t n_seq_max;    /* sequences running at once; 0 = 8 */
    int32_t step_tokens;  /* per-step token budget (rows per forward); 0 = 512 */
    int32_t n_threads;    /* 0 = 1 */
    ls_isa isa;           /* LS_ISA_AUTO = $LOCKSTEP_ISA, else the best the CPU has */
    const char *kernels;  /* matmul family by name: "auto" (NULL), "wide", "narrow" (every row through the
                           * single-row kernel: the same bits, the "narrow pin" other engines use) */
    bool no_prefix_cache;
    int32_t draft_max;    /* the longest draft a verify block may carry (0 = no speculation) */
    bool allow_inexact;   /* keep speculating when the probe declined (default: fail closed) */
    unsigned reserved0;   /* unused: keeps the offsets of the fields after it */
    const char *device;   /* where the forwards run: "cpu" (NULL) or "cuda" (a CUDA build, docs/cuda.md) */
    /* The persistent prefix cache (docs/server.md, --cache-dir): full KV blocks are written
     * to files in this directory when the request that computed them ends, and loaded on a
     * prefix-cache miss, each checked against the model's sha256, the recipe version and
     * the KV layout.  NULL: none.  CPU and CUDA backends (one without block read/write
     * refuses it at creation). */
    const char *cache_dir;
    int64_t cache_dir_max;  /* bytes the directory's block files may take; 0 = 1 GiB (LRU deletion) */
    void (*on_log)(void *ud, const char *msg); /* warnings (a cache file ignored, and why); NULL: stderr */
    void *log_ud;
} ls_engine_params;
#define LS_ENGINE_PARAMS_INIT {.size = sizeof(ls_engine_params), .isa = LS_ISA_AUTO}

/* LS_FINISH_ERROR: the engine could not go on with this request (out of memory while it
 * ran, or its grammar's token mask went over its work budget); the text so far is intact,
 * the other requests are unaffected. */
typedef enum { LS_FINISH_STOP = 0, LS_FINISH_LENGTH = 1, LS_FINISH_CANCELLED = 2, LS_FINISH_ERROR = 3 } ls_finish;
LS_API const char *ls_finish_name(ls_finish f);

typedef struct {
    uint64_t id;
    int32_t token;          /* the sampled token, or with `prompt` the prompt's token; -1: finish only */
    int32_t pos;            /* the token's position: `logits` are those of position pos - 1, which predict it */
    bool prompt;            /* a prompt token with its logits (want_prompt_logits), not a sampled one */
    const float *logits;    /* with want_logits / want_prompt_logits: n_vocab floats (valid during the callback) */
    const char *text;       /* newly final text (stop-string prefixes are held back) */
    size_t text_len;
    bool done;              /* the last event of the request */
    ls_finish finish;       /* when done */
    int32_t n_prompt, n_gen;
    int32_t n_cached;       /* prompt positions served by the prefix cache (last admission) */
    int32_t n_drafted, n_accepted; /* drafted tokens so far, and how many were accepted */
    double prompt_ms;       /* submit to first token */
    double gen_ms;          /* first token to this event */
} ls_event;

typedef struct {
    size_t size;
    const int32_t *prompt;
    int32_t n_prompt;
    ls_sampler_params sampling;
    int32_t max_tokens;       /* < 0 = until the context is full; 0 is invalid */
    const int32_t *stop_tokens; /* besides the model's end-of-generation tokens */
    int32_t n_stop_tokens;
    const char *const *stop;  /* stop strings: generation ends before the first match */
    int32_t n_stop;
    bool ignore_eos;
    bool no_parity;           /* this request's rows may run a non-canonical kernel family */
    int32_t prefill_chunk;    /* most prompt tokens per step for this request; 0 = the budget */
    bool want_logits;         /* every sampled token's logits in its event */
    bool want_prompt_logits;  /* also every prompt position's logits (events with prompt set); the
                               * prefix cache is then not read for this request (it is still filled) */
    /* Speculation hook (ls_drafter_attach fills these): propose up to `max` tokens to follow
     * hist[0..n_hist); the engine verifies them in one block and keeps the longest prefix
     * plain decoding would produce.  Ignored when draft_max is 0 or the probe declined. */
    int32_t (*draft)(void *draft_ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max);
    void *draft_ud;
    /* Optional: each position's last hidden state (n_embd floats) as its K/V becomes part of
     * the sequence, in position order (MTP drafters continue from it). */
    void (*draft_observe)(void *draft_ud, int32_t pos, const float *hidden);
    void (*on_event)(void *ud, const ls_event *ev); /* called from the stepping thread */
    void *ud;
    /* Constrained decoding: GBNF grammar text (llama.cpp's syntax, start rule `root`;
     * docs/server.md), NUL-terminated, or NULL for none.  Compiled at ls_engine_submit
     * (a bad grammar is LS_E_INVALID naming the line, column and what was expected; the
     * text may be freed once submit returns).  Each sampled token is drawn from the
     * tokens the grammar allows after the tokens generated so far (the same recipe over
     * that subset: docs/numerics.md); end-of-generation tokens only once the grammar is
     * complete, and the request ends (LS_FINISH_STOP) when nothing more can follow. */
    const char *grammar;
    /* Optional (embeddings): each prompt position's final hidden state after the model's
     * output norm (n_embd floats; the norm in its scalar recipe), called with ud as its
     * row runs, in position order.  A position run again (after a preemption) is reported
     * again with the same bits.  The prefix cache is then not read for this request. */
    void (*on_hidden)(void *ud, int32_t pos, const float *hidden);
    /* Optional: prompt positions prefilled so far of n_prompt, after each step that ran some
     * (a progress display; called from the stepping thread; nothing about the result depends
     * on it).  A preempted request's prefill starts again and is reported again. */
    void (*on_prefill)(void *prefill_ud, int32_t done, int32_t n_prompt);
    void *prefill_ud;
} ls_request;
#define LS_REQUEST_INIT {.size = sizeof(ls_request), .sampling = {.top_p = 1.0f}, .max_tokens = -1}

LS_API ls_engine *ls_engine_create(const ls_model *m, const ls_engine_params *p, ls_err *err);
LS_API void ls_engine_free(ls_engine *e);
/* Checks the request (names what is wrong: empty prompt, bad token, a prompt beyond the
 * context, more KV than the whole cache, bad sampling) and queues it; the request's memory
 * may be reused once this returns. */
LS_API ls_status ls_engine_submit(ls_engine *e, const ls_request *r, uint64_t *id, ls_err *err);
/* The request ends with LS_FINISH_CANCELLED at the next step; unknown ids are ignored. */
LS_API void ls_engine_cancel(ls_engine *e, uint64_t id);
LS_API void ls_engine_cancel_all(ls_engine *e);
/* Runs one step (one forward, or none when there is nothing to do).  *n_rows (optional):
 * the batch size. */
LS_API ls_status ls_engine_step(ls_engine *e, int32_t *n_rows, ls_err *err);
LS_API bool ls_engine_idle(ls_engine *e);

typedef struct {
    size_t size;
    int32_t n_waiting, n_running;
    int32_t kv_blocks, kv_used, kv_cached_idle, kv_free;
    int32_t n_ctx, n_seq_max, step_tokens;
    uint64_t steps, rows, preemptions, prefix_hit_tokens, evictions;
    uint64_t drafted, accepted;
    uint64_t disk_loaded, disk_written, disk_rejected; /* --cache-dir: blocks loaded, written, files ignored */
} ls_engine_stats;
#define LS_ENGINE_STATS_INIT {.size = sizeof(ls_engine_stats)}
/* Fills the first s->size bytes of *s (set s->size with LS_ENGINE_STATS_INIT). */
LS_API void ls_engine_get_stats(ls_engine *e, ls_engine_stats *s);

typedef struct {
    size_t size;
    ls_isa isa;               /* the instruction set in use */
    int32_t n_threads, n_ctx, n_seq_max, step_tokens, draft_max;
    char kernels[32];         /* the family rows that need parity run */
    char kernels_free[32];    /* the family the other rows run */
    char device[80];          /* "cpu", or "cuda: <the device's name>" */
} ls_engine_info;
#define LS_ENGINE_INFO_INIT {.size = sizeof(ls_engine_info)}
LS_API void ls_engine_get_info(const ls_engine *e, ls_engine_info *out);

/* A whole request, synchronously: submits r, steps the engine until it is done (other
 * queued requests share those steps), and collects what it produced.  r->on_event is
 * still called (for streaming).  The engine must not be stepped by another thread
 * meanwhile.  Free the result with ls_result_free. */
typedef struct {
    size_t size;
    int32_t *tokens;          /* generated ids (EOS/EOT not included) */
    int32_t n_tokens;
    char *text;               /* NUL-terminated */
    size_t text_len;
    float *logits;            /* with want_logits / want_prompt_logits: n_logits rows of n_vocab floats */
    int32_t n_logits;
    int32_t logits_pos0;      /* the position of the first row (0 with prompt logits, else n_prompt - 1) */
    ls_finish finish;
    int32_t n_prompt, n_cached, n_drafted, n_accepted;
    int32_t n_steps;          /* engine steps that produced tokens after the first */
    double prompt_ms, gen_ms;
} ls_result;
#define LS_RESULT_INIT {.size = sizeof(ls_result)}
LS_API ls_status ls_engine_generate(ls_engine *e, const ls_request *r, ls_result *out, ls_err *err);
LS_API void ls_result_free(ls_result *r);
/* The logits at every position of tokens[0..n) (row i predicts token i + 1; the last
 * row follows the whole sequence): logits must hold n * n_vocab floats.  The same bits as
 * those positions get in any request. */
LS_API ls_status ls_engine_score(ls_engine *e, const int32_t *tokens, int32_t n, float *logits, ls_err *err);

/* ---- the parity probe --------------------------------------------------------------------
 * Certifies the engine's live configuration by running requests through the engine itself
 * (its forward, kernel families, scheduler, paged KV blocks as the allocator hands them
 * out, prefix cache) and comparing logits byte for byte over several random draws of
 * prompts from the model's vocabulary:
 *   batch_mix        a request alone vs the same request sharing its steps with others'
 *                    decode rows, prefill chunks and verify blocks (P2)
 *   chunked_prefill  one prefill chunk vs chunks of 1..5 tokens (P3)
 *   prefix_cache     a prompt served partly from the prefix cache (P3)
 *   block_vs_chain   drafts verified in blocks (some accepted, one rejected) vs plain
 *                    decoding, at temperature 0 and with a seeded sampler (P1, P6)
 *   threads          the live thread count vs 1 thread (P4)
 *   isa              the live instruction set vs the scalar reference (P5)
 * If the family for rows that need parity is not canonical and fails, it is withdrawn for
 * those rows (verdict scoped) and the probe runs again; if a canonical family fails, the
 * verdict is failed and the engine declines drafts from then on unless allow_inexact.
 * The engine must be idle; the probe's own requests leave no trace in its statistics. */
typedef enum { LS_VERDICT_VERIFIED = 0, LS_VERDICT_SCOPED = 1, LS_VERDICT_FAILED = 2, LS_VERDICT_UNPROBED = 3 } ls_verdict;
LS_API const char *ls_verdict_name(ls_verdict v);

typedef enum {
    LS_AXIS_BATCH_MIX = 0,
    LS_AXIS_CHUNKED_PREFILL,
    LS_AXIS_PREFIX_CACHE,
    LS_AXIS_BLOCK_VS_CHAIN,
    LS_AXIS_THREADS,
    LS_AXIS_ISA,
    LS_AXIS_COUNT
} ls_axis;
LS_API const char *ls_axis_name(ls_axis a);
typedef enum { LS_AXIS_PASSED = 0, LS_AXIS_FAILED = 1, LS_AXIS_NOT_CHECKED = 2 } ls_axis_state;

typedef struct {
    size_t size;
    int32_t draws;            /* random draws (at least 3; 0 = 3) */
    uint64_t seed;            /* of the draws (0 = a fixed default) */
    const char *memo_dir;     /* memoize the verdict per (model, binary, configuration) here; NULL: no memo */
    const char *config;       /* anything else that defines the configuration (e.g. the drafter) */
    bool refresh;             /* probe even when memoized, and replace the memo */
} ls_probe_params;
#define LS_PROBE_PARAMS_INIT {.size = sizeof(ls_probe_params)}

typedef struct {
    size_t size;
    ls_verdict verdict;
    ls_axis_state axis[LS_AXIS_COUNT];
    char why_not[LS_AXIS_COUNT][64]; /* for axes not checked: why (e.g. "one sequence per step") */
    char kernels_before[32], kernels_after[32]; /* the parity family before and after any scoping */
    int32_t draws, n_rows;    /* draws made, and logits rows compared */
    int32_t drafted, accepted; /* by the verify-block requests */
    bool memoized;
    double ms;
    char detail[256];         /* the first mismatch ("batch_mix: draw 1, position 17: logits differ"), or "" */
    /* Where ms went (0 when memoized): creating the one-thread and scalar engines; the
     * reference requests alone; the mixes (batch_mix, chunked_prefill, prefix_cache,
     * block_vs_chain); the one-thread reruns (threads); the scalar forwards (isa). */
    double ms_setup, ms_ref, ms_mix, ms_threads, ms_isa;
} ls_probe_result;
#define LS_PROBE_RESULT_INIT {.size = sizeof(ls_probe_result)}
/* Returns an error only when the probe could not run; a mismatch is a result. */
LS_API ls_status ls_engine_probe(ls_engine *e, const ls_probe_params *p, ls_probe_result *out, ls_err *err);
/* The engine's verdict so far (LS_VERDICT_UNPROBED before any probe). */
LS_API ls_verdict ls_engine_verdict(const ls_engine *e);

/* ---- speculative decoding -----------------------------------------------------------------
 * A drafter proposes tokens to follow one sequence; the engine verifies them, so drafts
 * never change a token or a logit, only how many forwards it takes. */
typedef enum { LS_SPEC_OFF = 0, LS_SPEC_NGRAM, LS_SPEC_DRAFT, LS_SPEC_LAYERSKIP, LS_SPEC_MTP } ls_spec_kind;
LS_API ls_status ls_spec_kind_from_name(const char *name, ls_spec_kind *out, ls_err *err);
LS_API const char *ls_spec_kind_name(ls_spec_kind k);

typedef struct {
    size_t size;
    ls_spec_kind kind;
    int32_t draft_max;         /* longest draft (default 8) */
    int32_t draft_min;         /* shorter proposals are not worth a verify block (default 1) */
    int32_t ngram_min, ngram_max; /* n-gram sizes for ngram (default 2..4) */
    const ls_model *draft_model;  /* draft: the draft model (the target's vocabulary) */
    int32_t skip_first;        /* layerskip: run the first skip_first layers (default n_layer / 2) */
    const int32_t *layers;     /* layerskip: or exactly these layers */
    int32_t n_layers;
    bool fixed_length;         /* no adaptation: always draft_max (tests) */
    float p_min;               /* mtp: a chained draft stops after a token the module gave less than
                                * this probability (its own confidence; default 0.5; 0 = never) */
    bool static_costs;         /* the draft-length rule keeps its fixed cost prior instead of what
                                * drafts and verify rows are measured to cost here (benchmarks) */
    int32_t lookup_min;        /* mtp, draft, layerskip: where the sequence's last lookup_min (up to
                                * ngram_max) tokens occurred earlier in it, propose what followed
                                * them there (prompt lookup, as ngram) instead of running the drafter;
                                * 0 (default): never */
} ls_spec_params;
#define LS_SPEC_PARAMS_INIT \
    {.size = sizeof(ls_spec_params), .kind = LS_SPEC_OFF, .draft_max = 8, .draft_min = 1, .ngram_min = 2, .ngram_max = 4, \
     .p_min = 0.5f}

typedef struct ls_drafter ls_drafter;
/* Checks p against the engine's model (draft vocabulary, layers, MTP module). */
LS_API ls_status ls_spec_check(const ls_engine *e, const ls_spec_params *p, ls_err *err);
/* One drafter per request (it keeps the sequence's state), sharing the engine's thread
 * pool; sp: the request's sampler.  Caller owns it (ls_drafter_free, after the request
 * finished). */
LS_API ls_drafter *ls_drafter_create(ls_engine *e, const ls_spec_params *p, const ls_sampler_params *sp, ls_err *err);
LS_API void ls_drafter_free(ls_drafter *d);
/* Sets r's draft hooks to this drafter. */
LS_API void ls_drafter_attach(ls_drafter *d, ls_request *r);
LS_API double ls_drafter_ms(const ls_drafter *d); /* time spent proposing so far */
/* Acceptance per draft position: of the proposals so far, how many reached position j
 * (drafted[j]) and how many of those were accepted through position j (accepted[j]),
 * j < 16.  The last proposal is settled against hist (the sequence's tokens, prompt and
 * generated, n_hist of them; NULL leaves it out). */
typedef struct {
    size_t size;
    int32_t n_proposals;
    int32_t drafted[16], accepted[16];
    double draft_cost, row_cost; /* what the draft-length rule takes a draft token and a verify
                                  * row to cost now, in single-row steps (measured, or its prior) */
    double draft_ms, forward_ms; /* time spent proposing, and of it in the drafter's own forwards
                                  * (mtp: the module's; draft, layerskip: the draft context's) */
    int32_t lookup_proposals;    /* of n_proposals, those made by lookup (ls_spec_params.lookup_min) */
    int32_t lookup_drafted, lookup_accepted; /* their tokens, and how many of them were accepted */
} ls_drafter_stats;
#define LS_DRAFTER_STATS_INIT {.size = sizeof(ls_drafter_stats)}
LS_API void ls_drafter_get_stats(ls_drafter *d, const int32_t *hist, int32_t n_hist, ls_drafter_stats *out);

/* ---- MTP training data (tools/fit_mtp.py; docs/mtp.md has the files' format) ------------
 * The model answers each prompt itself (seeded sampling through lockstep's forward) and
 * every position's last hidden state (before the final norm) is written beside the tokens,
 * with the weights a fit starts from, dequantized, and meta.json. */
typedef struct {
    size_t size;
    const char *prompts;      /* a file of one prompt per line (blank lines skipped) */
    const char *out_dir;      /* created if absent; its files are replaced */
    int32_t n_predict;        /* tokens generated per prompt at most (default 256) */
    int32_t max_prompts;      /* 0: every prompt */
    float temperature;        /* default 0.8 */
    uint64_t seed;            /* prompt i samples with seed + i (default 1) */
    bool raw;                 /* the prompts are raw text, not chat messages */
    int32_t n_threads;        /* 0 = 1 */
    bool mtp_top1;            /* also mtp_top1.i32: the model's MTP module (ls_model_params.mtp_path) run
                               * over every position, its top token */
    void (*on_progress)(void *ud, int64_t n_seqs, int64_t n_tokens, int64_t n_generated); /* after each prompt */
    void *progress_ud;
} ls_mtp_data_params;
#define LS_MTP_DATA_PARAMS_INIT \
    {.size = sizeof(ls_mtp_data_params), .n_predict = 256, .temperature = 0.8f, .seed = 1}
typedef struct {
    size_t size;
    int64_t n_seqs, n_tokens, n_generated;
} ls_mtp_data_result;
#define LS_MTP_DATA_RESULT_INIT {.size = sizeof(ls_mtp_data_result)}
LS_API ls_status ls_mtp_data_write(const ls_model *m, const ls_mtp_data_params *p, ls_mtp_data_result *out,
                                   ls_err *err);

#ifdef __cplusplus
}
#endif
#endif
