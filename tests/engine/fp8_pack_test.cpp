// Packing an FP8 block-scaled checkpoint: its pack equals the pack of the same weights dequantized
// by transformers (tests/fixtures/hf_fp8), as BF16 by default and converted to block types.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "chronos/model.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/safetensors.h"
#include "engine/pack_logits.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(CHRONOS_TEST_DATA_DIR) / "hf_fp8";

class Fp8Pack : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / ("chronos_fp8_pack_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  // As `chronos pack` does: FP8 weights kept as stored until each is converted.
  fs::path pack(const std::string& source, std::optional<DType> experts, std::optional<DType> dense,
                const std::string& name) {
    const auto model = Model::load(kDir / source, ModelLoadOptions{.keep_fp8 = true});
    PackOptions options;
    options.method = ClusterMethod::kNone;
    options.expert_type = experts;
    options.dense_type = dense;
    write_pack(*model, kDir / source, work_ / name, options, [](int64_t, int64_t) {});
    return work_ / name;
  }

  // Same dense tensors (names, types, shapes, bytes) and bit-equal logits.
  static void expect_same_pack(const fs::path& a, const fs::path& b) {
    const TensorStore da = TensorStore::open(a / "dense.safetensors");
    const TensorStore db = TensorStore::open(b / "dense.safetensors");
    ASSERT_EQ(da.all().size(), db.all().size());
    for (const TensorInfo* t : da.all()) {
      const TensorInfo* u = db.find(t->name);
      ASSERT_NE(u, nullptr) << t->name;
      EXPECT_EQ(t->dtype, u->dtype) << t->name;
      EXPECT_EQ(t->shape, u->shape) << t->name;
      ASSERT_EQ(t->n_bytes, u->n_bytes) << t->name;
      EXPECT_EQ(std::memcmp(t->data, u->data, size_t(t->n_bytes)), 0) << t->name;
    }
    EXPECT_EQ(PackManifest::parse(a).dtype, PackManifest::parse(b).dtype);
    const auto la = testing::prompt_logits(a, 12, 0, 2, 4);
    const auto lb = testing::prompt_logits(b, 12, 0, 2, 4);
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(la[i], lb[i]) << "logit " << i;
  }

  fs::path work_;
};

TEST_F(Fp8Pack, DefaultPackIsTheBf16PackOfTheDequantizedWeights) {
  const fs::path fp8 = pack("deepseek_v3-fp8", std::nullopt, std::nullopt, "fp8");
  const fs::path bf16 = pack("deepseek_v3-fp8-dequant", std::nullopt, std::nullopt, "bf16");
  EXPECT_EQ(PackManifest::parse(fp8).dtype, "BF16");
  const TensorStore dense = TensorStore::open(fp8 / "dense.safetensors");
  for (const TensorInfo* t : dense.all()) EXPECT_FALSE(t->name.ends_with("_scale_inv")) << t->name;
  expect_same_pack(fp8, bf16);
}

TEST_F(Fp8Pack, ConvertedPackEqualsTheDequantizedWeightsConverted) {
  const fs::path fp8 = pack("deepseek_v3-fp8", DType::kQ4_K, DType::kQ8_0, "fp8");
  const fs::path bf16 = pack("deepseek_v3-fp8-dequant", DType::kQ4_K, DType::kQ8_0, "bf16");
  EXPECT_EQ(PackManifest::parse(fp8).dtype, "Q4_K");
  expect_same_pack(fp8, bf16);
}

}  // namespace
}  // namespace chronos
