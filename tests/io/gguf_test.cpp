// GgufFile: a file written by the gguf package read back, and one corruption per validation rule,
// each made by changing bytes of that file.
#include "chronos/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "chronos/error.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

using test::kFixtures;
using test::write_bytes;

const std::filesystem::path kReaderFixture = kFixtures / "gguf" / "reader.gguf";

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
void put(std::string& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Offset just past the first GGUF string (u64 length, then the text) equal to `text`.
size_t after_string(const std::string& bytes, std::string_view text) {
  std::string encoded(8, '\0');
  const uint64_t length = text.size();
  std::memcpy(encoded.data(), &length, 8);
  encoded += text;
  const size_t at = bytes.find(encoded);
  EXPECT_NE(at, std::string::npos) << text;
  return at == std::string::npos ? 0 : at + encoded.size();
}

// Where the fields of a tensor entry named `name` with `n_dims` dimensions sit.
struct TensorFields {
  size_t n_dims, dims, type, offset;
};
TensorFields tensor_fields(const std::string& bytes, std::string_view name, int n_dims) {
  const size_t start = after_string(bytes, name);
  return {start, start + 4, start + 4 + 8 * size_t(n_dims), start + 8 + 8 * size_t(n_dims)};
}

class GgufTest : public test::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    bytes_ = read_all(kReaderFixture);
    ASSERT_GT(bytes_.size(), 1000u);
  }

  // Writes `bytes` and expects open() to fail with one line starting with the path and holding
  // every fragment.
  std::string expect_rejected(const std::string& bytes, std::initializer_list<std::string_view> fragments) {
    const auto path = dir_ / "bad.gguf";
    write_bytes(path, bytes);
    try {
      GgufFile::open(path);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      for (auto fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "open() accepted the file";
    return {};
  }

  std::string bytes_;
};

TEST_F(GgufTest, ReadsKeyValuesWrittenByTheGgufPackage) {
  const auto file = GgufFile::open(kReaderFixture);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32);
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_string("general.name"), "reader-fixture");
  EXPECT_EQ(file->get_int("test.u8"), 200);
  EXPECT_EQ(file->get_int("test.i8"), -100);
  EXPECT_EQ(file->get_int("test.u16"), 60000);
  EXPECT_EQ(file->get_int("test.i16"), -30000);
  EXPECT_EQ(file->get_int("test.u32"), 4000000000);
  EXPECT_EQ(file->get_int("test.i32"), -2000000000);
  EXPECT_EQ(file->get_int("test.u64"), int64_t(1) << 40);
  EXPECT_EQ(file->get_int("test.i64"), -(int64_t(1) << 40));
  EXPECT_EQ(file->get_float("test.f32"), 0.15625);
  EXPECT_EQ(file->get_float("test.f64"), 1e-300);
  EXPECT_EQ(file->get_bool("test.true"), true);
  EXPECT_EQ(file->get_bool("test.false"), false);
  EXPECT_EQ(file->get_int("test.true"), 1);
  EXPECT_EQ(file->get_string("test.string"), "h\xc3\xa9llo");
  EXPECT_EQ(file->get_string_array("test.strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(file->get_i32_array("test.i32s"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(file->get_f32_array("test.f32s"), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(file->type_of("test.nested"), GgufValueType::kArray);
  EXPECT_EQ(file->type_of("test.u64"), GgufValueType::kU64);

  EXPECT_FALSE(file->has("test.absent"));
  EXPECT_EQ(file->get_int("test.absent"), std::nullopt);
  EXPECT_TRUE(file->get_string_array("test.absent").empty());

  const auto keys = file->keys();
  ASSERT_EQ(keys.size(), 20u);
  EXPECT_EQ(keys.front(), "general.architecture");
  EXPECT_EQ(keys.back(), "test.nested");
}

TEST_F(GgufTest, WrongTypeNamesKeyAndBothTypes) {
  const auto file = GgufFile::open(kReaderFixture);
  for (const auto& [call, fragments] : std::vector<std::pair<std::function<void()>, std::vector<std::string>>>{
           {[&] { file->get_int("test.string"); }, {"key test.string", "string", "integer"}},
           {[&] { file->get_float("test.u32"); }, {"key test.u32", "u32", "f32"}},
           {[&] { file->get_string("test.i32s"); }, {"key test.i32s", "array of i32", "string"}},
           {[&] { file->get_f32_array("test.i32s"); }, {"key test.i32s", "array of i32", "array of f32"}},
           {[&] { file->get_bool("test.u8"); }, {"key test.u8", "u8", "bool"}},
           {[&] { file->get_string_array("test.nested"); }, {"key test.nested", "array of array"}},
       }) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << fragments.front();
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(kReaderFixture.string() + ": ", 0), 0u) << message;
      for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
    }
  }
}

TEST_F(GgufTest, ReadsTensorsWrittenByTheGgufPackage) {
  const auto file = GgufFile::open(kReaderFixture);
  ASSERT_EQ(file->tensors().size(), 4u);

  const GgufTensor* matrix = file->find("matrix");
  ASSERT_NE(matrix, nullptr);
  EXPECT_EQ(&file->tensors()[0], matrix);
  EXPECT_EQ(matrix->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(matrix->dtype, DType::kF32);
  EXPECT_EQ(matrix->ggml_type, 0u);
  ASSERT_EQ(matrix->n_bytes, 48);
  EXPECT_EQ(matrix->file_offset % 32, 0);
  for (int i = 0; i < 12; ++i) {
    float value;
    std::memcpy(&value, matrix->data + 4 * i, 4);
    EXPECT_EQ(value, (float(i) - 5.5f) / 4) << i;
  }

  const GgufTensor* vector = file->find("vector");
  ASSERT_NE(vector, nullptr);
  EXPECT_EQ(vector->shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(vector->n_bytes, 28);

  const GgufTensor* half = file->find("half");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(half->dtype, DType::kF16);
  ASSERT_EQ(half->n_bytes, 128);
  for (int i = 0; i < 64; ++i) {
    uint16_t bits;
    std::memcpy(&bits, half->data + 2 * i, 2);
    EXPECT_EQ(f16_to_f32(bits), float(i) / 16 - 2) << i;
  }

  const GgufTensor* stacked = file->find("stacked_q8");
  ASSERT_NE(stacked, nullptr);
  EXPECT_EQ(stacked->shape, (std::vector<int64_t>{2, 3, 64}));
  EXPECT_EQ(stacked->dtype, DType::kQ8_0);
  EXPECT_EQ(stacked->ggml_type, 8u);
  ASSERT_EQ(stacked->n_bytes, 2 * 3 * 2 * 34);
  // Q8_0 blocks: f16 scale, 32 int8; the weights were sin(i) (error: half a step, plus the scale's f16 rounding).
  for (int block = 0; block < 12; ++block) {
    const std::byte* p = stacked->data + 34 * block;
    uint16_t scale_bits;
    std::memcpy(&scale_bits, p, 2);
    const float scale = f16_to_f32(scale_bits);
    for (int j = 0; j < 32; ++j) {
      const float weight = scale * float(int8_t(p[2 + j]));
      EXPECT_NEAR(weight, std::sin(float(block * 32 + j)), scale * 0.6f) << block << " " << j;
    }
  }
  EXPECT_EQ(file->find("absent"), nullptr);
}

TEST_F(GgufTest, RefusesBadMagicAndVersions) {
  std::string bytes = bytes_;
  bytes[0] = 'X';
  expect_rejected(bytes, {"not a GGUF file"});
  bytes = bytes_;
  put<uint32_t>(bytes, 4, 1);
  expect_rejected(bytes, {"version 1"});
  put<uint32_t>(bytes, 4, 0x03000000);
  expect_rejected(bytes, {"version 50331648", "big-endian"});
  put<uint32_t>(bytes, 4, 2);  // v2 has the same layout as v3
  const auto path = dir_ / "v2.gguf";
  write_bytes(path, bytes);
  EXPECT_EQ(GgufFile::open(path)->version(), 2u);
}

TEST_F(GgufTest, RefusesTruncatedFiles) {
  expect_rejected(bytes_.substr(0, 10), {"too small"});
  expect_rejected(bytes_.substr(0, after_string(bytes_, "test.strings") + 10), {"truncated", "key test.strings"});
  const size_t header_end = after_string(bytes_, "stacked_q8") + 4 + 3 * 8 + 4 + 8;
  expect_rejected(bytes_.substr(0, header_end - 3), {"truncated", "tensor stacked_q8"});
  // The writer pads the last tensor to the alignment: cut into its data, not only the padding.
  const int64_t stacked_end = GgufFile::open(kReaderFixture)->find("stacked_q8")->file_offset + 2 * 3 * 2 * 34;
  ASSERT_LE(size_t(stacked_end), bytes_.size());
  expect_rejected(bytes_.substr(0, size_t(stacked_end) - 1), {"tensor stacked_q8", "past the end"});
  const auto path = dir_ / "unpadded.gguf";
  write_bytes(path, bytes_.substr(0, size_t(stacked_end)));
  EXPECT_EQ(GgufFile::open(path)->tensors().size(), 4u);
}

TEST_F(GgufTest, RefusesAbsurdCounts) {
  std::string bytes = bytes_;
  put<uint64_t>(bytes, 8, uint64_t(1) << 50);
  expect_rejected(bytes, {"tensor count 1125899906842624"});
  bytes = bytes_;
  put<uint64_t>(bytes, 16, ~uint64_t(0));
  expect_rejected(bytes, {"key-value count"});
  bytes = bytes_;
  // The element count of test.strings: after the key, value type (4) and element type (4).
  put<uint64_t>(bytes, after_string(bytes, "test.strings") + 8, uint64_t(1) << 61);
  expect_rejected(bytes, {"key test.strings", "strings runs past the end"});
  bytes = bytes_;
  put<uint64_t>(bytes, after_string(bytes, "test.f32s") + 8, uint64_t(1) << 62);
  expect_rejected(bytes, {"key test.f32s", "runs past the end"});
}

TEST_F(GgufTest, RefusesStringLengthBeyondTheFile) {
  std::string bytes = bytes_;
  // The value of test.string: its length follows the key and the value type.
  put<uint64_t>(bytes, after_string(bytes, "test.string") + 4, uint64_t(bytes.size()));
  expect_rejected(bytes, {"key test.string", "string length", "runs past the end"});
  bytes = bytes_;
  put<uint64_t>(bytes, after_string(bytes, "test.string") - 11 - 8, ~uint64_t(0));  // the key's own length
  expect_rejected(bytes, {"string length 18446744073709551615"});
}

TEST_F(GgufTest, RefusesBadDimensions) {
  std::string bytes = bytes_;
  const TensorFields vector = tensor_fields(bytes, "vector", 1);
  put<uint64_t>(bytes, vector.dims, uint64_t(1) << 62);
  expect_rejected(bytes, {"tensor vector", "overflows the byte count"});
  put<uint64_t>(bytes, vector.dims, uint64_t(1) << 40);
  expect_rejected(bytes, {"tensor vector", "past the end"});
  put<uint64_t>(bytes, vector.dims, ~uint64_t(0));
  expect_rejected(bytes, {"tensor vector", "must be positive"});
  bytes = bytes_;
  const TensorFields stacked = tensor_fields(bytes, "stacked_q8", 3);
  put<uint64_t>(bytes, stacked.dims + 8, uint64_t(1) << 40);
  put<uint64_t>(bytes, stacked.dims + 16, uint64_t(1) << 40);
  expect_rejected(bytes, {"tensor stacked_q8", "overflows the element count"});
  bytes = bytes_;
  put<uint64_t>(bytes, vector.dims, 0);
  expect_rejected(bytes, {"tensor vector", "dimension 0 is 0"});
  bytes = bytes_;
  put<uint32_t>(bytes, vector.n_dims, 5);
  expect_rejected(bytes, {"tensor vector", "5 dimensions"});
  bytes = bytes_;
  put<uint64_t>(bytes, stacked.dims, 48);  // rows of Q8_0 must be whole 32-blocks
  expect_rejected(bytes, {"tensor stacked_q8", "48 elements", "Q8_0"});
}

TEST_F(GgufTest, RefusesUnsupportedAndUnknownTypes) {
  std::string bytes = bytes_;
  const TensorFields matrix = tensor_fields(bytes, "matrix", 2);
  put<uint32_t>(bytes, matrix.type, 34);
  expect_rejected(bytes, {"tensor matrix", "TQ1_0", "not supported"});
  put<uint32_t>(bytes, matrix.type, 35);
  expect_rejected(bytes, {"tensor matrix", "TQ2_0", "not supported", "Q5_K", "IQ4_XS", "MXFP4", "IQ2_XXS",
                          "IQ1_M"});      // the list names what is
  put<uint32_t>(bytes, matrix.type, 16);  // IQ2_XXS is read; this matrix's rows are not whole 256-blocks
  expect_rejected(bytes, {"tensor matrix", "not whole 256-element blocks of IQ2_XXS"});
  put<uint32_t>(bytes, matrix.type, 13);  // Q5_K is read; this matrix's rows are not whole 256-blocks
  expect_rejected(bytes, {"tensor matrix", "not whole 256-element blocks of Q5_K"});
  put<uint32_t>(bytes, matrix.type, 40);  // ggml's newest types are named too
  expect_rejected(bytes, {"tensor matrix", "ggml type NVFP4 is not supported"});
  put<uint32_t>(bytes, matrix.type, 41);
  expect_rejected(bytes, {"tensor matrix", "ggml type Q1_0 is not supported"});
  put<uint32_t>(bytes, matrix.type, 999);
  expect_rejected(bytes, {"tensor matrix", "type 999"});
  bytes = bytes_;
  put<uint32_t>(bytes, after_string(bytes, "test.u8"), 13);  // value type
  expect_rejected(bytes, {"key test.u8", "unknown value type 13"});
}

// A tensor of each IQ grid type (read, never written) loads with GGUF's block size: stacked_q8's
// entry retyped and reshaped to [1, 1, 256], one block, which fits in its original bytes.
TEST_F(GgufTest, ReadsTheIqGridTypes) {
  const std::pair<uint32_t, int64_t> types[] = {{16, 66}, {17, 74}, {18, 98}, {19, 50}, {21, 110}, {22, 82}, {29, 56}};
  for (const auto& [id, block_bytes] : types) {
    std::string bytes = bytes_;
    const TensorFields stacked = tensor_fields(bytes, "stacked_q8", 3);
    put<uint64_t>(bytes, stacked.dims, 256);
    put<uint64_t>(bytes, stacked.dims + 8, 1);
    put<uint64_t>(bytes, stacked.dims + 16, 1);
    put<uint32_t>(bytes, stacked.type, id);
    const auto path = dir_ / "iq.gguf";
    write_bytes(path, bytes);
    const auto file = GgufFile::open(path);
    const GgufTensor* tensor = file->find("stacked_q8");
    ASSERT_NE(tensor, nullptr) << id;
    EXPECT_EQ(tensor->dtype, dtype_of_ggml_type(id)) << id;
    EXPECT_EQ(ggml_type_name(id), dtype_name(tensor->dtype)) << id;
    EXPECT_EQ(tensor->shape, (std::vector<int64_t>{1, 1, 256})) << id;
    EXPECT_EQ(tensor->n_bytes, block_bytes) << id;
  }
}

// ggml's type ids (ggml.h) for every type Chronos reads, both ways; the others have none.
TEST(GgufTypes, IdsAreGgmlsBothWays) {
  const std::pair<DType, uint32_t> ids[] = {
      {DType::kF32, 0},    {DType::kF16, 1},      {DType::kQ4_0, 2},    {DType::kQ5_0, 6},     {DType::kQ8_0, 8},
      {DType::kQ2_K, 10},  {DType::kQ3_K, 11},    {DType::kQ4_K, 12},   {DType::kQ5_K, 13},    {DType::kQ6_K, 14},
      {DType::kBF16, 30},  {DType::kQ4_1, 3},     {DType::kQ5_1, 7},    {DType::kIQ4_NL, 20},  {DType::kIQ4_XS, 23},
      {DType::kMXFP4, 39}, {DType::kIQ2_XXS, 16}, {DType::kIQ2_XS, 17}, {DType::kIQ3_XXS, 18}, {DType::kIQ1_S, 19},
      {DType::kIQ3_S, 21}, {DType::kIQ2_S, 22},   {DType::kIQ1_M, 29}};
  for (const auto& [dtype, id] : ids) {
    EXPECT_EQ(ggml_type_of(dtype), id) << dtype_name(dtype);
    EXPECT_EQ(dtype_of_ggml_type(id), dtype) << id;
    EXPECT_EQ(ggml_type_name(id), dtype_name(dtype)) << id;
  }
  for (const uint32_t unsupported : {9u, 15u, 34u, 35u, 999u})
    EXPECT_FALSE(dtype_of_ggml_type(unsupported)) << unsupported;
  EXPECT_FALSE(ggml_type_of(DType::kI32).has_value());
}

TEST_F(GgufTest, RefusesDuplicates) {
  std::string bytes = bytes_;
  const size_t vector = after_string(bytes, "vector");
  bytes.replace(vector - 6, 6, "matrix");
  expect_rejected(bytes, {"tensor matrix", "appears twice"});
  bytes = bytes_;
  const size_t i8 = after_string(bytes, "test.i8");
  bytes.replace(i8 - 2, 2, "u8");
  expect_rejected(bytes, {"key test.u8", "appears twice"});
}

TEST_F(GgufTest, RefusesBadOffsets) {
  std::string bytes = bytes_;
  const TensorFields vector = tensor_fields(bytes, "vector", 1);
  put<uint64_t>(bytes, vector.offset, 65);
  expect_rejected(bytes, {"tensor vector", "offset 65", "alignment 32"});
  put<uint64_t>(bytes, vector.offset, 32);  // matrix holds [0, 48)
  expect_rejected(bytes, {"overlaps", "matrix", "vector"});
  put<uint64_t>(bytes, vector.offset, uint64_t(1) << 40);
  expect_rejected(bytes, {"tensor vector", "past the end"});
  put<uint64_t>(bytes, vector.offset, ~uint64_t(31));
  expect_rejected(bytes, {"tensor vector", "past the end"});
}

TEST_F(GgufTest, RefusesBadAlignment) {
  const size_t alignment = after_string(bytes_, "general.alignment") + 4;  // after the value type (u32)
  std::string bytes = bytes_;
  put<uint32_t>(bytes, alignment, 48);
  expect_rejected(bytes, {"key general.alignment", "48", "power of two"});
  put<uint32_t>(bytes, alignment, 0);
  expect_rejected(bytes, {"key general.alignment", "power of two"});
  put<uint32_t>(bytes, alignment, 64);  // the tensors sit at multiples of 32 only
  expect_rejected(bytes, {"not a multiple of the alignment 64"});
  put<uint32_t>(bytes, alignment - 4, uint32_t(GgufValueType::kString));
  expect_rejected(bytes, {"key general.alignment"});
}

}  // namespace
}  // namespace chronos
