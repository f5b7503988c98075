/* openai.c - OpenAI's JSON shapes for the server (see server_impl.h): full responses,
 * stream chunks, logprobs, usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

const char *ls_srv_finish_str(ls_finish f) {
    return f == LS_FINISH_LENGTH ? "length" : f == LS_FINISH_CANCELLED ? "cancelled" : "stop";
}

/* The log-softmax of the raw logits (in double, so no float rounding decides a
 * probability), and the top n by selection over one pass with a small sorted list. */
static cJSON *usage_json(const job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->n_cached);
    return u;
}

/* system_fingerprint: what fixes the bytes of a seeded reply besides the request: the
 * recipe version, the kernel family rows that need parity run, and the model file
 * (its sha256, first 16 hex digits).  Equal fingerprints + equal request = equal bytes. */
void ls_srv_fingerprint(const server *s, char *fp, size_t n) {
    ls_model_info mi = LS_MODEL_INFO_INIT;
    ls_err err;
    if (ls_model_get_info(s->m, &mi, &err)) mi.sha256[0] = 0;
    ls_engine_info ei = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(s->e, &ei);
    const char *fam = s->probe.verdict != LS_VERDICT_UNPROBED && s->probe.kernels_after[0] ? s->probe.kernels_after
                                                                                            : ei.kernels;
    snprintf(fp, n, "lockstep-r%d-%s-%.16s", LOCKSTEP_RECIPE_VERSION, fam, mi.sha256);
}

static void add_replay(cJSON *o, const job *j) {
    char fp[128];
    ls_srv_fingerprint(j->srv, fp, sizeof fp);
    cJSON_AddStringToObject(o, "system_fingerprint", fp);
    char sd[32]; /* extension: the seed used, as an integer literal (cJSON would print 16 digits as 1e+15) */
    snprintf(sd, sizeof sd, "%lld", (long long)j->req.seed);
    cJSON_AddRawToObject(o, "seed", sd);
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
cJSON *ls_srv_token_str(const server *s, int32_t id, cJSON **bytes) {
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

/* A log-probability exactly: the float's value in 17 digits (cJSON's own printing keeps
 * 15 when they come within a tolerance, so a client could not compare bits). */
cJSON *ls_srv_lp_num(float x) {
    if (!isfinite(x)) return x < 0 ? cJSON_CreateRaw("-1e9999") : cJSON_CreateNull(); /* -inf parses as -inf */
    char b[40];
    snprintf(b, sizeof b, "%.17g", (double)x);
    return cJSON_CreateRaw(b);
}

static cJSON *logprobs_json(const job *j, int32_t from, int32_t to) {
    const server *s = j->srv;
    if (j->req.chat) {
        cJSON *lp = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(lp, "content");
        for (int32_t i = from; i < to; i++) {
            const ls_tok_lp *e = &j->lps[i];
            cJSON *o = cJSON_CreateObject(), *bytes;
            cJSON_AddItemToObject(o, "token", ls_srv_token_str(s, e->token, &bytes));
            cJSON_AddItemToObject(o, "logprob", ls_srv_lp_num(e->logprob));
            cJSON_AddItemToObject(o, "bytes", bytes);
            cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
            for (int32_t k = 0; k < e->n_top; k++) {
                cJSON *t = cJSON_CreateObject(), *tb;
                cJSON_AddItemToObject(t, "token", ls_srv_token_str(s, e->top_tok[k], &tb));
                cJSON_AddItemToObject(t, "logprob", ls_srv_lp_num(e->top_lp[k]));
                cJSON_AddItemToObject(t, "bytes", tb);
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(content, o);
        }
        return lp;
    }
    cJSON *lp = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(lp, "tokens"),
          *tlp = cJSON_AddArrayToObject(lp, "token_logprobs"), *top = cJSON_AddArrayToObject(lp, "top_logprobs");
    if (j->plps && from == 0) /* echo: the prompt's tokens first; the first has no log-probability */
        for (int32_t i = 0; i < j->n_prompt; i++) {
            const ls_tok_lp *e = &j->plps[i];
            cJSON_AddItemToArray(toks, ls_srv_token_str(s, j->prompt[i], NULL));
            if (i == 0) {
                cJSON_AddItemToArray(tlp, cJSON_CreateNull());
                cJSON_AddItemToArray(top, cJSON_CreateNull());
                continue;
            }
            cJSON_AddItemToArray(tlp, ls_srv_lp_num(e->logprob));
            cJSON *t = cJSON_CreateObject();
            for (int32_t k = 0; k < e->n_top; k++) {
                cJSON *name = ls_srv_token_str(s, e->top_tok[k], NULL);
                cJSON_AddItemToObject(t, name->valuestring, ls_srv_lp_num(e->top_lp[k]));
                cJSON_Delete(name);
            }
            cJSON_AddItemToArray(top, t);
        }
    for (int32_t i = from; i < to; i++) {
        const ls_tok_lp *e = &j->lps[i];
        cJSON_AddItemToArray(toks, ls_srv_token_str(s, e->token, NULL));
        cJSON_AddItemToArray(tlp, ls_srv_lp_num(e->logprob));
        cJSON *t = cJSON_CreateObject();
        for (int32_t k = 0; k < e->n_top; k++) {
            cJSON *name = ls_srv_token_str(s, e->top_tok[k], NULL);
            cJSON_AddItemToObject(t, name->valuestring, ls_srv_lp_num(e->top_lp[k]));
            cJSON_Delete(name);
        }
        cJSON_AddItemToArray(top, t);
    }
    return lp;
}

/* message.reasoning_content: the think block's text (sp from ls_srv_think_split). */
static void add_reasoning(cJSON *msg, const job *j, const ls_srv_split *sp) {
    size_t n = sp->r1 - sp->r0;
    char *r = malloc(n + 1);
    if (!r) return;
    if (n) memcpy(r, j->text + sp->r0, n);
    r[n] = 0;
    cJSON_AddStringToObject(msg, "reasoning_content", r);
    free(r);
}

cJSON *ls_srv_response(const job *j) {
    if (j->api) return j->api->response(j);
    if (j->native) return ls_srv_native_response(j);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->req.chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    add_replay(o, j);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    bool called = false;
    ls_srv_split sp; /* a think block split out (--reasoning-format deepseek) */
    ls_srv_think_split(j->text, j->text_len, true, j->req.chat && j->req.reasoning, &sp);
    const char *body = j->text ? j->text + sp.c0 : ""; /* the content: text[c0, text_len) */
    if (j->req.chat && j->req.n_tools > 0) { /* tools offered: calls parsed out of the text */
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        char *content = NULL;
        cJSON *calls = NULL;
        ls_srv_tools_parse(body, sp.c1 - sp.c0, (ls_srv_tool_format)j->req.tool_format, j->id, &content, &calls);
        if (content) cJSON_AddStringToObject(msg, "content", content);
        else cJSON_AddNullToObject(msg, "content");
        if (sp.think) add_reasoning(msg, j, &sp);
        if (calls) cJSON_AddItemToObject(msg, "tool_calls", calls);
        called = calls != NULL;
        free(content);
    } else if (j->req.chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", body);
        if (sp.think) add_reasoning(msg, j, &sp);
    } else if (j->req.echo) { /* the prompt as sent, then the completion */
        size_t a = strlen(j->req.prompt), b = j->text ? j->text_len : 0;
        char *t = malloc(a + b + 1);
        if (t) {
            memcpy(t, j->req.prompt, a);
            if (b) memcpy(t + a, j->text, b);
            t[a + b] = 0;
        }
        cJSON_AddStringToObject(c, "text", t ? t : "");
        free(t);
    } else {
        cJSON_AddStringToObject(c, "text", j->text ? j->text : "");
    }
    if (j->req.logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(j, 0, j->n_tokens));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", called ? "tool_calls" : ls_srv_finish_str(j->finish));
    cJSON *ids = cJSON_AddArrayToObject(c, "token_ids"); /* extension: the generated token ids */
    for (int32_t i = 0; i < j->n_tokens; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->tokens[i]));
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    add_extras(o, j);
    return o;
}

static char *chunk(const job *j, const char *field, const char *content, size_t n, int32_t lp_from, int32_t lp_to,
                   bool role, const char *finish, bool usage_only);

char *ls_srv_chunk(const job *j, const char *content, size_t n, int32_t lp_from, int32_t lp_to, bool role,
                   const char *finish, bool usage_only) {
    return chunk(j, "content", content, n, lp_from, lp_to, role, finish, usage_only);
}

char *ls_srv_chunk_reasoning(const job *j, const char *text, size_t n) {
    return chunk(j, "reasoning_content", text, n, 0, 0, false, NULL, false);
}

static char *chunk(const job *j, const char *field, const char *content, size_t n, int32_t lp_from, int32_t lp_to,
                   bool role, const char *finish, bool usage_only) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->req.chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    add_replay(o, j);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (!usage_only) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", j->choice);
        char *tmp = malloc(n + 1);
        if (tmp) {
            memcpy(tmp, content, n);
            tmp[n] = 0;
        }
        if (j->req.chat) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (role) cJSON_AddStringToObject(d, "role", "assistant");
            if (n || (!role && !finish)) cJSON_AddStringToObject(d, field, tmp ? tmp : "");
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

/* b then a, both malloc'd or NULL (freed), as one string. */
static char *cat_front(char *b, char *a) {
    ls_srv_cat(&b, a);
    return b;
}

void ls_srv_cat(char **a, char *b) {
    if (!b) return;
    if (!*a) {
        *a = b;
        return;
    }
    size_t la = strlen(*a), lb = strlen(b);
    char *t = realloc(*a, la + lb + 1);
    if (t) {
        memcpy(t + la, b, lb + 1);
        *a = t;
    }
    free(b);
}

char *ls_srv_sse_event(const char *name, cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return NULL;
    size_t nl = strlen(name), tl = strlen(t);
    char *ev = malloc(nl + tl + 24);
    if (ev) snprintf(ev, nl + tl + 24, "event: %s\ndata: %s\n\n", name, t);
    free(t);
    return ev;
}

/* With tools, the stream's reply in one delta once the text is complete (it must be
 * parsed whole): content and/or tool_calls (each with its index), then the finish chunk
 * (finish_reason tool_calls when there are calls). */
char *ls_srv_tools_chunks(const job *j) {
    char *content = NULL;
    cJSON *calls = NULL;
    ls_srv_split sp;
    ls_srv_think_split(j->text, j->text_len, true, j->req.reasoning, &sp);
    ls_srv_tools_parse(j->text ? j->text + sp.c0 : "", sp.c1 - sp.c0, (ls_srv_tool_format)j->req.tool_format, j->id,
                       &content, &calls);
    char *a = content && content[0] ? ls_srv_chunk(j, content, strlen(content), 0, 0, false, NULL, false) : NULL;
    if (sp.r1 > sp.r0) /* the reasoning first */
        a = cat_front(ls_srv_chunk_reasoning(j, j->text + sp.r0, sp.r1 - sp.r0), a);
    char *b = NULL;
    if (calls) {
        char *t = ls_srv_chunk(j, "", 0, 0, 0, true, NULL, false); /* a delta to fill: role chunk shape */
        cJSON *o = t && strlen(t) > 6 ? cJSON_Parse(t + 6) : NULL;
        free(t);
        cJSON *d = o ? cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0),
                                                        "delta")
                     : NULL;
        if (d) {
            cJSON_DeleteItemFromObject(d, "role");
            int k = 0;
            cJSON *c;
            cJSON_ArrayForEach(c, calls) cJSON_AddItemToObject(c, "index", cJSON_CreateNumber(k++));
            cJSON_AddItemToObject(d, "tool_calls", calls);
            calls = NULL;
            char *p = cJSON_PrintUnformatted(o);
            size_t pl = p ? strlen(p) : 0;
            if (p && (b = malloc(pl + 9))) {
                memcpy(b, "data: ", 6);
                memcpy(b + 6, p, pl);
                memcpy(b + 6 + pl, "\n\n", 3);
            }
            free(p);
        }
        cJSON_Delete(o);
        cJSON_Delete(calls);
        char *f = ls_srv_chunk(j, "", 0, 0, 0, false, "tool_calls", false);
        size_t la = a ? strlen(a) : 0, lb = b ? strlen(b) : 0, lf = f ? strlen(f) : 0;
        char *all = malloc(la + lb + lf + 1);
        if (all) {
            memcpy(all, a ? a : "", la);
            memcpy(all + la, b ? b : "", lb);
            memcpy(all + la + lb, f ? f : "", lf + 1);
        }
        free(a);
        free(b);
        free(f);
        free(content);
        return all;
    }
    char *f = ls_srv_chunk(j, "", 0, 0, 0, false, ls_srv_finish_str(j->finish), false);
    size_t la = a ? strlen(a) : 0, lf = f ? strlen(f) : 0;
    char *all = malloc(la + lf + 1);
    if (all) {
        memcpy(all, a ? a : "", la);
        memcpy(all + la, f ? f : "", lf + 1);
    }
    free(a);
    free(f);
    free(content);
    return all;
}

/* ---- llama-server's small endpoints ------------------------------------------------ */
/* GET /props: the server's settings and the defaults of a request's parameters. */
enum MHD_Result ls_srv_props(server *s, struct MHD_Connection *c) {
    ls_model_info mi = LS_MODEL_INFO_INIT;
    ls_err err;
    if (ls_model_get_info(s->m, &mi, &err)) return ls_srv_send_error(s, c, 500, "server_error", err.msg, NULL);
    char fp[128];
    ls_srv_fingerprint(s, fp, sizeof fp);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_path", s->p->model_path);
    cJSON_AddStringToObject(o, "model", s->model_name);
    cJSON_AddStringToObject(o, "model_sha256", mi.sha256);
    cJSON_AddStringToObject(o, "chat_template", mi.chat_template); /* the family in use; "" when none */
    cJSON_AddNumberToObject(o, "total_slots", s->p->n_parallel);
    cJSON_AddNumberToObject(o, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(o, "n_vocab", s->n_vocab);
    cJSON_AddStringToObject(o, "system_fingerprint", fp);
    cJSON_AddStringToObject(o, "build_info", "lockstep " LOCKSTEP_VERSION);
    cJSON_AddStringToObject(o, "parity", s->parity);
    cJSON *d = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(d, "n_ctx", s->n_ctx);
    cJSON *pr = cJSON_AddObjectToObject(d, "params");
    cJSON_AddNumberToObject(pr, "temperature", 1);
    cJSON_AddNumberToObject(pr, "top_k", 0);
    cJSON_AddNumberToObject(pr, "top_p", 1);
    cJSON_AddNumberToObject(pr, "min_p", 0);
    cJSON_AddNumberToObject(pr, "repeat_penalty", 1);
    cJSON_AddNumberToObject(pr, "repeat_last_n", 64);
    cJSON_AddNumberToObject(pr, "frequency_penalty", 0);
    cJSON_AddNumberToObject(pr, "presence_penalty", 0);
    cJSON_AddNumberToObject(pr, "max_tokens", s->p->max_tokens);
    cJSON_AddStringToObject(pr, "seed", "random");
    return ls_srv_send_json(s, c, 200, o);
}

static ls_status render(void *ud, const ls_chat_msg *msgs, size_t n, const ls_chat_opts *opts, char **out,
                     ls_err *err) {
    return ls_model_apply_chat_opts(ud, msgs, n, true, opts, out, err);
}

/* POST /apply-template {"messages": [...]}: {"prompt": the text the chat endpoint would
 * tokenize}, the messages checked as there. */
enum MHD_Result ls_srv_apply_template(server *s, struct MHD_Connection *c, const char *body, size_t len) {
    ls_srv_limits lim = {.max_messages = s->p->max_messages, .max_tokens = s->p->max_tokens, .n_vocab = s->n_vocab,
                         .tool_format = s->tool_format, .default_system = s->default_system,
                         .reasoning = s->p->reasoning_format};
    ls_srv_req r;
    ls_err err;
    if (ls_srv_parse(body ? body : "", len, true, s->has_chat ? render : NULL, s->m, &lim, &r, &err))
        return ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", r.prompt);
    ls_srv_req_free(&r);
    return ls_srv_send_json(s, c, 200, o);
}
