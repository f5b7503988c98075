/* spm.c - SentencePiece-style BPE for `llama` vocabularies (tokenizer.ggml.model =
 * "llama": Llama 2, Mistral, Gemma 3), as llama.cpp's llm_tokenizer_spm and its
 * llama_vocab::tokenize do it, step for step:
 *
 *   1. special-token partition.  Special tokens are the control, unknown and
 *      user-defined ones; control and unknown count only with parse_special,
 *      user-defined ones always (Gemma's "\n", "  ", "<table>" ... are part of the
 *      segmentation: llama.cpp and SentencePiece never split them).  Like
 *      llama.cpp, the longest tokens claim their occurrences first, over the whole
 *      text, each leftmost-first without overlap, then the next length claims what
 *      is left.  (llama.cpp orders tokens of the same length with an unstable
 *      sort; here they claim together, left to right -- they differ only where
 *      two distinct special tokens of one length overlap in the text.)
 *   2. each stretch of text between special tokens: a space is prefixed when the
 *      file's add_space_prefix says so and the stretch starts the text or follows
 *      a special token; then every ' ' becomes U+2581.
 *   3. the stretch is cut into symbols by the length its lead byte announces
 *      (llama.cpp's unicode_len_utf8: no validation, so a broken sequence takes
 *      the bytes after it), and adjacent symbols whose concatenation is a token
 *      -- of any type -- are merged, highest score first, leftmost on ties: a
 *      max-heap of (score, left position), with stale entries skipped when they
 *      surface.  O(n log n) in the stretch's length, one hash lookup per pair.
 *   4. every final symbol that is a token is emitted; any other is emitted byte
 *      by byte as <0xXX> tokens (or a one-byte token), and a byte with neither
 *      as the unknown token (llama.cpp throws there), or not at all if the file
 *      has none.
 *
 * Token types follow llama.cpp's by-name rules: a token whose text llama.cpp
 * treats as end-of-generation or fill-in-the-middle ("</s>", "<end_of_turn>",
 * "<|fim_prefix|>", ...) is a control token whatever the file says (Gemma 3's
 * "</s>" is user-defined in the file), so it is matched only with parse_special
 * and rendered only with `special`.
 *
 * Like tokenizer.c, nothing here is global and mutable: the scratch is per call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/alloc.h"

static const char k_space[3] = {(char)0xE2, (char)0x96, (char)0x81}; /* U+2581 */

/* ------------------------------------------------------------------------ */
/* llama.cpp's by-name token rules (llama-vocab.cpp, llama_vocab::impl::load) */

/* Tokens that end generation by their text; llama.cpp also makes them control. */
static const char *const k_eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~[",
};
/* Fill-in-the-middle tokens: control too; the pad, repo and separator ones also end
 * generation.  (llama.cpp looks them up only when the file names no FIM id and takes
 * the first it meets; every one present is taken here.) */
static const char *const k_fim_names[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
};
static const char *const k_fim_eog_names[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
};

static void add_eog(ls_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

/* Makes the token named s a control token; returns its id or -1. */
static int32_t make_control(ls_tokenizer *t, const char *s) {
    int32_t id = ls_tok_lookup(t, s, strlen(s));
    if (id >= 0) t->types[id] = LS_TOKTYPE_CONTROL;
    return id;
}

/* ------------------------------------------------------------------------ */
/* init / free                                                              */

static bool is_special(int32_t ty) {
    return ty == LS_TOKTYPE_CONTROL || ty == LS_TOKTYPE_UNKNOWN || ty == LS_TOKTYPE_USER_DEFINED;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x > y ? -1 : x < y;
}

typedef struct {
    unsigned char first;
    uint32_t len;
} first_len;

static int cmp_first_len(const void *a, const void *b) {
    const first_len *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->len > y->len ? -1 : x->len < y->len; /* longest first */
}

ls_status ls_spm_init(ls_tokenizer *t, const ls_tokenizer_params *p, ls_err *err) {
    ls_spm *s = &t->spm;
    uint32_t n = t->n_vocab;
    s->add_space_prefix = p->add_space_prefix;

    for (size_t i = 0; i < sizeof k_eog_names / sizeof k_eog_names[0]; i++) {
        int32_t id = make_control(t, k_eog_names[i]);
        if (id >= 0) add_eog(t, id);
    }
    for (size_t i = 0; i < sizeof k_fim_names / sizeof k_fim_names[0]; i++) (void)make_control(t, k_fim_names[i]);
    for (size_t i = 0; i < sizeof k_fim_eog_names / sizeof k_fim_eog_names[0]; i++) {
        int32_t id = make_control(t, k_fim_eog_names[i]);
        if (id >= 0) add_eog(t, id);
    }

    s->scores = ls_malloc((size_t)n * sizeof *s->scores);
    if (!s->scores) return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
    for (uint32_t i = 0; i < n; i++) {
        float v = p->scores ? p->scores[i] : 0.0f;
        s->scores[i] = isnan(v) ? -INFINITY : v; /* a NaN would make the heap's order inconsistent */
    }

    /* byte fallback, as llama.cpp's byte_to_token: "<0xXX>" (upper-case hex), else the byte itself */
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = ls_tok_lookup(t, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = ls_tok_lookup(t, &c, 1);
        }
        s->byte_tok[b] = id;
    }

    /* decoded bytes: U+2581 -> ' '; a byte token "<0xXX>" -> its byte (a byte-type
     * token of another shape keeps its text).  Never longer than the text. */
    uint64_t off = 0;
    s->max_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *src = t->text + t->text_off[i];
        uint64_t len = t->text_off[i + 1] - t->text_off[i];
        if (len > s->max_len) s->max_len = len;
        t->dec_off[i] = off;
        if (t->types[i] == LS_TOKTYPE_BYTE && len == 6 && memcmp(src, "<0x", 3) == 0 && src[5] == '>' &&
            hexval((unsigned char)src[3]) >= 0 && hexval((unsigned char)src[4]) >= 0) {
            t->dec[off++] = (char)(hexval((unsigned char)src[3]) * 16 + hexval((unsigned char)src[4]));
            continue;
        }
        for (uint64_t j = 0; j < len;) {
            if (src[j] == k_space[0] && j + 3 <= len && memcmp(src + j, k_space, 3) == 0) {
                t->dec[off++] = ' ';
                j += 3;
            } else {
                t->dec[off++] = src[j++];
            }
        }
    }
    t->dec_off[n] = off;

    /* the special-token index: distinct lengths per first byte, and the byte pairs */
    uint32_t ns = 0;
    for (uint32_t i = 0; i < n; i++)
        if (is_special(t->types[i]) && t->text_off[i + 1] > t->text_off[i]) ns++;
    first_len *fl = ls_malloc((ns ? ns : 1) * sizeof *fl);
    s->lens = ls_malloc((ns ? ns : 1) * sizeof *s->lens);
    if (!fl || !s->lens) {
        free(fl);
        return ls_err_set(err, LS_E_NOMEM, "tokenizer: out of memory");
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t len = t->text_off[i + 1] - t->text_off[i];
        if (!is_special(t->types[i]) || len == 0) continue;
        const unsigned char *u = (const unsigned char *)t->text + t->text_off[i];
        fl[k++] = (first_len){u[0], (uint32_t)len}; /* token lengths fit: tokenizer.c checks */
        if (len >= 2) {
            unsigned pr = (unsigned)u[0] << 8 | u[1];
            s->pair[pr >> 6] |= 1ull << (pr & 63);
        }
    }
    qsort(fl, ns, sizeof *fl, cmp_first_len);
    uint32_t j = 0, m = 0;
    for (int b = 0; b < 256; b++) {
        s->lens_start[b] = m;
        for (; j < ns && fl[j].first == b; j++)
            if (m == s->lens_start[b] || s->lens[m - 1] != fl[j].len) {
                s->lens[m++] = fl[j].len;
                if (fl[j].len <= 64) s->lenmask[b] |= 1ull << (fl[j].len - 1);
            }
    }
    s->lens_start[256] = m;
    free(fl);
    return LS_OK;
}

void ls_spm_free(ls_tokenizer *t) {
    free(t->spm.scores);
    free(t->spm.lens);
    t->spm.scores = NULL;
    t->spm.lens = NULL;
}

/* ------------------------------------------------------------------------ */
/* the merge                                                                */

typedef struct {
    uint32_t off, len; /* bytes of the escaped stretch; len 0: merged into its left neighbour */
    int32_t prev, next;
    int32_t id;        /* the token it is once merged; -1: not merged yet (look it up) */
} sym;

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size; /* len(left) + len(right) when pushed: anything else means stale */
    int32_t id;    /* the token they make */
} bigram;

typedef struct {
    char *esc; /* the escaped stretch */
    size_t esc_cap;
    sym *sy;
    bigram *heap; /* holds 3 * sy_cap: n - 1 initial pairs plus at most 2 per merge */
    size_t sy_cap;
} scratch;

/* a comes out before b: higher score, then the leftmost (llama.cpp's comparator) */
static bool bigram_first(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(bigram *h, size_t *n, bigram e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_first(&e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static bigram heap_pop(bigram *h, size_t *n) {
    bigram top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bigram_first(&h[c + 1], &h[c])) c++;
        if (!bigram_first(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static void try_bigram(const ls_tokenizer *t, scratch *sc, size_t *nh, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const sym *l = &sc->sy[left], *r = &sc->sy[right];
    uint64_t size = (uint64_t)l->len + r->len;
    if (size > t->spm.max_len) return; /* no token is that long */
    int32_t id = ls_tok_lookup(t, sc->esc + l->off, (size_t)size);
    if (id < 0) return;
    heap_push(sc->heap, nh, (bigram){t->spm.scores[id], left, right, (uint32_t)size, id});
}

/* llama.cpp's unicode_len_utf8: the sequence length a lead byte announces */
static uint32_t lead_len(unsigned char c) {
    static const uint8_t k[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k[c >> 4];
}

static bool grow(ls_tok_run *r, scratch *sc, size_t esc_len) {
    if (esc_len > sc->esc_cap) {
        char *e = ls_realloc(sc->esc, esc_len);
        if (!e) goto fail;
        sc->esc = e;
        sc->esc_cap = esc_len;
    }
    if (esc_len > sc->sy_cap) { /* at most one symbol per byte */
        size_t c = sc->sy_cap ? sc->sy_cap : 64;
        while (c < esc_len) c *= 2;
        sym *s = ls_realloc(sc->sy, c * sizeof *s);
        if (!s) goto fail;
        sc->sy = s;
        bigram *h = ls_realloc(sc->heap, 3 * c * sizeof *h);
        if (!h) goto fail;
        sc->heap = h;
        sc->sy_cap = c;
    }
    return true;
fail:
    ls_tok_fail(r);
    return false;
}

/* Steps 2-4 for one stretch of text. */
static void spm_stretch(const ls_tokenizer *t, ls_tok_run *r, scratch *sc, const char *s, size_t n, bool prefix) {
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    if (n > (size_t)INT32_MAX / 4) { /* symbol indices are int32_t, as llama.cpp's */
        ls_tok_fail(r);
        return;
    }
    size_t esc_len = n + 2 * spaces + (prefix ? 3 : 0);
    if (esc_len == 0 || !grow(r, sc, esc_len)) return;
    char *e = sc->esc;
    size_t k = 0;
    if (prefix) {
        memcpy(e, k_space, 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(e + k, k_space, 3);
            k += 3;
        } else {
            e[k++] = s[i];
        }
    }

    int32_t ns = 0;
    for (size_t off = 0; off < esc_len; ns++) {
        uint32_t len = lead_len((unsigned char)e[off]);
        if (len > esc_len - off) len = (uint32_t)(esc_len - off);
        sc->sy[ns] = (sym){(uint32_t)off, len, ns - 1, -1, -1};
        if (ns > 0) sc->sy[ns - 1].next = ns;
        off += len;
    }

    size_t nh = 0;
    for (int32_t i = 1; i < ns; i++) try_bigram(t, sc, &nh, i - 1, i);
    while (nh) {
        bigram b = heap_pop(sc->heap, &nh);
        sym *l = &sc->sy[b.left], *rr = &sc->sy[b.right];
        if (l->len == 0 || rr->len == 0 || l->len + rr->len != b.size) continue; /* stale */
        l->len += rr->len;
        l->id = b.id;
        rr->len = 0;
        l->next = rr->next;
        if (rr->next >= 0) sc->sy[rr->next].prev = b.left;
        try_bigram(t, sc, &nh, l->prev, b.left);
        try_bigram(t, sc, &nh, b.left, l->next);
    }

    for (int32_t i = 0; i >= 0; i = sc->sy[i].next) {
        const sym *y = &sc->sy[i];
        int32_t id = y->id >= 0 ? y->id : ls_tok_lookup(t, e + y->off, y->len);
        if (id >= 0) {
            ls_tok_emit(r, id);
            continue;
        }
        for (uint32_t j = 0; j < y->len; j++) { /* byte fallback */
            id = t->spm.byte_tok[(unsigned char)e[y->off + j]];
            if (id < 0) id = t->unk;
            if (id >= 0) ls_tok_emit(r, id);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* the special-token partition and the stretches                            */

typedef struct {
    size_t pos;
    int32_t id;
    uint32_t len;
} match;

static int cmp_match_pos(const void *a, const void *b) {
    size_t x = ((const match *)a)->pos, y = ((const match *)b)->pos;
    return x < y ? -1 : x > y;
}

static bool has_len(const ls_spm *s, unsigned char b, uint32_t len) {
    if (len <= 64) return s->lenmask[b] >> (len - 1) & 1;
    for (uint32_t j = s->lens_start[b]; j < s->lens_start[b + 1]; j++) {
        if (s->lens[j] == len) return true;
        if (s->lens[j] < len) return false; /* longest first */
    }
    return false;
}

static bool allowed(int32_t ty, bool parse_special) {
    return ty == LS_TOKTYPE_USER_DEFINED || (parse_special && (ty == LS_TOKTYPE_CONTROL || ty == LS_TOKTYPE_UNKNOWN));
}

typedef struct {
    size_t pos;
    uint64_t lens; /* bit L - 1: a special token of length L <= 64 may start here */
} cand;

/* The accepted special-token matches of text, in position order, longest claiming
 * first; NULL with *n_out = 0 when there are none; NULL with *failed when out of memory.
 * Only positions whose first two bytes start some special token are looked at,
 * once per length, so ordinary text costs one table test per byte. */
static match *partition(const ls_tokenizer *t, const char *text, size_t len, bool parse_special, size_t *n_out,
                        bool *failed) {
    const ls_spm *s = &t->spm;
    const unsigned char *u = (const unsigned char *)text;
    *n_out = 0;
    *failed = false;

    cand *cs = NULL;
    size_t n_cs = 0, cap_cs = 0;
    bool any_long = false; /* a candidate byte starts a special token longer than 64 bytes */
    for (size_t i = 0; i < len; i++) {
        unsigned char b = u[i];
        if (s->lens_start[b] == s->lens_start[b + 1]) continue;
        uint64_t m = s->lenmask[b];
        bool lng = s->lens[s->lens_start[b]] > 64;
        if (i + 1 < len) {
            unsigned pr = (unsigned)b << 8 | u[i + 1];
            if (!(s->pair[pr >> 6] >> (pr & 63) & 1)) {
                m &= 1; /* only a one-byte token can start here */
                lng = false;
            }
        } else {
            m &= 1;
            lng = false;
        }
        if (!m && !lng) continue;
        any_long |= lng;
        if (n_cs == cap_cs) {
            size_t c = cap_cs ? 2 * cap_cs : 64;
            cand *a = ls_realloc(cs, c * sizeof *a);
            if (!a) goto fail;
            cs = a;
            cap_cs = c;
        }
        cs[n_cs++] = (cand){i, m};
    }
    if (n_cs == 0) return NULL;

    /* the distinct lengths of all special tokens, longest first */
    uint32_t nl = s->lens_start[256];
    uint32_t *lens = ls_malloc((nl ? nl : 1) * sizeof *lens);
    unsigned char *claimed = ls_calloc(len, 1);
    match *acc = NULL;
    size_t n_acc = 0, cap_acc = 0;
    if (!lens || !claimed) goto fail2;
    memcpy(lens, s->lens, nl * sizeof *lens);
    qsort(lens, nl, sizeof *lens, cmp_u32_desc);
    uint32_t nd = 0;
    for (uint32_t j = 0; j < nl; j++)
        if (nd == 0 || lens[nd - 1] != lens[j]) lens[nd++] = lens[j];

    for (uint32_t li = 0; li < nd; li++) {
        uint32_t L = lens[li];
        if (L > len || (L > 64 && !any_long)) continue;
        for (size_t c = 0; c < n_cs; c++) {
            size_t i = cs[c].pos;
            if (i + L > len) break; /* candidates are in position order */
            if (L <= 64 ? !(cs[c].lens >> (L - 1) & 1) : !has_len(s, u[i], L)) continue;
            if (claimed[i]) continue;
            int32_t id = ls_tok_lookup(t, text + i, L);
            if (id < 0 || !allowed(t->types[id], parse_special)) continue;
            bool free_run = true;
            for (uint32_t j = 1; j < L && free_run; j++) free_run = !claimed[i + j];
            if (!free_run) continue;
            if (n_acc == cap_acc) {
                size_t c2 = cap_acc ? 2 * cap_acc : 16;
                match *a = ls_realloc(acc, c2 * sizeof *a);
                if (!a) goto fail2;
                acc = a;
                cap_acc = c2;
            }
            acc[n_acc++] = (match){i, id, L};
            memset(claimed + i, 1, L); /* later candidates inside it see claimed[i] */
        }
    }
    free(cs);
    free(lens);
    free(claimed);
    if (n_acc) qsort(acc, n_acc, sizeof *acc, cmp_match_pos);
    else {
        free(acc);
        acc = NULL;
    }
    *n_out = n_acc;
    return acc;
fail2:
    free(lens);
    free(claimed);
    free(acc);
fail:
    free(cs);
    *failed = true;
    return NULL;
}

void ls_spm_tokenize(const ls_tokenizer *t, ls_tok_run *r, const char *text, size_t len, bool parse_special) {
    if (len == 0) return;
    size_t n_match;
    bool failed;
    match *m = partition(t, text, len, parse_special, &n_match, &failed);
    if (failed) {
        ls_tok_fail(r);
        return;
    }
    scratch sc;
    memset(&sc, 0, sizeof sc);
    bool prev_special = true; /* the text's start counts as "after a special token" */
    size_t at = 0;
    for (size_t k = 0; k <= n_match; k++) {
        size_t end = k < n_match ? m[k].pos : len;
        if (end > at) {
            spm_stretch(t, r, &sc, text + at, end - at, t->spm.add_space_prefix && prev_special);
            prev_special = false;
        }
        if (k < n_match) {
            ls_tok_emit(r, m[k].id);
            prev_special = true;
            at = m[k].pos + m[k].len;
        }
    }
    free(m);
    free(sc.esc);
    free(sc.sy);
    free(sc.heap);
}
