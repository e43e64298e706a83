// The 8-bit activation blocks (cpu_kernels.h, ActBlock32 / ActBlock256) on 256-bit vectors, for
// every ISA from AVX2 up; bit-identical to quantize_activations_scalar. Included only by
// matmul_int8_avx2.cpp.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace chronos::kernels {
namespace {  // internal linkage: one copy per ISA translation unit

// One block of N (32 or 256) activations: quantize_activation_block (matmul_int8.cpp) on 8 lanes;
// max is exact and x * (1 / d) is one rounding in both, cvtps2dq rounds ties to even as nearbyint.
template <int N>
inline void quantize_activation_block_avx2(const float* x, float* d_out, int8_t* qs, int16_t* bsums) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = _mm256_set1_ps(3.40282347e+38f);
  __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < N; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    amax = _mm256_max_ps(amax, a);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // Inf or NaN
  }
  if (_mm256_movemask_ps(bad) != 0) {
    *d_out = __builtin_nanf("");
    std::memset(qs, 0, N);
  } else {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = d;
    const __m256 scale = _mm256_set1_ps(id);
    for (int i = 0; i < N; i += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), scale));
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + i),
                          _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
  }
  if constexpr (N == 256) {
    for (int g = 0; g < 16; ++g) {  // 16 sums of 16 bytes: widen to int16 and add
      const __m256i w = _mm256_madd_epi16(
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * g))), _mm256_set1_epi16(1));
      __m128i v = _mm_add_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
      v = _mm_hadd_epi32(v, v);
      v = _mm_hadd_epi32(v, v);
      bsums[g] = int16_t(_mm_cvtsi128_si32(v));
    }
  } else {
    (void)bsums;
  }
}

inline void quantize_activations_simd(void* out, const float* x, DType weight_dtype, int64_t n_tokens, int64_t cols) {
  auto* bytes = static_cast<uint8_t*>(out);
  const int64_t row_bytes = activation_row_bytes(weight_dtype, cols);
  const bool k_type = block_elements_of(weight_dtype) == 256;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * cols;
    if (k_type) {
      auto* a = reinterpret_cast<ActBlock256*>(bytes + t * row_bytes);
      for (int64_t b = 0; b < cols / 256; ++b)
        quantize_activation_block_avx2<256>(xr + b * 256, &a[b].d, a[b].qs, a[b].bsums);
    } else {
      auto* a = reinterpret_cast<ActBlock32*>(bytes + t * row_bytes);
      for (int64_t b = 0; b < cols / 32; ++b)
        quantize_activation_block_avx2<32>(xr + b * 32, &a[b].d, a[b].qs, nullptr);
    }
  }
}

}  // namespace
}  // namespace chronos::kernels
