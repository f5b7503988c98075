/* test_tools.c - the server's tool-call parser (src/server/tools.c) on fixed generated
 * texts: the Hermes format (<tool_call> blocks, one or several, with content before,
 * cut by the length limit, malformed), the generic JSON format (tool_call, tool_calls,
 * response, not JSON), and the Python-style JSON the templates' tojson writes.  The
 * rendering is checked against jinja2 on the real Qwen 2.5 template in
 * tests/python/test_server_endpoints.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/grammar.h"
#include "server/tools.h"

typedef struct {
    char *content;
    cJSON *calls;
} parsed;

static parsed parse(const char *text, ls_srv_tool_format f) {
    parsed p;
    assert_int_equal(ls_srv_tools_parse(text, strlen(text), f, "x", &p.content, &p.calls), LS_OK);
    return p;
}

static void call_is(const cJSON *calls, int k, const char *name, const char *args) {
    const cJSON *c = cJSON_GetArrayItem(calls, k), *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    assert_non_null(f);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring, "function");
    char id[32];
    snprintf(id, sizeof id, "call_x_%d", k);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring, id);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, name);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring, args);
}

static void done(parsed *p) {
    free(p->content);
    cJSON_Delete(p->calls);
}

static void test_hermes(void **state) {
    (void)state;
    parsed p = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                     LS_TOOLS_HERMES);
    assert_null(p.content);
    assert_int_equal(cJSON_GetArraySize(p.calls), 1);
    call_is(p.calls, 0, "get_weather", "{\"city\":\"Paris\"}");
    done(&p);
    /* content first, two calls, the second cut by the length limit (no closing tag) */
    p = parse("Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
              "{\"name\": \"b\", \"arguments\": {\"n\": [1, 2]}}",
              LS_TOOLS_HERMES);
    assert_string_equal(p.content, "Let me check.");
    assert_int_equal(cJSON_GetArraySize(p.calls), 2);
    call_is(p.calls, 0, "a", "{}");
    call_is(p.calls, 1, "b", "{\"n\":[1,2]}");
    done(&p);
    /* no call: all content; a malformed call: all content, no calls */
    p = parse("Paris is sunny.", LS_TOOLS_HERMES);
    assert_string_equal(p.content, "Paris is sunny.");
    assert_null(p.calls);
    done(&p);
    p = parse("x <tool_call>\n{\"name\": \"a\", \"arguments\": \n</tool_call>", LS_TOOLS_HERMES);
    assert_string_equal(p.content, "x <tool_call>\n{\"name\": \"a\", \"arguments\": \n</tool_call>");
    assert_null(p.calls);
    done(&p);
    p = parse("<tool_call>\n{\"arguments\": {}}\n</tool_call>", LS_TOOLS_HERMES); /* no name */
    assert_null(p.calls);
    done(&p);
}

static void test_generic(void **state) {
    (void)state;
    parsed p = parse(" {\"tool_call\": {\"name\": \"f\", \"arguments\": {\"q\": \"a\\\"b\"}}}", LS_TOOLS_GENERIC);
    assert_null(p.content);
    call_is(p.calls, 0, "f", "{\"q\":\"a\\\"b\"}");
    done(&p);
    p = parse("{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {\"k\": 1}}]}",
              LS_TOOLS_GENERIC);
    assert_int_equal(cJSON_GetArraySize(p.calls), 2);
    call_is(p.calls, 1, "g", "{\"k\":1}");
    done(&p);
    p = parse("{\"response\": \"Hello there\"}", LS_TOOLS_GENERIC);
    assert_string_equal(p.content, "Hello there");
    assert_null(p.calls);
    done(&p);
    p = parse("Just text {\"tool_call\": 1}", LS_TOOLS_GENERIC);
    assert_string_equal(p.content, "Just text {\"tool_call\": 1}");
    assert_null(p.calls);
    done(&p);
    p = parse("{\"tool_call\": {\"name\": \"f\"}}", LS_TOOLS_GENERIC); /* no arguments: not a call */
    assert_null(p.calls);
    assert_string_equal(p.content, "{\"tool_call\": {\"name\": \"f\"}}");
    done(&p);
}

static void test_pyjson(void **state) {
    (void)state;
    cJSON *v = cJSON_Parse("{\"a\":[1,2.5,\"x\\n\\u00e9\"],\"b\":{\"c\":null,\"d\":true},\"e\":0.1,\"f\":-3}");
    char *s = ls_srv_pyjson(v);
    assert_string_equal(s, "{\"a\": [1, 2.5, \"x\\n\xc3\xa9\"], \"b\": {\"c\": null, \"d\": true}, \"e\": 0.1, \"f\": -3}");
    free(s);
    cJSON_Delete(v);
}

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}]";

static bool gmatch(ls_srv_tool_format f, bool required, const char *name, const char *text) {
    cJSON *tools = cJSON_Parse(TOOLS);
    char *g = NULL;
    ls_err err = {0};
    assert_int_equal(ls_srv_tools_gbnf(tools, f, required, name, &g, &err), LS_OK);
    cJSON_Delete(tools);
    if (!g) return true; /* unconstrained */
    ls_grammar *gr = ls_grammar_compile(g, strlen(g), &err);
    assert_non_null(gr);
    bool m = ls_grammar_matches(gr, text, strlen(text));
    ls_grammar_free(gr);
    free(g);
    return m;
}

/* The constraint of tool_choice required / named / auto, as the grammar the engine gets. */
/* The rule in tools.c above ls_srv_tools_parse: a malformed entry makes the whole text
 * content (no half-parsed calls), an unknown name is still a call, text after the calls
 * is dropped. */
static void all_content(const char *text, ls_srv_tool_format f) {
    parsed p = parse(text, f);
    assert_null(p.calls);
    assert_non_null(p.content);
    assert_string_equal(p.content, text);
    done(&p);
}

static void test_malformed_and_trailing(void **state) {
    (void)state;
    const char *H[] = {
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }}\n</tool_call>", /* bad JSON arguments */
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                              /* no name */
        "<tool_call>\n{\"name\": 7, \"arguments\": {}}\n</tool_call>",                /* name not a string */
        "<tool_call>\n[\"a\", {}]\n</tool_call>",                                       /* not an object */
        "<tool_call>\n{\"name\": \"a\"}\n</tool_call>",                                 /* no arguments */
        /* one good call, then a bad one: none */
        "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": }</tool_call>",
    };
    for (size_t i = 0; i < sizeof H / sizeof *H; i++) all_content(H[i], LS_TOOLS_HERMES);
    const char *G[] = {
        "{\"tool_call\": {\"name\": \"a\", \"arguments\": {\"x\": }}}",
        "{\"tool_call\": {\"arguments\": {}}}",
        "{\"tool_call\": [1]}",
        "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\"}]}",
        "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, 3]}",
        "[{\"name\": \"a\", \"arguments\": {}}]",
    };
    for (size_t i = 0; i < sizeof G / sizeof *G; i++) all_content(G[i], LS_TOOLS_GENERIC);
    /* a name no tool has is still a call (the parser does not know the tools) */
    parsed p = parse("<tool_call>{\"name\": \"no_such_tool\", \"arguments\": {\"k\": 1}}</tool_call>", LS_TOOLS_HERMES);
    assert_int_equal(cJSON_GetArraySize(p.calls), 1);
    call_is(p.calls, 0, "no_such_tool", "{\"k\":1}");
    done(&p);
    /* arguments as a string are passed on as written, JSON or not */
    p = parse("<tool_call>{\"name\": \"a\", \"arguments\": \"not json\"}</tool_call>", LS_TOOLS_HERMES);
    call_is(p.calls, 0, "a", "not json");
    done(&p);
    /* trailing text after the calls is dropped; the content is what came before */
    p = parse("Hi.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nand some words after",
              LS_TOOLS_HERMES);
    assert_string_equal(p.content, "Hi.");
    assert_int_equal(cJSON_GetArraySize(p.calls), 1);
    call_is(p.calls, 0, "a", "{}");
    done(&p);
    p = parse("{\"tool_call\": {\"name\": \"a\", \"arguments\": {}}} trailing words", LS_TOOLS_GENERIC);
    assert_null(p.content);
    assert_int_equal(cJSON_GetArraySize(p.calls), 1);
    done(&p);
    /* a call nested past cJSON's limit is not a call, and does not recurse without bound */
    char *deep = malloc(40000);
    assert_non_null(deep);
    size_t n = (size_t)sprintf(deep, "<tool_call>{\"name\": \"a\", \"arguments\": ");
    for (int i = 0; i < 5000; i++) deep[n++] = '[';
    strcpy(deep + n, "</tool_call>");
    all_content(deep, LS_TOOLS_HERMES);
    free(deep);
}

static void test_grammar(void **state) {
    (void)state;
    const char *hc = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    assert_true(gmatch(LS_TOOLS_HERMES, true, NULL, hc));
    assert_true(gmatch(LS_TOOLS_HERMES, true, NULL, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    assert_false(gmatch(LS_TOOLS_HERMES, true, NULL, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
    assert_false(gmatch(LS_TOOLS_HERMES, true, NULL, "Sure: the weather is fine."));
    assert_false(gmatch(LS_TOOLS_HERMES, true, NULL, /* city is required */
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
    assert_true(gmatch(LS_TOOLS_HERMES, false, "get_weather", hc));
    assert_false(gmatch(LS_TOOLS_HERMES, false, "get_time", hc));
    const char *gc = "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}}";
    assert_true(gmatch(LS_TOOLS_GENERIC, true, NULL, gc));
    assert_false(gmatch(LS_TOOLS_GENERIC, true, NULL, "{\"response\": \"hi\"}"));
    assert_true(gmatch(LS_TOOLS_GENERIC, false, NULL, "{\"response\": \"hi\"}")); /* auto: either */
    assert_true(gmatch(LS_TOOLS_GENERIC, false, NULL, gc));
    assert_false(gmatch(LS_TOOLS_GENERIC, false, NULL, "hi"));
    assert_false(gmatch(LS_TOOLS_GENERIC, false, "get_time", gc));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_pyjson),
        cmocka_unit_test(test_malformed_and_trailing),
        cmocka_unit_test(test_grammar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
