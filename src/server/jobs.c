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
    server *s = j->srv;
    ls_drafter_free(j->drafter);
    ls_srv_req_free(&j->req);
    free(j->prompt);
    free(j->text);
    free(j->tokens);
    free(j->lps);
    free(j->plps);
    free(j->out);
    cJSON_Delete(j->api_echo);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
    if (s) __atomic_sub_fetch(&s->n_jobs, 1, __ATOMIC_ACQ_REL); /* the last touch of s (router.h) */
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
    if (ev->prompt) { /* echo + logprobs: a prompt token scored by the logits before it */
        if (j->plps && ev->pos >= 1 && ev->pos < j->n_prompt && ev->logits)
            ls_sample_logprobs(ev->logits, s->n_vocab, ev->token, j->req.top_logprobs, &j->plps[ev->pos]);
        return;
    }
    bool stop_tok = ev->done && ev->finish == LS_FINISH_STOP && ev->token >= 0 && ev->n_gen == j->n_gen;
    if (j->req.echo && j->req.max_tokens == 0) stop_tok = true; /* scoring only: the one token is dropped */
    /* before the job is marked done: a client that saw the end finds the place free */
    if ((ev->token >= 0 && !stop_tok) || ev->done) { /* GET /slots: a queued request takes its place when it starts */
        pthread_mutex_lock(&s->mu);
        if (j->slot < 0 && !ev->done)
            for (int k = 0; k < s->p->n_parallel && s->slots; k++)
                if (!s->slots[k].busy) {
                    __atomic_store_n(&j->slot, k, __ATOMIC_RELAXED);
                    s->slots[k] = (srv_slot){.busy = true, .path = j->path, .n_prompt = j->n_prompt};
                    snprintf(s->slots[k].task, sizeof s->slots[k].task, "%s", j->id);
                    break;
                }
        if (j->slot >= 0) {
            s->slots[j->slot].n_decoded = ev->n_gen;
            if (ev->done) s->slots[j->slot].busy = false;
        }
        pthread_mutex_unlock(&s->mu);
    }
    ls_tok_lp lp;
    bool have_lp = ev->token >= 0 && !stop_tok && j->req.logprobs && ev->logits;
    if (have_lp) ls_sample_logprobs(ev->logits, s->n_vocab, ev->token, j->req.top_logprobs, &lp);
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
    const bool gen_tok = ev->token >= 0 && !ev->prompt && !stop_tok;
    if (gen_tok) {
        double t = now_ms();
        if (j->t_first == 0) j->t_first = t;
        j->t_last = t;
    }
    if (ev->text_len && !(j->req.echo && j->req.max_tokens == 0)) {
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
    double lat[4] = {-1, -1, -1, -1};
    if (done && ev->finish == LS_FINISH_CANCELLED && __atomic_load_n(&s->shutting_down, __ATOMIC_ACQUIRE))
        j->shutdown_cut = true;
    if (done) {
        j->done = true;
        j->finish = ev->finish;
        j->stop_eos = stop_tok && !(j->req.echo && j->req.max_tokens == 0);
        if (ev->finish == LS_FINISH_STOP || ev->finish == LS_FINISH_LENGTH) {
            double t = now_ms();
            lat[0] = j->t_submit - j->t0;
            lat[1] = j->t_first ? j->t_first - j->t0 : -1;
            lat[2] = j->n_tokens > 1 ? (j->t_last - j->t_first) / (j->n_tokens - 1) : -1;
            lat[3] = t - j->t0;
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (gen_tok) ls_srv_count_tokens(s, 1);
    if (done && lat[3] >= 0) ls_srv_count_latency(s, lat[0], lat[1], lat[2], lat[3]);
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
    if (!(s = ls_srv_utf8_sanitize(s))) return; /* every event is valid UTF-8 */
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

/* A stream that has nothing to say for a third of --timeout says ": keep-alive" (an SSE
 * comment, which clients skip).  MHD measures --timeout from the last bytes it sent, and
 * a reader that blocks past it has the connection cut when it returns: without this, a
 * stream whose first token waits longer than --timeout (a long prefill, a full queue)
 * was closed with its headers sent and no event. */
static bool keepalive_due(const server *s, double *out_t) {
    double now = now_ms();
    if (now - *out_t < 1000.0 * s->p->timeout_s / 3) return false;
    *out_t = now;
    return true;
}

#define KEEPALIVE ": keep-alive\n\n"
/* The message of a request the engine gave up on (LS_FINISH_ERROR). */
#define LS_SRV_GAVE_UP \
    "the server could not go on generating this response (out of memory, or the grammar's token mask went over its " \
    "work budget)"

/* Chat: the new pieces of the reply that more text cannot change, split at a think
 * block (reasoning.c): reasoning_content chunks, then content chunks (these carry the
 * log-probabilities so far).  done: the whole rest. */
static char *chat_pieces(job *j, bool done) {
    ls_srv_split sp;
    ls_srv_think_split(j->text, j->text_len, done, j->req.reasoning, &sp);
    size_t nr = sp.r1 - sp.r0 > j->sent_r ? sp.r1 - sp.r0 - j->sent_r : 0,
           nc = sp.c1 - sp.c0 > j->sent_c ? sp.c1 - sp.c0 - j->sent_c : 0;
    char *out = NULL;
    if (nr) {
        ls_srv_cat(&out, ls_srv_chunk_reasoning(j, j->text + sp.r0 + j->sent_r, nr));
        j->sent_r += nr;
    }
    if (nc) {
        int32_t lp_to = j->req.logprobs ? j->n_tokens : 0;
        ls_srv_cat(&out, ls_srv_chunk(j, j->text + sp.c0 + j->sent_c, nc, j->lp_sent, lp_to, false, NULL, false));
        j->sent_c += nc;
        if (lp_to) j->lp_sent = lp_to;
    }
    return out;
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
            j->out_t = now_ms();
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->phase == 3) {
            if (j->sk) {
                j->sk->n_gen = j->n_tokens;
                if (j->shutdown_cut) j->sk->note = "cancelled (shutdown)";
            }
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (j->phase == 0 && !j->api) {
            if (j->req.chat) out_append(j, ls_srv_chunk(j, "", 0, 0, 0, true, NULL, false));
            j->phase = 1;
            continue;
        }
        if (j->api) { /* the Responses / Messages APIs shape their own events */
            if (j->phase == 0 || j->streamed < j->text_len || j->done) {
                bool done = j->done;
                j->streamed = j->text_len;
                out_append(j, j->api->stream(j));
                j->phase = done ? 3 : 1;
                continue;
            }
        } else if (j->phase == 1 && j->streamed < j->text_len && j->req.chat && !j->native && !j->req.n_tools) {
            out_append(j, chat_pieces(j, false));
            j->streamed = j->text_len; /* looked at (what is held back goes out later) */
            continue;
        } else if (j->phase == 1 && j->streamed < j->text_len && !(j->req.chat && j->req.n_tools > 0)) {
            int32_t lp_to = j->req.logprobs ? j->n_tokens : 0;
            if (j->native)
                out_append(j, ls_srv_native_chunk(j, j->text + j->streamed, j->text_len - j->streamed, j->lp_sent, lp_to,
                                                  false));
            else
                out_append(j, ls_srv_chunk(j, j->text + j->streamed, j->text_len - j->streamed, j->lp_sent, lp_to,
                                           false, NULL, false));
            j->streamed = j->text_len;
            if (lp_to) j->lp_sent = lp_to;
            continue;
        }
        if (j->phase == 1 && j->done && j->finish == LS_FINISH_ERROR) { /* the engine gave up on it */
            out_append(j, dupz("data: {\"error\":{\"message\":\"the server could not go on generating (out of memory, or the "
                               "grammar's token mask went over its work budget); the text above is all there is\","
                               "\"type\":\"server_error\",\"code\":500}}\n\n"));
            if (!j->native) out_append(j, dupz("data: [DONE]\n\n"));
            j->phase = 3;
            continue;
        }
        if (j->phase == 1 && j->done && j->native) { /* llama-server ends with the whole reply, no [DONE] */
            out_append(j, ls_srv_native_chunk(j, "", 0, j->lp_sent, j->req.logprobs ? j->n_tokens : 0, true));
            j->phase = 3;
            continue;
        }
        if (j->phase == 1 && j->done && j->req.chat && j->req.n_tools > 0) {
            out_append(j, ls_srv_tools_chunks(j));
            if (j->req.include_usage) out_append(j, ls_srv_chunk(j, "", 0, 0, 0, false, NULL, true));
            out_append(j, dupz("data: [DONE]\n\n"));
            j->phase = 3;
            continue;
        }
        if (j->phase == 1 && j->done) {
            if (j->req.chat) out_append(j, chat_pieces(j, true)); /* what was held back */
            out_append(j, ls_srv_chunk(j, "", 0, j->lp_sent, j->req.logprobs ? j->n_tokens : 0, false,
                                       ls_srv_finish_str(j->finish), false));
            if (j->req.include_usage) out_append(j, ls_srv_chunk(j, "", 0, 0, 0, false, NULL, true));
            out_append(j, dupz("data: [DONE]\n\n"));
            j->phase = 3;
            continue;
        }
        if (keepalive_due(j->srv, &j->out_t)) {
            out_append(j, dupz(KEEPALIVE));
            continue;
        }
        job_wait(j, 200);
    }
}

/* Why a stream's response ended before its generation: MHD's --timeout (the client
 * stopped reading), or the client went away.  MHD tells the completion callback, which
 * runs before the response is freed, and the callback keeps it in the connection. */
static int stream_cause(const sock *k) {
    return k && k->last_toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? LS_CANCEL_TIMEOUT : LS_CANCEL_CLIENT;
}

/* The response is gone (finished, or the client disconnected). */
static void stream_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    int32_t n_tokens = j->n_tokens;
    bool cut = j->shutdown_cut;
    pthread_mutex_unlock(&j->mu);
    if (!done) ls_engine_cancel(j->srv->e, j->engine_id); /* frees its KV at the next step */
    wake_engine(j->srv);
    if (!done || cut) ls_srv_count_cancel(j->srv, !done ? stream_cause(j->sk) : LS_CANCEL_SHUTDOWN);
    fprintf(stderr, "lockstep serve: %s %s stream prompt=%d gen=%d ms=%.0f%s\n", j->id, j->path, j->n_prompt, n_tokens,
            now_ms() - j->t0,
            !done ? " (client left; cancelled)" : cut ? " cancelled: the shutdown grace period ended" : "");
    job_unref(j);
}

/* Whether the client closed its end: the socket reads as end-of-file (or fails).  A
 * client that only half-closes (shutdown(SHUT_WR)) while it waits looks the same. */
bool ls_srv_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    char b;
    return pfd.revents & POLLIN ? recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0 : false;
}

static ls_status render_chat(void *ud, const ls_chat_msg *msgs, size_t n, const ls_chat_opts *opts, char **out,
                     ls_err *err) {
    return ls_model_apply_chat_opts(ud, msgs, n, true, opts, out, err);
}

/* Parses, tokenizes and checks a request body into a new job (one reference), or
 * answers the error itself and returns NULL (*res set). */
static job *job_new(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path, const job *first,
                    int32_t choice, enum MHD_Result *res) {
    ls_err err;
    ls_srv_limits lim = {.max_messages = s->p->max_messages, .max_tokens = s->p->max_tokens, .n_vocab = s->n_vocab,
                         .tool_format = s->tool_format, .default_system = s->default_system,
                         .reasoning = s->p->reasoning_format};
    job *j = calloc(1, sizeof *j);
    if (!j) {
        *res = ls_srv_send_error(s, c, 500, "server_error", "out of memory", NULL);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    __atomic_add_fetch(&s->n_jobs, 1, __ATOMIC_ACQ_REL);
    j->refs = 1;
    j->path = path;
    j->t0 = cn->t0 ? cn->t0 : now_ms();
    j->sk = ls_srv_sock(c);
    j->created = time(NULL);
    j->slot = -1;
    j->choice = choice;
    j->native = cn->native;
    if (!first) { /* the Responses / Messages APIs: their reply shape, and what it repeats */
        j->api = cn->api;
        j->api_echo = cn->api_echo;
        cn->api_echo = NULL;
    }
    if (ls_srv_parse(cn->body ? cn->body : "", cn->len, chat, s->has_chat ? render_chat : NULL, s->m, &lim,
                     &j->req, &err)) {
        job_unref(j);
        *res = ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
        return NULL;
    }
    if (first) { /* choice `choice` of a request with n > 1 or a list of prompts: its prompt and seed */
        j->req.seed = ls_srv_choice_seed(first->req.seed, choice % first->req.n);
        j->req.seed_given = true;
        int32_t pi = choice / first->req.n;
        if (pi > 0 && pi < j->req.n_prompts) {
            size_t pl = strlen(j->req.prompts[pi]);
            char *np = malloc(pl + 1);
            if (!np) {
                job_unref(j);
                *res = ls_srv_send_error(s, c, 500, "server_error", "out of memory", NULL);
                return NULL;
            }
            memcpy(np, j->req.prompts[pi], pl + 1);
            free(j->req.prompt);
            j->req.prompt = np;
        }
    }
    static uint64_t counter;
    snprintf(j->id, sizeof j->id, "%s%s%llx%04llx", j->api ? j->api->id_prefix : chat ? "chatcmpl" : "cmpl",
             j->api ? "_" : "-", (unsigned long long)j->created,
             (unsigned long long)(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffff));
    if (j->native) { /* /completion's n_probs: up to 20 top log-probabilities */
        j->req.logprobs = cn->n_probs > 0;
        j->req.top_logprobs = cn->n_probs;
    }
    size_t len = strlen(j->req.prompt), n = 0, cap = len + 8 + (size_t)j->req.n_prompt_ids;
    j->prompt = malloc(cap * sizeof *j->prompt);
    if (j->prompt && j->req.prompt_ids) { /* given as token ids: as they are */
        memcpy(j->prompt, j->req.prompt_ids, (size_t)j->req.n_prompt_ids * sizeof *j->prompt);
        n = (size_t)j->req.n_prompt_ids;
    } else if (!j->prompt || ls_model_tokenize(s->m, j->req.prompt, len, true, true, j->prompt, cap, &n, &err)) {
        *res = ls_srv_send_error(s, c, 400, "invalid_request_error", j->prompt ? err.msg : "out of memory", NULL);
        job_unref(j);
        return NULL;
    }
    j->n_prompt = (int32_t)n;
    if (j->req.echo && j->req.logprobs && !(j->plps = calloc(n ? n : 1, sizeof *j->plps))) {
        *res = ls_srv_send_error(s, c, 500, "server_error", "out of memory", NULL);
        job_unref(j);
        return NULL;
    }
    if (j->sk) {
        snprintf(j->sk->req_id, sizeof j->sk->req_id, "%s", j->id);
        j->sk->n_prompt = j->n_prompt;
    }
    return j;
}

/* A long prefill's progress on a terminal (progress: stderr is one, no --no-progress):
 * whole lines, since other threads' access-log lines interleave; the first once the
 * prompt has been prefilling for 2 s, then every 5 s, and one when it is in.  Called on
 * the engine thread, which holds a reference to j. */
static void on_prefill(void *ud, int32_t done, int32_t total) {
    job *j = ud;
    const double now = now_ms();
    if (done < total) {
        if (now - (j->pf_last ? j->pf_last : j->t_submit - 3000) < 5000) return;
        fprintf(stderr, "lockstep serve: %s: prefill %d/%d tokens (%.0f s)\n", j->id, done, total,
                (now - j->t_submit) / 1e3);
        j->pf_last = now;
    } else if (j->pf_last) {
        fprintf(stderr, "lockstep serve: %s: prefill of %d tokens done in %.1f s\n", j->id, total,
                (now - j->t_submit) / 1e3);
        j->pf_last = 0;
    }
}

/* Hands a parsed job to the engine (the engine then holds a reference): 0, or the HTTP
 * status of the failure (err set; the caller still holds its one reference). */
static unsigned submit_job(server *s, job *j, ls_err *err) {
    int32_t max_tokens = j->req.max_tokens;
    if (max_tokens == 0) max_tokens = 1; /* echo scoring the prompt only: its one token is dropped */
    if (max_tokens < 0) { /* until the context is full, within the server's cap */
        max_tokens = s->n_ctx - j->n_prompt;
        if (max_tokens > s->p->max_tokens) max_tokens = s->p->max_tokens;
        if (max_tokens < 1) max_tokens = 1; /* the engine names a prompt that leaves no room */
    }
    ls_request q = LS_REQUEST_INIT;
    q.prompt = j->prompt;
    q.n_prompt = j->n_prompt;
    q.max_tokens = max_tokens;
    q.sampling = ls_srv_sampling(&j->req);
    q.stop = (const char *const *)j->req.stop;
    q.n_stop = j->req.n_stop;
    q.ignore_eos = j->req.ignore_eos;
    q.grammar = j->req.grammar;
    q.want_logits = j->req.logprobs;
    q.want_prompt_logits = j->req.echo && j->req.logprobs;
    q.on_event = on_event;
    q.ud = j;
    if (s->p->progress) {
        q.on_prefill = on_prefill;
        q.prefill_ud = j;
    }
    if (s->spec.kind != LS_SPEC_OFF) {
        if (!(j->drafter = ls_drafter_create(s->e, &s->spec, &q.sampling, err))) return 500;
        ls_drafter_attach(j->drafter, &q);
    }
    j->refs = 2; /* the HTTP side and the engine's events */
    j->t_submit = now_ms();
    pthread_mutex_lock(&s->mu);
    if (s->shutting_down) { /* the grace period is over: nothing new reaches the engine */
        pthread_mutex_unlock(&s->mu);
        j->refs = 1;
        ls_srv_error(err, LS_E_INVALID, "the server shut down before this request could start; retry it on another "
                                          "replica");
        return 503;
    }
    ls_status st = ls_engine_submit(s->e, &q, &j->engine_id, err);
    if (!st) {
        for (int k = 0; k < s->p->n_parallel && s->slots && j->slot < 0; k++)
            if (!s->slots[k].busy) {
                __atomic_store_n(&j->slot, k, __ATOMIC_RELAXED);
                s->slots[k] = (srv_slot){.busy = true, .path = j->path, .n_prompt = j->n_prompt};
                snprintf(s->slots[k].task, sizeof s->slots[k].task, "%s", j->id);
            }
        s->live++;
        s->ct.prompt_tokens += (uint64_t)j->n_prompt;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    if (st) {
        j->refs = 1;
        return st == LS_E_NOMEM ? 500 : 400;
    }
    return 0;
}

static enum MHD_Result send_submit_error(server *s, struct MHD_Connection *c, unsigned status, const ls_err *err) {
    if (status == 503) ls_srv_count_cancel(s, LS_CANCEL_SHUTDOWN);
    return ls_srv_send_error(s, c, status,
                             status == 500 ? "server_error" : status == 503 ? "server_shutdown" : "invalid_request_error",
                             err->msg, status == 503 ? "1" : NULL);
}

/* A client that left while its request was parsed (a grammar or schema compiled, a long
 * prompt tokenized) is noticed before the engine sees the request. */
static bool gone_before_submit(server *s, struct MHD_Connection *c, const job *j) {
    if (!ls_srv_client_gone(c)) return false;
    fprintf(stderr, "lockstep serve: %s %s client gone before the request started: not submitted\n", j->id, j->path);
    if (j->sk) j->sk->note = "cancelled (client gone)";
    ls_srv_count_cancel(s, LS_CANCEL_CLIENT);
    return true;
}

static void set_num(cJSON *o, const char *k, double v) { cJSON_ReplaceItemInObject(o, k, cJSON_CreateNumber(v)); }

static void add_seed(cJSON *o, int64_t seed) {
    char sd[32];
    snprintf(sd, sizeof sd, "%lld", (long long)seed);
    cJSON_AddRawToObject(o, "seed", sd);
}

/* A stream of several choices (n > 1 or a list of prompts): each choice's chunks carry
 * its index, interleaved as they come; each choice gets its finish chunk; then the
 * usage (summed) when asked, and [DONE].  Only MHD's reader thread touches the group. */
typedef struct {
    job *js[LS_SRV_MAX_CHOICES];
    bool fin[LS_SRV_MAX_CHOICES];
    int32_t n;
    int phase; /* 0 role chunks, 1 content, 3 over */
    char *out;
    size_t out_len, out_off;
    double out_t; /* when bytes last went to MHD (keepalive_due) */
} group;

static void grp_append(group *g, char *t) {
    if (!(t = ls_srv_utf8_sanitize(t))) return; /* every event is valid UTF-8 */
    size_t n = strlen(t);
    char *o = realloc(g->out, g->out_len + n + 1);
    if (o) {
        memcpy(o + g->out_len, t, n + 1);
        g->out = o;
        g->out_len += n;
    }
    free(t);
}

/* The usage chunk of the whole group: j0's, with the counts summed. */
static char *grp_usage(group *g) {
    char *t = ls_srv_chunk(g->js[0], "", 0, 0, 0, false, NULL, true);
    cJSON *o = t && strlen(t) > 6 ? cJSON_Parse(t + 6) : NULL;
    free(t);
    if (!o) return NULL;
    int64_t np = 0, ng = 0, nc = 0;
    const int32_t per = g->js[0]->req.n;
    for (int32_t k = 0; k < g->n; k++) {
        if (k % per == 0) {
            np += g->js[k]->n_prompt;
            nc += g->js[k]->n_cached;
        }
        ng += g->js[k]->n_tokens;
    }
    cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
    cJSON_ReplaceItemInObject(u, "prompt_tokens", cJSON_CreateNumber((double)np));
    cJSON_ReplaceItemInObject(u, "completion_tokens", cJSON_CreateNumber((double)ng));
    cJSON_ReplaceItemInObject(u, "total_tokens", cJSON_CreateNumber((double)(np + ng)));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"), "cached_tokens",
                              cJSON_CreateNumber((double)nc));
    char *p = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!p) return NULL;
    size_t pl = strlen(p);
    char *ev = malloc(pl + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, p, pl);
        memcpy(ev + 6 + pl, "\n\n", 3);
    }
    free(p);
    return ev;
}

static ssize_t group_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    group *g = cls;
    for (;;) {
        if (g->out_off < g->out_len) {
            size_t n = g->out_len - g->out_off < max ? g->out_len - g->out_off : max;
            memcpy(buf, g->out + g->out_off, n);
            g->out_off += n;
            if (g->out_off == g->out_len) g->out_off = g->out_len = 0;
            g->out_t = now_ms();
            return (ssize_t)n;
        }
        if (g->phase == 3) return MHD_CONTENT_READER_END_OF_STREAM;
        if (g->phase == 0) {
            for (int32_t k = 0; k < g->n && g->js[0]->req.chat; k++) {
                pthread_mutex_lock(&g->js[k]->mu);
                grp_append(g, ls_srv_chunk(g->js[k], "", 0, 0, 0, true, NULL, false));
                pthread_mutex_unlock(&g->js[k]->mu);
            }
            g->phase = 1;
            continue;
        }
        bool progress = false, all = true, error = false;
        job *wait_on = NULL;
        for (int32_t k = 0; k < g->n; k++) {
            job *j = g->js[k];
            pthread_mutex_lock(&j->mu);
            if (j->streamed < j->text_len && j->req.chat) {
                char *p = chat_pieces(j, false);
                if (p) grp_append(g, p);
                j->streamed = j->text_len;
                progress = true;
            } else if (j->streamed < j->text_len) {
                int32_t lp_to = j->req.logprobs ? j->n_tokens : 0;
                grp_append(g, ls_srv_chunk(j, j->text + j->streamed, j->text_len - j->streamed, j->lp_sent, lp_to, false,
                                           NULL, false));
                j->streamed = j->text_len;
                if (lp_to) j->lp_sent = lp_to;
                progress = true;
            }
            if (j->done && !g->fin[k]) {
                if (j->req.chat) {
                    char *p = chat_pieces(j, true);
                    if (p) grp_append(g, p);
                }
                error = error || j->finish == LS_FINISH_ERROR;
                grp_append(g, ls_srv_chunk(j, "", 0, j->lp_sent, j->req.logprobs ? j->n_tokens : 0, false,
                                           ls_srv_finish_str(j->finish), false));
                g->fin[k] = true;
                progress = true;
            }
            if (!j->done && !wait_on) wait_on = j;
            all = all && g->fin[k];
            pthread_mutex_unlock(&j->mu);
        }
        if (error) {
            grp_append(g, dupz("data: {\"error\":{\"message\":\"the server could not go on generating (out of memory, or the "
                               "grammar's token mask went over its work budget); the text above is all there is\","
                               "\"type\":\"server_error\",\"code\":500}}\n\n"));
            for (int32_t k = 0; k < g->n; k++) ls_engine_cancel(g->js[0]->srv->e, g->js[k]->engine_id);
            wake_engine(g->js[0]->srv);
            all = true;
        }
        if (all) {
            if (g->js[0]->req.include_usage && !error) grp_append(g, grp_usage(g));
            grp_append(g, dupz("data: [DONE]\n\n"));
            g->phase = 3;
            continue;
        }
        if (!progress && keepalive_due(g->js[0]->srv, &g->out_t)) {
            grp_append(g, dupz(KEEPALIVE));
            continue;
        }
        if (!progress && wait_on) {
            pthread_mutex_lock(&wait_on->mu);
            if (!wait_on->done && wait_on->streamed == wait_on->text_len) job_wait(wait_on, 50);
            pthread_mutex_unlock(&wait_on->mu);
        }
    }
}

static void group_free(void *cls) {
    group *g = cls;
    server *s = g->js[0]->srv;
    bool left = false, cut = false;
    for (int32_t k = 0; k < g->n; k++) {
        pthread_mutex_lock(&g->js[k]->mu);
        bool done = g->js[k]->done;
        cut = cut || g->js[k]->shutdown_cut;
        pthread_mutex_unlock(&g->js[k]->mu);
        if (!done) ls_engine_cancel(s->e, g->js[k]->engine_id);
        left = left || !done;
    }
    wake_engine(s);
    if (left || cut) ls_srv_count_cancel(s, left ? stream_cause(g->js[0]->sk) : LS_CANCEL_SHUTDOWN);
    fprintf(stderr, "lockstep serve: %s %s stream choices=%d ms=%.0f\n", g->js[0]->id, g->js[0]->path, g->n,
            now_ms() - g->js[0]->t0);
    for (int32_t k = 0; k < g->n; k++) job_unref(g->js[k]);
    free(g->out);
    free(g);
}

/* n > 1 or a list of prompts (not streamed): one engine request per choice; choice k is
 * prompt k / n with the seed ls_srv_choice_seed(seed, k % n), reported in the choice, so
 * one request with that prompt and seed gives the choice's bytes again. */
static enum MHD_Result generate_many(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path,
                                     job *j0) {
    const int32_t n_all = j0->req.n * j0->req.n_prompts;
    job *js[LS_SRV_MAX_CHOICES] = {j0};
    enum MHD_Result res = MHD_NO;
    ls_err err;
    pthread_mutex_lock(&s->mu);
    bool full = s->live + n_all > s->p->n_parallel + s->p->max_queue;
    pthread_mutex_unlock(&s->mu);
    if (full) {
        job_unref(j0);
        return ls_srv_send_error(s, c, 503, "server_busy", "the request queue is full; retry later", "1");
    }
    /* Each choice parses the body again (a schema converts, a long prompt tokenizes): up
     * to 16 times one request's parse.  Between choices, the end of the shutdown grace
     * period answers 503 and a client that left stops the work, so neither waits for all
     * of them. */
    int32_t made = 1;
    for (; made < n_all; made++) {
        bool cut = __atomic_load_n(&s->shutting_down, __ATOMIC_ACQUIRE);
        if (cut || gone_before_submit(s, c, j0)) {
            for (int32_t k = 0; k < made; k++) job_unref(js[k]);
            if (!cut) return MHD_NO;
            ls_srv_error(&err, LS_E_INVALID, "the server shut down before this request could start; retry it on "
                                             "another replica");
            return send_submit_error(s, c, 503, &err);
        }
        if (!(js[made] = job_new(s, c, cn, chat, path, j0, made, &res))) { /* job_new answered the error */
            for (int32_t k = 0; k < made; k++) job_unref(js[k]);
            return res;
        }
    }
    for (int32_t k = 1; k < n_all; k++) memcpy(js[k]->id, j0->id, sizeof j0->id); /* one response: one id */
    group *g = NULL;
    if (j0->req.stream && !(g = calloc(1, sizeof *g))) {
        for (int32_t k = 0; k < n_all; k++) job_unref(js[k]);
        return ls_srv_send_error(s, c, 500, "server_error", "out of memory", NULL);
    }
    if (gone_before_submit(s, c, j0)) {
        for (int32_t k = 0; k < n_all; k++) job_unref(js[k]);
        free(g);
        return MHD_NO;
    }
    for (int32_t i = 0; i < n_all; i++) {
        unsigned fail = submit_job(s, js[i], &err);
        if (fail) {
            for (int32_t k = 0; k < i; k++) ls_engine_cancel(s->e, js[k]->engine_id);
            wake_engine(s);
            for (int32_t k = 0; k < n_all; k++) job_unref(js[k]);
            free(g);
            return send_submit_error(s, c, fail, &err);
        }
    }
    if (g) {
        memcpy(g->js, js, sizeof js);
        g->n = n_all;
        g->out_t = now_ms();
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, group_reader, g, group_free);
        if (!r) {
            group_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ls_srv_common_headers(s, c, r);
        if (j0->sk) j0->sk->status = 200;
        res = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        ls_srv_count_status(s, 200);
        return res;
    }
    bool gone = false, failed = false, cut = false;
    for (int32_t i = 0; i < n_all; i++) {
        job *j = js[i];
        pthread_mutex_lock(&j->mu);
        while (!j->done) {
            job_wait(j, 200);
            if (!j->done && !gone && ls_srv_client_gone(c)) {
                gone = true;
                for (int32_t k = 0; k < n_all; k++) ls_engine_cancel(s->e, js[k]->engine_id);
                wake_engine(s);
            }
        }
        failed = failed || j->finish == LS_FINISH_ERROR;
        cut = cut || j->finish == LS_FINISH_CANCELLED;
        pthread_mutex_unlock(&j->mu);
    }
    if (gone) {
        if (j0->sk) j0->sk->note = "cancelled (client gone)";
        ls_srv_count_cancel(s, LS_CANCEL_CLIENT);
    }
    if (!gone && !failed && cut) { /* cut at the end of the shutdown grace period */
        fprintf(stderr, "lockstep serve: %s %s choices=%d ms=%.0f status=503 cancelled: the shutdown grace period "
                        "ended\n", j0->id, path, n_all, now_ms() - j0->t0);
        if (j0->sk) j0->sk->note = "cancelled (shutdown)";
        for (int32_t k = 0; k < n_all; k++) job_unref(js[k]);
        ls_srv_count_cancel(s, LS_CANCEL_SHUTDOWN);
        return ls_srv_send_error(s, c, 503, "server_shutdown",
                                 "the server shut down before this request finished (finish_reason: cancelled); "
                                 "retry it on another replica",
                                 "1");
    }
    if (gone || failed) {
        fprintf(stderr, "lockstep serve: %s %s choices=%d ms=%.0f %s\n", j0->id, path, n_all, now_ms() - j0->t0,
                gone ? "client gone: cancelled" : "status=500 (out of memory)");
        for (int32_t k = 0; k < n_all; k++) job_unref(js[k]);
        if (gone) return MHD_NO;
        return ls_srv_send_error(s, c, 500, "server_error", LS_SRV_GAVE_UP, NULL);
    }
    /* every job is done: no event writes them any more */
    cJSON *o = ls_srv_response(j0), *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    add_seed(cJSON_GetArrayItem(choices, 0), j0->req.seed);
    int64_t n_prompt = 0, n_gen = 0, n_cached = 0;
    for (int32_t k = 0; k < n_all; k++) {
        if (k % j0->req.n == 0) {
            n_prompt += js[k]->n_prompt;
            n_cached += js[k]->n_cached;
        }
        n_gen += js[k]->n_tokens;
        if (k == 0) continue;
        cJSON *ok = ls_srv_response(js[k]);
        cJSON *ch = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(ok, "choices"), 0);
        cJSON_Delete(ok);
        if (!ch) continue;
        set_num(ch, "index", k);
        add_seed(ch, js[k]->req.seed);
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
    set_num(u, "prompt_tokens", (double)n_prompt);
    set_num(u, "completion_tokens", (double)n_gen);
    set_num(u, "total_tokens", (double)(n_prompt + n_gen));
    set_num(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"), "cached_tokens", (double)n_cached);
    fprintf(stderr, "lockstep serve: %s %s choices=%d prompt=%lld gen=%lld ms=%.0f status=200\n", j0->id, path, n_all,
            (long long)n_prompt, (long long)n_gen, now_ms() - j0->t0);
    for (int32_t k = 0; k < n_all; k++) job_unref(js[k]);
    return ls_srv_send_json(s, c, 200, o);
}

enum MHD_Result ls_srv_generate(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path) {
    enum MHD_Result res = MHD_NO;
    job *j = job_new(s, c, cn, chat, path, NULL, 0, &res);
    if (!j) return res;
    if (j->req.n * j->req.n_prompts > 1) return generate_many(s, c, cn, chat, path, j);
    ls_err err;
    pthread_mutex_lock(&s->mu);
    bool full = s->live >= s->p->n_parallel + s->p->max_queue;
    pthread_mutex_unlock(&s->mu);
    if (full) {
        job_unref(j);
        return ls_srv_send_error(s, c, 503, "server_busy", "the request queue is full; retry later", "1");
    }
    if (gone_before_submit(s, c, j)) {
        job_unref(j);
        return MHD_NO;
    }
    unsigned fail = submit_job(s, j, &err);
    if (fail) {
        job_unref(j);
        return send_submit_error(s, c, fail, &err);
    }
    if (j->req.stream) {
        j->out_t = now_ms(); /* no reader runs yet: no lock needed */
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
        if (!r) {
            ls_engine_cancel(s->e, j->engine_id);
            job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ls_srv_common_headers(s, c, r);
        if (j->sk) j->sk->status = 200;
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
        if (!j->done && !gone && ls_srv_client_gone(c)) {
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
        if (j->sk) {
            j->sk->n_gen = n;
            j->sk->note = "cancelled (client gone)";
        }
        ls_srv_count_cancel(s, LS_CANCEL_CLIENT);
        job_unref(j);
        return MHD_NO; /* nobody to answer: close the connection */
    }
    if (j->finish == LS_FINISH_ERROR) {
        int32_t n = j->n_tokens;
        pthread_mutex_unlock(&j->mu);
        fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=500 (out of memory)\n", j->id, path,
                j->n_prompt, n, now_ms() - j->t0);
        job_unref(j);
        return ls_srv_send_error(s, c, 500, "server_error", LS_SRV_GAVE_UP, NULL);
    }
    if (j->finish == LS_FINISH_CANCELLED) { /* cut at the end of the shutdown grace period */
        int32_t n = j->n_tokens;
        pthread_mutex_unlock(&j->mu);
        fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=503 cancelled: the shutdown grace "
                        "period ended\n", j->id, path, j->n_prompt, n, now_ms() - j->t0);
        if (j->sk) {
            j->sk->n_gen = n;
            j->sk->note = "cancelled (shutdown)";
        }
        job_unref(j);
        ls_srv_count_cancel(s, LS_CANCEL_SHUTDOWN);
        return ls_srv_send_error(s, c, 503, "server_shutdown",
                                 "the server shut down before this request finished (finish_reason: cancelled); "
                                 "retry it on another replica",
                                 "1");
    }
    if (j->sk) j->sk->n_gen = j->n_tokens;
    cJSON *o = ls_srv_response(j);
    pthread_mutex_unlock(&j->mu);
    fprintf(stderr, "lockstep serve: %s %s prompt=%d gen=%d ms=%.0f status=200\n", j->id, path, j->n_prompt, j->n_tokens,
            now_ms() - j->t0);
    job_unref(j);
    return ls_srv_send_json(s, c, 200, o);
}
