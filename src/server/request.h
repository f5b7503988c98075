/* request.h - OpenAI request bodies (JSON) to a validated request struct.
 *
 * Pure: no engine, no network; every rejection names the field (400 in the server).
 * Kept apart from the HTTP layer so it can be fuzzed on its own. */
#ifndef LS_SERVER_REQUEST_H
#define LS_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lockstep.h"

/* each connection thread's stack (server.c); the fuzzers run their inputs on one as large */
#define LS_SRV_THREAD_STACK ((size_t)2 << 20)
#define LS_SRV_MAX_STOP 4
#define LS_SRV_MAX_STOP_LEN 256
#define LS_SRV_MAX_CHOICES 16  /* n x prompts in one request */

typedef struct {
    int32_t max_messages;    /* per chat request */
    int32_t max_tokens;      /* cap on max_tokens */
    int32_t n_vocab;         /* logit_bias ids must be below it (0: unchecked) */
    int32_t tool_format;     /* ls_srv_tool_format (server/tools.h) of the model's template */
    const char *default_system; /* the template's own system prompt, or NULL */
    int32_t reasoning;       /* the server's --reasoning-format (LS_SRV_REASONING_*) */
} ls_srv_limits;

/* reasoning_format: none keeps a think block in the content; deepseek splits it out */
enum { LS_SRV_REASONING_NONE = 0, LS_SRV_REASONING_DEEPSEEK = 1 };

enum { LS_SRV_TC_AUTO = 0, LS_SRV_TC_NONE, LS_SRV_TC_REQUIRED, LS_SRV_TC_NAMED }; /* tool_choice */

typedef struct {
    bool chat;
    char *prompt;            /* the text to tokenize: the rendered chat, or the (first) raw prompt */
    char **prompts;          /* completions given a list: n_prompts owned strings (prompt = a copy of [0]) */
    int32_t n_prompts;       /* 1 for a string prompt and for chat */
    int32_t *prompt_ids;     /* completions given a list of token ids (prompt = ""): n_prompt_ids owned ids */
    int32_t n_prompt_ids;
    int32_t n;               /* choices per prompt */
    int32_t max_tokens;      /* -1 = not given */
    float temperature, top_p;
    int32_t top_k;
    float min_p;             /* 0 = off */
    float frequency_penalty, presence_penalty; /* 0 = off; over the generated tokens */
    float repeat_penalty;    /* 1 (or 0) = off; over the last repeat_last_n tokens */
    int32_t repeat_last_n;   /* default 64; -1 = the whole sequence */
    ls_logit_bias *logit_bias; /* n_logit_bias entries, ids ascending, no repeats */
    int32_t n_logit_bias;
    int64_t seed;            /* as given, or drawn from the OS when absent (seed_given false) */
    bool seed_given;
    char *stop[LS_SRV_MAX_STOP];
    int32_t n_stop;
    bool stream, include_usage;
    bool logprobs;
    int32_t top_logprobs;
    bool ignore_eos;         /* extension */
    bool echo;               /* completions: the prompt (and with logprobs its log-probabilities) first;
                              * max_tokens may then be 0 (score the prompt only) */
    char model[128];
    char *grammar;           /* the output constraint as GBNF (response_format json_object / json_schema,
                              * grammar, json_schema), checked to compile; NULL: none */
    /* tools (chat) */
    int32_t n_tools;         /* tools offered (0: none) */
    char *tools_json;        /* the request's `tools`, compact JSON */
    int32_t tool_choice;     /* LS_SRV_TC_* */
    char tool_name[128];     /* LS_SRV_TC_NAMED: the function */
    int32_t tool_format;     /* from the limits: how calls are written and parsed */
    int32_t reasoning;       /* chat: LS_SRV_REASONING_* (the server's, or the request's reasoning_format) */
} ls_srv_req;

/* Renders chat messages into a prompt with the assistant turn opened (the server: the
 * model's template through ls_model_apply_chat_opts, opts from the request's
 * chat_template_kwargs); *out is freed with free(). */
typedef ls_status (*ls_srv_render_fn)(void *ud, const ls_chat_msg *msgs, size_t n, const ls_chat_opts *opts, char **out,
                                      ls_err *err);

/* Parses and validates a /v1/chat/completions (chat) or /v1/completions body.
 * Defaults: temperature 1, top_p 1, top_k 0 (off), a random seed (53 bits, from the
 * OS), max_tokens -1.  n_vocab bounds logit_bias ids (0: unchecked).  A parameter the
 * server does not implement is an error naming it, never ignored.
 * render NULL with chat gives LS_E_UNSUPPORTED. */
ls_status ls_srv_parse(const char *body, size_t len, bool chat, ls_srv_render_fn render, void *render_ud,
                       const ls_srv_limits *lim, ls_srv_req *out, ls_err *err);
/* The engine's sampler parameters for r (pointing into r: valid while r is). */
ls_sampler_params ls_srv_sampling(const ls_srv_req *r);
/* Choice i's seed: the request's for i = 0, else 53 bits mixed from (seed, i). */
int64_t ls_srv_choice_seed(int64_t seed, int32_t i);
/* The deepest nesting of objects and arrays a body may have (cJSON's own limit is 1000;
 * no request needs more than a few levels, a JSON Schema a few dozen). */
#define LS_SRV_JSON_DEPTH 64

/* A request body as a JSON object, read strictly (RFC 8259 and more): whitespace, literals
 * and numbers as the grammar says; strings without raw control characters (NUL
 * included), without \u0000 (cJSON would end the C string there) or unpaired surrogate
 * escapes, and valid UTF-8; at most LS_SRV_JSON_DEPTH levels; nothing after the object;
 * no key twice in one object.  A rejection is LS_E_INVALID with a message naming the
 * place as a JSON path ('messages[1].content'); NULL with err set on failure. */
cJSON *ls_srv_json_parse(const char *body, size_t len, ls_err *err);
/* s (a malloc'd C string) as valid UTF-8: itself when it is, else a new string (s freed)
 * with each maximal ill-formed subsequence replaced by U+FFFD (Unicode's "substitution
 * of maximal subparts", what Python's bytes.decode(errors="replace") does); NULL (s
 * freed) when out of memory. */
char *ls_srv_utf8_sanitize(char *s);

/* Fills err (when non-NULL) and returns code. */
ls_status ls_srv_error(ls_err *err, ls_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ls_srv_req_free(ls_srv_req *r);

#endif
