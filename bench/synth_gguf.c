/* synth_gguf.c - writes a synthetic Llama-shaped GGUF file with random weights (the
 * project's GGUF writer, tests/cuda/synth.c) and a real vocabulary copied from another
 * GGUF file, so that lockstep and llama.cpp both load it: the memory-bound model of
 * issue 23's batched-decode question, which is too big to ship.
 *
 *   build/synth-gguf [--shape 1b|8b] [--type q4_1|q4_0|q8_0|q4_k_m] [--seed N]
 *                    --vocab-from MODEL.gguf -o OUT.gguf
 *
 * 1b: Llama-3.2-1B's shapes (2048 embd, 16 layers, 32 heads, 8 KV heads, 8192 FFN,
 * tied embeddings), the vocabulary's own token count; 8b: Llama-3-8B's shapes.  q4_k_m
 * is llama.cpp's Q4_K_M mix: Q4_K, with attn_v, ffn_down and the embedding in Q6_K. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "synth.h"

static int usage(const char *why) {
    fprintf(stderr, "synth-gguf: %s\nusage: synth-gguf [--shape 1b|8b] [--type q4_1|q4_0|q8_0] [--seed N] "
                    "--vocab-from MODEL.gguf -o OUT.gguf\n", why);
    return 2;
}

int main(int argc, char **argv) {
    const char *shape = "1b", *type = "q4_1", *vocab = NULL, *out = NULL;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shape") && v) shape = argv[++i];
        else if (!strcmp(a, "--type") && v) type = argv[++i];
        else if (!strcmp(a, "--seed") && v) {
            char *end;
            seed = strtoull(v, &end, 10);
            if (!*v || *end) return usage("--seed needs a non-negative integer");
            i++;
        } else if (!strcmp(a, "--vocab-from") && v) vocab = argv[++i];
        else if (!strcmp(a, "-o") && v) out = argv[++i];
        else {
            char msg[300];
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", a);
            return usage(msg);
        }
    }
    if (!out) return usage("-o OUT.gguf is required");
    if (!vocab) return usage("--vocab-from MODEL.gguf is required (its tokenizer is copied)");
    uint32_t t, t6; /* most matrices; attn_v, ffn_down and the embedding */
    if (!strcmp(type, "q4_1")) t = t6 = LS_TYPE_Q4_1;
    else if (!strcmp(type, "q4_0")) t = t6 = LS_TYPE_Q4_0;
    else if (!strcmp(type, "q8_0")) t = t6 = LS_TYPE_Q8_0;
    else if (!strcmp(type, "q4_k_m")) t = LS_TYPE_Q4_K, t6 = LS_TYPE_Q6_K;
    else return usage("--type must be q4_1, q4_0, q8_0 or q4_k_m");
    synth_cfg c;
    if (!strcmp(shape, "1b"))
        c = (synth_cfg){"synthetic Llama-3.2-1B-shaped", 0, 2048, 16, 32, 8, 8192, 8192, t, t, t6, t, t, t, t6, t6, -1, 500000.0f,
                        .arch = NULL};
    else if (!strcmp(shape, "8b"))
        c = (synth_cfg){"synthetic Llama-3-8B-shaped", 0, 4096, 32, 32, 8, 14336, 8192, t, t, t6, t, t, t, t6, t6, LS_TYPE_Q6_K,
                        500000.0f, .arch = NULL};
    else return usage("--shape must be 1b or 8b");
    ls_err err = {0};
    if (synth_write_file(&c, seed, vocab, out, &err)) {
        fprintf(stderr, "synth-gguf: %s\n", err.msg);
        return 1;
    }
    printf("synth-gguf: wrote %s (%s, %s)\n", out, c.name, type);
    return 0;
}
