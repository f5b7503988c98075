/* test_tokenizer.c - the byte-level BPE tokenizer on tiny hand-built vocabularies
 * (no model needed): merge order and ties, pre-tokenizers, special-token splitting,
 * BOS/EOS, invalid UTF-8, token bytes, streaming detokenization, GGUF loading and
 * its errors.  The exact comparison with HF tokenizers on the real vocabulary is
 * tests/python/test_tokenizer.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "tokenizer/tok_internal.h" /* the pre-tokenizer table */
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

/* ---- a tiny vocabulary ---------------------------------------------------------
 * ids 0..255: the byte-level char of byte i (GPT-2 bytes_to_unicode), unless
 * skip_byte says otherwise; then the extra tokens, then specials. */

#define MAXV 400

typedef struct {
    char *tok[MAXV];
    int32_t type[MAXV];
    uint32_t n;
    char *merge[64];
    uint32_t n_merges;
    gguf_str toks[MAXV], merges[64];
} vocab;

static void byte_level(unsigned char b, char out[3]) {
    /* bytes_to_unicode, from its definition */
    uint32_t n = 0, cp = 0;
    for (int x = 0; x < 256; x++) {
        bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        uint32_t c = printable ? (uint32_t)x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static int32_t add_tok(vocab *v, const char *s, int32_t type) {
    assert_true(v->n < MAXV);
    v->tok[v->n] = strdup(s);
    v->type[v->n] = type;
    return (int32_t)v->n++;
}

static void add_merge(vocab *v, const char *m) { v->merge[v->n_merges++] = strdup(m); }

static void vocab_init(vocab *v, int skip_byte) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char s[3];
        byte_level((unsigned char)b, s);
        if (b == skip_byte) s[0] = '#', s[1] = '#', s[2] = 0; /* placeholder that no merge uses */
        add_tok(v, s, LS_TOKTYPE_NORMAL);
    }
}

static void vocab_free(vocab *v) {
    for (uint32_t i = 0; i < v->n; i++) free(v->tok[i]);
    for (uint32_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
}

static ls_tokenizer *vocab_build(vocab *v, const char *pre, ls_err *e) {
    for (uint32_t i = 0; i < v->n; i++) v->toks[i] = (gguf_str){strlen(v->tok[i]), v->tok[i]};
    for (uint32_t i = 0; i < v->n_merges; i++) v->merges[i] = (gguf_str){strlen(v->merge[i]), v->merge[i]};
    ls_tokenizer_params p = {
        .n_vocab = v->n, .tokens = v->toks, .token_types = v->type, .n_merges = v->n_merges,
        .merges = v->merges, .pre = pre, .bos_id = -1, .eos_id = -1, .eot_id = -1,
    };
    return ls_tokenizer_create(&p, e);
}

static size_t tok(const ls_tokenizer *t, const char *s, bool parse_special, int32_t *out, size_t cap) {
    size_t n = 0;
    ls_err e;
    ls_err_clear(&e);
    assert_int_equal(ls_tokenize(t, s, strlen(s), false, parse_special, out, cap, &n, &e), LS_OK);
    return n;
}

static void expect_ids(const ls_tokenizer *t, const char *s, bool ps, const int32_t *want, size_t nwant) {
    int32_t got[256];
    size_t n = tok(t, s, ps, got, 256);
    if (n != nwant || memcmp(got, want, n * sizeof *got) != 0) {
        fprintf(stderr, "text \"%s\": got", s);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
        fail();
    }
}
#define EXPECT(t, s, ps, ...)                                                   \
    do {                                                                        \
        const int32_t w_[] = {__VA_ARGS__};                                     \
        expect_ids(t, s, ps, w_, sizeof w_ / sizeof w_[0]);                     \
    } while (0)

/* ---- tests ----------------------------------------------------------------------- */

static void test_merge_rank_order(void **state) {
    (void)state;
    for (int order = 0; order < 2; order++) {
        vocab v;
        vocab_init(&v, -1);
        int32_t ab = add_tok(&v, "ab", LS_TOKTYPE_NORMAL);
        int32_t bc = add_tok(&v, "bc", LS_TOKTYPE_NORMAL);
        if (order == 0) {
            add_merge(&v, "b c");
            add_merge(&v, "a b");
        } else {
            add_merge(&v, "a b");
            add_merge(&v, "b c");
        }
        ls_err e;
        ls_tokenizer *t = vocab_build(&v, "gpt2", &e);
        assert_non_null(t);
        if (order == 0) EXPECT(t, "abc", true, 'a', bc);  /* "b c" has the lower rank */
        else EXPECT(t, "abc", true, ab, 'c');
        ls_tokenizer_free(t);
        vocab_free(&v);
    }
}

static void test_merge_ties_leftmost_and_chains(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    int32_t aa = add_tok(&v, "aa", LS_TOKTYPE_NORMAL);
    int32_t aaaa = add_tok(&v, "aaaa", LS_TOKTYPE_NORMAL);
    int32_t he = add_tok(&v, "he", LS_TOKTYPE_NORMAL);
    int32_t ll = add_tok(&v, "ll", LS_TOKTYPE_NORMAL);
    int32_t hell = add_tok(&v, "hell", LS_TOKTYPE_NORMAL);
    int32_t hello = add_tok(&v, "hello", LS_TOKTYPE_NORMAL);
    int32_t sp_w = add_tok(&v, "\xC4\xA0w", LS_TOKTYPE_NORMAL); /* "Ġw" */
    add_merge(&v, "a a");
    add_merge(&v, "aa aa");
    add_merge(&v, "h e");
    add_merge(&v, "l l");
    add_merge(&v, "he ll");
    add_merge(&v, "hell o");
    add_merge(&v, "\xC4\xA0 w");
    add_merge(&v, "x y"); /* "xy" is not a token: the merge is ignored */
    add_merge(&v, "bad");  /* malformed: ignored */
    ls_err e;
    ls_tokenizer *t = vocab_build(&v, "gpt2", &e);
    assert_non_null(t);
    EXPECT(t, "aaa", true, aa, 'a');
    EXPECT(t, "aaaaa", true, aaaa, 'a');
    EXPECT(t, "hello", true, hello);
    EXPECT(t, "hello world", true, hello, sp_w, 'o', 'r', 'l', 'd');
    EXPECT(t, "hell", true, hell);
    EXPECT(t, "ll he", true, ll, ' ', he); /* " he" is one piece: Ġ h e -> Ġ he */
    ls_tokenizer_free(t);
    vocab_free(&v);
}

static void test_pretokenizers(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    int32_t n12 = add_tok(&v, "12", LS_TOKTYPE_NORMAL);
    int32_t sp1 = add_tok(&v, "\xC4\xA0" "1", LS_TOKTYPE_NORMAL);
    int32_t sp_sp = add_tok(&v, "\xC4\xA0\xC4\xA0", LS_TOKTYPE_NORMAL);
    int32_t ds = add_tok(&v, "'s", LS_TOKTYPE_NORMAL);
    add_merge(&v, "\xC4\xA0 1"); /* ranks: " 1" before "12" */
    add_merge(&v, "1 2");
    add_merge(&v, "\xC4\xA0 \xC4\xA0");
    add_merge(&v, "' s");
    ls_err e;
    /* gpt2: digits merge, " 1" is one piece */
    ls_tokenizer *t = vocab_build(&v, "gpt2", &e);
    assert_non_null(t);
    EXPECT(t, "12", true, n12);
    EXPECT(t, "a 12", true, 'a', sp1, '2');
    EXPECT(t, "it's", true, 'i', 't', ds);
    /* "   x": \s+(?!\S) takes two spaces, the third goes with x */
    EXPECT(t, "   x", true, sp_sp, ' ', 'x');
    ls_tokenizer_free(t);
    /* smollm: every digit alone, and the regex runs separately on each side of it */
    t = vocab_build(&v, "smollm", &e);
    assert_non_null(t);
    EXPECT(t, "12", true, '1', '2');
    EXPECT(t, "a 12", true, 'a', ' ', '1', '2');
    EXPECT(t, "x  1", true, 'x', sp_sp, '1'); /* "  " ends its stretch: one piece */
    ls_tokenizer_free(t);
    /* llama3 and qwen2 compile and run */
    t = vocab_build(&v, "llama3", &e);
    assert_non_null(t);
    EXPECT(t, "IT'S", true, 'I', 'T', '\'', 'S');
    ls_tokenizer_free(t);
    t = vocab_build(&v, "qwen2", &e);
    assert_non_null(t);
    EXPECT(t, "12", true, '1', '2');
    ls_tokenizer_free(t);
    vocab_free(&v);
}

/* Every tokenizer.ggml.pre name llama.cpp's llama-vocab.cpp accepts (ggml-org/llama.cpp
 * 00ad355e, llama_vocab::impl::load), less the refused ones below; "gpt2" is ours. */
static const char *const k_llama_cpp_pre_names[] = {
    "gpt2", "default", "minicpm5", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
    "midm-2.0", "lfm2", "jina-v5-nano", "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu",
    "falcon", "mpt", "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
    "a.x-4.0", "mellum", "modern-bert", "jais-2", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo",
    "f2llmv2", "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking",
    "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "exaone-moe",
    "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2", "talkie", "granite-embed-multi-97m",
    "tiny_aya", "cohere2moe", "superbpe", "trillion", "granite-docling", "bailingmoe", "bailingmoe2",
    "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "hy_v4", "joyai-llm", "kimi-k2", "ufakzeka", "grok-2",
    "afmoe", "laguna", "minimax-m2", "solar-open", "mellum2",
};

static void test_unknown_pretokenizer(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    ls_err e;
    ls_err_clear(&e);
    ls_tokenizer *t = vocab_build(&v, "no-such-pre", &e);
    assert_null(t);
    assert_int_equal(e.code, LS_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "'no-such-pre'"));
    assert_non_null(strstr(e.msg, "tokenizer.ggml.pre"));
    /* the list: one name per pre-tokenizer, and where the rest are */
    assert_non_null(strstr(e.msg, "supported: gpt2, starcoder, llama3, qwen2"));
    assert_non_null(strstr(e.msg, "deepseek-llm"));
    assert_non_null(strstr(e.msg, "kimi-k2"));
    assert_non_null(strstr(e.msg, "docs/supported.md"));
    /* NULL means gpt2 */
    t = vocab_build(&v, NULL, &e);
    assert_non_null(t);
    ls_tokenizer_free(t);
    /* every name llama.cpp knows loads (each split is checked against HF tokenizers
     * in tests/python/test_pretok.py) */
    for (size_t i = 0; i < sizeof k_llama_cpp_pre_names / sizeof k_llama_cpp_pre_names[0]; i++) {
        t = vocab_build(&v, k_llama_cpp_pre_names[i], &e);
        if (!t) fail_msg("pre-tokenizer '%s': %s", k_llama_cpp_pre_names[i], e.msg);
        ls_tokenizer_free(t);
    }
    /* every pre-tokenizer compiles and splits losslessly */
    for (int d = 0; d < ls_pretok_count(); d++) {
        const char *name = ls_pretok_def_name(d);
        assert_non_null(name);
        static const char text[] = "It's 1234567 x\xE4\xB8\xAD\xE6\x96\x87  <sentinel:3>\n\n\t\xF0\x9F\x98\x80!!";
        size_t ends[64], n = 0;
        if (ls_pretok_split(name, text, sizeof text - 1, ends, 64, &n) != 0) fail_msg("split '%s'", name);
        assert_true(n > 0);
        for (size_t i = 0; i < n; i++) assert_true(ends[i] > (i ? ends[i - 1] : 0));
        assert_int_equal(ends[n - 1], sizeof text - 1);
    }
    /* names llama.cpp knows but whose tokenizer needs what ours lacks: refused, saying why */
    static const struct {
        const char *name, *why;
    } refused[] = {{"gemma4", "raw UTF-8"}, {"granite-embed-multi-311m", "raw UTF-8"}, {"sarvam-moe", "raw UTF-8"},
                   {"whitespace", "raw UTF-8"}, {"jina-v1-en", "SEP"}, {"jina-v2-code", "SEP"},
                   {"roberta-bpe", "SEP"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        assert_null(vocab_build(&v, refused[i].name, &e));
        assert_int_equal(e.code, LS_E_UNSUPPORTED);
        assert_non_null(strstr(e.msg, refused[i].name));
        if (!strstr(e.msg, refused[i].why)) fail_msg("'%s': %s", refused[i].name, e.msg);
    }
    vocab_free(&v);
}

/* The flags llama.cpp sets with some names: add_bos (llama3, tekken, chameleon),
 * ignore_merges (llama3, tekken, youtu, minicpm5, granite-embed-multi-97m). */
static void test_pretokenizer_flags(void **state) {
    (void)state;
    static const struct {
        const char *name;
        bool ignore_merges, add_bos;
    } k[] = {{"llama-bpe", true, true}, {"tekken", true, true}, {"chameleon", false, true},
             {"youtu", true, false}, {"minicpm5", true, false}, {"granite-embed-multi-97m", true, false},
             {"dbrx", false, false}, {"gpt-4o", false, false}, {"deepseek-v3", false, false},
             {"smollm", false, false}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        ls_pretok_info info;
        assert_int_equal(ls_pretok_lookup(k[i].name, &info, NULL), 0);
        if (info.ignore_merges != k[i].ignore_merges || info.add_bos != k[i].add_bos)
            fail_msg("'%s': ignore_merges %d add_bos %d", k[i].name, info.ignore_merges, info.add_bos);
    }
}

/* A Llama-3-style whole-word lookup (ignore_merges) under a pre-tokenizer that
 * keeps punctuation with letters sees the word "<tag>", which names a control
 * token: plain text must still not become it (fuzz_tokenizer found this). */
static void test_whole_word_never_control(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    int32_t tag = add_tok(&v, "<tag>", LS_TOKTYPE_CONTROL);
    int32_t word = add_tok(&v, "<word>", LS_TOKTYPE_NORMAL);
    ls_err e;
    ls_tokenizer *t = vocab_build(&v, "superbpe", &e);
    assert_non_null(t);
    t->ignore_merges = true;
    EXPECT(t, "<tag>", false, '<', 't', 'a', 'g', '>');
    EXPECT(t, "<tag>", true, tag);
    EXPECT(t, "<word>", false, word); /* a normal token: the lookup still applies */
    ls_tokenizer_free(t);
    vocab_free(&v);
}

static void test_special_tokens(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    int32_t ims = add_tok(&v, "<|im_start|>", LS_TOKTYPE_CONTROL);
    int32_t ime = add_tok(&v, "<|im_end|>", LS_TOKTYPE_CONTROL);
    int32_t im = add_tok(&v, "<|im", LS_TOKTYPE_CONTROL);   /* prefix of both: longest wins */
    int32_t tool = add_tok(&v, "<tool>", LS_TOKTYPE_USER_DEFINED);
    ls_err e;
    ls_tokenizer *t = vocab_build(&v, "gpt2", &e);
    assert_non_null(t);
    EXPECT(t, "<|im_start|>hi<|im_end|>", true, ims, 'h', 'i', ime);
    EXPECT(t, "<|im<|im_end|", true, im, im, '_', 'e', 'n', 'd', '|');
    EXPECT(t, "a<tool>b", true, 'a', tool, 'b');
    EXPECT(t, "<|im_start|>", false, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|', '>');
    EXPECT(t, "<tool>", false, '<', 't', 'o', 'o', 'l', '>');
    assert_int_equal(ls_tokenizer_find(t, "<|im_end|>"), ime);
    assert_int_equal(ls_tokenizer_find(t, "nope"), -1);
    /* <|im_end|> ends generation even when the file names no eot */
    assert_true(ls_tokenizer_is_eog(t, ime));
    assert_false(ls_tokenizer_is_eog(t, ims));
    assert_false(ls_tokenizer_is_eog(t, -5));

    /* bytes: control tokens only with special; user-defined always, as literal text */
    char buf[32];
    assert_int_equal(ls_token_bytes(t, ims, false, buf, sizeof buf), 0);
    assert_int_equal(ls_token_bytes(t, ims, true, buf, sizeof buf), 12);
    assert_memory_equal(buf, "<|im_start|>", 12);
    assert_int_equal(ls_token_bytes(t, tool, false, buf, sizeof buf), 6);
    assert_int_equal(ls_token_bytes(t, ims, true, buf, 3), 12); /* full size even when cap is short */
    assert_int_equal(ls_token_bytes(t, 1 << 20, true, buf, sizeof buf), 0);
    assert_int_equal(ls_token_bytes(t, ' ', true, buf, sizeof buf), 1);
    assert_int_equal(buf[0], ' ');
    ls_tokenizer_free(t);
    vocab_free(&v);
}

static void test_bos_eos_and_range(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    int32_t bos = add_tok(&v, "<s>", LS_TOKTYPE_CONTROL);
    int32_t eos = add_tok(&v, "</s>", LS_TOKTYPE_CONTROL);
    for (uint32_t i = 0; i < v.n; i++) v.toks[i] = (gguf_str){strlen(v.tok[i]), v.tok[i]};
    ls_tokenizer_params p = {.n_vocab = v.n, .tokens = v.toks, .token_types = v.type, .pre = "gpt2",
                             .bos_id = bos, .eos_id = eos, .eot_id = -1, .add_bos = true, .add_eos = true};
    ls_err e;
    ls_tokenizer *t = ls_tokenizer_create(&p, &e);
    assert_non_null(t);
    assert_int_equal(ls_tokenizer_bos(t), bos);
    assert_int_equal(ls_tokenizer_eos(t), eos);
    assert_true(ls_tokenizer_is_eog(t, eos));
    int32_t out[8];
    size_t n;
    assert_int_equal(ls_tokenize(t, "ab", 2, true, true, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 4);
    assert_int_equal(out[0], bos);
    assert_int_equal(out[3], eos);
    assert_int_equal(ls_tokenize(t, "ab", 2, false, true, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 2);
    /* too small: the full count comes back with LS_E_RANGE */
    assert_int_equal(ls_tokenize(t, "abcdef", 6, true, true, out, 3, &n, &e), LS_E_RANGE);
    assert_int_equal(n, 8);
    assert_int_equal(out[0], bos);
    assert_int_equal(out[2], 'b');
    /* counting only */
    assert_int_equal(ls_tokenize(t, "abcdef", 6, false, true, NULL, 0, &n, &e), LS_E_RANGE);
    assert_int_equal(n, 6);
    assert_int_equal(ls_tokenize(t, "", 0, false, true, NULL, 0, &n, &e), LS_OK);
    assert_int_equal(n, 0);
    ls_tokenizer_free(t);
    vocab_free(&v);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, 0xFF); /* no token for byte 0xFF */
    int32_t ab = add_tok(&v, "ab", LS_TOKTYPE_NORMAL);
    add_merge(&v, "a b");
    ls_err e;
    ls_tokenizer *t = vocab_build(&v, "smollm", &e);
    assert_non_null(t);
    /* each invalid byte is a piece of its own, the runs around it are tokenized apart */
    EXPECT(t, "a\xFE" "b", true, 'a', 0xFE, 'b');
    EXPECT(t, "ab\xC0\xAF" "ab", true, ab, 0xC0, 0xAF, ab);       /* overlong */
    EXPECT(t, "\xE2\x82", true, 0xE2, 0x82);                      /* truncated */
    EXPECT(t, "\xED\xA0\x80", true, 0xED, 0xA0, 0x80);            /* surrogate */
    EXPECT(t, "\xE2\x82\xAC", true, 0xE2, 0x82, 0xAC);            /* valid: "€" */
    /* a byte the vocabulary lacks becomes U+FFFD's bytes */
    EXPECT(t, "a\xFF" "b", true, 'a', 0xEF, 0xBF, 0xBD, 'b');
    /* every single byte and many random strings: no crash, deterministic */
    uint32_t x = 12345;
    for (int k = 0; k < 3000; k++) {
        char s[24];
        size_t len = (size_t)(k % 23) + 1;
        for (size_t i = 0; i < len; i++) {
            x = x * 1664525u + 1013904223u;
            s[i] = (char)(k < 256 ? k : (int)(x >> 24));
        }
        if (k < 256) len = 1;
        int32_t a[64], b[64];
        size_t na, nb;
        assert_int_equal(ls_tokenize(t, s, len, false, true, a, 64, &na, &e), LS_OK);
        assert_int_equal(ls_tokenize(t, s, len, false, true, b, 64, &nb, &e), LS_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        assert_true(na >= 1);
    }
    ls_tokenizer_free(t);
    vocab_free(&v);
}

static size_t push(ls_detok_stream *s, const ls_tokenizer *t, int32_t id, char *out) {
    size_t n = ls_detok_push(s, t, id, out, 64);
    out[n] = 0;
    return n;
}

static void test_streaming_detok(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    char e2[3], x82[3], halfs[8];
    byte_level(0xE2, e2);
    byte_level(0x82, x82);
    snprintf(halfs, sizeof halfs, "%s%s", e2, x82);
    int32_t half = add_tok(&v, halfs, LS_TOKTYPE_NORMAL); /* bytes E2 82: half of "€" */
    int32_t ctl = add_tok(&v, "<|end|>", LS_TOKTYPE_CONTROL);
    ls_err e;
    ls_tokenizer *t = vocab_build(&v, "gpt2", &e);
    assert_non_null(t);
    char buf[8];
    assert_int_equal(ls_token_bytes(t, half, false, buf, sizeof buf), 2);
    assert_memory_equal(buf, "\xE2\x82", 2);

    ls_detok_stream s;
    char out[80];
    ls_detok_init(&s);
    assert_int_equal(push(&s, t, 'a', out), 1);
    assert_int_equal(push(&s, t, half, out), 0);   /* held back */
    assert_int_equal(push(&s, t, ctl, out), 0);    /* control: prints nothing, keeps pending */
    assert_int_equal(push(&s, t, 0xAC, out), 3);
    assert_string_equal(out, "\xE2\x82\xAC");
    /* one byte at a time: 4-byte emoji */
    const unsigned char emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 3; i++) assert_int_equal(push(&s, t, emoji[i], out), 0);
    assert_int_equal(push(&s, t, emoji[3], out), 4);
    assert_memory_equal(out, emoji, 4);
    /* a byte that can never be valid: U+FFFD at once */
    assert_int_equal(push(&s, t, 0xFF, out), 3);
    assert_string_equal(out, "\xEF\xBF\xBD");
    /* a lead byte followed by a non-continuation: FFFD then the ASCII char */
    assert_int_equal(push(&s, t, 0xE2, out), 0);
    assert_int_equal(push(&s, t, 'x', out), 4);
    assert_string_equal(out, "\xEF\xBF\xBDx");
    /* E0 needs A0..BF next: E0 80 is two errors */
    assert_int_equal(push(&s, t, 0xE0, out), 0);
    assert_int_equal(push(&s, t, 0x80, out), 6);
    /* flush of an incomplete sequence: one U+FFFD */
    assert_int_equal(push(&s, t, half, out), 0);
    assert_int_equal(ls_detok_flush(&s, out, sizeof out), 3);
    assert_int_equal(ls_detok_flush(&s, out, sizeof out), 0);
    ls_tokenizer_free(t);
    vocab_free(&v);
}

/* ---- GGUF ----------------------------------------------------------------------- */

static gguf_file *gguf_from_writer(gguf_writer *w, void **mem) {
    size_t size;
    ls_err e;
    assert_int_equal(gguf_writer_serialize(w, mem, &size, &e), LS_OK);
    gguf_file *f = gguf_open_mem(*mem, size, &e);
    if (!f) fail_msg("gguf_open_mem: %s", e.msg);
    return f;
}

static gguf_writer *tiny_gguf(const char *model, const char *pre, bool with_eot) {
    vocab v;
    vocab_init(&v, -1);
    add_tok(&v, "ab", LS_TOKTYPE_NORMAL);
    add_tok(&v, "<|im_start|>", LS_TOKTYPE_CONTROL);
    add_tok(&v, "<|im_end|>", LS_TOKTYPE_CONTROL);
    add_merge(&v, "a b");
    gguf_writer *w = gguf_writer_create();
    assert_non_null(w);
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_str(w, "tokenizer.ggml.model", model);
    if (pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v.type, v.n);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merge, v.n_merges);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 257);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 258);
    if (with_eot) gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", 256);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    vocab_free(&v);
    return w;
}

static void test_from_gguf(void **state) {
    (void)state;
    void *mem;
    gguf_writer *w = tiny_gguf("gpt2", "smollm", false);
    gguf_file *f = gguf_from_writer(w, &mem);
    ls_err e;
    ls_err_clear(&e);
    ls_tokenizer *t = ls_tokenizer_from_gguf(f, &e);
    assert_non_null(t);
    assert_int_equal(ls_tokenizer_n_vocab(t), 259);
    assert_int_equal(ls_tokenizer_bos(t), 257);
    assert_int_equal(ls_tokenizer_eos(t), 258);
    assert_int_equal(ls_tokenizer_eot(t), 258); /* no eot key: found by name <|im_end|> */
    int32_t out[8];
    size_t n;
    assert_int_equal(ls_tokenize(t, "ab1", 3, true, true, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(out[0], 257);
    assert_int_equal(out[1], 256);
    assert_int_equal(out[2], '1');
    ls_tokenizer_free(t);
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);

    w = tiny_gguf("gpt2", "smollm", true);
    f = gguf_from_writer(w, &mem);
    t = ls_tokenizer_from_gguf(f, &e);
    assert_non_null(t);
    assert_int_equal(ls_tokenizer_eot(t), 256);
    assert_true(ls_tokenizer_is_eog(t, 256));
    assert_true(ls_tokenizer_is_eog(t, 258));
    ls_tokenizer_free(t);
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);
}

static void test_from_gguf_errors(void **state) {
    (void)state;
    void *mem;
    ls_err e;
    gguf_writer *w = tiny_gguf("bert", "default", false);
    gguf_file *f = gguf_from_writer(w, &mem);
    ls_err_clear(&e);
    assert_null(ls_tokenizer_from_gguf(f, &e));
    assert_int_equal(e.code, LS_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "'bert'"));
    assert_non_null(strstr(e.msg, "tokenizer.ggml.model"));
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);

    w = tiny_gguf("gpt2", "mystery-pre", false);
    f = gguf_from_writer(w, &mem);
    ls_err_clear(&e);
    assert_null(ls_tokenizer_from_gguf(f, &e));
    assert_int_equal(e.code, LS_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "'mystery-pre'"));
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);

    /* no tokenizer at all */
    w = gguf_writer_create();
    gguf_writer_add_str(w, "general.architecture", "llama");
    f = gguf_from_writer(w, &mem);
    ls_err_clear(&e);
    assert_null(ls_tokenizer_from_gguf(f, &e));
    assert_int_equal(e.code, LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "tokenizer.ggml.model"));
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);

    ls_err_clear(&e);
    assert_null(ls_tokenizer_open_file("/nonexistent/model.gguf", &e));
    assert_int_equal(e.code, LS_E_IO);
}

/* ---- SentencePiece (SPM) --------------------------------------------------------
 * ids 0, 1, 2: <unk>, <s>, </s>; with bytes, ids 3 + b: <0xXX> for byte b; then the
 * pieces each test adds.  "\xE2\x96\x81" is U+2581, the space marker. */

#define SP "\xE2\x96\x81"
#define SPM_MAXV 600

typedef struct {
    char *tok[SPM_MAXV];
    float score[SPM_MAXV];
    int32_t type[SPM_MAXV];
    uint32_t n;
    gguf_str toks[SPM_MAXV];
} spm_vocab;

static int32_t spm_add(spm_vocab *v, const char *s, float score, int32_t type) {
    assert_true(v->n < SPM_MAXV);
    v->tok[v->n] = strdup(s);
    v->score[v->n] = score;
    v->type[v->n] = type;
    return (int32_t)v->n++;
}

static void spm_vocab_init(spm_vocab *v, bool bytes) {
    memset(v, 0, sizeof *v);
    spm_add(v, "<unk>", 0, LS_TOKTYPE_UNKNOWN);
    spm_add(v, "<s>", 0, LS_TOKTYPE_CONTROL);
    spm_add(v, "</s>", 0, LS_TOKTYPE_CONTROL);
    if (bytes)
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            spm_add(v, name, 0, LS_TOKTYPE_BYTE);
        }
}

#define BYTE(b) (3 + (b))

static void spm_vocab_free(spm_vocab *v) {
    for (uint32_t i = 0; i < v->n; i++) free(v->tok[i]);
}

static ls_tokenizer *spm_build(spm_vocab *v, bool space_prefix, ls_err *e) {
    for (uint32_t i = 0; i < v->n; i++) v->toks[i] = (gguf_str){strlen(v->tok[i]), v->tok[i]};
    ls_tokenizer_params p = {
        .n_vocab = v->n, .tokens = v->toks, .token_types = v->type, .bos_id = 1, .eos_id = 2, .eot_id = -1,
        .add_bos = true, .model = LS_TOKMODEL_SPM, .scores = v->score, .unk_id = 0,
        .add_space_prefix = space_prefix,
    };
    return ls_tokenizer_create(&p, e);
}

static void test_spm_merge_by_score(void **state) {
    (void)state;
    /* the higher score merges first, whatever the order in the file; ties: leftmost */
    const float sab[3] = {-1.0f, -0.5f, -1.0f}, sbc[3] = {-0.5f, -1.0f, -1.0f};
    for (int k = 0; k < 3; k++) {
        spm_vocab v;
        spm_vocab_init(&v, true);
        int32_t a = spm_add(&v, "a", -10, LS_TOKTYPE_NORMAL);
        spm_add(&v, "b", -10, LS_TOKTYPE_NORMAL);
        int32_t c = spm_add(&v, "c", -10, LS_TOKTYPE_NORMAL);
        int32_t ab = spm_add(&v, "ab", sab[k], LS_TOKTYPE_NORMAL);
        int32_t bc = spm_add(&v, "bc", sbc[k], LS_TOKTYPE_NORMAL);
        ls_err e;
        ls_tokenizer *t = spm_build(&v, false, &e);
        assert_non_null(t);
        if (k == 0) EXPECT(t, "abc", false, a, bc);
        else EXPECT(t, "abc", false, ab, c);
        ls_tokenizer_free(t);
        spm_vocab_free(&v);
    }
    /* chains: "aaaaa" -> aa a a a -> aa aa a -> aaaa a (aaaa scores higher than aa) */
    spm_vocab v;
    spm_vocab_init(&v, true);
    int32_t a = spm_add(&v, "a", -10, LS_TOKTYPE_NORMAL);
    int32_t aa = spm_add(&v, "aa", -2, LS_TOKTYPE_NORMAL);
    int32_t aaaa = spm_add(&v, "aaaa", -1, LS_TOKTYPE_NORMAL);
    int32_t he = spm_add(&v, "he", -3, LS_TOKTYPE_NORMAL);
    int32_t hell = spm_add(&v, "hell", -4, LS_TOKTYPE_NORMAL);
    spm_add(&v, "ll", -3, LS_TOKTYPE_NORMAL);
    spm_add(&v, "h", -10, LS_TOKTYPE_NORMAL);
    spm_add(&v, "e", -10, LS_TOKTYPE_NORMAL);
    spm_add(&v, "l", -10, LS_TOKTYPE_NORMAL);
    int32_t o = spm_add(&v, "o", -10, LS_TOKTYPE_NORMAL);
    int32_t hello = spm_add(&v, "hello", -20, LS_TOKTYPE_NORMAL); /* scores do not need to rise along a chain */
    ls_err e;
    ls_tokenizer *t = spm_build(&v, false, &e);
    assert_non_null(t);
    EXPECT(t, "aaaaa", false, aaaa, a);
    EXPECT(t, "aaa", false, aa, a);
    EXPECT(t, "hello", false, hello);
    EXPECT(t, "hell", false, hell);
    EXPECT(t, "heo", false, he, o);
    ls_tokenizer_free(t);
    spm_vocab_free(&v);
}

static void test_spm_space_marker_and_bytes(void **state) {
    (void)state;
    spm_vocab v;
    spm_vocab_init(&v, true);
    int32_t sp = spm_add(&v, SP, -5, LS_TOKTYPE_NORMAL);
    int32_t spa = spm_add(&v, SP "a", -1, LS_TOKTYPE_NORMAL);
    int32_t spb = spm_add(&v, SP "b", -1, LS_TOKTYPE_NORMAL);
    int32_t a = spm_add(&v, "a", -10, LS_TOKTYPE_NORMAL);
    spm_add(&v, "b", -10, LS_TOKTYPE_NORMAL);
    ls_err e;
    ls_tokenizer *t = spm_build(&v, true, &e);
    assert_non_null(t);
    EXPECT(t, "a b", false, spa, spb);            /* "▁a▁b" */
    EXPECT(t, " a", false, sp, spa);              /* "▁▁a": a leading space stays */
    EXPECT(t, "a  ", false, spa, sp, sp);         /* trailing spaces */
    EXPECT(t, "\xC3\xA9", false, sp, BYTE(0xC3), BYTE(0xA9)); /* "é" has no piece: its bytes */
    EXPECT(t, SP, false, sp, sp);                 /* a U+2581 in the text is a space too */
    EXPECT(t, "\n\t", false, sp, BYTE('\n'), BYTE('\t'));
    int32_t out[8];
    size_t n;
    assert_int_equal(ls_tokenize(t, "", 0, false, false, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ls_tokenize(t, "", 0, true, false, out, 8, &n, &e), LS_OK); /* BOS only */
    assert_int_equal(n, 1);
    assert_int_equal(out[0], 1);
    assert_int_equal(ls_tokenize(t, "a", 1, true, false, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[1], spa);

    /* token bytes: U+2581 is a space, a byte token its byte */
    char buf[16];
    assert_int_equal(ls_token_bytes(t, spa, false, buf, sizeof buf), 2);
    assert_memory_equal(buf, " a", 2);
    assert_int_equal(ls_token_bytes(t, BYTE(0xC3), false, buf, sizeof buf), 1);
    assert_int_equal((unsigned char)buf[0], 0xC3);
    assert_int_equal(ls_token_bytes(t, a, false, buf, sizeof buf), 1);
    ls_tokenizer_free(t);
    spm_vocab_free(&v);

    /* no space prefix (Gemma 3) */
    spm_vocab_init(&v, true);
    sp = spm_add(&v, SP, -5, LS_TOKTYPE_NORMAL);
    spa = spm_add(&v, SP "a", -1, LS_TOKTYPE_NORMAL);
    a = spm_add(&v, "a", -10, LS_TOKTYPE_NORMAL);
    t = spm_build(&v, false, &e);
    assert_non_null(t);
    EXPECT(t, "a a", false, a, spa);
    EXPECT(t, " a", false, spa);
    ls_tokenizer_free(t);
    spm_vocab_free(&v);

    /* without byte tokens: a one-byte token, else the unknown token, else nothing */
    spm_vocab_init(&v, false);
    a = spm_add(&v, "a", -10, LS_TOKTYPE_NORMAL);
    int32_t x80 = spm_add(&v, "\x80", -10, LS_TOKTYPE_NORMAL);
    t = spm_build(&v, false, &e);
    assert_non_null(t);
    EXPECT(t, "a\xC3\xA9", false, a, 0, 0);
    EXPECT(t, "\x80", false, x80);
    ls_tokenizer_free(t);
    for (uint32_t i = 0; i < v.n; i++) v.toks[i] = (gguf_str){strlen(v.tok[i]), v.tok[i]};
    ls_tokenizer_params p = {.n_vocab = v.n, .tokens = v.toks, .token_types = v.type, .bos_id = -1, .eos_id = -1,
                             .eot_id = -1, .model = LS_TOKMODEL_SPM, .scores = v.score, .unk_id = -1};
    t = ls_tokenizer_create(&p, &e);
    assert_non_null(t);
    EXPECT(t, "a\xC3\xA9" "a", false, a, a);
    ls_tokenizer_free(t);
    spm_vocab_free(&v);
}

static void test_spm_invalid_utf8(void **state) {
    (void)state;
    spm_vocab v;
    spm_vocab_init(&v, true);
    int32_t x = spm_add(&v, "x", -10, LS_TOKTYPE_NORMAL);
    int32_t y = spm_add(&v, "y", -10, LS_TOKTYPE_NORMAL);
    int32_t xy = spm_add(&v, "xy", -1, LS_TOKTYPE_NORMAL);
    int32_t euro = spm_add(&v, "\xE2\x82\xAC", -10, LS_TOKTYPE_NORMAL);
    ls_err e;
    ls_tokenizer *t = spm_build(&v, false, &e);
    assert_non_null(t);
    /* symbols are cut by the length the lead byte announces, unchecked (llama.cpp):
     * E2 takes the two bytes after it, so x and y come out as bytes */
    EXPECT(t, "\xE2xy", false, BYTE(0xE2), BYTE('x'), BYTE('y'));
    EXPECT(t, "\xE2xyxy", false, BYTE(0xE2), BYTE('x'), BYTE('y'), xy);
    EXPECT(t, "xy\xFF", false, xy, BYTE(0xFF));
    EXPECT(t, "\x80x", false, BYTE(0x80), x);             /* a stray continuation byte is one symbol */
    EXPECT(t, "\xE2\x82\xAC" "y", false, euro, y);
    EXPECT(t, "\xF0\x9F", false, BYTE(0xF0), BYTE(0x9F));   /* cut short at the end */
    /* lossless on any bytes (no space among them: "▁" is not a piece here, so a
     * space would come back as the bytes of U+2581) */
    uint32_t r = 99;
    for (int k = 0; k < 2000; k++) {
        char s[32], back[64];
        size_t len = (size_t)(k % 31) + 1;
        for (size_t i = 0; i < len; i++) {
            r = r * 1664525u + 1013904223u;
            s[i] = "xy\xE2\x82\xAC\x80\xFF\n"[(r >> 24) % 8];
        }
        int32_t ids[64];
        size_t n, at = 0;
        assert_int_equal(ls_tokenize(t, s, len, false, false, ids, 64, &n, &e), LS_OK);
        for (size_t i = 0; i < n; i++) at += ls_token_bytes(t, ids[i], true, back + at, sizeof back - at);
        assert_int_equal(at, len);
        assert_memory_equal(back, s, len);
    }
    ls_tokenizer_free(t);
    spm_vocab_free(&v);
}

static void test_spm_special_tokens(void **state) {
    (void)state;
    spm_vocab v;
    spm_vocab_init(&v, true);
    int32_t sp = spm_add(&v, SP, -5, LS_TOKTYPE_NORMAL);
    int32_t sphi = spm_add(&v, SP "hi", -1, LS_TOKTYPE_NORMAL);
    int32_t hi = spm_add(&v, "hi", -1, LS_TOKTYPE_NORMAL);
    spm_add(&v, "h", -10, LS_TOKTYPE_NORMAL);
    spm_add(&v, "i", -10, LS_TOKTYPE_NORMAL);
    int32_t x = spm_add(&v, "x", -10, LS_TOKTYPE_NORMAL);
    int32_t inst = spm_add(&v, "[INST]", 0, LS_TOKTYPE_CONTROL);
    int32_t tool = spm_add(&v, "<tool>", 0, LS_TOKTYPE_USER_DEFINED);
    int32_t nl2 = spm_add(&v, "\n\n", 0, LS_TOKTYPE_USER_DEFINED);
    int32_t xy = spm_add(&v, "xy", 0, LS_TOKTYPE_USER_DEFINED);
    int32_t yzw = spm_add(&v, "yzw", 0, LS_TOKTYPE_USER_DEFINED);
    int32_t eot = spm_add(&v, "<end_of_turn>", 0, LS_TOKTYPE_USER_DEFINED); /* control by its name */
    ls_err e;
    ls_tokenizer *t = spm_build(&v, true, &e);
    assert_non_null(t);
    /* control tokens only with parse_special; every stretch after a special token
     * gets the space prefix, as in llama.cpp */
    EXPECT(t, "[INST]hi", true, inst, sphi);
    EXPECT(t, "hi[INST]hi", true, sphi, inst, sphi);
    EXPECT(t, "[INST]", false, sp, BYTE('['), BYTE('I'), BYTE('N'), BYTE('S'), BYTE('T'), BYTE(']'));
    /* user-defined tokens even without it, and then the prefix too */
    EXPECT(t, "hi<tool>hi", false, sphi, tool, sphi);
    EXPECT(t, "<tool>\n\n\n", false, tool, nl2, sp, BYTE('\n'));
    /* the longest special token claims first, even right of a shorter one */
    EXPECT(t, "xyzw", false, sp, x, yzw);
    EXPECT(t, "xyxyzw", false, xy, sp, x, yzw);
    /* llama.cpp makes <end_of_turn> a control token, whatever the file says */
    assert_int_equal(ls_tokenizer_token_type(t, eot), LS_TOKTYPE_CONTROL);
    EXPECT(t, "<end_of_turn>", true, eot);
    assert_true(ls_tokenizer_is_eog(t, eot));
    assert_true(ls_tokenizer_is_eog(t, 2));
    assert_false(ls_tokenizer_is_eog(t, inst));
    char buf[32];
    assert_int_equal(ls_token_bytes(t, eot, false, buf, sizeof buf), 0);
    assert_int_equal(ls_token_bytes(t, eot, true, buf, sizeof buf), 13);
    assert_int_equal(ls_token_bytes(t, tool, false, buf, sizeof buf), 6); /* user-defined: always its text */
    assert_int_equal(ls_token_bytes(t, inst, false, buf, sizeof buf), 0);
    assert_int_equal(ls_token_bytes(t, 0, false, buf, sizeof buf), 0); /* <unk> */
    assert_int_equal(ls_token_bytes(t, 0, true, buf, sizeof buf), 5);
    (void)hi;
    ls_tokenizer_free(t);
    spm_vocab_free(&v);

    /* unused-type tokens render as nothing, as llama.cpp's token_to_piece */
    spm_vocab_init(&v, true);
    int32_t un = spm_add(&v, "zz", -1, LS_TOKTYPE_UNUSED);
    spm_add(&v, "z", -1, LS_TOKTYPE_NORMAL);
    t = spm_build(&v, false, &e);
    assert_non_null(t);
    EXPECT(t, "zz", false, un); /* merges reach any type, as llama.cpp's */
    assert_int_equal(ls_token_bytes(t, un, true, buf, sizeof buf), 0);
    ls_tokenizer_free(t);
    spm_vocab_free(&v);
}

static void test_spm_detokenize(void **state) {
    (void)state;
    spm_vocab v;
    spm_vocab_init(&v, true);
    int32_t sp = spm_add(&v, SP, -5, LS_TOKTYPE_NORMAL);
    int32_t sphi = spm_add(&v, SP "hi", -1, LS_TOKTYPE_NORMAL);
    spm_add(&v, "h", -10, LS_TOKTYPE_NORMAL);
    spm_add(&v, "i", -10, LS_TOKTYPE_NORMAL);
    ls_err e;
    ls_tokenizer *t = spm_build(&v, true, &e);
    assert_non_null(t);
    char out[64];
    /* llama_detokenize: the first token loses one leading space ... */
    const int32_t a[] = {sphi, sphi};
    assert_int_equal(ls_detokenize(t, a, 2, false, false, out, sizeof out), 5);
    assert_memory_equal(out, "hi hi", 5);
    const int32_t b[] = {sp, sphi};
    assert_int_equal(ls_detokenize(t, b, 2, false, false, out, sizeof out), 3);
    assert_memory_equal(out, " hi", 3);
    /* ... unless a removed BOS led the sequence: then it keeps it */
    const int32_t c[] = {1, sphi, 2};
    assert_int_equal(ls_detokenize(t, c, 3, true, false, out, sizeof out), 3);
    assert_memory_equal(out, " hi", 3);
    assert_int_equal(ls_detokenize(t, c, 3, false, true, out, sizeof out), 10);
    assert_memory_equal(out, "<s> hi</s>", 10);
    assert_int_equal(ls_detokenize(t, c, 3, false, false, out, sizeof out), 3);
    /* a trailing EOS goes only when the file adds one (add_eos is false here) */
    assert_int_equal(ls_detokenize(t, c, 3, true, true, out, sizeof out), 7);
    assert_memory_equal(out, " hi</s>", 7);
    /* the full size comes back when cap is short */
    assert_int_equal(ls_detokenize(t, a, 2, false, false, out, 2), 5);
    assert_memory_equal(out, "hi", 2);

    /* the stream holds back the bytes of an incomplete character */
    const unsigned char emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
    int32_t ids[8];
    size_t n;
    assert_int_equal(ls_tokenize(t, (const char *)emoji, 4, false, false, ids, 8, &n, &e), LS_OK);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], sp);
    ls_detok_stream s;
    ls_detok_init(&s);
    assert_int_equal(ls_detok_push(&s, t, ids[0], out, sizeof out), 1); /* no space dropped: a continuation */
    for (int i = 1; i < 4; i++) assert_int_equal(ls_detok_push(&s, t, ids[i], out, sizeof out), 0);
    assert_int_equal(ls_detok_push(&s, t, ids[4], out, sizeof out), 4);
    assert_memory_equal(out, emoji, 4);
    assert_int_equal(ls_detok_flush(&s, out, sizeof out), 0);
    ls_tokenizer_free(t);
    spm_vocab_free(&v);
}

static gguf_writer *spm_gguf(spm_vocab *v, int scores_kind, bool with_keys) {
    gguf_writer *w = gguf_writer_create();
    assert_non_null(w);
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", "default");
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, v->n);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v->type, v->n);
    if (scores_kind == 0) gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v->score, v->n);
    if (scores_kind == 1) gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v->score, v->n - 1);
    if (scores_kind == 2) gguf_writer_add_arr_str(w, "tokenizer.ggml.scores", (const char *const *)v->tok, v->n);
    if (with_keys) {
        gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
        gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false);
        gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", true);
        gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
    }
    return w;
}

static void test_spm_from_gguf(void **state) {
    (void)state;
    spm_vocab v;
    spm_vocab_init(&v, true);
    int32_t sphi = spm_add(&v, SP "hi", -1, LS_TOKTYPE_NORMAL);
    int32_t hi = spm_add(&v, "hi", -1, LS_TOKTYPE_NORMAL);
    spm_add(&v, "h", -10, LS_TOKTYPE_NORMAL);
    spm_add(&v, "i", -10, LS_TOKTYPE_NORMAL);
    void *mem;
    ls_err e;
    /* llama.cpp's defaults: BOS 1, EOS 2, UNK 0, add BOS, add the space prefix */
    gguf_writer *w = spm_gguf(&v, 0, false);
    gguf_file *f = gguf_from_writer(w, &mem);
    ls_tokenizer *t = ls_tokenizer_from_gguf(f, &e);
    if (!t) fail_msg("%s", e.msg);
    assert_int_equal(ls_tokenizer_bos(t), 1);
    assert_int_equal(ls_tokenizer_eos(t), 2);
    int32_t out[8];
    size_t n;
    assert_int_equal(ls_tokenize(t, "hi", 2, true, true, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], sphi);
    ls_tokenizer_free(t);
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);

    /* every key read (Gemma 3's: BOS 2, EOS 1, no space prefix, EOS added) */
    w = spm_gguf(&v, 0, true);
    f = gguf_from_writer(w, &mem);
    t = ls_tokenizer_from_gguf(f, &e);
    if (!t) fail_msg("%s", e.msg);
    assert_int_equal(ls_tokenizer_bos(t), 2);
    assert_int_equal(ls_tokenize(t, "hi", 2, true, true, out, 8, &n, &e), LS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[0], hi);
    assert_int_equal(out[1], 1);
    ls_tokenizer_free(t);
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);

    /* errors name the key */
    for (int k = 1; k <= 2; k++) {
        w = spm_gguf(&v, k, false);
        f = gguf_from_writer(w, &mem);
        ls_err_clear(&e);
        assert_null(ls_tokenizer_from_gguf(f, &e));
        assert_int_equal(e.code, LS_E_FORMAT);
        assert_non_null(strstr(e.msg, "tokenizer.ggml.scores"));
        gguf_close(f);
        free(mem);
        gguf_writer_free(w);
    }
    w = spm_gguf(&v, 0, false);
    gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 100000);
    f = gguf_from_writer(w, &mem);
    ls_err_clear(&e);
    assert_null(ls_tokenizer_from_gguf(f, &e));
    assert_int_equal(e.code, LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "unknown_token_id"));
    gguf_close(f);
    free(mem);
    gguf_writer_free(w);
    spm_vocab_free(&v);

    /* an unknown model kind in params */
    ls_tokenizer_params p = {.n_vocab = 1, .tokens = &(gguf_str){1, "a"}, .model = (ls_tok_model)7};
    ls_err_clear(&e);
    assert_null(ls_tokenizer_create(&p, &e));
    assert_int_equal(e.code, LS_E_INVALID);
}

/* Every allocation of building an SPM tokenizer and of tokenizing with it fails once
 * in turn: an error comes back (nothing leaks: the ASan run checks) and the next
 * attempt works. */
static void test_spm_alloc_failures(void **state) {
    (void)state;
    spm_vocab v;
    spm_vocab_init(&v, true);
    spm_add(&v, SP, -5, LS_TOKTYPE_NORMAL);
    spm_add(&v, SP "hi", -1, LS_TOKTYPE_NORMAL);
    spm_add(&v, "<tool>", 0, LS_TOKTYPE_USER_DEFINED);
    const char *text = "hi <tool> hi\xF0\x9F\x98\x80 [x]";
    int32_t want[64], got[64];
    size_t nwant, n;
    ls_err e;
    ls_tokenizer *t = spm_build(&v, true, &e);
    assert_non_null(t);
    assert_int_equal(ls_tokenize(t, text, strlen(text), true, true, want, 64, &nwant, &e), LS_OK);
    ls_tokenizer_free(t);
    int failures = 0;
    for (uint64_t k = 1;; k++) {
        ls_alloc_fail_nth(k);
        ls_err_clear(&e);
        t = spm_build(&v, true, &e);
        ls_status st = LS_E_NOMEM;
        if (t) st = ls_tokenize(t, text, strlen(text), true, true, got, 64, &n, &e);
        bool fired = ls_alloc_failed();
        ls_alloc_fail_nth(0);
        if (!fired) {
            assert_int_equal(st, LS_OK);
            assert_int_equal(n, nwant);
            assert_memory_equal(got, want, n * sizeof *got);
            ls_tokenizer_free(t);
            break;
        }
        failures++;
        if (!t) assert_int_equal(e.code, LS_E_NOMEM);
        else assert_int_equal(st, LS_E_NOMEM);
        ls_tokenizer_free(t);
    }
    assert_true(failures >= 10);
    spm_vocab_free(&v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_rank_order),
        cmocka_unit_test(test_merge_ties_leftmost_and_chains),
        cmocka_unit_test(test_pretokenizers),
        cmocka_unit_test(test_unknown_pretokenizer),
        cmocka_unit_test(test_pretokenizer_flags),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_whole_word_never_control),
        cmocka_unit_test(test_bos_eos_and_range),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_streaming_detok),
        cmocka_unit_test(test_from_gguf),
        cmocka_unit_test(test_from_gguf_errors),
        cmocka_unit_test(test_spm_merge_by_score),
        cmocka_unit_test(test_spm_space_marker_and_bytes),
        cmocka_unit_test(test_spm_invalid_utf8),
        cmocka_unit_test(test_spm_special_tokens),
        cmocka_unit_test(test_spm_detokenize),
        cmocka_unit_test(test_spm_from_gguf),
        cmocka_unit_test(test_spm_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
