/* embeddings.c - POST /v1/embeddings (OpenAI's shape).
 *
 * The vector of an input is computed from the model's own forward: each position's
 * final hidden state after the output norm (ls_request.on_hidden: what the LM head
 * reads), averaged over every position of the input (a sequential double sum in
 * position order, divided by the count), then L2-normalized (double, then rounded to
 * float once).  That is llama.cpp's pooling_type mean with llama-server's default
 * normalization (embd_normalize 2).  Each input runs as its own engine request with a
 * prefix cache that is not read, so the vector is a pure function of the input's tokens:
 * the same bytes alone or amid other traffic (the engine's parity contract). */
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

#define LS_SRV_MAX_EMBED_INPUTS 64

typedef struct emb_batch emb_batch;
typedef struct {
    emb_batch *b;
    int32_t *toks;
    int32_t n;
    float *hid; /* n x n_embd */
    uint64_t engine_id;
    bool submitted, done;
    ls_finish finish;
} emb_item;

struct emb_batch {
    server *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t n_embd;
};

static void emb_hidden(void *ud, int32_t pos, const float *h) {
    emb_item *it = ud;
    if (pos >= 0 && pos < it->n) memcpy(it->hid + (size_t)pos * (size_t)it->b->n_embd, h, (size_t)it->b->n_embd * sizeof *h);
}

static void emb_event(void *ud, const ls_event *ev) {
    emb_item *it = ud;
    if (!ev->done) return;
    server *s = it->b->s;
    pthread_mutex_lock(&s->mu);
    s->live--;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&it->b->mu);
    it->finish = ev->finish;
    it->done = true;
    pthread_cond_broadcast(&it->b->cv);
    pthread_mutex_unlock(&it->b->mu);
}

/* tokens of one input: a string (tokenized as the completions endpoints do: special
 * tokens added as the file says, control-token text parsed) or a list of token ids. */
static const char *take_input(server *s, const cJSON *v, int idx, emb_item *it, char *msg, size_t cap) {
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring), n = 0;
        ls_err err;
        if (!(it->toks = malloc((len + 8) * sizeof *it->toks))) return "out of memory";
        if (ls_model_tokenize(s->m, v->valuestring, len, true, true, it->toks, len + 8, &n, &err)) {
            snprintf(msg, cap, "'input[%d]': %s", idx, err.msg);
            return msg;
        }
        it->n = (int32_t)n;
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v), k = 0;
        if (!(it->toks = malloc(((size_t)n + 1) * sizeof *it->toks))) return "out of memory";
        const cJSON *t;
        cJSON_ArrayForEach(t, v) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= s->n_vocab) {
                snprintf(msg, cap, "'input[%d][%d]' is not a token id of this model (0 .. %d)", idx, k, s->n_vocab - 1);
                return msg;
            }
            it->toks[k++] = (int32_t)t->valuedouble;
        }
        it->n = n;
    } else {
        snprintf(msg, cap, "'input[%d]' must be a string or a list of token ids", idx);
        return msg;
    }
    if (it->n == 0) {
        snprintf(msg, cap, "'input[%d]' is empty (no tokens)", idx);
        return msg;
    }
    if (it->n >= s->n_ctx) {
        snprintf(msg, cap, "'input[%d]' has %d tokens; the context holds %d (at most %d per input)", idx, it->n,
                 s->n_ctx, s->n_ctx - 1);
        return msg;
    }
    return NULL;
}

/* The pooled, normalized vector of one finished input, into out (n_embd floats). */
static void pool(const emb_item *it, int32_t E, float *out) {
    double *mean = calloc((size_t)E, sizeof *mean);
    if (!mean) return;
    double ss = 0;
    for (int32_t d = 0; d < E; d++) {
        double acc = 0;
        for (int32_t p = 0; p < it->n; p++) acc += (double)it->hid[(size_t)p * (size_t)E + (size_t)d];
        mean[d] = acc / (double)it->n;
        ss += mean[d] * mean[d];
    }
    double norm = sqrt(ss);
    for (int32_t d = 0; d < E; d++) out[d] = norm > 0 ? (float)(mean[d] / norm) : 0.0f;
    free(mean);
}

static cJSON *vec_json(const float *v, int32_t E, bool b64) {
    if (b64) { /* the float32 values' bytes, little-endian, as OpenAI's base64 format */
        size_t nb = (size_t)E * sizeof(float);
        unsigned char *o = malloc(4 * ((nb + 2) / 3) + 1);
        if (!o) return NULL;
        EVP_EncodeBlock(o, (const unsigned char *)v, (int)nb);
        cJSON *s = cJSON_CreateString((const char *)o);
        free(o);
        return s;
    }
    cJSON *a = cJSON_CreateArray();
    for (int32_t d = 0; d < E; d++) { /* 9 significant digits: every float exactly */
        char b[32];
        snprintf(b, sizeof b, "%.9g", (double)v[d]);
        cJSON_AddItemToArray(a, cJSON_CreateRaw(b));
    }
    return a;
}

enum MHD_Result ls_srv_embeddings(server *s, struct MHD_Connection *c, conn *cn) {
    static const char *const known[] = {"input", "model", "encoding_format", "dimensions", "user", NULL};
    char msg[sizeof(((ls_err *)0)->msg) + 64];
    const char *bad = NULL;
    unsigned status = 400;
    ls_err err;
    cJSON *j = ls_srv_json_parse(cn->body, cn->len, &err);
    if (!j) return ls_srv_send_error(s, c, err.code == LS_E_NOMEM ? 500 : 400, "invalid_request_error", err.msg, NULL);
    ls_model_info mi = LS_MODEL_INFO_INIT;
    if (ls_model_get_info(s->m, &mi, &err)) {
        cJSON_Delete(j);
        return ls_srv_send_error(s, c, 500, "server_error", err.msg, NULL);
    }
    const int32_t E = (int32_t)mi.n_embd;
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
        bool ok = cJSON_IsNull(v);
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(v->string, known[i]);
        if (!ok) {
            snprintf(msg, sizeof msg, "'%.60s' is not supported by /v1/embeddings (it is refused rather than ignored)",
                     v->string);
            bad = msg;
            break;
        }
    }
    bool b64 = false;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "encoding_format"),
                *dim = cJSON_GetObjectItemCaseSensitive(j, "dimensions"),
                *model = cJSON_GetObjectItemCaseSensitive(j, "model"),
                *input = cJSON_GetObjectItemCaseSensitive(j, "input");
    if (!bad && fmt && !cJSON_IsNull(fmt)) {
        if (cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64")) b64 = true;
        else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "float")) bad = "'encoding_format' must be \"float\" or \"base64\"";
    }
    if (!bad && dim && !cJSON_IsNull(dim) && (!cJSON_IsNumber(dim) || dim->valuedouble != E)) {
        snprintf(msg, sizeof msg, "'dimensions' must be this model's %d (the vectors are not truncated or projected)", E);
        bad = msg;
    }
    if (!bad && model && !cJSON_IsNull(model) && !cJSON_IsString(model)) bad = "'model' must be a string";
    if (!bad && !input) bad = "'input' is required";
    /* the inputs: a string, a list of token ids, or a list of either */
    int n_in = 0;
    bool single = false;
    if (!bad) {
        if (cJSON_IsString(input)) {
            single = true;
            n_in = 1;
        } else if (cJSON_IsArray(input) && cJSON_GetArraySize(input) > 0) {
            const cJSON *f = cJSON_GetArrayItem(input, 0);
            single = cJSON_IsNumber(f); /* a list of token ids is one input */
            n_in = single ? 1 : cJSON_GetArraySize(input);
        } else {
            bad = "'input' must be a string, a list of strings, a list of token ids or a list of such lists (non-empty)";
        }
        if (!bad && n_in > LS_SRV_MAX_EMBED_INPUTS) {
            snprintf(msg, sizeof msg, "'input' has %d entries; the limit is %d", n_in, LS_SRV_MAX_EMBED_INPUTS);
            bad = msg;
        }
    }
    emb_batch b = {.s = s, .n_embd = E};
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    emb_item *its = bad ? NULL : calloc((size_t)n_in, sizeof *its);
    if (!bad && !its) {
        bad = "out of memory";
        status = 500;
    }
    int64_t total = 0;
    for (int i = 0; !bad && i < n_in; i++) {
        its[i].b = &b;
        const cJSON *x = single ? input : cJSON_GetArrayItem(input, i);
        if ((bad = take_input(s, x, i, &its[i], msg, sizeof msg))) break;
        if (!(its[i].hid = malloc((size_t)its[i].n * (size_t)E * sizeof(float)))) {
            bad = "out of memory";
            status = 500;
        }
        total += its[i].n;
    }
    if (!bad) {
        pthread_mutex_lock(&s->mu);
        bool full = s->live + n_in > s->p->n_parallel + s->p->max_queue;
        pthread_mutex_unlock(&s->mu);
        if (full) {
            bad = "the request queue is full; retry later";
            status = 503;
        }
    }
    bool gone = false;
    if (!bad && ls_srv_client_gone(c)) { /* left while its inputs were tokenized: never submitted */
        gone = true;
        bad = "client gone";
    }
    for (int i = 0; !bad && i < n_in; i++) {
        ls_request q = LS_REQUEST_INIT;
        q.prompt = its[i].toks;
        q.n_prompt = its[i].n;
        q.max_tokens = 1; /* the prompt's positions are what is read; the one sampled token is dropped */
        q.sampling.temperature = 0;
        q.on_event = emb_event;
        q.on_hidden = emb_hidden;
        q.ud = &its[i];
        pthread_mutex_lock(&s->mu);
        ls_status st = s->shutting_down ? LS_E_RANGE : ls_engine_submit(s->e, &q, &its[i].engine_id, &err);
        if (s->shutting_down) /* the grace period is over: nothing new reaches the engine */
            snprintf(err.msg, sizeof err.msg, "the server shut down before this request could start");
        if (!st) {
            s->live++;
            s->ct.prompt_tokens += (uint64_t)its[i].n;
            pthread_cond_signal(&s->work);
        }
        pthread_mutex_unlock(&s->mu);
        if (st) {
            snprintf(msg, sizeof msg, "'input[%d]': %s", i, err.msg);
            bad = msg;
            status = st == LS_E_NOMEM ? 500 : st == LS_E_RANGE && strstr(err.msg, "shut down") ? 503 : 400;
            for (int k = 0; k < i; k++) ls_engine_cancel(s->e, its[k].engine_id);
            pthread_mutex_lock(&s->mu);
            pthread_cond_signal(&s->work);
            pthread_mutex_unlock(&s->mu);
            break;
        }
        its[i].submitted = true;
    }
    /* every submitted input's done event comes (also when cancelled): wait for them all;
     * a client that leaves meanwhile has them cancelled */
    bool failed = false, cut = false;
    pthread_mutex_lock(&b.mu);
    for (int i = 0; its && i < n_in; i++) {
        while (its[i].submitted && !its[i].done) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&b.cv, &b.mu, &ts);
            if (!its[i].done && !gone && ls_srv_client_gone(c)) {
                gone = true;
                for (int k = 0; k < n_in; k++)
                    if (its[k].submitted) ls_engine_cancel(s->e, its[k].engine_id);
                pthread_mutex_lock(&s->mu);
                pthread_cond_signal(&s->work);
                pthread_mutex_unlock(&s->mu);
            }
        }
        cut = cut || (its[i].submitted && its[i].finish == LS_FINISH_CANCELLED);
        failed = failed || (its[i].submitted && its[i].finish != LS_FINISH_STOP && its[i].finish != LS_FINISH_LENGTH &&
                            its[i].finish != LS_FINISH_CANCELLED);
    }
    pthread_mutex_unlock(&b.mu);
    cJSON *o = NULL;
    if (gone) {
        bad = "client gone";
        ls_srv_count_cancel(s, LS_CANCEL_CLIENT);
        sock *k = ls_srv_sock(c);
        if (k) k->note = "cancelled (client gone)";
    } else if (!bad && cut) { /* cancelled only at the end of the shutdown grace period */
        bad = "the server shut down before this request finished; retry it on another replica";
        status = 503;
        sock *k = ls_srv_sock(c);
        if (k) k->note = "cancelled (shutdown)";
    } else if (!bad && failed) {
        bad = "the server ran out of memory while computing this request";
        status = 500;
    }
    if (!bad) {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *data = cJSON_AddArrayToObject(o, "data");
        float *vec = malloc((size_t)E * sizeof *vec);
        for (int i = 0; vec && i < n_in; i++) {
            pool(&its[i], E, vec);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "object", "embedding");
            cJSON_AddNumberToObject(e, "index", i);
            cJSON_AddItemToObject(e, "embedding", vec_json(vec, E, b64));
            cJSON_AddItemToArray(data, e);
        }
        free(vec);
        cJSON_AddStringToObject(o, "model", s->model_name);
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)total);
        cJSON_AddNumberToObject(u, "total_tokens", (double)total);
        sock *k = ls_srv_sock(c);
        if (k) k->n_prompt = (int32_t)total;
    }
    for (int i = 0; its && i < n_in; i++) {
        free(its[i].toks);
        free(its[i].hid);
    }
    free(its);
    pthread_mutex_destroy(&b.mu);
    pthread_cond_destroy(&b.cv);
    cJSON_Delete(j);
    if (gone) return MHD_NO; /* nobody to answer: close the connection */
    if (bad) {
        bool shut = status == 503 && strstr(bad, "shut down");
        if (shut) ls_srv_count_cancel(s, LS_CANCEL_SHUTDOWN);
        return ls_srv_send_error(s, c, status,
                                 shut ? "server_shutdown" : status == 503 ? "server_busy"
                                                        : status == 500   ? "server_error"
                                                                          : "invalid_request_error",
                                 bad, status == 503 ? "1" : NULL);
    }
    return ls_srv_send_json(s, c, 200, o);
}
