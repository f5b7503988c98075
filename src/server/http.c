/* http.c - the HTTP layer (libmicrohttpd): request bodies, authentication, routing,
 * and the small endpoints (/health, /v1/models, /tokenize, /detokenize). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

enum MHD_Result ls_srv_send_text(server *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
                                 const char *retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    enum MHD_Result res = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    ls_srv_count_status(s, status);
    return res;
}

enum MHD_Result ls_srv_send_json(server *s, struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) return MHD_NO;
    return ls_srv_send_text(s, c, status, "application/json", t, NULL);
}

enum MHD_Result ls_srv_send_error(server *s, struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *msg, const char *retry_after) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) return MHD_NO;
    fprintf(stderr, "lockstep serve: %u %s\n", status, msg);
    return ls_srv_send_text(s, c, status, "application/json", t, retry_after);
}

/* Constant-time comparison of the presented key with the configured one. */
static bool key_ok(const char *want, const char *auth) {
    const char *got = auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : "";
    size_t lw = strlen(want), lg = strlen(got);
    unsigned char diff = (unsigned char)(lw != lg);
    for (size_t i = 0; i < lw; i++) diff |= (unsigned char)(want[i] ^ (i < lg ? got[i] : 0));
    return diff == 0;
}

/* GET /health: 503 while loading or probing; then the probe's verdict. */
static enum MHD_Result health(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    int ready = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
    if (ready < 2) {
        cJSON_AddStringToObject(o, "status", ready == 0 ? "loading" : "probing");
        char *t = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return t ? ls_srv_send_text(s, c, 503, "application/json", t, "1") : MHD_NO;
    }
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "parity", s->parity);
    cJSON_AddStringToObject(o, "spec", ls_spec_kind_name(s->spec.kind));
    cJSON_AddStringToObject(o, "spec_state", s->spec_state);
    if (s->probe.verdict != LS_VERDICT_UNPROBED) {
        cJSON *ax = cJSON_AddObjectToObject(o, "axes");
        for (int a = 0; a < LS_AXIS_COUNT; a++)
            cJSON_AddStringToObject(ax, ls_axis_name((ls_axis)a),
                                    s->probe.axis[a] == LS_AXIS_PASSED   ? "passed"
                                    : s->probe.axis[a] == LS_AXIS_FAILED ? "failed"
                                                                         : "not checked");
        cJSON_AddStringToObject(o, "kernels", s->probe.kernels_after);
        if (s->probe.detail[0]) cJSON_AddStringToObject(o, "parity_detail", s->probe.detail);
    }
    return ls_srv_send_json(s, c, 200, o);
}

static enum MHD_Result models(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "lockstep");
    cJSON_AddItemToArray(d, m);
    return ls_srv_send_json(s, c, 200, o);
}

/* POST /tokenize {"content", "add_special"} and POST /detokenize {"tokens"}. */
static enum MHD_Result tokenize_ep(server *s, struct MHD_Connection *c, conn *cn, bool detok) {
    cJSON *j = cJSON_ParseWithLength(cn->body ? cn->body : "", cn->len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ls_srv_send_error(s, c, 400, "invalid_request_error", "the body must be a JSON object", NULL);
    }
    cJSON *o = cJSON_CreateObject();
    const char *bad = NULL;
    char msg[sizeof(((ls_err *)0)->msg)];
    if (!detok) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content"),
                    *add = cJSON_GetObjectItemCaseSensitive(j, "add_special");
        size_t len = cJSON_IsString(content) ? strlen(content->valuestring) : 0, n = 0;
        int32_t *ids = NULL;
        ls_err err;
        if (!cJSON_IsString(content) || (add && !cJSON_IsBool(add))) {
            bad = "'content' must be a string (and 'add_special' a boolean)";
        } else if (!(ids = malloc((len + 8) * sizeof *ids)) ||
                   ls_model_tokenize(s->m, content->valuestring, len, cJSON_IsTrue(add), true, ids, len + 8, &n, &err)) {
            snprintf(msg, sizeof msg, "%s", ids ? err.msg : "out of memory");
            bad = msg;
        } else {
            cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
            for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
        }
        free(ids);
    } else {
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens"), *t;
        int32_t *ids = NULL;
        int n = cJSON_IsArray(toks) ? cJSON_GetArraySize(toks) : 0, i = 0;
        if (!cJSON_IsArray(toks)) bad = "'tokens' must be a list of token ids";
        else if (!(ids = malloc(((size_t)n + 1) * sizeof *ids))) bad = "out of memory";
        const cJSON *list = bad ? NULL : toks;
        cJSON_ArrayForEach(t, list) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= s->n_vocab) {
                snprintf(msg, sizeof msg, "'tokens[%d]' is not a token id of this model (0..%d)", i, s->n_vocab - 1);
                bad = msg;
                break;
            }
            ids[i++] = (int32_t)t->valuedouble;
        }
        if (!bad) { /* the sequence's text as llama.cpp writes it (no special tokens dropped or shown) */
            size_t len = ls_model_detokenize(s->m, ids, (size_t)n, false, false, NULL, 0);
            char *text = malloc(len + 1);
            if (!text) {
                bad = "out of memory";
            } else {
                ls_model_detokenize(s->m, ids, (size_t)n, false, false, text, len);
                text[len] = 0;
                cJSON_AddStringToObject(o, "content", text);
                free(text);
            }
        }
        free(ids);
    }
    cJSON_Delete(j);
    if (bad) {
        cJSON_Delete(o);
        return ls_srv_send_error(s, c, 400, "invalid_request_error", bad, NULL);
    }
    return ls_srv_send_json(s, c, 200, o);
}

/* Accumulates the request body; past the limit it keeps reading but drops it (413). */
static bool take_upload(server *s, conn *cn, const char *upload, size_t n) {
    if (!cn->too_big && cn->len + n > s->p->max_body) {
        cn->too_big = true;
        free(cn->body);
        cn->body = NULL;
        cn->len = cn->cap = 0;
    }
    if (cn->too_big) return true;
    if (cn->len + n + 1 > cn->cap) {
        size_t nc = cn->cap ? cn->cap : 4096;
        while (nc < cn->len + n + 1) nc *= 2;
        char *b = realloc(cn->body, nc);
        if (!b) return false;
        cn->body = b;
        cn->cap = nc;
    }
    memcpy(cn->body + cn->len, upload, n);
    cn->len += n;
    cn->body[cn->len] = 0;
    return true;
}

enum MHD_Result ls_srv_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!take_upload(s, cn, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return ls_srv_send_error(s, c, 405, "invalid_request_error", "use GET /health", NULL);
        return health(s, c);
    }
    if (s->p->api_key && !key_ok(s->p->api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))
        return ls_srv_send_error(s, c, 401, "invalid_request_error",
                                 "missing or wrong API key (Authorization: Bearer KEY)", NULL);
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) < 2)
        return ls_srv_send_error(s, c, 503, "server_busy", "the model is still loading", "1");
    if (cn->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", s->p->max_body);
        return ls_srv_send_error(s, c, 413, "invalid_request_error", msg, NULL);
    }
    bool chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    if (chat || cmpl) {
        if (!post) return ls_srv_send_error(s, c, 405, "invalid_request_error", "use POST", NULL);
        return ls_srv_generate(s, c, cn, chat, chat ? "/v1/chat/completions" : "/v1/completions");
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return ls_srv_send_error(s, c, 405, "invalid_request_error", "use GET /v1/models", NULL);
        return models(s, c);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return ls_srv_send_error(s, c, 405, "invalid_request_error", "use GET /metrics", NULL);
        return ls_srv_metrics(s, c);
    }
    if (!strcmp(url, "/tokenize") || !strcmp(url, "/detokenize")) {
        if (!post) return ls_srv_send_error(s, c, 405, "invalid_request_error", "use POST", NULL);
        return tokenize_ep(s, c, cn, url[1] == 'd');
    }
    char msg[160];
    snprintf(msg, sizeof msg, "no such endpoint: %.100s", url);
    return ls_srv_send_error(s, c, 404, "invalid_request_error", msg, NULL);
}

void ls_srv_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    conn *cn = *con_cls;
    if (cn) {
        free(cn->body);
        free(cn);
    }
    *con_cls = NULL;
}
