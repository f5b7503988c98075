/* api_messages.c - Anthropic's Messages API: POST /v1/messages.
 *
 * The body is checked here (every key is one the server acts on, or a 400 naming it, in
 * Anthropic's error shape) and becomes the chat completions request it means: `system`
 * a system message, `messages` (content a string or blocks: text, tool_use in assistant
 * turns, tool_result in user turns) the messages, `tools` (name, description,
 * input_schema) and `tool_choice` (auto, any, tool, none) as chat's, `stop_sequences`
 * chat's stop.  That request goes through ls_srv_parse and the same jobs as
 * /v1/chat/completions, so a reply has the bytes the chat request would give.  The
 * replies and the stream's events (message_start, content_block_*, message_delta,
 * message_stop) are shaped here from the job. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

static const char *const KNOWN[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
                                    "temperature", "top_p", "top_k", "tools", "tool_choice", "metadata", "seed",
                                    "thinking", "reasoning_format", "grammar", NULL};

/* A growing string. */
typedef struct {
    char *p;
    size_t n;
    bool oom;
} buf;

static void add(buf *b, const char *s) {
    size_t k = strlen(s);
    char *q = b->oom ? NULL : realloc(b->p, b->n + k + 1);
    if (!q) {
        b->oom = true;
        return;
    }
    memcpy(q + b->n, s, k + 1);
    b->p = q;
    b->n += k;
}

/* Text blocks ({"type": "text", "text", "cache_control"}) or a string, joined into b. */
static ls_status text_blocks(const cJSON *c, const char *path, buf *b, ls_err *err) {
    if (cJSON_IsString(c)) {
        add(b, c->valuestring);
        return LS_OK;
    }
    if (!cJSON_IsArray(c)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be a string or a list of text blocks", path);
    static const char *const TEXT[] = {"type", "text", "cache_control", "citations", NULL};
    int k = 0;
    const cJSON *x;
    char where[96];
    cJSON_ArrayForEach(x, c) {
        snprintf(where, sizeof where, "%s[%d]", path, k++);
        const cJSON *ty = ls_srv_get(x, "type"), *tx = ls_srv_get(x, "text");
        if (!cJSON_IsObject(x) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text"))
            return ls_srv_error(err, LS_E_INVALID, "'%s.type' must be \"text\" here", where);
        ls_status st = ls_srv_keys_in(x, TEXT, where, err);
        if (st) return st;
        if (!cJSON_IsString(tx)) return ls_srv_error(err, LS_E_INVALID, "'%s.text' must be a string", where);
        add(b, tx->valuestring);
    }
    return LS_OK;
}

/* One Anthropic message -> chat messages appended to msgs: a user turn's tool_result
 * blocks become tool messages (in their order, before the turn's text); an assistant
 * turn's text and tool_use blocks become one assistant message with tool_calls.
 * Thinking blocks of earlier turns are dropped (the reasoning templates drop them too). */
static ls_status one_message(const cJSON *m, int i, cJSON *msgs, ls_err *err) {
    char where[64], bw[96];
    snprintf(where, sizeof where, "messages[%d]", i);
    static const char *const MSG[] = {"role", "content", NULL};
    if (!cJSON_IsObject(m)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be an object", where);
    ls_status st = ls_srv_keys_in(m, MSG, where, err);
    if (st) return st;
    const cJSON *role = ls_srv_get(m, "role"), *c = ls_srv_get(m, "content");
    const char *r = cJSON_IsString(role) ? role->valuestring : "";
    bool user = !strcmp(r, "user");
    if (!user && strcmp(r, "assistant"))
        return ls_srv_error(err, LS_E_INVALID, "'%s.role' must be \"user\" or \"assistant\"", where);
    snprintf(bw, sizeof bw, "%s.content", where);
    buf text = {0};
    cJSON *calls = NULL;
    if (cJSON_IsString(c)) {
        add(&text, c->valuestring);
    } else if (cJSON_IsArray(c)) {
        static const char *const TEXT[] = {"type", "text", "cache_control", "citations", NULL},
                                 *const USE[] = {"type", "id", "name", "input", "cache_control", NULL},
                                 *const RES[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL},
                                 *const THINK[] = {"type", "thinking", "signature", "data", NULL};
        int k = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, c) {
            snprintf(bw, sizeof bw, "%s.content[%d]", where, k++);
            const cJSON *ty = ls_srv_get(x, "type");
            const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
            if (!cJSON_IsObject(x)) st = ls_srv_error(err, LS_E_INVALID, "'%s' must be a content block", bw);
            else if (!strcmp(t, "text")) {
                if (!(st = ls_srv_keys_in(x, TEXT, bw, err))) {
                    const cJSON *tx = ls_srv_get(x, "text");
                    if (cJSON_IsString(tx)) add(&text, tx->valuestring);
                    else st = ls_srv_error(err, LS_E_INVALID, "'%s.text' must be a string", bw);
                }
            } else if (!user && !strcmp(t, "tool_use")) {
                if (!(st = ls_srv_keys_in(x, USE, bw, err))) {
                    const cJSON *id = ls_srv_get(x, "id"), *nm = ls_srv_get(x, "name"), *in = ls_srv_get(x, "input");
                    if (!cJSON_IsString(id) || !cJSON_IsString(nm) || !cJSON_IsObject(in)) {
                        st = ls_srv_error(err, LS_E_INVALID, "'%s' needs 'id', 'name' (strings) and 'input' (an object)", bw);
                    } else {
                        if (!calls) calls = cJSON_CreateArray();
                        cJSON *tc = cJSON_CreateObject(), *f;
                        cJSON_AddItemToArray(calls, tc);
                        cJSON_AddStringToObject(tc, "id", id->valuestring);
                        cJSON_AddStringToObject(tc, "type", "function");
                        f = cJSON_AddObjectToObject(tc, "function");
                        cJSON_AddStringToObject(f, "name", nm->valuestring);
                        char *a = cJSON_PrintUnformatted(in);
                        cJSON_AddStringToObject(f, "arguments", a ? a : "{}");
                        free(a);
                    }
                }
            } else if (user && !strcmp(t, "tool_result")) {
                if (!(st = ls_srv_keys_in(x, RES, bw, err))) {
                    const cJSON *id = ls_srv_get(x, "tool_use_id"), *ie = ls_srv_get(x, "is_error");
                    char cw[112];
                    snprintf(cw, sizeof cw, "%s.content", bw);
                    buf res = {0};
                    if (ie && !cJSON_IsBool(ie)) st = ls_srv_error(err, LS_E_INVALID, "'%s.is_error' must be true or false", bw);
                    else if (!cJSON_IsString(id)) st = ls_srv_error(err, LS_E_INVALID, "'%s.tool_use_id' must be a string", bw);
                    else {
                        if (cJSON_IsTrue(ie)) add(&res, "Error: "); /* documented: a failed tool's result says so */
                        st = ls_srv_get(x, "content") ? text_blocks(ls_srv_get(x, "content"), cw, &res, err) : LS_OK;
                    }
                    if (!st) {
                        cJSON *tm = cJSON_CreateObject();
                        cJSON_AddItemToArray(msgs, tm);
                        cJSON_AddStringToObject(tm, "role", "tool");
                        cJSON_AddStringToObject(tm, "tool_call_id", id->valuestring);
                        cJSON_AddStringToObject(tm, "content", res.p ? res.p : "");
                    }
                    if (res.oom) st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                    free(res.p);
                }
            } else if (!user && (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking"))) {
                st = ls_srv_keys_in(x, THINK, bw, err);
            } else {
                st = ls_srv_error(err, LS_E_INVALID, "'%s.type' is '%.40s': lockstep takes text%s blocks here", bw, t,
                                  user ? " and tool_result" : ", tool_use and thinking");
            }
            if (st) break;
        }
    } else {
        st = ls_srv_error(err, LS_E_INVALID, "'%s' must be a string or a list of content blocks", bw);
    }
    if (!st && text.oom) st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
    if (!st && (text.p || calls || !user)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, o);
        cJSON_AddStringToObject(o, "role", r);
        if (text.p || !calls) cJSON_AddStringToObject(o, "content", text.p ? text.p : "");
        else cJSON_AddNullToObject(o, "content");
        if (calls) cJSON_AddItemToObject(o, "tool_calls", calls);
        calls = NULL;
    }
    cJSON_Delete(calls);
    free(text.p);
    return st;
}

static ls_status translate(const cJSON *j, int max_tokens, cJSON *o, ls_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
        if (cJSON_IsNull(v) || ls_srv_in_list(v->string, KNOWN)) continue;
        return ls_srv_error(err, LS_E_INVALID, "unsupported parameter '%.60s': lockstep does not implement it "
                                               "(docs/server.md lists what /v1/messages takes)", v->string);
    }
    static const char *const PASS[] = {"model", "temperature", "top_p", "top_k", "seed", "stream", "reasoning_format", "grammar", NULL};
    for (int i = 0; PASS[i]; i++)
        if ((v = ls_srv_get(j, PASS[i]))) cJSON_AddItemToObject(o, PASS[i], ls_srv_dup_exact(v));
    v = ls_srv_get(j, "max_tokens");
    if (!v) return ls_srv_error(err, LS_E_INVALID, "'max_tokens' is required");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > max_tokens)
        return ls_srv_error(err, LS_E_INVALID, "'max_tokens' must be an integer between 1 and %d", max_tokens);
    cJSON_AddNumberToObject(o, "max_tokens", v->valuedouble);
    if ((v = ls_srv_get(j, "stop_sequences"))) {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        const cJSON *x;
        bool ok = n >= 0 && n <= LS_SRV_MAX_STOP;
        cJSON_ArrayForEach(x, (ok ? v : NULL)) ok = ok && cJSON_IsString(x) && x->valuestring[0] &&
                                                  strlen(x->valuestring) <= LS_SRV_MAX_STOP_LEN;
        if (!ok)
            return ls_srv_error(err, LS_E_INVALID, "'stop_sequences' must be a list of at most %d non-empty strings of at "
                                                   "most %d bytes", LS_SRV_MAX_STOP, LS_SRV_MAX_STOP_LEN);
        if (n) cJSON_AddItemToObject(o, "stop", cJSON_Duplicate(v, true));
    }
    if ((v = ls_srv_get(j, "metadata"))) {
        static const char *const MD[] = {"user_id", NULL};
        if (!cJSON_IsObject(v)) return ls_srv_error(err, LS_E_INVALID, "'metadata' must be an object");
        ls_status st = ls_srv_keys_in(v, MD, "metadata", err);
        if (st) return st;
        const cJSON *u = ls_srv_get(v, "user_id");
        if (u && !cJSON_IsString(u)) return ls_srv_error(err, LS_E_INVALID, "'metadata.user_id' must be a string");
    }
    if ((v = ls_srv_get(j, "thinking"))) {
        const cJSON *ty = ls_srv_get(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "disabled") || cJSON_GetArraySize(v) != 1)
            return ls_srv_error(err, LS_E_INVALID, "'thinking' must be {\"type\": \"disabled\"}: lockstep has no thinking "
                                                   "budget (a reasoning model's think block comes back as a thinking "
                                                   "block; reasoning_format \"none\" keeps it in the text)");
    }
    cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
    if ((v = ls_srv_get(j, "system"))) {
        buf b = {0};
        ls_status st = text_blocks(v, "system", &b, err);
        if (!st && b.oom) st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
        if (!st) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddItemToArray(msgs, m);
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", b.p ? b.p : "");
        }
        free(b.p);
        if (st) return st;
    }
    const cJSON *ms = ls_srv_get(j, "messages");
    if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms))
        return ls_srv_error(err, LS_E_INVALID, "'messages' must be a non-empty list");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        ls_status st = one_message(m, i++, msgs, err);
        if (st) return st;
    }
    if ((v = ls_srv_get(j, "tools"))) {
        if (!cJSON_IsArray(v)) return ls_srv_error(err, LS_E_INVALID, "'tools' must be a list of tools");
        static const char *const TOOL[] = {"name", "description", "input_schema", "type", "cache_control", NULL};
        cJSON *ct = cJSON_AddArrayToObject(o, "tools");
        int k = 0;
        const cJSON *t;
        char where[48];
        cJSON_ArrayForEach(t, v) {
            snprintf(where, sizeof where, "tools[%d]", k++);
            const cJSON *ty = ls_srv_get(t, "type"), *nm = ls_srv_get(t, "name"), *sc = ls_srv_get(t, "input_schema"), *d = ls_srv_get(t, "description");
            if (!cJSON_IsObject(t)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be an object", where);
            if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "custom")))
                return ls_srv_error(err, LS_E_INVALID, "'%s.type' must be \"custom\" (lockstep runs client tools only)", where);
            ls_status st = ls_srv_keys_in(t, TOOL, where, err);
            if (st) return st;
            if (!cJSON_IsString(nm) || !nm->valuestring[0])
                return ls_srv_error(err, LS_E_INVALID, "'%s.name' must be a non-empty string", where);
            if (!cJSON_IsObject(sc)) return ls_srv_error(err, LS_E_INVALID, "'%s.input_schema' must be a JSON Schema object", where);
            if (d && !cJSON_IsString(d)) return ls_srv_error(err, LS_E_INVALID, "'%s.description' must be a string", where);
            cJSON *w = cJSON_CreateObject(), *f;
            cJSON_AddItemToArray(ct, w);
            cJSON_AddStringToObject(w, "type", "function");
            f = cJSON_AddObjectToObject(w, "function");
            cJSON_AddStringToObject(f, "name", nm->valuestring);
            if (d) cJSON_AddStringToObject(f, "description", d->valuestring);
            cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(sc, true));
        }
    }
    if ((v = ls_srv_get(j, "tool_choice"))) {
        static const char *const TC[] = {"type", "name", "disable_parallel_tool_use", NULL};
        const cJSON *ty = ls_srv_get(v, "type"), *nm = ls_srv_get(v, "name"), *dp = ls_srv_get(v, "disable_parallel_tool_use");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        if (!cJSON_IsObject(v) || (strcmp(t, "auto") && strcmp(t, "any") && strcmp(t, "tool") && strcmp(t, "none")))
            return ls_srv_error(err, LS_E_INVALID, "'tool_choice.type' must be auto, any, tool or none");
        ls_status st = ls_srv_keys_in(v, TC, "tool_choice", err);
        if (st) return st;
        if (dp && !cJSON_IsBool(dp))
            return ls_srv_error(err, LS_E_INVALID, "'tool_choice.disable_parallel_tool_use' must be true or false");
        if (!strcmp(t, "tool")) {
            if (!cJSON_IsString(nm)) return ls_srv_error(err, LS_E_INVALID, "'tool_choice.name' must be a string");
            cJSON *w = cJSON_AddObjectToObject(o, "tool_choice");
            cJSON_AddStringToObject(w, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(w, "function"), "name", nm->valuestring);
        } else {
            if (nm) return ls_srv_error(err, LS_E_INVALID, "'tool_choice.name' is only for type \"tool\"");
            cJSON_AddStringToObject(o, "tool_choice", !strcmp(t, "any") ? "required" : t);
        }
        if (dp) cJSON_AddBoolToObject(o, "parallel_tool_calls", !cJSON_IsTrue(dp));
    }
    return LS_OK;
}

/* ---- replies ---------------------------------------------------------------------- */
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

static cJSON *thinking_block(cJSON *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "thinking");
    cJSON_AddItemToObject(b, "thinking", text ? text : cJSON_CreateString(""));
    cJSON_AddStringToObject(b, "signature", ""); /* nothing to verify: the thinking is the model's text */
    return b;
}

static cJSON *text_block(cJSON *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddItemToObject(b, "text", text ? text : cJSON_CreateString(""));
    return b;
}

/* The finished reply's content blocks: thinking (a think block), text, tool_use. */
static cJSON *content_blocks(const job *j, bool *called) {
    cJSON *out = cJSON_CreateArray();
    ls_srv_split sp;
    ls_srv_think_split(j->text, j->text_len, true, j->req.reasoning, &sp);
    *called = false;
    if (sp.think) cJSON_AddItemToArray(out, thinking_block(span(j, sp.r0, sp.r1)));
    if (!j->req.n_tools) {
        if (sp.c1 > sp.c0 || !sp.think) cJSON_AddItemToArray(out, text_block(span(j, sp.c0, sp.c1)));
        return out;
    }
    char *content = NULL;
    cJSON *calls = NULL, *c;
    ls_srv_tools_parse(j->text ? j->text + sp.c0 : "", sp.c1 - sp.c0, (ls_srv_tool_format)j->req.tool_format, j->id,
                       &content, &calls);
    if ((content && content[0]) || (!calls && !sp.think))
        cJSON_AddItemToArray(out, text_block(cJSON_CreateString(content ? content : "")));
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const char *args = cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring;
        cJSON *b = cJSON_CreateObject(), *in = cJSON_Parse(args);
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring);
        cJSON_AddStringToObject(b, "name", cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
        if (!cJSON_IsObject(in)) { /* input is an object: other JSON is wrapped (a grammar-bound call is one) */
            cJSON *w = cJSON_CreateObject();
            if (in) cJSON_AddItemToObject(w, "value", in);
            in = w;
        }
        cJSON_AddItemToObject(b, "input", in);
        cJSON_AddItemToArray(out, b);
        *called = true;
    }
    cJSON_Delete(calls);
    free(content);
    return out;
}

static const char *stop_reason(const job *j, bool called) {
    if (called) return "tool_use";
    if (j->finish == LS_FINISH_LENGTH) return "max_tokens";
    return !j->stop_eos && j->req.n_stop > 0 ? "stop_sequence" : "end_turn";
}

/* stop_sequence: which one matched is not reported by the engine: named when there is one. */
static void add_stop_sequence(cJSON *o, const job *j, const char *reason) {
    if (!strcmp(reason, "stop_sequence") && j->req.n_stop == 1) cJSON_AddStringToObject(o, "stop_sequence", j->req.stop[0]);
    else cJSON_AddNullToObject(o, "stop_sequence");
}

static void add_replay(cJSON *o, const job *j) {
    char fp[128], sd[32];
    ls_srv_fingerprint(j->srv, fp, sizeof fp);
    cJSON_AddStringToObject(o, "system_fingerprint", fp); /* extensions: the replay fields */
    snprintf(sd, sizeof sd, "%lld", (long long)j->req.seed);
    cJSON_AddRawToObject(o, "seed", sd);
}

static cJSON *usage(const job *j, bool done) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", done ? j->n_cached : 0);
    cJSON_AddNumberToObject(u, "output_tokens", done ? j->n_tokens : 0);
    return u;
}

static cJSON *message_obj(const job *j, bool done) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    bool called = false;
    cJSON_AddItemToObject(o, "content", done ? content_blocks(j, &called) : cJSON_CreateArray());
    if (done) {
        const char *r = stop_reason(j, called);
        cJSON_AddStringToObject(o, "stop_reason", r);
        add_stop_sequence(o, j, r);
    } else {
        cJSON_AddNullToObject(o, "stop_reason");
        cJSON_AddNullToObject(o, "stop_sequence");
    }
    cJSON_AddItemToObject(o, "usage", usage(j, done));
    add_replay(o, j);
    return o;
}

static cJSON *response(const job *j) { return message_obj(j, true); }

/* ---- the stream ------------------------------------------------------------------- */
static cJSON *evo(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static void emit(char **out, cJSON *o) {
    char name[48];
    snprintf(name, sizeof name, "%s", cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring);
    ls_srv_cat(out, ls_srv_sse_event(name, o));
}

static void block_start(job *j, char **out, cJSON *block) {
    cJSON *o = evo("content_block_start");
    cJSON_AddNumberToObject(o, "index", j->ev_index++);
    cJSON_AddItemToObject(o, "content_block", block);
    emit(out, o);
}

static void block_delta(job *j, char **out, const char *type, const char *field, cJSON *text) {
    cJSON *o = evo("content_block_delta"), *d;
    cJSON_AddNumberToObject(o, "index", j->ev_index - 1);
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", type);
    cJSON_AddItemToObject(d, field, text);
    emit(out, o);
}

static void block_stop(job *j, char **out) {
    cJSON *o = evo("content_block_stop");
    cJSON_AddNumberToObject(o, "index", j->ev_index - 1);
    emit(out, o);
    j->ev_open = 0;
}

static char *stream_events(job *j) {
    char *out = NULL;
    if (!j->ev_began) {
        j->ev_began = true;
        cJSON *o = evo("message_start");
        cJSON_AddItemToObject(o, "message", message_obj(j, false));
        emit(&out, o);
    }
    bool called = false;
    if (j->done && (j->finish == LS_FINISH_ERROR || j->finish == LS_FINISH_CANCELLED)) {
        cJSON *o = evo("error"), *e = cJSON_AddObjectToObject(o, "error");
        bool cut = j->finish == LS_FINISH_CANCELLED;
        cJSON_AddStringToObject(e, "type", cut ? "overloaded_error" : "api_error");
        cJSON_AddStringToObject(e, "message", cut ? "the server shut down before this request finished; retry it on "
                                                    "another replica"
                                                  : "the server could not go on generating (out of memory, or the "
                                                    "grammar's token mask went over its work budget)");
        emit(&out, o);
        return out;
    }
    if (j->req.n_tools) { /* the reply is parsed whole: every block at the end */
        if (!j->done) return out;
        cJSON *blocks = content_blocks(j, &called), *b;
        cJSON_ArrayForEach(b, blocks) {
            const char *ty = cJSON_GetObjectItemCaseSensitive(b, "type")->valuestring;
            if (!strcmp(ty, "tool_use")) {
                cJSON *st = cJSON_Duplicate(b, true), *in = cJSON_GetObjectItemCaseSensitive(b, "input");
                cJSON_ReplaceItemInObject(st, "input", cJSON_CreateObject());
                block_start(j, &out, st);
                char *a = cJSON_PrintUnformatted(in);
                block_delta(j, &out, "input_json_delta", "partial_json", cJSON_CreateString(a ? a : "{}"));
                free(a);
            } else {
                bool th = !strcmp(ty, "thinking");
                const char *f = th ? "thinking" : "text";
                const char *txt = cJSON_GetObjectItemCaseSensitive(b, f)->valuestring;
                block_start(j, &out, th ? thinking_block(NULL) : text_block(NULL));
                if (txt[0]) block_delta(j, &out, th ? "thinking_delta" : "text_delta", f, cJSON_CreateString(txt));
            }
            block_stop(j, &out);
        }
        cJSON_Delete(blocks);
    } else {
        ls_srv_split sp;
        ls_srv_think_split(j->text, j->text_len, j->done, j->req.reasoning, &sp);
        if (sp.think && j->ev_index == 0) {
            block_start(j, &out, thinking_block(NULL));
            j->ev_open = 1;
        }
        size_t nr = sp.r1 - sp.r0 > j->sent_r ? sp.r1 - sp.r0 - j->sent_r : 0,
               nc = sp.c1 - sp.c0 > j->sent_c ? sp.c1 - sp.c0 - j->sent_c : 0;
        if (nr) {
            block_delta(j, &out, "thinking_delta", "thinking", span(j, sp.r0 + j->sent_r, sp.r1));
            j->sent_r += nr;
        }
        if ((nc || (j->done && !sp.think)) && j->ev_open != 2) { /* the text block opens */
            if (j->ev_open == 1) block_stop(j, &out);
            block_start(j, &out, text_block(NULL));
            j->ev_open = 2;
        }
        if (nc) {
            block_delta(j, &out, "text_delta", "text", span(j, sp.c0 + j->sent_c, sp.c1));
            j->sent_c += nc;
        }
        if (j->done && j->ev_open) block_stop(j, &out);
    }
    if (j->done) {
        cJSON *o = evo("message_delta"), *d = cJSON_AddObjectToObject(o, "delta");
        const char *r = stop_reason(j, called);
        cJSON_AddStringToObject(d, "stop_reason", r);
        add_stop_sequence(d, j, r);
        cJSON_AddItemToObject(o, "usage", usage(j, true));
        emit(&out, o);
        emit(&out, evo("message_stop"));
    }
    return out;
}

static const ls_srv_api API = {LS_API_MESSAGES, "msg", response, stream_events};

enum MHD_Result ls_srv_messages(server *s, struct MHD_Connection *c, conn *cn) {
    ls_err err;
    cJSON *j = ls_srv_json_parse(cn->body ? cn->body : "", cn->len, &err);
    if (!j) return ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    cJSON *o = cJSON_CreateObject();
    ls_status st = o ? translate(j, s->p->max_tokens, o, &err) : ls_srv_error(&err, LS_E_NOMEM, "out of memory");
    cJSON_Delete(j);
    char *t = st ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (st || !t) {
        if (!st) ls_srv_error(&err, LS_E_NOMEM, "out of memory");
        return ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    }
    free(cn->body);
    cn->body = t;
    cn->len = cn->cap = strlen(t);
    cn->api = &API;
    return ls_srv_generate(s, c, cn, true, "/v1/messages");
}
