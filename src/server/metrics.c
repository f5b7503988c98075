/* metrics.c - the server's counters and GET /metrics (Prometheus text format). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

#include <time.h>

static const char *const codes[] = {"2xx", "400", "401", "403", "404", "405", "413", "414", "415", "431", "500", "503"};
#define N_CODES (int)(sizeof codes / sizeof codes[0])

void ls_srv_count_cancel(server *s, int cause) {
    pthread_mutex_lock(&s->mu);
    if (cause == LS_CANCEL_SHUTDOWN) s->ct.cancelled_shutdown++;
    else if (cause == LS_CANCEL_TIMEOUT) s->ct.cancelled_timeout++;
    else s->ct.cancelled_client++;
    pthread_mutex_unlock(&s->mu);
}

void ls_srv_count_status(server *s, unsigned status) {
    char b[8];
    snprintf(b, sizeof b, "%u", status);
    int k = status >= 200 && status < 300 ? 0 : -1;
    for (int i = 1; i < N_CODES && k < 0; i++)
        if (!strcmp(codes[i], b)) k = i;
    pthread_mutex_lock(&s->mu);
    if (k >= 0) s->ct.req_by_status[k]++;
    else s->ct.other_status++;
    pthread_mutex_unlock(&s->mu);
}

/* Bucket bounds in seconds (the last bucket is +Inf). */
static const double lat_le[LS_SRV_LAT_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25,  0.5,    1,     2.5,  5,     10,   30};

static void hist_add(ls_srv_hist *h, double sec) {
    int b = 0;
    while (b < LS_SRV_LAT_BUCKETS && sec > lat_le[b]) b++;
    h->n[b]++;
    h->count++;
    h->sum += sec;
}

void ls_srv_count_latency(server *s, double queue_ms, double ttft_ms, double tpot_ms, double e2e_ms) {
    pthread_mutex_lock(&s->mu);
    if (queue_ms >= 0) hist_add(&s->ct.queue, queue_ms / 1e3);
    if (ttft_ms >= 0) hist_add(&s->ct.ttft, ttft_ms / 1e3);
    if (tpot_ms >= 0) hist_add(&s->ct.tpot, tpot_ms / 1e3);
    if (e2e_ms >= 0) hist_add(&s->ct.e2e, e2e_ms / 1e3);
    pthread_mutex_unlock(&s->mu);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec;
}

void ls_srv_count_tokens(server *s, int32_t n) {
    double sec = now_s();
    int slot = (int)((long long)sec % 16);
    pthread_mutex_lock(&s->mu);
    if (s->ct.tps_t[slot] != sec) {
        s->ct.tps_t[slot] = sec;
        s->ct.tps_n[slot] = 0;
    }
    s->ct.tps_n[slot] += (uint64_t)n;
    pthread_mutex_unlock(&s->mu);
}

/* Tokens generated over the last 10 whole seconds, per second. */
static double tokens_per_second(const ls_srv_counters *k) {
    double now = now_s();
    uint64_t sum = 0;
    for (int i = 0; i < 16; i++)
        if (k->tps_t[i] >= now - 10 && k->tps_t[i] < now) sum += k->tps_n[i];
    return (double)sum / 10.0;
}

static int hist_print(char *t, size_t cap, const char *name, const char *help, const ls_srv_hist *h) {
    int n = snprintf(t, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i <= LS_SRV_LAT_BUCKETS; i++) {
        cum += h->n[i];
        if (i < LS_SRV_LAT_BUCKETS)
            n += snprintf(t + n, cap - (size_t)n, "%s_bucket{le=\"%g\"} %llu\n", name, lat_le[i], (unsigned long long)cum);
        else
            n += snprintf(t + n, cap - (size_t)n, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    n += snprintf(t + n, cap - (size_t)n, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name,
                  (unsigned long long)h->count);
    return n;
}

void ls_srv_count_step(server *s, int32_t rows) {
    if (rows <= 0) return;
    int b = 0;
    while (b < 8 && rows > (1 << b)) b++;
    pthread_mutex_lock(&s->mu);
    s->ct.steps++;
    s->ct.batch_hist[b]++;
    s->ct.batch_rows_sum += (uint64_t)rows;
    pthread_mutex_unlock(&s->mu);
}

static void hist_add_all(ls_srv_hist *d, const ls_srv_hist *a) {
    for (int i = 0; i <= LS_SRV_LAT_BUCKETS; i++) d->n[i] += a->n[i];
    d->count += a->count;
    d->sum += a->sum;
}

void ls_srv_counters_add(ls_srv_counters *d, const ls_srv_counters *a) {
    for (int i = 0; i < 13; i++) d->req_by_status[i] += a->req_by_status[i];
    d->other_status += a->other_status;
    d->prompt_tokens += a->prompt_tokens, d->gen_tokens += a->gen_tokens;
    d->drafted += a->drafted, d->accepted += a->accepted, d->steps += a->steps;
    for (int i = 0; i < 9; i++) d->batch_hist[i] += a->batch_hist[i];
    d->batch_rows_sum += a->batch_rows_sum;
    hist_add_all(&d->queue, &a->queue), hist_add_all(&d->ttft, &a->ttft);
    hist_add_all(&d->tpot, &a->tpot), hist_add_all(&d->e2e, &a->e2e);
    d->cancelled_shutdown += a->cancelled_shutdown, d->cancelled_client += a->cancelled_client;
    d->cancelled_timeout += a->cancelled_timeout, d->head_timeouts += a->head_timeouts;
    d->body_timeouts += a->body_timeouts, d->conn_refused += a->conn_refused;
    for (int i = 0; i < 16; i++) { /* slot i holds one second's count: the same second adds, a later one wins */
        if (a->tps_t[i] == d->tps_t[i]) d->tps_n[i] += a->tps_n[i];
        else if (a->tps_t[i] > d->tps_t[i]) d->tps_t[i] = a->tps_t[i], d->tps_n[i] = a->tps_n[i];
    }
}

enum MHD_Result ls_srv_metrics(server *s, struct MHD_Connection *c) {
    ls_engine_stats es = LS_ENGINE_STATS_INIT;
    ls_srv_counters all; /* router mode: the front's, every model's, and those of models unloaded */
    int live = 0, n_models = 0;
    if (s->router) {
        pthread_mutex_lock(&s->mu);
        all = s->ct;
        pthread_mutex_unlock(&s->mu);
        n_models = ls_srv_router_sum(s->router, &all, &es, &live);
    } else {
        ls_engine_get_stats(s->e, &es);
    }
    const size_t cap = 16384 + (size_t)n_models * 512;
    char *t = malloc(cap);
    if (!t) return MHD_NO;
    pthread_mutex_lock(&s->mu);
    const ls_srv_counters *k = s->router ? &all : &s->ct;
    if (!s->router) live = s->live;
    int n = 0;
    n += snprintf(t + n, cap - n, "# HELP lockstep_requests_total HTTP requests by status.\n"
                                  "# TYPE lockstep_requests_total counter\n");
    for (int i = 0; i < N_CODES; i++)
        n += snprintf(t + n, cap - n, "lockstep_requests_total{status=\"%s\"} %llu\n", codes[i],
                      (unsigned long long)k->req_by_status[i]);
    n += snprintf(t + n, cap - n, "lockstep_requests_total{status=\"other\"} %llu\n", (unsigned long long)k->other_status);
    n += snprintf(t + n, cap - n,
                  "# TYPE lockstep_prompt_tokens_total counter\nlockstep_prompt_tokens_total %llu\n"
                  "# TYPE lockstep_generated_tokens_total counter\nlockstep_generated_tokens_total %llu\n"
                  "# TYPE lockstep_queue_depth gauge\nlockstep_queue_depth %d\n"
                  "# TYPE lockstep_running_sequences gauge\nlockstep_running_sequences %d\n"
                  "# TYPE lockstep_requests_in_flight gauge\nlockstep_requests_in_flight %d\n",
                  (unsigned long long)k->prompt_tokens, (unsigned long long)k->gen_tokens, es.n_waiting, es.n_running,
                  live);
    n += snprintf(t + n, cap - n, "# HELP lockstep_batch_rows Rows per engine step.\n# TYPE lockstep_batch_rows histogram\n");
    uint64_t cum = 0;
    const char *le[9] = {"1", "2", "4", "8", "16", "32", "64", "128", "+Inf"};
    for (int i = 0; i < 9; i++) {
        cum += k->batch_hist[i];
        n += snprintf(t + n, cap - n, "lockstep_batch_rows_bucket{le=\"%s\"} %llu\n", le[i], (unsigned long long)cum);
    }
    n += snprintf(t + n, cap - n, "lockstep_batch_rows_sum %llu\nlockstep_batch_rows_count %llu\n",
                  (unsigned long long)k->batch_rows_sum, (unsigned long long)k->steps);
    n += snprintf(t + n, cap - n,
                  "# TYPE lockstep_draft_tokens_total counter\nlockstep_draft_tokens_total %llu\n"
                  "# TYPE lockstep_draft_accepted_total counter\nlockstep_draft_accepted_total %llu\n"
                  "# TYPE lockstep_kv_blocks gauge\nlockstep_kv_blocks %d\n"
                  "# TYPE lockstep_kv_blocks_used gauge\nlockstep_kv_blocks_used %d\n"
                  "# TYPE lockstep_kv_blocks_cached gauge\nlockstep_kv_blocks_cached %d\n"
                  "# TYPE lockstep_kv_usage_ratio gauge\nlockstep_kv_usage_ratio %.6f\n"
                  "# TYPE lockstep_prefix_cache_hit_tokens_total counter\nlockstep_prefix_cache_hit_tokens_total %llu\n"
                  "# TYPE lockstep_preemptions_total counter\nlockstep_preemptions_total %llu\n",
                  (unsigned long long)k->drafted, (unsigned long long)k->accepted, es.kv_blocks, es.kv_used,
                  es.kv_cached_idle, es.kv_blocks ? (double)es.kv_used / es.kv_blocks : 0.0,
                  (unsigned long long)es.prefix_hit_tokens, (unsigned long long)es.preemptions);
    if (s->p->cache_dir)
        n += snprintf(t + n, cap - n,
                      "# TYPE lockstep_cache_dir_loaded_blocks_total counter\nlockstep_cache_dir_loaded_blocks_total %llu\n"
                      "# TYPE lockstep_cache_dir_written_blocks_total counter\nlockstep_cache_dir_written_blocks_total %llu\n"
                      "# TYPE lockstep_cache_dir_rejected_files_total counter\nlockstep_cache_dir_rejected_files_total %llu\n",
                      (unsigned long long)es.disk_loaded, (unsigned long long)es.disk_written,
                      (unsigned long long)es.disk_rejected);
    n += hist_print(t + n, cap - n, "lockstep_queue_seconds",
                    "Request head arrived to submitted to the engine (body, parsing, tokenizing).", &k->queue);
    n += hist_print(t + n, cap - n, "lockstep_time_to_first_token_seconds",
                    "Request head arrived to the first generated token.", &k->ttft);
    n += hist_print(t + n, cap - n, "lockstep_time_per_output_token_seconds",
                    "Mean time between generated tokens, per request (2 or more tokens).", &k->tpot);
    n += hist_print(t + n, cap - n, "lockstep_e2e_request_seconds",
                    "Request head arrived to the last token (finished requests: stop or length).", &k->e2e);
    n += snprintf(t + n, cap - n,
                  "# HELP lockstep_generation_tokens_per_second Generated tokens per second over the last 10 s.\n"
                  "# TYPE lockstep_generation_tokens_per_second gauge\nlockstep_generation_tokens_per_second %.1f\n"
                  "# HELP lockstep_spec_acceptance_ratio Accepted / drafted tokens since start (0 without drafts).\n"
                  "# TYPE lockstep_spec_acceptance_ratio gauge\nlockstep_spec_acceptance_ratio %.6f\n"
                  "# HELP lockstep_requests_cancelled_total Requests whose generation was cut, by cause.\n"
                  "# TYPE lockstep_requests_cancelled_total counter\n"
                  "lockstep_requests_cancelled_total{reason=\"shutdown\"} %llu\n"
                  "lockstep_requests_cancelled_total{reason=\"client_gone\"} %llu\n"
                  "lockstep_requests_cancelled_total{reason=\"timeout\"} %llu\n"
                  "# HELP lockstep_head_timeouts_total Connections cut because their request head took too long.\n"
                  "# TYPE lockstep_head_timeouts_total counter\nlockstep_head_timeouts_total %llu\n"
                  "# HELP lockstep_body_timeouts_total Connections cut because their request body took too long.\n"
                  "# TYPE lockstep_body_timeouts_total counter\nlockstep_body_timeouts_total %llu\n"
                  "# HELP lockstep_connections_refused_total Requests answered 503 over --max-connections.\n"
                  "# TYPE lockstep_connections_refused_total counter\nlockstep_connections_refused_total %llu\n",
                  tokens_per_second(k), k->drafted ? (double)k->accepted / (double)k->drafted : 0.0,
                  (unsigned long long)k->cancelled_shutdown, (unsigned long long)k->cancelled_client,
                  (unsigned long long)k->cancelled_timeout, (unsigned long long)k->head_timeouts,
                  (unsigned long long)k->body_timeouts, (unsigned long long)k->conn_refused);
    pthread_mutex_lock(&s->cmu);
    int open_conns = s->n_socks;
    pthread_mutex_unlock(&s->cmu);
    n += snprintf(t + n, cap - n, "# TYPE lockstep_open_connections gauge\nlockstep_open_connections %d\n", open_conns);
    if (s->router) { /* each model's state and verdict */
        pthread_mutex_unlock(&s->mu);
        n += ls_srv_router_metrics(s->router, t + n, cap - (size_t)n);
        return ls_srv_send_text(s, c, 200, "text/plain; version=0.0.4", t, NULL);
    }
    n += snprintf(t + n, cap - n,
                  "# HELP lockstep_parity_verified 1 when the startup probe verified (or scoped) byte parity.\n"
                  "# TYPE lockstep_parity_verified gauge\nlockstep_parity_verified{verdict=\"%s\",spec=\"%s\"} %d\n"
                  "# HELP lockstep_parity_axis 1 passed, 0 failed, -1 not checked, per axis of the startup probe.\n"
                  "# TYPE lockstep_parity_axis gauge\n",
                  s->parity, s->spec_state,
                  s->probe.verdict == LS_VERDICT_VERIFIED || s->probe.verdict == LS_VERDICT_SCOPED);
    for (int a = 0; a < LS_AXIS_COUNT && s->probe.verdict != LS_VERDICT_UNPROBED; a++)
        n += snprintf(t + n, cap - n, "lockstep_parity_axis{axis=\"%s\"} %d\n", ls_axis_name((ls_axis)a),
                      s->probe.axis[a] == LS_AXIS_PASSED ? 1 : s->probe.axis[a] == LS_AXIS_FAILED ? 0 : -1);
    pthread_mutex_unlock(&s->mu);
    return ls_srv_send_text(s, c, 200, "text/plain; version=0.0.4", t, NULL);
}
