/* request.h - OpenAI request bodies (JSON) to a validated request struct.
 *
 * Pure: no engine, no network; every rejection names the field (400 in the server).
 * Kept apart from the HTTP layer so it can be fuzzed on its own. */
#ifndef LS_SERVER_REQUEST_H
#define LS_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

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

/* Renders chat messages into a prompt with the assistant turn opened (the server: the
 * model's template through ls_model_apply_chat); *out is freed with free(). */
typedef ls_status (*ls_srv_render_fn)(void *ud, const ls_chat_msg *msgs, size_t n, char **out, ls_err *err);

/* Parses and validates a /v1/chat/completions (chat) or /v1/completions body.
 * Defaults: temperature 1, top_p 1, top_k 0 (off), seed 0, max_tokens -1.
 * render NULL with chat gives LS_E_UNSUPPORTED. */
ls_status ls_srv_parse(const char *body, size_t len, bool chat, ls_srv_render_fn render, void *render_ud,
                       const ls_srv_limits *lim, ls_srv_req *out, ls_err *err);
/* Fills err (when non-NULL) and returns code. */
ls_status ls_srv_error(ls_err *err, ls_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ls_srv_req_free(ls_srv_req *r);

#endif
