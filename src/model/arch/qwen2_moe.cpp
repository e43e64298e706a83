// Qwen2-MoE: q/k/v biases, a sigmoid-gated shared expert, dense layers by decoder_sparse_step.
#include "model/arch/qwen_moe_common.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  c.n_expert = qwen_moe::read_expert_count(j);
  c.n_ff_expert = json_int_or(j, "moe_intermediate_size", 0);
  c.n_ff_shared = json_int_or(j, "shared_expert_intermediate_size", 0);
  c.shared_expert_gated = c.n_ff_shared > 0;
  c.n_ff_dense = json_int_or(j, "intermediate_size", 0);
  c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", false);
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-6));
  c.attn_qkv_bias = json_bool_or(j, "qkv_bias", true);
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  qwen_moe::read_layer_kinds(j, c);
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    qwen_moe::add_ffn_tensors(c, il, out);
  }
  return out;
}

void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  qwen_moe::gguf_config(f, j);
  std::optional<int64_t> n_ff_shared = f.int_key("expert_shared_feed_forward_length");
  for (int64_t il = 0; il < f.n_layer && !n_ff_shared; ++il)
    n_ff_shared = f.tensor_rows(fmt::format("blk.{}.ffn_gate_shexp.weight", il));
  j["shared_expert_intermediate_size"] = n_ff_shared.value_or(0);
  j["qkv_bias"] = f.has_tensor("blk.0.attn_q.bias");
  j["norm_topk_prob"] = f.norm_topk.value_or(false);
}

}  // namespace

const ArchSpec& arch_qwen2_moe() {
  static const ArchSpec spec{Arch::kQwen2Moe, "qwen2_moe",          "Qwen2-MoE",
                             read_config,     tensor_table,         "qwen2moe",
                             gguf_config,     qwen_moe::kGgufNames, "moe_intermediate_size"};
  return spec;
}

}  // namespace chronos
