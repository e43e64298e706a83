// Pieces shared by the Qwen2-MoE and Qwen3-MoE files: the dense/MoE layer rule and the MoE tensors.
#pragma once

#include <fmt/format.h>

#include <algorithm>

#include "chronos/error.h"
#include "model/arch/arch.h"

namespace chronos::qwen_moe {

// Layer i is MoE iff i is not in mlp_only_layers, experts exist and (i + 1) % decoder_sparse_step
// == 0 (1-based modulo, as transformers writes it).
inline void read_layer_kinds(const nlohmann::json& j, ModelConfig& c) {
  const int64_t step = json_int_or(j, "decoder_sparse_step", 1);
  if (step <= 0) throw_error("key 'decoder_sparse_step' must be positive (got {})", step);
  std::vector<int64_t> mlp_only;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null())
    mlp_only = j["mlp_only_layers"].get<std::vector<int64_t>>();
  c.layers.assign(size_t(c.n_layer), LayerKind{});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const bool listed = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    if (!listed && c.n_expert > 0 && (i + 1) % step == 0) c.layers[size_t(i)].ffn = FfnKind::kMoe;
  }
  if (json_bool_or(j, "use_sliding_window", false)) throw_error("use_sliding_window: true is not supported");
}

// Qwen's GGUF files: experts and their size, dense layers as mlp_only_layers.
inline void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  j["num_experts"] = f.n_expert;
  j["moe_intermediate_size"] = f.n_ff_expert.value_or(0);
  if (f.n_ff) j["intermediate_size"] = *f.n_ff;
  j["mlp_only_layers"] = f.dense_layers;
  j["decoder_sparse_step"] = 1;
}

inline constexpr GgufNames kGgufNames{"mlp.gate.weight", "mlp.experts", "gate_proj", "up_proj", "down_proj"};

// transformers 5 writes num_local_experts for Qwen3-MoE (an attribute alias of num_experts).
inline int64_t read_expert_count(const nlohmann::json& j) {
  return json_int_or(j, "num_experts", json_int_or(j, "num_local_experts", 0));
}

// The shared expert (mlp.shared_expert) and its sigmoid gate (mlp.shared_expert_gate), when the
// config has one.
inline void add_gated_shared_expert(const ModelConfig& c, int64_t il, std::vector<TensorSpec>& out) {
  if (c.n_ff_shared <= 0) return;
  add_shared_expert_tensors(c, il, "mlp.shared_expert", out);
  out.push_back({TensorRole::kSharedExpertGate,
                 il,
                 -1,
                 fmt::format("model.layers.{}.mlp.shared_expert_gate.weight", il),
                 {1, c.n_embd}});
}

inline void add_moe_tensors(const ModelConfig& c, int64_t il, std::vector<TensorSpec>& out) {
  out.push_back(
      {TensorRole::kRouter, il, -1, fmt::format("model.layers.{}.mlp.gate.weight", il), {c.n_expert, c.n_embd}});
  add_expert_tensors(c, il, "mlp.experts", "gate_proj", "up_proj", "down_proj", out);
}

// A layer's FFN as Qwen2-MoE and its successors name it: the dense MLP, or the router, the experts
// and the gated shared expert.
inline void add_ffn_tensors(const ModelConfig& c, int64_t il, std::vector<TensorSpec>& out) {
  if (!c.is_moe_layer(il)) {
    add_dense_mlp_tensors(c, il, out);
    return;
  }
  add_moe_tensors(c, il, out);
  add_gated_shared_expert(c, il, out);
}

}  // namespace chronos::qwen_moe
