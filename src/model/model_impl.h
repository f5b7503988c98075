/* model_impl.h - the model's internals, shared by model.c (loading) and
 * forward.c (the forward pass).  Not part of the public API. */
#ifndef LS_MODEL_MODEL_IMPL_H
#define LS_MODEL_MODEL_IMPL_H

#include "model/model.h"
#include "model/plan.h"
#include "quant/quant.h"

#include <pthread.h>

typedef struct {
    float *attn_norm;  /* (n_embd) */
    ls_wmat *wq;       /* (n_head*head_dim, n_embd) */
    ls_wmat *wk;       /* (n_head_kv*head_dim, n_embd) */
    ls_wmat *wv;       /* (n_head_kv*head_dim, n_embd) */
    ls_wmat *wo;       /* (n_embd, n_head*head_dim) */
    float *ffn_norm;   /* (n_embd) */
    ls_wmat *w_gate;   /* (n_ff, n_embd) */
    ls_wmat *w_up;     /* (n_ff, n_embd) */
    ls_wmat *w_down;   /* (n_embd, n_ff) */
    /* Optional per family (the architecture descriptor, arch.h); NULL when absent. */
    float *bq, *bk, *bv;          /* attn_{q,k,v}.bias (qwen2) */
    float *q_norm, *k_norm;       /* (head_dim) per-head RMSNorm of q and k before RoPE (qwen3, gemma3) */
    float *post_attn_norm;        /* (n_embd) RMSNorm of the attention output (gemma3) */
    float *post_ffn_norm;         /* (n_embd) RMSNorm of the FFN output (gemma3) */
} ls_layer;

struct ls_model {
    gguf_file *gguf;          /* owns the mmap every weight view points into */
    gguf_file *mtp_gguf;      /* the MTP module's own file (ls_model_params.mtp_path), or NULL */
    char *path;               /* the file's path as given (owned), or NULL */
    char *cache_dir;          /* ls_model_params.cache_dir (owned), or NULL */
    char sha256[65];          /* of the file, hex; "" until first asked (guarded by prep_mu) */
    ls_hparams hp;
    ls_layer *layers;         /* (n_layer) */
    const gguf_tensor *tok_embd; /* (n_vocab, n_embd), rows dequantized on lookup */
    uint64_t tok_embd_row_bytes;
    float *out_norm;          /* (n_embd) */
    ls_wmat *output;          /* (n_vocab, n_embd); over token_embd when tied */
    const ls_arch *arch;      /* the family's descriptor (arch.h) */
    ls_plan plan;             /* what the forward computes, layer by layer (plan.h); every backend reads it */
    float *rope_freqs;        /* (rope_dim/2) rope_freqs.weight (Llama 3.1+ frequency factors), or NULL */
    ls_tokenizer *tok;
    ls_chat_template tmpl;
    bool has_tmpl;
    char tmpl_err[512];
    uint64_t weight_bytes;
    /* MTP module (hp.n_nextn == 1): its block is layers[hp.n_layer] */
    float *mtp_enorm, *mtp_hnorm, *mtp_head_norm; /* (n_embd) */
    ls_wmat *mtp_eh_proj;                         /* (n_embd, 2 n_embd) */
    const gguf_tensor *mtp_embd;                  /* nextn.embed_tokens, or NULL: token_embd */
    ls_wmat *mtp_head;                            /* nextn.shared_head_head, or NULL: output */
    /* lockstep.mtp.head_vocab: the module's head covers only these tokens (ascending ids;
     * n_mtp_vocab 0: the whole vocabulary).  Without a shared_head_head of its own, the
     * head is those rows of the model's output, copied byte for byte (mtp_head_rows,
     * described by mtp_head_src). */
    int32_t *mtp_vocab, n_mtp_vocab;
    void *mtp_head_rows;
    gguf_tensor mtp_head_src;
    double mtp_cost;                              /* module bytes per draft / trunk bytes per token */
    /* Every matrix above, owned here (freed once, whatever points to it); mat_src[i] is
     * the file's tensor of mats[i] and mat_dst[i] where the model keeps it (valid during
     * the load).  A metadata-only load (LS_MODEL_LOAD_META) lists them, builds none. */
    ls_wmat **mats;
    const gguf_tensor **mat_src;
    ls_wmat ***mat_dst;
    int32_t n_mats, cap_mats;
    bool meta_only;
    /* Per ISA, its own weight layout (ls_model_prepare): one arena advised MADV_HUGEPAGE
     * (NULL when that ISA needs none or was never used), guarded by prep_mu. */
    pthread_mutex_t prep_mu;
    unsigned prepared;
    uint8_t *prep_arena[LS_ISA_COUNT];
};

/* The model file's SHA-256 into m->sha256 (model_api.c); false: it could not be read.
 * The caller holds prep_mu or is the only thread that sees m. */
bool ls_model_sha256_fill(ls_model *m);

#endif
