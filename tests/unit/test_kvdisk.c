/* The persistent prefix cache (--cache-dir, engine/kvdisk.h).
 *
 * Without a model: the file round trip, the size cap's least-recently-used deletion, a
 * touched file surviving it, leftovers of a crashed write removed at open, and each
 * damaged or foreign file (bad magic, truncated, one byte flipped, another recipe
 * version, another model, another layout, another prefix) ignored with a warning that
 * names the reason, and removed.
 * On the model: a prefix written by one engine and loaded by a new one gives the bits
 * of a cold prefill (logits and tokens memcmp-equal to an engine without the cache, the
 * hit visible in n_cached and the stats), and a damaged block file in the directory is
 * ignored with a warning while the answer stays the same; loads amid a batch of requests
 * sharing prefixes under a KV cache small enough to evict and preempt give each request
 * its cold solo bits; after a failed probe the directory is left alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixture.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/kv_store.h"
#include "engine/engine.h"
#include "engine/kvdisk.h"
#include "model/model.h"

#define BS LS_KV_BLOCK
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static ls_model *g_model;

/* ---- warnings ---- */
static char g_log[8][512];
static int g_n_log;
static void on_log(void *ud, const char *msg) {
    (void)ud;
    if (g_n_log < 8) snprintf(g_log[g_n_log], sizeof g_log[0], "%s", msg);
    g_n_log++;
}
static bool logged(const char *what) {
    for (int i = 0; i < g_n_log && i < 8; i++)
        if (strstr(g_log[i], what)) return true;
    return false;
}

static void mkdtemp_into(char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/lockstep-kvdisk-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[4200];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

static int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        n += l > s && !strcmp(de->d_name + l - s, suffix);
    }
    if (d) closedir(d);
    return n;
}

static void key_path(const char *dir, const char *key, char *out, size_t cap) {
    snprintf(out, cap, "%s/%.32s.lskv", dir, key);
}

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void patch(const char *path, long off, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static void flip(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* ======================= the files, no model ======================= */
static ls_kvdisk_params small(const char *dir, const char *sha, uint32_t recipe, int64_t max) {
    ls_kvdisk_params p = {.dir = dir, .max_bytes = max, .model_sha256 = sha, .backend = "cpu", .recipe = recipe,
                          .n_layer = 1, .n_head_kv = 1, .head_dim = 4, .log = on_log};
    return p;
}

static void fill_payload(float *p, size_t n, float base) {
    for (size_t i = 0; i < n; i++) p[i] = base + (float)i * 0.25f;
}

static void test_files_round_trip_and_lru(void **state) {
    (void)state;
    char dir[64];
    mkdtemp_into(dir, sizeof dir);
    ls_err err;
    ls_kvdisk_params kp = small(dir, SHA_A, 1, 0);
    ls_kvdisk *d = ls_kvdisk_open(&kp, &err);
    assert_non_null(d);
    const size_t pb = ls_kvdisk_payload_bytes(d);
    assert_int_equal(pb, 1 * 2 * 1 * BS * 4 * sizeof(float));
    float in[2 * BS * 4], out[2 * BS * 4];
    int32_t toks[3 * BS];
    for (int i = 0; i < 3 * BS; i++) toks[i] = 1000 + i;
    char k1[65], k2[65], k3[65];
    ls_kvdisk_key(d, toks, BS, k1);
    ls_kvdisk_key(d, toks, 2 * BS, k2);
    ls_kvdisk_key(d, toks, 3 * BS, k3);
    char chained[65]; /* the chain: key_2 from key_1 and block 2's tokens */
    ls_kvdisk_key_next(d, k1, toks + BS, chained);
    assert_string_equal(chained, k2);
    assert_false(ls_kvdisk_has(d, k1));
    fill_payload(in, 2 * BS * 4, 1.0f);
    assert_true(ls_kvdisk_save(d, k1, toks, BS, in));
    assert_true(ls_kvdisk_has(d, k1));
    assert_true(ls_kvdisk_load(d, k1, toks, BS, out));
    assert_memory_equal(in, out, pb);
    char p1[4200], p2[4200], p3[4200];
    key_path(dir, k1, p1, sizeof p1);
    key_path(dir, k2, p2, sizeof p2);
    key_path(dir, k3, p3, sizeof p3);
    const long f1 = file_size(p1);
    assert_int_equal(f1, 136 + BS * 4 + (long)pb + 64);
    ls_kvdisk_close(d);

    /* a cap of two and a half files: the third write deletes the least recently used */
    kp.max_bytes = 2 * f1 + 2 * BS * 4 + 8; /* files 1 and 3 (3 holds 2 blocks' more tokens), not all three */
    d = ls_kvdisk_open(&kp, &err);
    assert_non_null(d);
    assert_true(ls_kvdisk_has(d, k1)); /* indexed from the directory */
    fill_payload(in, 2 * BS * 4, 2.0f);
    assert_true(ls_kvdisk_save(d, k2, toks, 2 * BS, in));
    usleep(2000);
    assert_true(ls_kvdisk_load(d, k1, toks, BS, out)); /* k1 is now the most recently used */
    usleep(2000);
    fill_payload(in, 2 * BS * 4, 3.0f);
    assert_true(ls_kvdisk_save(d, k3, toks, 3 * BS, in));
    assert_true(ls_kvdisk_has(d, k1));
    assert_false(ls_kvdisk_has(d, k2)); /* the least recently used went */
    assert_true(ls_kvdisk_has(d, k3));
    assert_int_equal(file_size(p2), -1);
    assert_true(ls_kvdisk_load(d, k3, toks, 3 * BS, out));
    assert_memory_equal(in, out, pb);
    ls_kvdisk_stats st;
    ls_kvdisk_get_stats(d, &st);
    assert_int_equal(st.files, 2);
    assert_true(st.bytes <= (uint64_t)kp.max_bytes);
    ls_kvdisk_close(d);

    /* a crashed write's temporary file (its process gone) is removed at open, never indexed */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.1", p2, 999999999);
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    fputs("half a file", f);
    fclose(f);
    d = ls_kvdisk_open(&kp, &err);
    assert_non_null(d);
    assert_int_equal(file_size(tmp), -1);
    assert_false(ls_kvdisk_has(d, k2));
    /* ... but not one of a live process (this one: another engine may be writing it) */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.7", p2, (int)getpid());
    f = fopen(tmp, "wb");
    assert_non_null(f);
    fclose(f);
    ls_kvdisk_close(d);
    d = ls_kvdisk_open(&kp, &err);
    assert_non_null(d);
    assert_int_equal(file_size(tmp), 0);
    unlink(tmp);
    assert_int_equal(g_n_log, 0);
    ls_kvdisk_close(d);
    rm_rf(dir);
}

/* Each damage to the one file of k1 is refused with its reason, and the file removed. */
typedef enum { D_MAGIC, D_TRUNC_HDR, D_TRUNC, D_FLIP, D_RECIPE, D_MODEL, D_LAYOUT, D_PREFIX, D_TRAILING } damage;

static void test_files_damaged_or_foreign_are_ignored(void **state) {
    (void)state;
    static const struct {
        damage d;
        const char *why;
    } cases[] = {
        {D_MAGIC, "bad magic"},
        {D_TRUNC_HDR, "truncated"},
        {D_TRUNC, "truncated"},
        {D_FLIP, "checksum mismatch"},
        {D_RECIPE, "recipe version 2"},
        {D_MODEL, "another model"},
        {D_LAYOUT, "another KV layout"},
        {D_PREFIX, "another prefix"},
        {D_TRAILING, "trailing bytes"},
    };
    int32_t toks[BS], other[BS];
    for (int i = 0; i < BS; i++) toks[i] = 7 * i + 1, other[i] = toks[i];
    other[BS - 1]++;
    float in[2 * BS * 4], out[2 * BS * 4];
    fill_payload(in, 2 * BS * 4, -5.0f);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[64];
        mkdtemp_into(dir, sizeof dir);
        ls_err err;
        g_n_log = 0;
        ls_kvdisk_params kp = small(dir, SHA_A, 1, 0);
        char key[65], path[4200];
        /* the writer: this process's identity, except for the foreign cases */
        ls_kvdisk_params wp = kp;
        if (cases[c].d == D_RECIPE) wp.recipe = 2;
        if (cases[c].d == D_MODEL) wp.model_sha256 = SHA_B;
        if (cases[c].d == D_LAYOUT) wp.head_dim = 2, wp.n_head_kv = 2;
        ls_kvdisk *w = ls_kvdisk_open(&wp, &err);
        assert_non_null(w);
        ls_kvdisk *d = NULL;
        char wkey[65];
        ls_kvdisk_key(w, cases[c].d == D_PREFIX ? other : toks, BS, wkey);
        assert_true(ls_kvdisk_save(w, wkey, cases[c].d == D_PREFIX ? other : toks, BS, in));
        ls_kvdisk_close(w);
        d = ls_kvdisk_open(&kp, &err);
        assert_non_null(d);
        ls_kvdisk_key(d, toks, BS, key);
        key_path(dir, key, path, sizeof path);
        if (strcmp(wkey, key)) { /* written under its own name: put it where this process looks */
            char wpath[4200];
            key_path(dir, wkey, wpath, sizeof wpath);
            assert_int_equal(rename(wpath, path), 0);
            ls_kvdisk_close(d);
            d = ls_kvdisk_open(&kp, &err); /* re-index */
            assert_non_null(d);
        }
        const long size = file_size(path);
        switch (cases[c].d) {
        case D_MAGIC: patch(path, 0, "XX", 2); break;
        case D_TRUNC_HDR: assert_int_equal(truncate(path, 100), 0); break;
        case D_TRUNC: assert_int_equal(truncate(path, size - 10), 0); break;
        case D_FLIP: flip(path, 136 + BS * 4 + 37); break; /* a payload byte */
        case D_TRAILING: {
            FILE *f = fopen(path, "ab");
            fputs("more", f);
            fclose(f);
            break;
        }
        default: break;
        }
        assert_true(ls_kvdisk_has(d, key));
        memset(out, 0, sizeof out);
        assert_false(ls_kvdisk_load(d, key, toks, BS, out));
        if (!logged(cases[c].why))
            fail_msg("case %zu: no warning naming '%s' (got %d: '%s')", c, cases[c].why, g_n_log, g_log[0]);
        assert_true(logged(path));
        assert_false(ls_kvdisk_has(d, key));
        assert_int_equal(file_size(path), -1); /* removed */
        ls_kvdisk_stats st;
        ls_kvdisk_get_stats(d, &st);
        assert_int_equal(st.rejected, 1);
        assert_int_equal(st.loaded, 0);
        /* the next save replaces it with a good one */
        assert_true(ls_kvdisk_save(d, key, toks, BS, in));
        assert_true(ls_kvdisk_load(d, key, toks, BS, out));
        assert_memory_equal(in, out, sizeof in);
        ls_kvdisk_close(d);
        rm_rf(dir);
    }
}

/* ======================= on the model ======================= */
static int group_setup(void **state) {
    (void)state;
    g_model = fx_load_model(NULL);
    return 0;
}
static int group_teardown(void **state) {
    (void)state;
    ls_model_free(g_model);
    return 0;
}

static ls_engine *engine(const char *dir) {
    ls_err err;
    ls_engine_params p = LS_ENGINE_PARAMS_INIT;
    p.n_ctx = 256;
    p.n_seq_max = 2;
    p.step_tokens = 48; /* the prompt in several chunks */
    p.n_threads = 1;
    p.cache_dir = dir;
    p.on_log = on_log;
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    if (!e) fail_msg("engine: %s", err.msg);
    return e;
}

static void gen(ls_engine *e, const int32_t *prompt, int32_t n, ls_result *r) {
    ls_err err;
    ls_request q = LS_REQUEST_INIT;
    q.prompt = prompt;
    q.n_prompt = n;
    q.max_tokens = 6;
    q.want_logits = true;
    q.ignore_eos = true;
    q.sampling.temperature = 0.8f;
    q.sampling.seed = 42;
    *r = (ls_result)LS_RESULT_INIT;
    if (ls_engine_generate(e, &q, r, &err)) fail_msg("generate: %s", err.msg);
}

static void tokens(int32_t *out, int32_t *n, int32_t cap) {
    const char *text = "The persistent prefix cache keeps every full block of sixteen positions in a file of its "
                       "own, named by a chain of hashes over the model, the recipe, the layout and the tokens. "
                       "A restart loads them back instead of prefilling the prompt again, and the logits must "
                       "not change by a single bit.";
    size_t nn;
    ls_err err;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(g_model), text, strlen(text), true, true, out, (size_t)cap, &nn,
                                 &err), LS_OK);
    *n = (int32_t)nn;
}

static void same(const ls_result *a, const ls_result *b) {
    assert_int_equal(a->n_tokens, b->n_tokens);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens);
    assert_int_equal(a->n_logits, b->n_logits);
    const size_t V = ls_model_hparams(g_model)->n_vocab;
    assert_memory_equal(a->logits, b->logits, (size_t)a->n_logits * V * sizeof(float));
}

static void test_restored_prefix_is_cold_bits(void **state) {
    (void)state;
    FX_NEED(g_model);
    int32_t p[200];
    int32_t n;
    tokens(p, &n, 150);
    assert_true(n > 3 * BS + 5);
    char dir[64];
    mkdtemp_into(dir, sizeof dir);
    g_n_log = 0;
    ls_result r0, r1, cold;
    /* the first process: computes the prompt, writes its full blocks when the request ends */
    ls_engine *e = engine(dir);
    gen(e, p, n - 5, &r0);
    ls_engine_stats st = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(e, &st);
    const int32_t full = (n - 5 + r0.n_tokens) / BS; /* K/V of the prompt and all but the last token */
    assert_true(st.disk_written >= (uint64_t)full - 1 && st.disk_written <= (uint64_t)full);
    ls_result_free(&r0);
    ls_engine_free(e);
    assert_int_equal(count_files(dir, ".lskv"), (int)st.disk_written);
    /* a new process: the same prompt plus more; its prefix comes from the files */
    e = engine(dir);
    gen(e, p, n, &r1);
    ls_engine_get_stats(e, &st);
    assert_true(st.disk_loaded >= 3);
    assert_int_equal(r1.n_cached, (int32_t)st.disk_loaded * BS);
    assert_int_equal(st.disk_rejected, 0);
    ls_engine_free(e);
    /* cold: no cache at all */
    ls_err err;
    ls_engine_params cp = LS_ENGINE_PARAMS_INIT;
    cp.n_ctx = 256;
    cp.n_threads = 1;
    cp.no_prefix_cache = true;
    ls_engine *c = ls_engine_create(g_model, &cp, &err);
    assert_non_null(c);
    gen(c, p, n, &cold);
    assert_int_equal(cold.n_cached, 0);
    same(&r1, &cold);
    print_message("restored %llu blocks (%d positions) of a %d-token prompt: logits and tokens memcmp-equal to a "
                  "cold engine\n", (unsigned long long)st.disk_loaded, r1.n_cached, n);
    ls_result_free(&r1);

    /* damage the second block's file: the first block still loads, the rest is prefilled,
     * the bits are the same, and the warning names the file and why */
    char key[65], path[4200];
    {
        ls_model_info mi = LS_MODEL_INFO_INIT;
        assert_int_equal(ls_model_get_info(g_model, &mi, &err), LS_OK);
        const ls_hparams *hp = ls_model_hparams(g_model);
        ls_kvdisk_params q = {.dir = dir, .model_sha256 = mi.sha256, .backend = "cpu",
                              .recipe = LOCKSTEP_RECIPE_VERSION, .n_layer = (int32_t)hp->n_layer,
                              .n_head_kv = (int32_t)hp->n_head_kv, .head_dim = (int32_t)hp->head_dim};
        ls_kvdisk *d = ls_kvdisk_open(&q, &err);
        assert_non_null(d);
        ls_kvdisk_key(d, p, 2 * BS, key); /* the engine's naming, recomputed here */
        ls_kvdisk_close(d);
    }
    key_path(dir, key, path, sizeof path);
    assert_true(file_size(path) > 0);
    flip(path, file_size(path) / 2);
    g_n_log = 0;
    e = engine(dir);
    gen(e, p, n, &r1);
    ls_engine_get_stats(e, &st);
    assert_int_equal(st.disk_rejected, 1);
    assert_int_equal(st.disk_loaded, 1);
    assert_int_equal(r1.n_cached, BS);
    assert_true(logged("checksum mismatch") && logged(path));
    same(&r1, &cold);
    ls_result_free(&r1);
    ls_engine_free(e);
    ls_result_free(&cold);
    ls_engine_free(c);
    rm_rf(dir);
}

/* Loads amid a batch: 5 requests sharing prefixes of one prompt, submitted together to an
 * engine with a small KV cache (evictions, preemption, recomputation) over a directory
 * holding part of the prefix; each request's logits and tokens equal its cold solo run. */
typedef struct {
    int32_t tok[16], n;
    float *lg; /* one row per sampled token */
    size_t V;
    int32_t n_cached;
    bool done;
} coll;

static void collect(void *ud, const ls_event *ev) {
    coll *c = ud;
    if (ev->logits && !ev->prompt && c->n < 16) {
        memcpy(c->lg + (size_t)c->n * c->V, ev->logits, c->V * sizeof(float));
        c->tok[c->n++] = ev->token;
    }
    if (ev->done) {
        c->done = true;
        c->n_cached = ev->n_cached;
    }
}

static void test_loads_amid_a_batch(void **state) {
    (void)state;
    FX_NEED(g_model);
    int32_t p[200], n;
    tokens(p, &n, 150);
    char dir[64];
    mkdtemp_into(dir, sizeof dir);
    g_n_log = 0;
    ls_result r;
    ls_engine *e = engine(dir);
    gen(e, p, 2 * BS + 3, &r); /* the first two blocks on disk */
    ls_result_free(&r);
    ls_engine_free(e);
    enum { NR = 5 };
    int32_t lens[NR] = {n, n - 3, 3 * BS + 1, n, BS + 2};
    int32_t prompts[NR][200];
    const size_t V = ls_model_hparams(g_model)->n_vocab;
    coll got[NR], want[NR];
    for (int i = 0; i < NR; i++) {
        memcpy(prompts[i], p, sizeof p);
        if (i == 3) prompts[i][n - 1] = 7; /* the same prefix, another last token */
        got[i] = (coll){.V = V, .lg = calloc(16 * V, sizeof(float))};
        want[i] = (coll){.V = V, .lg = calloc(16 * V, sizeof(float))};
    }
    ls_err err;
    ls_engine_params bp = LS_ENGINE_PARAMS_INIT;
    bp.n_ctx = 256;
    bp.n_seq_max = 3;
    bp.step_tokens = 24;
    bp.n_threads = 2;
    bp.kv_mem = (int64_t)ls_kv_block_bytes(g_model) * 6; /* less than two running sequences need */
    bp.cache_dir = dir;
    bp.on_log = on_log;
    ls_engine *b = ls_engine_create(g_model, &bp, &err);
    assert_non_null(b);
    ls_engine_params cp = LS_ENGINE_PARAMS_INIT;
    cp.n_ctx = 256;
    cp.n_threads = 1;
    cp.no_prefix_cache = true;
    ls_engine *c = ls_engine_create(g_model, &cp, &err);
    assert_non_null(c);
    for (int pass = 0; pass < 2; pass++) { /* 0: the batch over the directory; 1: each alone, cold */
        for (int i = 0; i < NR; i++) {
            ls_request q = LS_REQUEST_INIT;
            q.prompt = prompts[i];
            q.n_prompt = lens[i];
            q.max_tokens = 5;
            q.ignore_eos = true;
            q.want_logits = true;
            q.sampling.temperature = 0.9f;
            q.sampling.seed = 100 + (uint64_t)i;
            q.on_event = collect;
            q.ud = pass ? &want[i] : &got[i];
            assert_int_equal(ls_engine_submit(pass ? c : b, &q, NULL, &err), LS_OK);
            for (int guard = 0; pass && !ls_engine_idle(c); guard++) {
                assert_true(guard < 10000);
                assert_int_equal(ls_engine_step(c, NULL, &err), LS_OK);
            }
        }
        for (int guard = 0; !pass && !ls_engine_idle(b); guard++) {
            assert_true(guard < 10000);
            assert_int_equal(ls_engine_step(b, NULL, &err), LS_OK);
            if (!ls_engine_check(b, &err)) fail_msg("engine invariant: %s", err.msg);
        }
    }
    ls_engine_stats st = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(b, &st);
    int32_t cached = 0;
    for (int i = 0; i < NR; i++) {
        assert_true(got[i].done && want[i].done);
        assert_int_equal(got[i].n, want[i].n);
        assert_memory_equal(got[i].tok, want[i].tok, (size_t)got[i].n * sizeof(int32_t));
        assert_memory_equal(got[i].lg, want[i].lg, (size_t)got[i].n * V * sizeof(float));
        cached += got[i].n_cached;
        free(got[i].lg);
        free(want[i].lg);
    }
    print_message("a batch of %d over the directory: %llu blocks loaded, %llu written, %llu evictions, %llu "
                  "preemptions, %d prompt positions cached; every logit equal to the cold solo runs\n", NR,
                  (unsigned long long)st.disk_loaded, (unsigned long long)st.disk_written,
                  (unsigned long long)st.evictions, (unsigned long long)st.preemptions, cached);
    assert_true(st.disk_loaded >= 2);
    assert_true(st.evictions > 0 && st.preemptions > 0); /* the test exercises what it claims */
    assert_int_equal(st.disk_rejected, 0);
    assert_int_equal(g_n_log, 0);
    ls_engine_free(b);
    ls_engine_free(c);
    rm_rf(dir);
}

/* After a failed parity probe the directory is neither written nor read, and says so. */
static void test_failed_probe_keeps_the_directory_out(void **state) {
    (void)state;
    FX_NEED(g_model);
    int32_t p[200];
    int32_t n;
    tokens(p, &n, 150);
    char dir[64];
    mkdtemp_into(dir, sizeof dir);
    ls_result r;
    ls_engine *e = engine(dir);
    gen(e, p, n, &r); /* written */
    ls_result_free(&r);
    ls_engine_free(e);
    const int files = count_files(dir, ".lskv");
    assert_true(files >= 3);
    g_n_log = 0;
    e = engine(dir);
    ls_engine_set_verdict(e, LS_VERDICT_FAILED);
    assert_true(logged("parity probe failed"));
    p[n - 1] = p[n - 2]; /* a new last block: nothing of it is on disk */
    gen(e, p, n, &r);
    ls_engine_stats st = LS_ENGINE_STATS_INIT;
    ls_engine_get_stats(e, &st);
    assert_int_equal(r.n_cached, 0);
    assert_int_equal(st.disk_loaded + st.disk_written, 0);
    assert_int_equal(count_files(dir, ".lskv"), files);
    ls_result_free(&r);
    ls_engine_free(e);
    rm_rf(dir);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_round_trip_and_lru),
        cmocka_unit_test(test_files_damaged_or_foreign_are_ignored),
        cmocka_unit_test(test_restored_prefix_is_cold_bits),
        cmocka_unit_test(test_failed_probe_keeps_the_directory_out),
        cmocka_unit_test(test_loads_amid_a_batch),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
