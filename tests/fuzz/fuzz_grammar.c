/* libFuzzer target: GBNF text -> ls_grammar_compile (src/sample/grammar.c), and JSON
 * Schema text -> ls_json_schema_to_gbnf (src/sample/json_schema.c).  Never a crash; a
 * refusal always names what was wrong; a converted schema always compiles (a $ref cycle
 * that never reaches a character, left recursion, a start too ambiguous to expand, and a
 * named limit are the refusals); a compiled grammar runs the matcher over the rest of
 * the input byte by byte and as a whole.
 *
 * Input: byte 0 bit 0: a schema (else GBNF); bit 1: all the rest is the text (long
 * inputs: deep nesting, huge repetitions), else byte 1 is the text's length (at most
 * 255) and what follows it the string to match.  Everything runs on a thread with the
 * server's 2 MiB connection-thread stack (libFuzzer's own has 8 MiB), so a recursion
 * that would overflow the server's stack crashes here too, under ASan's larger frames. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "server_stack.h"

static void *one(void *p) {
    const uint8_t *data = ((input *)p)->data;
    size_t size = ((input *)p)->size;
    ls_err err = {0};
    const char *text = (const char *)data + 2;
    size_t n = size - 2, split = (data[0] & 2) ? n : data[1] < n ? data[1] : n; /* grammar text, then a string to match */
    char *owned = NULL;
    if (data[0] & 1) {
        owned = ls_json_schema_to_gbnf(text, split, &err);
        if (!owned) {
            if (!err.msg[0]) __builtin_trap();
            return NULL;
        }
    } else {
        owned = malloc(split + 1);
        if (!owned) return NULL;
        memcpy(owned, text, split);
        owned[split] = 0;
    }
    ls_grammar *g = ls_grammar_compile(owned, strlen(owned), &err);
    if (!g) {
        if (!err.msg[0]) __builtin_trap();
        if ((data[0] & 1) && !strstr(err.msg, "left-recursive") && !strstr(err.msg, "too ambiguous") &&
            !strstr(err.msg, "limit"))
            __builtin_trap();
        free(owned);
        return NULL;
    }
    const char *s = text + split;
    size_t sn = n - split;
    if (sn > 1024) sn = 1024; /* each code point may cost up to the matcher's work budget */
    bool whole = ls_grammar_matches(g, s, sn);
    ls_grammar_state *st = ls_grammar_state_new(g);
    bool ok = st != NULL;
    for (size_t i = 0; ok && i < sn; i++) ok = ls_grammar_accept_bytes(st, s + i, 1);
    if (st && whole != (ok && ls_grammar_complete(st))) __builtin_trap(); /* bytewise = whole */
    ls_grammar_state_free(st);
    ls_grammar_free(g);
    free(owned);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    on_server_stack(one, data, size);
    return 0;
}
