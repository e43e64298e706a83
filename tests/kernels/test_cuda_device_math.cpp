// The per-element logic of the CUDA kernels (kernels/cuda/device_math.h), compiled here by the host
// compiler and checked against the CPU reference it must reproduce: the dtype conversions of
// chronos/dtype.h, the scalar ops of chronos/ops.h, and the top-k / combine / RoPE / attention-window
// semantics of src/model. The kernels call these same functions, so these tests run on every build
// with or without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "chronos/dtype.h"
#include "chronos/ops.h"
#include "kernels/cuda/device_math.h"
#include "kernels/reference_combine.h"
#include "test_util.h"

namespace chronos {
namespace {

namespace dm = cuda::dm;

uint32_t bits_of(float v) { return std::bit_cast<uint32_t>(v); }
float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }

// Runs the ops at the scalar reference ISA for the test's duration (the CPU forward's exact formulas).
struct ScalarIsa {
  ScalarIsa() { set_isa(Isa::kScalar); }
  ~ScalarIsa() { set_isa(detect_isa()); }
};

// ---- Conversions -----------------------------------------------------------------------------------

TEST(CudaDeviceMath, HalfToF32MatchesHostForEveryBitPattern) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    ASSERT_EQ(bits_of(dm::bf16_to_f32(uint16_t(h))), bits_of(bf16_to_f32(uint16_t(h)))) << std::hex << h;
    ASSERT_EQ(bits_of(dm::f16_to_f32(uint16_t(h))), bits_of(f16_to_f32(uint16_t(h)))) << std::hex << h;
  }
}

// Every f32 bit pattern would take tens of seconds; a stride coprime to the bit layout reaches every
// exponent with varied low bits, and the rounding boundaries are checked exhaustively below.
TEST(CudaDeviceMath, F32ToHalfMatchesHostOnStridedSweep) {
  constexpr uint64_t kStride = 4093;  // prime: about a million patterns
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += kStride) {
    const float v = float_of(uint32_t(bits));
    ASSERT_EQ(dm::f32_to_bf16(v), f32_to_bf16(v)) << std::hex << bits;
    ASSERT_EQ(dm::f32_to_f16(v), f32_to_f16(v)) << std::hex << bits;
  }
}

// For every pair of neighbouring half values: the exact midpoint (a tie, which must go to the even
// one), one f32 ulp either side of it, and the values themselves. This covers every rounding boundary
// of both formats, f16 subnormals included.
TEST(CudaDeviceMath, F32ToHalfMatchesHostAtEveryRoundingBoundary) {
  for (uint32_t h = 0; h < 0xffffu; ++h) {
    for (bool is_f16 : {false, true}) {
      const float lo = is_f16 ? f16_to_f32(uint16_t(h)) : bf16_to_f32(uint16_t(h));
      const float hi = is_f16 ? f16_to_f32(uint16_t(h + 1)) : bf16_to_f32(uint16_t(h + 1));
      if (!std::isfinite(lo) || !std::isfinite(hi) || std::signbit(lo) != std::signbit(hi)) continue;
      const float mid = float((double(lo) + double(hi)) / 2);  // exact: a half needs at most 12 of f32's 24 bits
      for (const float v : {lo, hi, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)}) {
        if (is_f16)
          ASSERT_EQ(dm::f32_to_f16(v), f32_to_f16(v)) << std::hex << bits_of(v);
        else
          ASSERT_EQ(dm::f32_to_bf16(v), f32_to_bf16(v)) << std::hex << bits_of(v);
      }
    }
  }
  for (const float v : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::denorm_min(), 65504.0f, 65519.99f, 65520.0f, 1e30f,
                        std::numeric_limits<float>::max()}) {
    EXPECT_EQ(dm::f32_to_f16(v), f32_to_f16(v)) << v;
    EXPECT_EQ(dm::f32_to_bf16(v), f32_to_bf16(v)) << v;
  }
}

TEST(CudaDeviceMath, WeightToF32ReadsEachDtype) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const test::StoredWeights w = test::make_weights(dtype, 3, 37, 11);
    for (int64_t i = 0; i < 3 * 37; ++i)
      ASSERT_EQ(dm::weight_to_f32(w.bytes.data(), dtype, i), w.values[size_t(i)]) << dtype_name(dtype) << " " << i;
  }
}

// ---- Element-wise ops --------------------------------------------------------------------------------

TEST(CudaDeviceMath, ClampIsStdClampNaNIncluded) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float limit : {0.5f, 8.0f}) {
    for (const float v :
         {-INFINITY, -9.0f, -8.0f, -0.5f, -0.25f, 0.0f, -0.0f, 0.25f, 0.5f, 7.99f, 8.0f, 1e30f, INFINITY}) {
      EXPECT_EQ(bits_of(dm::clamp_value(v, limit)), bits_of(std::clamp(v, -limit, limit))) << v << " " << limit;
    }
    EXPECT_TRUE(std::isnan(dm::clamp_value(nan, limit)));
  }
}

TEST(CudaDeviceMath, SiluMulMatchesScalarOp) {
  ScalarIsa scalar;
  const auto gate = test::random_floats(1000, 21, -12.0f, 12.0f), up = test::random_floats(1000, 22, -3.0f, 3.0f);
  std::vector<float> expected(gate.size());
  ops::silu_mul(expected.data(), gate.data(), up.data(), int64_t(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) ASSERT_EQ(dm::silu_mul_value(gate[i], up[i]), expected[i]) << i;
}

TEST(CudaDeviceMath, RmsnormMatchesScalarOp) {
  ScalarIsa scalar;
  for (const int64_t n : {1, 7, 64, 129, 2048}) {
    const auto x = test::random_floats(n, uint32_t(n), -4.0f, 4.0f), weight = test::random_floats(n, 5, 0.5f, 1.5f);
    std::vector<float> expected(size_t(n), 0.0f);
    ops::rmsnorm(expected.data(), x.data(), weight.data(), n, 1e-6f);
    // The kernel's sum of squares is a block reduction; with the sequential sum the element formula
    // must reproduce the op bit for bit.
    float sum_sq = 0.0f;
    for (const float v : x) sum_sq += v * v;
    const float scale = dm::rms_scale(sum_sq, n, 1e-6f);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(dm::rmsnorm_value(x[size_t(i)], scale, weight[size_t(i)]), expected[size_t(i)]) << n << " " << i;
  }
}

TEST(CudaDeviceMath, SigmoidIsTheSharedGateFormula) {
  for (const float v : test::random_floats(200, 31, -20.0f, 20.0f))
    EXPECT_EQ(dm::sigmoid(v), 1.0f / (1.0f + std::exp(-v))) << v;
  EXPECT_EQ(dm::sigmoid(0.0f), 0.5f);
}

// ---- RoPE --------------------------------------------------------------------------------------------

TEST(CudaDeviceMath, RopeByFlatIndexMatchesCpuRopeHead) {
  struct Shape {
    int64_t n_tokens, n_heads, head_dim, n_rot, row_stride, pos0;
  };
  // Full and partial rotation; a row stride wider than the heads (q and k inside one qkv row).
  for (const Shape s : {Shape{1, 1, 8, 8, 8, 0}, Shape{3, 4, 16, 16, 64, 5}, Shape{5, 3, 64, 32, 200, 2},
                        Shape{17, 2, 10, 4, 21, 40}}) {
    const int64_t half = s.n_rot / 2, n_ctx = s.pos0 + s.n_tokens;
    const auto cos = test::random_floats(n_ctx * half, 41), sin = test::random_floats(n_ctx * half, 42);
    const auto x0 = test::random_floats(s.n_tokens * s.row_stride, 43);
    auto expected = x0;
    for (int64_t t = 0; t < s.n_tokens; ++t)
      for (int64_t h = 0; h < s.n_heads; ++h)
        ops::rope_head(expected.data() + t * s.row_stride + h * s.head_dim, cos.data() + (s.pos0 + t) * half,
                       sin.data() + (s.pos0 + t) * half, s.n_rot);
    // What the kernel does, one "thread" per flat index.
    auto actual = x0;
    std::vector<int> visits(size_t(s.n_tokens * s.n_heads * half), 0);
    for (int64_t flat = 0; flat < s.n_tokens * s.n_heads * half; ++flat) {
      const dm::RopePair p = dm::rope_pair_index(flat, s.n_heads, half);
      ASSERT_TRUE(p.token >= 0 && p.token < s.n_tokens && p.head >= 0 && p.head < s.n_heads && p.pair >= 0 &&
                  p.pair < half);
      ++visits[size_t((p.token * s.n_heads + p.head) * half + p.pair)];
      const int64_t row = (s.pos0 + p.token) * half;
      dm::rope_rotate_pair(actual.data() + p.token * s.row_stride + p.head * s.head_dim, cos.data() + row,
                           sin.data() + row, half, p.pair);
    }
    EXPECT_TRUE(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; })) << "each pair exactly once";
    for (size_t i = 0; i < x0.size(); ++i) ASSERT_EQ(actual[i], expected[i]) << "tokens " << s.n_tokens << " i " << i;
  }
}

// ---- Attention window --------------------------------------------------------------------------------

TEST(CudaDeviceMath, AttentionKeyRangeIsCausalAndWindowed) {
  for (int64_t pos0 = 0; pos0 < 12; ++pos0) {
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t window : {0, 1, 3, 8, 100}) {
        const dm::KeyRange r = dm::attention_key_range(pos0, t, window);
        // src/model/attention.cpp: last = pos + t; first = max(0, last - window + 1) with a window.
        const int64_t last = pos0 + t;
        const int64_t first = window > 0 ? std::max<int64_t>(0, last - window + 1) : 0;
        EXPECT_EQ(r.last, last);
        EXPECT_EQ(r.first, first) << pos0 << " " << t << " " << window;
        if (window > 0) {
          EXPECT_LE(r.last - r.first + 1, window);
        }
      }
    }
  }
}

// ---- Router top-k ------------------------------------------------------------------------------------

TEST(CudaDeviceMath, TopKMatchesCpuRouterWithTies) {
  ScalarIsa scalar;
  std::mt19937 rng(7);
  for (const int64_t n : {1, 2, 8, 60, 256}) {
    for (const int64_t k : {1, 2, 8}) {
      if (k > n) continue;
      for (int trial = 0; trial < 20; ++trial) {
        // Logits from a few levels, so equal probabilities (ties) are common.
        std::uniform_int_distribution<int> level(0, trial % 2 == 0 ? 3 : 1000);
        std::vector<float> probs(static_cast<size_t>(n));
        for (auto& p : probs) p = float(level(rng)) * 0.25f;
        ops::softmax(probs.data(), n);
        for (const bool norm : {false, true}) {
          std::vector<int32_t> ids(static_cast<size_t>(k)), expected_ids(static_cast<size_t>(k));
          std::vector<float> w(static_cast<size_t>(k)), expected_w(static_cast<size_t>(k));
          dm::top_k_select(ids.data(), w.data(), probs.data(), n, k, norm);
          ops::top_k(expected_ids.data(), expected_w.data(), probs.data(), n, k, norm);
          ASSERT_EQ(ids, expected_ids) << "n " << n << " k " << k << " trial " << trial;
          ASSERT_EQ(w, expected_w) << "n " << n << " k " << k << " trial " << trial;
        }
        // The ranks the kernel's threads compute are a permutation of 0 .. n-1.
        std::vector<int> seen(size_t(n), 0);
        for (int64_t e = 0; e < n; ++e) ++seen[size_t(dm::top_k_rank(probs.data(), n, e))];
        ASSERT_TRUE(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
      }
    }
  }
}

TEST(CudaDeviceMath, TopKAllEqualTakesLowestIndices) {
  const std::vector<float> probs(10, 0.1f);
  int32_t ids[4];
  float w[4];
  dm::top_k_select(ids, w, probs.data(), 10, 4, true);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(ids[j], j);
    EXPECT_FLOAT_EQ(w[j], 0.25f);
  }
}

// A NaN or +inf logit (or all logits -inf) makes the router's softmax all NaN. The CPU's argmax then
// takes experts 0 .. k-1; the kernel's ranks must still be a permutation, so that every slot is
// written once and every id is a valid expert (the host indexes arrays with them).
TEST(CudaDeviceMath, TopKOfNanProbabilitiesMatchesCpuAndFillsEverySlot) {
  ScalarIsa scalar;
  constexpr int64_t kN = 12, kK = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int poison = 0; poison < 3; ++poison) {
    std::vector<float> probs = test::random_floats(kN, 61);
    if (poison == 0) probs[5] = nan;
    if (poison == 1) probs[9] = inf;
    if (poison == 2) std::fill(probs.begin(), probs.end(), -inf);
    ops::softmax(probs.data(), kN);
    ASSERT_TRUE(std::all_of(probs.begin(), probs.end(), [](float p) { return std::isnan(p); })) << poison;
    std::vector<int> seen(static_cast<size_t>(kN), 0);
    for (int64_t e = 0; e < kN; ++e) ++seen[size_t(dm::top_k_rank(probs.data(), kN, e))];
    ASSERT_TRUE(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; })) << poison;
    std::vector<int32_t> ids(static_cast<size_t>(kK), -1), expected_ids(static_cast<size_t>(kK));
    std::vector<float> w(static_cast<size_t>(kK)), expected_w(static_cast<size_t>(kK));
    dm::top_k_select(ids.data(), w.data(), probs.data(), kN, kK, false);
    ops::top_k(expected_ids.data(), expected_w.data(), probs.data(), kN, kK, false);
    EXPECT_EQ(ids, expected_ids) << poison;
  }
}

// ---- MoE combine -------------------------------------------------------------------------------------

TEST(CudaDeviceMath, CombineMatchesCpuSoftGatedFallback) {
  ScalarIsa scalar;
  constexpr int64_t kEmbd = 19, kRows = 12;
  const auto clean_y = test::random_floats(kRows * kEmbd, 51);
  const auto shared = test::random_floats(kEmbd, 52);
  const std::vector<int32_t> row = {3, 0, 11, 7};
  const std::vector<float> weight = {0.4f, 0.3f, 0.2f, 0.1f};
  const float gate_logit = -0.7f;
  const std::vector<std::vector<uint8_t>> patterns = {{0, 0, 0, 0}, {0, 1, 0, 0}, {1, 0, 1, 0}, {1, 1, 1, 1}};
  for (const auto& missing : patterns) {
    // A missing expert's row is never read: poison it.
    auto y = clean_y;
    for (size_t j = 0; j < row.size(); ++j)
      if (missing[j]) y[size_t(row[j] * kEmbd)] = std::numeric_limits<float>::quiet_NaN();
    for (int mode = 0; mode < 3; ++mode) {  // no shared expert, ungated shared, gated shared
      const float* shared_row = mode == 0 ? nullptr : shared.data();
      const float* logit = mode == 2 ? &gate_logit : nullptr;
      const auto expected = test::reference_combine(y, kEmbd, row.data(), weight.data(), missing.data(),
                                                    std::ssize(row), shared_row, logit);
      const dm::CombinePlan plan =
          dm::combine_plan(weight.data(), missing.data(), int64_t(row.size()), shared_row != nullptr, logit);
      for (int64_t i = 0; i < kEmbd; ++i) {
        const float v = dm::combine_value(y.data(), kEmbd, row.data(), weight.data(), missing.data(),
                                          int64_t(row.size()), plan, shared_row, i);
        ASSERT_EQ(v, expected[size_t(i)]) << "mode " << mode << " i " << i << " missing " << int(missing[0])
                                          << int(missing[1]) << int(missing[2]) << int(missing[3]);
      }
    }
  }
}

TEST(CudaDeviceMath, CombinePlanFactors) {
  const float weight[3] = {0.5f, 0.3f, 0.2f};
  const uint8_t none[3] = {0, 0, 0}, some[3] = {0, 1, 0}, all[3] = {1, 1, 1};
  EXPECT_EQ(dm::combine_plan(weight, none, 3, false, nullptr).routed_scale, 1.0f);
  EXPECT_FLOAT_EQ(dm::combine_plan(weight, some, 3, false, nullptr).routed_scale, 1.0f / 0.7f);
  EXPECT_EQ(dm::combine_plan(weight, all, 3, false, nullptr).routed_scale, 0.0f);
  const float logit = 0.0f;
  EXPECT_FLOAT_EQ(dm::combine_plan(weight, some, 3, true, &logit).shared_coef, 0.5f + 0.3f);
  EXPECT_FLOAT_EQ(dm::combine_plan(weight, some, 3, true, nullptr).shared_coef, 1.0f + 0.3f);
  EXPECT_EQ(dm::combine_plan(weight, all, 3, true, nullptr).routed_scale, 1.0f);
}

}  // namespace
}  // namespace chronos

namespace chronos {
namespace {

// split_f32: hi is x rounded to the half type, lo the rounded remainder, so hi + lo carries about
// twice the bits of hi alone; infinities keep lo = 0 so W·hi + W·lo is not NaN.
TEST(CudaDeviceMath, SplitF32KeepsTwiceTheBitsOfOneHalf) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const bool f16 : {false, true}) {
    double worst_split = 0, worst_single = 0;
    for (int i = 0; i < 100000; ++i) {
      const float x = normal(rng);
      uint16_t hi = 0, lo = 0;
      cuda::dm::split_f32(x, f16, hi, lo);
      const float h = f16 ? f16_to_f32(hi) : bf16_to_f32(hi);
      const float l = f16 ? f16_to_f32(lo) : bf16_to_f32(lo);
      EXPECT_EQ(hi, f16 ? f32_to_f16(x) : f32_to_bf16(x));
      if (std::fabs(x) < 1e-3f) continue;  // relative error of tiny values is not the point here
      // bf16: 8 significant bits each, the f32 exponent range. f16: 11 bits each, but lo of a small
      // x falls below f16's normal range, where the step is 2^-24 absolute.
      const double ax = std::fabs(double(x));
      const double split_bound = f16 ? 0x1p-21 * ax + 0x1p-25 : 0x1p-16 * ax;
      worst_split = std::max(worst_split, std::fabs(double(h) + double(l) - double(x)) / split_bound);
      worst_single = std::max(worst_single, std::fabs(double(h) - double(x)) / ax);
    }
    EXPECT_LE(worst_single, f16 ? 0x1p-11 : 0x1p-8);
    EXPECT_LE(worst_split, 1.0) << (f16 ? "f16" : "bf16");
  }
  uint16_t hi = 0, lo = 1;
  cuda::dm::split_f32(std::numeric_limits<float>::infinity(), false, hi, lo);
  EXPECT_EQ(bf16_to_f32(hi), std::numeric_limits<float>::infinity());
  EXPECT_EQ(lo, 0);
}

}  // namespace
}  // namespace chronos
