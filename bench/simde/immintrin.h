/* test-only shim: AVX-512 / AVX-VNNI intrinsics emulated in portable C by SIMDe */
#ifndef KP_SIMDE_SHIM
#define KP_SIMDE_SHIM
#define SIMDE_NO_NATIVE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>
typedef simde__mmask8 __mmask8;
typedef simde__mmask16 __mmask16;
typedef simde__mmask32 __mmask32;
typedef simde__mmask64 __mmask64;
#define _mm256_dpbusd_avx_epi32(a, b, c) simde_mm256_dpbusd_epi32(a, b, c)
#include <math.h>
#include <string.h>
#include <stdint.h>
#define KP_P512(v) simde__m512_private v##_ = simde__m512_to_private(v)
static inline float kp_h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) bits = s;
        else { int sh = 0; while (!(m & 0x400)) { m <<= 1; sh++; } m &= 0x3ff; bits = s | ((uint32_t)(127 - 15 + 1 - sh) << 23) | (m << 13); }
    } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
    else bits = s | ((e + 127 - 15) << 23) | (m << 13);
    float f; memcpy(&f, &bits, 4); return f;
}
static inline __m128i _mm256_cvtepi32_epi16(__m256i a) { simde__m256i_private A = simde__m256i_to_private(a); simde__m128i_private r; for (int i = 0; i < 8; i++) r.i16[i] = (int16_t)A.i32[i]; return simde__m128i_from_private(r); }
static inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void *p) { simde__m256i_private r; for (int i = 0; i < 16; i++) { int16_t v = 0; if (k >> i & 1) memcpy(&v, (const char *)p + 2 * i, 2); r.i16[i] = v; } return simde__m256i_from_private(r); }
static inline __m256i _mm256_maskz_loadu_epi8(__mmask32 k, const void *p) { simde__m256i_private r; for (int i = 0; i < 32; i++) r.i8[i] = (k >> i & 1) ? ((const int8_t *)p)[i] : 0; return simde__m256i_from_private(r); }
static inline __m128i _mm_maskz_loadu_epi8(__mmask16 k, const void *p) { simde__m128i_private r; for (int i = 0; i < 16; i++) r.i8[i] = (k >> i & 1) ? ((const int8_t *)p)[i] : 0; return simde__m128i_from_private(r); }
static inline __m512i _mm512_maskz_loadu_epi8(__mmask64 k, const void *p) { simde__m512i_private r; for (int i = 0; i < 64; i++) r.i8[i] = (k >> i & 1) ? ((const int8_t *)p)[i] : 0; return simde__m512i_from_private(r); }
static inline __m512i _mm512_maskz_loadu_epi32(__mmask16 k, const void *p) { simde__m512i_private r; for (int i = 0; i < 16; i++) { int32_t v = 0; if (k >> i & 1) memcpy(&v, (const char *)p + 4 * i, 4); r.i32[i] = v; } return simde__m512i_from_private(r); }
static inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void *p) { simde__m512_private r; for (int i = 0; i < 16; i++) { float v = 0.0f; if (k >> i & 1) memcpy(&v, (const char *)p + 4 * i, 4); r.f32[i] = v; } return simde__m512_from_private(r); }
static inline void _mm512_mask_storeu_ps(void *p, __mmask16 k, __m512 a) { simde__m512_private A = simde__m512_to_private(a); for (int i = 0; i < 16; i++) if (k >> i & 1) memcpy((char *)p + 4 * i, &A.f32[i], 4); }
static inline __mmask16 _mm512_cmplt_epu32_mask(__m512i a, __m512i b) { simde__m512i_private A = simde__m512i_to_private(a), B = simde__m512i_to_private(b); __mmask16 k = 0; for (int i = 0; i < 16; i++) if (A.u32[i] < B.u32[i]) k |= (__mmask16)(1u << i); return k; }
static inline __m128i _mm512_cvtepi32_epi8(__m512i a) { simde__m512i_private A = simde__m512i_to_private(a); simde__m128i_private r; for (int i = 0; i < 16; i++) r.i8[i] = (int8_t)A.i32[i]; return simde__m128i_from_private(r); }
static inline __m512 _mm512_cvtepi32_ps(__m512i a) { simde__m512i_private A = simde__m512i_to_private(a); simde__m512_private r; for (int i = 0; i < 16; i++) r.f32[i] = (float)A.i32[i]; return simde__m512_from_private(r); }
static inline __m512i _mm512_cvtepu16_epi32(__m256i a) { simde__m256i_private A = simde__m256i_to_private(a); simde__m512i_private r; for (int i = 0; i < 16; i++) r.i32[i] = A.u16[i]; return simde__m512i_from_private(r); }
static inline __m512i _mm512_cvtepu8_epi32(__m128i a) { simde__m128i_private A = simde__m128i_to_private(a); simde__m512i_private r; for (int i = 0; i < 16; i++) r.i32[i] = A.u8[i]; return simde__m512i_from_private(r); }
static inline __m512 _mm512_cvtph_ps(__m256i a) { simde__m256i_private A = simde__m256i_to_private(a); simde__m512_private r; for (int i = 0; i < 16; i++) r.f32[i] = kp_h2f(A.u16[i]); return simde__m512_from_private(r); }
static inline float _mm512_cvtss_f32(__m512 a) { simde__m512_private A = simde__m512_to_private(a); return A.f32[0]; }
#define _mm512_i32gather_epi32(idx, base, sc) kp_g32_32(idx, (const void *)(base), sc)
static inline __m512i kp_g32_32(__m512i idx, const void *base, int sc) { simde__m512i_private IX = simde__m512i_to_private(idx), r; for (int i = 0; i < 16; i++) memcpy(&r.i32[i], (const char *)base + (int64_t)IX.i32[i] * sc, 4); return simde__m512i_from_private(r); }
#define _mm512_i64gather_epi32(idx, base, sc) kp_g64_32(idx, (const void *)(base), sc)
static inline __m256i kp_g64_32(__m512i idx, const void *base, int sc) { simde__m512i_private IX = simde__m512i_to_private(idx); simde__m256i_private r; for (int i = 0; i < 8; i++) memcpy(&r.i32[i], (const char *)base + IX.i64[i] * sc, 4); return simde__m256i_from_private(r); }
#define _mm512_i64gather_epi64(idx, base, sc) kp_g64_64(idx, (const void *)(base), sc)
static inline __m512i kp_g64_64(__m512i idx, const void *base, int sc) { simde__m512i_private IX = simde__m512i_to_private(idx), r; for (int i = 0; i < 8; i++) memcpy(&r.i64[i], (const char *)base + IX.i64[i] * sc, 8); return simde__m512i_from_private(r); }
static inline __m512 _mm512_mask3_fmadd_ps(__m512 a, __m512 b, __m512 c, __mmask16 k) { simde__m512_private A = simde__m512_to_private(a), B = simde__m512_to_private(b), C = simde__m512_to_private(c); for (int i = 0; i < 16; i++) if (k >> i & 1) C.f32[i] = fmaf(A.f32[i], B.f32[i], C.f32[i]); return simde__m512_from_private(C); }
static inline __m512i _mm512_mask_sllv_epi32(__m512i src, __mmask16 k, __m512i a, __m512i cnt) { simde__m512i_private S = simde__m512i_to_private(src), A = simde__m512i_to_private(a), N = simde__m512i_to_private(cnt); for (int i = 0; i < 16; i++) if (k >> i & 1) S.u32[i] = N.u32[i] > 31 ? 0 : A.u32[i] << N.u32[i]; return simde__m512i_from_private(S); }
static inline int _mm512_reduce_add_epi32(__m512i a) { simde__m512i_private A = simde__m512i_to_private(a); uint32_t s = 0; for (int i = 0; i < 16; i++) s += A.u32[i]; return (int)s; }
static inline unsigned _mm512_reduce_max_epu32(__m512i a) { simde__m512i_private A = simde__m512i_to_private(a); uint32_t s = 0; for (int i = 0; i < 16; i++) s = A.u32[i] > s ? A.u32[i] : s; return s; }
static inline __m512i _mm512_srai_epi32(__m512i a, int n) { simde__m512i_private A = simde__m512i_to_private(a); for (int i = 0; i < 16; i++) A.i32[i] = n > 31 ? (A.i32[i] >> 31) : (A.i32[i] >> n); return simde__m512i_from_private(A); }
#undef _mm512_fmadd_ps
#undef _mm256_fmadd_ps
static inline __m512 kp_fmadd512(__m512 a, __m512 b, __m512 c) { simde__m512_private A = simde__m512_to_private(a), B = simde__m512_to_private(b), C = simde__m512_to_private(c); for (int i = 0; i < 16; i++) C.f32[i] = fmaf(A.f32[i], B.f32[i], C.f32[i]); return simde__m512_from_private(C); }
static inline __m256 kp_fmadd256(__m256 a, __m256 b, __m256 c) { simde__m256_private A = simde__m256_to_private(a), B = simde__m256_to_private(b), C = simde__m256_to_private(c); for (int i = 0; i < 8; i++) C.f32[i] = fmaf(A.f32[i], B.f32[i], C.f32[i]); return simde__m256_from_private(C); }
#define _mm512_fmadd_ps(a, b, c) kp_fmadd512(a, b, c)
#define _mm256_fmadd_ps(a, b, c) kp_fmadd256(a, b, c)
static inline float kp_cvtsh_ss(unsigned short h) { return kp_h2f(h); }
#undef _cvtsh_ss
#define _cvtsh_ss(h) kp_cvtsh_ss(h)
#endif
