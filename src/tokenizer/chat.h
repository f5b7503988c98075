/* chat.h - chat templates: the common families, detected from the GGUF
 * `tokenizer.chat_template` source, applied to system/user/assistant messages. */
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
} ls_chat_family;

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
} ls_chat_template;

/* Template variables beyond messages and add_generation_prompt.  enable_thinking, as a
 * Qwen 3 template reads it: -1 not passed (jinja's render with no extra variables), 0
 * false, 1 true; a template without the variable ignores it. */
typedef struct {
    int enable_thinking;
} ls_chat_vars;
#define LS_CHAT_VARS_INIT {.enable_thinking = -1}

/* Detects the family from template source (NULL or empty source: LS_E_UNSUPPORTED
 * "model has no chat template; pass --chat-template"). Unknown source: LS_E_UNSUPPORTED
 * naming that, suggesting --chat-template.  Caller frees with ls_chat_template_free. */
ls_status ls_chat_template_detect(const char *src, size_t len, ls_chat_template *out, ls_err *err);
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
