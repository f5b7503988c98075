/* model_api.c - the public model functions of lockstep.h over the model, tokenizer
 * and chat-template modules. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/util.h"

ls_status ls_model_get_info(const ls_model *m, ls_model_info *out, ls_err *err) {
    if (!m || !out || out->size <= sizeof(size_t))
        return ls_err_set(err, LS_E_INVALID, "ls_model_get_info needs a model and an info struct with its size set");
    ls_model_info i = LS_MODEL_INFO_INIT;
    const ls_hparams *hp = &m->hp;
    snprintf(i.arch, sizeof i.arch, "%s", hp->arch);
    snprintf(i.name, sizeof i.name, "%s", hp->name);
    i.n_vocab = hp->n_vocab;
    i.n_ctx_train = hp->n_ctx_train;
    i.n_embd = hp->n_embd;
    i.n_layer = hp->n_layer;
    i.n_head = hp->n_head;
    i.n_head_kv = hp->n_head_kv;
    i.n_ff = hp->n_ff;
    i.head_dim = hp->head_dim;
    i.weight_bytes = m->weight_bytes;
    i.has_mtp = ls_model_has_mtp(m);
    snprintf(i.chat_template, sizeof i.chat_template, "%s", m->has_tmpl ? ls_chat_family_name(m->tmpl.family) : "");
    ls_model *mm = (ls_model *)m; /* the hash is a lazily filled cache, guarded by prep_mu */
    pthread_mutex_lock(&mm->prep_mu);
    if (!mm->sha256[0] && mm->path && !ls_sha256_file(mm->path, mm->sha256)) mm->sha256[0] = '\0';
    memcpy(i.sha256, mm->sha256, sizeof i.sha256);
    pthread_mutex_unlock(&mm->prep_mu);
    size_t n = out->size < sizeof i ? out->size : sizeof i;
    memcpy(out, &i, n);
    out->size = n;
    return LS_OK;
}

static cJSON *value_json(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        return cJSON_CreateNumber((double)v->v.u64);
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        return cJSON_CreateNumber((double)v->v.i64);
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: return cJSON_CreateNumber(v->v.f64);
    case GGUF_VT_BOOL: return cJSON_CreateBool(v->v.u64 != 0);
    case GGUF_VT_STRING: {
        char *s = ls_malloc((size_t)v->v.str.len + 1);
        if (!s) return NULL;
        memcpy(s, v->v.str.ptr, (size_t)v->v.str.len);
        s[v->v.str.len] = 0;
        cJSON *j = cJSON_CreateString(s);
        free(s);
        return j;
    }
    case GGUF_VT_ARRAY: { /* large arrays (vocabularies) are summarised, not dumped */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "array_of", gguf_vtype_name(v->v.arr.elem_type));
        cJSON_AddNumberToObject(o, "n", (double)v->v.arr.n);
        return o;
    }
    default: return cJSON_CreateNull();
    }
}

char *ls_model_describe_json(const ls_model *m, ls_err *err) {
    ls_model_info mi = LS_MODEL_INFO_INIT;
    if (ls_model_get_info(m, &mi, err)) return NULL;
    const ls_hparams *hp = &m->hp;
    const gguf_file *f = m->gguf;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", m->path ? m->path : "");
    cJSON_AddNumberToObject(o, "file_size", (double)gguf_file_size(f));
    cJSON_AddNumberToObject(o, "gguf_version", gguf_version(f));
    cJSON_AddStringToObject(o, "sha256", mi.sha256);
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
    cJSON_AddNumberToObject(h, "n_nextn", hp->n_nextn);
    cJSON_AddNumberToObject(o, "vocab_size", hp->n_vocab);
    cJSON_AddStringToObject(o, "chat_template", mi.chat_template[0] ? mi.chat_template : "none");
    if (!m->has_tmpl) cJSON_AddStringToObject(o, "chat_template_error", m->tmpl_err);
    cJSON_AddNumberToObject(o, "weight_bytes_per_token", (double)m->weight_bytes);
    cJSON_AddBoolToObject(o, "mtp", mi.has_mtp);
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    char key[512];
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.ptr, n);
        key[n] = 0;
        cJSON_AddItemToObject(meta, key, value_json(&kv->value));
    }
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        cJSON *x = cJSON_CreateObject();
        size_t n = t->name.len < sizeof key - 1 ? (size_t)t->name.len : sizeof key - 1;
        memcpy(key, t->name.ptr, n);
        key[n] = 0;
        cJSON_AddStringToObject(x, "name", key);
        const ls_type_info *ti = ls_type_get(t->type);
        cJSON_AddStringToObject(x, "type", ti ? ti->name : "unknown");
        cJSON *sh = cJSON_AddArrayToObject(x, "shape");
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[d]));
        cJSON_AddNumberToObject(x, "offset", (double)t->offset);
        cJSON_AddNumberToObject(x, "nbytes", (double)t->nbytes);
        cJSON_AddItemToArray(ts, x);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) ls_err_set(err, LS_E_NOMEM, "out of memory describing the model");
    return s;
}

ls_status ls_model_tokenize(const ls_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                            int32_t *out, size_t cap, size_t *n_out, ls_err *err) {
    return ls_tokenize(m->tok, text, len, add_special, parse_special, out, cap, n_out, err);
}

size_t ls_model_token_bytes(const ls_model *m, int32_t id, bool special, char *buf, size_t cap) {
    return ls_token_bytes(m->tok, id, special, buf, cap);
}

bool ls_model_is_eog(const ls_model *m, int32_t id) { return ls_tokenizer_is_eog(m->tok, id); }

size_t ls_model_detokenize(const ls_model *m, const int32_t *ids, size_t n, bool remove_special, bool unparse_special,
                           char *out, size_t cap) {
    return ls_detokenize(m->tok, ids, n, remove_special, unparse_special, out, cap);
}

size_t ls_model_detok_push(const ls_model *m, ls_detok *s, int32_t id, char *out, size_t cap) {
    return ls_detok_push(s, m->tok, id, out, cap);
}

ls_status ls_model_apply_chat(const ls_model *m, const ls_chat_msg *msgs, size_t n, bool add_generation_prompt,
                              char **out, ls_err *err) {
    if (!m->has_tmpl) return ls_err_set(err, LS_E_UNSUPPORTED, "%s", m->tmpl_err);
    return ls_chat_apply(&m->tmpl, msgs, n, add_generation_prompt, out, err);
}
