// GGUF block decoding for the CUDA kernels: eight consecutive weights of one block as f32, exactly
// the values of dequantize_row (kernels/cpu/quant_layout.h is the CPU's record of the same layouts;
// docs/quantization.md draws them). Written once for both compilers as device_math.h is: nvcc
// builds it into the kernels, g++ into the CPU emulation of them, so the emulated tests check
// the arithmetic that runs on a GPU.
//
// Why eight: a warp then covers 256 weights per step, one K super-block or eight 32-weight
// blocks, and eight aligned weights never straddle a scale group (16 or 32 weights), so each lane
// forms its group's factors once and reads contiguous bytes that the warp's neighbours continue.
// Bytes are read one at a time: block strides (17, 18, 20, 22, 24, 34, 50, 56, 66, 74, 82, 84, 98, 110,
// 136, 144, 176, 210 bytes) leave no alignment to rely on, and rows may start anywhere an expert
// cache slot puts them. The IQ grid types are decoded in iq_decode.h.
#pragma once

#include <cstdint>

#include "chronos/block_types.h"
#include "chronos/dtype.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/iq_decode.h"

#if defined(__clang__) && !defined(__CUDA_ARCH__)
#pragma clang fp contract(off)  // mul then sub, never fused: GGUF's numerics (GCC in ISO mode does not fuse)
#endif

namespace chronos::cuda::dm {

// The table's facts (chronos/block_types.h) for host and device code. The device cannot read the
// host table, but constexpr scalars are usable there: the variable templates below, and the
// run-time lookups folded over one such constant per row.
template <DType D>
inline constexpr bool kIsBlock = is_block_type(D) && find_block_type(D)->cuda_kernels;
template <DType D>
inline constexpr int kBlockElements = kBlockType<D>.block_elements;
template <DType D>
inline constexpr int kBlockBytes = kBlockType<D>.block_bytes;
template <size_t I>
inline constexpr DType kRowDtype = kBlockTypes[I].dtype;
template <size_t I>
inline constexpr bool kRowCuda = kBlockTypes[I].cuda_kernels;
template <size_t I>
inline constexpr int kRowElements = kBlockTypes[I].block_elements;

template <size_t... I>
CHRONOS_HD constexpr bool is_cuda_block_dtype(DType dtype, std::index_sequence<I...>) {
  return ((dtype == kRowDtype<I> && kRowCuda<I>) || ...);
}
template <size_t... I>
CHRONOS_HD constexpr int block_elements(DType dtype, std::index_sequence<I...>) {
  return ((dtype == kRowDtype<I> ? kRowElements<I> : 0) + ...);
}

// Whether CUDA kernels read this block type (F32/F16/BF16 are not block types).
CHRONOS_HD constexpr bool is_block_dtype(DType dtype) {
  return is_cuda_block_dtype(dtype, std::make_index_sequence<kNumBlockTypes>{});
}
// Weights per block of a block type; 0 for another type.
CHRONOS_HD constexpr int block_elements(DType dtype) {
  return block_elements(dtype, std::make_index_sequence<kNumBlockTypes>{});
}

// Weights decoded per call: a lane's share of a warp's 256-weight step.
constexpr int kBlockPiece = 8;

// Row `row` of a block matrix whose rows hold `cols` weights (a multiple of the block).
template <DType D>
CHRONOS_HD inline const uint8_t* block_row(const void* data, int64_t row, int64_t cols) {
  return static_cast<const uint8_t*>(data) + row * (cols / kBlockElements<D>)*kBlockBytes<D>;
}

CHRONOS_HD inline float read_f16(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }

// mul * q - sub with two roundings, never contracted to an fma: the f32 operations of
// gguf.quants.dequantize and of the CPU kernels, so the weights agree bit for bit.
CHRONOS_HD inline float mul_sub(float mul, float q, float sub) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(__fmul_rn(mul, q), sub);
#else
  return mul * q - sub;
#endif
}

// Q3_K's signed 6-bit scale of sub-block g (0..15): low nibble in byte g % 8 (g >= 8: high
// half), top two bits in byte 8 + g % 4 at bit 2 (g / 4); stored with offset 32.
CHRONOS_HD inline int q3_k_scale(const uint8_t* scales, int g) {
  const int low = g < 8 ? scales[g] & 0xF : scales[g - 8] >> 4;
  const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Q4_K's 6-bit scale and min of sub-block g (0..7) from its 12 packed bytes.
CHRONOS_HD inline void q4_k_scale_min(const uint8_t* scales, int g, int& scale, int& min) {
  if (g < 4) {
    scale = scales[g] & 63;
    min = scales[g + 4] & 63;
  } else {
    scale = (scales[g + 4] & 0xF) | ((scales[g - 4] >> 6) << 4);
    min = (scales[g + 4] >> 4) | ((scales[g] >> 6) << 4);
  }
}

// IQ4_NL's grid value i (IQ4_XS's too), and MXFP4's doubled E2M1 value i (quant_layout.h's tables).
CHRONOS_HD inline int iq4_nl_value(int i) {
  const int8_t grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return grid[i];
}
CHRONOS_HD inline int mxfp4_value(int i) {
  const int8_t grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return grid[i];
}

// 2^(e - 128), MXFP4's scale for the doubled values (quant_layout.h, e8m0_half).
CHRONOS_HD inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float v;
  __builtin_memcpy(&v, &bits, 4);
  return v;
#endif
}

// w[j] = weight first + j of the block at b, j < 8; first is a multiple of 8 below the block's
// element count. Byte offsets as in quant_layout.h.
template <DType D>
CHRONOS_HD inline void block_weights8(const uint8_t* b, int first, float (&w)[kBlockPiece]) {
  static_assert(kIsBlock<D>, "block_weights8 decodes the block types with CUDA kernels only");
  float mul = 0.0f, sub = 0.0f;
  int q[kBlockPiece];
  if constexpr (D == DType::kQ8_0) {  // d @0, qs int8[32] @2
    mul = read_f16(b);
    for (int j = 0; j < kBlockPiece; ++j) q[j] = int8_t(b[2 + first + j]);
  } else if constexpr (D == DType::kQ4_0) {  // d @0, qs[16] @2: weight j low nibble, j + 16 high
    mul = read_f16(b);
    const uint8_t* qs = b + 2 + (first & 15);
    const int shift = first >= 16 ? 4 : 0;
    for (int j = 0; j < kBlockPiece; ++j) q[j] = ((qs[j] >> shift) & 0xF) - 8;
  } else if constexpr (D == DType::kQ5_0) {  // d @0, qh u32 @2 (bit i: fifth bit of weight i), qs[16] @6
    mul = read_f16(b);
    const uint32_t qh = uint32_t(b[2]) | (uint32_t(b[3]) << 8) | (uint32_t(b[4]) << 16) | (uint32_t(b[5]) << 24);
    const uint8_t* qs = b + 6 + (first & 15);
    const int shift = first >= 16 ? 4 : 0;
    for (int j = 0; j < kBlockPiece; ++j) q[j] = (((qs[j] >> shift) & 0xF) | (int((qh >> (first + j)) & 1u) << 4)) - 16;
  } else if constexpr (D == DType::kQ4_1 || D == DType::kQ5_1) {
    // d @0, m @2, (Q5_1: qh u32 @4), qs[16] @4 or @8: d q + m, computed as d q - (-m) (the same sum).
    mul = read_f16(b);
    sub = -read_f16(b + 2);
    const int qs_at = D == DType::kQ4_1 ? 4 : 8, shift = first >= 16 ? 4 : 0;
    const uint8_t* qs = b + qs_at + (first & 15);
    for (int j = 0; j < kBlockPiece; ++j) q[j] = (qs[j] >> shift) & 0xF;
    if constexpr (D == DType::kQ5_1) {
      const uint32_t qh = uint32_t(b[4]) | (uint32_t(b[5]) << 8) | (uint32_t(b[6]) << 16) | (uint32_t(b[7]) << 24);
      for (int j = 0; j < kBlockPiece; ++j) q[j] |= int((qh >> (first + j)) & 1u) << 4;
    }
  } else if constexpr (D == DType::kIQ4_NL || D == DType::kMXFP4) {
    // IQ4_NL: d @0, qs[16] @2; MXFP4: E8M0 e @0, qs[16] @1. Nibbles as Q4_0's, each a grid index.
    const int shift = first >= 16 ? 4 : 0;
    if constexpr (D == DType::kIQ4_NL) {
      mul = read_f16(b);
      for (int j = 0; j < kBlockPiece; ++j) q[j] = iq4_nl_value((b[2 + (first & 15) + j] >> shift) & 0xF);
    } else {
      mul = e8m0_half(b[0]);
      for (int j = 0; j < kBlockPiece; ++j) q[j] = mxfp4_value((b[1 + (first & 15) + j] >> shift) & 0xF);
    }
  } else if constexpr (D == DType::kIQ4_XS) {
    // d @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8: sub-block g = first / 32 is IQ4_NL's 16
    // bytes at qs + 16 g, scaled by d times its signed 6-bit scale.
    const int g = first / 32, within = first % 32, shift = within >= 16 ? 4 : 0;
    const int low = (b[4 + g / 2] >> (4 * (g % 2))) & 0xF, high = ((b[2] | (b[3] << 8)) >> (2 * g)) & 3;
    mul = read_f16(b) * float((low | (high << 4)) - 32);
    for (int j = 0; j < kBlockPiece; ++j) q[j] = iq4_nl_value((b[8 + 16 * g + (within & 15) + j] >> shift) & 0xF);
  } else if constexpr (D == DType::kQ2_K || D == DType::kQ3_K) {
    // Weight 128 h + 32 s + l: bits 2s..2s+1 of qs[32 h + l]; groups of 16.
    const int h = first / 128, s = (first % 128) / 32, l0 = first % 32, g = first / 16;
    if constexpr (D == DType::kQ2_K) {  // scales[16] @0, qs[64] @16, d @80, dmin @82
      mul = read_f16(b + 80) * float(b[g] & 0xF);
      sub = read_f16(b + 82) * float(b[g] >> 4);
      for (int j = 0; j < kBlockPiece; ++j) q[j] = (b[16 + 32 * h + l0 + j] >> (2 * s)) & 3;
    } else {  // hmask[32] @0, qs[64] @32, scales[12] @96, d @108; 4 subtracted unless the hmask bit is set
      mul = read_f16(b + 108) * float(q3_k_scale(b + 96, g));
      for (int j = 0; j < kBlockPiece; ++j) {
        const int low = (b[32 + 32 * h + l0 + j] >> (2 * s)) & 3;
        const int high = (b[l0 + j] >> (4 * h + s)) & 1;
        q[j] = low - (high ? 0 : 4);
      }
    }
  } else if constexpr (D == DType::kQ4_K || D == DType::kQ5_K) {
    // d @0, dmin @2, scales[12] @4, qs[128] @16 (Q5_K: qh[32] @16, qs @48): weights 64 c + l and
    // 64 c + 32 + l are the low and high nibble of qs[32 c + l], Q5_K's plus 16 where bit
    // (64 c + l) / 32 of qh[l] is set; groups of 32.
    const int c = first / 64, shift = first % 64 >= 32 ? 4 : 0, l0 = first % 32, g = first / 32;
    int scale = 0, min = 0;
    q4_k_scale_min(b + 4, g, scale, min);
    mul = read_f16(b) * float(scale);
    sub = read_f16(b + 2) * float(min);
    if constexpr (D == DType::kQ4_K) {
      for (int j = 0; j < kBlockPiece; ++j) q[j] = (b[16 + 32 * c + l0 + j] >> shift) & 0xF;
    } else {
      for (int j = 0; j < kBlockPiece; ++j)
        q[j] = ((b[48 + 32 * c + l0 + j] >> shift) & 0xF) | (((b[16 + l0 + j] >> g) & 1) << 4);
    }
  } else if constexpr (kIsIqGrid<D>) {  // a grid row's levels, one factor (iq_decode.h)
    mul = iq_factor<D>(b, first);
    iq_levels8<D>(b, first, q);
  } else {
    static_assert(D == DType::kQ6_K, "block_weights8 has no decoder for this block type");
    // Q6_K: ql[128] @0, qh[64] @128, scales int8[16] @192, d @208. Weight 128 h + k: nibble k / 64
    // of ql[64 h + k % 64], bits 2 (k / 32) of qh[32 h + k % 32] as bits 4-5; minus 32; groups of 16.
    const int h = first / 128, k0 = first % 128, g = first / 16;
    mul = read_f16(b + 208) * float(int8_t(b[192 + g]));
    for (int j = 0; j < kBlockPiece; ++j) {
      const int k = k0 + j;
      const int low = (b[64 * h + k % 64] >> (4 * (k / 64))) & 0xF;
      const int high = (b[128 + 32 * h + k % 32] >> (2 * (k / 32))) & 3;
      q[j] = (low | (high << 4)) - 32;
    }
  }
  for (int j = 0; j < kBlockPiece; ++j) w[j] = mul_sub(mul, float(q[j]), sub);
}

// Weights first .. first + 7 of a block row (first a multiple of 8).
template <DType D>
CHRONOS_HD inline void row_weights8(const uint8_t* row, int64_t first, float (&w)[kBlockPiece]) {
  block_weights8<D>(row + (first / kBlockElements<D>)*kBlockBytes<D>, int(first % kBlockElements<D>), w);
}

}  // namespace chronos::cuda::dm
