// AVX-512 VNNI kernels of the 8-bit-activation path: matmul_int8_simd.h with the 32-weight types'
// sign-trick product as one vpdpbusd (256-bit, AVX512_VNNI + AVX512VL) instead of maddubs + madd,
// and the K types' scaled sums accumulated by vpdpwssd instead of madd + add; batches of the
// 256-weight types take the outer-product path of matmul_int8_tiles.h.
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
  // Q8_0 blocks blk[0], blk[1] of one row against 4 tokens' activation blocks a[t][0], a[t][1]:
  // isum[i] lane t = the exact integer dot of block i with token t (step32's sums). Both blocks
  // share one 512-bit vector; AVX-512 has no vpsignb, so the sign trick negates x under the mask of
  // negative weights (|x| <= 127: no overflow) against |w|. One dot per token for two blocks, and
  // one reduction for the 8 sums instead of two hsum4: the Q8_0 batch kernel took 5-10% less time.
  static constexpr bool kQ8_0Pairs = true;
  [[gnu::always_inline]] static void q8_0_pair(__m128i* isum, const uint8_t* const* blk, const ActBlock32* const* a) {
    const __m512i w =
        _mm512_inserti64x4(_mm512_zextsi256_si512(load256(blk[0] + q8_0::qs)), load256(blk[1] + q8_0::qs), 1);
    const __m512i magnitude = _mm512_abs_epi8(w);
    const __mmask64 negative = _mm512_movepi8_mask(w);
    __m512i d[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i x = _mm512_inserti64x4(_mm512_zextsi256_si512(load256(a[t][0].qs)), load256(a[t][1].qs), 1);
      const __m512i signed_x = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
      d[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitude, signed_x);
    }
    // Per 128-bit quarter: tokens 0-3's partial sums, then quarters 0 + 1 (block 0) and 2 + 3 (block 1).
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
    const __m512i q = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    const __m512i pairs = _mm512_add_epi32(q, _mm512_shuffle_i32x4(q, q, _MM_SHUFFLE(2, 3, 0, 1)));
    isum[0] = _mm512_castsi512_si128(pairs);
    isum[1] = _mm512_extracti32x4_epi32(pairs, 2);
  }
  // The 256-weight types: panels of 16 tokens as outer products (matmul_int8_tiles.h); returns how
  // many tokens it did (all but fewer than tile_shortest), the rest take single-token steps.
  // A short last panel costs about as much as a whole one; a remainder of tile_shortest tokens or
  // more joins the panels: the single-token step decodes every block once per token, which costs a
  // K type a third of a panel, IQ4_XS half and an IQ grid type a whole one (BM_MatmulBlock at 16,
  // 17 and 19 tokens).
  static constexpr bool kTokenTiles = true;
  static constexpr int64_t tile_shortest(DType d) { return is_iq_grid_type(d) ? 1 : d == DType::kIQ4_XS ? 2 : 3; }
  template <DType D>
  static int64_t token_tiles(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t cols,
                             int64_t n_tokens, int64_t row_begin, int64_t row_end) {
    const int64_t whole = n_tokens / kTileTokens * kTileTokens;
    const int64_t tiled = n_tokens - whole >= tile_shortest(D) ? n_tokens : whole;
    if (tiled > 0) tile_matmul_rows<D>(y, xq, w, rows, cols, tiled, row_begin, row_end);
    return tiled;
  }
  // vpdpwssd adds the int16 pair products to acc in one instruction: madd + add, the same int32s
  // (no pair sum comes near int32's range; see matmul_int8_simd.h).
  static __m256i add_scaled_dot(__m256i acc, __m256i u, __m256i x, __m256i scale16) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, x), scale16);
  }
};

}  // namespace

void matmul_rows_int8_avx512vnni(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                                 int64_t row_end) {
  matmul_rows_int8_simd<VnniDot>(y, xq, w, n_tokens, row_begin, row_end);
}

}  // namespace chronos::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
