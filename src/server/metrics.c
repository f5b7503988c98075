/* metrics.c - the server's counters and GET /metrics (Prometheus text format). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

void ls_srv_count_status(server *s, unsigned status) {
    pthread_mutex_lock(&s->mu);
    int k = status < 300 ? 0 : status == 400 ? 1 : status == 401 ? 2 : (status == 404 || status == 405) ? 3
          : status == 413 ? 4 : status == 503 ? 5 : -1;
    if (k >= 0) s->ct.req_by_status[k]++;
    else s->ct.other_status++;
    pthread_mutex_unlock(&s->mu);
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

enum MHD_Result ls_srv_metrics(server *s, struct MHD_Connection *c) {
    ls_engine_stats es;
    ls_engine_get_stats(s->e, &es);
    const size_t cap = 8192;
    char *t = malloc(cap);
    if (!t) return MHD_NO;
    pthread_mutex_lock(&s->mu);
    const ls_srv_counters *k = &s->ct;
    int n = 0;
    const char *codes[6] = {"2xx", "400", "401", "404", "413", "503"};
    n += snprintf(t + n, cap - n, "# HELP lockstep_requests_total HTTP requests by status.\n"
                                  "# TYPE lockstep_requests_total counter\n");
    for (int i = 0; i < 6; i++)
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
                  s->live);
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
