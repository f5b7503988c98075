/* request.c - OpenAI request JSON -> ls_srv_req (see request.h). */
#include "server/request.h"
#include "server/tools.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>


ls_status ls_srv_error(ls_err *err, ls_status code, const char *fmt, ...) {
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

void ls_srv_req_free(ls_srv_req *r) {
    if (!r) return;
    free(r->prompt);
    free(r->logit_bias);
    free(r->prompt_ids);
    free(r->tools_json);
    for (int32_t i = 0; i < r->n_prompts && r->prompts; i++) free(r->prompts[i]);
    free(r->prompts);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* A number field within [lo, hi]; absent or null leaves *out alone. */
static ls_status num_field(const cJSON *o, const char *name, double lo, double hi, bool integer, double *out,
                           ls_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return LS_OK;
    if (!cJSON_IsNumber(v)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be a number", name);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi)
        return ls_srv_error(err, LS_E_INVALID, "'%s' is %g; it must be between %g and %g", name, x, lo, hi);
    if (integer && x != floor(x)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be an integer", name);
    *out = x;
    return LS_OK;
}

static ls_status bool_field(const cJSON *o, const char *name, bool *out, ls_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return LS_OK;
    if (!cJSON_IsBool(v)) return ls_srv_error(err, LS_E_INVALID, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return LS_OK;
}

/* The body's top-level keys, each one the server acts on; any other key that is not
 * null is refused by name (never ignored).  `also` holds keys accepted only at a value
 * that asks for nothing (checked by refuse_inert). */
static const char *const KNOWN_COMMON[] = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n",
    "stream", "stream_options", "logprobs", "top_logprobs", "stop", "ignore_eos", "user", "logit_bias",
    "frequency_penalty", "presence_penalty", "repeat_penalty", "repeat_last_n", "response_format", "grammar",
    "json_schema", NULL};

static bool is_known(const char *k, bool chat) {
    for (int i = 0; KNOWN_COMMON[i]; i++)
        if (!strcmp(k, KNOWN_COMMON[i])) return true;
    return chat ? !strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "tool_choice") ||
                      !strcmp(k, "parallel_tool_calls") || !strcmp(k, "chat_template_kwargs") ||
                      !strcmp(k, "reasoning_format")
                : !strcmp(k, "prompt") || !strcmp(k, "echo");
}

/* Keys the server does not implement but accepts at the value that means "none of it". */
static bool inert(const char *k, const cJSON *v) {
    if (!strcmp(k, "echo") || !strcmp(k, "parallel_tool_calls")) return cJSON_IsFalse(v);
    if (!strcmp(k, "best_of")) return cJSON_IsNumber(v) && v->valuedouble == 1;
    if (!strcmp(k, "suffix")) return cJSON_IsString(v) && !v->valuestring[0];
    if (!strcmp(k, "tools")) return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0;
    if (!strcmp(k, "tool_choice")) return cJSON_IsString(v) && !strcmp(v->valuestring, "none");
    return false;
}

static ls_status check_keys(const cJSON *j, bool chat, ls_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
        if (!v->string || cJSON_IsNull(v) || is_known(v->string, chat) || inert(v->string, v)) continue;
        return ls_srv_error(err, LS_E_INVALID,
                            "unsupported parameter '%.60s': lockstep does not implement it (docs/server.md lists "
                            "what it does)", v->string);
    }
    return LS_OK;
}

/* chat_template_kwargs (vLLM's, llama-server's): the template variables lockstep's
 * templates read, each checked; any other key is refused by name. */
static ls_status parse_template_kwargs(const cJSON *j, ls_chat_opts *o, ls_err *err) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(j, "chat_template_kwargs");
    if (!kw || cJSON_IsNull(kw)) return LS_OK;
    if (!cJSON_IsObject(kw)) return ls_srv_error(err, LS_E_INVALID, "'chat_template_kwargs' must be an object");
    const cJSON *v;
    cJSON_ArrayForEach(v, kw) {
        if (!strcmp(v->string, "enable_thinking")) {
            if (!cJSON_IsBool(v))
                return ls_srv_error(err, LS_E_INVALID, "'chat_template_kwargs.enable_thinking' must be true or false");
            o->enable_thinking = cJSON_IsTrue(v) ? 1 : 0;
        } else {
            return ls_srv_error(err, LS_E_INVALID,
                                "unsupported 'chat_template_kwargs.%.60s': the templates read only enable_thinking",
                                v->string);
        }
    }
    return LS_OK;
}

/* The output constraint: response_format (OpenAI: text, json_object, json_schema), or
 * llama-server's grammar (GBNF text) or json_schema (a schema) -> r->grammar (GBNF),
 * checked by compiling it, so a bad one is a 400 naming the problem. */
static ls_status parse_constraint(const cJSON *j, ls_srv_req *r, ls_err *err) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(j, "response_format"),
                *gr = cJSON_GetObjectItemCaseSensitive(j, "grammar"), *js = cJSON_GetObjectItemCaseSensitive(j, "json_schema");
    if (rf && cJSON_IsNull(rf)) rf = NULL;
    if (gr && cJSON_IsNull(gr)) gr = NULL;
    if (js && cJSON_IsNull(js)) js = NULL;
    if (!!rf + !!gr + !!js > 1)
        return ls_srv_error(err, LS_E_INVALID, "give only one of 'response_format', 'grammar' and 'json_schema'");
    const cJSON *schema = NULL;
    const char *what = "json_schema";
    if (gr) {
        if (!cJSON_IsString(gr)) return ls_srv_error(err, LS_E_INVALID, "'grammar' must be a string (GBNF)");
        if (gr->valuestring[0] && !(r->grammar = dup_str(gr->valuestring)))
            return ls_srv_error(err, LS_E_NOMEM, "out of memory");
        what = "grammar";
    } else if (js) {
        if (!cJSON_IsObject(js) && !cJSON_IsBool(js))
            return ls_srv_error(err, LS_E_INVALID, "'json_schema' must be a JSON Schema (an object)");
        schema = js;
    } else if (rf) {
        const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(t))
            return ls_srv_error(err, LS_E_INVALID, "'response_format' must be an object with a 'type' (text, json_object "
                                                   "or json_schema)");
        const cJSON *k;
        const char *ty = t->valuestring;
        if (!strcmp(ty, "text")) {
            cJSON_ArrayForEach(k, rf) if (strcmp(k->string, "type"))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.%.40s' is not a field of type text", k->string);
        } else if (!strcmp(ty, "json_object")) { /* llama-server also takes a "schema" here */
            cJSON_ArrayForEach(k, rf) if (strcmp(k->string, "type") && strcmp(k->string, "schema"))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.%.40s' is not a field of type json_object",
                                    k->string);
            schema = cJSON_GetObjectItemCaseSensitive(rf, "schema");
            what = "response_format.schema";
            if (!schema && !(r->grammar = dup_str(ls_json_object_gbnf())))
                return ls_srv_error(err, LS_E_NOMEM, "out of memory");
        } else if (!strcmp(ty, "json_schema")) {
            cJSON_ArrayForEach(k, rf) if (strcmp(k->string, "type") && strcmp(k->string, "json_schema"))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.%.40s' is not a field of type json_schema",
                                    k->string);
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            if (!cJSON_IsObject(o))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.json_schema' must be an object with a 'schema'");
            cJSON_ArrayForEach(k, o) {
                const char *n = k->string;
                if (strcmp(n, "name") && strcmp(n, "schema") && strcmp(n, "strict") && strcmp(n, "description"))
                    return ls_srv_error(err, LS_E_INVALID, "'response_format.json_schema.%.40s' is not a known field "
                                                           "(name, description, schema, strict)", n);
            }
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name"), *strict = cJSON_GetObjectItemCaseSensitive(o, "strict");
            if (nm && !cJSON_IsString(nm))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.json_schema.name' must be a string");
            if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.json_schema.strict' must be true or false");
            if (!(schema = cJSON_GetObjectItemCaseSensitive(o, "schema")))
                return ls_srv_error(err, LS_E_INVALID, "'response_format.json_schema.schema' is required");
            what = "response_format.json_schema.schema";
        } else {
            return ls_srv_error(err, LS_E_INVALID, "'response_format.type' is '%.40s'; use text, json_object or json_schema",
                                ty);
        }
    }
    if (schema) {
        ls_err e2 = {0};
        char *text = cJSON_PrintUnformatted(schema);
        if (!text) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
        r->grammar = ls_json_schema_to_gbnf(text, strlen(text), &e2);
        free(text);
        if (!r->grammar)
            return ls_srv_error(err, e2.code == LS_E_NOMEM ? LS_E_NOMEM : LS_E_INVALID, "'%s': %s", what, e2.msg);
    }
    if (r->grammar) {
        ls_err e2 = {0};
        if (ls_grammar_check(r->grammar, strlen(r->grammar), &e2))
            return ls_srv_error(err, e2.code == LS_E_NOMEM ? LS_E_NOMEM : LS_E_INVALID, "'%s': %s", what, e2.msg);
    }
    return LS_OK;
}

static int bias_cmp(const void *a, const void *b) {
    const ls_logit_bias *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* logit_bias: {"token id": bias in [-100, 100], ...} -> r->logit_bias, ids ascending. */
static ls_status parse_bias(const cJSON *o, int32_t n_vocab, ls_srv_req *r, ls_err *err) {
    if (!cJSON_IsObject(o)) return ls_srv_error(err, LS_E_INVALID, "'logit_bias' must be an object of token id: bias");
    int n = cJSON_GetArraySize(o);
    if (n == 0) return LS_OK;
    if (n > 4096) return ls_srv_error(err, LS_E_INVALID, "'logit_bias' has %d entries; the limit is 4096", n);
    if (!(r->logit_bias = calloc((size_t)n, sizeof *r->logit_bias))) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    const cJSON *v;
    int i = 0;
    cJSON_ArrayForEach(v, o) {
        const char *k = v->string;
        char *end = NULL;
        long id = k && *k >= '0' && *k <= '9' ? strtol(k, &end, 10) : -1;
        if (id < 0 || !end || *end || id > INT32_MAX || (n_vocab > 0 && id >= n_vocab))
            return ls_srv_error(err, LS_E_INVALID, "'logit_bias' key '%.40s' is not a token id of this model%s", k ? k : "",
                                n_vocab > 0 ? " (0 .. vocabulary size - 1)" : "");
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < -100 || v->valuedouble > 100)
            return ls_srv_error(err, LS_E_INVALID, "'logit_bias[%ld]' must be a number between -100 and 100", id);
        r->logit_bias[i++] = (ls_logit_bias){(int32_t)id, (float)v->valuedouble};
    }
    qsort(r->logit_bias, (size_t)n, sizeof *r->logit_bias, bias_cmp);
    for (int k = 1; k < n; k++)
        if (r->logit_bias[k].id == r->logit_bias[k - 1].id)
            return ls_srv_error(err, LS_E_INVALID, "'logit_bias' names token %d twice", r->logit_bias[k].id);
    r->n_logit_bias = n;
    return LS_OK;
}

ls_sampler_params ls_srv_sampling(const ls_srv_req *r) {
    return (ls_sampler_params){.temperature = r->temperature, .top_k = r->top_k, .top_p = r->top_p,
                               .seed = (uint64_t)r->seed, .logit_bias = r->logit_bias,
                               .n_logit_bias = r->n_logit_bias, .repeat_penalty = r->repeat_penalty,
                               .repeat_last_n = r->repeat_last_n, .frequency_penalty = r->frequency_penalty,
                               .presence_penalty = r->presence_penalty, .min_p = r->min_p};
}

int64_t ls_srv_choice_seed(int64_t seed, int32_t i) {
    if (i == 0) return seed;
    uint64_t z = (uint64_t)seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (int64_t)((z ^ (z >> 31)) & ((1ull << 53) - 1));
}

/* A seed for a request that gave none: 53 bits from the OS (exact as a JSON number). */
static ls_status random_seed(int64_t *out, ls_err *err) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        return ls_srv_error(err, LS_E_IO, "could not draw a random seed from the OS");
    *out = (int64_t)(x & ((1ull << 53) - 1));
    return LS_OK;
}

static ls_status add_stop(ls_srv_req *r, const cJSON *s, ls_err *err) {
    if (!cJSON_IsString(s)) return ls_srv_error(err, LS_E_INVALID, "'stop' must be a string or a list of strings");
    size_t n = strlen(s->valuestring);
    if (n == 0) return ls_srv_error(err, LS_E_INVALID, "'stop' strings must not be empty");
    if (n > LS_SRV_MAX_STOP_LEN)
        return ls_srv_error(err, LS_E_INVALID, "a 'stop' string is %zu bytes; the limit is %d", n, LS_SRV_MAX_STOP_LEN);
    if (r->n_stop == LS_SRV_MAX_STOP)
        return ls_srv_error(err, LS_E_INVALID, "'stop' has more than %d strings", LS_SRV_MAX_STOP);
    if (!(r->stop[r->n_stop] = dup_str(s->valuestring))) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    r->n_stop++;
    return LS_OK;
}

/* Every key of an object the server reads is one it acts on: `allowed` (NULL-ended); a
 * key whose value is null is taken as absent.  what: the object's JSON path. */
static ls_status only_keys(const cJSON *o, const char *const *allowed, const char *what, ls_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        if (cJSON_IsNull(v)) continue;
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++) ok = !strcmp(v->string, allowed[i]);
        if (!ok)
            return ls_srv_error(err, LS_E_INVALID, "unsupported parameter '%s.%.60s': lockstep does not implement it "
                                                   "(it is refused rather than ignored)", what, v->string);
    }
    return LS_OK;
}

/* messages[i]: role, content, and for the tool flow tool_calls / tool_call_id (their
 * values are checked by server/tools.c); content parts {type, text}; a tool call {id,
 * type, function {name, arguments}}.  `name` (a participant's name) is refused: the
 * chat templates have no place for it, and dropping it would change the conversation. */
static ls_status check_message_keys(const cJSON *msgs, ls_err *err) {
    static const char *const MSG[] = {"role", "content", "tool_calls", "tool_call_id", NULL},
                             *const PART[] = {"type", "text", NULL}, *const CALL[] = {"id", "type", "function", NULL},
                             *const FN[] = {"name", "arguments", NULL};
    char what[96];
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        snprintf(what, sizeof what, "messages[%d]", i);
        ls_status st = cJSON_IsObject(m) ? only_keys(m, MSG, what, err) : LS_OK;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content"), *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *x;
        int k = 0;
        if (cJSON_IsArray(c)) cJSON_ArrayForEach(x, c) {
                snprintf(what, sizeof what, "messages[%d].content[%d]", i, k++);
                if (!st && cJSON_IsObject(x)) st = only_keys(x, PART, what, err);
            }
        k = 0;
        if (cJSON_IsArray(tc)) cJSON_ArrayForEach(x, tc) {
                snprintf(what, sizeof what, "messages[%d].tool_calls[%d]", i, k);
                if (!st && cJSON_IsObject(x)) st = only_keys(x, CALL, what, err);
                const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function");
                snprintf(what, sizeof what, "messages[%d].tool_calls[%d].function", i, k++);
                if (!st && cJSON_IsObject(f)) st = only_keys(f, FN, what, err);
            }
        if (st) return st;
        i++;
    }
    return LS_OK;
}

/* tool_choice {"type": "function", "function": {"name": ...}} */
static ls_status check_tool_choice_keys(const cJSON *tch, ls_err *err) {
    static const char *const TC[] = {"type", "function", NULL}, *const FN[] = {"name", NULL};
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(tch, "type");
    if (ty && !cJSON_IsNull(ty) && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function")))
        return ls_srv_error(err, LS_E_INVALID, "'tool_choice.type' must be \"function\"");
    ls_status st = only_keys(tch, TC, "tool_choice", err);
    return st ? st : only_keys(cJSON_GetObjectItemCaseSensitive(tch, "function"), FN, "tool_choice.function", err);
}

/* ---- strict JSON (ls_srv_json_parse) ------------------------------------------------ */
typedef struct {
    const unsigned char *b;
    size_t n, i;
    int top; /* containers around the current value: path[0 .. top) */
    struct {
        const unsigned char *key; /* NULL: an array element */
        size_t klen;
        int idx;
    } path[LS_SRV_JSON_DEPTH + 1];
    ls_err *err;
} jscan;

/* The current place as a JSON path (messages[1].content); "" at the top. */
static void jpath(const jscan *s, char *out, size_t cap) {
    size_t o = 0;
    for (int d = 0; d < s->top && o + 16 < cap; d++) {
        if (!s->path[d].key) {
            int w = snprintf(out + o, cap - o, "[%d]", s->path[d].idx);
            o += w > 0 ? (size_t)w : 0;
            continue;
        }
        if (d) out[o++] = '.';
        for (size_t k = 0; k < s->path[d].klen && k < 48 && o + 16 < cap; k++) {
            unsigned char ch = s->path[d].key[k];
            out[o++] = ch < 0x20 || ch >= 0x7f || ch == '\'' || ch == '\\' || ch == '"' ? '?' : (char)ch;
        }
    }
    out[o < cap ? o : cap - 1] = 0;
}

static bool jsyntax(jscan *s, const char *what) {
    ls_srv_error(s->err, LS_E_INVALID, "the body is not valid JSON: %s at byte %zu", what, s->i);
    return false;
}

/* A string (a value, or a key of the object at the current place) that is refused. */
static bool jstr_fail(jscan *s, bool key, const char *what) {
    char p[200];
    jpath(s, p, sizeof p);
    if (key && p[0]) ls_srv_error(s->err, LS_E_INVALID, "a key in '%s' %s", p, what);
    else if (key) ls_srv_error(s->err, LS_E_INVALID, "a key of the body %s", what);
    else if (p[0]) ls_srv_error(s->err, LS_E_INVALID, "'%s' %s", p, what);
    else ls_srv_error(s->err, LS_E_INVALID, "the body %s", what);
    return false;
}

static void jws(jscan *s) {
    while (s->i < s->n && (s->b[s->i] == ' ' || s->b[s->i] == '\t' || s->b[s->i] == '\n' || s->b[s->i] == '\r'))
        s->i++;
}

static bool jhex4(const jscan *s, size_t at, unsigned *u) {
    if (at + 4 > s->n) return false;
    *u = 0;
    for (size_t k = at; k < at + 4; k++) {
        unsigned char c = s->b[k];
        unsigned v = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a') + 10u
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A') + 10u
                                            : 16u;
        if (v > 15) return false;
        *u = *u * 16 + v;
    }
    return true;
}

static bool jstring(jscan *s, bool key) {
    char what[160];
    s->i++; /* the opening quote */
    while (s->i < s->n) {
        unsigned char c = s->b[s->i];
        if (c == '"') {
            s->i++;
            return true;
        }
        if (c == '\\') {
            if (s->i + 1 >= s->n) break;
            unsigned char e = s->b[s->i + 1];
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                s->i += 2;
                continue;
            }
            unsigned u, lo;
            if (e != 'u' || !jhex4(s, s->i + 2, &u)) return jsyntax(s, "a bad escape in a string");
            if (u == 0) return jstr_fail(s, key, "contains a NUL character (\\u0000), which is not accepted");
            if (u >= 0xDC00 && u <= 0xDFFF) return jstr_fail(s, key, "has an unpaired UTF-16 surrogate escape");
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (s->i + 12 > s->n || s->b[s->i + 6] != '\\' || s->b[s->i + 7] != 'u' || !jhex4(s, s->i + 8, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return jstr_fail(s, key, "has an unpaired UTF-16 surrogate escape");
                s->i += 12;
                continue;
            }
            s->i += 6;
            continue;
        }
        if (c < 0x20) {
            if (c == 0)
                return jstr_fail(s, key, "contains a raw NUL byte, which is not accepted (JSON strings must escape "
                                         "control characters)");
            snprintf(what, sizeof what, "contains a raw control character (0x%02x): JSON strings must escape them", c);
            return jstr_fail(s, key, what);
        }
        size_t l = c < 0x80 ? 1 : ls_utf8_valid_len(s->b + s->i, s->n - s->i);
        if (!l) {
            snprintf(what, sizeof what, "is not valid UTF-8 (byte 0x%02x at byte %zu of the body)", c, s->i);
            return jstr_fail(s, key, what);
        }
        s->i += l;
    }
    return jsyntax(s, "an unterminated string");
}

static bool jdigits(jscan *s) {
    size_t from = s->i;
    while (s->i < s->n && s->b[s->i] >= '0' && s->b[s->i] <= '9') s->i++;
    return s->i > from;
}

static bool jvalue(jscan *s);

static bool jcontainer(jscan *s, bool obj) {
    if (s->top >= LS_SRV_JSON_DEPTH) {
        char p[200];
        jpath(s, p, sizeof p);
        ls_srv_error(s->err, LS_E_INVALID, "the body nests objects and arrays deeper than %d levels (at '%s')",
                     LS_SRV_JSON_DEPTH, p);
        return false;
    }
    s->i++;
    jws(s);
    if (s->i < s->n && s->b[s->i] == (obj ? '}' : ']')) {
        s->i++;
        return true;
    }
    for (int idx = 0;; idx++) {
        if (obj) {
            jws(s);
            if (s->i >= s->n || s->b[s->i] != '"') return jsyntax(s, "expected a key (a string)");
            size_t k0 = s->i + 1;
            if (!jstring(s, true)) return false;
            s->path[s->top].key = s->b + k0;
            s->path[s->top].klen = s->i - 1 - k0;
            jws(s);
            if (s->i >= s->n || s->b[s->i] != ':') return jsyntax(s, "expected ':' after a key");
            s->i++;
        } else {
            s->path[s->top].key = NULL;
            s->path[s->top].idx = idx;
        }
        s->top++;
        if (!jvalue(s)) return false;
        s->top--;
        jws(s);
        if (s->i < s->n && s->b[s->i] == ',') {
            s->i++;
            continue;
        }
        if (s->i < s->n && s->b[s->i] == (obj ? '}' : ']')) {
            s->i++;
            return true;
        }
        return jsyntax(s, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool jvalue(jscan *s) {
    jws(s);
    if (s->i >= s->n) return jsyntax(s, "the body ends early");
    unsigned char c = s->b[s->i];
    if (c == '{' || c == '[') return jcontainer(s, c == '{');
    if (c == '"') return jstring(s, false);
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (c == '-') s->i++;
        if (s->i < s->n && s->b[s->i] == '0') s->i++;
        else if (!jdigits(s)) return jsyntax(s, "a bad number");
        if (s->i < s->n && s->b[s->i] == '.') {
            s->i++;
            if (!jdigits(s)) return jsyntax(s, "a bad number");
        }
        if (s->i < s->n && (s->b[s->i] == 'e' || s->b[s->i] == 'E')) {
            s->i++;
            if (s->i < s->n && (s->b[s->i] == '+' || s->b[s->i] == '-')) s->i++;
            if (!jdigits(s)) return jsyntax(s, "a bad number");
        }
        return true;
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (s->n - s->i >= l && !memcmp(s->b + s->i, lits[k], l)) {
            s->i += l;
            return true;
        }
    }
    return jsyntax(s, "an unexpected character");
}

static int key_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void path_add(char *path, size_t cap, const cJSON *v, int idx) {
    size_t o = strlen(path);
    if (o + 16 >= cap) return;
    if (!v->string) {
        snprintf(path + o, cap - o, "[%d]", idx);
        return;
    }
    if (o) path[o++] = '.';
    for (size_t k = 0; v->string[k] && k < 48 && o + 2 < cap; k++) {
        unsigned char ch = (unsigned char)v->string[k];
        path[o++] = ch < 0x20 || ch >= 0x7f || ch == '\'' || ch == '\\' || ch == '"' ? '?' : (char)ch;
    }
    path[o] = 0;
}

/* No object in the tree gives a key twice (sorted per object: a body of many keys is
 * not quadratic).  path: the place of o, extended in place. */
static ls_status dup_keys(const cJSON *o, char *path, size_t cap, ls_err *err) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, o) n++;
    if (cJSON_IsObject(o) && n > 1) {
        const char **keys = malloc((size_t)n * sizeof *keys);
        if (!keys) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
        int k = 0;
        cJSON_ArrayForEach(v, o) keys[k++] = v->string;
        qsort(keys, (size_t)n, sizeof *keys, key_cmp);
        for (k = 1; k < n && strcmp(keys[k - 1], keys[k]); k++) {}
        if (k < n) {
            char kb[64];
            size_t l = 0;
            for (; keys[k][l] && l < 48; l++) {
                unsigned char ch = (unsigned char)keys[k][l];
                kb[l] = ch < 0x20 || ch >= 0x7f || ch == '\'' || ch == '\\' ? '?' : (char)ch;
            }
            kb[l] = 0;
            free(keys);
            if (path[0]) return ls_srv_error(err, LS_E_INVALID, "'%s' gives the key '%s' twice", path, kb);
            return ls_srv_error(err, LS_E_INVALID, "the body gives the key '%s' twice", kb);
        }
        free(keys);
    }
    int idx = 0;
    size_t at = strlen(path);
    cJSON_ArrayForEach(v, o) {
        if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
            path_add(path, cap, v, idx);
            ls_status st = dup_keys(v, path, cap, err);
            path[at] = 0;
            if (st) return st;
        }
        idx++;
    }
    return LS_OK;
}

cJSON *ls_srv_json_parse(const char *body, size_t len, ls_err *err) {
    jscan s = {.b = (const unsigned char *)(body ? body : ""), .n = body ? len : 0, .err = err};
    jws(&s);
    if (s.i >= s.n) {
        ls_srv_error(err, LS_E_INVALID, "the body is empty: it must be a JSON object");
        return NULL;
    }
    if (s.b[s.i] != '{') {
        ls_srv_error(err, LS_E_INVALID, "the body must be a JSON object");
        return NULL;
    }
    if (!jvalue(&s)) return NULL;
    jws(&s);
    if (s.i < s.n) {
        ls_srv_error(err, LS_E_INVALID, "the body has more after its JSON object (at byte %zu): send one object", s.i);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) { /* valid JSON cJSON cannot hold: a number literal longer than it reads, or no memory */
        ls_srv_error(err, LS_E_INVALID, "the body could not be read (a number literal too long, or out of memory)");
        return NULL;
    }
    char path[256] = "";
    if (dup_keys(j, path, sizeof path, err)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

char *ls_srv_utf8_sanitize(char *s) {
    if (!s) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), bad = 0;
    for (size_t i = 0, l; i < n; i += l ? l : 1)
        if (!(l = p[i] < 0x80 ? 1 : ls_utf8_valid_len(p + i, n - i))) bad++;
    if (!bad) return s;
    char *o = malloc(n + 2 * bad + 1); /* each bad byte at most: 1 byte -> 3 */
    if (!o) {
        free(s);
        return NULL;
    }
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t l = p[i] < 0x80 ? 1 : ls_utf8_valid_len(p + i, n - i);
        if (l) {
            memcpy(o + w, p + i, l);
            w += l;
            i += l;
            continue;
        }
        /* the maximal subpart: a lead byte and the continuation bytes that could still
         * have completed it (Unicode 3.9, table 3-7) */
        unsigned c = p[i], lo = 0x80, hi = 0xBF;
        size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
        else if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
        size_t k = 1;
        if (want > 1 && i + 1 < n && p[i + 1] >= lo && p[i + 1] <= hi) {
            k = 2;
            while (k < want && i + k < n && p[i + k] >= 0x80 && p[i + k] <= 0xBF) k++;
        }
        memcpy(o + w, "\xEF\xBF\xBD", 3);
        w += 3;
        i += k;
    }
    o[w] = 0;
    free(s);
    return o;
}

ls_status ls_srv_parse(const char *body, size_t len, bool chat, ls_srv_render_fn render, void *render_ud,
                       const ls_srv_limits *lim, ls_srv_req *r, ls_err *err) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->max_tokens = -1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    ls_status st = LS_OK;
    cJSON *j = ls_srv_json_parse(body, len, err);
    if (!j) return err ? err->code : LS_E_INVALID;
    if ((st = check_keys(j, chat, err))) goto done;
    double v;
    v = r->temperature;
    if ((st = num_field(j, "temperature", 0, 100, false, &v, err))) goto done;
    r->temperature = (float)v;
    v = r->top_p;
    if ((st = num_field(j, "top_p", 0, 1, false, &v, err))) goto done;
    if (v <= 0) {
        st = ls_srv_error(err, LS_E_INVALID, "'top_p' must be greater than 0");
        goto done;
    }
    r->top_p = (float)v;
    v = 0;
    if ((st = num_field(j, "top_k", 0, 1 << 24, true, &v, err))) goto done;
    r->top_k = (int32_t)v;
    v = 0;
    if ((st = num_field(j, "min_p", 0, 1, false, &v, err))) goto done;
    r->min_p = (float)v;
    v = 0;
    if ((st = num_field(j, "frequency_penalty", -2, 2, false, &v, err))) goto done;
    r->frequency_penalty = (float)v;
    v = 0;
    if ((st = num_field(j, "presence_penalty", -2, 2, false, &v, err))) goto done;
    r->presence_penalty = (float)v;
    v = 1;
    if ((st = num_field(j, "repeat_penalty", 0, 100, false, &v, err))) goto done;
    r->repeat_penalty = (float)v;
    v = 64;
    if ((st = num_field(j, "repeat_last_n", -1, 1 << 24, true, &v, err))) goto done;
    r->repeat_last_n = (int32_t)v;
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(j, "logit_bias");
    if (lb && !cJSON_IsNull(lb) && (st = parse_bias(lb, lim->n_vocab, r, err))) goto done;
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(j, "seed");
    if (sd && !cJSON_IsNull(sd)) {
        v = 0;
        if ((st = num_field(j, "seed", -9007199254740991.0, 9007199254740991.0, true, &v, err))) goto done;
        r->seed = (int64_t)v;
        r->seed_given = true;
    } else if ((st = random_seed(&r->seed, err))) {
        goto done;
    }
    if (!chat && (st = bool_field(j, "echo", &r->echo, err))) goto done;
    double mt = -1;
    if ((st = num_field(j, "max_tokens", r->echo ? 0 : 1, lim->max_tokens, true, &mt, err))) goto done;
    if ((st = num_field(j, "max_completion_tokens", r->echo ? 0 : 1, lim->max_tokens, true, &mt, err))) goto done;
    r->max_tokens = (int32_t)mt;
    double n = 1;
    if ((st = num_field(j, "n", 1, LS_SRV_MAX_CHOICES, true, &n, err))) goto done;
    r->n = (int32_t)n;
    r->n_prompts = 1;
    if ((st = bool_field(j, "stream", &r->stream, err))) goto done;
    if ((st = bool_field(j, "ignore_eos", &r->ignore_eos, err))) goto done;
    if (r->echo && r->stream) {
        st = ls_srv_error(err, LS_E_INVALID, "'echo' is supported without 'stream' only");
        goto done;
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            st = ls_srv_error(err, LS_E_INVALID, "'stream_options' must be an object");
            goto done;
        }
        const cJSON *k;
        cJSON_ArrayForEach(k, so) if (strcmp(k->string, "include_usage") && !cJSON_IsNull(k)) {
            st = ls_srv_error(err, LS_E_INVALID, "unsupported parameter 'stream_options.%.60s' (only include_usage)",
                              k->string);
            goto done;
        }
        if (!r->stream) { /* as OpenAI answers it */
            st = ls_srv_error(err, LS_E_INVALID, "'stream_options' is only allowed with 'stream': true");
            goto done;
        }
        if ((st = bool_field(so, "include_usage", &r->include_usage, err))) goto done;
    }
    /* logprobs: a bool in chat (with top_logprobs), an integer in completions */
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(j, "logprobs");
    if (lp && !cJSON_IsNull(lp)) {
        if (chat) {
            if ((st = bool_field(j, "logprobs", &r->logprobs, err))) goto done;
            double tl = 0;
            if ((st = num_field(j, "top_logprobs", 0, 20, true, &tl, err))) goto done;
            r->top_logprobs = (int32_t)tl;
        } else {
            double tl = 0;
            if ((st = num_field(j, "logprobs", 0, 5, true, &tl, err))) goto done;
            r->logprobs = true;
            r->top_logprobs = (int32_t)tl;
        }
    } else if (chat && cJSON_GetObjectItemCaseSensitive(j, "top_logprobs") &&
               !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "top_logprobs"))) {
        st = ls_srv_error(err, LS_E_INVALID, "'top_logprobs' needs 'logprobs': true");
        goto done;
    }
    if ((st = parse_constraint(j, r, err))) goto done;
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(j, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        if (cJSON_IsArray(stop)) {
            const cJSON *s;
            cJSON_ArrayForEach(s, stop) if ((st = add_stop(r, s, err))) goto done;
        } else if ((st = add_stop(r, stop, err))) {
            goto done;
        }
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            st = ls_srv_error(err, LS_E_INVALID, "'model' must be a string");
            goto done;
        }
        snprintf(r->model, sizeof r->model, "%s", model->valuestring);
    }
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        if (!msgs) {
            st = ls_srv_error(err, LS_E_INVALID, "'messages' is required");
            goto done;
        }
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
            st = ls_srv_error(err, LS_E_INVALID, "'messages' must be a non-empty list");
            goto done;
        }
        int nm = cJSON_GetArraySize(msgs);
        if (nm > lim->max_messages) {
            st = ls_srv_error(err, LS_E_INVALID, "'messages' has %d entries; the limit is %d", nm, lim->max_messages);
            goto done;
        }
        if (!render) {
            st = ls_srv_error(err, LS_E_UNSUPPORTED, "this model has no usable chat template; use /v1/completions");
            goto done;
        }
        ls_chat_opts copts = LS_CHAT_OPTS_INIT;
        if ((st = parse_template_kwargs(j, &copts, err))) goto done;
        r->reasoning = lim->reasoning;
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(j, "reasoning_format");
        if (rf && !cJSON_IsNull(rf)) { /* llama-server's per-request override */
            if (cJSON_IsString(rf) && !strcmp(rf->valuestring, "none")) r->reasoning = LS_SRV_REASONING_NONE;
            else if (cJSON_IsString(rf) && !strcmp(rf->valuestring, "deepseek")) r->reasoning = LS_SRV_REASONING_DEEPSEEK;
            else {
                st = ls_srv_error(err, LS_E_INVALID, "'reasoning_format' must be \"none\" or \"deepseek\"");
                goto done;
            }
        }
        /* tools: offered functions, earlier calls and their results (server/tools.c) */
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools"),
                    *tch = cJSON_GetObjectItemCaseSensitive(j, "tool_choice"),
                    *ptc = cJSON_GetObjectItemCaseSensitive(j, "parallel_tool_calls");
        if (ptc && !cJSON_IsNull(ptc) && !cJSON_IsBool(ptc)) {
            st = ls_srv_error(err, LS_E_INVALID, "'parallel_tool_calls' must be true or false");
            goto done;
        }
        if (tools && !cJSON_IsNull(tools)) {
            if ((st = ls_srv_tools_check(tools, err))) goto done;
            r->n_tools = cJSON_GetArraySize(tools);
            if (!(r->tools_json = cJSON_PrintUnformatted(tools))) {
                st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                goto done;
            }
        }
        r->tool_format = lim->tool_format;
        if (tch && !cJSON_IsNull(tch)) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tch, "function"), "name");
            if (cJSON_IsString(tch) && !strcmp(tch->valuestring, "none")) r->tool_choice = LS_SRV_TC_NONE;
            else if (cJSON_IsString(tch) && !strcmp(tch->valuestring, "auto")) r->tool_choice = LS_SRV_TC_AUTO;
            else if (cJSON_IsString(tch) && !strcmp(tch->valuestring, "required")) r->tool_choice = LS_SRV_TC_REQUIRED;
            else if (cJSON_IsObject(tch) && cJSON_IsString(fn) && (st = check_tool_choice_keys(tch, err))) goto done;
            else if (cJSON_IsObject(tch) && cJSON_IsString(fn)) {
                r->tool_choice = LS_SRV_TC_NAMED;
                snprintf(r->tool_name, sizeof r->tool_name, "%s", fn->valuestring);
                if (!r->n_tools || !ls_srv_tool_named(tools, fn->valuestring)) {
                    st = ls_srv_error(err, LS_E_INVALID, "'tool_choice' names '%.60s', which is not in 'tools'",
                                      fn->valuestring);
                    goto done;
                }
            } else {
                st = ls_srv_error(err, LS_E_INVALID, "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
                goto done;
            }
            if (r->tool_choice == LS_SRV_TC_REQUIRED && !r->n_tools) {
                st = ls_srv_error(err, LS_E_INVALID, "'tool_choice' is \"required\" but no 'tools' are given");
                goto done;
            }
        }
        if (r->tool_choice == LS_SRV_TC_NONE) r->n_tools = 0; /* not offered: rendered and parsed as plain chat */
        if (r->n_tools) { /* the reply's constraint (server/tools.c): a call is enforced by the grammar */
            cJSON *schema = ls_srv_tools_schema(tools, (ls_srv_tool_format)lim->tool_format,
                                                r->tool_choice == LS_SRV_TC_REQUIRED,
                                                r->tool_choice == LS_SRV_TC_NAMED ? r->tool_name : NULL);
            if (schema && r->grammar) {
                cJSON_Delete(schema);
                st = ls_srv_error(err, LS_E_INVALID, "'tools' (whose replies are constrained here) cannot be combined "
                                                   "with 'response_format', 'grammar' or 'json_schema'");
                goto done;
            }
            cJSON_Delete(schema);
            if (!st && (st = ls_srv_tools_gbnf(tools, (ls_srv_tool_format)lim->tool_format,
                                               r->tool_choice == LS_SRV_TC_REQUIRED,
                                               r->tool_choice == LS_SRV_TC_NAMED ? r->tool_name : NULL, &r->grammar, err)))
                goto done;
        }
        if (r->n_tools && r->stream && r->n > 1) {
            st = ls_srv_error(err, LS_E_INVALID, "'tools' with 'stream' is supported with 'n' 1 only");
            goto done;
        }
        if ((st = check_message_keys(msgs, err))) goto done;
        bool tool_path = r->n_tools > 0;
        const cJSON *mm;
        cJSON_ArrayForEach(mm, msgs) {
            const cJSON *rl = cJSON_GetObjectItemCaseSensitive(mm, "role"), *tc = cJSON_GetObjectItemCaseSensitive(mm, "tool_calls");
            tool_path = tool_path || (cJSON_IsString(rl) && !strcmp(rl->valuestring, "tool")) || (tc && !cJSON_IsNull(tc));
        }
        if (tool_path) {
            ls_chat_msg *tm = NULL;
            char **tt = NULL;
            int tn = 0;
            st = ls_srv_tools_messages(msgs, r->n_tools ? tools : NULL, (ls_srv_tool_format)lim->tool_format,
                                       lim->default_system, &tm, &tt, &tn, err);
            if (!st) st = render(render_ud, tm, (size_t)tn, &copts, &r->prompt, err);
            for (int k = 0; tt && k < tn; k++) free(tt[k]);
            free(tt);
            free(tm);
            goto done;
        }
        ls_chat_msg *cm = calloc((size_t)nm, sizeof *cm);
        char **texts = calloc((size_t)nm, sizeof *texts); /* content given as a list of text parts */
        if (!cm || !texts) {
            free(cm);
            free(texts);
            st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
            goto done;
        }
        int i = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, msgs) {
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                        *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
                st = ls_srv_error(err, LS_E_INVALID, "'messages[%d].role' must be a string", i);
                break;
            }
            const char *rl = role->valuestring;
            if (strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant") && strcmp(rl, "developer")) {
                st = ls_srv_error(err, LS_E_INVALID, "'messages[%d].role' is '%.40s'; use system, user or assistant", i, rl);
                break;
            }
            if (cJSON_IsString(content)) {
                cm[i].content = content->valuestring;
            } else if (cJSON_IsArray(content)) { /* [{"type": "text", "text": ...}, ...] */
                size_t total = 1;
                const cJSON *p;
                bool ok = true;
                cJSON_ArrayForEach(p, content) {
                    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"),
                                *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                    ok = ok && cJSON_IsString(ty) && !strcmp(ty->valuestring, "text") && cJSON_IsString(tx);
                    if (ok) total += strlen(tx->valuestring);
                }
                if (!ok) {
                    st = ls_srv_error(err, LS_E_INVALID, "'messages[%d].content' parts must be {\"type\": \"text\", "
                                                       "\"text\": ...}", i);
                    break;
                }
                if (!(texts[i] = malloc(total))) {
                    st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                    break;
                }
                texts[i][0] = 0;
                cJSON_ArrayForEach(p, content) strcat(texts[i], cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
                cm[i].content = texts[i];
            } else {
                st = ls_srv_error(err, LS_E_INVALID, "'messages[%d].content' must be a string", i);
                break;
            }
            cm[i].role = !strcmp(rl, "developer") ? "system" : rl;
            i++;
        }
        if (!st) st = render(render_ud, cm, (size_t)nm, &copts, &r->prompt, err);
        for (int k = 0; k < nm; k++) free(texts[k]);
        free(texts);
        free(cm);
        if (st) goto done;
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (!p) {
            st = ls_srv_error(err, LS_E_INVALID, "'prompt' is required");
            goto done;
        }
        if (cJSON_IsArray(p) && cJSON_IsNumber(cJSON_GetArrayItem(p, 0))) { /* one prompt as token ids */
            int nt = cJSON_GetArraySize(p), k = 0;
            if (r->echo) {
                st = ls_srv_error(err, LS_E_INVALID, "'echo' is supported with a text 'prompt' only, not token ids");
                goto done;
            }
            if (!(r->prompt_ids = malloc((size_t)nt * sizeof *r->prompt_ids)) || !(r->prompt = dup_str(""))) {
                st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                goto done;
            }
            const cJSON *e;
            cJSON_ArrayForEach(e, p) {
                if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                    e->valuedouble > INT32_MAX || (lim->n_vocab > 0 && e->valuedouble >= lim->n_vocab)) {
                    st = ls_srv_error(err, LS_E_INVALID, "'prompt[%d]' is not a token id of this model", k);
                    goto done;
                }
                r->prompt_ids[k++] = (int32_t)e->valuedouble;
            }
            r->n_prompt_ids = nt;
            goto done;
        }
        if (cJSON_IsArray(p)) { /* a list of prompts: choices prompt-major, n each */
            int np = cJSON_GetArraySize(p);
            const cJSON *e;
            bool strings = np > 0;
            cJSON_ArrayForEach(e, p) strings = strings && cJSON_IsString(e);
            if (!strings) {
                st = ls_srv_error(err, LS_E_INVALID, "'prompt' must be a string or a non-empty list of strings");
                goto done;
            }
            if ((int64_t)np * r->n > LS_SRV_MAX_CHOICES) {
                st = ls_srv_error(err, LS_E_INVALID, "'prompt' has %d prompts x 'n' %d choices; the limit is %d in all",
                                  np, r->n, LS_SRV_MAX_CHOICES);
                goto done;
            }
            if (!(r->prompts = calloc((size_t)np, sizeof *r->prompts))) {
                st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                goto done;
            }
            int k = 0;
            cJSON_ArrayForEach(e, p) {
                if (!(r->prompts[k] = dup_str(e->valuestring))) {
                    r->n_prompts = k;
                    st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                    goto done;
                }
                k++;
            }
            r->n_prompts = np;
            p = cJSON_GetArrayItem(p, 0);
        }
        if (!cJSON_IsString(p)) {
            st = ls_srv_error(err, LS_E_INVALID, "'prompt' must be a string or a non-empty list of strings");
            goto done;
        }
        if (!(r->prompt = dup_str(p->valuestring))) st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
    }
done:
    cJSON_Delete(j);
    if (st) ls_srv_req_free(r);
    return st;
}
