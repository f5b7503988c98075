/* cuda_src.c - the model's weights, norms, RoPE tables and embedding rows for the CUDA
 * backend.  The only file of the backend that reads model_impl.h. */
#include "backend/cuda/cuda_src.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "quant/quant.h"
#include "util/alloc.h"

static ls_status mat_src(const ls_wmat *w, lsc_mat_src *s, ls_err *err) {
    s->type = ls_wmat_type(w);
    s->N = ls_wmat_rows(w);
    s->K = ls_wmat_cols(w);
    s->data = ls_wmat_src_row(w, 0);
    uint64_t rb = 0;
    if (ls_type_nbytes(s->type, (uint64_t)s->K, &rb, err)) return err ? err->code : LS_E_FORMAT;
    s->row_bytes = (size_t)rb;
    s->nbytes = rb * (uint64_t)s->N;
    return LS_OK;
}

ls_status lsc_model_describe(const ls_model *m, lsc_model_src *s, ls_err *err) {
    memset(s, 0, sizeof *s);
    const ls_hparams *hp = &m->hp;
    const ls_plan *P = &m->plan;
    /* The GPU executes the plan (plan.h) of every family; what it has no kernels for is
     * refused by name.  The MTP block (hp.n_nextn) is described after the trunk's layers;
     * only a forward created for the module (ls_backend_params.mtp) runs it. */
    if (P->n_rope < 1 || P->n_rope > 2)
        return ls_err_set(err, LS_E_UNSUPPORTED, "the CUDA backend takes one or two RoPE tables (the plan has %d)",
                          P->n_rope);
    for (int i = 1; i < P->n_rope; i++)
        if (P->rope[i].params.head_dim != P->rope[0].params.head_dim || P->rope[i].params.neox != P->rope[0].params.neox)
            return ls_err_set(err, LS_E_UNSUPPORTED,
                              "the CUDA backend needs one rotated width and pair style for every RoPE table");
    s->n_vocab = (int32_t)hp->n_vocab;
    s->n_embd = (int32_t)hp->n_embd;
    s->n_layer = (int32_t)hp->n_layer;
    s->n_head = (int32_t)hp->n_head;
    s->n_head_kv = (int32_t)hp->n_head_kv;
    s->n_ff = (int32_t)hp->n_ff;
    s->head_dim = (int32_t)hp->head_dim;
    s->norm_eps = P->norm_eps;
    s->embd_scale = P->embd_scale;
    s->rope_dim = P->rope[0].params.head_dim;
    s->rope_neox = P->rope[0].params.neox;
    s->n_rope = P->n_rope;
    s->out_norm = P->out_norm;
    s->kv_block_floats = ls_kv_block_bytes(m) / sizeof(float);
    ls_status st;
    if ((st = mat_src(P->output, &s->output, err))) return st;
    s->has_mtp = ls_model_has_mtp(m);
    const uint32_t nl = hp->n_layer + (s->has_mtp ? 1u : 0u);
    s->layers = ls_calloc(nl, sizeof *s->layers);
    if (!s->layers) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    if (s->has_mtp) {
        s->mtp_enorm = m->mtp_enorm;
        s->mtp_hnorm = m->mtp_hnorm;
        s->mtp_head_norm = m->mtp_head_norm;
        s->mtp_own_head = m->mtp_head != NULL;
        if ((st = mat_src(m->mtp_eh_proj, &s->mtp_eh_proj, err)) ||
            (st = mat_src(m->mtp_head ? m->mtp_head : P->output, &s->mtp_head, err))) {
            lsc_model_src_free(s);
            return st;
        }
    }
    for (uint32_t l = 0; l < nl; l++) {
        const ls_layer_plan *L = &P->layers[l];
        lsc_layer_src *d = &s->layers[l];
        d->attn_norm = L->attn_norm;
        d->ffn_norm = L->ffn_norm;
        d->bq = L->bq;
        d->bk = L->bk;
        d->bv = L->bv;
        d->q_norm = L->q_norm;
        d->k_norm = L->k_norm;
        d->post_attn_norm = L->post_attn_norm;
        d->post_ffn_norm = L->post_ffn_norm;
        d->rope = L->rope;
        d->window = L->window;
        d->attn_scale = L->attn_scale;
        d->gelu = L->act == LS_ACT_GELU_TANH;
        if ((st = mat_src(L->wq, &d->wq, err)) || (st = mat_src(L->wk, &d->wk, err)) ||
            (st = mat_src(L->wv, &d->wv, err)) || (st = mat_src(L->wo, &d->wo, err)) ||
            (st = mat_src(L->w_gate, &d->gate, err)) || (st = mat_src(L->w_up, &d->up, err)) ||
            (st = mat_src(L->w_down, &d->down, err))) {
            lsc_model_src_free(s);
            return st;
        }
    }
    return LS_OK;
}

void lsc_model_src_free(lsc_model_src *s) {
    free(s->layers);
    s->layers = NULL;
}

static void embed_rows(const ls_model *m, const gguf_tensor *emb, size_t rb, const int32_t *tok, int32_t n,
                       float *out) {
    const size_t E = m->hp.n_embd;
    const float sc = m->plan.embd_scale;
    for (int32_t r = 0; r < n; r++) {
        const uint8_t *row = (const uint8_t *)emb->data + (size_t)tok[r] * rb;
        float *x = out + (size_t)r * E;
        ls_dequant_row(emb->type, row, x, (int64_t)E);
        if (sc != 1.0f) /* forward.c's statement, compiled with the same flags */
            for (size_t i = 0; i < E; i++) x[i] *= sc;
    }
}

void lsc_embed_rows(const ls_model *m, const int32_t *tok, int32_t n, float *out) {
    embed_rows(m, m->tok_embd, m->tok_embd_row_bytes, tok, n, out);
}

void lsc_embed_rows_mtp(const ls_model *m, const int32_t *tok, int32_t n, float *out) {
    if (m->mtp_embd) /* forward.c's row size for the module's own table */
        embed_rows(m, m->mtp_embd, m->mtp_embd->nbytes / m->hp.n_vocab, tok, n, out);
    else
        embed_rows(m, m->tok_embd, m->tok_embd_row_bytes, tok, n, out);
}

void lsc_rope_tables(const ls_model *m, int which, int32_t n_ctx, float *cs, float *sn) {
    /* the CPU's own table code (ops.c), so the two cannot drift */
    ls_rope_fill(m->plan.rope[which].params, m->plan.rope[which].factors, n_ctx, cs, sn);
}
