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
  c.n_expert = json_int_or(j, "n_routed_experts", 0);
  c.n_ff_expert = json_int_or(j, "moe_intermediate_size", 0);
  const int64_t n_shared = json_int_or(j, "n_shared_experts", 0);
  if (n_shared < 0 || n_shared > 64) throw_error("key 'n_shared_experts' must be in [0, 64] (got {})", n_shared);
  c.n_ff_shared = c.n_ff_expert * n_shared;  // the shared experts are one FFN of n_shared times the width
  c.n_ff_dense = json_int_or(j, "intermediate_size", 0);
  c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", true);
  c.routed_scaling = float(json_number_or(j, "routed_scaling_factor", 1.0));
  if (!(c.routed_scaling > 0.0f) || !std::isfinite(c.routed_scaling))
    throw_error("key 'routed_scaling_factor' must be a positive number (got {})", c.routed_scaling);
  c.n_group = json_int_or(j, "n_group", 1);
  c.topk_group = json_int_or(j, "topk_group", 1);
  if (c.n_group < 1 || c.n_group > kMaxRouterGroups)
    throw_error("key 'n_group' must be in [1, {}] (got {})", kMaxRouterGroups, c.n_group);
  if (c.topk_group < 1 || c.topk_group > c.n_group)
    throw_error("key 'topk_group' must be in [1, n_group = {}] (got {})", c.n_group, c.topk_group);
  if (c.n_expert % c.n_group != 0)
    throw_error("key 'n_group': {} groups do not divide n_routed_experts = {}", c.n_group, c.n_expert);
  if (c.n_group > 1 && c.n_expert / c.n_group < 2)
    throw_error("key 'n_group': {} groups of n_routed_experts = {} leave fewer than 2 experts per group", c.n_group,
                c.n_expert);
  if (c.topk_group * (c.n_expert / c.n_group) < c.n_expert_used)
    throw_error("key 'topk_group': {} groups of {} experts cannot hold num_experts_per_tok = {}", c.topk_group,
                c.n_expert / c.n_group, c.n_expert_used);
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-5));
  c.attn_qkv_bias = json_bool_or(j, "attention_bias", false);
  if (json_bool_or(j, "use_qk_norm", false)) c.qk_norm = QkNorm::kPerHead;
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  const int64_t first_dense = json_int_or(j, "first_k_dense_replace", 0);
  if (first_dense < 0 || first_dense > c.n_layer)
    throw_error("key 'first_k_dense_replace' must be in [0, num_hidden_layers = {}] (got {})", c.n_layer, first_dense);
  c.layers.assign(size_t(c.n_layer), LayerKind{});
  for (int64_t i = first_dense; i < c.n_layer && c.n_expert > 0; ++i)
    c.layers[size_t(i)] = LayerKind{AttentionKind::kGqa, FfnKind::kMoe, RouterKind::kSigmoidBias};
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
    if (c.n_ff_shared > 0) {
      out.push_back(
          {TensorRole::kSharedGate, il, -1, p + "shared_experts.gate_proj.weight", {c.n_ff_shared, c.n_embd}});
      out.push_back({TensorRole::kSharedUp, il, -1, p + "shared_experts.up_proj.weight", {c.n_ff_shared, c.n_embd}});
      out.push_back(
          {TensorRole::kSharedDown, il, -1, p + "shared_experts.down_proj.weight", {c.n_embd, c.n_ff_shared}});
    }
  }
  return out;
}

void gguf_config(const GgufFacts& f, nlohmann::json&) {
  throw_error("{}: GLM-4 MoE GGUF files (glm4moe) are not read yet; load the Hugging Face folder", f.path);
}

}  // namespace

const ArchSpec& arch_glm4_moe() {
  static const ArchSpec spec{
      Arch::kGlm4Moe, "glm4_moe", "GLM-4 MoE", read_config,
      tensor_table,   "glm4moe",  gguf_config, {"mlp.gate.weight", "mlp.experts", "gate_proj", "up_proj", "down_proj"},
      nullptr};  // moe_intermediate_size also sizes the shared experts
  return spec;
}

}  // namespace chronos
