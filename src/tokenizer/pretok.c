/* pretok.c - pre-tokenizers: split text into the pieces that BPE runs on.
 *
 * The split regexes are those of the HF tokenizer.json files (what llama.cpp's
 * llama-vocab.cpp reproduces), compiled with PCRE2 in UTF + UCP mode, so \p{L},
 * \p{N} and \s come from PCRE2's Unicode tables.  Like HF's Split(..., Isolated),
 * every match is a piece and so is any text between matches (the regexes below
 * cover every character, so in practice there is none).
 *
 * "smollm" (also starcoder, refact) is HF's Sequence[Digits(individual_digits),
 * ByteLevel(use_regex)]: each \p{N} character is a piece of its own and the
 * GPT-2 regex then runs separately on each stretch between them -- separately
 * matters: `\s+(?!\S)` sees the end of the stretch, not the digit after it.
 *
 * Callers pass only valid UTF-8 (tokenizer.c validates first), so matching uses
 * PCRE2_NO_UTF_CHECK and the subject is checked once, not once per match. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string.h>

#include "tokenizer/tok_internal.h"

static const char k_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char k_re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* tokenizer.ggml.pre names, as llama.cpp's llama-vocab.cpp (llama_vocab::impl::load)
 * maps them to pre-tokenizer types, for the types whose split this file implements:
 *   LLAMA3 (ignore_merges, add_bos): llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral
 *           midm-2.0 lfm2
 *   QWEN2: qwen2 deepseek-r1-qwen kormo megrez
 *   GPT2:  gpt2 (llama.cpp's default regex) gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es
 *          jina-v2-de a.x-4.0 mellum exaone4
 *   STARCODER / REFACT / SMOLLM: starcoder refact smollm (this file's SMOLLM split)
 * Not here: names whose type has another regex (deepseek-llm, deepseek-v3, falcon, mpt,
 * command-r, stablelm2, olmo, dbrx, tekken, gpt-4o/llama4, chatglm, bloom, ...) and
 * jina-v1-en / jina-v2-code / roberta-bpe (GPT-2's split, but they add a SEP token):
 * they stay a clear error. */
static const struct {
    const char *name;
    ls_pretok_kind kind;
    bool ignore_merges;
} k_names[] = {
    {"gpt2", LS_PRETOK_GPT2, false},        {"gpt-2", LS_PRETOK_GPT2, false},
    {"phi-2", LS_PRETOK_GPT2, false},       {"jina-es", LS_PRETOK_GPT2, false},
    {"jina-de", LS_PRETOK_GPT2, false},     {"gigachat", LS_PRETOK_GPT2, false},
    {"jina-v2-es", LS_PRETOK_GPT2, false},  {"jina-v2-de", LS_PRETOK_GPT2, false},
    {"a.x-4.0", LS_PRETOK_GPT2, false},     {"mellum", LS_PRETOK_GPT2, false},
    {"exaone4", LS_PRETOK_GPT2, false},     {"smollm", LS_PRETOK_SMOLLM, false},
    {"starcoder", LS_PRETOK_SMOLLM, false}, {"refact", LS_PRETOK_SMOLLM, false},
    {"llama3", LS_PRETOK_LLAMA3, true},     {"llama-v3", LS_PRETOK_LLAMA3, true},
    {"llama-bpe", LS_PRETOK_LLAMA3, true},  {"falcon3", LS_PRETOK_LLAMA3, true},
    {"falcon-h1", LS_PRETOK_LLAMA3, true},  {"pixtral", LS_PRETOK_LLAMA3, true},
    {"midm-2.0", LS_PRETOK_LLAMA3, true},   {"lfm2", LS_PRETOK_LLAMA3, true},
    {"qwen2", LS_PRETOK_QWEN2, false},      {"deepseek-r1-qwen", LS_PRETOK_QWEN2, false},
    {"kormo", LS_PRETOK_QWEN2, false},      {"megrez", LS_PRETOK_QWEN2, false},
};

int ls_pretok_lookup(const char *name, ls_pretok_kind *kind, bool *ignore_merges) {
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (strcmp(name, k_names[i].name) == 0) {
            *kind = k_names[i].kind;
            *ignore_merges = k_names[i].ignore_merges;
            return 0;
        }
    return -1;
}

const char *ls_pretok_supported_names(void) {
    return "gpt2, gpt-2, phi-2, jina-es, jina-de, gigachat, jina-v2-es, jina-v2-de, a.x-4.0, mellum, exaone4, "
           "smollm, starcoder, refact, llama3, llama-v3, llama-bpe, falcon3, falcon-h1, pixtral, midm-2.0, lfm2, "
           "qwen2, deepseek-r1-qwen, kormo, megrez";
}

static pcre2_code *compile(const char *pat, ls_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                                   &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        ls_err_set(err, LS_E_UNSUPPORTED, "tokenizer: PCRE2 cannot compile the pre-tokenizer regex: %s",
                   (const char *)msg);
        return NULL;
    }
    /* JIT where the platform allows it; the interpreter otherwise (same matches). */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

ls_status ls_pretok_init(ls_pretok *p, ls_pretok_kind kind, ls_err *err) {
    memset(p, 0, sizeof *p);
    p->kind = kind;
    const char *pat = kind == LS_PRETOK_LLAMA3 ? k_re_llama3 : kind == LS_PRETOK_QWEN2 ? k_re_qwen2 : k_re_gpt2;
    if (!(p->re = compile(pat, err))) return err ? err->code : LS_E_UNSUPPORTED;
    if (kind == LS_PRETOK_SMOLLM && !(p->digit = compile("\\p{N}", err))) {
        ls_pretok_free(p);
        return err ? err->code : LS_E_UNSUPPORTED;
    }
    return LS_OK;
}

void ls_pretok_free(ls_pretok *p) {
    pcre2_code_free((pcre2_code *)p->re);
    pcre2_code_free((pcre2_code *)p->digit);
    p->re = p->digit = NULL;
}

void *ls_pretok_match_data(const ls_pretok *p) {
    /* the patterns have no capture groups: one ovector pair is enough */
    (void)p;
    return pcre2_match_data_create(1, NULL);
}

void ls_pretok_match_data_free(void *md) { pcre2_match_data_free((pcre2_match_data *)md); }

/* Length of the UTF-8 character at s (valid input). */
static size_t char_len(const unsigned char *s) {
    return s[0] < 0x80 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : 4;
}

/* Finds the next match of re in s[0..n) at or after off; returns false when
 * there is none.  An empty match is skipped (none of our patterns has one). */
static bool next_match(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t off,
                       size_t *ms, size_t *me) {
    while (off < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) return false; /* PCRE2_ERROR_NOMATCH, or a match limit: the rest is one piece */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return true;
        }
        off = ov[0] + char_len((const unsigned char *)s + ov[0]);
    }
    return false;
}

/* Isolated split by re: matches and the gaps between them are pieces. */
static void split_regex(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, ls_tok_run *r) {
    size_t off = 0, ms, me;
    while (off < n && next_match(re, md, s, n, off, &ms, &me)) {
        if (ms > off) ls_tok_bpe(r, s + off, ms - off);
        ls_tok_bpe(r, s + ms, me - ms);
        off = me;
    }
    if (off < n) ls_tok_bpe(r, s + off, n - off);
}

void ls_pretok_run(const ls_pretok *p, void *mdv, const char *s, size_t n, ls_tok_run *r) {
    pcre2_match_data *md = mdv;
    const pcre2_code *re = p->re;
    if (p->kind != LS_PRETOK_SMOLLM) {
        split_regex(re, md, s, n, r);
        return;
    }
    size_t off = 0, ms, me;
    while (off < n && next_match((const pcre2_code *)p->digit, md, s, n, off, &ms, &me)) {
        if (ms > off) split_regex(re, md, s + off, ms - off, r);
        ls_tok_bpe(r, s + ms, me - ms);
        off = me;
    }
    if (off < n) split_regex(re, md, s + off, n - off, r);
}
