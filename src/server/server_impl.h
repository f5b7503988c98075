/* server_impl.h - what the server's files share (not an interface of the library:
 * the server is a client of lockstep.h like the CLI).
 *
 *   http.c     libmicrohttpd: bodies, authentication, routing, the small endpoints
 *   jobs.c     a request's lifetime: submission, the engine's events, waiting, streaming
 *   openai.c   OpenAI's JSON shapes: responses, stream chunks, logprobs, usage, errors
 *   metrics.c  /metrics (Prometheus text) and the counters behind it
 *   server.c   startup (model, engine, probe), the engine thread, shutdown
 *   api_responses.c, api_messages.c   OpenAI's Responses and Anthropic's Messages APIs:
 *              each body becomes the chat request it means (the one ls_srv_req, through
 *              ls_srv_parse) and each reply is shaped from the job (an ls_srv_api)
 *   reasoning.c    a think block split out of a reply (--reasoning-format)
 *
 * The layers go one way: http.c routes to an API adapter (or a small endpoint), the
 * adapter to jobs.c, jobs.c to the engine; jobs.c shapes a new API's replies only through
 * the ls_srv_api the adapter handed it. */
#ifndef LS_SERVER_SERVER_IMPL_H
#define LS_SERVER_SERVER_IMPL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "lockstep.h"
#include "server/request.h"
#include "server/router.h"
#include "server/server.h"
#include "server/tools.h"

#define LS_SRV_TOP_MAX LS_LOGPROBS_TOP_MAX /* top_logprobs */

/* One token's log-probabilities, computed on the engine thread before any lock is taken
 * (ls_sample_logprobs, src/sample/). */
typedef ls_logprobs ls_tok_lp;

typedef struct server server;
typedef struct job job;

/* The API a route serves: its error shape (Anthropic's for /v1/messages). */
enum { LS_API_OPENAI = 0, LS_API_RESPONSES, LS_API_MESSAGES };

/* A reply split at its think block (reasoning.c): the reasoning is text[r0, r1), the
 * content text[c0, c1); think: the reply opened a think block. */
typedef struct {
    size_t r0, r1, c0, c1;
    bool think;
} ls_srv_split;
/* done false: only what more text cannot change (the stable prefixes of the spans). */
void ls_srv_think_split(const char *t, size_t n, bool done, bool enabled, ls_srv_split *o);

/* A reply shape other than chat/completions (api_responses.c, api_messages.c): the whole
 * reply, and a stream's events.  stream(j) runs under j->mu, on MHD's thread: the events
 * for what is new since its last call (the opening events on the first call, the closing
 * ones once j->done), as one malloc'd string (NULL: none). */
typedef struct {
    int kind;                       /* LS_API_* */
    const char *id_prefix;          /* "resp", "msg" */
    cJSON *(*response)(const job *j);
    char *(*stream)(job *j);
} ls_srv_api;

/* Where a connection's current request is (the reaper's deadlines). */
enum { SK_HEAD = 0, SK_BODY, SK_HANDLING };

/* At shutdown, after the grace period's cancellations: how long the handlers of the
 * cancelled requests get to write their replies before the connections are closed. */
#define LS_SRV_REPLY_GRACE_MS 1000.0

/* One TCP connection (MHD's socket context, from MHD_OPTION_NOTIFY_CONNECTION): the
 * reaper's head and body deadlines, and the access-log fields of the request on it.  The
 * log fields are written by the connection's own thread only; fd, phase, the deadline
 * fields and the list links are guarded by server.cmu. */
typedef struct sock {
    struct sock *prev, *next;
    int fd;
    int phase;                 /* SK_*: awaiting a head, reading the body, handling/answering */
    bool head_started;         /* a byte of the awaited head has arrived (an idle keep-alive
                                * connection has none: it is not under --header-timeout) */
    uint64_t rx_mark;          /* bytes received when the connection began to await this head */
    double idle_t0;            /* when it began to await this head (ms, monotonic) */
    double head_t0;            /* when this head's first bytes arrived (head_started) */
    double body_t0;            /* when the head was complete (SK_BODY) */
    double next_check;         /* the reaper's next look at an unstarted head */
    bool cut;                  /* the reaper shut it down */
    int last_toe;              /* the previous request's MHD_RequestTerminationCode */
    char client[64];
    /* the current request, for the access log */
    double t0;
    char method[16], path[96], req_id[48];
    unsigned status;
    int32_t n_prompt, n_gen;
    const char *note;          /* e.g. "cancelled (shutdown)" */
    int api;                   /* LS_API_*: the route's error shape */
} sock;

/* A request: shared by its HTTP thread and the engine thread (refs counts both). */
struct job {
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
    ls_tok_lp *lps;
    int32_t n_tokens, cap_tokens;
    ls_tok_lp *plps;    /* echo + logprobs: plps[p] for prompt token p >= 1 (p = 0 has none) */
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
    double out_t;       /* ms, monotonic: when bytes last went to MHD (or the stream began) */
    const char *path;
    sock *sk;           /* the connection it arrived on (its access-log fields) */
    double t_submit, t_first, t_last; /* ms, monotonic: submitted, first and last token */
    bool shutdown_cut;  /* cancelled at the end of the shutdown grace period */
    bool counted;       /* its cancellation is counted (metrics: once per HTTP request) */
    bool native;        /* llama-server's /completion (native.c shapes the replies) */
    bool stop_eos;      /* finished on an end-of-generation / stop token (not a stop string) */
    int32_t choice;     /* the choice's index (n > 1 or a list of prompts) */
    int slot;           /* its place in server.slots (GET /slots), or -1 */
    double pf_last;     /* ms, monotonic: the last prefill progress line (serve's progress on a terminal) */
    /* a think block split out while streaming (chat): bytes of each span sent so far */
    size_t sent_r, sent_c;
    /* the Responses / Messages APIs */
    const ls_srv_api *api;  /* NULL: chat/completions (openai.c) or /completion (native.c) */
    cJSON *api_echo;        /* what the reply repeats of the request (owned) */
    int ev_seq;             /* stream: events sent (Responses' sequence_number) */
    int ev_open;            /* stream: the open block / item: 0 none, 1 reasoning, 2 text */
    int ev_index;           /* stream: blocks / output items opened so far */
    bool ev_began;          /* stream: the opening events are out */
};

/* GET /slots: what each of the n_parallel places runs (guarded by server.mu). */
typedef struct {
    bool busy;
    char task[48];
    const char *path;
    int32_t n_prompt, n_decoded;
} srv_slot;

/* One connection's request body. */
typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
    double t0;          /* the head arrived */
    bool native;        /* the body was translated from /completion's (native.c) */
    int32_t n_probs;    /* /completion's n_probs (top log-probabilities per token) */
    const ls_srv_api *api; /* the body was translated from a Responses / Messages request */
    cJSON *api_echo;    /* ... and what its reply repeats (moves to the job) */
    ls_srv_rmodel *rmodel; /* router mode: the model it holds until it is over (router.h) */
} conn;

/* Latency histograms (seconds; Prometheus buckets, cumulative when printed). */
#define LS_SRV_LAT_BUCKETS 14
typedef struct {
    uint64_t n[LS_SRV_LAT_BUCKETS + 1]; /* per bucket, the last is +Inf */
    uint64_t count;
    double sum;
} ls_srv_hist;

/* Counters behind /metrics (guarded by server.mu). */
typedef struct {
    uint64_t req_by_status[13]; /* see ls_srv_status_codes */
    uint64_t other_status;
    uint64_t prompt_tokens, gen_tokens, drafted, accepted, steps;
    uint64_t batch_hist[9];    /* rows per step: <=1 2 4 8 16 32 64 128 +Inf */
    uint64_t batch_rows_sum;
    ls_srv_hist queue, ttft, tpot, e2e;
    uint64_t cancelled_shutdown, cancelled_client, cancelled_timeout, head_timeouts, body_timeouts, conn_refused;
    double tps_t[16];          /* generated tokens per second: a ring of 1-second slots */
    uint64_t tps_n[16];
} ls_srv_counters;

struct server {
    const ls_server_params *p;
    ls_model *m, *draft_model;
    ls_engine *e;
    const char *model_name;
    int n_ctx;                 /* resolved context per sequence */
    int32_t n_vocab;
    bool has_chat;             /* the model has a usable chat template */
    pthread_t engine_thread;
    pthread_mutex_t mu;        /* guards the fields below */
    pthread_cond_t work;
    int ready;                 /* 0 loading, 1 probing, 2 serving: atomic; serving publishes
                                * (release) the verdict, spec and the engine to the handlers */
    bool stop_engine;
    int live;                  /* requests submitted and not finished */
    int busy;                  /* HTTP requests between their complete head and their end */
    ls_probe_result probe;     /* the startup verdict (verdict UNPROBED with --no-probe) */
    char parity[32];           /* "verified", "scoped", "failed", "skipped" */
    char spec_state[64];       /* the drafter and whether it serves: "off", "ngram", "ngram (declined)" */
    ls_spec_params spec;       /* kind LS_SPEC_OFF: no speculation */
    ls_srv_counters ct;
    bool shutting_down;        /* the grace period is over: what is cancelled now is cut, and
                                * nothing more is submitted (guarded by mu; read atomically) */
    bool draining;             /* SIGINT/SIGTERM came: new requests get 503 (atomic) */
    bool loopback;             /* bound to a loopback address: the Host check applies */
    pthread_mutex_t cmu;       /* guards the connection list */
    sock *socks;
    int n_socks;
    pthread_t reaper;
    bool stop_reaper;
    srv_slot *slots;           /* n_parallel (guarded by mu) */
    int tool_format;           /* ls_srv_tool_format of the model's template */
    char *default_system;      /* the template's own system prompt, or NULL */
    ls_srv_router *router;     /* router mode (several models): NULL in a model's own server */
    int n_jobs;                /* jobs alive (atomic): a model is unloaded only at 0 */
};

/* server.c: one model's server (router mode): its model, engine, probe (the verdict in
 * probe and parity) and engine thread, serving; NULL with err set when it cannot load.
 * p outlives it. */
server *ls_srv_model_open(const ls_server_params *p, ls_err *err);
/* Stops its engine thread and frees it (nothing of it may be in flight). */
void ls_srv_model_close(server *s);

/* http.c */
enum MHD_Result ls_srv_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls);
void ls_srv_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);
enum MHD_Result ls_srv_send_text(server *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
                                 const char *retry_after);
enum MHD_Result ls_srv_send_json(server *s, struct MHD_Connection *c, unsigned status, cJSON *j);
enum MHD_Result ls_srv_send_error(server *s, struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *msg, const char *retry_after);
/* 405 with an Allow header. */
enum MHD_Result ls_srv_send_405(server *s, struct MHD_Connection *c, const char *allow);
/* The headers every response carries (CORS, X-Request-Id). */
void ls_srv_common_headers(server *s, struct MHD_Connection *c, struct MHD_Response *r);
sock *ls_srv_sock(struct MHD_Connection *c);
void ls_srv_notify_conn(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code);
void *ls_srv_reaper_main(void *arg);
/* Whether the client closed its end (the socket reads as end-of-file, or fails). */
bool ls_srv_client_gone(struct MHD_Connection *c);
/* Counts one HTTP request cancelled, by cause. */
enum { LS_CANCEL_CLIENT = 1, LS_CANCEL_SHUTDOWN, LS_CANCEL_TIMEOUT };
void ls_srv_count_cancel(server *s, int cause);

/* jobs.c */
enum MHD_Result ls_srv_generate(server *s, struct MHD_Connection *c, conn *cn, bool chat, const char *path);
void *ls_srv_engine_main(void *arg);

/* openai.c: each returns a new object (or NULL when out of memory) */
cJSON *ls_srv_response(const job *j);
/* One SSE event "data: {...}\n\n" (caller frees): content, or the role / finish chunk,
 * or (usage_only) the usage chunk. */
char *ls_srv_chunk(const job *j, const char *content, size_t n, int32_t lp_from, int32_t lp_to, bool role,
                   const char *finish, bool usage_only);
const char *ls_srv_finish_str(ls_finish f);
/* With tools: the reply's delta chunk(s) and the finish chunk, parsed from the whole text. */
char *ls_srv_tools_chunks(const job *j);
/* GET /props and POST /apply-template (llama-server's). */
enum MHD_Result ls_srv_props(server *s, struct MHD_Connection *c);
/* GET /, /page.js, /page.css, /page.svg: the chat page (page.c). */
enum MHD_Result ls_srv_page(server *s, struct MHD_Connection *c, const char *url);
enum MHD_Result ls_srv_apply_template(server *s, struct MHD_Connection *c, const char *body, size_t len);

/* With a think block split out (chat): reasoning_content chunks. */
char *ls_srv_chunk_reasoning(const job *j, const char *text, size_t n);
/* The system_fingerprint of the replies. */
void ls_srv_fingerprint(const server *s, char *fp, size_t n);

/* api_responses.c / api_messages.c: POST /v1/responses, POST /v1/messages */
enum MHD_Result ls_srv_responses(server *s, struct MHD_Connection *c, conn *cn);
enum MHD_Result ls_srv_messages(server *s, struct MHD_Connection *c, conn *cn);
/* An SSE event "event: NAME\ndata: {...}\n\n" (o deleted; caller frees). */
char *ls_srv_sse_event(const char *name, cJSON *o);
/* Appends b to *a (both malloc'd or NULL; b freed). */
void ls_srv_cat(char **a, char *b);

/* embeddings.c: POST /v1/embeddings */
enum MHD_Result ls_srv_embeddings(server *s, struct MHD_Connection *c, conn *cn);

/* native.c: llama-server's POST /completion and GET /slots */
enum MHD_Result ls_srv_native_completion(server *s, struct MHD_Connection *c, conn *cn);
enum MHD_Result ls_srv_slots(server *s, struct MHD_Connection *c);
cJSON *ls_srv_native_response(const job *j);
/* One SSE event: content (final: the whole reply with "stop": true). */
char *ls_srv_native_chunk(const job *j, const char *content, size_t n, int32_t lp_from, int32_t lp_to, bool final);
/* Log-probabilities as llama-server's completion_probabilities. */
cJSON *ls_srv_native_probs(const job *j, int32_t from, int32_t to);
/* openai.c helper: a token's text (valid UTF-8 or "bytes:\xNN") and optionally its bytes. */
cJSON *ls_srv_token_str(const server *s, int32_t id, cJSON **bytes);
cJSON *ls_srv_lp_num(float x);

/* metrics.c */
void ls_srv_count_status(server *s, unsigned status);
void ls_srv_count_step(server *s, int32_t rows);
/* A finished generation's latencies, in ms (< 0: not measured). */
void ls_srv_count_latency(server *s, double queue_ms, double ttft_ms, double tpot_ms, double e2e_ms);
/* n tokens generated now (tokens per second over the last 10 s). */
void ls_srv_count_tokens(server *s, int32_t n);
enum MHD_Result ls_srv_metrics(server *s, struct MHD_Connection *c);
/* d += a (the tokens-per-second ring by second). */
void ls_srv_counters_add(ls_srv_counters *d, const ls_srv_counters *a);
/* router.c, for /metrics in router mode: adds every model's counters (those of unloaded
 * models included) to *ct, the loaded ones' engine stats to *es and their requests in
 * flight to *live, and returns the number of models; ls_srv_router_metrics writes each
 * model's lines (loaded, parity verdict) into t (at most cap bytes), returns their length. */
int ls_srv_router_sum(ls_srv_router *r, ls_srv_counters *ct, ls_engine_stats *es, int *live);
int ls_srv_router_metrics(ls_srv_router *r, char *t, size_t cap);

/* ---- what the request adapters share (api_common.c) ---- */
bool ls_srv_in_list(const char *k, const char *const *list); /* list: NULL-terminated */
/* Every key of o (not null) in allowed, or a 400 naming 'path.key'. */
ls_status ls_srv_keys_in(const cJSON *o, const char *const *allowed, const char *path, ls_err *err);
/* A copy of v for the chat body; a number written with 17 digits (cJSON prints 15, which
 * would change a 16-digit seed or a float's last bits on the way to the chat parser). */
cJSON *ls_srv_dup_exact(const cJSON *v);
/* o's member k, or NULL when absent or null. */
const cJSON *ls_srv_get(const cJSON *o, const char *k);

#endif
