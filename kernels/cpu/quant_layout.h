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

namespace chronos::kernels {
namespace {

constexpr int kMaxBlockElements = 256;
constexpr int kMaxGroups = 16;

// Byte layouts, field by field (offsets within one block).
namespace q8_0 { constexpr int d = 0, qs = 2; }                       // qs: 32 x int8
namespace q4_0 { constexpr int d = 0, qs = 2; }                       // qs[j]: weight j low nibble, j + 16 high
namespace q5_0 { constexpr int d = 0, qh = 2, qs = 6; }               // qh: u32 LE, bit j = fifth bit of weight j
namespace q2_k { constexpr int scales = 0, qs = 16, d = 80, dmin = 82; }
namespace q3_k { constexpr int hmask = 0, qs = 32, scales = 96, d = 108; }
namespace q4_k { constexpr int d = 0, dmin = 2, scales = 4, qs = 16; }
namespace q6_k { constexpr int ql = 0, qh = 128, scales = 192, d = 208; }
namespace q5_k { constexpr int d = 0, dmin = 2, scales = 4, qh = 16, qs = 48; }  // Q4_K's first three fields

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

// mul/sub[block_elements / group] = one block's per-group factors (the f32 products GGUF forms).
[[gnu::always_inline]] inline void decode_factors(DType dtype, const uint8_t* b, float* mul, float* sub) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:  // d is the first field of all three
      mul[0] = read_f16(b);
      sub[0] = 0.0f;
      return;
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
    default:
      return;  // callers check dtype_is_block first
  }
}

// q[block_elements] = one block's signed levels. The SIMD kernels read the same bits lane-wise
// (matmul_simd.h, block_levels); this is their reference.
inline void decode_levels(DType dtype, const uint8_t* b, int8_t* q) {
  switch (dtype) {
    case DType::kQ8_0:
      std::memcpy(q, b + q8_0::qs, 32);
      return;
    case DType::kQ4_0:
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t((b[q4_0::qs + j] & 0xF) - 8);
        q[j + 16] = int8_t((b[q4_0::qs + j] >> 4) - 8);
      }
      return;
    case DType::kQ5_0: {
      uint32_t qh;
      std::memcpy(&qh, b + q5_0::qh, 4);  // little-endian, as x86
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t(((b[q5_0::qs + j] & 0xF) | (((qh >> j) & 1) << 4)) - 16);
        q[j + 16] = int8_t(((b[q5_0::qs + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
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
    default:
      return;
  }
}

// q[block_elements] = the signed levels of one block; mul/sub[block_elements / group] its factors.
inline void decode_block(DType dtype, const uint8_t* b, int8_t* q, float* mul, float* sub) {
  decode_factors(dtype, b, mul, sub);
  decode_levels(dtype, b, q);
}

}  // namespace
}  // namespace chronos::kernels
