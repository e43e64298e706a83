// AVX-512 VNNI kernels of the 8-bit-activation path: matmul_int8_simd.h with the 32-weight types'
// sign-trick product as one vpdpbusd (256-bit, AVX512_VNNI + AVX512VL) instead of maddubs + madd,
// and the K types' scaled sums accumulated by vpdpwssd instead of madd + add.
// The products never reach maddubs' int16 saturation (see matmul_int8_simd.h), so both give the
// same integers. kernels/CMakeLists.txt compiles *_avx512.cpp for AVX-512 F/BW/VL/DQ; VNNI is added
// here for this file alone, and the dispatch uses it only where CPUID reports AVX512_VNNI.
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx512vnni")
#endif

#include "kernels/cpu/matmul_int8_simd.h"

namespace chronos::kernels {
namespace {

struct VnniDot {
  static __m256i dot_s8(__m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
  // vpdpwssd adds the int16 pair products to acc in one instruction: madd + add, the same int32s
  // (no pair sum comes near int32's range; see matmul_int8_simd.h).
  static __m256i add_scaled_dot(__m256i acc, __m256i u, __m256i x, __m256i scale16) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, x), scale16);
  }
};

}  // namespace

void matmul_rows_int8_avx512vnni(float* y, const void* xq, const WeightView& w, int64_t n_tokens,
                                 int64_t row_begin, int64_t row_end) {
  matmul_rows_int8_simd<VnniDot>(y, xq, w, n_tokens, row_begin, row_end);
}

}  // namespace chronos::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
