// Mixtral: 8 experts named w1 (gate), w3 (up), w2 (down); top-k weights always renormalized.
#include "chronos/error.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  c.n_expert = json_int(j, "num_local_experts");
  c.n_ff_expert = json_int(j, "intermediate_size");
  c.norm_topk_prob = true;  // Mixtral has no such key: it always renormalizes
  c.layers.assign(size_t(c.n_layer), LayerKind{.ffn = FfnKind::kMoe});
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-5));
  if (!j.contains("rope_theta") && !(j.contains("rope_parameters") && j["rope_parameters"].contains("rope_theta")))
    c.rope_theta = 1e6f;
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  const int64_t window = json_int_or(j, "sliding_window", 0);
  if (window > 0) c.sliding_window = window;  // null in the official config: full attention
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    out.push_back({TensorRole::kRouter,
                   il,
                   -1,
                   fmt::format("model.layers.{}.block_sparse_moe.gate.weight", il),
                   {c.n_expert, c.n_embd}});
    add_expert_tensors(c, il, "block_sparse_moe.experts", "w1", "w3", "w2", out);
  }
  return out;
}

// llama.cpp writes Mixtral as "llama" with experts; its files have no dense layers.
void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  if (f.n_expert <= 0)
    throw_error("{}: key general.architecture: a dense llama model (no llama.expert_count); only MoE models run",
                f.path);
  if (!f.dense_layers.empty())
    throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing (every Mixtral layer has a router)", f.path,
                f.dense_layers.front());
  j["num_local_experts"] = f.n_expert;
  j["intermediate_size"] = f.n_ff_expert ? *f.n_ff_expert : f.n_ff.value_or(0);
  j["norm_topk_prob"] = f.norm_topk.value_or(true);
}

}  // namespace

const ArchSpec& arch_mixtral() {
  static const ArchSpec spec{
      Arch::kMixtral,     "mixtral",
      "Mixtral",          read_config,
      tensor_table,       "llama",
      gguf_config,        {"block_sparse_moe.gate.weight", "block_sparse_moe.experts", "w1", "w3", "w2", true},
      "intermediate_size"};
  return spec;
}

}  // namespace chronos
