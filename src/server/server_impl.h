/* server_impl.h - what the server's files share (not an interface of the library:
 * the server is a client of lockstep.h like the CLI).
 *
 *   http.c     libmicrohttpd: bodies, authentication, routing, the small endpoints
 *   jobs.c     a request's lifetime: submission, the engine's events, waiting, streaming
 *   openai.c   OpenAI's JSON shapes: responses, stream chunks, logprobs, usage, errors
 *   metrics.c  /metrics (Prometheus text) and the counters behind it
 *   server.c   startup (model, engine, probe), the engine thread, shutdown */
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
#include "server/server.h"

#define LS_SRV_TOP_MAX 20 /* top_logprobs */

/* One generated token's log-probabilities (computed on the engine thread before any
 * lock is taken: ls_srv_logprobs). */
typedef struct {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_tok[LS_SRV_TOP_MAX];
    float top_lp[LS_SRV_TOP_MAX];
} ls_tok_lp;

/* log-softmax of logits at token, and the top n (ties to the lower id). */
void ls_srv_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top, ls_tok_lp *out);

typedef struct server server;

/* A request: shared by its HTTP thread and the engine thread (refs counts both). */
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
    ls_tok_lp *lps;
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

/* One connection's request body. */
typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
} conn;

/* Counters behind /metrics (guarded by server.mu). */
typedef struct {
    uint64_t req_by_status[6]; /* 2xx 400 401 404/405 413 503 */
    uint64_t other_status;
    uint64_t prompt_tokens, gen_tokens, drafted, accepted, steps;
    uint64_t batch_hist[9];    /* rows per step: <=1 2 4 8 16 32 64 128 +Inf */
    uint64_t batch_rows_sum;
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
    ls_probe_result probe;     /* the startup verdict (verdict UNPROBED with --no-probe) */
    char parity[32];           /* "verified", "scoped", "failed", "skipped" */
    char spec_state[64];       /* the drafter and whether it serves: "off", "ngram", "ngram (declined)" */
    ls_spec_params spec;       /* kind LS_SPEC_OFF: no speculation */
    ls_srv_counters ct;
};

/* http.c */
enum MHD_Result ls_srv_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls);
void ls_srv_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);
enum MHD_Result ls_srv_send_text(server *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
                                 const char *retry_after);
enum MHD_Result ls_srv_send_json(server *s, struct MHD_Connection *c, unsigned status, cJSON *j);
enum MHD_Result ls_srv_send_error(server *s, struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *msg, const char *retry_after);

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

/* metrics.c */
void ls_srv_count_status(server *s, unsigned status);
void ls_srv_count_step(server *s, int32_t rows);
enum MHD_Result ls_srv_metrics(server *s, struct MHD_Connection *c);

#endif
