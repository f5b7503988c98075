/* chat.c - chat templates (see chat.h).
 *
 * A template source is compiled by the Jinja engine (jinja.c), which renders it with
 * the variables transformers passes: messages (role, content), add_generation_prompt,
 * bos_token, eos_token and, when set, enable_thinking.  A leading bos_token (trailing
 * eos_token) that the tokenizer adds itself is dropped from the text, as llama.cpp does.
 *
 * The family is also recognised from distinctive markers in the source: its name is
 * what `info` and the server report, and the eight families are rendered by hand --
 * exactly as their reference templates (and llama.cpp's llm_chat_apply_template) render
 * them -- for the --chat-template NAME override and for a recognised source the engine
 * cannot parse.  The hand renderings never write BOS: the tokenizer adds it when the
 * file's add_bos flag says so.
 *
 *   chatml   <|im_start|>{role}\n{content}<|im_end|>\n ...  gen: <|im_start|>assistant\n
 *   llama3   <|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}<|eot_id|>
 *            gen: <|start_header_id|>assistant<|end_header_id|>\n\n
 *   gemma    <start_of_turn>{user|model}\n{trim(content)}<end_of_turn>\n; system text is
 *            prepended to the next user turn as "{system}\n\n"   gen: <start_of_turn>model\n
 *   phi3     <|{role}|>\n{content}<|end|>\n              gen: <|assistant|>\n
 *   zephyr   <|{role}|>\n{content}</s>\n                 gen: <|assistant|>\n
 *   llama2   [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{trim(user)} [/INST] {trim(assistant)} </s>
 *            later user turns start with <s>[INST]; no generation header
 *   mistral  [INST] {system\n\n}{user} [/INST]{assistant}</s>; no generation header
 *   qwen3    ChatML, with Qwen 3's think blocks (its published template, as jinja2 renders it):
 *            the last query is the last user turn that is not a tool result (content
 *            "<tool_response>...</tool_response>"); none: the last message.  An assistant turn
 *            with "</think>" splits into reasoning (before the first "</think>", after the last
 *            "<think>" there, '\n' trimmed) and content (after the last "</think>", leading
 *            '\n' trimmed).  After the last query, the last message and any turn with
 *            reasoning are written "<think>\n{reasoning}\n</think>\n\n{content}" (an empty
 *            think block when there is none); every other assistant turn is written as its
 *            content alone.  gen: <|im_start|>assistant\n, and "<think>\n\n</think>\n\n"
 *            after it when enable_thinking is false (ls_chat_vars). */
#include "tokenizer/chat.h"
#include "tokenizer/jinja.h"
#include "util/alloc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_family_names[] = {"unknown", "chatml", "llama2", "llama3", "mistral",
                                             "gemma",   "phi3",   "zephyr", "qwen3",  "jinja"};
#define N_BY_NAME 9 /* the hand-rendered families: 1 .. N_BY_NAME - 1 */

struct ls_chat_jinja {
    ls_jinja *tmpl;
    char *src;        /* the source, for the summary */
    char *bos, *eos;  /* bos_token / eos_token ("" until set) */
    bool add_bos, add_eos;
};

static void jinja_free(ls_chat_jinja *j) {
    if (!j) return;
    ls_jinja_free(j->tmpl);
    free(j->src);
    free(j->bos);
    free(j->eos);
    free(j);
}

/* Compiles src; LS_OK with *out set, or the engine's error. */
static ls_status jinja_compile(const char *src, size_t len, ls_chat_jinja **out, ls_err *err) {
    *out = NULL;
    ls_chat_jinja *j = ls_calloc(1, sizeof *j);
    if (!j || !(j->src = ls_malloc(len + 1)) || !(j->bos = ls_strdup("")) || !(j->eos = ls_strdup(""))) {
        jinja_free(j);
        return ls_err_set(err, LS_E_NOMEM, "chat: out of memory");
    }
    memcpy(j->src, src, len);
    j->src[len] = '\0';
    ls_status st = ls_jinja_parse(src, len, &j->tmpl, err);
    if (st) {
        jinja_free(j);
        return st;
    }
    *out = j;
    return LS_OK;
}
#define FAMILY_LIST "chatml, llama2, llama3, mistral, gemma, phi3, zephyr, qwen3"

const char *ls_chat_family_name(ls_chat_family f) {
    if ((unsigned)f < sizeof k_family_names / sizeof k_family_names[0]) return k_family_names[f];
    return "unknown";
}

static bool has(const char *src, size_t len, const char *needle) {
    return memmem(src, len, needle, strlen(needle)) != NULL;
}

void ls_chat_template_free(ls_chat_template *t) {
    if (!t) return;
    free(t->default_system);
    jinja_free(t->jinja);
    t->default_system = NULL;
    t->jinja = NULL;
    t->family = LS_CHAT_UNKNOWN;
    t->tools_hermes = false;
}

/* The system prompt a ChatML template writes as one string literal,
 * '<|im_start|>system\n...<|im_end|>', when the conversation has none
 * (SmolLM2, Qwen2.5).  A literal that is concatenated with the message
 * content ('<|im_start|>system\n' + message['content'] + ...) is not one. */
static char *chatml_default_system(const char *src, size_t len, bool *nomem) {
    static const char head[] = "<|im_start|>system";
    static const char tail[] = "<|im_end|>";
    const char *end = src + len, *p = src;
    while ((p = memmem(p, (size_t)(end - p), head, sizeof head - 1)) != NULL) {
        const char *q = p + sizeof head - 1;
        p = q;
        if (q < end && *q == '\n') q++;
        else if (end - q >= 2 && q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *e = memmem(q, (size_t)(end - q), tail, sizeof tail - 1);
        if (!e || e <= q) continue;
        /* the text must be one literal: no unescaped quote, no Jinja markup */
        bool ok = true;
        for (const char *c = q; c < e && ok; c++) {
            if (*c == '\\') {
                c++;
                continue;
            }
            if (*c == '\'' || *c == '"') ok = false;
            if (*c == '{' && c + 1 < e && (c[1] == '{' || c[1] == '%')) ok = false;
        }
        if (!ok) continue;
        char *out = ls_malloc((size_t)(e - q) + 1);
        if (!out) {
            *nomem = true;
            return NULL;
        }
        size_t n = 0;
        for (const char *c = q; c < e; c++) {
            if (*c == '\\' && c + 1 < e) {
                c++;
                switch (*c) {
                case 'n': out[n++] = '\n'; break;
                case 't': out[n++] = '\t'; break;
                case 'r': out[n++] = '\r'; break;
                default: out[n++] = *c; break;
                }
            } else {
                out[n++] = *c;
            }
        }
        out[n] = '\0';
        return out;
    }
    return NULL;
}

/* Qwen 3's template (Qwen3 0.6B ... 235B, the hybrid thinking ones): ChatML that finds the
 * last user query, writes think blocks by the rules rendered below and reads
 * enable_thinking.  Each marker is a piece of the template that decides the output; a
 * variant without one of them (QwQ, which strips every think block; a "Thinking" template
 * whose generation prompt opens <think>; one without the enable_thinking switch) stays
 * ChatML. */
static bool is_qwen3(const char *src, size_t len) {
    if (!has(src, len, "<|im_start|>") || !has(src, len, "last_query_index") ||
        !has(src, len, "'<tool_response>'") || !has(src, len, "reasoning_content.strip(") ||
        !has(src, len, ".split('</think>')[-1].lstrip(") || !has(src, len, ".split('</think>')[0].rstrip(") ||
        !has(src, len, ".split('<think>')[-1].lstrip(") ||
        !has(src, len, "loop.last or (not loop.last and reasoning_content)"))
        return false;
    if (has(src, len, "assistant\\n<think>") || has(src, len, "assistant\n<think>")) return false;
    return has(src, len, "enable_thinking is defined and enable_thinking is false");
}

ls_status ls_chat_template_detect(const char *src, size_t len, ls_chat_template *out, ls_err *err) {
    out->family = LS_CHAT_UNKNOWN;
    out->default_system = NULL;
    out->tools_hermes = false;
    out->jinja = NULL;
    if (!src || len == 0)
        return ls_err_set(err, LS_E_UNSUPPORTED, "model has no chat template; pass --chat-template");
    ls_chat_family f = LS_CHAT_UNKNOWN;
    if (has(src, len, "<|im_start|>")) f = is_qwen3(src, len) ? LS_CHAT_QWEN3 : LS_CHAT_CHATML;
    else if (has(src, len, "<|start_header_id|>")) f = LS_CHAT_LLAMA3;
    else if (has(src, len, "<start_of_turn>")) f = LS_CHAT_GEMMA;
    else if (has(src, len, "<|user|>") && has(src, len, "<|end|>")) f = LS_CHAT_PHI3;
    else if (has(src, len, "<|user|>") && (has(src, len, "</s>") || has(src, len, "eos_token")))
        f = LS_CHAT_ZEPHYR;
    else if (has(src, len, "[INST]") && has(src, len, "<<SYS>>")) f = LS_CHAT_LLAMA2;
    else if (has(src, len, "[INST]")) f = LS_CHAT_MISTRAL;
    ls_err jerr;
    ls_err_clear(&jerr);
    ls_status js = jinja_compile(src, len, &out->jinja, &jerr);
    if (js == LS_E_NOMEM) {
        if (err) *err = jerr;
        return js;
    }
    if (f == LS_CHAT_UNKNOWN && js == LS_OK) f = LS_CHAT_JINJA;
    if (f == LS_CHAT_UNKNOWN) {
        char head[61];
        size_t k = 0;
        for (size_t i = 0; i < len && k < sizeof head - 1; i++)
            head[k++] = (src[i] == '\n' || src[i] == '\r' || src[i] == '\t') ? ' ' : src[i];
        head[k] = '\0';
        return ls_err_set(err, LS_E_UNSUPPORTED,
                          "unsupported chat template (starts \"%s%s\"): %s; pass --chat-template with one of "
                          FAMILY_LIST " or --chat-template-file",
                          head, len > k ? "..." : "", jerr.msg);
    }
    out->family = f;
    /* Qwen 2.5's tool text exactly (the rendering is checked against it); Qwen 3 / QwQ
     * (<think> handling) and Hermes 2/3 (their own system text) write tools differently */
    out->tools_hermes = f == LS_CHAT_CHATML && has(src, len, "<tool_call>") && has(src, len, "<tools>") &&
                        has(src, len, "You may call one or more functions to assist with the user query.") &&
                        !has(src, len, "<think>") && !has(src, len, "reasoning_content");
    bool nomem = false;
    if (f == LS_CHAT_CHATML) out->default_system = chatml_default_system(src, len, &nomem);
    if (nomem) {
        ls_chat_template_free(out);
        return ls_err_set(err, LS_E_NOMEM, "chat: out of memory reading the template's system prompt");
    }
    return LS_OK;
}

ls_status ls_chat_template_from_file(const char *path, ls_chat_template *out, ls_err *err) {
    out->family = LS_CHAT_UNKNOWN;
    out->default_system = NULL;
    out->tools_hermes = false;
    out->jinja = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return ls_err_set(err, LS_E_IO, "chat template file '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = ls_malloc(cap);
    ls_status st = LS_OK;
    for (;;) {
        if (!buf) {
            st = ls_err_set(err, LS_E_NOMEM, "chat template file '%s': out of memory", path);
            break;
        }
        n += fread(buf + n, 1, cap - n, fp);
        if (ferror(fp)) {
            st = ls_err_set(err, LS_E_IO, "chat template file '%s': read error", path);
            break;
        }
        if (n < cap) break;
        if (cap >= (64u << 20)) {
            st = ls_err_set(err, LS_E_INVALID, "chat template file '%s' is larger than 64 MiB", path);
            break;
        }
        char *nb = ls_realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    fclose(fp);
    if (st == LS_OK) {
        ls_err e;
        ls_err_clear(&e);
        ls_chat_jinja *j = NULL;
        st = jinja_compile(buf, n, &j, &e); /* the file must parse */
        jinja_free(j);
        if (st == LS_OK) st = ls_chat_template_detect(buf, n, out, &e);
        if (st) {
            if (st != LS_E_NOMEM) st = LS_E_INVALID;
            ls_err_set(err, st, "chat template file '%s': %s", path, e.msg);
        }
    }
    free(buf);
    return st;
}

ls_status ls_chat_template_set_tokens(ls_chat_template *t, const char *bos, const char *eos, bool add_bos,
                                      bool add_eos, ls_err *err) {
    if (!t->jinja) return LS_OK;
    char *b = ls_strdup(bos ? bos : ""), *e = ls_strdup(eos ? eos : "");
    if (!b || !e) {
        free(b);
        free(e);
        return ls_err_set(err, LS_E_NOMEM, "chat: out of memory");
    }
    free(t->jinja->bos);
    free(t->jinja->eos);
    t->jinja->bos = b;
    t->jinja->eos = e;
    t->jinja->add_bos = add_bos;
    t->jinja->add_eos = add_eos;
    return LS_OK;
}

void ls_chat_template_summary(const ls_chat_template *t, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = '\0';
    if (!t || !t->jinja) return;
    const char *s = t->jinja->src;
    while (*s == '\n' || *s == '\r' || *s == ' ' || *s == '\t') s++;
    size_t n = strcspn(s, "\r\n"), full = strlen(s);
    bool cut = n < full;
    if (n + 4 > cap) {
        n = cap > 4 ? cap - 4 : 0;
        while (n && ((unsigned char)s[n] & 0xC0) == 0x80) n--; /* whole UTF-8 characters */
        cut = true;
    }
    snprintf(buf, cap, "%.*s%s", (int)n, s, cut ? "..." : "");
}

ls_status ls_chat_template_by_name(const char *name, ls_chat_template *out, ls_err *err) {
    out->family = LS_CHAT_UNKNOWN;
    out->default_system = NULL;
    out->tools_hermes = false;
    out->jinja = NULL;
    for (size_t i = 1; name && i < N_BY_NAME; i++)
        if (strcmp(name, k_family_names[i]) == 0) {
            out->family = (ls_chat_family)i;
            return LS_OK;
        }
    return ls_err_set(err, LS_E_INVALID, "unknown chat template '%s'; valid names: " FAMILY_LIST,
                      name ? name : "(null)");
}

/* ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
    bool nomem;
} sbuf;

static void sb_addn(sbuf *b, const char *s, size_t k) {
    if (b->nomem) return;
    if (b->n + k + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + k + 1) c *= 2;
        char *np = ls_realloc(b->p, c);
        if (!np) {
            b->nomem = true;
            return;
        }
        b->p = np;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = '\0';
}

static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Jinja's |trim / str.strip() on ASCII whitespace. */
static void sb_add_trim(sbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && is_ws(s[i])) i++;
    while (n > i && is_ws(s[n - 1])) n--;
    sb_addn(b, s + i, n - i);
}

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role_t;

/* A span of a message's text; the Python string methods Qwen 3's template calls on it. */
typedef struct {
    const char *p;
    size_t n;
} span;

static span lstrip_nl(span s) {
    while (s.n && *s.p == '\n') s.p++, s.n--;
    return s;
}
static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}
static bool starts(span s, const char *w) { return s.n >= strlen(w) && memcmp(s.p, w, strlen(w)) == 0; }
static bool ends(span s, const char *w) {
    return s.n >= strlen(w) && memcmp(s.p + s.n - strlen(w), w, strlen(w)) == 0;
}
/* first / last occurrence of w in s (NULL: none) */
static const char *find_first(span s, const char *w) { return memmem(s.p, s.n, w, strlen(w)); }
static const char *find_last(span s, const char *w) {
    const char *last = NULL, *q;
    span r = s;
    while ((q = find_first(r, w)) != NULL) {
        last = q;
        r.n -= (size_t)(q + 1 - r.p);
        r.p = q + 1;
    }
    return last;
}

/* Qwen 3's messages loop (chat.c's header says what it writes). */
static void render_qwen3(sbuf *b, const role_t *roles, const ls_chat_msg *msgs, size_t n) {
    size_t last_query = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;) {
        span c = {msgs[k].content ? msgs[k].content : "", 0};
        c.n = strlen(c.p);
        if (roles[k] == ROLE_USER && !(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        span c = {msgs[i].content ? msgs[i].content : "", 0};
        c.n = strlen(c.p);
        if (roles[i] != ROLE_ASSISTANT) { /* a system message first is the same text */
            sb_add(b, roles[i] == ROLE_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
            sb_addn(b, c.p, c.n);
            sb_add(b, "<|im_end|>\n");
            continue;
        }
        span content = c, reasoning = {"", 0};
        const char *close = find_first(c, "</think>");
        if (close) {
            const char *last = find_last(c, "</think>");
            content = lstrip_nl((span){last + 8, (size_t)(c.p + c.n - (last + 8))});
            span pre = rstrip_nl((span){c.p, (size_t)(close - c.p)});
            const char *open = find_last(pre, "<think>");
            if (open) pre = (span){open + 7, (size_t)(pre.p + pre.n - (open + 7))};
            reasoning = lstrip_nl(pre);
        }
        sb_add(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || reasoning.n)) {
            span r = rstrip_nl(lstrip_nl(reasoning));
            content = lstrip_nl(content);
            sb_add(b, "<think>\n");
            sb_addn(b, r.p, r.n);
            sb_add(b, "\n</think>\n\n");
        }
        sb_addn(b, content.p, content.n);
        sb_add(b, "<|im_end|>\n");
    }
}

/* Renders through the engine with transformers' variables (chat.c's header). */
static ls_status apply_jinja(const ls_chat_jinja *j, const ls_chat_msg *msgs, size_t n, bool gen,
                             const ls_chat_vars *vars, char **out, ls_err *err) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    bool ok = root && arr && cJSON_AddItemToObject(root, "messages", arr);
    if (!ok) cJSON_Delete(arr);
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        ok = m && cJSON_AddItemToArray(arr, m) && cJSON_AddStringToObject(m, "role", msgs[i].role) &&
             cJSON_AddStringToObject(m, "content", msgs[i].content ? msgs[i].content : "");
        if (!ok && m && !m->prev) cJSON_Delete(m);
    }
    ok = ok && cJSON_AddBoolToObject(root, "add_generation_prompt", gen) &&
         cJSON_AddStringToObject(root, "bos_token", j->bos) && cJSON_AddStringToObject(root, "eos_token", j->eos);
    if (ok && vars->enable_thinking >= 0) ok = cJSON_AddBoolToObject(root, "enable_thinking", vars->enable_thinking > 0);
    if (!ok) {
        cJSON_Delete(root);
        return ls_err_set(err, LS_E_NOMEM, "chat: out of memory");
    }
    size_t len;
    ls_status st = ls_jinja_render(j->tmpl, root, out, &len, err);
    cJSON_Delete(root);
    if (st) return st;
    size_t bl = strlen(j->bos), el = strlen(j->eos), off = 0;
    if (j->add_bos && bl && len >= bl && memcmp(*out, j->bos, bl) == 0) off = bl;
    if (j->add_eos && el && len - off >= el && memcmp(*out + len - el, j->eos, el) == 0) len -= el;
    memmove(*out, *out + off, len - off);
    (*out)[len - off] = '\0';
    return LS_OK;
}

ls_status ls_chat_apply(const ls_chat_template *t, const ls_chat_msg *msgs, size_t n,
                        bool add_generation_prompt, char **out, ls_err *err) {
    return ls_chat_apply_vars(t, msgs, n, add_generation_prompt, NULL, out, err);
}

ls_status ls_chat_apply_vars(const ls_chat_template *t, const ls_chat_msg *msgs, size_t n,
                             bool add_generation_prompt, const ls_chat_vars *vars, char **out, ls_err *err) {
    const ls_chat_vars dflt = LS_CHAT_VARS_INIT;
    if (!vars) vars = &dflt;
    *out = NULL;
    if (!t || t->family == LS_CHAT_UNKNOWN || (size_t)t->family >= sizeof k_family_names / sizeof k_family_names[0] ||
        (t->family == LS_CHAT_JINJA && !t->jinja))
        return ls_err_set(err, LS_E_UNSUPPORTED, "no chat template; pass --chat-template");
    if (n && !msgs) return ls_err_set(err, LS_E_INVALID, "chat: messages missing");
    role_t *roles = ls_malloc((n ? n : 1) * sizeof *roles);
    if (!roles) return ls_err_set(err, LS_E_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (r && strcmp(r, "system") == 0) roles[i] = ROLE_SYSTEM;
        else if (r && strcmp(r, "user") == 0) roles[i] = ROLE_USER;
        else if (r && strcmp(r, "assistant") == 0) roles[i] = ROLE_ASSISTANT;
        else {
            free(roles);
            return ls_err_set(err, LS_E_INVALID,
                              "chat: message %zu has role '%s'; expected system, user or assistant", i,
                              r ? r : "(null)");
        }
    }

    if (t->jinja) {
        free(roles);
        return apply_jinja(t->jinja, msgs, n, add_generation_prompt, vars, out, err);
    }
    sbuf b = {0};
    sb_addn(&b, "", 0);
    /* the template's own system prompt when the conversation has none */
    bool add_default = t->default_system && n > 0 && roles[0] != ROLE_SYSTEM;
    size_t total = n + (add_default ? 1 : 0);
    sbuf sys = {0}; /* llama2 / mistral / gemma: system text waiting for the next user turn */
    bool first_user = true;
    bool gemma_sys = false; /* a system message waits for the first Gemma user turn */

    if (t->family == LS_CHAT_QWEN3) {
        render_qwen3(&b, roles, msgs, n);
        total = 0;
    }
    for (size_t k = 0; k < total; k++) {
        role_t role;
        const char *content;
        if (add_default && k == 0) {
            role = ROLE_SYSTEM;
            content = t->default_system;
        } else {
            size_t i = k - (add_default ? 1 : 0);
            role = roles[i];
            content = msgs[i].content ? msgs[i].content : "";
        }
        const char *rname = role == ROLE_SYSTEM ? "system" : role == ROLE_USER ? "user" : "assistant";
        switch (t->family) {
        case LS_CHAT_CHATML:
            sb_add(&b, "<|im_start|>");
            sb_add(&b, rname);
            sb_add(&b, "\n");
            sb_add(&b, content);
            sb_add(&b, "<|im_end|>\n");
            break;
        case LS_CHAT_LLAMA3:
            sb_add(&b, "<|start_header_id|>");
            sb_add(&b, rname);
            sb_add(&b, "<|end_header_id|>\n\n");
            sb_add_trim(&b, content);
            sb_add(&b, "<|eot_id|>");
            break;
        case LS_CHAT_PHI3:
        case LS_CHAT_ZEPHYR:
            sb_add(&b, "<|");
            sb_add(&b, rname);
            sb_add(&b, "|>\n");
            sb_add(&b, content);
            sb_add(&b, t->family == LS_CHAT_PHI3 ? "<|end|>\n" : "</s>\n");
            break;
        case LS_CHAT_GEMMA:
            /* Gemma 3's template: the system message, as written (even empty), then a
             * blank line, opens the first user turn. */
            if (role == ROLE_SYSTEM) {
                sb_add(&sys, content);
                gemma_sys = true;
                break;
            }
            sb_add(&b, "<start_of_turn>");
            sb_add(&b, role == ROLE_USER ? "user" : "model");
            sb_add(&b, "\n");
            if (role == ROLE_USER && gemma_sys) {
                if (sys.n) sb_add(&b, sys.p);
                sb_add(&b, "\n\n");
                sys.n = 0;
                gemma_sys = false;
            }
            sb_add_trim(&b, content);
            sb_add(&b, "<end_of_turn>\n");
            break;
        case LS_CHAT_LLAMA2:
        case LS_CHAT_MISTRAL:
            if (role == ROLE_SYSTEM) {
                if (sys.n) sb_add(&sys, "\n\n");
                if (t->family == LS_CHAT_LLAMA2) sb_add_trim(&sys, content);
                else sb_add(&sys, content);
                break;
            }
            if (role == ROLE_USER) {
                if (t->family == LS_CHAT_LLAMA2 && !first_user) sb_add(&b, "<s>");
                sb_add(&b, "[INST] ");
                if (sys.n) {
                    if (t->family == LS_CHAT_LLAMA2) {
                        sb_add(&b, "<<SYS>>\n");
                        sb_add(&b, sys.p);
                        sb_add(&b, "\n<</SYS>>\n\n");
                    } else {
                        sb_add(&b, sys.p);
                        sb_add(&b, "\n\n");
                    }
                    sys.n = 0;
                }
                if (t->family == LS_CHAT_LLAMA2) sb_add_trim(&b, content);
                else sb_add(&b, content);
                sb_add(&b, " [/INST]");
                first_user = false;
            } else if (t->family == LS_CHAT_LLAMA2) {
                sb_add(&b, " ");
                sb_add_trim(&b, content);
                sb_add(&b, " </s>");
            } else {
                sb_add(&b, content);
                sb_add(&b, "</s>");
            }
            break;
        case LS_CHAT_QWEN3: /* render_qwen3 */
        case LS_CHAT_JINJA: /* apply_jinja */
        case LS_CHAT_UNKNOWN:
            break;
        }
    }
    if (add_generation_prompt) {
        switch (t->family) {
        case LS_CHAT_CHATML: sb_add(&b, "<|im_start|>assistant\n"); break;
        case LS_CHAT_QWEN3:
            sb_add(&b, "<|im_start|>assistant\n");
            if (vars->enable_thinking == 0) sb_add(&b, "<think>\n\n</think>\n\n");
            break;
        case LS_CHAT_LLAMA3: sb_add(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
        case LS_CHAT_GEMMA: sb_add(&b, "<start_of_turn>model\n"); break;
        case LS_CHAT_PHI3:
        case LS_CHAT_ZEPHYR: sb_add(&b, "<|assistant|>\n"); break;
        default: break; /* llama2 / mistral: the prompt ends with [/INST] */
        }
    }
    free(roles);
    free(sys.p);
    if (b.nomem) {
        free(b.p);
        return ls_err_set(err, LS_E_NOMEM, "chat: out of memory");
    }
    *out = b.p;
    return LS_OK;
}
