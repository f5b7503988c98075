/* engine.c - requests, the scheduler and the step loop of the batched engine
 * (see engine.h).
 *
 * A sequence is its token list toks[0..n_toks) (prompt, then accepted generated
 * tokens) and n_past, how many of those have K/V in its blocks.  Each step gives a
 * sequence rows for toks[n_past..]: a prefill chunk, or, when only the last token
 * is missing (n_past == n_toks - 1), a decode row optionally followed by draft
 * tokens (a verify block).  The row for toks[n_toks-1] yields the logits that
 * sample the token at position n_toks, keyed by (seed, n_toks) only. */
#include "engine/engine.h"
#include "util/alloc.h"
#include "util/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/engine_test.h"
#include "engine/kvcache.h"
#include "engine/kvdisk.h"
#include "sample/grammar.h"

#define BS LS_KV_BLOCK

typedef struct seq {
    uint64_t id;
    int32_t *toks;
    int32_t n_toks, n_prompt, n_gen, n_past;
    int32_t *table;
    int32_t n_blocks, registered;   /* blocks in the table; leading blocks offered to the cache */
    ls_sampler_params sp;
    int32_t max_tokens;             /* < 0 = unlimited */
    int32_t *stop_tokens;
    int32_t n_stop_tokens;
    char **stop;
    int32_t n_stop;
    size_t stop_max;                /* longest stop string */
    bool ignore_eos, want_logits, want_prompt_logits, cancel, no_parity;
    int32_t prefill_chunk;
    int32_t (*draft)(void *, const int32_t *, int32_t, int32_t *, int32_t);
    void *draft_ud;
    void (*draft_observe)(void *, int32_t, const float *);
    void (*on_event)(void *, const ls_event *);
    void *ud;
    void (*on_hidden)(void *, int32_t, const float *);
    void (*on_prefill)(void *, int32_t, int32_t);
    void *prefill_ud;
    ls_detok_stream ds;
    char *text;
    size_t text_len, text_cap, emitted;
    int32_t n_cached, n_drafted, n_accepted;
    int32_t plog_sent;              /* want_prompt_logits: prompt positions whose logits were delivered */
    double t_submit, t_first;
    ls_grammar *gram;               /* the request's grammar, or NULL */
    ls_grammar_state *gst;          /* its state after toks[n_prompt..n_toks) */
    /* this step */
    int32_t row0, n_rows, n_draft;
} seq;

struct ls_engine {
    const ls_model *m;
    ls_engine_params p;
    int32_t n_vocab, n_embd, max_blocks, max_logit_rows;
    const ls_backend *be;           /* where the forwards run (engine/backend.h) */
    void *bfwd, *bkv;               /* its forward workspace and KV store */
    ls_engine_test test;            /* test-only knobs (engine_test.h); zero in serving */
    bool withdrawn;                 /* the probe withdrew the parity rows' family */
    char kernels[32];               /* p.kernels points here */
    int32_t n_kv_blocks;
    ls_kvcache *kvc;
    pthread_mutex_t mu;             /* guards pending, cancels, next_id, live, snapshot */
    ls_verdict verdict;             /* the probe's (ls_engine_set_verdict); LS_VERDICT_UNPROBED before */
    seq **pending;
    int32_t n_pending, cap_pending;
    uint64_t *cancels;
    int32_t n_cancels, cap_cancels;
    uint64_t next_id;
    int32_t live;                   /* submitted and not yet finished */
    bool cancel_all;
    ls_engine_stats snap;
    /* owned by the stepping thread */
    seq **waiting;                  /* FIFO; preempted sequences go to the front */
    int32_t n_waiting, cap_waiting;
    seq **running;                  /* in admission order */
    int32_t n_running;
    seq **in_batch;
    int32_t n_in_batch;
    int32_t *b_tok, *b_pos, *b_seq, *b_lrow;
    uint8_t *b_need;
    const int32_t **b_tables;
    int32_t *drafts;                /* n_seq_max * draft_max */
    float *logits;                  /* max_logit_rows * n_vocab */
    float *hidden;                  /* step_tokens * n_embd: rows' hidden states for observers */
    float *hnorm;                   /* n_embd: one row after the output norm (on_hidden) */
    void *sscratch;
    uint32_t *gmask;                /* the allowed-token mask of a constrained sequence */
    ls_grammar_vocab *gvocab;       /* built at the first grammar request (under mu) */
    ls_engine_stats st;
    uint64_t kvc_evictions0;        /* the cache's eviction count at the last reset */
    ls_kvdisk *disk;                /* --cache-dir: the persistent prefix cache, or NULL */
    void *disk_buf;                 /* one block's payload */
    char *cache_dir;                /* p.cache_dir points here */
    bool disk_paused;               /* the probe runs: its random prompts are neither loaded nor kept */
    ls_kvdisk_stats disk0;          /* the directory's counts at the last reset */
};

/* ---- sequences -------------------------------------------------------------- */
static void seq_free(seq *s) {
    if (!s) return;
    free(s->toks);
    free(s->table);
    free(s->stop_tokens);
    for (int32_t i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->stop);
    free(s->text);
    free((void *)s->sp.logit_bias);
    ls_grammar_state_free(s->gst);
    ls_grammar_free(s->gram);
    free(s);
}

static ls_status check_request(const ls_engine *e, const ls_request *r, ls_err *err) {
    ls_status st = ls_check_prompt_room(r->prompt ? r->n_prompt : 0, e->p.n_ctx, err);
    if (st) return st;
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "prompt token %d (id %d) is outside the vocabulary (%d)", i,
                              r->prompt[i], e->n_vocab);
    if (r->max_tokens == 0)
        return ls_err_set(err, LS_E_INVALID, "max_tokens is 0; ask for at least one token (or -1 for no limit)");
    if ((st = ls_sampler_params_check(&r->sampling, err))) return st;
    for (int32_t i = 0; i < r->sampling.n_logit_bias; i++)
        if (r->sampling.logit_bias[i].id < 0 || r->sampling.logit_bias[i].id >= e->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "logit bias token id %d is outside the vocabulary (%d)",
                              r->sampling.logit_bias[i].id, e->n_vocab);
    if (r->n_stop_tokens < 0 || r->n_stop < 0 || (r->n_stop_tokens && !r->stop_tokens) || (r->n_stop && !r->stop))
        return ls_err_set(err, LS_E_INVALID, "bad stop list");
    for (int32_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] < 0 || r->stop_tokens[i] >= e->n_vocab)
            return ls_err_set(err, LS_E_INVALID, "stop token id %d is outside the vocabulary (%d)", r->stop_tokens[i],
                              e->n_vocab);
    for (int32_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0]) return ls_err_set(err, LS_E_INVALID, "stop string %d is empty", i);
    if (r->prefill_chunk < 0) return ls_err_set(err, LS_E_INVALID, "prefill_chunk is negative");

    if (!r->on_event) return ls_err_set(err, LS_E_INVALID, "the request has no event callback");
    /* The most positions this request can hold in the KV cache at once. */
    int64_t need = r->max_tokens < 0 ? e->p.n_ctx : (int64_t)r->n_prompt + r->max_tokens;
    if (need > e->p.n_ctx) need = e->p.n_ctx;
    int64_t blocks = (need + BS - 1) / BS;
    if (blocks > e->n_kv_blocks)
        return ls_err_set(err, LS_E_RANGE,
                          "the request needs up to %lld KV positions but the whole cache holds %d; "
                          "lower max_tokens or raise --kv-mem",
                          (long long)need, e->n_kv_blocks * BS);
    return LS_OK;
}

static seq *seq_new(const ls_engine *e, const ls_request *r) {
    seq *s = ls_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->toks = ls_malloc(((size_t)e->p.n_ctx + 1) * sizeof *s->toks);
    s->table = ls_malloc((size_t)e->max_blocks * sizeof *s->table);
    s->stop_tokens = ls_malloc(((size_t)r->n_stop_tokens + 1) * sizeof *s->stop_tokens);
    s->stop = ls_calloc((size_t)r->n_stop + 1, sizeof *s->stop);
    s->text_cap = 256;
    s->text = ls_malloc(s->text_cap);
    if (!s->toks || !s->table || !s->stop_tokens || !s->stop || !s->text) goto fail;
    memcpy(s->toks, r->prompt, (size_t)r->n_prompt * sizeof *s->toks);
    s->n_toks = s->n_prompt = r->n_prompt;
    if (r->n_stop_tokens) memcpy(s->stop_tokens, r->stop_tokens, (size_t)r->n_stop_tokens * sizeof *s->stop_tokens);
    s->n_stop_tokens = r->n_stop_tokens;
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (!(s->stop[i] = ls_malloc(n + 1))) goto fail;
        memcpy(s->stop[i], r->stop[i], n + 1);
        s->n_stop = i + 1;
        if (n > s->stop_max) s->stop_max = n;
    }
    s->sp = r->sampling;
    s->sp.logit_bias = NULL; /* the request's list may be reused: a copy */
    if (r->sampling.n_logit_bias > 0) {
        ls_logit_bias *lb = ls_malloc((size_t)r->sampling.n_logit_bias * sizeof *lb);
        if (!lb) goto fail;
        memcpy(lb, r->sampling.logit_bias, (size_t)r->sampling.n_logit_bias * sizeof *lb);
        s->sp.logit_bias = lb;
    }
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->no_parity = r->no_parity;
    s->want_logits = r->want_logits || r->want_prompt_logits;
    s->want_prompt_logits = r->want_prompt_logits;
    s->prefill_chunk = r->prefill_chunk;
    s->draft = r->draft;
    s->draft_ud = r->draft_ud;
    s->draft_observe = r->draft_observe;
    s->on_event = r->on_event;
    s->ud = r->ud;
    s->on_hidden = r->on_hidden;
    s->on_prefill = r->on_prefill;
    s->prefill_ud = r->prefill_ud;
    s->t_submit = ls_now_ms();
    s->text[0] = '\0';
    ls_detok_init(&s->ds);
    return s;
fail:
    seq_free(s);
    return NULL;
}

/* ---- the persistent prefix cache (engine/kvdisk.h) ----------------------------- */
/* The directory is used unless the probe runs, or it failed: then this build's bits are
 * not the recipe's, and must neither be kept for another process nor mixed with its. */
static bool disk_usable(const ls_engine *e) { return e->disk && !e->disk_paused && e->verdict != LS_VERDICT_FAILED; }

/* The prefix cache's fill hook (kvcache.h): a full block of the prefix toks[0..n) from
 * its file, checked, into block b (b < 0: only whether a file is indexed). */
static bool disk_fill(void *ud, const int32_t *toks, int32_t n, int32_t b) {
    ls_engine *e = ud;
    if (!disk_usable(e)) return false;
    char key[LS_KVDISK_KEY_HEX + 1];
    ls_kvdisk_key(e->disk, toks, n, key);
    if (b < 0) return ls_kvdisk_has(e->disk, key);
    return ls_kvdisk_load(e->disk, key, toks, n, e->disk_buf) &&
           e->be->kv_block_put(e->bkv, b, e->disk_buf, NULL) == LS_OK;
}

/* Writes the full blocks of a finishing sequence that the directory lacks.  Blocks
 * [0, n_past / BS) hold the K/V of toks' positions, whatever their cache state. */
static void disk_save(ls_engine *e, const seq *s) {
    if (!disk_usable(e) || s->no_parity) return; /* no_parity rows may run a non-canonical family */
    char key[LS_KVDISK_KEY_HEX + 1], prev[LS_KVDISK_KEY_HEX + 1];
    int32_t n_full = s->n_past / BS < s->n_blocks ? s->n_past / BS : s->n_blocks;
    for (int32_t i = 0; i < n_full; i++) {
        ls_kvdisk_key_next(e->disk, i ? prev : NULL, s->toks + (size_t)i * BS, key);
        memcpy(prev, key, sizeof prev);
        if (ls_kvdisk_has(e->disk, key)) continue;
        if (e->be->kv_block_get(e->bkv, s->table[i], e->disk_buf, NULL) ||
            !ls_kvdisk_save(e->disk, key, s->toks, (i + 1) * BS, e->disk_buf))
            return; /* warned once by kvdisk; the request itself is unaffected */
    }
}

static ls_status disk_open(ls_engine *e, ls_err *err) {
    if (!e->be->kv_block_get || !e->be->kv_block_put)
        return ls_err_set(err, LS_E_UNSUPPORTED, "--cache-dir: the %s backend cannot read or write KV blocks "
                                                 "(cpu and cuda can); run without --cache-dir", e->be->name);
    if (e->p.no_prefix_cache) return ls_err_set(err, LS_E_INVALID, "--cache-dir needs the prefix cache, which is off");
    ls_model_info mi = LS_MODEL_INFO_INIT;
    ls_status st = ls_model_get_info(e->m, &mi, err);
    if (st) return st;
    const ls_hparams *hp = ls_model_hparams(e->m);
    ls_kvdisk_params dp = {.dir = e->p.cache_dir, .max_bytes = e->p.cache_dir_max, .model_sha256 = mi.sha256,
                           .backend = e->be->name, .recipe = LOCKSTEP_RECIPE_VERSION, .n_layer = (int32_t)hp->n_layer,
                           .n_head_kv = (int32_t)hp->n_head_kv, .head_dim = (int32_t)hp->head_dim,
                           .log = e->p.on_log, .log_ud = e->p.log_ud};
    if (e->p.cache_dir_max < 0) return ls_err_set(err, LS_E_INVALID, "--cache-dir-max is negative");
    if (!(e->cache_dir = ls_malloc(strlen(e->p.cache_dir) + 1))) return ls_err_set(err, LS_E_NOMEM, "out of memory");
    strcpy(e->cache_dir, e->p.cache_dir);
    e->p.cache_dir = e->cache_dir; /* the caller's string is not kept */
    if (!(e->disk = ls_kvdisk_open(&dp, err))) return err ? err->code : LS_E_IO;
    LS_ASSERT(ls_kvdisk_payload_bytes(e->disk) == ls_kv_block_bytes(e->m));
    if (!(e->disk_buf = ls_malloc(ls_kvdisk_payload_bytes(e->disk))))
        return ls_err_set(err, LS_E_NOMEM, "out of memory for a KV block's staging buffer");
    ls_kvc_set_fill(e->kvc, disk_fill, e);
    return LS_OK;
}

void ls_engine_disk_pause(ls_engine *e, bool paused) { e->disk_paused = paused; }

/* ---- engine lifetime -------------------------------------------------------- */
ls_engine *ls_engine_create(const ls_model *m, const ls_engine_params *pp, ls_err *err) {
    return ls_engine_create_test(m, pp, NULL, err);
}

ls_engine *ls_engine_create_test(const ls_model *m, const ls_engine_params *pp, const ls_engine_test *t, ls_err *err) {
    ls_engine_params p = LS_ENGINE_PARAMS_INIT;
    if (!m) {
        ls_err_set(err, LS_E_INVALID, "no model given");
        return NULL;
    }
    if (ls_params_take(&p, sizeof p, pp, "engine params", err)) return NULL;
    if (ls_model_meta_only(m)) { /* every backend: none may read weights that were not built */
        ls_err_set(err, LS_E_INVALID, "the model was loaded without its weights (LS_MODEL_LOAD_META): no engine can "
                                      "run it");
        return NULL;
    }
    const ls_hparams *hp = ls_model_hparams(m);
    ls_engine *e = ls_calloc(1, sizeof *e);
    if (!e) {
        ls_err_set(err, LS_E_NOMEM, "out of memory");
        return NULL;
    }
    e->m = m;
    if (t) e->test = *t;
    if (ls_test_faults_hook) e->test.faults |= ls_test_faults_hook();
    e->verdict = LS_VERDICT_UNPROBED;
    pthread_mutex_init(&e->mu, NULL);
    if (p.n_ctx < 0 || p.kv_mem < 0 || p.n_seq_max < 0 || p.step_tokens < 0 || p.n_threads < 0 || p.draft_max < 0) {
        ls_err_set(err, LS_E_INVALID, "negative engine parameter (context, KV memory, sequences, step budget, "
                                      "threads or draft length)");
        goto fail;
    }
    if (!p.n_ctx) p.n_ctx = ls_default_ctx(hp->n_ctx_train);
    if ((uint32_t)p.n_ctx > hp->n_ctx_train) {
        ls_err_set(err, LS_E_INVALID, "context size %d exceeds the model's trained context %u", p.n_ctx,
                   hp->n_ctx_train);
        goto fail;
    }
    if (p.n_ctx < 2) {
        ls_err_set(err, LS_E_INVALID, "context size %d is too small (at least 2)", p.n_ctx);
        goto fail;
    }
    if (!p.n_seq_max) p.n_seq_max = 8;
    if (!p.step_tokens) p.step_tokens = 512;
    if (p.n_seq_max > 4096 || p.step_tokens > 65536 || p.draft_max > 64) {
        ls_err_set(err, LS_E_INVALID, "engine limits exceeded (sequences %d of 4096, step budget %d of 65536, "
                                      "draft length %d of 64)", p.n_seq_max, p.step_tokens, p.draft_max);
        goto fail;
    }
    /* the backend resolves the family name; the caller's string is not kept */
    if (p.kernels && strlen(p.kernels) >= sizeof e->kernels) {
        ls_err_set(err, LS_E_INVALID, "no kernel family '%.40s'", p.kernels);
        goto fail;
    }
    snprintf(e->kernels, sizeof e->kernels, "%s", p.kernels ? p.kernels : "auto");
    p.kernels = e->kernels;
    const char *kernels = e->kernels;
    if (p.isa != LS_ISA_AUTO && !ls_isa_supported(p.isa)) {
        ls_err_set(err, LS_E_UNSUPPORTED, "this CPU does not support the %s kernels", ls_isa_name(p.isa));
        goto fail;
    }
    if (p.step_tokens < p.n_seq_max) {
        ls_err_set(err, LS_E_INVALID, "the step budget (%d tokens) must be at least the number of parallel "
                                      "sequences (%d): every running sequence decodes each step",
                   p.step_tokens, p.n_seq_max);
        goto fail;
    }
    const size_t block_bytes = ls_kv_block_bytes(m);
    int64_t n_blocks;
    if (p.kv_mem) {
        n_blocks = p.kv_mem / (int64_t)block_bytes;
        if (n_blocks < 1) {
            ls_err_set(err, LS_E_INVALID, "--kv-mem %lld bytes is less than one KV block (%zu bytes = %d positions)",
                       (long long)p.kv_mem, block_bytes, BS);
            goto fail;
        }
    } else {
        n_blocks = (int64_t)p.n_seq_max * ((p.n_ctx + BS - 1) / BS);
    }
    if (n_blocks > INT32_MAX / 2) n_blocks = INT32_MAX / 2;
    e->p = p;
    e->n_vocab = (int32_t)hp->n_vocab;
    e->n_embd = (int32_t)hp->n_embd;
    e->max_blocks = (p.n_ctx + BS - 1) / BS + 1;
    /* Logit rows per step: every sequence's decode row and drafts, and room for prompt
     * logits (want_prompt_logits: the probe, echo) of at least 64 rows. */
    e->max_logit_rows = p.n_seq_max * (1 + p.draft_max);
    if (e->max_logit_rows < 64) e->max_logit_rows = 64;
    if (e->max_logit_rows > p.step_tokens) e->max_logit_rows = p.step_tokens;
    ls_backend_params bp = {.n_rows = p.step_tokens, .n_ctx = p.n_ctx, .n_threads = p.n_threads,
                            .isa = (int32_t)p.isa, .kernels = kernels, .test = &e->test};
    if (!(e->be = ls_backend_find(p.device, err))) goto fail;
    p.device = e->be->name; /* the caller's string is not kept */
    if (!(e->bfwd = e->be->fwd_create(m, &bp, err))) goto fail;
    if (!(e->bkv = e->be->kv_create(m, (int32_t)n_blocks, 0, err))) goto fail;
    e->n_kv_blocks = (int32_t)n_blocks;
    if (!(e->kvc = ls_kvc_create((int32_t)n_blocks, !p.no_prefix_cache, err))) goto fail;
    if (e->p.cache_dir && disk_open(e, err)) goto fail;
    const size_t R = (size_t)p.step_tokens;
    e->b_tok = ls_malloc(R * sizeof(int32_t));
    e->b_pos = ls_malloc(R * sizeof(int32_t));
    e->b_seq = ls_malloc(R * sizeof(int32_t));
    e->b_lrow = ls_malloc(R * sizeof(int32_t));
    e->b_need = ls_malloc(R);
    e->b_tables = ls_malloc((size_t)p.n_seq_max * sizeof *e->b_tables);
    e->in_batch = ls_malloc((size_t)p.n_seq_max * sizeof *e->in_batch);
    e->running = ls_malloc((size_t)p.n_seq_max * sizeof *e->running);
    e->drafts = ls_malloc(((size_t)p.n_seq_max * (size_t)p.draft_max + 1) * sizeof(int32_t));
    e->logits = ls_malloc((size_t)e->max_logit_rows * (size_t)e->n_vocab * sizeof(float));
    e->sscratch = ls_malloc(ls_sampler_scratch_bytes(e->n_vocab));
    e->gmask = ls_malloc(ls_grammar_mask_words(e->n_vocab) * sizeof *e->gmask);
    e->hidden = ls_malloc(R * hp->n_embd * sizeof(float));
    e->hnorm = ls_malloc(hp->n_embd * sizeof(float));
    if (!e->hnorm || !e->b_tok || !e->b_need || !e->b_pos || !e->b_seq || !e->b_lrow || !e->b_tables || !e->in_batch ||
        !e->running || !e->drafts || !e->logits || !e->sscratch || !e->hidden || !e->gmask) {
        ls_err_set(err, LS_E_NOMEM, "out of memory for the engine's step buffers");
        goto fail;
    }
    e->next_id = 1;
    return e;
fail:
    ls_engine_free(e);
    return NULL;
}

void ls_engine_free(ls_engine *e) {
    if (!e) return;
    for (int32_t i = 0; i < e->n_pending; i++) seq_free(e->pending[i]);
    for (int32_t i = 0; i < e->n_waiting; i++) seq_free(e->waiting[i]);
    for (int32_t i = 0; i < e->n_running; i++) seq_free(e->running[i]);
    free(e->pending);
    free(e->cancels);
    free(e->waiting);
    free(e->running);
    free(e->in_batch);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_lrow);
    free(e->b_need);
    free(e->b_tables);
    free(e->drafts);
    free(e->logits);
    free(e->sscratch);
    free(e->gmask);
    ls_grammar_vocab_free(e->gvocab);
    free(e->hidden);
    free(e->hnorm);
    ls_kvc_free(e->kvc);
    ls_kvdisk_close(e->disk);
    free(e->disk_buf);
    free(e->cache_dir);
    if (e->be) {
        if (e->bkv) e->be->kv_free(e->bkv);
        if (e->bfwd) e->be->fwd_free(e->bfwd);
    }
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- submission (any thread) ------------------------------------------------ */
static bool grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *a = ls_realloc(*arr, (size_t)nc * elem);
    if (!a) return false;
    *arr = a;
    *cap = nc;
    return true;
}

/* The grammar's view of the vocabulary: a token's raw bytes (control tokens: none), and
 * whether it ends generation. */
static size_t gv_bytes(void *ud, int32_t id, char *buf, size_t cap) {
    return ls_token_bytes(ls_model_tokenizer(ud), id, false, buf, cap);
}
static bool gv_eog(void *ud, int32_t id) { return ls_tokenizer_is_eog(ls_model_tokenizer(ud), id); }

ls_status ls_engine_submit(ls_engine *e, const ls_request *rq, uint64_t *id, ls_err *err) {
    ls_request req = LS_REQUEST_INIT, *r = &req;
    ls_status st = ls_params_take(&req, sizeof req, rq, "request", err);
    if (st) return st;
    if ((st = check_request(e, r, err))) return st;
    ls_grammar *gram = NULL;
    ls_grammar_state *gst = NULL;
    if (r->grammar) {
        if (!(gram = ls_grammar_compile(r->grammar, strlen(r->grammar), err))) return err ? err->code : LS_E_INVALID;
        if (!(gst = ls_grammar_state_new(gram))) {
            ls_grammar_free(gram);
            return ls_err_set(err, LS_E_NOMEM, "out of memory starting the grammar");
        }
        pthread_mutex_lock(&e->mu);
        if (!e->gvocab) e->gvocab = ls_grammar_vocab_new(e->n_vocab, gv_bytes, gv_eog, (void *)e->m, err);
        bool have = e->gvocab != NULL;
        pthread_mutex_unlock(&e->mu);
        /* The first token's mask, here on the caller's thread: a grammar that compiles but
         * whose mask goes over its work budget at the start is the request's fault, refused
         * now rather than ended by the engine with an error after admission. */
        uint32_t *m0 = have ? ls_malloc(ls_grammar_mask_words(e->n_vocab) * sizeof *m0) : NULL;
        int32_t n0 = m0 ? ls_grammar_mask(gst, e->gvocab, m0) : -1;
        free(m0);
        if (n0 < 0) {
            ls_grammar_state_free(gst);
            ls_grammar_free(gram);
            if (n0 == LS_GRAMMAR_MASK_OVER)
                return ls_err_set(err, LS_E_INVALID,
                                  "the grammar is too ambiguous: the tokens allowed at its start take over the work "
                                  "budget of %lld steps to find (make its alternatives and repetitions less nested)",
                                  (long long)LS_GRAMMAR_MASK_WORK);
            return have ? ls_err_set(err, LS_E_NOMEM, "out of memory computing the grammar's first token mask")
                        : LS_E_NOMEM;
        }
    }
    seq *s = seq_new(e, r);
    if (!s) {
        ls_grammar_state_free(gst);
        ls_grammar_free(gram);
        return ls_err_set(err, LS_E_NOMEM, "out of memory admitting the request");
    }
    s->gram = gram;
    s->gst = gst;
    pthread_mutex_lock(&e->mu);
    if (!grow((void **)&e->pending, &e->cap_pending, e->n_pending + 1, sizeof *e->pending)) {
        pthread_mutex_unlock(&e->mu);
        seq_free(s);
        return ls_err_set(err, LS_E_NOMEM, "out of memory queueing the request");
    }
    s->id = e->next_id++;
    e->pending[e->n_pending++] = s;
    e->live++;
    pthread_mutex_unlock(&e->mu);
    if (id) *id = s->id;
    return LS_OK;
}

void ls_engine_cancel(ls_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    if (grow((void **)&e->cancels, &e->cap_cancels, e->n_cancels + 1, sizeof *e->cancels))
        e->cancels[e->n_cancels++] = id;
    pthread_mutex_unlock(&e->mu);
}

void ls_engine_cancel_all(ls_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->cancel_all = true;
    pthread_mutex_unlock(&e->mu);
}

bool ls_engine_idle(ls_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool idle = e->live == 0;
    pthread_mutex_unlock(&e->mu);
    return idle;
}

void ls_engine_get_stats(ls_engine *e, ls_engine_stats *s) {
    size_t n = s->size < sizeof *s ? s->size : sizeof *s;
    LS_ASSERT(n > sizeof(size_t));
    pthread_mutex_lock(&e->mu);
    ls_engine_stats snap = e->snap;
    pthread_mutex_unlock(&e->mu);
    snap.size = n;
    memcpy(s, &snap, n);
}

/* ---- blocks ----------------------------------------------------------------- */
/* Releases every block, offering the partial last block to the prefix cache first;
 * last block first, so the LRU list evicts leaves before their parents. */
static void seq_release_blocks(ls_engine *e, seq *s) {
    if (!s->no_parity && s->n_blocks > 0 && s->n_past % BS && s->registered == s->n_blocks - 1)
        ls_kvc_commit(e->kvc, s->table, s->n_blocks - 1, s->toks + (size_t)(s->n_blocks - 1) * BS, s->n_past % BS);
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) ls_kvc_release(e->kvc, s->table[i]);
    s->n_blocks = s->registered = 0;
    s->n_past = 0;
}

/* Makes positions [n_past, upto) writable: copies a shared block that already holds
 * some of the sequence's positions, allocates the rest.  Returns how far it got
 * (n_past when not even the first could be secured). */
static int32_t seq_reserve(ls_engine *e, seq *s, int32_t upto) {
    if (upto <= s->n_past) return upto;
    if (s->n_past % BS) {
        int32_t bi = s->n_past / BS, b = s->table[bi];
        if (ls_kvc_shared(e->kvc, b)) {
            int32_t nb = ls_kvc_alloc(e->kvc);
            if (nb < 0) return s->n_past;
            if (e->be->kv_block_copy(e->bkv, nb, b, s->n_past % BS, NULL)) { /* the device failed: no copy */
                ls_kvc_release(e->kvc, nb);
                return s->n_past;
            }
            ls_kvc_release(e->kvc, b);
            s->table[bi] = nb;
        }
    }
    while (s->n_blocks * BS < upto) {
        int32_t nb = ls_kvc_alloc(e->kvc);
        if (nb < 0) return s->n_blocks * BS > s->n_past ? s->n_blocks * BS : s->n_past;
        s->table[s->n_blocks++] = nb;
    }
    return upto;
}

/* Drops blocks past what positions [0, n_past) need (after a rejected draft). */
static void seq_trim(ls_engine *e, seq *s) {
    int32_t keep = (s->n_past + BS - 1) / BS;
    while (s->n_blocks > keep) ls_kvc_release(e->kvc, s->table[--s->n_blocks]);
}

/* Offers newly full blocks to the prefix cache.  Not a no_parity sequence's: its rows may
 * run a family whose bits are not the recipe's, and a cached block is reused by any
 * request with the same prefix, parity or not. */
static void seq_commit_full(ls_engine *e, seq *s) {
    if (s->no_parity) return;
    for (; (s->registered + 1) * BS <= s->n_past; s->registered++)
        ls_kvc_commit(e->kvc, s->table, s->registered, s->toks + (size_t)s->registered * BS, BS);
}

/* ---- events ----------------------------------------------------------------- */
static void emit(ls_engine *e, seq *s, int32_t token, int32_t pos, const float *logits, const char *text, size_t n,
                 bool done, ls_finish fin) {
    (void)e;
    double now = ls_now_ms();
    ls_event ev = {
        .id = s->id, .token = token, .pos = pos, .logits = s->want_logits ? logits : NULL, .text = text,
        .text_len = n, .done = done, .finish = fin, .n_prompt = s->n_prompt, .n_gen = s->n_gen,
        .n_cached = s->n_cached, .n_drafted = s->n_drafted, .n_accepted = s->n_accepted,
        .prompt_ms = (s->t_first ? s->t_first : now) - s->t_submit, .gen_ms = s->t_first ? now - s->t_first : 0.0,
    };
    s->on_event(s->ud, &ev);
}

/* The logits of prompt position pos (want_prompt_logits), for the prompt token at pos + 1. */
static void emit_prompt(seq *s, int32_t pos, const float *logits) {
    double now = ls_now_ms();
    ls_event ev = {
        .id = s->id, .token = s->toks[pos + 1], .pos = pos + 1, .prompt = true, .logits = logits,
        .finish = LS_FINISH_STOP, .n_prompt = s->n_prompt, .n_gen = s->n_gen, .n_cached = s->n_cached,
        .n_drafted = s->n_drafted, .n_accepted = s->n_accepted, .prompt_ms = now - s->t_submit,
    };
    s->on_event(s->ud, &ev);
}

static bool text_add(seq *s, const char *p, size_t n) {
    if (s->text_len + n + 1 > s->text_cap) {
        size_t nc = s->text_cap * 2;
        while (nc < s->text_len + n + 1) nc *= 2;
        char *t = ls_realloc(s->text, nc);
        if (!t) return false;
        s->text = t;
        s->text_cap = nc;
    }
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = '\0';
    return true;
}

/* Finds the first stop string in the text not yet emitted; returns its offset or -1.
 * Otherwise sets *safe to how much text can be emitted without possibly emitting
 * the start of a stop string. */
static int64_t stop_scan(const seq *s, size_t *safe) {
    *safe = s->text_len;
    if (!s->n_stop) return -1;
    size_t from = s->emitted;
    int64_t first = -1;
    for (int32_t i = 0; i < s->n_stop; i++) {
        size_t n = strlen(s->stop[i]);
        for (size_t off = from; off + n <= s->text_len; off++)
            if (memcmp(s->text + off, s->stop[i], n) == 0) {
                if (first < 0 || (int64_t)off < first) first = (int64_t)off;
                break;
            }
    }
    if (first >= 0) return first;
    /* hold back the longest tail that is a prefix of some stop string */
    for (size_t k = s->stop_max - 1 < s->text_len - from ? s->stop_max - 1 : s->text_len - from; k > 0; k--) {
        for (int32_t i = 0; i < s->n_stop; i++)
            if (strlen(s->stop[i]) > k && memcmp(s->text + s->text_len - k, s->stop[i], k) == 0) {
                *safe = s->text_len - k;
                return -1;
            }
    }
    return -1;
}

static void seq_finish(ls_engine *e, seq *s, ls_finish fin, int32_t token, int32_t pos, const float *logits) {
    char piece[64];
    size_t n = ls_detok_flush(&s->ds, piece, sizeof piece);
    if (!text_add(s, piece, n)) fin = LS_FINISH_ERROR;
    size_t safe;
    int64_t at = fin == LS_FINISH_CANCELLED || fin == LS_FINISH_ERROR ? -1 : stop_scan(s, &safe);
    size_t end = at >= 0 ? (size_t)at : s->text_len;
    if (at >= 0) fin = LS_FINISH_STOP;
    emit(e, s, token, pos, logits, s->text + s->emitted, end > s->emitted ? end - s->emitted : 0, true, fin);
    s->emitted = end;
}

/* Accepts the token sampled for position pos (== n_toks).  Returns false when the
 * sequence finished. */
static bool seq_accept(ls_engine *e, seq *s, int32_t tok, const float *logits) {
    const ls_tokenizer *tk = ls_model_tokenizer(e->m);
    int32_t pos = s->n_toks;
    if (!s->t_first) s->t_first = ls_now_ms();
    bool stop_tok = !s->ignore_eos && ls_tokenizer_is_eog(tk, tok);
    for (int32_t i = 0; i < s->n_stop_tokens && !stop_tok; i++) stop_tok = s->stop_tokens[i] == tok;
    if (stop_tok) {
        seq_finish(e, s, LS_FINISH_STOP, tok, pos, logits);
        return false;
    }
    s->toks[s->n_toks++] = tok;
    s->n_gen++;
    char piece[256];
    size_t n = ls_detok_push(&s->ds, tk, tok, piece, sizeof piece);
    if (!text_add(s, piece, n)) { /* out of memory: deliver everything so far, then end with an error */
        emit(e, s, tok, pos, logits, s->text + s->emitted, s->text_len - s->emitted, false, LS_FINISH_STOP);
        s->emitted = s->text_len;
        emit(e, s, -1, pos, NULL, piece, n, true, LS_FINISH_ERROR);
        return false;
    }
    size_t safe;
    int64_t at = stop_scan(s, &safe);
    if (at >= 0) {
        emit(e, s, tok, pos, logits, s->text + s->emitted, (size_t)at > s->emitted ? (size_t)at - s->emitted : 0,
             true, LS_FINISH_STOP);
        s->emitted = (size_t)at;
        return false;
    }
    bool length = (s->max_tokens > 0 && s->n_gen >= s->max_tokens) || s->n_toks >= e->p.n_ctx;
    if (length) {
        seq_finish(e, s, LS_FINISH_LENGTH, tok, pos, logits);
        return false;
    }
    emit(e, s, tok, pos, logits, s->text + s->emitted, safe - s->emitted, false, LS_FINISH_STOP);
    s->emitted = safe;
    return true;
}

/* ---- the scheduler ---------------------------------------------------------- */
static void remove_running(ls_engine *e, seq *s) {
    for (int32_t i = 0; i < e->n_running; i++)
        if (e->running[i] == s) {
            memmove(e->running + i, e->running + i + 1, (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--;
            return;
        }
}

static void retire(ls_engine *e, seq *s) {
    disk_save(e, s);
    seq_release_blocks(e, s);
    remove_running(e, s);
    seq_free(s);
    pthread_mutex_lock(&e->mu);
    e->live--;
    pthread_mutex_unlock(&e->mu);
}

/* Frees the newest running sequence's blocks and puts it at the front of the queue;
 * it is recomputed from its tokens when readmitted (same bits). */
static void preempt_newest(ls_engine *e) {
    seq *s = e->running[e->n_running - 1];
    seq_release_blocks(e, s);
    e->n_running--;
    memmove(e->waiting + 1, e->waiting, (size_t)e->n_waiting * sizeof *e->waiting);
    e->waiting[0] = s;
    e->n_waiting++;
    e->st.preemptions++;
}

static void intake(ls_engine *e) {
    pthread_mutex_lock(&e->mu);
    if (grow((void **)&e->waiting, &e->cap_waiting, e->n_waiting + e->n_pending + e->p.n_seq_max + 1,
             sizeof *e->waiting)) {
        if (e->n_pending) memcpy(e->waiting + e->n_waiting, e->pending, (size_t)e->n_pending * sizeof *e->pending);
        e->n_waiting += e->n_pending;
        e->n_pending = 0;
    }
    bool all = e->cancel_all;
    e->cancel_all = false;
    int32_t nc = e->n_cancels;
    uint64_t cancel_ids[64];
    if (nc > 64) nc = 64; /* the rest are handled next step */
    if (nc) {
        memcpy(cancel_ids, e->cancels, (size_t)nc * sizeof *cancel_ids);
        memmove(e->cancels, e->cancels + nc, (size_t)(e->n_cancels - nc) * sizeof *e->cancels);
        e->n_cancels -= nc;
    }
    pthread_mutex_unlock(&e->mu);
    for (int32_t i = 0; all && i < e->n_waiting; i++) e->waiting[i]->cancel = true;
    for (int32_t i = 0; all && i < e->n_running; i++) e->running[i]->cancel = true;
    for (int32_t c = 0; c < nc; c++) {
        for (int32_t i = 0; i < e->n_waiting; i++)
            if (e->waiting[i]->id == cancel_ids[c]) e->waiting[i]->cancel = true;
        for (int32_t i = 0; i < e->n_running; i++)
            if (e->running[i]->id == cancel_ids[c]) e->running[i]->cancel = true;
    }
    for (int32_t i = 0; i < e->n_waiting;) {
        seq *s = e->waiting[i];
        if (!s->cancel) {
            i++;
            continue;
        }
        memmove(e->waiting + i, e->waiting + i + 1, (size_t)(e->n_waiting - i - 1) * sizeof *e->waiting);
        e->n_waiting--;
        seq_finish(e, s, LS_FINISH_CANCELLED, -1, s->n_toks, NULL);
        seq_release_blocks(e, s);
        seq_free(s);
        pthread_mutex_lock(&e->mu);
        e->live--;
        pthread_mutex_unlock(&e->mu);
    }
    for (int32_t i = e->n_running - 1; i >= 0; i--) {
        seq *s = e->running[i];
        if (!s->cancel) continue;
        seq_finish(e, s, LS_FINISH_CANCELLED, -1, s->n_toks, NULL);
        retire(e, s);
    }
}

/* Whether position p of s needs a logit row: the last token and any drafts (they are
 * sampled from), and prompt positions whose logits were asked for and not yet delivered. */
static bool needs_logits(const seq *s, int32_t p) {
    return p >= s->n_toks - 1 || (s->want_prompt_logits && p >= s->plog_sent && p < s->n_prompt - 1);
}

/* Logit rows a chunk of s from n_past on would take. */
static int32_t chunk_logit_rows(const seq *s, int32_t chunk) {
    int32_t n = 0;
    for (int32_t p = s->n_past; p < s->n_past + chunk; p++) n += needs_logits(s, p);
    return n;
}

/* The largest chunk <= want whose logit rows fit in `room`. */
static int32_t fit_chunk(const seq *s, int32_t want, int32_t room) {
    while (want > 0 && chunk_logit_rows(s, want) > room) want--;
    return want;
}

static void add_rows(ls_engine *e, int32_t *nrows, seq *s, int32_t n, int32_t n_draft, const int32_t *drafts,
                     int32_t *nlog) {
    int32_t si = e->n_in_batch;
    e->in_batch[e->n_in_batch++] = s;
    e->b_tables[si] = s->table;
    s->row0 = *nrows;
    s->n_rows = n;
    s->n_draft = n_draft;
    for (int32_t j = 0; j < n; j++) {
        int32_t r = (*nrows)++, p = s->n_past + j;
        e->b_tok[r] = p < s->n_toks ? s->toks[p] : drafts[p - s->n_toks];
        e->b_pos[r] = p;
        e->b_seq[r] = si;
        e->b_lrow[r] = needs_logits(s, p) ? (*nlog)++ : -1;
        e->b_need[r] = !s->no_parity;
    }
}

/* Drafts are verified unless the probe failed a canonical family and the operator did
 * not allow inexact output (fail closed). */
static bool drafts_allowed(const ls_engine *e) {
    return e->p.draft_max > 0 && (e->verdict != LS_VERDICT_FAILED || e->p.allow_inexact);
}

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

/* Builds the step's batch; returns the row count. */
static int32_t build(ls_engine *e) {
    for (int32_t attempt = 0;; attempt++) {
        int32_t nrows = 0, nlog = 0, budget = e->p.step_tokens;
        e->n_in_batch = 0;
        int32_t n_dec = 0;
        for (int32_t i = 0; i < e->n_running; i++) n_dec += e->running[i]->n_past == e->running[i]->n_toks - 1;
        /* 1. decode rows (and verify blocks), oldest first */
        for (int32_t i = 0; i < e->n_running; i++) {
            seq *s = e->running[i];
            if (s->n_past != s->n_toks - 1) continue;
            n_dec--;
            if (seq_reserve(e, s, s->n_toks) < s->n_toks) {
                /* out of blocks: preempt the newest (maybe this one) and try again */
                bool self = e->running[e->n_running - 1] == s;
                preempt_newest(e);
                if (self) break;
                i--;
                n_dec++;
                continue;
            }
            int32_t k = 0, *d = e->drafts + (size_t)e->n_in_batch * (size_t)e->p.draft_max;
            if (s->draft && drafts_allowed(e)) {
                int32_t kmax = min32(e->p.draft_max, budget - 1 - n_dec);
                kmax = min32(kmax, e->p.n_ctx - s->n_toks);
                if (s->max_tokens > 0) kmax = min32(kmax, s->max_tokens - s->n_gen - 1);
                kmax = min32(kmax, e->max_logit_rows - nlog - 1 - n_dec);
                if (kmax > 0) {
                    k = s->draft(s->draft_ud, s->toks, s->n_toks, d, kmax);
                    if (k < 0) k = 0;
                    if (k > kmax) k = kmax;
                    for (int32_t j = 0; j < k; j++)
                        if (d[j] < 0 || d[j] >= e->n_vocab) k = j;
                    k = seq_reserve(e, s, s->n_toks + k) - s->n_toks; /* drafts never preempt */
                }
            }
            add_rows(e, &nrows, s, 1 + k, k, d, &nlog);
            budget -= 1 + k;
        }
        /* 2. prefill chunks of running sequences */
        for (int32_t i = 0; i < e->n_running && budget > 0; i++) {
            seq *s = e->running[i];
            if (s->n_past >= s->n_toks - 1) continue;
            int32_t chunk = min32(s->n_toks - s->n_past, budget);
            if (s->prefill_chunk) chunk = min32(chunk, s->prefill_chunk);
            chunk = fit_chunk(s, chunk, e->max_logit_rows - nlog);
            chunk = chunk > 0 ? seq_reserve(e, s, s->n_past + chunk) - s->n_past : 0;
            if (chunk <= 0) continue;
            add_rows(e, &nrows, s, chunk, 0, NULL, &nlog);
            budget -= chunk;
        }
        /* 3. admit waiting sequences, FIFO */
        while (e->n_waiting > 0 && e->n_running < e->p.n_seq_max && budget > 0) {
            seq *s = e->waiting[0];
            /* the prefix cache, unless prompt logits it would skip are still owed */
            if (s->n_blocks == 0 && !(s->want_prompt_logits && s->plog_sent < s->n_prompt - 1) && !s->on_hidden) {
                s->n_past = ls_kvc_match(e->kvc, s->toks, s->n_toks - 1, s->table, &s->n_blocks);
                s->registered = s->n_past / BS;
            }
            int32_t chunk = min32(s->n_toks - s->n_past, budget);
            if (s->prefill_chunk) chunk = min32(chunk, s->prefill_chunk);
            chunk = fit_chunk(s, chunk, e->max_logit_rows - nlog);
            chunk = chunk > 0 ? seq_reserve(e, s, s->n_past + chunk) - s->n_past : 0;
            if (chunk <= 0) {
                seq_release_blocks(e, s); /* not now: give the matched blocks back */
                break;
            }
            memmove(e->waiting, e->waiting + 1, (size_t)(e->n_waiting - 1) * sizeof *e->waiting);
            e->n_waiting--;
            s->n_cached = s->n_past; /* positions the prefix cache supplied */
            e->st.prefix_hit_tokens += (uint64_t)s->n_cached;
            e->running[e->n_running++] = s;
            add_rows(e, &nrows, s, chunk, 0, NULL, &nlog);
            budget -= chunk;
        }
        if (nrows > 0 || e->n_running == 0 || attempt > e->p.n_seq_max) return nrows;
        /* Every running sequence is mid-prefill and no block is free: make room. */
        preempt_newest(e);
    }
}

/* The gauges, and a snapshot of everything for ls_engine_get_stats (other threads). */
static void publish_stats(ls_engine *e) {
    ls_kvc_stats ks;
    ls_kvc_get_stats(e->kvc, &ks);
    e->st.n_waiting = e->n_waiting;
    e->st.n_running = e->n_running;
    e->st.kv_blocks = ks.total;
    e->st.kv_free = ks.free;
    e->st.kv_cached_idle = ks.cached_idle;
    e->st.kv_used = ks.total - ks.free - ks.cached_idle;
    e->st.evictions = ks.evictions - e->kvc_evictions0;
    e->st.n_ctx = e->p.n_ctx;
    e->st.n_seq_max = e->p.n_seq_max;
    e->st.step_tokens = e->p.step_tokens;
    if (e->disk) {
        ls_kvdisk_stats ds;
        ls_kvdisk_get_stats(e->disk, &ds);
        e->st.disk_loaded = ds.loaded - e->disk0.loaded;
        e->st.disk_written = ds.written - e->disk0.written;
        e->st.disk_rejected = ds.rejected - e->disk0.rejected;
    }
    pthread_mutex_lock(&e->mu);
    e->st.n_waiting += e->n_pending;
    e->snap = e->st;
    pthread_mutex_unlock(&e->mu);
}

ls_status ls_engine_step(ls_engine *e, int32_t *n_rows_out, ls_err *err) {
    intake(e);
    int32_t nrows = build(e);
    if (n_rows_out) *n_rows_out = nrows;
    if (nrows > 0) {
        bool observe = false;
        for (int32_t i = 0; i < e->n_in_batch; i++)
            observe = observe || e->in_batch[i]->draft_observe || e->in_batch[i]->on_hidden;
        ls_batch b = {nrows, e->b_tok, e->b_pos, e->b_seq, e->b_tables, e->b_lrow, e->b_need, NULL,
                      observe ? e->hidden : NULL};
        ls_status st = e->be->run(e->bfwd, e->bkv, &b, e->logits, err);
        if (st) { /* the device failed: no row advances (the same rows run again next step) */
            for (int32_t i = 0; i < e->n_in_batch; i++) seq_trim(e, e->in_batch[i]);
            e->n_in_batch = 0;
            publish_stats(e);
            return st;
        }
        e->st.steps++;
        e->st.rows += (uint64_t)nrows;
    }
    /* Sample, verify drafts, emit; sequences finish here. */
    for (int32_t bi = 0; bi < e->n_in_batch; bi++) {
        seq *s = e->in_batch[bi];
        const int32_t past0 = s->n_past, last = s->n_toks - 1 - past0; /* the row of the last token */
        for (int32_t j = 0; s->want_prompt_logits && j < s->n_rows; j++) {
            int32_t p = past0 + j, lr = e->b_lrow[s->row0 + j];
            if (p < s->n_prompt - 1 && p >= s->plog_sent && lr >= 0) {
                emit_prompt(s, p, e->logits + (size_t)lr * (size_t)e->n_vocab);
                s->plog_sent = p + 1;
            }
        }
        for (int32_t j = 0; s->on_hidden && j < s->n_rows - s->n_draft && past0 + j < s->n_prompt; j++) {
            ls_model_out_norm_row(e->m, e->hidden + (size_t)(s->row0 + j) * e->n_embd, e->hnorm);
            s->on_hidden(s->ud, past0 + j, e->hnorm);
        }
        s->n_past += s->n_rows - s->n_draft;
        if (s->on_prefill && past0 < s->n_prompt)
            s->on_prefill(s->prefill_ud, s->n_past < s->n_prompt ? s->n_past : s->n_prompt, s->n_prompt);
        bool alive = true;
        if (last >= 0 && last < s->n_rows) {
            /* counted before the tokens are accepted: the request's last event (sent when a
             * token of this block ends it) carries this block's counts */
            s->n_drafted += s->n_draft;
            e->st.drafted += (uint64_t)s->n_draft;
            for (int32_t j = 0; j <= s->n_draft && alive; j++) {
                const float *lg = e->logits + (size_t)e->b_lrow[s->row0 + last + j] * (size_t)e->n_vocab;
                /* A constrained sequence samples under the mask of its grammar state after
                 * the tokens so far (the accepted prefix of a verify block included). */
                const uint32_t *mask = NULL;
                if (s->gst) {
                    int32_t n_ok = ls_grammar_mask(s->gst, e->gvocab, e->gmask);
                    if (n_ok <= 0) { /* 0: nothing can follow (done); < 0: out of memory or over the mask's work budget */
                        seq_finish(e, s, n_ok == 0 ? LS_FINISH_STOP : LS_FINISH_ERROR, -1, s->n_toks, NULL);
                        alive = false;
                        break;
                    }
                    mask = e->gmask;
                }
                int32_t tok = ls_sample_seq_masked(&s->sp, lg, e->n_vocab, s->toks, s->n_toks, s->n_prompt, mask,
                                                   e->sscratch);
                const int32_t *d = e->drafts + (size_t)bi * (size_t)e->p.draft_max;
                bool match = j < s->n_draft && tok == d[j];
                if (match) {
                    s->n_accepted++;
                    e->st.accepted++;
                }
                alive = seq_accept(e, s, tok, lg);
                if (alive && s->gst && !ls_grammar_accept_token(s->gst, e->gvocab, tok)) {
                    /* only out of memory (the mask allowed tok): end the request with an error */
                    seq_finish(e, s, LS_FINISH_ERROR, -1, s->n_toks, NULL);
                    alive = false;
                }
                if (!match) break;
                if (alive) s->n_past++; /* the draft token is now the sequence's token: its K/V (row j+1) is valid */
            }
        }
        if (s->draft_observe && alive) /* the rows that are now part of the sequence */
            for (int32_t j = 0; past0 + j < s->n_past; j++)
                s->draft_observe(s->draft_ud, past0 + j, e->hidden + (size_t)(s->row0 + j) * e->n_embd);
        seq_trim(e, s);
        seq_commit_full(e, s); /* also when it just finished: its blocks stay cached */
        if (!alive) retire(e, s);
    }
    e->n_in_batch = 0;
    publish_stats(e);
    (void)err;
    return LS_OK;
}

void *ls_engine_backend_fwd(ls_engine *e) { return e->bfwd; }
const ls_backend *ls_engine_backend(const ls_engine *e) { return e->be; }
void ls_engine_backend_info(const ls_engine *e, ls_backend_info *out) {
    memset(out, 0, sizeof *out);
    e->be->info(e->bfwd, out);
}
bool ls_engine_withdraw(ls_engine *e) {
    if (!e->be->withdraw(e->bfwd)) return false;
    e->withdrawn = true;
    return true;
}
bool ls_engine_withdrawn(const ls_engine *e) { return e->withdrawn; }
const ls_engine_test *ls_engine_test_of(const ls_engine *e) { return &e->test; }
const ls_model *ls_engine_model(const ls_engine *e) { return e->m; }
const ls_engine_params *ls_engine_params_of(const ls_engine *e) { return &e->p; }
void ls_engine_set_verdict(ls_engine *e, ls_verdict v) {
    if (e->disk && v == LS_VERDICT_FAILED && e->verdict != v) {
        const char *msg = "cache dir: not used (neither read nor written): the parity probe failed";
        if (e->p.on_log) e->p.on_log(e->p.log_ud, msg);
        else fprintf(stderr, "lockstep: %s\n", msg);
    }
    e->verdict = v;
}
ls_verdict ls_engine_verdict(const ls_engine *e) { return e->verdict; }

void ls_engine_reset_stats(ls_engine *e) {
    ls_kvc_drop_idle(e->kvc);
    ls_kvc_stats ks;
    ls_kvc_get_stats(e->kvc, &ks);
    memset(&e->st, 0, sizeof e->st);
    e->kvc_evictions0 = ks.evictions;
    if (e->disk) ls_kvdisk_get_stats(e->disk, &e->disk0);
    publish_stats(e);
}

void ls_engine_get_info(const ls_engine *e, ls_engine_info *out) {
    ls_engine_info i = LS_ENGINE_INFO_INIT;
    ls_backend_info bi;
    ls_engine_backend_info(e, &bi);
    i.isa = (ls_isa)bi.isa;
    i.n_threads = bi.n_threads > 0 ? bi.n_threads : 1;
    i.n_ctx = e->p.n_ctx;
    i.n_seq_max = e->p.n_seq_max;
    i.step_tokens = e->p.step_tokens;
    i.draft_max = e->p.draft_max;
    snprintf(i.kernels, sizeof i.kernels, "%s", bi.kernels);
    snprintf(i.kernels_free, sizeof i.kernels_free, "%s", bi.kernels_free);
    snprintf(i.device, sizeof i.device, "%s%s%.72s", e->be->name, bi.device[0] ? ": " : "", bi.device);
    size_t n = out->size < sizeof i ? out->size : sizeof i;
    LS_ASSERT(n > sizeof(size_t));
    memcpy(out, &i, n);
    out->size = n;
}

ls_status ls_check_prompt_room(int32_t n_prompt, int32_t n_ctx, ls_err *err) {
    if (n_prompt <= 0) return ls_err_set(err, LS_E_INVALID, "the prompt is empty (0 tokens)");
    if (n_prompt >= n_ctx)
        return ls_err_set(err, LS_E_RANGE,
                          "the prompt is %d tokens but the context holds %d (needs room for one more); "
                          "shorten it or raise --ctx-size",
                          n_prompt, n_ctx);
    return LS_OK;
}

const char *ls_finish_name(ls_finish f) {
    switch (f) {
    case LS_FINISH_STOP: return "stop";
    case LS_FINISH_LENGTH: return "length";
    case LS_FINISH_CANCELLED: return "cancelled";
    case LS_FINISH_ERROR: return "error";
    }
    return "?";
}

/* ---- one request, synchronously (ls_engine_generate, ls_engine_score) -------------- */
typedef struct {
    ls_result *res;
    void (*user)(void *, const ls_event *);
    void *user_ud;
    size_t n_vocab;
    int32_t cap_tokens, cap_logits;
    ls_buf text;
    bool done, oom;
} gen_run;

static bool gen_grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *a = ls_realloc(*p, (size_t)nc * elem);
    if (!a) return false;
    *p = a;
    *cap = nc;
    return true;
}

static void gen_event(void *ud, const ls_event *ev) {
    gen_run *g = ud;
    ls_result *r = g->res;
    /* The end-of-generation token comes in the last event but is not one of the tokens. */
    bool stop_tok = !ev->prompt && ev->done && ev->finish == LS_FINISH_STOP && ev->token >= 0 && ev->n_gen == r->n_tokens;
    if (ev->logits) {
        if (!r->n_logits) r->logits_pos0 = ev->pos - 1;
        if (gen_grow((void **)&r->logits, &g->cap_logits, r->n_logits + 1, g->n_vocab * sizeof(float)))
            memcpy(r->logits + (size_t)r->n_logits++ * g->n_vocab, ev->logits, g->n_vocab * sizeof(float));
        else
            g->oom = true;
    }
    if (!ev->prompt && ev->token >= 0 && !stop_tok) {
        if (gen_grow((void **)&r->tokens, &g->cap_tokens, r->n_tokens + 1, sizeof *r->tokens))
            r->tokens[r->n_tokens++] = ev->token;
        else
            g->oom = true;
    }
    if (ev->text_len && !ls_buf_append(&g->text, ev->text, ev->text_len)) g->oom = true;
    if (g->user) g->user(g->user_ud, ev);
    r->n_cached = ev->n_cached;
    r->n_drafted = ev->n_drafted;
    r->n_accepted = ev->n_accepted;
    r->prompt_ms = ev->prompt_ms;
    r->gen_ms = ev->gen_ms;
    if (ev->done) {
        g->done = true;
        r->finish = ev->finish;
    }
}

void ls_result_free(ls_result *r) {
    if (!r) return;
    size_t size = r->size;
    free(r->tokens);
    free(r->text);
    free(r->logits);
    memset(r, 0, size < sizeof *r ? size : sizeof *r);
    r->size = size;
}

ls_status ls_engine_generate(ls_engine *e, const ls_request *rq, ls_result *out, ls_err *err) {
    if (!out || out->size < sizeof *out) /* the result is filled whole: it must be this header's */
        return ls_err_set(err, LS_E_INVALID, "result.size is %zu: initialize it with LS_RESULT_INIT",
                          out ? out->size : 0);
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    ls_request q = LS_REQUEST_INIT;
    ls_status st = ls_params_take(&q, sizeof q, rq, "request", err);
    if (st) return st;
    gen_run g = {.res = out, .user = q.on_event, .user_ud = q.ud, .n_vocab = (size_t)e->n_vocab};
    q.on_event = gen_event;
    q.ud = &g;
    out->n_prompt = q.n_prompt;
    uint64_t id;
    if ((st = ls_engine_submit(e, &q, &id, err))) return st;
    bool first = false;
    while (!g.done) {
        int32_t rows;
        bool had_first = first; /* count the steps that made tokens after the first */
        if ((st = ls_engine_step(e, &rows, err))) break;
        first = out->n_tokens > 0 || g.done;
        if (had_first && rows) out->n_steps++;
        if (g.oom && !g.done) ls_engine_cancel(e, id); /* the request ends at the next step */
    }
    if (!st && !ls_buf_append(&g.text, "", 0)) g.oom = true; /* NUL-terminated even when empty */
    out->text = g.text.p;
    out->text_len = g.text.len;
    if (!st && g.oom) st = ls_err_set(err, LS_E_NOMEM, "out of memory collecting the result");
    if (st) ls_result_free(out);
    return st;
}

ls_status ls_engine_score(ls_engine *e, const int32_t *tokens, int32_t n, float *logits, ls_err *err) {
    ls_request q = LS_REQUEST_INIT;
    q.prompt = tokens;
    q.n_prompt = n;
    q.max_tokens = 1;
    q.ignore_eos = true;
    q.want_prompt_logits = true;
    q.sampling.top_p = 1.0f;
    ls_result r = LS_RESULT_INIT;
    ls_status st = ls_engine_generate(e, &q, &r, err);
    if (st) return st;
    LS_ASSERT(r.n_logits == n && r.logits_pos0 == 0); /* every prompt row, then the first sampled token's */
    memcpy(logits, r.logits, (size_t)n * (size_t)e->n_vocab * sizeof(float));
    ls_result_free(&r);
    return LS_OK;
}

bool ls_engine_check(ls_engine *e, ls_err *err) {
    const int32_t *tables[4096 + 1];
    int32_t nb[4096 + 1];
    int32_t n = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        tables[n] = e->running[i]->table;
        nb[n++] = e->running[i]->n_blocks;
    }
    for (int32_t i = 0; i < e->n_waiting && n < 4096; i++)
        if (e->waiting[i]->n_blocks) {
            tables[n] = e->waiting[i]->table;
            nb[n++] = e->waiting[i]->n_blocks;
        }
    for (int32_t i = 0; i < e->n_running; i++) {
        seq *s = e->running[i];
        if (s->n_blocks != (s->n_past + BS - 1) / BS) {
            ls_err_set(err, LS_E_FORMAT, "sequence %llu holds %d blocks for %d positions",
                       (unsigned long long)s->id, s->n_blocks, s->n_past);
            return false;
        }
    }
    return ls_kvc_check(e->kvc, tables, nb, n, err);
}
