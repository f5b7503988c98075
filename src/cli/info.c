/* info.c - `lockstep info`: architecture, hyperparameters, tensors. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model/model.h"
#include "quant/quant.h"

static const char *info_help =
    "usage: lockstep info [-m MODEL] [--json]\n"
    "\n"
    "  -m, --model PATH   GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "      --json         one JSON object: hyperparameters, metadata scalars, tensors\n"
    "  -h, --help         this help\n";

static cJSON *value_json(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        return cJSON_CreateNumber((double)v->v.u64);
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        return cJSON_CreateNumber((double)v->v.i64);
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: return cJSON_CreateNumber(v->v.f64);
    case GGUF_VT_BOOL: return cJSON_CreateBool(v->v.u64 != 0);
    case GGUF_VT_STRING: {
        char *s = strndup(v->v.str.ptr, (size_t)v->v.str.len);
        cJSON *j = cJSON_CreateString(s ? s : "");
        free(s);
        return j;
    }
    case GGUF_VT_ARRAY: {
        /* Large arrays (vocabularies) are summarised, not dumped. */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "array_of", gguf_vtype_name(v->v.arr.elem_type));
        cJSON_AddNumberToObject(o, "n", (double)v->v.arr.n);
        return o;
    }
    default: return cJSON_CreateNull();
    }
}

int cli_info(int argc, char **argv) {
    const char *cmd = "info", *model_path = LS_DEFAULT_MODEL;
    bool json = false;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'j': json = true; break;
        case 'h': fputs(info_help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    ls_err err;
    ls_model *m = ls_model_load((ls_model_params){.path = model_path}, &err);
    if (!m) {
        fprintf(stderr, "lockstep info: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    const ls_hparams *hp = ls_model_hparams(m);
    const gguf_file *f = ls_model_gguf(m);
    const ls_chat_template *t = ls_model_chat_template(m);
    const char *family = t ? ls_chat_family_name(t->family) : "none";
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", model_path);
        cJSON_AddNumberToObject(o, "file_size", (double)gguf_file_size(f));
        cJSON_AddNumberToObject(o, "gguf_version", gguf_version(f));
        cJSON_AddStringToObject(o, "architecture", hp->arch);
        cJSON_AddStringToObject(o, "name", hp->name);
        cJSON *h = cJSON_AddObjectToObject(o, "hparams");
        cJSON_AddNumberToObject(h, "n_vocab", hp->n_vocab);
        cJSON_AddNumberToObject(h, "n_ctx_train", hp->n_ctx_train);
        cJSON_AddNumberToObject(h, "n_embd", hp->n_embd);
        cJSON_AddNumberToObject(h, "n_layer", hp->n_layer);
        cJSON_AddNumberToObject(h, "n_head", hp->n_head);
        cJSON_AddNumberToObject(h, "n_head_kv", hp->n_head_kv);
        cJSON_AddNumberToObject(h, "n_ff", hp->n_ff);
        cJSON_AddNumberToObject(h, "head_dim", hp->head_dim);
        cJSON_AddNumberToObject(h, "rope_dim", hp->rope_dim);
        cJSON_AddNumberToObject(h, "rope_freq_base", hp->rope_base);
        cJSON_AddNumberToObject(h, "rope_freq_scale", hp->rope_freq_scale);
        cJSON_AddNumberToObject(h, "norm_eps", hp->norm_eps);
        cJSON_AddBoolToObject(h, "tied_output", hp->tied_output);
        cJSON_AddNumberToObject(o, "vocab_size", hp->n_vocab);
        cJSON_AddStringToObject(o, "chat_template", family);
        cJSON *md = cJSON_AddObjectToObject(o, "metadata");
        for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
            const gguf_kv *kv = gguf_kv_at(f, i);
            char *k = strndup(kv->key.ptr, (size_t)kv->key.len);
            if (k) cJSON_AddItemToObject(md, k, value_json(&kv->value));
            free(k);
        }
        cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *tt = gguf_tensor_at(f, i);
            cJSON *e = cJSON_CreateObject();
            char *nm = strndup(tt->name.ptr, (size_t)tt->name.len);
            cJSON_AddStringToObject(e, "name", nm ? nm : "");
            free(nm);
            const ls_type_info *ti = ls_type_get(tt->type);
            cJSON_AddStringToObject(e, "type", ti ? ti->name : "?");
            cJSON *sh = cJSON_AddArrayToObject(e, "shape");
            for (uint32_t d = 0; d < tt->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)tt->ne[d]));
            cJSON_AddNumberToObject(e, "offset", (double)tt->offset);
            cJSON_AddNumberToObject(e, "nbytes", (double)tt->nbytes);
            cJSON_AddItemToArray(ts, e);
        }
        char *s = cJSON_PrintUnformatted(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("file:          %s (%.1f MiB, GGUF v%u)\n", model_path, gguf_file_size(f) / 1048576.0, gguf_version(f));
        printf("architecture:  %s%s%s\n", hp->arch, hp->name[0] ? "  name: " : "", hp->name);
        printf("layers %u, embd %u, ff %u, heads %u (kv %u), head dim %u, rope dim %u\n", hp->n_layer, hp->n_embd,
               hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim, hp->rope_dim);
        printf("context %u, rope base %g scale %g, rms eps %g, output %s\n", hp->n_ctx_train, (double)hp->rope_base,
               (double)hp->rope_freq_scale, (double)hp->norm_eps, hp->tied_output ? "tied to token_embd" : "separate");
        printf("vocab:         %u tokens\n", hp->n_vocab);
        printf("chat template: %s\n", family);
        printf("weights read per token: %.1f MiB\n", ls_model_weight_bytes(m) / 1048576.0);
        printf("tensors (%llu):\n", (unsigned long long)gguf_n_tensors(f));
        for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
            const gguf_tensor *tt = gguf_tensor_at(f, i);
            const ls_type_info *ti = ls_type_get(tt->type);
            printf("  %-32.*s %-6s [", (int)tt->name.len, tt->name.ptr, ti ? ti->name : "?");
            for (uint32_t d = 0; d < tt->n_dims; d++) printf(d ? ", %llu" : "%llu", (unsigned long long)tt->ne[d]);
            printf("]\n");
        }
    }
    ls_model_free(m);
    return 0;
}
