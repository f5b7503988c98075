/* server.c - `lockstep serve`'s lifetime: bind, load, create the engine and probe it,
 * the engine thread, and graceful shutdown (see server.h; the parts: server_impl.h). */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/server_impl.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- lifetime ---------------------------------------------------------------- */
/* The model, the engine and its probe (ready = 1 meanwhile: /health answers 503). */
static ls_status start_engine(server *s, ls_err *err) {
    const ls_server_params *p = s->p;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    ls_model_info mi = LS_MODEL_INFO_INIT;
    if (ls_model_get_info(s->m, &mi, err)) return err->code;
    s->n_vocab = (int32_t)mi.n_vocab;
    s->has_chat = mi.chat_template[0] != '\0';
    s->tool_format = !strcmp(mi.tool_format, "hermes") ? LS_TOOLS_HERMES : LS_TOOLS_GENERIC;
    if (s->has_chat) { /* the template's own system prompt (what it writes when the conversation has none) */
        ls_chat_msg one = {"user", "x"};
        char *t = NULL;
        static const char SYS[] = "<|im_start|>system\n";
        if (!ls_model_apply_chat(s->m, &one, 1, false, &t, err) && !strncmp(t, SYS, sizeof SYS - 1)) {
            const char *e = strstr(t + sizeof SYS - 1, "<|im_end|>");
            size_t n = e ? (size_t)(e - t) - (sizeof SYS - 1) : 0;
            if (e && (s->default_system = malloc(n + 1))) {
                memcpy(s->default_system, t + sizeof SYS - 1, n);
                s->default_system[n] = 0;
            }
        }
        free(t);
        ls_err_clear(err);
    }
    s->spec = p->spec;
    if (p->draft_model_path && p->spec.kind == LS_SPEC_DRAFT) {
        mp.path = p->draft_model_path;
        if (!(s->draft_model = ls_model_load(&mp, err))) return err->code;
        s->spec.draft_model = s->draft_model;
    }
    const int32_t K = s->spec.kind != LS_SPEC_OFF ? s->spec.draft_max : 0;
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT;
    ep.n_ctx = p->n_ctx;
    ep.kv_mem = p->kv_mem;
    ep.n_seq_max = p->n_parallel;
    ep.step_tokens = p->n_parallel * (1 + K) > 512 ? p->n_parallel * (1 + K) : 512;
    ep.n_threads = p->n_threads;
    ep.kernels = p->kernels;
    ep.draft_max = K;
    ep.allow_inexact = p->allow_inexact;
    ep.device = p->device;
    ep.cache_dir = p->cache_dir;
    ep.cache_dir_max = p->cache_dir_max;
    if (!(s->e = ls_engine_create(s->m, &ep, err))) return err->code;
    ls_engine_info ei = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(s->e, &ei);
    s->n_ctx = ei.n_ctx;
    if (s->spec.kind != LS_SPEC_OFF && ls_spec_check(s->e, &s->spec, err)) return err->code;
    __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
    snprintf(s->spec_state, sizeof s->spec_state, "%s", ls_spec_kind_name(s->spec.kind));
    if (p->no_probe) {
        snprintf(s->parity, sizeof s->parity, "skipped");
        return LS_OK;
    }
    char cfg[64];
    snprintf(cfg, sizeof cfg, "spec=%s", ls_spec_kind_name(s->spec.kind));
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    pp.memo_dir = p->probe_memo_dir;
    pp.config = cfg;
    ls_probe_result pr = LS_PROBE_RESULT_INIT;
    double t0 = now_ms();
    if (p->progress) fprintf(stderr, "lockstep serve: startup parity check running ...\n");
    if (ls_engine_probe(s->e, &pp, &pr, err)) return err->code;
    if (p->progress)
        fprintf(stderr, "lockstep serve: startup parity check took %.1f s%s\n", (now_ms() - t0) / 1e3,
                pr.memoized ? " (memoized)" : "");
    s->probe = pr;
    snprintf(s->parity, sizeof s->parity, "%s", ls_verdict_name(pr.verdict));
    if (pr.verdict == LS_VERDICT_FAILED) {
        fprintf(stderr, "lockstep serve: parity probe FAILED: %s\n", pr.detail);
        if (s->spec.kind != LS_SPEC_OFF && !p->allow_inexact) { /* fail closed: plain decoding */
            fprintf(stderr, "lockstep serve: speculation declined by the probe; serving without it\n");
            snprintf(s->spec_state, sizeof s->spec_state, "%s (declined)", ls_spec_kind_name(s->spec.kind));
            s->spec.kind = LS_SPEC_OFF;
        }
    } else if (pr.verdict == LS_VERDICT_SCOPED) {
        fprintf(stderr, "lockstep serve: parity scoped: rows that need parity run %s (%s)\n", pr.kernels_after,
                pr.detail);
    }
    return LS_OK;
}

/* Raises the descriptor limit to its hard limit: each connection is a descriptor and
 * the soft limit (often 1024) would cap them long before --max-connections. */
static rlim_t raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

static bool is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* A server's state before its model (ready 0, parity pending): NULL when out of memory. */
static server *srv_new(const ls_server_params *p) {
    server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p;
    if (!(s->slots = calloc(p->n_parallel > 0 ? (size_t)p->n_parallel : 1, sizeof *s->slots))) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    pthread_cond_init(&s->work, NULL);
    s->probe.verdict = LS_VERDICT_UNPROBED;
    snprintf(s->parity, sizeof s->parity, "pending");
    snprintf(s->spec_state, sizeof s->spec_state, "off");
    const char *slash = strrchr(p->model_path, '/');
    s->model_name = p->model_alias ? p->model_alias : slash ? slash + 1 : p->model_path;
    return s;
}

/* Stops s's engine thread (when started) and frees s with all it holds. */
static void srv_free(server *s, bool engine_started) {
    if (!s) return;
    if (engine_started) {
        pthread_mutex_lock(&s->mu);
        s->stop_engine = true;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->engine_thread, NULL);
    }
    ls_engine_free(s->e);
    ls_model_free(s->m);
    ls_model_free(s->draft_model);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->cmu);
    pthread_cond_destroy(&s->work);
    free(s->slots);
    free(s->default_system);
    free(s);
}

server *ls_srv_model_open(const ls_server_params *p, ls_err *err) {
    server *s = srv_new(p);
    if (!s) {
        ls_srv_error(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = p->model_path;
    mp.chat_template_file = p->chat_template_file;
    mp.cache_dir = p->probe_memo_dir; /* the file's hash kept in lockstep's cache directory */
    if (p->spec.kind == LS_SPEC_MTP) mp.mtp_path = p->draft_model_path; /* an MTP module of its own file */
    if (!(s->m = ls_model_load(&mp, err)) || start_engine(s, err)) {
        srv_free(s, false);
        return NULL;
    }
    if (pthread_create(&s->engine_thread, NULL, ls_srv_engine_main, s) != 0) {
        ls_srv_error(err, LS_E_NOMEM, "cannot start the engine thread");
        srv_free(s, false);
        return NULL;
    }
    __atomic_store_n(&s->ready, 2, __ATOMIC_RELEASE);
    return s;
}

void ls_srv_model_close(server *s) { srv_free(s, true); }

int ls_server_run(const ls_server_params *p, ls_err *err) {
    server *s = srv_new(p);
    if (!s) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    int rc = 1;
    bool engine_started = false, reaper_started = false;
    struct addrinfo *ai = NULL;
    struct MHD_Daemon *d = NULL;
    MHD_socket lfd = MHD_INVALID_SOCKET;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    g_stop = 0;

    /* The model file first: a file that is not a model fails before anything listens.
     * Router mode: each model's file is checked for reading; each loads on first use. */
    if (p->n_models > 0 || p->models_dir) {
        if (!(s->router = ls_srv_router_create(p, err))) goto out;
        __atomic_store_n(&s->ready, 2, __ATOMIC_RELEASE); /* serving from the first request on */
    } else {
        ls_model_params mp = LS_MODEL_PARAMS_INIT;
        mp.path = p->model_path;
        mp.chat_template_file = p->chat_template_file; /* a bad template fails here too, naming the file */
        mp.cache_dir = p->probe_memo_dir; /* lockstep's cache directory: the file's hash kept there too */
        if (p->spec.kind == LS_SPEC_MTP) mp.mtp_path = p->draft_model_path; /* an MTP module of its own file */
        if (!(s->m = ls_model_load(&mp, err))) goto out;
    }

    /* --host: an IPv4 or IPv6 address or a name (the first address it resolves to). */
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", p->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const char *host = p->host;
    char hbuf[256];
    size_t hl = strlen(host);
    if (hl >= 2 && hl < sizeof hbuf && host[0] == '[' && host[hl - 1] == ']') { /* [::1] */
        memcpy(hbuf, host + 1, hl - 2);
        hbuf[hl - 2] = 0;
        host = hbuf;
    }
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai != 0 || !ai) {
        ls_srv_error(err, LS_E_INVALID, "--host '%s' is not an address or a name that resolves (%s)", p->host,
                     gai_strerror(gai));
        goto out;
    }
    char shown[INET6_ADDRSTRLEN + 2] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, shown, sizeof shown, NULL, 0, NI_NUMERICHOST);
    const bool v6 = ai->ai_family == AF_INET6;
    s->loopback = is_loopback(ai->ai_addr);
    if (!s->loopback && !p->api_key)
        fprintf(stderr, "lockstep serve: WARNING: listening on %s, which is not loopback, without --api-key: "
                        "anyone who can reach it can use it\n", shown);

    /* Connections: one thread each (a handler blocks while the engine works), watched
     * by poll() (MHD_USE_AUTO picks it for thread-per-connection), so no FD_SETSIZE
     * limit.  Past --max-connections the handler answers 503; MHD's own limit, a little
     * above, only exists so that those 503s can still be sent. */
    rlim_t nofile = raise_nofile();
    unsigned hard = (unsigned)p->max_connections + 64;
    if ((rlim_t)hard + 64 > nofile) {
        hard = nofile > 128 ? (unsigned)(nofile - 64) : 64;
        fprintf(stderr, "lockstep serve: the descriptor limit (%llu) caps connections at %u\n",
                (unsigned long long)nofile, hard);
    }
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC |
                             MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)p->port, NULL, NULL, ls_srv_handler, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_NOTIFY_COMPLETED, ls_srv_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
                         ls_srv_notify_conn, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)p->timeout_s,
                         MHD_OPTION_CONNECTION_LIMIT, hard, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                         MHD_OPTION_THREAD_STACK_SIZE, LS_SRV_THREAD_STACK, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                         MHD_OPTION_END);
    if (!d) {
        ls_srv_error(err, LS_E_IO, "cannot listen on %s port %d (in use, or not allowed)", shown, p->port);
        goto out;
    }
    if (pthread_create(&s->reaper, NULL, ls_srv_reaper_main, s) != 0) {
        ls_srv_error(err, LS_E_NOMEM, "cannot start the connection reaper thread");
        goto out;
    }
    reaper_started = true;
    if (s->router) {
        fprintf(stderr, "lockstep serve: listening on http://%s%s%s:%d (router mode: models load on first use)\n",
                v6 ? "[" : "", shown, v6 ? "]" : "", p->port);
        fprintf(stderr, "lockstep serve: ready (%d parallel per model)\n", p->n_parallel);
    } else {
        fprintf(stderr, "lockstep serve: listening on http://%s%s%s:%d (loading %s)\n", v6 ? "[" : "", shown,
                v6 ? "]" : "", p->port, p->model_path);
        if (start_engine(s, err)) goto out;
        if (pthread_create(&s->engine_thread, NULL, ls_srv_engine_main, s) != 0) {
            ls_srv_error(err, LS_E_NOMEM, "cannot start the engine thread");
            goto out;
        }
        engine_started = true;
        __atomic_store_n(&s->ready, 2, __ATOMIC_RELEASE);
        fprintf(stderr, "lockstep serve: ready (parity: %s; spec: %s; %d parallel, context %d)\n", s->parity,
                s->spec_state, p->n_parallel, s->n_ctx);
    }
    while (!g_stop) usleep(100 * 1000);

    /* Shutdown: stop accepting (the listening socket is shut down, so a new connection is
     * refused at once instead of waiting in the backlog), answer 503 to new requests on
     * open connections, let in-flight requests finish within the grace period; then
     * submit nothing more, cancel what is left, and stop. */
    fprintf(stderr, "lockstep serve: stopping; draining in-flight requests (up to %d s)\n", p->timeout_s);
    __atomic_store_n(&s->draining, true, __ATOMIC_RELEASE);
    lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) shutdown(lfd, SHUT_RDWR);
    double deadline = now_ms() + 1000.0 * p->timeout_s, replies_by = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int live = s->live, busy = s->busy;
        bool cut = s->shutting_down;
        if (!cut && now_ms() > deadline) {
            fprintf(stderr, "lockstep serve: grace period over: cancelling %d request(s)\n", live);
            __atomic_store_n(&s->shutting_down, true, __ATOMIC_RELEASE);
            cut = true;
        }
        pthread_mutex_unlock(&s->mu);
        if (s->router) live += ls_srv_router_live(s->router, cut);
        if (live == 0 && busy == 0) break;
        if (live == 0 && cut) {
            /* Every cancelled request's handler still owes its reply (a 503, a stream's
             * last chunk): MHD_stop_daemon would close the connection under it, and the
             * client would read an empty reply.  Wait until no request is being handled,
             * for at most LS_SRV_REPLY_GRACE_MS; a head or body still arriving (a
             * trickling client) owes nothing and is not waited for. */
            if (!replies_by) replies_by = now_ms() + LS_SRV_REPLY_GRACE_MS;
            pthread_mutex_lock(&s->cmu);
            int handling = 0;
            for (const sock *k = s->socks; k; k = k->next) handling += !k->cut && k->phase == SK_HANDLING;
            pthread_mutex_unlock(&s->cmu);
            if (handling == 0 || now_ms() > replies_by) break;
        }
        if (cut && s->e) {
            ls_engine_cancel_all(s->e);
            pthread_mutex_lock(&s->mu);
            pthread_cond_signal(&s->work);
            pthread_mutex_unlock(&s->mu);
        }
        usleep(50 * 1000);
    }
    pthread_mutex_lock(&s->mu); /* a handler still parsing its request submits nothing now */
    __atomic_store_n(&s->shutting_down, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    if (s->router) ls_srv_router_live(s->router, true);
    MHD_stop_daemon(d);
    d = NULL;
    if (lfd != MHD_INVALID_SOCKET) close(lfd); /* quiesced: MHD leaves it to us */
    lfd = MHD_INVALID_SOCKET;
    fprintf(stderr, "lockstep serve: stopped\n");
    rc = 0;
out:
    if (d) MHD_stop_daemon(d);
    if (reaper_started) {
        pthread_mutex_lock(&s->cmu);
        s->stop_reaper = true;
        pthread_mutex_unlock(&s->cmu);
        pthread_join(s->reaper, NULL);
    }
    if (ai) freeaddrinfo(ai);
    ls_srv_router_free(s->router); /* MHD has stopped: no request holds a model */
    srv_free(s, engine_started);
    return rc;
}
