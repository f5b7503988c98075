/* tokenizer.c - the vocabulary (token strings, types, the string table), GPT-2
 * byte-level BPE, and the calls of tokenizer.h.  SentencePiece-style `llama`
 * vocabularies share the vocabulary and the detokenizer; their ls_tokenize is
 * spm.c's (see there).
 *
 * Pipeline for ls_tokenize on a GPT-2 vocabulary:
 *   1. special-token partition (parse_special): control / user-defined token
 *      strings are matched literally, leftmost-longest (as HF's added-vocabulary
 *      matcher does), and the text between them is tokenized as plain text;
 *   2. UTF-8 validation: the plain text is split into maximal valid UTF-8 runs;
 *      every byte that is not part of a valid sequence becomes a piece of its
 *      own, encoded as its single byte-level token -- or, when the vocabulary
 *      has no token for that byte (SmolLM2 has none for 0xC0, 0xC1, 0xF5..0xFF
 *      among others), as the tokens of U+FFFD.  Each valid run is pre-tokenized independently,
 *      as if the invalid bytes were separators.  (HF tokenizers only takes valid
 *      Unicode strings, so there is no reference behaviour to follow here);
 *   3. pre-tokenization (pretok.c): the file's pre-tokenizer, via PCRE2;
 *   4. BPE per piece: symbols start as the byte-level tokens of the piece's
 *      bytes and the adjacent pair of lowest merge rank is merged (ties: the
 *      leftmost) until no pair has a rank -- a heap of (rank, position).
 *      A byte of valid text that has no token (SmolLM2 lacks 0x04, 0xF1, ...)
 *      becomes the UNKNOWN-type token if there is one, else it is left out
 *      before merging, exactly as HF's BPE without an unk_token does.
 *      Llama-3 vocabularies (pre "llama3") use ignore_merges, as their
 *      tokenizer.json does: a piece that is itself a token is emitted whole.
 *
 * parse_special=false treats control AND user-defined tokens as plain text
 * (llama.cpp would still match user-defined ones; the SPM path does, see
 * spm.c).  Tested for exact equality with HF tokenizers in
 * tests/python/test_tokenizer.py.
 *
 * Nothing here is global and mutable: ls_tokenize only reads the tokenizer
 * and allocates its scratch (including the PCRE2 match data) per call, so one
 * tokenizer can be used from several threads at once. */
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* hashing                                                                  */

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ------------------------------------------------------------------------ */
/* GPT-2 bytes_to_unicode: the printable Latin-1 bytes map to themselves, the
 * other bytes to 256, 257, ... in increasing byte order. */

static bool gpt2_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void byte_to_cp_table(uint32_t cp[256]) {
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) cp[b] = gpt2_printable(b) ? (uint32_t)b : 256 + n++;
}

static int utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes one code point of valid UTF-8 (len from ls_utf8_valid_len). */
static uint32_t utf8_cp(const unsigned char *p, size_t len) {
    switch (len) {
    case 1: return p[0];
    case 2: return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
        return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
               ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    }
}

/* ------------------------------------------------------------------------ */
/* lookup tables                                                            */

int32_t ls_tok_lookup(const ls_tokenizer *t, const char *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    uint32_t i = (uint32_t)h & t->str_mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        ls_str_slot sl = t->str_slots[i];
        if (sl.id < 0) return -1;
        if (sl.tag == tag) {
            uint64_t off = t->text_off[sl.id], len = t->text_off[sl.id + 1] - off;
            if (len == n && memcmp(t->text + off, p, n) == 0) return sl.id;
        }
        i = (i + 1) & t->str_mask;
    }
}

/* Later duplicates replace earlier ones (as llama.cpp and a Python dict do); h is
 * the hash of the token's text. */
static void str_insert(ls_tokenizer *t, int32_t id, uint64_t h) {
    const char *p = t->text + t->text_off[id];
    size_t n = t->text_off[id + 1] - t->text_off[id];
    uint32_t i = (uint32_t)h & t->str_mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        ls_str_slot *sl = &t->str_slots[i];
        if (sl->id < 0) {
            *sl = (ls_str_slot){id, tag};
            return;
        }
        if (sl->tag == tag) {
            uint64_t off = t->text_off[sl->id], len = t->text_off[sl->id + 1] - off;
            if (len == n && memcmp(t->text + off, p, n) == 0) {
                sl->id = id;
                return;
            }
        }
        i = (i + 1) & t->str_mask;
    }
}

/* Inserts every token, hashing (and prefetching the slot of) each one 16 tokens
 * ahead: the table of a 262,144-token vocabulary is 4 MiB, and without the
 * prefetch every insert waits for a cache miss. */
static void str_build(ls_tokenizer *t) {
    enum { AHEAD = 16 };
    uint64_t hs[AHEAD];
    uint32_t n = t->n_vocab;
    for (uint64_t i = 0; i < (uint64_t)n + AHEAD; i++) {
        if (i >= AHEAD) str_insert(t, (int32_t)(i - AHEAD), hs[i % AHEAD]);
        if (i < n) {
            uint64_t h = hash_bytes(t->text + t->text_off[i], t->text_off[i + 1] - t->text_off[i]);
            hs[i % AHEAD] = h;
            __builtin_prefetch(&t->str_slots[(uint32_t)h & t->str_mask], 1);
        }
    }
}

static const ls_merge_slot *merge_lookup(const ls_tokenizer *t, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t i = (uint32_t)hash_u64(key) & t->merge_mask;
    for (;;) {
        const ls_merge_slot *s = &t->merges[i];
        if (s->key == UINT64_MAX) return NULL;
        if (s->key == key) return s;
        i = (i + 1) & t->merge_mask;
    }
}

/* First occurrence wins (the lower rank). */
static void merge_insert(ls_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t i = (uint32_t)hash_u64(key) & t->merge_mask;
    for (;;) {
        ls_merge_slot *s = &t->merges[i];
        if (s->key == UINT64_MAX) {
            s->key = key;
            s->rank = rank;
            s->id = id;
            t->n_merges++;
            return;
        }
        if (s->key == key) return;
        i = (i + 1) & t->merge_mask;
    }
}

/* ------------------------------------------------------------------------ */
/* create / free                                                            */

static bool is_special_type(int32_t ty) {
    return ty == LS_TOKTYPE_CONTROL || ty == LS_TOKTYPE_USER_DEFINED;
}

typedef struct {
    int32_t id;
    unsigned char first;
    uint64_t len;
} special_ent;

static int special_cmp(const void *a, const void *b) {
    const special_ent *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first */
    return x->id < y->id ? -1 : (x->id > y->id);
}

void ls_tokenizer_free(ls_tokenizer *t) {
    if (!t) return;
    ls_pretok_free(&t->pretok);
    ls_spm_free(t);
    free(t->text);
    free(t->text_off);
    free(t->dec);
    free(t->dec_off);
    free(t->types);
    free(t->str_slots);
    free(t->merges);
    free(t->special);
    free(t);
}

static bool id_ok(const ls_tokenizer *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab; }

static void add_eog(ls_tokenizer *t, int32_t id) {
    if (!id_ok(t, id)) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

/* End-of-turn token strings recognised by name (also the eot_id fallback order). */
static const char *const k_eot_names[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>"};

/* The byte-level half of ls_tokenizer_create: the pre-tokenizer, the byte tables,
 * the decoded bytes, the merges and the special-token list. */
static ls_status gpt2_init(ls_tokenizer *t, const ls_tokenizer_params *p, ls_err *err) {
    uint32_t n = t->n_vocab;
    ls_pretok_info info;
    const char *why = NULL;
    int lk = ls_pretok_lookup(p->pre ? p->pre : "gpt2", &info, &why);
    if (lk == -2) {
        ls_err_set(err, LS_E_UNSUPPORTED,
                   "tokenizer: pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported: it needs %s; "
                   "supported: %s",
                   p->pre, why, ls_pretok_supported_names());
        return LS_E_UNSUPPORTED;
    }
    if (lk != 0) {
        ls_err_set(err, LS_E_UNSUPPORTED,
                   "tokenizer: pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported; "
                   "supported: %s",
                   p->pre, ls_pretok_supported_names());
        return LS_E_UNSUPPORTED;
    }
    t->ignore_merges = info.ignore_merges;
    ls_status st = ls_pretok_init(&t->pretok, info.def, err);
    if (st != LS_OK) return st;

    /* byte-level tables */
    uint32_t *cp = t->byte_cp;
    byte_to_cp_table(cp);
    int16_t cp_to_byte[512];
    for (int i = 0; i < 512; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        char buf[4];
        int k = utf8_put(buf, cp[b]);
        t->byte_tok[b] = ls_tok_lookup(t, buf, (size_t)k);
        cp_to_byte[cp[b]] = (int16_t)b;
    }

    /* decoded bytes: each char of the byte-level alphabet gives its byte; any
     * other char (or invalid UTF-8) is kept as it is. */
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        t->dec_off[i] = off;
        const unsigned char *s = (const unsigned char *)t->text + t->text_off[i];
        size_t len = t->text_off[i + 1] - t->text_off[i];
        for (size_t j = 0; j < len;) {
            size_t k = ls_utf8_valid_len(s + j, len - j);
            if (k == 0) {
                t->dec[off++] = (char)s[j++];
                continue;
            }
            uint32_t c = utf8_cp(s + j, k);
            if (c < 512 && cp_to_byte[c] >= 0) {
                t->dec[off++] = (char)cp_to_byte[c];
            } else {
                memcpy(t->dec + off, s + j, k);
                off += k;
            }
            j += k;
        }
    }
    t->dec_off[n] = off;

    /* merges */
    if (p->n_merges && !p->merges) {
        return ls_err_set(err, LS_E_INVALID, "tokenizer: n_merges without merges");
    }
    if (p->n_merges > (uint32_t)INT32_MAX) {
        return ls_err_set(err, LS_E_RANGE, "tokenizer: too many merges (%u)", p->n_merges);
    }
    t->merge_mask = pow2_at_least((uint64_t)p->n_merges * 2) - 1;
    t->merges = ls_malloc(((size_t)t->merge_mask + 1) * sizeof *t->merges);
    if (!t->merges) return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
    for (uint32_t i = 0; i <= t->merge_mask; i++) t->merges[i].key = UINT64_MAX;
    {
        char *cat = NULL;
        size_t cat_cap = 0;
        for (uint32_t r = 0; r < p->n_merges; r++) {
            gguf_str m = p->merges[r];
            if (m.len < 3 || !m.ptr) continue;
            const char *sp = memchr(m.ptr + 1, ' ', m.len - 1);
            if (!sp) continue;
            size_t ll = (size_t)(sp - m.ptr), rl = m.len - ll - 1;
            if (rl == 0) continue;
            int32_t a = ls_tok_lookup(t, m.ptr, ll), b = ls_tok_lookup(t, sp + 1, rl);
            if (a < 0 || b < 0) continue;
            if (ll + rl > cat_cap) {
                cat_cap = (ll + rl) * 2;
                char *nc = ls_realloc(cat, cat_cap);
                if (!nc) {
                    free(cat);
                    return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
                }
                cat = nc;
            }
            memcpy(cat, m.ptr, ll);
            memcpy(cat + ll, sp + 1, rl);
            int32_t c = ls_tok_lookup(t, cat, ll + rl);
            if (c < 0) continue; /* a merge whose result is not a token can never apply */
            merge_insert(t, a, b, (int32_t)r, c);
        }
        free(cat);
    }

    /* special tokens, grouped by first byte, longest first */
    {
        uint32_t ns = 0;
        for (uint32_t i = 0; i < n; i++)
            if (is_special_type(t->types[i]) && t->text_off[i + 1] > t->text_off[i]) ns++;
        special_ent *ents = ls_malloc((ns ? ns : 1) * sizeof *ents);
        t->special = ls_malloc((ns ? ns : 1) * sizeof *t->special);
        if (!ents || !t->special) {
            free(ents);
            return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
        }
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t len = t->text_off[i + 1] - t->text_off[i];
            if (is_special_type(t->types[i]) && len > 0)
                ents[k++] = (special_ent){(int32_t)i, (unsigned char)t->text[t->text_off[i]], len};
        }
        qsort(ents, ns, sizeof *ents, special_cmp);
        uint32_t j = 0;
        for (int b = 0; b < 256; b++) {
            t->special_start[b] = j;
            while (j < ns && ents[j].first == b) {
                t->special[j] = ents[j].id;
                j++;
            }
        }
        t->special_start[256] = ns;
        free(ents);
    }

    return LS_OK;
}

ls_tokenizer *ls_tokenizer_create(const ls_tokenizer_params *p, ls_err *err) {
    if (!p || p->n_vocab == 0 || !p->tokens) {
        ls_err_set(err, LS_E_INVALID, "tokenizer: empty vocabulary");
        return NULL;
    }
    if (p->n_vocab > (uint32_t)INT32_MAX - 1) {
        ls_err_set(err, LS_E_RANGE, "tokenizer: vocabulary of %u tokens is too large", p->n_vocab);
        return NULL;
    }
    if (p->model != LS_TOKMODEL_GPT2 && p->model != LS_TOKMODEL_SPM) {
        ls_err_set(err, LS_E_INVALID, "tokenizer: unknown model kind %d", (int)p->model);
        return NULL;
    }
    ls_tokenizer *t = ls_calloc(1, sizeof *t);
    if (!t) goto nomem;
    uint32_t n = p->n_vocab;
    t->n_vocab = n;
    t->model = p->model;

    /* token strings */
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p->tokens[i].len > UINT32_MAX || (p->tokens[i].len && !p->tokens[i].ptr)) {
            ls_err_set(err, LS_E_FORMAT, "tokenizer: token %u has an invalid string", i);
            ls_tokenizer_free(t);
            return NULL;
        }
        total += p->tokens[i].len;
    }
    t->text = ls_malloc(total ? total : 1);
    t->text_off = ls_malloc((size_t)(n + 1) * sizeof *t->text_off);
    /* decoded bytes are never longer than the token text */
    t->dec = ls_malloc(total ? total : 1);
    t->dec_off = ls_malloc((size_t)(n + 1) * sizeof *t->dec_off);
    t->types = ls_malloc((size_t)n * sizeof *t->types);
    if (!t->text || !t->text_off || !t->dec || !t->dec_off || !t->types) goto nomem;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        t->text_off[i] = off;
        if (p->tokens[i].len) memcpy(t->text + off, p->tokens[i].ptr, p->tokens[i].len);
        off += p->tokens[i].len;
        t->types[i] = p->token_types ? p->token_types[i] : LS_TOKTYPE_NORMAL;
    }
    t->text_off[n] = off;

    /* string -> id */
    t->str_mask = pow2_at_least((uint64_t)n * 2) - 1;
    t->str_slots = ls_malloc(((size_t)t->str_mask + 1) * sizeof *t->str_slots);
    if (!t->str_slots) goto nomem;
    memset(t->str_slots, 0xff, ((size_t)t->str_mask + 1) * sizeof *t->str_slots);
    str_build(t);

    ls_status st = p->model == LS_TOKMODEL_SPM ? ls_spm_init(t, p, err) : gpt2_init(t, p, err);
    if (st != LS_OK) {
        ls_tokenizer_free(t);
        return NULL;
    }

    t->bos = id_ok(t, p->bos_id) ? p->bos_id : -1;
    t->eos = id_ok(t, p->eos_id) ? p->eos_id : -1;
    t->eot = id_ok(t, p->eot_id) ? p->eot_id : -1;
    t->add_bos = p->add_bos;
    t->add_eos = p->add_eos;
    t->unk = -1;
    if (t->model == LS_TOKMODEL_SPM) t->unk = id_ok(t, p->unk_id) ? p->unk_id : -1;
    else
        for (uint32_t i = 0; i < n; i++)
            if (t->types[i] == LS_TOKTYPE_UNKNOWN) {
                t->unk = (int32_t)i;
                break;
            }
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    for (size_t i = 0; i < sizeof k_eot_names / sizeof k_eot_names[0]; i++)
        add_eog(t, ls_tokenizer_find(t, k_eot_names[i]));
    /* <|endoftext|> ends generation only when it is a control token (as in llama.cpp) */
    {
        int32_t id = ls_tokenizer_find(t, "<|endoftext|>");
        if (id >= 0 && t->types[id] == LS_TOKTYPE_CONTROL) add_eog(t, id);
    }
    return t;

nomem:
    ls_tokenizer_free(t);
    ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* GGUF                                                                     */

static ls_status opt_i32(const gguf_file *f, const char *key, int32_t *out, ls_err *err) {
    if (!gguf_find(f, key)) return LS_OK;
    return gguf_get_i32(f, key, out, err);
}

static ls_status opt_bool(const gguf_file *f, const char *key, bool *out, ls_err *err) {
    if (!gguf_find(f, key)) return LS_OK;
    return gguf_get_bool(f, key, out, err);
}

static char *dup_gstr(gguf_str s) {
    char *c = ls_malloc(s.len + 1);
    if (!c) return NULL;
    if (s.len) memcpy(c, s.ptr, s.len);
    c[s.len] = '\0';
    return c;
}

ls_tokenizer *ls_tokenizer_from_gguf(const gguf_file *f, ls_err *err) {
    ls_tokenizer_params p;
    memset(&p, 0, sizeof p);
    p.bos_id = p.eos_id = p.eot_id = -1;
    ls_tokenizer *t = NULL;
    int32_t *types = NULL;
    char *pre = NULL;

    float *scores = NULL;

    gguf_str model;
    if (gguf_get_str(f, "tokenizer.ggml.model", &model, err) != LS_OK) return NULL;
    if (gguf_str_eq(model, "llama")) {
        p.model = LS_TOKMODEL_SPM;
    } else if (!gguf_str_eq(model, "gpt2")) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(model.len < 60 ? model.len : 60), model.ptr);
        ls_err_set(err, LS_E_UNSUPPORTED,
                   "tokenizer model '%s' (tokenizer.ggml.model) is not supported; "
                   "supported: 'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE)",
                   name);
        return NULL;
    }
    const bool spm = p.model == LS_TOKMODEL_SPM;
    const gguf_value *tokens, *merges = NULL;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &tokens, err) != LS_OK) return NULL;
    if (tokens->v.arr.n == 0 || tokens->v.arr.n > (uint64_t)INT32_MAX - 1) {
        ls_err_set(err, LS_E_FORMAT, "tokenizer.ggml.tokens has %llu entries",
                   (unsigned long long)tokens->v.arr.n);
        return NULL;
    }
    p.n_vocab = (uint32_t)tokens->v.arr.n;
    p.tokens = tokens->v.arr.strs;
    if (!spm && gguf_find(f, "tokenizer.ggml.merges")) { /* SPM files may carry merges: llama.cpp ignores them */
        if (gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_VT_STRING, &merges, err) != LS_OK) return NULL;
        if (merges->v.arr.n > (uint64_t)INT32_MAX) {
            ls_err_set(err, LS_E_FORMAT, "tokenizer.ggml.merges has too many entries");
            return NULL;
        }
        p.n_merges = (uint32_t)merges->v.arr.n;
        p.merges = merges->v.arr.strs;
    }
    if (gguf_find(f, "tokenizer.ggml.token_type")) {
        const gguf_value *tt;
        if (gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_VT_COUNT, &tt, err) != LS_OK) return NULL;
        if (tt->v.arr.n != p.n_vocab || !tt->v.arr.raw) {
            ls_err_set(err, LS_E_FORMAT,
                       "tokenizer.ggml.token_type has %llu integer entries, expected %u (one per token)",
                       (unsigned long long)tt->v.arr.n, p.n_vocab);
            return NULL;
        }
        switch (tt->v.arr.elem_type) {
        case GGUF_VT_INT8: case GGUF_VT_UINT8: case GGUF_VT_INT16: case GGUF_VT_UINT16:
        case GGUF_VT_INT32: case GGUF_VT_UINT32: case GGUF_VT_INT64: case GGUF_VT_UINT64:
            break;
        default:
            ls_err_set(err, LS_E_FORMAT, "tokenizer.ggml.token_type has elements of type %s",
                       gguf_vtype_name(tt->v.arr.elem_type));
            return NULL;
        }
        types = ls_malloc((size_t)p.n_vocab * sizeof *types);
        if (!types) {
            ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
            return NULL;
        }
        for (uint32_t i = 0; i < p.n_vocab; i++) {
            int64_t v = gguf_arr_i64(tt, i);
            types[i] = (v < INT32_MIN || v > INT32_MAX) ? 0 : (int32_t)v;
        }
        p.token_types = types;
    }
    if (spm && gguf_find(f, "tokenizer.ggml.scores")) {
        /* FLOAT32, or INT32 as llama.cpp also takes; at least one per token */
        const gguf_value *sv;
        if (gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VT_COUNT, &sv, err) != LS_OK) goto out;
        gguf_vtype et = sv->v.arr.elem_type;
        if ((et != GGUF_VT_FLOAT32 && et != GGUF_VT_INT32) || !sv->v.arr.raw) {
            ls_err_set(err, LS_E_FORMAT, "tokenizer.ggml.scores has elements of type %s, expected FLOAT32",
                       gguf_vtype_name(et));
            goto out;
        }
        if (sv->v.arr.n < p.n_vocab) {
            ls_err_set(err, LS_E_FORMAT, "tokenizer.ggml.scores has %llu entries, expected %u (one per token)",
                       (unsigned long long)sv->v.arr.n, p.n_vocab);
            goto out;
        }
        scores = ls_malloc((size_t)p.n_vocab * sizeof *scores);
        if (!scores) {
            ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
            goto out;
        }
        for (uint32_t i = 0; i < p.n_vocab; i++)
            scores[i] = et == GGUF_VT_FLOAT32 ? (float)gguf_arr_f64(sv, i) : (float)gguf_arr_i64(sv, i);
        p.scores = scores;
    }
    if (!spm && gguf_find(f, "tokenizer.ggml.pre")) { /* SPM: llama.cpp has one pre-tokenizer, whatever the name */
        gguf_str s;
        if (gguf_get_str(f, "tokenizer.ggml.pre", &s, err) != LS_OK) goto out;
        pre = dup_gstr(s);
        if (!pre) {
            ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
            goto out;
        }
        p.pre = pre;
    }
    if (spm) {
        /* llama.cpp's defaults for 'llama' vocabularies, each overridden by its key below */
        p.bos_id = 1;
        p.eos_id = 2;
        p.unk_id = 0;
        p.add_bos = true;
        p.add_space_prefix = true;
        if (opt_i32(f, "tokenizer.ggml.unknown_token_id", &p.unk_id, err) != LS_OK) goto out;
        if (opt_bool(f, "tokenizer.ggml.add_space_prefix", &p.add_space_prefix, err) != LS_OK) goto out;
        if (p.unk_id >= 0 && (uint32_t)p.unk_id >= p.n_vocab) {
            ls_err_set(err, LS_E_FORMAT, "tokenizer.ggml.unknown_token_id %d is out of range (n_vocab %u)", p.unk_id,
                       p.n_vocab);
            goto out;
        }
    }
    if (opt_i32(f, "tokenizer.ggml.bos_token_id", &p.bos_id, err) != LS_OK) goto out;
    if (opt_i32(f, "tokenizer.ggml.eos_token_id", &p.eos_id, err) != LS_OK) goto out;
    if (opt_i32(f, "tokenizer.ggml.eot_token_id", &p.eot_id, err) != LS_OK) goto out;
    /* llama3-style vocabularies add BOS unless the file says otherwise (as llama.cpp) */
    if (!spm) {
        ls_pretok_info pi;
        p.add_bos = pre && ls_pretok_lookup(pre, &pi, NULL) == 0 && pi.add_bos;
    }
    if (opt_bool(f, "tokenizer.ggml.add_bos_token", &p.add_bos, err) != LS_OK) goto out;
    if (opt_bool(f, "tokenizer.ggml.add_eos_token", &p.add_eos, err) != LS_OK) goto out;
    if ((p.bos_id >= 0 && (uint32_t)p.bos_id >= p.n_vocab) ||
        (p.eos_id >= 0 && (uint32_t)p.eos_id >= p.n_vocab) ||
        (p.eot_id >= 0 && (uint32_t)p.eot_id >= p.n_vocab)) {
        ls_err_set(err, LS_E_FORMAT, "tokenizer: bos/eos/eot token id out of range (n_vocab %u)",
                   p.n_vocab);
        goto out;
    }

    t = ls_tokenizer_create(&p, err);
    if (t && t->eot < 0) {
        for (size_t i = 0; i < sizeof k_eot_names / sizeof k_eot_names[0] && t->eot < 0; i++)
            t->eot = ls_tokenizer_find(t, k_eot_names[i]);
    }
out:
    free(types);
    free(pre);
    free(scores);
    return t;
}

ls_tokenizer *ls_tokenizer_open_file(const char *path, ls_err *err) {
    gguf_file *f = gguf_open(path, err);
    if (!f) return NULL;
    ls_tokenizer *t = ls_tokenizer_from_gguf(f, err);
    gguf_close(f);
    return t;
}

/* ------------------------------------------------------------------------ */
/* queries                                                                  */

uint32_t ls_tokenizer_n_vocab(const ls_tokenizer *t) { return t->n_vocab; }
int32_t ls_tokenizer_bos(const ls_tokenizer *t) { return t->bos; }
int32_t ls_tokenizer_eos(const ls_tokenizer *t) { return t->eos; }
int32_t ls_tokenizer_eot(const ls_tokenizer *t) { return t->eot; }
bool ls_tokenizer_adds_bos(const ls_tokenizer *t) { return t->add_bos; }
bool ls_tokenizer_adds_eos(const ls_tokenizer *t) { return t->add_eos; }

bool ls_tokenizer_is_eog(const ls_tokenizer *t, int32_t id) {
    if (!id_ok(t, id)) return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int32_t ls_tokenizer_find(const ls_tokenizer *t, const char *piece) {
    if (!piece) return -1;
    return ls_tok_lookup(t, piece, strlen(piece));
}

int32_t ls_tokenizer_token_type(const ls_tokenizer *t, int32_t id) {
    return id_ok(t, id) ? t->types[id] : 0;
}

/* ------------------------------------------------------------------------ */
/* tokenize                                                                 */

typedef struct {
    int32_t rank, pos, left, right, id;
} heap_ent;

static bool heap_less(const heap_ent *a, const heap_ent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

struct ls_tok_run {
    const ls_tokenizer *t;
    int32_t *out;
    size_t cap, n;
    /* BPE scratch */
    int32_t *sym, *prev, *next;
    heap_ent *heap;
    size_t sym_cap; /* heap holds 3 * sym_cap */
    char *enc; /* byte-level encoded piece (ignore_merges lookups) */
    size_t enc_cap;
    bool nomem;
};

static void emit(ls_tok_run *r, int32_t id) {
    if (r->n < r->cap) r->out[r->n] = id;
    r->n++;
}

void ls_tok_emit(ls_tok_run *r, int32_t id) { emit(r, id); }
void ls_tok_fail(ls_tok_run *r) { r->nomem = true; }

static void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static void emit_sym(ls_tok_run *r, int32_t id) {
    if (id >= 0) emit(r, id);
    else if (r->t->unk >= 0) emit(r, r->t->unk);
    /* else: a byte with no token in the vocabulary is left out (see ls_tok_bpe) */
}

static void try_pair(ls_tok_run *r, size_t *nh, int32_t pos) {
    int32_t q = r->next[pos];
    if (q < 0) return;
    const ls_merge_slot *m = merge_lookup(r->t, r->sym[pos], r->sym[q]);
    if (!m) return;
    heap_push(r->heap, nh, (heap_ent){m->rank, pos, r->sym[pos], r->sym[q], m->id});
}

/* BPE over one pre-tokenized piece of raw bytes. */
void ls_tok_bpe(ls_tok_run *r, const char *piece, size_t n) {
    const ls_tokenizer *t = r->t;
    if (n == 0 || r->nomem) return;
    if (n == 1) {
        emit_sym(r, t->byte_tok[(unsigned char)piece[0]]);
        return;
    }
    if (t->ignore_merges) {
        if (2 * n > r->enc_cap) {
            char *e = ls_realloc(r->enc, 4 * n);
            if (!e) {
                r->nomem = true;
                return;
            }
            r->enc = e;
            r->enc_cap = 4 * n;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += (size_t)utf8_put(r->enc + k, t->byte_cp[(unsigned char)piece[i]]);
        int32_t id = ls_tok_lookup(t, r->enc, k);
        /* A whole word may name a control token ("<filename>" under a pre-tokenizer that
         * keeps punctuation with letters); plain text never becomes one, so such a word
         * takes the merges like any other. */
        int32_t ty = id >= 0 && t->types ? t->types[id] : LS_TOKTYPE_NORMAL;
        if (id >= 0 && ty != LS_TOKTYPE_CONTROL && ty != LS_TOKTYPE_UNKNOWN) {
            emit(r, id);
            return;
        }
    }
    if (n > r->sym_cap) {
        size_t c = r->sym_cap ? r->sym_cap : 64;
        while (c < n) c *= 2;
        int32_t *a = ls_realloc(r->sym, c * sizeof *a);
        if (a) r->sym = a;
        int32_t *b = ls_realloc(r->prev, c * sizeof *b);
        if (b) r->prev = b;
        int32_t *d = ls_realloc(r->next, c * sizeof *d);
        if (d) r->next = d;
        heap_ent *h = ls_realloc(r->heap, 3 * c * sizeof *h);
        if (h) r->heap = h;
        if (!a || !b || !d || !h) {
            r->nomem = true;
            return;
        }
        r->sym_cap = c;
    }
    /* A byte without a token in the vocabulary becomes the unknown token when
     * the vocabulary has one, else it is left out before merging -- as HF's BPE
     * does without an unk_token (SmolLM2 lacks e.g. the tokens of 0x04, 0xF1). */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[(unsigned char)piece[i]];
        if (id < 0) id = t->unk;
        if (id >= 0) r->sym[m++] = id;
    }
    if (m == 0) return;
    for (size_t i = 0; i < m; i++) {
        r->prev[i] = (int32_t)i - 1;
        r->next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < m; i++) try_pair(r, &nh, (int32_t)i);
    while (nh) {
        heap_ent e = heap_pop(r->heap, &nh);
        int32_t p = e.pos;
        if (r->sym[p] != e.left) continue; /* stale: p was merged away or changed */
        int32_t q = r->next[p];
        if (q < 0 || r->sym[q] != e.right) continue;
        /* merge q into p */
        r->sym[p] = e.id;
        r->sym[q] = -2; /* dead */
        r->next[p] = r->next[q];
        if (r->next[q] >= 0) r->prev[r->next[q]] = p;
        if (r->prev[p] >= 0) try_pair(r, &nh, r->prev[p]);
        try_pair(r, &nh, p);
    }
    for (int32_t i = 0; i >= 0; i = r->next[i]) emit(r, r->sym[i]);
}

static void bpe_piece(void *r, const char *piece, size_t n) { ls_tok_bpe(r, piece, n); }

/* Plain text (no special tokens): validate UTF-8, pre-tokenize the valid runs,
 * and make each invalid byte a piece of its own. */
static void tokenize_plain(ls_tok_run *r, void *md, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = ls_utf8_valid_len(u + i, n - i);
        if (k) {
            i += k;
            continue;
        }
        if (i > run) ls_pretok_run(&r->t->pretok, md, s + run, i - run, bpe_piece, r);
        if (r->t->byte_tok[u[i]] >= 0) ls_tok_bpe(r, s + i, 1);
        else ls_tok_bpe(r, "\xEF\xBF\xBD", 3); /* no token for the byte: U+FFFD instead */
        i++;
        run = i;
    }
    if (n > run) ls_pretok_run(&r->t->pretok, md, s + run, n - run, bpe_piece, r);
}

/* Length of the longest special token starting at s (n bytes left), id in *id. */
static size_t match_special(const ls_tokenizer *t, const char *s, size_t n, int32_t *id) {
    unsigned char b = (unsigned char)s[0];
    for (uint32_t j = t->special_start[b]; j < t->special_start[b + 1]; j++) {
        int32_t sid = t->special[j];
        uint64_t off = t->text_off[sid], len = t->text_off[sid + 1] - off;
        if (len <= n && memcmp(t->text + off, s, len) == 0) {
            *id = sid;
            return len;
        }
    }
    return 0;
}

ls_status ls_tokenize(const ls_tokenizer *t, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, size_t cap, size_t *n_out, ls_err *err) {
    if (n_out) *n_out = 0;
    if (!t || (!text && len) || (!out && cap)) return ls_err_set(err, LS_E_INVALID, "ls_tokenize: bad arguments");
    ls_tok_run r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.out = out;
    r.cap = cap;

    if (add_special && t->add_bos && t->bos >= 0) emit(&r, t->bos);
    if (t->model == LS_TOKMODEL_SPM) {
        ls_spm_tokenize(t, &r, text, len, parse_special);
    } else {
        void *md = ls_pretok_match_data(&t->pretok);
        if (!md) return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
        if (parse_special && t->special_start[256] > 0) {
            size_t seg = 0;
            for (size_t i = 0; i < len;) {
                int32_t id;
                size_t k = match_special(t, text + i, len - i, &id);
                if (!k) {
                    i++;
                    continue;
                }
                if (i > seg) tokenize_plain(&r, md, text + seg, i - seg);
                emit(&r, id);
                i += k;
                seg = i;
            }
            if (len > seg) tokenize_plain(&r, md, text + seg, len - seg);
        } else if (len) {
            tokenize_plain(&r, md, text, len);
        }
        ls_pretok_match_data_free(md);
    }
    if (add_special && t->add_eos && t->eos >= 0) emit(&r, t->eos);

    free(r.sym);
    free(r.prev);
    free(r.next);
    free(r.heap);
    free(r.enc);
    if (r.nomem) return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
    if (n_out) *n_out = r.n;
    if (r.n > cap)
        return ls_err_set(err, LS_E_RANGE, "tokenize: %zu tokens do not fit in a buffer of %zu", r.n, cap);
    return LS_OK;
}

/* ------------------------------------------------------------------------ */
/* detokenize                                                               */

/* Where the bytes of token id are, and how many (0: it renders as nothing). */
static size_t token_span(const ls_tokenizer *t, int32_t id, bool special, const char **src) {
    int32_t ty = t->types[id];
    bool spm = t->model == LS_TOKMODEL_SPM;
    if (ty == LS_TOKTYPE_CONTROL || ty == LS_TOKTYPE_UNKNOWN || (!spm && ty == LS_TOKTYPE_UNUSED)) {
        if (!special) return 0;
        *src = t->text + t->text_off[id];
        return t->text_off[id + 1] - t->text_off[id];
    }
    if (ty == LS_TOKTYPE_USER_DEFINED) { /* literal text, not byte-level encoded nor escaped */
        *src = t->text + t->text_off[id];
        return t->text_off[id + 1] - t->text_off[id];
    }
    if (spm && ty != LS_TOKTYPE_NORMAL && ty != LS_TOKTYPE_BYTE)
        return 0; /* unused or undefined: llama.cpp's token_to_piece gives nothing */
    *src = t->dec + t->dec_off[id];
    return t->dec_off[id + 1] - t->dec_off[id];
}

size_t ls_token_bytes(const ls_tokenizer *t, int32_t id, bool special, char *buf, size_t cap) {
    if (!t || !id_ok(t, id)) return 0;
    const char *src = NULL;
    size_t n = token_span(t, id, special, &src);
    if (buf && n) memcpy(buf, src, n < cap ? n : cap);
    return n;
}

/* llama.cpp's llama_detokenize (see tokenizer.h). */
size_t ls_detokenize(const ls_tokenizer *t, const int32_t *ids, size_t n, bool remove_special,
                     bool unparse_special, char *out, size_t cap) {
    if (!t || (!ids && n) || (!out && cap)) return 0;
    bool strip = t->model == LS_TOKMODEL_SPM && t->spm.add_space_prefix;
    if (remove_special && t->add_bos && n > 0 && t->bos >= 0 && ids[0] == t->bos) {
        strip = false; /* llama.cpp keeps the space after a removed BOS */
        ids++;
        n--;
    }
    if (remove_special && t->add_eos && n > 0 && t->eos >= 0 && ids[n - 1] == t->eos) n--;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!id_ok(t, ids[i])) continue;
        const char *src = NULL;
        size_t k = token_span(t, ids[i], unparse_special, &src);
        if (i == 0 && strip && k > 0 && src[0] == ' ') { /* only the first token, at most one space */
            src++;
            k--;
        }
        if (k > 0 && total < cap) memcpy(out + total, src, k < cap - total ? k : cap - total);
        total += k;
    }
    return total;
}

void ls_detok_init(ls_detok_stream *s) {
    memset(s, 0, sizeof *s);
}

typedef struct {
    char *out;
    size_t cap, n;
} outbuf;

static void put(outbuf *o, const char *p, size_t k) {
    if (o->n + k > o->cap) return; /* truncate at a character boundary */
    memcpy(o->out + o->n, p, k);
    o->n += k;
}

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* How many bytes at p (n of them) form a valid prefix of a UTF-8 sequence:
 * returns need (the full length) and sets *ok to the length of the longest
 * valid prefix (the "maximal subpart"). */
static size_t utf8_prefix(const unsigned char *p, size_t n, size_t *ok) {
    unsigned c = p[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) { *ok = 1; return 1; }
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c == 0xE0) { need = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 3;
    else if (c == 0xED) { need = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 3;
    else if (c == 0xF0) { need = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 4;
    else if (c == 0xF4) { need = 4; hi = 0x8F; }
    else { *ok = 0; return 1; }
    size_t k = 1;
    if (k < n && k < need) {
        if (p[1] < lo || p[1] > hi) { *ok = 1; return need; }
        k = 2;
        while (k < n && k < need && p[k] >= 0x80 && p[k] <= 0xBF) k++;
    }
    *ok = k;
    return need;
}

/* Emits the complete sequences of p[0..n), returns how many trailing bytes form
 * an incomplete (still possibly valid) sequence. */
static size_t emit_utf8(outbuf *o, const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t ok, need = utf8_prefix(p + i, n - i, &ok);
        if (ok == need) {
            put(o, (const char *)p + i, need);
            i += need;
        } else if (ok == 0) {
            put(o, k_fffd, 3);
            i++;
        } else if (i + ok == n) {
            return n - i; /* incomplete at the end: wait for more */
        } else {
            put(o, k_fffd, 3); /* the maximal subpart becomes one U+FFFD */
            i += ok;
        }
    }
    return 0;
}

/* Output that does not fit in cap is dropped at a character boundary; a cap of
 * 3 * (token bytes + 3) always suffices (every byte may become a U+FFFD). */
size_t ls_detok_push(ls_detok_stream *s, const ls_tokenizer *t, int32_t id, char *out, size_t cap) {
    outbuf o = {out, cap, 0};
    char stackbuf[256];
    size_t nb = ls_token_bytes(t, id, false, NULL, 0);
    if (nb == 0) return 0;
    size_t total = (size_t)s->n_pending + nb;
    unsigned char *buf = total <= sizeof stackbuf ? (unsigned char *)stackbuf : ls_malloc(total);
    if (!buf) return 0;
    memcpy(buf, s->pending, (size_t)s->n_pending);
    ls_token_bytes(t, id, false, (char *)buf + s->n_pending, nb);
    size_t keep = emit_utf8(&o, buf, total);
    memcpy(s->pending, buf + total - keep, keep);
    s->n_pending = (int)keep;
    if ((char *)buf != stackbuf) free(buf);
    return o.n;
}

size_t ls_detok_flush(ls_detok_stream *s, char *out, size_t cap) {
    outbuf o = {out, cap, 0};
    if (s->n_pending > 0) put(&o, k_fffd, 3);
    s->n_pending = 0;
    return o.n;
}
