// FP8 block-scaled checkpoints (X.weight F8_E4M3 + X.weight_scale_inv, DeepSeek-V3 style): every
// code decodes as torch decodes it, the weights Chronos binds are transformers' dequantization bit
// for bit, the model's logits match transformers', and bad files are one clear error each.
// Fixtures: tools/make_hf_fp8_fixtures.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/ops.h"
#include "chronos/safetensors.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(CHRONOS_TEST_DATA_DIR) / "hf_fp8";
const fs::path kFp8 = kDir / "deepseek_v3-fp8";
const fs::path kDequant = kDir / "deepseek_v3-fp8-dequant";

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

TEST(Fp8, EveryCodeDecodesAsTorchDecodesIt) {
  const TensorStore codes = TensorStore::open(kDir / "codes.safetensors");
  const auto* e4m3 = reinterpret_cast<const uint8_t*>(codes.get("e4m3").data);
  const auto* e8m0 = reinterpret_cast<const uint8_t*>(codes.get("e8m0").data);
  const auto* e4m3_f32 = reinterpret_cast<const float*>(codes.get("e4m3_f32").data);
  const auto* e8m0_f32 = reinterpret_cast<const float*>(codes.get("e8m0_f32").data);
  ASSERT_EQ(codes.get("e4m3").dtype, DType::kF8E4M3);
  int nans = 0;
  for (int i = 0; i < 256; ++i) {
    EXPECT_TRUE(same_bits(f8e4m3_to_f32(e4m3[i]), e4m3_f32[i])) << "E4M3 code " << i;
    EXPECT_EQ(f8e4m3_is_nan(e4m3[i]), std::isnan(e4m3_f32[i])) << "E4M3 code " << i;
    EXPECT_TRUE(same_bits(f8e8m0_to_f32(e8m0[i]), e8m0_f32[i])) << "E8M0 code " << i;
    nans += std::isnan(e4m3_f32[i]) ? 1 : 0;
  }
  EXPECT_EQ(nans, 2);
}

// Each matrix of a layer, by what it is.
std::vector<std::pair<std::string, const WeightView*>> matrices(const ModelWeights& w) {
  std::vector<std::pair<std::string, const WeightView*>> out = {{"tok_embd", &w.tok_embd}, {"output", &w.output}};
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& l = w.layers[il];
    const std::string p = "layer " + std::to_string(il) + " ";
    for (const auto& [name, view] : {std::pair{"q_a", &l.wq_a},
                                     {"q_b", &l.wq_b},
                                     {"kv_a", &l.wkv_a},
                                     {"kv_b", &l.wkv_b},
                                     {"o", &l.wo},
                                     {"router", &l.router}})
      out.emplace_back(p + name, view);
    for (const FfnWeights* ffn : {&l.dense, &l.shared})
      if (ffn->present())
        for (const WeightView* view : {&ffn->gate, &ffn->up, &ffn->down}) out.emplace_back(p + "ffn", view);
    for (size_t e = 0; e < l.experts.size(); ++e)
      for (const WeightView* view : {&l.experts[e].gate, &l.experts[e].up, &l.experts[e].down})
        out.emplace_back(p + "expert " + std::to_string(e), view);
  }
  return out;
}

TEST(Fp8, BoundWeightsAreTransformersDequantizationBitForBit) {
  const auto fp8 = Model::load(kFp8);
  const auto dequant = Model::load(kDequant);
  EXPECT_EQ(fp8->config().fp8_block_rows, 4);
  EXPECT_EQ(fp8->config().fp8_block_cols, 8);
  const auto got = matrices(fp8->weights());
  const auto want = matrices(dequant->weights());
  ASSERT_EQ(got.size(), want.size());
  int64_t compared = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const WeightView& a = *got[i].second;
    const WeightView& b = *want[i].second;
    ASSERT_EQ(a.data == nullptr, b.data == nullptr) << got[i].first;
    if (a.data == nullptr) continue;  // a dense layer's router
    ASSERT_EQ(a.dtype, b.dtype) << got[i].first;
    ASSERT_EQ(a.dtype, DType::kBF16) << got[i].first;
    ASSERT_EQ(a.rows, b.rows) << got[i].first;
    ASSERT_EQ(a.cols, b.cols) << got[i].first;
    EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.rows * a.cols * 2)), 0) << got[i].first;
    compared += a.rows * a.cols;
  }
  int64_t vector_params = 0;  // norms and the routers' correction biases
  for (const TensorInfo* t : dequant->tensors().all()) vector_params += t->shape.size() == 1 ? t->n_elements() : 0;
  EXPECT_EQ(compared + vector_params, fp8->sizes().dense_params + fp8->sizes().expert_params);
  // MLA's per-head matrices are split from the dequantized kv_b_proj.
  EXPECT_EQ(fp8->weights().layers[1].mla_uk, dequant->weights().layers[1].mla_uk);
  EXPECT_EQ(fp8->sizes().expert_dtype, DType::kBF16);
  EXPECT_EQ(fp8->sizes().expert_bytes, dequant->sizes().expert_bytes);
}

TEST(Fp8, KeptFp8ViewsReadTheSameValues) {
  const auto kept = Model::load(kFp8, ModelLoadOptions{.keep_fp8 = true});
  const auto dequant = Model::load(kDequant);
  EXPECT_EQ(kept->sizes().expert_dtype, DType::kF8E4M3);
  EXPECT_EQ(kept->sizes().expert_bytes, kept->sizes().expert_params);  // one byte a weight
  const FfnWeights& expert = kept->weights().layers[2].experts[5];
  const FfnWeights& reference = dequant->weights().layers[2].experts[5];
  ASSERT_EQ(expert.down.dtype, DType::kF8E4M3);
  ASSERT_NE(kept->fp8_weight("model.layers.2.mlp.experts.5.down_proj.weight"), nullptr);
  EXPECT_EQ(kept->fp8_weight("model.layers.2.mlp.gate.weight"), nullptr);  // the router stays BF16
  std::vector<float> row(size_t(expert.down.cols)), want(row.size());
  for (int64_t r = 0; r < expert.down.rows; ++r) {
    ops::weight_row_to_f32(row.data(), expert.down, r);
    ops::weight_row_to_f32(want.data(), reference.down, r);
    for (size_t i = 0; i < row.size(); ++i) ASSERT_EQ(f32_to_bf16(row[i]), f32_to_bf16(want[i])) << r << "," << i;
  }
  // The forward does not run FP8 views: a kept model is for packing and inspecting.
  std::vector<float> x(size_t(expert.down.cols), 1.0f), y(size_t(expert.down.rows));
  ThreadPool pool(1);
  EXPECT_THROW(ops::matmul(y.data(), x.data(), expert.down, 1, pool), Error);
}

// A block at the edge of a matrix whose size is no multiple of the block (DeepSeek-V3's
// kv_a_proj_with_mqa: 576 rows of 128-row blocks) is scaled by its own, partial block's scale.
TEST(Fp8, PartialEdgeBlocksHaveTheirOwnScale) {
  const int64_t rows = 5, cols = 10;
  std::vector<uint8_t> bytes(size_t(rows * cols), 0x38);       // E4M3 1.0
  const std::vector<float> scales = {1.0f, 2.0f, 3.0f, 4.0f};  // [ceil(5/4), ceil(10/8)]
  const WeightView w{bytes.data(), DType::kF8E4M3, rows, cols, scales.data(), 4, 8};
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    ops::weight_row_to_f32(row.data(), w, r);
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(row[size_t(c)], scales[size_t((r / 4) * 2 + c / 8)]) << r << "," << c;
  }
}

TEST(Fp8, LogitsMatchTransformers) {
  const auto model = Model::load(kFp8);
  std::ifstream in(kFp8 / "reference.json");
  const auto reference = nlohmann::json::parse(in);
  const ModelConfig& c = model->config();
  ThreadPool pool(2);
  int cases = 0;
  for (const auto& item : reference["cases"]) {
    const auto ids = item["ids"].get<std::vector<int32_t>>();
    KvCache kv(c, std::ssize(ids) + 1);
    auto scratch = model->make_scratch(16, kv.n_ctx());
    std::vector<float> logits(ids.size() * size_t(c.n_vocab));
    model->forward(ids, 0, kv, *scratch, pool, logits.data(), true);
    // The dequantized BF16 weights in f32, as Chronos computes (logits_f32).
    double worst = 0;
    size_t k = 0;
    for (const auto& row : item["logits_f32"])
      for (const float v : row.get<std::vector<float>>()) worst = std::max(worst, double(std::fabs(logits[k++] - v)));
    ASSERT_EQ(k, logits.size());
    EXPECT_LE(worst, 1e-3) << ids.size() << " tokens";
    ++cases;
  }
  EXPECT_GE(cases, 2);
}

// A copy of the FP8 fixture whose config or tensors are edited, to check one error.
class Fp8Errors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chronos_fp8_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(kFp8 / name, dir_ / name);
    std::ifstream in(kFp8 / "config.json");
    config_ = nlohmann::json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the fixture's tensors with `edit` applied to a copy of each tensor's bytes (and it may
  // drop a tensor by clearing its name), and the config.
  void write(const std::function<void(TensorToWrite&, std::vector<std::byte>&)>& edit) {
    const TensorStore source = TensorStore::open(kFp8);
    std::vector<std::vector<std::byte>> storage;
    storage.reserve(source.all().size());
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo* t : source.all()) {
      auto& bytes = storage.emplace_back(t->data, t->data + t->n_bytes);
      TensorToWrite out{t->name, t->dtype, t->shape, {}};
      edit(out, bytes);
      out.bytes = bytes;
      if (!out.name.empty()) tensors.push_back(out);
    }
    write_safetensors(dir_ / "model.safetensors", tensors);
    std::ofstream(dir_ / "config.json") << config_.dump();
  }
  std::string error() {
    try {
      Model::load(dir_);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  }

  fs::path dir_;
  nlohmann::json config_;
};

const std::string kWeight = "model.layers.1.self_attn.q_b_proj.weight";

TEST_F(Fp8Errors, MissingScaleNamesTheTensor) {
  write([](TensorToWrite& t, std::vector<std::byte>&) {
    if (t.name == kWeight + "_scale_inv") t.name.clear();
  });
  EXPECT_NE(error().find("tensor " + kWeight + ": no " + kWeight + "_scale_inv beside it"), std::string::npos)
      << error();
}

TEST_F(Fp8Errors, ScaleGridThatDoesNotFitTheBlocks) {
  config_["quantization_config"]["weight_block_size"] = {8, 8};  // q_a_proj [24, 64] needs [3, 8]
  write([](TensorToWrite&, std::vector<std::byte>&) {});
  EXPECT_NE(error().find("tensor model.layers.0.self_attn.q_a_proj.weight_scale_inv: shape [6,8], expected [3,8] "
                         "(one scale per 8x8 block of model.layers.0.self_attn.q_a_proj.weight [24, 64])"),
            std::string::npos)
      << error();
}

TEST_F(Fp8Errors, Fp8WeightsWithoutTheirQuantizationConfig) {
  config_.erase("quantization_config");
  write([](TensorToWrite&, std::vector<std::byte>&) {});
  EXPECT_NE(error().find("F8_E4M3 weights need config.json's quantization_config"), std::string::npos) << error();
}

TEST_F(Fp8Errors, OtherQuantizationMethodsAreRefusedByName) {
  config_["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  write([](TensorToWrite&, std::vector<std::byte>&) {});
  EXPECT_NE(error().find("quantization_config.quant_method 'gptq' is not supported"), std::string::npos) << error();
  config_["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", nullptr}};
  write([](TensorToWrite&, std::vector<std::byte>&) {});
  EXPECT_NE(error().find("weight_block_size null is not two positive sizes"), std::string::npos) << error();
}

TEST_F(Fp8Errors, NanValuesAndScalesAreErrors) {
  write([](TensorToWrite& t, std::vector<std::byte>& bytes) {
    if (t.name == kWeight) bytes[29] = std::byte{0x7f};
  });
  EXPECT_NE(error().find("tensor " + kWeight + ": element (1, 5) is an FP8 NaN (0x7F)"), std::string::npos) << error();
  write([](TensorToWrite& t, std::vector<std::byte>& bytes) {
    if (t.name != kWeight + "_scale_inv") return;
    const float inf = INFINITY;
    std::memcpy(bytes.data() + 4 * 4, &inf, 4);  // block (1, 1) of a [24, 3] grid
  });
  EXPECT_NE(error().find("_scale_inv: the scale of block (1, 1) is inf"), std::string::npos) << error();
}

}  // namespace
}  // namespace chronos
