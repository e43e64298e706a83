// ops::matmul / matmul_rows / weight_row_to_f32 against a double-precision reference, for every
// ISA and weight dtype, and the thread-count and token-count invariance of the results.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "chronos/error.h"
#include "chronos/thread_pool.h"
#include "test_util.h"

namespace chronos {
namespace {

using test::available_isas;
using test::IsaGuard;
using test::make_weights;

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The exact paths (BF16 weights with f32 activations; the bf16-activation path is
// test_matmul_bf16.cpp's).
TEST(Matmul, MatchesReferenceForEveryIsaDtypeAndShape) {
  IsaGuard guard;
  const test::Bf16ModeGuard exact(ops::Bf16ActivationMode::kF32);
  ThreadPool pool(1);
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (DType dtype : kDTypes) {
      for (int64_t rows : {1, 3, 17, 300}) {
        for (int64_t cols : {1, 5, 16, 33, 100, 257}) {
          for (int64_t n_tokens : {1, 2, 5, 9}) {
            const auto w = make_weights(dtype, rows, cols, uint32_t(rows * 7 + cols));
            const auto x = test::random_floats(n_tokens * cols, uint32_t(cols + n_tokens));
            std::vector<float> y(size_t(n_tokens * rows), std::numeric_limits<float>::quiet_NaN());
            ops::matmul(y.data(), x.data(), w.view(), n_tokens, pool);
            const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(dtype));
            test::expect_matches_reference(y, x, w.values, w.rows, w.cols, n_tokens, what);
          }
        }
      }
    }
  }
}

// Each output row is computed by one thread with a fixed reduction order, so the thread count
// cannot change a single bit; and a token's result does not depend on the other tokens. Both
// BF16 activation modes.
TEST(Matmul, BitIdenticalAcrossThreadCountsAndTokenCounts) {
  IsaGuard guard;
  test::Bf16ModeGuard mode_guard(ops::bf16_activation_mode());
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (const auto mode : {ops::Bf16ActivationMode::kF32, ops::Bf16ActivationMode::kBf16})
      for (DType dtype : kDTypes) {
        ops::set_bf16_activation_mode(mode);
        for (int64_t n_tokens : {1, 5, 9}) {
          const int64_t rows = 1000, cols = 301;  // large enough to be split across threads
          const auto w = make_weights(dtype, rows, cols, 42);
          const auto x = test::random_floats(n_tokens * cols, 43);
          std::vector<float> y1(size_t(n_tokens * rows)), y2(y1.size()), y3(y1.size());
          ops::matmul(y1.data(), x.data(), w.view(), n_tokens, pool1);
          ops::matmul(y2.data(), x.data(), w.view(), n_tokens, pool2);
          ops::matmul(y3.data(), x.data(), w.view(), n_tokens, pool3);
          ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << isa_name(isa);
          ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << isa_name(isa);
          for (int64_t t = 0; t < n_tokens; ++t) {
            std::vector<float> single(static_cast<size_t>(rows));
            ops::matmul(single.data(), x.data() + t * cols, w.view(), 1, pool2);
            ASSERT_EQ(0, std::memcmp(single.data(), y1.data() + t * rows, size_t(rows) * 4))
                << isa_name(isa) << " token " << t;
          }
        }
      }
  }
}

TEST(Matmul, RowsWritesOnlyItsRange) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (DType dtype : kDTypes) {
      const int64_t rows = 37, cols = 45, n_tokens = 3, begin = 5, end = 22;
      const auto w = make_weights(dtype, rows, cols, 7);
      const auto x = test::random_floats(n_tokens * cols, 8);
      std::vector<float> full(size_t(n_tokens * rows)), part(full.size(), -123.0f);
      ThreadPool pool(1);
      ops::matmul(full.data(), x.data(), w.view(), n_tokens, pool);
      ops::matmul_rows(part.data(), x.data(), w.view(), n_tokens, begin, end);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const float expected = r >= begin && r < end ? full[size_t(t * rows + r)] : -123.0f;
          ASSERT_EQ(part[size_t(t * rows + r)], expected) << isa_name(isa) << " t " << t << " r " << r;
        }
    }
  }
}

TEST(Matmul, ZeroColumnsGiveZeros) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : available_isas()) {
    set_isa(isa);
    const float dummy = 0.0f;
    const WeightView w{&dummy, DType::kBF16, 4, 0};
    std::vector<float> y(8, 1.0f);
    ops::matmul(y.data(), &dummy, w, 2, pool);
    for (float v : y) EXPECT_EQ(v, 0.0f) << isa_name(isa);
  }
}

TEST(Matmul, RejectsUnsupportedDtype) {
  ThreadPool pool(1);
  const int8_t data[4] = {};
  float x[2] = {}, y[2] = {};
  const WeightView w{data, DType::kI8, 2, 2};
  EXPECT_THROW(ops::matmul(y, x, w, 1, pool), Error);
  EXPECT_THROW(ops::weight_row_to_f32(y, w, 0), Error);
}

TEST(WeightRowToF32, ReturnsStoredValuesForEveryIsa) {
  IsaGuard guard;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (DType dtype : kDTypes) {
      for (int64_t cols : {1, 7, 16, 17, 64, 129}) {
        const auto w = make_weights(dtype, 3, cols, uint32_t(cols));
        std::vector<float> out(size_t(cols) + 1, -7.0f);
        ops::weight_row_to_f32(out.data(), w.view(), 2);
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[size_t(c)], w.values[size_t(2 * cols + c)]);
        EXPECT_EQ(out[size_t(cols)], -7.0f) << "wrote past the row";
        EXPECT_THROW(ops::weight_row_to_f32(out.data(), w.view(), 3), Error);
      }
    }
  }
}

TEST(Dispatch, SetIsaClampsToDetected) {
  IsaGuard guard;
  set_isa(Isa::kAvx512);
  EXPECT_LE(int(active_isa()), int(detect_isa()));
  set_isa(Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
}

}  // namespace
}  // namespace chronos
