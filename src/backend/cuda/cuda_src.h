/* cuda_src.h - what the CUDA backend reads from a loaded model: its plan (src/model/plan.h)
 * in the backend's terms, gathered by one C file (cuda_src.c) so that the backend depends
 * on the model's internals in one place.  Every per-family decision is a field here,
 * copied from the plan; the GPU forward tests only these fields. */
#ifndef LS_BACKEND_CUDA_SRC_H
#define LS_BACKEND_CUDA_SRC_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t type;          /* ggml type id */
    int64_t N, K;           /* rows (output features), columns */
    const uint8_t *data;    /* N rows in ggml layout (the model's mmap) */
    size_t row_bytes;
    uint64_t nbytes;
} lsc_mat_src;

typedef struct {
    const float *attn_norm, *ffn_norm; /* (n_embd), host */
    const float *bq, *bk, *bv;         /* q/k/v biases (host), or NULL */
    const float *q_norm, *k_norm;      /* (head_dim) per-head RMSNorm weights, or NULL */
    const float *post_attn_norm, *post_ffn_norm; /* (n_embd), or NULL */
    int32_t rope;                      /* RoPE table (lsc_rope_tables' which) */
    int32_t window;                    /* sliding window in positions, 0: every key */
    float attn_scale;                  /* 1 / sqrtf(head_dim), as the plan has it */
    int32_t gelu;                      /* 1: GeGLU, 0: SwiGLU */
    lsc_mat_src wq, wk, wv, wo, gate, up, down;
} lsc_layer_src;

typedef struct {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim;
    float norm_eps;
    float embd_scale;       /* the embedding rows times this (lsc_embed_rows applies it), 1: none */
    int32_t rope_dim;       /* rotated dims per head */
    int32_t rope_neox;
    int32_t n_rope;         /* RoPE tables: 1, or 2 (the sliding-window layers') */
    const float *out_norm;  /* (n_embd), host */
    lsc_mat_src output;
    lsc_layer_src *layers;  /* (n_layer + has_mtp), owned: the MTP block last */
    /* the MTP module (forward.c's f->mtp path), when has_mtp */
    int32_t has_mtp;
    const float *mtp_enorm, *mtp_hnorm, *mtp_head_norm; /* (n_embd), host */
    lsc_mat_src mtp_eh_proj;  /* (n_embd, 2 n_embd) */
    int32_t mtp_own_head;     /* 1: the module has its own head (mtp_head); 0: it shares output */
    lsc_mat_src mtp_head;
    size_t kv_block_floats; /* floats of one KV block (all layers), ls_kv_block_bytes / 4 */
} lsc_model_src;

/* Fills s from m (s->layers allocated; free with lsc_model_src_free). */
ls_status lsc_model_describe(const ls_model *m, lsc_model_src *s, ls_err *err);
void lsc_model_src_free(lsc_model_src *s);
/* The embedding rows of tokens tok[0..n) dequantized and scaled as forward.c does (n_embd
 * floats each). */
void lsc_embed_rows(const ls_model *m, const int32_t *tok, int32_t n, float *out);
/* The same from the MTP module's embedding (nextn.embed_tokens, else token_embd). */
void lsc_embed_rows_mtp(const ls_model *m, const int32_t *tok, int32_t n, float *out);
/* RoPE table `which` (< n_rope) for positions [0, n_ctx): cs/sn (n_ctx x rope_dim/2), the
 * values ls_rope_create_factors computes (ops.c) for the plan's table: frequency factors
 * and YaRN included. */
void lsc_rope_tables(const ls_model *m, int which, int32_t n_ctx, float *cs, float *sn);

#ifdef __cplusplus
}
#endif
#endif
