/* cuda_src.h - what the CUDA backend reads from a loaded model, gathered by one C file
 * (cuda_src.c) so that the backend depends on the model's internals in one place. */
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
    lsc_mat_src wq, wk, wv, wo, gate, up, down;
} lsc_layer_src;

typedef struct {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim;
    float norm_eps;
    float attn_scale;       /* 1 / sqrtf(head_dim), as forward.c computes it */
    int32_t rope_dim;       /* rotated dims per head */
    int32_t rope_neox;
    const float *out_norm;  /* (n_embd), host */
    lsc_mat_src output;
    lsc_layer_src *layers;  /* (n_layer), owned */
    size_t kv_block_floats; /* floats of one KV block (all layers), ls_kv_block_bytes / 4 */
} lsc_model_src;

/* Fills s from m (s->layers allocated; free with lsc_model_src_free). */
ls_status lsc_model_describe(const ls_model *m, lsc_model_src *s, ls_err *err);
void lsc_model_src_free(lsc_model_src *s);
/* The embedding rows of tokens tok[0..n) dequantized as forward.c does (n_embd floats each). */
void lsc_embed_rows(const ls_model *m, const int32_t *tok, int32_t n, float *out);
/* RoPE tables for positions [0, n_ctx): cs/sn (n_ctx x rope_dim/2), the same values
 * ls_rope_create computes (ops.c). */
void lsc_rope_tables(const ls_model *m, int32_t n_ctx, float *cs, float *sn);

#ifdef __cplusplus
}
#endif
#endif
