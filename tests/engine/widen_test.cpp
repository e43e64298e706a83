// widen_model: zero-padded experts compute the same function (logits, greedy tokens), the padded
// tensors hold the source values and exact zeros, and failures leave no output behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/safetensors.h"
#include "chronos/thread_pool.h"
#include "chronos/widen.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(CHRONOS_TEST_DATA_DIR) / "models";
constexpr int64_t kWideFfn = 96;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path)); }

std::vector<std::vector<int32_t>> reference_prompts(const fs::path& dir) {
  const nlohmann::json reference = read_json(dir / "reference.json");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : reference["cases"]) prompts.push_back(c["ids"].get<std::vector<int32_t>>());
  CHRONOS_CHECK(!prompts.empty());
  return prompts;
}

std::vector<float> all_logits(const Model& model, const std::vector<int32_t>& ids, ThreadPool& pool) {
  KvCache kv(model.config(), std::ssize(ids));
  auto scratch = model.make_scratch(16, kv.n_ctx());
  std::vector<float> logits(ids.size() * size_t(model.config().n_vocab));
  model.forward(ids, 0, kv, *scratch, pool, logits.data(), true);
  return logits;
}

std::vector<int32_t> greedy(const Model& model, const std::vector<int32_t>& prompt, int64_t n_new, ThreadPool& pool) {
  KvCache kv(model.config(), std::ssize(prompt) + n_new);
  auto scratch = model.make_scratch(16, kv.n_ctx());
  std::vector<float> logits(size_t(model.config().n_vocab));
  model.forward(prompt, 0, kv, *scratch, pool, logits.data(), false);
  std::vector<int32_t> out;
  for (int64_t pos = std::ssize(prompt); std::ssize(out) < n_new; ++pos) {
    out.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    model.forward(std::span<const int32_t>(&out.back(), 1), pos, kv, *scratch, pool, logits.data(), false);
  }
  return out;
}

class WidenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("chronos_widen_") + info->test_suite_name() + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

class WidenFixtureTest : public WidenTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(WidenFixtureTest, SameFunctionWithWiderExperts) {
  const fs::path source = kModels / GetParam();
  const fs::path out = dir_ / "wide";
  const WidenResult result = widen_model(source, out, {.expert_ffn = kWideFfn});
  EXPECT_EQ(result.n_shards, 1);
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));

  // config.json: only the expert-size key changed.
  const auto model = Model::load(source);
  const ModelConfig& c = model->config();
  const char* key = c.arch == Arch::kMixtral || c.arch == Arch::kOlmoe ? "intermediate_size" : "moe_intermediate_size";
  nlohmann::json expected_config = read_json(source / "config.json");
  EXPECT_EQ(expected_config[key].get<int64_t>(), c.n_ff_expert);
  expected_config[key] = kWideFfn;
  EXPECT_EQ(read_json(out / "config.json"), expected_config);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_EQ(read_file(out / file), read_file(source / file)) << file;
  EXPECT_FALSE(fs::exists(out / "reference.json"));

  // Tensors: experts padded with exact zeros around the source values, everything else identical.
  const TensorStore before = TensorStore::open(source);
  const TensorStore after = TensorStore::open(out);
  ASSERT_EQ(after.all().size(), before.all().size());
  const int64_t old_ffn = c.n_ff_expert;
  int64_t n_widened = 0;
  for (const TensorInfo* src : before.all()) {
    SCOPED_TRACE(src->name);
    const TensorInfo& dst = after.get(src->name);
    EXPECT_EQ(dst.dtype, src->dtype);
    const bool is_expert = src->name.find(".experts.") != std::string::npos;
    if (!is_expert) {
      EXPECT_EQ(dst.shape, src->shape);
      ASSERT_EQ(dst.n_bytes, src->n_bytes);
      EXPECT_EQ(std::memcmp(dst.data, src->data, size_t(src->n_bytes)), 0);
      continue;
    }
    ++n_widened;
    const auto* in = reinterpret_cast<const float*>(src->data);
    const auto* outv = reinterpret_cast<const float*>(dst.data);
    const bool is_down = src->shape[0] == c.n_embd && src->shape[1] == old_ffn;
    if (is_down) {  // [n_embd, I] -> [n_embd, N]: zero columns
      ASSERT_EQ(dst.shape, (std::vector<int64_t>{c.n_embd, kWideFfn}));
      for (int64_t r = 0; r < c.n_embd; ++r)
        for (int64_t col = 0; col < kWideFfn; ++col)
          ASSERT_EQ(outv[r * kWideFfn + col], col < old_ffn ? in[r * old_ffn + col] : 0.0f) << r << "," << col;
    } else {  // [I, n_embd] -> [N, n_embd]: zero rows
      ASSERT_EQ(dst.shape, (std::vector<int64_t>{kWideFfn, c.n_embd}));
      for (int64_t r = 0; r < kWideFfn; ++r)
        for (int64_t col = 0; col < c.n_embd; ++col)
          ASSERT_EQ(outv[r * c.n_embd + col], r < old_ffn ? in[r * c.n_embd + col] : 0.0f) << r << "," << col;
    }
  }
  EXPECT_EQ(n_widened, c.n_moe_layers() * c.n_expert * 3);
  EXPECT_EQ(result.n_widened, n_widened);

  // The widened model computes the same function: extra gate/up rows give silu(0) * 0 = 0, and
  // the extra down columns multiply those zeros; only the summation order differs.
  const auto wide = Model::load(out);
  EXPECT_EQ(wide->config().n_ff_expert, kWideFfn);
  ThreadPool pool(2);
  for (const auto& prompt : reference_prompts(source)) {
    SCOPED_TRACE(prompt.size());
    const auto expected = all_logits(*model, prompt, pool);
    const auto got = all_logits(*wide, prompt, pool);
    ASSERT_EQ(got.size(), expected.size());
    double max_diff = 0.0;
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(got[i] - expected[i])));
    EXPECT_LT(max_diff, 1e-4);
    EXPECT_EQ(greedy(*wide, prompt, 32, pool), greedy(*model, prompt, 32, pool));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WidenFixtureTest, ::testing::Values("qwen2_moe-f32", "mixtral-f32"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_F(WidenTest, ShardsLikeTransformersAboveTheLimit) {
  const fs::path source = kModels / "qwen2_moe-f32";
  const int64_t limit = 300'000;
  const WidenResult result = widen_model(source, dir_ / "sharded", {.expert_ffn = kWideFfn, .max_shard_bytes = limit});
  ASSERT_GT(result.n_shards, 1);
  const auto index = read_json(dir_ / "sharded" / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), result.total_bytes);
  std::set<std::string> shard_files;
  for (const auto& [name, file] : index["weight_map"].items()) shard_files.insert(file.get<std::string>());
  EXPECT_EQ(int64_t(shard_files.size()), result.n_shards);
  for (const auto& file : shard_files) {
    SCOPED_TRACE(file);
    const auto shard = SafetensorsFile::open(dir_ / "sharded" / file);
    int64_t bytes = 0;
    for (const auto& t : shard->tensors()) bytes += t.n_bytes;
    EXPECT_TRUE(bytes <= limit || shard->tensors().size() == 1) << bytes;
    EXPECT_EQ(shard->metadata().at("format"), "pt");
  }
  EXPECT_EQ(fs::path(*shard_files.begin()).filename().string(),
            fmt::format("model-00001-of-{:05}.safetensors", result.n_shards));

  // Same tensors as the single-file output, so the same logits bit for bit.
  widen_model(source, dir_ / "single", {.expert_ffn = kWideFfn});
  const auto sharded = Model::load(dir_ / "sharded");
  const auto single = Model::load(dir_ / "single");
  ThreadPool pool(1);
  const auto prompt = reference_prompts(source).front();
  EXPECT_EQ(all_logits(*sharded, prompt, pool), all_logits(*single, prompt, pool));
}

TEST_F(WidenTest, RefusesANarrowerOrEqualSize) {
  for (int64_t ffn : {int64_t(32), int64_t(16)}) {  // the Qwen2-MoE fixture's experts are 32 wide
    try {
      widen_model(kModels / "qwen2_moe-f32", dir_ / "out", {.expert_ffn = ffn});
      ADD_FAILURE() << "accepted --expert-ffn " << ffn;
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(fmt::format("--expert-ffn {}", ffn)), std::string::npos) << message;
      EXPECT_NE(message.find("expert FFN size 32"), std::string::npos) << message;
    }
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(WidenTest, RefusesBlockQuantizedWeights) {
  // Experts stored as Hugging Face MXFP4 pairs load as MXFP4 (a block type): refused by name.
  const fs::path source = fs::path(CHRONOS_TEST_DATA_DIR) / "hf_mxfp4" / "mixtral-mxfp4";
  try {
    widen_model(source, dir_ / "out", {.expert_ffn = kWideFfn});
    ADD_FAILURE() << "widened MXFP4 experts";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("tensor model.layers.0.block_sparse_moe.experts.0.w1.weight: MXFP4"), std::string::npos)
        << message;
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

// gpt-oss's experts are fused per layer with biases: refused by name, saying why.
TEST_F(WidenTest, RefusesGptOss) {
  try {
    widen_model(kModels / "gpt_oss-f32", dir_ / "out", {.expert_ffn = kWideFfn});
    ADD_FAILURE() << "widened gpt-oss";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-oss experts cannot be widened (they are fused per layer, with biases)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(WidenTest, RefusesAnExistingOutputFolder) {
  fs::create_directories(dir_ / "out");
  std::ofstream(dir_ / "out" / "keep.txt") << "mine";
  EXPECT_THROW(widen_model(kModels / "mixtral-f32", dir_ / "out", {.expert_ffn = kWideFfn}), Error);
  EXPECT_EQ(read_file(dir_ / "out" / "keep.txt"), "mine");
}

TEST_F(WidenTest, AFailureHalfWayLeavesNothing) {
  // A progress callback that throws stands in for a full disk or an interrupt mid-run.
  int calls = 0;
  WidenOptions options{.expert_ffn = kWideFfn, .max_shard_bytes = 300'000};
  options.progress = [&](int64_t done, int64_t total) {
    EXPECT_LE(done, total);
    if (++calls == 40) throw Error("stop here");
  };
  EXPECT_THROW(widen_model(kModels / "qwen2_moe-f32", dir_ / "out", options), Error);
  EXPECT_EQ(calls, 40);
  EXPECT_TRUE(fs::is_empty(dir_)) << "left: " << fs::directory_iterator(dir_)->path();
}

}  // namespace
}  // namespace chronos
