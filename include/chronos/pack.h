// chronos pack: a checkpoint rewritten as a pack folder (DESIGN.md §5): dense.safetensors, routed
// experts in co-activation clusters (.ctsr), cluster_manifest.json, the config and tokenizer files.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "chronos/cluster.h"
#include "chronos/model.h"
#include "chronos/thread_pool.h"

namespace chronos {

struct PackOptions {
  ClusterMethod method = ClusterMethod::kLeiden;
  std::optional<std::filesystem::path> traces;  // required unless method is kNone
  uint64_t seed = 0;
  int64_t max_cluster_bytes = int64_t(256) << 20;
  // Weight types to write, or the checkpoint's own when unset: F32, F16, BF16 or a block type
  // (a K type falls back per tensor on rows it does not fit, block_dtype_for_row).
  // expert_type: the routed experts; dense_type: the matrices of dense.safetensors (attention,
  // shared expert, dense MLP, embeddings, LM head). Norms, biases, the router and the shared
  // expert's gate keep their type.
  std::optional<DType> expert_type;
  std::optional<DType> dense_type;
  // When set, a low-bit copy of every routed expert in this type, in lowbit.ctsr (the manifest's
  // "lowbit" section), for --on-miss lowbit.
  std::optional<DType> lowbit_type;
  // Only the low-bit copies (lowbit_type required): out_dir gets lowbit.json and lowbit.ctsr, a
  // folder for a .gguf file streamed in place (--lowbit DIR), and no pack.
  bool lowbit_only = false;
  int threads = 0;  // quantization threads; 0: one per hardware thread
};

struct PackSummary {
  int64_t n_clusters = 0;
  int64_t expert_bytes = 0;  // all cluster files
  int64_t dense_bytes = 0;
  int64_t lowbit_bytes = 0;  // lowbit.ctsr, when written
  double modularity = 0.0;
  double intra_cluster_weight_share = 0.0;
  int64_t traced_tokens = 0;
};

// The fingerprint a pack and the traces of `model` (loaded from `model_dir`) record: model_fingerprint
// of a checkpoint or pack folder; for a GGUF file, of the config built from its key-values and the
// tensors as loaded (so traces of a GGUF file match its pack).
std::string model_fingerprint_of(const Model& model, const std::filesystem::path& model_dir);

// Writes everything into <out_dir>.tmp and renames it to out_dir at the end, so a failure leaves
// no half-written pack. out_dir must not exist. `on_cluster(i, n)` reports progress.
PackSummary write_pack(const Model& model, const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                       const PackOptions& options, const std::function<void(int64_t, int64_t)>& on_cluster);

// The co-activation graph of a folder of traces of this model (checked against its MoE layout).
CoactivationGraph coactivation_from_traces(const ModelConfig& config, const std::filesystem::path& trace_dir,
                                           int64_t* n_tokens);

}  // namespace chronos
