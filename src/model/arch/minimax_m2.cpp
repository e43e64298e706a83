// MiniMax-M2 (minimax_m2): every layer MoE with the sigmoid + bias router without groups (weights
// always renormalized, no scaling), q/k RMSNorm over the whole projection (as OLMoE), partial rotary
// (rope_parameters' partial_rotary_factor, or the released checkpoints' rotary_dim), no shared
// expert; Mixtral's tensor names (block_sparse_moe, w1/w3/w2) with the bias beside the router.
#include <fmt/format.h>

#include "chronos/error.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  c.n_expert = json_int(j, "num_local_experts");
  c.n_ff_expert = json_int(j, "intermediate_size");
  c.norm_topk_prob = true;  // the router always renormalizes; the config has no such key
  c.layers.assign(size_t(c.n_layer), LayerKind{AttentionKind::kGqa, FfnKind::kMoe, RouterKind::kSigmoidBias});
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-6));
  c.qk_norm = QkNorm::kFullWidth;
  if (json_bool_or(j, "attention_bias", false)) throw_error("attention_bias: true is not supported");
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  if (j.contains("rotary_dim") && !j["rotary_dim"].is_null()) {  // the released checkpoints' legacy key
    const int64_t rotary_dim = json_int(j, "rotary_dim");
    if (rotary_dim <= 0 || rotary_dim > c.head_dim || rotary_dim % 2 != 0)
      throw_error("key 'rotary_dim' must be even and in [2, head_dim = {}] (got {})", c.head_dim, rotary_dim);
    c.n_rot = rotary_dim;
  }
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    const std::string p = fmt::format("model.layers.{}.block_sparse_moe.", il);
    out.push_back({TensorRole::kRouter, il, -1, p + "gate.weight", {c.n_expert, c.n_embd}});
    out.push_back({TensorRole::kRouterBias, il, -1, p + "e_score_correction_bias", {c.n_expert}});
    add_expert_tensors(c, il, "block_sparse_moe.experts", "w1", "w3", "w2", out);
  }
  return out;
}

// llama.cpp's minimax-m2 files: every layer MoE, the sigmoid router, rope.dimension_count the
// checkpoint's rotary_dim (partial_rotary_factor from the common keys).
void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  if (!f.dense_layers.empty())
    throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing (every MiniMax-M2 layer has a router)", f.path,
                f.dense_layers.front());
  if (const auto gating = f.int_key("expert_gating_func"); gating && *gating != 2)
    throw_error("{}: key {} = {}: MiniMax-M2 routes with sigmoid (2)", f.path, f.key("expert_gating_func"), *gating);
  if (f.norm_topk && !*f.norm_topk)
    throw_error("{}: key {} = false: MiniMax-M2 always renormalizes", f.path, f.key("expert_weights_norm"));
  j["num_local_experts"] = f.n_expert;
  j["intermediate_size"] = f.n_ff_expert ? *f.n_ff_expert : f.n_ff.value_or(0);
}

constexpr GgufNames kGgufNames{"block_sparse_moe.gate.weight",
                               "block_sparse_moe.experts",
                               "w1",
                               "w3",
                               "w2",
                               false,
                               nullptr,
                               "block_sparse_moe.e_score_correction_bias"};

}  // namespace

const ArchSpec& arch_minimax_m2() {
  static const ArchSpec spec{Arch::kMinimaxM2, "minimax_m2", "MiniMax-M2", read_config,        tensor_table,
                             "minimax-m2",     gguf_config,  kGgufNames,   "intermediate_size"};
  return spec;
}

}  // namespace chronos
