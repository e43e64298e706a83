// AVX-512 VNNI kernels of the 8-bit-activation path: matmul_int8_simd.h with the 32-weight types'
// sign-trick product as one vpdpbusd (256-bit, AVX512_VNNI + AVX512VL) instead of maddubs + madd,
// and the K types' scaled sums accumulated by vpdpwssd instead of madd + add; batches of every
// block type take the outer-product path of matmul_int8_tiles.h.
// The products never reach maddubs' int16 saturation (see matmul_int8_simd.h), so both give the
// same integers. kernels/CMakeLists.txt compiles *_avx512.cpp for AVX-512 F/BW/VL/DQ; VNNI is added
// here for this file alone, and the dispatch uses it only where CPUID reports AVX512_VNNI.
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx512vnni")
// GCC 12's 512-bit unpack, insert and shuffle intrinsics pass _mm512_undefined_epi32() as the
// masked-off source, which -Wmaybe-uninitialized reports wherever they are inlined (a known false
// positive: the mask is all ones, no lane of it is read).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/cpu/matmul_int8_simd.h"
#include "kernels/cpu/matmul_int8_tiles.h"

namespace chronos::kernels {
namespace {

struct VnniDot {
  static __m256i dot_s8(__m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
  // Every block type: panels of 16 tokens as outer products (matmul_int8_tiles.h). A short last
  // panel costs about as much as a whole one, so a remainder of tile_shortest tokens or more joins
  // the panels and a shorter one takes single-token steps on each group of rows while it is in
  // cache (tile_matmul_rows). A single-token step decodes every block once per token, which costs
  // a K type or Q8_0 about 0.4 of a panel, IQ4_XS and the other 32-weight types 0.55 and an IQ
  // grid type a whole one (BM_MatmulBlock at 16, 17, 19 and 32 tokens). Returns the tokens done:
  // all, or none when there are fewer than tile_shortest (matmul_int8_rows' single-token steps).
  static constexpr bool kTokenTiles = true;
  static constexpr int64_t tile_shortest(DType d) {
    if (is_iq_grid_type(d)) return 1;
    return d == DType::kIQ4_XS || (block_elements_of(d) == 32 && d != DType::kQ8_0) ? 2 : 3;
  }
  // A whole matmul of fewer tokens than this skips the panels: its groups of 4 tokens decode each
  // block once per group (predecoded_rows) and cost less than one panel of 16 until about 10 tokens
  // for the K types and 5 for Q8_0 (BM_MatmulBlock at 2-14 tokens). That is the batched decode of a
  // server: 2-6 rows per expert.
  static constexpr int64_t tile_fewest(DType d) {
    if (is_iq_grid_type(d) || d == DType::kIQ4_XS) return tile_shortest(d);
    if (block_elements_of(d) == 256) return 10;
    return d == DType::kQ8_0 ? 5 : tile_shortest(d);
  }
  template <DType D>
  static int64_t token_tiles(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t cols,
                             int64_t n_tokens, int64_t row_begin, int64_t row_end);
  // vpdpwssd adds the int16 pair products to acc in one instruction: madd + add, the same int32s
  // (no pair sum comes near int32's range; see matmul_int8_simd.h).
  static __m256i add_scaled_dot(__m256i acc, __m256i u, __m256i x, __m256i scale16) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, x), scale16);
  }
};

template <DType D>
int64_t VnniDot::token_tiles(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t cols,
                             int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  if (n_tokens < tile_fewest(D)) return 0;
  const int64_t whole = n_tokens / kTileTokens * kTileTokens;
  const int64_t tiled = n_tokens - whole >= tile_shortest(D) ? n_tokens : whole;
  if (tiled == 0) return 0;
  tile_matmul_rows<VnniDot, D>(y, xq, w, rows, cols, n_tokens, tiled, row_begin, row_end);
  return n_tokens;
}

}  // namespace

void matmul_rows_int8_avx512vnni(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                                 int64_t row_end) {
  matmul_rows_int8_simd<VnniDot>(y, xq, w, n_tokens, row_begin, row_end);
}

}  // namespace chronos::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
