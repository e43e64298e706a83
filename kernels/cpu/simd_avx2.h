// AVX2 + FMA + F16C vector traits (8 f32 lanes) for the generic kernels in matmul_simd.h and
// vector_ops_simd.h. Included only by *_avx2.cpp; internal linkage throughout (see simd_avx512.h).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace chronos::kernels {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kTokenBlock = 2;  // 4 rows x 2 tokens = 8 accumulators of 16 registers

  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float v) { return _mm256_set1_ps(v); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load_tail(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void store_tail(float* p, Vec v, int n) { _mm256_maskstore_ps(p, mask(n), v); }

  static __m128i load_u16_tail(const uint16_t* p, int n) {
    alignas(16) uint16_t buffer[8] = {};
    std::memcpy(buffer, p, size_t(n) * sizeof(uint16_t));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buffer));
  }
  static Vec from_f16(__m128i h) { return _mm256_cvtph_ps(h); }
  // bf16 is the top half of an f32: widening and shifting is exact.
  static Vec from_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static Vec load_f16(const uint16_t* p) { return from_f16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Vec load_f16_tail(const uint16_t* p, int n) { return from_f16(load_u16_tail(p, n)); }
  static Vec load_bf16(const uint16_t* p) { return from_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Vec load_bf16_tail(const uint16_t* p, int n) { return from_bf16(load_u16_tail(p, n)); }

  // Integer lanes for reading block-quantized levels (matmul_simd.h, block_levels).
  using IVec = __m256i;
  static IVec load_u8(const uint8_t* p) {  // 8 bytes, zero-extended
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static IVec iset1(int v) { return _mm256_set1_epi32(v); }
  static IVec lane_index() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static IVec iand(IVec a, IVec b) { return _mm256_and_si256(a, b); }
  static IVec ior(IVec a, IVec b) { return _mm256_or_si256(a, b); }
  static IVec iadd(IVec a, IVec b) { return _mm256_add_epi32(a, b); }
  static IVec isub(IVec a, IVec b) { return _mm256_sub_epi32(a, b); }
  static IVec isrl(IVec a, int n) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static IVec isll(IVec a, int n) { return _mm256_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static IVec isrlv(IVec a, IVec n) { return _mm256_srlv_epi32(a, n); }
  static Vec to_float(IVec a) { return _mm256_cvtepi32_ps(a); }
  // Lane i = table[idx[i]], idx in [0, 16): two 8-entry permutes, chosen by idx > 7.
  static IVec lookup16(const int32_t* table, IVec idx) {
    const __m256i low = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(table)), idx);
    const __m256i high =
        _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(table + 8)), idx);
    return _mm256_blendv_epi8(low, high, _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
  }
  // 8 int8 levels as f32, exactly.
  static Vec load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }

  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static float reduce_add(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(Vec v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

  // e^x, same polynomial and limits as Avx512::exp. Without scalef, 2^n (n in [-150, 128]) is
  // applied as two factors 2^(n/2) and 2^(n - n/2) that are each a normal float.
  static Vec exp(Vec x) {
    const Vec hi = set1(88.72283905f);
    const Vec xc = _mm256_min_ps(hi, _mm256_max_ps(set1(-104.0f), x));
    const Vec n = _mm256_round_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    Vec r = _mm256_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    Vec p = set1(1.9875691500e-4f);
    p = fmadd(p, r, set1(1.3981999507e-3f));
    p = fmadd(p, r, set1(8.3334519073e-3f));
    p = fmadd(p, r, set1(4.1665795894e-2f));
    p = fmadd(p, r, set1(1.6666665459e-1f));
    p = fmadd(p, r, set1(5.0000001201e-1f));
    p = fmadd(p, mul(r, r), add(r, set1(1.0f)));
    const __m256i n_int = _mm256_cvtps_epi32(n);
    const __m256i n_half = _mm256_srai_epi32(n_int, 1);
    const __m256i bias = _mm256_set1_epi32(127);
    const Vec scale1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n_half, bias), 23));
    const Vec scale2 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(n_int, n_half), bias), 23));
    const Vec result = mul(mul(p, scale1), scale2);
    return _mm256_blendv_ps(result, set1(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  }
};

}  // namespace
}  // namespace chronos::kernels
