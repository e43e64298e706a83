// Block layouts against an independent decoder: tests/fixtures/quant/*.bin hold input rows,
// Chronos's quantized bytes and the gguf package's numpy dequantization of those bytes
// (tools/make_quant_fixtures.py). Re-quantizing must give the same bytes, and every ISA's
// dequantization must give gguf's floats bit for bit.
//
// The fixture tool runs this binary's disabled QuantFixtureTool test to quantize its inputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "chronos/block_types.h"
#include "chronos/quant.h"
#include "chronos/thread_pool.h"
#include "quant_fixture.h"
#include "test_util.h"

namespace chronos {
namespace {

using test::fixture_path;
using test::load_fixture;
using test::QuantFixture;
using test::read_array;
using test::read_bytes;
using test::read_u32;

const char* const kFixtureTypes[] = {"q8_0", "q4_0", "q5_0", "q2_k",   "q3_k",   "q4_k", "q6_k",
                                     "q5_k", "q4_1", "q5_1", "iq4_nl", "iq4_xs", "mxfp4"};

TEST(QuantFixtures, QuantizerReproducesTheStoredBytes) {
  for (const char* type : kFixtureTypes) {
    const QuantFixture f = load_fixture(fixture_path(type));
    ASSERT_FALSE(f.input.empty()) << type;
    std::vector<uint8_t> bytes(f.quantized.size());
    quantize_rows(f.dtype, f.input.data(), bytes.data(), f.rows, f.cols);
    const int64_t row_bytes = dtype_row_bytes(f.dtype, f.cols);
    for (int64_t i = 0; i < int64_t(bytes.size()); ++i)
      ASSERT_EQ(bytes[size_t(i)], f.quantized[size_t(i)])
          << type << " row " << i / row_bytes << " byte " << i % row_bytes;
  }
}

// Every row of f dequantized by dequantize_row and, on every ISA, by ops::weight_row_to_f32 is
// gguf's f32 bit for bit.
void expect_gguf_dequantization(const QuantFixture& f, const std::string& what) {
  const int64_t row_bytes = dtype_row_bytes(f.dtype, f.cols);
  std::vector<float> row(size_t(f.cols));
  for (int64_t r = 0; r < f.rows; ++r) {
    dequantize_row(f.dtype, f.quantized.data() + r * row_bytes, row.data(), f.cols);
    for (int64_t c = 0; c < f.cols; ++c)
      ASSERT_EQ(std::bit_cast<uint32_t>(row[size_t(c)]), std::bit_cast<uint32_t>(f.expected[size_t(r * f.cols + c)]))
          << what << " dequantize_row row " << r << " col " << c << ": " << row[size_t(c)] << " vs "
          << f.expected[size_t(r * f.cols + c)];
    for (Isa isa : test::available_isas()) {
      set_isa(isa);
      std::fill(row.begin(), row.end(), -1.0f);
      ops::weight_row_to_f32(row.data(), WeightView{f.quantized.data(), f.dtype, f.rows, f.cols}, r);
      for (int64_t c = 0; c < f.cols; ++c)
        ASSERT_EQ(std::bit_cast<uint32_t>(row[size_t(c)]), std::bit_cast<uint32_t>(f.expected[size_t(r * f.cols + c)]))
            << what << " " << isa_name(isa) << " weight_row_to_f32 row " << r << " col " << c;
    }
  }
}

TEST(QuantFixtures, DequantizationIsBitIdenticalToGguf) {
  test::IsaGuard guard;
  for (const char* type : kFixtureTypes) {
    const QuantFixture f = load_fixture(fixture_path(type));
    ASSERT_FALSE(f.input.empty()) << type;
    expect_gguf_dequantization(f, type);
  }
}

// Random valid blocks (tools/make_quant_fixtures.py): every grid index, scale code and high bit,
// and for MXFP4 every E8M0 byte, decoded as gguf decodes them.
TEST(QuantFixtures, RandomBlocksDequantizeAsGguf) {
  test::IsaGuard guard;
  for (const char* type : {"q4_1", "q5_1", "iq4_nl", "iq4_xs", "mxfp4"}) {
    const QuantFixture f = load_fixture(fixture_path(std::string("random_") + type));
    ASSERT_FALSE(f.input.empty()) << type;
    expect_gguf_dequantization(f, std::string("random ") + type);
  }
}

// The read-only IQ grid types (no quantizer): random blocks covering every grid index.
const char* const kIqGridTypes[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"};

TEST(QuantFixtures, IqGridTypesDequantizeAsGguf) {
  test::IsaGuard guard;
  for (const char* type : kIqGridTypes) {
    const QuantFixture f = load_fixture(fixture_path(std::string("random_") + type));
    ASSERT_FALSE(f.input.empty()) << type;
    expect_gguf_dequantization(f, std::string("random ") + type);
  }
}

// ops::matmul over those rows on every ISA against the double product of gguf's dequantized
// weights: the f32 path within the f32 summation bound (n + 1) u sum |w x|, the 8-bit-activation
// path within the activations' rounding bound (test_util.h) and bit for bit the scalar
// reference's; a token alone gives the batch's bits.
TEST(QuantFixtures, IqGridTypesMatmulMatchesGgufDequantizedProduct) {
  test::IsaGuard guard;
  ThreadPool pool(2);
  for (const char* type : kIqGridTypes) {
    const QuantFixture f = load_fixture(fixture_path(std::string("random_") + type));
    ASSERT_FALSE(f.input.empty()) << type;
    const int64_t n_tokens = 3;
    const auto x = test::random_floats(n_tokens * f.cols, uint32_t(f.cols));
    const WeightView w{f.quantized.data(), f.dtype, f.rows, f.cols};
    const test::QuantWeights stored{f.dtype, f.rows, f.cols, f.quantized, f.expected};
    for (const auto mode : {ops::BlockActivationMode::kF32, ops::BlockActivationMode::kInt8}) {
      test::BlockModeGuard mode_guard(mode);
      std::vector<float> scalar;
      for (Isa isa : test::available_isas()) {
        set_isa(isa);
        std::vector<float> y(size_t(n_tokens * f.rows), std::nanf("")), single(size_t(f.rows));
        ops::matmul(y.data(), x.data(), w, n_tokens, pool);
        const std::string what = std::string(type) + " " + isa_name(isa);
        if (mode == ops::BlockActivationMode::kF32) {
          test::expect_matches_reference(y, x, f.expected, f.rows, f.cols, n_tokens, what);
        } else {
          double error2 = 0.0, energy = 0.0;
          test::expect_within_activation_rounding(y, x, stored, n_tokens, what + " 8-bit", &error2, &energy);
          if (isa == Isa::kScalar) scalar = y;
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(scalar[i]))
                << what << " 8-bit, element " << i;
        }
        ASSERT_FALSE(::testing::Test::HasFatalFailure());
        for (int64_t t = 0; t < n_tokens; ++t) {
          ops::matmul(single.data(), x.data() + t * f.cols, w, 1, pool);
          for (int64_t r = 0; r < f.rows; ++r) {
            const size_t i = size_t(t * f.rows + r);
            ASSERT_EQ(std::bit_cast<uint32_t>(single[size_t(r)]), std::bit_cast<uint32_t>(y[i]))
                << type << " " << isa_name(isa) << " token " << t << " alone, row " << r;
          }
        }
      }
    }
  }
}

// Not a test: tools/make_quant_fixtures.py runs it (--gtest_also_run_disabled_tests) to quantize
// rows with this build's quantizer. CHRONOS_QUANT_TOOL_IN names a file "CQF1", rows, cols, name
// length, name, f32 input[rows, cols]; the quantized bytes are written to CHRONOS_QUANT_TOOL_OUT.
TEST(QuantFixtureTool, DISABLED_Quantize) {
  const char* in_path = std::getenv("CHRONOS_QUANT_TOOL_IN");
  const char* out_path = std::getenv("CHRONOS_QUANT_TOOL_OUT");
  ASSERT_NE(in_path, nullptr);
  ASSERT_NE(out_path, nullptr);
  const auto bytes = read_bytes(in_path);
  ASSERT_GE(bytes.size(), size_t(16));
  ASSERT_EQ(std::memcmp(bytes.data(), "CQF1", 4), 0);
  size_t at = 4;
  const int64_t rows = read_u32(bytes, at), cols = read_u32(bytes, at);
  const uint32_t name_length = read_u32(bytes, at);
  const auto dtype = block_dtype_from_name(std::string(reinterpret_cast<const char*>(bytes.data() + at), name_length));
  at += name_length;
  ASSERT_TRUE(dtype.has_value());
  ASSERT_EQ(bytes.size(), at + size_t(rows * cols) * 4);
  const auto input = read_array<float>(bytes, at, size_t(rows * cols));
  std::vector<uint8_t> quantized(size_t(rows * dtype_row_bytes(*dtype, cols)));
  quantize_rows(*dtype, input.data(), quantized.data(), rows, cols);
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(quantized.data()), std::streamsize(quantized.size()));
  ASSERT_TRUE(out.good());
}

}  // namespace
}  // namespace chronos
