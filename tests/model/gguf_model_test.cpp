// Models from GGUF files: Chronos on each fixture of tests/fixtures/gguf (tools/make_gguf_fixtures.py)
// against Chronos on the safetensors checkpoint it was converted from — the same logits, bit for bit
// where the weights are the same values; the config built from the key-values; the Q/K rows of the
// llama architecture restored; bad files refused with the tensor or key named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/safetensors.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = CHRONOS_TEST_DATA_DIR;
fs::path gguf_fixture(const std::string& name) { return kFixtures / "gguf" / (name + ".gguf"); }
fs::path checkpoint(const std::string& name) { return kFixtures / "models" / name; }

// All-position logits of a fixed prompt, on the exact (f32-activation) path.
std::vector<float> logits(const Model& model, int64_t n_tokens = 10) {
  const ModelConfig& c = model.config();
  ThreadPool pool(1);
  auto runner = make_cpu_runner(model, pool, 64, 8, {});
  std::vector<int32_t> prompt(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) prompt[size_t(i)] = int32_t((i * 53 + 7) % c.n_vocab);
  std::vector<float> out(size_t(n_tokens * c.n_vocab));
  runner->forward(prompt, 0, out.data(), true);
  return out;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b, bool same_arch = true) {
  if (same_arch) {
    EXPECT_EQ(a.arch, b.arch);
  }
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_head_kv, b.n_head_kv);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
  EXPECT_EQ(a.n_expert, b.n_expert);
  EXPECT_EQ(a.n_expert_used, b.n_expert_used);
  EXPECT_EQ(a.n_ff_expert, b.n_ff_expert);
  EXPECT_EQ(a.n_ff_shared, b.n_ff_shared);
  EXPECT_EQ(a.n_ff_dense, b.n_ff_dense);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.shared_expert_gated, b.shared_expert_gated);
  EXPECT_EQ(a.routed_scaling, b.routed_scaling);
  EXPECT_EQ(a.n_group, b.n_group);
  EXPECT_EQ(a.topk_group, b.topk_group);
  EXPECT_TRUE(a.layers == b.layers);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.n_rot, b.n_rot);
  EXPECT_EQ(a.attn_qkv_bias, b.attn_qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_nope_dim, b.qk_nope_dim);
  EXPECT_EQ(a.qk_rope_dim, b.qk_rope_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.rope_interleaved, b.rope_interleaved);
  EXPECT_EQ(a.rope_type, b.rope_type);
  EXPECT_EQ(a.rope_factor, b.rope_factor);
  EXPECT_EQ(a.yarn_original_ctx, b.yarn_original_ctx);
  EXPECT_FLOAT_EQ(a.softmax_scale(), b.softmax_scale());
  EXPECT_EQ(a.yarn_truncate, b.yarn_truncate);
  EXPECT_EQ(a.attn_o_bias, b.attn_o_bias);
  EXPECT_EQ(a.attn_sinks, b.attn_sinks);
  EXPECT_EQ(a.router_logit_bias, b.router_logit_bias);
  EXPECT_EQ(a.expert_bias, b.expert_bias);
  EXPECT_EQ(a.swiglu_limit, b.swiglu_limit);
  EXPECT_EQ(a.swiglu_alpha, b.swiglu_alpha);
}

class GgufModel : public ::testing::TestWithParam<std::string> {};

// A parameter names the checkpoint and its file: "mixtral" is mixtral-f32, "gpt_oss-mxfp4" itself.
std::string fixture_of(const std::string& param) {
  return param.find('-') == std::string::npos ? param + "-f32" : param;
}

// The checkpoint as its GGUF file states it. deepseek2 files keep YaRN's mscale_all_dim only (as
// yarn_log_multiplier) and llama.cpp takes mscale to equal it, as every released DeepSeek config
// has it; the DeepSeek fixtures set mscale apart on purpose, so their reference is a copy of the
// checkpoint with mscale = mscale_all_dim.
fs::path reference_checkpoint(const std::string& name, const fs::path& scratch) {
  const fs::path source = checkpoint(name);
  if (name.rfind("deepseek", 0) != 0) return source;
  const fs::path copy = scratch / name;
  fs::create_directories(copy);
  for (const auto& entry : fs::directory_iterator(source))
    fs::copy_file(entry.path(), copy / entry.path().filename(), fs::copy_options::overwrite_existing);
  std::ifstream in(copy / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  auto& rope = config["rope_parameters"];
  if (rope.contains("mscale_all_dim")) rope["mscale"] = rope["mscale_all_dim"];
  std::ofstream(copy / "config.json") << config.dump(2);
  return copy;
}

// f32 files (and gpt-oss's MXFP4 one, its blocks as stored) hold the checkpoint's values: every logit
// equal.
TEST_P(GgufModel, F32LogitsEqualTheSafetensorsCheckpoint) {
  const fs::path scratch = fs::temp_directory_path() / ("chronos_gguf_reference_" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path path;
    ~Cleanup() { fs::remove_all(path); }
  } cleanup{scratch};
  const auto gguf = Model::load(gguf_fixture(fixture_of(GetParam())));
  const auto reference = Model::load(reference_checkpoint(fixture_of(GetParam()), scratch));
  // GLM-4.7-Flash's deepseek2 file is DeepSeek-V3's model (llama.cpp makes no difference either).
  const bool lite = GetParam() == "glm4_moe_lite";
  if (lite) {
    EXPECT_EQ(gguf->config().arch, Arch::kDeepseekV3);
  }
  expect_same_config(gguf->config(), reference->config(), !lite);
  EXPECT_EQ(ModelConfig::load(gguf_fixture(fixture_of(GetParam()))).n_layer, reference->config().n_layer);
  EXPECT_EQ(gguf->sizes().expert_bytes, reference->sizes().expert_bytes);
  EXPECT_EQ(gguf->sizes().dense_bytes, reference->sizes().dense_bytes);
  const auto a = logits(*gguf);
  const auto b = logits(*reference);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
}

// glm4_moe: a sigmoid router with groups, its bias as exp_probs_b.bias, shared experts as
// ffn_*_shexp of mlp.shared_experts, post_attention_norm, a dense layer 0, and a NextN block after the
// layers (block_count 4 of 3 layers) whose tensors are skipped. minimax_m2: the bias beside
// Mixtral-named experts, rotary_dim as rope.dimension_count. deepseek_v3 / deepseek_v2: deepseek2
// files (sigmoid or softmax gating, MLA's sizes in the *_mla keys, kv_b_proj split into attn_k_b
// and attn_v_b, YaRN's mscale as yarn_log_multiplier). glm4_moe_lite: a deepseek2 file with a NextN
// block after its layers, as llama.cpp writes GLM-4.7-Flash. gpt_oss-mxfp4: the released layout
// (MXFP4 experts, split gate and up, their biases as ffn_*_exps.bias, attn_sinks, the router's bias
// as ffn_gate_inp.bias, the window as attention.sliding_window), from the MXFP4 checkpoint.
INSTANTIATE_TEST_SUITE_P(Archs, GgufModel,
                         ::testing::Values("mixtral", "qwen2_moe", "glm4_moe", "minimax_m2", "deepseek_v3",
                                           "deepseek_v2", "glm4_moe_lite", "gpt_oss-mxfp4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The un-permuted Q/K rows of the llama architecture are the checkpoint's rows, byte for byte; the
// stacked experts are views of the file, split per expert.
TEST(GgufModelWeights, LlamaQkRowsRestoredAndExpertsSplit) {
  const auto gguf = Model::load(gguf_fixture("mixtral-f32"));
  const auto reference = Model::load(checkpoint("mixtral-f32"));
  const ModelWeights& a = gguf->weights();
  const ModelWeights& b = reference->weights();
  ASSERT_EQ(a.layers.size(), b.layers.size());
  const auto same = [](const WeightView& x, const WeightView& y) {
    return x.dtype == y.dtype && x.rows == y.rows && x.cols == y.cols &&
           std::memcmp(x.data, y.data, size_t(x.rows * x.cols) * sizeof(float)) == 0;
  };
  for (size_t il = 0; il < a.layers.size(); ++il) {
    EXPECT_TRUE(same(a.layers[il].wq, b.layers[il].wq)) << il;
    EXPECT_TRUE(same(a.layers[il].wk, b.layers[il].wk)) << il;
    EXPECT_TRUE(same(a.layers[il].router, b.layers[il].router)) << il;
    for (size_t e = 0; e < b.layers[il].experts.size(); ++e) {
      EXPECT_TRUE(same(a.layers[il].experts[e].gate, b.layers[il].experts[e].gate)) << il << " " << e;
      EXPECT_TRUE(same(a.layers[il].experts[e].down, b.layers[il].experts[e].down)) << il << " " << e;
    }
  }
  // The file's Q rows are permuted (else the restore above would prove nothing).
  const auto file = GgufFile::open(gguf_fixture("mixtral-f32"));
  const GgufTensor* q = file->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_NE(std::memcmp(q->data, b.layers[0].wq.data, size_t(q->n_bytes)), 0);
}

// f16 files: the same logits as the checkpoint with the same tensors rounded to f16 (f32_to_f16,
// round to nearest even, as numpy and the converter round), written as a safetensors folder.
TEST(GgufModelTypes, F16EqualsTheCheckpointRoundedToF16) {
  const fs::path source = checkpoint("qwen3_moe-f32");
  const auto gguf = Model::load(gguf_fixture("qwen3_moe-f16"));
  const auto reference = Model::load(source);
  expect_same_config(gguf->config(), reference->config());
  EXPECT_EQ(gguf->sizes().expert_dtype, DType::kF16);

  const fs::path rounded = fs::temp_directory_path() / ("chronos_gguf_f16_" + std::to_string(::getpid()));
  fs::create_directories(rounded);
  fs::copy_file(source / "config.json", rounded / "config.json", fs::copy_options::overwrite_existing);
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorToWrite> tensors;
  int n_f16 = 0;
  for (const TensorInfo* t : reference->all_tensors()) {
    const TensorInfo* mapped = nullptr;
    for (const TensorInfo* g : gguf->all_tensors())
      if (g->name == t->name) mapped = g;
    ASSERT_NE(mapped, nullptr) << t->name;
    ASSERT_EQ(t->dtype, DType::kF32);
    if (mapped->dtype != DType::kF16) {
      tensors.push_back({t->name, t->dtype, t->shape, std::span<const std::byte>(t->data, size_t(t->n_bytes))});
      continue;
    }
    ++n_f16;
    auto& bytes = storage.emplace_back(size_t(t->n_elements()) * 2);
    for (int64_t i = 0; i < t->n_elements(); ++i) {
      float value;
      std::memcpy(&value, t->data + 4 * i, 4);
      const uint16_t half = f32_to_f16(value);
      std::memcpy(bytes.data() + 2 * i, &half, 2);
    }
    tensors.push_back({t->name, DType::kF16, t->shape, bytes});
  }
  EXPECT_GT(n_f16, 0);
  write_safetensors(rounded / "model.safetensors", tensors);
  const auto expected = logits(*Model::load(rounded));
  fs::remove_all(rounded);
  const auto actual = logits(*gguf);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) ASSERT_EQ(actual[i], expected[i]) << "logit " << i;
}

// Block-typed files load as block views with their stored types (the q4_k file falls back to
// Q5_0 on its 32- and 64-wide rows, as GGUF writers do); configs match the checkpoints.
TEST(GgufModelTypes, BlockTypesBindTheirBytes) {
  for (const std::string name : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    const auto gguf = Model::load(gguf_fixture(name + "-q8_0"));
    const auto reference = Model::load(checkpoint(name + "-f32"));
    expect_same_config(gguf->config(), reference->config());
    EXPECT_EQ(gguf->sizes().expert_dtype, DType::kQ8_0) << name;
    EXPECT_EQ(gguf->weights().layers[0].wq.dtype, DType::kQ8_0) << name;
    EXPECT_EQ(gguf->weights().tok_embd.dtype, DType::kQ8_0) << name;
    EXPECT_TRUE(gguf->weights().layers[0].attn_norm.size() == size_t(gguf->config().n_embd)) << name;
    for (const float v : logits(*gguf, 4)) ASSERT_TRUE(std::isfinite(v)) << name;
  }
  const auto q4 = Model::load(gguf_fixture("olmoe-q4_k"));
  EXPECT_EQ(q4->sizes().expert_dtype, block_dtype_for_row(DType::kQ4_K, q4->config().n_embd));
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class GgufModelErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chronos_gguf_model_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The fixture with `from` (same length) replaced by `to` at its first occurrence.
  fs::path patched(const std::string& fixture, const std::string& from, const std::string& to) {
    std::string bytes = read_all(gguf_fixture(fixture));
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos);
    EXPECT_EQ(from.size(), to.size());
    bytes.replace(at, from.size(), to);
    const fs::path path = dir_ / (fixture + ".gguf");
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return path;
  }

  static std::string load_error(const fs::path& path) {
    try {
      Model::load(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  }

  fs::path dir_;
};

TEST_F(GgufModelErrors, MissingTensorIsNamed) {
  const auto path = patched("qwen2_moe-q8_0", "blk.2.attn_k.weight", "blk.2.attn_x.weight");
  const std::string message = load_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("model.layers.2.self_attn.k_proj.weight"), std::string::npos) << message;
}

TEST_F(GgufModelErrors, UnsupportedArchitectureIsNamed) {
  const auto path = patched("olmoe-q8_0", "olmoe", "gemma");
  const std::string message = load_error(path);
  EXPECT_NE(message.find("general.architecture"), std::string::npos) << message;
  EXPECT_NE(message.find("'gemma'"), std::string::npos) << message;
}

// A glm4moe file whose gating function is softmax (1) or whose NextN block count is lost: one line
// naming the key, or the NextN block's missing tensor.
TEST_F(GgufModelErrors, Glm4MoeGatingAndNextnBlocksAreChecked) {
  using namespace std::string_literals;
  const std::string key = "glm4moe.expert_gating_func"s + "\x04\x00\x00\x00"s;  // type: uint32
  const auto softmax = patched("glm4_moe-f32", key + "\x02\x00\x00\x00"s, key + "\x01\x00\x00\x00"s);
  std::string message = load_error(softmax);
  EXPECT_NE(message.find("glm4moe.expert_gating_func = 1"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  const auto no_nextn = patched("glm4_moe-f32", "glm4moe.nextn_predict_layers", "glm4moe.nextn_predict_layerz");
  message = load_error(no_nextn);  // block 3 is then a layer, and it has no attention
  EXPECT_NE(message.find("model.layers.3."), std::string::npos) << message;
  EXPECT_NE(message.find("is missing"), std::string::npos) << message;
}

// A deepseek2 file with half of a split kv_b_proj, or an unknown gating function: one line naming it.
TEST_F(GgufModelErrors, DeepseekSplitKvBAndGatingAreChecked) {
  using namespace std::string_literals;
  const auto half = patched("deepseek_v3-f32", "blk.1.attn_v_b.weight", "blk.1.attn_v_x.weight");
  std::string message = load_error(half);
  EXPECT_NE(message.find("blk.1.attn_v_b.weight is missing"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  const std::string key = "deepseek2.expert_gating_func"s + "\x04\x00\x00\x00"s;  // type: uint32
  const auto gating = patched("deepseek_v3-f32", key + "\x02\x00\x00\x00"s, key + "\x03\x00\x00\x00"s);
  message = load_error(gating);
  EXPECT_NE(message.find("deepseek2.expert_gating_func = 3"), std::string::npos) << message;
}

TEST_F(GgufModelErrors, MissingKeyIsNamed) {
  const auto path = patched("mixtral-q8_0", "llama.block_count", "llama.block_c0unt");
  const std::string message = load_error(path);
  EXPECT_NE(message.find("llama.block_count is missing"), std::string::npos) << message;
}

// qwen3next and qwen35moe files as llama.cpp's own converter writes them (conversion/qwen.py, run on
// the checkpoints): Qwen3-Next's in_proj_qkvz split into attn_qkv and attn_gate with in_proj_ba
// kept grouped as ssm_ba, Qwen3.5's value heads reordered to tiled order in every tensor that has
// them, A stored as -exp(A_log), the conv's middle axis squeezed, norms holding 1 + w (not the gated
// one), post_attention_norm. The same model: logits within f32 rounding of the checkpoint's (the
// log taken back from ssm_a and the tiled heads' summation order are not bit for bit).
TEST(GgufRecurrent, LlamaCppConvertedFilesEqualTheCheckpoint) {
  for (const std::string name : {"qwen3_next-f32", "qwen3_5_moe-f32"}) {
    const auto gguf = Model::load(gguf_fixture(name));
    const auto reference = Model::load(checkpoint(name));
    const ModelConfig &a = gguf->config(), &b = reference->config();
    expect_same_config(a, b);
    EXPECT_EQ(a.layers, b.layers) << name;
    EXPECT_EQ(std::tie(a.lin_k_heads, a.lin_v_heads, a.lin_k_dim, a.lin_v_dim, a.lin_conv_kernel, a.n_rot),
              std::tie(b.lin_k_heads, b.lin_v_heads, b.lin_k_dim, b.lin_v_dim, b.lin_conv_kernel, b.n_rot))
        << name;
    EXPECT_FALSE(a.norm_plus_one) << name;  // the file's norms hold 1 + w
    EXPECT_TRUE(b.norm_plus_one) << name;
    EXPECT_EQ(a.lin_v_tiled, name == "qwen3_5_moe-f32");
    EXPECT_FALSE(a.lin_qkvz_grouped) << name;
    EXPECT_EQ(a.lin_ba_grouped, name == "qwen3_next-f32");
    const auto x = logits(*gguf, 40), y = logits(*reference, 40);
    ASSERT_EQ(x.size(), y.size());
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::fabs(x[i] - y[i])));
    EXPECT_LE(worst, 2e-5) << name;
    std::printf("%s: max |GGUF logit - checkpoint logit| = %.3g\n", name.c_str(), worst);
  }
}

}  // namespace
}  // namespace chronos
