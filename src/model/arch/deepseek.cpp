// DeepSeek-V2 / V2-Lite / Coder-V2 (deepseek_v2), DeepSeek-V3 / R1 / V3.1, Kimi-K2 (deepseek_v3)
// and GLM-4.7-Flash (glm4_moe_lite, V3's model under GLM's keys): multi-head latent attention (a low-rank query path
// when q_lora_rank is set, the latent kv_lora_rank wide, a decoupled rotary key shared by the heads, interleaved RoPE,
// YaRN whose mscale_all_dim scales the softmax), ungated shared experts, dense leading layers (first_k_dense_replace),
// and the routers: V2's softmax greedy or group_limited_greedy, V3's sigmoid + correction bias with groups (noaux_tc).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "chronos/error.h"
#include "model/arch/arch.h"
#include "model/router.h"

namespace chronos {
namespace {

void read_mla(const nlohmann::json& j, ModelConfig& c) {
  c.q_lora_rank = json_int_or(j, "q_lora_rank", 0);  // null: q_proj
  c.kv_lora_rank = json_int(j, "kv_lora_rank");
  c.qk_nope_dim = json_int(j, "qk_nope_head_dim");
  c.qk_rope_dim = json_int(j, "qk_rope_head_dim");
  c.v_head_dim = json_int(j, "v_head_dim");
  const auto in_range = [](int64_t v, int64_t lo, int64_t hi, const char* key) {
    if (v < lo || v > hi) throw_error("key '{}' must be in [{}, {}] (got {})", key, lo, hi, v);
  };
  in_range(c.q_lora_rank, 0, 1 << 16, "q_lora_rank");
  in_range(c.kv_lora_rank, 1, kMaxLatentRank, "kv_lora_rank");
  in_range(c.qk_nope_dim, 1, 1 << 12, "qk_nope_head_dim");
  in_range(c.qk_rope_dim, 2, kMaxLatentRank, "qk_rope_head_dim");
  in_range(c.v_head_dim, 1, 1 << 12, "v_head_dim");
  if (c.qk_rope_dim % 2 != 0) throw_error("key 'qk_rope_head_dim' must be even (got {})", c.qk_rope_dim);
  if (json_bool_or(j, "attention_bias", false))
    throw_error("key 'attention_bias': biased MLA projections are not supported");
  // The q/k head is [nope | rope]; only the rope part rotates. Every head has its own query, key
  // and value (num_key_value_heads does not apply).
  c.head_dim = c.qk_nope_dim + c.qk_rope_dim;
  c.n_rot = c.qk_rope_dim;
  c.n_head_kv = c.n_head;
  // The softmax scale is qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN (the
  // configured factor, as transformers' attention reads it).
  float scale = 1.0f / std::sqrt(float(c.head_dim));
  const nlohmann::json* rope = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = &j["rope_scaling"];
  if (c.rope_type != RopeType::kDefault && rope != nullptr) {
    const double mscale_all_dim = json_number_or(*rope, "mscale_all_dim", 0.0);
    if (mscale_all_dim != 0.0) {
      const float m = yarn_mscale(float(json_number_or(*rope, "factor", 1.0)), float(mscale_all_dim));
      scale *= m * m;
    }
  }
  c.attn_scale = scale;
}

void read_moe(const nlohmann::json& j, ModelConfig& c, RouterKind router, bool norm_default) {
  read_routed_experts(j, c, AttentionKind::kMla, router, norm_default);
  if (json_int_or(j, "moe_layer_freq", 1) != 1)
    throw_error("key 'moe_layer_freq': only 1 (every layer after the dense ones) is supported (got {})",
                json_int_or(j, "moe_layer_freq", 1));
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-6));
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
}

void read_config_v2(const nlohmann::json& j, ModelConfig& c) {
  const std::string method = j.contains("topk_method") && j["topk_method"].is_string()
                                 ? j["topk_method"].get<std::string>()
                                 : std::string("greedy");
  if (method != "greedy" && method != "group_limited_greedy")
    throw_error("key 'topk_method': '{}' is not supported (greedy, group_limited_greedy)", method);
  if (j.contains("scoring_func") && j["scoring_func"] != "softmax")
    throw_error("key 'scoring_func': {} is not supported (softmax)", j["scoring_func"].dump());
  read_moe(j, c, RouterKind::kSoftmaxGroupMax, false);
  // transformers' DeepseekV2 router never renormalizes (norm_topk_prob is not read; the released
  // configs say false).
  c.norm_topk_prob = false;
  if (method == "greedy") c.n_group = c.topk_group = 1;  // plain top-k over every expert
  c.rope_interleaved = true;                             // V2 rotates (2i, 2i+1) as complex numbers
  read_mla(j, c);
}

void read_config_v3(const nlohmann::json& j, ModelConfig& c) {
  if (j.contains("topk_method") && j["topk_method"] != "noaux_tc")
    throw_error("key 'topk_method': {} is not supported (noaux_tc)", j["topk_method"].dump());
  read_moe(j, c, RouterKind::kSigmoidBias, true);
  c.rope_interleaved = json_bool_or(j, "rope_interleave", true);
  read_mla(j, c);
}

// GLM-4.7-Flash: DeepSeek-V3's attention, router and experts. Which layers are dense comes from
// mlp_layer_types ("dense" / "sparse"; default: the first), there is no topk_method, and the rotary
// part is all of qk_rope_head_dim.
void read_config_glm_lite(const nlohmann::json& j, ModelConfig& c) {
  nlohmann::json moe = j;
  int64_t leading_dense = std::min<int64_t>(1, c.n_layer);
  if (j.contains("mlp_layer_types") && !j["mlp_layer_types"].is_null()) {
    const nlohmann::json& types = j["mlp_layer_types"];
    if (!types.is_array() || int64_t(types.size()) != c.n_layer)
      throw_error("key 'mlp_layer_types' must be a list of num_hidden_layers = {} entries", c.n_layer);
    leading_dense = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const nlohmann::json& t = types[size_t(il)];
      if (t != "dense" && t != "sparse")
        throw_error("key 'mlp_layer_types': entry {} is {}, not \"dense\" or \"sparse\"", il, t.dump());
      if (t == "dense" && leading_dense != il)
        throw_error(
            "key 'mlp_layer_types': layer {} is dense after a sparse layer (only leading dense layers are "
            "supported)",
            il);
      if (t == "dense") ++leading_dense;
    }
  }
  moe["first_k_dense_replace"] = leading_dense;
  if (c.n_rot != c.head_dim)  // the common reader's head_dim * partial_rotary_factor
    throw_error("key 'partial_rotary_factor': {} is not supported (MLA rotates all of qk_rope_head_dim: 1)",
                double(c.n_rot) / double(c.head_dim));
  read_moe(moe, c, RouterKind::kSigmoidBias, true);
  c.rope_interleaved = json_bool_or(j, "rope_interleave", true);
  read_mla(j, c);
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c, bool router_bias) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  const int64_t q_width = c.n_head * c.head_dim;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = fmt::format("model.layers.{}.", il);
    const std::string a = p + "self_attn.";
    out.push_back({TensorRole::kAttnNorm, il, -1, p + "input_layernorm.weight", {c.n_embd}});
    out.push_back({TensorRole::kFfnNorm, il, -1, p + "post_attention_layernorm.weight", {c.n_embd}});
    if (c.q_lora_rank > 0) {
      out.push_back({TensorRole::kAttnQA, il, -1, a + "q_a_proj.weight", {c.q_lora_rank, c.n_embd}});
      out.push_back({TensorRole::kAttnQANorm, il, -1, a + "q_a_layernorm.weight", {c.q_lora_rank}});
      out.push_back({TensorRole::kAttnQB, il, -1, a + "q_b_proj.weight", {q_width, c.q_lora_rank}});
    } else {
      out.push_back({TensorRole::kAttnQ, il, -1, a + "q_proj.weight", {q_width, c.n_embd}});
    }
    out.push_back(
        {TensorRole::kAttnKvA, il, -1, a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_dim, c.n_embd}});
    out.push_back({TensorRole::kAttnKvANorm, il, -1, a + "kv_a_layernorm.weight", {c.kv_lora_rank}});
    out.push_back({TensorRole::kAttnKvB,
                   il,
                   -1,
                   a + "kv_b_proj.weight",
                   {c.n_head * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank}});
    out.push_back({TensorRole::kAttnO, il, -1, a + "o_proj.weight", {c.n_embd, c.attn_out_dim()}});
    if (!c.is_moe_layer(il)) {
      add_dense_mlp_tensors(c, il, out);
      continue;
    }
    out.push_back({TensorRole::kRouter, il, -1, p + "mlp.gate.weight", {c.n_expert, c.n_embd}});
    if (router_bias)
      out.push_back({TensorRole::kRouterBias, il, -1, p + "mlp.gate.e_score_correction_bias", {c.n_expert}});
    add_expert_tensors(c, il, "mlp.experts", "gate_proj", "up_proj", "down_proj", out);
    if (c.n_ff_shared > 0) add_shared_expert_tensors(c, il, "mlp.shared_experts", out);
  }
  return out;
}

std::vector<TensorSpec> tensor_table_v2(const ModelConfig& c) { return tensor_table(c, false); }
std::vector<TensorSpec> tensor_table_v3(const ModelConfig& c) { return tensor_table(c, true); }

// llama.cpp's deepseek2 files, every DeepSeek-V2/V3 and Kimi-K2 model: the gating function tells V3
// (sigmoid, 2) from V2 (softmax, 1, or absent in older files); MLA's head sizes are the *_mla keys
// (older files without them: key_length and value_length); YaRN's log multiplier is 0.1 x
// mscale_all_dim.
void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  const auto required = [&](std::string_view suffix) {
    const auto value = f.int_key(suffix);
    if (!value) throw_error("{}: key {} is missing", f.path, f.key(suffix));
    return *value;
  };
  const int64_t n_layer = f.main_layers();  // GLM-4.7-Flash's files carry a NextN block after the layers
  j["num_hidden_layers"] = n_layer;
  const int64_t gating = f.int_key("expert_gating_func").value_or(1);
  if (gating != 1 && gating != 2)
    throw_error("{}: key {} = {}: DeepSeek routes with softmax (1) or sigmoid (2)", f.path, f.key("expert_gating_func"),
                gating);
  const bool v3 = gating == 2;
  j["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  j["n_routed_experts"] = f.n_expert;
  j["moe_intermediate_size"] = f.n_ff_expert.value_or(0);
  if (f.n_ff) j["intermediate_size"] = *f.n_ff;
  j["n_shared_experts"] = f.int_key("expert_shared_count").value_or(0);
  j["first_k_dense_replace"] = f.leading_dense_layers(n_layer);
  j["routed_scaling_factor"] = f.file_float("expert_weights_scale").value_or(1.0);
  j["norm_topk_prob"] = f.norm_topk.value_or(false);
  const int64_t groups = f.int_key("expert_group_count").value_or(1);
  const int64_t groups_used = f.int_key("expert_group_used_count").value_or(groups);
  j["n_group"] = groups;
  j["topk_group"] = groups_used;
  if (v3)
    j["topk_method"] = "noaux_tc";
  else
    j["topk_method"] = groups_used < groups ? "group_limited_greedy" : "greedy";
  // The latent: q_lora_rank only with a low-rank query, the latent rank, the rotary key.
  if (const auto q_rank = f.int_key("attention.q_lora_rank")) j["q_lora_rank"] = *q_rank;
  const int64_t rank = required("attention.kv_lora_rank");
  const int64_t rope = required("rope.dimension_count");
  j["kv_lora_rank"] = rank;
  j["qk_rope_head_dim"] = rope;
  const auto key_mla = f.int_key("attention.key_length_mla");
  const int64_t qk_head = key_mla ? *key_mla : required("attention.key_length");
  const int64_t v_head = key_mla ? required("attention.value_length_mla") : required("attention.value_length");
  if (qk_head <= rope)
    throw_error("{}: key {} = {} leaves no non-rotary part next to {} = {}", f.path,
                f.key(key_mla ? "attention.key_length_mla" : "attention.key_length"), qk_head,
                f.key("rope.dimension_count"), rope);
  j["qk_nope_head_dim"] = qk_head - rope;
  j["v_head_dim"] = v_head;
  j["num_key_value_heads"] = j["num_attention_heads"];
  j.erase("partial_rotary_factor");
  j["rope_interleave"] = true;  // llama.cpp rotates deepseek2's pairs (rope type NORM)
  if (j.contains("rope_scaling") && j["rope_scaling"]["type"] == "yarn") {
    const double mscale_all_dim = f.file_float("rope.scaling.yarn_log_multiplier").value_or(0.0) / 0.1;
    if (mscale_all_dim != 0.0) {  // DeepSeek's configs have mscale == mscale_all_dim: cos/sin unscaled
      j["rope_scaling"]["mscale"] = mscale_all_dim;
      j["rope_scaling"]["mscale_all_dim"] = mscale_all_dim;
    }
  }
}

constexpr GgufNames kGgufNames{
    "mlp.gate.weight", "mlp.experts", "gate_proj",          "up_proj",
    "down_proj",       false,         "mlp.shared_experts", "mlp.gate.e_score_correction_bias"};

}  // namespace

const ArchSpec& arch_deepseek_v2() {
  // No widen key: moe_intermediate_size also sizes the shared experts.
  static const ArchSpec spec{Arch::kDeepseekV2, "deepseek_v2", "DeepSeek-V2", read_config_v2, tensor_table_v2,
                             "deepseek2",       gguf_config,   kGgufNames,    nullptr};
  return spec;
}

const ArchSpec& arch_deepseek_v3() {
  static const ArchSpec spec{Arch::kDeepseekV3, "deepseek_v3", "DeepSeek-V3", read_config_v3, tensor_table_v3,
                             "deepseek2",       gguf_config,   kGgufNames,    nullptr};
  return spec;
}

const ArchSpec& arch_glm4_moe_lite() {
  static const ArchSpec spec{Arch::kGlm4MoeLite,   "glm4_moe_lite", "GLM-4.7-Flash",
                             read_config_glm_lite, tensor_table_v3, "deepseek2",
                             gguf_config,          kGgufNames,      nullptr};
  return spec;
}

}  // namespace chronos
