/* request.h - OpenAI request bodies (JSON) to a validated request struct.
 *
 * Pure: no engine, no network; every rejection names the field (400 in the server).
 * Kept apart from the HTTP layer so it can be fuzzed on its own. */
#ifndef LS_SERVER_REQUEST_H
#define LS_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/chat.h"
#include "util/err.h"

#define LS_SRV_MAX_STOP 4
#define LS_SRV_MAX_STOP_LEN 256

typedef struct {
    int32_t max_messages;    /* per chat request */
    int32_t max_tokens;      /* cap on max_tokens */
} ls_srv_limits;

typedef struct {
    bool chat;
    char *prompt;            /* the text to tokenize: the rendered chat, or the raw prompt */
    int32_t max_tokens;      /* -1 = not given */
    float temperature, top_p;
    int32_t top_k;
    uint64_t seed;
    char *stop[LS_SRV_MAX_STOP];
    int32_t n_stop;
    bool stream, include_usage;
    bool logprobs;
    int32_t top_logprobs;
    bool ignore_eos;         /* extension */
    char model[128];
} ls_srv_req;

/* Parses and validates a /v1/chat/completions (chat) or /v1/completions body.
 * Defaults: temperature 1, top_p 1, top_k 0 (off), seed 0, max_tokens -1.
 * tmpl renders chat messages; NULL with chat gives LS_E_UNSUPPORTED. */
ls_status ls_srv_parse(const char *body, size_t len, bool chat, const ls_chat_template *tmpl,
                       const ls_srv_limits *lim, ls_srv_req *out, ls_err *err);
void ls_srv_req_free(ls_srv_req *r);

#endif
