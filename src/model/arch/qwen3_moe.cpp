// Qwen3-MoE: per-head q/k RMSNorm, explicit head_dim, no shared expert.
#include "model/arch/qwen_moe_common.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  c.n_expert = qwen_moe::read_expert_count(j);
  c.n_ff_expert = json_int_or(j, "moe_intermediate_size", 0);
  c.n_ff_dense = json_int_or(j, "intermediate_size", 0);
  c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", false);
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-6));
  c.qk_norm = QkNorm::kPerHead;
  if (json_bool_or(j, "attention_bias", false)) throw_error("attention_bias: true is not supported");
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  qwen_moe::read_layer_kinds(j, c);
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    if (c.is_moe_layer(il))
      qwen_moe::add_moe_tensors(c, il, out);
    else
      add_dense_mlp_tensors(c, il, out);
  }
  return out;
}

void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  qwen_moe::gguf_config(f, j);
  j["norm_topk_prob"] = f.norm_topk.value_or(true);
}

}  // namespace

const ArchSpec& arch_qwen3_moe() {
  static const ArchSpec spec{Arch::kQwen3Moe, "qwen3_moe",          "Qwen3-MoE",
                             read_config,     tensor_table,         "qwen3moe",
                             gguf_config,     qwen_moe::kGgufNames, "moe_intermediate_size"};
  return spec;
}

}  // namespace chronos
