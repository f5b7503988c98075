/* http.c - the HTTP layer (libmicrohttpd): request bodies, authentication, routing,
 * and the small endpoints (/health, /v1/models, /tokenize, /detokenize). */
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's lacks it) */
#include <netinet/in.h>
#include <stddef.h>
#include <sys/ioctl.h>
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
        k->idle_t0 = k->next_check = now_ms(); /* awaiting its first head; nothing received yet */
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

/* Bytes received on a TCP socket so far (TCP_INFO), or UINT64_MAX when the kernel does not say. */
static uint64_t rx_bytes(int fd, uint32_t *last_recv_ms) {
    struct tcp_info ti;
    memset(&ti, 0, sizeof ti);
    socklen_t l = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) != 0 ||
        l < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return UINT64_MAX;
    if (last_recv_ms) *last_recv_ms = ti.tcpi_last_data_recv;
    return ti.tcpi_bytes_received;
}

/* Bytes the kernel holds for the socket that the server has not read yet (0 when it cannot say). */
static int unread_bytes(int fd) {
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? n : 0;
}

/* The peer's TCP port, for the log (0 when unknown). */
static int peer_port(int fd) {
    struct sockaddr_storage a;
    socklen_t l = sizeof a;
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&a, &l) != 0) return 0;
    if (a.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&a)->sin_port);
    if (a.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    return 0;
}

/* The head and body deadlines.  A connection whose request head has begun to arrive and
 * is not complete within --header-timeout seconds, or whose body is not complete within
 * --body-timeout seconds of its head, is shut down and counted.  MHD's own timeout only
 * measures inactivity, which a client trickling a byte every few seconds never reaches.
 * A connection awaiting a head that has not begun (a new one, or keep-alive after a
 * response) is idle, not late: MHD's --timeout closes it, and it is not counted here.
 * The head begins when the socket has received bytes since it began to wait (TCP_INFO);
 * its clock starts at the last data received, so a head is never cut early.  The
 * descriptor is shut down under cmu, which the close notification also takes, so it
 * cannot have been reused.  A head is only late while the server has read every byte the
 * client sent: bytes waiting unread in the socket mean the server is behind, not the
 * client, and such a connection is looked at again on the next pass. */
void *ls_srv_reaper_main(void *arg) {
    server *s = arg;
    const double hlimit = 1000.0 * s->p->header_timeout_s, blimit = 1000.0 * s->p->body_timeout_s;
    for (;;) {
        pthread_mutex_lock(&s->cmu);
        bool stop = s->stop_reaper;
        double now = now_ms();
        int late = 0;
        for (sock *k = s->socks; k && !stop; k = k->next) {
            if (k->cut || k->fd < 0) continue;
            if (k->phase == SK_HEAD && !k->head_started && now >= k->next_check) {
                uint32_t ago = 0;
                uint64_t rx = rx_bytes(k->fd, &ago);
                k->next_check = now + 250;
                if (rx > k->rx_mark) {
                    k->head_started = true;
                    k->head_t0 = rx == UINT64_MAX || now - ago < k->idle_t0 ? k->idle_t0 : now - ago;
                }
            }
            late += (k->phase == SK_HEAD && k->head_started && now - k->head_t0 > hlimit) ||
                    (k->phase == SK_BODY && blimit > 0 && now - k->body_t0 > blimit);
        }
        pthread_mutex_unlock(&s->cmu);
        if (stop) break;
        int heads = 0, bodies = 0;
        char why[256] = "";
        if (late) {
            /* mu before cmu, as /metrics takes them; the count is in before /metrics can be
             * answered to a client that saw the cut */
            pthread_mutex_lock(&s->mu);
            pthread_mutex_lock(&s->cmu);
            now = now_ms();
            for (sock *k = s->socks; k; k = k->next) {
                if (k->cut || k->fd < 0) continue;
                bool head = k->phase == SK_HEAD && k->head_started && now - k->head_t0 > hlimit,
                     body = k->phase == SK_BODY && blimit > 0 && now - k->body_t0 > blimit;
                if (!head && !body) continue;
                if (head && unread_bytes(k->fd)) continue; /* the server is behind, not the client */
                if (head && !heads) {
                    uint64_t rx = rx_bytes(k->fd, NULL);
                    snprintf(why, sizeof why, " (one from %s port %d: %llu byte(s) of a head over %.0f ms)", k->client,
                             peer_port(k->fd), rx == UINT64_MAX ? 0ULL : (unsigned long long)(rx - k->rx_mark),
                             now - k->head_t0);
                }
                shutdown(k->fd, SHUT_RDWR);
                k->cut = true;
                heads += head;
                bodies += body;
            }
            s->ct.head_timeouts += (uint64_t)heads;
            s->ct.body_timeouts += (uint64_t)bodies;
            pthread_mutex_unlock(&s->cmu);
            pthread_mutex_unlock(&s->mu);
        }
        if (heads)
            fprintf(stderr, "lockstep serve: cut %d connection(s) whose request head took over %d s%s\n", heads,
                    s->p->header_timeout_s, why);
        if (bodies)
            fprintf(stderr, "lockstep serve: cut %d connection(s) whose request body took over %d s\n", bodies,
                    s->p->body_timeout_s);
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
    if (!(text = ls_srv_utf8_sanitize(text))) return MHD_NO; /* every reply is valid UTF-8 */
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

/* Anthropic's error type for an HTTP status (its documented list). */
static const char *anthropic_type(unsigned status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* The error body in the route's shape: OpenAI's {"error": {message, type, param, code}},
 * or on /v1/messages Anthropic's {"type": "error", "error": {type, message}}. */
static cJSON *error_body(struct MHD_Connection *c, unsigned status, const char *type, const char *msg) {
    sock *k = ls_srv_sock(c);
    cJSON *j = cJSON_CreateObject(), *e;
    if (k && k->api == LS_API_MESSAGES) {
        cJSON_AddStringToObject(j, "type", "error");
        e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "type", anthropic_type(status));
        cJSON_AddStringToObject(e, "message", msg);
        return j;
    }
    e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    return j;
}

enum MHD_Result ls_srv_send_error(server *s, struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *msg, const char *retry_after) {
    cJSON *j = error_body(c, status, type, msg);
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) return MHD_NO;
    fprintf(stderr, "lockstep serve: %u %s\n", status, msg);
    return ls_srv_send_text(s, c, status, "application/json", t, retry_after);
}

enum MHD_Result ls_srv_send_405(server *s, struct MHD_Connection *c, const char *allow) {
    char msg[96];
    snprintf(msg, sizeof msg, "method not allowed here: use %s", allow);
    cJSON *j = error_body(c, 405, "invalid_request_error", msg);
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
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
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

/* A body declared over --max-body is read and dropped before its 413 unless it is over this
 * many times the limit (see refuse_head). */
#define LS_SRV_DRAIN_FACTOR 8

/* Whether a request's Origin may use the server.  Browsers send Origin on every
 * cross-origin request and on every POST; other clients (curl, the SDKs) send none.
 * Allowed: no Origin; --cors-origin's value (every origin with *); and the server's own
 * origin, http(s)://HOST where HOST is the request's Host header (a page served from the
 * same host and port, e.g. through a proxy that passes Host on).  Any other origin is
 * refused before any work, so a web page cannot drive a key-less server on this machine
 * with requests the browser sends without asking (a "simple" POST with text/plain). */
static bool origin_ok(const server *s, const char *origin, const char *host) {
    if (!origin) return true;
    const char *cors = s->p->cors_origin;
    if (cors && (!strcmp(cors, "*") || !strcmp(origin, cors))) return true;
    const char *auth = !strncmp(origin, "http://", 7) ? origin + 7 : !strncmp(origin, "https://", 8) ? origin + 8 : NULL;
    return auth && host && *auth && !strcasecmp(auth, host);
}

/* A POST's Content-Type: application/json (any parameters) always; no Content-Type, or
 * application/x-www-form-urlencoded (what `curl -d` sends), only without Origin: a browser
 * can send those cross-origin without a preflight, other clients send them by default.
 * Every other type (text/plain and multipart/form-data, a browser's other preflight-free
 * types, among them) is refused: the body is JSON.  0: accepted; else the status, 415. */
static unsigned ctype_check(const char *ct, const char *origin, char *msg, size_t cap) {
    char mt[64] = "";
    if (ct) {
        while (*ct == ' ' || *ct == '\t') ct++;
        size_t n = strcspn(ct, "; \t");
        if (n >= sizeof mt) n = sizeof mt - 1;
        for (size_t i = 0; i < n; i++) mt[i] = (unsigned char)ct[i] < 0x21 || ct[i] == '\'' ? '?' : ct[i];
        mt[n] = 0;
    }
    if (!strcasecmp(mt, "application/json")) return 0;
    bool plain = !ct || !strcasecmp(mt, "application/x-www-form-urlencoded");
    if (plain && !origin) return 0;
    if (!ct)
        snprintf(msg, cap, "a request with an Origin header must send Content-Type: application/json");
    else
        snprintf(msg, cap, "Content-Type '%.60s' is not accepted: send the JSON body as application/json%s", mt,
                 plain ? " (a request with an Origin header must)" : "");
    return 415;
}

/* Constant-time comparison of the presented key with the configured one: Authorization:
 * Bearer KEY, or x-api-key: KEY (Anthropic's header) when there is no Bearer. */
static bool key_ok(const char *want, const char *auth, const char *xkey) {
    const char *got = auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : xkey ? xkey : "";
    size_t lw = strlen(want), lg = strlen(got);
    unsigned char diff = (unsigned char)(lw != lg);
    for (size_t i = 0; i < lw; i++) diff |= (unsigned char)(want[i] ^ (i < lg ? got[i] : 0));
    return diff == 0;
}

/* GET /health: 503 while loading or probing; then the probe's verdict. */
static enum MHD_Result health(server *s, struct MHD_Connection *c) {
    if (s->router) return ls_srv_router_health(s, c); /* each model's verdict */
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
    if (s->router) return ls_srv_router_models(s, c); /* every model, with its status */
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
    ls_err perr;
    cJSON *j = ls_srv_json_parse(cn->body, cn->len, &perr);
    if (!j)
        return ls_srv_send_error(s, c, perr.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", perr.msg, NULL);
    cJSON *o = cJSON_CreateObject();
    const char *bad = NULL;
    char msg[sizeof(((ls_err *)0)->msg)];
    const cJSON *key;
    cJSON_ArrayForEach(key, j) {
        if (cJSON_IsNull(key) || !strcmp(key->string, "model") || /* the model (router mode) */
            (detok ? !strcmp(key->string, "tokens")
                   : !strcmp(key->string, "content") || !strcmp(key->string, "add_special")))
            continue;
        snprintf(msg, sizeof msg, "unsupported parameter '%.60s' (/%s takes %s)", key->string,
                 detok ? "detokenize" : "tokenize", detok ? "tokens" : "content and add_special");
        bad = msg;
        break;
    }
    if (bad) goto answer;
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
answer:
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

/* What can be refused from the head alone, before the body is read: MHD_YES to go on, or
 * the response queued (*res). */
static bool refuse_head(server *s, struct MHD_Connection *c, const char *url, const char *method, int n_socks,
                        enum MHD_Result *res) {
    char msg[256];
    if (n_socks > s->p->max_connections) {
        pthread_mutex_lock(&s->mu);
        s->ct.conn_refused++;
        pthread_mutex_unlock(&s->mu);
        snprintf(msg, sizeof msg, "too many open connections (limit %d); retry later", s->p->max_connections);
        *res = ls_srv_send_error(s, c, 503, "server_busy", msg, "1");
        return true;
    }
    if (__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE)) {
        *res = ls_srv_send_error(s, c, 503, "server_shutdown",
                                 "the server is shutting down: retry this request on another replica", "1");
        return true;
    }
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (s->loopback && !host_ok(host)) {
        *res = ls_srv_send_error(s, c, 403, "invalid_request_error",
                                 "this server is bound to loopback and answers only Host: localhost, 127.0.0.1 "
                                 "or [::1] (a DNS-rebinding defence)",
                                 NULL);
        return true;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin_ok(s, origin, host)) {
        char o[100];
        copy_printable(o, sizeof o, origin);
        snprintf(msg, sizeof msg, "requests from the web page origin '%s' are not allowed (start the server with "
                                  "--cors-origin to allow one)", o);
        *res = ls_srv_send_error(s, c, 403, "invalid_request_error", msg, NULL);
        return true;
    }
    size_t ubytes = strlen(url); /* the path and its query arguments */
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sum_header, &ubytes);
    if (ubytes > 8192) {
        *res = ls_srv_send_error(s, c, 414, "invalid_request_error", "the URL is longer than 8192 bytes", NULL);
        return true;
    }
    size_t hbytes = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, sum_header, &hbytes);
    if (hbytes > 16384) {
        *res = ls_srv_send_error(s, c, 431, "invalid_request_error", "the request headers are larger than 16384 bytes",
                                 NULL);
        return true;
    }
    if (!strcmp(method, "POST")) {
        unsigned st = ctype_check(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"), origin, msg,
                                  sizeof msg);
        if (st) {
            *res = ls_srv_send_error(s, c, st, "invalid_request_error", msg, NULL);
            return true;
        }
    }
    /* A body declared over the limit is refused from its head when the client waits for a
     * go-ahead (Expect: 100-continue: curl's bodies over 1 MiB), or when it is more than
     * LS_SRV_DRAIN_FACTOR times the limit.  A smaller one is read and dropped first (the
     * body reader), so that a client that writes its whole body before it reads (Python's
     * http.client, most SDKs) gets the 413 instead of a reset connection; --body-timeout
     * bounds how long that read may take. */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
    if (cl) {
        char *e;
        unsigned long long n = strtoull(cl, &e, 10);
        bool waits = expect && !strcasecmp(expect, "100-continue");
        if (e != cl && n > s->p->max_body && (waits || n / LS_SRV_DRAIN_FACTOR > s->p->max_body)) {
            snprintf(msg, sizeof msg, "the request body (Content-Length %llu) exceeds the limit of %zu bytes", n,
                     s->p->max_body);
            *res = ls_srv_send_error(s, c, 413, "invalid_request_error", msg, NULL);
            return true;
        }
    }
    return false;
}

static void set_phase(server *s, sock *k, int phase) {
    if (!k) return;
    pthread_mutex_lock(&s->cmu);
    k->phase = phase;
    pthread_mutex_unlock(&s->cmu);
}

/* ---- routing ----------------------------------------------------------------------
 * Each endpoint: its path, its one method (another is a 405 with Allow), its handler,
 * whether it reads a body (a body over --max-body is a 413 there, ignored elsewhere), its
 * API (the error shape), whether it is open (no key; answered while loading), and whether
 * it is a model's (router mode: the request's "model" picks the server that answers it). */
typedef enum MHD_Result (*route_fn)(server *s, struct MHD_Connection *c, conn *cn, const char *url);
typedef struct {
    const char *path, *method;
    route_fn fn;
    bool body;
    int api;
    bool open;
    bool model;
} route;

static enum MHD_Result r_health(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    (void)cn, (void)url;
    return health(s, c);
}
static enum MHD_Result r_chat(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_generate(s, c, cn, true, "/v1/chat/completions");
}
static enum MHD_Result r_completions(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_generate(s, c, cn, false, "/v1/completions");
}
static enum MHD_Result r_responses(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_responses(s, c, cn);
}
static enum MHD_Result r_messages(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_messages(s, c, cn);
}
static enum MHD_Result r_native(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_native_completion(s, c, cn);
}
static enum MHD_Result r_slots(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_slots(s, c);
}
static enum MHD_Result r_embeddings(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_embeddings(s, c, cn);
}
static enum MHD_Result r_models(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return models(s, c);
}
static enum MHD_Result r_metrics(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_metrics(s, c);
}
static enum MHD_Result r_tokenize(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return tokenize_ep(s, c, cn, url[1] == 'd');
}
static enum MHD_Result r_props(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_props(s, c);
}
static enum MHD_Result r_apply_template(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_apply_template(s, c, cn->body, cn->len);
}

static enum MHD_Result r_models_load(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_router_load(s, c, cn->body, cn->len, !strcmp(url, "/models/load"));
}

static enum MHD_Result r_page(server *s, struct MHD_Connection *c, conn *cn, const char *url) {
    return ls_srv_page(s, c, url);
}

static const route ROUTES[] = {
    {"/health", "GET", r_health, false, LS_API_OPENAI, true, false},
    /* the chat page (page.c): open, as it holds no data; its requests carry the key */
    {"/", "GET", r_page, false, LS_API_OPENAI, true, false},
    {"/page.js", "GET", r_page, false, LS_API_OPENAI, true, false},
    {"/page.css", "GET", r_page, false, LS_API_OPENAI, true, false},
    {"/page.svg", "GET", r_page, false, LS_API_OPENAI, true, false},
    {"/v1/chat/completions", "POST", r_chat, true, LS_API_OPENAI, false, true},
    {"/v1/completions", "POST", r_completions, true, LS_API_OPENAI, false, true},
    {"/v1/responses", "POST", r_responses, true, LS_API_RESPONSES, false, true},
    {"/v1/messages", "POST", r_messages, true, LS_API_MESSAGES, false, true},
    {"/completion", "POST", r_native, true, LS_API_OPENAI, false, true},   /* llama-server's (native.c) */
    {"/slots", "GET", r_slots, false, LS_API_OPENAI, false, true},
    {"/v1/embeddings", "POST", r_embeddings, true, LS_API_OPENAI, false, true},
    {"/embeddings", "POST", r_embeddings, true, LS_API_OPENAI, false, true},
    {"/v1/models", "GET", r_models, false, LS_API_OPENAI, false, false},
    {"/models", "GET", r_models, false, LS_API_OPENAI, false, false},         /* llama-server's router */
    {"/models/load", "POST", r_models_load, true, LS_API_OPENAI, false, false},
    {"/models/unload", "POST", r_models_load, true, LS_API_OPENAI, false, false},
    {"/metrics", "GET", r_metrics, false, LS_API_OPENAI, false, false},
    {"/tokenize", "POST", r_tokenize, true, LS_API_OPENAI, false, true},
    {"/detokenize", "POST", r_tokenize, true, LS_API_OPENAI, false, true},
    {"/props", "GET", r_props, false, LS_API_OPENAI, false, true},
    {"/apply-template", "POST", r_apply_template, true, LS_API_OPENAI, false, true},
};

static const route *find_route(const char *url) {
    for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES; i++)
        if (!strcmp(url, ROUTES[i].path)) return &ROUTES[i];
    return NULL;
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
            k->phase = SK_BODY; /* the head is complete: the body's deadline starts */
            k->body_t0 = cn->t0;
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
            const route *rt = find_route(url);
            k->api = rt ? rt->api : LS_API_OPENAI; /* the error shape, also of refusals from the head */
        }
        pthread_mutex_lock(&s->mu);
        s->busy++; /* until ls_srv_completed: the shutdown drain waits for it */
        pthread_mutex_unlock(&s->mu);
        enum MHD_Result res;
        if (refuse_head(s, c, url, method, n_socks, &res)) {
            set_phase(s, k, SK_HANDLING);
            return res;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!take_upload(s, cn, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    set_phase(s, ls_srv_sock(c), SK_HANDLING); /* the body is complete */
    if (!strcmp(method, "OPTIONS")) {
        if (s->p->cors_origin) return preflight(s, c);
        return ls_srv_send_405(s, c, "GET, POST");
    }
    const route *rt = find_route(url);
    sock *k = ls_srv_sock(c);
    if (k) k->api = rt ? rt->api : LS_API_OPENAI; /* the error shape of what follows */
    if (rt && rt->open) { /* /health and the page: no key, and answered while loading */
        if (strcmp(method, rt->method)) return ls_srv_send_405(s, c, rt->method);
        return rt->fn(s, c, cn, url);
    }
    if (s->p->api_key && !key_ok(s->p->api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
                                 MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key")))
        return ls_srv_send_error(s, c, 401, "invalid_request_error",
                                 "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)", NULL);
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) < 2)
        return ls_srv_send_error(s, c, 503, "server_busy", "the model is still loading", "1");
    if (cn->too_big && (!rt || rt->body)) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", s->p->max_body);
        return ls_srv_send_error(s, c, 413, "invalid_request_error", msg, NULL);
    }
    if (!rt) {
        char msg[160];
        snprintf(msg, sizeof msg, "no such endpoint: %.100s", url);
        return ls_srv_send_error(s, c, 404, "invalid_request_error", msg, NULL);
    }
    if (strcmp(method, rt->method)) return ls_srv_send_405(s, c, rt->method);
    if (s->router && rt->model) { /* the model's own server answers (loaded first if need be) */
        server *ms = NULL;
        char msg[768];
        unsigned st = ls_srv_router_pick(s->router, c, rt->body ? (cn->body ? cn->body : "") : NULL, cn->len, &ms,
                                         &cn->rmodel, msg, sizeof msg);
        if (st)
            return ls_srv_send_error(s, c, st, st == 503 ? "server_busy" : "invalid_request_error", msg,
                                     st == 503 ? "1" : NULL);
        return rt->fn(ms, c, cn, url);
    }
    return rt->fn(s, c, cn, url);
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
        k->last_toe = (int)toe;
        uint64_t rx = rx_bytes(k->fd, NULL);
        pthread_mutex_lock(&s->cmu); /* it awaits the next request's head (keep-alive) */
        k->phase = SK_HEAD;
        k->head_started = false;
        k->rx_mark = rx == UINT64_MAX ? 0 : rx;
        k->idle_t0 = k->next_check = now_ms();
        pthread_mutex_unlock(&s->cmu);
    }
    conn *cn = *con_cls;
    if (cn) {
        pthread_mutex_lock(&s->mu);
        s->busy--;
        pthread_mutex_unlock(&s->mu);
        if (cn->rmodel) ls_srv_router_release(s->router, cn->rmodel);
        free(cn->body);
        cJSON_Delete(cn->api_echo);
        free(cn);
    }
    *con_cls = NULL;
}
