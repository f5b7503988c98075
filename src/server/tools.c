/* tools.c - tool calling for /v1/chat/completions: the conversation (tools, assistant
 * tool_calls, role "tool" results) rendered into plain messages for the model's chat
 * template, and tool calls parsed back out of the generated text (see tools.h).
 *
 * Two formats:
 *   hermes   the template's own (Qwen 2.5 / Hermes style, a template whose source has
 *            <tool_call>): the tools as JSON lines inside <tools></tools> in the system
 *            message, calls as <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>,
 *            results as <tool_response> blocks in a user turn: byte for byte what the
 *            template renders (tests/python/test_server_endpoints.py checks it against
 *            jinja2 on the real template text).
 *   generic  every other template (llama.cpp's "generic" approach): a system message
 *            that lists the tools and asks for JSON, either {"tool_call": {"name": ...,
 *            "arguments": {...}}} or {"response": "..."}; earlier calls and results are
 *            written in that JSON. */
#include "server/tools.h"


#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growing string ---------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sb;

static void sb_addn(sb *b, const char *s, size_t k) {
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + k + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = 0;
}
static void sb_add(sb *b, const char *s) { sb_addn(b, s, strlen(s)); }
static char *sb_take(sb *b) {
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    if (!b->p) {
        char *e = malloc(1);
        if (e) *e = 0;
        return e;
    }
    return b->p;
}

/* ---- JSON as Python's json.dumps(x, ensure_ascii=False) writes it (what chat templates'
 * tojson gives): ", " and ": " separators, keys in their order. ------------------------ */
static void py_str(sb *b, const char *s) {
    sb_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        switch (*p) {
        case '"': sb_add(b, "\\\""); break;
        case '\\': sb_add(b, "\\\\"); break;
        case '\n': sb_add(b, "\\n"); break;
        case '\r': sb_add(b, "\\r"); break;
        case '\t': sb_add(b, "\\t"); break;
        case '\b': sb_add(b, "\\b"); break;
        case '\f': sb_add(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *p);
                sb_add(b, e);
            } else {
                sb_addn(b, (const char *)p, 1);
            }
        }
    }
    sb_add(b, "\"");
}

static void py_num(sb *b, double x) {
    char t[40];
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(t, sizeof t, "%.0f", x);
    } else {
        for (int prec = 15; prec <= 17; prec++) { /* the shortest that reads back */
            snprintf(t, sizeof t, "%.*g", prec, x);
            if (strtod(t, NULL) == x) break;
        }
    }
    sb_add(b, t);
}

static void py_json(sb *b, const cJSON *v) {
    if (cJSON_IsObject(v)) {
        sb_add(b, "{");
        const cJSON *c;
        bool first = true;
        cJSON_ArrayForEach(c, v) {
            if (!first) sb_add(b, ", ");
            first = false;
            py_str(b, c->string);
            sb_add(b, ": ");
            py_json(b, c);
        }
        sb_add(b, "}");
    } else if (cJSON_IsArray(v)) {
        sb_add(b, "[");
        const cJSON *c;
        bool first = true;
        cJSON_ArrayForEach(c, v) {
            if (!first) sb_add(b, ", ");
            first = false;
            py_json(b, c);
        }
        sb_add(b, "]");
    } else if (cJSON_IsString(v)) {
        py_str(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        py_num(b, v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        sb_add(b, cJSON_IsTrue(v) ? "true" : "false");
    } else {
        sb_add(b, "null");
    }
}

char *ls_srv_pyjson(const cJSON *v) {
    sb b = {0};
    py_json(&b, v);
    return sb_take(&b);
}

static ls_status fail(ls_err *err, ls_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ls_status fail(ls_err *err, ls_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
        err->offset = LS_NO_OFFSET;
    }
    return code;
}

/* ---- the request's tools ----------------------------------------------------------- */
ls_status ls_srv_tools_check(const cJSON *tools, ls_err *err) {
    if (!cJSON_IsArray(tools)) return fail(err, LS_E_INVALID, "'tools' must be a list of {\"type\": \"function\", ...}");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type"), *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
            return fail(err, LS_E_INVALID, "'tools[%d].type' must be \"function\" (the only kind of tool)", i);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *pa = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        if (!cJSON_IsObject(f) || !cJSON_IsString(nm) || !nm->valuestring[0])
            return fail(err, LS_E_INVALID, "'tools[%d].function.name' must be a non-empty string", i);
        if (pa && !cJSON_IsNull(pa) && !cJSON_IsObject(pa))
            return fail(err, LS_E_INVALID, "'tools[%d].function.parameters' must be a JSON Schema object", i);
        const cJSON *k;
        cJSON_ArrayForEach(k, f) if (strcmp(k->string, "name") && strcmp(k->string, "description") &&
                                     strcmp(k->string, "parameters") && strcmp(k->string, "strict"))
            return fail(err, LS_E_INVALID, "'tools[%d].function.%.40s' is not supported", i, k->string);
        i++;
    }
    return LS_OK; /* an empty list: no tools */
}

const cJSON *ls_srv_tool_named(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) return t;
    }
    return NULL;
}

/* A message's content as text: a string, null (""), or a list of text parts. */
static ls_status content_text(const cJSON *m, int i, bool may_be_null, sb *out, ls_err *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (cJSON_IsString(c)) {
        sb_add(out, c->valuestring);
        return LS_OK;
    }
    if ((!c || cJSON_IsNull(c)) && may_be_null) return LS_OK;
    if (cJSON_IsArray(c)) {
        const cJSON *p;
        cJSON_ArrayForEach(p, c) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
                return fail(err, LS_E_INVALID, "'messages[%d].content' parts must be {\"type\": \"text\", \"text\": ...}", i);
            sb_add(out, tx->valuestring);
        }
        return LS_OK;
    }
    return fail(err, LS_E_INVALID, "'messages[%d].content' must be a string", i);
}

/* One assistant tool call -> its name and arguments (parsed from the JSON string). */
static ls_status call_parts(const cJSON *tc, int i, int k, const char **name, cJSON **args, ls_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(nm))
        return fail(err, LS_E_INVALID, "'messages[%d].tool_calls[%d].function.name' must be a string", i, k);
    *name = nm->valuestring;
    if (cJSON_IsString(a)) {
        *args = cJSON_Parse(a->valuestring);
        if (!*args)
            return fail(err, LS_E_INVALID, "'messages[%d].tool_calls[%d].function.arguments' is not valid JSON", i, k);
    } else if (cJSON_IsObject(a)) {
        *args = cJSON_Duplicate(a, true);
    } else {
        return fail(err, LS_E_INVALID, "'messages[%d].tool_calls[%d].function.arguments' must be a JSON string", i, k);
    }
    return LS_OK;
}

static const char GENERIC_ASK[] =
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the "
    "user's request";

ls_status ls_srv_tools_messages(const cJSON *msgs, const cJSON *tools, ls_srv_tool_format fmt, const char *default_system,
                                ls_chat_msg **out, char ***texts, int *n_out, ls_err *err) {
    int nm = cJSON_GetArraySize(msgs);
    ls_chat_msg *cm = calloc((size_t)nm + 1, sizeof *cm);
    char **tx = calloc((size_t)nm + 1, sizeof *tx);
    *out = cm;
    *texts = tx;
    *n_out = 0;
    if (!cm || !tx) return fail(err, LS_E_NOMEM, "out of memory");
    int n = 0, i = 0;
    ls_status st = LS_OK;
    const cJSON *m = msgs->child;
    /* the system message, with the tools */
    const cJSON *r0 = cJSON_GetObjectItemCaseSensitive(m, "role");
    bool first_sys = cJSON_IsString(r0) && (!strcmp(r0->valuestring, "system") || !strcmp(r0->valuestring, "developer"));
    if (tools) {
        sb s = {0};
        if (first_sys) {
            if ((st = content_text(m, 0, false, &s, err))) return st;
            m = m->next;
            i = 1;
        } else if (fmt == LS_TOOLS_HERMES && default_system) {
            sb_add(&s, default_system);
        }
        if (fmt == LS_TOOLS_HERMES) {
            sb_add(&s, "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                       "provided with function signatures within <tools></tools> XML tags:\n<tools>");
            const cJSON *t;
            cJSON_ArrayForEach(t, tools) {
                sb_add(&s, "\n");
                py_json(&s, t);
            }
            sb_add(&s, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                       "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                       "\"arguments\": <args-json-object>}\n</tool_call>");
        } else {
            if (s.n) sb_add(&s, "\n\n");
            sb_add(&s, GENERIC_ASK);
            sb_add(&s, ".\n\nYou can call any of the following tools to satisfy the user's requests: ");
            py_json(&s, tools);
            sb_add(&s, "\n\nA tool call is written {\"tool_call\": {\"name\": <tool name>, \"arguments\": "
                       "<arguments object>}}; a reply {\"response\": <text>}.");
        }
        if (!(tx[n] = sb_take(&s))) return fail(err, LS_E_NOMEM, "out of memory");
        cm[n] = (ls_chat_msg){"system", tx[n]};
        *n_out = ++n;
    }
    for (; m && !st; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return fail(err, LS_E_INVALID, "'messages[%d].role' must be a string", i);
        const char *rl = role->valuestring;
        sb s = {0};
        const char *out_role = rl;
        if (!strcmp(rl, "tool")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
            if (!cJSON_IsString(id))
                return fail(err, LS_E_INVALID, "'messages[%d].tool_call_id' must name the call this result answers", i);
            /* consecutive results share one user turn */
            for (;;) {
                sb c = {0};
                if ((st = content_text(m, i, false, &c, err))) {
                    free(c.p);
                    free(s.p);
                    return st;
                }
                if (fmt == LS_TOOLS_HERMES) {
                    if (s.n) sb_add(&s, "\n");
                    sb_add(&s, "<tool_response>\n");
                    sb_add(&s, c.p ? c.p : "");
                    sb_add(&s, "\n</tool_response>");
                } else {
                    if (s.n) sb_add(&s, "\n");
                    cJSON *o = cJSON_CreateObject(), *r = cJSON_AddObjectToObject(o, "tool_response");
                    cJSON_AddStringToObject(r, "tool_call_id", cJSON_GetObjectItemCaseSensitive(m, "tool_call_id")->valuestring);
                    cJSON_AddStringToObject(r, "content", c.p ? c.p : "");
                    py_json(&s, o);
                    cJSON_Delete(o);
                }
                free(c.p);
                const cJSON *nx = m->next, *nr = nx ? cJSON_GetObjectItemCaseSensitive(nx, "role") : NULL;
                if (!cJSON_IsString(nr) || strcmp(nr->valuestring, "tool")) break;
                if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(nx, "tool_call_id"))) {
                    free(s.p);
                    return fail(err, LS_E_INVALID, "'messages[%d].tool_call_id' must name the call this result answers",
                                i + 1);
                }
                m = nx;
                i++;
            }
            out_role = "user";
        } else if (!strcmp(rl, "assistant") && cJSON_GetObjectItemCaseSensitive(m, "tool_calls") &&
                   !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"))) {
            const cJSON *tcs = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            if (!cJSON_IsArray(tcs) || cJSON_GetArraySize(tcs) == 0)
                return fail(err, LS_E_INVALID, "'messages[%d].tool_calls' must be a non-empty list", i);
            if ((st = content_text(m, i, true, &s, err))) {
                free(s.p);
                return st;
            }
            cJSON *gen = fmt == LS_TOOLS_GENERIC ? cJSON_CreateArray() : NULL;
            int k = 0;
            const cJSON *tc;
            cJSON_ArrayForEach(tc, tcs) {
                const char *name = NULL;
                cJSON *args = NULL;
                if ((st = call_parts(tc, i, k, &name, &args, err))) {
                    cJSON_Delete(gen);
                    free(s.p);
                    return st;
                }
                if (fmt == LS_TOOLS_HERMES) {
                    if (s.n) sb_add(&s, "\n");
                    sb_add(&s, "<tool_call>\n{\"name\": \"");
                    sb_add(&s, name);
                    sb_add(&s, "\", \"arguments\": ");
                    py_json(&s, args);
                    sb_add(&s, "}\n</tool_call>");
                    cJSON_Delete(args);
                } else {
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddStringToObject(o, "name", name);
                    cJSON_AddItemToObject(o, "arguments", args);
                    cJSON_AddItemToArray(gen, o);
                }
                k++;
            }
            if (gen) { /* the earlier content (if any) is dropped: the reply was the JSON */
                s.n = 0;
                if (s.p) s.p[0] = 0;
                cJSON *o = cJSON_CreateObject();
                if (cJSON_GetArraySize(gen) == 1) cJSON_AddItemToObject(o, "tool_call", cJSON_DetachItemFromArray(gen, 0));
                else cJSON_AddItemToObject(o, "tool_calls", cJSON_Duplicate(gen, true));
                py_json(&s, o);
                cJSON_Delete(o);
                cJSON_Delete(gen);
            }
        } else if (!strcmp(rl, "system") || !strcmp(rl, "developer") || !strcmp(rl, "user") || !strcmp(rl, "assistant")) {
            if ((st = content_text(m, i, !strcmp(rl, "assistant"), &s, err))) {
                free(s.p);
                return st;
            }
            if (!strcmp(rl, "developer")) out_role = "system";
        } else {
            return fail(err, LS_E_INVALID, "'messages[%d].role' is '%.40s'; use system, user, assistant or tool", i, rl);
        }
        if (!(tx[n] = sb_take(&s))) return fail(err, LS_E_NOMEM, "out of memory");
        cm[n].role = out_role;
        cm[n].content = tx[n];
        n++;
        *n_out = n;
    }
    *n_out = n;
    return LS_OK;
}

/* ---- the constraint ------------------------------------------------------------------ */
static cJSON *call_schema(const cJSON *tool) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *pa = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    cJSON *s = cJSON_CreateObject(), *pr;
    cJSON_AddStringToObject(s, "type", "object");
    pr = cJSON_AddObjectToObject(s, "properties");
    cJSON *n = cJSON_AddObjectToObject(pr, "name");
    cJSON_AddStringToObject(n, "const", nm->valuestring);
    if (cJSON_IsObject(pa)) {
        cJSON_AddItemToObject(pr, "arguments", cJSON_Duplicate(pa, true));
    } else { /* no parameters given: any object */
        cJSON *a = cJSON_AddObjectToObject(pr, "arguments");
        cJSON_AddStringToObject(a, "type", "object");
        cJSON_AddBoolToObject(a, "additionalProperties", true);
    }
    cJSON *req = cJSON_AddArrayToObject(s, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
    return s;
}

cJSON *ls_srv_tools_schema(const cJSON *tools, ls_srv_tool_format fmt, bool required, const char *name) {
    if (fmt == LS_TOOLS_HERMES && !required && !name) return NULL;
    cJSON *call;
    if (name) {
        call = call_schema(ls_srv_tool_named(tools, name));
    } else {
        call = cJSON_CreateObject();
        cJSON *any = cJSON_AddArrayToObject(call, "anyOf");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) cJSON_AddItemToArray(any, call_schema(t));
    }
    if (fmt == LS_TOOLS_HERMES) return call;
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "type", "object");
    cJSON_AddItemToObject(cJSON_AddObjectToObject(tc, "properties"), "tool_call", call);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(tc, "required"), cJSON_CreateString("tool_call"));
    if (required || name) return tc;
    cJSON *s = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(s, "anyOf"), *resp = cJSON_CreateObject();
    cJSON_AddItemToArray(any, tc);
    cJSON_AddStringToObject(resp, "type", "object");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(resp, "properties"), "response"), "type",
                            "string");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(resp, "required"), cJSON_CreateString("response"));
    cJSON_AddItemToArray(any, resp);
    return s;
}

ls_status ls_srv_tools_gbnf(const cJSON *tools, ls_srv_tool_format fmt, bool required, const char *name, char **out,
                            ls_err *err) {
    *out = NULL;
    cJSON *schema = ls_srv_tools_schema(tools, fmt, required, name);
    if (!schema) return LS_OK;
    ls_err e2 = {0};
    char *text = cJSON_PrintUnformatted(schema);
    cJSON_Delete(schema);
    if (!text) return fail(err, LS_E_NOMEM, "out of memory");
    char *g = ls_json_schema_to_gbnf(text, strlen(text), &e2);
    free(text);
    if (!g) return fail(err, e2.code == LS_E_NOMEM ? LS_E_NOMEM : LS_E_INVALID, "'tools' parameters: %s", e2.msg);
    if (fmt == LS_TOOLS_HERMES) { /* the converter's root becomes tool-call-json, inside the tags */
        static const char HEAD[] = "root ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
        char *at = strncmp(g, "root ::=", 8) ? strstr(g, "\nroot ::=") : g;
        if (!at) {
            free(g);
            return fail(err, LS_E_INVALID, "the tool-call grammar has no root rule");
        }
        size_t off = (size_t)(at - g) + (at == g ? 0 : 1), n = strlen(g);
        sb w = {0};
        sb_add(&w, HEAD);
        sb_addn(&w, g, off);
        sb_add(&w, "tool-call-json ::=");
        sb_addn(&w, g + off + 8, n - off - 8);
        free(g);
        if (!(g = sb_take(&w))) return fail(err, LS_E_NOMEM, "out of memory");
    }
    ls_err e3 = {0};
    if (ls_grammar_check(g, strlen(g), &e3)) {
        free(g);
        return fail(err, e3.code == LS_E_NOMEM ? LS_E_NOMEM : LS_E_INVALID, "the tool-call grammar does not compile: %s",
                    e3.msg);
    }
    *out = g;
    return LS_OK;
}

/* ---- parsing the generated text ------------------------------------------------------- */
static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* {"name": ..., "arguments": {...}} -> a call object for the reply, or NULL. */
static cJSON *make_call(const cJSON *o, const char *id_prefix, int k) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name"), *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!cJSON_IsObject(o) || !cJSON_IsString(nm) || !a) return NULL;
    cJSON *c = cJSON_CreateObject(), *f;
    char id[96];
    snprintf(id, sizeof id, "call_%.60s_%d", id_prefix, k);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", nm->valuestring);
    char *args = cJSON_IsString(a) ? NULL : cJSON_PrintUnformatted(a);
    cJSON_AddStringToObject(f, "arguments", cJSON_IsString(a) ? a->valuestring : args ? args : "{}");
    free(args);
    return c;
}

/* What is a call, and what stays content:
 *  - A call is a JSON object with a string "name" and an "arguments" member (an object
 *    or any JSON value is re-serialised compactly; a string is passed on as it is, even
 *    when it is not JSON).  The name is not checked against the request's tools: with a
 *    tool grammar (tool_choice) the model could only write a declared one, and without
 *    one the client sees what the model wrote.
 *  - Hermes: the content is the text before the first <tool_call> (trailing whitespace
 *    trimmed).  Every <tool_call>...</tool_call> block must hold a call; the last may be
 *    cut by the length limit (it ends at the end of the text).  If any block is not a
 *    call (not JSON, not an object, no name, no arguments) there are no calls at all and
 *    the whole text is content.  Text after the last block is dropped.
 *  - Generic JSON: an object {"tool_call": call} or {"tool_calls": [call, ...]} (every
 *    entry a call, else none and the whole text is content) or {"response": "text"}
 *    (the content).  Text after the object is dropped; anything else is all content.
 * cJSON bounds the nesting it parses (CJSON_NESTING_LIMIT, 1000 levels), so no input
 * recurses deeper than that. */
ls_status ls_srv_tools_parse(const char *text, size_t len, ls_srv_tool_format fmt, const char *id_prefix,
                             char **content, cJSON **calls) {
    *content = NULL;
    *calls = NULL;
    const char *e = text + len;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return LS_E_NOMEM;
    size_t keep = len; /* the content: the text before the first call */
    if (fmt == LS_TOOLS_HERMES) {
        static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
        const char *p = text;
        bool first = true, ok = true;
        for (;;) {
            const char *q = p < e ? memmem(p, (size_t)(e - p), OPEN, sizeof OPEN - 1) : NULL;
            if (!q) break;
            if (first) keep = (size_t)(q - text);
            first = false;
            const char *js = q + sizeof OPEN - 1, *end = memmem(js, (size_t)(e - js), CLOSE, sizeof CLOSE - 1);
            const char *je = end ? end : e; /* a call cut by the length limit ends the text */
            cJSON *o = cJSON_ParseWithLength(js, (size_t)(je - js));
            cJSON *c = o ? make_call(o, id_prefix, cJSON_GetArraySize(arr)) : NULL;
            cJSON_Delete(o);
            if (!c) {
                ok = false;
                break;
            }
            cJSON_AddItemToArray(arr, c);
            p = je == e ? e : je + sizeof CLOSE - 1;
        }
        if (!ok) { /* not a call after all: all of it is content */
            cJSON_Delete(arr);
            arr = cJSON_CreateArray();
            keep = len;
        }
    } else {
        const char *p = skip_ws(text, e);
        cJSON *o = p < e && *p == '{' ? cJSON_ParseWithLength(p, (size_t)(e - p)) : NULL;
        const cJSON *one = cJSON_GetObjectItemCaseSensitive(o, "tool_call"),
                    *many = cJSON_GetObjectItemCaseSensitive(o, "tool_calls"),
                    *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
        if (one) {
            cJSON *c = make_call(one, id_prefix, 0);
            if (c) {
                cJSON_AddItemToArray(arr, c);
                keep = 0;
            }
        } else if (cJSON_IsArray(many)) {
            const cJSON *x;
            bool ok = true;
            cJSON_ArrayForEach(x, many) {
                cJSON *c = make_call(x, id_prefix, cJSON_GetArraySize(arr));
                if (!c) ok = false;
                else cJSON_AddItemToArray(arr, c);
            }
            if (ok) keep = 0;
            else {
                cJSON_Delete(arr);
                arr = cJSON_CreateArray();
            }
        } else if (cJSON_IsString(resp)) {
            size_t rl = strlen(resp->valuestring);
            if ((*content = malloc(rl + 1))) memcpy(*content, resp->valuestring, rl + 1);
            cJSON_Delete(o);
            cJSON_Delete(arr);
            return *content ? LS_OK : LS_E_NOMEM;
        }
        cJSON_Delete(o);
    }
    while (keep > 0 && (text[keep - 1] == ' ' || text[keep - 1] == '\n' || text[keep - 1] == '\r' ||
                        text[keep - 1] == '\t') && cJSON_GetArraySize(arr) > 0)
        keep--;
    if (keep > 0 || cJSON_GetArraySize(arr) == 0) {
        if (!(*content = malloc(keep + 1))) {
            cJSON_Delete(arr);
            return LS_E_NOMEM;
        }
        memcpy(*content, text, keep);
        (*content)[keep] = 0;
    }
    if (cJSON_GetArraySize(arr) > 0) *calls = arr;
    else cJSON_Delete(arr);
    return LS_OK;
}
