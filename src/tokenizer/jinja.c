/* jinja.c - a Jinja2 interpreter for chat templates (see jinja.h).
 *
 * Semantics follow jinja2 3.1 as transformers configures it (jinja.h), with Python's
 * values: None, bool, int (64-bit here; overflow is an error), float (printed as
 * Python's repr), str (indexed, sliced and measured by code point), list, tuple,
 * dict (insertion order, string keys), jinja2's Undefined (prints as nothing, is
 * false, iterates as empty; any other use is an error), namespace and loop objects.
 *
 * Syntax: {{ expr }}, {% stmt %}, {# comment #}, whitespace control {%- -%} {{- -}}
 * {%+ +%}, trim_blocks and lstrip_blocks, {% raw %}.  Statements: if/elif/else, for
 * (tuple targets, an `if` filter, else, loop.index/index0/revindex/revindex0/first/
 * last/length/previtem/nextitem/cycle), set (names, tuples, ns.attr, block set),
 * macro (positional and keyword parameters with defaults), break, continue, and
 * transformers' generation block (transparent).  Expressions: literals (strings with
 * Python escapes, ints, floats, lists, tuples, dicts), names, .attr, [index],
 * [a:b:c] slices with negative indices, calls with keyword arguments, | filters,
 * is [not] tests, `a if c else b`, or/and/not, == != < <= > >= in, not in, + - * /
 * // % ** and ~.  Filters, tests, methods and globals: the k_* tables below.
 *
 * Limits (a template is file input): nesting depth LS_JINJA_MAX_DEPTH while parsing,
 * macro calls LS_JINJA_MAX_CALLS deep, LS_JINJA_MAX_STEPS evaluation steps (each
 * node, loop iteration and filter), LS_JINJA_MAX_OUTPUT bytes out and
 * LS_JINJA_MAX_MEMORY bytes of values; range() is capped at 100000 items as jinja2's
 * sandbox caps it.  Errors unwind with longjmp to the entry point; everything
 * allocated during a parse or a render lives in one arena, so unwinding leaks
 * nothing. */
#include "tokenizer/jinja.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/alloc.h"

#define LS_JINJA_MAX_SOURCE (8u << 20)   /* bytes of template source */
#define LS_JINJA_MAX_DEPTH 100           /* nested expressions + statements while parsing */
#define LS_JINJA_MAX_CALLS 16            /* nested macro calls */
#define LS_JINJA_MAX_STEPS 50000000ull   /* evaluation steps per render */
#define LS_JINJA_MAX_OUTPUT (64u << 20)  /* bytes of output, captures included */
#define LS_JINJA_MAX_MEMORY (512u << 20) /* bytes of arena per parse or render */
#define LS_JINJA_MAX_RANGE 100000        /* jinja2 sandbox's MAX_RANGE */

/* ---- arena and errors ----------------------------------------------------- */

typedef struct blk {
    struct blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} blk;

typedef struct {
    blk *head;
    size_t total;
    jmp_buf jb;
    ls_err *err;
    ls_status code;
    int line; /* the line being parsed or run, for messages */
} jctx;

static _Noreturn void jfail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void jfail(jctx *c, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_err_set(c->err, c->code ? c->code : LS_E_INVALID, "chat template line %d: %s", c->line, msg);
    longjmp(c->jb, 1);
}

static void *amem(jctx *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!c->head || c->head->cap - c->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (c->total + cap > LS_JINJA_MAX_MEMORY) jfail(c, "template uses more than %u MiB", LS_JINJA_MAX_MEMORY >> 20);
        blk *b = ls_malloc(sizeof *b + cap);
        if (!b) {
            c->code = LS_E_NOMEM;
            jfail(c, "out of memory");
        }
        b->next = c->head;
        b->used = 0;
        b->cap = cap;
        c->head = b;
        c->total += cap;
    }
    void *p = c->head->data + c->head->used;
    c->head->used += n;
    return p;
}

static void arena_free(jctx *c) {
    for (blk *b = c->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    c->head = NULL;
    c->total = 0;
}

typedef struct {
    const char *s;
    size_t n;
} jstr;

static jstr sdup(jctx *c, const char *s, size_t n) {
    char *p = amem(c, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return (jstr){p, n};
}
static bool seq(jstr a, const char *b) { return a.n == strlen(b) && memcmp(a.s, b, a.n) == 0; }
static bool seqs(jstr a, jstr b) { return a.n == b.n && memcmp(a.s, b.s, a.n) == 0; }

/* growable byte buffer in the arena (doubling; the old block is left behind) */
typedef struct {
    char *p;
    size_t n, cap;
} jbuf;

static void bput(jctx *c, jbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = amem(c, cap);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void bputs(jctx *c, jbuf *b, const char *s) { bput(c, b, s, strlen(s)); }
static void bputc(jctx *c, jbuf *b, char ch) { bput(c, b, &ch, 1); }
static jstr bstr(jbuf *b) { return (jstr){b->p ? b->p : "", b->n}; }

/* ---- UTF-8 helpers (input is validated once) -------------------------------- */

static size_t u8len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
static size_t u8count(jstr s) {
    size_t k = 0;
    for (size_t i = 0; i < s.n; i += u8len((unsigned char)s.s[i])) k++;
    return k;
}
static uint32_t u8dec(const char *p, size_t *len) {
    const unsigned char *s = (const unsigned char *)p;
    size_t l = u8len(s[0]);
    *len = l;
    if (l == 1) return s[0];
    if (l == 2) return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    if (l == 3) return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
           (s[3] & 0x3F);
}
static size_t u8enc(uint32_t cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
/* Length of the well-formed UTF-8 sequence at p[0..n) (RFC 3629), 0 if none. */
static size_t u8valid(const unsigned char *p, size_t n) {
    if (!n) return 0;
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    size_t l = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (!l || n < l) return 0;
    for (size_t i = 1; i < l; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (b == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
    if (b == 0xED && p[1] > 0x9F) return 0; /* surrogate */
    if (b == 0xF0 && p[1] < 0x90) return 0; /* overlong */
    if (b == 0xF4 && p[1] > 0x8F) return 0; /* > U+10FFFF */
    return l;
}

/* Python's str.isspace */
static bool py_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}
/* byte offset of code point index i (0 <= i <= count) */
static size_t u8off(jstr s, size_t i) {
    size_t o = 0;
    while (i-- && o < s.n) o += u8len((unsigned char)s.s[o]);
    return o;
}

/* ---- values ---------------------------------------------------------------- */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_FUNC, V_LOOP } vtype;

typedef struct val val;
typedef struct node node;

typedef struct {
    jstr *keys;
    val **vals;
    size_t n, cap;
} jdict;

typedef struct {
    size_t idx, len;
    val **items;
} jloop;

typedef enum { F_GLOBAL, F_METHOD, F_MACRO, F_CYCLE } fkind;

typedef struct {
    fkind kind;
    const char *name;
    val *self;        /* F_METHOD: the receiver; F_CYCLE: the loop */
    const node *mac;  /* F_MACRO */
} jfunc;

struct val {
    vtype t;
    bool tuple; /* V_LIST: a tuple (its repr) */
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;
        struct {
            val **a;
            size_t n;
        } l;
        jdict *d;
        jfunc *fn;
        jloop *lp;
    };
    const char *hint; /* V_UNDEF: what was undefined */
};

static val k_undef = {.t = V_UNDEF, .hint = "value"};
static val k_none = {.t = V_NONE};
static val k_true = {.t = V_BOOL, .b = true};
static val k_false = {.t = V_BOOL, .b = false};
static val k_empty = {.t = V_STR, .s = {"", 0}};

static val *vnew(jctx *c, vtype t) {
    val *v = amem(c, sizeof *v);
    memset(v, 0, sizeof *v);
    v->t = t;
    return v;
}
static val *vundef(jctx *c, const char *hint) {
    val *v = vnew(c, V_UNDEF);
    v->hint = hint;
    return v;
}
static val *vbool(bool b) { return b ? &k_true : &k_false; }
static val *vint(jctx *c, int64_t i) {
    val *v = vnew(c, V_INT);
    v->i = i;
    return v;
}
static val *vfloat(jctx *c, double f) {
    val *v = vnew(c, V_FLOAT);
    v->f = f;
    return v;
}
static val *vstr(jctx *c, jstr s) {
    val *v = vnew(c, V_STR);
    v->s = s;
    return v;
}
static val *vlist(jctx *c, size_t n) {
    val *v = vnew(c, V_LIST);
    v->l.a = amem(c, (n ? n : 1) * sizeof(val *));
    v->l.n = n;
    return v;
}
static jdict *dnew(jctx *c) {
    jdict *d = amem(c, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}
static val *vdict(jctx *c, vtype t) {
    val *v = vnew(c, t);
    v->d = dnew(c);
    return v;
}
static val *dget(const jdict *d, jstr k) {
    for (size_t i = 0; i < d->n; i++)
        if (seqs(d->keys[i], k)) return d->vals[i];
    return NULL;
}
static void dset(jctx *c, jdict *d, jstr k, val *v) {
    for (size_t i = 0; i < d->n; i++)
        if (seqs(d->keys[i], k)) {
            d->vals[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jstr *nk = amem(c, cap * sizeof *nk);
        val **nv = amem(c, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof *nk);
            memcpy(nv, d->vals, d->n * sizeof *nv);
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = k;
    d->vals[d->n++] = v;
}

static const char *tname(const val *v) {
    switch (v->t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return v->tuple ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_FUNC: return "function";
    case V_LOOP: return "LoopContext";
    }
    return "?";
}

/* ---- tokens ------------------------------------------------------------------ */

typedef enum { T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } ttype;

typedef struct {
    ttype t;
    int line;
    jstr s;    /* T_TEXT, T_NAME, T_STR (decoded), T_OP */
    int64_t i;
    double f;
} tok;

typedef struct {
    jctx c;
    const char *src;
    size_t len;
    tok *toks;
    size_t n, cap, pos;
    int depth;
} parser;

static void tpush(parser *p, tok t) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        tok *nt = amem(&p->c, cap * sizeof *nt);
        if (p->n) memcpy(nt, p->toks, p->n * sizeof *nt);
        p->toks = nt;
        p->cap = cap;
    }
    p->toks[p->n++] = t;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static bool is_id0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_dig(char ch) { return ch >= '0' && ch <= '9'; }

static int count_lines(const char *s, size_t a, size_t b) {
    int k = 0;
    for (size_t i = a; i < b; i++) k += s[i] == '\n';
    return k;
}

/* A string literal at s[*q] (the quote), decoded as jinja2 does (Python's
 * unicode-escape on the text between the quotes). */
static jstr lex_string(parser *p, size_t *q) {
    const char *s = p->src;
    char quote = s[*q];
    size_t i = *q + 1;
    jbuf b = {0};
    bput(&p->c, &b, "", 0);
    for (;;) {
        if (i >= p->len) jfail(&p->c, "unterminated string literal");
        char ch = s[i];
        if (ch == quote) break;
        if (ch == '\n') p->c.line++;
        if (ch != '\\') {
            bputc(&p->c, &b, ch);
            i++;
            continue;
        }
        if (i + 1 >= p->len) jfail(&p->c, "unterminated string literal");
        char e = s[i + 1];
        i += 2;
        uint32_t cp = 0;
        int hex = 0;
        switch (e) {
        case 'n': bputc(&p->c, &b, '\n'); break;
        case 't': bputc(&p->c, &b, '\t'); break;
        case 'r': bputc(&p->c, &b, '\r'); break;
        case '\\': bputc(&p->c, &b, '\\'); break;
        case '\'': bputc(&p->c, &b, '\''); break;
        case '"': bputc(&p->c, &b, '"'); break;
        case 'a': bputc(&p->c, &b, '\a'); break;
        case 'b': bputc(&p->c, &b, '\b'); break;
        case 'f': bputc(&p->c, &b, '\f'); break;
        case 'v': bputc(&p->c, &b, '\v'); break;
        case '\n': p->c.line++; break; /* line continuation */
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < p->len && s[i] >= '0' && s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                char o[4];
                bput(&p->c, &b, o, u8enc(cp, o));
            } else {
                bputc(&p->c, &b, '\\');
                i--; /* the character after the backslash is text */
            }
        }
        if (hex) {
            for (int k = 0; k < hex; k++, i++) {
                char h = i < p->len ? s[i] : 0;
                int d = is_dig(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (d < 0) jfail(&p->c, "truncated \\%c escape in a string literal", e);
                cp = cp * 16 + (uint32_t)d;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) jfail(&p->c, "bad escape in a string literal");
            char o[4];
            bput(&p->c, &b, o, u8enc(cp, o));
        }
    }
    *q = i + 1;
    return bstr(&b);
}

static const char *const k_ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                    "=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|"};

/* Lexes the inside of a tag from *q up to its end marker; returns the position after it. */
static size_t lex_tag(parser *p, size_t q, char kind, bool *trim_after, bool *strip_after) {
    const char *s = p->src;
    size_t n = p->len;
    int bal = 0;
    for (;;) {
        while (q < n && is_ws(s[q])) {
            if (s[q] == '\n') p->c.line++;
            q++;
        }
        if (q >= n) jfail(&p->c, "unclosed %s", kind == '{' ? "'{{'" : "'{%'");
        char end = kind == '{' ? '}' : '%';
        if (bal == 0) {
            if (s[q] == '-' && q + 2 < n && s[q + 1] == end && s[q + 2] == '}') {
                *strip_after = true;
                return q + 3;
            }
            if (kind == '%' && s[q] == '+' && q + 2 < n && s[q + 1] == '%' && s[q + 2] == '}') return q + 3;
            if (s[q] == end && q + 1 < n && s[q + 1] == '}') {
                *trim_after = kind == '%';
                return q + 2;
            }
        }
        tok t = {.line = p->c.line};
        char ch = s[q];
        if (is_id0(ch)) {
            size_t a = q;
            while (q < n && (is_id0(s[q]) || is_dig(s[q]))) q++;
            t.t = T_NAME;
            t.s = (jstr){s + a, q - a};
        } else if (ch == '\'' || ch == '"') {
            t.t = T_STR;
            t.s = lex_string(p, &q);
        } else if (is_dig(ch)) {
            size_t a = q;
            bool flt = false;
            while (q < n && (is_dig(s[q]) || s[q] == '_')) q++;
            if (q + 1 < n && s[q] == '.' && is_dig(s[q + 1])) {
                flt = true;
                q++;
                while (q < n && (is_dig(s[q]) || s[q] == '_')) q++;
            }
            if (q < n && (s[q] == 'e' || s[q] == 'E')) {
                size_t r = q + 1;
                if (r < n && (s[r] == '+' || s[r] == '-')) r++;
                if (r < n && is_dig(s[r])) {
                    flt = true;
                    q = r;
                    while (q < n && is_dig(s[q])) q++;
                }
            }
            char num[64];
            size_t k = 0;
            for (size_t i = a; i < q && k < sizeof num - 1; i++)
                if (s[i] != '_') num[k++] = s[i];
            num[k] = '\0';
            if (flt) {
                t.t = T_FLOAT;
                t.f = strtod(num, NULL);
            } else {
                t.t = T_INT;
                char *e;
                unsigned long long u = strtoull(num, &e, 10);
                if (u > INT64_MAX || k >= sizeof num - 1) jfail(&p->c, "integer literal too large");
                t.i = (int64_t)u;
            }
        } else {
            size_t k;
            for (k = 0; k < sizeof k_ops / sizeof k_ops[0]; k++) {
                size_t l = strlen(k_ops[k]);
                if (q + l <= n && memcmp(s + q, k_ops[k], l) == 0) break;
            }
            if (k == sizeof k_ops / sizeof k_ops[0]) jfail(&p->c, "unexpected character '%c'", ch);
            t.t = T_OP;
            t.s = (jstr){k_ops[k], strlen(k_ops[k])};
            q += t.s.n;
            if (ch == '(' || ch == '[' || ch == '{') {
                if (++bal > LS_JINJA_MAX_DEPTH) jfail(&p->c, "brackets nested deeper than %d", LS_JINJA_MAX_DEPTH);
            } else if (ch == ')' || ch == ']' || ch == '}') {
                if (bal > 0) bal--;
            }
        }
        tpush(p, t);
    }
}

/* Splits the source into text and tag tokens, applying whitespace control. */
static void lex(parser *p) {
    const char *s = p->src;
    size_t n = p->len, pos = 0;
    bool line_start = true;
    p->c.line = 1;
    while (pos < n) {
        size_t t = pos;
        char kind = 0;
        for (; t + 1 < n; t++)
            if (s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')) {
                kind = s[t + 1];
                break;
            }
        if (!kind) t = n;
        size_t tend = t;
        char mod = kind && t + 2 < n ? s[t + 2] : 0;
        if (kind && mod == '-') {
            while (tend > pos && is_ws(s[tend - 1])) tend--;
        } else if (kind && mod != '+' && kind != '{') { /* lstrip_blocks */
            size_t l = t;
            while (l > pos && s[l - 1] != '\n') l--;
            if ((l > pos || line_start) && l < t) {
                bool ws = true;
                for (size_t i = l; i < t && ws; i++) ws = is_ws(s[i]);
                if (ws) tend = l;
            }
        }
        if (tend > pos) tpush(p, (tok){.t = T_TEXT, .line = p->c.line, .s = {s + pos, tend - pos}});
        p->c.line += count_lines(s, pos, t);
        if (!kind) break;
        size_t q = t + 2 + (mod == '-' || mod == '+');
        bool trim = false, strip = false;
        if (kind == '#') {
            size_t e = q;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) jfail(&p->c, "unclosed comment");
            p->c.line += count_lines(s, q, e);
            if (e > q && s[e - 1] == '-') strip = true;
            else if (!(e > q && s[e - 1] == '+')) trim = true;
            q = e + 2;
        } else {
            size_t first = p->n + 1;
            tpush(p, (tok){.t = kind == '{' ? T_VBEGIN : T_BBEGIN, .line = p->c.line});
            q = lex_tag(p, q, kind, &trim, &strip);
            tpush(p, (tok){.t = kind == '{' ? T_VEND : T_BEND, .line = p->c.line});
            /* {% raw %} ... {% endraw %}: the text between is output as written */
            if (kind == '%' && p->n == first + 2 && p->toks[first].t == T_NAME && seq(p->toks[first].s, "raw")) {
                p->n -= 3;
                size_t r = q;
                if (trim && r < n && s[r] == '\n') r++;
                else if (strip)
                    while (r < n && is_ws(s[r])) r++;
                for (size_t e = r;; e++) {
                    if (e + 1 >= n) jfail(&p->c, "missing {%% endraw %%}");
                    if (s[e] != '{' || s[e + 1] != '%') continue;
                    size_t k = e + 2;
                    bool dash = k < n && s[k] == '-';
                    if (k < n && (s[k] == '-' || s[k] == '+')) k++;
                    while (k < n && is_ws(s[k])) k++;
                    if (k + 6 > n || memcmp(s + k, "endraw", 6) != 0) continue;
                    k += 6;
                    while (k < n && is_ws(s[k])) k++;
                    bool sa = false, ta = false;
                    if (k + 2 < n && s[k] == '-' && s[k + 1] == '%' && s[k + 2] == '}') sa = true, k += 3;
                    else if (k + 2 < n && s[k] == '+' && s[k + 1] == '%' && s[k + 2] == '}') k += 3;
                    else if (k + 1 < n && s[k] == '%' && s[k + 1] == '}') ta = true, k += 2;
                    else continue;
                    size_t te = e;
                    if (dash)
                        while (te > r && is_ws(s[te - 1])) te--;
                    if (te > r) tpush(p, (tok){.t = T_TEXT, .line = p->c.line, .s = {s + r, te - r}});
                    p->c.line += count_lines(s, r, k);
                    q = k;
                    trim = ta;
                    strip = sa;
                    break;
                }
            }
        }
        if (strip) {
            while (q < n && is_ws(s[q])) {
                if (s[q] == '\n') p->c.line++;
                q++;
            }
        } else if (trim && q < n && s[q] == '\n') {
            p->c.line++;
            q++;
        }
        pos = q;
        line_start = pos > 0 && s[pos - 1] == '\n';
    }
    tpush(p, (tok){.t = T_EOF, .line = p->c.line});
}

/* ---- AST ---------------------------------------------------------------------- */

typedef enum {
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NOT, E_NEG, E_POS, E_BIN, E_AND, E_OR,
    E_COND, E_LIST, E_TUPLE, E_DICT, E_CMP
} ekind;

typedef struct expr expr;
struct expr {
    ekind k;
    int line;
    jstr name;     /* E_NAME, E_ATTR, E_FILTER, E_TEST; E_BIN: the operator */
    val *lit;      /* E_LIT */
    expr *a, *b, *c;
    expr **args;   /* calls, filters, tests (after the subject), lists, dicts (k, v pairs), E_CMP operands */
    jstr *kw;      /* per arg: keyword name, or {NULL, 0} */
    size_t nargs;
    jstr *ops;     /* E_CMP: nargs - 1 operators */
    bool neg;      /* E_TEST: is not */
};

typedef enum { N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE, N_BLOCK } nkind;

typedef struct {
    node **a;
    size_t n;
} nlist;

struct node {
    nkind k;
    int line;
    jstr text;        /* N_TEXT */
    expr *e;          /* N_OUT, N_IF condition, N_FOR iterable, N_SET value */
    expr *cond;       /* N_FOR: the `if` filter */
    expr *attr_of;    /* N_SET / N_SETBLOCK on ns.attr: the namespace expression; name is the attribute */
    jstr name;        /* N_MACRO: its name; N_SET on ns.attr: the attribute */
    jstr *targets;    /* N_FOR, N_SET, N_SETBLOCK: names */
    size_t ntargets;
    bool tuple_target;
    nlist body, orelse;
    jstr *params;     /* N_MACRO */
    expr **defaults;  /* N_MACRO: per param, or NULL */
    size_t nparams;
};

struct ls_jinja {
    jctx c; /* owns the arena with the tokens and the tree */
    nlist root;
};

/* ---- parser --------------------------------------------------------------------- */

static tok *peek(parser *p) { return &p->toks[p->pos]; }
static tok *peek2(parser *p) { return &p->toks[p->pos + 1 < p->n ? p->pos + 1 : p->pos]; }
static tok *next(parser *p) {
    tok *t = &p->toks[p->pos];
    if (t->t != T_EOF) p->pos++;
    p->c.line = t->line;
    return t;
}
static bool is_op(tok *t, const char *op) { return t->t == T_OP && seq(t->s, op); }
static bool is_name(tok *t, const char *nm) { return t->t == T_NAME && seq(t->s, nm); }
static const char *tdesc(tok *t) {
    switch (t->t) {
    case T_NAME: case T_OP: return "a name or operator";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    case T_VEND: return "'}}'";
    case T_BEND: return "'%}'";
    case T_EOF: return "the end of the template";
    default: return "text";
    }
}
static void expect_op(parser *p, const char *op) {
    tok *t = peek(p);
    p->c.line = t->line;
    if (!is_op(t, op)) {
        if (t->t == T_NAME || t->t == T_OP) jfail(&p->c, "expected '%s', got '%.*s'", op, (int)t->s.n, t->s.s);
        jfail(&p->c, "expected '%s', got %s", op, tdesc(t));
    }
    next(p);
}
static jstr expect_name(parser *p) {
    tok *t = peek(p);
    p->c.line = t->line;
    if (t->t != T_NAME) jfail(&p->c, "expected a name, got %s", tdesc(t));
    return next(p)->s;
}
static void expect_t(parser *p, ttype tt) {
    tok *t = peek(p);
    p->c.line = t->line;
    if (t->t != tt) {
        if (t->t == T_NAME || t->t == T_OP)
            jfail(&p->c, "expected %s, got '%.*s'", tt == T_BEND ? "'%}'" : "'}}'", (int)t->s.n, t->s.s);
        jfail(&p->c, "expected %s, got %s", tt == T_BEND ? "'%}'" : "'}}'", tdesc(t));
    }
    next(p);
}
static void enter(parser *p) {
    if (++p->depth > LS_JINJA_MAX_DEPTH) jfail(&p->c, "nested deeper than %d", LS_JINJA_MAX_DEPTH);
}

static expr *enew(parser *p, ekind k) {
    expr *e = amem(&p->c, sizeof *e);
    memset(e, 0, sizeof *e);
    e->k = k;
    e->line = p->c.line;
    return e;
}

/* a growable array of expr pointers + keyword names */
typedef struct {
    expr **a;
    jstr *kw;
    size_t n, cap;
} eargs;
static void eadd(parser *p, eargs *v, expr *e, jstr kw) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        expr **na = amem(&p->c, cap * sizeof *na);
        jstr *nk = amem(&p->c, cap * sizeof *nk);
        if (v->n) {
            memcpy(na, v->a, v->n * sizeof *na);
            memcpy(nk, v->kw, v->n * sizeof *nk);
        }
        v->a = na;
        v->kw = nk;
        v->cap = cap;
    }
    v->a[v->n] = e;
    v->kw[v->n++] = kw;
}

static expr *parse_expr(parser *p, bool condexpr);
static expr *parse_unary(parser *p, bool with_filter);
static expr *parse_primary(parser *p);
static expr *parse_postfix(parser *p, expr *e);

/* expression list `a, b` as a tuple (one item without a comma: the item itself) */
static expr *parse_tuple(parser *p, bool condexpr) {
    expr *first = parse_expr(p, condexpr);
    if (!is_op(peek(p), ",")) return first;
    eargs v = {0};
    eadd(p, &v, first, (jstr){0});
    while (is_op(peek(p), ",")) {
        next(p);
        tok *t = peek(p);
        if (t->t == T_VEND || t->t == T_BEND || is_op(t, ")") || is_name(t, "if")) break;
        eadd(p, &v, parse_expr(p, condexpr), (jstr){0});
    }
    expr *e = enew(p, E_TUPLE);
    e->args = v.a;
    e->nargs = v.n;
    return e;
}

/* `(args)` after the '(' was seen: positional and name=value */
static void parse_args(parser *p, eargs *v) {
    expect_op(p, "(");
    while (!is_op(peek(p), ")")) {
        if (v->n) {
            expect_op(p, ",");
            if (is_op(peek(p), ")")) break;
        }
        jstr kw = {0};
        if (peek(p)->t == T_NAME && is_op(peek2(p), "=")) {
            kw = next(p)->s;
            next(p);
        } else {
            for (size_t i = 0; i < v->n; i++)
                if (v->kw[i].s) jfail(&p->c, "positional argument after a keyword argument");
        }
        eadd(p, v, parse_expr(p, true), kw);
    }
    next(p);
}

static expr *parse_filter_chain(parser *p, expr *e) {
    for (;;) {
        tok *t = peek(p);
        if (is_op(t, "|")) {
            next(p);
            jstr name = expect_name(p);
            while (is_op(peek(p), ".")) { /* dotted filter names: take the last part */
                next(p);
                name = expect_name(p);
            }
            expr *f = enew(p, E_FILTER);
            f->name = name;
            f->a = e;
            if (is_op(peek(p), "(")) {
                eargs v = {0};
                parse_args(p, &v);
                f->args = v.a;
                f->kw = v.kw;
                f->nargs = v.n;
            }
            e = f;
        } else if (is_name(t, "is")) {
            next(p);
            expr *f = enew(p, E_TEST);
            if (is_name(peek(p), "not")) {
                next(p);
                f->neg = true;
            }
            f->name = expect_name(p);
            f->a = e;
            tok *u = peek(p);
            if (is_op(u, "(")) {
                eargs v = {0};
                parse_args(p, &v);
                f->args = v.a;
                f->kw = v.kw;
                f->nargs = v.n;
            } else if ((u->t == T_NAME || u->t == T_STR || u->t == T_INT || u->t == T_FLOAT || is_op(u, "[") ||
                        is_op(u, "{")) &&
                       !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and") && !is_name(u, "is") &&
                       !is_name(u, "if") && !is_name(u, "in") && !is_name(u, "not")) {
                f->args = amem(&p->c, sizeof(expr *));
                f->kw = amem(&p->c, sizeof(jstr));
                f->kw[0] = (jstr){0};
                f->args[0] = parse_postfix(p, parse_primary(p));
                f->nargs = 1;
            }
            e = f;
        } else if (is_op(t, "(")) {
            expr *f = enew(p, E_CALL);
            eargs v = {0};
            parse_args(p, &v);
            f->a = e;
            f->args = v.a;
            f->kw = v.kw;
            f->nargs = v.n;
            e = f;
        } else {
            return e;
        }
    }
}

static expr *parse_primary(parser *p) {
    enter(p);
    tok *t = next(p);
    expr *e;
    if (t->t == T_NAME) {
        if (seq(t->s, "true") || seq(t->s, "True")) (e = enew(p, E_LIT))->lit = &k_true;
        else if (seq(t->s, "false") || seq(t->s, "False")) (e = enew(p, E_LIT))->lit = &k_false;
        else if (seq(t->s, "none") || seq(t->s, "None")) (e = enew(p, E_LIT))->lit = &k_none;
        else (e = enew(p, E_NAME))->name = t->s;
    } else if (t->t == T_STR) {
        jstr s = t->s;
        if (peek(p)->t == T_STR) { /* adjacent literals concatenate */
            jbuf b = {0};
            bput(&p->c, &b, s.s, s.n);
            while (peek(p)->t == T_STR) {
                jstr u = next(p)->s;
                bput(&p->c, &b, u.s, u.n);
            }
            s = bstr(&b);
        }
        (e = enew(p, E_LIT))->lit = vstr(&p->c, s);
    } else if (t->t == T_INT) {
        (e = enew(p, E_LIT))->lit = vint(&p->c, t->i);
    } else if (t->t == T_FLOAT) {
        (e = enew(p, E_LIT))->lit = vfloat(&p->c, t->f);
    } else if (is_op(t, "(")) {
        if (is_op(peek(p), ")")) {
            next(p);
            e = enew(p, E_TUPLE);
        } else {
            e = parse_expr(p, true);
            if (is_op(peek(p), ",")) {
                eargs v = {0};
                eadd(p, &v, e, (jstr){0});
                while (is_op(peek(p), ",")) {
                    next(p);
                    if (is_op(peek(p), ")")) break;
                    eadd(p, &v, parse_expr(p, true), (jstr){0});
                }
                e = enew(p, E_TUPLE);
                e->args = v.a;
                e->nargs = v.n;
            }
            expect_op(p, ")");
        }
    } else if (is_op(t, "[")) {
        eargs v = {0};
        while (!is_op(peek(p), "]")) {
            if (v.n) {
                expect_op(p, ",");
                if (is_op(peek(p), "]")) break;
            }
            eadd(p, &v, parse_expr(p, true), (jstr){0});
        }
        next(p);
        e = enew(p, E_LIST);
        e->args = v.a;
        e->nargs = v.n;
    } else if (is_op(t, "{")) {
        eargs v = {0};
        while (!is_op(peek(p), "}")) {
            if (v.n) {
                expect_op(p, ",");
                if (is_op(peek(p), "}")) break;
            }
            eadd(p, &v, parse_expr(p, true), (jstr){0});
            expect_op(p, ":");
            eadd(p, &v, parse_expr(p, true), (jstr){0});
        }
        next(p);
        e = enew(p, E_DICT);
        e->args = v.a;
        e->nargs = v.n;
    } else {
        if (t->t == T_OP) jfail(&p->c, "unexpected '%.*s'", (int)t->s.n, t->s.s);
        jfail(&p->c, "unexpected %s", tdesc(t));
    }
    p->depth--;
    return e;
}

static expr *parse_postfix(parser *p, expr *e) {
    for (;;) {
        tok *t = peek(p);
        if (is_op(t, ".")) {
            next(p);
            tok *u = next(p);
            expr *f;
            if (u->t == T_NAME) {
                f = enew(p, E_ATTR);
                f->name = u->s;
            } else if (u->t == T_INT) { /* x.0 is x[0] */
                f = enew(p, E_ITEM);
                f->b = enew(p, E_LIT);
                f->b->lit = vint(&p->c, u->i);
            } else {
                jfail(&p->c, "expected a name after '.'");
            }
            f->a = e;
            e = f;
        } else if (is_op(t, "[")) {
            next(p);
            expr *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            bool slice = false;
            for (;;) {
                tok *u = peek(p);
                if (is_op(u, ":")) {
                    next(p);
                    slice = true;
                    if (++k > 2) jfail(&p->c, "too many ':' in a slice");
                    continue;
                }
                if (is_op(u, "]")) break;
                if (parts[k]) jfail(&p->c, "expected ']'");
                parts[k] = parse_expr(p, true);
                if (!slice && is_op(peek(p), ",")) jfail(&p->c, "tuple subscripts are not supported");
            }
            next(p);
            expr *f;
            if (slice) {
                f = enew(p, E_SLICE);
                f->args = amem(&p->c, 3 * sizeof(expr *));
                memcpy(f->args, parts, sizeof parts);
                f->nargs = 3;
            } else {
                if (!parts[0]) jfail(&p->c, "empty subscript");
                f = enew(p, E_ITEM);
                f->b = parts[0];
            }
            f->a = e;
            e = f;
        } else if (is_op(t, "(")) {
            expr *f = enew(p, E_CALL);
            eargs v = {0};
            parse_args(p, &v);
            f->a = e;
            f->args = v.a;
            f->kw = v.kw;
            f->nargs = v.n;
            e = f;
        } else {
            return e;
        }
    }
}

static expr *parse_unary(parser *p, bool with_filter) {
    enter(p);
    expr *e;
    tok *t = peek(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        e = enew(p, t->s.s[0] == '-' ? E_NEG : E_POS);
        e->a = parse_unary(p, false);
    } else {
        e = parse_primary(p);
    }
    e = parse_postfix(p, e);
    if (with_filter) e = parse_filter_chain(p, e);
    p->depth--;
    return e;
}

static expr *ebin(parser *p, const char *op, expr *a, expr *b) {
    expr *e = enew(p, E_BIN);
    e->name = (jstr){op, strlen(op)};
    e->a = a;
    e->b = b;
    return e;
}

static expr *parse_pow(parser *p) {
    expr *e = parse_unary(p, true);
    while (is_op(peek(p), "**")) {
        next(p);
        e = ebin(p, "**", e, parse_unary(p, true));
    }
    return e;
}
static expr *parse_math2(parser *p) {
    expr *e = parse_pow(p);
    for (;;) {
        tok *t = peek(p);
        if (!(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%"))) return e;
        next(p);
        e = ebin(p, t->s.s, e, parse_pow(p));
    }
}
static expr *parse_concat(parser *p) {
    expr *e = parse_math2(p);
    while (is_op(peek(p), "~")) {
        next(p);
        e = ebin(p, "~", e, parse_math2(p));
    }
    return e;
}
static expr *parse_math1(parser *p) {
    expr *e = parse_concat(p);
    for (;;) {
        tok *t = peek(p);
        if (!(is_op(t, "+") || is_op(t, "-"))) return e;
        next(p);
        e = ebin(p, t->s.s, e, parse_concat(p));
    }
}
static expr *parse_compare(parser *p) {
    expr *first = parse_math1(p);
    eargs v = {0};
    jstr ops[64];
    size_t nops = 0;
    for (;;) {
        tok *t = peek(p);
        const char *op = NULL;
        if (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, "<=") || is_op(t, ">") || is_op(t, ">=")) {
            op = t->s.s;
            next(p);
        } else if (is_name(t, "in")) {
            op = "in";
            next(p);
        } else if (is_name(t, "not") && is_name(peek2(p), "in")) {
            op = "not in";
            next(p);
            next(p);
        } else {
            break;
        }
        if (nops == sizeof ops / sizeof ops[0]) jfail(&p->c, "too many chained comparisons");
        if (!v.n) eadd(p, &v, first, (jstr){0});
        ops[nops++] = (jstr){op, strlen(op)};
        eadd(p, &v, parse_math1(p), (jstr){0});
    }
    if (!nops) return first;
    expr *e = enew(p, E_CMP);
    e->args = v.a;
    e->nargs = v.n;
    e->ops = amem(&p->c, nops * sizeof(jstr));
    memcpy(e->ops, ops, nops * sizeof(jstr));
    return e;
}
static expr *parse_not(parser *p) {
    if (is_name(peek(p), "not")) {
        next(p);
        enter(p);
        expr *e = enew(p, E_NOT);
        e->a = parse_not(p);
        p->depth--;
        return e;
    }
    return parse_compare(p);
}
static expr *parse_and(parser *p) {
    expr *e = parse_not(p);
    while (is_name(peek(p), "and")) {
        next(p);
        expr *f = enew(p, E_AND);
        f->a = e;
        f->b = parse_not(p);
        e = f;
    }
    return e;
}
static expr *parse_or(parser *p) {
    expr *e = parse_and(p);
    while (is_name(peek(p), "or")) {
        next(p);
        expr *f = enew(p, E_OR);
        f->a = e;
        f->b = parse_and(p);
        e = f;
    }
    return e;
}
static expr *parse_expr(parser *p, bool condexpr) {
    enter(p);
    expr *e = parse_or(p);
    while (condexpr && is_name(peek(p), "if")) {
        next(p);
        expr *f = enew(p, E_COND);
        f->a = e;
        f->b = parse_or(p);
        if (is_name(peek(p), "else")) {
            next(p);
            f->c = parse_expr(p, true);
        }
        e = f;
    }
    p->depth--;
    return e;
}

/* ---- statements ---- */

typedef struct {
    node **a;
    size_t n, cap;
} nvec;
static void nadd(parser *p, nvec *v, node *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        node **na = amem(&p->c, cap * sizeof *na);
        if (v->n) memcpy(na, v->a, v->n * sizeof *na);
        v->a = na;
        v->cap = cap;
    }
    v->a[v->n++] = x;
}
static node *nnew(parser *p, nkind k) {
    node *x = amem(&p->c, sizeof *x);
    memset(x, 0, sizeof *x);
    x->k = k;
    x->line = p->c.line;
    return x;
}

/* Parses nodes until a block tag whose name is one of ends (NULL-terminated); the
 * tag's name is consumed and returned in *which (the rest of the tag is the
 * caller's).  ends NULL: until the end of the template. */
static nlist parse_body(parser *p, const char *const *ends, jstr *which);

static void parse_targets(parser *p, node *x) {
    jstr names[16];
    size_t k = 0;
    bool paren = false;
    if (is_op(peek(p), "(")) {
        next(p);
        paren = true;
    }
    for (;;) {
        if (k == 16) jfail(&p->c, "too many assignment targets");
        names[k++] = expect_name(p);
        if (!is_op(peek(p), ",")) break;
        next(p);
        x->tuple_target = true;
    }
    if (paren) {
        expect_op(p, ")");
        x->tuple_target = true;
    }
    x->targets = amem(&p->c, k * sizeof(jstr));
    memcpy(x->targets, names, k * sizeof(jstr));
    x->ntargets = k;
}

static node *parse_stmt(parser *p) {
    enter(p);
    jstr kw = expect_name(p);
    node *x;
    jstr which;
    if (seq(kw, "if")) {
        x = nnew(p, N_IF);
        x->e = parse_tuple(p, true);
        expect_t(p, T_BEND);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        x->body = parse_body(p, ends, &which);
        node *cur = x;
        while (seq(which, "elif")) {
            node *y = nnew(p, N_IF);
            y->e = parse_tuple(p, true);
            expect_t(p, T_BEND);
            y->body = parse_body(p, ends, &which);
            cur->orelse.a = amem(&p->c, sizeof(node *));
            cur->orelse.a[0] = y;
            cur->orelse.n = 1;
            cur = y;
        }
        if (seq(which, "else")) {
            expect_t(p, T_BEND);
            static const char *const ends2[] = {"endif", NULL};
            cur->orelse = parse_body(p, ends2, &which);
        }
        expect_t(p, T_BEND);
    } else if (seq(kw, "for")) {
        x = nnew(p, N_FOR);
        parse_targets(p, x);
        if (!is_name(peek(p), "in")) jfail(&p->c, "expected 'in' in a for loop");
        next(p);
        x->e = parse_tuple(p, false);
        if (is_name(peek(p), "if")) {
            next(p);
            x->cond = parse_expr(p, true);
        }
        if (is_name(peek(p), "recursive")) jfail(&p->c, "recursive for loops are not supported");
        expect_t(p, T_BEND);
        static const char *const ends[] = {"else", "endfor", NULL};
        x->body = parse_body(p, ends, &which);
        if (seq(which, "else")) {
            expect_t(p, T_BEND);
            static const char *const ends2[] = {"endfor", NULL};
            x->orelse = parse_body(p, ends2, &which);
        }
        expect_t(p, T_BEND);
    } else if (seq(kw, "set")) {
        x = nnew(p, N_SET);
        if (peek(p)->t == T_NAME && is_op(peek2(p), ".")) {
            expr *ns = enew(p, E_NAME);
            ns->name = next(p)->s;
            next(p);
            x->attr_of = ns;
            x->name = expect_name(p);
        } else {
            parse_targets(p, x);
        }
        if (is_op(peek(p), "=")) {
            next(p);
            x->e = parse_tuple(p, true);
            expect_t(p, T_BEND);
        } else {
            if (x->tuple_target) jfail(&p->c, "a block set takes one name");
            x->k = N_SETBLOCK;
            if (is_op(peek(p), "|")) { /* {% set x | filter %}: the filters apply to the block */
                expr *self = enew(p, E_NAME);
                self->name = (jstr){"\x01block", 6};
                x->e = parse_filter_chain(p, self);
            }
            expect_t(p, T_BEND);
            static const char *const ends[] = {"endset", NULL};
            x->body = parse_body(p, ends, &which);
            expect_t(p, T_BEND);
        }
    } else if (seq(kw, "macro")) {
        x = nnew(p, N_MACRO);
        x->name = expect_name(p);
        expect_op(p, "(");
        jstr names[64];
        expr *defs[64];
        size_t k = 0;
        while (!is_op(peek(p), ")")) {
            if (k) expect_op(p, ",");
            if (is_op(peek(p), ")")) break;
            if (k == 64) jfail(&p->c, "too many macro parameters");
            names[k] = expect_name(p);
            defs[k] = NULL;
            if (is_op(peek(p), "=")) {
                next(p);
                defs[k] = parse_expr(p, true);
            }
            k++;
        }
        next(p);
        expect_t(p, T_BEND);
        x->params = amem(&p->c, (k ? k : 1) * sizeof(jstr));
        x->defaults = amem(&p->c, (k ? k : 1) * sizeof(expr *));
        memcpy(x->params, names, k * sizeof(jstr));
        memcpy(x->defaults, defs, k * sizeof(expr *));
        x->nparams = k;
        static const char *const ends[] = {"endmacro", NULL};
        x->body = parse_body(p, ends, &which);
        if (peek(p)->t == T_NAME) next(p); /* {% endmacro name %} */
        expect_t(p, T_BEND);
    } else if (seq(kw, "break") || seq(kw, "continue")) {
        x = nnew(p, seq(kw, "break") ? N_BREAK : N_CONTINUE);
        expect_t(p, T_BEND);
    } else if (seq(kw, "generation")) { /* transformers' AssistantTracker: marks, writes nothing itself */
        x = nnew(p, N_BLOCK);
        expect_t(p, T_BEND);
        static const char *const ends[] = {"endgeneration", NULL};
        x->body = parse_body(p, ends, &which);
        expect_t(p, T_BEND);
    } else {
        jfail(&p->c, "unsupported tag '%.*s'", (int)kw.n, kw.s);
    }
    p->depth--;
    return x;
}

static nlist parse_body(parser *p, const char *const *ends, jstr *which) {
    nvec v = {0};
    for (;;) {
        tok *t = peek(p);
        p->c.line = t->line;
        if (t->t == T_EOF) {
            if (ends) jfail(&p->c, "missing {%% %s %%}", ends[0] && ends[1] && ends[2] ? ends[2] : ends[1] ? ends[1] : ends[0]);
            break;
        }
        if (t->t == T_TEXT) {
            node *x = nnew(p, N_TEXT);
            x->text = next(p)->s;
            nadd(p, &v, x);
        } else if (t->t == T_VBEGIN) {
            next(p);
            node *x = nnew(p, N_OUT);
            x->e = parse_tuple(p, true);
            expect_t(p, T_VEND);
            nadd(p, &v, x);
        } else if (t->t == T_BBEGIN) {
            tok *u = peek2(p);
            bool end = false;
            for (size_t i = 0; ends && ends[i]; i++)
                if (is_name(u, ends[i])) end = true;
            if (end) {
                next(p);
                *which = next(p)->s;
                break;
            }
            if (u->t == T_NAME && (seq(u->s, "endif") || seq(u->s, "endfor") || seq(u->s, "else") ||
                                   seq(u->s, "elif") || seq(u->s, "endmacro") || seq(u->s, "endset") ||
                                   seq(u->s, "endgeneration"))) {
                p->c.line = u->line;
                jfail(&p->c, "unexpected {%% %.*s %%}", (int)u->s.n, u->s.s);
            }
            next(p);
            nadd(p, &v, parse_stmt(p));
        } else {
            jfail(&p->c, "unexpected %s", tdesc(t));
        }
    }
    return (nlist){v.a, v.n};
}

static void jinja_free_ctx(jctx *c) { arena_free(c); }

ls_status ls_jinja_parse(const char *src, size_t len, ls_jinja **out, ls_err *err) {
    *out = NULL;
    if (!src) len = 0;
    if (len > LS_JINJA_MAX_SOURCE)
        return ls_err_set(err, LS_E_INVALID, "chat template: %zu bytes (the limit is %u)", len, LS_JINJA_MAX_SOURCE);
    for (size_t i = 0; i < len;) {
        size_t k = u8valid((const unsigned char *)src + i, len - i);
        if (!k) return ls_err_set(err, LS_E_INVALID, "chat template: invalid UTF-8 at byte %zu", i);
        i += k;
    }
    ls_jinja *t = ls_calloc(1, sizeof *t);
    if (!t) return ls_err_set(err, LS_E_NOMEM, "chat template: out of memory");
    parser *p = ls_calloc(1, sizeof *p);
    if (!p) {
        free(t);
        return ls_err_set(err, LS_E_NOMEM, "chat template: out of memory");
    }
    p->c.err = err;
    if (setjmp(p->c.jb)) {
        ls_status st = p->c.code ? p->c.code : LS_E_INVALID;
        jinja_free_ctx(&p->c);
        free(p);
        free(t);
        return st;
    }
    /* jinja2 joins source.splitlines() with "\n": \r\n and \r become \n, and one
     * trailing newline goes (keep_trailing_newline off) */
    char *norm = amem(&p->c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n') n--;
    norm[n] = '\0';
    p->src = norm;
    p->len = n;
    lex(p);
    p->pos = 0;
    nlist root = parse_body(p, NULL, NULL);
    t->c = p->c; /* the arena moves to the template */
    t->c.err = NULL;
    t->root = root;
    free(p);
    *out = t;
    return LS_OK;
}

void ls_jinja_free(ls_jinja *t) {
    if (!t) return;
    arena_free(&t->c);
    free(t);
}

/* ---- interpreter ------------------------------------------------------------------ */

typedef struct scope {
    struct scope *up;
    jdict vars;
} scope;

typedef struct {
    jctx c;
    uint64_t steps;
    size_t out_total;
    int calls;
    int ctl;     /* 1: break, 2: continue pending */
    int loops;   /* for loops being run (break/continue outside one is an error) */
    scope *root;
    jbuf *out;   /* where text goes now (a macro call or block set captures) */
} rctx;

#define RF(r, ...) jfail(&(r)->c, __VA_ARGS__)

static void step(rctx *r) {
    if (++r->steps > LS_JINJA_MAX_STEPS) RF(r, "template ran more than %llu steps", (unsigned long long)LS_JINJA_MAX_STEPS);
}

static _Noreturn void undef_fail(rctx *r, const val *v) {
    const char *h = v->hint ? v->hint : "value";
    if (strstr(h, " has no ")) RF(r, "%s", h);
    RF(r, "%s is undefined", h);
}

static void emit(rctx *r, jbuf *b, const char *s, size_t n) {
    r->out_total += n;
    if (r->out_total > LS_JINJA_MAX_OUTPUT) RF(r, "template wrote more than %u MiB", LS_JINJA_MAX_OUTPUT >> 20);
    bput(&r->c, b, s, n);
}

static bool truthy(const val *v) {
    switch (v->t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0;
    case V_STR: return v->s.n > 0;
    case V_LIST: return v->l.n > 0;
    case V_DICT: return v->d->n > 0;
    default: return true;
    }
}
static bool is_num(const val *v) { return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT; }
static double num_f(const val *v) { return v->t == V_FLOAT ? v->f : v->t == V_INT ? (double)v->i : v->b ? 1.0 : 0.0; }
static int64_t num_i(const val *v) { return v->t == V_INT ? v->i : v->b ? 1 : 0; }

/* Python's repr of a float */
static void fmt_float(char *out, size_t cap, double x) {
    if (isnan(x)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(out, cap, x < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    const char *q = tmp;
    char digits[24];
    size_t nd = 0;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (is_dig(*q) && nd < sizeof digits - 1) digits[nd++] = *q;
    int ex = *q == 'e' ? atoi(q + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char *o = out;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (int i = 0; i <= ex; i++) PUT("%c", (size_t)i < nd ? digits[i] : '0');
            PUT(".");
            if ((size_t)ex + 1 < nd) PUT("%s", digits + ex + 1);
            else PUT("0");
        } else {
            PUT("0.");
            for (int i = 0; i < -ex - 1; i++) PUT("0");
            PUT("%s", digits);
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
#undef PUT
}

static void v_repr(rctx *r, jbuf *b, const val *v, int depth);

static void str_repr(rctx *r, jbuf *b, jstr s) {
    bool has_sq = memchr(s.s, '\'', s.n) != NULL, has_dq = memchr(s.s, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    bputc(&r->c, b, q);
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.s[i];
        char e[8];
        if (ch == (unsigned char)q || ch == '\\') {
            e[0] = '\\', e[1] = (char)ch;
            bput(&r->c, b, e, 2);
        } else if (ch == '\n') bputs(&r->c, b, "\\n");
        else if (ch == '\r') bputs(&r->c, b, "\\r");
        else if (ch == '\t') bputs(&r->c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(e, sizeof e, "\\x%02x", ch);
            bputs(&r->c, b, e);
        } else bputc(&r->c, b, (char)ch);
    }
    bputc(&r->c, b, q);
}

/* Python's str() of a value */
static void v_str(rctx *r, jbuf *b, const val *v) {
    char tmp[48];
    switch (v->t) {
    case V_UNDEF: return;
    case V_NONE: bputs(&r->c, b, "None"); return;
    case V_BOOL: bputs(&r->c, b, v->b ? "True" : "False"); return;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); bputs(&r->c, b, tmp); return;
    case V_FLOAT: fmt_float(tmp, sizeof tmp, v->f); bputs(&r->c, b, tmp); return;
    case V_STR: bput(&r->c, b, v->s.s, v->s.n); return;
    default: v_repr(r, b, v, 0); return;
    }
}

static void v_repr(rctx *r, jbuf *b, const val *v, int depth) {
    if (depth > LS_JINJA_MAX_DEPTH) RF(r, "value nested deeper than %d", LS_JINJA_MAX_DEPTH);
    switch (v->t) {
    case V_STR: str_repr(r, b, v->s); return;
    case V_LIST:
        bputc(&r->c, b, v->tuple ? '(' : '[');
        for (size_t i = 0; i < v->l.n; i++) {
            if (i) bputs(&r->c, b, ", ");
            v_repr(r, b, v->l.a[i], depth + 1);
        }
        if (v->tuple && v->l.n == 1) bputc(&r->c, b, ',');
        bputc(&r->c, b, v->tuple ? ')' : ']');
        return;
    case V_DICT:
        bputc(&r->c, b, '{');
        for (size_t i = 0; i < v->d->n; i++) {
            if (i) bputs(&r->c, b, ", ");
            str_repr(r, b, v->d->keys[i]);
            bputs(&r->c, b, ": ");
            v_repr(r, b, v->d->vals[i], depth + 1);
        }
        bputc(&r->c, b, '}');
        return;
    case V_NS: bputs(&r->c, b, "<Namespace>"); return;
    case V_FUNC: bputs(&r->c, b, "<function>"); return;
    case V_LOOP: bputs(&r->c, b, "<LoopContext>"); return;
    case V_UNDEF: return;
    default: v_str(r, b, v); return;
    }
}

static jstr tostr(rctx *r, const val *v) {
    if (v->t == V_STR) return v->s;
    jbuf b = {0};
    bput(&r->c, &b, "", 0);
    v_str(r, &b, v);
    return bstr(&b);
}

/* json.dumps */
typedef struct {
    const char *indent; /* NULL: none */
    const char *isep, *ksep;
    bool sort, ascii;
} jsonopt;

static void json_str(rctx *r, jbuf *b, jstr s, bool ascii) {
    bputc(&r->c, b, '"');
    for (size_t i = 0; i < s.n;) {
        unsigned char ch = (unsigned char)s.s[i];
        char e[16];
        if (ch == '"') bputs(&r->c, b, "\\\"");
        else if (ch == '\\') bputs(&r->c, b, "\\\\");
        else if (ch == '\n') bputs(&r->c, b, "\\n");
        else if (ch == '\r') bputs(&r->c, b, "\\r");
        else if (ch == '\t') bputs(&r->c, b, "\\t");
        else if (ch == '\b') bputs(&r->c, b, "\\b");
        else if (ch == '\f') bputs(&r->c, b, "\\f");
        else if (ch < 0x20 || (ascii && ch == 0x7f)) {
            snprintf(e, sizeof e, "\\u%04x", ch);
            bputs(&r->c, b, e);
        } else if (ch >= 0x80 && ascii) {
            size_t l;
            uint32_t cp = u8dec(s.s + i, &l);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(e, sizeof e, "\\u%04x", cp);
            }
            bputs(&r->c, b, e);
            i += l;
            continue;
        } else bputc(&r->c, b, (char)ch);
        i++;
    }
    bputc(&r->c, b, '"');
}

static int key_cmp(const void *a, const void *b) {
    const jstr *x = *(const jstr *const *)a, *y = *(const jstr *const *)b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static void json_nl(rctx *r, jbuf *b, const jsonopt *o, int level) {
    bputc(&r->c, b, '\n');
    for (int i = 0; i < level; i++) bputs(&r->c, b, o->indent);
}

static void v_json(rctx *r, jbuf *b, const val *v, const jsonopt *o, int level) {
    if (level > LS_JINJA_MAX_DEPTH) RF(r, "value nested deeper than %d", LS_JINJA_MAX_DEPTH);
    step(r);
    char tmp[48];
    switch (v->t) {
    case V_NONE: bputs(&r->c, b, "null"); return;
    case V_BOOL: bputs(&r->c, b, v->b ? "true" : "false"); return;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); bputs(&r->c, b, tmp); return;
    case V_FLOAT:
        if (isnan(v->f)) bputs(&r->c, b, "NaN");
        else if (isinf(v->f)) bputs(&r->c, b, v->f < 0 ? "-Infinity" : "Infinity");
        else {
            fmt_float(tmp, sizeof tmp, v->f);
            bputs(&r->c, b, tmp);
        }
        return;
    case V_STR: json_str(r, b, v->s, o->ascii); return;
    case V_LIST:
        if (!v->l.n) {
            bputs(&r->c, b, "[]");
            return;
        }
        bputc(&r->c, b, '[');
        for (size_t i = 0; i < v->l.n; i++) {
            if (i) bputs(&r->c, b, o->isep);
            if (o->indent) json_nl(r, b, o, level + 1);
            v_json(r, b, v->l.a[i], o, level + 1);
        }
        if (o->indent) json_nl(r, b, o, level);
        bputc(&r->c, b, ']');
        return;
    case V_DICT: {
        const jdict *d = v->d;
        if (!d->n) {
            bputs(&r->c, b, "{}");
            return;
        }
        const jstr **keys = amem(&r->c, d->n * sizeof *keys);
        for (size_t i = 0; i < d->n; i++) keys[i] = &d->keys[i];
        if (o->sort) qsort(keys, d->n, sizeof *keys, key_cmp);
        bputc(&r->c, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) bputs(&r->c, b, o->isep);
            if (o->indent) json_nl(r, b, o, level + 1);
            json_str(r, b, *keys[i], o->ascii);
            bputs(&r->c, b, o->ksep);
            v_json(r, b, dget(d, *keys[i]), o, level + 1);
        }
        if (o->indent) json_nl(r, b, o, level);
        bputc(&r->c, b, '}');
        return;
    }
    default: RF(r, "Object of type %s is not JSON serializable", tname(v));
    }
}

static bool v_eq(rctx *r, const val *a, const val *b, int depth) {
    if (depth > LS_JINJA_MAX_DEPTH) RF(r, "value nested deeper than %d", LS_JINJA_MAX_DEPTH);
    if (is_num(a) && is_num(b)) {
        if (a->t == V_FLOAT || b->t == V_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return seqs(a->s, b->s);
    case V_LIST:
        if (a->tuple != b->tuple || a->l.n != b->l.n) return false;
        for (size_t i = 0; i < a->l.n; i++)
            if (!v_eq(r, a->l.a[i], b->l.a[i], depth + 1)) return false;
        return true;
    case V_DICT:
        if (a->d->n != b->d->n) return false;
        for (size_t i = 0; i < a->d->n; i++) {
            val *o = dget(b->d, a->d->keys[i]);
            if (!o || !v_eq(r, a->d->vals[i], o, depth + 1)) return false;
        }
        return true;
    default: return a == b || (a->t == V_NS && a->d == b->d);
    }
}

/* <, <=, >, >= : -1, 0, 1 */
static int v_cmp(rctx *r, const val *a, const val *b, const char *op) {
    if (a->t == V_UNDEF) undef_fail(r, a);
    if (b->t == V_UNDEF) undef_fail(r, b);
    if (is_num(a) && is_num(b)) {
        if (a->t == V_FLOAT || b->t == V_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return (x > y) - (x < y);
        }
        int64_t x = num_i(a), y = num_i(b);
        return (x > y) - (x < y);
    }
    if (a->t == V_STR && b->t == V_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        int c = memcmp(a->s.s, b->s.s, n);
        return c ? (c > 0) - (c < 0) : (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    if (a->t == V_LIST && b->t == V_LIST) {
        for (size_t i = 0; i < a->l.n && i < b->l.n; i++)
            if (!v_eq(r, a->l.a[i], b->l.a[i], 0)) return v_cmp(r, a->l.a[i], b->l.a[i], op);
        return (a->l.n > b->l.n) - (a->l.n < b->l.n);
    }
    RF(r, "'%s' not supported between instances of '%s' and '%s'", op, tname(a), tname(b));
}

static bool v_in(rctx *r, const val *needle, const val *hay) {
    switch (hay->t) {
    case V_STR:
        if (needle->t == V_UNDEF) undef_fail(r, needle);
        if (needle->t != V_STR) RF(r, "'in <string>' requires string as left operand, not %s", tname(needle));
        return needle->s.n == 0 || memmem(hay->s.s, hay->s.n, needle->s.s, needle->s.n) != NULL;
    case V_LIST:
        for (size_t i = 0; i < hay->l.n; i++)
            if (v_eq(r, needle, hay->l.a[i], 0)) return true;
        return false;
    case V_DICT: case V_NS: return needle->t == V_STR && dget(hay->d, needle->s) != NULL;
    case V_UNDEF: return false;
    default: RF(r, "argument of type '%s' is not iterable", tname(hay));
    }
}

/* the items a for loop (or a filter) iterates over */
static val **iter_items(rctx *r, val *v, size_t *n) {
    switch (v->t) {
    case V_UNDEF: *n = 0; return NULL;
    case V_LIST: *n = v->l.n; return v->l.a;
    case V_DICT: {
        val **a = amem(&r->c, (v->d->n ? v->d->n : 1) * sizeof *a);
        for (size_t i = 0; i < v->d->n; i++) a[i] = vstr(&r->c, v->d->keys[i]);
        *n = v->d->n;
        return a;
    }
    case V_STR: {
        size_t k = u8count(v->s), o = 0;
        val **a = amem(&r->c, (k ? k : 1) * sizeof *a);
        for (size_t i = 0; i < k; i++) {
            size_t l = u8len((unsigned char)v->s.s[o]);
            a[i] = vstr(&r->c, (jstr){v->s.s + o, l});
            o += l;
        }
        *n = k;
        return a;
    }
    default: RF(r, "'%s' object is not iterable", tname(v));
    }
}

static val *mkfunc(rctx *r, fkind k, const char *name, val *self) {
    val *v = vnew(&r->c, V_FUNC);
    v->fn = amem(&r->c, sizeof(jfunc));
    memset(v->fn, 0, sizeof(jfunc));
    v->fn->kind = k;
    v->fn->name = name;
    v->fn->self = self;
    return v;
}

static const char *const k_globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};
static const char *const k_str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                            "replace", "upper", "lower", "title", "capitalize", "find", "rfind",
                                            "count", "join", "splitlines", "isdigit", "isalpha", "isspace",
                                            "isalnum", "isupper", "islower", "removeprefix", "removesuffix", NULL};
static const char *const k_dict_methods[] = {"items", "keys", "values", "get", NULL};

static const char *in_table(const char *const *t, jstr name) {
    for (size_t i = 0; t[i]; i++)
        if (seq(name, t[i])) return t[i];
    return NULL;
}

static const char *hint2(rctx *r, const char *fmt, const val *obj, jstr name) {
    char tmp[160];
    snprintf(tmp, sizeof tmp, fmt, tname(obj), (int)(name.n > 60 ? 60 : name.n), name.s);
    return sdup(&r->c, tmp, strlen(tmp)).s;
}

static val *loop_attr(rctx *r, val *v, jstr name) {
    const jloop *lp = v->lp;
    if (seq(name, "index")) return vint(&r->c, (int64_t)lp->idx + 1);
    if (seq(name, "index0")) return vint(&r->c, (int64_t)lp->idx);
    if (seq(name, "revindex")) return vint(&r->c, (int64_t)(lp->len - lp->idx));
    if (seq(name, "revindex0")) return vint(&r->c, (int64_t)(lp->len - lp->idx - 1));
    if (seq(name, "first")) return vbool(lp->idx == 0);
    if (seq(name, "last")) return vbool(lp->idx + 1 == lp->len);
    if (seq(name, "length")) return vint(&r->c, (int64_t)lp->len);
    if (seq(name, "depth")) return vint(&r->c, 1);
    if (seq(name, "depth0")) return vint(&r->c, 0);
    if (seq(name, "previtem")) return lp->idx ? lp->items[lp->idx - 1] : vundef(&r->c, "'loop.previtem'");
    if (seq(name, "nextitem")) return lp->idx + 1 < lp->len ? lp->items[lp->idx + 1] : vundef(&r->c, "'loop.nextitem'");
    if (seq(name, "cycle")) return mkfunc(r, F_CYCLE, "cycle", v);
    return vundef(&r->c, hint2(r, "'%s' has no attribute '%.*s'", v, name));
}

static val *get_attr(rctx *r, val *v, jstr name) {
    const char *m;
    switch (v->t) {
    case V_UNDEF: undef_fail(r, v);
    case V_DICT:
        if ((m = in_table(k_dict_methods, name))) return mkfunc(r, F_METHOD, m, v);
        /* fall through */
    case V_NS: {
        val *x = dget(v->d, name);
        if (x) return x;
        break;
    }
    case V_STR:
        if ((m = in_table(k_str_methods, name))) return mkfunc(r, F_METHOD, m, v);
        break;
    case V_LOOP: return loop_attr(r, v, name);
    default: break;
    }
    return vundef(&r->c, hint2(r, "'%s object' has no attribute '%.*s'", v, name));
}

static int64_t to_index(rctx *r, const val *k, size_t n, bool *ok) {
    int64_t i = num_i(k);
    if (i < 0) i += (int64_t)n;
    *ok = i >= 0 && (uint64_t)i < n;
    (void)r;
    return i;
}

static val *get_item(rctx *r, val *v, val *k) {
    bool ok;
    switch (v->t) {
    case V_UNDEF: undef_fail(r, v);
    case V_DICT: case V_NS:
        if (k->t == V_STR) {
            val *x = dget(v->d, k->s);
            if (x) return x;
            if (v->t == V_DICT) {
                const char *m = in_table(k_dict_methods, k->s);
                if (m) return mkfunc(r, F_METHOD, m, v);
            }
        }
        break;
    case V_LIST:
        if (k->t == V_INT || k->t == V_BOOL) {
            int64_t i = to_index(r, k, v->l.n, &ok);
            if (ok) return v->l.a[i];
            return vundef(&r->c, hint2(r, "'%s object' has no element %.*s", v, tostr(r, k)));
        }
        break;
    case V_STR:
        if (k->t == V_INT || k->t == V_BOOL) {
            size_t n = u8count(v->s);
            int64_t i = to_index(r, k, n, &ok);
            if (ok) {
                size_t o = u8off(v->s, (size_t)i);
                return vstr(&r->c, (jstr){v->s.s + o, u8len((unsigned char)v->s.s[o])});
            }
        }
        break;
    case V_LOOP:
        if (k->t == V_STR) return loop_attr(r, v, k->s);
        break;
    default: break;
    }
    jstr ks = k->t == V_STR ? k->s : (jstr){"?", 1};
    return vundef(&r->c, hint2(r, "'%s object' has no attribute '%.*s'", v, ks));
}

/* Python slice indices for a sequence of n items */
static void slice_idx(rctx *r, val *const sl[3], size_t n, int64_t *start, int64_t *stop, int64_t *stepv) {
    int64_t st = 1;
    for (int k = 0; k < 3; k++)
        if (sl[k] && sl[k]->t != V_NONE && sl[k]->t != V_INT && sl[k]->t != V_BOOL)
            RF(r, "slice indices must be integers or None");
    if (sl[2] && sl[2]->t != V_NONE) st = num_i(sl[2]);
    if (st == 0) RF(r, "slice step cannot be zero");
    int64_t N = (int64_t)n, a, b;
    if (st > 0) {
        a = sl[0] && sl[0]->t != V_NONE ? num_i(sl[0]) : 0;
        b = sl[1] && sl[1]->t != V_NONE ? num_i(sl[1]) : N;
        if (a < 0) a = a + N < 0 ? 0 : a + N;
        if (a > N) a = N;
        if (b < 0) b = b + N < 0 ? 0 : b + N;
        if (b > N) b = N;
    } else {
        a = sl[0] && sl[0]->t != V_NONE ? num_i(sl[0]) : N - 1;
        b = sl[1] && sl[1]->t != V_NONE ? num_i(sl[1]) : -1 - N;
        if (a < 0) a = a + N < 0 ? -1 : a + N;
        if (a >= N) a = N - 1;
        if (b < 0) b = b + N < 0 ? -1 : b + N;
        if (b >= N) b = N - 1;
    }
    *start = a;
    *stop = b;
    *stepv = st;
}

static val *do_slice(rctx *r, val *v, val *const sl[3]) {
    if (v->t == V_UNDEF) undef_fail(r, v);
    int64_t a, b, st;
    if (v->t == V_LIST) {
        slice_idx(r, sl, v->l.n, &a, &b, &st);
        size_t k = 0;
        val *o = vlist(&r->c, v->l.n);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) o->l.a[k++] = v->l.a[i];
        o->l.n = k;
        o->tuple = v->tuple;
        return o;
    }
    if (v->t == V_STR) {
        size_t n = u8count(v->s);
        slice_idx(r, sl, n, &a, &b, &st);
        size_t *offs = amem(&r->c, (n + 1) * sizeof *offs);
        for (size_t i = 0, o = 0; i <= n; i++) {
            offs[i] = o;
            if (i < n) o += u8len((unsigned char)v->s.s[o]);
        }
        if (st == 1) return vstr(&r->c, (jstr){v->s.s + offs[a], a < b ? offs[b] - offs[a] : 0});
        jbuf bb = {0};
        bput(&r->c, &bb, "", 0);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) bput(&r->c, &bb, v->s.s + offs[i], offs[i + 1] - offs[i]);
        return vstr(&r->c, bstr(&bb));
    }
    RF(r, "'%s' object is not subscriptable", tname(v));
}

/* ---- calls: arguments, methods, globals -------------------------------------------- */

typedef struct {
    val **pos;
    size_t npos;
    jstr *kwn;
    val **kwv;
    size_t nkw;
    const char *what; /* for messages */
} cargs;

/* argument i (positional) or named kw; NULL when absent */
static val *arg(const cargs *a, size_t i, const char *kw) {
    if (i < a->npos) return a->pos[i];
    for (size_t k = 0; kw && k < a->nkw; k++)
        if (seq(a->kwn[k], kw)) return a->kwv[k];
    return NULL;
}
static void max_args(rctx *r, const cargs *a, size_t n) {
    if (a->npos > n) RF(r, "%s takes at most %zu positional arguments (%zu given)", a->what, n, a->npos);
}
static jstr arg_str(rctx *r, const cargs *a, size_t i, const char *kw, const char *dflt) {
    val *v = arg(a, i, kw);
    if (!v || v->t == V_NONE) {
        if (!dflt) RF(r, "%s: missing argument %zu%s%s", a->what, i + 1, kw ? " " : "", kw ? kw : "");
        return (jstr){dflt, strlen(dflt)};
    }
    if (v->t == V_UNDEF) undef_fail(r, v);
    if (v->t != V_STR) RF(r, "%s: argument %zu must be a string, not %s", a->what, i + 1, tname(v));
    return v->s;
}
static int64_t arg_int(rctx *r, const cargs *a, size_t i, const char *kw, int64_t dflt) {
    val *v = arg(a, i, kw);
    if (!v || v->t == V_NONE) return dflt;
    if (v->t != V_INT && v->t != V_BOOL) RF(r, "%s: argument %zu must be an integer, not %s", a->what, i + 1, tname(v));
    return num_i(v);
}

/* code points of chars, for strip(chars) */
static bool in_chars(jstr chars, uint32_t cp) {
    for (size_t i = 0; i < chars.n;) {
        size_t l;
        if (u8dec(chars.s + i, &l) == cp) return true;
        i += l;
    }
    return false;
}
/* mode: 1 left, 2 right, 3 both; chars NULL: whitespace */
static jstr py_strip(jstr s, const jstr *chars, int mode) {
    size_t a = 0, b = s.n;
    if (mode & 1)
        while (a < b) {
            size_t l;
            uint32_t cp = u8dec(s.s + a, &l);
            if (chars ? !in_chars(*chars, cp) : !py_space(cp)) break;
            a += l;
        }
    if (mode & 2)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s.s[k] & 0xC0) == 0x80) k--;
            size_t l;
            uint32_t cp = u8dec(s.s + k, &l);
            if (chars ? !in_chars(*chars, cp) : !py_space(cp)) break;
            b = k;
        }
    return (jstr){s.s + a, b - a};
}

static val *list_from(rctx *r, val **items, size_t n) {
    val *v = vlist(&r->c, n);
    if (n) memcpy(v->l.a, items, n * sizeof *items);
    return v;
}

typedef struct {
    val **a;
    size_t n, cap;
} vvec;
static void vadd(rctx *r, vvec *v, val *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        val **na = amem(&r->c, cap * sizeof *na);
        if (v->n) memcpy(na, v->a, v->n * sizeof *na);
        v->a = na;
        v->cap = cap;
    }
    v->a[v->n++] = x;
}

static val *py_split(rctx *r, jstr s, val *sepv, int64_t maxsplit) {
    vvec out = {0};
    if (!sepv || sepv->t == V_NONE) {
        size_t i = 0;
        for (;;) {
            while (i < s.n) { /* skip whitespace */
                size_t l;
                if (!py_space(u8dec(s.s + i, &l))) break;
                i += l;
            }
            if (i >= s.n) break;
            if (maxsplit >= 0 && (int64_t)out.n == maxsplit) {
                jstr rest = py_strip((jstr){s.s + i, s.n - i}, NULL, 2);
                vadd(r, &out, vstr(&r->c, rest));
                break;
            }
            size_t a = i;
            while (i < s.n) {
                size_t l;
                if (py_space(u8dec(s.s + i, &l))) break;
                i += l;
            }
            step(r);
            vadd(r, &out, vstr(&r->c, (jstr){s.s + a, i - a}));
        }
    } else {
        if (sepv->t != V_STR) RF(r, "split: the separator must be a string or None");
        jstr sep = sepv->s;
        if (!sep.n) RF(r, "empty separator");
        size_t i = 0;
        for (;;) {
            step(r);
            const char *f = maxsplit >= 0 && (int64_t)out.n == maxsplit ? NULL : memmem(s.s + i, s.n - i, sep.s, sep.n);
            if (!f) {
                vadd(r, &out, vstr(&r->c, (jstr){s.s + i, s.n - i}));
                break;
            }
            vadd(r, &out, vstr(&r->c, (jstr){s.s + i, (size_t)(f - (s.s + i))}));
            i = (size_t)(f - s.s) + sep.n;
        }
    }
    return list_from(r, out.a, out.n);
}

static jstr py_replace(rctx *r, jstr s, jstr old, jstr nw, int64_t count) {
    jbuf b = {0};
    bput(&r->c, &b, "", 0);
    int64_t done = 0;
    if (!old.n) {
        for (size_t i = 0;; ) {
            if (count < 0 || done < count) {
                bput(&r->c, &b, nw.s, nw.n);
                done++;
            }
            if (i >= s.n) break;
            size_t l = u8len((unsigned char)s.s[i]);
            bput(&r->c, &b, s.s + i, l);
            i += l;
            step(r);
        }
        return bstr(&b);
    }
    size_t i = 0;
    while (i < s.n) {
        const char *f = count >= 0 && done >= count ? NULL : memmem(s.s + i, s.n - i, old.s, old.n);
        if (!f) break;
        bput(&r->c, &b, s.s + i, (size_t)(f - (s.s + i)));
        bput(&r->c, &b, nw.s, nw.n);
        i = (size_t)(f - s.s) + old.n;
        done++;
        step(r);
    }
    bput(&r->c, &b, s.s + i, s.n - i);
    return bstr(&b);
}

/* ASCII case mapping (mode 0 lower, 1 upper, 2 capitalize, 3 title) */
static jstr py_case(rctx *r, jstr s, int mode) {
    char *o = amem(&r->c, s.n + 1);
    bool start = true;
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.s[i];
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && start);
        if (up && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
        else if (!up && mode != 1 && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
        o[i] = ch;
        unsigned char u = (unsigned char)s.s[i];
        start = !((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u >= 0x80 || is_dig((char)u));
    }
    o[s.n] = '\0';
    return (jstr){o, s.n};
}

static bool affix(rctx *r, jstr s, val *p, bool end) {
    if (p->t == V_LIST && p->tuple) {
        for (size_t i = 0; i < p->l.n; i++)
            if (affix(r, s, p->l.a[i], end)) return true;
        return false;
    }
    if (p->t != V_STR) RF(r, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", tname(p));
    if (p->s.n > s.n) return false;
    return memcmp(end ? s.s + s.n - p->s.n : s.s, p->s.s, p->s.n) == 0;
}

static val *call_method(rctx *r, val *self, const char *name, cargs *a) {
    a->what = name;
    if (self->t == V_DICT) {
        if (!strcmp(name, "get")) {
            max_args(r, a, 2);
            val *k = arg(a, 0, NULL);
            if (!k) RF(r, "get expected at least 1 argument");
            val *x = k->t == V_STR ? dget(self->d, k->s) : NULL;
            if (x) return x;
            val *d = arg(a, 1, NULL);
            return d ? d : &k_none;
        }
        max_args(r, a, 0);
        size_t n = self->d->n;
        val *o = vlist(&r->c, n);
        for (size_t i = 0; i < n; i++) {
            val *k = vstr(&r->c, self->d->keys[i]);
            if (!strcmp(name, "keys")) o->l.a[i] = k;
            else if (!strcmp(name, "values")) o->l.a[i] = self->d->vals[i];
            else {
                val *t = vlist(&r->c, 2);
                t->tuple = true;
                t->l.a[0] = k;
                t->l.a[1] = self->d->vals[i];
                o->l.a[i] = t;
            }
        }
        return o;
    }
    jstr s = self->s;
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        max_args(r, a, 1);
        val *cv = arg(a, 0, NULL);
        jstr chars;
        bool has = cv && cv->t != V_NONE;
        if (has) chars = arg_str(r, a, 0, NULL, NULL);
        int mode = name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3;
        return vstr(&r->c, py_strip(s, has ? &chars : NULL, mode));
    }
    if (!strcmp(name, "split")) {
        max_args(r, a, 2);
        return py_split(r, s, arg(a, 0, "sep"), arg_int(r, a, 1, "maxsplit", -1));
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        max_args(r, a, 1);
        val *p = arg(a, 0, NULL);
        if (!p) RF(r, "%s takes one argument", name);
        return vbool(affix(r, s, p, name[0] == 'e'));
    }
    if (!strcmp(name, "replace")) {
        max_args(r, a, 3);
        return vstr(&r->c, py_replace(r, s, arg_str(r, a, 0, NULL, NULL), arg_str(r, a, 1, NULL, NULL), arg_int(r, a, 2, "count", -1)));
    }
    if (!strcmp(name, "upper")) return vstr(&r->c, py_case(r, s, 1));
    if (!strcmp(name, "lower")) return vstr(&r->c, py_case(r, s, 0));
    if (!strcmp(name, "capitalize")) return vstr(&r->c, py_case(r, s, 2));
    if (!strcmp(name, "title")) return vstr(&r->c, py_case(r, s, 3));
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "count")) {
        max_args(r, a, 1);
        jstr sub = arg_str(r, a, 0, NULL, NULL);
        if (!strcmp(name, "count")) {
            if (!sub.n) return vint(&r->c, (int64_t)u8count(s) + 1);
            int64_t k = 0;
            for (const char *p = s.s, *e = s.s + s.n; (p = memmem(p, (size_t)(e - p), sub.s, sub.n)); p += sub.n) k++;
            return vint(&r->c, k);
        }
        const char *hit = NULL;
        for (const char *p = s.s, *e = s.s + s.n; (p = memmem(p, (size_t)(e - p), sub.s, sub.n)); p++) {
            hit = p;
            if (name[0] == 'f' || p >= e) break;
        }
        if (!sub.n) hit = name[0] == 'f' ? s.s : s.s + s.n;
        if (!hit) return vint(&r->c, -1);
        return vint(&r->c, (int64_t)u8count((jstr){s.s, (size_t)(hit - s.s)}));
    }
    if (!strcmp(name, "join")) {
        max_args(r, a, 1);
        val *it = arg(a, 0, NULL);
        if (!it) RF(r, "join takes one argument");
        size_t n;
        val **items = iter_items(r, it, &n);
        jbuf b = {0};
        bput(&r->c, &b, "", 0);
        for (size_t i = 0; i < n; i++) {
            if (items[i]->t != V_STR) RF(r, "sequence item %zu: expected str instance, %s found", i, tname(items[i]));
            if (i) bput(&r->c, &b, s.s, s.n);
            bput(&r->c, &b, items[i]->s.s, items[i]->s.n);
        }
        return vstr(&r->c, bstr(&b));
    }
    if (!strcmp(name, "splitlines")) {
        vvec out = {0};
        size_t i = 0, st = 0;
        while (i < s.n) {
            if (s.s[i] == '\n' || s.s[i] == '\r') {
                vadd(r, &out, vstr(&r->c, (jstr){s.s + st, i - st}));
                if (s.s[i] == '\r' && i + 1 < s.n && s.s[i + 1] == '\n') i++;
                st = ++i;
            } else i++;
        }
        if (st < s.n) vadd(r, &out, vstr(&r->c, (jstr){s.s + st, s.n - st}));
        return list_from(r, out.a, out.n);
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        jstr x = arg_str(r, a, 0, NULL, NULL);
        val xv = {.t = V_STR, .s = x};
        bool end = name[6] == 's';
        if (!affix(r, s, &xv, end)) return self;
        return vstr(&r->c, end ? (jstr){s.s, s.n - x.n} : (jstr){s.s + x.n, s.n - x.n});
    }
    /* isdigit, isalpha, isspace, isalnum, isupper, islower (ASCII) */
    if (!s.n) return &k_false;
    bool any_cased = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.s[i];
        bool dig = ch >= '0' && ch <= '9', lo = ch >= 'a' && ch <= 'z', up = ch >= 'A' && ch <= 'Z';
        if (!strcmp(name, "isdigit") && !dig) return &k_false;
        if (!strcmp(name, "isalpha") && !(lo || up)) return &k_false;
        if (!strcmp(name, "isalnum") && !(lo || up || dig)) return &k_false;
        if (!strcmp(name, "isspace") && !is_ws((char)ch)) return &k_false;
        if (!strcmp(name, "isupper") && lo) return &k_false;
        if (!strcmp(name, "islower") && up) return &k_false;
        any_cased |= lo || up;
    }
    if (!strcmp(name, "isupper") || !strcmp(name, "islower")) return vbool(any_cased);
    return &k_true;
}

static val *call_global(rctx *r, const char *name, cargs *a) {
    a->what = name;
    if (!strcmp(name, "raise_exception")) {
        val *m = arg(a, 0, NULL);
        jstr s = m ? tostr(r, m) : (jstr){"", 0};
        RF(r, "raise_exception: %.*s", (int)(s.n > 150 ? 150 : s.n), s.s);
    }
    if (!strcmp(name, "range")) {
        max_args(r, a, 3);
        int64_t st = 0, en, sp = 1;
        if (a->npos == 0) RF(r, "range expected at least 1 argument");
        for (size_t i = 0; i < a->npos; i++)
            if (a->pos[i]->t != V_INT && a->pos[i]->t != V_BOOL) RF(r, "range: arguments must be integers");
        if (a->npos == 1) en = num_i(a->pos[0]);
        else {
            st = num_i(a->pos[0]);
            en = num_i(a->pos[1]);
            if (a->npos == 3) sp = num_i(a->pos[2]);
        }
        if (sp == 0) RF(r, "range() arg 3 must not be zero");
        double cnt = sp > 0 ? ceil(((double)en - (double)st) / (double)sp) : ceil(((double)st - (double)en) / (double)-sp);
        if (cnt < 0) cnt = 0;
        if (cnt > LS_JINJA_MAX_RANGE) RF(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", LS_JINJA_MAX_RANGE);
        val *o = vlist(&r->c, (size_t)cnt);
        for (size_t i = 0; i < (size_t)cnt; i++) o->l.a[i] = vint(&r->c, st + (int64_t)i * sp);
        return o;
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        val *o = vdict(&r->c, name[0] == 'n' ? V_NS : V_DICT);
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i]->t != V_DICT) RF(r, "%s: a positional argument must be a mapping", name);
            for (size_t k = 0; k < a->pos[i]->d->n; k++) dset(&r->c, o->d, a->pos[i]->d->keys[k], a->pos[i]->d->vals[k]);
        }
        for (size_t k = 0; k < a->nkw; k++) dset(&r->c, o->d, a->kwn[k], a->kwv[k]);
        return o;
    }
    if (!strcmp(name, "strftime_now")) {
        jstr fmt = arg_str(r, a, 0, NULL, NULL);
        char f[128], out[256];
        snprintf(f, sizeof f, "%.*s", (int)(fmt.n > 120 ? 120 : fmt.n), fmt.s);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(out, sizeof out, f, &tm);
        return vstr(&r->c, sdup(&r->c, out, k));
    }
    RF(r, "'%s' is undefined", name);
}

static void exec_list(rctx *r, nlist l, scope *s);
static val *eval(rctx *r, const expr *e, scope *s);

static scope *scope_new(rctx *r, scope *up) {
    scope *s = amem(&r->c, sizeof *s);
    memset(s, 0, sizeof *s);
    s->up = up;
    return s;
}

static val *call_macro(rctx *r, val *f, cargs *a) {
    const node *m = f->fn->mac;
    if (r->calls >= LS_JINJA_MAX_CALLS) RF(r, "macro calls nested deeper than %d", LS_JINJA_MAX_CALLS);
    if (a->npos > m->nparams)
        RF(r, "macro '%.*s' takes not more than %zu argument(s)", (int)m->name.n, m->name.s, m->nparams);
    scope *ms = scope_new(r, r->root);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (size_t i = a->npos; i < m->nparams; i++) ok |= seqs(m->params[i], a->kwn[k]);
        if (!ok) RF(r, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->name.n, m->name.s, (int)a->kwn[k].n, a->kwn[k].s);
    }
    for (size_t i = 0; i < m->nparams; i++) {
        val *v = i < a->npos ? a->pos[i] : NULL;
        for (size_t k = 0; !v && k < a->nkw; k++)
            if (seqs(a->kwn[k], m->params[i])) v = a->kwv[k];
        dset(&r->c, &ms->vars, m->params[i], v ? v : &k_undef);
    }
    /* defaults see the parameters bound before them */
    for (size_t i = 0; i < m->nparams; i++)
        if (dget(&ms->vars, m->params[i]) == &k_undef && m->defaults[i]) {
            dset(&r->c, &ms->vars, m->params[i], eval(r, m->defaults[i], ms));
        }
    jbuf cap = {0};
    bput(&r->c, &cap, "", 0);
    jbuf *saved = r->out;
    int loops = r->loops, line = r->c.line;
    r->out = &cap;
    r->loops = 0;
    r->calls++;
    exec_list(r, m->body, ms);
    r->calls--;
    r->out = saved;
    r->loops = loops;
    r->ctl = 0;
    r->c.line = line;
    return vstr(&r->c, bstr(&cap));
}

static val *call_value(rctx *r, val *f, cargs *a) {
    if (f->t == V_UNDEF) undef_fail(r, f);
    if (f->t != V_FUNC) RF(r, "'%s' object is not callable", tname(f));
    switch (f->fn->kind) {
    case F_GLOBAL: return call_global(r, f->fn->name, a);
    case F_METHOD: return call_method(r, f->fn->self, f->fn->name, a);
    case F_MACRO: return call_macro(r, f, a);
    case F_CYCLE:
        if (!a->npos) RF(r, "no items for cycling given");
        return a->pos[f->fn->self->lp->idx % a->npos];
    }
    RF(r, "not callable");
}

/* ---- filters and tests --------------------------------------------------------------- */

static bool apply_test(rctx *r, jstr name, val *v, cargs *a);
static val *apply_filter(rctx *r, jstr name, val *v, cargs *a);

/* attribute path "a.b" as jinja2's make_attrgetter reads it (item first, then attribute) */
static val *attr_path(rctx *r, val *v, jstr path) {
    size_t i = 0;
    while (i <= path.n) {
        const char *dot = memchr(path.s + i, '.', path.n - i);
        size_t e = dot ? (size_t)(dot - path.s) : path.n;
        jstr part = {path.s + i, e - i};
        bool digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++) digits &= is_dig(part.s[k]);
        if (v->t == V_UNDEF) undef_fail(r, v);
        if (digits && v->t == V_LIST) v = get_item(r, v, vint(&r->c, atoll(sdup(&r->c, part.s, part.n).s)));
        else v = get_attr(r, v, part);
        i = e + 1;
        if (!dot) break;
    }
    return v;
}

static cargs sub_args(const cargs *a, size_t from) {
    cargs b = *a;
    b.pos = a->npos > from ? a->pos + from : NULL;
    b.npos = a->npos > from ? a->npos - from : 0;
    return b;
}

/* select / reject / selectattr / rejectattr */
static val *filter_select(rctx *r, val *v, cargs *a, bool attr, bool keep) {
    size_t n;
    val **items = iter_items(r, v, &n);
    jstr path = {0};
    size_t first = 0;
    if (attr) {
        path = arg_str(r, a, 0, NULL, NULL);
        first = 1;
    }
    val *tv = arg(a, first, NULL);
    cargs targs = sub_args(a, first + 1);
    targs.nkw = 0;
    vvec out = {0};
    for (size_t i = 0; i < n; i++) {
        step(r);
        val *x = attr ? attr_path(r, items[i], path) : items[i];
        bool ok;
        if (!tv) ok = truthy(x);
        else {
            if (tv->t != V_STR) RF(r, "%s: the test name must be a string", a->what);
            ok = apply_test(r, tv->s, x, &targs);
        }
        if (ok == keep) vadd(r, &out, items[i]);
    }
    return list_from(r, out.a, out.n);
}

static int sort_cmp(rctx *r, val *x, val *y, bool cs) {
    if (x->t == V_STR && y->t == V_STR && !cs) {
        jstr a = py_case(r, x->s, 0), b = py_case(r, y->s, 0);
        val va = {.t = V_STR, .s = a}, vb = {.t = V_STR, .s = b};
        return v_cmp(r, &va, &vb, "<");
    }
    return v_cmp(r, x, y, "<");
}

static val *apply_filter(rctx *r, jstr name, val *v, cargs *a) {
    step(r);
    char nm[32];
    snprintf(nm, sizeof nm, "%.*s", (int)(name.n > 31 ? 31 : name.n), name.s);
    a->what = sdup(&r->c, nm, strlen(nm)).s;
    if (seq(name, "default") || seq(name, "d")) {
        val *dv = arg(a, 0, "default_value");
        bool boolean = truthy(arg(a, 1, "boolean") ? arg(a, 1, "boolean") : &k_false);
        if (v->t == V_UNDEF || (boolean && !truthy(v))) return dv ? dv : &k_empty;
        return v;
    }
    if (seq(name, "length") || seq(name, "count")) {
        switch (v->t) {
        case V_UNDEF: return vint(&r->c, 0);
        case V_STR: return vint(&r->c, (int64_t)u8count(v->s));
        case V_LIST: return vint(&r->c, (int64_t)v->l.n);
        case V_DICT: case V_NS: return vint(&r->c, (int64_t)v->d->n);
        default: RF(r, "object of type '%s' has no len()", tname(v));
        }
    }
    if (seq(name, "tojson")) {
        jsonopt o = {NULL, ", ", ": ", false, false};
        val *ind = arg(a, 0, "indent");
        if (ind && ind->t != V_NONE) {
            if (ind->t == V_STR) o.indent = sdup(&r->c, ind->s.s, ind->s.n).s;
            else {
                int64_t k = arg_int(r, a, 0, "indent", 0);
                if (k < 0) k = 0;
                if (k > 64) RF(r, "tojson: indent %lld is too large", (long long)k);
                char *sp = amem(&r->c, (size_t)k + 1);
                memset(sp, ' ', (size_t)k);
                sp[k] = '\0';
                o.indent = sp;
            }
            o.isep = ",";
        }
        val *sepv = arg(a, 99, "separators");
        if (sepv && sepv->t != V_NONE) {
            if (sepv->t != V_LIST || sepv->l.n != 2 || sepv->l.a[0]->t != V_STR || sepv->l.a[1]->t != V_STR)
                RF(r, "tojson: separators must be two strings");
            o.isep = sdup(&r->c, sepv->l.a[0]->s.s, sepv->l.a[0]->s.n).s;
            o.ksep = sdup(&r->c, sepv->l.a[1]->s.s, sepv->l.a[1]->s.n).s;
        }
        val *sk = arg(a, 99, "sort_keys"), *ea = arg(a, 99, "ensure_ascii");
        o.sort = sk && truthy(sk);
        o.ascii = ea && truthy(ea);
        jbuf b = {0};
        bput(&r->c, &b, "", 0);
        v_json(r, &b, v, &o, 0);
        return vstr(&r->c, bstr(&b));
    }
    if (seq(name, "safe") || seq(name, "list") || seq(name, "string") || seq(name, "e") || seq(name, "escape")) {
        if (seq(name, "safe")) return v;
        if (seq(name, "list")) {
            size_t n;
            val **items = iter_items(r, v, &n);
            return list_from(r, items, n);
        }
        jstr s = tostr(r, v);
        if (seq(name, "string")) return vstr(&r->c, s);
        jbuf b = {0};
        bput(&r->c, &b, "", 0);
        for (size_t i = 0; i < s.n; i++) {
            switch (s.s[i]) {
            case '&': bputs(&r->c, &b, "&amp;"); break;
            case '<': bputs(&r->c, &b, "&lt;"); break;
            case '>': bputs(&r->c, &b, "&gt;"); break;
            case '"': bputs(&r->c, &b, "&#34;"); break;
            case '\'': bputs(&r->c, &b, "&#39;"); break;
            default: bputc(&r->c, &b, s.s[i]);
            }
        }
        return vstr(&r->c, bstr(&b));
    }
    if (seq(name, "trim")) {
        val *cv = arg(a, 0, "chars");
        jstr chars;
        bool has = cv && cv->t != V_NONE;
        if (has) chars = arg_str(r, a, 0, "chars", NULL);
        return vstr(&r->c, py_strip(tostr(r, v), has ? &chars : NULL, 3));
    }
    if (seq(name, "upper")) return vstr(&r->c, py_case(r, tostr(r, v), 1));
    if (seq(name, "lower")) return vstr(&r->c, py_case(r, tostr(r, v), 0));
    if (seq(name, "capitalize")) return vstr(&r->c, py_case(r, tostr(r, v), 2));
    if (seq(name, "title")) return vstr(&r->c, py_case(r, tostr(r, v), 3));
    if (seq(name, "replace")) {
        jstr s = tostr(r, v);
        val *ov = arg(a, 0, "old"), *nv = arg(a, 1, "new");
        if (!ov || !nv) RF(r, "replace takes two arguments");
        return vstr(&r->c, py_replace(r, s, tostr(r, ov), tostr(r, nv), arg_int(r, a, 2, "count", -1)));
    }
    if (seq(name, "join")) {
        size_t n;
        val **items = iter_items(r, v, &n);
        val *dv = arg(a, 0, "d");
        jstr sep = dv && dv->t != V_NONE ? tostr(r, dv) : (jstr){"", 0};
        val *attr = arg(a, 1, "attribute");
        jbuf b = {0};
        bput(&r->c, &b, "", 0);
        for (size_t i = 0; i < n; i++) {
            step(r);
            if (i) bput(&r->c, &b, sep.s, sep.n);
            val *x = attr && attr->t != V_NONE ? attr_path(r, items[i], tostr(r, attr)) : items[i];
            v_str(r, &b, x);
        }
        return vstr(&r->c, bstr(&b));
    }
    if (seq(name, "first") || seq(name, "last")) {
        size_t n;
        val **items = iter_items(r, v, &n);
        if (!n) return vundef(&r->c, "the first or last item of an empty sequence");
        return name.s[0] == 'f' ? items[0] : items[n - 1];
    }
    if (seq(name, "items")) {
        if (v->t == V_UNDEF) return vlist(&r->c, 0);
        if (v->t != V_DICT) RF(r, "items: can only get items from a mapping, not %s", tname(v));
        cargs none = {0};
        return call_method(r, v, "items", &none);
    }
    if (seq(name, "select") || seq(name, "reject")) return filter_select(r, v, a, false, name.s[0] == 's');
    if (seq(name, "selectattr") || seq(name, "rejectattr")) return filter_select(r, v, a, true, name.s[0] == 's');
    if (seq(name, "map")) {
        size_t n;
        val **items = iter_items(r, v, &n);
        val *attr = arg(a, 99, "attribute");
        val *o = vlist(&r->c, n);
        for (size_t i = 0; i < n; i++) {
            step(r);
            if (attr) {
                val *x = attr_path(r, items[i], tostr(r, attr));
                val *dv = arg(a, 99, "default");
                o->l.a[i] = x->t == V_UNDEF && dv ? dv : x;
            } else {
                jstr fname = arg_str(r, a, 0, NULL, NULL);
                cargs fa = sub_args(a, 1);
                o->l.a[i] = apply_filter(r, fname, items[i], &fa);
            }
        }
        return o;
    }
    if (seq(name, "unique") || seq(name, "reverse") || seq(name, "sort")) {
        if (seq(name, "reverse") && v->t == V_STR) {
            size_t n;
            val **items = iter_items(r, v, &n);
            jbuf b = {0};
            bput(&r->c, &b, "", 0);
            for (size_t i = n; i-- > 0;) bput(&r->c, &b, items[i]->s.s, items[i]->s.n);
            return vstr(&r->c, bstr(&b));
        }
        size_t n;
        val **items = iter_items(r, v, &n);
        val *o = vlist(&r->c, n);
        size_t k = 0;
        if (seq(name, "reverse")) {
            for (size_t i = n; i-- > 0;) o->l.a[k++] = items[i];
        } else if (seq(name, "unique")) {
            for (size_t i = 0; i < n; i++) {
                bool dup = false;
                for (size_t j = 0; j < k && !dup; j++) {
                    step(r);
                    dup = v_eq(r, items[i], o->l.a[j], 0);
                }
                if (!dup) o->l.a[k++] = items[i];
            }
        } else {
            bool rev = truthy(arg(a, 0, "reverse") ? arg(a, 0, "reverse") : &k_false);
            bool cs = truthy(arg(a, 1, "case_sensitive") ? arg(a, 1, "case_sensitive") : &k_false);
            val *attr = arg(a, 2, "attribute");
            for (size_t i = 0; i < n; i++) { /* insertion sort: stable */
                val *x = items[i];
                size_t j = k;
                while (j > 0) {
                    step(r);
                    val *ka = attr ? attr_path(r, o->l.a[j - 1], tostr(r, attr)) : o->l.a[j - 1];
                    val *kb = attr ? attr_path(r, x, tostr(r, attr)) : x;
                    int c = sort_cmp(r, ka, kb, cs);
                    if (rev ? c >= 0 : c <= 0) break;
                    o->l.a[j] = o->l.a[j - 1];
                    j--;
                }
                o->l.a[j] = x;
                k++;
            }
        }
        o->l.n = k;
        return o;
    }
    if (seq(name, "int") || seq(name, "float") || seq(name, "abs")) {
        if (seq(name, "abs")) {
            if (v->t == V_FLOAT) return vfloat(&r->c, fabs(v->f));
            if (v->t == V_INT || v->t == V_BOOL) {
                if (num_i(v) == INT64_MIN) RF(r, "integer overflow");
                return vint(&r->c, num_i(v) < 0 ? -num_i(v) : num_i(v));
            }
            RF(r, "bad operand type for abs(): '%s'", tname(v));
        }
        bool isint = name.s[0] == 'i';
        val *dv = arg(a, 0, "default");
        double f = 0;
        bool ok = true;
        if (is_num(v)) f = num_f(v);
        else if (v->t == V_STR) {
            jstr s = py_strip(v->s, NULL, 3);
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%.*s", (int)(s.n > 63 ? 63 : s.n), s.s);
            char *e;
            if (isint) {
                long long x = strtoll(tmp, &e, 10);
                ok = s.n && s.n < 63 && *e == '\0';
                if (ok) return vint(&r->c, x);
            } else {
                f = strtod(tmp, &e);
                ok = s.n && s.n < 63 && *e == '\0';
            }
        } else ok = false;
        if (!ok) return dv ? dv : isint ? vint(&r->c, 0) : vfloat(&r->c, 0.0);
        if (isint) {
            if (v->t == V_INT || v->t == V_BOOL) return vint(&r->c, num_i(v));
            if (!(f > -9.2e18 && f < 9.2e18)) return dv ? dv : vint(&r->c, 0);
            return vint(&r->c, (int64_t)f);
        }
        return vfloat(&r->c, f);
    }
    if (seq(name, "indent")) {
        jstr s = tostr(r, v);
        val *wv = arg(a, 0, "width");
        jstr pad;
        if (wv && wv->t == V_STR) pad = wv->s;
        else {
            int64_t w = arg_int(r, a, 0, "width", 4);
            if (w < 0) w = 0;
            if (w > 256) RF(r, "indent: width %lld is too large", (long long)w);
            char *sp = amem(&r->c, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            pad = (jstr){sp, (size_t)w};
        }
        bool first = truthy(arg(a, 1, "first") ? arg(a, 1, "first") : &k_false);
        bool blank = truthy(arg(a, 2, "blank") ? arg(a, 2, "blank") : &k_false);
        jbuf b = {0};
        bput(&r->c, &b, "", 0);
        size_t i = 0;
        bool line0 = true;
        while (i <= s.n) {
            const char *nl = memchr(s.s + i, '\n', s.n - i);
            size_t e = nl ? (size_t)(nl - s.s) : s.n;
            bool empty = e == i;
            if ((line0 ? first : true) && (blank || !empty) && !(line0 && !first)) bput(&r->c, &b, pad.s, pad.n);
            bput(&r->c, &b, s.s + i, e - i);
            if (!nl) break;
            bputc(&r->c, &b, '\n');
            i = e + 1;
            line0 = false;
            step(r);
        }
        return vstr(&r->c, bstr(&b));
    }
    if (seq(name, "dictsort")) {
        if (v->t != V_DICT) RF(r, "dictsort: a mapping is required");
        cargs none = {0};
        val *items = call_method(r, v, "items", &none);
        size_t n = items->l.n;
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0; j--) {
                step(r);
                if (sort_cmp(r, items->l.a[j - 1]->l.a[0], items->l.a[j]->l.a[0], false) <= 0) break;
                val *t = items->l.a[j];
                items->l.a[j] = items->l.a[j - 1];
                items->l.a[j - 1] = t;
            }
        return items;
    }
    RF(r, "unknown filter '%.*s'", (int)(name.n > 40 ? 40 : name.n), name.s);
}

static bool apply_test(rctx *r, jstr name, val *v, cargs *a) {
    step(r);
    a->what = "test";
    val *x = arg(a, 0, NULL);
    if (seq(name, "defined")) return v->t != V_UNDEF;
    if (seq(name, "undefined")) return v->t == V_UNDEF;
    if (seq(name, "none")) return v->t == V_NONE;
    if (seq(name, "string")) return v->t == V_STR;
    if (seq(name, "mapping")) return v->t == V_DICT;
    if (seq(name, "iterable")) return v->t == V_STR || v->t == V_LIST || v->t == V_DICT || v->t == V_UNDEF;
    if (seq(name, "sequence")) return v->t == V_STR || v->t == V_LIST || v->t == V_DICT || v->t == V_UNDEF;
    if (seq(name, "number")) return is_num(v);
    if (seq(name, "integer")) return v->t == V_INT;
    if (seq(name, "float")) return v->t == V_FLOAT;
    if (seq(name, "boolean")) return v->t == V_BOOL;
    if (seq(name, "true")) return v->t == V_BOOL && v->b;
    if (seq(name, "false")) return v->t == V_BOOL && !v->b;
    if (seq(name, "callable")) return v->t == V_FUNC;
    if (seq(name, "lower") || seq(name, "upper")) {
        if (v->t != V_STR) return false;
        jstr s = py_case(r, v->s, name.s[0] == 'l' ? 0 : 1);
        return seqs(s, v->s);
    }
    if (seq(name, "odd") || seq(name, "even") || seq(name, "divisibleby")) {
        if (v->t == V_UNDEF) undef_fail(r, v);
        if (v->t != V_INT && v->t != V_BOOL) RF(r, "test '%.*s' needs an integer, not %s", (int)name.n, name.s, tname(v));
        int64_t m = 2, i = num_i(v);
        if (name.s[0] == 'd') {
            if (!x || (x->t != V_INT && x->t != V_BOOL)) RF(r, "divisibleby needs an integer argument");
            m = num_i(x);
            if (!m) RF(r, "integer division or modulo by zero");
            return i % m == 0;
        }
        return (((i % 2) + 2) % 2 == 1) == (name.s[0] == 'o');
    }
    if (!x) RF(r, "unknown test '%.*s' or missing argument", (int)(name.n > 40 ? 40 : name.n), name.s);
    if (seq(name, "eq") || seq(name, "equalto") || seq(name, "==")) return v_eq(r, v, x, 0);
    if (seq(name, "ne") || seq(name, "!=")) return !v_eq(r, v, x, 0);
    if (seq(name, "lt") || seq(name, "lessthan")) return v_cmp(r, v, x, "<") < 0;
    if (seq(name, "le")) return v_cmp(r, v, x, "<=") <= 0;
    if (seq(name, "gt") || seq(name, "greaterthan")) return v_cmp(r, v, x, ">") > 0;
    if (seq(name, "ge")) return v_cmp(r, v, x, ">=") >= 0;
    if (seq(name, "in")) return v_in(r, v, x);
    if (seq(name, "sameas")) {
        if (v->t != x->t) return false;
        if (v->t == V_NONE || v->t == V_UNDEF) return true;
        if (v->t == V_BOOL) return v->b == x->b;
        return v == x;
    }
    RF(r, "unknown test '%.*s'", (int)(name.n > 40 ? 40 : name.n), name.s);
}

/* ---- evaluation ----------------------------------------------------------------------- */

static val *lookup(rctx *r, scope *s, jstr name) {
    for (scope *q = s; q; q = q->up) {
        val *v = dget(&q->vars, name);
        if (v) return v;
    }
    const char *g = in_table(k_globals, name);
    if (g) return mkfunc(r, F_GLOBAL, g, NULL);
    char tmp[100];
    snprintf(tmp, sizeof tmp, "'%.*s'", (int)(name.n > 60 ? 60 : name.n), name.s);
    return vundef(&r->c, sdup(&r->c, tmp, strlen(tmp)).s);
}

static cargs eval_args(rctx *r, const expr *e, scope *s) {
    cargs a = {0};
    if (!e->nargs) return a;
    a.pos = amem(&r->c, e->nargs * sizeof(val *));
    a.kwv = amem(&r->c, e->nargs * sizeof(val *));
    a.kwn = amem(&r->c, e->nargs * sizeof(jstr));
    for (size_t i = 0; i < e->nargs; i++) {
        val *v = eval(r, e->args[i], s);
        if (e->kw && e->kw[i].s) {
            a.kwn[a.nkw] = e->kw[i];
            a.kwv[a.nkw++] = v;
        } else {
            a.pos[a.npos++] = v;
        }
    }
    return a;
}

static val *arith(rctx *r, const char *op, val *a, val *b) {
    if (a->t == V_UNDEF) undef_fail(r, a);
    if (b->t == V_UNDEF) undef_fail(r, b);
    char o = op[0];
    bool two = op[1] != '\0';
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT && !(o == '/' && !two)) {
            int64_t x = num_i(a), y = num_i(b), z;
            switch (o) {
            case '+': if (__builtin_add_overflow(x, y, &z)) goto ovf; return vint(&r->c, z);
            case '-': if (__builtin_sub_overflow(x, y, &z)) goto ovf; return vint(&r->c, z);
            case '*':
                if (two) { /* ** */
                    if (y < 0) return vfloat(&r->c, pow((double)x, (double)y));
                    z = 1;
                    for (int64_t i = 0; i < y; i++) {
                        if (__builtin_mul_overflow(z, x, &z)) goto ovf;
                        if (z == 0 || z == 1) break;
                        step(r);
                    }
                    return vint(&r->c, z);
                }
                if (__builtin_mul_overflow(x, y, &z)) goto ovf;
                return vint(&r->c, z);
            case '/': case '%':
                if (y == 0) RF(r, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto ovf;
                {
                    int64_t q = x / y, m = x % y;
                    if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
                    return vint(&r->c, o == '%' ? m : q);
                }
            }
        }
        double x = num_f(a), y = num_f(b);
        switch (o) {
        case '+': return vfloat(&r->c, x + y);
        case '-': return vfloat(&r->c, x - y);
        case '*': return vfloat(&r->c, two ? pow(x, y) : x * y);
        case '/': case '%':
            if (y == 0) RF(r, "float division by zero");
            if (o == '/' && !two) return vfloat(&r->c, x / y);
            {
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                if (o == '%') return vfloat(&r->c, m);
                return vfloat(&r->c, floor((x - m) / y + 0.5) == (x - m) / y ? (x - m) / y : floor(x / y));
            }
        }
    }
    if (o == '+' && a->t == V_STR && b->t == V_STR) {
        jbuf s = {0};
        bput(&r->c, &s, a->s.s, a->s.n);
        bput(&r->c, &s, b->s.s, b->s.n);
        return vstr(&r->c, bstr(&s));
    }
    if (o == '+' && a->t == V_LIST && b->t == V_LIST && a->tuple == b->tuple) {
        val *v = vlist(&r->c, a->l.n + b->l.n);
        if (a->l.n) memcpy(v->l.a, a->l.a, a->l.n * sizeof(val *));
        if (b->l.n) memcpy(v->l.a + a->l.n, b->l.a, b->l.n * sizeof(val *));
        v->tuple = a->tuple;
        return v;
    }
    if (o == '*' && !two && ((a->t == V_STR || a->t == V_LIST) && (b->t == V_INT || b->t == V_BOOL))) {
        int64_t k = num_i(b);
        if (k < 0) k = 0;
        size_t unit = a->t == V_STR ? a->s.n : a->l.n;
        if (unit && (uint64_t)k > LS_JINJA_MAX_OUTPUT / unit) RF(r, "repetition result is too large");
        if (a->t == V_STR) {
            jbuf s = {0};
            bput(&r->c, &s, "", 0);
            for (int64_t i = 0; i < k; i++) bput(&r->c, &s, a->s.s, a->s.n);
            return vstr(&r->c, bstr(&s));
        }
        val *v = vlist(&r->c, unit * (size_t)k);
        for (int64_t i = 0; i < k; i++)
            if (unit) memcpy(v->l.a + (size_t)i * unit, a->l.a, unit * sizeof(val *));
        v->tuple = a->tuple;
        return v;
    }
    if (o == '*' && !two && (b->t == V_STR || b->t == V_LIST) && (a->t == V_INT || a->t == V_BOOL)) return arith(r, op, b, a);
    RF(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, tname(a), tname(b));
ovf:
    RF(r, "integer overflow in '%s'", op);
}

static val *eval(rctx *r, const expr *e, scope *s) {
    step(r);
    r->c.line = e->line;
    switch (e->k) {
    case E_LIT: return e->lit;
    case E_NAME: return lookup(r, s, e->name);
    case E_ATTR: return get_attr(r, eval(r, e->a, s), e->name);
    case E_ITEM: {
        val *o = eval(r, e->a, s);
        return get_item(r, o, eval(r, e->b, s));
    }
    case E_SLICE: {
        val *o = eval(r, e->a, s);
        val *sl[3];
        for (int k = 0; k < 3; k++) sl[k] = e->args[k] ? eval(r, e->args[k], s) : NULL;
        return do_slice(r, o, sl);
    }
    case E_CALL: {
        val *f = eval(r, e->a, s);
        cargs a = eval_args(r, e, s);
        val *v = call_value(r, f, &a);
        r->c.line = e->line;
        return v;
    }
    case E_FILTER: {
        val *v = eval(r, e->a, s);
        cargs a = eval_args(r, e, s);
        r->c.line = e->line;
        return apply_filter(r, e->name, v, &a);
    }
    case E_TEST: {
        val *v = eval(r, e->a, s);
        cargs a = eval_args(r, e, s);
        r->c.line = e->line;
        return vbool(apply_test(r, e->name, v, &a) != e->neg);
    }
    case E_NOT: return vbool(!truthy(eval(r, e->a, s)));
    case E_NEG: case E_POS: {
        val *v = eval(r, e->a, s);
        if (v->t == V_UNDEF) undef_fail(r, v);
        if (!is_num(v)) RF(r, "bad operand type for unary %c: '%s'", e->k == E_NEG ? '-' : '+', tname(v));
        if (e->k == E_POS) return v->t == V_BOOL ? vint(&r->c, num_i(v)) : v;
        if (v->t == V_FLOAT) return vfloat(&r->c, -v->f);
        if (num_i(v) == INT64_MIN) RF(r, "integer overflow");
        return vint(&r->c, -num_i(v));
    }
    case E_BIN: {
        val *a = eval(r, e->a, s), *b = eval(r, e->b, s);
        r->c.line = e->line;
        if (e->name.s[0] == '~') {
            jbuf o = {0};
            bput(&r->c, &o, "", 0);
            v_str(r, &o, a);
            v_str(r, &o, b);
            return vstr(&r->c, bstr(&o));
        }
        return arith(r, e->name.s, a, b);
    }
    case E_AND: {
        val *a = eval(r, e->a, s);
        return truthy(a) ? eval(r, e->b, s) : a;
    }
    case E_OR: {
        val *a = eval(r, e->a, s);
        return truthy(a) ? a : eval(r, e->b, s);
    }
    case E_COND:
        if (truthy(eval(r, e->b, s))) return eval(r, e->a, s);
        return e->c ? eval(r, e->c, s) : vundef(&r->c, "the else branch of an inline if");
    case E_LIST: case E_TUPLE: {
        val *v = vlist(&r->c, e->nargs);
        for (size_t i = 0; i < e->nargs; i++) v->l.a[i] = eval(r, e->args[i], s);
        v->tuple = e->k == E_TUPLE;
        return v;
    }
    case E_DICT: {
        val *v = vdict(&r->c, V_DICT);
        for (size_t i = 0; i + 1 < e->nargs; i += 2) {
            val *k = eval(r, e->args[i], s);
            if (k->t != V_STR) RF(r, "dict keys must be strings here, not %s", tname(k));
            dset(&r->c, v->d, k->s, eval(r, e->args[i + 1], s));
        }
        return v;
    }
    case E_CMP: {
        val *a = eval(r, e->args[0], s);
        for (size_t i = 1; i < e->nargs; i++) {
            val *b = eval(r, e->args[i], s);
            jstr op = e->ops[i - 1];
            r->c.line = e->line;
            bool ok;
            if (seq(op, "==")) ok = v_eq(r, a, b, 0);
            else if (seq(op, "!=")) ok = !v_eq(r, a, b, 0);
            else if (seq(op, "in")) ok = v_in(r, a, b);
            else if (seq(op, "not in")) ok = !v_in(r, a, b);
            else {
                int c = v_cmp(r, a, b, op.s);
                ok = seq(op, "<") ? c < 0 : seq(op, "<=") ? c <= 0 : seq(op, ">") ? c > 0 : c >= 0;
            }
            if (!ok) return &k_false;
            a = b;
        }
        return &k_true;
    }
    }
    RF(r, "bad expression");
}

/* ---- statements ------------------------------------------------------------------------ */

static void bind(rctx *r, scope *s, const node *x, val *v) {
    if (!x->tuple_target) {
        dset(&r->c, &s->vars, x->targets[0], v);
        return;
    }
    size_t n;
    val **items = v->t == V_LIST ? v->l.a : iter_items(r, v, &n);
    if (v->t == V_LIST) n = v->l.n;
    if (n != x->ntargets) RF(r, "cannot unpack %zu values into %zu names", n, x->ntargets);
    for (size_t i = 0; i < n; i++) dset(&r->c, &s->vars, x->targets[i], items[i]);
}

static void out_val(rctx *r, val *v) {
    if (v->t == V_UNDEF) return;
    jstr s = tostr(r, v);
    emit(r, r->out, s.s, s.n);
}

static jstr capture(rctx *r, nlist body, scope *s) {
    jbuf cap = {0};
    bput(&r->c, &cap, "", 0);
    jbuf *saved = r->out;
    r->out = &cap;
    exec_list(r, body, s);
    r->out = saved;
    return bstr(&cap);
}

static void exec_for(rctx *r, const node *x, scope *s) {
    val *it = eval(r, x->e, s);
    size_t n;
    val **items = iter_items(r, it, &n);
    scope *ls = scope_new(r, s);
    if (x->cond) {
        vvec kept = {0};
        for (size_t i = 0; i < n; i++) {
            ls->vars.n = 0;
            bind(r, ls, x, items[i]);
            if (truthy(eval(r, x->cond, ls))) vadd(r, &kept, items[i]);
        }
        items = kept.a;
        n = kept.n;
    }
    if (!n) {
        exec_list(r, x->orelse, s);
        return;
    }
    jloop *lp = amem(&r->c, sizeof *lp);
    lp->items = items;
    lp->len = n;
    val *lv = vnew(&r->c, V_LOOP);
    lv->lp = lp;
    r->loops++;
    for (size_t i = 0; i < n; i++) {
        step(r);
        lp->idx = i;
        ls->vars.n = 0; /* each iteration starts afresh, as in jinja2 */
        bind(r, ls, x, items[i]);
        dset(&r->c, &ls->vars, (jstr){"loop", 4}, lv);
        exec_list(r, x->body, ls);
        if (r->ctl == 1) {
            r->ctl = 0;
            break;
        }
        r->ctl = 0;
    }
    r->loops--;
}

static void exec_list(rctx *r, nlist l, scope *s) {
    for (size_t i = 0; i < l.n && !r->ctl; i++) {
        const node *x = l.a[i];
        step(r);
        r->c.line = x->line;
        switch (x->k) {
        case N_TEXT: emit(r, r->out, x->text.s, x->text.n); break;
        case N_OUT: out_val(r, eval(r, x->e, s)); break;
        case N_IF: exec_list(r, truthy(eval(r, x->e, s)) ? x->body : x->orelse, s); break;
        case N_FOR: exec_for(r, x, s); break;
        case N_SET: {
            val *v = eval(r, x->e, s);
            if (x->attr_of) {
                val *ns = eval(r, x->attr_of, s);
                if (ns->t != V_NS) RF(r, "cannot assign attribute on non-namespace object");
                dset(&r->c, ns->d, x->name, v);
            } else {
                bind(r, s, x, v);
            }
            break;
        }
        case N_SETBLOCK: {
            val *v = vstr(&r->c, capture(r, x->body, s));
            if (x->e) {
                scope *t = scope_new(r, s);
                dset(&r->c, &t->vars, (jstr){"\x01block", 6}, v);
                v = eval(r, x->e, t);
            }
            if (x->attr_of) {
                val *ns = eval(r, x->attr_of, s);
                if (ns->t != V_NS) RF(r, "cannot assign attribute on non-namespace object");
                dset(&r->c, ns->d, x->name, v);
            } else {
                bind(r, s, x, v);
            }
            break;
        }
        case N_MACRO: {
            val *f = mkfunc(r, F_MACRO, "macro", NULL);
            f->fn->mac = x;
            dset(&r->c, &s->vars, x->name, f);
            break;
        }
        case N_BREAK: case N_CONTINUE:
            if (!r->loops) RF(r, "%s outside a for loop", x->k == N_BREAK ? "break" : "continue");
            r->ctl = x->k == N_BREAK ? 1 : 2;
            break;
        case N_BLOCK: exec_list(r, x->body, s); break;
        }
    }
}

/* ---- entry points ------------------------------------------------------------------------ */

static val *from_json(rctx *r, const cJSON *j, int depth) {
    if (depth > LS_JINJA_MAX_DEPTH) RF(r, "variables nested deeper than %d", LS_JINJA_MAX_DEPTH);
    if (cJSON_IsNull(j)) return &k_none;
    if (cJSON_IsTrue(j)) return &k_true;
    if (cJSON_IsFalse(j)) return &k_false;
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) return vint(&r->c, (int64_t)d);
        return vfloat(&r->c, d);
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        size_t n = strlen(s);
        for (size_t i = 0; i < n;) {
            size_t k = u8valid((const unsigned char *)s + i, n - i);
            if (!k) RF(r, "a variable's string is not valid UTF-8");
            i += k;
        }
        return vstr(&r->c, (jstr){s, n});
    }
    if (cJSON_IsArray(j)) {
        size_t n = (size_t)cJSON_GetArraySize(j), i = 0;
        val *v = vlist(&r->c, n);
        for (const cJSON *c = j->child; c && i < n; c = c->next) v->l.a[i++] = from_json(r, c, depth + 1);
        v->l.n = i;
        return v;
    }
    if (cJSON_IsObject(j)) {
        val *v = vdict(&r->c, V_DICT);
        for (const cJSON *c = j->child; c; c = c->next)
            dset(&r->c, v->d, (jstr){c->string ? c->string : "", c->string ? strlen(c->string) : 0}, from_json(r, c, depth + 1));
        return v;
    }
    RF(r, "unsupported JSON value in the variables");
}

ls_status ls_jinja_render(const ls_jinja *t, const cJSON *vars, char **out, size_t *out_len, ls_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    rctx *r = ls_calloc(1, sizeof *r);
    if (!r) return ls_err_set(err, LS_E_NOMEM, "chat template: out of memory");
    r->c.err = err;
    if (setjmp(r->c.jb)) {
        ls_status st = r->c.code ? r->c.code : LS_E_INVALID;
        arena_free(&r->c);
        free(r);
        return st;
    }
    r->root = scope_new(r, NULL);
    if (vars && cJSON_IsObject(vars))
        for (const cJSON *c = vars->child; c; c = c->next)
            if (c->string) dset(&r->c, &r->root->vars, sdup(&r->c, c->string, strlen(c->string)), from_json(r, c, 0));
    jbuf o = {0};
    bput(&r->c, &o, "", 0);
    r->out = &o;
    exec_list(r, t->root, r->root);
    char *res = ls_malloc(o.n + 1);
    if (!res) {
        arena_free(&r->c);
        free(r);
        return ls_err_set(err, LS_E_NOMEM, "chat template: out of memory");
    }
    memcpy(res, o.p, o.n + 1);
    *out = res;
    if (out_len) *out_len = o.n;
    arena_free(&r->c);
    free(r);
    return LS_OK;
}

ls_status ls_jinja_render_json(const char *src, size_t len, const char *vars_json, char **out, ls_err *err) {
    *out = NULL;
    cJSON *vars = NULL;
    if (vars_json) {
        vars = cJSON_Parse(vars_json);
        if (!vars) return ls_err_set(err, LS_E_INVALID, "chat template: the variables are not valid JSON");
    }
    ls_jinja *t;
    ls_status st = ls_jinja_parse(src, len, &t, err);
    if (st == LS_OK) {
        st = ls_jinja_render(t, vars, out, NULL, err);
        ls_jinja_free(t);
    }
    cJSON_Delete(vars);
    return st;
}
