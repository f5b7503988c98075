/* http.c - the HTTP layer (libmicrohttpd): request bodies, authentication, routing,
 * and the small endpoints (/health, /v1/models, /tokenize, /detokenize). */
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/server_impl.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- connections ---------------------------------------------------------------- */
sock *ls_srv_sock(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void ls_srv_notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        sock *k = calloc(1, sizeof *k);
        if (!k) return;
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ca = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        k->fd = fd ? fd->connect_fd : -1;
        snprintf(k->client, sizeof k->client, "-");
        if (ca && ca->client_addr) {
            socklen_t len = ca->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                   : sizeof(struct sockaddr_in);
            if (getnameinfo(ca->client_addr, len, k->client, sizeof k->client, NULL, 0, NI_NUMERICHOST) != 0)
                snprintf(k->client, sizeof k->client, "-");
        }
        k->head_t0 = now_ms();
        pthread_mutex_lock(&s->cmu);
        k->next = s->socks;
        if (s->socks) s->socks->prev = k;
        s->socks = k;
        s->n_socks++;
        pthread_mutex_unlock(&s->cmu);
        *socket_context = k;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        sock *k = *socket_context; /* MHD closes the descriptor after this returns */
        pthread_mutex_lock(&s->cmu);
        if (k->prev) k->prev->next = k->next;
        else s->socks = k->next;
        if (k->next) k->next->prev = k->prev;
        s->n_socks--;
        pthread_mutex_unlock(&s->cmu);
        free(k);
        *socket_context = NULL;
    }
}

/* The head deadline: a connection whose request head is not complete within
 * --header-timeout seconds of its start (or of its previous response) is shut down.
 * MHD's own timeout only measures inactivity, which a client trickling one header line
 * every few seconds never reaches.  The descriptor is shut down under cmu, which the
 * close notification also takes, so it cannot have been reused. */
void *ls_srv_reaper_main(void *arg) {
    server *s = arg;
    const double limit = 1000.0 * s->p->header_timeout_s;
    for (;;) {
        /* mu before cmu, as /metrics takes them; the count is in before /metrics can be
         * answered to a client that saw the cut */
        pthread_mutex_lock(&s->mu);
        pthread_mutex_lock(&s->cmu);
        bool stop = s->stop_reaper;
        double now = now_ms();
        int cut = 0;
        for (sock *k = s->socks; k && !stop; k = k->next)
            if (!k->head_done && !k->cut && k->fd >= 0 && now - k->head_t0 > limit) {
                shutdown(k->fd, SHUT_RDWR);
                k->cut = true;
                cut++;
            }
        s->ct.head_timeouts += (uint64_t)cut;
        pthread_mutex_unlock(&s->cmu);
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        if (cut)
            fprintf(stderr, "lockstep serve: cut %d connection(s) whose request head took over %d s\n", cut,
                    s->p->header_timeout_s);
        usleep(100 * 1000);
    }
    return NULL;
}

void ls_srv_common_headers(server *s, struct MHD_Connection *c, struct MHD_Response *r) {
    sock *k = ls_srv_sock(c);
    if (k && k->req_id[0]) MHD_add_response_header(r, "X-Request-Id", k->req_id);
    const char *cors = s->p->cors_origin;
    if (!cors) return;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!strcmp(cors, "*")) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    } else {
        MHD_add_response_header(r, "Vary", "Origin");
        if (origin && !strcmp(origin, cors)) MHD_add_response_header(r, "Access-Control-Allow-Origin", cors);
    }
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
}

enum MHD_Result ls_srv_send_text(server *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
                                 const char *retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    ls_srv_common_headers(s, c, r);
    sock *k = ls_srv_sock(c);
    if (k) k->status = status;
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

enum MHD_Result ls_srv_send_405(server *s, struct MHD_Connection *c, const char *allow) {
    char msg[96];
    snprintf(msg, sizeof msg, "method not allowed here: use %s", allow);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", "invalid_request_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(t);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    ls_srv_common_headers(s, c, r);
    sock *k = ls_srv_sock(c);
    if (k) k->status = 405;
    enum MHD_Result res = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    ls_srv_count_status(s, 405);
    return res;
}

/* OPTIONS (a CORS preflight): 204 with what may be sent. */
static enum MHD_Result preflight(server *s, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    ls_srv_common_headers(s, c, r);
    sock *k = ls_srv_sock(c);
    if (k) k->status = 204;
    enum MHD_Result res = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    ls_srv_count_status(s, 204);
    return res;
}

const char *ls_srv_json_nul(const char *b, size_t n, char *msg, size_t cap) {
    char key[64] = "";
    bool in = false;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in) {
            if (b[i] == '"') {
                in = true;
                start = i + 1;
            }
            continue;
        }
        if (b[i] == '\\') {
            if (i + 5 < n && b[i + 1] == 'u' && !memcmp(b + i + 2, "0000", 4)) {
                size_t e = i; /* is this string a key? (followed by ':') */
                while (e < n && b[e] != '"') e += b[e] == '\\' ? 2 : 1;
                size_t q = e + 1;
                while (q < n && (b[q] == ' ' || b[q] == '\t' || b[q] == '\n' || b[q] == '\r')) q++;
                if (q < n && b[q] == ':')
                    snprintf(msg, cap, "a JSON key contains a NUL character (\\u0000), which is not accepted");
                else if (key[0])
                    snprintf(msg, cap, "'%s' contains a NUL character (\\u0000), which is not accepted in text", key);
                else
                    snprintf(msg, cap, "a JSON string contains a NUL character (\\u0000), which is not accepted");
                return msg;
            }
            i++;
            continue;
        }
        if (b[i] == '"') {
            in = false;
            size_t q = i + 1;
            while (q < n && (b[q] == ' ' || b[q] == '\t' || b[q] == '\n' || b[q] == '\r')) q++;
            if (q < n && b[q] == ':') {
                size_t l = i - start < sizeof key - 1 ? i - start : sizeof key - 1;
                memcpy(key, b + start, l);
                key[l] = 0;
                for (size_t z = 0; z < l; z++)
                    if ((unsigned char)key[z] < 0x20 || key[z] == '\\' || key[z] == '\'') key[z] = '?';
            }
        }
    }
    return NULL;
}

static enum MHD_Result sum_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

/* The Host header on a loopback bind (a DNS-rebinding defence): only the loopback
 * names, with any port.  No Host (HTTP/1.0) passes: browsers always send one. */
static bool host_ok(const char *h) {
    if (!h) return true;
    size_t n = strlen(h);
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        if (!e) return false;
        n = (size_t)(e - h) + 1;
    } else {
        const char *colon = strchr(h, ':');
        if (colon) n = (size_t)(colon - h);
    }
    return (n == 9 && !strncasecmp(h, "localhost", 9)) || (n == 9 && !strncmp(h, "127.0.0.1", 9)) ||
           (n == 5 && !strncmp(h, "[::1]", 5));
}

static void copy_printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++)
        dst[i] = (unsigned char)src[i] < 0x21 || (unsigned char)src[i] == 0x7f || src[i] == '"' ? '?' : src[i];
    dst[i] = 0;
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
        cn->t0 = now_ms();
        sock *k = ls_srv_sock(c);
        int n_socks = 0;
        if (k) {
            static uint64_t counter;
            pthread_mutex_lock(&s->cmu);
            k->head_done = true;
            n_socks = s->n_socks;
            pthread_mutex_unlock(&s->cmu);
            k->t0 = cn->t0;
            copy_printable(k->method, sizeof k->method, method);
            copy_printable(k->path, sizeof k->path, url);
            snprintf(k->req_id, sizeof k->req_id, "req-%llx",
                     (unsigned long long)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
            k->status = 0;
            k->n_prompt = k->n_gen = 0;
            k->note = NULL;
        }
        /* What can be refused from the head alone (MHD reads the body only after). */
        if (n_socks > s->p->max_connections) {
            pthread_mutex_lock(&s->mu);
            s->ct.conn_refused++;
            pthread_mutex_unlock(&s->mu);
            char msg[128];
            snprintf(msg, sizeof msg, "too many open connections (limit %d); retry later", s->p->max_connections);
            return ls_srv_send_error(s, c, 503, "server_busy", msg, "1");
        }
        if (s->loopback && !host_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")))
            return ls_srv_send_error(s, c, 403, "invalid_request_error",
                                     "this server is bound to loopback and answers only Host: localhost, 127.0.0.1 "
                                     "or [::1] (a DNS-rebinding defence)",
                                     NULL);
        size_t ubytes = strlen(url); /* the path and its query arguments */
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sum_header, &ubytes);
        if (ubytes > 8192) return ls_srv_send_error(s, c, 414, "invalid_request_error",
                                                    "the URL is longer than 8192 bytes", NULL);
        size_t hbytes = 0;
        MHD_get_connection_values(c, MHD_HEADER_KIND, sum_header, &hbytes);
        if (hbytes > 16384)
            return ls_srv_send_error(s, c, 431, "invalid_request_error",
                                     "the request headers are larger than 16384 bytes", NULL);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!take_upload(s, cn, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) {
        if (s->p->cors_origin) return preflight(s, c);
        return ls_srv_send_405(s, c, "GET, POST");
    }
    if (!strcmp(url, "/health")) {
        if (!get) return ls_srv_send_405(s, c, "GET");
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
    if (post && cn->body) { /* cJSON would end the string at a NUL: refuse rather than truncate */
        char msg[160];
        if (ls_srv_json_nul(cn->body, cn->len, msg, sizeof msg))
            return ls_srv_send_error(s, c, 400, "invalid_request_error", msg, NULL);
    }
    bool chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    if (chat || cmpl) {
        if (!post) return ls_srv_send_405(s, c, "POST");
        return ls_srv_generate(s, c, cn, chat, chat ? "/v1/chat/completions" : "/v1/completions");
    }
    if (!strcmp(url, "/completion")) { /* llama-server's native endpoint (native.c) */
        if (!post) return ls_srv_send_405(s, c, "POST");
        return ls_srv_native_completion(s, c, cn);
    }
    if (!strcmp(url, "/slots")) {
        if (!get) return ls_srv_send_405(s, c, "GET");
        return ls_srv_slots(s, c);
    }
    if (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings")) {
        if (!post) return ls_srv_send_405(s, c, "POST");
        return ls_srv_embeddings(s, c, cn);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return ls_srv_send_405(s, c, "GET");
        return models(s, c);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return ls_srv_send_405(s, c, "GET");
        return ls_srv_metrics(s, c);
    }
    if (!strcmp(url, "/tokenize") || !strcmp(url, "/detokenize")) {
        if (!post) return ls_srv_send_405(s, c, "POST");
        return tokenize_ep(s, c, cn, url[1] == 'd');
    }
    if (!strcmp(url, "/props") || !strcmp(url, "/apply-template")) { /* openai.c */
        bool props = url[1] == 'p';
        if (props ? !get : !post)
            return ls_srv_send_error(s, c, 405, "invalid_request_error", props ? "use GET /props" : "use POST", NULL);
        return props ? ls_srv_props(s, c) : ls_srv_apply_template(s, c, cn->body, cn->len);
    }
    char msg[160];
    snprintf(msg, sizeof msg, "no such endpoint: %.100s", url);
    return ls_srv_send_error(s, c, 404, "invalid_request_error", msg, NULL);
}

/* The access log: one line per request on stderr, when it is over. */
static void access_log(server *s, sock *k, enum MHD_RequestTerminationCode toe) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? NULL
                      : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? "timed out"
                      : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? "client left"
                      : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? "server stopped"
                                                                      : "connection failed";
    fprintf(stderr, "%s.%03ldZ %s %s %s %u tokens=%d+%d ms=%.0f id=%s%s%s%s%s\n", when, ts.tv_nsec / 1000000L,
            k->client, k->method, k->path, k->status, k->n_prompt, k->n_gen, now_ms() - k->t0, k->req_id,
            k->note ? " " : "", k->note ? k->note : "", how ? " " : "", how ? how : "");
    (void)s;
}

void ls_srv_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    sock *k = ls_srv_sock(c);
    if (k && *con_cls) {
        access_log(s, k, toe);
        pthread_mutex_lock(&s->cmu); /* the next request's head starts now (keep-alive) */
        k->head_done = false;
        k->head_t0 = now_ms();
        pthread_mutex_unlock(&s->cmu);
    }
    conn *cn = *con_cls;
    if (cn) {
        free(cn->body);
        free(cn);
    }
    *con_cls = NULL;
}
