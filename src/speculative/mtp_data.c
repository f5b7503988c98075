/* mtp_data.c - ls_mtp_data_write (`lockstep mtp-data`): the training data of an MTP module
 * fitted by self-distillation (tools/fit_mtp.py).  The model answers each prompt itself (seeded
 * sampling through the engine's forward), and every position's last hidden state (before
 * the final norm: what the MTP forward continues from) is written beside the tokens,
 * with the weights the fitter starts from, dequantized.
 *
 * The output folder (every array raw little-endian, row-major):
 *   tokens.i32   (n_tokens)           every sequence's tokens, prompt and answer, one after another
 *   seqs.i32     (n_seqs)             each sequence's length, in order
 *   hidden.f32   (n_tokens, n_embd)   the hidden state at each token's position
 *   weights/NAME.f32 (rows, cols)     token_embd.weight, output_norm.weight, output.weight when the
 *                                     head is not tied, and the last trunk block's tensors
 *   meta.json                         hyperparameters, the model's sha256, the files and their shapes
 *   mtp_top1.i32 (n_tokens - n_seqs)  with mtp_top1 (--module FILE): the module's top token for each sequence's
 *                                     positions 0..n-2 (its forward over h_i and t_(i+1), as --spec
 *                                     mtp drafts), so the fitter can check lockstep computes its function */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "model/model_impl.h"
#include "sample/sample.h"
#include "util/alloc.h"
#include "util/util.h"

static FILE *open_out(const char *dir, const char *name, ls_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) ls_err_set(err, LS_E_IO, "cannot write '%s': %s", path, strerror(errno));
    return f;
}

/* A tensor of the model, dequantized to f32 rows into DIR/weights/NAME.f32; its shape into tensors. */
static ls_status dump_tensor(const ls_model *m, const char *dir, const char *name, cJSON *tensors, ls_err *err) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return LS_OK; /* absent: the family has no such tensor */
    const ls_type_info *ti = ls_type_get(t->type);
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3], cols = t->ne[0];
    if (!ti || !ti->can_dequant || rows == 0)
        return ls_err_set(err, LS_E_UNSUPPORTED, "tensor '%s' cannot be dequantized", name);
    char fn[256];
    snprintf(fn, sizeof fn, "weights/%s.f32", name);
    FILE *f = open_out(dir, fn, err);
    if (!f) return LS_E_IO;
    float *row = ls_malloc(cols * sizeof *row);
    bool ok = row != NULL;
    const size_t rb = t->nbytes / rows;
    for (uint64_t r = 0; ok && r < rows; r++) {
        ls_dequant_row(t->type, (const uint8_t *)t->data + r * rb, row, (int64_t)cols);
        ok = fwrite(row, sizeof *row, cols, f) == cols;
    }
    if (fclose(f) != 0) ok = false;
    free(row);
    if (!ok) return ls_err_set(err, LS_E_IO, "cannot write tensor '%s' into '%s'", name, dir);
    cJSON *shape = cJSON_CreateArray();
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)rows));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)cols));
    cJSON_AddItemToObject(tensors, name, shape);
    return LS_OK;
}

static const char *const k_block_names[] = {
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
    "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight", "post_attention_norm.weight",
    "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight",
};

static bool write_all(FILE *f, const void *p, size_t size, size_t n) { return fwrite(p, size, n, f) == n; }

/* meta.json: what tools/fit_mtp.py needs to rebuild the model's forward. */
static ls_status write_meta(const ls_model *m, const ls_mtp_data_params *p, const ls_mtp_data_result *r,
                            cJSON *tensors, ls_err *err) {
    const ls_hparams *hp = &m->hp;
    ls_model_info mi = LS_MODEL_INFO_INIT;
    if (ls_model_get_info(m, &mi, err)) return err ? err->code : LS_E_IO;
    if (!mi.sha256[0]) return ls_err_set(err, LS_E_IO, "cannot hash the model file");
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "arch", hp->arch);
    cJSON_AddStringToObject(meta, "name", hp->name);
    cJSON_AddStringToObject(meta, "model_sha256", mi.sha256);
    cJSON_AddNumberToObject(meta, "n_vocab", hp->n_vocab);
    cJSON_AddNumberToObject(meta, "n_embd", hp->n_embd);
    cJSON_AddNumberToObject(meta, "n_layer", hp->n_layer);
    cJSON_AddNumberToObject(meta, "n_head", hp->n_head);
    cJSON_AddNumberToObject(meta, "n_head_kv", hp->n_head_kv);
    cJSON_AddNumberToObject(meta, "head_dim", hp->head_dim);
    cJSON_AddNumberToObject(meta, "rope_dim", hp->rope_dim);
    cJSON_AddNumberToObject(meta, "n_ff", hp->n_ff);
    cJSON_AddNumberToObject(meta, "n_ctx_train", hp->n_ctx_train);
    cJSON_AddNumberToObject(meta, "norm_eps", hp->norm_eps);
    cJSON_AddNumberToObject(meta, "rope_base", hp->rope_base);
    cJSON_AddNumberToObject(meta, "rope_freq_scale", hp->rope_freq_scale);
    cJSON_AddBoolToObject(meta, "rope_yarn", hp->rope_yarn);
    cJSON_AddBoolToObject(meta, "rope_freqs", m->rope_freqs != NULL);
    cJSON_AddBoolToObject(meta, "rope_neox", (m->arch->feats & LS_AF_NEOX) != 0);
    cJSON_AddNumberToObject(meta, "embd_scale", hp->embd_scale);
    cJSON_AddStringToObject(meta, "act", m->arch->act == LS_ACT_GELU_TANH ? "gelu_tanh" : "silu");
    cJSON_AddBoolToObject(meta, "tied_output", hp->tied_output);
    cJSON_AddNumberToObject(meta, "n_tokens", (double)r->n_tokens);
    cJSON_AddNumberToObject(meta, "n_seqs", (double)r->n_seqs);
    cJSON_AddNumberToObject(meta, "n_generated", (double)r->n_generated);
    cJSON_AddNumberToObject(meta, "temperature", p->temperature);
    cJSON_AddNumberToObject(meta, "seed", (double)p->seed);
    cJSON_AddItemReferenceToObject(meta, "tensors", tensors);
    char *js = cJSON_Print(meta);
    cJSON_Delete(meta);
    ls_status st = LS_OK;
    FILE *fm = js ? open_out(p->out_dir, "meta.json", err) : NULL;
    if (!js) st = ls_err_set(err, LS_E_NOMEM, "out of memory");
    else if (!fm) st = LS_E_IO;
    else {
        bool ok = fputs(js, fm) >= 0;
        if (fclose(fm) != 0 || !ok) st = ls_err_set(err, LS_E_IO, "cannot write '%s/meta.json'", p->out_dir);
    }
    free(js);
    return st;
}

ls_status ls_mtp_data_write(const ls_model *m, const ls_mtp_data_params *pp, ls_mtp_data_result *res, ls_err *err) {
    ls_mtp_data_params p = LS_MTP_DATA_PARAMS_INIT;
    ls_status st = ls_params_take(&p, sizeof p, pp, "mtp data params", err);
    if (st) return st;
    if (!p.prompts || !p.out_dir) return ls_err_set(err, LS_E_INVALID, "a prompts file and an output folder are needed");
    if (p.n_predict < 1 || p.max_prompts < 0 || !(p.temperature >= 0.0f) || p.n_threads < 0)
        return ls_err_set(err, LS_E_INVALID, "bad parameters (n_predict %d, max_prompts %d, temperature %g)",
                          p.n_predict, p.max_prompts, (double)p.temperature);
    if (p.mtp_top1 && !ls_model_has_mtp(m))
        return ls_err_set(err, LS_E_INVALID, "the model has no MTP module to run (load one: mtp_path)");
    FILE *pf = fopen(p.prompts, "r");
    if (!pf) return ls_err_set(err, LS_E_IO, "cannot read prompts file '%s': %s", p.prompts, strerror(errno));
    char wdir[4096];
    snprintf(wdir, sizeof wdir, "%s/weights", p.out_dir);
    if ((mkdir(p.out_dir, 0777) != 0 && errno != EEXIST) || (mkdir(wdir, 0777) != 0 && errno != EEXIST)) {
        st = ls_err_set(err, LS_E_IO, "cannot create '%s': %s", wdir, strerror(errno));
        fclose(pf);
        return st;
    }
    const ls_hparams *hp = &m->hp;
    const int32_t n_ctx = (int32_t)(hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    const int32_t nv = (int32_t)hp->n_vocab, E = (int32_t)hp->n_embd;
    enum { MROWS = 64 };
    ls_mtp_data_result r = {.size = sizeof r};
    ls_ctx *ctx = NULL;
    ls_fwd *mf = NULL;
    ls_kv_store *mkv = NULL;
    int32_t *toks = NULL, *mtable = NULL, *mpos = NULL, *mseq = NULL, *mrow = NULL;
    float *logits = NULL, *hidden = NULL;
    void *scratch = NULL;
    char *line = NULL, *text = NULL;
    size_t line_cap = 0;
    FILE *ft = NULL, *fs = NULL, *fh = NULL, *fm1 = NULL;
    cJSON *tensors = cJSON_CreateObject();
    ls_ctx_params cp = {.n_ctx = n_ctx, .n_batch = 512, .n_threads = p.n_threads, .isa = -1};
    if (!(ctx = ls_ctx_create(m, cp, err))) {
        st = err ? err->code : LS_E_NOMEM;
        goto out;
    }
    toks = ls_malloc((size_t)n_ctx * sizeof *toks);
    logits = ls_malloc((size_t)(p.mtp_top1 ? MROWS : 1) * nv * sizeof *logits);
    hidden = ls_malloc((size_t)n_ctx * E * sizeof *hidden);
    scratch = ls_malloc(ls_sampler_scratch_bytes(nv));
    if (!toks || !logits || !hidden || !scratch || !tensors) {
        st = ls_err_set(err, LS_E_NOMEM, "out of memory");
        goto out;
    }
    if (!(ft = open_out(p.out_dir, "tokens.i32", err)) || !(fs = open_out(p.out_dir, "seqs.i32", err)) ||
        !(fh = open_out(p.out_dir, "hidden.f32", err))) {
        st = LS_E_IO;
        goto out;
    }
    if (p.mtp_top1) { /* the module's forward, as the mtp drafter runs it (spec.c) */
        ls_fwd_params fp = {.n_rows = MROWS, .n_ctx = n_ctx, .n_threads = p.n_threads, .isa = -1, .mtp = true};
        int32_t nb = (n_ctx + LS_KV_BLOCK - 1) / LS_KV_BLOCK;
        if (!(mf = ls_fwd_create(m, fp, err)) || !(mkv = ls_kv_store_create(m, nb, err))) {
            st = err ? err->code : LS_E_NOMEM;
            goto out;
        }
        mtable = ls_malloc((size_t)nb * sizeof *mtable);
        mpos = ls_malloc(MROWS * sizeof *mpos);
        mseq = ls_calloc(MROWS, sizeof *mseq);
        mrow = ls_malloc(MROWS * sizeof *mrow);
        if (!mtable || !mpos || !mseq || !mrow) {
            st = ls_err_set(err, LS_E_NOMEM, "out of memory");
            goto out;
        }
        if (!(fm1 = open_out(p.out_dir, "mtp_top1.i32", err))) {
            st = LS_E_IO;
            goto out;
        }
        for (int32_t i = 0; i < nb; i++) mtable[i] = i;
    }
    int64_t n_prompt = 0;
    ssize_t len;
    while ((len = getline(&line, &line_cap, pf)) >= 0 && (!p.max_prompts || n_prompt < p.max_prompts)) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        const char *input = line;
        free(text);
        text = NULL;
        if (!p.raw) {
            ls_chat_msg msg = {"user", line};
            if ((st = ls_model_apply_chat(m, &msg, 1, true, &text, err))) goto out;
            input = text;
        }
        size_t n = 0;
        if ((st = ls_model_tokenize(m, input, strlen(input), true, true, toks, (size_t)n_ctx, &n, err))) goto out;
        ls_sampler_params sp = {.temperature = p.temperature, .top_p = 1.0f, .seed = p.seed + (uint64_t)n_prompt};
        n_prompt++;
        if ((int64_t)n + 2 > n_ctx) continue; /* too long to continue */
        if ((st = ls_ctx_eval(ctx, toks, (int32_t)n, 0, logits, false, err))) goto out;
        for (int32_t g = 0; g < p.n_predict && (int32_t)n < n_ctx; g++) {
            int32_t t = ls_sample(&sp, logits, nv, (uint64_t)n, scratch);
            toks[n++] = t;
            r.n_generated++;
            if (ls_tokenizer_is_eog(m->tok, t) || g + 1 == p.n_predict || (int32_t)n == n_ctx) break;
            if ((st = ls_ctx_eval(ctx, &t, 1, (int32_t)n - 1, logits, false, err))) goto out;
        }
        /* every position's hidden state, in one pass (the same bits as the steps: P1, P3) */
        if ((st = ls_ctx_eval_hidden(ctx, toks, (int32_t)n, 0, hidden, err))) goto out;
        int32_t n32 = (int32_t)n;
        if (!write_all(ft, toks, sizeof *toks, n) || !write_all(fs, &n32, sizeof n32, 1) ||
            !write_all(fh, hidden, sizeof(float) * (size_t)E, n)) {
            st = ls_err_set(err, LS_E_IO, "cannot write into '%s': %s", p.out_dir, strerror(errno));
            goto out;
        }
        const int32_t *hv; /* a head over part of the vocabulary: rows of its tokens' logits */
        const int32_t nh = ls_model_mtp_vocab(m, &hv), w = nh ? nh : nv;
        for (int32_t i = 0; mf && i + 1 < n32;) { /* MTP row i: h_i with t_(i+1), at position i */
            int32_t cnt = n32 - 1 - i < MROWS ? n32 - 1 - i : MROWS;
            for (int32_t j = 0; j < cnt; j++) {
                mpos[j] = i + j;
                mrow[j] = j;
            }
            const int32_t *tables[1] = {mtable};
            ls_batch b = {cnt, toks + i + 1, mpos, mseq, tables, mrow, NULL, hidden + (size_t)i * E, NULL};
            ls_fwd_run(mf, mkv, &b, logits);
            for (int32_t j = 0; j < cnt; j++) {
                const float *l = logits + (size_t)j * w;
                int32_t best = 0;
                for (int32_t v = 1; v < w; v++)
                    if (l[v] > l[best]) best = v;
                if (nh) best = hv[best];
                if (!write_all(fm1, &best, sizeof best, 1)) {
                    st = ls_err_set(err, LS_E_IO, "cannot write into '%s'", p.out_dir);
                    goto out;
                }
            }
            i += cnt;
        }
        r.n_tokens += (int64_t)n;
        r.n_seqs++;
        if (p.on_progress) p.on_progress(p.progress_ud, r.n_seqs, r.n_tokens, r.n_generated);
    }
    if (r.n_seqs == 0) {
        st = ls_err_set(err, LS_E_INVALID, "no usable prompt in '%s'", p.prompts);
        goto out;
    }
    char name[96];
    if ((st = dump_tensor(m, p.out_dir, "token_embd.weight", tensors, err)) ||
        (st = dump_tensor(m, p.out_dir, "output_norm.weight", tensors, err)) ||
        (st = dump_tensor(m, p.out_dir, "output.weight", tensors, err)))
        goto out;
    for (size_t i = 0; i < sizeof k_block_names / sizeof k_block_names[0]; i++) {
        snprintf(name, sizeof name, "blk.%u.%s", hp->n_layer - 1, k_block_names[i]);
        if ((st = dump_tensor(m, p.out_dir, name, tensors, err))) goto out;
    }
    st = write_meta(m, &p, &r, tensors, err);
out:
    if (ft && fclose(ft) != 0 && !st) st = ls_err_set(err, LS_E_IO, "cannot write '%s/tokens.i32'", p.out_dir);
    if (fs && fclose(fs) != 0 && !st) st = ls_err_set(err, LS_E_IO, "cannot write '%s/seqs.i32'", p.out_dir);
    if (fh && fclose(fh) != 0 && !st) st = ls_err_set(err, LS_E_IO, "cannot write '%s/hidden.f32'", p.out_dir);
    if (fm1 && fclose(fm1) != 0 && !st) st = ls_err_set(err, LS_E_IO, "cannot write '%s/mtp_top1.i32'", p.out_dir);
    fclose(pf);
    cJSON_Delete(tensors);
    ls_fwd_free(mf);
    ls_kv_store_free(mkv);
    ls_ctx_free(ctx);
    free(mtable);
    free(mpos);
    free(mseq);
    free(mrow);
    free(line);
    free(text);
    free(toks);
    free(logits);
    free(hidden);
    free(scratch);
    if (res) {
        size_t n = res->size < sizeof r ? res->size : sizeof r;
        r.size = n;
        memcpy(res, &r, n);
    }
    return st;
}
