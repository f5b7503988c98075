/* grammar.c - GBNF parsing and the pushdown matcher (see grammar.h).
 *
 * Compiled form (as llama.cpp's llama-grammar): every rule is a run of elements,
 * its alternatives separated by G_ALT and closed by G_END.  A terminal is G_CHAR /
 * G_CHAR_NOT with its value, followed by G_RNG_UPPER (the top of a range) and
 * G_CHAR_ALT (another member of the class) elements; G_ANY is `.`; G_REF refers to a
 * rule.  Quantifiers are rewritten into generated rules:
 *   S{m,n} -> S..S (m times) S'(n-m),  S'(k) ::= S S'(k-1) | ,  S'(1) ::= S |
 *   S{m,}  -> S..S (m times) S',        S'   ::= S S' |
 * and * + ? are {0,}, {1,}, {0,1}.  A matcher state is a set of stacks of element
 * positions: each stack's top is a terminal (the next character it needs), an empty
 * stack means the text so far is complete.  Accepting a code point keeps the stacks
 * whose top matches it, pops that terminal and expands rule references at the new top
 * into every alternative (advance), deduplicating. */
#include "sample/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

enum { G_END = 0, G_ALT, G_REF, G_CHAR, G_CHAR_NOT, G_RNG_UPPER, G_CHAR_ALT, G_ANY };

typedef struct {
    uint32_t type;
    uint32_t value;
} gel;

static bool is_eos_type(uint32_t t) { return t == G_END || t == G_ALT; }

struct ls_grammar {
    gel *el;
    uint32_t n_el;
    uint32_t *rule_start; /* n_rules */
    uint32_t n_rules, root;
};

/* ---- growable arrays ------------------------------------------------------------ */
typedef struct {
    gel *v;
    size_t n, cap;
} gvec;

static bool gvec_push(gvec *a, uint32_t type, uint32_t value) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        gel *p = realloc(a->v, nc * sizeof *p);
        if (!p) return false;
        a->v = p;
        a->cap = nc;
    }
    a->v[a->n++] = (gel){type, value};
    return true;
}

static bool gvec_append(gvec *a, const gel *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!gvec_push(a, src[i].type, src[i].value)) return false;
    return true;
}

/* ---- the parser ------------------------------------------------------------------- */
typedef struct {
    char *name;
    gvec body;
    bool defined;
    size_t ref_at; /* where it was first referenced (for "undefined rule") */
} prule;

typedef struct {
    const char *src, *end;
    prule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t *names; /* hash table of the named (not generated) rules' ids + 1; 0: empty */
    uint32_t names_cap;
    ls_err *err;
    bool failed;
    int nesting;       /* ( ) groups open around the parser (bounded: MAX_NESTING) */
    uint64_t expanded; /* elements the repetitions have added (bounded: MAX_EXPANDED) */
} parser;

/* What one grammar may ask for.  Every limit is far above what a hand-written grammar or
 * one the JSON Schema converter makes needs (a schema at its own limits, json_schema.c,
 * nests 64 levels and repeats 4,096 times), and together they bound any text inside the
 * server's 1 MiB body: its parse and compile use no recursion deeper than MAX_NESTING
 * groups, and take well under 0.5 s and ~100 MB.  Measured on a loaded 2-core host:
 * a 1.2 MB grammar of 30,000 rules compiles in ~0.05 s, the reported inputs are refused
 * in < 0.02 s (tests/unit/test_grammar.c, test_limits_named_and_fast, prints each), and
 * the slowest schema we know (720 KB: 1,024 properties each a 100-value enum) converts
 * and compiles in ~0.15 s.  So no compile needs a cancellation hook. */
#define MAX_NESTING 256 /* ( ) groups inside one another: the parser recurses once per group */
#define MAX_RULES 32768 /* rules, the ones repetitions and groups generate included */
/* Nested repetitions multiply ("a"{0,1000}){0,1000}: the compiled grammar is bounded. */
#define MAX_EXPANDED (1u << 20)
/* Rules that can begin one another before any character (r0 ::= r1, r1 ::= r2 ...): the
 * matcher expands such a chain at every step. */
#define MAX_CHAIN 1024
/* Entries of one character class (a range counts two): the matcher scans them per character. */
#define MAX_CLASS 4096
/* Elements (characters, references, ...) of the compiled grammar: 32 MB. */
#define MAX_ELEMENTS (1u << 22)

static void where(const parser *ps, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *p = ps->src; p < at && p < ps->end; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)*p & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

__attribute__((format(printf, 3, 4))) static const char *perr(parser *ps, const char *at, const char *fmt, ...) {
    if (ps->failed) return NULL;
    ps->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!at) {
        ls_err_set(ps->err, LS_E_INVALID, "grammar: %s", msg);
        return NULL;
    }
    int line, col;
    where(ps, at, &line, &col);
    char near[24] = "";
    if (at < ps->end) {
        size_t k = 0;
        for (const char *p = at; p < ps->end && k < 16 && *p != '\n' && *p != '\r'; p++) near[k++] = *p;
        near[k] = 0;
    }
    ls_err_set(ps->err, LS_E_INVALID, "grammar line %d, column %d: %s%s%s%s", line, col, msg,
               at >= ps->end ? " (at the end of the text)" : " (at '", at >= ps->end ? "" : near,
               at >= ps->end ? "" : "')");
    return NULL;
}

static const char *oom(parser *ps) {
    if (!ps->failed) {
        ps->failed = true;
        ls_err_set(ps->err, LS_E_NOMEM, "grammar: out of memory");
    }
    return NULL;
}

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static const char *parse_space(const parser *ps, const char *p, bool newline_ok) {
    while (p < ps->end && (*p == ' ' || *p == '\t' || *p == '#' || (newline_ok && (*p == '\r' || *p == '\n')))) {
        if (*p == '#')
            while (p < ps->end && *p != '\r' && *p != '\n') p++;
        else
            p++;
    }
    return p;
}

static uint32_t name_hash(const char *name, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)name[i]) * 16777619u;
    return h;
}

/* The named rule's id, or -1 (a hash lookup: a grammar may name thousands of rules). */
static int64_t find_rule(parser *ps, const char *name, size_t n) {
    if (!ps->names_cap) return -1;
    for (uint32_t i = name_hash(name, n) & (ps->names_cap - 1);; i = (i + 1) & (ps->names_cap - 1)) {
        uint32_t v = ps->names[i];
        if (!v) return -1;
        const char *rn = ps->rules[v - 1].name;
        if (!strncmp(rn, name, n) && rn[n] == 0) return v - 1;
    }
}

static bool names_insert(parser *ps, uint32_t id) {
    if (2 * (ps->n_rules + 1) > ps->names_cap) { /* at most half full */
        uint32_t nc = ps->names_cap ? ps->names_cap * 2 : 64;
        uint32_t *t = calloc(nc, sizeof *t);
        if (!t) return false;
        for (uint32_t k = 0; k < ps->names_cap; k++) {
            uint32_t v = ps->names[k];
            if (!v) continue;
            const char *rn = ps->rules[v - 1].name;
            uint32_t i = name_hash(rn, strlen(rn)) & (nc - 1);
            while (t[i]) i = (i + 1) & (nc - 1);
            t[i] = v;
        }
        free(ps->names);
        ps->names = t;
        ps->names_cap = nc;
    }
    const char *rn = ps->rules[id].name;
    uint32_t i = name_hash(rn, strlen(rn)) & (ps->names_cap - 1);
    while (ps->names[i]) i = (i + 1) & (ps->names_cap - 1);
    ps->names[i] = id + 1;
    return true;
}

/* A new rule (named: findable by find_rule; generated rules are not).  -1: out of
 * memory, or past MAX_RULES (then the error is set). */
static int64_t add_rule(parser *ps, const char *name, size_t n, size_t at, bool named) {
    if (ps->n_rules >= MAX_RULES) {
        perr(ps, NULL, "the grammar has more than the limit of %d rules (counting those its groups and repetitions generate)",
             MAX_RULES);
        return -1;
    }
    if (ps->n_rules == ps->cap_rules) {
        uint32_t nc = ps->cap_rules ? ps->cap_rules * 2 : 16;
        prule *r = realloc(ps->rules, nc * sizeof *r);
        if (!r) return -1;
        ps->rules = r;
        ps->cap_rules = nc;
    }
    prule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(n + 1))) return -1;
    memcpy(r->name, name, n);
    r->name[n] = 0;
    r->ref_at = at;
    if (named && !names_insert(ps, ps->n_rules)) {
        free(r->name);
        return -1;
    }
    return ps->n_rules++;
}

static int64_t symbol_id(parser *ps, const char *name, size_t n, size_t at) {
    int64_t id = find_rule(ps, name, n);
    return id >= 0 ? id : add_rule(ps, name, n, at, true);
}

static int64_t generate_id(parser *ps, const char *base) {
    char nm[160];
    snprintf(nm, sizeof nm, "%.120s_%u", base, ps->n_rules);
    return add_rule(ps, nm, strlen(nm), SIZE_MAX, false);
}

static const char *parse_name(parser *ps, const char *p) {
    const char *q = p;
    while (q < ps->end && is_word_char(*q)) q++;
    if (q == p) return perr(ps, p, "expected a rule name");
    return q;
}

static int utf8_step(uint32_t *cp, int *st, uint8_t b);

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or a class (an escape, or a UTF-8 sequence). */
static const char *parse_char(parser *ps, const char *p, uint32_t *out) {
    if (p >= ps->end) return perr(ps, p, "unexpected end of input");
    if (*p == '\\') {
        if (p + 1 >= ps->end) return perr(ps, p, "unexpected end of input after '\\'");
        int nhex = 0;
        switch (p[1]) {
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 't': *out = '\t'; return p + 2;
        case 'r': *out = '\r'; return p + 2;
        case 'n': *out = '\n'; return p + 2;
        case '\\': case '"': case '[': case ']': *out = (uint8_t)p[1]; return p + 2;
        default: return perr(ps, p, "unknown escape '\\%c' (expected one of \\n \\r \\t \\\\ \\\" \\[ \\] \\x \\u \\U)", p[1]);
        }
        uint32_t v = 0;
        const char *q = p + 2;
        for (int i = 0; i < nhex; i++, q++) {
            int h = q < ps->end ? hexval(*q) : -1;
            if (h < 0) return perr(ps, q, "expected %d hex digits after '\\%c'", nhex, p[1]);
            v = v << 4 | (uint32_t)h;
        }
        if (v > 0x10FFFF) return perr(ps, p, "code point U+%X is beyond U+10FFFF", v);
        *out = v;
        return q;
    }
    uint32_t c = 0;
    int st = 0;
    for (const char *q = p; q < ps->end; q++) {
        int r = utf8_step(&c, &st, (uint8_t)*q);
        if (r < 0) break;
        if (r == 1) {
            *out = c;
            return q + 1;
        }
    }
    return perr(ps, p, "invalid UTF-8 in the grammar text");
}

static const char *parse_int(parser *ps, const char *p, uint32_t *out) {
    const char *q = p;
    uint64_t v = 0;
    while (q < ps->end && *q >= '0' && *q <= '9') {
        v = v * 10 + (uint64_t)(*q - '0');
        if (v > 100000) return perr(ps, p, "repetition count too large (the limit is 100000)");
        q++;
    }
    if (q == p) return perr(ps, p, "expected a number");
    *out = (uint32_t)v;
    return q;
}

static const char *parse_alternates(parser *ps, const char *p, const char *rule_name, uint32_t rule_id, bool nested);

/* Applies {min, max} (max UINT32_MAX: unbounded) to out[last..). */
static bool repeat(parser *ps, gvec *out, size_t last, const char *rule_name, uint32_t min, uint32_t max) {
    size_t n_prev = out->n - last;
    ps->expanded += (uint64_t)(n_prev + 3) * ((uint64_t)min + (max == UINT32_MAX ? 1 : max - min) + 1);
    if (ps->expanded > MAX_EXPANDED) return false;
    gel *prev = malloc((n_prev ? n_prev : 1) * sizeof *prev);
    if (!prev) return false;
    memcpy(prev, out->v + last, n_prev * sizeof *prev);
    bool ok = true;
    if (min == 0) out->n = last;
    for (uint32_t i = 1; i < min && ok; i++) ok = gvec_append(out, prev, n_prev);
    uint32_t n_opt = max == UINT32_MAX ? 1 : max - min;
    int64_t last_rec = -1;
    for (uint32_t i = 0; i < n_opt && ok; i++) {
        int64_t id = generate_id(ps, rule_name);
        if (id < 0) {
            ok = false;
            break;
        }
        gvec *b = &ps->rules[id].body;
        ps->rules[id].defined = true;
        ok = gvec_append(b, prev, n_prev);
        if (ok && (i > 0 || max == UINT32_MAX)) ok = gvec_push(b, G_REF, max == UINT32_MAX ? (uint32_t)id : (uint32_t)last_rec);
        ok = ok && gvec_push(b, G_ALT, 0) && gvec_push(b, G_END, 0);
        last_rec = id;
    }
    if (ok && n_opt > 0) ok = gvec_push(out, G_REF, (uint32_t)last_rec);
    free(prev);
    return ok;
}

static const char *parse_sequence(parser *ps, const char *p, const char *rule_name, gvec *out, bool nested) {
    size_t last = out->n;
    while (p && p < ps->end) {
        if (*p == '"') {
            p++;
            last = out->n;
            while (p < ps->end && *p != '"') {
                uint32_t c;
                if (!(p = parse_char(ps, p, &c))) return NULL;
                if (!gvec_push(out, G_CHAR, c)) return oom(ps);
            }
            if (p >= ps->end) return perr(ps, p, "expected '\"' to close the literal");
            p = parse_space(ps, p + 1, nested);
        } else if (*p == '[') {
            const char *open = p;
            p++;
            uint32_t type = G_CHAR;
            if (p < ps->end && *p == '^') {
                p++;
                type = G_CHAR_NOT;
            }
            last = out->n;
            while (p < ps->end && *p != ']') {
                uint32_t c;
                if (!(p = parse_char(ps, p, &c))) return NULL;
                if (!gvec_push(out, last < out->n ? G_CHAR_ALT : type, c)) return oom(ps);
                if (p + 1 < ps->end && p[0] == '-' && p[1] != ']') {
                    uint32_t hi;
                    const char *r = p + 1;
                    if (!(p = parse_char(ps, p + 1, &hi))) return NULL;
                    if (hi < c) return perr(ps, r, "range end U+%04X is below its start U+%04X", hi, c);
                    if (!gvec_push(out, G_RNG_UPPER, hi)) return oom(ps);
                }
            }
            if (p >= ps->end) return perr(ps, open, "expected ']' to close the character class");
            if (out->n - last > MAX_CLASS)
                return perr(ps, open, "the character class has more than the limit of %d entries (a range counts two)", MAX_CLASS);
            if (last == out->n) return perr(ps, open, "empty character class");
            p = parse_space(ps, p + 1, nested);
        } else if (is_word_char(*p)) {
            const char *ne = parse_name(ps, p);
            if (!ne) return NULL;
            int64_t id = symbol_id(ps, p, (size_t)(ne - p), (size_t)(p - ps->src));
            if (id < 0) return oom(ps);
            p = parse_space(ps, ne, nested);
            last = out->n;
            if (!gvec_push(out, G_REF, (uint32_t)id)) return oom(ps);
        } else if (*p == '(') {
            const char *open = p;
            if (ps->nesting >= MAX_NESTING)
                return perr(ps, open, "groups ( ) nest deeper than the limit of %d levels", MAX_NESTING);
            p = parse_space(ps, p + 1, true);
            int64_t id = generate_id(ps, rule_name);
            if (id < 0) return oom(ps);
            ps->nesting++;
            p = parse_alternates(ps, p, rule_name, (uint32_t)id, true);
            ps->nesting--;
            if (!p) return NULL;
            last = out->n;
            if (!gvec_push(out, G_REF, (uint32_t)id)) return oom(ps);
            if (p >= ps->end || *p != ')') {
                (void)open;
                return perr(ps, p, "expected ')'");
            }
            p = parse_space(ps, p + 1, nested);
        } else if (*p == '.') {
            last = out->n;
            if (!gvec_push(out, G_ANY, 0)) return oom(ps);
            p = parse_space(ps, p + 1, nested);
        } else if (*p == '*' || *p == '+' || *p == '?' || *p == '{') {
            if (last == out->n) return perr(ps, p, "expected an item before '%c'", *p);
            uint32_t mn = 0, mx = UINT32_MAX;
            if (*p == '*') {
                p++;
            } else if (*p == '+') {
                mn = 1;
                p++;
            } else if (*p == '?') {
                mx = 1;
                p++;
            } else {
                p = parse_space(ps, p + 1, nested);
                if (!(p = parse_int(ps, p, &mn))) return NULL;
                p = parse_space(ps, p, nested);
                if (p < ps->end && *p == ',') {
                    p = parse_space(ps, p + 1, nested);
                    if (p < ps->end && *p >= '0' && *p <= '9') {
                        if (!(p = parse_int(ps, p, &mx))) return NULL;
                        if (mx < mn) return perr(ps, p, "repetition maximum %u is below the minimum %u", mx, mn);
                        p = parse_space(ps, p, nested);
                    }
                } else {
                    mx = mn;
                }
                if (p >= ps->end || *p != '}') return perr(ps, p, "expected '}' to close the repetition");
                p++;
            }
            p = parse_space(ps, p, nested);
            if (!repeat(ps, out, last, rule_name, mn, mx))
                return ps->expanded > MAX_EXPANDED
                           ? perr(ps, p, "the repetitions expand to more than %u elements (nest fewer, or smaller counts)",
                                  MAX_EXPANDED)
                           : oom(ps);
        } else {
            break;
        }
    }
    return p;
}

static const char *parse_alternates(parser *ps, const char *p, const char *rule_name, uint32_t rule_id, bool nested) {
    gvec body = {0};
    p = parse_sequence(ps, p, rule_name, &body, nested);
    while (p && p < ps->end && *p == '|') {
        if (!gvec_push(&body, G_ALT, 0)) {
            free(body.v);
            return oom(ps);
        }
        p = parse_space(ps, p + 1, true);
        p = parse_sequence(ps, p, rule_name, &body, nested);
    }
    if (!p || !gvec_push(&body, G_END, 0)) {
        free(body.v);
        return p ? oom(ps) : NULL;
    }
    prule *r = &ps->rules[rule_id];
    free(r->body.v);
    r->body = body;
    r->defined = true;
    return p;
}

static const char *parse_rule(parser *ps, const char *p) {
    const char *ne = parse_name(ps, p);
    if (!ne) return NULL;
    int64_t id = find_rule(ps, p, (size_t)(ne - p));
    if (id >= 0 && ps->rules[id].defined)
        return perr(ps, p, "rule '%.*s' is defined twice", (int)(ne - p) > 80 ? 80 : (int)(ne - p), p);
    if (id < 0 && (id = add_rule(ps, p, (size_t)(ne - p), (size_t)(p - ps->src), true)) < 0) return oom(ps);
    const char *q = parse_space(ps, ne, false);
    if (q + 3 > ps->end || memcmp(q, "::=", 3)) return perr(ps, q, "expected '::='");
    q = parse_space(ps, q + 3, true);
    char name[128];
    snprintf(name, sizeof name, "%s", ps->rules[id].name);
    if (!(q = parse_alternates(ps, q, name, (uint32_t)id, false))) return NULL;
    if (q < ps->end && *q == '\r') q += q + 1 < ps->end && q[1] == '\n' ? 2 : 1;
    else if (q < ps->end && *q == '\n') q++;
    else if (q < ps->end) return perr(ps, q, "expected a newline or the end after the rule");
    return parse_space(ps, q, true);
}

/* ---- checks: every rule defined, a root, no left recursion, chains bounded ---------- */
/* Which rules can match the empty text: a worklist over "alternative a still needs rule r
 * to be nullable" counts, so linear in the grammar's size (a fixed point by repeated
 * passes takes a pass per link of a chain: quadratic).  false: out of memory. */
static bool compute_nullable(const ls_grammar *g, bool *nullable) {
    uint32_t n_alt = 0;
    for (uint32_t i = 0; i < g->n_el; i++) n_alt += is_eos_type(g->el[i].type);
    uint32_t *need = malloc(((size_t)n_alt + 1) * sizeof *need), *owner = malloc(((size_t)n_alt + 1) * sizeof *owner);
    uint32_t *occ_n = calloc((size_t)g->n_rules + 1, sizeof *occ_n), *occ = malloc(((size_t)g->n_el + 1) * sizeof *occ);
    uint32_t *queue = malloc(((size_t)g->n_rules + 1) * sizeof *queue);
    bool ok = need && owner && occ_n && occ && queue;
    if (ok) {
        /* need[a]: the alternative's references, or UINT32_MAX when it has a terminal */
        uint32_t a = 0;
        for (uint32_t r = 0; r < g->n_rules; r++)
            for (uint32_t pos = g->rule_start[r];; pos++) {
                if (pos == g->rule_start[r] || g->el[pos - 1].type == G_ALT) need[a] = 0, owner[a] = r;
                uint32_t t = g->el[pos].type;
                if (is_eos_type(t)) {
                    a++;
                    if (t == G_END) break;
                } else if (t == G_REF) {
                    if (need[a] != UINT32_MAX) need[a]++, occ_n[g->el[pos].value + 1]++;
                } else if (t != G_RNG_UPPER && t != G_CHAR_ALT) {
                    if (need[a] != UINT32_MAX) { /* undo the references counted so far */
                        for (uint32_t q = pos; q > g->rule_start[r] && !is_eos_type(g->el[q - 1].type); q--)
                            if (g->el[q - 1].type == G_REF) occ_n[g->el[q - 1].value + 1]--;
                    }
                    need[a] = UINT32_MAX;
                }
            }
        for (uint32_t r = 0; r < g->n_rules; r++) occ_n[r + 1] += occ_n[r]; /* CSR offsets */
        uint32_t *fill = queue; /* reused: the write position of each rule's occurrences */
        memcpy(fill, occ_n, (size_t)g->n_rules * sizeof *fill);
        a = 0;
        for (uint32_t r = 0; r < g->n_rules; r++)
            for (uint32_t pos = g->rule_start[r];; pos++) {
                uint32_t t = g->el[pos].type;
                if (is_eos_type(t)) {
                    a++;
                    if (t == G_END) break;
                } else if (t == G_REF && need[a] != UINT32_MAX) {
                    occ[fill[g->el[pos].value]++] = a;
                }
            }
        uint32_t qn = 0, qi = 0;
        for (a = 0; a < n_alt; a++)
            if (need[a] == 0 && !nullable[owner[a]]) nullable[owner[a]] = true, queue[qn++] = owner[a];
        while (qi < qn) {
            uint32_t r = queue[qi++];
            for (uint32_t k = occ_n[r]; k < occ_n[r + 1]; k++) {
                uint32_t x = occ[k];
                if (--need[x] == 0 && !nullable[owner[x]]) nullable[owner[x]] = true, queue[qn++] = owner[x];
            }
        }
    }
    free(need);
    free(owner);
    free(occ_n);
    free(occ);
    free(queue);
    return ok;
}

/* Depth-first over "r may begin with s" edges (s after only nullable references), with
 * an explicit stack (a chain of thousands of rules must not recurse): finds left
 * recursion (*hit: the rule reached again while on the path) and the longest chain
 * (*chain_rule: the first rule whose chain is longer than MAX_CHAIN).  false: out of
 * memory. */
static bool left_corner(const ls_grammar *g, const bool *nullable, int64_t *hit, int64_t *chain_rule) {
    typedef struct {
        uint32_t rule, pos, depth;
    } frame;
    *hit = *chain_rule = -1;
    uint8_t *mark = calloc((size_t)g->n_rules + 1, 1); /* 1: on the path, 2: done */
    uint32_t *depth = calloc((size_t)g->n_rules + 1, sizeof *depth);
    frame *st = malloc(((size_t)g->n_rules + 1) * sizeof *st); /* each rule is on the path at most once */
    bool ok = mark && depth && st;
    for (uint32_t r0 = 0; ok && r0 < g->n_rules && *hit < 0 && *chain_rule < 0; r0++) {
        if (mark[r0]) continue;
        size_t n = 0;
        st[n++] = (frame){r0, g->rule_start[r0], 1};
        mark[r0] = 1;
        while (n > 0 && *hit < 0 && *chain_rule < 0) {
            frame *f = &st[n - 1];
            const gel *e = &g->el[f->pos];
            if (e->type == G_REF) {
                uint32_t s = e->value;
                if (nullable[s]) f->pos++;
                else
                    while (!is_eos_type(g->el[f->pos].type)) f->pos++;
                if (mark[s] == 1) *hit = s;
                else if (mark[s] == 0) {
                    mark[s] = 1;
                    st[n++] = (frame){s, g->rule_start[s], 1};
                } else if (depth[s] + 1 > f->depth) {
                    f->depth = depth[s] + 1;
                }
            } else if (e->type == G_ALT) {
                f->pos++;
            } else if (e->type == G_END) {
                mark[f->rule] = 2;
                depth[f->rule] = f->depth;
                if (f->depth > MAX_CHAIN) *chain_rule = f->rule;
                n--;
                if (n > 0 && f->depth + 1 > st[n - 1].depth) st[n - 1].depth = f->depth + 1;
            } else {
                while (!is_eos_type(g->el[f->pos].type)) f->pos++;
            }
        }
    }
    free(mark);
    free(depth);
    free(st);
    return ok;
}

void ls_grammar_free(ls_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->rule_start);
    free(g);
}

ls_status ls_grammar_check(const char *gbnf, size_t len, ls_err *err) {
    if (!gbnf) return ls_err_set(err, LS_E_INVALID, "no grammar text given");
    ls_err e = {0};
    ls_grammar *g = ls_grammar_compile(gbnf, len, &e);
    if (!g) {
        if (err) *err = e;
        return e.code ? e.code : LS_E_NOMEM;
    }
    ls_grammar_free(g);
    return LS_OK;
}

#define WORK_PER_CP ((int64_t)1 << 20) /* see ubuf */
/* The most stacks one state may hold (one per distinct parse in progress); past it the
 * code point is refused like one past the work budget. */
#define MAX_STACKS 8192
static ls_grammar_state *state_start(const ls_grammar *g, bool *over);

ls_grammar *ls_grammar_compile(const char *text, size_t len, ls_err *err) {
    parser ps = {.src = text ? text : "", .end = (text ? text : "") + (text ? len : 0), .err = err};
    ls_grammar *g = NULL;
    const char *p = parse_space(&ps, ps.src, true);
    if (p >= ps.end) perr(&ps, NULL, "the grammar is empty (it needs a 'root' rule)");
    while (p && p < ps.end) p = parse_rule(&ps, p);
    if (ps.failed) goto done;
    int64_t root = find_rule(&ps, "root", 4);
    if (root < 0 || !ps.rules[root].defined) {
        perr(&ps, NULL, "there is no 'root' rule (the start rule)");
        goto done;
    }
    for (uint32_t i = 0; i < ps.n_rules; i++)
        if (!ps.rules[i].defined) {
            perr(&ps, ps.src + ps.rules[i].ref_at, "undefined rule '%.80s'", ps.rules[i].name);
            goto done;
        }
    if (!(g = calloc(1, sizeof *g))) {
        oom(&ps);
        goto done;
    }
    size_t total = 0;
    for (uint32_t i = 0; i < ps.n_rules; i++) total += ps.rules[i].body.n;
    if (total > MAX_ELEMENTS) {
        perr(&ps, NULL, "the grammar compiles to more than the limit of %u elements", MAX_ELEMENTS);
        goto done;
    }
    g->el = malloc((total + 1) * sizeof *g->el);
    g->rule_start = malloc(ps.n_rules * sizeof *g->rule_start);
    if (!g->el || !g->rule_start) {
        oom(&ps);
        goto done;
    }
    for (uint32_t i = 0; i < ps.n_rules; i++) {
        g->rule_start[i] = g->n_el;
        memcpy(g->el + g->n_el, ps.rules[i].body.v, ps.rules[i].body.n * sizeof *g->el);
        g->n_el += (uint32_t)ps.rules[i].body.n;
    }
    g->n_rules = ps.n_rules;
    g->root = (uint32_t)root;
    bool *nullable = calloc(ps.n_rules, sizeof *nullable);
    int64_t hit, chain;
    if (!nullable || !compute_nullable(g, nullable) || !left_corner(g, nullable, &hit, &chain)) {
        free(nullable);
        oom(&ps);
        goto done;
    }
    free(nullable);
    if (hit >= 0) {
        /* name the user's rule: generated names are "<rule>_<n>" */
        const prule *pr = &ps.rules[hit];
        perr(&ps, pr->ref_at != SIZE_MAX ? ps.src + pr->ref_at : NULL,
             "rule '%.80s' is left-recursive (it can reach itself before any character)", pr->name);
    } else if (chain >= 0) {
        const prule *pr = &ps.rules[chain];
        perr(&ps, pr->ref_at != SIZE_MAX ? ps.src + pr->ref_at : NULL,
             "rule '%.80s' begins a chain of more than the limit of %d rules that each begin with the next",
             pr->name, MAX_CHAIN);
    }
    if (!ps.failed) { /* the start must be within one code point's work budget */
        bool over;
        ls_grammar_state *st = state_start(g, &over);
        if (st) ls_grammar_state_free(st);
        else if (over)
            perr(&ps, NULL, "the grammar is too ambiguous: its start expands to more than %lld stack steps or %d stacks",
                 (long long)WORK_PER_CP, MAX_STACKS);
        else oom(&ps);
    }
done:
    for (uint32_t i = 0; i < ps.n_rules; i++) {
        free(ps.rules[i].name);
        free(ps.rules[i].body.v);
    }
    free(ps.rules);
    free(ps.names);
    if (ps.failed) {
        ls_grammar_free(g);
        return NULL;
    }
    return g;
}

/* ---- stack sets ------------------------------------------------------------------------ */
typedef struct {
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *off; /* n + 1 entries */
    int32_t n, cap;
    uint32_t *hidx; /* hash index of the first n_hashed stacks (their index + 1; 0: empty) */
    uint32_t hcap;
    int32_t n_hashed;
} sset;

/* The scratch stack of an expansion, and its work budget: one code point's expansion
 * (or the start's) may copy and compare at most WORK_PER_CP stack elements.  An
 * ambiguous grammar (`a ::= b | b`, `b ::= c | c`, ...) expands to exponentially many
 * paths before they merge into the same stacks; past the budget the expansion stops
 * (over = true) and the code point is refused, where it would otherwise run for hours
 * (a fuzzer-found input did). */
typedef struct {
    size_t base, len; /* the stack tmp->v[base..base+len), its top a rule reference */
    uint32_t sub;     /* the next alternative of that rule to expand, or NO_ALT */
} aframe;

typedef struct {
    uint32_t *v;
    size_t cap;
    aframe *fr; /* advance's depth-first walk, on the heap: a chain of rules never recurses */
    size_t fcap;
    int64_t work;
    bool over;
} ubuf;

#define NO_ALT UINT32_MAX

static void ubuf_budget(ubuf *b) {
    b->work = WORK_PER_CP;
    b->over = false;
}

static void sset_clear(sset *s) {
    s->n = 0;
    s->n_pool = 0;
    if (s->off) s->off[0] = 0;
    if (s->hidx && s->hcap > 4 * (uint32_t)(s->n_hashed > 64 ? s->n_hashed : 64)) { /* mostly empty: let it regrow */
        free(s->hidx);
        s->hidx = NULL;
        s->hcap = 0;
    } else if (s->hidx) {
        memset(s->hidx, 0, s->hcap * sizeof *s->hidx);
    }
    s->n_hashed = 0;
}

static void sset_free(sset *s) {
    free(s->pool);
    free(s->off);
    free(s->hidx);
    memset(s, 0, sizeof *s);
}

static uint32_t stack_hash(const uint32_t *st, size_t len) {
    uint32_t h = 2166136261u ^ (uint32_t)len;
    for (size_t i = 0; i < len; i++) h = (h ^ st[i]) * 16777619u;
    return h ^ h >> 15;
}

/* Makes s->hidx index every stack of s, with room for one more at most half full. */
static bool sset_index(sset *s) {
    if (2 * ((uint32_t)s->n + 1) > s->hcap) {
        uint32_t nc = 64;
        while (nc < 4 * ((uint32_t)s->n + 1)) nc *= 2;
        uint32_t *t = calloc(nc, sizeof *t);
        if (!t) return false;
        free(s->hidx);
        s->hidx = t;
        s->hcap = nc;
        s->n_hashed = 0;
    }
    for (; s->n_hashed < s->n; s->n_hashed++) {
        int32_t k = s->n_hashed;
        uint32_t i = stack_hash(s->pool + s->off[k], s->off[k + 1] - s->off[k]) & (s->hcap - 1);
        while (s->hidx[i]) i = (i + 1) & (s->hcap - 1);
        s->hidx[i] = (uint32_t)k + 1;
    }
    return true;
}

/* Adds the stack st unless s has it (a hash lookup), charging b's work budget for the
 * hashing and comparing.  false: out of memory, or b->over (past the budget or
 * MAX_STACKS). */
static bool sset_add(sset *s, const uint32_t *st, size_t len, ubuf *b) {
    if ((b->work -= (int64_t)len + 1) < 0) return !(b->over = true);
    if (!sset_index(s)) return false;
    uint32_t i = stack_hash(st, len) & (s->hcap - 1);
    for (; s->hidx[i]; i = (i + 1) & (s->hcap - 1)) {
        uint32_t k = s->hidx[i] - 1;
        if (s->off[k + 1] - s->off[k] != len) continue;
        if ((b->work -= (int64_t)len) < 0) return !(b->over = true);
        if (!len || !memcmp(s->pool + s->off[k], st, len * sizeof *st)) return true;
    }
    if (s->n >= MAX_STACKS) return !(b->over = true);
    if (s->n + 2 > s->cap) {
        int32_t nc = s->cap ? s->cap * 2 : 8;
        uint32_t *o = realloc(s->off, (size_t)nc * sizeof *o);
        if (!o) return false;
        if (!s->off) o[0] = 0;
        s->off = o;
        s->cap = nc;
    }
    if (s->n_pool + len > s->cap_pool) {
        size_t nc = s->cap_pool ? s->cap_pool * 2 : 64;
        while (nc < s->n_pool + len) nc *= 2;
        uint32_t *p = realloc(s->pool, nc * sizeof *p);
        if (!p) return false;
        s->pool = p;
        s->cap_pool = nc;
    }
    if (len) memcpy(s->pool + s->n_pool, st, len * sizeof *st);
    s->n_pool += len;
    s->off[++s->n] = (uint32_t)s->n_pool;
    s->hidx[i] = (uint32_t)s->n;
    s->n_hashed = s->n;
    return true;
}

static bool sset_copy(sset *d, const sset *s) {
    sset_clear(d);
    if (d->cap < s->n + 2) {
        uint32_t *o = realloc(d->off, (size_t)(s->n + 2) * sizeof *o);
        if (!o) return false;
        d->off = o;
        d->cap = s->n + 2;
    }
    if (d->cap_pool < s->n_pool) {
        uint32_t *p = realloc(d->pool, (s->n_pool ? s->n_pool : 1) * sizeof *p);
        if (!p) return false;
        d->pool = p;
        d->cap_pool = s->n_pool;
    }
    if (s->n_pool) memcpy(d->pool, s->pool, s->n_pool * sizeof *d->pool);
    if (s->n) memcpy(d->off, s->off, (size_t)(s->n + 1) * sizeof *d->off);
    d->off[0] = 0;
    d->n = s->n;
    d->n_pool = s->n_pool;
    return true;
}

static bool ubuf_reserve(ubuf *b, size_t n) {
    if (n <= b->cap) return true;
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < n) nc *= 2;
    uint32_t *p = realloc(b->v, nc * sizeof *p);
    if (!p) return false;
    b->v = p;
    b->cap = nc;
    return true;
}

static bool is_eos(const ls_grammar *g, uint32_t pos) { return g->el[pos].type == G_END || g->el[pos].type == G_ALT; }

/* Starts the stack tmp[base..base+len): adds it to out when its top is a terminal (or it
 * is empty: the text may end), else pushes a frame to expand its top. */
static bool advance_enter(const ls_grammar *g, sset *out, ubuf *tmp, size_t base, size_t len, size_t *nf) {
    tmp->work -= (int64_t)len + 1; /* the copy that made this stack */
    if (tmp->work < 0) {
        tmp->over = true;
        return false;
    }
    if (len == 0) return sset_add(out, NULL, 0, tmp);
    uint32_t top = tmp->v[base + len - 1];
    if (g->el[top].type != G_REF) return sset_add(out, tmp->v + base, len, tmp);
    if (*nf == tmp->fcap) {
        size_t nc = tmp->fcap ? tmp->fcap * 2 : 64;
        aframe *f = realloc(tmp->fr, nc * sizeof *f);
        if (!f) return false;
        tmp->fr = f;
        tmp->fcap = nc;
    }
    tmp->fr[(*nf)++] = (aframe){base, len, g->rule_start[g->el[top].value]};
    return true;
}

/* Adds to out every stack tmp[base..base+len) expands to (its top a terminal), depth
 * first in the order of the alternatives.  Each child stack is built just past its
 * parent in tmp, so siblings reuse one region. */
static bool advance(const ls_grammar *g, sset *out, ubuf *tmp, size_t base, size_t len) {
    size_t nf = 0;
    if (!advance_enter(g, out, tmp, base, len, &nf)) return false;
    while (nf > 0) {
        aframe *f = &tmp->fr[nf - 1];
        if (f->sub == NO_ALT) {
            nf--;
            continue;
        }
        size_t pb = f->base, pl = f->len, nb = pb + pl;
        uint32_t top = tmp->v[pb + pl - 1], sub = f->sub, nx = sub;
        while (!is_eos(g, nx)) nx++;
        f->sub = g->el[nx].type == G_ALT ? nx + 1 : NO_ALT;
        if (!ubuf_reserve(tmp, nb + pl + 2)) return false;
        memcpy(tmp->v + nb, tmp->v + pb, (pl - 1) * sizeof *tmp->v);
        size_t nl = pl - 1;
        if (!is_eos(g, top + 1)) tmp->v[nb + nl++] = top + 1;
        if (!is_eos(g, sub)) tmp->v[nb + nl++] = sub;
        if (!advance_enter(g, out, tmp, nb, nl, &nf)) return false;
    }
    return true;
}

/* Whether the terminal at pos matches code point c; *after: the element past it. */
static bool match_char(const ls_grammar *g, uint32_t pos, uint32_t c, uint32_t *after) {
    const gel *e = g->el + pos;
    if (e->type == G_ANY) {
        *after = pos + 1;
        return true;
    }
    bool positive = e->type == G_CHAR, found = false;
    do {
        if (e[1].type == G_RNG_UPPER) {
            found = found || (e->value <= c && c <= e[1].value);
            e += 2;
        } else {
            found = found || e->value == c;
            e += 1;
        }
    } while (e->type == G_CHAR_ALT);
    *after = (uint32_t)(e - g->el);
    return found == positive;
}

/* Whether some code point in [lo, hi] could match the terminal at pos. */
static bool match_range(const ls_grammar *g, uint32_t pos, uint32_t lo, uint32_t hi, int64_t *work) {
    const gel *e = g->el + pos;
    if (e->type == G_ANY) return true;
    bool positive = e->type == G_CHAR;
    do {
        (*work)--;
        uint32_t a = e->value, b = e[1].type == G_RNG_UPPER ? e[1].value : e->value;
        e += e[1].type == G_RNG_UPPER ? 2 : 1;
        if (positive && a <= hi && lo <= b) return true;
        if (!positive && a <= lo && hi <= b) return false; /* this member excludes the whole range */
    } while (e->type == G_CHAR_ALT);
    return !positive;
}

/* out = the stacks of in after code point c (out != in). */
static bool accept_cp(const ls_grammar *g, const sset *in, uint32_t c, sset *out, ubuf *tmp) {
    sset_clear(out);
    ubuf_budget(tmp);
    for (int32_t i = 0; i < in->n; i++) {
        size_t len = in->off[i + 1] - in->off[i];
        if (!len) continue;
        const uint32_t *st = in->pool + in->off[i];
        uint32_t after;
        bool hit = match_char(g, st[len - 1], c, &after);
        if ((tmp->work -= (int64_t)(after - st[len - 1])) < 0) { /* a class's members are scanned too */
            tmp->over = true;
            return false;
        }
        if (!hit) continue;
        if (!ubuf_reserve(tmp, len + 1)) return false;
        memcpy(tmp->v, st, (len - 1) * sizeof *st);
        size_t nl = len - 1;
        if (!is_eos(g, after)) tmp->v[nl++] = after;
        if (!advance(g, out, tmp, 0, nl)) return false;
    }
    return true;
}

/* The UTF-8 decoder's state between bytes: 0 = between characters, else the bytes still
 * to come (low 4 bits) and the sequence's length (above). */
static int st_remain(int st) { return st & 15; }

/* Whether some code point the partial sequence (cp so far, state st) can still become
 * (well-formed: no overlong form, at most U+10FFFF) could match a stack's next terminal. */
static bool partial_possible(const ls_grammar *g, const sset *in, uint32_t cp, int st, int64_t *work) {
    int remain = st_remain(st), len = st >> 4;
    uint32_t lo = cp << (6 * remain), hi = lo | ((1u << (6 * remain)) - 1);
    uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (lo < min) lo = min;
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    for (int32_t i = 0; i < in->n; i++) {
        size_t n = in->off[i + 1] - in->off[i];
        if (n && match_range(g, in->pool[in->off[i] + n - 1], lo, hi, work)) return true;
    }
    return false;
}

/* UTF-8 decoding one byte at a time (RFC 3629: overlong forms, surrogates and code
 * points past U+10FFFF are invalid): 1 = a code point completed (*cp), 0 = more to
 * come, -1 = invalid. */
static int utf8_step(uint32_t *cp, int *st, uint8_t b) {
    if (*st == 0) {
        if (b < 0x80) {
            *cp = b;
            return 1;
        }
        if (b >= 0xC2 && b <= 0xDF) *cp = b & 0x1Fu, *st = 1 | 2 << 4;
        else if ((b & 0xF0) == 0xE0) *cp = b & 0x0Fu, *st = 2 | 3 << 4;
        else if (b >= 0xF0 && b <= 0xF4) *cp = b & 0x07u, *st = 3 | 4 << 4;
        else return -1;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    *cp = *cp << 6 | (b & 0x3Fu);
    int remain = st_remain(*st) - 1;
    if (remain > 0) {
        *st = (*st & ~15) | remain;
        return 0;
    }
    int len = *st >> 4;
    *st = 0;
    if (len == 3 && (*cp < 0x800 || (*cp >= 0xD800 && *cp <= 0xDFFF))) return -1;
    if (len == 4 && (*cp < 0x10000 || *cp > 0x10FFFF)) return -1;
    return 1;
}

/* ---- states ------------------------------------------------------------------------------ */
struct ls_grammar_state {
    const ls_grammar *g;
    sset st;
    uint32_t partial_cp;
    int partial_remain;
    bool ended;
};

/* The start state; *over: NULL because the start exceeds the work budget. */
static ls_grammar_state *state_start(const ls_grammar *g, bool *over) {
    *over = false;
    ls_grammar_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    ubuf tmp = {0};
    ubuf_budget(&tmp);
    uint32_t sub = g->rule_start[g->root];
    bool ok = true;
    for (;;) {
        if (!(ok = ubuf_reserve(&tmp, 4))) break;
        size_t n = 0;
        if (!is_eos(g, sub)) tmp.v[n++] = sub;
        if (!(ok = advance(g, &s->st, &tmp, 0, n))) break;
        while (!is_eos(g, sub)) sub++;
        if (g->el[sub].type != G_ALT) break;
        sub++;
    }
    free(tmp.v);
    free(tmp.fr);
    *over = tmp.over;
    if (!ok) {
        ls_grammar_state_free(s);
        return NULL;
    }
    return s;
}

ls_grammar_state *ls_grammar_state_new(const ls_grammar *g) {
    bool over;
    return state_start(g, &over);
}

void ls_grammar_state_free(ls_grammar_state *s) {
    if (!s) return;
    sset_free(&s->st);
    free(s);
}

bool ls_grammar_state_copy(ls_grammar_state *d, const ls_grammar_state *s) {
    sset t = {0};
    if (!sset_copy(&t, &s->st)) {
        sset_free(&t);
        return false;
    }
    sset_free(&d->st);
    d->st = t;
    d->g = s->g;
    d->partial_cp = s->partial_cp;
    d->partial_remain = s->partial_remain;
    d->ended = s->ended;
    return true;
}

ls_grammar_state *ls_grammar_state_clone(const ls_grammar_state *s) {
    ls_grammar_state *d = calloc(1, sizeof *d);
    if (d && !ls_grammar_state_copy(d, s)) {
        free(d);
        return NULL;
    }
    return d;
}

bool ls_grammar_accept_bytes(ls_grammar_state *s, const char *bytes, size_t n) {
    if (s->ended) return n == 0;
    sset a = {0}, b = {0};
    ubuf tmp = {0};
    bool ok = sset_copy(&a, &s->st);
    uint32_t cp = s->partial_cp;
    int rem = s->partial_remain;
    for (size_t i = 0; i < n && ok; i++) {
        int r = utf8_step(&cp, &rem, (uint8_t)bytes[i]);
        if (r < 0) ok = false;
        else if (r == 0) {
            int64_t work = WORK_PER_CP;
            ok = partial_possible(s->g, &a, cp, rem, &work) && work >= 0;
        }
        else {
            ok = accept_cp(s->g, &a, cp, &b, &tmp) && b.n > 0;
            sset t = a;
            a = b;
            b = t;
        }
    }
    if (ok) {
        sset_free(&s->st);
        s->st = a;
        a = (sset){0};
        s->partial_cp = rem ? cp : 0;
        s->partial_remain = rem;
    }
    sset_free(&a);
    sset_free(&b);
    free(tmp.v);
    free(tmp.fr);
    return ok;
}

bool ls_grammar_complete(const ls_grammar_state *s) {
    if (s->ended) return true;
    if (s->partial_remain) return false;
    for (int32_t i = 0; i < s->st.n; i++)
        if (s->st.off[i + 1] == s->st.off[i]) return true;
    return false;
}

bool ls_grammar_final(const ls_grammar_state *s) {
    if (s->ended) return true;
    if (s->partial_remain) return false;
    for (int32_t i = 0; i < s->st.n; i++)
        if (s->st.off[i + 1] != s->st.off[i]) return false;
    return s->st.n > 0;
}

bool ls_grammar_matches(const ls_grammar *g, const char *bytes, size_t n) {
    ls_grammar_state *s = ls_grammar_state_new(g);
    bool ok = s && ls_grammar_accept_bytes(s, bytes, n) && ls_grammar_complete(s);
    ls_grammar_state_free(s);
    return ok;
}

/* ---- the vocabulary trie --------------------------------------------------------------- */
struct ls_grammar_vocab {
    int32_t n_vocab, n_nodes, max_len;
    int32_t *first_child, *sibling, *tok_head; /* per node */
    uint8_t *byte;                              /* per node: the byte on the edge into it */
    int32_t *tok_next;                          /* per token: the next token ending at the same node */
    uint32_t *tok_off;                          /* n_vocab + 1: token bytes in bytes[] */
    char *bytes;
    uint8_t *eog;
};

void ls_grammar_vocab_free(ls_grammar_vocab *v) {
    if (!v) return;
    free(v->first_child);
    free(v->sibling);
    free(v->tok_head);
    free(v->byte);
    free(v->tok_next);
    free(v->tok_off);
    free(v->bytes);
    free(v->eog);
    free(v);
}

int32_t ls_grammar_vocab_size(const ls_grammar_vocab *v) { return v->n_vocab; }

ls_grammar_vocab *ls_grammar_vocab_new(int32_t n_vocab, size_t (*token_bytes)(void *, int32_t, char *, size_t),
                                       bool (*is_eog)(void *, int32_t), void *ud, ls_err *err) {
    ls_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) goto nomem;
    v->n_vocab = n_vocab;
    v->tok_off = malloc(((size_t)n_vocab + 1) * sizeof *v->tok_off);
    v->tok_next = malloc((size_t)n_vocab * sizeof *v->tok_next);
    v->eog = calloc((size_t)n_vocab, 1);
    if (!v->tok_off || !v->tok_next || !v->eog) goto nomem;
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->eog[i] = is_eog(ud, i);
        size_t n = v->eog[i] ? 0 : token_bytes(ud, i, NULL, 0);
        v->tok_off[i] = (uint32_t)total;
        total += n;
        if ((int32_t)n > v->max_len) v->max_len = (int32_t)n;
    }
    v->tok_off[n_vocab] = (uint32_t)total;
    if (!(v->bytes = malloc(total + 1))) goto nomem;
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t n = v->tok_off[i + 1] - v->tok_off[i];
        if (n) token_bytes(ud, i, v->bytes + v->tok_off[i], n);
    }
    size_t cap = total + 1; /* at most one node per byte, plus the root */
    v->first_child = malloc(cap * sizeof *v->first_child);
    v->sibling = malloc(cap * sizeof *v->sibling);
    v->tok_head = malloc(cap * sizeof *v->tok_head);
    v->byte = malloc(cap);
    if (!v->first_child || !v->sibling || !v->tok_head || !v->byte) goto nomem;
    v->n_nodes = 1;
    v->first_child[0] = v->sibling[0] = v->tok_head[0] = -1;
    v->byte[0] = 0;
    for (int32_t i = n_vocab - 1; i >= 0; i--) { /* so each node's token list is in id order */
        size_t n = v->tok_off[i + 1] - v->tok_off[i];
        v->tok_next[i] = -1;
        if (!n) continue;
        int32_t node = 0;
        for (size_t k = 0; k < n; k++) {
            uint8_t b = (uint8_t)v->bytes[v->tok_off[i] + k];
            int32_t c = v->first_child[node];
            while (c >= 0 && v->byte[c] != b) c = v->sibling[c];
            if (c < 0) {
                c = v->n_nodes++;
                v->byte[c] = b;
                v->first_child[c] = v->tok_head[c] = -1;
                v->sibling[c] = v->first_child[node];
                v->first_child[node] = c;
            }
            node = c;
        }
        v->tok_next[i] = v->tok_head[node];
        v->tok_head[node] = i;
    }
    return v;
nomem:
    ls_grammar_vocab_free(v);
    ls_err_set(err, LS_E_NOMEM, "out of memory building the grammar's vocabulary trie");
    return NULL;
}

/* The walk memoizes transitions: the stack sets it meets are interned (a copy each, by
 * content), and (set, code point) -> set is looked up before it is computed.  Inside a
 * JSON string, say, nearly every character leads back to the same set, so most trie
 * nodes cost a lookup.  Bounded: past MEMO_SETS sets or a full table it computes
 * directly (the same sets: a cache, not a different computation). */
#define MEMO_SETS 1024
/* The work budget of one mask (the sum of its code points' stack steps, see ubuf): grammar.h. */
#define MASK_WORK LS_GRAMMAR_MASK_WORK
#define MEMO_SLOTS (1u << 15)

typedef struct {
    uint32_t key_set, key_cp; /* key_set 0: empty slot; else set id + 1 */
    int32_t result;           /* interned set id, or -1: no stack survives */
} memo_slot;

typedef struct {
    const ls_grammar *g;
    const ls_grammar_vocab *v;
    uint32_t *mask;
    int32_t count;
    sset *levels;
    ubuf tmp;
    int64_t work; /* left of MASK_WORK */
    bool oom;     /* out of memory or past a budget: the mask fails */
    bool over;    /* ... and it was the budget */
    sset scratch;
    sset *sets; /* interned */
    uint64_t *hashes;
    int32_t n_sets;
    memo_slot *slots;
    uint32_t n_used;
} walker;

static uint64_t sset_hash(const sset *s) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)s->n;
    for (int32_t i = 0; i <= s->n; i++) h = (h ^ s->off[i]) * 1099511628211ull;
    for (size_t i = 0; i < s->n_pool; i++) h = (h ^ s->pool[i]) * 1099511628211ull;
    return h;
}

static bool sset_equal(const sset *a, const sset *b) {
    return a->n == b->n && a->n_pool == b->n_pool && !memcmp(a->off, b->off, (size_t)(a->n + 1) * sizeof *a->off) &&
           (!a->n_pool || !memcmp(a->pool, b->pool, a->n_pool * sizeof *a->pool));
}

/* The id of a set equal to s (interning a copy), or -1 when the table is full. */
static int32_t intern(walker *w, const sset *s) {
    uint64_t h = sset_hash(s);
    for (int32_t i = 0; i < w->n_sets; i++)
        if (w->hashes[i] == h && sset_equal(&w->sets[i], s)) return i;
    if (w->n_sets >= MEMO_SETS) return -1;
    memset(&w->sets[w->n_sets], 0, sizeof *w->sets);
    if (!sset_copy(&w->sets[w->n_sets], s)) {
        sset_free(&w->sets[w->n_sets]);
        return -1;
    }
    w->hashes[w->n_sets] = h;
    return w->n_sets++;
}

static memo_slot *memo_find(walker *w, int32_t set, uint32_t cp) {
    uint32_t i = (uint32_t)(((uint64_t)(uint32_t)set * 0x9E3779B97F4A7C15ull ^ cp * 0xC2B2AE3D27D4EB4Full) >> 17) &
                 (MEMO_SLOTS - 1);
    for (;; i = (i + 1) & (MEMO_SLOTS - 1)) {
        memo_slot *sl = &w->slots[i];
        if (!sl->key_set || (sl->key_set == (uint32_t)set + 1 && sl->key_cp == cp)) return sl;
    }
}

/* cur_id: cur's interned id, or -1 (not interned: compute directly). */
static void walk(walker *w, int32_t node, const sset *cur, int32_t cur_id, uint32_t cp, int rem, int depth) {
    for (int32_t c = w->v->first_child[node]; c >= 0 && !w->oom; c = w->v->sibling[c]) {
        uint32_t ncp = cp;
        int nrem = rem;
        int r = utf8_step(&ncp, &nrem, w->v->byte[c]);
        if (r < 0) continue;
        const sset *next = cur;
        int32_t next_id = cur_id;
        if (r == 1) {
            memo_slot *sl = cur_id >= 0 && w->slots ? memo_find(w, cur_id, ncp) : NULL;
            if (sl && sl->key_set) {
                if (sl->result < 0) continue;
                next_id = sl->result;
                next = &w->sets[next_id];
            } else {
                sset *lv = &w->levels[depth];
                bool ok = accept_cp(w->g, cur, ncp, lv, &w->tmp);
                w->work -= WORK_PER_CP - w->tmp.work;
                if (!ok || w->work < 0) {
                    w->oom = true;
                    w->over = ok || w->tmp.over; /* the mask's budget, or one code point's */
                    return;
                }
                next = lv;
                next_id = -1;
                if (lv->n > 0 && cur_id >= 0) {
                    next_id = intern(w, lv);
                    if (next_id >= 0) next = &w->sets[next_id];
                }
                if (sl && (lv->n == 0 || next_id >= 0) && w->n_used < MEMO_SLOTS / 2) {
                    sl->key_set = (uint32_t)cur_id + 1;
                    sl->key_cp = ncp;
                    sl->result = lv->n == 0 ? -1 : next_id;
                    w->n_used++;
                }
                if (lv->n == 0) continue;
            }
            ncp = 0;
        } else {
            bool possible = partial_possible(w->g, cur, ncp, nrem, &w->work);
            if (w->work < 0) {
                w->oom = true;
                w->over = true;
                return;
            }
            if (!possible) continue;
        }
        for (int32_t t = w->v->tok_head[c]; t >= 0; t = w->v->tok_next[t]) {
            w->mask[t >> 5] |= 1u << (t & 31);
            w->count++;
        }
        if (w->v->first_child[c] >= 0) walk(w, c, next, next_id, ncp, nrem, depth + 1);
    }
}

int32_t ls_grammar_mask(const ls_grammar_state *s, const ls_grammar_vocab *v, uint32_t *mask) {
    memset(mask, 0, ls_grammar_mask_words(v->n_vocab) * sizeof *mask);
    if (s->ended) return 0;
    walker w = {.g = s->g, .v = v, .mask = mask, .work = MASK_WORK};
    w.levels = calloc((size_t)v->max_len + 1, sizeof *w.levels);
    w.sets = malloc(MEMO_SETS * sizeof *w.sets);
    w.hashes = malloc(MEMO_SETS * sizeof *w.hashes);
    w.slots = calloc(MEMO_SLOTS, sizeof *w.slots);
    if (!w.levels) {
        free(w.sets);
        free(w.hashes);
        free(w.slots);
        return -1;
    }
    int32_t root_id = -1;
    if (w.sets && w.hashes && w.slots) root_id = intern(&w, &s->st);
    else {
        free(w.slots);
        w.slots = NULL;
    }
    walk(&w, 0, root_id >= 0 ? &w.sets[root_id] : &s->st, root_id, s->partial_cp, s->partial_remain, 0);
    for (int32_t i = 0; i <= v->max_len; i++) sset_free(&w.levels[i]);
    for (int32_t i = 0; i < w.n_sets; i++) sset_free(&w.sets[i]);
    free(w.levels);
    free(w.sets);
    free(w.hashes);
    free(w.slots);
    free(w.tmp.v);
    free(w.tmp.fr);
    if (w.oom) { /* out of memory or over budget: the mask is incomplete, so nothing may be sampled from it */
        memset(mask, 0, ls_grammar_mask_words(v->n_vocab) * sizeof *mask);
        return w.over ? LS_GRAMMAR_MASK_OVER : -1;
    }
    if (ls_grammar_complete(s))
        for (int32_t i = 0; i < v->n_vocab; i++)
            if (v->eog[i]) {
                mask[i >> 5] |= 1u << (i & 31);
                w.count++;
            }
    return w.count;
}

bool ls_grammar_accept_token(ls_grammar_state *s, const ls_grammar_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n_vocab || s->ended) return false;
    if (v->eog[id]) {
        if (!ls_grammar_complete(s)) return false;
        s->ended = true;
        return true;
    }
    size_t n = v->tok_off[id + 1] - v->tok_off[id];
    return n > 0 && ls_grammar_accept_bytes(s, v->bytes + v->tok_off[id], n);
}
