/* server.c - HTTP endpoints, per-request jobs, the engine thread, metrics and
 * graceful shutdown for `lockstep serve` (see server.h, docs/server.md). */
#include "server/server.h"
#include "util/alloc.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/probe.h"
#include "engine/spec_probe.h"
#include "server/request.h"

/* ---- per-request job: shared by the HTTP thread and the engine thread ------ */
typedef struct {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_tok[20];
    float top_lp[20];
} tok_lp;

typedef struct server server;
typedef struct job {
    server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    uint64_t engine_id;
    ls_srv_req req;
    char id[48];
    time_t created;
    double t0;
    int32_t *prompt;
    int32_t n_prompt;
    char *text;
    size_t text_len, text_cap, streamed;
    int32_t *tokens;
    tok_lp *lps;
    int32_t n_tokens, cap_tokens;
    bool done;
    ls_finish finish;
    int32_t n_gen, n_cached, n_drafted, n_accepted;
    double prompt_ms, gen_ms;
    ls_drafter *drafter;
    /* streaming */
    int phase;          /* 0 role chunk, 1 content, 3 [DONE] queued */
    int32_t lp_sent;    /* tokens whose logprobs were streamed */
    char *out;          /* bytes produced but not yet handed to MHD */
    size_t out_len, out_off;
    const char *path;
} job;

struct server {
    const ls_server_params *p;
    ls_model *m, *draft_model;
    ls_engine *e;
    const char *model_name;
    int n_ctx;                 /* resolved context per sequence */
    pthread_t engine_thread;
    pthread_mutex_t mu;        /* guards the fields below */
    pthread_cond_t work;
    int ready;                 /* 0 loading, 1 probing, 2 serving: atomic; serving publishes
                                * (release) parity, spec and the engine to the handlers */
    bool stop_engine;
    int live;                  /* requests submitted and not finished */
    char parity[32], spec_verdict[32], probe_detail[256];
    ls_spec_params spec;
    /* metrics */
    uint64_t req_by_status[6]; /* 2xx 400 401 404/405 413 503 */
    uint64_t other_status;
    uint64_t prompt_tokens, gen_tokens, drafted, accepted, steps;
    uint64_t batch_hist[9];    /* rows per step: <=1 2 4 8 16 32 64 128 +Inf */
    uint64_t batch_rows_sum;
};

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void job_unref(job *j) {
    pthread_mutex_lock(&j->mu);
    int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r) return;
    ls_drafter_free(j->drafter);
    ls_srv_req_free(&j->req);
    free(j->prompt);
    free(j->text);
    free(j->tokens);
    free(j->lps);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Engine thread: records one event into the job. */
static void on_event(void *ud, const ls_event *ev) {
    job *j = ud;
    server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    bool stop_tok = ev->done && ev->finish == LS_FINISH_STOP && ev->token >= 0 && ev->n_gen == j->n_gen;
    if (ev->token >= 0 && !stop_tok) {
        if (j->n_tokens == j->cap_tokens) {
            int32_t nc = j->cap_tokens ? 2 * j->cap_tokens : 64;
            int32_t *t = ls_realloc(j->tokens, (size_t)nc * sizeof *t);
            tok_lp *l = j->req.logprobs ? ls_realloc(j->lps, (size_t)nc * sizeof *l) : j->lps;
            if (t) j->tokens = t;
            if (l) j->lps = l;
            if (t && (l || !j->req.logprobs)) j->cap_tokens = nc;
        }
        if (j->n_tokens < j->cap_tokens) {
            if (j->req.logprobs && ev->logits) { /* log-softmax of the raw logits */
                const float *lg = ev->logits;
                int32_t V = (int32_t)ls_model_hparams(s->m)->n_vocab;
                double mx = lg[0], sum = 0;
                for (int32_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
                for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
                double lz = mx + log(sum);
                tok_lp *e = &j->lps[j->n_tokens];
                e->token = ev->token;
                e->logprob = (float)(lg[ev->token] - lz);
                e->n_top = j->req.top_logprobs;
                for (int32_t k = 0; k < e->n_top; k++) { /* top-k by selection, ties to the lower id */
                    int32_t best = -1;
                    for (int32_t i = 0; i < V; i++) {
                        bool used = false;
                        for (int32_t q = 0; q < k && !used; q++) used = e->top_tok[q] == i;
                        if (!used && (best < 0 || lg[i] > lg[best])) best = i;
                    }
                    e->top_tok[k] = best;
                    e->top_lp[k] = (float)(lg[best] - lz);
                }
            }
            j->tokens[j->n_tokens++] = ev->token;
        }
    }
    if (ev->text_len) {
        if (j->text_len + ev->text_len + 1 > j->text_cap) {
            size_t nc = j->text_cap ? j->text_cap : 256;
            while (nc < j->text_len + ev->text_len + 1) nc *= 2;
            char *t = ls_realloc(j->text, nc);
            if (t) {
                j->text = t;
                j->text_cap = nc;
            }
        }
        if (j->text_len + ev->text_len + 1 <= j->text_cap) {
            memcpy(j->text + j->text_len, ev->text, ev->text_len);
            j->text_len += ev->text_len;
            j->text[j->text_len] = 0;
        }
    }
    j->n_gen = ev->n_gen;
    j->n_cached = ev->n_cached;
    j->n_drafted = ev->n_drafted;
    j->n_accepted = ev->n_accepted;
    j->prompt_ms = ev->prompt_ms;
    j->gen_ms = ev->gen_ms;
    bool done = ev->done;
    if (done) {
        j->done = true;
        j->finish = ev->finish;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (done) {
        pthread_mutex_lock(&s->mu);
        s->live--;
        s->gen_tokens += (uint64_t)ev->n_gen;
        s->drafted += (uint64_t)ev->n_drafted;
        s->accepted += (uint64_t)ev->n_accepted;
        pthread_mutex_unlock(&s->mu);
        job_unref(j); /* the engine's reference */
    }
}

static void *engine_main(void *arg) {
    server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop_engine && ls_engine_idle(s->e)) pthread_cond_wait(&s->work, &s->mu);
        bool stop = s->stop_engine && ls_engine_idle(s->e);
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        ls_err err;
        int32_t rows = 0;
        if (ls_engine_step(s->e, &rows, &err)) {
            fprintf(stderr, "lockstep serve: engine step failed: %s\n", err.msg);
            continue;
        }
        if (rows > 0) {
            int b = 0;
            while (b < 8 && rows > (1 << b)) b++;
            pthread_mutex_lock(&s->mu);
            s->steps++;
            s->batch_hist[b]++;
            s->batch_rows_sum += (uint64_t)rows;
            pthread_mutex_unlock(&s->mu);
        }
    }
    return NULL;
}

/* ---- HTTP helpers ------------------------------------------------------------ */
typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
} conn;

static void count_status(server *s, unsigned status) {
    pthread_mutex_lock(&s->mu);
    int k = status < 300 ? 0 : status == 400 ? 1 : status == 401 ? 2 : (status == 404 || status == 405) ? 3
          : status == 413 ? 4 : status == 503 ? 5 : -1;
    if (k >= 0) s->req_by_status[k]++;
    else s->other_status++;
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result send_text(server *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
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
    count_status(s, status);
    return res;
}

static enum MHD_Result send_json(server *s, struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) return MHD_NO;
    return send_text(s, c, status, "application/json", t, NULL);
}

static enum MHD_Result send_error(server *s, struct MHD_Connection *c, unsigned status, const char *type,
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
    return send_text(s, c, status, "application/json", t, retry_after);
}

/* Constant-time comparison of the presented key with the configured one. */
static bool key_ok(const char *want, const char *auth) {
    const char *got = auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : "";
    size_t lw = strlen(want), lg = strlen(got);
    unsigned char diff = (unsigned char)(lw != lg);
    for (size_t i = 0; i < lw; i++) diff |= (unsigned char)(want[i] ^ (i < lg ? got[i] : 0));
    return diff == 0;
}

/* ---- responses ----------------------------------------------------------------- */
static cJSON *usage_json(const job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->n_cached);
    return u;
}

static void add_extras(cJSON *o, const job *j) {
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_ms", j->prompt_ms);
    cJSON_AddNumberToObject(t, "predicted_ms", j->gen_ms);
    cJSON_AddNumberToObject(t, "draft_n", j->n_drafted);
    cJSON_AddNumberToObject(t, "draft_accepted", j->n_accepted);
    cJSON_AddStringToObject(o, "parity", j->srv->parity);
}

/* Whether p[0..n) is well-formed UTF-8 without NUL bytes. */
static bool utf8_clean(const unsigned char *p, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (p[i] == 0 || (k = ls_utf8_valid_len(p + i, n - i)) == 0) return false;
    return true;
}

/* A token's text for logprobs.  Its bytes when they are clean UTF-8; otherwise (a piece
 * of a multi-byte character, say) "bytes:" and \xNN for each byte, as OpenAI writes
 * such tokens: JSON strings must be valid UTF-8.  The raw bytes are in "bytes". */
static cJSON *token_str(const server *s, int32_t id, cJSON **bytes) {
    unsigned char buf[256];
    size_t n = ls_token_bytes(ls_model_tokenizer(s->m), id, true, (char *)buf, sizeof buf);
    if (n > sizeof buf) n = sizeof buf;
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber(buf[i]));
    }
    char out[6 + 4 * sizeof buf + 1];
    if (utf8_clean(buf, n)) {
        memcpy(out, buf, n);
        out[n] = 0;
    } else {
        size_t o = (size_t)snprintf(out, sizeof out, "bytes:");
        for (size_t i = 0; i < n; i++) o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", buf[i]);
    }
    return cJSON_CreateString(out);
}

static cJSON *logprobs_json(const job *j, int32_t from, int32_t to) {
    const server *s = j->srv;
    if (j->req.chat) {
        cJSON *lp = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(lp, "content");
        for (int32_t i = from; i < to; i++) {
            const tok_lp *e = &j->lps[i];
            cJSON *o = cJSON_CreateObject(), *bytes;
            cJSON_AddItemToObject(o, "token", token_str(s, e->token, &bytes));
            cJSON_AddNumberToObject(o, "logprob", e->logprob);
            cJSON_AddItemToObject(o, "bytes", bytes);
            cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
            for (int32_t k = 0; k < e->n_top; k++) {
                cJSON *t = cJSON_CreateObject(), *tb;
                cJSON_AddItemToObject(t, "token", token_str(s, e->top_tok[k], &tb));
                cJSON_AddNumberToObject(t, "logprob", e->top_lp[k]);
                cJSON_AddItemToObject(t, "bytes", tb);
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(content, o);
        }
        return lp;
    }
    cJSON *lp = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(lp, "tokens"),
          *tlp = cJSON_AddArrayToObject(lp, "token_logprobs"), *top = cJSON_AddArrayToObject(lp, "top_logprobs");
    for (int32_t i = from; i < to; i++) {
        const tok_lp *e = &j->lps[i];
        cJSON_AddItemToArray(toks, token_str(s, e->token, NULL));
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(e->logprob));
        cJSON *t = cJSON_CreateObject();
        for (int32_t k = 0; k < e->n_top; k++) {
            cJSON *name = token_str(s, e->top_tok[k], NULL);
            cJSON_AddNumberToObject(t, name->valuestring, e->top_lp[k]);
            cJSON_Delete(name);
        }
        cJSON_AddItemToArray(top, t);
    }
    return lp;
}

static const char *finish_str(ls_finish f) { return f == LS_FINISH_LENGTH ? "length" : "stop"; }

static cJSON *full_response(const job *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->req.chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (j->req.chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", j->text ? j->text : "");
    } else {
        cJSON_AddStringToObject(c, "text", j->text ? j->text : "");
    }
    if (j->req.logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(j, 0, j->n_tokens));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_str(j->finish));
    cJSON *ids = cJSON_AddArrayToObject(c, "token_ids"); /* extension: the generated token ids */
    for (int32_t i = 0; i < j->n_tokens; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->tokens[i]));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    add_extras(o, j);
    return o;
}

/* One SSE event for the stream: content (or role / finish) in OpenAI's chunk schema. */
static char *chunk(const job *j, const char *content, size_t n, int32_t lp_from, int32_t lp_to, bool role,
                   const char *finish, bool usage_only) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->req.chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (!usage_only) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        char *tmp = ls_malloc(n + 1);
        if (tmp) {
            memcpy(tmp, content, n);
            tmp[n] = 0;
        }
        if (j->req.chat) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (role) cJSON_AddStringToObject(d, "role", "assistant");
            if (n || (!role && !finish)) cJSON_AddStringToObject(d, "content", tmp ? tmp : "");
        } else {
            cJSON_AddStringToObject(c, "text", tmp ? tmp : "");
        }
        free(tmp);
        if (j->req.logprobs && lp_to > lp_from) cJSON_AddItemToObject(c, "logprobs", logprobs_json(j, lp_from, lp_to));
        else cJSON_AddNullToObject(c, "logprobs");
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
        cJSON_AddItemToArray(choices, c);
    }
    if (usage_only) cJSON_AddItemToObject(o, "usage", usage_json(j));
    if (finish || usage_only) add_extras(o, j);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return NULL;
    size_t tl = strlen(t);
    char *ev = ls_malloc(tl + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, t, tl);
        memcpy(ev + 6 + tl, "\n\n", 3);
    }
    free(t);
    return ev;
}

static void out_append(job *j, char *s) {
    if (!s) return;
    size_t n = strlen(s);
    char *o = ls_realloc(j->out, j->out_len + n + 1);
    if (o) {
        memcpy(o + j->out_len, s, n + 1);
        j->out = o;
        j->out_len += n;
    }
    free(s);
}

static char *dupz(const char *s) {
    size_t n = strlen(s);
    char *d = ls_malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* Waits (j->mu held) for the job's next event, or ms milliseconds. */
static void job_wait(job *j, long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* MHD pulls the stream from here (its connection thread; may block briefly). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out_off < j->out_len) {
            size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
            memcpy(buf, j->out + j->out_off, n);
            j->out_off += n;
            if (j->out_off == j->out_len) j->out_off = j->out_len = 0;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->phase == 3) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (j->phase == 0) {
            if (j->req.chat) out_append(j, chunk(j, "", 0, 0, 0, true, NULL, false));
            j->phase = 1;
            continue;
        }
        if (j->phase == 1 && j->streamed < j->text_len) {
            int32_t lp_to = j->req.logprobs ? j->n_tokens : 0;
            out_append(j, chunk(j, j->text + j->streamed, j->text_len - j->streamed, j->lp_sent, lp_to, false, NULL, false));
            j->streamed = j->text_len;
            if (lp_to) j->lp_sent = lp_to;
            continue;
        }
        if (j->phase == 1 && j->done && j->finish == LS_FINISH_ERROR) { /* the engine gave up on it */
            out_append(j, dupz("data: {\"error\":{\"message\":\"the server ran out of memory while generating; "
                               "the text above is all there is\",\"type\":\"server_error\",\"code\":500}}\n\n"));
            out_append(j, dupz("data: [DONE]\n\n"));
            j->phase = 3;
            continue;
        }
        if (j->phase == 1 && j->done) {
            out_append(j, chunk(j, "", 0, j->lp_sent, j->req.logprobs ? j->n_tokens : 0, false, finish_str(j->finish), false));
            if (j->req.include_usage) out_append(j, chunk(j, "", 0, 0, 0, false, NULL, true));
            out_append(j, dupz("data: [DONE]\n\n"));
            j->phase = 3;
            continue;
        }
        job_wait(j, 200);
    }
}

/* The response is gone (finished, or the client disconnected). */
static void stream_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    int32_t n_tokens = j->n_tokens;
    pthread_mutex_unlock(&j->mu);
    if (!done) ls_engine_cancel(j->srv->e, j->engine_id); /* frees its KV at the next step */
    pthread_mutex_lock(&j->srv->mu);
    pthread_cond_signal(&j->srv->work);
    pthread_mutex_unlock(&j->srv->mu);
    fprintf(stderr, "lockstep serve: %s %s stream prompt=%d gen=%d ms=%.0f%s\n", j->id, j->path, j->n_prompt,
            n_tokens, ls_now_ms() - j->t0, done ? "" : " (client left; cancelled)");
    job_unref(j);
}

/* ---- the generation endpoints --------------------------------------------- */
/* Whether the client closed its end: the socket reads as end-of-file (or fails).  A
 * client that only half-closes (shutdown(SHUT_WR)) while it waits looks the same. */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    char b;
    return pfd.revents & POLLIN ? recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0 : false;
}

static enum MHD_Result generate(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path) {
    ls_err err;
    ls_srv_limits lim = {.max_messages = s->p->max_messages, .max_tokens = s->p->max_tokens};
    job *j = ls_calloc(1, sizeof *j);
    if (!j) return send_error(s, c, 500, "server_error", "out of memory", NULL);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    j->refs = 1;
    j->path = path;
    j->t0 = ls_now_ms();
    j->created = time(NULL);
    if (ls_srv_parse(cn->body ? cn->body : "", cn->len, chat, ls_model_chat_template(s->m), &lim, &j->req, &err)) {
        job_unref(j);
        return send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    }
    static uint64_t counter;
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)j->created,
             (unsigned long long)(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffff));
    const ls_tokenizer *tk = ls_model_tokenizer(s->m);
    size_t len = strlen(j->req.prompt), n = 0, cap = len + 8;
    j->prompt = ls_malloc(cap * sizeof *j->prompt);
    if (!j->prompt || ls_tokenize(tk, j->req.prompt, len, true, true, j->prompt, cap, &n, &err)) {
        job_unref(j);
        return send_error(s, c, 400, "invalid_request_error", j->prompt ? err.msg : "out of memory", NULL);
    }
    j->n_prompt = (int32_t)n;
    if (n == 0) {
        job_unref(j);
        return send_error(s, c, 400, "invalid_request_error", "the prompt is empty (0 tokens)", NULL);
    }
    if ((int64_t)n >= s->n_ctx) {
        char msg[256];
        snprintf(msg, sizeof msg, "the prompt is %zu tokens but the context holds %d; shorten it", n, s->n_ctx);
        job_unref(j);
        return send_error(s, c, 400, "invalid_request_error", msg, NULL);
    }
    pthread_mutex_lock(&s->mu);
    bool full = s->live >= s->p->n_parallel + s->p->max_queue;
    pthread_mutex_unlock(&s->mu);
    if (full) {
        job_unref(j);
        return send_error(s, c, 503, "server_busy", "the request queue is full; retry later", "1");
    }
    int32_t max_tokens = j->req.max_tokens;
    if (max_tokens < 0) { /* until the context is full, within the server's cap */
        max_tokens = s->n_ctx - (int32_t)n;
        if (max_tokens > s->p->max_tokens) max_tokens = s->p->max_tokens;
    }
    ls_request q = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = max_tokens,
                    .sampling = {.temperature = j->req.temperature, .top_k = j->req.top_k, .top_p = j->req.top_p,
                                 .seed = j->req.seed},
                    .stop = (const char *const *)j->req.stop, .n_stop = j->req.n_stop,
                    .ignore_eos = j->req.ignore_eos, .want_logits = j->req.logprobs, .on_event = on_event, .ud = j};
    if (s->spec.kind != LS_SPEC_OFF) {
        ls_spec_params sp = s->spec;
        sp.pool = NULL;
        j->drafter = ls_drafter_create(s->m, &sp, &q.sampling, &err);
        if (!j->drafter) {
            job_unref(j);
            return send_error(s, c, 500, "server_error", err.msg, NULL);
        }
        q.draft = ls_drafter_draft;
        q.draft_ud = j->drafter;
        if (ls_drafter_wants_hidden(j->drafter)) q.draft_observe = ls_drafter_observe;
    }
    j->refs = 2; /* the HTTP side and the engine's events */
    pthread_mutex_lock(&s->mu);
    ls_status st = ls_engine_submit(s->e, &q, &j->engine_id, &err);
    if (!st) {
        s->live++;
        s->prompt_tokens += n;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    if (st) {
        j->refs = 1;
        job_unref(j);
        return send_error(s, c, st == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    }
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
        if (!r) {
            ls_engine_cancel(s->e, j->engine_id);
            job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result res = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        count_status(s, 200);
        return res;
    }
    /* Wait for the answer; a client that hangs up meanwhile has its request cancelled
     * (its KV freed at the next step) instead of holding a slot until it finishes. */
    pthread_mutex_lock(&j->mu);
    bool gone = false;
    while (!j->done) {
        job_wait(j, 200);
        if (!j->done && !gone && client_gone(c)) {
            gone = true;
            ls_engine_cancel(s->e, j->engine_id);
            pthread_mutex_lock(&s->mu);
            pthread_cond_signal(&s->work);
            pthread_mutex_unlock(&s->mu);
        }
    }
    if (gone) {
        int32_t n = j->n_tokens;
        pthread_mutex_unlock(&j->mu);
        fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f client gone: cancelled\n", j->id, path,
                j->n_prompt, n, ls_now_ms() - j->t0);
        job_unref(j);
        return MHD_NO; /* nobody to answer: close the connection */
    }
    if (j->finish == LS_FINISH_ERROR) {
        int32_t n = j->n_tokens;
        pthread_mutex_unlock(&j->mu);
        fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=500 (out of memory)\n", j->id, path,
                j->n_prompt, n, ls_now_ms() - j->t0);
        job_unref(j);
        return send_error(s, c, 500, "server_error", "the server ran out of memory while generating this response",
                          NULL);
    }
    cJSON *o = full_response(j);
    pthread_mutex_unlock(&j->mu);
    fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=200\n", j->id, path, j->n_prompt, j->n_tokens,
            ls_now_ms() - j->t0);
    job_unref(j);
    return send_json(s, c, 200, o);
}

static enum MHD_Result metrics(server *s, struct MHD_Connection *c) {
    ls_engine_stats es;
    ls_engine_get_stats(s->e, &es);
    pthread_mutex_lock(&s->mu);
    char *t = ls_malloc(8192);
    if (!t) {
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    int n = 0;
    const char *codes[6] = {"2xx", "400", "401", "404", "413", "503"};
    n += snprintf(t + n, 8192 - n, "# HELP lockstep_requests_total HTTP requests by status.\n"
                                   "# TYPE lockstep_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        n += snprintf(t + n, 8192 - n, "lockstep_requests_total{status=\"%s\"} %llu\n", codes[i],
                      (unsigned long long)s->req_by_status[i]);
    n += snprintf(t + n, 8192 - n, "lockstep_requests_total{status=\"other\"} %llu\n", (unsigned long long)s->other_status);
    n += snprintf(t + n, 8192 - n,
                  "# TYPE lockstep_prompt_tokens_total counter\nlockstep_prompt_tokens_total %llu\n"
                  "# TYPE lockstep_generated_tokens_total counter\nlockstep_generated_tokens_total %llu\n"
                  "# TYPE lockstep_queue_depth gauge\nlockstep_queue_depth %d\n"
                  "# TYPE lockstep_running_sequences gauge\nlockstep_running_sequences %d\n"
                  "# TYPE lockstep_requests_in_flight gauge\nlockstep_requests_in_flight %d\n",
                  (unsigned long long)s->prompt_tokens, (unsigned long long)s->gen_tokens, es.n_waiting, es.n_running,
                  s->live);
    n += snprintf(t + n, 8192 - n, "# HELP lockstep_batch_rows Rows per engine step.\n# TYPE lockstep_batch_rows histogram\n");
    uint64_t cum = 0;
    const char *le[9] = {"1", "2", "4", "8", "16", "32", "64", "128", "+Inf"};
    for (int i = 0; i < 9; i++) {
        cum += s->batch_hist[i];
        n += snprintf(t + n, 8192 - n, "lockstep_batch_rows_bucket{le=\"%s\"} %llu\n", le[i], (unsigned long long)cum);
    }
    n += snprintf(t + n, 8192 - n, "lockstep_batch_rows_sum %llu\nlockstep_batch_rows_count %llu\n",
                  (unsigned long long)s->batch_rows_sum, (unsigned long long)s->steps);
    n += snprintf(t + n, 8192 - n,
                  "# TYPE lockstep_draft_tokens_total counter\nlockstep_draft_tokens_total %llu\n"
                  "# TYPE lockstep_draft_accepted_total counter\nlockstep_draft_accepted_total %llu\n"
                  "# TYPE lockstep_kv_blocks gauge\nlockstep_kv_blocks %d\n"
                  "# TYPE lockstep_kv_blocks_used gauge\nlockstep_kv_blocks_used %d\n"
                  "# TYPE lockstep_kv_blocks_cached gauge\nlockstep_kv_blocks_cached %d\n"
                  "# TYPE lockstep_kv_usage_ratio gauge\nlockstep_kv_usage_ratio %.6f\n"
                  "# TYPE lockstep_prefix_cache_hit_tokens_total counter\nlockstep_prefix_cache_hit_tokens_total %llu\n"
                  "# TYPE lockstep_preemptions_total counter\nlockstep_preemptions_total %llu\n"
                  "# HELP lockstep_parity_verified 1 when the startup probe verified byte parity.\n"
                  "# TYPE lockstep_parity_verified gauge\nlockstep_parity_verified{verdict=\"%s\",spec=\"%s\"} %d\n",
                  (unsigned long long)s->drafted, (unsigned long long)s->accepted, es.kv_blocks, es.kv_used,
                  es.kv_cached_idle, es.kv_blocks ? (double)es.kv_used / es.kv_blocks : 0.0,
                  (unsigned long long)es.prefix_hit_tokens, (unsigned long long)es.preemptions, s->parity,
                  s->spec_verdict, !strcmp(s->parity, "verified"));
    pthread_mutex_unlock(&s->mu);
    return send_text(s, c, 200, "text/plain; version=0.0.4", t, NULL);
}

static enum MHD_Result tokenize_ep(server *s, struct MHD_Connection *c, conn *cn, bool detok) {
    cJSON *j = cJSON_ParseWithLength(cn->body ? cn->body : "", cn->len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return send_error(s, c, 400, "invalid_request_error", "the body must be a JSON object", NULL);
    }
    const ls_tokenizer *tk = ls_model_tokenizer(s->m);
    cJSON *o = cJSON_CreateObject();
    if (!detok) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content"),
                    *add = cJSON_GetObjectItemCaseSensitive(j, "add_special");
        if (!cJSON_IsString(content) || (add && !cJSON_IsBool(add))) {
            cJSON_Delete(j);
            cJSON_Delete(o);
            return send_error(s, c, 400, "invalid_request_error",
                              "'content' must be a string (and 'add_special' a boolean)", NULL);
        }
        size_t len = strlen(content->valuestring), n = 0;
        int32_t *ids = ls_malloc((len + 8) * sizeof *ids);
        ls_err err;
        if (!ids || ls_tokenize(tk, content->valuestring, len, cJSON_IsTrue(add), true, ids, len + 8, &n, &err)) {
            free(ids);
            cJSON_Delete(j);
            cJSON_Delete(o);
            return send_error(s, c, 400, "invalid_request_error", ids ? err.msg : "out of memory", NULL);
        }
        cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
        free(ids);
    } else {
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens"), *t;
        if (!cJSON_IsArray(toks)) {
            cJSON_Delete(j);
            cJSON_Delete(o);
            return send_error(s, c, 400, "invalid_request_error", "'tokens' must be a list of token ids", NULL);
        }
        size_t cap = 256, len = 0;
        char *text = ls_malloc(cap), piece[512];
        int i = 0;
        cJSON_ArrayForEach(t, toks) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= ls_tokenizer_n_vocab(tk)) {
                char msg[128];
                snprintf(msg, sizeof msg, "'tokens[%d]' is not a token id of this model (0..%u)", i,
                         ls_tokenizer_n_vocab(tk) - 1);
                free(text);
                cJSON_Delete(j);
                cJSON_Delete(o);
                return send_error(s, c, 400, "invalid_request_error", msg, NULL);
            }
            size_t n = ls_token_bytes(tk, (int32_t)t->valuedouble, false, piece, sizeof piece);
            if (n > sizeof piece) n = sizeof piece;
            if (len + n + 1 > cap) {
                while (len + n + 1 > cap) cap *= 2;
                char *nt = text ? ls_realloc(text, cap) : NULL;
                if (!nt) break;
                text = nt;
            }
            if (text) memcpy(text + len, piece, n);
            len += n;
            i++;
        }
        if (!text) {
            cJSON_Delete(j);
            cJSON_Delete(o);
            return send_error(s, c, 500, "server_error", "out of memory", NULL);
        }
        text[len] = 0;
        cJSON_AddStringToObject(o, "content", text);
        free(text);
    }
    cJSON_Delete(j);
    return send_json(s, c, 200, o);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = ls_calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) { /* accumulate the body; past the limit keep reading but drop it */
        if (!cn->too_big && cn->len + *upload_size > s->p->max_body) {
            cn->too_big = true;
            free(cn->body);
            cn->body = NULL;
            cn->len = cn->cap = 0;
        }
        if (!cn->too_big) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t nc = cn->cap ? cn->cap : 4096;
                while (nc < cn->len + *upload_size + 1) nc *= 2;
                char *b = ls_realloc(cn->body, nc);
                if (!b) return MHD_NO;
                cn->body = b;
                cn->cap = nc;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
            cn->body[cn->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return send_error(s, c, 405, "invalid_request_error", "use GET /health", NULL);
        cJSON *o = cJSON_CreateObject();
        int ready = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
        if (ready < 2) {
            cJSON_AddStringToObject(o, "status", ready == 0 ? "loading" : "probing");
            char *t = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            return t ? send_text(s, c, 503, "application/json", t, "1") : MHD_NO;
        }
        cJSON_AddStringToObject(o, "status", "ok");
        cJSON_AddStringToObject(o, "parity", s->parity);
        cJSON_AddStringToObject(o, "spec", ls_spec_kind_name(s->spec.kind));
        cJSON_AddStringToObject(o, "spec_probe", s->spec_verdict);
        return send_json(s, c, 200, o);
    }
    if (s->p->api_key && !key_ok(s->p->api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))
        return send_error(s, c, 401, "invalid_request_error", "missing or wrong API key (Authorization: Bearer KEY)",
                          NULL);
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) < 2)
        return send_error(s, c, 503, "server_busy", "the model is still loading", "1");
    if (cn->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", s->p->max_body);
        return send_error(s, c, 413, "invalid_request_error", msg, NULL);
    }
    bool chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    if (chat || cmpl) {
        if (!post) return send_error(s, c, 405, "invalid_request_error", "use POST", NULL);
        return generate(s, c, cn, chat, chat ? "/v1/chat/completions" : "/v1/completions");
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return send_error(s, c, 405, "invalid_request_error", "use GET /v1/models", NULL);
        cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddStringToObject(m, "id", s->model_name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "lockstep");
        cJSON_AddItemToArray(d, m);
        return send_json(s, c, 200, o);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return send_error(s, c, 405, "invalid_request_error", "use GET /metrics", NULL);
        return metrics(s, c);
    }
    if (!strcmp(url, "/tokenize") || !strcmp(url, "/detokenize")) {
        if (!post) return send_error(s, c, 405, "invalid_request_error", "use POST", NULL);
        return tokenize_ep(s, c, cn, url[1] == 'd');
    }
    char msg[160];
    snprintf(msg, sizeof msg, "no such endpoint: %.100s", url);
    return send_error(s, c, 404, "invalid_request_error", msg, NULL);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
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

/* ---- lifetime ---------------------------------------------------------------- */
int ls_server_run(const ls_server_params *p, ls_err *err) {
    server *s = ls_calloc(1, sizeof *s);
    if (!s) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    s->p = p;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    snprintf(s->parity, sizeof s->parity, "pending");
    snprintf(s->spec_verdict, sizeof s->spec_verdict, "off");
    const char *slash = strrchr(p->model_path, '/');
    s->model_name = p->model_alias ? p->model_alias : slash ? slash + 1 : p->model_path;
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    g_stop = 0;

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)p->port);
    if (inet_pton(AF_INET, p->host, &addr.sin_addr) != 1) {
        ls_err_set(err, LS_E_INVALID, "--host '%s' is not an IPv4 address", p->host);
        goto out;
    }
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                             MHD_USE_ERROR_LOG,
                         (uint16_t)p->port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned int)p->timeout_s, MHD_OPTION_END);
    if (!d) {
        ls_err_set(err, LS_E_IO, "cannot listen on %s:%d (in use, or not allowed)", p->host, p->port);
        goto out;
    }
    fprintf(stderr, "lockstep serve: listening on http://%s:%d (loading %s)\n", p->host, p->port, p->model_path);

    s->m = ls_model_load((ls_model_params){.path = p->model_path}, err);
    if (!s->m) goto out;
    {
        uint32_t tr = ls_model_hparams(s->m)->n_ctx_train;
        s->n_ctx = p->n_ctx ? p->n_ctx : (int)(tr < 4096 ? tr : 4096);
    }
    s->spec = p->spec;
    if (p->draft_model_path) {
        s->draft_model = ls_model_load((ls_model_params){.path = p->draft_model_path}, err);
        if (!s->draft_model) goto out;
        s->spec.draft_model = s->draft_model;
    }
    s->spec.n_ctx = s->n_ctx;
    s->spec.n_threads = 1;
    if (s->spec.kind != LS_SPEC_OFF && ls_spec_check(s->m, &s->spec, err)) goto out;
    int32_t K = s->spec.kind != LS_SPEC_OFF ? s->spec.draft_max : 0;
    int32_t step = p->n_parallel * (1 + K) > 512 ? p->n_parallel * (1 + K) : 512;
    ls_engine_params ep = {.n_ctx = s->n_ctx, .kv_mem = p->kv_mem, .n_seq_max = p->n_parallel, .step_tokens = step,
                           .n_threads = p->n_threads, .isa = -1, .draft_max = K, .fam = p->kernels_fam,
                           .fam_parity = p->kernels_fam_parity};
    s->e = ls_engine_create(s->m, ep, err);
    if (!s->e) goto out;
    __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
    if (!p->no_probe) {
        int32_t toks[8] = {1, 504, 3120, 282, 5248, 30, 198, 2};
        for (int i = 0; i < 8; i++) toks[i] %= (int32_t)ls_model_hparams(s->m)->n_vocab;
        ls_probe_result pr;
        if (ls_probe_run(s->m, toks, 8, p->n_threads, ls_fwd_isa(ls_engine_fwd(s->e)), &pr, err)) goto out;
        snprintf(s->parity, sizeof s->parity, "%s", pr.ok ? "verified" : "FAILED");
        if (!pr.ok) fprintf(stderr, "lockstep serve: parity probe FAILED: %s\n", pr.detail);
        if (s->spec.kind != LS_SPEC_OFF) {
            ls_spec_probe_result sr;
            bool memo;
            char cfg[64];
            snprintf(cfg, sizeof cfg, "spec=%s", ls_spec_kind_name(s->spec.kind));
            if (ls_spec_probe_cached(s->m, p->model_path, ls_probe_memo_dir(), cfg, ls_engine_fwd(s->e), K, 3, &sr, &memo,
                                     err))
                goto out;
            snprintf(s->spec_verdict, sizeof s->spec_verdict, "%s", ls_verdict_name(sr.verdict));
            if (sr.verdict == LS_VERDICT_DECLINED && !p->allow_inexact) {
                fprintf(stderr, "lockstep serve: speculation declined by the probe (%s); serving without it\n",
                        sr.detail);
                s->spec.kind = LS_SPEC_OFF;
            }
        }
    } else {
        snprintf(s->parity, sizeof s->parity, "skipped");
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        ls_err_set(err, LS_E_NOMEM, "cannot start the engine thread");
        goto out;
    }
    __atomic_store_n(&s->ready, 2, __ATOMIC_RELEASE);
    fprintf(stderr, "lockstep serve: ready (parity: %s; spec: %s %s; %d parallel, context %d)\n", s->parity,
            ls_spec_kind_name(s->spec.kind), s->spec_verdict, p->n_parallel, s->n_ctx);
    while (!g_stop) usleep(100 * 1000);

    /* Shutdown: stop accepting, let in-flight requests finish within the grace
     * period, cancel what is left, then stop. */
    fprintf(stderr, "lockstep serve: stopping; draining in-flight requests (up to %d s)\n", p->timeout_s);
    MHD_quiesce_daemon(d);
    double deadline = ls_now_ms() + 1000.0 * p->timeout_s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int live = s->live;
        pthread_mutex_unlock(&s->mu);
        if (live == 0) break;
        if (ls_now_ms() > deadline) {
            ls_engine_cancel_all(s->e);
            pthread_mutex_lock(&s->mu);
            pthread_cond_signal(&s->work);
            pthread_mutex_unlock(&s->mu);
        }
        usleep(50 * 1000);
    }
    MHD_stop_daemon(d);
    d = NULL;
    pthread_mutex_lock(&s->mu);
    s->stop_engine = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->engine_thread, NULL);
    fprintf(stderr, "lockstep serve: stopped\n");
    rc = 0;
out:
    if (d) MHD_stop_daemon(d);
    ls_engine_free(s->e);
    ls_model_free(s->m);
    ls_model_free(s->draft_model);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    free(s);
    return rc;
}
