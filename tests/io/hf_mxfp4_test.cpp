// TensorStore's MXFP4 pairs (X_blocks + X_scales, as gpt-oss stores them): the nibble repack, the
// presented tensor, pairs split over shards, and every way a pair can be malformed.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "chronos/error.h"
#include "chronos/safetensors.h"
#include "io/hf_mxfp4.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

using test::kFixtures;

// One tensor to write, its bytes a fixed pattern sized for the shape.
struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

class HfMxfp4Test : public test::StoreDir {
 protected:
  void write(const std::string& file, const std::vector<Spec>& specs) {
    std::vector<std::vector<std::byte>> storage;
    storage.reserve(specs.size());
    std::vector<TensorToWrite> tensors;
    for (const Spec& s : specs) {
      int64_t n = dtype_size(s.dtype);
      for (int64_t dim : s.shape) n *= dim;
      auto& bytes = storage.emplace_back(size_t(n));
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 37 + 11);
      tensors.push_back({s.name, s.dtype, s.shape, bytes});
    }
    write_safetensors(dir_ / file, tensors);
  }
};

// HF order: byte j holds weights 2j (low nibble) and 2j+1 (high); GGUF order: byte j holds
// weights j (low) and j+16 (high). A block whose weight k has code k % 16 (and k / 16 in bit 3 of
// the second half, so that the halves differ) checks every position.
TEST(HfMxfp4Block, MovesEachNibbleToGgufsPosition) {
  uint8_t code[32];
  for (int k = 0; k < 32; ++k) code[k] = uint8_t((k % 16) ^ (k >= 16 ? 0x8 : 0));
  uint8_t hf[16];
  for (int j = 0; j < 16; ++j) hf[j] = uint8_t(code[2 * j] | (code[2 * j + 1] << 4));
  uint8_t gguf[17];
  io_detail::hf_mxfp4_block_to_gguf(hf, 0x7d, gguf);
  EXPECT_EQ(gguf[0], 0x7d) << "the E8M0 byte is copied as it is";
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(gguf[1 + j] & 0x0F, code[j]) << "weight " << j;
    EXPECT_EQ(gguf[1 + j] >> 4, code[j + 16]) << "weight " << j + 16;
  }
}

TEST_F(HfMxfp4Test, PresentsEachPairAsOneMxfp4Tensor) {
  const TensorStore store = TensorStore::open(kFixtures / "io" / "hf_mxfp4.safetensors");
  const std::string experts = "model.layers.0.mlp.experts.";
  const TensorInfo& gate_up = store.get(experts + "gate_up_proj");  // blocks [2, 6, 3, 16]
  EXPECT_EQ(gate_up.dtype, DType::kMXFP4);
  EXPECT_EQ(gate_up.shape, (std::vector<int64_t>{2, 6, 96}));
  EXPECT_EQ(gate_up.n_bytes, 2 * 6 * 3 * 17);
  const TensorInfo& down = store.get(experts + "down_proj");  // flattened blocks [2, 5, 32]
  EXPECT_EQ(down.dtype, DType::kMXFP4);
  EXPECT_EQ(down.shape, (std::vector<int64_t>{2, 5, 64}));
  EXPECT_EQ(store.get("model.layers.0.self_attn.o_proj.weight").shape, (std::vector<int64_t>{4, 32}));
  // The bias beside the pair is an ordinary tensor; the pairs themselves are gone.
  EXPECT_EQ(store.get(experts + "gate_up_proj_bias").dtype, DType::kBF16);
  EXPECT_EQ(store.find(experts + "gate_up_proj_blocks"), nullptr);
  EXPECT_EQ(store.find(experts + "gate_up_proj_scales"), nullptr);
  EXPECT_EQ(store.all().size(), 4u);

  // Bytes: block b is the scale byte, then the 16 bytes repacked.
  const auto file = SafetensorsFile::open(kFixtures / "io" / "hf_mxfp4.safetensors");
  const TensorInfo& blocks = *file->find(experts + "gate_up_proj_blocks");
  const TensorInfo& scales = *file->find(experts + "gate_up_proj_scales");
  EXPECT_EQ(gate_up.file, blocks.file);
  EXPECT_EQ(gate_up.file_offset, blocks.file_offset);
  const auto* in = reinterpret_cast<const uint8_t*>(blocks.data);
  const auto* out = reinterpret_cast<const uint8_t*>(gate_up.data);
  for (int64_t b = 0; b < scales.n_bytes; ++b) {
    uint8_t expected[17];
    io_detail::hf_mxfp4_block_to_gguf(in + 16 * b, uint8_t(scales.data[b]), expected);
    ASSERT_EQ(std::memcmp(out + 17 * b, expected, 17), 0) << "block " << b;
  }
}

TEST_F(HfMxfp4Test, PairsAcrossShards) {
  write("a.safetensors", {{"w_blocks", DType::kU8, {3, 2, 16}}, {"other", DType::kF32, {2}}});
  write("b.safetensors", {{"w_scales", DType::kU8, {3, 2}}});
  const nlohmann::json index = {
      {"weight_map", {{"w_blocks", "a.safetensors"}, {"other", "a.safetensors"}, {"w_scales", "b.safetensors"}}}};
  test::write_bytes(dir_ / "model.safetensors.index.json", index.dump());
  const TensorStore store = TensorStore::open(dir_);
  EXPECT_EQ(store.get("w").shape, (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(store.get("w").dtype, DType::kMXFP4);
  EXPECT_EQ(store.all().size(), 2u);
  EXPECT_EQ(store.total_bytes(), 3 * 2 * 17 + 8);
}

TEST_F(HfMxfp4Test, BlocksWithoutScales) {
  write("model.safetensors", {{"layer.w_blocks", DType::kU8, {4, 2, 16}}});
  expect_open_fails({"model.safetensors", "tensor layer.w_blocks", "no layer.w_scales"});
}

TEST_F(HfMxfp4Test, ScalesWithoutBlocks) {
  write("model.safetensors", {{"layer.w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor layer.w_scales", "no layer.w_blocks"});
}

TEST_F(HfMxfp4Test, ANonU8TensorThatOnlyEndsSoIsLeftAlone) {
  write("model.safetensors", {{"norm_scales", DType::kF32, {4}}, {"conv_blocks", DType::kF16, {2, 3}}});
  const TensorStore store = TensorStore::open(dir_);
  EXPECT_EQ(store.get("norm_scales").dtype, DType::kF32);
  EXPECT_EQ(store.get("conv_blocks").dtype, DType::kF16);
}

TEST_F(HfMxfp4Test, WrongDtypes) {
  write("model.safetensors", {{"w_blocks", DType::kF16, {4, 2, 8}}, {"w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor w_blocks", "dtype F16, expected U8"});
  write("model.safetensors", {{"w_blocks", DType::kU8, {4, 2, 16}}, {"w_scales", DType::kF32, {4, 2}}});
  expect_open_fails({"tensor w_scales", "dtype F32, expected U8"});
}

TEST_F(HfMxfp4Test, MismatchedShapes) {
  write("model.safetensors", {{"w_blocks", DType::kU8, {4, 3, 16}}, {"w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor w_blocks", "shape [4, 3, 16] does not fit w_scales [4, 2]", "expected [4, 2, 16]"});
  write("model.safetensors", {{"w_blocks", DType::kU8, {4, 2, 8}}, {"w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor w_blocks", "shape [4, 2, 8]", "expected [4, 2, 16]"});
  write("model.safetensors", {{"w_blocks", DType::kU8, {2, 4, 2, 16}}, {"w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor w_blocks", "expected [4, 2, 16]"});
  write("model.safetensors", {{"w_blocks", DType::kU8, {4, 48}}, {"w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor w_blocks", "shape [4, 48]", "expected [4, 2, 16]"});
  write("model.safetensors", {{"w_blocks", DType::kU8, {16}}, {"w_scales", DType::kU8, {}}});
  expect_open_fails({"tensor w_scales", "a scalar"});
}

TEST_F(HfMxfp4Test, ColumnsNotAMultipleOf32) {
  // Flattened blocks of 24 bytes a row: 48 values, not whole 32-value blocks.
  write("model.safetensors", {{"w_blocks", DType::kU8, {4, 24}}, {"w_scales", DType::kU8, {4, 2}}});
  expect_open_fails({"tensor w_blocks", "rows of 24 bytes hold 48 values, not a multiple of 32"});
}

TEST_F(HfMxfp4Test, WeightAlsoStoredPlainly) {
  write("model.safetensors",
        {{"w", DType::kF32, {4, 32}}, {"w_blocks", DType::kU8, {4, 1, 16}}, {"w_scales", DType::kU8, {4, 1}}});
  expect_open_fails({"tensor w:", "also stored as the MXFP4 pair w_blocks / w_scales"});
}

}  // namespace
}  // namespace chronos
