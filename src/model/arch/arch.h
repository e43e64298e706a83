// The per-architecture interface, one file per architecture: config.json quirks, the tensor table,
// and the GGUF side (architecture name, config keys, tensor names).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chronos/model_config.h"
#include "chronos/safetensors.h"

namespace chronos {

class GgufFile;

// What a checkpoint tensor is for. The loader binds each role to a field of the weights.
enum class TensorRole {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnO,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,
  kAttnKNorm,
  kAttnQA,       // MLA: q_a_proj [q_lora_rank, n_embd]
  kAttnQANorm,   // q_a_layernorm [q_lora_rank]
  kAttnQB,       // q_b_proj [n_head * head_dim, q_lora_rank]
  kAttnKvA,      // kv_a_proj_with_mqa [kv_lora_rank + qk_rope_dim, n_embd]
  kAttnKvANorm,  // kv_a_layernorm [kv_lora_rank]
  kAttnKvB,      // kv_b_proj [n_head * (qk_nope_dim + v_head_dim), kv_lora_rank]
  kAttnOBias,    // o_proj.bias [n_embd]
  kAttnSinks,    // gpt-oss: one sink logit per head [n_head]
  // Gated DeltaNet: Qwen3-Next's in_proj_qkvz and in_proj_ba (rows grouped per key head) as kLinQkv
  // and kLinB, or Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a; conv1d [conv_dim, 1,
  // kernel], A_log and dt_bias [v_heads], the gated norm [v_dim]; out_proj is kAttnO.
  kLinQkv,
  kLinZ,
  kLinB,
  kLinA,
  kLinConv,
  kLinALog,
  kLinDtBias,
  kLinNorm,
  kFfnNorm,
  kRouter,
  kRouterBias,       // the selection bias of a sigmoid router (e_score_correction_bias)
  kRouterLogitBias,  // gpt-oss: the router's linear bias, added to its logits [n_expert]
  kExpertGate,
  kExpertUp,
  kExpertDown,
  kExpertGateBias,  // gpt-oss: every expert's projection biases, [n_expert, n_ff] or [n_expert, n_embd]
  kExpertUpBias,
  kExpertDownBias,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,
  kDenseGate,
  kDenseUp,
  kDenseDown,
};

struct TensorSpec {
  TensorRole role;
  int64_t layer = -1;   // -1 for global tensors
  int64_t expert = -1;  // routed expert index, -1 otherwise
  std::string name;     // checkpoint name
  std::vector<int64_t> shape;
};

// What the common part of config_json_from_gguf (gguf_config.cpp) found in a GGUF file, for the
// architecture's own keys.
struct GgufFacts {
  const GgufFile& file;
  std::string path;      // for messages
  std::string arch;      // general.architecture: keys are "<arch>.<suffix>"
  int64_t n_expert = 0;  // <arch>.expert_count, 0 when absent
  int64_t n_layer = 0;
  std::optional<int64_t> n_ff_expert;  // <arch>.expert_feed_forward_length, or a MoE layer's gate rows
  std::optional<int64_t> n_ff;         // <arch>.feed_forward_length
  std::vector<int64_t> dense_layers;   // layers without a router tensor (blk.N.ffn_gate_inp)
  std::optional<bool> norm_topk;       // <arch>.expert_weights_norm
  std::string key(std::string_view suffix) const;
  std::optional<int64_t> int_key(std::string_view suffix) const;
  std::optional<double> file_float(std::string_view suffix) const;  // <arch>.<suffix>
  // Rows of a named tensor with at least two dimensions.
  std::optional<int64_t> tensor_rows(const std::string& name) const;
  bool has_tensor(const std::string& name) const;
  // How many leading layers of the first n_layer are dense (have no router), checked: no later
  // layer may be dense, and leading_dense_block_count, when present, must agree. Throws Error naming
  // the tensor or the key.
  int64_t leading_dense_layers(int64_t n_layer) const;
  // The model's layers: block_count less the NextN (multi-token prediction) blocks that follow them
  // (<arch>.nextn_predict_layers), which decoding does not use. Throws Error naming the key when
  // none would be left.
  int64_t main_layers() const;
};

// The Hugging Face names a GGUF file's tensors map to where architectures differ.
struct GgufNames {
  const char* router;                        // after "model.layers.N.", e.g. "mlp.gate.weight"
  const char* experts;                       // e.g. "mlp.experts"
  const char *gate, *up, *down;              // the expert projections, e.g. "gate_proj"
  bool permuted_qk = false;                  // llama.cpp's converter interleaved Q/K rotary halves (llama)
  const char* shared = "mlp.shared_expert";  // the shared experts' module (ffn_*_shexp)
  const char* router_bias = nullptr;         // the sigmoid router's selection bias (exp_probs_b.bias)
  const char* router_logit_bias = nullptr;   // the router's linear bias (ffn_gate_inp.bias, gpt-oss)
};

// One architecture, all of it in its arch/<name>.cpp: its config.json quirks, its tensor table, and
// how its GGUF files name it, its keys and its tensors.
struct ArchSpec {
  Arch arch;
  const char* model_type;  // config.json "model_type"
  const char* name;        // for messages and inspect
  // Fills the architecture-specific fields of cfg from config.json (common keys are already read).
  void (*read_config)(const nlohmann::json& json, ModelConfig& cfg);
  // Every tensor the model needs, with its expected shape.
  std::vector<TensorSpec> (*tensor_table)(const ModelConfig& cfg);
  const char* gguf_arch;  // general.architecture of its GGUF files
  // Writes the architecture's config.json keys from a GGUF file (the common ones are already in
  // json); throws Error naming the file for what the architecture cannot be.
  void (*gguf_config)(const GgufFacts& facts, nlohmann::json& json);
  GgufNames gguf_names;
  // config.json key of the routed experts' FFN size (chronos widen writes it); null where the key
  // sizes other tensors too and widening is refused.
  const char* expert_ffn_key;
  double partial_rotary_default = 1.0;  // the rotary share of a head when config.json does not say
  // Lists in a safetensors checkpoint's store the tensors made from its own (gpt-oss's fused experts,
  // split per expert) in their place, before binding (null: none; TensorStore::present); `source`
  // names the checkpoint in errors. A pack stores what was made under those names: nothing to make.
  void (*present)(TensorStore& store, const ModelConfig& config, const std::string& source) = nullptr;
};

const ArchSpec& arch_mixtral();
const ArchSpec& arch_qwen2_moe();
const ArchSpec& arch_qwen3_moe();
const ArchSpec& arch_olmoe();
const ArchSpec& arch_glm4_moe();
const ArchSpec& arch_minimax_m2();
const ArchSpec& arch_deepseek_v2();
const ArchSpec& arch_deepseek_v3();
const ArchSpec& arch_glm4_moe_lite();
const ArchSpec& arch_gpt_oss();
const ArchSpec& arch_qwen3_next();
const ArchSpec& arch_qwen3_5_moe();

// All registered architectures; find_arch returns nullptr for an unknown model_type.
std::span<const ArchSpec* const> all_archs();
const ArchSpec* find_arch(std::string_view model_type);
const ArchSpec* find_gguf_arch(std::string_view gguf_arch);
const ArchSpec& arch_spec(Arch arch);

// routed_scaling_factor, n_group and topk_group of a group-limited router, checked against the
// expert counts (one line naming the key).
void read_router_groups(const nlohmann::json& json, ModelConfig& cfg);
// DeepSeek-style MoE keys (GLM-4 MoE, DeepSeek-V2/V3): n_routed_experts, moe_intermediate_size,
// n_shared_experts (one ungated FFN of that many times the width), intermediate_size for the dense
// layers, norm_topk_prob, the router's groups and scaling, and first_k_dense_replace leading dense
// layers; every layer's attention is `attention`, a MoE layer's router `router`.
void read_routed_experts(const nlohmann::json& json, ModelConfig& cfg, AttentionKind attention, RouterKind router,
                         bool norm_default);

// Shared helpers for the arch files: the tensors every Llama-style decoder has.
void add_global_tensors(const ModelConfig& cfg, std::vector<TensorSpec>& out);
void add_attention_tensors(const ModelConfig& cfg, int64_t layer, std::vector<TensorSpec>& out);
// Per-expert gate/up/down with the given name pattern, e.g.
// "model.layers.{layer}.mlp.experts.{expert}.{proj}.weight" with proj names gate/up/down.
void add_expert_tensors(const ModelConfig& cfg, int64_t layer, const std::string& prefix, const char* gate,
                        const char* up, const char* down, std::vector<TensorSpec>& out);
void add_dense_mlp_tensors(const ModelConfig& cfg, int64_t layer, std::vector<TensorSpec>& out);
// The shared expert's gate/up/down ([n_ff_shared] wide) under "model.layers.{layer}.{module}.".
void add_shared_expert_tensors(const ModelConfig& cfg, int64_t layer, const std::string& module,
                               std::vector<TensorSpec>& out);

// config.json's layer_types where each layer is `one` or `other`: whether each is `one`; nullopt
// when the key is absent or null. Throws Error naming the key for a list of the wrong length or
// another type name.
std::optional<std::vector<bool>> read_layer_types(const nlohmann::json& json, int64_t n_layer, const char* one,
                                                  const char* other);

// JSON accessors that name the key in their errors ("config.json: key 'x': ...").
int64_t json_int(const nlohmann::json& json, const char* key);
int64_t json_int_or(const nlohmann::json& json, const char* key, int64_t fallback);
double json_number_or(const nlohmann::json& json, const char* key, double fallback);
bool json_bool_or(const nlohmann::json& json, const char* key, bool fallback);

}  // namespace chronos
