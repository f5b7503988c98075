/* ctx.c - ls_ctx: one sequence over a contiguous run of KV blocks (identity block
 * table), for single-stream generation and the probe.  It runs the same
 * ls_fwd_run as the batched engine. */
#include "model/model_impl.h"
#include "util/alloc.h"

#include <stdlib.h>

struct ls_ctx {
    const ls_model *m;
    ls_fwd *fwd;
    ls_kv_store *kv;
    int32_t n_ctx, n_batch;
    int32_t *table;      /* identity block table */
    int32_t *pos, *seq, *logit_row; /* (n_batch) */
};

ls_ctx *ls_ctx_create(const ls_model *m, ls_ctx_params p, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    ls_ctx *c = ls_calloc(1, sizeof *c);
    if (!c) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    c->m = m;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0) {
        ls_err_set(err, LS_E_INVALID, "negative context, batch or thread count");
        goto fail;
    }
    c->n_ctx = p.n_ctx ? p.n_ctx : (int32_t)(hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if ((uint32_t)c->n_ctx > hp->n_ctx_train) {
        ls_err_set(err, LS_E_INVALID, "context size %d exceeds the model's trained context %u", c->n_ctx,
                   hp->n_ctx_train);
        goto fail;
    }
    c->n_batch = p.n_batch ? p.n_batch : 512;
    ls_fwd_params fp = {.n_rows = c->n_batch, .n_ctx = c->n_ctx, .n_threads = p.n_threads, .isa = p.isa,
                        .layers = p.layers, .n_layers = p.n_layers, .pool = p.pool};
    c->fwd = ls_fwd_create(m, fp, err);
    if (!c->fwd) goto fail;
    int32_t nb = (c->n_ctx + LS_KV_BLOCK - 1) / LS_KV_BLOCK;
    c->kv = ls_kv_store_create(m, nb, err);
    if (!c->kv) goto fail;
    c->table = ls_malloc((size_t)nb * sizeof *c->table);
    c->pos = ls_malloc((size_t)c->n_batch * sizeof *c->pos);
    c->seq = ls_calloc((size_t)c->n_batch, sizeof *c->seq);
    c->logit_row = ls_malloc((size_t)c->n_batch * sizeof *c->logit_row);
    if (!c->table || !c->pos || !c->seq || !c->logit_row) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < nb; i++) c->table[i] = i;
    return c;
fail:
    ls_ctx_free(c);
    return NULL;
}

size_t ls_ctx_params_sizeof(void) { return sizeof(ls_ctx_params); }

void ls_ctx_free(ls_ctx *c) {
    if (!c) return;
    ls_fwd_free(c->fwd);
    ls_kv_store_free(c->kv);
    free(c->table);
    free(c->pos);
    free(c->seq);
    free(c->logit_row);
    free(c);
}

int32_t ls_ctx_n_ctx(const ls_ctx *c) { return c->n_ctx; }
ls_isa ls_ctx_isa(const ls_ctx *c) { return ls_fwd_isa(c->fwd); }
const ls_model *ls_ctx_model(const ls_ctx *c) { return c->m; }
const ls_tokenizer *ls_ctx_tokenizer(const ls_ctx *c) { return c->m->tok; }
int ls_ctx_n_threads(const ls_ctx *c) { return ls_fwd_n_threads(c->fwd); }

static ls_status ctx_eval(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *logits,
                         bool all_logits, float *hidden, ls_err *err);

ls_status ls_ctx_eval(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *logits,
                      bool all_logits, ls_err *err) {
    return ctx_eval(c, tokens, n, pos0, logits, all_logits, NULL, err);
}

ls_status ls_ctx_eval_hidden(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *hidden,
                             ls_err *err) {
    return ctx_eval(c, tokens, n, pos0, NULL, false, hidden, err);
}

static ls_status ctx_eval(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *logits,
                         bool all_logits, float *hidden, ls_err *err) {
    const ls_hparams *hp = &c->m->hp;
    if (n <= 0) return ls_err_set(err, LS_E_INVALID, "no tokens to evaluate");
    if (pos0 < 0 || (int64_t)pos0 + n > c->n_ctx)
        return ls_err_set(err, LS_E_RANGE, "positions %d..%lld exceed the context size %d", pos0,
                          (long long)pos0 + n - 1, c->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "token id %d is outside the vocabulary (%u)", tokens[i],
                              hp->n_vocab);
    const int32_t *const tables[1] = {c->table};
    for (int32_t done = 0; done < n;) {
        int32_t chunk = n - done < c->n_batch ? n - done : c->n_batch;
        float *out = NULL;
        for (int32_t r = 0; r < chunk; r++) {
            c->pos[r] = pos0 + done + r;
            c->logit_row[r] = -1;
        }
        if (logits) {
            if (all_logits) {
                out = logits + (size_t)done * hp->n_vocab;
                for (int32_t r = 0; r < chunk; r++) c->logit_row[r] = r;
            } else if (done + chunk == n) {
                out = logits;
                c->logit_row[chunk - 1] = 0;
            }
        }
        ls_batch b = {chunk, tokens + done, c->pos, c->seq, tables, c->logit_row, NULL, NULL,
                      hidden ? hidden + (size_t)done * hp->n_embd : NULL};
        ls_fwd_run(c->fwd, c->kv, &b, out);
        done += chunk;
    }
    return LS_OK;
}
