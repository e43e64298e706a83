// PackedExperts: the data path of expert streaming, the ExpertProvider of a pack folder: a budgeted
// expert cache filled by the AsyncPrefetcher, views of the experts in its slots, and the miss
// policy (wait for the read, the expert's resident low-bit copy, or the soft-gated fallback). What
// to read ahead (predictors, the previous token's experts) is the engine's ExpertStreamer, which
// owns one of these.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "chronos/backend.h"
#include "chronos/expert_cache.h"
#include "chronos/model.h"
#include "chronos/pack_format.h"
#include "chronos/prefetcher.h"
#include "chronos/shared_expert_cache.h"

namespace chronos {

// What a selected expert that is not resident when its layer runs costs (DESIGN.md §4):
//  kWait: the step waits for its read (exact);
//  kLowbit: it is computed from its low-bit copy, resident for the whole run (the pack's
//   lowbit.ctsr, chronos pack --lowbit-type); the full expert is still read for later steps;
//  kFallback: it is left out, its routing weight given to the shared expert or renormalized.
// With StreamerOptions::wait_above, kLowbit and kFallback wait (as kWait) for a missing expert
// whose routing weight from some token of the step is at least that.
enum class OnMiss { kWait, kLowbit, kFallback };

// What is read ahead of the router's demand:
//  kNone: nothing (demand reads only);
//  kLru: the experts the previous token used, re-queued and protected for the next token;
//  kPredict: the IntentClassifier's set at prefill (within the budget), then every token the
//   LookaheadRouter's horizon-0 (later layers of this token) and t+1..t+K predictions, each
//   protected from eviction until the step it is for. Needs predictors.safetensors in the pack.
enum class PrefetchMode { kNone, kLru, kPredict };

// The pack in `dir` must have been made with the config.json beside it and hold exactly the routed
// experts it describes (layers, count, shapes); Error naming the file otherwise.
void check_pack_against_config(const PackManifest& manifest, const ModelConfig& config,
                               const std::filesystem::path& dir);

struct StreamerOptions {
  int64_t budget_bytes = 0;  // expert cache budget
  OnMiss on_miss = OnMiss::kWait;
  std::optional<float> wait_above;                   // see OnMiss; unset: kLowbit and kFallback never wait
  EvictionPolicy policy = EvictionPolicy::kNextUse;  // the best hit rate measured (docs/performance.md)
  AsyncPrefetcher::Options prefetch;
  PrefetchMode mode = PrefetchMode::kNone;
  int32_t predict_per_layer = 0;  // experts named per (horizon, layer); 0: the model's top-k
  // The folder of predictors.safetensors (chronos train-predictors -o): empty for the pack folder;
  // a model streamed from a .gguf file names one (a sidecar folder, --predictors). Predictors
  // trained on another model's traces are refused.
  std::filesystem::path predictors_dir;
  // The folder of the low-bit copies (chronos pack --lowbit-only -o, lowbit.json) for kLowbit:
  // empty for the pack's own; a model streamed from a .gguf file needs one (--lowbit).
  std::filesystem::path lowbit_dir;
  double intent_share = 0.5;  // share of the cache the prefill intent set may fill
  // Prefetch only what is worth its bytes: predictions scored below this probability are neither
  // read nor protected, and of the rest at most this many bytes per forward step are read (the
  // nearest horizons and highest scores first; experts already resident are not counted; 0: no
  // cap; kPrefetchCapHalfTopK: the bytes of half the model's top-k experts, at least one, the
  // CLI's default). The intent set at prefill is not capped.
  static constexpr int64_t kPrefetchCapHalfTopK = -1;
  float prefetch_min_score = 0.0f;
  int64_t prefetch_bytes_per_step = 0;
};

// The counts of the data path (StreamerStats adds the predictors').
struct LookupStats {
  int64_t lookups = 0;         // (layer, expert) acquisitions by the compute side
  int64_t hits = 0;            // ready when asked, its bytes in place (copy finished)
  int64_t hits_loading = 0;    // already being read or copied when asked (prefetched, not finished)
  int64_t misses = 0;          // not resident and not being read
  int64_t fallbacks = 0;       // lookups answered with "missing" (fallback mode)
  int64_t lowbit = 0;          // lookups answered with the expert's low-bit copy (lowbit mode)
  int64_t lookup_bytes = 0;    // full-precision bytes of every lookup's expert
  int64_t hit_bytes = 0;       // of those, the hits' (the byte hit rate's numerator)
  int64_t waits = 0;           // lookups that blocked on I/O (wait mode)
  int64_t device_waits = 0;    // lookups whose copy was still running, left to the compute stream
                               // to wait for (device compute only)
  double stall_seconds = 0.0;  // compute-side time blocked on I/O
};

class PackedExperts final : public ExpertProvider {
 public:
  // Reads and checks <pack_dir>/cluster_manifest.json; sizes the cache's slots to the largest
  // expert extent. Throws Error for a budget smaller than one expert.
  PackedExperts(const Model& model, const std::filesystem::path& pack_dir, Backend& backend,
                const StreamerOptions& options);
  ~PackedExperts() override;

  using ExpertProvider::acquire;
  void acquire(int64_t layer, std::span<const int32_t> experts, std::span<const float> weights,
               std::span<const FfnWeights*> views) override;
  void release(int64_t layer, std::span<const int32_t> experts) override;
  size_t max_experts_per_acquire() const override;
  void set_compute_stream(Stream* stream) override { compute_stream_ = stream; }

  // Advances the step counter (which keeps growing across requests), expires protections and
  // cancels stale prefetches; rethrows a read error. Returns the new step.
  int64_t begin_step();
  int64_t step() const { return step_; }
  // The experts computed in full since the last call (recorded only when `record_used`: the
  // previous-token prefetch), handed over and cleared.
  void take_used(std::vector<ExpertKey>& out);
  // Reads every expert of the pack and returns once all are ready (the budget must hold them
  // all): the all-resident baseline of a benchmark. Rethrows a read or checksum error.
  void load_all();

  AsyncPrefetcher& prefetcher() { return *prefetcher_; }
  // The cache with its lock (cache().lock() reaches the ExpertCache); the lock also guards stats.
  SharedExpertCache& cache() { return *cache_; }
  const PackManifest& manifest() const { return manifest_; }
  // Under the cache's lock.
  const LookupStats& stats_locked() const { return stats_; }
  int64_t extent_bytes() const { return cache_->slot_bytes(); }
  int64_t n_slots() const { return cache_->n_slots(); }
  int64_t lowbit_bytes() const { return int64_t(lowbit_buffer_.bytes); }

 private:
  FfnWeights view_of(const PackedExpert& expert, void* data) const;
  void load_lowbit_copies(const std::filesystem::path& dir);

  const Model& model_;
  Backend& backend_;
  PackManifest manifest_;
  StreamerOptions options_;
  std::unique_ptr<SharedExpertCache> cache_;     // its lock also guards stats_
  std::unique_ptr<AsyncPrefetcher> prefetcher_;  // after cache_: stops (and drains) first
  std::vector<FfnWeights> views_;                // [n_expert] for the layer being computed
  std::vector<uint8_t> pinned_;                  // [n_expert] whether acquire pinned it
  std::vector<Event*> consumed_;                 // [n_expert] the pinned slot's `consumed` event
  Stream* compute_stream_ = nullptr;
  LookupStats stats_;
  int64_t step_ = 0;
  bool record_used_ = false;
  std::vector<ExpertKey> used_;           // the experts computed in full since take_used
  Buffer lowbit_buffer_;                  // kLowbit: the whole lowbit.ctsr, device memory
  std::vector<FfnWeights> lowbit_views_;  // kLowbit: [layer * n_expert + expert]
};

}  // namespace chronos
