// GGUF block layouts: byte offsets of each field and the decode of one block into integer levels
// and per-group f32 factors. Shared by the quantizer, the scalar dequantizer and the SIMD kernels,
// so every path reads the bits the same way. Internal linkage throughout: this header is also
// compiled into the AVX2 and AVX-512 units, and a merged inline copy must never reach a CPU that
// lacks those extensions.
//
// Every weight of a block is w[i] = mul[g] * float(q[i]) - sub[g] with g = i / group, two f32
// roundings in that order: the same operations as gguf.quants.dequantize, hence bit-identical.
#pragma once

#ifdef __clang__
#pragma clang fp contract(off)  // mul then sub, never fused: GGUF's numerics (GCC in ISO mode does not fuse)
#endif

#include <cstdint>
#include <cstring>

#include "chronos/block_types.h"
#include "chronos/dtype.h"
#include "kernels/grids/iq1_grids.h"
#include "kernels/grids/iq2_grids.h"
#include "kernels/grids/iq3_grids.h"

namespace chronos::kernels {
namespace {

constexpr int kMaxBlockElements = 256;
constexpr int kMaxGroups = 16;

// Byte layouts, field by field (offsets within one block).
// clang-format off
namespace q8_0 { constexpr int d = 0, qs = 2; }                       // qs: 32 x int8
namespace q4_0 { constexpr int d = 0, qs = 2; }                       // qs[j]: weight j low nibble, j + 16 high
namespace q5_0 { constexpr int d = 0, qh = 2, qs = 6; }               // qh: u32 LE, bit j = fifth bit of weight j
namespace q2_k { constexpr int scales = 0, qs = 16, d = 80, dmin = 82; }
namespace q3_k { constexpr int hmask = 0, qs = 32, scales = 96, d = 108; }
namespace q4_k { constexpr int d = 0, dmin = 2, scales = 4, qs = 16; }
namespace q6_k { constexpr int ql = 0, qh = 128, scales = 192, d = 208; }
namespace q5_k { constexpr int d = 0, dmin = 2, scales = 4, qh = 16, qs = 48; }  // Q4_K's first three fields
namespace q4_1 { constexpr int d = 0, m = 2, qs = 4; }                // qs as Q4_0's
namespace q5_1 { constexpr int d = 0, m = 2, qh = 4, qs = 8; }        // qh, qs as Q5_0's
namespace iq4_nl { constexpr int d = 0, qs = 2; }                     // qs as Q4_0's, nibbles index kIq4NlGrid
namespace iq4_xs { constexpr int d = 0, scales_h = 2, scales_l = 4, qs = 8; }  // qs: 8 x IQ4_NL's 16 bytes
namespace mxfp4 { constexpr int e = 0, qs = 1; }                      // qs as Q4_0's, nibbles index kMxfp4Grid
// clang-format on

// IQ4_NL's and IQ4_XS's levels (ggml's kvalues_iq4nl), and MXFP4's E2M1 values doubled (0, 0.5,
// 1, 1.5, 2, 3, 4, 6 and their negatives, times 2) so that they are integers; MXFP4's scale is then
// half the E8M0 power of two (e8m0_half). As int32 too, for the SIMD table lookups.
constexpr int8_t kIq4NlGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int8_t kMxfp4Grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
alignas(64) constexpr int32_t kIq4NlGrid32[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};
alignas(64) constexpr int32_t kMxfp4Grid32[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128): half of E8M0's 2^(e - 127), exact in f32 for every e (0 and 1 give subnormals; 255,
// E8M0's NaN, reads as 2^127 as ggml reads it).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// IQ4_XS's signed scale of sub-block g (0..7): low nibble g % 2 of scales_l[g / 2], two high bits
// at bit 2 g of the little-endian u16 scales_h; stored with offset 32.
inline int iq4_xs_scale(const uint8_t* b, int g) {
  const int low = (b[iq4_xs::scales_l + g / 2] >> (4 * (g % 2))) & 0xF;
  const int high = ((b[iq4_xs::scales_h] | (b[iq4_xs::scales_h + 1] << 8)) >> (2 * g)) & 3;
  return (low | (high << 4)) - 32;
}

// The grid of a non-linear 4-bit type (nullptr for the others).
constexpr const int8_t* grid_of(DType dtype) {
  return dtype == DType::kIQ4_NL || dtype == DType::kIQ4_XS ? kIq4NlGrid
         : dtype == DType::kMXFP4                           ? kMxfp4Grid
                                                            : nullptr;
}

inline float read_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return f16_to_f32(h);
}
inline void write_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, sizeof(h));
}

// Weights per block and per (mul, sub) group (block_types.h) as constant expressions, for the
// kernels' templates. with_block_type (block_types.h) turns a run-time type into such a constant.
constexpr int block_elements_of(DType dtype) { return find_block_type(dtype)->block_elements; }
constexpr int group_elements(DType dtype) { return find_block_type(dtype)->group_elements; }

// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes: j < 4 in the low six
// bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 plus the top two bits of bytes
// j - 4 (scale) and j (min).
inline void q4_k_scale_min(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Q3_K's signed 6-bit scale of sub-block j (0..15): low nibble in byte j % 8 (j < 8: low half,
// else high half), top two bits in byte 8 + j % 4 at bit 2 * (j / 4); stored with offset 32.
inline int q3_k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// ---- The IQ grid types (read only) ----
// Byte offsets as ggml-common.h's block_iq*; docs/quantization.md draws them. Every weight is
// mul[g] * level: level = the grid magnitude with its sign (IQ2, IQ3), or 8 (grid value +- 1/8)
// for IQ1, whose mul then carries the factor 1/8 (exact: a power of two), so that the product is
// the same single rounding of the same real number as gguf's dl * (grid + delta).
// clang-format off
namespace iq2_xxs { constexpr int d = 0, qs = 2; }                    // qs: 8 x (4 grid bytes, u32 signs + scale)
namespace iq2_xs { constexpr int d = 0, qs = 2, scales = 66; }        // qs: 32 x u16
namespace iq2_s { constexpr int d = 0, qs = 2, signs = 34, qh = 66, scales = 74; }
namespace iq3_xxs { constexpr int d = 0, qs = 2, scales_signs = 66; }  // scales_signs: 8 x u32
namespace iq3_s { constexpr int d = 0, qs = 2, qh = 66, signs = 74, scales = 106; }
namespace iq1_s { constexpr int d = 0, qs = 2, qh = 34; }             // qh: 8 x u16
namespace iq1_m { constexpr int qs = 0, qh = 32, scales = 48; }       // no d field: it is spread over scales
// clang-format on

constexpr bool is_iq_grid_type(DType dtype) {
  return dtype == DType::kIQ2_XXS || dtype == DType::kIQ2_XS || dtype == DType::kIQ2_S || dtype == DType::kIQ3_XXS ||
         dtype == DType::kIQ3_S || dtype == DType::kIQ1_S || dtype == DType::kIQ1_M;
}

inline uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian, as x86
  return v;
}
inline uint32_t read_u16(const uint8_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8); }

// IQ1_M's f16 d: the top nibble of each of its four u16 scale words, lowest word first.
inline float iq1_m_d(const uint8_t* b) {
  uint16_t h = 0;
  for (int k = 0; k < 4; ++k) h = uint16_t(h | ((read_u16(b + iq1_m::scales + 2 * k) >> 12) << (4 * k)));
  return f16_to_f32(h);
}

// mul[g] of an IQ block: d (0.5 + s) / 4 (IQ2), d (0.5 + s) / 2 (IQ3_XXS), d (1 + 2 s) (IQ3_S),
// d (2 s + 1) / 8 (IQ1, see above); in gguf's order of f32 operations.
inline void decode_iq_factors(DType dtype, const uint8_t* b, float* mul) {
  const auto nibble = [&](int at, int g) { return float((b[at + g / 2] >> (4 * (g % 2))) & 0xF); };
  switch (dtype) {
    case DType::kIQ2_XXS: {
      const float d = read_f16(b + iq2_xxs::d);
      for (int g = 0; g < 8; ++g) mul[g] = d * (0.5f + float(read_u32(b + iq2_xxs::qs + 8 * g + 4) >> 28)) * 0.25f;
      return;
    }
    case DType::kIQ2_XS:
    case DType::kIQ2_S: {
      const float d = read_f16(b);
      const int at = dtype == DType::kIQ2_XS ? iq2_xs::scales : iq2_s::scales;
      for (int g = 0; g < 16; ++g) mul[g] = d * (0.5f + nibble(at, g)) * 0.25f;
      return;
    }
    case DType::kIQ3_XXS: {
      const float d = read_f16(b + iq3_xxs::d);
      for (int g = 0; g < 8; ++g) mul[g] = d * (0.5f + float(read_u32(b + iq3_xxs::scales_signs + 4 * g) >> 28)) * 0.5f;
      return;
    }
    case DType::kIQ3_S: {
      const float d = read_f16(b + iq3_s::d);
      for (int g = 0; g < 8; ++g) mul[g] = d * (1.0f + 2.0f * nibble(iq3_s::scales, g));
      return;
    }
    case DType::kIQ1_S: {
      const float d = read_f16(b + iq1_s::d);
      for (int g = 0; g < 8; ++g) mul[g] = d * float(2 * ((read_u16(b + iq1_s::qh + 2 * g) >> 12) & 7) + 1) * 0.125f;
      return;
    }
    default: {  // IQ1_M: 16 3-bit scales, four per u16 word
      const float d = iq1_m_d(b);
      for (int g = 0; g < 16; ++g)
        mul[g] = d * float(2 * ((read_u16(b + iq1_m::scales + 2 * (g / 4)) >> (3 * (g % 4))) & 7) + 1) * 0.125f;
      return;
    }
  }
}

// The 8-bit-activation path's view of the same factors (matmul_int8*): an integer scale per group,
// 2 s + 1 (the 0.5 + s above, doubled; IQ3_S's 1 + 2 s as it is), and one f32 factor per block
// that holds d and the power of two left over: d / 8 (IQ2, IQ1), d / 4 (IQ3_XXS), d (IQ3_S).
inline int iq_int8_scale(DType dtype, const uint8_t* b, int g) {
  const auto nibble = [&](int at) { return (b[at + g / 2] >> (4 * (g % 2))) & 0xF; };
  switch (dtype) {
    case DType::kIQ2_XXS: return 2 * int(read_u32(b + iq2_xxs::qs + 8 * g + 4) >> 28) + 1;
    case DType::kIQ2_XS: return 2 * nibble(iq2_xs::scales) + 1;
    case DType::kIQ2_S: return 2 * nibble(iq2_s::scales) + 1;
    case DType::kIQ3_XXS: return 2 * int(read_u32(b + iq3_xxs::scales_signs + 4 * g) >> 28) + 1;
    case DType::kIQ3_S: return 2 * nibble(iq3_s::scales) + 1;
    case DType::kIQ1_S: return 2 * int((read_u16(b + iq1_s::qh + 2 * g) >> 12) & 7) + 1;
    default: return 2 * int((read_u16(b + iq1_m::scales + 2 * (g / 4)) >> (3 * (g % 4))) & 7) + 1;  // IQ1_M
  }
}
inline float iq_int8_d(DType dtype, const uint8_t* b) {
  switch (dtype) {
    case DType::kIQ3_XXS: return read_f16(b) * 0.25f;
    case DType::kIQ3_S: return read_f16(b);
    case DType::kIQ1_M: return iq1_m_d(b) * 0.125f;
    default: return read_f16(b) * 0.125f;  // IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S: d is the first field
  }
}

// q[0..8) = the levels of weights [i, i + 8) of an IQ block (i a multiple of 8).
[[gnu::always_inline]] inline void decode_iq_levels8(DType dtype, const uint8_t* b, int i, int8_t* q) {
  const int group8 = i / 8, sub = i / 32, k = (i % 32) / 8;  // k: the 8-weight group within its 32
  const auto signed_bytes = [&](uint64_t magnitudes, uint32_t signs) {
    for (int j = 0; j < 8; ++j) {
      const int m = int((magnitudes >> (8 * j)) & 0xFF);
      q[j] = int8_t((signs >> j) & 1 ? -m : m);
    }
  };
  switch (dtype) {
    case DType::kIQ2_XXS: {
      const uint32_t signs = (read_u32(b + iq2_xxs::qs + 8 * sub + 4) >> (7 * k)) & 127;
      signed_bytes(iq2xxs_grid(b[iq2_xxs::qs + 8 * sub + k]), iq_signs(signs));
      return;
    }
    case DType::kIQ2_XS: {
      const uint32_t v = read_u16(b + iq2_xs::qs + 2 * group8);
      signed_bytes(iq2xs_grid(v & 511), iq_signs(v >> 9));
      return;
    }
    case DType::kIQ2_S: {
      const uint32_t index = b[iq2_s::qs + group8] | (((b[iq2_s::qh + group8 / 4] >> (2 * (group8 % 4))) & 3u) << 8);
      signed_bytes(iq2s_grid(index), b[iq2_s::signs + group8]);
      return;
    }
    case DType::kIQ3_XXS: {
      const uint32_t signs = (read_u32(b + iq3_xxs::scales_signs + 4 * sub) >> (7 * k)) & 127;
      const uint64_t magnitudes =
          iq3xxs_grid(b[iq3_xxs::qs + i / 4]) | (uint64_t(iq3xxs_grid(b[iq3_xxs::qs + i / 4 + 1])) << 32);
      signed_bytes(magnitudes, iq_signs(signs));
      return;
    }
    case DType::kIQ3_S: {
      const auto index = [&](int m) { return b[iq3_s::qs + m] | (((b[iq3_s::qh + m / 8] >> (m % 8)) & 1u) << 8); };
      const uint64_t magnitudes = iq3s_grid(index(i / 4)) | (uint64_t(iq3s_grid(index(i / 4 + 1))) << 32);
      signed_bytes(magnitudes, b[iq3_s::signs + group8]);
      return;
    }
    case DType::kIQ1_S:
    case DType::kIQ1_M: {
      uint32_t high, negative_delta;
      if (dtype == DType::kIQ1_S) {
        const uint32_t qh = read_u16(b + iq1_s::qh + 2 * sub);
        high = (qh >> (3 * k)) & 7;
        negative_delta = qh >> 15;
      } else {
        const uint32_t qh = b[iq1_m::qh + group8 / 2] >> (4 * (group8 % 2));
        high = qh & 7;
        negative_delta = (qh >> 3) & 1;
      }
      const int qs_at = dtype == DType::kIQ1_S ? iq1_s::qs : iq1_m::qs;
      const uint64_t row = iq1s_grid(b[qs_at + group8] | (high << 8));
      const int delta = negative_delta ? -kIq1DeltaEighths : kIq1DeltaEighths;
      for (int j = 0; j < 8; ++j) q[j] = int8_t(8 * int(int8_t((row >> (8 * j)) & 0xFF)) + delta);
      return;
    }
    default: return;
  }
}

// mul/sub[block_elements / group] = one block's per-group factors (the f32 products GGUF forms).
[[gnu::always_inline]] inline void decode_factors(DType dtype, const uint8_t* b, float* mul, float* sub) {
  if (is_iq_grid_type(dtype)) {
    decode_iq_factors(dtype, b, mul);
    for (int g = 0; g < block_elements_of(dtype) / group_elements(dtype); ++g) sub[g] = 0.0f;
    return;
  }
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL:  // d is the first field of all four
      mul[0] = read_f16(b);
      sub[0] = 0.0f;
      return;
    case DType::kQ4_1:
    case DType::kQ5_1:  // d q + m, as d q - (-m): the same f32 sum
      mul[0] = read_f16(b + q4_1::d);
      sub[0] = -read_f16(b + q4_1::m);
      return;
    case DType::kMXFP4:
      mul[0] = e8m0_half(b[mxfp4::e]);
      sub[0] = 0.0f;
      return;
    case DType::kIQ4_XS: {
      const float d = read_f16(b + iq4_xs::d);
      for (int g = 0; g < 8; ++g) {
        mul[g] = d * float(iq4_xs_scale(b, g));
        sub[g] = 0.0f;
      }
      return;
    }
    case DType::kQ2_K: {
      const float d = read_f16(b + q2_k::d), dmin = read_f16(b + q2_k::dmin);
      for (int g = 0; g < 16; ++g) {
        mul[g] = d * float(b[q2_k::scales + g] & 0xF);
        sub[g] = dmin * float(b[q2_k::scales + g] >> 4);
      }
      return;
    }
    case DType::kQ3_K: {
      const float d = read_f16(b + q3_k::d);
      for (int g = 0; g < 16; ++g) {
        mul[g] = d * float(q3_k_scale(b + q3_k::scales, g));
        sub[g] = 0.0f;
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {  // the same fields at the same offsets
      const float d = read_f16(b + q4_k::d), dmin = read_f16(b + q4_k::dmin);
      for (int g = 0; g < 8; ++g) {
        int scale, min;
        q4_k_scale_min(b + q4_k::scales, g, &scale, &min);
        mul[g] = d * float(scale);
        sub[g] = dmin * float(min);
      }
      return;
    }
    case DType::kQ6_K: {
      const float d = read_f16(b + q6_k::d);
      for (int g = 0; g < 16; ++g) {
        mul[g] = d * float(int8_t(b[q6_k::scales + g]));
        sub[g] = 0.0f;
      }
      return;
    }
    default: return;  // callers check dtype_is_block first
  }
}

// q[block_elements] = one block's signed levels. The SIMD kernels read the same bits lane-wise
// (matmul_simd.h, block_levels); this is their reference.
inline void decode_levels(DType dtype, const uint8_t* b, int8_t* q) {
  if (is_iq_grid_type(dtype)) {
    for (int i = 0; i < block_elements_of(dtype); i += 8) decode_iq_levels8(dtype, b, i, q + i);
    return;
  }
  switch (dtype) {
    case DType::kQ8_0: std::memcpy(q, b + q8_0::qs, 32); return;
    case DType::kQ4_0:
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t((b[q4_0::qs + j] & 0xF) - 8);
        q[j + 16] = int8_t((b[q4_0::qs + j] >> 4) - 8);
      }
      return;
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const int qh_at = dtype == DType::kQ5_0 ? q5_0::qh : q5_1::qh,
                qs_at = dtype == DType::kQ5_0 ? q5_0::qs : q5_1::qs;
      const int offset = dtype == DType::kQ5_0 ? 16 : 0;
      uint32_t qh;
      std::memcpy(&qh, b + qh_at, 4);  // little-endian, as x86
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t(((b[qs_at + j] & 0xF) | (((qh >> j) & 1) << 4)) - offset);
        q[j + 16] = int8_t(((b[qs_at + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
      }
      return;
    }
    case DType::kQ4_1:
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t(b[q4_1::qs + j] & 0xF);
        q[j + 16] = int8_t(b[q4_1::qs + j] >> 4);
      }
      return;
    case DType::kIQ4_NL:
    case DType::kMXFP4:
    case DType::kIQ4_XS: {
      // Sub-block g of 32 (one for the 32-weight types): weight 32 g + j is the grid value of the
      // low nibble of qs[16 g + j], weight 32 g + 16 + j of its high nibble.
      const int8_t* grid = grid_of(dtype);
      const int qs_at = dtype == DType::kIQ4_NL ? iq4_nl::qs : dtype == DType::kMXFP4 ? mxfp4::qs : iq4_xs::qs;
      for (int g = 0; g < block_elements_of(dtype) / 32; ++g)
        for (int j = 0; j < 16; ++j) {
          q[32 * g + j] = grid[b[qs_at + 16 * g + j] & 0xF];
          q[32 * g + 16 + j] = grid[b[qs_at + 16 * g + j] >> 4];
        }
      return;
    }
    case DType::kQ2_K:
      // Weight h * 128 + s * 32 + l is bits 2s..2s+1 of qs[h * 32 + l].
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
          for (int l = 0; l < 32; ++l) q[h * 128 + s * 32 + l] = int8_t((b[q2_k::qs + h * 32 + l] >> (2 * s)) & 3);
      return;
    case DType::kQ3_K:
      // Weight i = h * 128 + s * 32 + l: two low bits as Q2_K, and 4 is subtracted unless bit
      // i / 32 of hmask[l] is set.
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
          for (int l = 0; l < 32; ++l) {
            const int low = (b[q3_k::qs + h * 32 + l] >> (2 * s)) & 3;
            const int high = (b[q3_k::hmask + l] >> (h * 4 + s)) & 1;
            q[h * 128 + s * 32 + l] = int8_t(low - (high ? 0 : 4));
          }
      return;
    case DType::kQ4_K:
      // Weights c * 64 + l and c * 64 + 32 + l are the low and high nibble of qs[c * 32 + l].
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          q[c * 64 + l] = int8_t(b[q4_k::qs + c * 32 + l] & 0xF);
          q[c * 64 + 32 + l] = int8_t(b[q4_k::qs + c * 32 + l] >> 4);
        }
      return;
    case DType::kQ5_K:
      // Q4_K's nibbles (at q5_k::qs) plus 16 where bit i / 32 of qh[i % 32] is set (weight i).
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const uint8_t high = b[q5_k::qh + l];
          q[c * 64 + l] = int8_t((b[q5_k::qs + c * 32 + l] & 0xF) | (((high >> (2 * c)) & 1) << 4));
          q[c * 64 + 32 + l] = int8_t((b[q5_k::qs + c * 32 + l] >> 4) | (((high >> (2 * c + 1)) & 1) << 4));
        }
      return;
    case DType::kQ6_K:
      // Weight h * 128 + k: low nibble from ql[h * 64 + k % 64] (k >= 64: high half), two high
      // bits from qh[h * 32 + k % 32] at bit 2 * (k / 32); stored with offset 32.
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 128; ++k) {
          const int low = (b[q6_k::ql + h * 64 + k % 64] >> (4 * (k / 64))) & 0xF;
          const int high = (b[q6_k::qh + h * 32 + k % 32] >> (2 * (k / 32))) & 3;
          q[h * 128 + k] = int8_t((low | (high << 4)) - 32);
        }
      return;
    default: return;
  }
}

// q[block_elements] = the signed levels of one block; mul/sub[block_elements / group] its factors.
inline void decode_block(DType dtype, const uint8_t* b, int8_t* q, float* mul, float* sub) {
  decode_factors(dtype, b, mul, sub);
  decode_levels(dtype, b, q);
}

}  // namespace
}  // namespace chronos::kernels
