/* forward.c - the forward pass over a ragged batch (the KV store it reads and writes is
 * kv_store.c): it executes the model's plan (plan.h), every family the same way; each
 * optional step runs when the plan has it.
 *
 * Every buffer is carved from one arena at ls_fwd_create; nothing allocates per
 * call.  Each step is a canonical kernel whose per-row bits do not depend on how
 * many rows share the call, so a row's logits are the same whether its sequence is
 * prefilled in one chunk, in several, token by token, or batched with other
 * sequences (see docs/numerics.md). */
#include "model/model_impl.h"
#include "util/alloc.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- forward workspace ---------------------------------------------------- */
struct ls_fwd {
    const ls_model *m;
    ls_kctx kc;
    uint64_t rows[2];    /* matmul rows run with the parity family / the free family (kc.rows) */
    ls_pool *pool;
    ls_rope *rope[2];    /* the plan's tables (plan.n_rope) */
    int32_t n_rows, n_ctx;
    int32_t *layers;     /* the layers to run, in order */
    int32_t n_layers;
    bool mtp;            /* the MTP module (see ls_fwd_params) */
    float *cat;          /* (n_rows, 2 n_embd) MTP input [enorm(embed); hnorm(hidden)] */
    size_t kv_dim;
    float *x;            /* (n_rows, n_embd) residual stream */
    float *xn;           /* (n_rows, n_embd) normed */
    float *q;            /* (n_rows, n_head*head_dim) */
    float *k;            /* (n_rows, kv_dim) */
    float *v;            /* (n_rows, kv_dim) */
    float *att;          /* (n_rows, n_head*head_dim) */
    float *tmp;          /* (n_rows, n_embd) projection output; gathered rows for the head */
    float *gate;         /* (n_rows, n_ff) */
    float *up;           /* (n_rows, n_ff) */
    ls_kv_view *views;   /* (n_rows) */
    uint8_t *need_out;   /* (n_rows) parity need of the gathered head rows */
    float *att_scratch;  /* (n_threads, att_scratch_per_thread) */
    size_t att_scratch_per_thread;
    void *arena;
};

static size_t align_up(size_t n) { return (n + 63) & ~(size_t)63; }

ls_fwd *ls_fwd_create(const ls_model *m, ls_fwd_params p, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    ls_fwd *f = ls_calloc(1, sizeof *f);
    if (!f) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    f->m = m;
    int n_threads = p.n_threads ? p.n_threads : 1;
    if (p.n_rows < 1 || p.n_ctx < 1 || n_threads < 1) {
        ls_err_set(err, LS_E_INVALID, "bad forward sizes (rows %d, context %d, threads %d)", p.n_rows, p.n_ctx,
                   n_threads);
        goto fail;
    }
    if (n_threads > 256) {
        ls_err_set(err, LS_E_INVALID, "thread count %d is too large (max 256)", n_threads);
        goto fail;
    }
    f->n_rows = p.n_rows;
    f->n_ctx = p.n_ctx;
    f->mtp = p.mtp;
    if (p.mtp && !ls_model_has_mtp(m)) {
        ls_err_set(err, LS_E_UNSUPPORTED, "this model has no MTP (nextn) module");
        goto fail;
    }
    f->n_layers = p.mtp ? 1 : p.layers ? p.n_layers : (int32_t)hp->n_layer;
    if (f->n_layers < 1 || (uint32_t)f->n_layers > hp->n_layer) {
        ls_err_set(err, LS_E_INVALID, "layer list of %d layers (the model has %u)", f->n_layers, hp->n_layer);
        goto fail;
    }
    f->layers = ls_malloc((size_t)f->n_layers * sizeof *f->layers);
    if (!f->layers) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < f->n_layers; i++) {
        f->layers[i] = p.mtp ? (int32_t)hp->n_layer : p.layers ? p.layers[i] : i;
        if (f->layers[i] < 0 || (uint32_t)f->layers[i] >= hp->n_layer + (p.mtp ? 1u : 0u)) {
            ls_err_set(err, LS_E_INVALID, "layer %d does not exist (the model has %u)", f->layers[i], hp->n_layer);
            goto fail;
        }
    }
    if (p.isa < 0) {
        if (ls_isa_from_env(&f->kc.isa, err)) goto fail;
    } else {
        f->kc.isa = (ls_isa)p.isa;
        if (p.isa >= LS_ISA_COUNT || !ls_isa_supported(f->kc.isa)) {
            ls_err_set(err, LS_E_UNSUPPORTED, "this CPU does not support %s", ls_isa_name(f->kc.isa));
            goto fail;
        }
    }
    if (ls_model_prepare(m, f->kc.isa, err)) goto fail; /* the ISA's own weight layout, once per model */
    f->kc.narrow = p.narrow;
    f->kc.fam = p.fam ? p.fam : &ls_mm_wide;
    f->kc.fam_parity = p.fam_parity ? p.fam_parity : &ls_mm_wide;
    f->kc.rows = f->rows;
    f->kc.faults = p.faults;
    if (p.pool) {
        f->kc.pool = p.pool; /* borrowed: not freed here */
        n_threads = ls_pool_size(p.pool);
    } else {
        f->pool = ls_pool_create(n_threads, err);
        if (!f->pool) goto fail;
        f->kc.pool = f->pool;
    }
    for (int32_t i = 0; i < m->plan.n_rope; i++) {
        ls_rope_params rp = m->plan.rope[i].params;
        rp.n_ctx = p.n_ctx;
        if (!(f->rope[i] = ls_rope_create_factors(rp, m->plan.rope[i].factors, err))) goto fail;
    }

    const size_t E = hp->n_embd, QD = (size_t)hp->n_head * hp->head_dim, F = hp->n_ff, B = (size_t)p.n_rows;
    f->kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    f->att_scratch_per_thread = ls_attention_scratch_floats(p.n_ctx);
    size_t kmax = E > QD ? E : QD;
    if (F > kmax) kmax = F;
    f->kc.scratch_bytes = ls_matmul_scratch_bytes((int64_t)B, (int64_t)kmax);

    size_t sizes[] = {
        B * E * sizeof(float), B * E * sizeof(float), B * QD * sizeof(float),
        B * f->kv_dim * sizeof(float), B * f->kv_dim * sizeof(float), B * QD * sizeof(float),
        B * E * sizeof(float), B * F * sizeof(float), B * F * sizeof(float), B * sizeof(ls_kv_view), B,
        p.mtp ? B * 2 * E * sizeof(float) : 0,
        (size_t)n_threads * f->att_scratch_per_thread * sizeof(float), f->kc.scratch_bytes,
    };
    void **slots[] = {
        (void **)&f->x, (void **)&f->xn, (void **)&f->q, (void **)&f->k, (void **)&f->v, (void **)&f->att,
        (void **)&f->tmp, (void **)&f->gate, (void **)&f->up, (void **)&f->views, (void **)&f->need_out,
        (void **)&f->cat,
        (void **)&f->att_scratch,
        &f->kc.scratch,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += align_up(sizes[i]);
    f->arena = ls_aligned_alloc(64, total);
    if (!f->arena) {
        ls_err_set(err, LS_E_NOMEM, "out of memory allocating %zu MiB of activations (%d rows, context %d)",
                   total >> 20, p.n_rows, p.n_ctx);
        goto fail;
    }
    char *a = f->arena;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = a;
        a += align_up(sizes[i]);
    }
    return f;
fail:
    ls_fwd_free(f);
    return NULL;
}

void ls_fwd_free(ls_fwd *f) {
    if (!f) return;
    ls_rope_free(f->rope[0]);
    ls_rope_free(f->rope[1]);
    ls_pool_free(f->pool);
    free(f->layers);
    free(f->arena);
    free(f);
}

ls_isa ls_fwd_isa(const ls_fwd *f) { return f->kc.isa; }
void ls_fwd_set_parity_family(ls_fwd *f, const ls_mm_family *fam) { f->kc.fam_parity = fam ? fam : &ls_mm_wide; }
const ls_mm_family *ls_fwd_parity_family(const ls_fwd *f) { return f->kc.fam_parity; }
const ls_mm_family *ls_fwd_family(const ls_fwd *f) { return f->kc.fam; }
uint64_t ls_fwd_rows(const ls_fwd *f, bool parity) {
    return __atomic_load_n(&f->rows[parity ? 0 : 1], __ATOMIC_RELAXED);
}
unsigned ls_fwd_faults(const ls_fwd *f) { return f->kc.faults; }
int32_t ls_fwd_n_rows(const ls_fwd *f) { return f->n_rows; }
int32_t ls_fwd_n_ctx(const ls_fwd *f) { return f->n_ctx; }
int ls_fwd_n_threads(const ls_fwd *f) { return ls_pool_size(f->kc.pool); }
ls_pool *ls_fwd_pool(ls_fwd *f) { return f->kc.pool; }

static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* y[m][i] += b[i] for M rows of n (the projections' biases, qwen2). */
static void add_bias(float *y, const float *b, int64_t M, size_t n) {
    for (int64_t r = 0; r < M; r++)
        for (size_t i = 0; i < n; i++) y[(size_t)r * n + i] += b[i];
}

void ls_fwd_run(ls_fwd *f, ls_kv_store *kv, const ls_batch *b, float *logits) {
    const ls_model *m = f->m;
    const ls_hparams *hp = &m->hp;
    const ls_plan *P = &m->plan;
    const ls_kctx *kc = &f->kc;
    const size_t E = hp->n_embd, KV = f->kv_dim;
    const int D = (int)hp->head_dim;
    const float eps = P->norm_eps;
    const int64_t M = b->n;
    LS_ASSERT(b->n >= 1 && b->n <= f->n_rows && ls_kv_store_row_floats(kv) == KV);

    int32_t n_out = 0;
    const gguf_tensor *emb = f->mtp && m->mtp_embd ? m->mtp_embd : m->tok_embd;
    const size_t emb_rb = f->mtp && m->mtp_embd ? emb->nbytes / hp->n_vocab : m->tok_embd_row_bytes;
    for (int32_t r = 0; r < b->n; r++) {
        LS_ASSERT(b->token[r] >= 0 && (uint32_t)b->token[r] < hp->n_vocab);
        LS_ASSERT(b->pos[r] >= 0 && b->pos[r] < f->n_ctx);
        if (b->logit_row[r] >= 0) LS_ASSERT(b->logit_row[r] == n_out++); /* numbered in row order */
        const uint8_t *row = (const uint8_t *)emb->data + (size_t)b->token[r] * emb_rb;
        ls_dequant_row(emb->type, row, f->x + r * E, (int64_t)E);
        if (P->embd_scale != 1.0f)
            for (size_t i = 0; i < E; i++) f->x[r * E + i] *= P->embd_scale;
    }
    if (f->mtp) { /* x = eh_proj([enorm(embed(token)); hnorm(hidden)]) */
        LS_ASSERT(b->embd_in);
        ls_rmsnorm(kc, f->x, m->mtp_enorm, eps, M, (int64_t)E, f->xn);
        ls_rmsnorm(kc, b->embd_in, m->mtp_hnorm, eps, M, (int64_t)E, f->tmp);
        for (int32_t r = 0; r < b->n; r++) {
            memcpy(f->cat + (size_t)r * 2 * E, f->xn + (size_t)r * E, E * sizeof(float));
            memcpy(f->cat + (size_t)r * 2 * E + E, f->tmp + (size_t)r * E, E * sizeof(float));
        }
        const ls_wmat *we[1] = {m->mtp_eh_proj};
        ls_matmul_multi_rows(kc, 1, we, f->cat, M, &f->x, b->need_parity);
    }
    for (int32_t li = 0; li < f->n_layers; li++) {
        const int32_t l = f->layers[li];
        const ls_layer_plan *L = &P->layers[l];
        const int32_t kvl = f->mtp ? 0 : l; /* the MTP block keeps its K/V in layer slot 0 of its own store */

        ls_rmsnorm(kc, f->x, L->attn_norm, eps, M, (int64_t)E, f->xn);
        { /* Q, K, V: one quantization of xn, one pool dispatch; same bits as three ls_matmul calls */
            const ls_wmat *wqkv[3] = {L->wq, L->wk, L->wv};
            float *yqkv[3] = {f->q, f->k, f->v};
            ls_matmul_multi_rows(kc, 3, wqkv, f->xn, M, yqkv, b->need_parity);
        }
        if (L->bq) {
            add_bias(f->q, L->bq, M, (size_t)hp->n_head * D);
            add_bias(f->k, L->bk, M, KV);
            add_bias(f->v, L->bv, M, KV);
        }
        if (L->q_norm) { /* RMSNorm of each head (rows of head_dim), in place */
            ls_rmsnorm(kc, f->q, L->q_norm, eps, M * (int64_t)hp->n_head, D, f->q);
            ls_rmsnorm(kc, f->k, L->k_norm, eps, M * (int64_t)hp->n_head_kv, D, f->k);
        }
        const ls_rope *rope = f->rope[L->rope];
        ls_rope_apply(kc, rope, f->q, M, (int)hp->n_head, D, b->pos);
        ls_rope_apply(kc, rope, f->k, M, (int)hp->n_head_kv, D, b->pos);
        /* Every row's K/V is in its block before any query reads it. */
        for (int32_t r = 0; r < b->n; r++) {
            const int32_t *table = b->tables[b->seq[r]];
            int32_t p = b->pos[r], blk = table[p >> LS_KV_BLOCK_SHIFT];
            bool fault = (kc->faults & LS_FAULT_KV_SKIP) && r > 0 && b->seq[r] != b->seq[r - 1] && b->seq[r] != b->seq[0];
            if (!fault) ls_kv_store_write(kv, kvl, blk, p & (LS_KV_BLOCK - 1), f->k + r * KV, f->v + r * KV);
            f->views[r] = ls_kv_store_view(kv, kvl, table);
        }
        ls_attention(kc, f->q, M, b->pos, f->views, (int)hp->n_head, (int)hp->n_head_kv, D, L->attn_scale,
                     L->window, f->att, f->att_scratch, f->att_scratch_per_thread);
        {
            const ls_wmat *wo[1] = {L->wo};
            ls_matmul_multi_rows(kc, 1, wo, f->att, M, &f->tmp, b->need_parity);
        }
        if (L->post_attn_norm) {
            ls_rmsnorm(kc, f->tmp, L->post_attn_norm, eps, M, (int64_t)E, f->xn);
            add_rows(f->x, f->xn, (size_t)M * E);
        } else {
            add_rows(f->x, f->tmp, (size_t)M * E);
        }

        ls_rmsnorm(kc, f->x, L->ffn_norm, eps, M, (int64_t)E, f->xn);
        {
            const ls_wmat *wgu[2] = {L->w_gate, L->w_up};
            float *ygu[2] = {f->gate, f->up};
            ls_matmul_multi_rows(kc, 2, wgu, f->xn, M, ygu, b->need_parity);
        }
        if (L->act == LS_ACT_GELU_TANH)
            ls_geglu(kc, f->gate, f->up, M, (int64_t)hp->n_ff, f->gate);
        else
            ls_swiglu(kc, f->gate, f->up, M, (int64_t)hp->n_ff, f->gate);
        {
            const ls_wmat *wd[1] = {L->w_down};
            ls_matmul_multi_rows(kc, 1, wd, f->gate, M, &f->tmp, b->need_parity);
        }
        if (L->post_ffn_norm) {
            ls_rmsnorm(kc, f->tmp, L->post_ffn_norm, eps, M, (int64_t)E, f->xn);
            add_rows(f->x, f->xn, (size_t)M * E);
        } else {
            add_rows(f->x, f->tmp, (size_t)M * E);
        }
    }
    if (b->hidden_out) memcpy(b->hidden_out, f->x, (size_t)M * E * sizeof(float));
    if (n_out == 0 || !logits) return;
    /* The head runs only on the rows that need logits, gathered in row order. */
    for (int32_t r = 0, o = 0; r < b->n; r++)
        if (b->logit_row[r] >= 0) {
            f->need_out[o] = b->need_parity ? b->need_parity[r] : 1;
            memcpy(f->tmp + (size_t)o++ * E, f->x + (size_t)r * E, E * sizeof(float));
        }
    ls_rmsnorm(kc, f->tmp, f->mtp ? m->mtp_head_norm : P->out_norm, eps, n_out, (int64_t)E, f->xn);
    const ls_wmat *wout[1] = {f->mtp && m->mtp_head ? m->mtp_head : P->output};
    ls_matmul_multi_rows(kc, 1, wout, f->xn, n_out, &logits, f->need_out);
}
