// The predictors as stored in a pack folder: both networks, their metadata, and the
// predictors.safetensors / predictors.json reader and writer.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "predict/dataset.h"
#include "predict/mlp.h"

namespace chronos::predict {

inline constexpr const char* kPredictorsTensors = "predictors.safetensors";
inline constexpr const char* kPredictorsJson = "predictors.json";
inline constexpr int kPredictorsVersion = 1;

// predictors.safetensors (all F32 but lookahead.slots):
//   lookahead.input_mean [n_embd], lookahead.input_scale [n_embd]   h0 normalization
//   lookahead.fc1.weight [rank, n_embd], lookahead.fc1.bias [rank]
//   lookahead.fc2.weight [n_slots * n_expert, rank], lookahead.fc2.bias [n_slots * n_expert]
//   lookahead.slots      [n_slots, 2] I32: (horizon, MoE layer position) of each output block
//   intent.input_mean [2 * n_embd], intent.input_scale [2 * n_embd]  pooled-feature normalization
//   intent.fc1.weight [hidden, 2 * n_embd], intent.fc1.bias [hidden]
//   intent.fc2.weight [n_moe_layers * n_expert, hidden], intent.fc2.bias [n_moe_layers * n_expert]
//   stats.expert_frequency [n_moe_layers, n_expert]  training-trace selection share per layer
struct PredictorPack {
  TraceShape shape;
  std::string model_fingerprint;
  int32_t horizon = 0;
  std::vector<Slot> slots;       // output blocks of the LookaheadRouter, lookahead_slots(shape, horizon)
  Mlp<float> lookahead;          // n_embd -> rank -> n_slots * n_expert, softmax per slot
  Mlp<float> intent;             // 2 * n_embd -> hidden -> n_moe_layers * n_expert, softmax per layer
  std::vector<float> frequency;  // [n_moe_layers * n_expert]; empty when unknown
  nlohmann::json training = nlohmann::json::object();  // "training" and "heldout" of predictors.json
};

// Writes both files atomically (temporary names, then rename); the safetensors bytes depend only
// on the networks, the JSON also on `pack.training`.
void save_pack(const PredictorPack& pack, const std::filesystem::path& dir);

// nullptr when <dir>/predictors.safetensors does not exist; Error naming the file and tensor or
// key for anything malformed or inconsistent.
std::unique_ptr<PredictorPack> load_pack(const std::filesystem::path& dir);

}  // namespace chronos::predict
