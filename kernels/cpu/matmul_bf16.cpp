// The bf16-activation path for BF16 weights, scalar reference: what vdpbf16ps computes, written
// out lane by lane, so the AVX512_BF16 kernel (matmul_bf16_avx512.cpp) is tested against it bit
// for bit on any CPU that has one.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace chronos::kernels {
namespace {

// vdpbf16ps treats denormal inputs as zero and flushes denormal results to zero.
inline float flush_denormal(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

inline float bf16_input(uint16_t bits) { return flush_denormal(bf16_to_f32(bits)); }

// a8[i] = l[i] + l[i + 8], a4[i] = a8[i] + a8[i + 4], then (a4[0] + a4[2]) + (a4[1] + a4[3]): the
// order of the AVX-512 kernel's reduce().
float reduce_bf16_lanes(const float* lanes) {
  float a8[8], a4[4];
  for (int i = 0; i < 8; ++i) a8[i] = lanes[i] + lanes[i + 8];
  for (int i = 0; i < 4; ++i) a4[i] = a8[i] + a8[i + 4];
  return (a4[0] + a4[2]) + (a4[1] + a4[3]);
}

// One (row, token) product: kBf16Lanes f32 partial sums over the columns in chunks of
// 2 * kBf16Lanes; lane j of a chunk adds the product of pair element 2j + 1, then of 2j (each
// product of two bf16 values is exact in f32, each addition rounds to nearest even). Columns
// past the end are zeros. Then the lanes are summed by reduce_bf16_lanes.
float dot_bf16(const uint16_t* w, const uint16_t* x, int64_t cols) {
  constexpr int64_t kChunk = 2 * kBf16Lanes;
  float acc[kBf16Lanes] = {};
  for (int64_t c = 0; c < cols; c += kChunk) {
    for (int j = 0; j < kBf16Lanes; ++j) {
      for (const int64_t k : {c + 2 * j + 1, c + 2 * j}) {
        const float product = k < cols ? bf16_input(w[k]) * bf16_input(x[k]) : 0.0f;
        acc[j] = flush_denormal(acc[j] + product);
      }
    }
  }
  return reduce_bf16_lanes(acc);
}

}  // namespace

void activations_to_bf16_scalar(uint16_t* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void matmul_rows_bf16_scalar(float* y, const uint16_t* xb, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                             int64_t row_end) {
  const auto* weights = static_cast<const uint16_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; ++r)
    for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = dot_bf16(weights + r * w.cols, xb + t * w.cols, w.cols);
}

}  // namespace chronos::kernels
