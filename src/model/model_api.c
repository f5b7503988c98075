/* model_api.c - the public model functions of lockstep.h over the model, tokenizer
 * and chat-template modules. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model_impl.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/util.h"

/* The cache of hashes (ls_model_params.cache_dir): <dir>/sha256-<key>.txt holds the 64 hex
 * digits of the file whose identity (every shard's, gguf_shard_identity) hashes to key.  A
 * file changed in any way has another identity, so a stale entry is never found; an entry
 * that is not 64 hex digits is ignored and rewritten. */
static bool hash_cache_path(const ls_model *m, char *path, size_t cap) {
    char ids[4096], key[65];
    size_t at = (size_t)snprintf(ids, sizeof ids, "lockstep-sha256-v1");
    for (uint32_t i = 0; i < gguf_n_shards(m->gguf); i++) {
        if (at + 2 >= sizeof ids) return false;
        ids[at++] = '|';
        if (!gguf_shard_identity(m->gguf, i, ids + at, sizeof ids - at)) return false;
        at += strlen(ids + at);
    }
    ls_sha256_str(ids, key);
    int n = snprintf(path, cap, "%s/sha256-%.32s.txt", m->cache_dir, key);
    return n > 0 && (size_t)n < cap;
}

static bool hash_cache_read(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char b[80];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n < 64 || (n > 64 && b[64] != '\n')) return false;
    for (int i = 0; i < 64; i++)
        if (!((b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f'))) return false;
    memcpy(hex, b, 64);
    hex[64] = '\0';
    return true;
}

static void hash_cache_write(const char *dir, const char *path, const char hex[65]) {
    ls_mkdirs(dir);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return; /* not written: the next load hashes the file again */
    bool ok = fprintf(f, "%s\n", hex) == 65;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) remove(tmp); /* write-then-rename: never half an entry */
}

static bool model_sha256_read(ls_model *m);

/* The model's SHA-256 into m->sha256 (from the cache when the file is unchanged). */
bool ls_model_sha256_fill(ls_model *m) {
    char path[4200];
    const bool cached = m->cache_dir && hash_cache_path(m, path, sizeof path);
    if (cached && hash_cache_read(path, m->sha256)) return true;
    if (!model_sha256_read(m)) return false;
    if (cached) hash_cache_write(m->cache_dir, path, m->sha256);
    return true;
}

/* The file's bytes, or for a split model every shard's bytes in shard order (a change to
 * any shard changes it).  false: it could not be read. */
static bool model_sha256_read(ls_model *m) {
    uint32_t n = gguf_n_shards(m->gguf);
    if (n <= 1) return ls_sha256_file(m->path, m->sha256);
    const void **p = ls_calloc(n, sizeof *p);
    uint64_t *len = ls_calloc(n, sizeof *len);
    bool ok = p && len;
    for (uint32_t i = 0; ok && i < n; i++) ok = (p[i] = gguf_shard_bytes(m->gguf, i, &len[i])) != NULL;
    ok = ok && ls_sha256_parts(p, len, n, m->sha256);
    free(p);
    free(len);
    return ok;
}

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
    snprintf(i.tool_format, sizeof i.tool_format, "%s", !m->has_tmpl ? "" : m->tmpl.tools_hermes ? "hermes" : "generic");
    ls_model *mm = (ls_model *)m; /* the hash is a lazily filled cache, guarded by prep_mu */
    pthread_mutex_lock(&mm->prep_mu);
    if (!mm->sha256[0] && mm->path && !ls_model_sha256_fill(mm)) mm->sha256[0] = '\0';
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
    cJSON_AddNumberToObject(o, "file_size", (double)gguf_total_size(f)); /* every shard's, when split */
    cJSON_AddNumberToObject(o, "shards", gguf_n_shards(f));
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
    if (m->arch->swa_pattern) {
        cJSON_AddNumberToObject(h, "sliding_window", hp->n_swa);
        cJSON_AddNumberToObject(h, "sliding_window_pattern", m->arch->swa_pattern);
    }
    if (hp->rope_yarn) {
        cJSON_AddNumberToObject(h, "yarn_original_context", hp->yarn_n_ctx_orig);
        cJSON_AddNumberToObject(h, "yarn_attn_factor", hp->yarn_attn_factor);
        cJSON_AddNumberToObject(h, "yarn_beta_fast", hp->yarn_beta_fast);
        cJSON_AddNumberToObject(h, "yarn_beta_slow", hp->yarn_beta_slow);
    }
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
    /* The family (arch.c) and what it computes; every tensor type present; limits. */
    const ls_arch *ad = m->arch;
    cJSON_AddStringToObject(o, "family", ad->name);
    cJSON *fe = cJSON_AddArrayToObject(o, "features");
    static const struct { unsigned bit; const char *name; } k_feats[] = {
        {LS_AF_QKV_BIAS, "qkv_bias"}, {LS_AF_QK_NORM, "qk_norm"}, {LS_AF_POST_NORMS, "post_norms"},
        {LS_AF_EMBD_SCALE, "embedding_scale"}, {LS_AF_NEOX, "rope_neox"}};
    for (size_t i = 0; i < sizeof k_feats / sizeof k_feats[0]; i++)
        if (ad->feats & k_feats[i].bit) cJSON_AddItemToArray(fe, cJSON_CreateString(k_feats[i].name));
    if (!(ad->feats & LS_AF_NEOX)) cJSON_AddItemToArray(fe, cJSON_CreateString("rope_adjacent"));
    cJSON_AddItemToArray(fe, cJSON_CreateString(ad->act == LS_ACT_GELU_TANH ? "geglu" : "swiglu"));
    if (m->rope_freqs) cJSON_AddItemToArray(fe, cJSON_CreateString("rope_freqs"));
    if (ad->swa_pattern) cJSON_AddItemToArray(fe, cJSON_CreateString("sliding_window"));
    if (hp->rope_yarn) cJSON_AddItemToArray(fe, cJSON_CreateString("rope_yarn"));
    cJSON *ty = cJSON_AddObjectToObject(o, "tensor_types");
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const ls_type_info *ti = ls_type_get(gguf_tensor_at(f, i)->type);
        const char *tn = ti ? ti->name : "unknown";
        cJSON *c = cJSON_GetObjectItem(ty, tn);
        if (c) cJSON_SetNumberValue(c, c->valuedouble + 1);
        else cJSON_AddNumberToObject(ty, tn, 1);
    }
    (void)cJSON_AddArrayToObject(o, "limits"); /* none today: every family runs on both backends */
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

ls_status ls_model_apply_chat_opts(const ls_model *m, const ls_chat_msg *msgs, size_t n, bool add_generation_prompt,
                                   const ls_chat_opts *opts, char **out, ls_err *err) {
    ls_chat_opts o = LS_CHAT_OPTS_INIT;
    if (opts) {
        ls_status st = ls_params_take(&o, sizeof o, opts, "chat options", err);
        if (st) return st;
    }
    if (o.enable_thinking < -1 || o.enable_thinking > 1)
        return ls_err_set(err, LS_E_INVALID, "enable_thinking is %d: -1 (not passed), 0 or 1", o.enable_thinking);
    if (!m->has_tmpl) return ls_err_set(err, LS_E_UNSUPPORTED, "%s", m->tmpl_err);
    ls_chat_vars v = LS_CHAT_VARS_INIT;
    v.enable_thinking = o.enable_thinking;
    return ls_chat_apply_vars(&m->tmpl, msgs, n, add_generation_prompt, &v, out, err);
}
