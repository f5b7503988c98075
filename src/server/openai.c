/* openai.c - OpenAI's JSON shapes for the server (see server_impl.h): full responses,
 * stream chunks, logprobs, usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

const char *ls_srv_finish_str(ls_finish f) { return f == LS_FINISH_LENGTH ? "length" : "stop"; }

/* The log-softmax of the raw logits (in double, so no float rounding decides a
 * probability), and the top n by selection over one pass with a small sorted list. */
void ls_srv_logprobs(const float *lg, int32_t V, int32_t token, int32_t n_top, ls_tok_lp *e) {
    double mx = lg[0], sum = 0;
    for (int32_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    double lz = mx + log(sum);
    e->token = token;
    e->logprob = (float)(lg[token] - lz);
    if (n_top > LS_SRV_TOP_MAX) n_top = LS_SRV_TOP_MAX;
    e->n_top = 0;
    for (int32_t i = 0; i < V && n_top > 0; i++) { /* keep the best n_top, higher logit first, lower id on ties */
        int32_t k = e->n_top;
        if (k == n_top && !(lg[i] > lg[e->top_tok[k - 1]])) continue;
        if (k < n_top) e->n_top++;
        else k--;
        while (k > 0 && lg[i] > lg[e->top_tok[k - 1]]) {
            e->top_tok[k] = e->top_tok[k - 1];
            k--;
        }
        e->top_tok[k] = i;
    }
    for (int32_t k = 0; k < e->n_top; k++) e->top_lp[k] = (float)(lg[e->top_tok[k]] - lz);
}

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
    size_t n = ls_model_token_bytes(s->m, id, true, (char *)buf, sizeof buf);
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
            const ls_tok_lp *e = &j->lps[i];
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
        const ls_tok_lp *e = &j->lps[i];
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

cJSON *ls_srv_response(const job *j) {
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
    cJSON_AddStringToObject(c, "finish_reason", ls_srv_finish_str(j->finish));
    cJSON *ids = cJSON_AddArrayToObject(c, "token_ids"); /* extension: the generated token ids */
    for (int32_t i = 0; i < j->n_tokens; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->tokens[i]));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    add_extras(o, j);
    return o;
}

char *ls_srv_chunk(const job *j, const char *content, size_t n, int32_t lp_from, int32_t lp_to, bool role,
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
        char *tmp = malloc(n + 1);
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
    char *ev = malloc(tl + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, t, tl);
        memcpy(ev + 6 + tl, "\n\n", 3);
    }
    free(t);
    return ev;
}
