/* request.c - OpenAI request JSON -> ls_srv_req (see request.h). */
#include "server/request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
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

ls_status ls_srv_parse(const char *body, size_t len, bool chat, ls_srv_render_fn render, void *render_ud,
                       const ls_srv_limits *lim, ls_srv_req *r, ls_err *err) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->max_tokens = -1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    ls_status st = LS_OK;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) return ls_srv_error(err, LS_E_INVALID, "the body is not valid JSON");
    if (!cJSON_IsObject(j)) {
        st = ls_srv_error(err, LS_E_INVALID, "the body must be a JSON object");
        goto done;
    }
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
    if ((st = num_field(j, "seed", -9007199254740991.0, 9007199254740991.0, true, &v, err))) goto done;
    r->seed = (uint64_t)(int64_t)v;
    double mt = -1;
    if ((st = num_field(j, "max_tokens", 1, lim->max_tokens, true, &mt, err))) goto done;
    if ((st = num_field(j, "max_completion_tokens", 1, lim->max_tokens, true, &mt, err))) goto done;
    r->max_tokens = (int32_t)mt;
    double n = 1;
    if ((st = num_field(j, "n", 1, 1e9, true, &n, err))) goto done;
    if (n != 1) {
        st = ls_srv_error(err, LS_E_INVALID, "'n' must be 1 (one choice per request)");
        goto done;
    }
    if ((st = bool_field(j, "stream", &r->stream, err))) goto done;
    if ((st = bool_field(j, "ignore_eos", &r->ignore_eos, err))) goto done;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            st = ls_srv_error(err, LS_E_INVALID, "'stream_options' must be an object");
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
        if (!st) st = render(render_ud, cm, (size_t)nm, &r->prompt, err);
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
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
            p = cJSON_GetArrayItem(p, 0);
        if (!cJSON_IsString(p)) {
            st = ls_srv_error(err, LS_E_INVALID, "'prompt' must be a string (one prompt per request)");
            goto done;
        }
        if (!(r->prompt = dup_str(p->valuestring))) st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
    }
done:
    cJSON_Delete(j);
    if (st) ls_srv_req_free(r);
    return st;
}
