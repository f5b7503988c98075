/* Split models (gguf-split's shards, NAME-0000i-of-0000N.gguf) and the metadata-only
 * load.  The default model is written in 2 and 3 shards with the project's writer, as
 * gguf-split lays them out (the first shard: every KV; each: split.no u16, split.count
 * u16, split.tensors.count i32 and a contiguous run of the tensors); the split model's
 * logits are byte-identical to the file's, and a broken set of shards is refused with an
 * error naming the shard.  Skipped when the model is not there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_write.h"
#include "model/model.h"
#include "fixture.h"

static char g_dir[128];

static void copy_kv(gguf_writer *w, const gguf_kv *kv) {
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
    const gguf_value *v = &kv->value;
    if (!strcmp(key, "general.alignment")) return; /* the writer's default */
    ls_status st = gguf_writer_add_value(w, key, v);
    assert_int_equal(st, LS_OK);
}

static void shard_path(char *buf, size_t cap, const char *stem, int i, int n) {
    snprintf(buf, cap, "%s/%s-%05d-of-%05d.gguf", g_dir, stem, i + 1, n);
}

/* What to break in a set of shards. */
typedef struct {
    int wrong_no;    /* shard index (0-based, >= 1) whose split.no is off by one; 0: none */
    bool dup;        /* the first shard's first tensor also in the last shard */
    int count_delta; /* added to split.tensors.count */
} breakage;

/* Writes the model at src as n shards named STEM-0000i-of-0000n.gguf in g_dir; returns
 * the first shard's path (static). */
static const char *write_split(const char *src, const char *stem, int n, breakage b) {
    static char first[256];
    ls_err err;
    gguf_file *f = gguf_open(src, &err);
    if (!f) fail_msg("open %s: %s", src, err.msg);
    const uint64_t nt = gguf_n_tensors(f);
    const int32_t total = (int32_t)nt + (b.dup ? 1 : 0) + b.count_delta;
    for (int s = 0; s < n; s++) {
        gguf_writer *w = gguf_writer_create();
        assert_non_null(w);
        if (s == 0)
            for (uint64_t i = 0; i < gguf_n_kv(f); i++) copy_kv(w, gguf_kv_at(f, i));
        assert_int_equal(gguf_writer_add_u16(w, "split.no", (uint16_t)(s + (b.wrong_no && s == b.wrong_no))), LS_OK);
        assert_int_equal(gguf_writer_add_u16(w, "split.count", (uint16_t)n), LS_OK);
        assert_int_equal(gguf_writer_add_i32(w, "split.tensors.count", total), LS_OK);
        const uint64_t lo = nt * (uint64_t)s / (uint64_t)n, hi = nt * (uint64_t)(s + 1) / (uint64_t)n;
        for (uint64_t i = lo; i < hi + (b.dup && s == n - 1 ? 1 : 0); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i < hi ? i : 0);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes), LS_OK);
        }
        char path[256];
        shard_path(path, sizeof path, stem, s, n);
        if (gguf_writer_write_file(w, path, &err)) fail_msg("write %s: %s", path, err.msg);
        gguf_writer_free(w);
        if (s == 0) snprintf(first, sizeof first, "%s", path);
    }
    gguf_close(f);
    return first;
}

static void remove_split(const char *stem, int n) {
    for (int s = 0; s < n; s++) {
        char path[256];
        shard_path(path, sizeof path, stem, s, n);
        unlink(path);
    }
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/lockstep-split-%d", (int)getpid());
    return mkdir(g_dir, 0700);
}

static int teardown(void **state) {
    (void)state;
    return rmdir(g_dir);
}

/* The logits of every position of a short prompt (one thread, the best ISA). */
static float *logits(const ls_model *m, int32_t *n_out, size_t *v_out) {
    ls_err err;
    const char *text = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\nThe sky";
    int32_t toks[64];
    size_t n;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(m), text, strlen(text), true, true, toks, 64, &n, &err), LS_OK);
    const size_t V = ls_model_hparams(m)->n_vocab;
    ls_ctx *c = ls_ctx_create(m, (ls_ctx_params){.n_ctx = 128, .n_batch = 64, .n_threads = 1, .isa = -1}, &err);
    if (!c) fail_msg("ctx: %s", err.msg);
    float *out = malloc(n * V * sizeof(float));
    assert_non_null(out);
    assert_int_equal(ls_ctx_eval(c, toks, (int32_t)n, 0, out, true, &err), LS_OK);
    ls_ctx_free(c);
    *n_out = (int32_t)n;
    *v_out = V;
    return out;
}

static void test_split_logits_equal_the_files(void **state) {
    (void)state;
    FX_NEED(access(fx_model_path(), R_OK) == 0 ? (void *)1 : NULL);
    ls_err err;
    ls_model *ref = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = fx_model_path()}, &err);
    if (!ref) fail_msg("load: %s", err.msg);
    int32_t n;
    size_t V;
    float *want = logits(ref, &n, &V);
    const uint64_t nt = gguf_n_tensors(ls_model_gguf(ref));
    for (int shards = 2; shards <= 3; shards++) {
        const char *first = write_split(fx_model_path(), "m", shards, (breakage){0});
        ls_model *m = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = first}, &err);
        if (!m) fail_msg("load %s: %s", first, err.msg);
        assert_int_equal(gguf_n_shards(ls_model_gguf(m)), shards);
        assert_int_equal(gguf_n_tensors(ls_model_gguf(m)), nt);
        assert_int_equal(gguf_tensor_at(ls_model_gguf(m), nt - 1)->shard, shards - 1);
        int32_t n2;
        size_t V2;
        float *got = logits(m, &n2, &V2);
        assert_int_equal(n2, n);
        assert_int_equal(V2, V);
        assert_memory_equal(got, want, (size_t)n * V * sizeof(float));
        /* Any shard but the first is refused, naming the first. */
        char second[256];
        shard_path(second, sizeof second, "m", 1, shards);
        assert_null(ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = second}, &err));
        if (!strstr(err.msg, "open the first shard") || !strstr(err.msg, "-00001-of-"))
            fail_msg("unexpected message: %s", err.msg);
        free(got);
        ls_model_free(m);
        remove_split("m", shards);
        print_message("%d shards: %d positions x %zu logits byte-identical to the file's\n", shards, n, V);
    }
    free(want);
    ls_model_free(ref);
}

/* Loads the first shard of a broken set and checks the error mentions every needle. */
static void expect_refused(const char *first, const char *const *needles, int nn) {
    ls_err err;
    ls_model *m = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = first}, &err);
    if (m) fail_msg("%s loaded", first);
    for (int i = 0; i < nn; i++)
        if (!strstr(err.msg, needles[i])) fail_msg("'%s' not in: %s", needles[i], err.msg);
    print_message("refused: %s\n", err.msg);
}

static void test_split_errors_name_the_shard(void **state) {
    (void)state;
    FX_NEED(access(fx_model_path(), R_OK) == 0 ? (void *)1 : NULL);
    /* a missing shard */
    const char *first = write_split(fx_model_path(), "gone", 3, (breakage){0});
    char path[256];
    shard_path(path, sizeof path, "gone", 1, 3);
    unlink(path);
    expect_refused(first, (const char *const[]){"shard 2 of 3", path, "No such file"}, 3);
    remove_split("gone", 3);
    /* a shard with the wrong split.no */
    first = write_split(fx_model_path(), "no", 3, (breakage){.wrong_no = 2});
    shard_path(path, sizeof path, "no", 2, 3);
    expect_refused(first, (const char *const[]){path, "split.no", "expected split.no 2"}, 3);
    remove_split("no", 3);
    /* a tensor in two shards */
    first = write_split(fx_model_path(), "dup", 2, (breakage){.dup = true});
    expect_refused(first, (const char *const[]){"is in shard 1 and in shard 2"}, 1);
    remove_split("dup", 2);
    /* split.tensors.count does not match the shards */
    first = write_split(fx_model_path(), "count", 2, (breakage){.count_delta = 1});
    expect_refused(first, (const char *const[]){"split.tensors.count", "the 2 shards hold"}, 2);
    remove_split("count", 2);
}

/* LS_MODEL_LOAD_META: the metadata, the tokenizer and the validated tensor table, with no
 * weight read or repacked; a forward over it is refused. */
static void test_metadata_only_load(void **state) {
    (void)state;
    FX_NEED(access(fx_model_path(), R_OK) == 0 ? (void *)1 : NULL);
    ls_err err;
    ls_model_params p = {.size = sizeof p, .path = fx_model_path(), .load = LS_MODEL_LOAD_META};
    ls_model *m = ls_model_load(&p, &err);
    if (!m) fail_msg("load: %s", err.msg);
    ls_model *full = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = fx_model_path()}, &err);
    assert_non_null(full);
    assert_int_equal(ls_model_weight_bytes(m), ls_model_weight_bytes(full));
    int32_t a[64], b[64];
    size_t na, nb;
    assert_int_equal(ls_tokenize(ls_model_tokenizer(m), "Hello world", 11, true, true, a, 64, &na, &err), LS_OK);
    assert_int_equal(ls_tokenize(ls_model_tokenizer(full), "Hello world", 11, true, true, b, 64, &nb, &err), LS_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    char *d1 = ls_model_describe_json(m, &err), *d2 = ls_model_describe_json(full, &err);
    assert_non_null(d1);
    assert_string_equal(d1, d2);
    free(d1);
    free(d2);
    assert_null(ls_ctx_create(m, (ls_ctx_params){.n_ctx = 16, .n_batch = 4, .n_threads = 1, .isa = -1}, &err));
    if (!strstr(err.msg, "without its weights")) fail_msg("unexpected message: %s", err.msg);
    ls_engine_params ep = LS_ENGINE_PARAMS_INIT; /* an engine on any device is refused before it reads weights */
    ep.n_ctx = 16;
    assert_null(ls_engine_create(m, &ep, &err));
    if (!strstr(err.msg, "without its weights")) fail_msg("unexpected message: %s", err.msg);
    ls_model_free(full);
    ls_model_free(m);
    /* an unknown mode */
    p.load = 7;
    assert_null(ls_model_load(&p, &err));
    assert_int_equal(err.code, LS_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_logits_equal_the_files),
        cmocka_unit_test(test_split_errors_name_the_shard),
        cmocka_unit_test(test_metadata_only_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
