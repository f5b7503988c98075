/* mtp_data.c - `lockstep mtp-data`: the training data of an MTP module fitted by
 * self-distillation (tools/fit_mtp.py).  The model answers each prompt itself (seeded
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
 *   mtp_top1.i32 (n_tokens - n_seqs)  with --module FILE: the module's top token for each sequence's
 *                                     positions 0..n-2 (its forward over h_i and t_(i+1), as --spec
 *                                     mtp drafts), so the fitter can check lockstep computes its function */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model/model_impl.h"
#include "sample/sample.h"
#include "util/util.h"

static const char *mtp_data_help =
    "usage: lockstep mtp-data [-m MODEL] --prompts FILE --out DIR [flags]\n"
    "\n"
    "Writes the training data of an MTP module (tools/fit_mtp.py runs it; docs/mtp.md):\n"
    "the model answers each prompt itself and the hidden state of every position is kept.\n"
    "\n"
    "  -m, --model PATH      GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "      --prompts FILE    one prompt per line (a user message; blank lines are skipped)\n"
    "      --out DIR         the output folder (created; its files are replaced)\n"
    "  -n, --n-predict N     tokens to generate per prompt (default 256; fewer at end of generation)\n"
    "      --max-prompts N   use the first N prompts only (default all)\n"
    "      --temp T          sampling temperature (default 0.8)\n"
    "      --seed S          sampling seed (default 1); prompt i samples with seed S + i\n"
    "      --raw             the prompts are raw text, not chat messages\n"
    "      --module FILE     also run this MTP module over every position: mtp_top1.i32\n"
    "  -t, --threads N       threads (default: all CPUs)\n"
    "  -h, --help            this help\n";

static FILE *open_out(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) fprintf(stderr, "lockstep mtp-data: cannot write '%s': %s\n", path, strerror(errno));
    return f;
}

/* A tensor of the model, dequantized to f32 rows into DIR/weights/NAME.f32; its shape into meta. */
static bool dump_tensor(const ls_model *m, const char *dir, const char *name, cJSON *tensors) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return true; /* absent: the family has no such tensor */
    const ls_type_info *ti = ls_type_get(t->type);
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3], cols = t->ne[0];
    if (!ti || !ti->can_dequant || rows == 0) {
        fprintf(stderr, "lockstep mtp-data: tensor '%s' cannot be dequantized\n", name);
        return false;
    }
    char fn[256];
    snprintf(fn, sizeof fn, "weights/%s.f32", name);
    FILE *f = open_out(dir, fn);
    float *row = malloc(cols * sizeof *row);
    bool ok = f && row;
    const size_t rb = t->nbytes / rows;
    for (uint64_t r = 0; ok && r < rows; r++) {
        ls_dequant_row(t->type, (const uint8_t *)t->data + r * rb, row, (int64_t)cols);
        ok = fwrite(row, sizeof *row, cols, f) == cols;
    }
    if (f && fclose(f) != 0) ok = false;
    free(row);
    cJSON *shape = cJSON_CreateArray();
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)rows));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)cols));
    cJSON_AddItemToObject(tensors, name, shape);
    if (!ok) fprintf(stderr, "lockstep mtp-data: cannot write tensor '%s'\n", name);
    return ok;
}

static const char *const k_block_names[] = {
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
    "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight", "post_attention_norm.weight",
    "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight",
};

int cli_mtp_data(int argc, char **argv) {
    const char *cmd = "mtp-data";
    const char *model_path = LS_DEFAULT_MODEL, *prompts_path = NULL, *out = NULL;
    long long n_predict = 256, max_prompts = 0, threads = 0;
    double temp = 0.8;
    uint64_t seed = 1;
    bool raw = false;
    enum { O_PROMPTS = 256, O_OUT, O_MAXP, O_TEMP, O_SEED, O_RAW, O_MODULE };
    const char *module = NULL;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"prompts", required_argument, 0, O_PROMPTS},
        {"out", required_argument, 0, O_OUT},      {"n-predict", required_argument, 0, 'n'},
        {"max-prompts", required_argument, 0, O_MAXP}, {"temp", required_argument, 0, O_TEMP},
        {"seed", required_argument, 0, O_SEED},    {"raw", no_argument, 0, O_RAW},
        {"module", required_argument, 0, O_MODULE},
        {"threads", required_argument, 0, 't'},    {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:n:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case O_PROMPTS: prompts_path = optarg; break;
        case O_OUT: out = optarg; break;
        case 'n': if (!cli_parse_int(cmd, "--n-predict", optarg, 1, 1 << 20, &n_predict)) return LS_EXIT_USAGE; break;
        case O_MAXP: if (!cli_parse_int(cmd, "--max-prompts", optarg, 1, 1 << 24, &max_prompts)) return LS_EXIT_USAGE; break;
        case O_TEMP: if (!cli_parse_float(cmd, "--temp", optarg, 0.0, 100.0, &temp)) return LS_EXIT_USAGE; break;
        case O_SEED: if (!cli_parse_u64(cmd, "--seed", optarg, &seed)) return LS_EXIT_USAGE; break;
        case O_RAW: raw = true; break;
        case O_MODULE: module = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case 'h': fputs(mtp_data_help, stdout); return 0;
        default: fputs(mtp_data_help, stderr); return LS_EXIT_USAGE;
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (!prompts_path || !out) return cli_usage_error(cmd, "--prompts FILE and --out DIR are required");
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    FILE *pf = fopen(prompts_path, "r");
    if (!pf) return cli_usage_error(cmd, "cannot read prompts file '%s'", prompts_path);
    char wdir[4096];
    snprintf(wdir, sizeof wdir, "%s/weights", out);
    if ((mkdir(out, 0777) != 0 && errno != EEXIST) || (mkdir(wdir, 0777) != 0 && errno != EEXIST)) {
        fclose(pf);
        return cli_usage_error(cmd, "cannot create '%s': %s", wdir, strerror(errno));
    }
    if (threads == 0) threads = cli_default_threads();

    int rc = LS_EXIT_USAGE;
    ls_err err;
    ls_err_clear(&err);
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = model_path;
    mp.mtp_path = module;
    ls_model *m = ls_model_load(&mp, &err);
    ls_ctx *ctx = NULL;
    ls_fwd *mf = NULL;
    ls_kv_store *mkv = NULL;
    int32_t *mtable = NULL, *mpos = NULL, *mseq = NULL, *mrow = NULL;
    FILE *ft = NULL, *fs = NULL, *fh = NULL, *fm1 = NULL;
    int32_t *toks = NULL;
    float *logits = NULL, *hidden = NULL;
    void *scratch = NULL;
    char *line = NULL, *text = NULL;
    size_t line_cap = 0;
    cJSON *meta = cJSON_CreateObject(), *tensors = cJSON_CreateObject();
    if (!m) {
        fprintf(stderr, "lockstep mtp-data: cannot load '%s': %s\n", model_path, err.msg);
        goto out;
    }
    const ls_hparams *hp = ls_model_hparams(m);
    const int32_t n_ctx = (int32_t)(hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    const int32_t nv = (int32_t)hp->n_vocab, E = (int32_t)hp->n_embd;
    ls_ctx_params cp = {.n_ctx = n_ctx, .n_batch = 512, .n_threads = (int32_t)threads, .isa = -1};
    if (!(ctx = ls_ctx_create(m, cp, &err))) {
        fprintf(stderr, "lockstep mtp-data: %s\n", err.msg);
        goto out;
    }
    toks = malloc((size_t)n_ctx * sizeof *toks);
    logits = malloc((size_t)nv * sizeof *logits);
    hidden = malloc((size_t)n_ctx * E * sizeof *hidden);
    scratch = malloc(ls_sampler_scratch_bytes(nv));
    if (!toks || !logits || !hidden || !scratch) {
        fprintf(stderr, "lockstep mtp-data: out of memory\n");
        goto out;
    }
    if (!(ft = open_out(out, "tokens.i32")) || !(fs = open_out(out, "seqs.i32")) || !(fh = open_out(out, "hidden.f32")))
        goto out;
    enum { MROWS = 64 };
    if (module) { /* the module's forward, as the mtp drafter runs it (spec.c) */
        ls_fwd_params fp = {.n_rows = MROWS, .n_ctx = n_ctx, .n_threads = (int32_t)threads, .isa = -1, .mtp = true};
        int32_t nb = (n_ctx + LS_KV_BLOCK - 1) / LS_KV_BLOCK;
        if (!(mf = ls_fwd_create(m, fp, &err)) || !(mkv = ls_kv_store_create(m, nb, &err))) {
            fprintf(stderr, "lockstep mtp-data: %s\n", err.msg);
            goto out;
        }
        mtable = malloc((size_t)nb * sizeof *mtable);
        mpos = malloc(MROWS * sizeof *mpos);
        mseq = calloc(MROWS, sizeof *mseq);
        mrow = malloc(MROWS * sizeof *mrow);
        free(logits);
        logits = malloc((size_t)MROWS * nv * sizeof *logits);
        if (!mtable || !mpos || !mseq || !mrow || !logits || !(fm1 = open_out(out, "mtp_top1.i32"))) goto out;
        for (int32_t i = 0; i < nb; i++) mtable[i] = i;
    }
    rc = 1;
    long long n_tokens = 0, n_seqs = 0, n_gen = 0, n_prompt = 0;
    double t0 = ls_now_ms();
    ssize_t len;
    while ((len = getline(&line, &line_cap, pf)) >= 0 && (!max_prompts || n_prompt < max_prompts)) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        const char *input = line;
        free(text);
        text = NULL;
        if (!raw) {
            ls_chat_msg msg = {"user", line};
            if (ls_model_apply_chat(m, &msg, 1, true, &text, &err)) {
                fprintf(stderr, "lockstep mtp-data: %s (use --raw for plain prompts)\n", err.msg);
                goto out;
            }
            input = text;
        }
        size_t n = 0;
        if (ls_model_tokenize(m, input, strlen(input), true, true, toks, (size_t)n_ctx, &n, &err)) {
            fprintf(stderr, "lockstep mtp-data: prompt %lld: %s\n", n_prompt + 1, err.msg);
            goto out;
        }
        ls_sampler_params sp = {.temperature = (float)temp, .top_p = 1.0f, .seed = seed + (uint64_t)n_prompt};
        n_prompt++;
        if ((int64_t)n + 2 > n_ctx) continue; /* too long to continue */
        if (ls_ctx_eval(ctx, toks, (int32_t)n, 0, logits, false, &err)) goto eval_fail;
        for (long long g = 0; g < n_predict && (int32_t)n < n_ctx; g++) {
            int32_t t = ls_sample(&sp, logits, nv, (uint64_t)n, scratch);
            toks[n++] = t;
            n_gen++;
            if (ls_tokenizer_is_eog(ls_model_tokenizer(m), t) || g + 1 == n_predict || (int32_t)n == n_ctx) break;
            if (ls_ctx_eval(ctx, &t, 1, (int32_t)n - 1, logits, false, &err)) goto eval_fail;
        }
        /* every position's hidden state, in one pass (the same bits as the steps: P1, P3) */
        if (ls_ctx_eval_hidden(ctx, toks, (int32_t)n, 0, hidden, &err)) goto eval_fail;
        int32_t n32 = (int32_t)n;
        if (fwrite(toks, sizeof *toks, n, ft) != n || fwrite(&n32, sizeof n32, 1, fs) != 1 ||
            fwrite(hidden, sizeof(float) * (size_t)E, n, fh) != n) {
            fprintf(stderr, "lockstep mtp-data: write failed: %s\n", strerror(errno));
            goto out;
        }
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
                const float *l = logits + (size_t)j * nv;
                int32_t best = 0;
                for (int32_t v = 1; v < nv; v++)
                    if (l[v] > l[best]) best = v;
                if (fwrite(&best, sizeof best, 1, fm1) != 1) goto out;
            }
            i += cnt;
        }
        n_tokens += (long long)n;
        n_seqs++;
        fprintf(stderr, "\r[mtp-data: %lld sequences, %lld tokens (%lld generated), %.0f s]", n_seqs, n_tokens,
                n_gen, (ls_now_ms() - t0) / 1000.0);
    }
    fputc('\n', stderr);
    if (n_seqs == 0) {
        fprintf(stderr, "lockstep mtp-data: no prompt in '%s'\n", prompts_path);
        goto out;
    }
    char name[96];
    bool ok = dump_tensor(m, out, "token_embd.weight", tensors) && dump_tensor(m, out, "output_norm.weight", tensors) &&
              dump_tensor(m, out, "output.weight", tensors);
    for (size_t i = 0; ok && i < sizeof k_block_names / sizeof k_block_names[0]; i++) {
        snprintf(name, sizeof name, "blk.%u.%s", hp->n_layer - 1, k_block_names[i]);
        ok = dump_tensor(m, out, name, tensors);
    }
    if (!ok) goto out;
    ls_model_info mi = LS_MODEL_INFO_INIT;
    if (ls_model_get_info(m, &mi, &err) || !mi.sha256[0]) {
        fprintf(stderr, "lockstep mtp-data: cannot hash the model: %s\n", err.msg);
        goto out;
    }
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
    cJSON_AddNumberToObject(meta, "n_tokens", (double)n_tokens);
    cJSON_AddNumberToObject(meta, "n_seqs", (double)n_seqs);
    cJSON_AddNumberToObject(meta, "n_generated", (double)n_gen);
    cJSON_AddNumberToObject(meta, "temperature", temp);
    cJSON_AddNumberToObject(meta, "seed", (double)seed);
    cJSON_AddItemToObject(meta, "tensors", tensors);
    tensors = NULL;
    char *js = cJSON_Print(meta);
    FILE *fm = js ? open_out(out, "meta.json") : NULL;
    bool wrote = fm && fputs(js, fm) >= 0;
    if (fm && fclose(fm) != 0) wrote = false;
    free(js);
    if (!wrote) goto out;
    fprintf(stderr, "lockstep mtp-data: %lld sequences, %lld tokens in '%s' (%.1f s)\n", n_seqs, n_tokens, out,
            (ls_now_ms() - t0) / 1000.0);
    rc = 0;
    goto out;
eval_fail:
    fprintf(stderr, "lockstep mtp-data: %s\n", err.msg);
out:
    if (ft && fclose(ft) != 0) rc = rc ? rc : 1;
    if (fs && fclose(fs) != 0) rc = rc ? rc : 1;
    if (fh && fclose(fh) != 0) rc = rc ? rc : 1;
    if (fm1 && fclose(fm1) != 0) rc = rc ? rc : 1;
    ls_fwd_free(mf);
    ls_kv_store_free(mkv);
    free(mtable);
    free(mpos);
    free(mseq);
    free(mrow);
    fclose(pf);
    cJSON_Delete(meta);
    cJSON_Delete(tensors);
    free(line);
    free(text);
    free(toks);
    free(logits);
    free(hidden);
    free(scratch);
    ls_ctx_free(ctx);
    ls_model_free(m);
    return rc;
}
