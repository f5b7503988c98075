/* Constrained decoding: the GBNF parser (what it accepts, and errors that name the line,
 * column and what was expected), the matcher on strings decided by hand, tokens whose
 * bytes end inside a UTF-8 sequence, the vocabulary mask against a brute-force
 * per-token check, the JSON Schema converter, and the engine: a constrained request's
 * tokens and logits are byte-identical alone, batched with others, and verified from
 * drafts that often break the grammar (memcmp), and its text is in the grammar.
 * (The JSON grammar against Python's json module: tests/python/test_grammar_ref.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/sample.h"
#include "model/kv_store.h"

static ls_grammar *compile(const char *t) {
    ls_err err = {0};
    ls_grammar *g = ls_grammar_compile(t, strlen(t), &err);
    if (!g) fail_msg("grammar should compile: %s\n%s", err.msg, t);
    return g;
}

static void expect_error(const char *t, const char *want) {
    ls_err err = {0};
    ls_grammar *g = ls_grammar_compile(t, strlen(t), &err);
    if (g) fail_msg("grammar should be refused: %s", t);
    assert_int_equal(err.code, LS_E_INVALID);
    if (!strstr(err.msg, want)) fail_msg("error '%s' lacks '%s'", err.msg, want);
}

static bool m(const ls_grammar *g, const char *s) { return ls_grammar_matches(g, s, strlen(s)); }

static void test_parser_accepts(void **st) {
    (void)st;
    const char *ok[] = {
        "root ::= \"a\"",
        "root ::= \"a\" | \"b\"  # a comment\n",
        "# leading comment\nroot ::= x\nx ::= [a-z]+\n",
        "root ::= ( \"a\"\n  | \"b\" )*\n",
        "root ::= [^\\n\"]{2,3} . \"\\x41\\u00e9\\U0001F600\\t\\\\\\\"\"\n",
        "root ::= (\"a\" | )\n",
        "root ::= \"x\"{3} \"y\"{1,} \"z\"{0,2} \"w\"? \"v\"+\r\n",
        "root-x ::= \"a\"\nroot ::= root-x rest_1\nrest_1 ::= \"b\" rest_1 | \"\"\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) ls_grammar_free(compile(ok[i]));
}

static void test_parser_rejects_naming_the_problem(void **st) {
    (void)st;
    expect_error("", "empty");
    expect_error("x ::= \"a\"\n", "no 'root' rule");
    expect_error("root ::= y\n", "undefined rule 'y'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice");
    expect_error("root ::= \"abc\n", "expected '\"'");
    expect_error("root ::= [a-z\n", "line 1, column 10");
    expect_error("root ::= ( \"a\" \n", "expected ')'");
    expect_error("root = \"a\"", "expected '::='");
    expect_error("root ::= \"a\"\n  | \"b\"\n", "line 2, column 3: expected a rule name");
    expect_error("root ::= * \"a\"", "expected an item before '*'");
    expect_error("root ::= \"a\"{3,1}", "below the minimum");
    expect_error("root ::= \"\\q\"", "unknown escape");
    expect_error("root ::= \"\\x4\"", "hex digits");
    expect_error("root ::= root \"a\" | \"b\"", "left-recursive");
    expect_error("root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"\n", "left-recursive");
    expect_error("root ::= [z-a]", "below its start");
    expect_error("root ::= \"a\" )", "expected a newline");
    expect_error("root ::= \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"{90000}",
                 "expand to more than");
    /* Nested repetitions compile to 3,000 rules, not 10^9 copies (a group repeats as one
     * reference), and match... */
    ls_grammar *g = compile("root ::= ((\"a\"{1,1000} \"b\"){1,1000} \"c\"){1,1000}\n");
    assert_true(m(g, "abc"));
    assert_true(m(g, "aababcabc"));
    assert_false(m(g, "ab"));
    assert_false(m(g, "abbc"));
    ls_grammar_free(g);
    /* ...but where every level may be empty, the start has ~10^9 stacks (one per count of
     * repetitions left at each level): refused by the work budget, by name. */
    expect_error("root ::= ((\"a\"{0,1000}){0,1000}){0,1000}\n", "chain of more than the limit of 1024 rules");
}

/* A chain of rules each with two equal alternatives: 2^30 paths to one stack.  The
 * matcher's work budget refuses it (the start: at compile time; later: that character),
 * where it would otherwise run for hours; a chain short enough stays accepted. */
static void ambiguous_chain(char *buf, size_t cap, const char *prefix, int levels) {
    size_t n = (size_t)snprintf(buf, cap, "root ::= %s a0 \"x\"\n", prefix);
    for (int i = 0; i < levels; i++) n += (size_t)snprintf(buf + n, cap - n, "a%d ::= a%d | a%d\n", i, i + 1, i + 1);
    snprintf(buf + n, cap - n, "a%d ::= \"y\"\n", levels);
}

static void test_ambiguous_grammar_is_bounded(void **st) {
    (void)st;
    char buf[4096];
    ambiguous_chain(buf, sizeof buf, "", 30);
    expect_error(buf, "too ambiguous");
    ambiguous_chain(buf, sizeof buf, "\"q\"", 30);
    ls_grammar *g = compile(buf);
    assert_false(ls_grammar_matches(g, "qyx", 3)); /* "q"'s expansion is over the budget */
    ls_grammar_state *s = ls_grammar_state_new(g);
    assert_non_null(s);
    assert_false(ls_grammar_accept_bytes(s, "q", 1));
    ls_grammar_state_free(s);
    ls_grammar_free(g);
    ambiguous_chain(buf, sizeof buf, "\"q\"", 12); /* 4096 paths: within it */
    g = compile(buf);
    assert_true(ls_grammar_matches(g, "qyx", 3));
    assert_false(ls_grammar_matches(g, "qyy", 3));
    ls_grammar_free(g);
}

static void test_matcher_cases(void **st) {
    (void)st;
    ls_grammar *g = compile("root ::= \"ab\" [0-9]{2,3} (\"x\" | \"yz\")* tail?\ntail ::= [^a-c] .\n");
    assert_true(m(g, "ab12"));
    assert_true(m(g, "ab123"));
    assert_false(m(g, "ab1"));
    assert_false(m(g, "ab12345x"));
    assert_true(m(g, "ab12xyzx"));
    assert_false(m(g, "ab12y"));
    assert_true(m(g, "ab12dd"));
    assert_false(m(g, "ab12ad"));
    assert_true(m(g, "ab12d\xc3\xa9"));     /* . is one code point, é is two bytes */
    assert_false(m(g, "ab12d\xc3"));        /* incomplete */
    assert_false(m(g, "ab12d\xc3\xa9\xc3\xa9"));
    ls_grammar_free(g);
    g = compile("root ::= [\\u00e0-\\u00ff] \"\\U0001F600\"\n");
    assert_true(m(g, "\xc3\xa9\xf0\x9f\x98\x80"));
    assert_false(m(g, "\xc3\x80\xf0\x9f\x98\x80")); /* U+00C0 is below the range */
    /* byte by byte, the UTF-8 sequences left incomplete between pieces */
    ls_grammar_state *s = ls_grammar_state_new(g);
    assert_true(ls_grammar_accept_bytes(s, "\xc3", 1));
    assert_false(ls_grammar_complete(s));
    assert_false(ls_grammar_accept_bytes(s, "\x80", 1)); /* would be U+00C0: refused, state kept */
    assert_true(ls_grammar_accept_bytes(s, "\xa9\xf0\x9f", 3));
    ls_grammar_state *c = ls_grammar_state_clone(s);
    assert_true(ls_grammar_accept_bytes(s, "\x98\x80", 2));
    assert_true(ls_grammar_complete(s) && ls_grammar_final(s));
    assert_false(ls_grammar_complete(c)); /* the clone is independent */
    assert_false(ls_grammar_accept_bytes(c, "\x98\x81", 2));
    assert_true(ls_grammar_accept_bytes(c, "\x98\x80", 2));
    ls_grammar_state_free(s);
    ls_grammar_state_free(c);
    ls_grammar_free(g);
    /* well-formed UTF-8 only: an overlong form of 'b' (E0 81 A2, C1 A2), a surrogate and
     * past U+10FFFF are not characters (a byte-level vocabulary has tokens for each byte) */
    g = compile("root ::= \"b\" | [\\u0800-\\uffff] | [\\U00010000-\\U0010FFFF]\n");
    assert_true(m(g, "b"));
    assert_false(m(g, "\xe0\x81\xa2"));
    assert_false(m(g, "\xc1\xa2"));
    assert_false(m(g, "\xed\xa0\x80"));
    assert_true(m(g, "\xed\x9f\xbf"));
    assert_false(m(g, "\xf4\x90\x80\x80"));
    assert_true(m(g, "\xf4\x8f\xbf\xbf"));
    s = ls_grammar_state_new(g);
    assert_false(ls_grammar_accept_bytes(s, "\xe0\x81", 2)); /* no completion of it is well-formed */
    assert_true(ls_grammar_accept_bytes(s, "\xe0\xa0", 2));
    ls_grammar_state_free(s);
    ls_grammar_free(g);
    g = compile("root ::= \"a\" \"b\"*\n");
    s = ls_grammar_state_new(g);
    assert_false(ls_grammar_complete(s));
    assert_true(ls_grammar_accept_bytes(s, "a", 1));
    assert_true(ls_grammar_complete(s));
    assert_false(ls_grammar_final(s)); /* more b's may follow */
    assert_false(ls_grammar_accept_bytes(s, "c", 1));
    ls_grammar_state_free(s);
    ls_grammar_free(g);
}

/* ---- the mask over a small synthetic vocabulary, against a per-token check ---------------- */
static const char *const TOY[] = {"", "a", "b", "ab", "ba", "\xc3", "\xa9", "\xc3\xa9", "\xc3\x80", "{", "}",
                                  "\"", "x\"", "\"}", " ", "1", "12", "-", "\xa9\xc3", "zz", "aaa", "\xe0\x81", "\xa1", "\xe0", ""};
#define N_TOY ((int32_t)(sizeof TOY / sizeof *TOY))
static size_t toy_bytes(void *ud, int32_t id, char *buf, size_t cap) {
    (void)ud;
    size_t n = strlen(TOY[id]);
    if (buf) memcpy(buf, TOY[id], n < cap ? n : cap);
    return n;
}
static bool toy_eog(void *ud, int32_t id) {
    (void)ud;
    return id == N_TOY - 1;
}

static void check_mask(const ls_grammar_state *s, const ls_grammar_vocab *v) {
    uint32_t mask[4];
    int32_t n = ls_grammar_mask(s, v, mask), count = 0;
    for (int32_t id = 0; id < N_TOY; id++) {
        bool want;
        if (toy_eog(NULL, id)) {
            want = ls_grammar_complete(s) && !(ls_grammar_final(s) && ls_grammar_complete(s) && false);
        } else if (!TOY[id][0]) {
            want = false;
        } else {
            ls_grammar_state *c = ls_grammar_state_clone(s);
            want = ls_grammar_accept_bytes(c, TOY[id], strlen(TOY[id]));
            ls_grammar_state_free(c);
        }
        if (want != ls_grammar_mask_get(mask, id)) fail_msg("token %d ('%s'): mask %d, per-token %d", id, TOY[id], !want, want);
        count += want;
    }
    assert_int_equal(n, count);
}

static void test_mask_matches_per_token_check(void **st) {
    (void)st;
    ls_err err = {0};
    ls_grammar_vocab *v = ls_grammar_vocab_new(N_TOY, toy_bytes, toy_eog, NULL, &err);
    assert_non_null(v);
    const char *gs[] = {"root ::= (\"a\" | \"b\")+ \"\\u00e9\"?\n", "root ::= \"{\" [^}]* \"}\"\n",
                        "root ::= \"-\"? [0-9]+ (\" \" [a-b]+)?\n", "root ::= ([^\\u00c0] | \"z\")*\n"};
    uint64_t rng = 7;
    for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
        ls_grammar *g = compile(gs[gi]);
        for (int walk = 0; walk < 20; walk++) {
            ls_grammar_state *s = ls_grammar_state_new(g);
            for (int step = 0; step < 12; step++) {
                check_mask(s, v);
                uint32_t mask[4];
                if (ls_grammar_mask(s, v, mask) <= 0) break;
                int32_t pick;
                do pick = fx_rng_int(&rng, 0, N_TOY - 1);
                while (!ls_grammar_mask_get(mask, pick));
                assert_true(ls_grammar_accept_token(s, v, pick));
                if (toy_eog(NULL, pick)) {
                    assert_true(ls_grammar_final(s));
                    assert_int_equal(ls_grammar_mask(s, v, mask), 0); /* nothing after the end */
                    break;
                }
            }
            ls_grammar_state_free(s);
        }
        ls_grammar_free(g);
    }
    /* complete and nothing can follow: only the end-of-generation token */
    ls_grammar *g = compile("root ::= \"ab\"\n");
    ls_grammar_state *s = ls_grammar_state_new(g);
    assert_true(ls_grammar_accept_token(s, v, 3));
    uint32_t mask[4];
    assert_int_equal(ls_grammar_mask(s, v, mask), 1);
    assert_true(ls_grammar_mask_get(mask, N_TOY - 1));
    ls_grammar_state_free(s);
    ls_grammar_free(g);
    ls_grammar_vocab_free(v);
}


/* ---- limits: every compile is bounded, and a refusal names the limit ------------------ */
/* Each input is compiled (a schema: converted, then compiled) on a thread with the
 * server's 2 MiB connection-thread stack, so a recursion too deep crashes the test, and
 * timed: 2 s catches a wedge on a loaded machine (each takes well under 0.1 s here). */
typedef struct {
    char *text;         /* owned */
    bool schema;        /* JSON Schema, else GBNF */
    const char *want;   /* error substring, or NULL: must compile */
    const char *yes[2]; /* must match (when it compiles) */
    const char *no[2];  /* must not match */
    const char *what;
    /* results */
    ls_status code;
    char msg[512];
    double secs;
    int bad; /* 1: a yes did not match, 2: a no matched */
} limit_case;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *limit_run(void *p) {
    limit_case *c = p;
    double t0 = now_s();
    ls_err err = {0};
    char *gbnf = c->schema ? ls_json_schema_to_gbnf(c->text, strlen(c->text), &err) : c->text;
    ls_grammar *g = gbnf ? ls_grammar_compile(gbnf, strlen(gbnf), &err) : NULL;
    if (g) {
        for (int i = 0; i < 2; i++) {
            if (c->yes[i] && !ls_grammar_matches(g, c->yes[i], strlen(c->yes[i]))) c->bad = 1;
            if (c->no[i] && ls_grammar_matches(g, c->no[i], strlen(c->no[i]))) c->bad = 2;
        }
    }
    c->secs = now_s() - t0;
    c->code = g ? LS_OK : err.code;
    snprintf(c->msg, sizeof c->msg, "%s", g ? "" : err.msg);
    ls_grammar_free(g);
    if (c->schema) free(gbnf);
    return NULL;
}

#define SERVER_STACK ((size_t)2 << 20) /* src/server/server.c: MHD_OPTION_THREAD_STACK_SIZE */

static void limit_check(limit_case *c) {
    pthread_attr_t a;
    pthread_t t;
    assert_int_equal(pthread_attr_init(&a), 0);
    assert_int_equal(pthread_attr_setstacksize(&a, SERVER_STACK), 0);
    assert_int_equal(pthread_create(&t, &a, limit_run, c), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    pthread_attr_destroy(&a);
    printf("  %-44s %7.3f s  %s\n", c->what, c->secs, c->code ? c->msg : "compiled");
    if (c->secs > 2.0) fail_msg("%s: took %.2f s", c->what, c->secs);
    if (c->want) {
        if (c->code != LS_E_INVALID) fail_msg("%s: code %d (%s), want LS_E_INVALID", c->what, c->code, c->msg);
        if (!strstr(c->msg, c->want)) fail_msg("%s: error '%s' lacks '%s'", c->what, c->msg, c->want);
    } else {
        if (c->code) fail_msg("%s: should compile: %s", c->what, c->msg);
        if (c->bad) fail_msg("%s: a string %s", c->what, c->bad == 1 ? "in the language did not match" : "outside matched");
    }
    free(c->text);
}

/* A growable string for the generated inputs. */
typedef struct {
    char *p;
    size_t n, cap;
} gstr;

__attribute__((format(printf, 2, 3))) static void gs_add(gstr *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)k + 1 > b->cap) {
        b->cap = (b->n + (size_t)k + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

static char *rep_str(const char *s, int n) {
    gstr b = {0};
    gs_add(&b, "%s", "");
    for (int i = 0; i < n; i++) gs_add(&b, "%s", s);
    return b.p;
}

/* root ::= ((( ... "a" ... ))) with depth groups */
static char *nested_groups(int depth) {
    gstr b = {0};
    gs_add(&b, "root ::= ");
    for (int i = 0; i < depth; i++) gs_add(&b, "(");
    gs_add(&b, "\"a\"");
    for (int i = 0; i < depth; i++) gs_add(&b, ")");
    gs_add(&b, "\n");
    return b.p;
}

/* root ::= r0, r0 ::= r1, ... r<n-1> ::= "x": a chain of n + 1 rules */
static char *rule_chain(int n) {
    gstr b = {0};
    gs_add(&b, "root ::= r0\n");
    for (int i = 0; i < n - 1; i++) gs_add(&b, "r%d ::= r%d\n", i, i + 1);
    gs_add(&b, "r%d ::= \"x\"\n", n - 1);
    return b.p;
}

/* n rules that do not refer to one another */
static char *many_rules(int n) {
    gstr b = {0};
    gs_add(&b, "root ::= \"x\" r1\n");
    for (int i = 1; i < n; i++) gs_add(&b, "r%d ::= \"y\"\n", i);
    return b.p;
}

/* root ::= "w0" | "w1" | ... n alternatives */
static char *wide_alternation(int n) {
    gstr b = {0};
    gs_add(&b, "root ::= \"w0\"");
    for (int i = 1; i < n; i++) gs_add(&b, " | \"w%d\"", i);
    gs_add(&b, "\n");
    return b.p;
}

static char *schema_enum(int n) {
    gstr b = {0};
    gs_add(&b, "{\"enum\":[\"v0\"");
    for (int i = 1; i < n; i++) gs_add(&b, ",\"v%d\"", i);
    gs_add(&b, "]}");
    return b.p;
}

/* depth levels of {"type":"array","items":...} (or objects with one property "a") around an integer */
static char *schema_deep(int depth, bool objects) {
    gstr b = {0};
    for (int i = 0; i < depth; i++)
        gs_add(&b, "%s", objects ? "{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"a\":" : "{\"type\":\"array\",\"items\":");
    gs_add(&b, "{\"type\":\"integer\"}");
    for (int i = 0; i < depth; i++) gs_add(&b, "%s", objects ? "}}" : "}");
    return b.p;
}

static char *instance_deep(int depth, bool objects) {
    gstr b = {0};
    for (int i = 0; i < depth; i++) gs_add(&b, "%s", objects ? "{\"a\":" : "[");
    gs_add(&b, "7");
    for (int i = 0; i < depth; i++) gs_add(&b, "%s", objects ? "}" : "]");
    return b.p;
}

static char *int_array(int n) {
    gstr b = {0};
    gs_add(&b, "[");
    for (int i = 0; i < n; i++) gs_add(&b, "%s%d", i ? "," : "", i % 10);
    gs_add(&b, "]");
    return b.p;
}

/* root ::= "aaa...a"{times} (a literal of len characters) */
static char *long_literal_repeated(int len, int times) {
    gstr b = {0};
    gs_add(&b, "root ::= \"");
    for (int i = 0; i < len; i++) gs_add(&b, "a");
    gs_add(&b, "\"{%d}\n", times);
    return b.p;
}

static char *dup_str(const char *s) {
    char *p = malloc(strlen(s) + 1);
    assert_non_null(p);
    return strcpy(p, s);
}

static void test_limits_named_and_fast(void **st) {
    (void)st;
    char *a4096 = int_array(4096), *a4095 = int_array(4095), *d60a = instance_deep(60, false),
         *d60o = instance_deep(60, true), *x30000 = rep_str("a", 30000), *x30001 = rep_str("a", 30001);
#define REFUSED(text_, schema_, want_, what_) {.text = (text_), .schema = (schema_), .want = (want_), .what = (what_)}
#define COMPILES(text_, schema_, y0, y1, n0, n1, what_) \
    {.text = (text_), .schema = (schema_), .yes = {(y0), (y1)}, .no = {(n0), (n1)}, .what = (what_)}
    limit_case cases[] = {
        /* the reported inputs */
        REFUSED(nested_groups(6000), false, "nest deeper than the limit of 256 levels", "GBNF: 6,000 nested groups"),
        REFUSED(dup_str("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":100000}"), true, "'minItems' 100000 is over the limit of 4096", "schema: minItems 100000"),
        REFUSED(rule_chain(20000), false, "chain of more than the limit of 1024 rules", "GBNF: 20,000-rule chain"),
        REFUSED(many_rules(40000), false, "more than the limit of 32768 rules", "GBNF: 40,000 rules"),
        REFUSED(schema_deep(100, false), true, "nests deeper than the limit of 64 levels", "schema: items 100 deep"),
        REFUSED(schema_deep(100, true), true, "nests deeper than the limit of 64 levels", "schema: properties 100 deep"),
        REFUSED(schema_enum(5000), true, "'enum' has 5000 values, over the limit of 4096", "schema: enum of 5,000"),
        REFUSED(wide_alternation(10000), false, "8192 stacks", "GBNF: 10,000 alternatives"),
        REFUSED(dup_str("root ::= \"a\"{0,200000}\n"), false, "the limit is 100000", "GBNF: {0,200000}"),
        REFUSED(dup_str("root ::= \"a\"{0,50000}\n"), false, "more than the limit of 32768 rules", "GBNF: {0,50000}"),
        REFUSED(long_literal_repeated(100, 20000), false, "expand to more than 1048576 elements",
                "GBNF: 100-character literal {20000}"),
        REFUSED(dup_str("{\"type\":\"string\",\"maxLength\":1000000}"), true,
                "'maxLength' 1000000 is over the limit of 4096", "schema: maxLength 1000000"),
        /* just under each limit: compiles and matches */
        COMPILES(nested_groups(256), false, "a", NULL, "aa", "", "GBNF: 256 nested groups"),
        COMPILES(dup_str("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":4096}"), true, a4096, NULL, a4095, "[]", "schema: minItems 4096"),
        COMPILES(rule_chain(1000), false, "x", NULL, "xx", "y", "GBNF: 1,000-rule chain"),
        COMPILES(many_rules(32000), false, "xy", NULL, "x", "y", "GBNF: 32,000 rules"),
        COMPILES(schema_deep(60, false), true, d60a, NULL, "7", "[7]", "schema: items 60 deep"),
        COMPILES(schema_deep(60, true), true, d60o, NULL, "7", "{\"a\":7}", "schema: properties 60 deep"),
        COMPILES(schema_enum(4096), true, "\"v4095\"", "\"v0\"", "\"v4096\"", "\"v\"", "schema: enum of 4,096"),
        COMPILES(wide_alternation(8000), false, "w7999", "w0", "w8000", "w", "GBNF: 8,000 alternatives"),
        COMPILES(dup_str("root ::= \"a\"{0,30000}\n"), false, x30000, "", x30001, "b", "GBNF: {0,30000}"),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) limit_check(&cases[i]);
    free(a4096);
    free(a4095);
    free(d60a);
    free(d60o);
    free(x30000);
    free(x30001);
#undef REFUSED
#undef COMPILES
}

/* At decode time a grammar whose every step is ambiguous cannot wedge the engine: the
 * mask stops at its work budget, allows nothing and says so (LS_GRAMMAR_MASK_OVER: the
 * request ends with an error, not as a finished grammar), quickly. */
static const char *const QVOC[] = {"q", "qy", "y", "x", "yx", ""};
static size_t qvoc_bytes(void *ud, int32_t id, char *buf, size_t cap) {
    (void)ud;
    size_t n = strlen(QVOC[id]);
    if (buf) memcpy(buf, QVOC[id], n < cap ? n : cap);
    return n;
}
static bool qvoc_eog(void *ud, int32_t id) {
    (void)ud;
    return id == 5;
}

static void test_mask_is_bounded(void **st) {
    (void)st;
    char buf[4096];
    ls_err err = {0};
    /* a vocabulary with tokens that start with "q", so the walk must expand "q" */
    ls_grammar_vocab *v = ls_grammar_vocab_new(6, qvoc_bytes, qvoc_eog, NULL, &err);
    assert_non_null(v);
    uint32_t mask[1];
    /* within the budget (2^12 paths): "q" and "qy" are allowed, nothing else */
    ambiguous_chain(buf, sizeof buf, "\"q\"", 12);
    ls_grammar *g = compile(buf);
    ls_grammar_state *s = ls_grammar_state_new(g);
    assert_int_equal(ls_grammar_mask(s, v, mask), 2);
    assert_int_equal(mask[0], 3u);
    ls_grammar_state_free(s);
    ls_grammar_free(g);
    /* over it (2^30 paths behind "q"): the mask says it could not be computed */
    ambiguous_chain(buf, sizeof buf, "\"q\"", 30);
    g = compile(buf);
    s = ls_grammar_state_new(g);
    double t0 = now_s();
    assert_int_equal(ls_grammar_mask(s, v, mask), LS_GRAMMAR_MASK_OVER); /* the budget, not out of memory */
    assert_int_equal(mask[0], 0u);
    assert_true(now_s() - t0 < 2.0);
    ls_grammar_state_free(s);
    ls_grammar_vocab_free(v);
    ls_grammar_free(g);
}

static void test_masked_sampling_excludes_and_keeps_unmasked_bits(void **st) {
    (void)st;
    enum { NV = 70 };
    float lg[NV];
    uint64_t rng = 3;
    void *scratch = malloc(ls_sampler_scratch_bytes(NV));
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < NV; i++) lg[i] = (float)fx_rng_int(&rng, -400, 400) / 37.0f;
        uint32_t mask[3] = {0}, all[3] = {0};
        for (int i = 0; i < NV; i++) {
            all[i >> 5] |= 1u << (i & 31);
            if (fx_rng_int(&rng, 0, 3) == 0) mask[i >> 5] |= 1u << (i & 31);
        }
        mask[0] |= 1u << 5;
        ls_sampler_params p = {.temperature = (float)(trial % 3) * 0.7f, .top_k = trial % 5 ? 0 : 4,
                               .top_p = trial % 7 ? 1.0f : 0.8f, .seed = (uint64_t)trial};
        int32_t t = ls_sample_seq_masked(&p, lg, NV, NULL, 0, 0, mask, scratch);
        assert_true(t >= 0 && ls_grammar_mask_get(mask, t));
        /* an all-allowed mask draws exactly the unmasked token */
        assert_int_equal(ls_sample_seq_masked(&p, lg, NV, NULL, 0, 0, all, scratch),
                         ls_sample_seq(&p, lg, NV, NULL, 0, 0, scratch));
        assert_int_equal(ls_sample_seq_masked(&p, lg, NV, NULL, 0, 0, NULL, scratch),
                         ls_sample_seq(&p, lg, NV, NULL, 0, 0, scratch));
        /* the masked draw is the unmasked recipe over the allowed logits (others -inf-like far below) */
        if (p.temperature == 0.0f) {
            int32_t best = -1;
            for (int i = 0; i < NV; i++)
                if (ls_grammar_mask_get(mask, i) && (best < 0 || lg[i] > lg[best])) best = i;
            assert_int_equal(t, best);
        }
    }
    uint32_t none[3] = {0};
    ls_sampler_params p = {.temperature = 1, .top_p = 1};
    assert_int_equal(ls_sample_seq_masked(&p, lg, NV, NULL, 0, 0, none, scratch), -1);
    free(scratch);
}

/* ---- JSON Schema -> GBNF ------------------------------------------------------------------ */
static ls_grammar *schema(const char *js) {
    ls_err err = {0};
    char *t = ls_json_schema_to_gbnf(js, strlen(js), &err);
    if (!t) fail_msg("schema should convert: %s (%s)", err.msg, js);
    ls_grammar *g = ls_grammar_compile(t, strlen(t), &err);
    if (!g) fail_msg("converted grammar should compile: %s\n%s", err.msg, t);
    free(t);
    return g;
}

static void schema_refused(const char *js, const char *want) {
    ls_err err = {0};
    char *t = ls_json_schema_to_gbnf(js, strlen(js), &err);
    if (t) fail_msg("schema should be refused: %s\n%s", js, t);
    if (!strstr(err.msg, want)) fail_msg("error '%s' lacks '%s'", err.msg, want);
}

static void test_json_schema_conversion(void **st) {
    (void)st;
    ls_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
                           "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",1,null]},"
                           "\"minItems\":1,\"maxItems\":2}},\"required\":[\"name\"]}");
    assert_true(m(g, "{\"name\":\"bob\"}"));
    assert_true(m(g, "{\"name\": \"bo\", \"age\": -12}"));
    assert_true(m(g, "{\"name\":\"\",\"tags\":[\"a\",null]}"));
    assert_true(m(g, "{\"name\":\"x\",\"age\":0,\"tags\":[1]}"));
    assert_false(m(g, "{\"age\":1}"));                       /* name is required */
    assert_false(m(g, "{\"name\":\"bobby\"}"));              /* maxLength */
    assert_false(m(g, "{\"name\":\"b\",\"tags\":[]}"));       /* minItems */
    assert_false(m(g, "{\"name\":\"b\",\"tags\":[1,1,1]}"));  /* maxItems */
    assert_false(m(g, "{\"name\":\"b\",\"age\":1.5}"));      /* integer */
    assert_false(m(g, "{\"name\":\"b\",\"other\":1}"));      /* no additional properties */
    assert_false(m(g, "{\"name\":\"b\",}"));
    assert_false(m(g, "{\"name\":\"b\"} {}"));
    ls_grammar_free(g);
    g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":true},"
               "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
               "\"$ref\":\"#/$defs/node\"}");
    assert_true(m(g, "{\"v\":true,\"next\":{\"v\":true,\"next\":null}}"));
    assert_false(m(g, "{\"v\":false,\"next\":null}"));
    ls_grammar_free(g);
    g = schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"number\"},{\"type\":[\"string\",\"boolean\"]}],"
               "\"items\":false}");
    assert_true(m(g, "[1.5e3,\"x\"]"));
    assert_true(m(g, "[-0.25,true]"));
    assert_true(m(g, "[]"));
    assert_true(m(g, "[2]"));
    assert_false(m(g, "[2,3]"));
    assert_false(m(g, "[2,true,3]"));
    assert_false(m(g, "[01]"));
    ls_grammar_free(g);
    g = schema("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}");
    assert_true(m(g, "{}"));
    assert_true(m(g, "{\"a\":1,\"b\":2}"));
    assert_false(m(g, "{\"a\":\"1\"}"));
    ls_grammar_free(g);
    g = schema("{\"oneOf\":[{\"type\":\"string\",\"minLength\":2},{\"const\":{\"k\":[1,2]}}]}");
    assert_true(m(g, "\"ab\""));
    assert_true(m(g, "\"a\\n\\u00e9\""));
    assert_false(m(g, "\"a\""));
    assert_true(m(g, "{\"k\":[1,2]}"));
    ls_grammar_free(g);
    schema_refused("{\"type\":\"string\",\"pattern\":\"a+\"}", "keyword 'pattern' is not supported");
    schema_refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":0}}}",
                   "at /properties/a: keyword 'minimum'");
    schema_refused("{\"$ref\":\"#/$defs/missing\"}", "names no schema");
    schema_refused("{\"$ref\":\"http://x/y\"}", "not supported");
    schema_refused("{\"type\":\"thing\"}", "unknown type 'thing'");
    schema_refused("{\"type\":\"object\",\"required\":[\"a\"]}", "required property 'a' is not in 'properties'");
    schema_refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "below minItems");
    schema_refused("[1", "not valid JSON");
    /* json_object: any object at the root */
    const char *jo = ls_json_object_gbnf();
    g = compile(jo);
    assert_true(m(g, "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"\\\"x\\\"\"}"));
    assert_true(m(g, "{}"));
    assert_false(m(g, "[1]"));
    assert_false(m(g, "{\"a\" 1}"));
    ls_grammar_free(g);
}

/* ---- the engine ------------------------------------------------------------------------- */
static ls_model *g_model;
static int setup(void **st) {
    (void)st;
    g_model = fx_load_model(NULL);
    return 0;
}
static int teardown(void **st) {
    (void)st;
    ls_model_free(g_model);
    return 0;
}

typedef struct {
    int32_t toks[256];
    int32_t n;
    float *logits; /* n rows */
    char text[4096];
    size_t text_len;
    bool done;
    ls_finish finish;
    uint64_t rng;
    int32_t n_drafted;
    int32_t n_vocab;
} run_out;

static void on_ev(void *ud, const ls_event *ev) {
    run_out *o = ud;
    if (ev->token >= 0 && !ev->prompt) {
        assert_true(o->n < 256);
        if (ev->logits) memcpy(o->logits + (size_t)o->n * o->n_vocab, ev->logits, (size_t)o->n_vocab * sizeof(float));
        o->toks[o->n++] = ev->token;
    }
    assert_true(o->text_len + ev->text_len < sizeof o->text);
    memcpy(o->text + o->text_len, ev->text, ev->text_len);
    o->text_len += ev->text_len;
    o->n_drafted = ev->n_drafted;
    if (ev->done) {
        o->done = true;
        o->finish = ev->finish;
    }
}

/* Drafts random tokens (mostly breaking the grammar) and, half the time, tokens of a
 * JSON-ish text that may fit it. */
static int32_t bad_draft(void *ud, const int32_t *hist, int32_t n_hist, int32_t *out, int32_t max) {
    run_out *o = ud;
    (void)hist;
    int32_t k = fx_rng_int(&o->rng, 0, max);
    for (int32_t i = 0; i < k; i++) {
        int r = fx_rng_int(&o->rng, 0, 3);
        out[i] = r == 0 ? fx_rng_int(&o->rng, 0, o->n_vocab - 1) : hist[fx_rng_int(&o->rng, n_hist / 2, n_hist - 1)];
    }
    return k;
}

static size_t model_bytes(void *ud, int32_t id, char *buf, size_t cap) { return ls_model_token_bytes(ud, id, false, buf, cap); }
static bool model_eog(void *ud, int32_t id) { return ls_model_is_eog(ud, id); }

/* The memoized trie walk against accepting each of the 49k tokens' bytes on its own. */
static void test_mask_real_vocab_matches_per_token(void **st) {
    (void)st;
    FX_NEED(g_model);
    ls_model_info mi = LS_MODEL_INFO_INIT;
    ls_err err;
    ls_model_get_info(g_model, &mi, &err);
    int32_t V = (int32_t)mi.n_vocab;
    ls_grammar_vocab *v = ls_grammar_vocab_new(V, model_bytes, model_eog, g_model, &err);
    assert_non_null(v);
    ls_grammar *g = compile(ls_json_object_gbnf());
    const char *pre[] = {"", "{", "{\"k\": \"a", "{\"k\": \"\xc3", "{\"k\": [1, 2.5e", "{\"k\": {}}"};
    uint32_t *mask = malloc(ls_grammar_mask_words(V) * sizeof *mask);
    char buf[256];
    for (size_t k = 0; k < sizeof pre / sizeof *pre; k++) {
        ls_grammar_state *s = ls_grammar_state_new(g);
        assert_true(ls_grammar_accept_bytes(s, pre[k], strlen(pre[k])));
        int32_t n = ls_grammar_mask(s, v, mask), count = 0;
        for (int32_t id = 0; id < V; id++) {
            bool want;
            if (ls_model_is_eog(g_model, id)) {
                want = ls_grammar_complete(s);
            } else {
                size_t nb = ls_model_token_bytes(g_model, id, false, buf, sizeof buf);
                ls_grammar_state *c = ls_grammar_state_clone(s);
                want = nb > 0 && ls_grammar_accept_bytes(c, buf, nb);
                ls_grammar_state_free(c);
            }
            if (want != ls_grammar_mask_get(mask, id)) fail_msg("after '%s': token %d: mask %d", pre[k], id, !want);
            count += want;
        }
        assert_int_equal(n, count);
        assert_true(count > 0);
        ls_grammar_state_free(s);
    }
    free(mask);
    ls_grammar_free(g);
    ls_grammar_vocab_free(v);
}

static const char *GRAM = "root ::= \"{\\\"name\\\": \\\"\" [a-zA-Z ]{1,12} \"\\\", \\\"n\\\": \" [0-9]{1,3} \"}\"\n";

static void run_constrained(ls_engine *e, const int32_t *prompt, int32_t n_prompt, bool spec, int n_others,
                            uint64_t seed, run_out *o) {
    ls_request q = LS_REQUEST_INIT;
    q.prompt = prompt;
    q.n_prompt = n_prompt;
    q.max_tokens = 40;
    q.sampling.temperature = 0.9f;
    q.sampling.top_k = 40;
    q.sampling.seed = seed;
    q.want_logits = true;
    q.grammar = GRAM;
    q.on_event = on_ev;
    q.ud = o;
    if (spec) {
        q.draft = bad_draft;
        q.draft_ud = o;
    }
    ls_err err;
    run_out others[4];
    memset(others, 0, sizeof others);
    for (int i = 0; i < n_others; i++) { /* unconstrained and constrained neighbours sharing the steps */
        ls_request r = LS_REQUEST_INIT;
        r.prompt = prompt + i;
        r.n_prompt = n_prompt - i;
        r.max_tokens = 10 + 7 * i;
        r.sampling.temperature = 0.7f;
        r.sampling.seed = 100 + (uint64_t)i;
        r.grammar = i % 2 ? "root ::= [a-z ]+\n" : NULL;
        others[i].n_vocab = o->n_vocab;
        r.on_event = on_ev;
        r.ud = &others[i];
        uint64_t id;
        assert_int_equal(ls_engine_submit(e, &r, &id, &err), LS_OK);
    }
    uint64_t id;
    if (ls_engine_submit(e, &q, &id, &err)) fail_msg("%s", err.msg);
    while (!ls_engine_idle(e)) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
    assert_true(o->done);
}

static void test_engine_parity_alone_batched_speculative(void **st) {
    (void)st;
    FX_NEED(g_model);
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT;
    ep.n_ctx = 512;
    ep.n_seq_max = 4;
    ep.draft_max = 4;
    ep.step_tokens = 64;
    ls_err err;
    ls_engine *e = ls_engine_create(g_model, &ep, &err);
    assert_non_null(e);
    const char *text = "<|im_start|>user\nGive me a JSON record of a person.<|im_end|>\n<|im_start|>assistant\n";
    int32_t prompt[128];
    size_t np;
    assert_int_equal(ls_model_tokenize(g_model, text, strlen(text), false, true, prompt, 128, &np, &err), LS_OK);
    ls_model_info mi = LS_MODEL_INFO_INIT;
    ls_model_get_info(g_model, &mi, &err);
    ls_grammar *g = compile(GRAM);
    /* a KV cache of 6 blocks for four requests: the newest (the target) is preempted and
     * recomputed from its tokens, its grammar state kept */
    ls_engine_params ep2 = ep;
    ep2.kv_mem = (int64_t)ls_kv_block_bytes(g_model) * 6;
    ls_engine *e2 = ls_engine_create(g_model, &ep2, &err);
    assert_non_null(e2);
    for (uint64_t seed = 1; seed <= 2; seed++) {
        run_out a = {.n_vocab = (int32_t)mi.n_vocab}, b = a, c = a, d = a;
        a.logits = malloc(256 * (size_t)mi.n_vocab * sizeof(float));
        b.logits = malloc(256 * (size_t)mi.n_vocab * sizeof(float));
        c.logits = malloc(256 * (size_t)mi.n_vocab * sizeof(float));
        c.rng = seed * 77;
        d.rng = seed * 91;
        d.logits = malloc(256 * (size_t)mi.n_vocab * sizeof(float));
        run_constrained(e, prompt, (int32_t)np, false, 0, seed, &a);
        run_constrained(e, prompt, (int32_t)np, false, 3, seed, &b);
        run_constrained(e, prompt, (int32_t)np, true, 2, seed, &c);
        run_constrained(e2, prompt, (int32_t)np, true, 3, seed, &d);
        assert_int_equal(a.n, d.n);
        assert_memory_equal(a.toks, d.toks, (size_t)a.n * sizeof(int32_t));
        assert_memory_equal(a.logits, d.logits, (size_t)a.n * mi.n_vocab * sizeof(float));
        free(d.logits);
        assert_true(ls_grammar_matches(g, a.text, a.text_len));
        assert_int_equal(a.finish, LS_FINISH_STOP);
        assert_true(c.n_drafted > 0);
        assert_int_equal(a.n, b.n);
        assert_int_equal(a.n, c.n);
        assert_memory_equal(a.toks, b.toks, (size_t)a.n * sizeof(int32_t));
        assert_memory_equal(a.toks, c.toks, (size_t)a.n * sizeof(int32_t));
        assert_memory_equal(a.logits, b.logits, (size_t)a.n * mi.n_vocab * sizeof(float));
        assert_memory_equal(a.logits, c.logits, (size_t)a.n * mi.n_vocab * sizeof(float));
        assert_int_equal(a.text_len, c.text_len);
        assert_memory_equal(a.text, c.text, a.text_len);
        printf("seed %llu: %.*s (%d tokens, %d drafted)\n", (unsigned long long)seed, (int)a.text_len, a.text, a.n,
               c.n_drafted);
        free(a.logits);
        free(b.logits);
        free(c.logits);
    }
    /* a bad grammar is refused at submission, naming the problem */
    ls_request q = LS_REQUEST_INIT;
    q.prompt = prompt;
    q.n_prompt = (int32_t)np;
    q.grammar = "root ::= [a-";
    q.on_event = on_ev;
    uint64_t id;
    assert_int_equal(ls_engine_submit(e, &q, &id, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "grammar line 1"));
    /* one that compiles but whose first token mask goes over its work budget, too: a request
     * error naming the budget (the server's 400), not an out-of-memory ending after admission */
    q.grammar = "root ::= (\"a\"{0,1000}){0,1000}";
    assert_int_equal(ls_engine_submit(e, &q, &id, &err), LS_E_INVALID);
    assert_non_null(strstr(err.msg, "work budget"));
    ls_engine_stats es = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(e2, &es);
    assert_true(es.preemptions > 0);
    ls_engine_free(e2);
    ls_grammar_free(g);
    ls_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parser_accepts),
        cmocka_unit_test(test_parser_rejects_naming_the_problem),
        cmocka_unit_test(test_ambiguous_grammar_is_bounded),
        cmocka_unit_test(test_matcher_cases),
        cmocka_unit_test(test_mask_matches_per_token_check),
        cmocka_unit_test(test_masked_sampling_excludes_and_keeps_unmasked_bits),
        cmocka_unit_test(test_json_schema_conversion),
        cmocka_unit_test(test_limits_named_and_fast),
        cmocka_unit_test(test_mask_is_bounded),
        cmocka_unit_test(test_mask_real_vocab_matches_per_token),
        cmocka_unit_test(test_engine_parity_alone_batched_speculative),
    };
    return cmocka_run_group_tests_name("grammar", tests, setup, teardown);
}
