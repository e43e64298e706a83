// The 8-bit-activation path for block-type weights on 256-bit integer vectors (AVX2; the VNNI
// file swaps in vpdpbusd and vpdpwssd). Included only by matmul_int8_avx2.cpp and
// matmul_int8_vnni_avx512.cpp.
//
// Numerics: for each (row, token) and block, the integer dot of the weights' levels with the
// activation block's int8 values (times the integer sub-block scales for the K types) is exact,
// whatever the lane order; the 4 (row, token) pairs of a step (4 rows x 1 token, or 1 row x 4
// tokens) are then reduced to 4 int32 sums and the f32 step
// acc = fma(d_w * d_x, float(isum), acc) [then fma(-(dmin_w * d_x), float(isum_min), acc)] runs on
// their 4 lanes as explicit FMA instructions (the compiler may fuse a written mul and add, so
// the fusion is spelled out). That is matmul_rows_int8_scalar's arithmetic, operation for
// operation, so every ISA, thread split and batch size gives the same bits.
//
// Integer ranges (why nothing saturates): activation levels |x| <= 127; maddubs pairs u8 x s8 are at
// most 2 * 128 * 127 (Q8_0 with the sign trick), 2 * 63 * 127 (Q6_K); madd by a scale of |s| <= 128
// stays below 2^23; a K block's scaled sum stays below 2^29 and its offset term (Q6_K: 32 times
// the scales times the activation sums) below 2^27, so subtracting it lane-wise before the
// horizontal sum gives the same int32 as after it.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "chronos/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_layout.h"

namespace chronos::kernels {
namespace {  // internal linkage: one copy per ISA translation unit

// Prefetch distance per weight row stream (as the f32 block kernels).
constexpr int64_t kInt8PrefetchBytes = 1024;
// Tokens whose activation blocks stay hot while a group of 4 weight rows passes over them.
constexpr int64_t kInt8TokenPanel = 32;

// The 8 int32 lanes of the sign-trick product of 32 signed weight levels w and activations x:
// lane k = sum of w[i] * x[i] over the 4 bytes i of lane k.
struct Avx2Dot {
  static constexpr bool kTokenTiles = false;  // no outer-product batch path (matmul_int8_tiles.h)
  static __m256i dot_s8(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
                             _mm256_set1_epi16(1));
  }
  // acc + the K types' scaled product: u8 levels u times activations x, 16 pairs, each pair sum
  // times its group's int16 scale, as 8 int32 lanes.
  static __m256i add_scaled_dot(__m256i acc, __m256i u, __m256i x, __m256i scale16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scale16));
  }
};

// Lane i = the sum of v_i's 8 lanes.
[[gnu::always_inline]] inline __m128i hsum4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
// Lane i = the sum of v_i's 4 lanes.
[[gnu::always_inline]] inline __m128i hsum4(__m128i v0, __m128i v1, __m128i v2, __m128i v3) {
  return _mm_hadd_epi32(_mm_hadd_epi32(v0, v1), _mm_hadd_epi32(v2, v3));
}

// The f16 at byte offset `at` of each of 4 blocks, as f32 (exact).
// Combined in a general register: four 2-byte stores read back as one 8-byte load would miss
// store-to-load forwarding and stall.
[[gnu::always_inline]] inline __m128 load_f16x4(const uint8_t* const* blk, int at) {
  uint64_t bits = 0;
  for (int i = 0; i < 4; ++i) {
    uint16_t h;
    std::memcpy(&h, blk[i] + at, 2);
    bits |= uint64_t(h) << (16 * i);
  }
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(bits)));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Byte i (0..31) = 0xFF where bit i of `bits` is set, else 0.
[[gnu::always_inline]] inline __m256i bytes_from_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(  // byte i <- byte i / 8 of bits (each 128-bit lane holds all 4)
      _mm256_set1_epi32(int(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i others = _mm256_set1_epi64x(int64_t(0x7fbfdfeff7fbfdfeULL));  // every bit but i % 8
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
}

// The 32 nibbles of 16 bytes at p in weight order: low nibbles, then high ones.
[[gnu::always_inline]] inline __m256i nibbles32(const uint8_t* p) {
  const __m128i packed = load128(p), low = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low), _mm_and_si128(packed, low));
}

// Grid values of 32 nibbles (IQ4_NL, IQ4_XS, MXFP4): one byte shuffle per 16.
template <DType D>
[[gnu::always_inline]] inline __m256i grid_values(__m256i nibbles) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load128(grid_of(D))), nibbles);
}

// Where a 32-weight type's nibbles start.
template <DType D>
constexpr int qs_at32() {
  return D == DType::kQ4_0     ? q4_0::qs
         : D == DType::kQ5_0   ? q5_0::qs
         : D == DType::kQ4_1   ? q4_1::qs
         : D == DType::kQ5_1   ? q5_1::qs
         : D == DType::kIQ4_NL ? iq4_nl::qs
                               : mxfp4::qs;
}

// The 32 signed levels of a 32-weight block in weight order (Q4_1, Q5_1: unsigned, their m is
// added separately).
template <DType D>
[[gnu::always_inline]] inline __m256i levels32(const uint8_t* b) {
  if constexpr (D == DType::kQ8_0) {
    return load256(b + q8_0::qs);
  } else {
    const __m256i nibbles = nibbles32(b + qs_at32<D>());
    if constexpr (D == DType::kQ4_0) {
      return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
    } else if constexpr (D == DType::kQ4_1) {
      return nibbles;
    } else if constexpr (D == DType::kIQ4_NL || D == DType::kMXFP4) {
      return grid_values<D>(nibbles);
    } else {
      static_assert(D == DType::kQ5_0 || D == DType::kQ5_1);
      uint32_t qh;
      std::memcpy(&qh, b + (D == DType::kQ5_0 ? q5_0::qh : q5_1::qh), 4);
      const __m256i fifth = _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10));
      const __m256i levels = _mm256_or_si256(nibbles, fifth);
      return D == DType::kQ5_0 ? _mm256_sub_epi8(levels, _mm256_set1_epi8(16)) : levels;
    }
  }
}

// Word w of each 128-bit lane broadcast across that lane (shuffle_epi8 control).
[[gnu::always_inline]] inline __m256i word_broadcast(int low_lane_word, int high_lane_word) {
  const __m128i lo = _mm_set1_epi16(int16_t(0x0100 + 0x0202 * low_lane_word));
  const __m128i hi = _mm_set1_epi16(int16_t(0x0100 + 0x0202 * high_lane_word));
  return _mm256_set_m128i(hi, lo);
}

// A step computes R rows x T tokens (R * T = 4 results, lane r * T + t): R = 4, T = 1 for decode
// (four weight streams share each activation load), R = 1, T = 4 for a batch (each weight block's
// levels and scales are unpacked once for four tokens). Per (row, token) the arithmetic is the
// same whatever R and T: exact integer sums, then the scalar reference's f32 steps.

// dw: lane r * T + t = the weight factor of row r; dx: that of token t.
template <int R, int T>
[[gnu::always_inline]] inline __m128 lane_products(const uint8_t* const* blk, int at, const float* dx) {
  if constexpr (R == 4) {
    return _mm_mul_ps(load_f16x4(blk, at), _mm_set1_ps(dx[0]));
  } else {
    static_assert(R == 1 && T == 4);
    return _mm_mul_ps(_mm_set1_ps(read_f16(blk[0] + at)), _mm_setr_ps(dx[0], dx[1], dx[2], dx[3]));
  }
}

// Lane r * T + t = the block scale of row r (f16 d, or MXFP4's E8M0 half-power) times token t's dx.
template <DType D, int R, int T>
[[gnu::always_inline]] inline __m128 block_scales32(const uint8_t* const* blk, const float* dx) {
  if constexpr (D != DType::kMXFP4) {
    return lane_products<R, T>(blk, 0, dx);
  } else if constexpr (R == 4) {
    const __m128 dw = _mm_setr_ps(e8m0_half(blk[0][mxfp4::e]), e8m0_half(blk[1][mxfp4::e]), e8m0_half(blk[2][mxfp4::e]),
                                  e8m0_half(blk[3][mxfp4::e]));
    return _mm_mul_ps(dw, _mm_set1_ps(dx[0]));
  } else {
    return _mm_mul_ps(_mm_set1_ps(e8m0_half(blk[0][mxfp4::e])), _mm_setr_ps(dx[0], dx[1], dx[2], dx[3]));
  }
}

// One 32-weight block: acc[lane] += (d_w * d_x) * float(isum[lane]); Q4_1 and Q5_1 then
// acc[lane] += (m_w * d_x) * float(sum of the activation levels), as the scalar reference.
template <class Dot, DType D, int R, int T>
[[gnu::always_inline]] inline __m128 step32(__m128 acc, const uint8_t* const* blk, const ActBlock32* const* a) {
  constexpr bool kHasMin = D == DType::kQ4_1 || D == DType::kQ5_1;
  __m256i dots[4], xsums[4];
  float dx[T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256i w = levels32<D>(blk[r]);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i x = load256(a[t]->qs);
      dots[r * T + t] = Dot::dot_s8(w, x);
      if constexpr (kHasMin) xsums[r * T + t] = Dot::dot_s8(_mm256_set1_epi8(1), x);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) dx[t] = a[t]->d;
  const __m128i isum = hsum4(dots[0], dots[1], dots[2], dots[3]);
  acc = _mm_fmadd_ps(block_scales32<D, R, T>(blk, dx), _mm_cvtepi32_ps(isum), acc);
  if constexpr (kHasMin) {
    const __m128i xsum = hsum4(xsums[0], xsums[1], xsums[2], xsums[3]);
    acc = _mm_fmadd_ps(lane_products<R, T>(blk, q4_1::m, dx), _mm_cvtepi32_ps(xsum), acc);
  }
  return acc;
}

// Q4_K's 12 scale bytes as 16: scales 0-7 then mins 0-7 (quant_layout.h, q4_k_scale_min), in
// vector lanes (scalar words stored and read back as one vector would stall store forwarding).
// u0, u1, u2 are the three little-endian words of the 12 bytes; the 16-byte load from the scales
// stays inside the block (qs follows).
[[gnu::always_inline]] inline __m128i q4_k_scales_mins(const uint8_t* b) {
  const __m128i v = load128(b + q4_k::scales);                 // u0 u1 u2 .
  const __m128i low6 = _mm_and_si128(v, _mm_set1_epi8(0x3f));  // scales 0-3, mins 0-3
  const __m128i u2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
  const __m128i nibbles = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0f));
  const __m128i top2 = _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi8(0x30));  // (u >> 6 & 3) << 4
  const __m128i high = _mm_or_si128(nibbles, top2);                               // scales 4-7, mins 4-7
  return _mm_unpacklo_epi32(low6, high);                                          // s0-3 s4-7 m0-3 m4-7
}

// Q3_K's 16 signed scales (quant_layout.h, q3_k_scale): byte j = low nibble | top two bits << 4,
// minus 32. a0, a1, a2 are the three little-endian words of the 12 bytes (read without passing
// the block's end).
[[gnu::always_inline]] inline __m128i q3_k_scales(const uint8_t* b) {
  uint32_t a2;
  std::memcpy(&a2, b + q3_k::scales + 8, 4);
  const __m128i a01 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + q3_k::scales));
  const __m128i a0101 = _mm_unpacklo_epi64(a01, a01);  // a0 a1 a0 a1
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(a0101, _mm_setr_epi32(0, 0, 4, 4)), _mm_set1_epi8(0x0f));
  const __m128i a2v = _mm_set1_epi32(int(a2));
  const __m128i top = _mm_srlv_epi32(_mm_sllv_epi32(a2v, _mm_setr_epi32(4, 2, 0, 0)), _mm_setr_epi32(0, 0, 0, 2));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_and_si128(top, _mm_set1_epi8(0x30))), _mm_set1_epi8(32));
}

// A K-type super-block's integer scales, decoded once per block and row. Chunk k (0..7) is
// weights [32 k, 32 k + 32); `scales` holds the int16 scales from which chunk_scales picks chunk k's
// (Q4_K: one sub-block per chunk; the 16-group types: groups 2k and 2k + 1), and m_lo / m_hi the
// int16 factors of the activation sums: Q4_K the 8 mins (against sums of 32), the others the
// 16 (Q2_K: mins; Q3_K, Q6_K: the scales again, for the level offset) against sums of 16.
// Q5_K's scales and mins are Q4_K's (the same bytes at the same offsets).
constexpr bool has_q4_k_scales(DType d) { return d == DType::kQ4_K || d == DType::kQ5_K; }
// IQ4_XS has one signed scale per sub-block of 32 as well (no mins), and signed grid levels; so do
// the IQ grid types with groups of 32 (their scales: quant_layout.h, iq_int8_scale).
constexpr bool has_chunk_scales(DType d) {
  return has_q4_k_scales(d) || d == DType::kIQ4_XS || (is_iq_grid_type(d) && group_elements(d) == 32);
}
// The types whose sum is scale times level dot alone: no mins, no level offset.
constexpr bool has_scales_only(DType d) { return d == DType::kIQ4_XS || is_iq_grid_type(d); }
// IQ2 and IQ3: unsigned grid magnitudes (at most 62) and one sign bit per weight, applied to the
// activations (vpsignb) so that the magnitudes go straight into maddubs' unsigned operand.
constexpr bool has_sign_bits(DType d) { return is_iq_grid_type(d) && d != DType::kIQ1_S && d != DType::kIQ1_M; }

template <DType D>
struct KScales {
  __m256i lo, hi;  // Q4_K: lo only (8 scales in each lane); else groups 0-7 and 8-15 in each lane
  __m128i m_lo, m_hi;
};

template <DType D>
[[gnu::always_inline]] inline KScales<D> k_scales(const uint8_t* b) {
  KScales<D> s;
  if constexpr (is_iq_grid_type(D)) {
    const auto eight = [&](int g) {
      return _mm_setr_epi16(int16_t(iq_int8_scale(D, b, g)), int16_t(iq_int8_scale(D, b, g + 1)),
                            int16_t(iq_int8_scale(D, b, g + 2)), int16_t(iq_int8_scale(D, b, g + 3)),
                            int16_t(iq_int8_scale(D, b, g + 4)), int16_t(iq_int8_scale(D, b, g + 5)),
                            int16_t(iq_int8_scale(D, b, g + 6)), int16_t(iq_int8_scale(D, b, g + 7)));
    };
    s.lo = _mm256_broadcastsi128_si256(eight(0));
    s.hi = group_elements(D) == 16 ? _mm256_broadcastsi128_si256(eight(8)) : s.lo;
    s.m_lo = _mm_setzero_si128();
    s.m_hi = s.m_lo;
  } else if constexpr (D == DType::kIQ4_XS) {
    const __m128i sc =
        _mm_setr_epi16(int16_t(iq4_xs_scale(b, 0)), int16_t(iq4_xs_scale(b, 1)), int16_t(iq4_xs_scale(b, 2)),
                       int16_t(iq4_xs_scale(b, 3)), int16_t(iq4_xs_scale(b, 4)), int16_t(iq4_xs_scale(b, 5)),
                       int16_t(iq4_xs_scale(b, 6)), int16_t(iq4_xs_scale(b, 7)));
    s.lo = _mm256_broadcastsi128_si256(sc);
    s.hi = s.lo;
    s.m_lo = _mm_setzero_si128();
    s.m_hi = s.m_lo;
  } else if constexpr (has_q4_k_scales(D)) {
    const __m128i packed = q4_k_scales_mins(b);
    s.lo = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(packed));
    s.hi = s.lo;
    s.m_lo = _mm_cvtepu8_epi16(_mm_srli_si128(packed, 8));
    s.m_hi = s.m_lo;
  } else if constexpr (D == DType::kQ2_K) {
    const __m128i v = load128(b + q2_k::scales), low = _mm_set1_epi8(0xF);
    const __m128i sc = _mm_and_si128(v, low), mn = _mm_and_si128(_mm_srli_epi16(v, 4), low);
    s.lo = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
    s.hi = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sc, 8)));
    s.m_lo = _mm_cvtepu8_epi16(mn);
    s.m_hi = _mm_cvtepu8_epi16(_mm_srli_si128(mn, 8));
  } else {
    static_assert(D == DType::kQ3_K || D == DType::kQ6_K);
    const __m128i sc = D == DType::kQ3_K ? q3_k_scales(b) : load128(b + q6_k::scales);
    s.m_lo = _mm_cvtepi8_epi16(sc);
    s.m_hi = _mm_cvtepi8_epi16(_mm_srli_si128(sc, 8));
    s.lo = _mm256_broadcastsi128_si256(s.m_lo);
    s.hi = _mm256_broadcastsi128_si256(s.m_hi);
  }
  return s;
}

// Chunk k's scales, one int16 per 16-bit lane (the group of the lane's byte pair).
template <DType D>
[[gnu::always_inline]] inline __m256i chunk_scales(const KScales<D>& s, int k) {
  if constexpr (has_chunk_scales(D)) return _mm256_shuffle_epi8(s.lo, word_broadcast(k, k));
  const int pair = k % 4;  // groups 8 h + 2 pair and + 1, h = k / 4
  return _mm256_shuffle_epi8(k < 4 ? s.lo : s.hi, word_broadcast(2 * pair, 2 * pair + 1));
}

// Chunk k's 32 levels as stored (unsigned: Q3_K and Q6_K with their offset 4 and 32).
template <DType D>
[[gnu::always_inline]] inline __m256i chunk_levels(const uint8_t* b, int k) {
  const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(0xF);
  if constexpr (D == DType::kIQ4_XS) {
    // Sub-block k: IQ4_NL's 16 bytes at qs + 16 k, as signed grid values.
    return grid_values<D>(nibbles32(b + iq4_xs::qs + 16 * k));
  } else if constexpr (D == DType::kQ4_K) {
    // Weights 64 c + l and 64 c + 32 + l: low and high nibble of qs[32 c + l], c = k / 2.
    const __m256i v = load256(b + q4_k::qs + 32 * (k / 2));
    return k % 2 == 0 ? _mm256_and_si256(v, m15) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
  } else if constexpr (D == DType::kQ5_K) {
    // Q4_K's nibbles (at q5_k::qs) plus 16 from bit k of qh[l].
    const __m256i v = load256(b + q5_k::qs + 32 * (k / 2));
    const __m256i low = k % 2 == 0 ? _mm256_and_si256(v, m15) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
    const __m256i high =
        _mm256_and_si256(_mm256_srl_epi16(load256(b + q5_k::qh), _mm_cvtsi32_si128(k)), _mm256_set1_epi8(1));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  } else {
    const int h = k / 4, s = k % 4;  // weights 128 h + 32 s + [0, 32)
    if constexpr (D == DType::kQ6_K) {
      const __m256i ql = load256(b + q6_k::ql + 64 * h + 32 * (s % 2));
      const __m256i low = _mm256_and_si256(s < 2 ? ql : _mm256_srli_epi16(ql, 4), m15);
      const __m256i high =
          _mm256_and_si256(_mm256_srl_epi16(load256(b + q6_k::qh + 32 * h), _mm_cvtsi32_si128(2 * s)), m3);
      return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
    } else {
      const __m256i v = load256(b + (D == DType::kQ2_K ? q2_k::qs : q3_k::qs) + 32 * h);
      __m256i u = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * s)), m3);
      if constexpr (D == DType::kQ3_K) {
        const __m256i high =
            _mm256_and_si256(_mm256_srl_epi16(load256(b + q3_k::hmask), _mm_cvtsi32_si128(k)), _mm256_set1_epi8(1));
        u = _mm256_or_si256(u, _mm256_slli_epi16(high, 2));
      }
      return u;
    }
  }
}

// Chunk k of an IQ2 or IQ3 block: the grid magnitudes of its 32 weights and 0xFF where a weight is
// negative (quant_layout.h, decode_iq_levels8, reads the same bits one weight at a time).
struct IqChunk {
  __m256i magnitude, negative;
};

// The 32-bit sign mask of four 7-bit sign codes (IQ2_XXS, IQ2_XS, IQ3_XXS: iq_signs adds the parity bit).
[[gnu::always_inline]] inline uint32_t iq_signs4(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  return uint32_t(iq_signs(c0)) | (uint32_t(iq_signs(c1)) << 8) | (uint32_t(iq_signs(c2)) << 16) |
         (uint32_t(iq_signs(c3)) << 24);
}

// Four 8-weight grid rows (grid: one of kernels/grids' accessors).
template <class Grid>
[[gnu::always_inline]] inline __m256i grid64x4(Grid grid, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  return _mm256_setr_epi64x(int64_t(grid(i0)), int64_t(grid(i1)), int64_t(grid(i2)), int64_t(grid(i3)));
}

template <DType D>
[[gnu::always_inline]] inline IqChunk iq_chunk(const uint8_t* b, int k) {
  uint32_t signs;
  IqChunk c;
  if constexpr (D == DType::kIQ2_XXS) {
    const uint8_t* q = b + iq2_xxs::qs + 8 * k;
    const uint32_t aux = read_u32(q + 4);
    c.magnitude = grid64x4(iq2xxs_grid, q[0], q[1], q[2], q[3]);
    signs = iq_signs4(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
  } else if constexpr (D == DType::kIQ2_XS) {
    const uint8_t* q = b + iq2_xs::qs + 8 * k;
    const uint32_t v0 = read_u16(q), v1 = read_u16(q + 2), v2 = read_u16(q + 4), v3 = read_u16(q + 6);
    c.magnitude = grid64x4(iq2xs_grid, v0 & 511, v1 & 511, v2 & 511, v3 & 511);
    signs = iq_signs4(v0 >> 9, v1 >> 9, v2 >> 9, v3 >> 9);
  } else if constexpr (D == DType::kIQ2_S) {
    const uint8_t* q = b + iq2_s::qs + 4 * k;
    const uint32_t qh = b[iq2_s::qh + k];
    c.magnitude = grid64x4(iq2s_grid, q[0] | ((qh & 3) << 8), q[1] | ((qh & 12) << 6), q[2] | ((qh & 48) << 4),
                           q[3] | ((qh & 192) << 2));
    signs = read_u32(b + iq2_s::signs + 4 * k);
  } else if constexpr (D == DType::kIQ3_XXS) {
    const uint8_t* q = b + iq3_xxs::qs + 8 * k;
    const uint32_t aux = read_u32(b + iq3_xxs::scales_signs + 4 * k);
    c.magnitude = _mm256_setr_epi32(int(iq3xxs_grid(q[0])), int(iq3xxs_grid(q[1])), int(iq3xxs_grid(q[2])),
                                    int(iq3xxs_grid(q[3])), int(iq3xxs_grid(q[4])), int(iq3xxs_grid(q[5])),
                                    int(iq3xxs_grid(q[6])), int(iq3xxs_grid(q[7])));
    signs = iq_signs4(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
  } else {
    static_assert(D == DType::kIQ3_S);
    const uint8_t* q = b + iq3_s::qs + 8 * k;
    const uint32_t qh = b[iq3_s::qh + k];
    const auto at = [&](int m) { return int(iq3s_grid(q[m] | (((qh >> m) & 1) << 8))); };
    c.magnitude = _mm256_setr_epi32(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
    signs = read_u32(b + iq3_s::signs + 4 * k);
  }
  c.negative = bytes_from_bits(signs);
  return c;
}

// Chunk k of an IQ1 block as signed levels 8 g + delta (g in -1, 0, 1; delta +-1 per 32 weights for
// IQ1_S, per 8 for IQ1_M), as decode_iq_levels8.
template <DType D>
[[gnu::always_inline]] inline __m256i iq1_levels(const uint8_t* b, int k) {
  const auto delta = [](uint32_t negative) { return negative ? int64_t(-1) : int64_t(0x0101010101010101); };
  __m256i grid, deltas;
  if constexpr (D == DType::kIQ1_S) {
    const uint8_t* q = b + iq1_s::qs + 4 * k;
    const uint32_t qh = read_u16(b + iq1_s::qh + 2 * k);
    grid = grid64x4(iq1s_grid, q[0] | ((qh & 7) << 8), q[1] | (((qh >> 3) & 7) << 8), q[2] | (((qh >> 6) & 7) << 8),
                    q[3] | (((qh >> 9) & 7) << 8));
    deltas = _mm256_set1_epi64x(delta(qh >> 15));
  } else {
    static_assert(D == DType::kIQ1_M);
    const uint8_t* q = b + iq1_m::qs + 4 * k;
    const uint32_t qh = read_u16(b + iq1_m::qh + 2 * k);  // two nibbles per byte: 3 grid bits, the delta's sign
    grid = grid64x4(iq1s_grid, q[0] | ((qh & 7) << 8), q[1] | (((qh >> 4) & 7) << 8), q[2] | (((qh >> 8) & 7) << 8),
                    q[3] | (((qh >> 12) & 7) << 8));
    deltas =
        _mm256_setr_epi64x(delta((qh >> 3) & 1), delta((qh >> 7) & 1), delta((qh >> 11) & 1), delta((qh >> 15) & 1));
  }
  return _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), deltas);
}

// One K-type super-block (see matmul_rows_int8_scalar for the f32 step of each type). Per (row,
// token): scaled = sum over groups of scale * (levels . x) with the levels as stored, mins = sum over
// groups of (min or scale) * sum(x); Q3_K and Q6_K fold the offset in: isum = scaled - offset * mins.
template <class Dot, DType D, int R, int T>
[[gnu::always_inline]] inline __m128 step256(__m128 acc, const uint8_t* const* blk, const ActBlock256* const* a) {
  __m256i scaled[4];
  __m128i mins[4];
  __m128i bs_a[T], bs_b[T];
  float dx[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    dx[t] = a[t]->d;
    bs_a[t] = load128(a[t]->bsums);
    bs_b[t] = load128(a[t]->bsums + 8);
    if constexpr (has_q4_k_scales(D)) bs_a[t] = _mm_hadd_epi16(bs_a[t], bs_b[t]);  // sums over the 8 sub-blocks of 32
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const KScales<D> s = k_scales<D>(blk[r]);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      scaled[r * T + t] = _mm256_setzero_si256();
      if constexpr (!has_scales_only(D))
        mins[r * T + t] = has_q4_k_scales(D)
                              ? _mm_madd_epi16(s.m_lo, bs_a[t])
                              : _mm_add_epi32(_mm_madd_epi16(s.m_lo, bs_a[t]), _mm_madd_epi16(s.m_hi, bs_b[t]));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i sc = chunk_scales<D>(s, k);
      if constexpr (has_sign_bits(D)) {
        // Magnitudes times the activations with the weights' signs (|x| <= 127 stays in range).
        const IqChunk c = iq_chunk<D>(blk[r], k);
        const __m256i flip = _mm256_or_si256(c.negative, _mm256_set1_epi8(1));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t)
          scaled[r * T + t] = Dot::add_scaled_dot(scaled[r * T + t], c.magnitude,
                                                  _mm256_sign_epi8(load256(a[t]->qs + 32 * k), flip), sc);
        continue;
      }
      __m256i u;
      if constexpr (D == DType::kIQ1_S || D == DType::kIQ1_M)
        u = iq1_levels<D>(blk[r], k);
      else
        u = chunk_levels<D>(blk[r], k);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i x = load256(a[t]->qs + 32 * k);
        if constexpr (has_scales_only(D))  // signed levels: the sign trick (|w| <= 127, no saturation)
          scaled[r * T + t] =
              Dot::add_scaled_dot(scaled[r * T + t], _mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u), sc);
        else
          scaled[r * T + t] = Dot::add_scaled_dot(scaled[r * T + t], u, x, sc);
      }
    }
  }
  if constexpr (is_iq_grid_type(D)) {
    // The block factor of quant_layout.h's iq_int8_d per row, times each token's d.
    __m128 dd;
    if constexpr (R == 4)
      dd = _mm_mul_ps(
          _mm_setr_ps(iq_int8_d(D, blk[0]), iq_int8_d(D, blk[1]), iq_int8_d(D, blk[2]), iq_int8_d(D, blk[3])),
          _mm_set1_ps(dx[0]));
    else
      dd = _mm_mul_ps(_mm_set1_ps(iq_int8_d(D, blk[0])), _mm_setr_ps(dx[0], dx[1], dx[2], dx[3]));
    return _mm_fmadd_ps(dd, _mm_cvtepi32_ps(hsum4(scaled[0], scaled[1], scaled[2], scaled[3])), acc);
  } else if constexpr (D == DType::kIQ4_XS) {
    const __m128i isum = hsum4(scaled[0], scaled[1], scaled[2], scaled[3]);
    return _mm_fmadd_ps(lane_products<R, T>(blk, iq4_xs::d, dx), _mm_cvtepi32_ps(isum), acc);
  } else if constexpr (has_q4_k_scales(D) || D == DType::kQ2_K) {
    constexpr int d_at = has_q4_k_scales(D) ? q4_k::d : q2_k::d, dmin_at = has_q4_k_scales(D) ? q4_k::dmin : q2_k::dmin;
    const __m128i s = hsum4(scaled[0], scaled[1], scaled[2], scaled[3]);
    const __m128i m = hsum4(mins[0], mins[1], mins[2], mins[3]);
    const __m128 dd = lane_products<R, T>(blk, d_at, dx), dm = lane_products<R, T>(blk, dmin_at, dx);
    return _mm_fnmadd_ps(dm, _mm_cvtepi32_ps(m), _mm_fmadd_ps(dd, _mm_cvtepi32_ps(s), acc));
  } else {
    // Levels are stored with an offset (Q3_K: 4, Q6_K: 32): the signed dot is scaled - offset * mins.
    constexpr int offset_log2 = D == DType::kQ3_K ? 2 : 5, d_at = D == DType::kQ3_K ? q3_k::d : q6_k::d;
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      scaled[i] = _mm256_sub_epi32(scaled[i], _mm256_zextsi128_si256(_mm_slli_epi32(mins[i], offset_log2)));
    const __m128i isum = hsum4(scaled[0], scaled[1], scaled[2], scaled[3]);
    return _mm_fmadd_ps(lane_products<R, T>(blk, d_at, dx), _mm_cvtepi32_ps(isum), acc);
  }
}

// The batch step of the scales-only types (IQ4_XS and the IQ grid types) with each block decoded
// once per row and token panel instead of once per 4 tokens: their decode (grid gathers, sign bits,
// scales) cost more than the four dots it fed (IQ2_XXS prefill ran at 0.46x llama.cpp's). A chunk
// keeps what step256 computes from the block: the magnitudes, the sign source applied to the
// activations and the int16 scales; the block keeps its f32 factor. The integer sums and the f32
// steps are step256's, operation for operation. (On AVX-512 VNNI the outer-product path of
// matmul_int8_tiles.h takes the batches instead.)
constexpr bool predecoded_batch(DType d) { return has_scales_only(d); }

// Chunk k of a block: magnitude[k] . sign(x, flip[k]) times scale[k] (int16 per byte pair).
struct alignas(64) DecodedBlock {
  __m256i magnitude[8], flip[8], scale[8];
  float factor;  // IQ4_XS: its f16 d; the IQ grid types: iq_int8_d
};
// Blocks of a row decoded at a time.
constexpr int64_t kDecodedBlocks = 2;

template <DType D>
[[gnu::always_inline]] inline void decode_block(DecodedBlock& out, const uint8_t* b) {
  const KScales<D> s = k_scales<D>(b);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    out.scale[k] = chunk_scales<D>(s, k);
    if constexpr (has_sign_bits(D)) {
      const IqChunk q = iq_chunk<D>(b, k);
      out.magnitude[k] = q.magnitude;
      out.flip[k] = _mm256_or_si256(q.negative, _mm256_set1_epi8(1));
    } else {
      __m256i u;
      if constexpr (D == DType::kIQ1_S || D == DType::kIQ1_M)
        u = iq1_levels<D>(b, k);
      else
        u = chunk_levels<D>(b, k);
      out.magnitude[k] = _mm256_sign_epi8(u, u);
      out.flip[k] = u;
    }
  }
  if constexpr (is_iq_grid_type(D))
    out.factor = iq_int8_d(D, b);
  else
    out.factor = read_f16(b + iq4_xs::d);
}

// One decoded block against 4 tokens (step256 with R = 1, T = 4).
template <class Dot>
[[gnu::always_inline]] inline __m128 step_decoded(__m128 acc, const DecodedBlock& blk, const ActBlock256* const* a) {
  __m256i scaled[4];
#pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) scaled[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t)
      scaled[t] = Dot::add_scaled_dot(scaled[t], blk.magnitude[k],
                                      _mm256_sign_epi8(load256(a[t]->qs + 32 * k), blk.flip[k]), blk.scale[k]);
  }
  const __m128i isum = hsum4(scaled[0], scaled[1], scaled[2], scaled[3]);
  const __m128 dd = _mm_mul_ps(_mm_set1_ps(blk.factor), _mm_setr_ps(a[0]->d, a[1]->d, a[2]->d, a[3]->d));
  return _mm_fmadd_ps(dd, _mm_cvtepi32_ps(isum), acc);
}

// Rows [r0, r1) (at most kDecodedRows) against the tokens [t0, t_end) (a multiple of 4, at most
// kInt8TokenPanel), y[t * rows + r]. The loop runs over the blocks in steps of kDecodedBlocks,
// and within a step over the rows, so that the panel's activations of those blocks (32 tokens x
// 2 blocks, 19 KiB) stay in L1 for every row: with the rows outside, each row streamed all of
// them from L2 again, and that, not the arithmetic, bounded the step. Each (row, token) still
// takes its blocks in order.
constexpr int64_t kDecodedRows = 16;

template <class Dot, DType D>
void predecoded_rows(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t row_bytes, int64_t r0,
                     int64_t r1, int64_t n_blocks, int64_t act_bytes, int64_t t0, int64_t t_end) {
  constexpr int64_t kBlockBytes = kBlockType<D>.block_bytes;
  DecodedBlock decoded[kDecodedBlocks];
  __m128 acc[kDecodedRows][kInt8TokenPanel / 4];
  const int64_t groups = (t_end - t0) / 4;
  for (int64_t r = 0; r < r1 - r0; ++r)
    for (int64_t g = 0; g < groups; ++g) acc[r][g] = _mm_setzero_ps();
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kDecodedBlocks) {
    const int64_t nb = n_blocks - b0 < kDecodedBlocks ? n_blocks - b0 : kDecodedBlocks;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w + r * row_bytes + b0 * kBlockBytes;
      for (int64_t i = 0; i < nb; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(row + i * kBlockBytes + kDecodedBlocks * kBlockBytes), _MM_HINT_T0);
        decode_block<D>(decoded[i], row + i * kBlockBytes);
      }
      for (int64_t g = 0; g < groups; ++g) {
        const ActBlock256* a[4];
        for (int i = 0; i < 4; ++i) a[i] = reinterpret_cast<const ActBlock256*>(xq + (t0 + 4 * g + i) * act_bytes) + b0;
        __m128 sum = acc[r - r0][g];
        for (int64_t i = 0; i < nb; ++i) {
          sum = step_decoded<Dot>(sum, decoded[i], a);
          for (int j = 0; j < 4; ++j) ++a[j];
        }
        acc[r - r0][g] = sum;
      }
    }
  }
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      float out[4];
      _mm_storeu_ps(out, acc[r - r0][g]);
      for (int i = 0; i < 4; ++i) y[(t0 + 4 * g + i) * rows + r] = out[i];
    }
}

// out[r * T + t] = rows[r] . acts[t] (activation blocks of one token each), R * T = 4.
template <class Dot, DType D, int R, int T>
inline void dot_rt_int8(float* out, const uint8_t* const* rows, const uint8_t* const* acts, int64_t n_blocks) {
  constexpr int64_t kBlockBytes = kBlockType<D>.block_bytes;
  using Act = std::conditional_t<block_elements_of(D) == 32, ActBlock32, ActBlock256>;
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk[R];
    const Act* a[T];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      blk[i] = rows[i] + b * kBlockBytes;
      // Every cache line of the block kInt8PrefetchBytes ahead: one prefetch per block skipped
      // lines of the blocks longer than one, and the K-type matvecs from RAM ran at 50-70% of the
      // rate they reach with all of them (Q6_K 5-7 -> 11 GB/s, Q4_K 8-10 -> 11-13). The batch
      // step (R = 1) rereads a row from L1 across its token panel: one per block is enough there.
      constexpr int64_t kPrefetchSpan = R == 4 ? kBlockBytes : 1;
#pragma GCC unroll 4
      for (int64_t line = 0; line < kPrefetchSpan; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(blk[i]) + kInt8PrefetchBytes + line),
                     _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) a[t] = reinterpret_cast<const Act*>(acts[t]) + b;
    if constexpr (block_elements_of(D) == 32)
      acc = step32<Dot, D, R, T>(acc, blk, a);
    else
      acc = step256<Dot, D, R, T>(acc, blk, a);
  }
  _mm_storeu_ps(out, acc);
}

// Rows [row_begin, row_end) against tokens [t_begin, t_end), one token at a time: groups of 4
// adjacent rows (a group short of 4 repeats its first row and drops the extra results).
template <class Dot, DType D>
void single_token_rows(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t cols, int64_t row_begin,
                       int64_t row_end, int64_t t_begin, int64_t t_end) {
  const int64_t row_bytes = dtype_row_bytes(D, cols), act_bytes = activation_row_bytes(D, cols);
  const int64_t n_blocks = cols / block_elements_of(D);
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int n_rows = row_end - r < 4 ? int(row_end - r) : 4;
    const uint8_t* group[4];
    for (int i = 0; i < 4; ++i) group[i] = w + (r + (i < n_rows ? i : 0)) * row_bytes;
    for (int64_t t = t_begin; t < t_end; ++t) {
      const uint8_t* act[1] = {xq + t * act_bytes};
      float out[4];
      dot_rt_int8<Dot, D, 4, 1>(out, group, act, n_blocks);
      for (int i = 0; i < n_rows; ++i) y[t * rows + r + i] = out[i];
    }
  }
}

// Rows [row_begin, row_end) for n_tokens tokens. One token: 4 row streams over 4 contiguous slices
// (as matvec_block_rows; 4 adjacent rows read as one stream ran at half the rate, 8 streams gained
// nothing on Q4_K and lost on Q6_K). More: per panel of tokens, each row once per 4 tokens (its blocks stay in
// L1 across the panel), the tokens left over (fewer than 4) in groups of 4 adjacent rows. A group
// short of 4 rows repeats its first row and drops the extra results.
template <class Dot, DType D>
void matmul_int8_rows(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t cols, int64_t n_tokens,
                      int64_t row_begin, int64_t row_end) {
  const int64_t row_bytes = dtype_row_bytes(D, cols), act_bytes = activation_row_bytes(D, cols);
  const int64_t n_blocks = cols / block_elements_of(D);
  const uint8_t* group[4];
  const uint8_t* acts[4];
  float out[4];
  if (n_tokens == 1) {
    const int64_t slice = (row_end - row_begin) / 4;
    acts[0] = xq;
    for (int64_t k = 0; k < slice; ++k) {
      for (int i = 0; i < 4; ++i) group[i] = w + (row_begin + i * slice + k) * row_bytes;
      dot_rt_int8<Dot, D, 4, 1>(out, group, acts, n_blocks);
      for (int i = 0; i < 4; ++i) y[row_begin + i * slice + k] = out[i];
    }
    row_begin += 4 * slice;
  }
  const int64_t batched = n_tokens / 4 * 4;
  int64_t t_first = 0;  // tokens [0, t_first) done by Dot's outer-product path, where it has one
  if constexpr (Dot::kTokenTiles)
    if (n_tokens > 1) t_first = Dot::template token_tiles<D>(y, xq, w, rows, cols, n_tokens, row_begin, row_end);
  for (int64_t t0 = t_first; t0 < batched; t0 += kInt8TokenPanel) {
    const int64_t t_end = batched - t0 < kInt8TokenPanel ? batched : t0 + kInt8TokenPanel;
    if constexpr (predecoded_batch(D)) {
      for (int64_t r = row_begin; r < row_end; r += kDecodedRows)
        predecoded_rows<Dot, D>(y, xq, w, rows, row_bytes, r, row_end - r < kDecodedRows ? row_end : r + kDecodedRows,
                                n_blocks, act_bytes, t0, t_end);
      continue;
    }
    for (int64_t r = row_begin; r < row_end; ++r) {
      group[0] = w + r * row_bytes;
      for (int64_t t = t0; t < t_end; t += 4) {
        for (int i = 0; i < 4; ++i) acts[i] = xq + (t + i) * act_bytes;
        dot_rt_int8<Dot, D, 1, 4>(out, group, acts, n_blocks);
        for (int i = 0; i < 4; ++i) y[(t + i) * rows + r] = out[i];
      }
    }
  }
  const int64_t t_rest = std::max(batched, t_first);  // the tokens left for single-token steps
  single_token_rows<Dot, D>(y, xq, w, rows, cols, row_begin, row_end, t_rest, n_tokens);
}

template <class T>
void matmul_rows_int8_simd(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                           int64_t row_end) {
  if (!dtype_is_block(w.dtype)) return matmul_rows_int8_scalar(y, xq, w, n_tokens, row_begin, row_end);  // reports it
  with_block_type(w.dtype, [&]<DType D>() {
    if constexpr (kBlockType<D>.int8_kernels)
      matmul_int8_rows<T, D>(y, static_cast<const uint8_t*>(xq), static_cast<const uint8_t*>(w.data), w.rows, w.cols,
                             n_tokens, row_begin, row_end);
    else  // ops take the f32 path for such a type (block_types.h)
      CHRONOS_CHECK_MSG(false, "no 8-bit-activation kernel for {}", dtype_name(D));
  });
}

}  // namespace
}  // namespace chronos::kernels
