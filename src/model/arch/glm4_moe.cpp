// GLM-4.5 / 4.6 / 4.7 MoE (glm4_moe): the sigmoid + bias router of DeepSeek-V3 (groups, correction
// bias, renormalization, routed scaling) with grouped-query attention (qkv bias, optional per-head
// q/k norm, partial rotary), ungated shared experts, and dense leading layers
// (first_k_dense_replace).
#include <fmt/format.h>

#include <cmath>

#include "chronos/error.h"
#include "model/arch/arch.h"
#include "model/router.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  read_routed_experts(j, c, AttentionKind::kGqa, RouterKind::kSigmoidBias, true);
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-5));
  c.attn_qkv_bias = json_bool_or(j, "attention_bias", false);
  if (json_bool_or(j, "use_qk_norm", false)) c.qk_norm = QkNorm::kPerHead;
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    if (!c.is_moe_layer(il)) {
      add_dense_mlp_tensors(c, il, out);
      continue;
    }
    const std::string p = fmt::format("model.layers.{}.mlp.", il);
    out.push_back({TensorRole::kRouter, il, -1, p + "gate.weight", {c.n_expert, c.n_embd}});
    out.push_back({TensorRole::kRouterBias, il, -1, p + "gate.e_score_correction_bias", {c.n_expert}});
    add_expert_tensors(c, il, "mlp.experts", "gate_proj", "up_proj", "down_proj", out);
    if (c.n_ff_shared > 0) add_shared_expert_tensors(c, il, "mlp.shared_experts", out);
  }
  return out;
}

// llama.cpp's glm4moe files: block_count includes the NextN (multi-token prediction) blocks after
// the model's layers, which decoding does not use; the gating function key says sigmoid.
void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  const int64_t n_layer = f.main_layers();
  j["num_hidden_layers"] = n_layer;
  j["n_routed_experts"] = f.n_expert;
  j["moe_intermediate_size"] = f.n_ff_expert.value_or(0);
  if (f.n_ff) j["intermediate_size"] = *f.n_ff;
  j["n_shared_experts"] = f.int_key("expert_shared_count").value_or(0);
  j["first_k_dense_replace"] = f.leading_dense_layers(n_layer);
  if (const auto gating = f.int_key("expert_gating_func"); gating && *gating != 2)
    throw_error("{}: key {} = {}: GLM-4 MoE routes with sigmoid (2)", f.path, f.key("expert_gating_func"), *gating);
  j["routed_scaling_factor"] = f.file_float("expert_weights_scale").value_or(1.0);
  j["norm_topk_prob"] = f.norm_topk.value_or(true);
  j["n_group"] = f.int_key("expert_group_count").value_or(1);
  j["topk_group"] = f.int_key("expert_group_used_count").value_or(1);
  j["attention_bias"] = f.has_tensor("blk.0.attn_q.bias");
  j["use_qk_norm"] = f.has_tensor("blk.0.attn_q_norm.weight");
  if (!j.contains("partial_rotary_factor")) j["partial_rotary_factor"] = 1.0;  // every dimension rotary
}

constexpr GgufNames kGgufNames{
    "mlp.gate.weight", "mlp.experts", "gate_proj",          "up_proj",
    "down_proj",       false,         "mlp.shared_experts", "mlp.gate.e_score_correction_bias"};

}  // namespace

const ArchSpec& arch_glm4_moe() {
  // No widen key: moe_intermediate_size also sizes the shared experts. transformers' Glm4MoeConfig
  // rotates half of each head unless told otherwise.
  static const ArchSpec spec{Arch::kGlm4Moe, "glm4_moe",  "GLM-4 MoE", read_config, tensor_table,
                             "glm4moe",      gguf_config, kGgufNames,  nullptr,     0.5};
  return spec;
}

}  // namespace chronos
