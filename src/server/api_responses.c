/* api_responses.c - OpenAI's Responses API: POST /v1/responses.
 *
 * The body is checked here (every key is one the server acts on, or a 400 naming it)
 * and becomes the chat completions request it means: `instructions` a system message,
 * `input` (a string, or a list of items: messages with input_text / output_text parts,
 * function_call and function_call_output items) the messages, `tools` (function tools)
 * and `tool_choice` as chat's, `max_output_tokens` max_tokens.  That request goes
 * through ls_srv_parse and the same jobs as /v1/chat/completions (the same template
 * rendering, sampler, tool grammar), so a reply has the bytes the chat request would
 * give.  Nothing is stored: `store: true` and `previous_response_id` are refused.  The
 * replies (and the stream's events) are shaped here from the job. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

static const char *const KNOWN[] = {"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
                                    "temperature", "top_p", "top_k", "seed", "stream", "store", "metadata", "user",
                                    "parallel_tool_calls", "text", "truncation", "include", "background",
                                    "reasoning_format", "grammar", NULL};

/* A message's content: a string, or a list of input_text (output_text in an assistant
 * message) parts, joined. */
static ls_status content_text(const cJSON *c, const char *path, bool assistant, cJSON **out, ls_err *err) {
    if (cJSON_IsString(c)) {
        *out = cJSON_CreateString(c->valuestring);
        return *out ? LS_OK : ls_srv_error(err, LS_E_NOMEM, "out of memory");
    }
    if (!cJSON_IsArray(c)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be a string or a list of input_text parts", path);
    static const char *const PART[] = {"type", "text", NULL}, *const OPART[] = {"type", "text", "annotations", "logprobs", NULL};
    size_t total = 1;
    int k = 0;
    const cJSON *p;
    char where[128];
    cJSON_ArrayForEach(p, c) {
        const cJSON *ty = ls_srv_get(p, "type"), *tx = ls_srv_get(p, "text");
        snprintf(where, sizeof where, "%s[%d]", path, k);
        bool out_text = assistant && cJSON_IsString(ty) && !strcmp(ty->valuestring, "output_text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(ty) || (strcmp(ty->valuestring, "input_text") && !out_text))
            return ls_srv_error(err, LS_E_INVALID, "'%s.type' must be \"input_text\"%s (lockstep reads text only)", where,
                                assistant ? " or \"output_text\"" : "");
        ls_status st = ls_srv_keys_in(p, out_text ? OPART : PART, where, err);
        if (st) return st;
        if (!cJSON_IsString(tx)) return ls_srv_error(err, LS_E_INVALID, "'%s.text' must be a string", where);
        total += strlen(tx->valuestring);
        k++;
    }
    char *t = malloc(total);
    if (!t) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    t[0] = 0;
    cJSON_ArrayForEach(p, c) strcat(t, ls_srv_get(p, "text")->valuestring);
    *out = cJSON_CreateString(t);
    free(t);
    return *out ? LS_OK : ls_srv_error(err, LS_E_NOMEM, "out of memory");
}

/* `input` -> chat messages (appended to msgs). */
static ls_status input_messages(const cJSON *in, cJSON *msgs, ls_err *err) {
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        return LS_OK;
    }
    if (!cJSON_IsArray(in) || !cJSON_GetArraySize(in))
        return ls_srv_error(err, LS_E_INVALID, "'input' must be a string or a non-empty list of input items");
    static const char *const MSG[] = {"type", "role", "content", "id", "status", NULL},
                             *const CALL[] = {"type", "call_id", "name", "arguments", "id", "status", NULL},
                             *const OUT[] = {"type", "call_id", "output", "id", "status", NULL};
    cJSON *calls_to = NULL; /* the assistant message the next function_call joins */
    int i = 0;
    const cJSON *it;
    char where[64], cw[80];
    cJSON_ArrayForEach(it, in) {
        snprintf(where, sizeof where, "input[%d]", i++);
        if (!cJSON_IsObject(it)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be an object (an input item)", where);
        const cJSON *ty = ls_srv_get(it, "type");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : ty ? "" : "message";
        ls_status st;
        if (!strcmp(t, "message")) {
            if ((st = ls_srv_keys_in(it, MSG, where, err))) return st;
            const cJSON *role = ls_srv_get(it, "role");
            const char *r = cJSON_IsString(role) ? role->valuestring : "";
            if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
                return ls_srv_error(err, LS_E_INVALID, "'%s.role' must be user, system, developer or assistant", where);
            snprintf(cw, sizeof cw, "%s.content", where);
            cJSON *text = NULL;
            if ((st = content_text(ls_srv_get(it, "content"), cw, !strcmp(r, "assistant"), &text, err))) return st;
            cJSON *m = cJSON_CreateObject();
            cJSON_AddItemToArray(msgs, m);
            cJSON_AddStringToObject(m, "role", r);
            cJSON_AddItemToObject(m, "content", text);
            calls_to = !strcmp(r, "assistant") ? m : NULL;
        } else if (!strcmp(t, "function_call")) {
            if ((st = ls_srv_keys_in(it, CALL, where, err))) return st;
            const cJSON *id = ls_srv_get(it, "call_id"), *nm = ls_srv_get(it, "name"), *args = ls_srv_get(it, "arguments");
            if (!cJSON_IsString(id) || !cJSON_IsString(nm) || !cJSON_IsString(args))
                return ls_srv_error(err, LS_E_INVALID, "'%s' needs 'call_id', 'name' and 'arguments' (strings)", where);
            if (!calls_to) {
                calls_to = cJSON_CreateObject();
                cJSON_AddItemToArray(msgs, calls_to);
                cJSON_AddStringToObject(calls_to, "role", "assistant");
                cJSON_AddNullToObject(calls_to, "content");
            }
            cJSON *tc = cJSON_GetObjectItemCaseSensitive(calls_to, "tool_calls");
            if (!tc) tc = cJSON_AddArrayToObject(calls_to, "tool_calls");
            cJSON *c = cJSON_CreateObject(), *f;
            cJSON_AddItemToArray(tc, c);
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", nm->valuestring);
            cJSON_AddStringToObject(f, "arguments", args->valuestring);
        } else if (!strcmp(t, "function_call_output")) {
            if ((st = ls_srv_keys_in(it, OUT, where, err))) return st;
            const cJSON *id = ls_srv_get(it, "call_id"), *o = ls_srv_get(it, "output");
            if (!cJSON_IsString(id)) return ls_srv_error(err, LS_E_INVALID, "'%s.call_id' must be a string", where);
            snprintf(cw, sizeof cw, "%s.output", where);
            cJSON *text = NULL;
            if ((st = content_text(o, cw, false, &text, err))) return st;
            cJSON *m = cJSON_CreateObject();
            cJSON_AddItemToArray(msgs, m);
            cJSON_AddStringToObject(m, "role", "tool");
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            cJSON_AddItemToObject(m, "content", text);
            calls_to = NULL;
        } else {
            return ls_srv_error(err, LS_E_INVALID, "'%s.type' is '%.40s': lockstep takes message, function_call and "
                                                   "function_call_output items", where, t);
        }
    }
    return LS_OK;
}

/* The Responses body -> the chat completions body (o) and what the reply repeats (echo). */
static ls_status translate(const cJSON *j, int max_tokens, cJSON *o, cJSON *echo, ls_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
        if (cJSON_IsNull(v) || ls_srv_in_list(v->string, KNOWN)) continue;
        if (!strcmp(v->string, "previous_response_id") || !strcmp(v->string, "conversation"))
            return ls_srv_error(err, LS_E_INVALID, "'%s' is not supported: lockstep stores no responses (store: false); "
                                                   "send the whole conversation in 'input'", v->string);
        return ls_srv_error(err, LS_E_INVALID, "unsupported parameter '%.60s': lockstep does not implement it "
                                               "(docs/server.md lists what /v1/responses takes)", v->string);
    }
    const cJSON *store = ls_srv_get(j, "store"), *bg = ls_srv_get(j, "background"), *inc = ls_srv_get(j, "include"), *tr = ls_srv_get(j, "truncation");
    if (store && !cJSON_IsFalse(store))
        return ls_srv_error(err, LS_E_INVALID, "'store' must be false (or absent): lockstep stores no responses");
    if (bg && !cJSON_IsFalse(bg)) return ls_srv_error(err, LS_E_INVALID, "'background' must be false: lockstep answers in the request");
    if (inc && !(cJSON_IsArray(inc) && !cJSON_GetArraySize(inc)))
        return ls_srv_error(err, LS_E_INVALID, "'include' must be empty: lockstep has no extra output to include");
    if (tr && !(cJSON_IsString(tr) && !strcmp(tr->valuestring, "disabled")))
        return ls_srv_error(err, LS_E_INVALID, "'truncation' must be \"disabled\": lockstep never drops input");
    static const char *const PASS[] = {"model", "temperature", "top_p", "top_k", "seed", "stream", "user",
                                       "parallel_tool_calls", "reasoning_format", "grammar", NULL};
    for (int i = 0; PASS[i]; i++)
        if ((v = ls_srv_get(j, PASS[i]))) cJSON_AddItemToObject(o, PASS[i], ls_srv_dup_exact(v));
    if ((v = ls_srv_get(j, "max_output_tokens"))) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > max_tokens)
            return ls_srv_error(err, LS_E_INVALID, "'max_output_tokens' must be an integer between 1 and %d", max_tokens);
        cJSON_AddNumberToObject(o, "max_tokens", v->valuedouble);
    }
    cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
    const cJSON *ins = ls_srv_get(j, "instructions"), *in = ls_srv_get(j, "input");
    if (ins) {
        if (!cJSON_IsString(ins)) return ls_srv_error(err, LS_E_INVALID, "'instructions' must be a string");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", ins->valuestring);
    }
    if (!in) return ls_srv_error(err, LS_E_INVALID, "'input' is required");
    ls_status st = input_messages(in, msgs, err);
    if (st) return st;
    /* tools: [{"type": "function", "name", "description", "parameters", "strict"}] */
    const cJSON *tools = ls_srv_get(j, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return ls_srv_error(err, LS_E_INVALID, "'tools' must be a list of function tools");
        static const char *const TOOL[] = {"type", "name", "description", "parameters", "strict", NULL};
        cJSON *ct = cJSON_AddArrayToObject(o, "tools");
        int i = 0;
        const cJSON *t;
        char where[48];
        cJSON_ArrayForEach(t, tools) {
            snprintf(where, sizeof where, "tools[%d]", i++);
            const cJSON *ty = ls_srv_get(t, "type"), *nm = ls_srv_get(t, "name");
            if (!cJSON_IsObject(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
                return ls_srv_error(err, LS_E_INVALID, "'%s.type' must be \"function\" (the only kind of tool lockstep runs)",
                                    where);
            if ((st = ls_srv_keys_in(t, TOOL, where, err))) return st;
            if (!cJSON_IsString(nm) || !nm->valuestring[0])
                return ls_srv_error(err, LS_E_INVALID, "'%s.name' must be a non-empty string", where);
            cJSON *w = cJSON_CreateObject(), *f;
            cJSON_AddItemToArray(ct, w);
            cJSON_AddStringToObject(w, "type", "function");
            f = cJSON_AddObjectToObject(w, "function");
            static const char *const FN[] = {"name", "description", "parameters", "strict", NULL};
            for (int k = 0; FN[k]; k++)
                if ((v = ls_srv_get(t, FN[k]))) cJSON_AddItemToObject(f, FN[k], cJSON_Duplicate(v, true));
        }
    }
    const cJSON *tc = ls_srv_get(j, "tool_choice");
    if (tc) {
        if (cJSON_IsString(tc)) {
            cJSON_AddItemToObject(o, "tool_choice", cJSON_Duplicate(tc, true)); /* chat checks the value */
        } else if (cJSON_IsObject(tc)) {
            static const char *const TC[] = {"type", "name", NULL};
            const cJSON *ty = ls_srv_get(tc, "type"), *nm = ls_srv_get(tc, "name");
            if ((st = ls_srv_keys_in(tc, TC, "tool_choice", err))) return st;
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm))
                return ls_srv_error(err, LS_E_INVALID, "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                                       "{\"type\": \"function\", \"name\": ...}");
            cJSON *w = cJSON_AddObjectToObject(o, "tool_choice");
            cJSON_AddStringToObject(w, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(w, "function"), "name", nm->valuestring);
        } else {
            return ls_srv_error(err, LS_E_INVALID, "'tool_choice' must be a string or an object");
        }
    }
    /* text.format: text, json_object or json_schema (chat's response_format) */
    const cJSON *text = ls_srv_get(j, "text");
    if (text) {
        static const char *const TX[] = {"format", NULL}, *const FMT[] = {"type", "name", "schema", "strict", "description", NULL};
        if (!cJSON_IsObject(text)) return ls_srv_error(err, LS_E_INVALID, "'text' must be an object");
        if ((st = ls_srv_keys_in(text, TX, "text", err))) return st;
        const cJSON *f = ls_srv_get(text, "format"), *ty = ls_srv_get(f, "type");
        if (f) {
            if (!cJSON_IsObject(f) || !cJSON_IsString(ty))
                return ls_srv_error(err, LS_E_INVALID, "'text.format' must be an object with a 'type'");
            if ((st = ls_srv_keys_in(f, FMT, "text.format", err))) return st;
            if (!strcmp(ty->valuestring, "json_schema")) {
                cJSON *rf = cJSON_AddObjectToObject(o, "response_format"), *js;
                cJSON_AddStringToObject(rf, "type", "json_schema");
                js = cJSON_AddObjectToObject(rf, "json_schema");
                static const char *const K[] = {"name", "schema", "strict", "description", NULL};
                for (int k = 0; K[k]; k++)
                    if ((v = ls_srv_get(f, K[k]))) cJSON_AddItemToObject(js, K[k], cJSON_Duplicate(v, true));
            } else if (!strcmp(ty->valuestring, "json_object") || !strcmp(ty->valuestring, "text")) {
                cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "response_format"), "type", ty->valuestring);
            } else {
                return ls_srv_error(err, LS_E_INVALID, "'text.format.type' must be text, json_object or json_schema");
            }
        }
    }
    const cJSON *md = ls_srv_get(j, "metadata");
    if (md) {
        const cJSON *x;
        bool ok = cJSON_IsObject(md);
        cJSON_ArrayForEach(x, (ok ? md : NULL)) ok = ok && cJSON_IsString(x);
        if (!ok) return ls_srv_error(err, LS_E_INVALID, "'metadata' must be an object of strings");
    }
    /* what the reply repeats */
    static const char *const ECHO[] = {"instructions", "metadata", "tools", "tool_choice", "max_output_tokens",
                                       "parallel_tool_calls", "text", "user", NULL};
    for (int i = 0; ECHO[i]; i++) {
        v = ls_srv_get(j, ECHO[i]);
        cJSON_AddItemToObject(echo, ECHO[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    return LS_OK;
}

/* ---- replies ---------------------------------------------------------------------- */
static void add_i64(cJSON *o, const char *k, int64_t x) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)x);
    cJSON_AddRawToObject(o, k, b);
}

/* A copy of text[a, b) as a JSON string. */
static cJSON *span(const job *j, size_t a, size_t b) {
    size_t n = b > a ? b - a : 0;
    char *t = malloc(n + 1);
    if (!t) return cJSON_CreateString("");
    if (n) memcpy(t, j->text + a, n);
    t[n] = 0;
    cJSON *s = cJSON_CreateString(t);
    free(t);
    return s;
}

static void item_id(const job *j, char *out, size_t cap, const char *kind) {
    const char *h = strchr(j->id, '_');
    snprintf(out, cap, "%s_%s", kind, h ? h + 1 : j->id);
}

static cJSON *reasoning_item(const job *j, cJSON *text, bool done) {
    char id[64];
    item_id(j, id, sizeof id, "rs");
    cJSON *it = cJSON_CreateObject(), *c;
    cJSON_AddStringToObject(it, "type", "reasoning");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddArrayToObject(it, "summary");
    c = cJSON_AddArrayToObject(it, "content");
    if (text) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "reasoning_text");
        cJSON_AddItemToObject(p, "text", text);
        cJSON_AddItemToArray(c, p);
    }
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    return it;
}

static cJSON *text_part(cJSON *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddItemToObject(p, "text", text ? text : cJSON_CreateString(""));
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

static cJSON *message_item(const job *j, cJSON *text, bool done) {
    char id[64];
    item_id(j, id, sizeof id, "msg");
    cJSON *it = cJSON_CreateObject(), *c;
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON_AddStringToObject(it, "status", !done ? "in_progress" : j->finish == LS_FINISH_LENGTH ? "incomplete" : "completed");
    c = cJSON_AddArrayToObject(it, "content");
    if (text) cJSON_AddItemToArray(c, text_part(text));
    return it;
}

/* The finished reply's output items: a reasoning item (a think block), the message,
 * and the function calls (tools offered). */
static cJSON *output_items(const job *j) {
    cJSON *out = cJSON_CreateArray();
    ls_srv_split sp;
    ls_srv_think_split(j->text, j->text_len, true, j->req.reasoning, &sp);
    if (sp.think) cJSON_AddItemToArray(out, reasoning_item(j, span(j, sp.r0, sp.r1), true));
    if (!j->req.n_tools) {
        if (sp.c1 > sp.c0 || !sp.think) cJSON_AddItemToArray(out, message_item(j, span(j, sp.c0, sp.c1), true));
        return out;
    }
    char *content = NULL;
    cJSON *calls = NULL, *c;
    ls_srv_tools_parse(j->text ? j->text + sp.c0 : "", sp.c1 - sp.c0, (ls_srv_tool_format)j->req.tool_format, j->id,
                       &content, &calls);
    if ((content && content[0]) || (!calls && !sp.think))
        cJSON_AddItemToArray(out, message_item(j, cJSON_CreateString(content ? content : ""), true));
    int k = 0;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        char id[80];
        item_id(j, id, sizeof id, "fc");
        snprintf(id + strlen(id), sizeof id - strlen(id), "_%d", k++);
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "id", id);
        cJSON_AddStringToObject(it, "call_id", cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring);
        cJSON_AddStringToObject(it, "name", cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
        cJSON_AddStringToObject(it, "arguments", cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring);
        cJSON_AddStringToObject(it, "status", "completed");
        cJSON_AddItemToArray(out, it);
    }
    cJSON_Delete(calls);
    free(content);
    return out;
}

static const char *status_of(const job *j) {
    if (!j->done) return "in_progress";
    return j->finish == LS_FINISH_LENGTH      ? "incomplete"
           : j->finish == LS_FINISH_CANCELLED ? "cancelled"
           : j->finish == LS_FINISH_ERROR     ? "failed"
                                              : "completed";
}

/* The Response object; before the end (a stream's response.created) with no output. */
static cJSON *response_obj(const job *j) {
    cJSON *o = cJSON_CreateObject(), *x;
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)j->created);
    cJSON_AddStringToObject(o, "status", status_of(j));
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    if (j->done && j->finish == LS_FINISH_ERROR) {
        x = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(x, "code", "server_error");
        cJSON_AddStringToObject(x, "message", "the server could not go on generating (out of memory, or the grammar's "
                                              "token mask went over its work budget)");
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    if (j->done && j->finish == LS_FINISH_LENGTH) {
        x = cJSON_AddObjectToObject(o, "incomplete_details");
        cJSON_AddStringToObject(x, "reason", "max_output_tokens");
    } else {
        cJSON_AddNullToObject(o, "incomplete_details");
    }
    cJSON_AddItemToObject(o, "output", j->done ? output_items(j) : cJSON_CreateArray());
    static const char *const ECHO[] = {"instructions", "metadata", "tools", "tool_choice", "max_output_tokens",
                                       "parallel_tool_calls", "text", "user", NULL};
    for (int i = 0; ECHO[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->api_echo, ECHO[i]);
        cJSON *d = v && !cJSON_IsNull(v) ? cJSON_Duplicate(v, true) : NULL;
        if (!d && !strcmp(ECHO[i], "metadata")) d = cJSON_CreateObject();
        if (!d && !strcmp(ECHO[i], "tools")) d = cJSON_CreateArray();
        if (!d && !strcmp(ECHO[i], "tool_choice")) d = cJSON_CreateString("auto");
        if (!d && !strcmp(ECHO[i], "parallel_tool_calls")) d = cJSON_CreateBool(1);
        if (!d && !strcmp(ECHO[i], "text")) {
            d = cJSON_CreateObject();
            cJSON_AddStringToObject(cJSON_AddObjectToObject(d, "format"), "type", "text");
        }
        cJSON_AddItemToObject(o, ECHO[i], d ? d : cJSON_CreateNull());
    }
    cJSON_AddNumberToObject(o, "temperature", j->req.temperature);
    cJSON_AddNumberToObject(o, "top_p", j->req.top_p);
    cJSON_AddBoolToObject(o, "store", false);
    cJSON_AddNullToObject(o, "previous_response_id");
    cJSON_AddStringToObject(o, "truncation", "disabled");
    if (j->done) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", j->n_prompt);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", j->n_cached);
        cJSON_AddNumberToObject(u, "output_tokens", j->n_tokens);
        cJSON_AddObjectToObject(u, "output_tokens_details"); /* reasoning_tokens: not counted apart */
        cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_tokens);
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    /* replay (extensions): the seed used and the fingerprint, as on chat completions */
    char fp[128];
    ls_srv_fingerprint(j->srv, fp, sizeof fp);
    cJSON_AddStringToObject(o, "system_fingerprint", fp);
    add_i64(o, "seed", j->req.seed);
    return o;
}

/* ---- the stream ------------------------------------------------------------------- */
static cJSON *evo(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static void emit(job *j, char **out, cJSON *o) {
    cJSON_AddNumberToObject(o, "sequence_number", j->ev_seq++);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    char name[64];
    snprintf(name, sizeof name, "%s", t->valuestring);
    ls_srv_cat(out, ls_srv_sse_event(name, o));
}

static cJSON *item_ev(const char *type, int index, cJSON *item) {
    cJSON *o = evo(type);
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddItemToObject(o, "item", item);
    return o;
}

static cJSON *part_ev(const char *type, const char *item, int index, cJSON *part) {
    cJSON *o = evo(type);
    cJSON_AddStringToObject(o, "item_id", item);
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddNumberToObject(o, "content_index", 0);
    if (part) cJSON_AddItemToObject(o, "part", part);
    return o;
}

static cJSON *reasoning_part(cJSON *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "reasoning_text");
    cJSON_AddItemToObject(p, "text", text);
    return p;
}

/* One whole output item's events (a stream's items when tools are offered: the reply is
 * parsed whole): added, its content, done. */
static void emit_item(job *j, char **out, int index, const cJSON *item) {
    const char *ty = cJSON_GetObjectItemCaseSensitive(item, "type")->valuestring,
               *id = cJSON_GetObjectItemCaseSensitive(item, "id")->valuestring;
    cJSON *added = cJSON_Duplicate(item, true);
    cJSON_ReplaceItemInObject(added, "status", cJSON_CreateString("in_progress"));
    if (!strcmp(ty, "function_call")) {
        const char *args = cJSON_GetObjectItemCaseSensitive(item, "arguments")->valuestring;
        cJSON_ReplaceItemInObject(added, "arguments", cJSON_CreateString(""));
        emit(j, out, item_ev("response.output_item.added", index, added));
        cJSON *d = evo("response.function_call_arguments.delta");
        cJSON_AddStringToObject(d, "item_id", id);
        cJSON_AddNumberToObject(d, "output_index", index);
        cJSON_AddStringToObject(d, "delta", args);
        emit(j, out, d);
        d = evo("response.function_call_arguments.done");
        cJSON_AddStringToObject(d, "item_id", id);
        cJSON_AddNumberToObject(d, "output_index", index);
        cJSON_AddStringToObject(d, "name", cJSON_GetObjectItemCaseSensitive(item, "name")->valuestring);
        cJSON_AddStringToObject(d, "arguments", args);
        emit(j, out, d);
    } else {
        bool r = !strcmp(ty, "reasoning");
        const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(item, "content"), 0);
        const char *text = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        cJSON_ReplaceItemInObject(added, "content", cJSON_CreateArray());
        emit(j, out, item_ev("response.output_item.added", index, added));
        emit(j, out, part_ev("response.content_part.added", id, index,
                             r ? reasoning_part(cJSON_CreateString("")) : text_part(NULL)));
        cJSON *d = part_ev(r ? "response.reasoning_text.delta" : "response.output_text.delta", id, index, NULL);
        cJSON_AddStringToObject(d, "delta", text);
        if (!r) cJSON_AddArrayToObject(d, "logprobs");
        if (text[0]) emit(j, out, d);
        else cJSON_Delete(d);
        d = part_ev(r ? "response.reasoning_text.done" : "response.output_text.done", id, index, NULL);
        cJSON_AddStringToObject(d, "text", text);
        if (!r) cJSON_AddArrayToObject(d, "logprobs");
        emit(j, out, d);
        emit(j, out, part_ev("response.content_part.done", id, index, cJSON_Duplicate(part, true)));
    }
    emit(j, out, item_ev("response.output_item.done", index, cJSON_Duplicate(item, true)));
}

/* Closes the open streamed item (1 reasoning, 2 message) with its whole text. */
static void close_open(job *j, char **out, const ls_srv_split *sp) {
    char id[64];
    int index = j->ev_index - 1;
    if (j->ev_open == 1) {
        item_id(j, id, sizeof id, "rs");
        cJSON *d = part_ev("response.reasoning_text.done", id, index, NULL);
        cJSON_AddItemToObject(d, "text", span(j, sp->r0, sp->r0 + j->sent_r));
        emit(j, out, d);
        emit(j, out, part_ev("response.content_part.done", id, index, reasoning_part(span(j, sp->r0, sp->r0 + j->sent_r))));
        emit(j, out, item_ev("response.output_item.done", index, reasoning_item(j, span(j, sp->r0, sp->r0 + j->sent_r), true)));
    } else if (j->ev_open == 2) {
        item_id(j, id, sizeof id, "msg");
        cJSON *d = part_ev("response.output_text.done", id, index, NULL);
        cJSON_AddItemToObject(d, "text", span(j, sp->c0, sp->c0 + j->sent_c));
        cJSON_AddArrayToObject(d, "logprobs");
        emit(j, out, d);
        emit(j, out, part_ev("response.content_part.done", id, index, text_part(span(j, sp->c0, sp->c0 + j->sent_c))));
        emit(j, out, item_ev("response.output_item.done", index, message_item(j, span(j, sp->c0, sp->c0 + j->sent_c), true)));
    }
    j->ev_open = 0;
}

static void open_item(job *j, char **out, int kind) {
    char id[64];
    int index = j->ev_index++;
    j->ev_open = kind;
    item_id(j, id, sizeof id, kind == 1 ? "rs" : "msg");
    emit(j, out, item_ev("response.output_item.added", index, kind == 1 ? reasoning_item(j, NULL, false)
                                                                         : message_item(j, NULL, false)));
    emit(j, out, part_ev("response.content_part.added", id, index,
                         kind == 1 ? reasoning_part(cJSON_CreateString("")) : text_part(NULL)));
}

static char *stream_events(job *j) {
    char *out = NULL;
    if (!j->ev_began) {
        j->ev_began = true;
        cJSON *o = evo("response.created");
        cJSON_AddItemToObject(o, "response", response_obj(j));
        emit(j, &out, o);
        o = evo("response.in_progress");
        cJSON_AddItemToObject(o, "response", response_obj(j));
        emit(j, &out, o);
    }
    if (j->req.n_tools) { /* the reply is parsed whole: every item at the end */
        if (j->done && j->finish != LS_FINISH_ERROR) {
            cJSON *items = output_items(j), *it;
            int k = 0;
            cJSON_ArrayForEach(it, items) emit_item(j, &out, k++, it);
            cJSON_Delete(items);
        }
    } else {
        ls_srv_split sp;
        ls_srv_think_split(j->text, j->text_len, j->done, j->req.reasoning, &sp);
        char id[64];
        if (sp.think && j->ev_index == 0) open_item(j, &out, 1);
        size_t nr = sp.r1 - sp.r0 > j->sent_r ? sp.r1 - sp.r0 - j->sent_r : 0,
               nc = sp.c1 - sp.c0 > j->sent_c ? sp.c1 - sp.c0 - j->sent_c : 0;
        if (nr) {
            item_id(j, id, sizeof id, "rs");
            cJSON *d = part_ev("response.reasoning_text.delta", id, j->ev_index - 1, NULL);
            cJSON_AddItemToObject(d, "delta", span(j, sp.r0 + j->sent_r, sp.r1));
            emit(j, &out, d);
            j->sent_r += nr;
        }
        if ((nc || (j->done && !sp.think)) && j->ev_open != 2) { /* the message opens */
            close_open(j, &out, &sp);
            open_item(j, &out, 2);
        }
        if (nc) {
            item_id(j, id, sizeof id, "msg");
            cJSON *d = part_ev("response.output_text.delta", id, j->ev_index - 1, NULL);
            cJSON_AddItemToObject(d, "delta", span(j, sp.c0 + j->sent_c, sp.c1));
            cJSON_AddArrayToObject(d, "logprobs");
            emit(j, &out, d);
            j->sent_c += nc;
        }
        if (j->done && j->finish != LS_FINISH_ERROR) close_open(j, &out, &sp);
    }
    if (j->done) {
        const char *st = status_of(j);
        cJSON *o = evo(!strcmp(st, "completed")    ? "response.completed"
                       : !strcmp(st, "incomplete") ? "response.incomplete"
                                                   : "response.failed");
        cJSON_AddItemToObject(o, "response", response_obj(j));
        emit(j, &out, o);
    }
    return out;
}

static const ls_srv_api API = {LS_API_RESPONSES, "resp", response_obj, stream_events};

enum MHD_Result ls_srv_responses(server *s, struct MHD_Connection *c, conn *cn) {
    ls_err err;
    cJSON *j = ls_srv_json_parse(cn->body ? cn->body : "", cn->len, &err);
    if (!j) return ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    cJSON *o = cJSON_CreateObject(), *echo = cJSON_CreateObject();
    ls_status st = o && echo ? translate(j, s->p->max_tokens, o, echo, &err) : ls_srv_error(&err, LS_E_NOMEM, "out of memory");
    cJSON_Delete(j);
    char *t = st ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (st || !t) {
        cJSON_Delete(echo);
        if (!st) ls_srv_error(&err, LS_E_NOMEM, "out of memory");
        return ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    }
    free(cn->body);
    cn->body = t;
    cn->len = cn->cap = strlen(t);
    cn->api = &API;
    cn->api_echo = echo;
    return ls_srv_generate(s, c, cn, true, "/v1/responses");
}
