// ModelConfig::load: per-architecture keys, defaults, the dense-layer rule, and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/model_config.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chronos_cfg_" + std::to_string(::getpid()) +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ModelConfig load(const json& j) {
    std::ofstream(dir_ / "config.json") << j.dump();
    return ModelConfig::load(dir_);
  }
  std::string error_of(const json& j) {
    try {
      load(j);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

json qwen2_moe() {
  return {{"model_type", "qwen2_moe"},
          {"hidden_size", 64},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 100},
          {"num_experts", 8},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 32},
          {"shared_expert_intermediate_size", 48},
          {"intermediate_size", 96},
          {"decoder_sparse_step", 2},
          {"mlp_only_layers", {3}},
          {"rope_theta", 1000000.0}};
}

TEST_F(ConfigTest, QwenDenseLayerRuleIsOneBased) {
  const ModelConfig c = load(qwen2_moe());
  // (i + 1) % 2 == 0 -> layers 1, 3, 5; layer 3 is listed in mlp_only_layers.
  std::vector<bool> moe;
  for (int64_t i = 0; i < c.n_layer; ++i) moe.push_back(c.is_moe_layer(i));
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_EQ(c.n_moe_layers(), 2);
  EXPECT_EQ(c.n_ff_dense, 96);
  EXPECT_EQ(c.n_ff_expert, 32);
  EXPECT_EQ(c.n_ff_shared, 48);
  EXPECT_TRUE(c.attn_qkv_bias);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
}

TEST_F(ConfigTest, MixtralDefaults) {
  const ModelConfig c = load({{"model_type", "mixtral"},
                              {"hidden_size", 64},
                              {"num_hidden_layers", 2},
                              {"num_attention_heads", 4},
                              {"vocab_size", 100},
                              {"num_local_experts", 8},
                              {"num_experts_per_tok", 2},
                              {"intermediate_size", 128},
                              {"sliding_window", nullptr}});
  EXPECT_EQ(c.n_head_kv, 4);      // missing -> n_head
  EXPECT_TRUE(c.norm_topk_prob);  // Mixtral always renormalizes
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST_F(ConfigTest, Qwen3HeadDimAndRopeParameters) {
  json j = {{"model_type", "qwen3_moe"}, {"hidden_size", 64},
            {"num_hidden_layers", 2},    {"num_attention_heads", 4},
            {"num_key_value_heads", 2},  {"head_dim", 32},
            {"vocab_size", 100},         {"num_local_experts", 8},
            {"num_experts_per_tok", 2},  {"moe_intermediate_size", 32},
            {"norm_topk_prob", true},    {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  const ModelConfig c = load(j);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);  // != hidden_size
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.qk_norm, QkNorm::kPerHead);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FLOAT_EQ(c.rope_theta, 5000.0f);
}

TEST_F(ConfigTest, EosListFromGenerationConfig) {
  json j = qwen2_moe();
  j["eos_token_id"] = 5;
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": [7, 9]})";
  EXPECT_EQ(load(j).eos_token_ids, (std::vector<int32_t>{7, 9}));
}

TEST_F(ConfigTest, LinearRopeScalingAccepted) {
  json j = qwen2_moe();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig c = load(j);
  EXPECT_EQ(c.rope_type, RopeType::kLinear);
  EXPECT_FLOAT_EQ(c.rope_factor, 2.0f);
}

TEST_F(ConfigTest, RefusalsNameTheProblem) {
  json j = qwen2_moe();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  EXPECT_NE(error_of(j).find("longrope"), std::string::npos);
  j = qwen2_moe();
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("use_sliding_window"), std::string::npos);
  j = qwen2_moe();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("hidden_size"), std::string::npos);
  j = qwen2_moe();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);
  j = qwen2_moe();
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(error_of(j).find("num_experts_per_tok"), std::string::npos);
  j = qwen2_moe();
  j["model_type"] = "llama";
  EXPECT_NE(error_of(j).find("'llama' is not supported"), std::string::npos);
  j = qwen2_moe();
  j["hidden_act"] = "gelu";
  EXPECT_NE(error_of(j).find("hidden_act"), std::string::npos);
  j = qwen2_moe();
  j["quantization_config"] = {{"quant_method", "fp8"}};
  EXPECT_NE(error_of(j).find("quantization_config"), std::string::npos);
  j = qwen2_moe();
  j["hidden_size"] = "64";
  EXPECT_NE(error_of(j).find("hidden_size"), std::string::npos);
  // Every message names the file.
  EXPECT_NE(error_of(j).find("config.json"), std::string::npos);
}

json glm4_moe() {
  return {{"model_type", "glm4_moe"},
          {"hidden_size", 64},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"vocab_size", 100},
          {"n_routed_experts", 16},
          {"num_experts_per_tok", 4},
          {"n_group", 4},
          {"topk_group", 2},
          {"n_shared_experts", 2},
          {"moe_intermediate_size", 32},
          {"intermediate_size", 96},
          {"first_k_dense_replace", 1},
          {"routed_scaling_factor", 2.5},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}}};
}

TEST_F(ConfigTest, Glm4MoeRouterDenseLeadingLayersAndPartialRotary) {
  const ModelConfig c = load(glm4_moe());
  EXPECT_FALSE(c.is_moe_layer(0));
  for (int64_t i = 1; i < 4; ++i) {
    EXPECT_TRUE(c.is_moe_layer(i));
    EXPECT_EQ(c.layers[size_t(i)].router, RouterKind::kSigmoidBias);
  }
  EXPECT_EQ(c.n_ff_shared, 64);  // two shared experts of 32, one FFN
  EXPECT_FALSE(c.shared_expert_gated);
  EXPECT_TRUE(c.norm_topk_prob);  // the default
  EXPECT_FLOAT_EQ(c.routed_scaling, 2.5f);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.n_rot, 16);  // partial_rotary_factor inside rope_parameters (transformers 5)
  EXPECT_EQ(c.qk_norm, QkNorm::kNone);
  json full = glm4_moe();
  full["rope_parameters"]["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(load(full).n_rot, 32);
  json absent = glm4_moe();
  absent["rope_parameters"].erase("partial_rotary_factor");
  EXPECT_EQ(load(absent).n_rot, 16);  // Glm4MoeConfig's default: half of each head
}

TEST_F(ConfigTest, MinimaxM2LegacyRotaryDim) {
  json j = {{"model_type", "minimax_m2"},
            {"hidden_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"head_dim", 32},
            {"vocab_size", 100},
            {"num_local_experts", 8},
            {"num_experts_per_tok", 2},
            {"intermediate_size", 32},
            {"rotary_dim", 16}};
  const ModelConfig c = load(j);
  EXPECT_EQ(c.n_rot, 16);
  EXPECT_EQ(c.qk_norm, QkNorm::kFullWidth);
  EXPECT_EQ(c.layers[1].router, RouterKind::kSigmoidBias);
  EXPECT_EQ(c.n_group, 1);
  j["rotary_dim"] = 48;
  EXPECT_NE(error_of(j).find("key 'rotary_dim'"), std::string::npos) << error_of(j);
}

TEST_F(ConfigTest, Glm4MoeGroupsThatDoNotAgreeNameTheKey) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"n_group", 3}}, "key 'n_group': 3 groups do not divide n_routed_experts = 16"},
      {{{"n_group", 16}, {"topk_group", 1}}, "fewer than 2 experts per group"},
      {{{"topk_group", 5}}, "key 'topk_group' must be in [1, n_group = 4] (got 5)"},
      {{{"topk_group", 1}, {"num_experts_per_tok", 5}}, "key 'topk_group': 1 groups of 4 experts cannot hold"},
      {{{"n_group", 128}}, "key 'n_group' must be in [1, 64]"},
      {{{"routed_scaling_factor", 0.0}}, "key 'routed_scaling_factor'"},
      {{{"first_k_dense_replace", 9}}, "key 'first_k_dense_replace'"},
      {{{"n_shared_experts", -1}}, "key 'n_shared_experts'"},
  };
  for (const auto& [patch, want] : cases) {
    json j = glm4_moe();
    j.update(patch);
    const std::string message = error_of(j);
    EXPECT_NE(message.find(want), std::string::npos) << patch.dump() << " -> " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

json gpt_oss_20b() {  // openai/gpt-oss-20b's config.json as released (the layer types written out below)
  json j = json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "max_position_embeddings": 131072, "model_type": "gpt_oss",
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": false,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                            "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": false},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": false, "use_cache": true, "vocab_size": 201088})");
  for (int i = 0; i < 24; ++i) j["layer_types"].push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return j;
}

TEST_F(ConfigTest, GptOss20bAsReleased) {
  const ModelConfig c = load(gpt_oss_20b());
  EXPECT_EQ(c.arch, Arch::kGptOss);
  EXPECT_EQ(c.n_expert, 32);
  EXPECT_EQ(c.n_expert_used, 4);
  EXPECT_EQ(c.n_ff_expert, 2880);
  EXPECT_EQ(c.q_dim(), 4096);  // != hidden_size
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.attn_qkv_bias && c.attn_o_bias && c.attn_sinks && c.router_logit_bias && c.expert_bias);
  EXPECT_FLOAT_EQ(c.swiglu_limit, 7.0f);
  EXPECT_FLOAT_EQ(c.swiglu_alpha, 1.702f);
  EXPECT_EQ(c.rope_type, RopeType::kYarn);
  EXPECT_FALSE(c.yarn_truncate);
  EXPECT_EQ(c.yarn_original_ctx, 4096);
  EXPECT_NEAR(c.rope_attn_factor, 0.1 * std::log(32.0) + 1.0, 1e-6);
  EXPECT_EQ(c.attention_window(0), 128);
  EXPECT_EQ(c.attention_window(1), 0);
  EXPECT_EQ(c.attention_window(22), 128);
  EXPECT_EQ(c.attention_window(23), 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{200002});
}

TEST_F(ConfigTest, GptOssRefusalsNameTheKey) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"layer_types", json::array({"full_attention"})}}, "key 'layer_types' must list num_hidden_layers = 24"},
      {{{"sliding_window", nullptr}}, "layer 0 is sliding_attention but key 'sliding_window' is not set"},
      {{{"sliding_window", -4}}, "key 'sliding_window' must not be negative"},
      {{{"swiglu_limit", 0.0}}, "key 'swiglu_limit' must be positive"},
      {{{"quantization_config", {{"quant_method", "awq"}}}}, "quant_method 'awq' is not supported"},
  };
  for (const auto& [patch, want] : cases) {
    json j = gpt_oss_20b();
    j.update(patch);
    const std::string message = error_of(j);
    EXPECT_NE(message.find(want), std::string::npos) << patch.dump() << " -> " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  json odd = gpt_oss_20b();
  odd["layer_types"][3] = "chunked_attention";
  EXPECT_NE(error_of(odd).find("layer 3 is \"chunked_attention\""), std::string::npos) << error_of(odd);
}

json deepseek_v3() {  // the shapes of tests/fixtures/models/deepseek_v3-f32
  return {{"model_type", "deepseek_v3"},
          {"hidden_size", 64},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 4},
          {"head_dim", 8},  // transformers writes qk_rope_head_dim here; the q/k head is nope + rope
          {"vocab_size", 100},
          {"n_routed_experts", 8},
          {"num_experts_per_tok", 2},
          {"n_group", 4},
          {"topk_group", 2},
          {"n_shared_experts", 1},
          {"moe_intermediate_size", 32},
          {"intermediate_size", 96},
          {"first_k_dense_replace", 1},
          {"routed_scaling_factor", 2.5},
          {"q_lora_rank", 24},
          {"kv_lora_rank", 32},
          {"qk_nope_head_dim", 16},
          {"qk_rope_head_dim", 8},
          {"v_head_dim", 12},
          {"max_position_embeddings", 256},
          {"rope_parameters",
           {{"rope_type", "yarn"},
            {"rope_theta", 10000.0},
            {"factor", 4.0},
            {"original_max_position_embeddings", 32},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"mscale", 0.9},
            {"mscale_all_dim", 0.7}}}};
}

// GLM-4.7-Flash: DeepSeek-V3's model, its dense layers from mlp_layer_types.
TEST_F(ConfigTest, Glm4MoeLiteIsDeepseekV3UnderGlmKeys) {
  json j = deepseek_v3();
  j["model_type"] = "glm4_moe_lite";
  j.erase("first_k_dense_replace");
  j["mlp_layer_types"] = {"dense", "dense", "sparse"};
  const ModelConfig c = load(j);
  EXPECT_EQ(c.arch, Arch::kGlm4MoeLite);
  EXPECT_TRUE(c.mla());
  EXPECT_FALSE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(2));
  EXPECT_EQ(c.layers[2].router, RouterKind::kSigmoidBias);
  EXPECT_EQ(c.n_rot, 8);
  j.erase("mlp_layer_types");  // transformers' default: the first layer dense
  EXPECT_FALSE(load(j).is_moe_layer(0));
  EXPECT_TRUE(load(j).is_moe_layer(1));
  j["mlp_layer_types"] = {"sparse", "dense", "sparse"};
  EXPECT_NE(error_of(j).find("key 'mlp_layer_types': layer 1 is dense after a sparse layer"), std::string::npos)
      << error_of(j);
  j["mlp_layer_types"] = {"dense", "sparse"};
  EXPECT_NE(error_of(j).find("key 'mlp_layer_types' must be a list of num_hidden_layers = 3 entries"),
            std::string::npos);
  j["mlp_layer_types"] = {"dense", "moe", "sparse"};
  EXPECT_NE(error_of(j).find("entry 1 is \"moe\""), std::string::npos) << error_of(j);
  j.erase("mlp_layer_types");
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of(j).find("key 'partial_rotary_factor': 0.5 is not supported"), std::string::npos) << error_of(j);
}

TEST_F(ConfigTest, DeepseekV3LatentAttentionAndYarn) {
  const ModelConfig c = load(deepseek_v3());
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.layers[0].attention, AttentionKind::kMla);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_EQ(c.layers[1].router, RouterKind::kSigmoidBias);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_EQ(c.kv_key_width(), 40);  // the latent and the rotary key; no values
  EXPECT_EQ(c.kv_value_width(), 0);
  EXPECT_EQ(c.attn_out_dim(), 48);
  EXPECT_EQ(c.rope_type, RopeType::kYarn);
  EXPECT_FLOAT_EQ(c.rope_factor, 4.0f);  // the configured factor, not max / original positions
  EXPECT_EQ(c.yarn_original_ctx, 32);
  // transformers: cos and sin times mscale(4, 0.9) / mscale(4, 0.7); the softmax scale
  // 24^-0.5 * mscale(4, 0.7)^2.
  EXPECT_NEAR(c.rope_attn_factor, 1.0252733f, 1e-6f);
  EXPECT_NEAR(c.softmax_scale(), 0.2456630f, 1e-6f);
  json plain = deepseek_v3();
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  plain["q_lora_rank"] = nullptr;
  const ModelConfig p = load(plain);
  EXPECT_EQ(p.q_lora_rank, 0);
  EXPECT_NEAR(p.softmax_scale(), 1.0f / std::sqrt(24.0f), 1e-7f);
  EXPECT_FLOAT_EQ(p.rope_attn_factor, 1.0f);
}

TEST_F(ConfigTest, DeepseekV2Routers) {
  json j = deepseek_v3();
  j["model_type"] = "deepseek_v2";
  j["topk_method"] = "group_limited_greedy";
  j["norm_topk_prob"] = true;  // not read by transformers' V2 router
  ModelConfig c = load(j);
  EXPECT_EQ(c.layers[1].router, RouterKind::kSoftmaxGroupMax);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_FALSE(c.norm_topk_prob);
  j["topk_method"] = "greedy";
  c = load(j);
  EXPECT_EQ(c.n_group, 1);  // plain top-k over every expert
  j["topk_method"] = "noaux_tc";
  EXPECT_NE(error_of(j).find("key 'topk_method'"), std::string::npos) << error_of(j);
}

TEST_F(ConfigTest, DeepseekLatentSizesThatCannotBeNameTheKey) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"kv_lora_rank", 0}}, "key 'kv_lora_rank' must be in [1, 2048]"},
      {{{"kv_lora_rank", 4096}}, "key 'kv_lora_rank' must be in [1, 2048]"},
      {{{"qk_rope_head_dim", 7}}, "key 'qk_rope_head_dim' must be even"},
      {{{"v_head_dim", -1}}, "key 'v_head_dim'"},
      {{{"q_lora_rank", -3}}, "key 'q_lora_rank'"},
      {{{"attention_bias", true}}, "key 'attention_bias'"},
      {{{"topk_method", "greedy"}}, "key 'topk_method'"},
      {{{"moe_layer_freq", 2}}, "key 'moe_layer_freq'"},
  };
  for (const auto& [patch, want] : cases) {
    json j = deepseek_v3();
    j.update(patch);
    const std::string message = error_of(j);
    EXPECT_NE(message.find(want), std::string::npos) << patch.dump() << " -> " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  json j = deepseek_v3();
  j.erase("kv_lora_rank");
  EXPECT_NE(error_of(j).find("kv_lora_rank"), std::string::npos) << error_of(j);
}

TEST_F(ConfigTest, MissingFolderAndFile) {
  EXPECT_THROW(ModelConfig::load(dir_ / "absent"), Error);
  EXPECT_THROW(ModelConfig::load(dir_), Error);  // no config.json
}

}  // namespace
}  // namespace chronos
