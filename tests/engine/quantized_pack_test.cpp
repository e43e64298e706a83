// Packs with block-quantized experts and dense matrices (pack --expert-type / --dense-type): the
// pack loads, its quantized tensors keep GGUF's bytes, and the forward over them computes what the
// f32 forward computes over the same weights dequantized (an independent path: the block kernels
// against the f32 kernels), and stays close to the unquantized model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <map>
#include <nlohmann/json.hpp>

#include "chronos/backend.h"
#include "chronos/expert_streamer.h"
#include "chronos/model_runner.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/quant.h"
#include "chronos/safetensors.h"
#include "chronos/thread_pool.h"
#include "engine/pack_logits.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }

class QuantizedPack : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / fmt::format("chronos_quantized_pack_{}", ::getpid());
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  fs::path pack(const fs::path& dir, std::optional<DType> experts, std::optional<DType> dense, const char* name) {
    const auto model = Model::load(dir);
    PackOptions options;
    options.method = ClusterMethod::kNone;
    options.expert_type = experts;
    options.dense_type = dense;
    write_pack(*model, dir, work_ / name, options, [](int64_t, int64_t) {});
    return work_ / name;
  }

  // The checkpoint `source` with every tensor replaced by the pack's version of it, dequantized to
  // f32: dense tensors from dense.safetensors, experts from their cluster files.
  fs::path dequantized_checkpoint(const fs::path& source, const fs::path& pack_dir) {
    const fs::path out = work_ / (pack_dir.filename().string() + "-dequantized");
    fs::create_directories(out);
    for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      if (fs::exists(source / file)) fs::copy_file(source / file, out / file);
    const auto packed = Model::load(pack_dir);
    const ModelConfig& c = packed->config();
    const PackManifest manifest = PackManifest::load(pack_dir);
    std::map<int32_t, std::unique_ptr<SafetensorsFile>> clusters;
    for (const PackCluster& cluster : manifest.clusters)
      clusters[cluster.id] = SafetensorsFile::open(pack_dir / cluster.file);
    const TensorStore dense = TensorStore::open(pack_dir / "dense.safetensors");

    std::vector<std::vector<float>> storage;
    std::vector<TensorToWrite> tensors;
    auto add = [&](const std::string& name, const WeightView& w) {
      std::vector<float>& values = storage.emplace_back(size_t(w.rows * w.cols));
      for (int64_t r = 0; r < w.rows; ++r) ops::weight_row_to_f32(values.data() + r * w.cols, w, r);
      tensors.push_back(
          {name, DType::kF32, {w.rows, w.cols}, std::as_bytes(std::span<const float>(values.data(), values.size()))});
    };
    storage.reserve(4096);
    const ModelWeights& weights = packed->weights();
    for (const TensorSpec& spec : arch_spec(c.arch).tensor_table(c)) {
      if (spec.expert >= 0) {
        const PackedExpert& e = manifest.experts.at(ExpertKey{int32_t(spec.layer), int32_t(spec.expert)});
        const PackedTensor& t = spec.role == TensorRole::kExpertGate ? e.gate
                                : spec.role == TensorRole::kExpertUp ? e.up
                                                                     : e.down;
        const TensorInfo* info =
            clusters.at(e.cluster)->find(ctsr_tensor_name(e.key, spec.role == TensorRole::kExpertGate ? "gate"
                                                                 : spec.role == TensorRole::kExpertUp ? "up"
                                                                                                      : "down"));
        add(spec.name, WeightView{info->data, t.dtype, t.shape[0], t.shape[1]});
        continue;
      }
      // Dense tensors: the loaded model's views (block types included), except vectors, which
      // are copied as stored.
      const TensorInfo* info = dense.find(spec.name);
      if (info == nullptr) continue;  // tied LM head
      const LayerWeights* l = spec.layer >= 0 ? &weights.layers[size_t(spec.layer)] : nullptr;
      const WeightView* view = nullptr;
      switch (spec.role) {
        case TensorRole::kTokenEmbd: view = &weights.tok_embd; break;
        case TensorRole::kOutput: view = &weights.output; break;
        case TensorRole::kAttnQ: view = &l->wq; break;
        case TensorRole::kAttnK: view = &l->wk; break;
        case TensorRole::kAttnV: view = &l->wv; break;
        case TensorRole::kAttnO: view = &l->wo; break;
        case TensorRole::kSharedGate: view = &l->shared.gate; break;
        case TensorRole::kSharedUp: view = &l->shared.up; break;
        case TensorRole::kSharedDown: view = &l->shared.down; break;
        case TensorRole::kDenseGate: view = &l->dense.gate; break;
        case TensorRole::kDenseUp: view = &l->dense.up; break;
        case TensorRole::kDenseDown: view = &l->dense.down; break;
        default: break;
      }
      if (view != nullptr) {
        add(spec.name, *view);
      } else {  // norms, biases, router, shared-expert gate: unchanged by the pack
        std::vector<float>& values = storage.emplace_back(size_t(info->n_elements()));
        ops::weight_row_to_f32(values.data(), WeightView{info->data, info->dtype, 1, info->n_elements()}, 0);
        tensors.push_back(
            {spec.name, DType::kF32, info->shape, std::as_bytes(std::span<const float>(values.data(), values.size()))});
      }
    }
    write_safetensors(out / "model.safetensors", tensors);
    return out;
  }

  static std::vector<float> logits(const fs::path& dir, int64_t n_tokens = 12) {
    return testing::prompt_logits(dir, n_tokens);
  }

  static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    return worst;
  }

  fs::path work_;
};

struct Case {
  const char* model;
  std::optional<DType> experts, dense;
};

TEST_F(QuantizedPack, ForwardEqualsTheF32ForwardOverTheDequantizedWeights) {
  // The exact path (each block dequantized, f32 products); the 8-bit-activation default rounds the
  // activations, which this comparison would measure instead of the layouts and the loader.
  ops::set_block_activation_mode(ops::BlockActivationMode::kF32);
  const fs::path demo = fs::path(CHRONOS_SOURCE_DIR) / "models" / "default";
  const std::vector<std::pair<fs::path, Case>> cases = {
      {fixture("qwen2_moe-f32"), {"qwen2_moe-f32", DType::kQ8_0, DType::kQ8_0}},
      {fixture("mixtral-bf16"), {"mixtral-bf16", DType::kQ4_0, std::nullopt}},
      {fixture("olmoe-f32"), {"olmoe-f32", DType::kQ2_K, DType::kQ4_K}},  // K types fall back on 64-wide rows
      {demo, {"demo", DType::kQ4_K, DType::kQ8_0}},                       // Q4_K on 256-wide rows, Q5_0 on 128
  };
  for (const auto& [dir, test] : cases) {
    SCOPED_TRACE(test.model);
    const fs::path packed = pack(dir, test.experts, test.dense, test.model);
    const PackManifest manifest = PackManifest::load(packed);
    EXPECT_EQ(manifest.dtype, dtype_name(*test.experts));
    for (const auto& [key, e] : manifest.experts)
      for (const PackedTensor* t : {&e.gate, &e.up, &e.down})
        ASSERT_TRUE(dtype_is_block(t->dtype)) << "layer " << key.layer << " expert " << key.expert;
    const auto quantized = logits(packed);
    const auto reference = logits(dequantized_checkpoint(dir, packed));
    // Same weights, two kernel families: only the summation order differs.
    EXPECT_LE(max_abs_diff(quantized, reference), 2e-3);
  }
}

TEST_F(QuantizedPack, DemoModelAt8BitsStaysCloseToBf16) {
  const fs::path demo = fs::path(CHRONOS_SOURCE_DIR) / "models" / "default";
  const auto exact = logits(demo, 24);
  const auto q8 = logits(pack(demo, DType::kQ8_0, DType::kQ8_0, "demo-q8"), 24);
  const int64_t n_vocab = int64_t(exact.size()) / 24;
  int agree = 0;
  for (int64_t t = 0; t < 24; ++t) {
    const auto row = [&](const std::vector<float>& v) { return v.begin() + t * n_vocab; };
    agree += std::max_element(row(exact), row(exact) + n_vocab) - row(exact) ==
             std::max_element(row(q8), row(q8) + n_vocab) - row(q8);
  }
  EXPECT_GE(agree, 22) << "top-1 agreement of Q8_0 with the bf16 model, of 24 positions";
  EXPECT_LE(max_abs_diff(exact, q8), 0.5);
}

// The MoE block sizes its row chunks by the pool's thread count (decode: about 8 tasks per
// thread); every chunking must give the same bits. A prompt, then single-token decode steps, on
// 1, 2 and 3 threads, through the 8-bit-activation kernels of a Q4_K / Q8_0 pack.
TEST_F(QuantizedPack, LogitsAreTheSameBitsOnAnyThreadCount) {
  const fs::path packed =
      pack(fs::path(CHRONOS_SOURCE_DIR) / "models" / "default", DType::kQ4_K, DType::kQ8_0, "demo-threads");
  const auto run = [&](int64_t threads) { return testing::prompt_logits(packed, 12, 0, threads, 4); };
  const std::vector<float> one = run(1);
  for (int64_t threads : {2, 3}) {
    const std::vector<float> other = run(threads);
    ASSERT_EQ(other.size(), one.size());
    size_t differing = 0;
    for (size_t i = 0; i < one.size(); ++i)
      differing += std::bit_cast<uint32_t>(one[i]) != std::bit_cast<uint32_t>(other[i]);
    EXPECT_EQ(differing, 0u) << threads << " threads against 1";
  }
}

// A checkpoint whose experts are Hugging Face MXFP4 pairs (X_blocks + X_scales): the pack keeps
// them as MXFP4, byte for byte, and computes what the checkpoint computes.
TEST_F(QuantizedPack, HfMxfp4ExpertsStayMxfp4) {
  const fs::path source = fs::path(CHRONOS_TEST_DATA_DIR) / "hf_mxfp4" / "mixtral-mxfp4";
  const fs::path packed = pack(source, std::nullopt, std::nullopt, "hf-mxfp4");
  const PackManifest manifest = PackManifest::load(packed);
  EXPECT_EQ(manifest.dtype, "MXFP4");
  EXPECT_TRUE(manifest.dtypes.empty());
  const auto checkpoint = Model::load(source);
  for (const auto& [key, e] : manifest.experts) {
    const auto cluster = SafetensorsFile::open(packed / manifest.clusters.at(size_t(e.cluster)).file);
    const FfnWeights& w = checkpoint->weights().layers[size_t(key.layer)].experts[size_t(key.expert)];
    for (const auto& [proj, t, view] :
         {std::tuple{"gate", &e.gate, &w.gate}, std::tuple{"up", &e.up, &w.up}, std::tuple{"down", &e.down, &w.down}}) {
      ASSERT_EQ(t->dtype, DType::kMXFP4) << "layer " << key.layer << " expert " << key.expert << " " << proj;
      const TensorInfo* stored = cluster->find(ctsr_tensor_name(key, proj));
      ASSERT_NE(stored, nullptr);
      ASSERT_EQ(stored->n_bytes, view->rows * dtype_row_bytes(DType::kMXFP4, view->cols));
      EXPECT_EQ(std::memcmp(stored->data, view->data, size_t(stored->n_bytes)), 0) << proj;
    }
  }
  EXPECT_EQ(max_abs_diff(logits(packed), logits(source)), 0.0);
}

TEST_F(QuantizedPack, DenseMetadataIsCheckedAtLoad) {
  const fs::path packed = pack(fixture("qwen2_moe-f32"), DType::kQ8_0, DType::kQ8_0, "bad-metadata");
  // Rewrite dense.safetensors with one quantized tensor claiming another type: its bytes no longer fit.
  const TensorStore store = TensorStore::open(packed / "dense.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo* t : store.all())
    tensors.push_back({t->name, t->dtype, t->shape, std::span<const std::byte>(t->data, size_t(t->n_bytes))});
  auto metadata = nlohmann::json::parse(*store.metadata(kQuantizedTensorsKey));
  const std::string victim = metadata.begin().key();
  metadata[victim]["dtype"] = "Q4_0";
  write_safetensors(work_ / "dense.safetensors", tensors, {{kQuantizedTensorsKey, metadata.dump()}});
  fs::rename(work_ / "dense.safetensors", packed / "dense.safetensors");
  try {
    Model::load(packed);
    FAIL() << "a quantized tensor whose bytes do not match its type was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(victim), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chronos
