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
    /* The GPU graph is the plain llama block: any other family (arch.h), or llama with
     * RoPE frequency factors, is refused rather than computed wrongly. */
    if (strcmp(m->arch->name, "llama") != 0)
        return ls_err_set(err, LS_E_UNSUPPORTED,
                          "the CUDA backend runs the llama family only; this model is '%s' (family %s): use --device cpu",
                          hp->arch, m->arch->name);
    if (m->rope_freqs)
        return ls_err_set(err, LS_E_UNSUPPORTED,
                          "the CUDA backend does not apply rope_freqs.weight (Llama 3.1+ RoPE scaling): use --device cpu");
    if (m->rope_params.yarn)
        return ls_err_set(err, LS_E_UNSUPPORTED, "the CUDA backend does not apply YaRN RoPE scaling: use --device cpu");
    for (uint32_t l = 0; l < hp->n_layer; l++)
        if (m->layers[l].swa)
            return ls_err_set(err, LS_E_UNSUPPORTED,
                              "the CUDA backend has no sliding-window attention (layer %u): use --device cpu", l);
    s->n_vocab = (int32_t)hp->n_vocab;
    s->n_embd = (int32_t)hp->n_embd;
    s->n_layer = (int32_t)hp->n_layer;
    s->n_head = (int32_t)hp->n_head;
    s->n_head_kv = (int32_t)hp->n_head_kv;
    s->n_ff = (int32_t)hp->n_ff;
    s->head_dim = (int32_t)hp->head_dim;
    s->norm_eps = hp->norm_eps;
    s->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    s->rope_dim = m->rope_params.head_dim;
    s->rope_neox = m->rope_params.neox;
    s->out_norm = m->out_norm;
    s->kv_block_floats = ls_kv_block_bytes(m) / sizeof(float);
    ls_status st;
    if ((st = mat_src(m->output, &s->output, err))) return st;
    s->layers = ls_calloc((size_t)hp->n_layer, sizeof *s->layers);
    if (!s->layers) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const ls_layer *L = &m->layers[l];
        lsc_layer_src *d = &s->layers[l];
        d->attn_norm = L->attn_norm;
        d->ffn_norm = L->ffn_norm;
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

void lsc_embed_rows(const ls_model *m, const int32_t *tok, int32_t n, float *out) {
    const size_t E = m->hp.n_embd;
    for (int32_t r = 0; r < n; r++) {
        const uint8_t *row = (const uint8_t *)m->tok_embd->data + (size_t)tok[r] * m->tok_embd_row_bytes;
        ls_dequant_row(m->tok_embd->type, row, out + (size_t)r * E, (int64_t)E);
    }
}

void lsc_rope_tables(const ls_model *m, int32_t n_ctx, float *cs, float *sn) {
    const ls_rope_params p = m->rope_params;
    size_t half = (size_t)p.head_dim / 2;
    for (size_t i = 0; i < half; i++) { /* the expressions of ls_rope_create */
        double inv_freq = pow((double)p.freq_base, -2.0 * (double)i / (double)p.head_dim);
        for (int32_t pos = 0; pos < n_ctx; pos++) {
            double theta = (double)pos * (double)p.freq_scale * inv_freq;
            cs[(size_t)pos * half + i] = (float)cos(theta);
            sn[(size_t)pos * half + i] = (float)sin(theta);
        }
    }
}
