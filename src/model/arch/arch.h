// The per-architecture interface: config quirks and the tensor table, one file per architecture.
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string>
#include <vector>

#include "chronos/model_config.h"

namespace chronos {

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
  kFfnNorm,
  kRouter,
  kExpertGate,
  kExpertUp,
  kExpertDown,
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

struct ArchSpec {
  Arch arch;
  const char* model_type;  // config.json "model_type"
  const char* name;        // for messages and inspect
  // Fills the architecture-specific fields of cfg from config.json (common keys are already read).
  void (*read_config)(const nlohmann::json& json, ModelConfig& cfg);
  // Every tensor the model needs, with its expected shape.
  std::vector<TensorSpec> (*tensor_table)(const ModelConfig& cfg);
};

const ArchSpec& arch_mixtral();
const ArchSpec& arch_qwen2_moe();
const ArchSpec& arch_qwen3_moe();
const ArchSpec& arch_olmoe();

// All registered architectures; find_arch returns nullptr for an unknown model_type.
std::span<const ArchSpec* const> all_archs();
const ArchSpec* find_arch(std::string_view model_type);
const ArchSpec& arch_spec(Arch arch);

// Shared helpers for the arch files: the tensors every Llama-style decoder has.
void add_global_tensors(const ModelConfig& cfg, std::vector<TensorSpec>& out);
void add_attention_tensors(const ModelConfig& cfg, int64_t layer, std::vector<TensorSpec>& out);
// Per-expert gate/up/down with the given name pattern, e.g.
// "model.layers.{layer}.mlp.experts.{expert}.{proj}.weight" with proj names gate/up/down.
void add_expert_tensors(const ModelConfig& cfg, int64_t layer, const std::string& prefix, const char* gate,
                        const char* up, const char* down, std::vector<TensorSpec>& out);
void add_dense_mlp_tensors(const ModelConfig& cfg, int64_t layer, std::vector<TensorSpec>& out);

// JSON accessors that name the key in their errors ("config.json: key 'x': ...").
int64_t json_int(const nlohmann::json& json, const char* key);
int64_t json_int_or(const nlohmann::json& json, const char* key, int64_t fallback);
double json_number_or(const nlohmann::json& json, const char* key, double fallback);
bool json_bool_or(const nlohmann::json& json, const char* key, bool fallback);

}  // namespace chronos
