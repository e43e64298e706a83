// Block-quantized weight types: the DType rules (sizes, names, the short-row fallback), the
// quantizer's error bounds and determinism, and ops::matmul over block-type weights (f32-activation
// mode) for every ISA against the f32 product of the dequantized weights, with its thread- and
// token-count invariance.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "chronos/error.h"
#include "chronos/quant.h"
#include "chronos/thread_pool.h"
#include "test_util.h"

namespace chronos {
namespace {

using test::available_isas;
using test::IsaGuard;

// The tests below hold the exact f32-activation path (test_quant_int8.cpp covers the int8 one).

const DType kBlockTypes[] = {DType::kQ8_0,   DType::kQ4_0,   DType::kQ5_0, DType::kQ2_K, DType::kQ3_K,
                             DType::kQ4_K,   DType::kQ6_K,   DType::kQ5_K, DType::kQ4_1, DType::kQ5_1,
                             DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

TEST(BlockDType, SizesAndNamesAreGguf) {
  struct Expected {
    DType dtype;
    const char* name;
    int64_t elements, bytes;
  };
  const Expected expected[] = {{DType::kQ8_0, "Q8_0", 32, 34},
                               {DType::kQ4_0, "Q4_0", 32, 18},
                               {DType::kQ5_0, "Q5_0", 32, 22},
                               {DType::kQ2_K, "Q2_K", 256, 84},
                               {DType::kQ3_K, "Q3_K", 256, 110},
                               {DType::kQ4_K, "Q4_K", 256, 144},
                               {DType::kQ6_K, "Q6_K", 256, 210},
                               {DType::kQ5_K, "Q5_K", 256, 176},
                               {DType::kQ4_1, "Q4_1", 32, 20},
                               {DType::kQ5_1, "Q5_1", 32, 24},
                               {DType::kIQ4_NL, "IQ4_NL", 32, 18},
                               {DType::kIQ4_XS, "IQ4_XS", 256, 136},
                               {DType::kMXFP4, "MXFP4", 32, 17},
                               // The read-only IQ grid types (gguf's GGML_QUANT_SIZES).
                               {DType::kIQ2_XXS, "IQ2_XXS", 256, 66},
                               {DType::kIQ2_XS, "IQ2_XS", 256, 74},
                               {DType::kIQ2_S, "IQ2_S", 256, 82},
                               {DType::kIQ3_XXS, "IQ3_XXS", 256, 98},
                               {DType::kIQ3_S, "IQ3_S", 256, 110},
                               {DType::kIQ1_S, "IQ1_S", 256, 50},
                               {DType::kIQ1_M, "IQ1_M", 256, 56}};
  for (const auto& e : expected) {
    EXPECT_TRUE(dtype_is_block(e.dtype)) << e.name;
    EXPECT_EQ(dtype_name(e.dtype), e.name);
    EXPECT_EQ(dtype_block_elements(e.dtype), e.elements) << e.name;
    EXPECT_EQ(dtype_block_bytes(e.dtype), e.bytes) << e.name;
    EXPECT_EQ(dtype_row_bytes(e.dtype, 4 * e.elements), 4 * e.bytes) << e.name;
    EXPECT_EQ(block_dtype_from_name(e.name), e.dtype);
    std::string lower = e.name;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(block_dtype_from_name(lower), e.dtype);
    // A safetensors header never names a block type.
    EXPECT_FALSE(dtype_from_name(e.name).has_value()) << e.name;
  }
  for (DType plain : {DType::kF32, DType::kF16, DType::kBF16, DType::kU8}) {
    EXPECT_FALSE(dtype_is_block(plain));
    EXPECT_EQ(dtype_block_elements(plain), 1);
    EXPECT_EQ(dtype_row_bytes(plain, 10), 10 * dtype_size(plain));
  }
  EXPECT_FALSE(block_dtype_from_name("BF16").has_value());
  EXPECT_FALSE(block_dtype_from_name("q4_k_m").has_value());  // a recipe, not a block type
  EXPECT_EQ(dtype_from_name("BF16"), DType::kBF16);
}

TEST(BlockDType, ShortRowsFallBackToA32BlockType) {
  EXPECT_EQ(block_dtype_for_row(DType::kQ4_K, 256), DType::kQ4_K);
  EXPECT_EQ(block_dtype_for_row(DType::kQ4_K, 768), DType::kQ4_K);
  EXPECT_EQ(block_dtype_for_row(DType::kQ4_K, 128), DType::kQ5_0);  // the demo model's down_proj rows
  EXPECT_EQ(block_dtype_for_row(DType::kQ6_K, 128), DType::kQ8_0);
  EXPECT_EQ(block_dtype_for_row(DType::kQ5_K, 128), DType::kQ5_0);
  EXPECT_EQ(block_dtype_for_row(DType::kIQ4_XS, 128), DType::kIQ4_NL);  // llama.cpp's fallback for IQ4_XS
  EXPECT_EQ(block_dtype_for_row(DType::kIQ4_XS, 512), DType::kIQ4_XS);
  EXPECT_EQ(block_dtype_for_row(DType::kMXFP4, 96), DType::kMXFP4);
  EXPECT_EQ(block_dtype_for_row(DType::kQ2_K, 320), DType::kQ4_0);
  EXPECT_EQ(block_dtype_for_row(DType::kQ3_K, 96), DType::kQ4_0);
  EXPECT_EQ(block_dtype_for_row(DType::kQ8_0, 96), DType::kQ8_0);
  EXPECT_EQ(block_dtype_for_row(DType::kQ4_0, 32), DType::kQ4_0);
}

TEST(BlockDTypeDeathTest, NoPerElementSizeAndNoPartialBlocks) {
  EXPECT_DEATH(dtype_size(DType::kQ4_K), "block type");
  EXPECT_DEATH(dtype_bits(DType::kQ8_0), "block type");
  EXPECT_DEATH(dtype_row_bytes(DType::kQ4_K, 128), "not a whole number");
  EXPECT_DEATH(dtype_row_bytes(DType::kQ8_0, 33), "not a whole number");
  EXPECT_DEATH(block_dtype_for_row(DType::kQ4_K, 100), "fits no block type");
  EXPECT_DEATH(block_dtype_for_row(DType::kBF16, 256), "not a block type");
}

std::vector<float> quantize_dequantize(DType dtype, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(size_t(dtype_row_bytes(dtype, int64_t(x.size()))));
  quantize_row(dtype, x.data(), bytes.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(dtype, bytes.data(), y.data(), int64_t(x.size()));
  return y;
}

// Relative RMS error on normal(0, 1) rows, bounded a little above what the formats give (measured
// 0.0055 / 0.084 / 0.042 / 0.27 / 0.15 / 0.067 / 0.017 on 1024 weights; Q4_1, Q5_1, IQ4_NL, IQ4_XS,
// MXFP4 0.073 / 0.041 / 0.080 / 0.072 / 0.12 on the fixtures' normal rows): a scale search that stopped
// working or a level off by one shows up well above these.
TEST(Quantize, ErrorIsWithinTheFormatsBound) {
  const std::pair<DType, double> bounds[] = {{DType::kQ8_0, 0.008}, {DType::kQ4_0, 0.11},    {DType::kQ5_0, 0.055},
                                             {DType::kQ2_K, 0.32},  {DType::kQ3_K, 0.18},    {DType::kQ4_K, 0.08},
                                             {DType::kQ6_K, 0.022}, {DType::kQ5_K, 0.045},   {DType::kQ4_1, 0.09},
                                             {DType::kQ5_1, 0.05},  {DType::kIQ4_NL, 0.095}, {DType::kIQ4_XS, 0.09},
                                             {DType::kMXFP4, 0.15}};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(4096);
  for (auto& v : x) v = normal(rng);
  for (const auto& [dtype, bound] : bounds) {
    const auto y = quantize_dequantize(dtype, x);
    double error = 0.0, energy = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      error += double(y[i] - x[i]) * double(y[i] - x[i]);
      energy += double(x[i]) * double(x[i]);
    }
    EXPECT_LT(std::sqrt(error / energy), bound) << dtype_name(dtype);
    EXPECT_GT(std::sqrt(error / energy), bound / 20) << dtype_name(dtype) << ": suspiciously exact";
  }
}

TEST(Quantize, ZerosStayZeroAndConstantsStayClose) {
  for (DType dtype : kBlockTypes) {
    const int64_t n = 256;
    for (float v : {0.0f, 0.75f, -2.5f}) {
      const auto y = quantize_dequantize(dtype, std::vector<float>(size_t(n), v));
      for (int64_t i = 0; i < n; ++i) {
        if (v == 0.0f) {
          ASSERT_EQ(y[size_t(i)], 0.0f) << dtype_name(dtype);
        }
        // One f16 scale rounding (2^-11) plus the level grid of the coarsest type on a constant.
        // MXFP4 has no per-block fit: a power-of-two scale and E2M1's values, 2.5 between 2 and 3.
        ASSERT_NEAR(y[size_t(i)], v, std::fabs(v) * (dtype == DType::kMXFP4 ? 0.2 : 0.01))
            << dtype_name(dtype) << " " << v;
      }
    }
  }
}

TEST(Quantize, IsDeterministicAndRejectsNonFinite) {
  const auto x = test::random_floats(512, 3);
  for (DType dtype : kBlockTypes) {
    std::vector<uint8_t> a(size_t(dtype_row_bytes(dtype, 512))), b(a.size());
    quantize_row(dtype, x.data(), a.data(), 512);
    quantize_row(dtype, x.data(), b.data(), 512);
    EXPECT_EQ(a, b) << dtype_name(dtype);
    auto bad = x;
    bad[300] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THROW(quantize_row(dtype, bad.data(), a.data(), 512), Error) << dtype_name(dtype);
    bad[300] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(quantize_row(dtype, bad.data(), a.data(), 512), Error) << dtype_name(dtype);
  }
}

// y[t, r] against sum_c w[r, c] x[t, c] in double over the dequantized weights, within the f32
// summation bound (n + 1) u sum |w x| (as test_matmul.cpp): every ISA computes the f32 product of
// the exact dequantized weights, so nothing else may contribute.
void expect_matches_dequantized_product(const std::vector<float>& y, const std::vector<float>& x,
                                        const test::QuantWeights& w, int64_t n_tokens, int64_t row_begin,
                                        int64_t row_end, const std::string& what) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = row_begin; r < row_end; ++r) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double p = double(w.values[size_t(r * w.cols + c)]) * double(x[size_t(t * w.cols + c)]);
        exact += p;
        magnitude += std::fabs(p);
      }
      ASSERT_NEAR(y[size_t(t * w.rows + r)], exact, double(w.cols + 1) * test::kF32Eps * magnitude + 1e-30)
          << what << " token " << t << " row " << r;
    }
}

TEST(QuantMatmul, MatchesTheDequantizedProductForEveryIsaTypeAndShape) {
  IsaGuard guard;
  test::BlockModeGuard f32(ops::BlockActivationMode::kF32);
  ThreadPool pool(1);
  for (DType dtype : kBlockTypes) {
    for (int64_t cols : {256, 768}) {
      for (int64_t rows : {1, 7, 40}) {
        const auto w = test::make_quant_weights(dtype, rows, cols, uint32_t(rows * 31 + cols));
        for (int64_t n_tokens : {1, 3, 8, 17}) {
          const auto x = test::random_floats(n_tokens * cols, uint32_t(cols + n_tokens));
          std::vector<float> reference(size_t(n_tokens * rows));
          set_isa(Isa::kScalar);
          ops::matmul(reference.data(), x.data(), w.view(), n_tokens, pool);
          for (Isa isa : available_isas()) {
            set_isa(isa);
            std::vector<float> y(size_t(n_tokens * rows), std::numeric_limits<float>::quiet_NaN());
            ops::matmul(y.data(), x.data(), w.view(), n_tokens, pool);
            const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(dtype)) + " cols " +
                                     std::to_string(cols) + " tokens " + std::to_string(n_tokens);
            expect_matches_dequantized_product(y, x, w, n_tokens, 0, rows, what);
            // Against the scalar reference: both lie within the bound above of the exact product.
            for (int64_t t = 0; t < n_tokens; ++t)
              for (int64_t r = 0; r < rows; ++r) {
                double magnitude = 0.0;
                for (int64_t c = 0; c < cols; ++c)
                  magnitude += std::fabs(double(w.values[size_t(r * cols + c)]) * double(x[size_t(t * cols + c)]));
                const size_t i = size_t(t * rows + r);
                ASSERT_NEAR(y[i], reference[i], 2.0 * double(cols + 1) * test::kF32Eps * magnitude + 1e-30)
                    << what << " vs scalar, token " << t << " row " << r;
              }
          }
        }
      }
    }
  }
}

// 32-block types also take rows that are not a multiple of 256 (the fallback's whole point).
TEST(QuantMatmul, ShortRowsOf32BlockTypes) {
  IsaGuard guard;
  test::BlockModeGuard f32(ops::BlockActivationMode::kF32);
  ThreadPool pool(1);
  for (DType dtype :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_1, DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4}) {
    for (int64_t cols : {32, 96, 128, 160}) {
      const auto w = test::make_quant_weights(dtype, 19, cols, uint32_t(cols));
      for (Isa isa : available_isas()) {
        set_isa(isa);
        for (int64_t n_tokens : {1, 3, 8, 17}) {
          const auto x = test::random_floats(n_tokens * cols, uint32_t(cols * 3 + n_tokens));
          std::vector<float> y(size_t(n_tokens * 19), std::numeric_limits<float>::quiet_NaN());
          ops::matmul(y.data(), x.data(), w.view(), n_tokens, pool);
          expect_matches_dequantized_product(y, x, w, n_tokens, 0, 19,
                                             std::string(isa_name(isa)) + " " + std::string(dtype_name(dtype)));
        }
      }
    }
  }
}

// matmul_rows over odd row ranges writes exactly those rows, with the same bits as the full product.
TEST(QuantMatmul, OddRowRangesWriteOnlyTheirRows) {
  IsaGuard guard;
  test::BlockModeGuard f32(ops::BlockActivationMode::kF32);
  ThreadPool pool(1);
  const int64_t rows = 45, cols = 512;
  for (DType dtype : kBlockTypes) {
    const auto w = test::make_quant_weights(dtype, rows, cols, 11);
    for (Isa isa : available_isas()) {
      set_isa(isa);
      for (int64_t n_tokens : {1, 3, 8, 17}) {
        const auto x = test::random_floats(n_tokens * cols, 12);
        std::vector<float> full(size_t(n_tokens * rows));
        ops::matmul(full.data(), x.data(), w.view(), n_tokens, pool);
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {3, 17}, {5, 6}, {13, 45}, {1, 44}}) {
          std::vector<float> y(full.size(), -7.0f);
          ops::matmul_rows(y.data(), x.data(), w.view(), n_tokens, begin, end);
          for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = size_t(t * rows + r);
              if (r >= begin && r < end)
                ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(full[i]))
                    << isa_name(isa) << " " << dtype_name(dtype) << " [" << begin << ", " << end << ") row " << r;
              else
                ASSERT_EQ(y[i], -7.0f) << isa_name(isa) << " " << dtype_name(dtype) << " row " << r << " written";
            }
        }
      }
    }
  }
}

// A row's dot never depends on the thread split nor on the other tokens of the batch.
TEST(QuantMatmul, BitIdenticalAcrossThreadCountsAndTokenCounts) {
  IsaGuard guard;
  test::BlockModeGuard f32(ops::BlockActivationMode::kF32);
  ThreadPool pool1(1), pool2(2), pool3(3);
  const int64_t rows = 300, cols = 512;
  for (DType dtype : kBlockTypes) {
    const auto w = test::make_quant_weights(dtype, rows, cols, 21);
    for (Isa isa : available_isas()) {
      set_isa(isa);
      const int64_t n_tokens = 17;
      const auto x = test::random_floats(n_tokens * cols, 22);
      std::vector<float> y1(size_t(n_tokens * rows)), y2(y1.size()), y3(y1.size());
      ops::matmul(y1.data(), x.data(), w.view(), n_tokens, pool1);
      ops::matmul(y2.data(), x.data(), w.view(), n_tokens, pool2);
      ops::matmul(y3.data(), x.data(), w.view(), n_tokens, pool3);
      for (size_t i = 0; i < y1.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(y2[i])) << dtype_name(dtype) << " " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(y3[i])) << dtype_name(dtype) << " " << i;
      }
      for (int64_t t : {0, 8, 16}) {  // token t alone (the matvec path) == token t in the batch
        std::vector<float> single(static_cast<size_t>(rows));
        ops::matmul(single.data(), x.data() + t * cols, w.view(), 1, pool2);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(std::bit_cast<uint32_t>(single[size_t(r)]), std::bit_cast<uint32_t>(y1[size_t(t * rows + r)]))
              << isa_name(isa) << " " << dtype_name(dtype) << " token " << t << " row " << r;
      }
    }
  }
}

TEST(QuantMatmul, RejectsRowsThatAreNotWholeBlocks) {
  ThreadPool pool(1);
  std::vector<uint8_t> bytes(1024);
  std::vector<float> x(128), y(4);
  EXPECT_THROW(ops::matmul(y.data(), x.data(), WeightView{bytes.data(), DType::kQ4_K, 4, 128}, 1, pool), Error);
  EXPECT_THROW(ops::weight_row_to_f32(y.data(), WeightView{bytes.data(), DType::kQ8_0, 1, 40}, 0), Error);
}

}  // namespace
}  // namespace chronos
