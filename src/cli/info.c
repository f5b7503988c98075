/* info.c - `lockstep info`: architecture and family, tensor types, limits, hyperparameters, tensors.
 * A file lockstep refuses exits 2 with the loader's message (the tensor, type or key). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char *info_help =
    "usage: lockstep info [-m MODEL] [--json]\n"
    "       lockstep info --isa\n"
    "\n"
    "  -m, --model PATH   GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "      --json         one JSON object: hyperparameters, metadata scalars, tensors\n"
    "      --isa          the kernels' instruction sets this CPU runs (no model needed)\n"
    "  -h, --help         this help\n";

int cli_info(int argc, char **argv) {
    const char *cmd = "info", *model_path = LS_DEFAULT_MODEL;
    bool json = false, isa = false;
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"json", no_argument, 0, 'j'},
                                         {"isa", no_argument, 0, 'i'},        {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'j': json = true; break;
        case 'i': isa = true; break;
        case 'h': fputs(info_help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (isa) { /* e.g. "scalar avx2 avx512" (LOCKSTEP_CPU_HIDE taken into account) */
        for (int i = 0; i < LS_ISA_COUNT; i++)
            if (ls_isa_supported((ls_isa)i)) printf("%s%s", i ? " " : "", ls_isa_name((ls_isa)i));
        printf("\n");
        return 0;
    }
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    ls_err err;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = model_path;
    mp.load = LS_MODEL_LOAD_META; /* the metadata and the checked tensor table: no weight is read */
    char cdir[4096];
    mp.cache_dir = cli_cache_dir(cdir, sizeof cdir); /* the file's hash, kept by its identity */
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "lockstep info: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    char *desc = ls_model_describe_json(m, &err);
    ls_model_free(m);
    if (!desc) {
        fprintf(stderr, "lockstep info: %s\n", err.msg);
        return 1;
    }
    if (json) {
        puts(desc);
        free(desc);
        return 0;
    }
    cJSON *doc = cJSON_Parse(desc);
    free(desc);
    if (!doc) {
        fprintf(stderr, "lockstep info: out of memory\n");
        return 1;
    }
#define NUM(obj, key) cJSON_GetNumberValue(cJSON_GetObjectItem((obj), (key)))
#define STR(obj, key) cJSON_GetStringValue(cJSON_GetObjectItem((obj), (key)))
    const cJSON *h = cJSON_GetObjectItem(doc, "hparams");
    printf("file:          %s (%.1f MiB, GGUF v%.0f", model_path, NUM(doc, "file_size") / 1048576.0, NUM(doc, "gguf_version"));
    if (NUM(doc, "shards") > 1) printf(", %.0f shards", NUM(doc, "shards"));
    printf(")\n");
    const char *name = STR(doc, "name");
    printf("architecture:  %s%s%s\n", STR(doc, "architecture"), name && name[0] ? "  name: " : "", name ? name : "");
    printf("family:        %s (", STR(doc, "family"));
    const cJSON *it;
    int k0 = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(doc, "features")) printf(k0++ ? ", %s" : "%s", it->valuestring);
    printf(")\ntypes:        ");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(doc, "tensor_types")) printf(" %s x%.0f", it->string, it->valuedouble);
    printf("\n");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(doc, "limits")) printf("unsupported:   %s\n", it->valuestring);
    printf("layers %.0f, embd %.0f, ff %.0f, heads %.0f (kv %.0f), head dim %.0f, rope dim %.0f\n", NUM(h, "n_layer"),
           NUM(h, "n_embd"), NUM(h, "n_ff"), NUM(h, "n_head"), NUM(h, "n_head_kv"), NUM(h, "head_dim"), NUM(h, "rope_dim"));
    printf("context %.0f, rope base %g scale %g, rms eps %g, output %s\n", NUM(h, "n_ctx_train"), NUM(h, "rope_freq_base"),
           NUM(h, "rope_freq_scale"), NUM(h, "norm_eps"),
           cJSON_IsTrue(cJSON_GetObjectItem(h, "tied_output")) ? "tied to token_embd" : "separate");
    if (cJSON_GetObjectItem(h, "sliding_window"))
        printf("sliding window %.0f positions on every layer but each %.0fth (local rope base 10000)\n",
               NUM(h, "sliding_window"), NUM(h, "sliding_window_pattern"));
    if (cJSON_GetObjectItem(h, "yarn_original_context"))
        printf("yarn: original context %.0f, attn factor %g, beta fast %g slow %g\n", NUM(h, "yarn_original_context"),
               NUM(h, "yarn_attn_factor"), NUM(h, "yarn_beta_fast"), NUM(h, "yarn_beta_slow"));
    printf("vocab:         %.0f tokens\n", NUM(doc, "vocab_size"));
    /* the family in use (or "jinja": the template alone, through the engine), and the
     * file's template summarised: its size and first line */
    const char *tsrc = STR(cJSON_GetObjectItem(doc, "metadata"), "tokenizer.chat_template");
    printf("chat template: %s", STR(doc, "chat_template"));
    if (STR(doc, "chat_template_error")) printf(" (%s)", STR(doc, "chat_template_error"));
    if (tsrc) {
        while (*tsrc == '\n' || *tsrc == ' ' || *tsrc == '\t' || *tsrc == '\r') tsrc++;
        size_t n = strcspn(tsrc, "\r\n"), lines = 1;
        for (const char *c = tsrc; *c; c++) lines += *c == '\n';
        printf("\n               the file's: %zu bytes, %zu lines, first \"%.*s%s\"", strlen(tsrc), lines,
               (int)(n > 72 ? 72 : n), tsrc, n > 72 ? "..." : "");
    }
    printf("\n");
    printf("weights read per token: %.1f MiB\n", NUM(doc, "weight_bytes_per_token") / 1048576.0);
    printf("sha256:        %s\n", STR(doc, "sha256"));
    const cJSON *ts = cJSON_GetObjectItem(doc, "tensors"), *t;
    printf("tensors (%d):\n", cJSON_GetArraySize(ts));
    cJSON_ArrayForEach(t, ts) {
        printf("  %-32s %-6s [", STR(t, "name"), STR(t, "type"));
        const cJSON *d;
        int k = 0;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(t, "shape")) printf(k++ ? ", %.0f" : "%.0f", d->valuedouble);
        printf("]\n");
    }
#undef NUM
#undef STR
    cJSON_Delete(doc);
    return 0;
}
