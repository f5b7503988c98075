/* router.c - several models in one server: the list, loading on first use within the
 * budget, least-recently-used unloading, and the endpoints that show and drive it
 * (GET /models, POST /models/load, POST /models/unload, /v1/models and /health in router
 * mode).  See router.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server_impl.h"

enum { RM_UNLOADED = 0, RM_LOADING, RM_LOADED, RM_UNLOADING };
static const char *const RM_STATE[] = {"unloaded", "loading", "loaded", "unloading"};

struct ls_srv_rmodel {
    ls_server_params p;        /* the server's, with this model's path and alias */
    char *path, *name;         /* owned */
    uint64_t bytes;            /* its file(s): what it counts against --models-memory */
    int state;                 /* RM_* (guarded by the router's mu, as are the fields below) */
    server *srv;               /* RM_LOADED: its server */
    int users;                 /* requests that picked it and are not over */
    uint64_t last_used;        /* the router's tick when it was last picked or released */
    int n_loads;
    bool failed;               /* its last load failed (error says why): refused until /models/load */
    char error[sizeof(((ls_err *)0)->msg)];
    /* its last probe verdict (kept once it is unloaded) */
    char parity[32];           /* "pending" until it is first loaded */
    char spec_state[64];
    ls_probe_result probe;
};

struct ls_srv_router {
    const ls_server_params *p;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* a model's state or users changed */
    ls_srv_rmodel *m;          /* n */
    int n;
    uint64_t tick;
    ls_srv_counters gone;      /* the counters of models since unloaded (/metrics) */
    uint64_t gone_prefix_hits, gone_preemptions;
    bool stopping;             /* the server is shutting down: nothing more loads */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the list ------------------------------------------------------------------------ */
/* The length of name's split-shard tail "-NNNNN-of-NNNNN.gguf" (0: none); *no, *count. */
static size_t shard_tail(const char *name, long *no, long *count) {
    size_t n = strlen(name);
    static const size_t T = sizeof "-00001-of-00003.gguf" - 1;
    if (n <= T || strcmp(name + n - 5, ".gguf")) return 0;
    const char *t = name + n - T;
    char a[6], b[6];
    if (t[0] != '-' || strncmp(t + 6, "-of-", 4)) return 0;
    memcpy(a, t + 1, 5), memcpy(b, t + 10, 5);
    a[5] = b[5] = 0;
    for (int i = 0; i < 5; i++)
        if (a[i] < '0' || a[i] > '9' || b[i] < '0' || b[i] > '9') return 0;
    *no = strtol(a, NULL, 10), *count = strtol(b, NULL, 10);
    return *no >= 1 && *count >= *no ? T : 0;
}

/* The bytes of path's file, and of the rest of its shards when it is a split model's
 * first: LS_OK, or LS_E_IO naming the file that cannot be read. */
static ls_status file_bytes(const char *path, uint64_t *out, ls_err *err) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return ls_srv_error(err, LS_E_IO, "cannot read model file '%s'", path);
    *out = (uint64_t)st.st_size;
    const char *slash = strrchr(path, '/');
    long no, count;
    size_t tl = shard_tail(slash ? slash + 1 : path, &no, &count);
    if (!tl || no != 1) return LS_OK;
    size_t plen = strlen(path) - tl;
    char *q = malloc(plen + tl + 1);
    if (!q) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    for (long i = 2; i <= count; i++) {
        memcpy(q, path, plen);
        snprintf(q + plen, tl + 1, "-%05ld-of-%05ld.gguf", i, count);
        if (stat(q, &st) == 0) *out += (uint64_t)st.st_size; /* a missing shard: the load names it */
    }
    free(q);
    return LS_OK;
}

/* Whether path begins with GGUF's magic (the rest is checked when it loads). */
static bool gguf_magic(const char *path) {
    FILE *f = fopen(path, "rb");
    char b[4] = {0};
    bool ok = f && fread(b, 1, 4, f) == 4 && !memcmp(b, "GGUF", 4);
    if (f) fclose(f);
    return ok;
}

/* A model's default name: its file name without .gguf and a split model's shard tail
 * (malloc'd; NULL when out of memory). */
static char *stem(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    long no, count;
    size_t tl = shard_tail(b, &no, &count);
    if (tl) n -= tl;
    else if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    char *s = malloc(n + 1);
    if (s) memcpy(s, b, n), s[n] = 0;
    return s;
}

static ls_srv_rmodel *find(ls_srv_router *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->m[i].name, name)) return &r->m[i];
    return NULL;
}

/* Adds the model at path named alias (NULL: its stem); the same file under the same name
 * twice is kept once.  A file that is not GGUF is an error (from_dir: skipped, with a
 * warning, so that one stray file does not stop the others). */
static ls_status add_model(ls_srv_router *r, const char *path, const char *alias, int cap, bool from_dir,
                           ls_err *err) {
    if (access(path, R_OK) == 0 && !gguf_magic(path)) {
        if (!from_dir) return ls_srv_error(err, LS_E_FORMAT, "'%s' is not a GGUF file (no GGUF magic)", path);
        fprintf(stderr, "lockstep serve: WARNING: skipping '%s' in --models-dir: not a GGUF file\n", path);
        return LS_OK;
    }
    char *name = alias ? strdup(alias) : stem(path);
    if (!name) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    bool odd = false; /* a name goes into JSON, logs and Prometheus labels as it is */
    for (const char *c = name; *c; c++) odd |= (unsigned char)*c < 0x21 || *c == '"' || *c == '\\' || *c == 0x7f;
    if (!*name || strlen(name) > 200 || odd) {
        ls_srv_error(err, LS_E_INVALID, "model name '%.200s' for '%s' must be 1 to 200 characters, without spaces, "
                     "quotes or backslashes", name, path);
        free(name);
        return err->code;
    }
    ls_srv_rmodel *dup = find(r, name);
    if (dup) {
        ls_status st = strcmp(dup->path, path)
                           ? ls_srv_error(err, LS_E_INVALID, "two models are named '%s' ('%s' and '%s'): name one "
                                          "with --alias", name, dup->path, path)
                           : LS_OK;
        free(name);
        return st;
    }
    if (r->n >= cap) {
        free(name);
        return ls_srv_error(err, LS_E_INVALID, "too many models (at most %d)", cap);
    }
    ls_srv_rmodel *m = &r->m[r->n++]; /* owned by r from here (freed with it) */
    memset(m, 0, sizeof *m);
    m->name = name;
    if (!(m->path = strdup(path))) return ls_srv_error(err, LS_E_NOMEM, "out of memory");
    if (file_bytes(path, &m->bytes, err)) return err->code;
    const ls_server_params *p = r->p;
    if (p->models_memory > 0 && m->bytes > (uint64_t)p->models_memory)
        return ls_srv_error(err, LS_E_INVALID, "model '%s' (%llu bytes) alone exceeds --models-memory %lld", name,
                            (unsigned long long)m->bytes, (long long)p->models_memory);
    m->p = *p;
    m->p.model_path = m->path;
    m->p.model_alias = m->name;
    m->p.models = NULL, m->p.n_models = 0, m->p.models_dir = NULL;
    snprintf(m->parity, sizeof m->parity, "pending");
    snprintf(m->spec_state, sizeof m->spec_state, "%s", ls_spec_kind_name(p->spec.kind));
    m->probe.verdict = LS_VERDICT_UNPROBED;
    return LS_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* dir's *.gguf files (split models by their first shard), sorted by name. */
static ls_status scan_dir(ls_srv_router *r, const char *dir, int cap, ls_err *err) {
    DIR *d = opendir(dir);
    if (!d) return ls_srv_error(err, LS_E_IO, "cannot read --models-dir '%s' (%s)", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, ncap = 0;
    ls_status st = LS_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        long no, count;
        if (de->d_name[0] == '.' || l <= 5 || strcmp(de->d_name + l - 5, ".gguf")) continue;
        if (shard_tail(de->d_name, &no, &count) && no != 1) continue; /* counted with its first shard */
        if (n == ncap) {
            char **nn = realloc(names, (ncap = ncap ? ncap * 2 : 16) * sizeof *nn);
            if (!nn) {
                st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = malloc(strlen(dir) + l + 2))) {
            st = ls_srv_error(err, LS_E_NOMEM, "out of memory");
            break;
        }
        sprintf(names[n++], "%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (names) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (!st) st = add_model(r, names[i], NULL, cap, true, err);
        free(names[i]);
    }
    free(names);
    return st;
}

ls_srv_router *ls_srv_router_create(const ls_server_params *p, ls_err *err) {
    ls_srv_router *r = calloc(1, sizeof *r);
    enum { CAP = 1024 };
    if (!r || !(r->m = calloc(CAP, sizeof *r->m))) {
        free(r);
        ls_srv_error(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    r->p = p;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    ls_status st = LS_OK;
    for (int i = 0; i < p->n_models && !st; i++) st = add_model(r, p->models[i].path, p->models[i].alias, CAP, false, err);
    if (!st && p->models_dir) st = scan_dir(r, p->models_dir, CAP, err);
    if (!st && r->n == 0) st = ls_srv_error(err, LS_E_INVALID, "--models-dir '%s' holds no .gguf file", p->models_dir);
    if (st) {
        ls_srv_router_free(r);
        return NULL;
    }
    for (int i = 0; i < r->n; i++)
        fprintf(stderr, "lockstep serve: model '%s': %s (%.1f MiB)\n", r->m[i].name, r->m[i].path,
                (double)r->m[i].bytes / (1024.0 * 1024.0));
    return r;
}

void ls_srv_router_free(ls_srv_router *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        if (r->m[i].srv) ls_srv_model_close(r->m[i].srv);
        free(r->m[i].path);
        free(r->m[i].name);
    }
    free(r->m);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* ---- loading and unloading (r->mu held) ---------------------------------------------- */
/* Waits on r->cv for at most 50 ms (a job's end is not signalled: it is polled). */
static void wait_short(ls_srv_router *r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* Whether m is loaded and nothing of it is in flight: no request holds it, no job of it
 * is alive, nothing of it is submitted. */
static bool idle(ls_srv_rmodel *m) {
    if (m->state != RM_LOADED || m->users > 0) return false;
    server *s = m->srv;
    if (__atomic_load_n(&s->n_jobs, __ATOMIC_ACQUIRE) > 0) return false;
    pthread_mutex_lock(&s->mu);
    int live = s->live;
    pthread_mutex_unlock(&s->mu);
    return live == 0;
}

/* Whether m fits beside the models that hold memory now (loaded, loading or unloading). */
static bool fits(const ls_srv_router *r, const ls_srv_rmodel *m) {
    int n = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < r->n; i++)
        if (&r->m[i] != m && r->m[i].state != RM_UNLOADED) n++, bytes += r->m[i].bytes;
    const ls_server_params *p = r->p;
    return (p->models_max <= 0 || n + 1 <= p->models_max) &&
           (p->models_memory <= 0 || bytes + m->bytes <= (uint64_t)p->models_memory);
}

/* The least recently used idle model other than m, or NULL. */
static ls_srv_rmodel *lru_idle(ls_srv_router *r, const ls_srv_rmodel *m) {
    ls_srv_rmodel *v = NULL;
    for (int i = 0; i < r->n; i++)
        if (&r->m[i] != m && idle(&r->m[i]) && (!v || r->m[i].last_used < v->last_used)) v = &r->m[i];
    return v;
}

/* Unloads the idle model m (r->mu is let go meanwhile). */
static void unload(ls_srv_router *r, ls_srv_rmodel *m, const char *why) {
    m->state = RM_UNLOADING;
    server *s = m->srv;
    m->srv = NULL;
    pthread_mutex_lock(&s->mu); /* /metrics' counters outlive it */
    ls_srv_counters_add(&r->gone, &s->ct);
    pthread_mutex_unlock(&s->mu);
    ls_engine_stats es = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(s->e, &es);
    r->gone_prefix_hits += es.prefix_hit_tokens, r->gone_preemptions += es.preemptions;
    pthread_mutex_unlock(&r->mu);
    ls_srv_model_close(s);
    fprintf(stderr, "lockstep serve: model '%s' unloaded (%s)\n", m->name, why);
    pthread_mutex_lock(&r->mu);
    m->state = RM_UNLOADED;
    pthread_cond_broadcast(&r->cv);
}

/* Loads m (r->mu is let go meanwhile; requests for m wait on its state). */
static void load(ls_srv_router *r, ls_srv_rmodel *m) {
    m->state = RM_LOADING;
    m->failed = false;
    pthread_mutex_unlock(&r->mu);
    fprintf(stderr, "lockstep serve: loading model '%s' (%s)\n", m->name, m->path);
    double t0 = now_ms();
    ls_err err;
    ls_err_clear(&err);
    server *s = ls_srv_model_open(&m->p, &err);
    bool refused = s && s->probe.verdict == LS_VERDICT_FAILED && !m->p.allow_inexact;
    if (s) {
        pthread_mutex_lock(&r->mu);
        snprintf(m->parity, sizeof m->parity, "%s", s->parity);
        snprintf(m->spec_state, sizeof m->spec_state, "%s", s->spec_state);
        m->probe = s->probe;
        pthread_mutex_unlock(&r->mu);
    }
    if (refused) { /* its bits are not certain: not served */
        snprintf(err.msg, sizeof err.msg, "its parity probe failed (%s); it is not served (--allow-inexact serves "
                 "it anyway)", s->probe.detail);
        ls_srv_model_close(s);
        s = NULL;
    }
    pthread_mutex_lock(&r->mu);
    if (!s) {
        m->state = RM_UNLOADED;
        m->failed = true;
        snprintf(m->error, sizeof m->error, "%s", err.msg);
        fprintf(stderr, "lockstep serve: model '%s' failed to load: %s\n", m->name, err.msg);
    } else {
        m->srv = s;
        m->state = RM_LOADED;
        m->n_loads++;
        m->last_used = ++r->tick;
        fprintf(stderr, "lockstep serve: model '%s' loaded in %.1f s (parity: %s; spec: %s; context %d)\n", m->name,
                (now_ms() - t0) / 1e3, m->parity, m->spec_state, s->n_ctx);
    }
    pthread_cond_broadcast(&r->cv);
}

/* The names of the models, ", "-separated, into buf. */
static void names(const ls_srv_router *r, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < r->n && o + 1 < cap; i++) {
        int w = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", r->m[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
    if (o >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

/* m, loaded, held by one more user: 0, or the status of the refusal (msg set).  r->mu held. */
static unsigned acquire(ls_srv_router *r, ls_srv_rmodel *m, char *msg, size_t cap) {
    double deadline = now_ms() + 1000.0 * r->p->timeout_s;
    for (;;) {
        if (r->stopping) {
            snprintf(msg, cap, "the server is shutting down: retry this request on another replica");
            return 503;
        }
        if (m->state == RM_LOADED) {
            m->users++;
            m->last_used = ++r->tick;
            return 0;
        }
        if (m->state != RM_UNLOADED) { /* another request loads it (or it is being unloaded): wait */
            wait_short(r);
            continue;
        }
        if (m->failed) {
            snprintf(msg, cap, "model '%s' is not available: %s (POST /models/load retries)", m->name, m->error);
            return 503;
        }
        if (!fits(r, m)) {
            ls_srv_rmodel *v = lru_idle(r, m);
            if (v) {
                unload(r, v, "least recently used, to make room");
                continue;
            }
            if (now_ms() > deadline) {
                snprintf(msg, cap, "no room to load model '%s' within --models-max %d / --models-memory %lld: "
                         "the loaded models stayed busy for %d s; retry later", m->name, r->p->models_max,
                         (long long)r->p->models_memory, r->p->timeout_s);
                return 503;
            }
            wait_short(r);
            continue;
        }
        load(r, m);
    }
}

/* The model a request names (its body's "model", or ?model= on a GET): 0 with out ("":
 * none named; *not_json: the body does not parse), or a 400 (msg set). */
static unsigned named(struct MHD_Connection *c, const char *body, size_t len, char *out, size_t cap, bool *not_json,
                      char *msg, size_t mcap) {
    out[0] = 0;
    *not_json = false;
    if (!body) {
        const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
        if (q) snprintf(out, cap, "%s", q);
        return 0;
    }
    cJSON *j = cJSON_ParseWithLength(body, len);
    *not_json = !cJSON_IsObject(j);
    const cJSON *v = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
    unsigned st = 0;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || !*v->valuestring) {
            snprintf(msg, mcap, "'model' must be a model's name (a non-empty string)");
            st = 400;
        } else {
            snprintf(out, cap, "%s", v->valuestring);
        }
    }
    cJSON_Delete(j);
    return st;
}

/* The router's model by name: NULL with the status (msg set).  name "" (none given): the
 * only model, if there is one. */
static ls_srv_rmodel *lookup(ls_srv_router *r, const char *name, unsigned *st, char *msg, size_t cap) {
    char list[512];
    names(r, list, sizeof list);
    if (!*name) {
        if (r->n == 1) return &r->m[0];
        snprintf(msg, cap, "'model' is required: this server serves several models (%s)", list);
        *st = 400;
        return NULL;
    }
    ls_srv_rmodel *m = find(r, name);
    if (!m) {
        snprintf(msg, cap, "model '%.200s' is not served here; available: %s", name, list);
        *st = 404;
    }
    return m;
}

unsigned ls_srv_router_pick(ls_srv_router *r, struct MHD_Connection *c, const char *body, size_t len,
                            server **out, ls_srv_rmodel **held, char *msg, size_t cap) {
    char name[256];
    bool not_json;
    unsigned st = named(c, body, len, name, sizeof name, &not_json, msg, cap);
    if (st) return st;
    if (not_json && r->n > 1) { /* with one model, its endpoint names what is wrong */
        snprintf(msg, cap, "the request body is not a JSON object, so it names no model ('model')");
        return 400;
    }
    pthread_mutex_lock(&r->mu);
    ls_srv_rmodel *m = lookup(r, name, &st, msg, cap);
    if (m && !(st = acquire(r, m, msg, cap))) {
        *out = m->srv;
        *held = m;
    }
    pthread_mutex_unlock(&r->mu);
    return st;
}

void ls_srv_router_release(ls_srv_router *r, ls_srv_rmodel *m) {
    pthread_mutex_lock(&r->mu);
    m->users--;
    m->last_used = ++r->tick;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int ls_srv_router_live(ls_srv_router *r, bool cut) {
    int live = 0;
    pthread_mutex_lock(&r->mu);
    if (cut) r->stopping = true;
    for (int i = 0; i < r->n; i++) {
        server *s = r->m[i].state == RM_LOADED ? r->m[i].srv : NULL;
        if (!s) continue;
        pthread_mutex_lock(&s->mu);
        live += s->live;
        if (cut) {
            __atomic_store_n(&s->shutting_down, true, __ATOMIC_RELEASE);
            pthread_cond_signal(&s->work);
        }
        pthread_mutex_unlock(&s->mu);
        if (cut) ls_engine_cancel_all(s->e);
    }
    pthread_mutex_unlock(&r->mu);
    return live;
}

int ls_srv_router_sum(ls_srv_router *r, ls_srv_counters *ct, ls_engine_stats *es, int *live) {
    pthread_mutex_lock(&r->mu);
    ls_srv_counters_add(ct, &r->gone);
    es->prefix_hit_tokens += r->gone_prefix_hits, es->preemptions += r->gone_preemptions;
    for (int i = 0; i < r->n; i++) {
        server *s = r->m[i].state == RM_LOADED ? r->m[i].srv : NULL;
        if (!s) continue;
        pthread_mutex_lock(&s->mu);
        ls_srv_counters_add(ct, &s->ct);
        *live += s->live;
        pthread_mutex_unlock(&s->mu);
        ls_engine_stats e = LS_ENGINE_STATS_INIT;
        ls_engine_get_stats(s->e, &e);
        es->n_waiting += e.n_waiting, es->n_running += e.n_running;
        es->kv_blocks += e.kv_blocks, es->kv_used += e.kv_used, es->kv_cached_idle += e.kv_cached_idle;
        es->prefix_hit_tokens += e.prefix_hit_tokens, es->preemptions += e.preemptions;
    }
    int n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int ls_srv_router_metrics(ls_srv_router *r, char *t, size_t cap) {
    size_t n = 0;
#define PUT(...)                                                         \
    do {                                                                 \
        int w_ = snprintf(t + n, n < cap ? cap - n : 0, __VA_ARGS__);    \
        if (w_ > 0) n = n + (size_t)w_ < cap ? n + (size_t)w_ : cap - 1; \
    } while (0)
    PUT("# HELP lockstep_model_loaded 1 when the model is loaded (router mode).\n"
        "# TYPE lockstep_model_loaded gauge\n");
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) PUT("lockstep_model_loaded{model=\"%s\"} %d\n", r->m[i].name, r->m[i].state == RM_LOADED);
    PUT("# HELP lockstep_parity_verified 1 when the model's probe verified (or scoped) byte parity.\n"
        "# TYPE lockstep_parity_verified gauge\n");
    for (int i = 0; i < r->n; i++) {
        const ls_srv_rmodel *m = &r->m[i];
        PUT("lockstep_parity_verified{model=\"%s\",verdict=\"%s\",spec=\"%s\"} %d\n", m->name, m->parity,
            m->spec_state, m->probe.verdict == LS_VERDICT_VERIFIED || m->probe.verdict == LS_VERDICT_SCOPED);
    }
    pthread_mutex_unlock(&r->mu);
#undef PUT
    return (int)n;
}

/* ---- the endpoints ------------------------------------------------------------------- */
/* m's probe verdict into o (r->mu held). */
static void add_verdict(cJSON *o, const ls_srv_rmodel *m) {
    cJSON_AddStringToObject(o, "parity", m->parity);
    cJSON_AddStringToObject(o, "spec_state", m->spec_state);
    if (m->probe.verdict == LS_VERDICT_UNPROBED) return;
    cJSON *ax = cJSON_AddObjectToObject(o, "axes");
    for (int a = 0; a < LS_AXIS_COUNT; a++)
        cJSON_AddStringToObject(ax, ls_axis_name((ls_axis)a),
                                m->probe.axis[a] == LS_AXIS_PASSED   ? "passed"
                                : m->probe.axis[a] == LS_AXIS_FAILED ? "failed"
                                                                     : "not checked");
    cJSON_AddStringToObject(o, "kernels", m->probe.kernels_after);
    if (m->probe.detail[0]) cJSON_AddStringToObject(o, "parity_detail", m->probe.detail);
}

/* {"value": "loaded"} and, after a failed load, "failed": true and "error". */
static void add_status(cJSON *o, const ls_srv_rmodel *m) {
    cJSON *st = cJSON_AddObjectToObject(o, "status");
    cJSON_AddStringToObject(st, "value", RM_STATE[m->state]);
    if (m->failed) {
        cJSON_AddTrueToObject(st, "failed");
        cJSON_AddStringToObject(st, "error", m->error);
    }
}

enum MHD_Result ls_srv_router_models(server *s, struct MHD_Connection *c) {
    ls_srv_router *r = s->router;
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        const ls_srv_rmodel *m = &r->m[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", m->name);
        cJSON_AddStringToObject(e, "object", "model");
        cJSON_AddNumberToObject(e, "created", 0);
        cJSON_AddStringToObject(e, "owned_by", "lockstep");
        cJSON_AddStringToObject(e, "path", m->path);
        add_status(e, m);
        add_verdict(e, m);
        cJSON_AddItemToArray(d, e);
    }
    pthread_mutex_unlock(&r->mu);
    return ls_srv_send_json(s, c, 200, o);
}

enum MHD_Result ls_srv_router_health(server *s, struct MHD_Connection *c) {
    ls_srv_router *r = s->router;
    cJSON *o = cJSON_CreateObject(), *d;
    cJSON_AddStringToObject(o, "status", "ok");
    d = cJSON_AddArrayToObject(o, "models");
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        const ls_srv_rmodel *m = &r->m[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", m->name);
        add_status(e, m);
        add_verdict(e, m);
        cJSON_AddItemToArray(d, e);
    }
    pthread_mutex_unlock(&r->mu);
    return ls_srv_send_json(s, c, 200, o);
}

enum MHD_Result ls_srv_router_load(server *s, struct MHD_Connection *c, const char *body, size_t len, bool load_it) {
    ls_srv_router *r = s->router;
    char msg[768];
    if (!r)
        return ls_srv_send_error(s, c, 400, "invalid_request_error",
                                 "this server serves one model: start it with several -m or with --models-dir to "
                                 "load and unload models", NULL);
    ls_err perr;
    cJSON *j = ls_srv_json_parse(body ? body : "", len, &perr);
    if (!j)
        return ls_srv_send_error(s, c, perr.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", perr.msg, NULL);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "model"), *k;
    unsigned st = 0;
    if (!cJSON_IsObject(j)) {
        snprintf(msg, sizeof msg, "the body must be a JSON object {\"model\": NAME}");
        st = 400;
    }
    cJSON_ArrayForEach(k, j) {
        if (st || !k->string || !strcmp(k->string, "model")) continue;
        snprintf(msg, sizeof msg, "unsupported parameter '%.60s': the body is {\"model\": NAME}", k->string);
        st = 400;
    }
    if (!st && (!cJSON_IsString(v) || !*v->valuestring)) {
        snprintf(msg, sizeof msg, "'model' is required: the name of the model to %s", load_it ? "load" : "unload");
        st = 400;
    }
    char name[256] = "";
    if (!st) snprintf(name, sizeof name, "%s", v->valuestring);
    cJSON_Delete(j);
    if (st) return ls_srv_send_error(s, c, st, "invalid_request_error", msg, NULL);
    pthread_mutex_lock(&r->mu);
    ls_srv_rmodel *m = lookup(r, name, &st, msg, sizeof msg);
    if (m && load_it) {
        m->failed = false; /* an explicit load retries a failed one */
        if (!(st = acquire(r, m, msg, sizeof msg))) {
            m->users--;
            pthread_cond_broadcast(&r->cv);
        }
    } else if (m) {
        double deadline = now_ms() + 1000.0 * r->p->timeout_s;
        while (m->state == RM_LOADING || (m->state == RM_LOADED && !idle(m) && now_ms() < deadline)) wait_short(r);
        if (m->state != RM_LOADED) {
            snprintf(msg, sizeof msg, "model '%s' is not loaded", m->name);
            st = 400;
        } else if (!idle(m)) {
            snprintf(msg, sizeof msg, "model '%s' still has requests in flight after %d s; retry later", m->name,
                     r->p->timeout_s);
            st = 409;
        } else {
            unload(r, m, "POST /models/unload");
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (st)
        return ls_srv_send_error(s, c, st, st == 503 ? "server_busy" : "invalid_request_error", msg,
                                 st == 503 ? "1" : NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddTrueToObject(o, "success");
    return ls_srv_send_json(s, c, 200, o);
}
