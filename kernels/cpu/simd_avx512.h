// AVX-512 vector traits (16 f32 lanes) for the generic kernels in matmul_simd.h and vector_ops_simd.h.
// Included only by *_avx512.cpp; everything has internal linkage so no AVX-512 code can be
// merged by the linker into a function the scalar or AVX2 paths call.
#pragma once

// GCC 12's AVX-512 headers start some conversions from _mm512_undefined_ps(), which its own
// -Wuninitialized flags once inlined (GCC bug 105593). The pragma must precede the header,
// so this file is included first by the *_avx512.cpp files.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

namespace chronos::kernels {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kTokenBlock = 4;  // 4 rows x 4 tokens = 16 accumulators of 32 registers

  static __mmask16 mask(int n) { return __mmask16((1u << n) - 1u); }

  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec set1(float v) { return _mm512_set1_ps(v); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load_tail(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void store_tail(float* p, Vec v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }

  static Vec from_f16(__m256i h) { return _mm512_cvtph_ps(h); }
  // bf16 is the top half of an f32: widening and shifting is exact.
  static Vec from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static Vec load_f16(const uint16_t* p) { return from_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static Vec load_f16_tail(const uint16_t* p, int n) { return from_f16(_mm256_maskz_loadu_epi16(mask(n), p)); }
  static Vec load_bf16(const uint16_t* p) { return from_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static Vec load_bf16_tail(const uint16_t* p, int n) { return from_bf16(_mm256_maskz_loadu_epi16(mask(n), p)); }

  // Integer lanes for reading block-quantized levels (matmul_simd.h, block_levels).
  using IVec = __m512i;
  static IVec load_u8(const uint8_t* p) {  // 16 bytes, zero-extended
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static IVec iset1(int v) { return _mm512_set1_epi32(v); }
  static IVec lane_index() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static IVec iand(IVec a, IVec b) { return _mm512_and_si512(a, b); }
  static IVec ior(IVec a, IVec b) { return _mm512_or_si512(a, b); }
  static IVec iadd(IVec a, IVec b) { return _mm512_add_epi32(a, b); }
  static IVec isub(IVec a, IVec b) { return _mm512_sub_epi32(a, b); }
  static IVec isrl(IVec a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static IVec isll(IVec a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static IVec isrlv(IVec a, IVec n) { return _mm512_srlv_epi32(a, n); }
  static Vec to_float(IVec a) { return _mm512_cvtepi32_ps(a); }
  // Lane i = table[idx[i]], idx in [0, 16): one 16-entry permute.
  static IVec lookup16(const int32_t* table, IVec idx) {
    return _mm512_permutexvar_epi32(idx, _mm512_loadu_si512(table));
  }
  // 16 int8 levels as f32, exactly.
  static Vec load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }

  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static float reduce_add(Vec v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(Vec v) { return _mm512_reduce_max_ps(v); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

  // e^x: Cephes expf polynomial on r = x - n ln2, |r| <= ln2 / 2, then scaled by 2^n
  // (about 2 ulp; subnormal results are rounded, not flushed). 0 below -104 (e^x < 2^-150),
  // +inf above ln(FLT_MAX), NaN stays NaN.
  static Vec exp(Vec x) {
    const Vec hi = set1(88.72283905f);
    // max/min return their second operand when one is NaN: x goes second to keep NaN.
    const Vec xc = _mm512_min_ps(hi, _mm512_max_ps(set1(-104.0f), x));
    const Vec n =
        _mm512_roundscale_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    Vec r = _mm512_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    Vec p = set1(1.9875691500e-4f);
    p = fmadd(p, r, set1(1.3981999507e-3f));
    p = fmadd(p, r, set1(8.3334519073e-3f));
    p = fmadd(p, r, set1(4.1665795894e-2f));
    p = fmadd(p, r, set1(1.6666665459e-1f));
    p = fmadd(p, r, set1(5.0000001201e-1f));
    p = fmadd(p, mul(r, r), add(r, set1(1.0f)));
    const Vec result = _mm512_scalef_ps(p, n);  // p * 2^n over the whole range of n
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), result, set1(__builtin_inff()));
  }
};

}  // namespace
}  // namespace chronos::kernels
