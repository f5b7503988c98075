/* test_gguf.c - the GGUF reader and writer: round trips of every value type (v2 and
 * v3, memory and mmap), typed getters, a corpus of hand-built corrupt files (each
 * checked for status, message and byte offset), every truncation of a valid file,
 * deterministic byte-flip fuzzing, and the real model when $MODEL names it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "gguf_builder.h"
#include "quant/quant.h"

#define ANY_OFFSET (-1)

/* ---- helpers ---------------------------------------------------------------- */

/* Parses an exact-size heap copy (so ASan sees any overread) and expects failure with
 * `code`, a message containing `sub`, and (unless ANY_OFFSET) the byte offset `off`. */
static void expect_fail(const void *buf, size_t n, ls_status code, const char *sub, int64_t off) {
    void *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, buf, n);
    ls_err e;
    ls_err_clear(&e);
    gguf_file *f = gguf_open_mem(copy, n, &e);
    if (f) {
        gguf_close(f);
        free(copy);
        fail_msg("expected failure containing '%s', but the file parsed", sub);
    }
    free(copy);
    if (e.code != code) fail_msg("expected %s, got %s: %s", ls_status_name(code), ls_status_name(e.code), e.msg);
    if (!strstr(e.msg, sub)) fail_msg("message '%s' lacks '%s'", e.msg, sub);
    if (off != ANY_OFFSET && e.offset != (uint64_t)off)
        fail_msg("expected offset %lld, got %llu: %s", (long long)off, (unsigned long long)e.offset, e.msg);
}

static void expect_fail_gb(gb_buf *b, ls_status code, const char *sub, int64_t off) {
    expect_fail(b->p, b->n, code, sub, off);
    gb_free(b);
}

static gguf_file *open_ok(const void *buf, size_t n) {
    ls_err e;
    ls_err_clear(&e);
    gguf_file *f = gguf_open_mem(buf, n, &e);
    if (!f) fail_msg("parse failed: %s", e.msg);
    return f;
}

/* A valid file with one KV (general.architecture) and n tensors named t0, t1, ... of
 * F32 [4] at consecutive 32-byte offsets; *info_at gets the offset of the first tensor info. */
static void gb_valid(gb_buf *b, uint32_t n_tensors, size_t *info_at) {
    gb_header(b, 3, n_tensors, 1);
    gb_kv_str(b, "general.architecture", "llama");
    if (info_at) *info_at = b->n;
    for (uint32_t i = 0; i < n_tensors; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%u", i);
        uint64_t ne[1] = {4};
        gb_tensor_info(b, name, 1, ne, LS_TYPE_F32, 32u * i);
    }
    gb_pad(b, 32);
    for (uint32_t i = 0; i < n_tensors; i++) gb_zeros(b, 32);
}

static const uint8_t k_u8s[] = {0, 1, 255};
static const int8_t k_i8s[] = {-128, 0, 127};
static const uint16_t k_u16s[] = {0, 65535};
static const int16_t k_i16s[] = {-32768, 32767};
static const uint32_t k_u32s[] = {0, 4000000000u};
static const int32_t k_i32s[] = {INT32_MIN, -1, INT32_MAX};
static const uint64_t k_u64s[] = {0, UINT64_MAX};
static const int64_t k_i64s[] = {INT64_MIN, INT64_MAX};
static const float k_f32s[] = {1.5f, -0.0f, 3.25e-20f};
static const double k_f64s[] = {2.5, -1e300};
static const bool k_bools[] = {true, false, true};
static const char *const k_strs[] = {"hello", "", "w\xc3\xb6rld", "tab\there"};

/* Nested value [[1, 2, 3], [4]] of INT32, as an ARRAY encoding. */
static void gb_nested_i32(gb_buf *b) {
    gb_u32(b, GGUF_VT_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, GGUF_VT_INT32);
    gb_u64(b, 3);
    gb_u32(b, 1);
    gb_u32(b, 2);
    gb_u32(b, 3);
    gb_u32(b, GGUF_VT_INT32);
    gb_u64(b, 1);
    gb_u32(b, 4);
}

/* Nested value [["a", "bc"], []] of STRING arrays, as an ARRAY encoding. */
static void gb_nested_str(gb_buf *b) {
    gb_u32(b, GGUF_VT_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, GGUF_VT_STRING);
    gb_u64(b, 2);
    gb_str(b, "a");
    gb_str(b, "bc");
    gb_u32(b, GGUF_VT_STRING);
    gb_u64(b, 0);
}

/* `levels` nested arrays, the innermost [7] of UINT8, as an ARRAY encoding. */
static void gb_deep(gb_buf *b, int levels) {
    for (int i = 0; i < levels - 1; i++) {
        gb_u32(b, GGUF_VT_ARRAY);
        gb_u64(b, 1);
    }
    gb_u32(b, GGUF_VT_UINT8);
    gb_u64(b, 1);
    gb_u8(b, 7);
}

/* The round-trip file: every scalar type, strings, arrays of each, nested arrays,
 * and three tensors (F32 [3,2], Q8_0 [64], F32 [5]) with alignment 64.
 * Caller frees the result. */
static void *build_full(size_t *size) {
    gguf_writer *w = gguf_writer_create();
    assert_non_null(w);
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_set_alignment(w, 64);
    gguf_writer_add_u8(w, "t.u8", 200);
    gguf_writer_add_i8(w, "t.i8", -100);
    gguf_writer_add_u16(w, "t.u16", 60000);
    gguf_writer_add_i16(w, "t.i16", -30000);
    gguf_writer_add_u32(w, "t.u32", 4000000000u);
    gguf_writer_add_i32(w, "t.i32", -2000000000);
    gguf_writer_add_u64(w, "t.u64", UINT64_MAX);
    gguf_writer_add_i64(w, "t.i64", INT64_MIN);
    gguf_writer_add_f32(w, "t.f32", 0.1f);
    gguf_writer_add_f64(w, "t.f64", 0.1);
    gguf_writer_add_bool(w, "t.bool", true);
    gguf_writer_add_bool(w, "t.false", false);
    gguf_writer_add_str(w, "t.str", "hi there");
    gguf_writer_add_str(w, "t.empty", "");
    gguf_writer_add_strn(w, "t.nul", "a\0b", 3);
    gguf_writer_add_arr(w, "a.u8", GGUF_VT_UINT8, k_u8s, 3);
    gguf_writer_add_arr(w, "a.i8", GGUF_VT_INT8, k_i8s, 3);
    gguf_writer_add_arr(w, "a.u16", GGUF_VT_UINT16, k_u16s, 2);
    gguf_writer_add_arr(w, "a.i16", GGUF_VT_INT16, k_i16s, 2);
    gguf_writer_add_arr(w, "a.u32", GGUF_VT_UINT32, k_u32s, 2);
    gguf_writer_add_arr(w, "a.i32", GGUF_VT_INT32, k_i32s, 3);
    gguf_writer_add_arr(w, "a.u64", GGUF_VT_UINT64, k_u64s, 2);
    gguf_writer_add_arr(w, "a.i64", GGUF_VT_INT64, k_i64s, 2);
    gguf_writer_add_arr(w, "a.f32", GGUF_VT_FLOAT32, k_f32s, 3);
    gguf_writer_add_arr(w, "a.f64", GGUF_VT_FLOAT64, k_f64s, 2);
    gguf_writer_add_arr(w, "a.bool", GGUF_VT_BOOL, k_bools, 3);
    gguf_writer_add_arr(w, "a.empty", GGUF_VT_FLOAT32, NULL, 0);
    gguf_writer_add_arr_str(w, "a.str", k_strs, 4);
    gguf_writer_add_arr_str(w, "a.str_empty", NULL, 0);
    gb_buf nb = {0};
    gb_nested_i32(&nb);
    gguf_writer_add_raw(w, "a.nested", GGUF_VT_ARRAY, nb.p, nb.n);
    gb_free(&nb);
    gb_nested_str(&nb);
    gguf_writer_add_raw(w, "a.nested_str", GGUF_VT_ARRAY, nb.p, nb.n);
    gb_free(&nb);
    gb_deep(&nb, 8);
    gguf_writer_add_raw(w, "a.deep8", GGUF_VT_ARRAY, nb.p, nb.n);
    gb_free(&nb);

    float a[6] = {1, 2, 3, 4, 5, 6};
    uint64_t ne_a[2] = {3, 2};
    gguf_writer_add_tensor(w, "blk.0.a", LS_TYPE_F32, 2, ne_a, a, sizeof a);
    uint8_t q[2 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 7 + 1);
    uint64_t ne_q[1] = {64};
    gguf_writer_add_tensor(w, "blk.0.q", LS_TYPE_Q8_0, 1, ne_q, q, sizeof q);
    float c[5] = {-1, -2, -3, -4, -5};
    uint64_t ne_c[1] = {5};
    gguf_writer_add_tensor(w, "c", LS_TYPE_F32, 1, ne_c, c, sizeof c);

    void *buf;
    ls_err e;
    ls_err_clear(&e);
    if (gguf_writer_serialize(w, &buf, size, &e) != LS_OK) fail_msg("serialize: %s", e.msg);
    gguf_writer_free(w);
    return buf;
}

static const gguf_value *must_find(const gguf_file *f, const char *key) {
    const gguf_value *v = gguf_find(f, key);
    if (!v) fail_msg("key '%s' not found", key);
    return v;
}

static void check_full(const gguf_file *f, uint32_t version, const void *base) {
    ls_err e;
    ls_err_clear(&e);
    assert_int_equal(gguf_version(f), version);
    assert_int_equal(gguf_alignment(f), 64);
    assert_int_equal(gguf_data_offset(f) % 64, 0);
    assert_int_equal(gguf_n_kv(f), 34);
    assert_int_equal(gguf_n_tensors(f), 3);
    assert_true(gguf_str_eq(gguf_kv_at(f, 0)->key, "general.architecture"));
    assert_true(gguf_str_eq(gguf_kv_at(f, 1)->key, "general.alignment"));
    assert_null(gguf_kv_at(f, 34));
    assert_null(gguf_tensor_at(f, 3));
    assert_null(gguf_find(f, "nope"));
    assert_null(gguf_find(f, "t.u"));

    const gguf_value *v;
    v = must_find(f, "t.u8"); assert_int_equal(v->type, GGUF_VT_UINT8); assert_int_equal(v->v.u64, 200);
    v = must_find(f, "t.i8"); assert_int_equal(v->type, GGUF_VT_INT8); assert_int_equal(v->v.i64, -100);
    v = must_find(f, "t.u16"); assert_int_equal(v->type, GGUF_VT_UINT16); assert_int_equal(v->v.u64, 60000);
    v = must_find(f, "t.i16"); assert_int_equal(v->type, GGUF_VT_INT16); assert_int_equal(v->v.i64, -30000);
    v = must_find(f, "t.u32"); assert_int_equal(v->type, GGUF_VT_UINT32); assert_int_equal(v->v.u64, 4000000000u);
    v = must_find(f, "t.i32"); assert_int_equal(v->type, GGUF_VT_INT32); assert_int_equal(v->v.i64, -2000000000);
    v = must_find(f, "t.u64"); assert_int_equal(v->type, GGUF_VT_UINT64); assert_true(v->v.u64 == UINT64_MAX);
    v = must_find(f, "t.i64"); assert_int_equal(v->type, GGUF_VT_INT64); assert_true(v->v.i64 == INT64_MIN);
    v = must_find(f, "t.f32"); assert_int_equal(v->type, GGUF_VT_FLOAT32); assert_true(v->v.f64 == (double)0.1f);
    v = must_find(f, "t.f64"); assert_int_equal(v->type, GGUF_VT_FLOAT64); assert_true(v->v.f64 == 0.1);
    v = must_find(f, "t.bool"); assert_int_equal(v->type, GGUF_VT_BOOL); assert_int_equal(v->v.u64, 1);
    v = must_find(f, "t.false"); assert_int_equal(v->type, GGUF_VT_BOOL); assert_int_equal(v->v.u64, 0);
    v = must_find(f, "t.str"); assert_int_equal(v->type, GGUF_VT_STRING); assert_true(gguf_str_eq(v->v.str, "hi there"));
    v = must_find(f, "t.empty"); assert_int_equal(v->v.str.len, 0);
    v = must_find(f, "t.nul"); assert_int_equal(v->v.str.len, 3); assert_memory_equal(v->v.str.ptr, "a\0b", 3);

    /* Scalar arrays, through the element accessors. */
    v = must_find(f, "a.u8");
    assert_int_equal(v->type, GGUF_VT_ARRAY); assert_int_equal(v->v.arr.elem_type, GGUF_VT_UINT8);
    assert_int_equal(v->v.arr.n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(gguf_arr_i64(v, i), k_u8s[i]);
    assert_null(v->v.arr.strs); assert_null(v->v.arr.items);
    v = must_find(f, "a.i8");
    for (int i = 0; i < 3; i++) assert_int_equal(gguf_arr_i64(v, i), k_i8s[i]);
    v = must_find(f, "a.u16");
    for (int i = 0; i < 2; i++) assert_int_equal(gguf_arr_i64(v, i), k_u16s[i]);
    v = must_find(f, "a.i16");
    for (int i = 0; i < 2; i++) assert_int_equal(gguf_arr_i64(v, i), k_i16s[i]);
    v = must_find(f, "a.u32");
    for (int i = 0; i < 2; i++) assert_int_equal(gguf_arr_i64(v, i), k_u32s[i]);
    v = must_find(f, "a.i32");
    for (int i = 0; i < 3; i++) assert_int_equal(gguf_arr_i64(v, i), k_i32s[i]);
    v = must_find(f, "a.u64");
    for (int i = 0; i < 2; i++) assert_true((uint64_t)gguf_arr_i64(v, i) == k_u64s[i]);
    v = must_find(f, "a.i64");
    for (int i = 0; i < 2; i++) assert_true(gguf_arr_i64(v, i) == k_i64s[i]);
    v = must_find(f, "a.f32");
    for (int i = 0; i < 3; i++) assert_true(gguf_arr_f64(v, i) == (double)k_f32s[i]);
    assert_true(signbit(gguf_arr_f64(v, 1)));
    v = must_find(f, "a.f64");
    for (int i = 0; i < 2; i++) assert_true(gguf_arr_f64(v, i) == k_f64s[i]);
    v = must_find(f, "a.bool");
    for (int i = 0; i < 3; i++) assert_int_equal(gguf_arr_i64(v, i), k_bools[i]);
    v = must_find(f, "a.empty");
    assert_int_equal(v->v.arr.elem_type, GGUF_VT_FLOAT32); assert_int_equal(v->v.arr.n, 0);

    /* String arrays. */
    v = must_find(f, "a.str");
    assert_int_equal(v->v.arr.elem_type, GGUF_VT_STRING); assert_int_equal(v->v.arr.n, 4);
    assert_null(v->v.arr.raw); assert_non_null(v->v.arr.strs);
    for (int i = 0; i < 4; i++) assert_true(gguf_str_eq(v->v.arr.strs[i], k_strs[i]));
    v = must_find(f, "a.str_empty");
    assert_int_equal(v->v.arr.elem_type, GGUF_VT_STRING); assert_int_equal(v->v.arr.n, 0);

    /* Nested arrays. */
    v = must_find(f, "a.nested");
    assert_int_equal(v->v.arr.elem_type, GGUF_VT_ARRAY); assert_int_equal(v->v.arr.n, 2);
    const gguf_value *it = v->v.arr.items;
    assert_non_null(it);
    assert_int_equal(it[0].type, GGUF_VT_ARRAY); assert_int_equal(it[0].v.arr.elem_type, GGUF_VT_INT32);
    assert_int_equal(it[0].v.arr.n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(gguf_arr_i64(&it[0], i), i + 1);
    assert_int_equal(it[1].v.arr.n, 1); assert_int_equal(gguf_arr_i64(&it[1], 0), 4);
    v = must_find(f, "a.nested_str");
    it = v->v.arr.items;
    assert_int_equal(it[0].v.arr.elem_type, GGUF_VT_STRING);
    assert_true(gguf_str_eq(it[0].v.arr.strs[0], "a")); assert_true(gguf_str_eq(it[0].v.arr.strs[1], "bc"));
    assert_int_equal(it[1].v.arr.n, 0);
    v = must_find(f, "a.deep8");
    for (int d = 0; d < 7; d++) {
        assert_int_equal(v->v.arr.elem_type, GGUF_VT_ARRAY); assert_int_equal(v->v.arr.n, 1);
        v = &v->v.arr.items[0];
    }
    assert_int_equal(v->v.arr.elem_type, GGUF_VT_UINT8); assert_int_equal(gguf_arr_i64(v, 0), 7);

    /* Tensors. */
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.a");
    assert_non_null(t);
    assert_ptr_equal(t, gguf_tensor_at(f, 0));
    assert_int_equal(t->type, LS_TYPE_F32); assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 3); assert_int_equal(t->ne[1], 2); assert_int_equal(t->ne[2], 1); assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->n_elems, 6); assert_int_equal(t->nbytes, 24); assert_int_equal(t->offset, 0);
    assert_ptr_equal(t->data, (const uint8_t *)base + gguf_data_offset(f));
    float a[6] = {1, 2, 3, 4, 5, 6};
    assert_memory_equal(t->data, a, sizeof a);
    t = gguf_find_tensor(f, "blk.0.q");
    assert_non_null(t);
    assert_int_equal(t->type, LS_TYPE_Q8_0); assert_int_equal(t->nbytes, 68); assert_int_equal(t->offset, 64);
    for (int i = 0; i < 68; i++) assert_int_equal(((const uint8_t *)t->data)[i], (uint8_t)(i * 7 + 1));
    t = gguf_find_tensor(f, "c");
    assert_non_null(t);
    assert_int_equal(t->offset, 192);
    assert_true(((const float *)t->data)[4] == -5.0f);
    assert_null(gguf_find_tensor(f, "blk.0"));
    assert_null(gguf_find_tensor(f, ""));
}

/* ---- round trips -------------------------------------------------------------- */

static void test_roundtrip_v3(void **state) {
    (void)state;
    size_t n;
    void *buf = build_full(&n);
    gguf_file *f = open_ok(buf, n);
    assert_int_equal(gguf_file_size(f), n);
    check_full(f, 3, buf);
    gguf_close(f);
    free(buf);
}

static void test_roundtrip_v2(void **state) {
    (void)state;
    size_t n;
    void *buf = build_full(&n);
    uint32_t v2 = 2;
    memcpy((uint8_t *)buf + 4, &v2, 4);
    gguf_file *f = open_ok(buf, n);
    check_full(f, 2, buf);
    gguf_close(f);
    free(buf);
}

static void test_roundtrip_file(void **state) {
    (void)state;
    size_t n;
    void *buf = build_full(&n);
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
    close(fd);
    ls_err e;
    ls_err_clear(&e);
    gguf_file *f = gguf_open(path, &e);
    if (!f) fail_msg("gguf_open: %s", e.msg);
    assert_int_equal(gguf_file_size(f), n);
    /* Same contents through the mapping (data pointers are into it, not buf). */
    const gguf_tensor *t = gguf_find_tensor(f, "c");
    assert_true(((const float *)t->data)[0] == -1.0f);
    assert_int_equal(gguf_n_kv(f), 34);
    gguf_close(f);

    /* gguf_writer_write_file produces the same bytes. */
    gguf_writer *w = gguf_writer_create();
    gguf_writer_add_str(w, "general.architecture", "x");
    assert_int_equal(gguf_writer_write_file(w, path, &e), LS_OK);
    gguf_writer_free(w);
    f = gguf_open(path, &e);
    if (!f) fail_msg("gguf_open: %s", e.msg);
    assert_int_equal(gguf_n_tensors(f), 0);
    assert_int_equal(gguf_alignment(f), 32);
    gguf_close(f);

    /* An empty file is a format error, not an mmap failure. */
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    assert_null(gguf_open(path, &e));
    assert_int_equal(e.code, LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "unexpected end of file reading magic"));
    unlink(path);
    free(buf);
}

static void test_open_missing(void **state) {
    (void)state;
    ls_err e;
    ls_err_clear(&e);
    assert_null(gguf_open("/nonexistent/dir/model.gguf", &e));
    assert_int_equal(e.code, LS_E_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/dir/model.gguf"));
    assert_non_null(strstr(e.msg, "No such file"));
    assert_null(gguf_open("/tmp", &e));
    assert_int_equal(e.code, LS_E_IO);
    assert_non_null(strstr(e.msg, "'/tmp'"));
    assert_null(gguf_open("/nonexistent", NULL)); /* a NULL err is allowed */
}

static void test_getters(void **state) {
    (void)state;
    size_t n;
    void *buf = build_full(&n);
    gguf_file *f = open_ok(buf, n);
    ls_err e;
    ls_err_clear(&e);
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f32;
    bool b;
    gguf_str s;
    const gguf_value *arr;

    assert_int_equal(gguf_get_u32(f, "t.u8", &u32, &e), LS_OK); assert_int_equal(u32, 200);
    assert_int_equal(gguf_get_u32(f, "t.u32", &u32, &e), LS_OK); assert_int_equal(u32, 4000000000u);
    assert_int_equal(gguf_get_u32(f, "t.u64", &u32, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "key 't.u64' value 18446744073709551615 does not fit in u32"));
    assert_int_equal(gguf_get_u32(f, "t.i8", &u32, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "key 't.i8' value -100 does not fit in u32"));
    assert_int_equal(gguf_get_u64(f, "t.u64", &u64, &e), LS_OK); assert_true(u64 == UINT64_MAX);
    assert_int_equal(gguf_get_u64(f, "t.i64", &u64, &e), LS_E_FORMAT);
    assert_int_equal(gguf_get_i32(f, "t.i8", &i32, &e), LS_OK); assert_int_equal(i32, -100);
    assert_int_equal(gguf_get_i32(f, "t.u16", &i32, &e), LS_OK); assert_int_equal(i32, 60000);
    assert_int_equal(gguf_get_i32(f, "t.i32", &i32, &e), LS_OK); assert_int_equal(i32, -2000000000);
    assert_int_equal(gguf_get_i32(f, "t.u32", &i32, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "does not fit in i32"));
    assert_int_equal(gguf_get_i32(f, "t.i64", &i32, &e), LS_E_FORMAT);
    assert_int_equal(gguf_get_u32(f, "t.f32", &u32, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "key 't.f32' has type FLOAT32 (expected an integer)"));
    assert_true(e.offset != LS_NO_OFFSET);
    assert_int_equal(gguf_get_u32(f, "t.bool", &u32, &e), LS_E_FORMAT);

    assert_int_equal(gguf_get_f32(f, "t.f32", &f32, &e), LS_OK); assert_true(f32 == 0.1f);
    assert_int_equal(gguf_get_f32(f, "t.f64", &f32, &e), LS_OK); assert_true(f32 == 0.1f);
    assert_int_equal(gguf_get_f32(f, "t.u8", &f32, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "expected FLOAT32 or FLOAT64"));
    assert_int_equal(gguf_get_bool(f, "t.bool", &b, &e), LS_OK); assert_true(b);
    assert_int_equal(gguf_get_bool(f, "t.false", &b, &e), LS_OK); assert_false(b);
    assert_int_equal(gguf_get_bool(f, "t.u8", &b, &e), LS_E_FORMAT);
    assert_int_equal(gguf_get_str(f, "general.architecture", &s, &e), LS_OK); assert_true(gguf_str_eq(s, "llama"));
    assert_int_equal(gguf_get_str(f, "t.u8", &s, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "key 't.u8' has type UINT8 (expected STRING)"));

    assert_int_equal(gguf_get_arr(f, "a.str", GGUF_VT_STRING, &arr, &e), LS_OK); assert_int_equal(arr->v.arr.n, 4);
    assert_int_equal(gguf_get_arr(f, "a.f32", GGUF_VT_COUNT, &arr, &e), LS_OK);
    assert_int_equal(gguf_get_arr(f, "a.f32", GGUF_VT_INT32, &arr, &e), LS_E_FORMAT);
    assert_non_null(strstr(e.msg, "key 'a.f32' is an array of FLOAT32 (expected an array of INT32)"));
    assert_int_equal(gguf_get_arr(f, "t.u8", GGUF_VT_COUNT, &arr, &e), LS_E_FORMAT);

    ls_err_clear(&e);
    assert_int_equal(gguf_get_u32(f, "llama.block_count", &u32, &e), LS_E_FORMAT);
    assert_string_equal(e.msg, "missing required key 'llama.block_count'");
    assert_int_equal(gguf_get_str(f, "nope", &s, NULL), LS_E_FORMAT); /* NULL err is allowed */

    assert_string_equal(gguf_vtype_name(GGUF_VT_FLOAT64), "FLOAT64");
    assert_string_equal(gguf_vtype_name((gguf_vtype)77), "UNKNOWN");
    gguf_close(f);
    free(buf);
}

static void test_writer_errors(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_create();
    ls_err e;
    ls_err_clear(&e);
    assert_int_equal(gguf_writer_add_u32(w, "k", 1), LS_OK);
    assert_int_equal(gguf_writer_add_u32(w, "k", 2), LS_E_INVALID);
    assert_int_equal(gguf_writer_add_u32(w, "other", 2), LS_E_INVALID); /* sticky */
    void *buf = (void *)1;
    size_t n = 1;
    assert_int_equal(gguf_writer_serialize(w, &buf, &n, &e), LS_E_INVALID);
    assert_null(buf);
    assert_non_null(strstr(e.msg, "duplicate key 'k'"));
    gguf_writer_free(w);

    float x[3] = {0};
    uint64_t ne[1] = {3};
    w = gguf_writer_create();
    assert_int_equal(gguf_writer_add_tensor(w, "x", LS_TYPE_F32, 1, ne, x, 8), LS_E_INVALID);
    assert_int_equal(gguf_writer_serialize(w, &buf, &n, &e), LS_E_INVALID);
    assert_non_null(strstr(e.msg, "tensor 'x' has 8 bytes of data (expected 12)"));
    gguf_writer_free(w);

    w = gguf_writer_create();
    assert_int_equal(gguf_writer_set_alignment(w, 3), LS_E_INVALID);
    gguf_writer_free(w);

    w = gguf_writer_create();
    assert_int_equal(gguf_writer_add_tensor(w, "x", LS_TYPE_Q8_0, 1, ne, x, 12), LS_E_INVALID);
    gguf_writer_free(w);
    gguf_writer_free(NULL);
}

/* ---- the corrupt corpus ------------------------------------------------------- */

static void test_truncated_every_prefix(void **state) {
    (void)state;
    size_t n;
    void *buf = build_full(&n);
    for (size_t cut = 0; cut < n; cut++) {
        void *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        ls_err e;
        ls_err_clear(&e);
        gguf_file *f = gguf_open_mem(copy, cut, &e);
        if (f) fail_msg("prefix of %zu bytes (of %zu) parsed", cut, n);
        if (e.code != LS_E_FORMAT) fail_msg("prefix %zu: %s: %s", cut, ls_status_name(e.code), e.msg);
        if (!strstr(e.msg, "end of file") && !strstr(e.msg, "absurd"))
            fail_msg("prefix %zu: unexpected message '%s'", cut, e.msg);
        if (e.offset > cut) fail_msg("prefix %zu: offset %llu past the end", cut, (unsigned long long)e.offset);
        free(copy);
    }
    free(buf);
}

static void test_truncated_header(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_valid(&b, 1, NULL);
    expect_fail(b.p, 0, LS_E_FORMAT, "unexpected end of file reading magic (need 4 bytes, 0 left)", 0);
    expect_fail(b.p, 3, LS_E_FORMAT, "unexpected end of file reading magic", 0);
    expect_fail(b.p, 7, LS_E_FORMAT, "unexpected end of file reading version", 4);
    expect_fail(b.p, 12, LS_E_FORMAT, "unexpected end of file reading tensor count", 8);
    expect_fail(b.p, 23, LS_E_FORMAT, "unexpected end of file reading KV count", 16);
    expect_fail(b.p, 24, LS_E_FORMAT, "tensor count 1 is absurd for a 24-byte file", 8);
    gb_free(&b);
    gb_valid(&b, 0, NULL);
    expect_fail(b.p, 40, LS_E_FORMAT, "string length 20 runs past end of file (key, 8 bytes left)", 24);
    gb_free(&b);
    gguf_file *f = gguf_open_mem(NULL, 0, NULL);
    assert_null(f);
}

static void test_bad_magic(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_valid(&b, 0, NULL);
    gb_patch_u32(&b, 0, 0x12345678u);
    expect_fail_gb(&b, LS_E_FORMAT, "bad magic 0x12345678 (expected 'GGUF')", 0);
}

static void test_bad_version(void **state) {
    (void)state;
    const uint32_t versions[] = {0, 1, 4, 0x03000000u};
    for (size_t i = 0; i < 4; i++) {
        gb_buf b = {0};
        gb_valid(&b, 1, NULL);
        gb_patch_u32(&b, 4, versions[i]);
        char want[64];
        snprintf(want, sizeof want, "unsupported GGUF version %u", versions[i]);
        expect_fail_gb(&b, LS_E_UNSUPPORTED, want, 4);
    }
    gb_buf b = {0};
    gb_valid(&b, 0, NULL);
    gb_patch_u32(&b, 4, 0x03000000u);
    expect_fail_gb(&b, LS_E_UNSUPPORTED, "big-endian", 4);
}

static void test_absurd_counts(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 1000000000000ull, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    while (b.n < 100) gb_u8(&b, 0);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor count 1000000000000 is absurd for a 100-byte file", 8);

    gb_header(&b, 3, 0, UINT64_MAX);
    gb_kv_str(&b, "general.architecture", "llama");
    expect_fail_gb(&b, LS_E_FORMAT, "KV count 18446744073709551615 is absurd", 16);

    gb_header(&b, 3, UINT64_MAX / 2, UINT64_MAX / 2);
    expect_fail_gb(&b, LS_E_FORMAT, "is absurd for a 24-byte file", 8);

    /* Each count fits alone, but not both together. */
    gb_header(&b, 3, 2, 3);
    gb_zeros(&b, 2 * 33 + 1);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor count 2 and KV count 3 are absurd", 8);
}

static void test_string_past_eof(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "foo");
    gb_u32(&b, GGUF_VT_STRING);
    size_t at = b.n;
    gb_u64(&b, 99999);
    gb_put(&b, "abc", 3);
    expect_fail_gb(&b, LS_E_FORMAT, "string length 99999 runs past end of file (string value of key 'foo'",
                   (int64_t)at);

    gb_header(&b, 3, 0, 1);
    gb_u64(&b, UINT64_MAX); /* key length */
    gb_zeros(&b, 16);
    expect_fail_gb(&b, LS_E_FORMAT, "string length 18446744073709551615 runs past end of file (key", 24);

    /* A string array element. */
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "tok");
    gb_u32(&b, GGUF_VT_ARRAY);
    gb_u32(&b, GGUF_VT_STRING);
    gb_u64(&b, 2);
    gb_str(&b, "a");
    at = b.n;
    gb_u64(&b, 50);
    gb_zeros(&b, 10);
    expect_fail_gb(&b, LS_E_FORMAT, "string length 50 runs past end of file (array element string of key 'tok'",
                   (int64_t)at);

    /* A tensor name. */
    gb_header(&b, 3, 1, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    at = b.n;
    gb_u64(&b, 1000);
    gb_zeros(&b, 40);
    expect_fail_gb(&b, LS_E_FORMAT, "string length 1000 runs past end of file (tensor name", (int64_t)at);
}

static void test_arrays_past_eof(void **state) {
    (void)state;
    const uint32_t types[] = {GGUF_VT_UINT32, GGUF_VT_UINT64, GGUF_VT_STRING, GGUF_VT_ARRAY, GGUF_VT_UINT8};
    const uint64_t ns[] = {UINT64_MAX / 2, 1ull << 61, UINT64_MAX, 1ull << 40, 17};
    for (size_t i = 0; i < 5; i++) {
        gb_buf b = {0};
        gb_header(&b, 3, 0, 1);
        gb_str(&b, "arr");
        gb_u32(&b, GGUF_VT_ARRAY);
        gb_u32(&b, types[i]);
        size_t at = b.n;
        gb_u64(&b, ns[i]);
        gb_zeros(&b, 16);
        char want[128];
        snprintf(want, sizeof want, "array of %llu %s elements for key 'arr' runs past end of file",
                 (unsigned long long)ns[i], gguf_vtype_name((gguf_vtype)types[i]));
        expect_fail_gb(&b, LS_E_FORMAT, want, (int64_t)at);
    }
}

static void test_unknown_value_type(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_str(&b, "foo");
    size_t at = b.n;
    gb_u32(&b, 42);
    gb_u32(&b, 0);
    expect_fail_gb(&b, LS_E_FORMAT, "unknown metadata value type 42 for key 'foo'", (int64_t)at);

    gb_header(&b, 3, 0, 1);
    gb_str(&b, "bar");
    gb_u32(&b, GGUF_VT_ARRAY);
    at = b.n;
    gb_u32(&b, 13);
    gb_u64(&b, 1);
    gb_u32(&b, 0);
    expect_fail_gb(&b, LS_E_FORMAT, "unknown metadata value type 13 for key 'bar' (array element type)", (int64_t)at);

    /* Key bytes that are not printable are escaped in the message. */
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_put(&b, "a\nb", 3);
    gb_u32(&b, 99);
    gb_u32(&b, 0);
    expect_fail_gb(&b, LS_E_FORMAT, "for key 'a\\x0ab'", ANY_OFFSET);
}

static void test_bool_byte(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_str(&b, "flag");
    gb_u32(&b, GGUF_VT_BOOL);
    size_t at = b.n;
    gb_u8(&b, 2);
    expect_fail_gb(&b, LS_E_FORMAT, "bool value 2 for key 'flag' is not 0 or 1", (int64_t)at);

    gb_header(&b, 3, 0, 1);
    gb_str(&b, "flags");
    gb_u32(&b, GGUF_VT_ARRAY);
    gb_u32(&b, GGUF_VT_BOOL);
    gb_u64(&b, 3);
    at = b.n;
    gb_u8(&b, 1);
    gb_u8(&b, 0);
    gb_u8(&b, 255);
    expect_fail_gb(&b, LS_E_FORMAT, "bool array element 2 for key 'flags' is 255 (expected 0 or 1)",
                   (int64_t)at + 2);
}

static void test_deep_nesting(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_str(&b, "deep");
    gb_u32(&b, GGUF_VT_ARRAY);
    size_t start = b.n;
    gb_deep(&b, 9);
    expect_fail_gb(&b, LS_E_FORMAT, "arrays nested more than 8 levels deep for key 'deep'", (int64_t)start + 8 * 12);

    /* Very deep (a stack-exhaustion attempt) fails the same way. */
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "deeper");
    gb_u32(&b, GGUF_VT_ARRAY);
    gb_deep(&b, 100000);
    expect_fail_gb(&b, LS_E_FORMAT, "nested more than 8 levels deep", ANY_OFFSET);
}

static void test_duplicate_key(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 0, 3);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "k", 1);
    size_t at = b.n;
    gb_kv_u32(&b, "k", 2);
    expect_fail_gb(&b, LS_E_FORMAT, "duplicate key 'k'", (int64_t)at);

    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    at = b.n;
    gb_u64(&b, 0);
    gb_u32(&b, GGUF_VT_UINT8);
    gb_u8(&b, 0);
    expect_fail_gb(&b, LS_E_FORMAT, "key 1 is empty", (int64_t)at);
}

static void test_architecture(void **state) {
    (void)state;
    gb_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.name", "x");
    expect_fail_gb(&b, LS_E_FORMAT, "missing required key 'general.architecture'", ANY_OFFSET);

    gb_header(&b, 3, 0, 0);
    expect_fail_gb(&b, LS_E_FORMAT, "missing required key 'general.architecture'", ANY_OFFSET);

    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.architecture", 7);
    expect_fail_gb(&b, LS_E_FORMAT, "key 'general.architecture' has type UINT32 (expected STRING)", 24);
}

static void test_bad_alignment(void **state) {
    (void)state;
    const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < 4; i++) {
        gb_buf b = {0};
        gb_header(&b, 3, 0, 2);
        gb_kv_str(&b, "general.architecture", "llama");
        size_t at = b.n;
        gb_kv_u32(&b, "general.alignment", bad[i]);
        char want[96];
        snprintf(want, sizeof want, "general.alignment %u is not a nonzero power of two", bad[i]);
        expect_fail_gb(&b, LS_E_FORMAT, want, (int64_t)at);
    }
    gb_buf b = {0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_str(&b, "general.alignment");
    gb_u32(&b, GGUF_VT_UINT64);
    gb_u64(&b, 32);
    expect_fail_gb(&b, LS_E_FORMAT, "key 'general.alignment' has type UINT64 (expected UINT32)", ANY_OFFSET);

    /* A valid non-default alignment is honoured: offset 32 is not a multiple of 64. */
    gb_header(&b, 3, 2, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "general.alignment", 64);
    uint64_t ne[1] = {4};
    gb_tensor_info(&b, "a", 1, ne, LS_TYPE_F32, 0);
    gb_tensor_info(&b, "b", 1, ne, LS_TYPE_F32, 32);
    gb_pad(&b, 64);
    gb_zeros(&b, 128);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'b' offset 32 is not a multiple of the alignment 64",
                   ANY_OFFSET);
}

/* A file with one tensor whose info is given by the caller's fields. */
static void gb_one_tensor(gb_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                          uint64_t offset, size_t data_bytes, size_t *info_at) {
    gb_header(b, 3, 1, 1);
    gb_kv_str(b, "general.architecture", "llama");
    *info_at = b->n;
    gb_tensor_info(b, name, n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data_bytes);
}

static void test_tensor_type_and_dims(void **state) {
    (void)state;
    gb_buf b = {0};
    size_t at;
    uint64_t ne4[5] = {4, 1, 1, 1, 1};
    /* name "blk.0.x": 8 + 7 bytes, then n_dims (4), dims, type. */
    gb_one_tensor(&b, "blk.0.x", 1, ne4, 99, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'blk.0.x' has unknown type 99", (int64_t)(at + 15 + 4 + 8));
    gb_one_tensor(&b, "blk.0.x", 1, ne4, LS_TYPE_COUNT, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "has unknown type 40", ANY_OFFSET);
    gb_one_tensor(&b, "blk.0.x", 1, ne4, 4 /* a removed ggml type id */, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "has unknown type 4", ANY_OFFSET);

    gb_one_tensor(&b, "x", 0, ne4, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'x' has n_dims 0 (expected 1..4)", (int64_t)(at + 9));
    gb_one_tensor(&b, "x", 5, ne4, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'x' has n_dims 5 (expected 1..4)", (int64_t)(at + 9));

    uint64_t ne_zero[2] = {4, 0};
    gb_one_tensor(&b, "x", 2, ne_zero, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'x' dimension 1 is 0", (int64_t)(at + 9 + 4 + 8));

    uint64_t ne_ovf[3] = {1ull << 32, 1ull << 32, 2};
    gb_one_tensor(&b, "x", 3, ne_ovf, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'x' dimensions overflow", (int64_t)(at + 9 + 4));
    uint64_t ne_big[2] = {1ull << 32, 1ull << 31}; /* 2^63: fits u64, not int64 */
    gb_one_tensor(&b, "x", 2, ne_big, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'x' dimensions overflow", ANY_OFFSET);
    uint64_t ne_huge[1] = {1ull << 62}; /* element count fits; the byte size does not */
    gb_one_tensor(&b, "x", 1, ne_huge, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'x' size is invalid", ANY_OFFSET);
    uint64_t ne_fits[1] = {1ull << 40}; /* a valid size, far past the end of the file */
    gb_one_tensor(&b, "x", 1, ne_fits, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "runs past end of file", ANY_OFFSET);

    uint64_t ne_row[2] = {33, 32}; /* 1056 elements is a multiple of 32, but a row is not */
    gb_one_tensor(&b, "q", 2, ne_row, LS_TYPE_Q8_0, 0, 33 * 34, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'q' row length 33 is not a multiple of the block size 32 of type Q8_0",
                   ANY_OFFSET);

    gb_one_tensor(&b, "", 1, ne4, LS_TYPE_F32, 0, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 0 has an empty name", (int64_t)at);

    /* Truncated inside the dims. */
    gb_header(&b, 3, 1, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_str(&b, "x");
    gb_u32(&b, 4);
    for (int d = 0; d < 4; d++) gb_u64(&b, 2);
    size_t at_type = b.n;
    gb_zeros(&b, 3);
    expect_fail_gb(&b, LS_E_FORMAT, "unexpected end of file reading tensor type (need 4 bytes, 3 left)",
                   (int64_t)at_type);
}

static void test_tensor_data_range(void **state) {
    (void)state;
    gb_buf b = {0};
    size_t at;
    uint64_t ne[1] = {8}; /* 32 bytes of F32 */
    gb_one_tensor(&b, "a", 1, ne, LS_TYPE_F32, 32, 32, &at);
    /* Data starts at 128 (header 24 + KV 45 + tensor info 33 = 102, padded to 32). */
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'a' data [160, 192) runs past end of file (size 160)",
                   (int64_t)(at + 9 + 4 + 8 + 4));

    gb_one_tensor(&b, "a", 1, ne, LS_TYPE_F32, 0, 31, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'a' data [128, 160) runs past end of file (size 159)", ANY_OFFSET);

    gb_one_tensor(&b, "a", 1, ne, LS_TYPE_F32, UINT64_MAX - 31, 32, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "overflows", ANY_OFFSET);

    gb_one_tensor(&b, "a", 1, ne, LS_TYPE_F32, 5, 64, &at);
    expect_fail_gb(&b, LS_E_FORMAT, "tensor 'a' offset 5 is not a multiple of the alignment 32",
                   (int64_t)(at + 9 + 4 + 8 + 4));

    /* Exactly at the end is fine. */
    gb_one_tensor(&b, "a", 1, ne, LS_TYPE_F32, 0, 32, &at);
    gguf_file *f = open_ok(b.p, b.n);
    assert_int_equal(gguf_data_offset(f), 128);
    assert_ptr_equal(gguf_find_tensor(f, "a")->data, b.p + 128);
    gguf_close(f);
    gb_free(&b);
}

static void test_overlap_and_duplicates(void **state) {
    (void)state;
    gb_buf b = {0};
    uint64_t ne8[1] = {8}, ne16[1] = {16};
    gb_header(&b, 3, 3, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_tensor_info(&b, "c", 1, ne8, LS_TYPE_F32, 128);
    gb_tensor_info(&b, "a", 1, ne16, LS_TYPE_F32, 0); /* [0, 64) */
    gb_tensor_info(&b, "b", 1, ne8, LS_TYPE_F32, 32); /* [32, 64) */
    gb_pad(&b, 32);
    gb_zeros(&b, 160);
    expect_fail_gb(&b, LS_E_FORMAT, "tensors 'a' and 'b' overlap", ANY_OFFSET);

    /* Same offset. */
    gb_header(&b, 3, 2, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_tensor_info(&b, "x", 1, ne8, LS_TYPE_F32, 0);
    gb_tensor_info(&b, "y", 1, ne8, LS_TYPE_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 32);
    expect_fail_gb(&b, LS_E_FORMAT, "tensors 'x' and 'y' overlap", ANY_OFFSET);

    /* Out of order but disjoint is fine. */
    gb_header(&b, 3, 2, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_tensor_info(&b, "x", 1, ne8, LS_TYPE_F32, 32);
    gb_tensor_info(&b, "y", 1, ne8, LS_TYPE_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    gguf_file *f = open_ok(b.p, b.n);
    assert_int_equal(gguf_find_tensor(f, "x")->offset, 32);
    gguf_close(f);
    gb_free(&b);

    gb_header(&b, 3, 2, 1);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_tensor_info(&b, "a", 1, ne8, LS_TYPE_F32, 0);
    size_t at = b.n;
    gb_tensor_info(&b, "a", 1, ne8, LS_TYPE_F32, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    expect_fail_gb(&b, LS_E_FORMAT, "duplicate tensor name 'a'", (int64_t)at);
}

/* Deterministic byte flips of a valid file: never crash, never succeed silently with
 * garbage pointers, always a message on failure. */
static void test_fuzz_flips(void **state) {
    (void)state;
    size_t n;
    void *buf = build_full(&n);
    uint8_t *copy = malloc(n);
    gguf_file *valid = open_ok(buf, n);
    size_t meta = (size_t)gguf_data_offset(valid); /* header, KVs and tensor infos */
    gguf_close(valid);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(copy, buf, n);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t pos = (size_t)(x % n);
            /* Bias towards the header and metadata, where the structure is. */
            if (iter % 2) pos %= meta;
            copy[pos] = (uint8_t)(x >> 32);
        }
        ls_err e;
        ls_err_clear(&e);
        gguf_file *f = gguf_open_mem(copy, n, &e);
        if (f) {
            ok++;
            for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
                const gguf_tensor *t = gguf_tensor_at(f, i);
                assert_true((const uint8_t *)t->data >= copy);
                assert_true((const uint8_t *)t->data + t->nbytes <= copy + n);
            }
            gguf_close(f);
        } else {
            bad++;
            assert_true(e.code != LS_OK);
            assert_true(e.msg[0] != '\0');
        }
    }
    assert_true(bad > 0);
    free(copy);
    free(buf);
}

/* ---- the real model ------------------------------------------------------------ */

static void test_real_model(void **state) {
    (void)state;
    const char *path = getenv("MODEL");
    struct stat sb;
    if (!path || stat(path, &sb) != 0) {
        skip();
        return;
    }
    ls_err e;
    ls_err_clear(&e);
    gguf_file *f = gguf_open(path, &e);
    if (!f) fail_msg("gguf_open(%s): %s", path, e.msg);
    assert_int_equal(gguf_version(f), 3);
    assert_int_equal(gguf_n_tensors(f), 272);
    gguf_str arch;
    assert_int_equal(gguf_get_str(f, "general.architecture", &arch, &e), LS_OK);
    assert_true(gguf_str_eq(arch, "llama"));
    uint32_t emb;
    assert_int_equal(gguf_get_u32(f, "llama.embedding_length", &emb, &e), LS_OK);
    assert_int_equal(emb, 576);
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, LS_TYPE_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 576);
    assert_int_equal(t->ne[1], 49152);
    const gguf_value *toks;
    assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, &e), LS_OK);
    assert_int_equal(toks->v.arr.n, 49152);
    /* Every tensor is reachable by name and lies inside the file. */
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *ti = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)ti->name.len, ti->name.ptr);
        assert_ptr_equal(gguf_find_tensor(f, name), ti);
        assert_true(gguf_data_offset(f) + ti->offset + ti->nbytes <= gguf_file_size(f));
    }
    gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_v3),
        cmocka_unit_test(test_roundtrip_v2),
        cmocka_unit_test(test_roundtrip_file),
        cmocka_unit_test(test_open_missing),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_truncated_every_prefix),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_absurd_counts),
        cmocka_unit_test(test_string_past_eof),
        cmocka_unit_test(test_arrays_past_eof),
        cmocka_unit_test(test_unknown_value_type),
        cmocka_unit_test(test_bool_byte),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_architecture),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_tensor_type_and_dims),
        cmocka_unit_test(test_tensor_data_range),
        cmocka_unit_test(test_overlap_and_duplicates),
        cmocka_unit_test(test_fuzz_flips),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
