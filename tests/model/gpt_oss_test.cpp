// gpt-oss checkpoints: the fused experts split per expert at load, the pieces the parity fixtures
// cannot show on their own (the clamp's effect, a sink's), and the errors of a broken checkpoint.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/safetensors.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(CHRONOS_TEST_DATA_DIR) / "models";

// A copy of a fixture folder whose model.safetensors keeps the tensors `keep` accepts, each
// possibly replaced by `edit`.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chronos_gpt_oss_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string load_error(const std::string& fixture, const std::function<bool(const TensorInfo&)>& keep,
                         const std::function<void(TensorToWrite&)>& edit = {}) {
    for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(kModels / fixture / name, dir_ / name, fs::copy_options::overwrite_existing);
    const auto file = SafetensorsFile::open(kModels / fixture / "model.safetensors");
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& t : file->tensors()) {
      if (!keep(t)) continue;
      TensorToWrite w{t.name, t.dtype, t.shape, {t.data, size_t(t.n_bytes)}};
      if (edit) edit(w);
      tensors.push_back(w);
    }
    write_safetensors(dir_ / "model.safetensors", tensors);
    try {
      Model::load(dir_);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(BrokenCheckpoint, AMissingFusedTensorIsNamed) {
  const std::string message =
      load_error("gpt_oss-f32", [](const TensorInfo& t) { return t.name != "model.layers.1.mlp.experts.down_proj"; });
  EXPECT_NE(message.find("tensor model.layers.1.mlp.experts.down_proj is missing"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST_F(BrokenCheckpoint, AFusedTensorOfTheWrongShapeIsNamed) {
  // gate_up_proj [8, 64, 64] read as [8, 32, 128]: the same bytes, another shape.
  const std::string message = load_error(
      "gpt_oss-f32", [](const TensorInfo&) { return true; },
      [](TensorToWrite& w) {
        if (w.name == "model.layers.0.mlp.experts.gate_up_proj") w.shape = {8, 32, 128};
      });
  EXPECT_NE(message.find("tensor model.layers.0.mlp.experts.gate_up_proj: shape [8,32,128], expected [8,64,64]"),
            std::string::npos)
      << message;
}

TEST_F(BrokenCheckpoint, AMissingBiasOfAnMxfp4CheckpointIsNamed) {
  const std::string message = load_error(
      "gpt_oss-mxfp4", [](const TensorInfo& t) { return t.name != "model.layers.2.mlp.experts.gate_up_proj_bias"; });
  EXPECT_NE(message.find("tensor model.layers.2.mlp.experts.gate_up_proj_bias is missing"), std::string::npos)
      << message;
}

// The split is exact: expert e's gate row i is the fused matrix's column 2i, up's column 2i + 1,
// down the fused [I, H] transposed, and the fused bias alternates gate and up.
TEST(GptOss, FusedExpertsSplitAsTheirColumnsInterleave) {
  const auto model = Model::load(kModels / "gpt_oss-f32");
  const ModelConfig& c = model->config();
  const auto file = SafetensorsFile::open(kModels / "gpt_oss-f32" / "model.safetensors");
  const TensorInfo* fused = nullptr;
  const TensorInfo* fused_down = nullptr;
  const TensorInfo* fused_bias = nullptr;
  for (const TensorInfo& t : file->tensors()) {
    if (t.name == "model.layers.1.mlp.experts.gate_up_proj") fused = &t;
    if (t.name == "model.layers.1.mlp.experts.down_proj") fused_down = &t;
    if (t.name == "model.layers.1.mlp.experts.gate_up_proj_bias") fused_bias = &t;
  }
  ASSERT_TRUE(fused && fused_down && fused_bias);
  const int64_t H = c.n_embd, I = c.n_ff_expert;
  const auto* gu = reinterpret_cast<const float*>(fused->data);
  const auto* dn = reinterpret_cast<const float*>(fused_down->data);
  const auto* gub = reinterpret_cast<const float*>(fused_bias->data);
  const LayerWeights& l = model->weights().layers[1];
  for (int64_t e : {int64_t(0), int64_t(5)}) {
    const FfnWeights& w = l.experts[size_t(e)];
    ASSERT_EQ(w.gate.dtype, DType::kF32);
    const auto* gate = static_cast<const float*>(w.gate.data);
    const auto* up = static_cast<const float*>(w.up.data);
    const auto* down = static_cast<const float*>(w.down.data);
    for (int64_t i = 0; i < I; ++i)
      for (int64_t h = 0; h < H; ++h) {
        ASSERT_EQ(gate[i * H + h], gu[(e * H + h) * 2 * I + 2 * i]);
        ASSERT_EQ(up[i * H + h], gu[(e * H + h) * 2 * I + 2 * i + 1]);
        ASSERT_EQ(down[h * I + i], dn[(e * I + i) * H + h]);
      }
    for (int64_t i = 0; i < I; ++i) {
      EXPECT_EQ(l.expert_gate_bias[size_t(e * I + i)], gub[e * 2 * I + 2 * i]);
      EXPECT_EQ(l.expert_up_bias[size_t(e * I + i)], gub[e * 2 * I + 2 * i + 1]);
    }
  }
  // The fused tensors are not reported unused, and every tensor the model lists is a split one.
  for (const TensorInfo* t : model->all_tensors()) EXPECT_FALSE(t->name.ends_with("gate_up_proj")) << t->name;
}

// The MXFP4 checkpoint's experts stay MXFP4: gate and up are the fused matrix's even and odd rows.
TEST(GptOss, Mxfp4ExpertsKeepTheirType) {
  const auto model = Model::load(kModels / "gpt_oss-mxfp4");
  const FfnWeights& w = model->weights().layers[0].experts[3];
  EXPECT_EQ(w.gate.dtype, DType::kMXFP4);
  EXPECT_EQ(w.up.dtype, DType::kMXFP4);
  EXPECT_EQ(w.down.dtype, DType::kMXFP4);
  EXPECT_EQ(w.gate.rows, model->config().n_ff_expert);
  EXPECT_EQ(w.down.rows, model->config().n_embd);
  EXPECT_EQ(model->sizes().expert_dtype, DType::kMXFP4);
}

// The sliding layers' ring: a runner keeps window + batch - 1 positions of them, and the 40-token
// prompt (five windows of 8) still gives transformers' logits at every position, prefilled in
// chunks of 1, 3 and 8 rows, the ring wrapping within a chunk's keys.
TEST(GptOss, SlidingLayersKeepOnlyTheirWindowAndStillMatchTransformers) {
  const fs::path dir = kModels / "gpt_oss-f32";
  const auto model = Model::load(dir);
  const ModelConfig& c = model->config();
  std::ifstream in(dir / "reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto& longest = ref["cases"][2];
  const auto ids = longest["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 40u);
  ThreadPool pool(2);
  for (const int64_t batch : {int64_t(1), int64_t(3), int64_t(8)}) {
    const int64_t n_ctx = 64;
    EXPECT_EQ(KvStore::layer_positions(c, 0, n_ctx, batch), 8 + batch - 1);
    EXPECT_EQ(KvStore::layer_positions(c, 1, n_ctx, batch), n_ctx);  // the full layer
    EXPECT_EQ(KvStore::bytes_per_slot(c, n_ctx, batch),
              (2 * (8 + batch - 1) + n_ctx) * 2 * c.kv_dim() * int64_t(sizeof(float)));
    const auto runner = make_cpu_runner(*model, pool, n_ctx, batch, {}, 1);
    EXPECT_EQ(runner->memory().kv_cache_bytes, KvStore::bytes_per_slot(c, n_ctx, batch));
    std::vector<float> logits(ids.size() * size_t(c.n_vocab));
    runner->forward(ids, 0, logits.data(), true);
    double worst = 0.0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto row = longest["logits"][t].get<std::vector<float>>();
      for (int64_t v = 0; v < c.n_vocab; ++v)
        worst = std::max(worst, double(std::fabs(logits[t * size_t(c.n_vocab) + size_t(v)] - row[size_t(v)])));
    }
    EXPECT_LE(worst, 1e-3) << "batch " << batch;
  }
}

}  // namespace
}  // namespace chronos
