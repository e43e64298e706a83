// ExpertStreamer: the engine's side of expert streaming, kept per sequence. It owns the pack's
// PackedExperts (src/expert: the cache, the reads, the miss policy) and decides what to read ahead:
// each sequence's prefill intent set, and every step the LookaheadRouter's predictions from each
// sequence's newest row (or the previous step's experts), merged into the one prefetch queue.
#pragma once

#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "chronos/packed_experts.h"
#include "chronos/predictors.h"

namespace chronos {

struct StreamerStats : LookupStats {
  int64_t predicted = 0;            // prefetch requests made from predictions (or the previous token)
  int64_t predictions_dropped = 0;  // predictions under --prefetch-min-score or over the byte cap
  double predict_seconds = 0.0;     // time spent running the predictors
  PrefetchStats prefetch;
  CacheStats cache;
};

class ExpertStreamer {
 public:
  // The pack's PackedExperts with `options`, and its predictors when options.mode is kPredict.
  ExpertStreamer(const Model& model, const std::filesystem::path& pack_dir, Backend& backend,
                 const StreamerOptions& options);
  ~ExpertStreamer();

  // The hooks a runner over this pack is made with: its PackedExperts provide the experts and, when
  // predicting, the streamer observes block 0. The streamer must outlive the runner.
  ForwardHooks hooks();

  // Starts a new request of `sequence` (its prefill follows): its intent set is computed from its
  // first block-0 states.
  void begin_request(int32_t sequence = 0);
  // Called before every forward step (prefill or decode, all sequences together): advances the
  // step counter, expires protections and cancels stale prefetches.
  void begin_step();
  void load_all() { experts_->load_all(); }
  int64_t step() const { return experts_->step(); }
  PackedExperts& experts() { return *experts_; }
  AsyncPrefetcher& prefetcher() { return experts_->prefetcher(); }
  SharedExpertCache& cache() { return experts_->cache(); }
  const PackManifest& manifest() const { return experts_->manifest(); }
  StreamerStats stats() const;
  // Bytes of one expert extent (what one read and one slot hold).
  int64_t extent_bytes() const { return experts_->extent_bytes(); }
  int64_t n_slots() const { return experts_->n_slots(); }
  // Bytes of the resident low-bit copies (0 unless --on-miss lowbit), inside the budget.
  int64_t lowbit_bytes() const { return experts_->lowbit_bytes(); }

 private:
  void on_block(int64_t layer, std::span<const float> hidden, std::span<const int32_t> sequences);
  void request(std::span<const ExpertScore> scores, bool intent);

  const Model& model_;
  StreamerOptions options_;
  std::unique_ptr<PackedExperts> experts_;
  std::unique_ptr<Predictors> predictors_;
  std::set<int32_t> intent_pending_;  // sequences whose next block-0 rows are their prompt's first
  std::vector<ExpertScore> scores_;   // reused between steps
  std::vector<ExpertScore> merged_;   // every sequence's lookahead of one step
  std::vector<float> intent_rows_;    // one sequence's block-0 rows for its intent set
  std::vector<ExpertScore> kept_;     // the predictions that pass the threshold and the cap
  int64_t step_bytes_requested_ = 0;  // bytes of absent experts requested this step
  std::vector<FetchRequest> requests_;
  std::vector<ExpertKey> previous_token_;  // kLru: experts the last step used
  // Under the cache's lock:
  int64_t predicted_ = 0, predictions_dropped_ = 0;
  double predict_seconds_ = 0.0;
};

}  // namespace chronos
