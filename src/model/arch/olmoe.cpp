// OLMoE: q/k RMSNorm over the whole projection, optional clip_qkv, every layer MoE.
#include <fmt/format.h>

#include "chronos/error.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  c.n_expert = json_int_or(j, "num_experts", json_int_or(j, "num_local_experts", 0));
  if (c.n_expert <= 0) throw_error("missing key 'num_experts'");
  c.n_ff_expert = json_int(j, "intermediate_size");
  c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", false);
  c.layers.assign(size_t(c.n_layer), LayerKind{.ffn = FfnKind::kMoe});
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-5));
  c.qk_norm = QkNorm::kFullWidth;
  if (json_bool_or(j, "attention_bias", false)) throw_error("attention_bias: true is not supported");
  const double clip = json_number_or(j, "clip_qkv", 0.0);
  if (clip < 0.0) throw_error("key 'clip_qkv' must not be negative");
  if (clip > 0.0) c.clip_qkv = float(clip);
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    out.push_back(
        {TensorRole::kRouter, il, -1, fmt::format("model.layers.{}.mlp.gate.weight", il), {c.n_expert, c.n_embd}});
    add_expert_tensors(c, il, "mlp.experts", "gate_proj", "up_proj", "down_proj", out);
  }
  return out;
}

void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  if (!f.dense_layers.empty())
    throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing (every OLMoE layer has a router)", f.path,
                f.dense_layers.front());
  j["num_experts"] = f.n_expert;
  j["moe_intermediate_size"] = f.n_ff_expert.value_or(0);
  j["intermediate_size"] = f.n_ff_expert ? *f.n_ff_expert : f.n_ff.value_or(0);
  if (const auto clip = f.file_float("attention.clamp_kqv")) j["clip_qkv"] = *clip;
  j["norm_topk_prob"] = f.norm_topk.value_or(false);
}

}  // namespace

const ArchSpec& arch_olmoe() {
  static const ArchSpec spec{
      Arch::kOlmoe,       "olmoe", "OLMoE",     read_config,
      tensor_table,       "olmoe", gguf_config, {"mlp.gate.weight", "mlp.experts", "gate_proj", "up_proj", "down_proj"},
      "intermediate_size"};
  return spec;
}

}  // namespace chronos
