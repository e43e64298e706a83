// chronos pack: a checkpoint rewritten as a pack folder (DESIGN.md §5): dense.safetensors, routed
// experts in co-activation clusters (.ctsr), cluster_manifest.json, the config and tokenizer files.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>

#include "chronos/cluster.h"
#include "chronos/model.h"

namespace chronos {

struct PackOptions {
  ClusterMethod method = ClusterMethod::kLeiden;
  std::optional<std::filesystem::path> traces;  // required unless method is kNone
  uint64_t seed = 0;
  int64_t max_cluster_bytes = int64_t(256) << 20;
};

struct PackSummary {
  int64_t n_clusters = 0;
  int64_t expert_bytes = 0;         // all cluster files
  int64_t dense_bytes = 0;
  double modularity = 0.0;
  double intra_cluster_weight_share = 0.0;
  int64_t traced_tokens = 0;
};

// Writes everything into <out_dir>.tmp and renames it to out_dir at the end, so a failure leaves
// no half-written pack. out_dir must not exist. `on_cluster(i, n)` reports progress.
PackSummary write_pack(const Model& model, const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                       const PackOptions& options, const std::function<void(int64_t, int64_t)>& on_cluster);

// The co-activation graph of a folder of traces of this model (checked against its MoE layout).
CoactivationGraph coactivation_from_traces(const ModelConfig& config, const std::filesystem::path& trace_dir,
                                           int64_t* n_tokens);

}  // namespace chronos
