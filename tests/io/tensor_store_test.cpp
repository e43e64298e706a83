// TensorStore: single-file and sharded folders (the sharded fixture was written by
// transformers' save_pretrained), and every way a sharded folder can be broken.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "chronos/error.h"
#include "chronos/safetensors.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

using test::kFixtures;

class TensorStoreTest : public test::StoreDir {
 protected:
  // Writes a shard holding one F32 [2] tensor per name.
  void write_shard(const std::string& file, const std::vector<std::string>& names) {
    const std::vector<float> values = {1.0f, 2.0f};
    std::vector<TensorToWrite> tensors;
    for (const auto& name : names)
      tensors.push_back({name, DType::kF32, {2}, std::as_bytes(std::span<const float>(values))});
    write_safetensors(dir_ / file, tensors);
  }
  void write_index(const nlohmann::json& weight_map) {
    const nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    test::write_bytes(dir_ / "model.safetensors.index.json", index.dump());
  }
};

nlohmann::json read_json(const std::filesystem::path& path) { return nlohmann::json::parse(test::read_bytes(path)); }

TEST_F(TensorStoreTest, OpensSingleFileFolder) {
  const auto folder = kFixtures / "models" / "mixtral-f32";
  const TensorStore store = TensorStore::open(folder);
  const auto config = read_json(folder / "config.json");
  const int64_t hidden = config["hidden_size"];
  const int64_t vocab = config["vocab_size"];
  const int64_t layers = config["num_hidden_layers"];
  const int64_t experts = config["num_local_experts"];
  // embed, norm, lm_head; per layer 2 norms, q/k/v/o, router, and 3 tensors per expert.
  EXPECT_EQ(store.all().size(), size_t(3 + layers * (2 + 4 + 1 + 3 * experts)));
  const TensorInfo& norm = store.get("model.norm.weight");
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{hidden}));
  EXPECT_EQ(norm.dtype, DType::kF32);
  EXPECT_EQ(store.get("lm_head.weight").shape, (std::vector<int64_t>{vocab, hidden}));
  EXPECT_NE(store.find("model.layers.2.block_sparse_moe.experts.7.w2.weight"), nullptr);
  EXPECT_EQ(store.find("model.layers.3.input_layernorm.weight"), nullptr);

  const auto all = store.all();
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1]->name, all[i]->name);
  int64_t sum = 0;
  for (const auto* tensor : all) sum += tensor->n_bytes;
  EXPECT_EQ(store.total_bytes(), sum);
  // Float32 tensors only: total = 4 bytes per parameter.
  EXPECT_EQ(store.total_bytes() % 4, 0);
}

// Every committed checkpoint opens, and holds only the dtype its config.json declares.
TEST_F(TensorStoreTest, EveryFixtureModelOpensWithItsDeclaredDtype) {
  int n_folders = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures / "models")) {
    if (!entry.is_directory()) continue;
    ++n_folders;
    const auto config = read_json(entry.path() / "config.json");
    const std::string declared = config["dtype"];
    const DType expected = declared == "bfloat16" ? DType::kBF16 : DType::kF32;
    EXPECT_TRUE(declared == "bfloat16" || declared == "float32") << declared;
    // gpt-oss as released: the experts' fused projections are MXFP4 pairs, presented as one tensor.
    const bool mxfp4 =
        config.contains("quantization_config") && config["quantization_config"]["quant_method"] == "mxfp4";
    const TensorStore store = TensorStore::open(entry.path());
    ASSERT_FALSE(store.all().empty()) << entry.path();
    int n_mxfp4 = 0;
    for (const auto* tensor : store.all()) {
      const bool packed =
          mxfp4 && (tensor->name.ends_with("experts.gate_up_proj") || tensor->name.ends_with("experts.down_proj"));
      n_mxfp4 += packed ? 1 : 0;
      EXPECT_EQ(tensor->dtype, packed ? DType::kMXFP4 : expected) << entry.path() << " " << tensor->name;
    }
    EXPECT_EQ(n_mxfp4 > 0, mxfp4) << entry.path();
    // A vision-language checkpoint (Qwen3.5) nests its text model under model.language_model.
    const char* embeddings =
        config.contains("text_config") ? "model.language_model.embed_tokens.weight" : "model.embed_tokens.weight";
    EXPECT_NE(store.find(embeddings), nullptr) << entry.path();
  }
  EXPECT_GE(n_folders, 10);
}

TEST_F(TensorStoreTest, GetNamesMissingTensor) {
  const auto folder = kFixtures / "models" / "mixtral-tied-f32";
  const TensorStore store = TensorStore::open(folder);
  try {
    store.get("lm_head.weight");  // tied: save_pretrained does not write it
    ADD_FAILURE() << "lm_head.weight found in a tied checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), folder.string() + ": tensor lm_head.weight not found");
  }
}

TEST_F(TensorStoreTest, OpensSingleFileDirectly) {
  const TensorStore store = TensorStore::open(kFixtures / "models" / "olmoe-bf16" / "model.safetensors");
  EXPECT_EQ(store.get("model.layers.0.self_attn.q_norm.weight").dtype, DType::kBF16);
}

// The sharded fixture holds the same weights as qwen2_moe-f32, saved with a small max_shard_size.
TEST_F(TensorStoreTest, ShardedFolderMatchesSingleFileAndIndex) {
  const auto sharded_dir = kFixtures / "models" / "qwen2_moe-sharded-f32";
  const TensorStore sharded = TensorStore::open(sharded_dir);
  const TensorStore single = TensorStore::open(kFixtures / "models" / "qwen2_moe-f32");
  const auto index = read_json(sharded_dir / "model.safetensors.index.json");

  EXPECT_EQ(sharded.total_bytes(), index["metadata"]["total_size"].get<int64_t>());
  ASSERT_EQ(sharded.all().size(), index["weight_map"].size());
  std::set<std::string> files;
  for (const auto* tensor : sharded.all()) {
    files.insert(tensor->file);
    EXPECT_EQ(std::filesystem::path(tensor->file).filename(), index["weight_map"][tensor->name].get<std::string>());
    const TensorInfo* twin = single.find(tensor->name);
    ASSERT_NE(twin, nullptr) << tensor->name;
    EXPECT_EQ(twin->shape, tensor->shape);
    ASSERT_EQ(twin->n_bytes, tensor->n_bytes);
    EXPECT_EQ(std::memcmp(twin->data, tensor->data, size_t(tensor->n_bytes)), 0) << tensor->name;
  }
  EXPECT_GT(files.size(), 2u);
  EXPECT_EQ(sharded.all().size(), single.all().size());
}

TEST_F(TensorStoreTest, RejectsFolderWithoutWeights) {
  try {
    TensorStore::open(dir_);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no model.safetensors or model.safetensors.index.json in " + dir_.string());
  }
}

TEST_F(TensorStoreTest, RejectsMissingPath) { EXPECT_THROW(TensorStore::open(dir_ / "nowhere"), Error); }

TEST_F(TensorStoreTest, ShardedGood) {
  write_shard("a.safetensors", {"x", "y"});
  write_shard("b.safetensors", {"z"});
  write_index({{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}});
  const TensorStore store = TensorStore::open(dir_);
  EXPECT_EQ(store.all().size(), 3u);
  EXPECT_EQ(store.get("z").file, (dir_ / "b.safetensors").string());
  EXPECT_EQ(store.total_bytes(), 24);
}

TEST_F(TensorStoreTest, RejectsMissingShard) {
  write_shard("a.safetensors", {"x"});
  write_index({{"x", "a.safetensors"}, {"y", "gone.safetensors"}});
  expect_open_fails({"model.safetensors.index.json", "shard gone.safetensors", "tensor y", "does not exist"});
}

TEST_F(TensorStoreTest, RejectsTensorMissingFromItsShard) {
  write_shard("a.safetensors", {"x"});
  write_shard("b.safetensors", {"z"});
  write_index({{"x", "a.safetensors"}, {"y", "b.safetensors"}, {"z", "b.safetensors"}});
  expect_open_fails({"tensor y", "b.safetensors", "does not contain it"});
}

TEST_F(TensorStoreTest, RejectsTensorInTheWrongShard) {
  write_shard("a.safetensors", {"x", "y"});
  write_shard("b.safetensors", {"z"});
  write_index({{"x", "a.safetensors"}, {"y", "b.safetensors"}, {"z", "b.safetensors"}});
  expect_open_fails({"tensor y", "mapped to b.safetensors", "a.safetensors"});
}

TEST_F(TensorStoreTest, RejectsDuplicateAcrossShards) {
  write_shard("a.safetensors", {"x", "z"});
  write_shard("b.safetensors", {"z"});
  write_index({{"x", "a.safetensors"}, {"z", "b.safetensors"}});
  expect_open_fails({"tensor z", "a.safetensors", "b.safetensors"});
}

TEST_F(TensorStoreTest, RejectsBadShardInsideSet) {
  write_shard("a.safetensors", {"x"});
  test::write_bytes(dir_ / "b.safetensors", "junk");
  write_index({{"x", "a.safetensors"}, {"y", "b.safetensors"}});
  expect_open_fails({"b.safetensors", "too small"});
}

TEST_F(TensorStoreTest, RejectsShardOutsideFolder) {
  write_shard("a.safetensors", {"x"});
  write_index({{"x", "../a.safetensors"}});
  expect_open_fails({"tensor x", "not a plain file name"});
}

TEST_F(TensorStoreTest, RejectsMalformedIndex) {
  test::write_bytes(dir_ / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_open_fails({"model.safetensors.index.json", "weight_map"});
  test::write_bytes(dir_ / "model.safetensors.index.json", R"({"weight_map": {"x": 3}})");
  expect_open_fails({"model.safetensors.index.json", "x", "not a string"});
  test::write_bytes(dir_ / "model.safetensors.index.json", "{");
  expect_open_fails({"model.safetensors.index.json", "not valid JSON"});
}

TEST_F(TensorStoreTest, WarnsAboutTensorAbsentFromIndex) {
  write_shard("a.safetensors", {"x", "stray"});
  write_index({{"x", "a.safetensors"}});
  // Capture warnings through a ring-buffer logger for the duration of the open.
  const auto previous = spdlog::default_logger();
  const auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(8);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  const TensorStore store = TensorStore::open(dir_);
  spdlog::set_default_logger(previous);

  EXPECT_NE(store.find("stray"), nullptr);
  const auto lines = sink->last_formatted();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("tensor stray is not listed"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("a.safetensors"), std::string::npos) << lines[0];
}

TEST_F(TensorStoreTest, PrefersSingleFileOverIndex) {
  write_shard("model.safetensors", {"single"});
  write_index({{"x", "missing.safetensors"}});
  const TensorStore store = TensorStore::open(dir_);
  EXPECT_NE(store.find("single"), nullptr);
}

}  // namespace
}  // namespace chronos
