/* test_quant.c - type table, tensor sizes, fp16 conversion, and hand-built blocks of
 * every dequantizable type.  The expected values are computed here from the block
 * layout (encode direction) with exactly representable numbers, so this is a check
 * independent of dequant.c's decode loops; tests/python/test_dequant.py compares
 * bit for bit against the gguf package. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* Dequantize `nbytes` of block data at an odd address (and at an aligned one) and
 * check both against `want` bit for bit. */
static void check_dequant(uint32_t type, const uint8_t *blk, size_t nbytes, const float *want, int64_t n) {
    uint8_t *buf = malloc(nbytes + 1);
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(buf);
    assert_non_null(y);
    for (int pass = 0; pass < 2; pass++) {
        memcpy(buf + pass, blk, nbytes);
        memset(y, 0xAB, (size_t)n * sizeof *y);
        ls_dequant_row(type, buf + pass, y, n);
        for (int64_t i = 0; i < n; i++) {
            if (bits_of(y[i]) != bits_of(want[i]))
                fail_msg("%s element %lld: got %a (0x%08x), want %a (0x%08x) (misaligned=%d)",
                         ls_type_get(type)->name, (long long)i, (double)y[i], bits_of(y[i]),
                         (double)want[i], bits_of(want[i]), pass);
        }
    }
    free(buf);
    free(y);
}

/* ---- type table -------------------------------------------------------------- */

static void test_table(void **state) {
    (void)state;
    static const struct {
        uint32_t id;
        const char *name;
        uint32_t be, bb;
        bool dq;
    } want[] = {
        {0, "F32", 1, 4, true},         {1, "F16", 1, 2, true},          {2, "Q4_0", 32, 18, true},
        {3, "Q4_1", 32, 20, true},      {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
        {8, "Q8_0", 32, 34, true},      {9, "Q8_1", 32, 40, false},      {10, "Q2_K", 256, 84, false},
        {11, "Q3_K", 256, 110, false},  {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
        {14, "Q6_K", 256, 210, true},   {15, "Q8_K", 256, 292, false},   {16, "IQ2_XXS", 256, 66, false},
        {17, "IQ2_XS", 256, 74, false}, {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
        {20, "IQ4_NL", 32, 18, false},  {21, "IQ3_S", 256, 110, false},  {22, "IQ2_S", 256, 82, false},
        {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},        {25, "I16", 1, 2, false},
        {26, "I32", 1, 4, false},       {27, "I64", 1, 8, false},        {28, "F64", 1, 8, false},
        {29, "IQ1_M", 256, 56, false},  {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
        {35, "TQ2_0", 256, 66, false},  {39, "MXFP4", 32, 17, true},
    };
    bool seen[LS_TYPE_COUNT] = {false};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ls_type_info *ti = ls_type_get(want[i].id);
        assert_non_null(ti);
        assert_string_equal(ti->name, want[i].name);
        assert_int_equal(ti->block_elems, want[i].be);
        assert_int_equal(ti->block_bytes, want[i].bb);
        assert_int_equal(ti->can_dequant, want[i].dq);
        seen[want[i].id] = true;
    }
    for (uint32_t id = 0; id < LS_TYPE_COUNT; id++)
        if (!seen[id])
            assert_null(ls_type_get(id));
    static const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 41, 100, 0x7fffffffu, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        assert_null(ls_type_get(unknown[i]));
}

static void test_nbytes(void **state) {
    (void)state;
    ls_err err;
    uint64_t n = 0;
    assert_int_equal(ls_type_nbytes(LS_TYPE_Q4_1, 64, &n, &err), LS_OK);
    assert_int_equal(n, 40);
    assert_int_equal(ls_type_nbytes(LS_TYPE_Q6_K, 256 * 3, &n, &err), LS_OK);
    assert_int_equal(n, 630);
    assert_int_equal(ls_type_nbytes(LS_TYPE_F32, 0, &n, &err), LS_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ls_type_nbytes(LS_TYPE_MXFP4, 576, &n, &err), LS_OK);
    assert_int_equal(n, 18 * 17);
    /* largest F16 tensor that fits: (2^64-1)/2 elements */
    assert_int_equal(ls_type_nbytes(LS_TYPE_F16, UINT64_MAX / 2, &n, &err), LS_OK);
    assert_int_equal(n, UINT64_MAX - 1);

    ls_err_clear(&err);
    assert_int_equal(ls_type_nbytes(LS_TYPE_Q4_1, 33, &n, &err), LS_E_FORMAT);
    assert_int_equal(err.code, LS_E_FORMAT);
    assert_non_null(strstr(err.msg, "Q4_1"));
    assert_non_null(strstr(err.msg, "33"));
    assert_int_equal(ls_type_nbytes(LS_TYPE_Q6_K, 255, &n, &err), LS_E_FORMAT);
    assert_non_null(strstr(err.msg, "Q6_K"));
    assert_non_null(strstr(err.msg, "255"));

    ls_err_clear(&err);
    assert_int_equal(ls_type_nbytes(LS_TYPE_F32, UINT64_MAX / 2, &n, &err), LS_E_FORMAT);
    assert_non_null(strstr(err.msg, "F32"));
    assert_non_null(strstr(err.msg, "overflow"));
    assert_int_equal(ls_type_nbytes(LS_TYPE_Q8_1, (UINT64_MAX / 32) * 32, &n, &err), LS_E_FORMAT);
    assert_non_null(strstr(err.msg, "overflow"));
    assert_int_equal(ls_type_nbytes(LS_TYPE_F64, UINT64_MAX / 8 + 1, &n, &err), LS_E_FORMAT);

    assert_int_equal(ls_type_nbytes(4, 32, &n, &err), LS_E_FORMAT);
    assert_non_null(strstr(err.msg, "4"));
    assert_int_equal(ls_type_nbytes(LS_TYPE_COUNT, 32, &n, &err), LS_E_FORMAT);
    /* a NULL ls_err is allowed */
    assert_int_equal(ls_type_nbytes(LS_TYPE_Q8_0, 31, &n, NULL), LS_E_FORMAT);
}

/* ---- fp16 / bf16 ---------------------------------------------------------------- */

static void test_fp16_values(void **state) {
    (void)state;
    assert_true(ls_fp16_to_f32(0x3C00) == 1.0f);
    assert_true(ls_fp16_to_f32(0xC000) == -2.0f);
    assert_true(ls_fp16_to_f32(0x3555) == 0x1.554p-2f);
    assert_true(ls_fp16_to_f32(0x7BFF) == 65504.0f);
    assert_true(ls_fp16_to_f32(0x0400) == 0x1p-14f);
    assert_true(ls_fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(ls_fp16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    assert_true(ls_fp16_to_f32(0x8001) == -0x1p-24f);
    assert_int_equal(bits_of(ls_fp16_to_f32(0x0000)), 0x00000000u);
    assert_int_equal(bits_of(ls_fp16_to_f32(0x8000)), 0x80000000u);
    assert_int_equal(bits_of(ls_fp16_to_f32(0x7C00)), 0x7f800000u);
    assert_int_equal(bits_of(ls_fp16_to_f32(0xFC00)), 0xff800000u);
    assert_int_equal(bits_of(ls_fp16_to_f32(0x7E00)), 0x7fc00000u); /* quiet NaN */
    assert_int_equal(bits_of(ls_fp16_to_f32(0x7C01)), 0x7f802000u); /* payload kept */

    assert_int_equal(ls_f32_to_fp16(1.0f), 0x3C00);
    assert_int_equal(ls_f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(ls_f32_to_fp16(1.0f + 0x1p-11f), 0x3C00);     /* tie -> even */
    assert_int_equal(ls_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie -> even */
    assert_int_equal(ls_f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    assert_int_equal(ls_f32_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(ls_f32_to_fp16(65519.996f), 0x7BFF);
    assert_int_equal(ls_f32_to_fp16(65520.0f), 0x7C00);
    assert_int_equal(ls_f32_to_fp16(-1e30f), 0xFC00);
    assert_int_equal(ls_f32_to_fp16(INFINITY), 0x7C00);
    assert_int_equal(ls_f32_to_fp16(0x1p-25f), 0x0000);
    assert_int_equal(ls_f32_to_fp16(-0x1p-25f), 0x8000);
    assert_int_equal(ls_f32_to_fp16(0x1.000002p-25f), 0x0001);
    assert_int_equal(ls_f32_to_fp16(3 * 0x1p-25f), 0x0002);
    assert_int_equal(ls_f32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400); /* tie between 0x3FF and 0x400 */
    assert_int_equal(ls_f32_to_fp16(1e-30f), 0x0000);
    uint16_t nan = ls_f32_to_fp16(NAN);
    assert_int_equal(nan & 0x7C00, 0x7C00);
    assert_int_not_equal(nan & 0x03FF, 0);

    assert_true(ls_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(ls_bf16_to_f32(0xC040) == -3.0f);
    assert_int_equal(bits_of(ls_bf16_to_f32(0x7FC1)), 0x7FC10000u);
}

/* Every half round-trips, and every midpoint between neighbouring halves (exact in
 * float) rounds to the even one, while its float neighbours round to the nearer. */
static void test_fp16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = ls_fp16_to_f32((uint16_t)h);
        uint16_t back = ls_f32_to_fp16(f);
        bool is_nan = (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;
        if (is_nan) {
            assert_true(isnan(f));
            assert_int_equal(back & 0x7C00u, 0x7C00u);
            assert_int_not_equal(back & 0x3FFu, 0);
            assert_int_equal(back & 0x8000u, h & 0x8000u);
            continue;
        }
        if (back != h)
            fail_msg("half 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        uint32_t mag = h & 0x7FFFu;
        if (mag >= 0x7C00u)
            continue;
        float sgn = (h & 0x8000u) ? -1.0f : 1.0f;
        float lo = fabsf(f);
        float hi = mag == 0x7BFFu ? 65536.0f : ls_fp16_to_f32((uint16_t)(mag + 1));
        float mid = (lo + hi) * 0.5f;
        uint16_t even = (mag & 1u) ? (uint16_t)(mag + 1) : (uint16_t)mag; /* 0x7C00 = inf for the top */
        uint16_t s = (uint16_t)(h & 0x8000u);
        assert_int_equal(ls_f32_to_fp16(sgn * mid), s | even);
        assert_int_equal(ls_f32_to_fp16(sgn * nextafterf(mid, 0.0f)), s | mag);
        assert_int_equal(ls_f32_to_fp16(sgn * nextafterf(mid, INFINITY)), s | (mag + 1));
    }
}

/* ---- hand-built blocks ------------------------------------------------------------ */

static void test_plain(void **state) {
    (void)state;
    uint8_t b[16];
    float want[8];
    static const uint16_t h[8] = {0x3C00, 0xC000, 0x0001, 0x8000, 0x7C00, 0xFC00, 0x7BFF, 0x3555};
    for (int i = 0; i < 8; i++) {
        put_u16(b + 2 * i, h[i]);
        want[i] = ls_fp16_to_f32(h[i]);
    }
    check_dequant(LS_TYPE_F16, b, 16, want, 8);

    static const uint16_t bf[4] = {0x3F80, 0xC040, 0x0001, 0xFF80};
    static const uint32_t bfw[4] = {0x3F800000u, 0xC0400000u, 0x00010000u, 0xFF800000u};
    for (int i = 0; i < 4; i++) {
        put_u16(b + 2 * i, bf[i]);
        memcpy(&want[i], &bfw[i], 4);
    }
    check_dequant(LS_TYPE_BF16, b, 8, want, 4);

    const float f[4] = {1.5f, -0.0f, 0x1p-149f, -65537.25f};
    memcpy(b, f, sizeof f);
    check_dequant(LS_TYPE_F32, b, 16, f, 4);
}

static void test_q4_0(void **state) {
    (void)state;
    uint8_t b[2 * 18];
    float want[64];
    put_u16(b, 0x3800);      /* d = 0.5 */
    put_u16(b + 18, 0xC400); /* d = -4 */
    for (int j = 0; j < 16; j++) {
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
        want[j] = (float)(j - 8) * 0.5f;
        want[j + 16] = (float)(7 - j) * 0.5f;
        b[20 + j] = (uint8_t)(((j * 5) & 15) | ((j * 3 & 15) << 4));
        want[32 + j] = (float)(((j * 5) & 15) - 8) * -4.0f;
        want[48 + j] = (float)(((j * 3) & 15) - 8) * -4.0f;
    }
    assert_true(want[0] == -4.0f && want[16] == 3.5f && want[32] == 32.0f);
    check_dequant(LS_TYPE_Q4_0, b, sizeof b, want, 64);
}

static void test_q4_1(void **state) {
    (void)state;
    uint8_t b[20];
    float want[32];
    put_u16(b, 0x3400);     /* d = 0.25 */
    put_u16(b + 2, 0xBC00); /* m = -1 */
    for (int j = 0; j < 16; j++) {
        b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
        want[j] = (float)j * 0.25f - 1.0f;
        want[j + 16] = (float)(15 - j) * 0.25f - 1.0f;
    }
    assert_true(want[0] == -1.0f && want[16] == 2.75f);
    check_dequant(LS_TYPE_Q4_1, b, sizeof b, want, 32);
}

/* 5-bit blocks: q[e] = (e * 7 + 3) % 32; low nibble at qs[e % 16] (low for e < 16),
 * high bit at bit e of the little-endian u32 qh. */
static void fill_q5(uint8_t *qh, uint8_t *qs, int *q) {
    uint32_t h = 0;
    memset(qs, 0, 16);
    for (int e = 0; e < 32; e++) {
        q[e] = (e * 7 + 3) % 32;
        qs[e % 16] |= (uint8_t)((q[e] & 15) << (e < 16 ? 0 : 4));
        h |= (uint32_t)(q[e] >> 4) << e;
    }
    qh[0] = (uint8_t)h;
    qh[1] = (uint8_t)(h >> 8);
    qh[2] = (uint8_t)(h >> 16);
    qh[3] = (uint8_t)(h >> 24);
}

static void test_q5_0(void **state) {
    (void)state;
    uint8_t b[22];
    int q[32];
    float want[32];
    put_u16(b, 0x4100); /* d = 2.5 */
    fill_q5(b + 2, b + 6, q);
    for (int e = 0; e < 32; e++)
        want[e] = (float)(q[e] - 16) * 2.5f;
    check_dequant(LS_TYPE_Q5_0, b, sizeof b, want, 32);
}

static void test_q5_1(void **state) {
    (void)state;
    uint8_t b[24];
    int q[32];
    float want[32];
    put_u16(b, 0x3000);     /* d = 0.125 */
    put_u16(b + 2, 0x4200); /* m = 3 */
    fill_q5(b + 4, b + 8, q);
    for (int e = 0; e < 32; e++)
        want[e] = (float)q[e] * 0.125f + 3.0f;
    assert_true(want[0] == 3.375f);
    check_dequant(LS_TYPE_Q5_1, b, sizeof b, want, 32);
}

static void test_q8_0(void **state) {
    (void)state;
    uint8_t b[34];
    float want[32];
    put_u16(b, 0xB000); /* d = -0.125 */
    for (int j = 0; j < 32; j++) {
        int v = j * 8 - 128; /* -128 .. 120 */
        b[2 + j] = (uint8_t)(int8_t)v;
        want[j] = (float)v * -0.125f;
    }
    assert_true(want[0] == 16.0f);
    check_dequant(LS_TYPE_Q8_0, b, sizeof b, want, 32);
}

/* K-quant 6-bit scale packing, written from the layout (encode direction). */
static const uint8_t k_sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
static const uint8_t k_mn[8] = {0, 5, 10, 15, 20, 40, 48, 62};
static void pack_scales_k4(uint8_t *s) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(k_sc[j] | ((k_sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(k_mn[j] | ((k_mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((k_sc[j + 4] & 15) | ((k_mn[j + 4] & 15) << 4));
    }
}

static void test_q4_k(void **state) {
    (void)state;
    uint8_t b[144] = {0};
    float want[256];
    put_u16(b, 0x3800);     /* d = 0.5 */
    put_u16(b + 2, 0x3400); /* dmin = 0.25 */
    pack_scales_k4(b + 4);
    for (int e = 0; e < 256; e++) {
        int s = e / 32, q = (e * 11 + 5) % 16;
        b[16 + 32 * (s / 2) + e % 32] |= (uint8_t)(q << (4 * (s % 2)));
        want[e] = 0.5f * (float)k_sc[s] * (float)q - 0.25f * (float)k_mn[s];
    }
    check_dequant(LS_TYPE_Q4_K, b, sizeof b, want, 256);
}

static void test_q5_k(void **state) {
    (void)state;
    uint8_t b[176] = {0};
    float want[256];
    put_u16(b, 0x3C00);     /* d = 1 */
    put_u16(b + 2, 0xB800); /* dmin = -0.5 */
    pack_scales_k4(b + 4);
    for (int e = 0; e < 256; e++) {
        int s = e / 32, q = (e * 13 + 7) % 32;
        b[48 + 32 * (s / 2) + e % 32] |= (uint8_t)((q & 15) << (4 * (s % 2)));
        b[16 + e % 32] |= (uint8_t)((q >> 4) << s);
        want[e] = 1.0f * (float)k_sc[s] * (float)q - -0.5f * (float)k_mn[s];
    }
    check_dequant(LS_TYPE_Q5_K, b, sizeof b, want, 256);
}

static void test_q6_k(void **state) {
    (void)state;
    uint8_t b[210] = {0};
    float want[256];
    static const int8_t sc[16] = {-128, -3, 1, 2, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31, 64, 127};
    put_u16(b + 208, 0x3800); /* d = 0.5 */
    memcpy(b + 192, sc, 16);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, g = (e % 128) / 32, l = e % 32;
        int q = (e * 7 + 3) % 64;
        b[64 * h + 32 * (g & 1) + l] |= (uint8_t)((q & 15) << (g < 2 ? 0 : 4));
        b[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
        want[e] = 0.5f * (float)sc[e / 16] * (float)(q - 32);
    }
    assert_true(want[0] == 0.5f * -128.0f * -29.0f);
    check_dequant(LS_TYPE_Q6_K, b, sizeof b, want, 256);
}

static void test_mxfp4(void **state) {
    (void)state;
    /* E2M1 code -> value: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is +0) */
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    static const uint8_t exps[4] = {127, 130, 0, 254};
    uint8_t b[4 * 17];
    float want[128];
    for (int k = 0; k < 4; k++) {
        uint8_t *blk = b + 17 * k;
        blk[0] = exps[k];
        for (int j = 0; j < 16; j++) {
            int lo = j, hi = (j * 5 + k) & 15;
            blk[1 + j] = (uint8_t)(lo | (hi << 4));
            want[32 * k + j] = ldexpf(e2m1[lo], exps[k] - 127);
            want[32 * k + j + 16] = ldexpf(e2m1[hi], exps[k] - 127);
        }
    }
    assert_true(want[7] == 6.0f && want[32 + 7] == 48.0f && want[64 + 1] == 0x1p-128f);
    assert_true(want[96 + 7] == 6.0f * 0x1p127f);
    assert_int_equal(bits_of(want[8]), 0); /* +0, not -0 */
    check_dequant(LS_TYPE_MXFP4, b, sizeof b, want, 128);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),      cmocka_unit_test(test_nbytes),
        cmocka_unit_test(test_fp16_values), cmocka_unit_test(test_fp16_exhaustive),
        cmocka_unit_test(test_plain),      cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_q4_1),       cmocka_unit_test(test_q5_0),
        cmocka_unit_test(test_q5_1),       cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_k),       cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k),       cmocka_unit_test(test_mxfp4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
