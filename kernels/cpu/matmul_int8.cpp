// Scalar reference of the 8-bit-activation path for block-type weights: activations rounded to
// int8 per block, integer dot products against the weights' integer levels, one f32 step per block.
// Written from the block layouts (quant_layout.h's decode_levels and scale decoders), not from the
// SIMD kernels' tricks, so the tests compare two independent derivations of the same integers.
#include <cmath>
#include <cstring>
#include <vector>

#include "chronos/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_layout.h"

namespace chronos::kernels {
namespace {

bool is_k_type(DType dtype) { return block_elements_of(dtype) == 256; }

// One block of n activations (32 or 256): d, qs and, for 256, the 16-element sums.
void quantize_activation_block(const float* x, int n, float* d_out, int8_t* qs, int16_t* bsums) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= 3.40282347e+38f;  // false for Inf and NaN
    amax = a > amax ? a : amax;
  }
  if (!finite) {
    *d_out = std::nanf("");
    std::memset(qs, 0, size_t(n));
  } else {
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = d;
    for (int i = 0; i < n; ++i) qs[i] = int8_t(int(std::nearbyint(x[i] * id)));  // ties to even, as cvtps2dq
  }
  if (bsums != nullptr)
    for (int g = 0; g < n / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qs[g * 16 + i];
      bsums[g] = int16_t(sum);
    }
}

// One row of block-type weights times one token's activation blocks.
float dot_row_int8(DType dtype, const uint8_t* row, const uint8_t* xq, int64_t cols) {
  const int64_t n_blocks = cols / block_elements_of(dtype), block_bytes = dtype_block_bytes(dtype);
  int8_t q[kMaxBlockElements];
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* w = row + b * block_bytes;
    decode_levels(dtype, w, q);
    if (!is_k_type(dtype)) {
      const auto* a = reinterpret_cast<const ActBlock32*>(xq) + b;
      int32_t isum = 0, xsum = 0;
      for (int i = 0; i < 32; ++i) {
        isum += int32_t(q[i]) * a->qs[i];
        xsum += a->qs[i];
      }
      // The block scale: f16 d first in every 32-weight type but MXFP4 (its E8M0 byte).
      const float d = dtype == DType::kMXFP4 ? e8m0_half(w[mxfp4::e]) : read_f16(w);
      acc = std::fma(d * a->d, float(isum), acc);
      if (dtype == DType::kQ4_1 || dtype == DType::kQ5_1)  // + m times the activation sum
        acc = std::fma(read_f16(w + q4_1::m) * a->d, float(xsum), acc);
      continue;
    }
    const auto* a = reinterpret_cast<const ActBlock256*>(xq) + b;
    // Per group: the integer scale (and min), the level dot and the activation sum.
    const int group = group_elements(dtype);
    int32_t scaled = 0, mins = 0;
    for (int g = 0; g < 256 / group; ++g) {
      int32_t dot = 0, xsum = 0;
      for (int i = g * group; i < (g + 1) * group; ++i) {
        dot += int32_t(q[i]) * a->qs[i];
        xsum += a->qs[i];
      }
      int scale = 0, min = 0;
      if (is_iq_grid_type(dtype)) {
        scale = iq_int8_scale(dtype, w, g);
      } else {
        switch (dtype) {
          case DType::kQ2_K:
            scale = w[q2_k::scales + g] & 0xF;
            min = w[q2_k::scales + g] >> 4;
            break;
          case DType::kQ3_K: scale = q3_k_scale(w + q3_k::scales, g); break;
          case DType::kQ4_K:
          case DType::kQ5_K: q4_k_scale_min(w + q4_k::scales, g, &scale, &min); break;
          case DType::kIQ4_XS: scale = iq4_xs_scale(w, g); break;
          default: scale = int8_t(w[q6_k::scales + g]); break;  // Q6_K
        }
      }
      scaled += scale * dot;
      mins += min * xsum;
    }
    if (is_iq_grid_type(dtype)) {
      acc = std::fma(iq_int8_d(dtype, w) * a->d, float(scaled), acc);
      continue;
    }
    switch (dtype) {
      case DType::kQ2_K:
        acc = std::fma(read_f16(w + q2_k::d) * a->d, float(scaled), acc);
        acc = std::fma(-(read_f16(w + q2_k::dmin) * a->d), float(mins), acc);
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        acc = std::fma(read_f16(w + q4_k::d) * a->d, float(scaled), acc);
        acc = std::fma(-(read_f16(w + q4_k::dmin) * a->d), float(mins), acc);
        break;
      case DType::kQ3_K: acc = std::fma(read_f16(w + q3_k::d) * a->d, float(scaled), acc); break;
      case DType::kIQ4_XS: acc = std::fma(read_f16(w + iq4_xs::d) * a->d, float(scaled), acc); break;
      default: acc = std::fma(read_f16(w + q6_k::d) * a->d, float(scaled), acc); break;  // Q6_K
    }
  }
  return acc;
}

}  // namespace

int64_t activation_row_bytes(DType weight_dtype, int64_t cols) {
  CHRONOS_CHECK(dtype_is_block(weight_dtype));
  return is_k_type(weight_dtype) ? cols / 256 * int64_t(sizeof(ActBlock256)) : cols / 32 * int64_t(sizeof(ActBlock32));
}

namespace {
// A per-thread buffer of 64-byte lines that grows to the largest request and is then reused.
template <class Tag>
uint8_t* thread_lines(int64_t bytes) {
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  thread_local std::vector<Line> scratch;
  const size_t lines = size_t((bytes + 63) / 64);
  if (scratch.size() < lines) scratch.resize(lines);
  return scratch.data()->bytes;
}
struct ActivationLines;
struct TileLines;
}  // namespace

void* thread_activation_scratch(int64_t bytes) { return thread_lines<ActivationLines>(bytes); }

uint8_t* thread_tile_scratch(int64_t bytes) { return thread_lines<TileLines>(bytes); }

void quantize_activations_scalar(void* out, const float* x, DType weight_dtype, int64_t n_tokens, int64_t cols) {
  auto* bytes = static_cast<uint8_t*>(out);
  const int64_t row_bytes = activation_row_bytes(weight_dtype, cols);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * cols;
    if (is_k_type(weight_dtype)) {
      auto* a = reinterpret_cast<ActBlock256*>(bytes + t * row_bytes);
      for (int64_t b = 0; b < cols / 256; ++b)
        quantize_activation_block(xr + b * 256, 256, &a[b].d, a[b].qs, a[b].bsums);
    } else {
      auto* a = reinterpret_cast<ActBlock32*>(bytes + t * row_bytes);
      for (int64_t b = 0; b < cols / 32; ++b) quantize_activation_block(xr + b * 32, 32, &a[b].d, a[b].qs, nullptr);
    }
  }
}

void matmul_rows_int8_scalar(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                             int64_t row_end) {
  CHRONOS_CHECK_MSG(dtype_is_block(w.dtype), "matmul_rows_int8: {} is not a block type", dtype_name(w.dtype));
  const int64_t row_bytes = dtype_row_bytes(w.dtype, w.cols), act_bytes = activation_row_bytes(w.dtype, w.cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; ++r)
    for (int64_t t = 0; t < n_tokens; ++t)
      y[t * w.rows + r] =
          dot_row_int8(w.dtype, data + r * row_bytes, static_cast<const uint8_t*>(xq) + t * act_bytes, w.cols);
}

}  // namespace chronos::kernels
