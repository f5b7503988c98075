/* chat.h - chat templates: the GGUF's `tokenizer.chat_template` (or a template file)
 * rendered by the Jinja engine (jinja.h), with eight common families rendered by hand
 * as the fallback and for the --chat-template NAME override; applied to
 * system/user/assistant messages. */
#ifndef LS_TOKENIZER_CHAT_H
#define LS_TOKENIZER_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef enum {
    LS_CHAT_UNKNOWN = 0,
    LS_CHAT_CHATML,   /* <|im_start|>role\n...<|im_end|>\n  (SmolLM2, Qwen, ...) */
    LS_CHAT_LLAMA2,   /* [INST] <<SYS>> ... */
    LS_CHAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    LS_CHAT_MISTRAL,  /* [INST] ... [/INST] without <<SYS>> */
    LS_CHAT_GEMMA,    /* <start_of_turn>user ... <end_of_turn> */
    LS_CHAT_PHI3,     /* <|user|>\n...<|end|>\n */
    LS_CHAT_ZEPHYR,   /* <|user|>\n...</s>\n */
    LS_CHAT_QWEN3,    /* ChatML with Qwen 3's think blocks (see chat.c) */
    LS_CHAT_JINJA,    /* none of the above: the template only, rendered by the Jinja engine */
} ls_chat_family;

typedef struct ls_chat_jinja ls_chat_jinja; /* chat.c: a compiled template and its token texts */

/* ls_chat_msg: lockstep.h. */

typedef struct {
    ls_chat_family family;
    /* System prompt the template inserts when the conversation has none
     * (SmolLM2's template does this); NULL when it inserts none.  Owned. */
    char *default_system;
    /* The template writes tools and calls itself in Qwen 2.5's Hermes style (its source
     * has <tool_call> and Qwen 2.5's tool text, and no <think> handling); otherwise the
     * server's generic tool format applies. */
    bool tools_hermes;
    /* The template compiled by the Jinja engine, which renders it when present
     * (ls_chat_template_detect, ls_chat_template_from_file); NULL: the family's hand
     * rendering (ls_chat_template_by_name, or a source the engine cannot parse).  Owned. */
    ls_chat_jinja *jinja;
} ls_chat_template;

/* Template variables beyond messages and add_generation_prompt.  enable_thinking, as a
 * Qwen 3 template reads it: -1 not passed (jinja's render with no extra variables), 0
 * false, 1 true; a template without the variable ignores it. */
typedef struct {
    int enable_thinking;
} ls_chat_vars;
#define LS_CHAT_VARS_INIT {.enable_thinking = -1}

/* Compiles template source with the Jinja engine and detects its family (the family's
 * name is what ls_model_info reports, and tools_hermes comes from the source); a source
 * of no known family is LS_CHAT_JINJA.  NULL or empty source: LS_E_UNSUPPORTED "model has
 * no chat template; pass --chat-template".  A source the engine cannot parse keeps its
 * family's hand rendering when it has one, else LS_E_UNSUPPORTED naming the parse error
 * and suggesting --chat-template.  Caller frees with ls_chat_template_free. */
ls_status ls_chat_template_detect(const char *src, size_t len, ls_chat_template *out, ls_err *err);
/* A Jinja template file (--chat-template-file) in place of the model's: it must parse
 * (else LS_E_INVALID naming the file and the line); an unreadable file: LS_E_IO. */
ls_status ls_chat_template_from_file(const char *path, ls_chat_template *out, ls_err *err);
/* The texts a Jinja template sees as bos_token / eos_token, and whether the tokenizer
 * adds BOS / EOS itself: then a rendered prompt's leading bos_token (trailing eos_token)
 * is dropped, as llama.cpp drops it, so that it is not there twice.  No-op for a
 * template without the engine. */
ls_status ls_chat_template_set_tokens(ls_chat_template *t, const char *bos, const char *eos, bool add_bos,
                                      bool add_eos, ls_err *err);
/* The first line of the template's source (at most cap - 1 bytes, "..." when cut), for
 * `lockstep info`; "" without a Jinja template. */
void ls_chat_template_summary(const ls_chat_template *t, char *buf, size_t cap);
/* By name for the --chat-template override: "chatml", "llama2", "llama3", "mistral",
 * "gemma", "phi3", "zephyr", "qwen3". Unknown name: LS_E_INVALID listing the valid names. */
ls_status ls_chat_template_by_name(const char *name, ls_chat_template *out, ls_err *err);
void ls_chat_template_free(ls_chat_template *t);
const char *ls_chat_family_name(ls_chat_family f);

/* Renders messages into a prompt string (caller frees *out with free()).
 * add_generation_prompt appends the assistant turn header. Bad role: LS_E_INVALID. */
ls_status ls_chat_apply(const ls_chat_template *t, const ls_chat_msg *msgs, size_t n,
                        bool add_generation_prompt, char **out, ls_err *err);
/* The same with template variables (vars NULL: LS_CHAT_VARS_INIT). */
ls_status ls_chat_apply_vars(const ls_chat_template *t, const ls_chat_msg *msgs, size_t n,
                             bool add_generation_prompt, const ls_chat_vars *vars, char **out, ls_err *err);

#endif
