/* jobs.c - a request's lifetime in the server: parsing and submission, the engine's
 * events, waiting for the answer or streaming it, cancellation when the client goes. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/server_impl.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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

/* Wakes the engine thread (it sleeps while the engine is idle). */
static void wake_engine(server *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

/* Engine thread: records one event into the job.  The logprobs are computed first,
 * outside every lock: a stream's reader never waits for the vocabulary pass. */
static void on_event(void *ud, const ls_event *ev) {
    job *j = ud;
    server *s = j->srv;
    bool stop_tok = ev->done && ev->finish == LS_FINISH_STOP && ev->token >= 0 && ev->n_gen == j->n_gen;
    ls_tok_lp lp;
    bool have_lp = ev->token >= 0 && !stop_tok && j->req.logprobs && ev->logits;
    if (have_lp) ls_srv_logprobs(ev->logits, s->n_vocab, ev->token, j->req.top_logprobs, &lp);
    pthread_mutex_lock(&j->mu);
    if (ev->token >= 0 && !stop_tok) {
        if (j->n_tokens == j->cap_tokens) {
            int32_t nc = j->cap_tokens ? 2 * j->cap_tokens : 64;
            int32_t *t = realloc(j->tokens, (size_t)nc * sizeof *t);
            ls_tok_lp *l = j->req.logprobs ? realloc(j->lps, (size_t)nc * sizeof *l) : j->lps;
            if (t) j->tokens = t;
            if (l) j->lps = l;
            if (t && (l || !j->req.logprobs)) j->cap_tokens = nc;
        }
        if (j->n_tokens < j->cap_tokens) {
            if (have_lp) j->lps[j->n_tokens] = lp;
            j->tokens[j->n_tokens++] = ev->token;
        }
    }
    if (ev->text_len) {
        if (j->text_len + ev->text_len + 1 > j->text_cap) {
            size_t nc = j->text_cap ? j->text_cap : 256;
            while (nc < j->text_len + ev->text_len + 1) nc *= 2;
            char *t = realloc(j->text, nc);
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
        s->ct.gen_tokens += (uint64_t)ev->n_gen;
        s->ct.drafted += (uint64_t)ev->n_drafted;
        s->ct.accepted += (uint64_t)ev->n_accepted;
        pthread_mutex_unlock(&s->mu);
        job_unref(j); /* the engine's reference */
    }
}

void *ls_srv_engine_main(void *arg) {
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
        ls_srv_count_step(s, rows);
    }
    return NULL;
}

static void out_append(job *j, char *s) {
    if (!s) return;
    size_t n = strlen(s);
    char *o = realloc(j->out, j->out_len + n + 1);
    if (o) {
        memcpy(o + j->out_len, s, n + 1);
        j->out = o;
        j->out_len += n;
    }
    free(s);
}

static char *dupz(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
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
            if (j->req.chat) out_append(j, ls_srv_chunk(j, "", 0, 0, 0, true, NULL, false));
            j->phase = 1;
            continue;
        }
        if (j->phase == 1 && j->streamed < j->text_len) {
            int32_t lp_to = j->req.logprobs ? j->n_tokens : 0;
            out_append(j, ls_srv_chunk(j, j->text + j->streamed, j->text_len - j->streamed, j->lp_sent, lp_to, false,
                                       NULL, false));
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
            out_append(j, ls_srv_chunk(j, "", 0, j->lp_sent, j->req.logprobs ? j->n_tokens : 0, false,
                                       ls_srv_finish_str(j->finish), false));
            if (j->req.include_usage) out_append(j, ls_srv_chunk(j, "", 0, 0, 0, false, NULL, true));
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
    wake_engine(j->srv);
    fprintf(stderr, "lockstep serve: %s %s stream prompt=%d gen=%d ms=%.0f%s\n", j->id, j->path, j->n_prompt, n_tokens,
            now_ms() - j->t0, done ? "" : " (client left; cancelled)");
    job_unref(j);
}

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

static ls_status render_chat(void *ud, const ls_chat_msg *msgs, size_t n, char **out, ls_err *err) {
    return ls_model_apply_chat(ud, msgs, n, true, out, err);
}

/* Parses, tokenizes and checks a request body into a new job (one reference), or
 * answers the error itself and returns NULL (*res set). */
static job *job_new(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path, enum MHD_Result *res) {
    ls_err err;
    ls_srv_limits lim = {.max_messages = s->p->max_messages, .max_tokens = s->p->max_tokens};
    job *j = calloc(1, sizeof *j);
    if (!j) {
        *res = ls_srv_send_error(s, c, 500, "server_error", "out of memory", NULL);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    j->refs = 1;
    j->path = path;
    j->t0 = now_ms();
    j->created = time(NULL);
    if (ls_srv_parse(cn->body ? cn->body : "", cn->len, chat, s->has_chat ? render_chat : NULL, s->m, &lim,
                     &j->req, &err)) {
        job_unref(j);
        *res = ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
        return NULL;
    }
    static uint64_t counter;
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)j->created,
             (unsigned long long)(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffff));
    size_t len = strlen(j->req.prompt), n = 0, cap = len + 8;
    j->prompt = malloc(cap * sizeof *j->prompt);
    if (!j->prompt || ls_model_tokenize(s->m, j->req.prompt, len, true, true, j->prompt, cap, &n, &err)) {
        *res = ls_srv_send_error(s, c, 400, "invalid_request_error", j->prompt ? err.msg : "out of memory", NULL);
        job_unref(j);
        return NULL;
    }
    j->n_prompt = (int32_t)n;
    return j;
}

enum MHD_Result ls_srv_generate(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path) {
    enum MHD_Result res = MHD_NO;
    job *j = job_new(s, c, cn, chat, path, &res);
    if (!j) return res;
    ls_err err;
    pthread_mutex_lock(&s->mu);
    bool full = s->live >= s->p->n_parallel + s->p->max_queue;
    pthread_mutex_unlock(&s->mu);
    if (full) {
        job_unref(j);
        return ls_srv_send_error(s, c, 503, "server_busy", "the request queue is full; retry later", "1");
    }
    int32_t max_tokens = j->req.max_tokens;
    if (max_tokens < 0) { /* until the context is full, within the server's cap */
        max_tokens = s->n_ctx - j->n_prompt;
        if (max_tokens > s->p->max_tokens) max_tokens = s->p->max_tokens;
        if (max_tokens < 1) max_tokens = 1; /* the engine names a prompt that leaves no room */
    }
    ls_request q = LS_REQUEST_INIT;
    q.prompt = j->prompt;
    q.n_prompt = j->n_prompt;
    q.max_tokens = max_tokens;
    q.sampling = (ls_sampler_params){.temperature = j->req.temperature, .top_k = j->req.top_k, .top_p = j->req.top_p,
                                     .seed = j->req.seed};
    q.stop = (const char *const *)j->req.stop;
    q.n_stop = j->req.n_stop;
    q.ignore_eos = j->req.ignore_eos;
    q.want_logits = j->req.logprobs;
    q.on_event = on_event;
    q.ud = j;
    if (s->spec.kind != LS_SPEC_OFF) {
        if (!(j->drafter = ls_drafter_create(s->e, &s->spec, &q.sampling, &err))) {
            job_unref(j);
            return ls_srv_send_error(s, c, 500, "server_error", err.msg, NULL);
        }
        ls_drafter_attach(j->drafter, &q);
    }
    j->refs = 2; /* the HTTP side and the engine's events */
    pthread_mutex_lock(&s->mu);
    ls_status st = ls_engine_submit(s->e, &q, &j->engine_id, &err);
    if (!st) {
        s->live++;
        s->ct.prompt_tokens += (uint64_t)j->n_prompt;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    if (st) {
        j->refs = 1;
        job_unref(j);
        return ls_srv_send_error(s, c, st == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
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
        res = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        ls_srv_count_status(s, 200);
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
            wake_engine(s);
        }
    }
    if (gone) {
        int32_t n = j->n_tokens;
        pthread_mutex_unlock(&j->mu);
        fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f client gone: cancelled\n", j->id, path,
                j->n_prompt, n, now_ms() - j->t0);
        job_unref(j);
        return MHD_NO; /* nobody to answer: close the connection */
    }
    if (j->finish == LS_FINISH_ERROR) {
        int32_t n = j->n_tokens;
        pthread_mutex_unlock(&j->mu);
        fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=500 (out of memory)\n", j->id, path,
                j->n_prompt, n, now_ms() - j->t0);
        job_unref(j);
        return ls_srv_send_error(s, c, 500, "server_error", "the server ran out of memory while generating this response",
                                 NULL);
    }
    cJSON *o = ls_srv_response(j);
    pthread_mutex_unlock(&j->mu);
    fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=200\n", j->id, path, j->n_prompt, j->n_tokens,
            now_ms() - j->t0);
    job_unref(j);
    return ls_srv_send_json(s, c, 200, o);
}
