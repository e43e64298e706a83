// The bf16-activation path for BF16 weights (ops::Bf16ActivationMode::kBf16): the scalar reference
// against a double-precision product with its error bound, the AVX512_BF16 kernels against the
// reference bit for bit, and ops::matmul's choice of path on this CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "chronos/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_util.h"

namespace chronos {
namespace {

using ops::Bf16ActivationMode;

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  kernels::activations_to_bf16_scalar(out.data(), x.data(), int64_t(x.size()));
  return out;
}

// The kernels of the AVX512_BF16 table, or null where this CPU has none.
const kernels::CpuKernels* bf16_kernels() {
  if (detect_isa() != Isa::kAvx512) return nullptr;
  const auto& table = kernels::kernels_for(Isa::kAvx512);
  return table.matmul_rows_bf16 != nullptr ? &table : nullptr;
}

std::vector<float> reference(const test::StoredWeights& w, const std::vector<uint16_t>& xb, int64_t n_tokens) {
  std::vector<float> y(size_t(n_tokens * w.rows), std::numeric_limits<float>::quiet_NaN());
  kernels::matmul_rows_bf16_scalar(y.data(), xb.data(), w.view(), n_tokens, 0, w.rows);
  return y;
}

// Each product of two bf16 values is exact in f32, so the reference is the exact product of the
// weights and the bf16-rounded activations up to f32 summation error, (n + 1) u sum |w x|
// (test_util.h); and within 2^-9 sum |w x| more of the product with the unrounded activations.
TEST(Bf16Activations, ReferenceIsTheProductWithRoundedActivations) {
  for (const int64_t cols : {1, 31, 32, 33, 100, 1000}) {
    const int64_t rows = 7, n_tokens = 3;
    const auto w = test::make_weights(DType::kBF16, rows, cols, uint32_t(cols));
    const auto x = test::random_floats(n_tokens * cols, uint32_t(cols + 1), -3.0f, 3.0f);
    const auto xb = to_bf16(x);
    std::vector<float> rounded(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) rounded[i] = bf16_to_f32(xb[i]);
    const auto y = reference(w, xb, n_tokens);
    test::expect_matches_reference(y, rounded, w.values, rows, cols, n_tokens, "bf16 reference");
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          const double p = double(w.values[size_t(r * cols + c)]) * double(x[size_t(t * cols + c)]);
          exact += p;
          magnitude += std::fabs(p);
        }
        ASSERT_NEAR(y[size_t(t * rows + r)], exact, (1.0 / 512 + double(cols + 1) * test::kF32Eps) * magnitude)
            << "cols " << cols;
      }
  }
}

TEST(Bf16Activations, RoundingIsNearestEvenAndKeepsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (goes to the even 1); 1 + 3 * 2^-8 to 1 + 2^-6.
  const std::vector<float> x = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -2.5f, inf, -inf, nan, 0x1p-120f, -0.0f};
  const auto out = to_bf16(x);
  EXPECT_EQ(bf16_to_f32(out[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(out[1]), 1.0f + 0x1p-6f);
  EXPECT_EQ(bf16_to_f32(out[2]), -2.5f);
  EXPECT_EQ(bf16_to_f32(out[3]), inf);
  EXPECT_EQ(bf16_to_f32(out[4]), -inf);
  EXPECT_TRUE(std::isnan(bf16_to_f32(out[5])));
  EXPECT_EQ(bf16_to_f32(out[6]), 0x1p-120f);
  EXPECT_TRUE(std::signbit(bf16_to_f32(out[7])));
  const auto* k = bf16_kernels();
  if (k == nullptr) GTEST_SKIP() << "this CPU has no AVX512_BF16: only the scalar rounding was checked";
  // Every tail length and random bits, NaNs and denormals included.
  std::mt19937 rng(5);
  std::vector<float> bits(1000);
  for (auto& v : bits) {
    const uint32_t u = uint32_t(rng());
    std::memcpy(&v, &u, 4);
  }
  for (const int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(1000)}) {
    std::vector<uint16_t> got(size_t(n) + 1, 0xABCD);
    std::vector<uint16_t> want(static_cast<size_t>(n));
    k->activations_to_bf16(got.data(), bits.data(), n);
    kernels::activations_to_bf16_scalar(want.data(), bits.data(), n);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << "n " << n;
    ASSERT_EQ(got[size_t(n)], 0xABCD) << "wrote past n = " << n;
  }
}

// Every row blocking (4-row blocks, single rows), token blocking (4, 3, 2, 1 and the one-token
// streams), column tail and row range gives the reference's bits.
TEST(Bf16Activations, KernelIsBitIdenticalToTheReference) {
  const auto* k = bf16_kernels();
  if (k == nullptr) GTEST_SKIP() << "this CPU has no AVX512_BF16 kernels to compare";
  for (const int64_t cols : {1, 31, 32, 33, 100, 2336}) {
    for (const int64_t rows : {1, 5, 23}) {
      for (const int64_t n_tokens : {1, 2, 3, 4, 7, 17}) {
        const auto w = test::make_weights(DType::kBF16, rows, cols, uint32_t(rows * 31 + cols));
        const auto xb = to_bf16(test::random_floats(n_tokens * cols, uint32_t(cols + n_tokens), -4.0f, 4.0f));
        const auto want = reference(w, xb, n_tokens);
        for (const int64_t split : {int64_t(0), rows / 2, rows - 1}) {
          std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
          k->matmul_rows_bf16(got.data(), xb.data(), w.view(), n_tokens, 0, split);
          k->matmul_rows_bf16(got.data(), xb.data(), w.view(), n_tokens, split, rows);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
              << "cols " << cols << " rows " << rows << " tokens " << n_tokens << " split " << split;
        }
      }
    }
  }
}

// ops::matmul takes the bf16 path exactly where the table has it, prepares the activations once
// for every thread, and the prepared-activation entry points agree with it.
TEST(Bf16Activations, MatmulChoosesThePathThisCpuHas) {
  test::IsaGuard isa_guard;
  test::Bf16ModeGuard mode(Bf16ActivationMode::kBf16);
  ThreadPool pool(2);
  const int64_t rows = 300, cols = 320, n_tokens = 6;
  const auto w = test::make_weights(DType::kBF16, rows, cols, 9);
  const auto x = test::random_floats(n_tokens * cols, 10);
  std::vector<float> y(size_t(n_tokens * rows));
  ops::matmul(y.data(), x.data(), w.view(), n_tokens, pool);
  std::vector<float> exact(y.size());
  {
    const test::Bf16ModeGuard f32(Bf16ActivationMode::kF32);
    ops::matmul(exact.data(), x.data(), w.view(), n_tokens, pool);
    EXPECT_EQ(ops::prepared_activation_bytes(w.view(), n_tokens), 0);
  }
  if (bf16_kernels() == nullptr) {
    // No AVX512_BF16: BF16 weights take the exact path in either mode.
    EXPECT_EQ(0, std::memcmp(y.data(), exact.data(), y.size() * 4));
    EXPECT_EQ(ops::prepared_activation_bytes(w.view(), n_tokens), 0);
    GTEST_SKIP() << "this CPU has no AVX512_BF16: checked only that BF16 weights keep the f32 path";
  }
  const auto xb = to_bf16(x);
  const auto want = reference(w, xb, n_tokens);
  ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4));
  EXPECT_NE(0, std::memcmp(y.data(), exact.data(), y.size() * 4));  // the rounding is visible
  // The MoE block's way in: activations prepared once, then row ranges.
  ASSERT_EQ(ops::prepared_activation_bytes(w.view(), n_tokens), n_tokens * cols * 2);
  std::vector<uint8_t> prepared(size_t(ops::prepared_activation_bytes(w.view(), n_tokens)));
  ops::prepare_activations(prepared.data(), x.data(), w.view(), n_tokens);
  ASSERT_EQ(0, std::memcmp(prepared.data(), xb.data(), xb.size() * 2));
  std::vector<float> rows_out(y.size());
  ops::matmul_rows_prepared(rows_out.data(), x.data(), prepared.data(), w.view(), n_tokens, 0, 100);
  ops::matmul_rows(rows_out.data(), x.data(), w.view(), n_tokens, 100, rows);
  ASSERT_EQ(0, std::memcmp(rows_out.data(), want.data(), want.size() * 4));
  // A BF16 and an F32 weight of the same width prepare different activations.
  const auto w32 = test::make_weights(DType::kF32, rows, cols, 9);
  EXPECT_TRUE(ops::same_prepared_activations(w.view(), w.view()));
  EXPECT_FALSE(ops::same_prepared_activations(w.view(), w32.view()));
  // A lower ISA has no bf16 kernels: the exact path again.
  set_isa(Isa::kAvx2);
  std::vector<float> avx2(y.size());
  ops::matmul(avx2.data(), x.data(), w.view(), n_tokens, pool);
  set_isa(detect_isa());
  std::vector<float> avx2_exact(y.size());
  {
    const test::Bf16ModeGuard f32(Bf16ActivationMode::kF32);
    set_isa(Isa::kAvx2);
    ops::matmul(avx2_exact.data(), x.data(), w.view(), n_tokens, pool);
  }
  EXPECT_EQ(0, std::memcmp(avx2.data(), avx2_exact.data(), y.size() * 4));
}

}  // namespace
}  // namespace chronos
