// Element types as safetensors names them, GGUF's block-quantized weight types, and the
// f16/bf16 <-> f32 conversions.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace chronos {

// The first 17 are the element types of safetensors headers. The rest are block-quantized weight
// types with GGUF's exact block layouts (ggml-common.h; docs/quantization.md draws them): a row of
// n weights is n / dtype_block_elements blocks of dtype_block_bytes each, so a GGUF tensor's bytes
// are usable as they are. They never appear in a safetensors header: a quantized tensor is stored
// as U8 bytes and its logical type is recorded beside it (DESIGN.md §5).
// clang-format off
enum class DType : uint8_t {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kF8E8M0, kI16, kU16, kF16, kBF16, kI32, kU32, kF32,
  kF64, kI64, kU64, kC64,
  kQ8_0,  // 32 weights: f16 d, 32 x int8                                 34 B, 8.5 bits/weight
  kQ4_0,  // 32 weights: f16 d, 16 B of nibbles (q - 8)                    18 B, 4.5
  kQ5_0,  // 32 weights: f16 d, 4 B of fifth bits, 16 B of nibbles (q - 16) 22 B, 5.5
  kQ2_K,  // 256 weights: 16 x (4-bit scale, 4-bit min), 64 B of 2-bit q, f16 d, f16 dmin   84 B, 2.625
  kQ3_K,  // 256 weights: 32 B high bits, 64 B of 2-bit q, 12 B of 6-bit scales, f16 d     110 B, 3.4375
  kQ4_K,  // 256 weights: f16 d, f16 dmin, 12 B of 6-bit scales and mins, 128 B of nibbles 144 B, 4.5
  kQ6_K,  // 256 weights: 128 B low nibbles, 64 B high 2 bits, 16 x int8 scale, f16 d      210 B, 6.5625
  kQ5_K,  // 256 weights: Q4_K's d, dmin and scales, 32 B of fifth bits, 128 B of nibbles  176 B, 5.5
  kQ4_1,    // 32 weights: f16 d, f16 m, 16 B of nibbles (d q + m)                          20 B, 5.0
  kQ5_1,    // 32 weights: f16 d, f16 m, 4 B of fifth bits, 16 B of nibbles (d q + m)      24 B, 6.0
  kIQ4_NL,  // 32 weights: f16 d, 16 B of nibbles indexing a 16-value non-linear grid       18 B, 4.5
  kIQ4_XS,  // 256 weights: f16 d, 8 x 6-bit sub-block scales, 128 B of IQ4_NL's nibbles   136 B, 4.25
  kMXFP4,   // 32 weights: E8M0 scale byte, 16 B of E2M1 nibbles (OCP microscaling)          17 B, 4.25
  // The IQ grid types, read only (Chronos does not quantize to them); 256 weights each, signed
  // magnitudes from the grids of kernels/grids/iq{1,2,3}_grids.h:
  kIQ2_XXS,  // f16 d, 8 x (4 grid bytes, u32 of 4 x 7 sign bits + 4-bit scale)               66 B, 2.0625
  kIQ2_XS,   // f16 d, 32 x u16 (9-bit grid index, 7 sign bits), 8 B of 4-bit scales           74 B, 2.3125
  kIQ2_S,    // f16 d, 32 B grid low bits, 32 B signs, 8 B grid high bits, 8 B 4-bit scales   82 B, 2.5625
  kIQ3_XXS,  // f16 d, 64 B grid bytes, 8 x u32 (4 x 7 sign bits + 4-bit scale)               98 B, 3.0625
  kIQ3_S,    // f16 d, 64 B grid low bits, 8 B high bits, 32 B signs, 4 B 4-bit scales       110 B, 3.4375
  kIQ1_S,    // f16 d, 32 B grid low bits, 8 x u16 (high bits, 3-bit scale, delta sign)       50 B, 1.5625
  kIQ1_M,    // 32 B grid low bits, 16 B high bits + delta signs, 8 B 3-bit scales + f16 d    56 B, 1.75
};
// clang-format on

// Bits per element of a whole-byte type; CHRONOS_CHECK-fails for a block type (use dtype_row_bytes).
int dtype_bits(DType dtype);
// "BF16" as in safetensors headers; "Q4_K" etc. for the block types, as GGUF names them.
std::string_view dtype_name(DType dtype);
// A safetensors header's dtype name; never a block type (a header saying "Q4_K" is bad input).
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes per element of a whole-byte type; CHRONOS_CHECK-fails for a block type.
int64_t dtype_size(DType dtype);

// Block-quantized types.
bool dtype_is_block(DType dtype);
// Weights per block (32 or 256) and bytes per block; 1 and dtype_size for the whole-byte types.
int64_t dtype_block_elements(DType dtype);
int64_t dtype_block_bytes(DType dtype);
// Bytes of a row of n_elements weights, for every type; CHRONOS_CHECK-fails when n_elements is not
// a multiple of the block. The stride of a [rows, cols] weight matrix is dtype_row_bytes(dtype, cols).
int64_t dtype_row_bytes(DType dtype, int64_t n_elements);
// "q4_k" or "Q4_K" -> kQ4_K; nullopt for anything that is not a block type.
std::optional<DType> block_dtype_from_name(std::string_view name);
// The block types in lower case, comma-separated, in chronos/block_types.h's order: every one, or
// those Chronos quantizes to (the choices of pack --expert-type).
std::string block_type_names(bool quantizable_only);

// The type to store a row of row_length weights in when `wanted` is asked for, as GGUF writers do:
// a K type (256-weight blocks) on a row that is not a multiple of 256 falls back to a 32-weight
// type of at least as many bits (block_types.h's short_row_fallback: Q4_K and Q5_K -> Q5_0, Q2_K
// and Q3_K -> Q4_0, Q6_K -> Q8_0). A 32-block type stays itself. CHRONOS_CHECK-fails when `wanted` is not a block type
// or the row is not a multiple of 32 (no block type fits it: keep such a tensor in F16/BF16).
DType block_dtype_for_row(DType wanted, int64_t row_length);

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// OCP FP8 E4M3 (torch.float8_e4m3fn): exponent bias 7, no infinities, 0x7F and 0xFF are NaN, 448
// the largest finite value; exact in f32.
inline float f8e4m3_to_f32(uint8_t bits) {
  const uint32_t sign = uint32_t(bits & 0x80u) << 24;
  const uint32_t exponent = (bits >> 3) & 0xfu;
  const uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exponent == 0) {  // subnormal: mantissa / 8 * 2^-6
    const float magnitude = float(mantissa) * 0x1p-9f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}
inline bool f8e4m3_is_nan(uint8_t bits) { return (bits & 0x7fu) == 0x7fu; }
// E8M0 (float8_e8m0fnu), an exponent alone: 2^(bits - 127); 0xFF is NaN.
inline float f8e8m0_to_f32(uint8_t bits) {
  if (bits == 0xff) return std::bit_cast<float>(0x7fc00000u);
  if (bits == 0) return 0x1p-127f;
  return std::bit_cast<float>(uint32_t(bits) << 23);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round to nearest even, overflow to inf.
uint16_t f32_to_f16(float value);

}  // namespace chronos
