// MXFP4 weights stored as Hugging Face stores them (X_blocks + X_scales): the values Chronos decodes
// are transformers' own dequantization, bit for bit, and a Mixtral checkpoint whose experts are
// stored so loads them as MXFP4 (GGUF's bytes) and matches transformers on the dequantized model.
// Fixtures: tools/make_hf_mxfp4_fixtures.py.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "chronos/model.h"
#include "chronos/ops.h"
#include "chronos/quant.h"
#include "chronos/safetensors.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = CHRONOS_TEST_DATA_DIR;

// Every row of a tensor decoded by Chronos's own path (ops::weight_row_to_f32).
std::vector<float> decode(const TensorInfo& t) {
  const int64_t cols = t.shape.back();
  const int64_t rows = t.n_elements() / cols;
  std::vector<float> out(size_t(rows * cols));
  const WeightView view{t.data, t.dtype, rows, cols};
  for (int64_t r = 0; r < rows; ++r) ops::weight_row_to_f32(out.data() + r * cols, view, r);
  return out;
}

TEST(HfMxfp4, DecodesToTransformersValuesBitForBit) {
  const TensorStore stored = TensorStore::open(kFixtures / "io" / "hf_mxfp4.safetensors");
  const TensorStore expected = TensorStore::open(kFixtures / "io" / "hf_mxfp4_dequantized.safetensors");
  ASSERT_EQ(expected.all().size(), 3u);
  for (const TensorInfo* reference : expected.all()) {
    SCOPED_TRACE(reference->name);
    const TensorInfo& t = stored.get(reference->name);
    ASSERT_EQ(t.dtype, DType::kMXFP4);
    ASSERT_EQ(t.shape, reference->shape);
    ASSERT_EQ(reference->dtype, DType::kF32);
    const std::vector<float> got = decode(t);
    const auto* want = reinterpret_cast<const float*>(reference->data);
    // E2M1 code 8 is -0 in transformers' table; GGUF's integer grid (ggml's kvalues_mxfp4) has one
    // zero, so Chronos reads it as +0, as llama.cpp does. Equal values, different sign bits: the
    // only difference allowed.
    int64_t differing = 0, signed_zeros = 0, subnormal = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      subnormal += std::fpclassify(want[i]) == FP_SUBNORMAL;
      if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])) continue;
      if (got[i] == 0.0f && want[i] == 0.0f) {
        ++signed_zeros;
        continue;
      }
      if (differing++ == 0)
        ADD_FAILURE() << "first difference at " << i << ": " << got[i] << " vs transformers' " << want[i];
    }
    EXPECT_EQ(differing, 0) << "of " << got.size();
    EXPECT_GT(signed_zeros, 0) << "code 8 (-0) is in the fixture";
    if (reference->name.ends_with("gate_up_proj")) {
      EXPECT_GT(subnormal, 0) << "scale byte 0 is in the fixture";
    }
  }
}

struct Reference {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> logits;  // [n_tokens * n_vocab] per case
};

Reference read_reference(const fs::path& dir) {
  std::ifstream in(dir / "reference.json");
  const auto json = nlohmann::json::parse(in);
  Reference ref;
  for (const auto& c : json["cases"]) {
    ref.ids.push_back(c["ids"].get<std::vector<int32_t>>());
    auto& flat = ref.logits.emplace_back();
    for (const auto& row : c["logits"])
      for (float v : row.get<std::vector<float>>()) flat.push_back(v);
  }
  return ref;
}

const fs::path kMxfp4Model = kFixtures / "hf_mxfp4" / "mixtral-mxfp4";

TEST(HfMxfp4, MixtralExpertsLoadAsGgufMxfp4Bytes) {
  const auto model = Model::load(kMxfp4Model);
  const auto f32 = Model::load(kFixtures / "models" / "mixtral-f32");
  EXPECT_EQ(model->sizes().expert_dtype, DType::kMXFP4);
  EXPECT_EQ(model->sizes().expert_params, f32->sizes().expert_params);
  int64_t checked = 0;
  for (size_t il = 0; il < model->weights().layers.size(); ++il) {
    const auto& experts = model->weights().layers[il].experts;
    for (size_t e = 0; e < experts.size(); ++e) {
      const FfnWeights& w = experts[e];
      const FfnWeights& source = f32->weights().layers[il].experts[e];
      using Pair = std::pair<const WeightView*, const WeightView*>;
      for (const auto& [got, from] :
           {Pair{&w.gate, &source.gate}, Pair{&w.up, &source.up}, Pair{&w.down, &source.down}}) {
        ASSERT_EQ(got->dtype, DType::kMXFP4);
        ASSERT_EQ(got->rows, from->rows);
        ASSERT_EQ(got->cols, from->cols);
        // The fixture's pairs were made by gguf-py's quantizer, which Chronos's reproduces.
        const int64_t bytes = got->rows * dtype_row_bytes(DType::kMXFP4, got->cols);
        std::vector<std::byte> quantized(static_cast<size_t>(bytes));
        quantize_rows(DType::kMXFP4, static_cast<const float*>(from->data), quantized.data(), from->rows, from->cols);
        ASSERT_EQ(std::memcmp(got->data, quantized.data(), size_t(bytes)), 0) << "layer " << il << " expert " << e;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 8 * 3);
}

TEST(HfMxfp4, MixtralLogitsMatchTransformersOnTheDequantizedModel) {
  // The exact path (blocks dequantized, f32 products), as transformers computes in f32.
  const auto mode = ops::block_activation_mode();
  ops::set_block_activation_mode(ops::BlockActivationMode::kF32);
  const auto model = Model::load(kMxfp4Model);
  const Reference ref = read_reference(kMxfp4Model);
  const ModelConfig& c = model->config();
  ThreadPool pool(2);
  ASSERT_EQ(ref.ids.size(), 2u);
  for (size_t i = 0; i < ref.ids.size(); ++i) {
    const auto& ids = ref.ids[i];
    KvCache kv(c, std::ssize(ids) + 1);
    auto scratch = model->make_scratch(16, kv.n_ctx());
    std::vector<float> logits(ids.size() * size_t(c.n_vocab));
    model->forward(ids, 0, kv, *scratch, pool, logits.data(), true);
    ASSERT_EQ(logits.size(), ref.logits[i].size());
    double worst = 0;
    for (size_t k = 0; k < logits.size(); ++k) worst = std::max(worst, double(std::fabs(logits[k] - ref.logits[i][k])));
    EXPECT_LE(worst, 1e-3) << "prompt of " << ids.size() << " tokens";
  }
  ops::set_block_activation_mode(mode);
}

}  // namespace
}  // namespace chronos
