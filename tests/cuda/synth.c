/* synth.c - see synth.h. */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"

size_t synth_bytes(uint32_t type, int64_t N, int64_t K) {
    uint64_t rb = 0;
    if (ls_type_nbytes(type, (uint64_t)K, &rb, NULL)) return 0;
    return (size_t)rb * (size_t)N;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static uint16_t h16(float f) { return ls_f32_to_fp16(f); }

void synth_weights(uint32_t type, uint64_t seed, int64_t N, int64_t K, float scale, void *out) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
    uint8_t *o = out;
    const size_t total = synth_bytes(type, N, K);
    if (type == LS_TYPE_F32 || type == LS_TYPE_F16 || type == LS_TYPE_BF16) {
        for (int64_t i = 0; i < N * K; i++) {
            float v = (synth_unif(&s) * 2.0f - 1.0f) * scale * 1.7f;
            if (type == LS_TYPE_F32) memcpy(o + 4 * i, &v, 4);
            else if (type == LS_TYPE_F16) put16(o + 2 * i, h16(v));
            else { uint32_t b; memcpy(&b, &v, 4); put16(o + 2 * i, (uint16_t)(b >> 16)); }
        }
        return;
    }
    for (size_t i = 0; i + 8 <= total; i += 8) {
        uint64_t r = synth_next(&s);
        memcpy(o + i, &r, 8);
    }
    for (size_t i = total & ~(size_t)7; i < total; i++) o[i] = (uint8_t)synth_next(&s);
    const ls_type_info *ti = ls_type_get(type);
    const size_t nblk = total / ti->block_bytes;
    for (size_t bi = 0; bi < nblk; bi++) {
        uint8_t *b = o + bi * ti->block_bytes;
        const float j = 0.75f + 0.5f * synth_unif(&s); /* per-block jitter of the scale */
        switch (type) {
        case LS_TYPE_Q4_0: put16(b, h16(scale * j / 4.6f)); break;
        case LS_TYPE_Q5_0: put16(b, h16(scale * j / 9.2f)); break;
        case LS_TYPE_Q8_0: put16(b, h16(scale * j / 73.0f)); break;
        case LS_TYPE_Q4_1: put16(b, h16(scale * j / 4.6f)); put16(b + 2, h16(-7.5f * scale * j / 4.6f)); break;
        case LS_TYPE_Q5_1: put16(b, h16(scale * j / 9.2f)); put16(b + 2, h16(-15.5f * scale * j / 9.2f)); break;
        case LS_TYPE_MXFP4: {
            int e = 128 + (int)lrintf(log2f(scale * j / 5.0f));
            b[0] = (uint8_t)(e < 2 ? 2 : e > 250 ? 250 : e);
            break;
        }
        case LS_TYPE_Q4_K: case LS_TYPE_Q5_K: {
            const float q = type == LS_TYPE_Q4_K ? 4.6f : 9.2f;
            put16(b, h16(scale * j / (q * 32.0f)));
            put16(b + 2, h16(scale * j / (q * 32.0f) * 7.5f * (type == LS_TYPE_Q4_K ? 1.0f : 2.0f)));
            break;
        }
        case LS_TYPE_Q6_K: put16(b + 208, h16(scale * j / (18.5f * 64.0f))); break;
        default: break;
        }
    }
}

static ls_status add_mat(gguf_writer *w, const char *name, uint32_t type, int64_t N, int64_t K, float scale,
                         uint64_t seed, ls_err *err) {
    const size_t nb = synth_bytes(type, N, K);
    void *buf = malloc(nb ? nb : 1);
    if (!buf) return ls_err_set(err, LS_E_NOMEM, "out of memory (%s)", name);
    synth_weights(type, seed, N, K, scale, buf);
    const uint64_t ne[2] = {(uint64_t)K, (uint64_t)N};
    ls_status st = gguf_writer_add_tensor(w, name, type, 2, ne, buf, nb);
    free(buf);
    return st;
}

static ls_status add_vec(gguf_writer *w, const char *name, int64_t n, uint64_t seed, float lo, float hi) {
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return LS_E_NOMEM;
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * synth_unif(&s);
    const uint64_t ne[1] = {(uint64_t)n};
    ls_status st = gguf_writer_add_tensor(w, name, LS_TYPE_F32, 1, ne, v, (uint64_t)n * sizeof(float));
    free(v);
    return st;
}
static ls_status add_norm(gguf_writer *w, const char *name, int64_t n, uint64_t seed) {
    return add_vec(w, name, n, seed, 0.8f, 1.2f);
}

/* Every tokenizer.* key of `from`, copied with its type (a real vocabulary, so other
 * engines can load the file). */
static ls_status copy_vocab(gguf_writer *w, const gguf_file *from, ls_err *err) {
    for (uint64_t i = 0; i < gguf_n_kv(from); i++) {
        const gguf_kv *kv = gguf_kv_at(from, i);
        char key[256];
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        if (strncmp(key, "tokenizer.", 10)) continue;
        ls_status st = gguf_writer_add_value(w, key, &kv->value);
        if (st) return err && err->code ? st : ls_err_set(err, st, "copying %s", key);
    }
    return LS_OK;
}

/* The file of cfg and seed, built in memory; vocab: copy its tokenizer (n_vocab is then
 * its token count), or NULL for placeholder tokens. */
static gguf_writer *synth_writer(const synth_cfg *c0, uint64_t seed, const gguf_file *vocab, ls_err *err) {
    synth_cfg cc = *c0;
    const synth_cfg *c = &cc;
    const gguf_value *tv = vocab ? gguf_find(vocab, "tokenizer.ggml.tokens") : NULL;
    if (vocab && (!tv || tv->type != GGUF_VT_ARRAY)) {
        ls_err_set(err, LS_E_FORMAT, "the vocabulary file has no tokenizer.ggml.tokens");
        return NULL;
    }
    if (tv) cc.n_vocab = (int32_t)tv->v.arr.n;
    gguf_writer *w = gguf_writer_create();
    if (!w) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    const int64_t E = c->n_embd, D = c->head_dim ? c->head_dim : E / c->n_head, KV = (int64_t)c->n_head_kv * D,
                  QD = (int64_t)c->n_head * D, F = c->n_ff;
    const char *a = c->arch ? c->arch : "llama";
    char key[128];
#define KEY(suf) (snprintf(key, sizeof key, "%s." suf, a), key)
    gguf_writer_add_str(w, "general.architecture", a);
    gguf_writer_add_str(w, "general.name", c->name);
    gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)c->n_ctx_train);
    gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)E);
    const int32_t n_blk = c->n_layer + ((c->feats & SYNTH_MTP) ? 1 : 0);
    gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)n_blk);
    if (c->feats & SYNTH_MTP) gguf_writer_add_u32(w, KEY("nextn_predict_layers"), 1);
    const int32_t n_hv = (c->feats & SYNTH_MTP_VOCAB) ? (c->n_vocab + 2) / 3 : c->n_vocab;
    if (c->feats & SYNTH_MTP_VOCAB) {
        int32_t *hv = malloc((size_t)n_hv * sizeof *hv);
        if (!hv) {
            ls_err_set(err, LS_E_NOMEM, "out of memory");
            gguf_writer_free(w);
            return NULL;
        }
        for (int32_t i = 0; i < n_hv; i++) hv[i] = 3 * i;
        gguf_writer_add_arr(w, "lockstep.mtp.head_vocab", GGUF_VT_INT32, hv, (uint64_t)n_hv);
        free(hv);
    }
    gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)F);
    gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    if (c->head_dim) {
        gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)D);
        gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)D);
    }
    if (c->swa) gguf_writer_add_u32(w, KEY("attention.sliding_window"), (uint32_t)c->swa);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    gguf_writer_add_f32(w, KEY("rope.freq_base"), c->rope_base);
    if (c->yarn_factor > 0.0f) {
        gguf_writer_add_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_writer_add_f32(w, KEY("rope.scaling.factor"), c->yarn_factor);
        gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->yarn_orig);
        gguf_writer_add_f32(w, KEY("rope.scaling.attn_factor"), c->yarn_attn);
    }
    if (vocab) {
        gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)c->n_vocab);
        if (copy_vocab(w, vocab, err)) {
            gguf_writer_free(w);
            return NULL;
        }
    } else {
        gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
        char **toks = malloc((size_t)c->n_vocab * sizeof *toks);
        char *tbuf = malloc((size_t)c->n_vocab * 12);
        if (!toks || !tbuf) {
            free(toks);
            free(tbuf);
            gguf_writer_free(w);
            ls_err_set(err, LS_E_NOMEM, "out of memory");
            return NULL;
        }
        for (int32_t i = 0; i < c->n_vocab; i++) {
            toks[i] = tbuf + (size_t)i * 12;
            snprintf(toks[i], 12, "t%d", i);
        }
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)c->n_vocab);
        free(toks);
        free(tbuf);
    }
    const float ws = 1.0f / sqrtf((float)E), wf = 1.0f / sqrtf((float)F);
    ls_status st = add_mat(w, "token_embd.weight", c->t_embd, c->n_vocab, E, 1.0f, seed + 1, err);
    if (!st) st = add_norm(w, "output_norm.weight", E, seed + 2);
    if (!st && c->t_out >= 0) st = add_mat(w, "output.weight", (uint32_t)c->t_out, c->n_vocab, E, ws, seed + 3, err);
    if (!st && (c->feats & SYNTH_ROPE_FREQS)) { /* llama3-style factors: 1 (high frequencies) .. 8 (low) */
        const int64_t h = D / 2;
        float *v = malloc((size_t)h * sizeof *v);
        if (!v) st = LS_E_NOMEM;
        for (int64_t i = 0; v && i < h; i++) v[i] = 1.0f + 7.0f * (float)i / (float)(h > 1 ? h - 1 : 1);
        const uint64_t ne[1] = {(uint64_t)h};
        if (v) st = gguf_writer_add_tensor(w, "rope_freqs.weight", LS_TYPE_F32, 1, ne, v, (uint64_t)h * sizeof(float));
        free(v);
    }
    char name[96];
    for (int32_t l = 0; l < n_blk && !st; l++) {
        const uint64_t ls = seed + 1000 * (uint64_t)(l + 1);
#define M_(suf, t, n, k, sc, o)                                           \
    if (!st) {                                                            \
        snprintf(name, sizeof name, "blk.%d." suf ".weight", l);          \
        st = add_mat(w, name, (t), (n), (k), (sc), ls + (o), err);        \
    }
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        st = add_norm(w, name, E, ls + 1);
        M_("attn_q", c->t_q, QD, E, ws, 2)
        M_("attn_k", c->t_k, KV, E, ws, 3)
        M_("attn_v", c->t_v, KV, E, ws, 4)
#define V_(suf, n, o, lo, hi)                                             \
    if (!st) {                                                            \
        snprintf(name, sizeof name, "blk.%d." suf, l);                    \
        st = add_vec(w, name, (n), ls + (o), (lo), (hi));                 \
    }
        if (c->feats & SYNTH_BIAS) {
            V_("attn_q.bias", QD, 20, -0.5f, 0.5f)
            V_("attn_k.bias", KV, 21, -0.5f, 0.5f)
            V_("attn_v.bias", KV, 22, -0.5f, 0.5f)
        }
        if (c->feats & SYNTH_QK_NORM) {
            V_("attn_q_norm.weight", D, 23, 0.8f, 1.2f)
            V_("attn_k_norm.weight", D, 24, 0.8f, 1.2f)
        }
        M_("attn_output", c->t_o, E, QD, ws, 5)
        if (c->feats & SYNTH_POST) {
            V_("post_attention_norm.weight", E, 25, 0.8f, 1.2f)
            V_("post_ffw_norm.weight", E, 26, 0.8f, 1.2f)
        }
#undef V_
        if (!st) {
            snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
            st = add_norm(w, name, E, ls + 6);
        }
        M_("ffn_gate", c->t_gate, F, E, ws, 7)
        M_("ffn_up", c->t_up, F, E, ws, 8)
        M_("ffn_down", c->t_down, E, F, wf, 9)
        if (l == c->n_layer) { /* the MTP module's own tensors */
            M_("nextn.eh_proj", c->t_o, E, 2 * E, ws, 30)
            const char *nv[3] = {"enorm", "hnorm", "shared_head_norm"};
            for (int i = 0; i < 3 && !st; i++) {
                snprintf(name, sizeof name, "blk.%d.nextn.%s.weight", l, nv[i]);
                st = add_norm(w, name, E, ls + 31 + (uint64_t)i);
            }
            if (c->t_out >= 0) { /* its own head and embedding (F16) */
                M_("nextn.shared_head_head", 1, n_hv, E, ws, 34)
                M_("nextn.embed_tokens", 1, c->n_vocab, E, 1.0f, 35)
            }
        }
#undef M_
    }
#undef KEY
    if (st) {
        if (err && !err->code) ls_err_set(err, st, "synthetic model: writer failed");
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

const synth_cfg *synth_families(int *n) {
    /* name, vocab, embd, layers, heads, kv heads, ff, ctx; q k v o gate up down; embd; out (-1 tied); rope base;
     * arch, head_dim, swa, feats, yarn factor, yarn orig, yarn attn */
    static const synth_cfg k[] = {
        {"llama3 (rope_freqs.weight, Q8_0/Q5_0/F16/Q4_0, F16 head)", 2048, 256, 2, 4, 2, 512, 8192, 8, 8, 6, 1, 6, 8, 2,
         8, 1, 500000.0f, "llama", 0, 0, SYNTH_ROPE_FREQS, 0, 0, 0},
        {"mistral (Q4_0, Q6_K head)", 2048, 256, 2, 8, 2, 512, 4096, 2, 2, 2, 2, 2, 2, 2, 2, 14, 10000.0f, "mistral", 0, 0,
         0, 0, 0, 0},
        {"qwen2 (q/k/v biases, tied Q8_0)", 2048, 256, 2, 4, 2, 512, 4096, 8, 8, 6, 8, 6, 6, 2, 8, -1, 1000000.0f, "qwen2",
         0, 0, SYNTH_BIAS, 0, 0, 0},
        {"qwen2 YaRN (factor 4, 256 original positions, attn_factor 0.9; Q4_1)", 2048, 256, 2, 4, 2, 512, 4096, 3, 3, 3, 3,
         3, 3, 3, 8, -1, 1000000.0f, "qwen2", 0, 0, SYNTH_BIAS, 4.0f, 256, 0.9f},
        {"qwen3 (q/k norms, head_dim 64 != 128 / 4)", 2048, 128, 2, 4, 2, 384, 4096, 8, 8, 6, 1, 8, 8, 2, 8, 1, 1000000.0f,
         "qwen3", 64, 0, SYNTH_QK_NORM, 0, 0, 0},
        {"gemma3 (GeGLU fused, post-norms, window 11, head_dim 256, tied Q8_0)", 2048, 128, 6, 2, 1, 512, 4096, 8, 8, 6, 1,
         8, 8, 2, 8, -1, 1000000.0f, "gemma3", 256, 11, SYNTH_QK_NORM | SYNTH_POST, 0, 0, 0},
        {"gemma3 (GeGLU separate gate/up, 8 query heads of 256 per kv head)", 2048, 256, 6, 8, 1, 512, 4096, 8, 8, 6, 8, 6,
         8, 2, 8, -1, 1000000.0f, "gemma3", 256, 11, SYNTH_QK_NORM | SYNTH_POST, 0, 0, 0},
    };
    *n = (int)(sizeof k / sizeof k[0]);
    return k;
}

ls_status synth_write_file(const synth_cfg *c, uint64_t seed, const char *vocab_path, const char *path, ls_err *err) {
    gguf_file *vf = NULL;
    if (vocab_path && !(vf = gguf_open(vocab_path, err))) return err ? err->code : LS_E_IO;
    gguf_writer *w = synth_writer(c, seed, vf, err);
    ls_status st = w ? gguf_writer_write_file(w, path, err) : (err && err->code ? err->code : LS_E_NOMEM);
    gguf_writer_free(w);
    gguf_close(vf);
    return st;
}

ls_model *synth_model(const synth_cfg *c, uint64_t seed, void **out_buf, ls_err *err) {
    *out_buf = NULL;
    gguf_writer *w = synth_writer(c, seed, NULL, err);
    if (!w) return NULL;
    void *buf = NULL;
    size_t size = 0;
    ls_status st = gguf_writer_serialize(w, &buf, &size, err);
    gguf_writer_free(w);
    if (st) {
        free(buf);
        if (err && !err->code) ls_err_set(err, st, "synthetic model: writer failed");
        return NULL;
    }
    gguf_file *g = gguf_open_mem(buf, size, err);
    if (!g) {
        free(buf);
        return NULL;
    }
    ls_model *m = ls_model_load_gguf(g, &(ls_model_params){.size = sizeof(ls_model_params), .path = c->name}, err);
    if (!m) {
        free(buf);
        return NULL;
    }
    *out_buf = buf;
    return m;
}
