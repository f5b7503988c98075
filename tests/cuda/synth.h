/* synth.h - random ggml weights and synthetic Llama-shaped models, written with the
 * project's GGUF writer into memory (tests/cuda and bench/cuda; nothing big travels). */
#ifndef LS_TESTS_CUDA_SYNTH_H
#define LS_TESTS_CUDA_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "util/err.h"

static inline uint64_t synth_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float synth_unif(uint64_t *s) { return (float)((synth_next(s) >> 40) * (1.0 / 16777216.0)); } /* [0, 1) */

/* Bytes of N rows of K elements of `type`. */
size_t synth_bytes(uint32_t type, int64_t N, int64_t K);
/* N random rows of `type` whose dequantized values have a spread of about `scale`. */
void synth_weights(uint32_t type, uint64_t seed, int64_t N, int64_t K, float scale, void *out);

typedef struct {
    const char *name;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx_train;
    uint32_t t_q, t_k, t_v, t_o, t_gate, t_up, t_down; /* ggml types of the layer matrices */
    uint32_t t_embd;
    int32_t t_out; /* -1: tied to token_embd */
    float rope_base;
    /* Family features (zero: a plain llama file), as tests/python/synth_family.py writes them */
    const char *arch;      /* general.architecture; NULL: "llama" */
    int32_t head_dim;      /* {arch}.attention.key_length / value_length; 0: n_embd / n_head */
    int32_t swa;           /* {arch}.attention.sliding_window (gemma3), or 0 */
    unsigned feats;        /* SYNTH_* */
    float yarn_factor;     /* > 0: rope.scaling.type yarn with this factor ... */
    int32_t yarn_orig;     /* ... over this many original positions ... */
    float yarn_attn;       /* ... and this attn_factor */
} synth_cfg;
enum {
    SYNTH_BIAS = 1u << 0,       /* blk.N.attn_{q,k,v}.bias (qwen2) */
    SYNTH_QK_NORM = 1u << 1,    /* blk.N.attn_{q,k}_norm.weight (qwen3, gemma3) */
    SYNTH_POST = 1u << 2,       /* blk.N.post_attention_norm / post_ffw_norm (gemma3) */
    SYNTH_ROPE_FREQS = 1u << 3, /* rope_freqs.weight: factors 1..8 (llama 3.1+) */
    SYNTH_MTP = 1u << 4,        /* an MTP module after the n_layer blocks (llama.cpp's nextn names; eh_proj
                                 * of t_o, its own F16 head and embedding unless tied: t_out < 0) */
    SYNTH_MTP_VOCAB = 1u << 5,  /* its head over every third token (lockstep.mtp.head_vocab) */
};

/* Synthetic files of every family of the architecture table (arch.c), one or more each:
 * llama with rope_freqs.weight, mistral, qwen2 (q/k/v biases; and with YaRN), qwen3 (q/k
 * norms, key_length != n_embd / n_head), gemma3 (GeGLU, post-norms, embedding scale, q/k
 * norms, 5 sliding-window layers of 11 positions : 1 global; fused and separate gate/up,
 * both attention kernels).  *n: how many. */
const synth_cfg *synth_families(int *n);

/* A model from cfg and seed, loaded from an in-memory GGUF file; *buf holds the file
 * (free it after ls_model_free). */
ls_model *synth_model(const synth_cfg *cfg, uint64_t seed, void **buf, ls_err *err);
/* The same model written to `path`; with vocab_path, every tokenizer.* key of that GGUF
 * file is copied (and n_vocab is its token count), so other engines load the file too. */
ls_status synth_write_file(const synth_cfg *cfg, uint64_t seed, const char *vocab_path, const char *path, ls_err *err);

#endif
