/* libFuzzer target: HTTP request bodies -> the validated request struct
 * (server/request.c), for chat and text completions, with every chat template
 * family.  Never a crash; a rejection always names what was wrong.  Each body is parsed
 * on a thread with the server's 2 MiB connection-thread stack (libFuzzer's own has
 * 8 MiB), so a grammar or schema that nests too deep for the server crashes here too.
 *
 * The same bytes are also read as a model's output by the tool-call parser
 * (server/tools.c, ls_srv_tools_parse), in both formats, against the rule stated above
 * it: no calls means the whole text is content (Hermes); calls are well-formed objects;
 * the content beside Hermes calls is a prefix of the text, and generic calls have none. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/request.h"
#include "server/tools.h"
#include "tokenizer/chat.h"
#include "server_stack.h"

static void tool_calls(const char *text, size_t len) {
    for (int f = 0; f < 2; f++) {
        char *content = NULL;
        cJSON *calls = NULL;
        ls_status st = ls_srv_tools_parse(text, len, f ? LS_TOOLS_HERMES : LS_TOOLS_GENERIC, "fz", &content, &calls);
        if (st == LS_E_NOMEM) continue;
        if (st != LS_OK) __builtin_trap();
        if (!calls && !content) __builtin_trap();
        if (f && !calls && memcmp(content, text, len)) __builtin_trap(); /* not a call: all of it is content */
        if (f && calls && content && (strlen(content) > len || memcmp(content, text, strlen(content))))
            __builtin_trap();
        if (!f && calls && content) __builtin_trap();
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "id")) ||
                !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")) ||
                !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "arguments")))
                __builtin_trap();
        }
        free(content);
        cJSON_Delete(calls);
    }
}

static ls_status render(void *ud, const ls_chat_msg *msgs, size_t n, const ls_chat_opts *opts, char **out, ls_err *err) {
    ls_chat_vars v = LS_CHAT_VARS_INIT;
    v.enable_thinking = opts ? opts->enable_thinking : -1;
    return ls_chat_apply_vars(ud, msgs, n, true, &v, out, err);
}

static void *one(void *p) {
    const uint8_t *data = ((input *)p)->data;
    size_t size = ((input *)p)->size;
    static const char *fams[] = {"chatml", "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr", "qwen3"};
    ls_chat_template t;
    ls_err err;
    if (ls_chat_template_by_name(fams[data[0] % (sizeof fams / sizeof fams[0])], &t, &err)) __builtin_trap();
    ls_srv_limits lim = {.max_messages = 64, .max_tokens = 4096};
    ls_srv_req r;
    for (int chat = 0; chat < 2; chat++) {
        ls_status st = ls_srv_parse((const char *)data + 1, size - 1, chat, render, &t, &lim, &r, &err);
        if (st) {
            if (!err.msg[0]) __builtin_trap();
            continue;
        }
        if (!r.prompt || r.n_stop > LS_SRV_MAX_STOP ||
            (r.max_tokens != -1 && (r.max_tokens < (r.echo ? 0 : 1) || r.max_tokens > 4096)))
            __builtin_trap();
        if (!(r.top_p > 0.0f && r.top_p <= 1.0f) || !(r.temperature >= 0.0f)) __builtin_trap();
        if (!(r.min_p >= 0.0f && r.min_p <= 1.0f) || !(r.repeat_penalty >= 0.0f) || r.repeat_last_n < -1 ||
            !(r.frequency_penalty >= -2.0f && r.frequency_penalty <= 2.0f) ||
            !(r.presence_penalty >= -2.0f && r.presence_penalty <= 2.0f) || (r.echo && (chat || r.stream)))
            __builtin_trap();
        for (int32_t i = 0; i < r.n_logit_bias; i++) /* ids ascending, unique, biases in range */
            if (r.logit_bias[i].id < 0 || (i && r.logit_bias[i].id <= r.logit_bias[i - 1].id) ||
                !(r.logit_bias[i].bias >= -100.0f && r.logit_bias[i].bias <= 100.0f))
                __builtin_trap();
        ls_srv_req_free(&r);
    }
    ls_chat_template_free(&t);
    tool_calls((const char *)data + 1, size - 1);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    on_server_stack(one, data, size);
    return 0;
}
