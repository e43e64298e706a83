// The IQ grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) for the CUDA kernels:
// the factor and the eight integer levels of eight consecutive weights of a block, which
// block_decode.h's block_weights8 multiplies. Byte offsets, levels and the f32 operations of each
// factor are those of kernels/cpu/quant_layout.h (decode_iq_factors, decode_iq_levels8), and the
// grids are the same definitions (kernels/grids, generated from the gguf package), so a weight is
// the CPU's, and gguf's, bit for bit. Written once for nvcc and g++ as block_decode.h is.
//
// Eight aligned weights lie in one scale group (16 or 32 weights) and in one grid row (IQ2, IQ1:
// 8 weights) or two (IQ3: 4 weights each).
#pragma once

#include <cstdint>

#include "chronos/dtype.h"
#include "kernels/cuda/device_math.h"
#include "kernels/grids/iq1_grids.h"
#include "kernels/grids/iq2_grids.h"
#include "kernels/grids/iq3_grids.h"

namespace chronos::cuda::dm {

template <DType D>
inline constexpr bool kIsIqGrid =
    D == DType::kIQ2_XXS || D == DType::kIQ2_XS || D == DType::kIQ2_S || D == DType::kIQ3_XXS || D == DType::kIQ3_S ||
    D == DType::kIQ1_S || D == DType::kIQ1_M;

// Little-endian fields read byte by byte (a block may start at any byte).
CHRONOS_HD inline uint32_t iq_u16(const uint8_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8); }
CHRONOS_HD inline uint32_t iq_u32(const uint8_t* p) { return iq_u16(p) | (iq_u16(p + 2) << 16); }
CHRONOS_HD inline float iq_f16(const uint8_t* p) { return f16_to_f32(uint16_t(iq_u16(p))); }

// The factor of the scale group that holds weight `first`: d (0.5 + s) / 4 (IQ2), d (0.5 + s) / 2
// (IQ3_XXS), d (1 + 2 s) (IQ3_S), d (2 s + 1) / 8 (IQ1, whose levels are 8 times gguf's), in the
// order of gguf's f32 operations (none of them an a * b + c that could be fused).
template <DType D>
CHRONOS_HD inline float iq_factor(const uint8_t* b, int first) {
  if constexpr (D == DType::kIQ2_XXS) {  // d @0; sub-block g's u32 @2 + 8 g + 4, scale in bits 28-31
    return iq_f16(b) * (0.5f + float(iq_u32(b + 2 + 8 * (first / 32) + 4) >> 28)) * 0.25f;
  } else if constexpr (D == DType::kIQ2_XS || D == DType::kIQ2_S) {  // d @0, scale nibbles @66 / @74
    const int g = first / 16, scales = D == DType::kIQ2_XS ? 66 : 74;
    return iq_f16(b) * (0.5f + float((b[scales + g / 2] >> (4 * (g % 2))) & 0xF)) * 0.25f;
  } else if constexpr (D == DType::kIQ3_XXS) {  // d @0; sub-block g's u32 @66 + 4 g, scale in bits 28-31
    return iq_f16(b) * (0.5f + float(iq_u32(b + 66 + 4 * (first / 32)) >> 28)) * 0.5f;
  } else if constexpr (D == DType::kIQ3_S) {  // d @0, scale nibbles @106
    const int g = first / 32;
    return iq_f16(b) * (1.0f + 2.0f * float((b[106 + g / 2] >> (4 * (g % 2))) & 0xF));
  } else if constexpr (D == DType::kIQ1_S) {  // d @0; sub-block g's u16 @34 + 2 g, scale in bits 12-14
    return iq_f16(b) * float(2 * ((iq_u16(b + 34 + 2 * (first / 32)) >> 12) & 7) + 1) * 0.125f;
  } else {
    static_assert(D == DType::kIQ1_M, "iq_factor decodes the IQ grid types");
    // u16 scales[4] @48: three bits per group of 16, four groups a word; f16 d = the words' top nibbles.
    uint32_t d_bits = 0;
    for (int k = 0; k < 4; ++k) d_bits |= (iq_u16(b + 48 + 2 * k) >> 12) << (4 * k);
    const int g = first / 16;
    const float d = f16_to_f32(uint16_t(d_bits));
    return d * float(2 * ((iq_u16(b + 48 + 2 * (g / 4)) >> (3 * (g % 4))) & 7) + 1) * 0.125f;
  }
}

// q[j] = byte j of `magnitudes`, negated where bit j of `signs` is set.
CHRONOS_HD inline void iq_signed_levels8(uint64_t magnitudes, uint32_t signs, int (&q)[8]) {
  for (int j = 0; j < 8; ++j) {
    const int m = int((magnitudes >> (8 * j)) & 0xFF);
    q[j] = (signs >> j) & 1 ? -m : m;
  }
}

// q[j] = the level of weight first + j of the block at b (first a multiple of 8).
template <DType D>
CHRONOS_HD inline void iq_levels8(const uint8_t* b, int first, int (&q)[8]) {
  const int row = first / 8, sub = first / 32, k = row % 4;  // row: the 8-weight group; k: its place in sub
  if constexpr (D == DType::kIQ2_XXS) {                      // sub-block: 4 grid indices, then a u32 of 4 x 7 sign bits
    const uint32_t signs = (iq_u32(b + 2 + 8 * sub + 4) >> (7 * k)) & 127;
    iq_signed_levels8(kernels::iq2xxs_grid(b[2 + 8 * sub + k]), kernels::iq_signs(signs), q);
  } else if constexpr (D == DType::kIQ2_XS) {  // u16 qs[32] @2: 9-bit grid index, 7 sign bits
    const uint32_t v = iq_u16(b + 2 + 2 * row);
    iq_signed_levels8(kernels::iq2xs_grid(v & 511), kernels::iq_signs(v >> 9), q);
  } else if constexpr (D == DType::kIQ2_S) {  // qs[32] @2 + 2 bits of qh[8] @66; 8 sign bits @34
    const uint32_t index = b[2 + row] | (((b[66 + row / 4] >> (2 * (row % 4))) & 3u) << 8);
    iq_signed_levels8(kernels::iq2s_grid(index), b[34 + row], q);
  } else if constexpr (D == DType::kIQ3_XXS) {  // qs[64] @2: 4-weight rows; signs as IQ2_XXS's @66
    const uint32_t signs = (iq_u32(b + 66 + 4 * sub) >> (7 * k)) & 127;
    const uint64_t magnitudes =
        kernels::iq3xxs_grid(b[2 + first / 4]) | (uint64_t(kernels::iq3xxs_grid(b[2 + first / 4 + 1])) << 32);
    iq_signed_levels8(magnitudes, kernels::iq_signs(signs), q);
  } else if constexpr (D == DType::kIQ3_S) {  // qs[64] @2 + bit m % 8 of qh[m / 8] @66; 8 sign bits @74
    const auto index = [&](int m) { return b[2 + m] | (((b[66 + m / 8] >> (m % 8)) & 1u) << 8); };
    const uint64_t magnitudes =
        kernels::iq3s_grid(index(first / 4)) | (uint64_t(kernels::iq3s_grid(index(first / 4 + 1))) << 32);
    iq_signed_levels8(magnitudes, b[74 + row], q);
  } else {
    static_assert(D == DType::kIQ1_S || D == DType::kIQ1_M, "iq_levels8 decodes the IQ grid types");
    // IQ1_S: qs[32] @2, u16 qh[8] @34 (3 high index bits per row, the delta's sign in bit 15);
    // IQ1_M: qs[32] @0, qh[16] @32 (a nibble per row: 3 high index bits, the delta's sign).
    uint32_t high, negative_delta;
    if constexpr (D == DType::kIQ1_S) {
      const uint32_t qh = iq_u16(b + 34 + 2 * sub);
      high = (qh >> (3 * k)) & 7;
      negative_delta = qh >> 15;
    } else {
      const uint32_t qh = uint32_t(b[32 + row / 2]) >> (4 * (row % 2));
      high = qh & 7;
      negative_delta = (qh >> 3) & 1;
    }
    const uint64_t grid_row = kernels::iq1s_grid(b[(D == DType::kIQ1_S ? 2 : 0) + row] | (high << 8));
    const int delta = negative_delta ? -kernels::kIq1DeltaEighths : kernels::kIq1DeltaEighths;
    for (int j = 0; j < 8; ++j) q[j] = 8 * int(int8_t((grid_row >> (8 * j)) & 0xFF)) + delta;
  }
}

}  // namespace chronos::cuda::dm
