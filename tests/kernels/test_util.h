// Shared helpers for the kernel tests: ISAs to test, random weights stored in each dtype.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "chronos/block_types.h"
#include "chronos/dtype.h"
#include "chronos/ops.h"
#include "chronos/quant.h"

namespace chronos::test {

// Every ISA this CPU can run, scalar first.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (int(detect_isa()) >= int(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  if (int(detect_isa()) >= int(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  return isas;
}

// Restores the detected ISA when a test ends, whatever it set.
struct IsaGuard {
  ~IsaGuard() { set_isa(detect_isa()); }
};

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = dist(rng);
  return out;
}

// A weight matrix stored in `dtype`, plus the exact f32 value of every stored element.
struct StoredWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols], what the stored bits mean

  WeightView view() const { return {bytes.data(), dtype, rows, cols}; }
};

inline StoredWeights make_weights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  StoredWeights w{dtype, rows, cols, {}, random_floats(rows * cols, seed)};
  w.bytes.resize(size_t(rows * cols * dtype_size(dtype)));
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + i * 4, &w.values[size_t(i)], 4);
      continue;
    }
    const uint16_t bits = dtype == DType::kF16 ? f32_to_f16(w.values[size_t(i)]) : f32_to_bf16(w.values[size_t(i)]);
    w.values[size_t(i)] = dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
    std::memcpy(w.bytes.data() + i * 2, &bits, 2);
  }
  return w;
}

// Unit roundoff of f32.
constexpr double kF32Eps = 1.0 / (1 << 24);

// Checks y[n_tokens, rows] against sum_c w[r, c] * x[t, c] in double over `weights` ([rows, cols],
// what the stored bits mean). Tolerance: any f32 summation order of n products (FMA or not) is
// within (n + 1) * u * sum_c |w x| of the exact sum (Higham, Accuracy and Stability, 3.1), u = 2^-24;
// + 1e-30 for the all-zero case. Weight conversion is exact, so nothing else contributes, and a
// dropped or doubled term (>= ~1e-6 * sum here) is far outside it.
inline void expect_matches_reference(const std::vector<float>& y, const std::vector<float>& x,
                                     const std::vector<float>& weights, int64_t rows, int64_t cols, int64_t n_tokens,
                                     const std::string& what) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(weights[size_t(r * cols + c)]) * double(x[size_t(t * cols + c)]);
        exact += p;
        magnitude += std::fabs(p);
      }
      const double tolerance = double(cols + 1) * kF32Eps * magnitude + 1e-30;
      ASSERT_NEAR(y[size_t(t * rows + r)], exact, tolerance)
          << what << " token " << t << " row " << r << " cols " << cols;
    }
  }
}

// Sets the block-weight activation mode for a scope and restores the previous one.
struct BlockModeGuard {
  explicit BlockModeGuard(ops::BlockActivationMode mode) : saved(ops::block_activation_mode()) {
    ops::set_block_activation_mode(mode);
  }
  ~BlockModeGuard() { ops::set_block_activation_mode(saved); }
  ops::BlockActivationMode saved;
};

// Sets the BF16-weight activation mode for a scope and restores the previous one.
struct Bf16ModeGuard {
  explicit Bf16ModeGuard(ops::Bf16ActivationMode mode) : saved(ops::bf16_activation_mode()) {
    ops::set_bf16_activation_mode(mode);
  }
  ~Bf16ModeGuard() { ops::set_bf16_activation_mode(saved); }
  ops::Bf16ActivationMode saved;
};

// A [rows, cols] block-type matrix of random weights and the exact f32 value of every weight it stores.
struct QuantWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols], dequantized

  WeightView view() const { return {bytes.data(), dtype, rows, cols}; }
};

// Types Chronos quantizes to are quantized from uniform random weights; the others (the IQ grid
// types) are random valid blocks: every byte random, then the block's f16 d set to a finite
// 2^-9 .. 2^-5 (IQ1_M keeps d in the top nibbles of its four scale words, bytes 49, 51, 53, 55).
inline QuantWeights make_quant_weights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  QuantWeights w{dtype, rows, cols, std::vector<uint8_t>(size_t(rows * dtype_row_bytes(dtype, cols))),
                 std::vector<float>(size_t(rows * cols))};
  if (find_block_type(dtype)->quantizer) {
    const auto x = random_floats(rows * cols, seed);
    quantize_rows(dtype, x.data(), w.bytes.data(), rows, cols);
  } else {
    std::mt19937 rng(seed);
    for (auto& byte : w.bytes) byte = uint8_t(rng());
    const int64_t block_bytes = dtype_block_bytes(dtype);
    for (int64_t at = 0; at < int64_t(w.bytes.size()); at += block_bytes) {
      const uint16_t d = f32_to_f16(std::ldexp(1.0f + float(rng() % 1024) / 1024.0f, -9 - int(rng() % 4)));
      uint8_t* b = w.bytes.data() + at;
      if (dtype == DType::kIQ1_M) {
        for (int k = 0; k < 4; ++k) b[49 + 2 * k] = uint8_t((b[49 + 2 * k] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
      } else {
        std::memcpy(b, &d, 2);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(dtype, w.bytes.data() + r * dtype_row_bytes(dtype, cols), w.values.data() + r * cols, cols);
  return w;
}

// The error of the integer path against the exact product of the same weights comes from the
// activations' rounding (|x - d q| <= d / 2 per element) and from the f32 steps (a few roundings per
// block, then one add per block): |y - exact| <= sum |w| d / 2 + (n_blocks + 8) u sum |w| (|x| + d).
inline void expect_within_activation_rounding(const std::vector<float>& y, const std::vector<float>& x,
                                              const QuantWeights& w, int64_t n_tokens, const std::string& what,
                                              double* error2, double* energy) {
  const int64_t block = dtype_block_elements(w.dtype), n_blocks = w.cols / block;
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<double> d(static_cast<size_t>(n_blocks));
    for (int64_t b = 0; b < n_blocks; ++b) {
      float amax = 0.0f;
      for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[size_t(t * w.cols + b * block + i)]));
      d[size_t(b)] = double(amax) / 127.0;
    }
    for (int64_t r = 0; r < w.rows; ++r) {
      double exact = 0.0, rounding = 0.0, magnitude = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double wv = w.values[size_t(r * w.cols + c)], xv = x[size_t(t * w.cols + c)], dx = d[size_t(c / block)];
        exact += wv * xv;
        rounding += std::fabs(wv) * dx / 2;
        magnitude += std::fabs(wv) * (std::fabs(xv) + dx);
      }
      const double got = y[size_t(t * w.rows + r)];
      ASSERT_NEAR(got, exact, rounding + double(n_blocks + 8) * kF32Eps * magnitude + 1e-30)
          << what << " token " << t << " row " << r;
      *error2 += (got - exact) * (got - exact);
      *energy += exact * exact;
    }
  }
}

}  // namespace chronos::test
