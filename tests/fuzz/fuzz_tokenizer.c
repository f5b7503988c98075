/* libFuzzer target: the tokenizer on arbitrary bytes, with the default model's
 * vocabulary ($MODEL, default models/SmolLM2-135M-Instruct.Q4_1.gguf).  Never a
 * crash; and byte-level BPE is lossless, so for valid UTF-8 without special-token
 * parsing the tokens' bytes must concatenate back to the input exactly.  (Bytes the
 * vocabulary has no token for are dropped inside valid text, as HF tokenizers does,
 * and become U+FFFD when invalid, by design: tokenizer.c.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static ls_tokenizer *g_tok;
static bool g_byte_ok[256]; /* the vocabulary has a byte-level token for this byte */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *p = getenv("MODEL");
    ls_err err;
    g_tok = ls_tokenizer_open_file(p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf", &err);
    if (!g_tok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    for (int b = 0; b < 256; b++) {
        char s = (char)b, piece[8];
        int32_t ids[8];
        size_t n = 0;
        g_byte_ok[b] = !ls_tokenize(g_tok, &s, 1, false, false, ids, 8, &n, &err) && n == 1 &&
                       ls_token_bytes(g_tok, ids[0], false, piece, sizeof piece) == 1 && piece[0] == s;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const bool parse_special = data[0] & 1, add_special = data[0] & 2;
    const char *text = (const char *)data + 1;
    size_t len = size - 1, cap = len + 8, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    ls_err err;
    ls_status st = ls_tokenize(g_tok, text, len, add_special, parse_special, ids, cap, &n, &err);
    if (st == LS_E_RANGE) {
        cap = n;
        ids = realloc(ids, cap * sizeof *ids);
        st = ls_tokenize(g_tok, text, len, add_special, parse_special, ids, cap, &n, &err);
    }
    if (st) {
        if (!err.msg[0]) __builtin_trap();
        free(ids);
        return 0;
    }
    bool valid = true; /* valid UTF-8 whose every byte has a token (others are dropped, as HF does) */
    for (size_t i = 0; i < len && valid; i++) valid = g_byte_ok[(unsigned char)text[i]];
    for (size_t i = 0; i < len && valid;) {
        size_t k = (unsigned char)text[i] < 0x80 ? 1 : ls_utf8_valid_len((const unsigned char *)text + i, len - i);
        valid = k > 0;
        i += k;
    }
    if (valid && !parse_special && !add_special) { /* lossless */
        char piece[256];
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t k = ls_token_bytes(g_tok, ids[i], false, piece, sizeof piece);
            if (k > sizeof piece || at + k > len || memcmp(text + at, piece, k)) __builtin_trap();
            at += k;
        }
        if (at != len) __builtin_trap();
    }
    ls_detok_stream ds;
    ls_detok_init(&ds);
    char out[512];
    for (size_t i = 0; i < n; i++) (void)ls_detok_push(&ds, g_tok, ids[i], out, sizeof out);
    (void)ls_detok_flush(&ds, out, sizeof out);
    free(ids);
    return 0;
}
