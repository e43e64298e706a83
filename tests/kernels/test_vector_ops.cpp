// rmsnorm, softmax, silu_mul, dot and axpy for every ISA against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

namespace chronos {
namespace {

using test::available_isas;
using test::IsaGuard;
using test::kF32Eps;

const int64_t kSizes[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 4099};

// The exp used by the SIMD softmax/silu is a polynomial within a few ulp of the true value;
// 8 ulp covers it plus the surrounding add/divide/multiply roundings.
constexpr double kExpUlps = 8.0;

TEST(VectorOps, DotMatchesReference) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (int64_t n : kSizes) {
      const auto a = test::random_floats(n, 1), b = test::random_floats(n, 2);
      double exact = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(a[size_t(i)]) * b[size_t(i)];
        magnitude += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
      }
      // Any summation order of n products: within (n + 1) u sum|a b| (Higham 3.1).
      EXPECT_NEAR(ops::dot(a.data(), b.data(), n), exact, double(n + 1) * kF32Eps * magnitude)
          << isa_name(isa) << " n " << n;
    }
    EXPECT_EQ(ops::dot(nullptr, nullptr, 0), 0.0f);
  }
}

TEST(VectorOps, AxpyMatchesReference) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (int64_t n : kSizes) {
      const auto x = test::random_floats(n, 3);
      auto y = test::random_floats(n + 1, 4);  // one extra element that must stay untouched
      const auto y0 = y;
      const float alpha = -1.75f;
      ops::axpy(y.data(), alpha, x.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double exact = double(y0[size_t(i)]) + double(alpha) * x[size_t(i)];
        // One fused or two separate roundings.
        const double bound = 2 * kF32Eps * (std::fabs(double(y0[size_t(i)])) + std::fabs(alpha * x[size_t(i)]));
        ASSERT_NEAR(y[size_t(i)], exact, bound) << isa_name(isa) << " n " << n << " i " << i;
      }
      EXPECT_EQ(y[size_t(n)], y0[size_t(n)]) << "wrote past the end";
    }
  }
}

TEST(VectorOps, RmsnormMatchesReferenceInPlaceToo) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (int64_t n : kSizes) {
      const auto x = test::random_floats(n, 5, -3.0f, 3.0f), weight = test::random_floats(n, 6, 0.5f, 1.5f);
      const float eps = 1e-6f;
      double sum_sq = 0.0;
      for (float v : x) sum_sq += double(v) * v;
      const double scale = 1.0 / std::sqrt(sum_sq / double(n) + eps);
      std::vector<float> y(static_cast<size_t>(n)), in_place = x;
      ops::rmsnorm(y.data(), x.data(), weight.data(), n, eps);
      ops::rmsnorm(in_place.data(), in_place.data(), weight.data(), n, eps);
      for (int64_t i = 0; i < n; ++i) {
        const double exact = double(x[size_t(i)]) * scale * weight[size_t(i)];
        // Sum of squares: (n + 1) u relative (all terms positive); halved by the sqrt; then
        // divide, sqrt, two multiplies: a few u more.
        const double bound = (double(n) / 2 + 8) * kF32Eps * std::fabs(exact) + 1e-30;
        ASSERT_NEAR(y[size_t(i)], exact, bound) << isa_name(isa) << " n " << n << " i " << i;
        ASSERT_EQ(y[size_t(i)], in_place[size_t(i)]);
      }
    }
  }
}

TEST(VectorOps, SoftmaxMatchesReference) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (int64_t n : kSizes) {
      auto x = test::random_floats(n + 1, 7, -30.0f, 30.0f);
      const auto x0 = x;
      ops::softmax(x.data(), n);
      double max_value = -INFINITY, sum = 0.0;
      for (int64_t i = 0; i < n; ++i) max_value = std::max(max_value, double(x0[size_t(i)]));
      for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x0[size_t(i)]) - max_value);
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double exact = std::exp(double(x0[size_t(i)]) - max_value) / sum;
        // Rounding x - max in f32 moves the exponent by up to u |x - max|, i.e. that much
        // relative error in exp; exp itself within kExpUlps; the sum of n positive terms within
        // (n + 1) u relative.
        const double shifted = std::fabs(double(x0[size_t(i)]) - max_value);
        const double bound = (double(n) + 1 + kExpUlps + shifted) * kF32Eps * exact + 1e-37;
        ASSERT_NEAR(x[size_t(i)], exact, bound) << isa_name(isa) << " n " << n << " i " << i;
        total += x[size_t(i)];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
      EXPECT_EQ(x[size_t(n)], x0[size_t(n)]) << "wrote past the end";
    }
  }
}

TEST(VectorOps, SoftmaxHandlesMaskedAndSingleEntries) {
  IsaGuard guard;
  const float inf = std::numeric_limits<float>::infinity();
  for (Isa isa : available_isas()) {
    set_isa(isa);
    std::vector<float> x(19, -inf);
    x[3] = 2.0f;
    x[17] = 2.0f;
    ops::softmax(x.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], i == 3 || i == 17 ? 0.5f : 0.0f) << isa_name(isa) << " " << i;
    float one = -1000.0f;
    ops::softmax(&one, 1);
    EXPECT_EQ(one, 1.0f);
  }
}

TEST(VectorOps, SiluMulMatchesReferenceOverTheWholeRange) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (int64_t n : kSizes) {
      const auto gate = test::random_floats(n, 8, -100.0f, 100.0f), up = test::random_floats(n, 9, -2.0f, 2.0f);
      std::vector<float> out(size_t(n) + 1, 5.0f), in_place = gate;
      ops::silu_mul(out.data(), gate.data(), up.data(), n);
      ops::silu_mul(in_place.data(), in_place.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double g = gate[size_t(i)];
        const double exact = g / (1.0 + std::exp(-g)) * up[size_t(i)];
        // Below g = -88.72, exp(-g) overflows f32 and the result is 0 where the true value is
        // below 89 e^-88.72 |up| < 1e-36: hence the absolute term.
        const double bound = kExpUlps * kF32Eps * std::fabs(exact) + 1e-36;
        ASSERT_NEAR(out[size_t(i)], exact, bound) << isa_name(isa) << " g " << g;
        ASSERT_EQ(out[size_t(i)], in_place[size_t(i)]);
      }
      EXPECT_EQ(out[size_t(n)], 5.0f) << "wrote past the end";
    }
    // Saturation: silu(-inf-ish) -> -0 side, silu(large) -> identity.
    const float gate[2] = {-1e30f, 1e30f}, up[2] = {1.0f, 1.0f};
    float out[2];
    ops::silu_mul(out, gate, up, 2);
    EXPECT_NEAR(out[0], 0.0f, 1e-30f) << isa_name(isa);
    EXPECT_EQ(out[1], 1e30f) << isa_name(isa);
  }
}

}  // namespace
}  // namespace chronos
