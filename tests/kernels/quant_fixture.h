// Reader of the quantization fixtures (tests/fixtures/quant/*.bin, tools/make_quant_fixtures.py):
// input rows, their quantized bytes and the gguf package's numpy dequantization of those bytes.
// The CPU fixture tests and the CUDA block-kernel tests read the same files through it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "chronos/block_types.h"
#include "chronos/dtype.h"
#include "chronos/quant.h"

namespace chronos::test {

// Fixture file, little-endian: "CQF1", u32 rows, u32 cols, u32 name length, name ("Q4_K"), then
// f32 input[rows, cols], u8 quantized[rows, dtype_row_bytes(cols)], f32 gguf_dequantized[rows, cols].
struct QuantFixture {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<float> input, expected;
  std::vector<uint8_t> quantized;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline uint32_t read_u32(const std::vector<uint8_t>& bytes, size_t& at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);
  at += 4;
  return v;
}

template <typename T>
std::vector<T> read_array(const std::vector<uint8_t>& bytes, size_t& at, size_t n) {
  std::vector<T> out(n);
  std::memcpy(out.data(), bytes.data() + at, n * sizeof(T));
  at += n * sizeof(T);
  return out;
}

// The fixture at `path`; an empty one (input empty) after a reported failure.
inline QuantFixture load_fixture(const std::string& path) {
  const auto bytes = read_bytes(path);
  QuantFixture f;
  size_t at = 4;
  if (bytes.size() < 16 || std::memcmp(bytes.data(), "CQF1", 4) != 0) {
    ADD_FAILURE() << path << ": not a quant fixture";
    return f;
  }
  f.rows = read_u32(bytes, at);
  f.cols = read_u32(bytes, at);
  const uint32_t name_length = read_u32(bytes, at);
  const std::string name(reinterpret_cast<const char*>(bytes.data() + at), name_length);
  at += name_length;
  const auto dtype = block_dtype_from_name(name);
  EXPECT_TRUE(dtype.has_value()) << path << ": " << name;
  f.dtype = dtype.value_or(DType::kF32);
  const size_t n = size_t(f.rows * f.cols), n_bytes = size_t(f.rows * dtype_row_bytes(f.dtype, f.cols));
  EXPECT_EQ(bytes.size(), at + n * 8 + n_bytes) << path;
  if (bytes.size() != at + n * 8 + n_bytes) return f;
  f.input = read_array<float>(bytes, at, n);
  f.quantized = read_array<uint8_t>(bytes, at, n_bytes);
  f.expected = read_array<float>(bytes, at, n);
  return f;
}

// tests/fixtures/quant/<name>.bin ("q4_k", "random_iq2_xxs").
inline std::string fixture_path(const std::string& name) {
  return std::string(CHRONOS_TEST_DATA_DIR) + "/quant/" + name + ".bin";
}

}  // namespace chronos::test
