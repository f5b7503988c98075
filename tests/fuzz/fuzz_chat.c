/* libFuzzer target: chat-template rendering of arbitrary conversations for every
 * template family.  The input is split at 0x01 bytes into messages; each message's
 * first byte picks its role.  Never a crash; a success holds every user message's
 * text (trimmed of surrounding whitespace, as some families' templates trim it); a
 * failure says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *fams[] = {"chatml", "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr", "qwen3"};
    static const char *roles[] = {"system", "user", "assistant"};
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    ls_chat_msg msgs[64];
    size_t n = 0;
    for (char *p = buf; n < 64;) {
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
    return 0;
}
