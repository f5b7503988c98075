/* libFuzzer target: chat templates.
 *
 * An input that starts with "{" or "J" is a Jinja template: the bytes up to the first NUL
 * are the template source, the rest the conversation (below).  The source goes through
 * the engine (ls_jinja_parse) and, when it parses, renders the conversation both through
 * ls_jinja_render and through ls_chat_template_detect + ls_chat_apply (with and without
 * the generation prompt, a BOS that the tokenizer adds): never a crash or hang; every
 * failure has a message.
 *
 * Any other input is a conversation rendered by every hand-written family: split at 0x01
 * bytes into messages, each message's first byte picking its role.  A success holds every
 * user message's text (trimmed of surrounding whitespace, as some families' templates
 * trim it); a failure says why.
 *
 * The server renders templates on its connection threads, so each input runs on a thread
 * with their 2 MiB stack (src/server/server.c; libFuzzer's own has 8 MiB): a template
 * whose parse or render recursed too deep for the server crashes here too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tokenizer/chat.h"
#include "tokenizer/jinja.h"
#include "server_stack.h"

static const char *roles[] = {"system", "user", "assistant"};

static size_t split_messages(char *p, ls_chat_msg *msgs, size_t cap) {
    size_t n = 0;
    while (n < cap) {
        char *end = strchr(p, '\x01');
        if (end) *end = 0;
        if (*p) {
            msgs[n].role = roles[(unsigned char)*p % 3];
            msgs[n].content = p + 1;
            n++;
        }
        if (!end) break;
        p = end + 1;
    }
    return n;
}

static void fuzz_template(const char *src, size_t len, char *rest) {
    ls_chat_msg msgs[16];
    size_t n = split_messages(rest, msgs, 16);
    ls_err err;
    ls_jinja *t;
    if (ls_jinja_parse(src, len, &t, &err)) {
        if (!err.msg[0]) __builtin_trap();
        return;
    }
    cJSON *vars = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(vars, "messages");
    for (size_t i = 0; i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", msgs[i].role);
        cJSON_AddStringToObject(m, "content", msgs[i].content);
        cJSON_AddItemToArray(arr, m);
    }
    cJSON_AddBoolToObject(vars, "add_generation_prompt", 1);
    cJSON_AddStringToObject(vars, "bos_token", "<s>");
    char *out = NULL;
    if (ls_jinja_render(t, vars, &out, NULL, &err)) {
        if (!err.msg[0]) __builtin_trap();
    }
    free(out);
    cJSON_Delete(vars);
    ls_jinja_free(t);

    ls_chat_template ct;
    if (ls_chat_template_detect(src, len, &ct, &err) == LS_OK) {
        if (ls_chat_template_set_tokens(&ct, "<s>", "</s>", true, false, &err)) __builtin_trap();
        for (int gen = 0; gen < 2; gen++) {
            out = NULL;
            if (ls_chat_apply(&ct, msgs, n, gen, &out, &err) && !err.msg[0]) __builtin_trap();
            free(out);
        }
        char sum[80];
        ls_chat_template_summary(&ct, sum, sizeof sum);
        ls_chat_template_free(&ct);
    } else if (!err.msg[0]) {
        __builtin_trap();
    }
}

static void *one(void *p) {
    const uint8_t *data = ((input *)p)->data;
    size_t size = ((input *)p)->size;
    static const char *fams[] = {"chatml", "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr", "qwen3"};
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    if (size && (buf[0] == '{' || buf[0] == 'J')) {
        size_t len = strlen(buf);
        char *rest = len < size ? buf + len + 1 : buf + size;
        fuzz_template(buf, len, rest);
        free(buf);
        return NULL;
    }
    ls_chat_msg msgs[64];
    size_t n = split_messages(buf, msgs, 64);
    for (int f = 0; f < (int)(sizeof fams / sizeof fams[0]); f++) {
        ls_chat_template t;
        ls_err err;
        if (ls_chat_template_by_name(fams[f], &t, &err)) __builtin_trap();
        for (int gen = 0; gen < 2; gen++) {
            char *out = NULL;
            if (ls_chat_apply(&t, msgs, n, gen, &out, &err)) {
                if (!err.msg[0]) __builtin_trap();
                continue;
            }
            for (size_t i = 0; i < n; i++) {
                if (strcmp(msgs[i].role, "user")) continue;
                const char *c = msgs[i].content;
                size_t len = strlen(c);
                while (len && strchr(" \t\n\r\f\v", c[len - 1])) len--;
                while (len && strchr(" \t\n\r\f\v", *c)) c++, len--;
                char *core = strndup(c, len);
                if (!strstr(out, core)) __builtin_trap();
                free(core);
            }
            free(out);
        }
        ls_chat_template_free(&t);
    }
    free(buf);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    on_server_stack(one, data, size);
    return 0;
}
