/* arch.h - the architecture descriptor: one table entry per model family (arch.c).
 *
 * A family is the Llama block (pre-norm, RoPE, GQA attention, gated FFN) plus the
 * features its entry names: which metadata keys give its hyperparameters, which
 * tensors a block has (required or optional, their shapes checked and named in
 * errors), and how the block computes.  Adding a family is one entry here plus the
 * kernels it really lacks. */
#ifndef LS_MODEL_ARCH_H
#define LS_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Block features (ls_arch.feats). */
enum {
    LS_AF_QKV_BIAS = 1u << 0,   /* blk.N.attn_{q,k,v}.bias, added after the projections (qwen2) */
    LS_AF_QK_NORM = 1u << 1,    /* blk.N.attn_{q,k}_norm.weight: RMSNorm per head before RoPE (qwen3, gemma3) */
    LS_AF_POST_NORMS = 1u << 2, /* blk.N.post_attention_norm / post_ffw_norm on each branch's output (gemma3) */
    LS_AF_EMBD_SCALE = 1u << 3, /* embeddings times sqrt(n_embd) (gemma) */
    LS_AF_NEOX = 1u << 4,       /* RoPE rotates (i, i + d/2); else adjacent pairs (2i, 2i+1) */
    LS_AF_ROPE_FREQS = 1u << 5, /* an optional rope_freqs.weight divides each frequency (Llama 3.1+) */
};

typedef enum {
    LS_ACT_SILU = 0,  /* SwiGLU: silu(gate) * up */
    LS_ACT_GELU_TANH, /* GeGLU: gelu_tanh(gate) * up */
} ls_ffn_act;

typedef struct ls_arch {
    const char *name;             /* the family as `lockstep info` names it */
    const char *gguf_names[3];    /* general.architecture values that map onto this entry */
    unsigned feats;               /* LS_AF_* */
    ls_ffn_act act;
    uint32_t swa_pattern;         /* n > 0: layer l is sliding-window unless l % n == n - 1; 0: none */
    float rope_base_swa;          /* RoPE base of the sliding-window layers */
    float rope_base_default;      /* {arch}.rope.freq_base when absent */
    const char *chat_default;     /* the chat template (ls_chat_template_by_name) for a file of this family
                                   * without tokenizer.chat_template, or NULL: none (gemma3: "gemma") */
} ls_arch;

/* The entry whose gguf_names has `name`, or NULL. */
const ls_arch *ls_arch_find(const char *name);
/* Every entry, for messages ("supported: llama, mistral, ..."): n entries. */
const ls_arch *ls_arch_table(int *n);
/* "llama, mistral, qwen2, qwen3, gemma3" into buf. */
void ls_arch_names(char *buf, size_t cap);

#endif
