// The architecture registry and the tensor-table pieces every Llama-style decoder shares.
#include <fmt/format.h>

#include <array>
#include <cmath>

#include "chronos/error.h"
#include "model/arch/arch.h"
#include "model/router.h"

namespace chronos {

std::span<const ArchSpec* const> all_archs() {
  // deepseek_v2 answers for deepseek2 GGUF files (their gating key picks V2 or V3); GLM-4.7-Flash's
  // deepseek2 files are DeepSeek-V3's model.
  static const std::array<const ArchSpec*, 12> archs = {&arch_mixtral(),     &arch_qwen2_moe(),   &arch_qwen3_moe(),
                                                        &arch_olmoe(),       &arch_glm4_moe(),    &arch_minimax_m2(),
                                                        &arch_deepseek_v2(), &arch_deepseek_v3(), &arch_glm4_moe_lite(),
                                                        &arch_gpt_oss(),     &arch_qwen3_next(),  &arch_qwen3_5_moe()};
  return archs;
}

const ArchSpec* find_arch(std::string_view model_type) {
  for (const ArchSpec* arch : all_archs())
    if (model_type == arch->model_type) return arch;
  return nullptr;
}

const ArchSpec* find_gguf_arch(std::string_view gguf_arch) {
  for (const ArchSpec* arch : all_archs())
    if (gguf_arch == arch->gguf_arch) return arch;
  return nullptr;
}

const ArchSpec& arch_spec(Arch arch) {
  for (const ArchSpec* spec : all_archs())
    if (spec->arch == arch) return *spec;
  CHRONOS_CHECK_MSG(false, "unregistered architecture {}", int(arch));
  return arch_mixtral();
}

void read_routed_experts(const nlohmann::json& j, ModelConfig& c, AttentionKind attention, RouterKind router,
                         bool norm_default) {
  c.n_expert = json_int_or(j, "n_routed_experts", 0);
  c.n_ff_expert = json_int_or(j, "moe_intermediate_size", 0);
  const int64_t n_shared = json_int_or(j, "n_shared_experts", 0);
  if (n_shared < 0 || n_shared > 64) throw_error("key 'n_shared_experts' must be in [0, 64] (got {})", n_shared);
  c.n_ff_shared = c.n_ff_expert * n_shared;  // the shared experts are one FFN of n_shared times the width
  c.n_ff_dense = json_int_or(j, "intermediate_size", 0);
  c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", norm_default);
  read_router_groups(j, c);
  const int64_t first_dense = json_int_or(j, "first_k_dense_replace", 0);
  if (first_dense < 0 || first_dense > c.n_layer)
    throw_error("key 'first_k_dense_replace' must be in [0, num_hidden_layers = {}] (got {})", c.n_layer, first_dense);
  c.layers.assign(size_t(c.n_layer), LayerKind{attention, FfnKind::kDense, RouterKind::kSoftmaxTopK});
  for (int64_t i = first_dense; i < c.n_layer && c.n_expert > 0; ++i)
    c.layers[size_t(i)] = LayerKind{attention, FfnKind::kMoe, router};
}

void read_router_groups(const nlohmann::json& j, ModelConfig& c) {
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
}

std::optional<std::vector<bool>> read_layer_types(const nlohmann::json& j, int64_t n_layer, const char* one,
                                                  const char* other) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return std::nullopt;
  const nlohmann::json& types = j["layer_types"];
  if (!types.is_array() || std::ssize(types) != n_layer)
    throw_error("key 'layer_types' must list num_hidden_layers = {} layer types", n_layer);
  std::vector<bool> is_one(static_cast<size_t>(n_layer));
  for (int64_t i = 0; i < n_layer; ++i) {
    const nlohmann::json& type = types[size_t(i)];
    if (type != one && type != other)
      throw_error("key 'layer_types': layer {} is {} ({} or {})", i, type.dump(), one, other);
    is_one[size_t(i)] = type == one;
  }
  return is_one;
}

void add_global_tensors(const ModelConfig& c, std::vector<TensorSpec>& out) {
  out.push_back({TensorRole::kTokenEmbd, -1, -1, "model.embed_tokens.weight", {c.n_vocab, c.n_embd}});
  out.push_back({TensorRole::kOutputNorm, -1, -1, "model.norm.weight", {c.n_embd}});
  if (!c.tie_word_embeddings) out.push_back({TensorRole::kOutput, -1, -1, "lm_head.weight", {c.n_vocab, c.n_embd}});
}

void add_attention_tensors(const ModelConfig& c, int64_t il, std::vector<TensorSpec>& out) {
  const std::string p = fmt::format("model.layers.{}.", il);
  out.push_back({TensorRole::kAttnNorm, il, -1, p + "input_layernorm.weight", {c.n_embd}});
  out.push_back({TensorRole::kFfnNorm, il, -1, p + "post_attention_layernorm.weight", {c.n_embd}});
  // With an output gate, q_proj gives each head's query and then its gate.
  const int64_t q_rows = c.attn_output_gate ? 2 * c.q_dim() : c.q_dim();
  out.push_back({TensorRole::kAttnQ, il, -1, p + "self_attn.q_proj.weight", {q_rows, c.n_embd}});
  out.push_back({TensorRole::kAttnK, il, -1, p + "self_attn.k_proj.weight", {c.kv_dim(), c.n_embd}});
  out.push_back({TensorRole::kAttnV, il, -1, p + "self_attn.v_proj.weight", {c.kv_dim(), c.n_embd}});
  out.push_back({TensorRole::kAttnO, il, -1, p + "self_attn.o_proj.weight", {c.n_embd, c.q_dim()}});
  if (c.attn_qkv_bias) {
    out.push_back({TensorRole::kAttnQBias, il, -1, p + "self_attn.q_proj.bias", {c.q_dim()}});
    out.push_back({TensorRole::kAttnKBias, il, -1, p + "self_attn.k_proj.bias", {c.kv_dim()}});
    out.push_back({TensorRole::kAttnVBias, il, -1, p + "self_attn.v_proj.bias", {c.kv_dim()}});
  }
  if (c.qk_norm == QkNorm::kPerHead) {
    out.push_back({TensorRole::kAttnQNorm, il, -1, p + "self_attn.q_norm.weight", {c.head_dim}});
    out.push_back({TensorRole::kAttnKNorm, il, -1, p + "self_attn.k_norm.weight", {c.head_dim}});
  } else if (c.qk_norm == QkNorm::kFullWidth) {
    out.push_back({TensorRole::kAttnQNorm, il, -1, p + "self_attn.q_norm.weight", {c.q_dim()}});
    out.push_back({TensorRole::kAttnKNorm, il, -1, p + "self_attn.k_norm.weight", {c.kv_dim()}});
  }
}

void add_expert_tensors(const ModelConfig& c, int64_t il, const std::string& prefix, const char* gate, const char* up,
                        const char* down, std::vector<TensorSpec>& out) {
  for (int64_t e = 0; e < c.n_expert; ++e) {
    const std::string p = fmt::format("model.layers.{}.{}.{}.", il, prefix, e);
    out.push_back({TensorRole::kExpertGate, il, e, p + gate + ".weight", {c.n_ff_expert, c.n_embd}});
    out.push_back({TensorRole::kExpertUp, il, e, p + up + ".weight", {c.n_ff_expert, c.n_embd}});
    out.push_back({TensorRole::kExpertDown, il, e, p + down + ".weight", {c.n_embd, c.n_ff_expert}});
  }
}

void add_dense_mlp_tensors(const ModelConfig& c, int64_t il, std::vector<TensorSpec>& out) {
  const std::string p = fmt::format("model.layers.{}.mlp.", il);
  out.push_back({TensorRole::kDenseGate, il, -1, p + "gate_proj.weight", {c.n_ff_dense, c.n_embd}});
  out.push_back({TensorRole::kDenseUp, il, -1, p + "up_proj.weight", {c.n_ff_dense, c.n_embd}});
  out.push_back({TensorRole::kDenseDown, il, -1, p + "down_proj.weight", {c.n_embd, c.n_ff_dense}});
}

void add_shared_expert_tensors(const ModelConfig& c, int64_t il, const std::string& module,
                               std::vector<TensorSpec>& out) {
  const std::string p = fmt::format("model.layers.{}.{}.", il, module);
  out.push_back({TensorRole::kSharedGate, il, -1, p + "gate_proj.weight", {c.n_ff_shared, c.n_embd}});
  out.push_back({TensorRole::kSharedUp, il, -1, p + "up_proj.weight", {c.n_ff_shared, c.n_embd}});
  out.push_back({TensorRole::kSharedDown, il, -1, p + "down_proj.weight", {c.n_embd, c.n_ff_shared}});
}

}  // namespace chronos
