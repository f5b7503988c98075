/* plan.h - the forward's one description: what every layer of a loaded model computes,
 * in order, with its parameters, built once at load (model.c, ls_plan_build) from the
 * architecture descriptor (arch.c) and the file.  Every backend executes this plan and
 * decides nothing per family: the CPU forward (forward.c) and the CUDA backend
 * (src/backend/cuda/cuda_src.c reads it) test only the plan's fields.
 *
 * A layer is this sequence; an optional step is absent when its pointer is NULL (each
 * step is a recipe of docs/numerics.md, none fused into another, none reordered):
 *
 *   1. xn = rmsnorm(x, attn_norm)
 *   2. q, k, v = xn W_q^T, xn W_k^T, xn W_v^T
 *   3. q += bq; k += bk; v += bv                      (bq: all three or none)
 *   4. per head of head_dim: q = rmsnorm(q, q_norm); k = rmsnorm(k, k_norm)
 *   5. RoPE of q and k with table rope[layer.rope]
 *   6. K/V into the store; attention over keys max(0, p - window + 1)..p (window 0: 0..p),
 *      scores times attn_scale
 *   7. t = att W_o^T
 *   8. t = rmsnorm(t, post_attn_norm)
 *   9. x = x + t
 *  10. xn = rmsnorm(x, ffn_norm)
 *  11. g, u = xn W_gate^T, xn W_up^T
 *  12. h = act(g) * u                                 (SwiGLU or GeGLU)
 *  13. t = h W_down^T
 *  14. t = rmsnorm(t, post_ffn_norm)
 *  15. x = x + t
 *
 * and around the layers: x = dequant(token_embd row) * embd_scale (skipped when 1) before
 * the first; logits = rmsnorm(x, out_norm) W_output^T after the last.
 *
 * Adding a family: its descriptor entry (arch.c), its tensors (model.c's tensor table),
 * and, only when it needs a step this list lacks, that step here and in each backend. */
#ifndef LS_MODEL_PLAN_H
#define LS_MODEL_PLAN_H

#include <stdint.h>

#include "kernels/cpu/kernels.h"
#include "model/arch.h"

/* A RoPE table: ls_rope_create_factors(params with the forward's n_ctx, factors). */
typedef struct {
    ls_rope_params params;  /* n_ctx: the file's; a forward uses its own */
    const float *factors;   /* (params.head_dim / 2) frequency divisors (rope_freqs.weight), or NULL */
} ls_rope_plan;

typedef struct {
    const float *attn_norm;            /* 1. (n_embd) */
    const ls_wmat *wq, *wk, *wv;       /* 2. */
    const float *bq, *bk, *bv;         /* 3. or NULL */
    const float *q_norm, *k_norm;      /* 4. (head_dim) or NULL */
    int32_t rope;                      /* 5. index into ls_plan.rope */
    int32_t window;                    /* 6. sliding window in positions, 0: every key */
    float attn_scale;                  /* 6. 1 / sqrtf(head_dim) */
    const ls_wmat *wo;                 /* 7. */
    const float *post_attn_norm;       /* 8. (n_embd) or NULL */
    const float *ffn_norm;             /* 10. (n_embd) */
    const ls_wmat *w_gate, *w_up;      /* 11. */
    ls_ffn_act act;                    /* 12. */
    const ls_wmat *w_down;             /* 13. */
    const float *post_ffn_norm;        /* 14. (n_embd) or NULL */
} ls_layer_plan;

typedef struct {
    float embd_scale;         /* 1: none */
    float norm_eps;           /* every RMSNorm's */
    int32_t n_rope;           /* 1, or 2: the sliding-window layers' own table (another base) */
    ls_rope_plan rope[2];
    int32_t n_layers;         /* n_layer + n_nextn (the MTP block last) */
    ls_layer_plan *layers;    /* (n_layers), owned by the model */
    const float *out_norm;    /* (n_embd) */
    const ls_wmat *output;    /* (n_vocab, n_embd), token_embd when tied */
    /* Not in the plan, because no backend builds them: attention and final-logit
     * soft-capping (Gemma 2; the loader refuses a file that asks). */
} ls_plan;

#endif
