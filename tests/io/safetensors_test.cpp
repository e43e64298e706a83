// SafetensorsFile and write_safetensors: round trips, a file written by the safetensors library,
// and one crafted bad file per validation rule.
#include "chronos/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <vector>

#include "chronos/error.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

using test::kFixtures;
using test::safetensors_bytes;
using test::write_bytes;

class SafetensorsTest : public test::ScratchDir {
 protected:
  // Writes `bytes` to a file and expects open() to fail with a message holding the file's path
  // and every one of `fragments`.
  std::string expect_rejected(std::string_view bytes, std::initializer_list<std::string_view> fragments) {
    const auto path = dir_ / "bad.safetensors";
    write_bytes(path, bytes);
    return expect_open_fails(path, fragments);
  }

  static std::string expect_open_fails(const std::filesystem::path& path,
                                       std::initializer_list<std::string_view> fragments) {
    try {
      SafetensorsFile::open(path);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      for (auto fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "open() accepted " << path;
    return {};
  }
};

template <typename T>
std::span<const std::byte> as_bytes(const std::vector<T>& values) {
  return std::as_bytes(std::span<const T>(values));
}

TEST_F(SafetensorsTest, RoundTripKeepsNamesDtypesShapesBytesAndMetadata) {
  const std::vector<float> matrix = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  const std::vector<uint16_t> bf16 = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(3.0f)};
  const std::vector<int64_t> scalar = {-(int64_t(1) << 50)};
  const std::vector<uint8_t> empty;
  const std::vector<TensorToWrite> tensors = {
      {"model.layers.0.weight", DType::kF32, {2, 3}, as_bytes(matrix)},
      {"odd", DType::kBF16, {3}, as_bytes(bf16)},
      {"scalar", DType::kI64, {}, as_bytes(scalar)},
      {"empty", DType::kU8, {0, 5}, as_bytes(empty)},
  };
  const auto path = dir_ / "round.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}, {"quote\"d", "line\nbreak"}});
  EXPECT_EQ(test::count_temporaries(dir_), 0);

  // The writer pads the header so the data buffer starts on an 8-byte boundary.
  const std::string raw = test::read_bytes(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, raw.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  EXPECT_EQ(raw[8], '{');

  const auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& read = file->tensors()[i];
    const TensorToWrite& written = tensors[i];
    EXPECT_EQ(read.name, written.name);
    EXPECT_EQ(read.dtype, written.dtype);
    EXPECT_EQ(read.shape, written.shape);
    ASSERT_EQ(read.n_bytes, int64_t(written.bytes.size()));
    if (!written.bytes.empty()) {
      EXPECT_EQ(std::memcmp(read.data, written.bytes.data(), written.bytes.size()), 0) << read.name;
    }
    EXPECT_EQ(read.file, path.string());
    // `data` and `file_offset` agree: all tensors sit at their offset in one mapping.
    EXPECT_EQ(read.data - read.file_offset, file->tensors()[0].data - file->tensors()[0].file_offset);
  }
  EXPECT_EQ(file->tensors()[0].file_offset, int64_t(8 + header_length));
  EXPECT_EQ(file->tensors()[2].n_elements(), 1);
  EXPECT_EQ(file->tensors()[3].n_elements(), 0);
  EXPECT_EQ(file->find("odd"), &file->tensors()[1]);
  EXPECT_EQ(file->find("missing"), nullptr);
  const std::map<std::string, std::string> expected_metadata = {{"format", "pt"}, {"quote\"d", "line\nbreak"}};
  EXPECT_EQ(file->metadata(), expected_metadata);
}

TEST_F(SafetensorsTest, RoundTripOfNoTensors) {
  const auto path = dir_ / "none.safetensors";
  write_safetensors(path, {});
  const auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_TRUE(file->metadata().empty());
}

// The file was written by the safetensors Python library (tools/make_test_models.py), so this
// checks the reader against the reference writer, value by value.
TEST_F(SafetensorsTest, ReadsFileWrittenByReferenceLibrary) {
  const auto file = SafetensorsFile::open(kFixtures / "io" / "hf_written.safetensors");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().size(), 1u);
  ASSERT_EQ(file->tensors().size(), 7u);

  const TensorInfo* f32 = file->find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dtype, DType::kF32);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{3, 4}));
  for (int i = 0; i < 12; ++i) {
    float value;
    std::memcpy(&value, f32->data + 4 * i, 4);
    EXPECT_EQ(value, float(i) * 0.5f - 1.0f);
  }
  const TensorInfo* bf16 = file->find("bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->dtype, DType::kBF16);
  EXPECT_EQ(bf16->shape, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bf16->data + 2 * i, 2);
    EXPECT_EQ(bf16_to_f32(bits), float(i) * 0.25f - 0.5f);
  }
  const TensorInfo* f16 = file->find("f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->dtype, DType::kF16);
  for (int i = 0; i < 4; ++i) {
    uint16_t bits;
    std::memcpy(&bits, f16->data + 2 * i, 2);
    EXPECT_EQ(f16_to_f32(bits), float(i) * 1.5f);
  }
  const TensorInfo* i64 = file->find("i64");
  ASSERT_NE(i64, nullptr);
  const int64_t expected_i64[] = {-3, 0, 7, int64_t(1) << 40};
  ASSERT_EQ(i64->n_bytes, 32);
  EXPECT_EQ(std::memcmp(i64->data, expected_i64, 32), 0);
  const TensorInfo* u8 = file->find("u8");
  ASSERT_NE(u8, nullptr);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(uint8_t(u8->data[i]), uint8_t(3 * i));
  const TensorInfo* scalar = file->find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  float scalar_value;
  std::memcpy(&scalar_value, scalar->data, 4);
  EXPECT_EQ(scalar_value, 3.25f);
  const TensorInfo* empty = file->find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(empty->n_bytes, 0);
  // Tensors are listed in data order and tile the buffer.
  for (size_t i = 1; i < file->tensors().size(); ++i)
    EXPECT_EQ(file->tensors()[i].file_offset, file->tensors()[i - 1].file_offset + file->tensors()[i - 1].n_bytes);
}

TEST_F(SafetensorsTest, RejectsFileShorterThanLengthField) {
  expect_rejected(std::string_view("\x02\x00\x00\x00\x00", 5), {"5 bytes", "too small"});
}

TEST_F(SafetensorsTest, RejectsMissingFile) { expect_open_fails(dir_ / "absent.safetensors", {"cannot open"}); }

TEST_F(SafetensorsTest, RejectsHeaderLengthPastEndOfFile) {
  expect_rejected(safetensors_bytes("{}", 0, 1000), {"header length 1000", "past the end"});
}

TEST_F(SafetensorsTest, RejectsHeaderLengthOverLimit) {
  expect_rejected(safetensors_bytes("{}", 0, 200'000'000), {"200000000", "limit"});
  expect_rejected(safetensors_bytes("{}", 0, UINT64_MAX - 1), {"limit"});
}

TEST_F(SafetensorsTest, RejectsHeaderNotStartingWithBrace) {
  expect_rejected(safetensors_bytes(" {}     ", 0), {"does not start with '{'"});
  expect_rejected(safetensors_bytes("", 0), {"does not start with '{'"});
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "F32", )", 0), {"not valid JSON"});
  expect_rejected(safetensors_bytes("{\"\xff\xfe\": 1}", 0), {"not valid JSON"});
  expect_rejected(safetensors_bytes("{} {}", 0), {"not valid JSON"});
}

TEST_F(SafetensorsTest, RejectsNonStringMetadata) {
  expect_rejected(safetensors_bytes(R"({"__metadata__": {"format": "pt", "step": 3}})", 0),
                  {"__metadata__", "\"step\"", "not a string"});
  expect_rejected(safetensors_bytes(R"({"__metadata__": ["pt"]})", 0), {"__metadata__", "not a JSON object"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  expect_rejected(safetensors_bytes(R"({"w": {"dtype": "F12", "shape": [2], "data_offsets": [0, 3]}})", 3),
                  {"tensor w", "unknown dtype \"F12\""});
}

TEST_F(SafetensorsTest, RejectsMalformedTensorEntries) {
  expect_rejected(safetensors_bytes(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4), {"tensor w", "dtype"});
  expect_rejected(safetensors_bytes(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), {"tensor w", "shape"});
  expect_rejected(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1]}})", 4), {"tensor w", "data_offsets"});
  expect_rejected(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
                  {"tensor w", "non-negative integer"});
  expect_rejected(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 4),
                  {"tensor w", "non-negative integer"});
  expect_rejected(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 4),
                  {"tensor w", "data_offsets"});
  expect_rejected(safetensors_bytes(R"({"w": [1, 2]})", 0), {"tensor w", "not a JSON object"});
}

TEST_F(SafetensorsTest, RejectsHoleBetweenTensors) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                        "b": {"dtype": "F32", "shape": [4], "data_offsets": [20, 36]}})",
                                    36),
                  {"tensor b", "data_offsets [20, 36]", "hole of 4 bytes after tensor a"});
}

TEST_F(SafetensorsTest, RejectsHoleAtStartOfData) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})", 8),
                  {"tensor a", "hole of 4 bytes at the start"});
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                                    24),
                  {"tensor b", "overlap tensor a"});
}

TEST_F(SafetensorsTest, RejectsOffsetsEndingBeforeTheyBegin) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]},
                                        "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 0]}})",
                                    4),
                  {"tensor b", "end before they begin"});
}

TEST_F(SafetensorsTest, RejectsTrailingBytes) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 20),
                  {"4 trailing bytes"});
}

TEST_F(SafetensorsTest, RejectsSizeNotMatchingShape) {
  const std::string message = expect_rejected(
      safetensors_bytes(R"({"model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 10]}})", 10), {});
  EXPECT_EQ(message, (dir_ / "bad.safetensors").string() +
                         ": tensor model.norm.weight: data_offsets [0, 10] do not match shape [4] of F32 (16 bytes)");
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  expect_rejected(safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                        "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                    8),
                  {"tensor a", "appears twice"});
}

TEST_F(SafetensorsTest, RejectsShapeOverflow) {
  // 2^32 * 2^32 * 16 overflows 64 bits in the element count.
  expect_rejected(safetensors_bytes(
                      R"({"big": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 0]}})", 0),
                  {"tensor big", "overflows the element count"});
  // 2^62 elements fit, their 32-bit sizes in bits do not.
  expect_rejected(
      safetensors_bytes(R"({"big": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0),
      {"tensor big", "overflows the byte count"});
  // Offsets beyond int64 are refused before any arithmetic.
  expect_rejected(
      safetensors_bytes(R"({"big": {"dtype": "U8", "shape": [1], "data_offsets": [0, 18446744073709551615]}})", 0),
      {"tensor big", "data_offsets"});
}

TEST_F(SafetensorsTest, RejectsTruncatedRealCheckpoint) {
  const auto source = kFixtures / "models" / "mixtral-f32" / "model.safetensors";
  const std::string whole = test::read_bytes(source);
  ASSERT_GT(whole.size(), 4096u);
  expect_rejected(std::string_view(whole).substr(0, whole.size() - 100), {"truncated", "(100 missing)"});
  expect_rejected(std::string_view(whole).substr(0, 200), {"past the end"});
  expect_rejected(std::string_view(whole).substr(0, 7), {"too small"});
}

TEST_F(SafetensorsTest, WriterRejectsBytesNotMatchingShape) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f};
  const std::vector<TensorToWrite> tensors = {{"w", DType::kF32, {2, 2}, as_bytes(values)}};
  const auto path = dir_ / "out.safetensors";
  try {
    write_safetensors(path, tensors);
    ADD_FAILURE() << "write_safetensors accepted 12 bytes for shape [2, 2]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor w: 12 bytes given for shape [2, 2] of F32 (16 bytes)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(test::count_temporaries(dir_), 0);
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateNames) {
  const std::vector<float> values = {1.0f};
  const std::vector<TensorToWrite> tensors = {{"w", DType::kF32, {1}, as_bytes(values)},
                                              {"w", DType::kF32, {1}, as_bytes(values)}};
  EXPECT_THROW(write_safetensors(dir_ / "out.safetensors", tensors), Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out.safetensors"));
}

TEST_F(SafetensorsTest, FailedRenameRemovesTemporaryFile) {
  // A directory in the way makes the final rename fail after all bytes were written.
  const auto path = dir_ / "blocked.safetensors";
  std::filesystem::create_directories(path / "child");
  const std::vector<float> values = {1.0f};
  const std::vector<TensorToWrite> tensors = {{"w", DType::kF32, {1}, as_bytes(values)}};
  try {
    write_safetensors(path, tensors);
    ADD_FAILURE() << "write_safetensors renamed onto a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::count_temporaries(dir_), 0);
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

TEST_F(SafetensorsTest, WriterFailsCleanlyInMissingFolder) {
  const std::vector<TensorToWrite> tensors;
  EXPECT_THROW(write_safetensors(dir_ / "no" / "such" / "dir.safetensors", tensors), Error);
}

TEST_F(SafetensorsTest, OverwriteReplacesExistingFile) {
  const auto path = dir_ / "w.safetensors";
  const std::vector<float> first = {1.0f};
  const std::vector<float> second = {2.0f, 3.0f};
  write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::kF32, {1}, as_bytes(first)}});
  write_safetensors(path, std::vector<TensorToWrite>{{"v", DType::kF32, {2}, as_bytes(second)}});
  const auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), 1u);
  EXPECT_EQ(file->tensors()[0].name, "v");
}

// Found by the safetensors fuzz target: a tensor with a zero dimension holds no bytes whatever its
// other dimensions, and counting its elements must not overflow on them.
TEST_F(SafetensorsTest, ZeroDimensionBesideHugeOnesCountsNoElements) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})";
  write_bytes(dir_ / "zero.safetensors", safetensors_bytes(header, 0));
  const auto file = SafetensorsFile::open(dir_ / "zero.safetensors");
  const TensorInfo* w = file->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->n_elements(), 0);
  EXPECT_EQ(w->n_bytes, 0);
}

}  // namespace
}  // namespace chronos
