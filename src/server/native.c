/* native.c - llama-server's own endpoints: POST /completion and GET /slots.
 *
 * /completion's body is checked here (every key is one the server acts on, or a 400
 * naming it), translated to the /v1/completions request it means (n_predict ->
 * max_tokens, llama-server's sampling defaults filled in) and run through the same
 * jobs; only the replies are shaped differently (content, tokens_predicted,
 * tokens_evaluated, stop, stop_type, generation_settings, timings,
 * completion_probabilities), and its stream is `data: {...}` events ending with the
 * whole reply ("stop": true), no [DONE]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

/* llama-server's defaults for a /completion request (its common/sampling defaults). */
#define NAT_TEMPERATURE 0.8
#define NAT_TOP_K 40
#define NAT_TOP_P 0.95
#define NAT_MIN_P 0.05

static const char *const NAT_KNOWN[] = {"prompt", "n_predict", "temperature", "top_k", "top_p", "min_p", "seed",
                                        "stop", "stream", "cache_prompt", "n_probs", "repeat_penalty",
                                        "repeat_last_n", "frequency_penalty", "presence_penalty", "ignore_eos",
                                        "model", "grammar", "json_schema", NULL};
/* passed on to the /v1/completions parser unchanged (it checks their values) */
static const char *const NAT_PASS[] = {"prompt", "temperature", "top_k", "top_p", "min_p", "stop", "stream",
                                       "repeat_penalty", "repeat_last_n", "frequency_penalty", "presence_penalty",
                                       "ignore_eos", "model", "grammar", "json_schema", NULL};

enum MHD_Result ls_srv_native_completion(server *s, struct MHD_Connection *c, conn *cn) {
    char msg[256];
    const char *bad = NULL;
    ls_err perr;
    cJSON *j = ls_srv_json_parse(cn->body, cn->len, &perr);
    if (!j)
        return ls_srv_send_error(s, c, perr.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", perr.msg, NULL);
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
        bool ok = cJSON_IsNull(v);
        for (int i = 0; NAT_KNOWN[i] && !ok; i++) ok = !strcmp(v->string, NAT_KNOWN[i]);
        if (!ok) {
            snprintf(msg, sizeof msg, "'%.60s' is not supported by /completion (it is refused rather than ignored)",
                     v->string);
            bad = msg;
            break;
        }
    }
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; !bad && NAT_PASS[i]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, NAT_PASS[i]);
        if (x && !cJSON_IsNull(x)) cJSON_AddItemToObject(o, NAT_PASS[i], cJSON_Duplicate(x, true));
    }
    if (!bad) {
        if (!cJSON_GetObjectItemCaseSensitive(o, "temperature")) cJSON_AddNumberToObject(o, "temperature", NAT_TEMPERATURE);
        if (!cJSON_GetObjectItemCaseSensitive(o, "top_k")) cJSON_AddNumberToObject(o, "top_k", NAT_TOP_K);
        if (!cJSON_GetObjectItemCaseSensitive(o, "top_p")) cJSON_AddNumberToObject(o, "top_p", NAT_TOP_P);
        if (!cJSON_GetObjectItemCaseSensitive(o, "min_p")) cJSON_AddNumberToObject(o, "min_p", NAT_MIN_P);
    }
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(j, "n_predict"), *sd = cJSON_GetObjectItemCaseSensitive(j, "seed"),
                *cp = cJSON_GetObjectItemCaseSensitive(j, "cache_prompt"),
                *pr = cJSON_GetObjectItemCaseSensitive(j, "n_probs");
    if (!bad && np && !cJSON_IsNull(np)) {
        double x = cJSON_IsNumber(np) ? np->valuedouble : 0;
        if (!cJSON_IsNumber(np) || x != floor(x) || (x != -1 && (x < 1 || x > s->p->max_tokens))) {
            snprintf(msg, sizeof msg, "'n_predict' must be -1 (until the context or the server's cap) or 1 .. %d",
                     s->p->max_tokens);
            bad = msg;
        } else if (x >= 1) {
            cJSON_AddNumberToObject(o, "max_tokens", x);
        }
    }
    if (!bad && sd && !cJSON_IsNull(sd)) {
        if (!cJSON_IsNumber(sd)) bad = "'seed' must be an integer (-1: a random one)";
        else if (sd->valuedouble != -1) cJSON_AddItemToObject(o, "seed", cJSON_Duplicate(sd, true));
    }
    if (!bad && cp && !cJSON_IsNull(cp) && !cJSON_IsBool(cp))
        bad = "'cache_prompt' must be true or false (the prefix cache never changes a result, so both serve it)";
    cn->n_probs = 0;
    if (!bad && pr && !cJSON_IsNull(pr)) {
        if (!cJSON_IsNumber(pr) || pr->valuedouble != floor(pr->valuedouble) || pr->valuedouble < 0 ||
            pr->valuedouble > LS_SRV_TOP_MAX) {
            snprintf(msg, sizeof msg, "'n_probs' must be an integer between 0 and %d", LS_SRV_TOP_MAX);
            bad = msg;
        } else {
            cn->n_probs = (int32_t)pr->valuedouble;
        }
    }
    if (!bad && !cJSON_GetObjectItemCaseSensitive(o, "prompt")) bad = "'prompt' is required";
    cJSON_Delete(j);
    if (bad) {
        cJSON_Delete(o);
        return ls_srv_send_error(s, c, 400, "invalid_request_error", bad, NULL);
    }
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return ls_srv_send_error(s, c, 500, "server_error", "out of memory", NULL);
    free(cn->body);
    cn->body = t;
    cn->len = cn->cap = strlen(t);
    cn->native = true;
    return ls_srv_generate(s, c, cn, false, "/completion");
}

cJSON *ls_srv_native_probs(const job *j, int32_t from, int32_t to) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = from; i < to && j->lps; i++) {
        const ls_tok_lp *e = &j->lps[i];
        cJSON *o = cJSON_CreateObject(), *bytes, *top;
        cJSON_AddNumberToObject(o, "id", e->token);
        cJSON_AddItemToObject(o, "token", ls_srv_token_str(j->srv, e->token, &bytes));
        cJSON_AddItemToObject(o, "bytes", bytes);
        cJSON_AddItemToObject(o, "logprob", ls_srv_lp_num(e->logprob));
        top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int32_t k = 0; k < e->n_top; k++) {
            cJSON *t = cJSON_CreateObject(), *tb;
            cJSON_AddNumberToObject(t, "id", e->top_tok[k]);
            cJSON_AddItemToObject(t, "token", ls_srv_token_str(j->srv, e->top_tok[k], &tb));
            cJSON_AddItemToObject(t, "bytes", tb);
            cJSON_AddItemToObject(t, "logprob", ls_srv_lp_num(e->top_lp[k]));
            cJSON_AddItemToArray(top, t);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static const char *stop_type(const job *j) {
    if (!j->done) return "none";
    if (j->finish == LS_FINISH_LENGTH) return "limit";
    if (j->finish != LS_FINISH_STOP) return "none";
    return j->stop_eos ? "eos" : "word";
}

static void add_seed(cJSON *o, int64_t seed) {
    char sd[32];
    snprintf(sd, sizeof sd, "%lld", (long long)seed);
    cJSON_AddRawToObject(o, "seed", sd);
}

/* The reply; content: the text from `from` on (the whole text for a plain reply). */
static cJSON *native_obj(const job *j, size_t from, int32_t lp_from, int32_t lp_to) {
    const server *s = j->srv;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", j->choice);
    size_t n = j->text && j->text_len > from ? j->text_len - from : 0;
    char *tmp = malloc(n + 1);
    if (tmp) {
        if (n) memcpy(tmp, j->text + from, n);
        tmp[n] = 0;
    }
    cJSON_AddStringToObject(o, "content", tmp ? tmp : "");
    free(tmp);
    cJSON *ids = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = 0; i < j->n_tokens; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->tokens[i]));
    cJSON_AddNumberToObject(o, "id_slot", __atomic_load_n(&j->slot, __ATOMIC_RELAXED));
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "model", s->model_name);
    cJSON_AddNumberToObject(o, "tokens_predicted", j->n_tokens);
    cJSON_AddNumberToObject(o, "tokens_evaluated", j->n_prompt);
    cJSON_AddNumberToObject(o, "tokens_cached", j->n_cached);
    cJSON *g = cJSON_AddObjectToObject(o, "generation_settings");
    cJSON_AddNumberToObject(g, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(g, "n_predict", j->req.max_tokens);
    cJSON_AddStringToObject(g, "model", s->model_name);
    add_seed(g, j->req.seed);
    cJSON_AddNumberToObject(g, "temperature", j->req.temperature);
    cJSON_AddNumberToObject(g, "top_k", j->req.top_k);
    cJSON_AddNumberToObject(g, "top_p", j->req.top_p);
    cJSON_AddNumberToObject(g, "min_p", j->req.min_p);
    cJSON_AddNumberToObject(g, "repeat_penalty", j->req.repeat_penalty);
    cJSON_AddNumberToObject(g, "repeat_last_n", j->req.repeat_last_n);
    cJSON_AddNumberToObject(g, "frequency_penalty", j->req.frequency_penalty);
    cJSON_AddNumberToObject(g, "presence_penalty", j->req.presence_penalty);
    cJSON_AddBoolToObject(g, "ignore_eos", j->req.ignore_eos);
    cJSON_AddNumberToObject(g, "n_probs", j->req.logprobs ? j->req.top_logprobs : 0);
    cJSON_AddBoolToObject(g, "stream", j->req.stream);
    cJSON *st = cJSON_AddArrayToObject(g, "stop");
    for (int32_t i = 0; i < j->req.n_stop; i++) cJSON_AddItemToArray(st, cJSON_CreateString(j->req.stop[i]));
    cJSON_AddStringToObject(o, "prompt", j->req.prompt ? j->req.prompt : "");
    cJSON_AddBoolToObject(o, "truncated", false);
    cJSON_AddStringToObject(o, "stop_type", stop_type(j));
    /* which stop string matched is not reported by the engine: named when there is one */
    cJSON_AddStringToObject(o, "stopping_word",
                            !strcmp(stop_type(j), "word") && j->req.n_stop == 1 ? j->req.stop[0] : "");
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_n", j->n_prompt - j->n_cached);
    cJSON_AddNumberToObject(t, "prompt_ms", j->prompt_ms);
    cJSON_AddNumberToObject(t, "prompt_per_second",
                            j->prompt_ms > 0 ? 1e3 * (j->n_prompt - j->n_cached) / j->prompt_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", j->n_tokens);
    cJSON_AddNumberToObject(t, "predicted_ms", j->gen_ms);
    cJSON_AddNumberToObject(t, "predicted_per_second", j->gen_ms > 0 ? 1e3 * j->n_tokens / j->gen_ms : 0);
    cJSON_AddNumberToObject(t, "draft_n", j->n_drafted);
    cJSON_AddNumberToObject(t, "draft_n_accepted", j->n_accepted);
    if (j->req.logprobs) cJSON_AddItemToObject(o, "completion_probabilities", ls_srv_native_probs(j, lp_from, lp_to));
    cJSON_AddStringToObject(o, "parity", s->parity);
    return o;
}

cJSON *ls_srv_native_response(const job *j) { return native_obj(j, 0, 0, j->n_tokens); }

static char *sse(cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return NULL;
    size_t tl = strlen(t);
    char *ev = malloc(tl + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, t, tl);
        memcpy(ev + 6 + tl, "\n\n", 3);
    }
    free(t);
    return ev;
}

char *ls_srv_native_chunk(const job *j, const char *content, size_t n, int32_t lp_from, int32_t lp_to, bool final) {
    if (final) return sse(native_obj(j, j->text_len, lp_from, lp_to));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", j->choice);
    char *tmp = malloc(n + 1);
    if (tmp) {
        memcpy(tmp, content, n);
        tmp[n] = 0;
    }
    cJSON_AddStringToObject(o, "content", tmp ? tmp : "");
    free(tmp);
    cJSON_AddBoolToObject(o, "stop", false);
    cJSON_AddNumberToObject(o, "id_slot", __atomic_load_n(&j->slot, __ATOMIC_RELAXED));
    cJSON_AddNumberToObject(o, "tokens_predicted", j->n_tokens);
    cJSON_AddNumberToObject(o, "tokens_evaluated", j->n_prompt);
    if (j->req.logprobs && lp_to > lp_from) cJSON_AddItemToObject(o, "completion_probabilities", ls_srv_native_probs(j, lp_from, lp_to));
    return sse(o);
}

/* GET /slots: one entry per parallel place (--parallel): whether a request runs there,
 * its id and its counts so far. */
enum MHD_Result ls_srv_slots(server *s, struct MHD_Connection *c) {
    cJSON *a = cJSON_CreateArray();
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->p->n_parallel; k++) {
        const srv_slot *sl = &s->slots[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", k);
        cJSON_AddNumberToObject(o, "n_ctx", s->n_ctx);
        cJSON_AddBoolToObject(o, "is_processing", sl->busy);
        if (sl->busy) {
            cJSON_AddStringToObject(o, "id_task", sl->task);
            cJSON_AddStringToObject(o, "endpoint", sl->path ? sl->path : "");
            cJSON_AddNumberToObject(o, "n_prompt_tokens", sl->n_prompt);
            cJSON *nt = cJSON_AddObjectToObject(o, "next_token");
            cJSON_AddNumberToObject(nt, "n_decoded", sl->n_decoded);
        } else {
            cJSON_AddNullToObject(o, "id_task");
        }
        cJSON_AddItemToArray(a, o);
    }
    pthread_mutex_unlock(&s->mu);
    return ls_srv_send_json(s, c, 200, a);
}
