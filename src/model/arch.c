/* arch.c - the architecture descriptor table (arch.h).  The tensor table that goes
 * with it (which blk.N tensors each feature needs, and their shapes) is in model.c,
 * beside the code that loads it. */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

static const ls_arch k_arches[] = {
    /* Llama 1/2/3.x, SmolLM2, Mistral: the default entry. */
    {"llama", {"llama", "mistral", NULL}, LS_AF_ROPE_FREQS, LS_ACT_SILU, 0, 0.0f, 10000.0f, NULL},
    /* Qwen 2 / 2.5: q/k/v biases, NeoX RoPE. */
    {"qwen2", {"qwen2", NULL, NULL}, LS_AF_QKV_BIAS | LS_AF_NEOX, LS_ACT_SILU, 0, 0.0f, 1000000.0f, NULL},
    /* Qwen 3 (dense): per-head q/k RMSNorm, NeoX RoPE, head_dim from key_length. */
    {"qwen3", {"qwen3", NULL, NULL}, LS_AF_QK_NORM | LS_AF_NEOX, LS_ACT_SILU, 0, 0.0f, 1000000.0f, NULL},
    /* Gemma 3: scaled embeddings, q/k norms, post-norms, GeGLU, NeoX RoPE, five sliding-window
     * layers (local RoPE base 10000) to one global. */
    {"gemma3", {"gemma3", NULL, NULL}, LS_AF_QK_NORM | LS_AF_POST_NORMS | LS_AF_EMBD_SCALE | LS_AF_NEOX,
     LS_ACT_GELU_TANH, 6, 10000.0f, 1000000.0f, "gemma"},
};

const ls_arch *ls_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof k_arches / sizeof k_arches[0]; i++)
        for (int j = 0; j < 3 && k_arches[i].gguf_names[j]; j++)
            if (strcmp(name, k_arches[i].gguf_names[j]) == 0) return &k_arches[i];
    return NULL;
}

const ls_arch *ls_arch_table(int *n) {
    *n = (int)(sizeof k_arches / sizeof k_arches[0]);
    return k_arches;
}

void ls_arch_names(char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof k_arches / sizeof k_arches[0]; i++)
        for (int j = 0; j < 3 && k_arches[i].gguf_names[j]; j++) {
            int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", k_arches[i].gguf_names[j]);
            if (w < 0 || (size_t)w >= cap - used) return;
            used += (size_t)w;
        }
}
