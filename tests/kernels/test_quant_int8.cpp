// The 8-bit-activation path for block-type weights (ops::BlockActivationMode::kInt8): the activation
// quantizer of every ISA against the scalar one, byte for byte; every ISA's integer kernels against
// the scalar integer reference, bit for bit; the product against the exact product of the
// dequantized weights within the activations' rounding bound; thread-count, batch and row-range
// invariance; the f32 mode left as it was.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "chronos/quant.h"
#include "chronos/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_util.h"

namespace chronos {
namespace {

using ops::BlockActivationMode;
using test::available_isas;
using test::IsaGuard;

const DType kBlockTypes[] = {DType::kQ8_0,   DType::kQ4_0,    DType::kQ5_0,  DType::kQ2_K,    DType::kQ3_K,
                             DType::kQ4_K,   DType::kQ6_K,    DType::kQ5_K,  DType::kQ4_1,    DType::kQ5_1,
                             DType::kIQ4_NL, DType::kIQ4_XS,  DType::kMXFP4, DType::kIQ2_XXS, DType::kIQ2_XS,
                             DType::kIQ2_S,  DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ1_S,   DType::kIQ1_M};

// Sets a block-activation mode for one test and restores the previous one.

// Activations with the awkward blocks: one all zero, one with a single large value, one tiny.
std::vector<float> make_activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
  auto x = test::random_floats(n_tokens * cols, seed, -2.0f, 2.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = x.data() + t * cols;
    std::fill(row, row + 32, 0.0f);
    if (cols >= 96) {
      row[40] = 300.0f;
      for (int64_t c = 64; c < 96; ++c) row[c] *= 1e-30f;
    }
  }
  return x;
}

bool is_k_type(DType dtype) { return dtype_block_elements(dtype) == 256; }

TEST(Int8Activations, EveryIsaWritesTheScalarQuantizersBytes) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K}) {
    const int64_t cols = 1024, n_tokens = 3, row_bytes = kernels::activation_row_bytes(dtype, cols);
    const auto x = make_activations(n_tokens, cols, 5);
    std::vector<uint8_t> reference(size_t(n_tokens * row_bytes));
    kernels::kernels_for(Isa::kScalar).quantize_activations(reference.data(), x.data(), dtype, n_tokens, cols);
    for (Isa isa : available_isas()) {
      std::vector<uint8_t> out(reference.size(), 0xAB);
      kernels::kernels_for(isa).quantize_activations(out.data(), x.data(), dtype, n_tokens, cols);
      EXPECT_EQ(out, reference) << isa_name(isa) << " " << dtype_name(dtype);
    }
    // The format's promises: |x - d q| <= d / 2, |q| <= 127, bsums the sums of 16.
    const int block = is_k_type(dtype) ? 256 : 32;
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t b = 0; b < cols / block; ++b) {
        float d;
        const int8_t* q;
        const int16_t* bsums = nullptr;
        if (is_k_type(dtype)) {
          const auto& a = reinterpret_cast<const kernels::ActBlock256*>(reference.data() + t * row_bytes)[b];
          d = a.d, q = a.qs, bsums = a.bsums;
        } else {
          const auto& a = reinterpret_cast<const kernels::ActBlock32*>(reference.data() + t * row_bytes)[b];
          d = a.d, q = a.qs;
        }
        for (int i = 0; i < block; ++i) {
          const float v = x[size_t(t * cols + b * block + i)];
          ASSERT_LE(std::abs(int(q[i])), 127);
          ASSERT_LE(std::fabs(double(v) - double(d) * q[i]), 0.5000001 * double(d)) << "token " << t << " block " << b;
        }
        for (int g = 0; bsums != nullptr && g < 16; ++g) {
          int sum = 0;
          for (int i = 0; i < 16; ++i) sum += q[g * 16 + i];
          ASSERT_EQ(bsums[g], sum);
        }
      }
  }
}

// y[t, r] for every (t, r) from ops::matmul with the given ISA and mode.
std::vector<float> product(const test::QuantWeights& w, const std::vector<float>& x, int64_t n_tokens, Isa isa,
                           BlockActivationMode mode, ThreadPool& pool) {
  set_isa(isa);
  test::BlockModeGuard guard(mode);
  std::vector<float> y(size_t(n_tokens * w.rows), std::numeric_limits<float>::quiet_NaN());
  ops::matmul(y.data(), x.data(), w.view(), n_tokens, pool);
  return y;
}

void expect_bits_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << " element " << i;
}

TEST(Int8Matmul, EveryIsaIsBitIdenticalToTheScalarReferenceAndWithinTheRoundingBound) {
  IsaGuard guard;
  ThreadPool pool(1);
  for (DType dtype : kBlockTypes) {
    double error2 = 0.0, energy = 0.0;
    for (int64_t cols : {256, 768}) {
      for (int64_t rows : {1, 7, 40}) {
        const auto w = test::make_quant_weights(dtype, rows, cols, uint32_t(rows * 31 + cols));
        for (int64_t n_tokens : {1, 3, 8, 17, 40}) {
          const auto x = make_activations(n_tokens, cols, uint32_t(cols + n_tokens));
          const auto reference = product(w, x, n_tokens, Isa::kScalar, BlockActivationMode::kInt8, pool);
          const std::string what = std::string(dtype_name(dtype)) + " rows " + std::to_string(rows) + " cols " +
                                   std::to_string(cols) + " tokens " + std::to_string(n_tokens);
          test::expect_within_activation_rounding(reference, x, w, n_tokens, what, &error2, &energy);
          for (Isa isa : available_isas())
            expect_bits_equal(product(w, x, n_tokens, isa, BlockActivationMode::kInt8, pool), reference,
                              std::string(isa_name(isa)) + " " + what);
        }
      }
    }
    EXPECT_GT(error2, 0.0) << dtype_name(dtype) << ": exact, so the f32 path ran";
  }
}

// Relative RMS error of y = W x on normal weights and activations (512 rows of 1024), against the
// exact product of the same dequantized weights: 8-bit activations cost about 0.4-0.6% (bench
// BM_QuantDotError measures it per type); the bound leaves room for the weights' spread.
TEST(Int8Matmul, RelativeErrorOnNormalData) {
  IsaGuard guard;
  ThreadPool pool(1);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 512, cols = 1024;
  std::vector<float> source(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols));
  for (auto& v : source) v = normal(rng);
  for (auto& v : x) v = normal(rng);
  for (DType dtype : kBlockTypes) {
    // The types Chronos does not quantize to: random valid blocks (test_util.h).
    test::QuantWeights w = test::make_quant_weights(dtype, rows, cols, 6);
    if (find_block_type(dtype)->quantizer) {
      quantize_rows(dtype, source.data(), w.bytes.data(), rows, cols);
      for (int64_t r = 0; r < rows; ++r)
        dequantize_row(dtype, w.bytes.data() + r * dtype_row_bytes(dtype, cols), w.values.data() + r * cols, cols);
    }
    const auto y = product(w, x, 1, detect_isa(), BlockActivationMode::kInt8, pool);
    double error2 = 0.0, energy = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0.0;
      for (int64_t c = 0; c < cols; ++c) exact += double(w.values[size_t(r * cols + c)]) * double(x[size_t(c)]);
      error2 += (y[size_t(r)] - exact) * (y[size_t(r)] - exact);
      energy += exact * exact;
    }
    const double relative = std::sqrt(error2 / energy);
    EXPECT_LT(relative, 1e-2) << dtype_name(dtype);
    EXPECT_GT(relative, 1e-4) << dtype_name(dtype);
  }
}

TEST(Int8Matmul, ShortRowsOf32BlockTypes) {
  IsaGuard guard;
  ThreadPool pool(1);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0}) {
    for (int64_t cols : {32, 96, 128, 160}) {
      const auto w = test::make_quant_weights(dtype, 19, cols, uint32_t(cols));
      for (int64_t n_tokens : {1, 3, 17}) {
        const auto x = make_activations(n_tokens, cols, uint32_t(cols * 3 + n_tokens));
        const auto reference = product(w, x, n_tokens, Isa::kScalar, BlockActivationMode::kInt8, pool);
        double error2 = 0.0, energy = 0.0;
        const std::string what = std::string(dtype_name(dtype)) + " cols " + std::to_string(cols);
        test::expect_within_activation_rounding(reference, x, w, n_tokens, what, &error2, &energy);
        for (Isa isa : available_isas())
          expect_bits_equal(product(w, x, n_tokens, isa, BlockActivationMode::kInt8, pool), reference,
                            std::string(isa_name(isa)) + " " + what);
      }
    }
  }
}

// A row's result depends neither on the thread split, nor on the other tokens of the batch, nor on
// the row range a matmul_rows call covers.
TEST(Int8Matmul, BitIdenticalAcrossThreadsBatchesAndRowRanges) {
  IsaGuard guard;
  test::BlockModeGuard mode(BlockActivationMode::kInt8);
  ThreadPool pool1(1), pool2(2), pool3(3);
  const int64_t rows = 300, cols = 512, n_tokens = 17;
  for (DType dtype : kBlockTypes) {
    const auto w = test::make_quant_weights(dtype, rows, cols, 21);
    const auto x = make_activations(n_tokens, cols, 22);
    for (Isa isa : available_isas()) {
      set_isa(isa);
      const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(dtype));
      std::vector<float> y1(size_t(n_tokens * rows)), y2(y1.size()), y3(y1.size());
      ops::matmul(y1.data(), x.data(), w.view(), n_tokens, pool1);
      ops::matmul(y2.data(), x.data(), w.view(), n_tokens, pool2);
      ops::matmul(y3.data(), x.data(), w.view(), n_tokens, pool3);
      expect_bits_equal(y2, y1, what + " 2 threads");
      expect_bits_equal(y3, y1, what + " 3 threads");
      for (int64_t t : {0, 8, 16}) {  // token t alone (the matvec path) == token t in the batch
        std::vector<float> single(static_cast<size_t>(rows));
        ops::matmul(single.data(), x.data() + t * cols, w.view(), 1, pool2);
        expect_bits_equal(single, std::vector<float>(y1.begin() + t * rows, y1.begin() + (t + 1) * rows),
                          what + " token " + std::to_string(t));
      }
      for (int64_t n : {int64_t(1), n_tokens})
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {3, 17}, {5, 6}, {13, 45}, {1, 299}}) {
          std::vector<float> y(size_t(n * rows), -7.0f);
          ops::matmul_rows(y.data(), x.data(), w.view(), n, begin, end);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = size_t(t * rows + r);
              if (r >= begin && r < end)
                ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(y1[i])) << what << " row " << r;
              else
                ASSERT_EQ(y[i], -7.0f) << what << " row " << r << " written";
            }
        }
    }
  }
}

// A batch long enough to span several chunks of token panels (the VNNI outer-product path
// interleaves up to 4 panels of 16 at a time) and a short last panel, and one whose last token is
// left to single-token steps inside that path, over rows that are not a whole number of decoded
// tiles and, for the 32-weight types, an odd number of blocks (the panels transpose two at a
// time): every ISA gives the scalar reference's bits, and so does each token alone.
TEST(Int8Matmul, LongBatchesOfEveryBlockTypeAreBitIdentical) {
  IsaGuard guard;
  ThreadPool pool(2);
  const int64_t rows = 70;
  for (DType dtype : kBlockTypes) {
    const int64_t cols = dtype_block_elements(dtype) == 256 ? 2304 : 2336;
    const auto w = test::make_quant_weights(dtype, rows, cols, 41);
    for (int64_t n_tokens : {100, 33}) {
      const auto x = make_activations(n_tokens, cols, 42);
      const auto reference = product(w, x, n_tokens, Isa::kScalar, BlockActivationMode::kInt8, pool);
      for (Isa isa : available_isas()) {
        const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(dtype)) + " " +
                                 std::to_string(n_tokens) + " tokens";
        expect_bits_equal(product(w, x, n_tokens, isa, BlockActivationMode::kInt8, pool), reference, what);
        for (int64_t t : {int64_t(0), int64_t(63), n_tokens - 1}) {
          if (t >= n_tokens) continue;
          const std::vector<float> one(x.begin() + t * cols, x.begin() + (t + 1) * cols);
          expect_bits_equal(product(w, one, 1, isa, BlockActivationMode::kInt8, pool),
                            std::vector<float>(reference.begin() + t * rows, reference.begin() + (t + 1) * rows),
                            what + ", token " + std::to_string(t) + " alone");
        }
      }
    }
  }
}

// Activations prepared once (the MoE block's path) give matmul_rows' bits, in both modes, for
// every weight that shares the prepared format; F16 weights and the f32 mode prepare nothing.
TEST(Int8Matmul, PreparedActivationsGiveMatmulRowsBits) {
  IsaGuard guard;
  const int64_t rows = 70, cols = 512, n_tokens = 5;
  const auto x = make_activations(n_tokens, cols, 31);
  std::vector<test::QuantWeights> weights, others;  // made once: quantizing dominated the test's time
  for (DType dtype : kBlockTypes) {
    weights.push_back(test::make_quant_weights(dtype, rows, cols, 32));
    others.push_back(test::make_quant_weights(dtype, rows, cols, 33));
  }
  for (BlockActivationMode m : {BlockActivationMode::kInt8, BlockActivationMode::kF32}) {
    test::BlockModeGuard mode(m);
    for (const test::QuantWeights& w : weights) {
      const DType dtype = w.dtype;
      const int64_t bytes = ops::prepared_activation_bytes(w.view(), n_tokens);
      if (m == BlockActivationMode::kF32) {
        EXPECT_EQ(bytes, 0) << dtype_name(dtype);
      } else {
        EXPECT_EQ(bytes, (n_tokens * kernels::activation_row_bytes(dtype, cols) + 7) / 8 * 8) << dtype_name(dtype);
      }
      std::vector<uint64_t> xq(size_t(bytes / 8));
      for (Isa isa : available_isas()) {
        set_isa(isa);
        ops::prepare_activations(xq.data(), x.data(), w.view(), n_tokens);
        // A same-format weight of another type reads the same blocks (Q4_K prepared, Q6_K used).
        for (const test::QuantWeights& v : others) {
          const DType other = v.dtype;
          const bool same = ops::same_prepared_activations(v.view(), w.view());
          EXPECT_EQ(same, m == BlockActivationMode::kF32 || dtype_block_elements(other) == dtype_block_elements(dtype))
              << dtype_name(other) << " with " << dtype_name(dtype);
          if (!same) continue;
          const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(other)) + " on " +
                                   std::string(dtype_name(dtype)) + "'s activations, " +
                                   ops::block_activation_mode_name(m);
          for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, rows}, {3, 17}, {69, 70}}) {
            std::vector<float> y(size_t(n_tokens * rows), -7.0f), ref(y.size(), -7.0f);
            ops::matmul_rows(ref.data(), x.data(), v.view(), n_tokens, begin, end);
            ops::matmul_rows_prepared(y.data(), x.data(), xq.data(), v.view(), n_tokens, begin, end);
            expect_bits_equal(y, ref, what);
          }
        }
      }
    }
  }
  const auto f16 = test::make_weights(DType::kF16, rows, cols, 34);
  const auto q8 = test::make_quant_weights(DType::kQ8_0, rows, cols, 35);
  test::BlockModeGuard mode(BlockActivationMode::kInt8);
  EXPECT_EQ(ops::prepared_activation_bytes(f16.view(), n_tokens), 0);
  EXPECT_FALSE(ops::same_prepared_activations(f16.view(), q8.view()));
  std::vector<float> y(size_t(n_tokens * rows)), ref(y.size());
  ops::matmul_rows(ref.data(), x.data(), f16.view(), n_tokens, 0, rows);
  ops::matmul_rows_prepared(y.data(), x.data(), nullptr, f16.view(), n_tokens, 0, rows);
  expect_bits_equal(y, ref, "F16");
}

TEST(Int8Matmul, NonFiniteActivationsGiveNaN) {
  IsaGuard guard;
  test::BlockModeGuard mode(BlockActivationMode::kInt8);
  ThreadPool pool(1);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K}) {
    const auto w = test::make_quant_weights(dtype, 9, 512, 3);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto x = make_activations(2, 512, 4);
      x[512 + 300] = bad;  // token 1 only
      for (Isa isa : available_isas()) {
        set_isa(isa);
        std::vector<float> y(18);
        ops::matmul(y.data(), x.data(), w.view(), 2, pool);
        for (int64_t r = 0; r < 9; ++r) {
          EXPECT_TRUE(std::isfinite(y[size_t(r)])) << isa_name(isa) << " " << dtype_name(dtype);
          EXPECT_TRUE(std::isnan(y[size_t(9 + r)])) << isa_name(isa) << " " << dtype_name(dtype);
        }
      }
    }
  }
}

// The f32 mode is the kernels' exact path, untouched; F16 weights ignore the mode.
TEST(Int8Matmul, F32ModeIsTheExactPathAndOtherDtypesIgnoreTheMode) {
  IsaGuard guard;
  ThreadPool pool(1);
  const auto w = test::make_quant_weights(DType::kQ4_K, 20, 512, 8);
  const auto x = make_activations(3, 512, 9);
  for (Isa isa : available_isas()) {
    std::vector<float> direct(60);
    kernels::kernels_for(isa).matmul_rows(direct.data(), x.data(), w.view(), 3, 0, 20);
    expect_bits_equal(product(w, x, 3, isa, BlockActivationMode::kF32, pool), direct, isa_name(isa));
  }
  const auto f16 = test::make_weights(DType::kF16, 20, 512, 10);
  std::vector<float> a(60), b(60);
  {
    test::BlockModeGuard mode(BlockActivationMode::kF32);
    ops::matmul(a.data(), x.data(), f16.view(), 3, pool);
  }
  {
    test::BlockModeGuard mode(BlockActivationMode::kInt8);
    ops::matmul(b.data(), x.data(), f16.view(), 3, pool);
  }
  expect_bits_equal(a, b, "F16");
  EXPECT_STREQ(ops::block_activation_mode_name(BlockActivationMode::kF32), "f32");
  EXPECT_STREQ(ops::block_activation_mode_name(BlockActivationMode::kInt8), "int8");
}

}  // namespace
}  // namespace chronos
