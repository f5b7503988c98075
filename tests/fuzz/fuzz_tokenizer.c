/* libFuzzer target: the tokenizers on arbitrary bytes.  The first byte picks the mode
 * (bit 0 parse_special, bit 1 add_special) and the vocabulary (bits 2-3):
 *   0     byte-level BPE: the default model's vocabulary ($MODEL, default
 *         models/SmolLM2-135M-Instruct.Q4_1.gguf)
 *   3     the same vocabulary under another pre-tokenizer: the second byte picks
 *         one of pretok.c's table (every regex sequence, kimi-k2's, afmoe's digit
 *         step); its pieces must be non-empty and add up to the input, and the BPE
 *         property below holds for the tokens
 *   1     SentencePiece (SPM): a small Llama-2-style vocabulary built here
 *         (add_space_prefix on, all 256 <0xXX> tokens, control and user-defined
 *         tokens)
 *   2     SPM: the Gemma 3 file at $LOCKSTEP_GEMMA_MODEL when it is set (no space
 *         prefix), else the small one.
 * Never a crash, and an error always has a message.  The properties asserted:
 *   BPE   byte-level BPE is lossless: for valid UTF-8 without special-token parsing
 *         the tokens' bytes concatenate back to the input exactly.  (Bytes the
 *         vocabulary has no token for are dropped inside valid text, as HF
 *         tokenizers does, and become U+FFFD when invalid, by design: tokenizer.c.)
 *   SPM   for valid UTF-8, add_special off, parse_special either way: the tokens'
 *         bytes (control tokens as their text) are the input with every U+2581 as a
 *         space, except that with add_space_prefix each stretch of text -- at the
 *         start, and after every special token -- carries one extra leading space,
 *         which must be there.  This needs what both vocabularies have: every byte
 *         a <0xXX> token, "\xE2\x96\x81" a piece, no special token reachable by
 *         merges nor holding a space or U+2581.  (Invalid UTF-8 is tokenized too,
 *         but llama.cpp's lead-byte symbols can split a U+2581 into raw bytes, so
 *         no byte-exact property holds there.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static ls_tokenizer *g_tok, *g_spm, *g_gemma;
static ls_pretok *g_pretoks; /* one per entry of pretok.c's table */
static int g_n_pretoks;
static bool g_byte_ok[256]; /* the BPE vocabulary has a byte-level token for this byte */

/* The small SPM vocabulary: <unk> <s> </s>, the 256 byte tokens, then pieces (score
 * ties on purpose) and special tokens.  No piece holds '<' or '[', so no special
 * token can be built by merges. */
static const struct {
    const char *s;
    float score;
    int32_t type;
} k_spm_pieces[] = {
    {"\xE2\x96\x81", -1, LS_TOKTYPE_NORMAL}, {"\xE2\x96\x81\xE2\x96\x81", -2, LS_TOKTYPE_NORMAL},
    {"\xE2\x96\x81t", -3, LS_TOKTYPE_NORMAL}, {"\xE2\x96\x81the", -3, LS_TOKTYPE_NORMAL},
    {"th", -4, LS_TOKTYPE_NORMAL}, {"he", -4, LS_TOKTYPE_NORMAL}, {"the", -5, LS_TOKTYPE_NORMAL},
    {"in", -4, LS_TOKTYPE_NORMAL}, {"ing", -6, LS_TOKTYPE_NORMAL}, {"\xE2\x96\x81" "a", -3, LS_TOKTYPE_NORMAL},
    {"aa", -7, LS_TOKTYPE_NORMAL}, {"aaaa", -6, LS_TOKTYPE_NORMAL}, {"12", -8, LS_TOKTYPE_NORMAL},
    {"\xC3\xA9", -9, LS_TOKTYPE_NORMAL}, {"\xE4\xB8\xAD", -9, LS_TOKTYPE_NORMAL}, {"t", -10, LS_TOKTYPE_NORMAL},
    {"h", -10, LS_TOKTYPE_NORMAL}, {"e", -10, LS_TOKTYPE_NORMAL}, {"i", -10, LS_TOKTYPE_NORMAL},
    {"n", -10, LS_TOKTYPE_NORMAL}, {"g", -10, LS_TOKTYPE_NORMAL}, {"a", -10, LS_TOKTYPE_NORMAL},
    {"1", -10, LS_TOKTYPE_NORMAL}, {"2", -10, LS_TOKTYPE_NORMAL}, {"\n", -10, LS_TOKTYPE_NORMAL},
    {"[INST]", 0, LS_TOKTYPE_CONTROL}, {"[/INST]", 0, LS_TOKTYPE_CONTROL},
    {"<tool>", 0, LS_TOKTYPE_USER_DEFINED}, {"\n\n", 0, LS_TOKTYPE_USER_DEFINED},
    {"<end_of_turn>", 0, LS_TOKTYPE_USER_DEFINED}, /* control by its name (llama.cpp) */
};

static ls_tokenizer *build_spm(void) {
    enum { N = 3 + 256 + sizeof k_spm_pieces / sizeof k_spm_pieces[0] };
    static char bytes[256][8];
    static gguf_str toks[N];
    static float scores[N];
    static int32_t types[N];
    const char *head[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        toks[i] = (gguf_str){strlen(head[i]), head[i]};
        types[i] = i ? LS_TOKTYPE_CONTROL : LS_TOKTYPE_UNKNOWN;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[3 + b] = (gguf_str){6, bytes[b]};
        types[3 + b] = LS_TOKTYPE_BYTE;
    }
    for (size_t i = 0; i < sizeof k_spm_pieces / sizeof k_spm_pieces[0]; i++) {
        toks[259 + i] = (gguf_str){strlen(k_spm_pieces[i].s), k_spm_pieces[i].s};
        scores[259 + i] = k_spm_pieces[i].score;
        types[259 + i] = k_spm_pieces[i].type;
    }
    ls_tokenizer_params p = {.n_vocab = N, .tokens = toks, .token_types = types, .bos_id = 1, .eos_id = 2,
                             .eot_id = -1, .add_bos = true, .model = LS_TOKMODEL_SPM, .scores = scores,
                             .unk_id = 0, .add_space_prefix = true};
    ls_err err;
    ls_tokenizer *t = ls_tokenizer_create(&p, &err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: the SPM vocabulary: %s\n", err.msg);
        abort();
    }
    return t;
}

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
    g_n_pretoks = ls_pretok_count();
    g_pretoks = calloc((size_t)g_n_pretoks, sizeof *g_pretoks);
    for (int d = 0; d < g_n_pretoks; d++)
        if (ls_pretok_init(&g_pretoks[d], d, &err) != LS_OK) {
            fprintf(stderr, "fuzz_tokenizer: pre-tokenizer %s: %s\n", ls_pretok_def_name(d), err.msg);
            abort();
        }
    g_spm = build_spm();
    const char *gm = getenv("LOCKSTEP_GEMMA_MODEL");
    if (gm && *gm) {
        g_gemma = ls_tokenizer_open_file(gm, &err);
        if (!g_gemma) {
            fprintf(stderr, "fuzz_tokenizer: LOCKSTEP_GEMMA_MODEL: %s\n", err.msg);
            abort();
        }
    }
    return 0;
}

static bool valid_utf8(const char *text, size_t len) {
    for (size_t i = 0; i < len;) {
        size_t k = (unsigned char)text[i] < 0x80 ? 1 : ls_utf8_valid_len((const unsigned char *)text + i, len - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

static bool is_special(int32_t ty) {
    return ty == LS_TOKTYPE_CONTROL || ty == LS_TOKTYPE_UNKNOWN || ty == LS_TOKTYPE_USER_DEFINED;
}

/* The SPM property (see the top).  want = text with U+2581 as ' ', built as we go. */
static void check_spm(const ls_tokenizer *t, const char *text, size_t len, const int32_t *ids, size_t n) {
    char *want = malloc(len + 1);
    size_t nw = 0, ng = 0;
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(text + i, "\xE2\x96\x81", 3) == 0) {
            want[nw++] = ' ';
            i += 3;
        } else {
            want[nw++] = text[i++];
        }
    }
    bool prefix = t->spm.add_space_prefix, stretch_start = true;
    char piece[512];
    for (size_t i = 0; i < n; i++) {
        size_t k = ls_token_bytes(t, ids[i], true, piece, sizeof piece);
        if (k > sizeof piece) __builtin_trap();
        const char *s = piece;
        if (is_special(ls_tokenizer_token_type(t, ids[i]))) {
            stretch_start = true;
        } else if (stretch_start) {
            stretch_start = false;
            if (prefix) { /* the stretch's prefixed space */
                if (k == 0 || s[0] != ' ') __builtin_trap();
                s++;
                k--;
            }
        }
        if (ng + k > nw || memcmp(want + ng, s, k)) __builtin_trap();
        ng += k;
    }
    if (ng != nw) __builtin_trap();
    free(want);
}

typedef struct {
    const char *base;
    size_t at;
} piece_check;

static void check_piece(void *ctx, const char *s, size_t n) {
    piece_check *c = ctx;
    if (n == 0 || s != c->base + c->at) __builtin_trap();
    c->at += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const bool parse_special = data[0] & 1, add_special = data[0] & 2;
    const int which = (data[0] >> 2) & 3;
    ls_tokenizer *t = which == 1 ? g_spm : which == 2 ? (g_gemma ? g_gemma : g_spm) : g_tok;
    const bool spm = t != g_tok;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    ls_pretok saved = g_tok->pretok;
    bool saved_im = g_tok->ignore_merges;
    if (which == 3 && len > 0) { /* another pre-tokenizer on the same vocabulary */
        int d = (unsigned char)text[0] % g_n_pretoks;
        text++;
        len--;
        if (valid_utf8(text, len)) {
            void *md = ls_pretok_match_data(&g_pretoks[d]);
            piece_check c = {text, 0};
            ls_pretok_run(&g_pretoks[d], md, text, len, check_piece, &c);
            ls_pretok_match_data_free(md);
            if (c.at != len) __builtin_trap();
        }
        g_tok->pretok = g_pretoks[d];
        g_tok->ignore_merges = (unsigned char)data[1] & 0x80; /* either way: llama3-style or not */
    }
    size_t cap = len + 8, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    ls_err err;
    ls_status st = ls_tokenize(t, text, len, add_special, parse_special, ids, cap, &n, &err);
    if (st == LS_E_RANGE) {
        cap = n;
        ids = realloc(ids, cap * sizeof *ids);
        st = ls_tokenize(t, text, len, add_special, parse_special, ids, cap, &n, &err);
    }
    if (st) {
        if (!err.msg[0]) __builtin_trap();
        free(ids);
        g_tok->pretok = saved;
        g_tok->ignore_merges = saved_im;
        return 0;
    }
    bool valid = valid_utf8(text, len);
    if (spm) {
        if (valid && !add_special) check_spm(t, text, len, ids, n);
    } else {
        /* valid UTF-8 whose every byte has a token (others are dropped, as HF does) */
        for (size_t i = 0; i < len && valid; i++) valid = g_byte_ok[(unsigned char)text[i]];
        if (valid && !parse_special && !add_special) { /* lossless */
            char piece[256];
            size_t at = 0;
            for (size_t i = 0; i < n; i++) {
                size_t k = ls_token_bytes(t, ids[i], false, piece, sizeof piece);
                if (k > sizeof piece || at + k > len || memcmp(text + at, piece, k)) __builtin_trap();
                at += k;
            }
            if (at != len) __builtin_trap();
        }
    }
    ls_detok_stream ds;
    ls_detok_init(&ds);
    char out[512];
    for (size_t i = 0; i < n; i++) (void)ls_detok_push(&ds, t, ids[i], out, sizeof out);
    (void)ls_detok_flush(&ds, out, sizeof out);
    char *whole = malloc(4 * len + 64);
    for (int rs = 0; rs < 2; rs++) (void)ls_detokenize(t, ids, n, rs, !rs, whole, 4 * len + 64);
    free(whole);
    free(ids);
    g_tok->pretok = saved;
    g_tok->ignore_merges = saved_im;
    return 0;
}
