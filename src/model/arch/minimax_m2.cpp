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

void gguf_config(const GgufFacts& f, nlohmann::json&) {
  throw_error("{}: MiniMax-M2 GGUF files (minimax-m2) are not read yet; load the Hugging Face folder", f.path);
}

}  // namespace

const ArchSpec& arch_minimax_m2() {
  static const ArchSpec spec{
      Arch::kMinimaxM2,   "minimax_m2",
      "MiniMax-M2",       read_config,
      tensor_table,       "minimax-m2",
      gguf_config,        {"block_sparse_moe.gate.weight", "block_sparse_moe.experts", "w1", "w3", "w2"},
      "intermediate_size"};
  return spec;
}

}  // namespace chronos
