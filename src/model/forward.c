/* forward.c - the Llama forward pass over a batch of rows of one sequence.
 *
 * Every buffer is carved from one arena at ls_ctx_create; nothing allocates per
 * token.  Each step is a canonical kernel whose per-row bits do not depend on how
 * many rows share the call, so prefilling in one chunk, in several, or token by
 * token gives the same logits (see docs/numerics.md). */
#include "model/model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ls_ctx {
    const ls_model *m;
    ls_kctx kc;
    ls_pool *pool;
    ls_rope *rope;
    int32_t n_ctx, n_batch;
    size_t kv_dim;       /* n_head_kv * head_dim */
    float *k_cache;      /* (n_layer, n_ctx, kv_dim) */
    float *v_cache;      /* (n_layer, n_ctx, kv_dim) */
    /* activations for up to n_batch rows */
    float *x;            /* (n_batch, n_embd) residual stream */
    float *xn;           /* (n_batch, n_embd) normed */
    float *q;            /* (n_batch, n_head*head_dim) */
    float *k;            /* (n_batch, kv_dim) */
    float *v;            /* (n_batch, kv_dim) */
    float *att;          /* (n_batch, n_head*head_dim) */
    float *tmp;          /* (n_batch, n_embd) projection output */
    float *gate;         /* (n_batch, n_ff) */
    float *up;           /* (n_batch, n_ff) */
    int32_t *pos;        /* (n_batch) */
    const float **kp;    /* (n_batch) per-row cache pointers for ls_attention */
    const float **vp;    /* (n_batch) */
    float *att_scratch;  /* (n_threads, att_scratch_per_thread) */
    size_t att_scratch_per_thread;
    void *arena;
};

static size_t align_up(size_t n) { return (n + 63) & ~(size_t)63; }

ls_ctx *ls_ctx_create(const ls_model *m, ls_ctx_params p, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    ls_ctx *c = calloc(1, sizeof *c);
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
    int n_threads = p.n_threads ? p.n_threads : 1;
    if (n_threads > 256) {
        ls_err_set(err, LS_E_INVALID, "thread count %d is too large (max 256)", n_threads);
        goto fail;
    }
    if (p.isa < 0) {
        if (ls_isa_from_env(&c->kc.isa, err)) goto fail;
    } else {
        c->kc.isa = (ls_isa)p.isa;
        if (!ls_isa_supported(c->kc.isa)) {
            ls_err_set(err, LS_E_UNSUPPORTED, "this CPU does not support %s", ls_isa_name(c->kc.isa));
            goto fail;
        }
    }
    c->pool = ls_pool_create(n_threads, err);
    if (!c->pool) goto fail;
    c->kc.pool = c->pool;
    ls_rope_params rp = m->rope_params;
    rp.n_ctx = c->n_ctx;
    c->rope = ls_rope_create(rp, err);
    if (!c->rope) goto fail;

    const size_t E = hp->n_embd, QD = (size_t)hp->n_head * hp->head_dim, F = hp->n_ff, B = (size_t)c->n_batch;
    c->kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t kv_floats = (size_t)hp->n_layer * (size_t)c->n_ctx * c->kv_dim;
    c->att_scratch_per_thread = ls_attention_scratch_floats(c->n_ctx);
    size_t kmax = E > QD ? E : QD;
    if (F > kmax) kmax = F;
    c->kc.scratch_bytes = ls_matmul_scratch_bytes((int64_t)B, (int64_t)kmax);

    size_t sizes[] = {
        kv_floats * sizeof(float), kv_floats * sizeof(float),
        B * E * sizeof(float), B * E * sizeof(float), B * QD * sizeof(float),
        B * c->kv_dim * sizeof(float), B * c->kv_dim * sizeof(float), B * QD * sizeof(float),
        B * E * sizeof(float), B * F * sizeof(float), B * F * sizeof(float),
        B * sizeof(int32_t), B * sizeof(float *), B * sizeof(float *),
        (size_t)n_threads * c->att_scratch_per_thread * sizeof(float), c->kc.scratch_bytes,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += align_up(sizes[i]);
    c->arena = aligned_alloc(64, total);
    if (!c->arena) {
        ls_err_set(err, LS_E_NOMEM, "out of memory allocating %zu MiB for the context (n_ctx %d)",
                   total >> 20, c->n_ctx);
        goto fail;
    }
    char *a = c->arena;
    void **slots[] = {
        (void **)&c->k_cache, (void **)&c->v_cache, (void **)&c->x, (void **)&c->xn, (void **)&c->q,
        (void **)&c->k, (void **)&c->v, (void **)&c->att, (void **)&c->tmp, (void **)&c->gate,
        (void **)&c->up, (void **)&c->pos, (void **)&c->kp, (void **)&c->vp, (void **)&c->att_scratch,
        &c->kc.scratch,
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = a;
        a += align_up(sizes[i]);
    }
    return c;
fail:
    ls_ctx_free(c);
    return NULL;
}

void ls_ctx_free(ls_ctx *c) {
    if (!c) return;
    ls_rope_free(c->rope);
    ls_pool_free(c->pool);
    free(c->arena);
    free(c);
}

int32_t ls_ctx_n_ctx(const ls_ctx *c) { return c->n_ctx; }
ls_isa ls_ctx_isa(const ls_ctx *c) { return c->kc.isa; }
const ls_model *ls_ctx_model(const ls_ctx *c) { return c->m; }
const ls_tokenizer *ls_ctx_tokenizer(const ls_ctx *c) { return c->m->tok; }
int ls_ctx_n_threads(const ls_ctx *c) { return ls_pool_size(c->pool); }

static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* One forward over n <= n_batch rows at positions pos0.. ; logits for the rows
 * selected by out_from (rows out_from..n-1) go to logits. */
static void forward_rows(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *logits,
                         int32_t out_from) {
    const ls_model *m = c->m;
    const ls_hparams *hp = &m->hp;
    const ls_kctx *kc = &c->kc;
    const size_t E = hp->n_embd, D = hp->head_dim, KV = c->kv_dim;
    const int64_t M = n;

    for (int32_t r = 0; r < n; r++) {
        c->pos[r] = pos0 + r;
        const uint8_t *row = (const uint8_t *)m->tok_embd->data + (size_t)tokens[r] * m->tok_embd_row_bytes;
        ls_dequant_row(m->tok_embd->type, row, c->x + r * E, (int64_t)E);
    }
    const float scale = 1.0f / sqrtf((float)D);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const ls_layer *L = &m->layers[l];
        float *kc_l = c->k_cache + (size_t)l * (size_t)c->n_ctx * KV;
        float *vc_l = c->v_cache + (size_t)l * (size_t)c->n_ctx * KV;

        ls_rmsnorm(kc, c->x, L->attn_norm, hp->norm_eps, M, (int64_t)E, c->xn);
        { /* Q, K, V: one quantization of xn, one pool dispatch; same bits as three ls_matmul calls */
            const ls_wmat *wqkv[3] = {L->wq, L->wk, L->wv};
            float *yqkv[3] = {c->q, c->k, c->v};
            ls_matmul_multi(kc, 3, wqkv, c->xn, M, yqkv);
        }
        ls_rope_apply(kc, c->rope, c->q, M, (int)hp->n_head, (int)D, c->pos);
        ls_rope_apply(kc, c->rope, c->k, M, (int)hp->n_head_kv, (int)D, c->pos);
        /* Every row's K/V is in the cache before any query reads it. */
        for (int32_t r = 0; r < n; r++) {
            memcpy(kc_l + (size_t)c->pos[r] * KV, c->k + r * KV, KV * sizeof(float));
            memcpy(vc_l + (size_t)c->pos[r] * KV, c->v + r * KV, KV * sizeof(float));
            c->kp[r] = kc_l;
            c->vp[r] = vc_l;
        }
        ls_attention(kc, c->q, M, c->pos, c->kp, c->vp, (int)hp->n_head, (int)hp->n_head_kv, (int)D, scale,
                     c->att, c->att_scratch, c->att_scratch_per_thread);
        ls_matmul(kc, L->wo, c->att, M, c->tmp);
        add_rows(c->x, c->tmp, (size_t)M * E);

        ls_rmsnorm(kc, c->x, L->ffn_norm, hp->norm_eps, M, (int64_t)E, c->xn);
        {
            const ls_wmat *wgu[2] = {L->w_gate, L->w_up};
            float *ygu[2] = {c->gate, c->up};
            ls_matmul_multi(kc, 2, wgu, c->xn, M, ygu);
        }
        ls_swiglu(kc, c->gate, c->up, M, (int64_t)hp->n_ff, c->gate);
        ls_matmul(kc, L->w_down, c->gate, M, c->tmp);
        add_rows(c->x, c->tmp, (size_t)M * E);
    }
    if (logits && out_from < n) {
        const int64_t n_out = n - out_from;
        ls_rmsnorm(kc, c->x + (size_t)out_from * E, m->out_norm, hp->norm_eps, n_out, (int64_t)E, c->xn);
        ls_matmul(kc, m->output, c->xn, n_out, logits);
    }
}

ls_status ls_ctx_eval(ls_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, float *logits,
                      bool all_logits, ls_err *err) {
    const ls_hparams *hp = &c->m->hp;
    if (n <= 0) return ls_err_set(err, LS_E_INVALID, "no tokens to evaluate");
    if (pos0 < 0 || (int64_t)pos0 + n > c->n_ctx)
        return ls_err_set(err, LS_E_RANGE, "positions %d..%lld exceed the context size %d", pos0,
                          (long long)pos0 + n - 1, c->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "token id %d is outside the vocabulary (%u)", tokens[i],
                              hp->n_vocab);
    for (int32_t done = 0; done < n;) {
        int32_t chunk = n - done < c->n_batch ? n - done : c->n_batch;
        float *out = NULL;
        int32_t out_from = chunk;
        if (logits) {
            if (all_logits) {
                out = logits + (size_t)done * hp->n_vocab;
                out_from = 0;
            } else if (done + chunk == n) {
                out = logits;
                out_from = chunk - 1;
            }
        }
        forward_rows(c, tokens + done, chunk, pos0 + done, out, out_from);
        done += chunk;
    }
    return LS_OK;
}
