// Block-typed GGUF files against packs: a quantized GGUF fixture (tools/make_gguf_fixtures.py)
// computes exactly what the pack of its safetensors checkpoint quantized the same way computes,
// and a file whose experts mix types (a Q4_K_M-style mix) packs, streams and generates as it does
// resident, with the manifest listing every type.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/model_runner.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/thread_pool.h"
#include "engine/pack_logits.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = CHRONOS_TEST_DATA_DIR;
fs::path gguf_fixture(const std::string& name) { return kFixtures / "gguf" / (name + ".gguf"); }
fs::path checkpoint(const std::string& name) { return kFixtures / "models" / name; }

class GgufPack : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / fmt::format("chronos_gguf_pack_{}", ::getpid());
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  fs::path pack(const fs::path& source, std::optional<DType> type, const std::string& name) {
    const auto model = Model::load(source);
    PackOptions options;
    options.method = ClusterMethod::kNone;
    options.expert_type = type;
    options.dense_type = type;
    write_pack(*model, source, work_ / name, options, [](int64_t, int64_t) {});
    return work_ / name;
  }

  static std::vector<float> logits(const fs::path& dir, int64_t budget_bytes = 0) {
    return testing::prompt_logits(dir, 12, budget_bytes);
  }

  static void expect_equal(const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
  }

  fs::path work_;
};

// The fixtures hold the bytes Chronos's quantizer writes, so the GGUF file and the pack of the
// checkpoint quantized to the same type run the same weights: every logit equal, bit for bit.
TEST_F(GgufPack, QuantizedFileEqualsThePackOfItsCheckpointQuantizedTheSameWay) {
  const std::vector<std::pair<std::string, DType>> cases = {{"mixtral", DType::kQ8_0},
                                                            {"qwen2_moe", DType::kQ8_0},
                                                            {"qwen3_moe", DType::kQ8_0},
                                                            {"olmoe", DType::kQ8_0},
                                                            {"olmoe", DType::kQ4_K}};
  for (const auto& [model, type] : cases) {
    const std::string name = fmt::format("{}-{}", model, dtype_name(type));
    SCOPED_TRACE(name);
    const fs::path packed = pack(checkpoint(model + "-f32"), type, name);
    std::string lower(dtype_name(type));
    for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const fs::path file = gguf_fixture(model + "-" + lower);
    expect_equal(logits(file), logits(packed));
  }
}

// A Q4_K_M-style file: its experts' down projections are Q5_0 in layers 0-1 and Q8_0 in layer 2
// (the K types' fallbacks on the fixture's short rows).
TEST_F(GgufPack, MixedExpertTypesPackAndStream) {
  const fs::path file = gguf_fixture("mixtral-q4_k_m");
  const auto resident = Model::load(file);
  const ModelWeights& w = resident->weights();
  ASSERT_EQ(w.layers.size(), 3u);
  for (size_t il = 0; il < 3; ++il) {
    EXPECT_EQ(w.layers[il].experts[0].gate.dtype, DType::kQ5_0) << il;
    EXPECT_EQ(w.layers[il].experts[0].down.dtype, il == 2 ? DType::kQ8_0 : DType::kQ5_0) << il;
  }
  EXPECT_EQ(w.layers[2].wv.dtype, DType::kQ8_0);
  EXPECT_EQ(w.layers[0].wv.dtype, DType::kQ5_0);
  EXPECT_EQ(resident->sizes().expert_dtype, DType::kQ5_0);  // the type of most expert bytes

  const fs::path packed = pack(file, std::nullopt, "q4_k_m");
  const PackManifest manifest = PackManifest::load(packed);
  EXPECT_EQ(manifest.dtype, "Q5_0");
  EXPECT_EQ(manifest.dtypes, (std::vector<std::string>{"Q5_0", "Q8_0"}));
  std::set<int64_t> extent_bytes;
  for (const auto& [key, e] : manifest.experts) {
    EXPECT_EQ(e.down.dtype, key.layer == 2 ? DType::kQ8_0 : DType::kQ5_0);
    extent_bytes.insert(e.payload_bytes());
  }
  EXPECT_EQ(extent_bytes.size(), 2u);

  const auto expected = logits(file);
  expect_equal(logits(packed), expected);
  // Two slots of the largest expert: most experts are read on demand, each into a slot sized for
  // the largest; wait mode stays exact.
  int64_t largest = 0;
  for (const auto& [key, e] : manifest.experts) largest = std::max(largest, e.bytes);
  expect_equal(logits(packed, 2 * largest), expected);

  // A manifest that does not list the second type is refused, naming the tensor's type.
  auto json = nlohmann::json::parse(std::ifstream(packed / kManifestFileName));
  json["model"].erase("dtypes");
  std::ofstream(packed / kManifestFileName) << json.dump(1);
  try {
    PackManifest::load(packed);
    FAIL() << "a Q8_0 down projection was accepted in a Q5_0 pack";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is Q8_0, the manifest's expert type is Q5_0"), std::string::npos) << e.what();
  }
  json["model"]["dtypes"] = {"Q5_0", "Q9_9"};
  std::ofstream(packed / kManifestFileName) << json.dump(1);
  try {
    PackManifest::load(packed);
    FAIL() << "an unknown type in model.dtypes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.dtypes[1]: unknown dtype \"Q9_9\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chronos
