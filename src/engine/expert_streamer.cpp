// ExpertStreamer (expert_streamer.h): per sequence, what to read ahead: the intent set at each
// request's prefill, the predictors' lookahead from each sequence's newest row, or the previous
// step's experts, turned into prefetch requests for the one queue of the pack's PackedExperts.
#include "chronos/expert_streamer.h"

#include <algorithm>
#include <chrono>

#include "chronos/error.h"

namespace chronos {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ExpertStreamer::ExpertStreamer(const Model& model, const std::filesystem::path& pack_dir, Backend& backend,
                               const StreamerOptions& options)
    : model_(model), options_(options), experts_(std::make_unique<PackedExperts>(model, pack_dir, backend, options)) {
  const ModelConfig& c = model.config();
  if (options_.prefetch_bytes_per_step == StreamerOptions::kPrefetchCapHalfTopK)
    options_.prefetch_bytes_per_step = std::max<int64_t>(1, c.n_expert_used / 2) * experts_->extent_bytes();
  if (options.mode == PrefetchMode::kPredict) {
    const std::filesystem::path dir = options.predictors_dir.empty() ? pack_dir : options.predictors_dir;
    predictors_ = Predictors::load(dir);
    if (!predictors_)
      throw_error("{}: prefetching by prediction needs predictors.safetensors (run chronos train-predictors{})",
                  dir.string(), model.gguf_experts() != nullptr ? " -o DIR, then --predictors DIR" : "");
    const std::string& fingerprint = experts_->manifest().fingerprint;
    if (predictors_->n_embd() != c.n_embd || predictors_->n_expert() != c.n_expert ||
        predictors_->model_fingerprint() != fingerprint)
      throw_error("{}: the predictors were trained for another model (fingerprint {}, this model's is {})",
                  dir.string(), predictors_->model_fingerprint(), fingerprint);
  }
}

ExpertStreamer::~ExpertStreamer() = default;

ForwardHooks ExpertStreamer::hooks() {
  ForwardHooks hooks;
  hooks.experts = experts_.get();
  if (predictors_) {
    hooks.block = [this](int64_t layer, std::span<const float> hidden, std::span<const int32_t> sequences) {
      on_block(layer, hidden, sequences);
    };
    hooks.block_last_layer = 0;
  }
  return hooks;
}

void ExpertStreamer::begin_request(int32_t sequence) {
  if (options_.mode == PrefetchMode::kPredict) intent_pending_.insert(sequence);
}

// Turns scores into prefetch requests: priority by horizon, protected until the step they are for.
void ExpertStreamer::request(std::span<const ExpertScore> scores, bool intent) {
  requests_.clear();
  const int64_t step = experts_->step();  // steps count forward calls; the one being computed now
  {
    const auto cache = experts_->cache().lock();
    if (!intent && options_.mode == PrefetchMode::kPredict &&
        (options_.prefetch_min_score > 0 || options_.prefetch_bytes_per_step > 0)) {
      // The nearest horizon first, then the most likely; below the threshold or past the cap dropped.
      kept_.assign(scores.begin(), scores.end());
      std::stable_sort(kept_.begin(), kept_.end(), [](const ExpertScore& a, const ExpertScore& b) {
        return a.horizon != b.horizon ? a.horizon < b.horizon : a.score > b.score;
      });
      const int64_t slot = cache->slot_bytes();
      const int64_t cap = options_.prefetch_bytes_per_step;
      size_t n = 0;
      for (const ExpertScore& s : kept_) {
        if (s.score < options_.prefetch_min_score) continue;
        const bool absent = cache->find(s.key).state == SlotState::kEmpty;
        if (absent && cap > 0 && step_bytes_requested_ + slot > cap) continue;
        if (absent) step_bytes_requested_ += slot;
        kept_[n++] = s;
      }
      predictions_dropped_ += std::ssize(kept_) - int64_t(n);
      kept_.resize(n);
      scores = kept_;
    }
    for (const ExpertScore& s : scores) {
      const int64_t horizon = intent ? 0 : s.horizon;
      const FetchPriority priority = intent         ? FetchPriority::kIntent
                                     : horizon == 0 ? FetchPriority::kSameToken
                                     : horizon == 1 ? FetchPriority::kNextToken
                                                    : FetchPriority::kLater;
      if (!intent) cache->protect(s.key, step + horizon + 1);
      requests_.push_back(FetchRequest{s.key, priority, step + horizon});
    }
    predicted_ += std::ssize(requests_);
  }
  experts_->prefetcher().enqueue(requests_);
}

// Block 0's rows, per sequence: a sequence whose request began gets its intent set from these rows
// (its prompt's first prefill chunk, at most 512 of them), and each sequence's newest row predicts
// its own later layers and its next K tokens; the lookaheads of all sequences go to the prefetch
// queue together, under the one per-step byte cap.
void ExpertStreamer::on_block(int64_t layer, std::span<const float> hidden, std::span<const int32_t> sequences) {
  if (layer != 0 || !predictors_) return;
  const auto start = Clock::now();
  const int64_t d = model_.config().n_embd, n_rows = std::ssize(sequences);
  const int32_t per_layer =
      options_.predict_per_layer > 0 ? options_.predict_per_layer : int32_t(model_.config().n_expert_used);
  merged_.clear();
  for (int64_t row = 0; row < n_rows; ++row) {
    const int32_t seq = sequences[size_t(row)];
    if (std::find(sequences.begin(), sequences.begin() + row, seq) != sequences.begin() + row) continue;  // seen
    int64_t last = row;
    for (int64_t r = row + 1; r < n_rows; ++r)
      if (sequences[size_t(r)] == seq) last = r;
    if (intent_pending_.erase(seq) != 0) {
      // The sequence's rows of this chunk, in order (a batch may interleave sequences).
      intent_rows_.clear();
      for (int64_t r = row; r <= last && std::ssize(intent_rows_) < 512 * d; ++r)
        if (sequences[size_t(r)] == seq)
          intent_rows_.insert(intent_rows_.end(), hidden.begin() + r * d, hidden.begin() + (r + 1) * d);
      const int64_t rows = std::ssize(intent_rows_) / d;
      predictors_->intent(intent_rows_, rows, scores_);
      // The most-used predicted experts first, until intent_share of the cache.
      std::sort(scores_.begin(), scores_.end(),
                [](const ExpertScore& a, const ExpertScore& b) { return a.score > b.score; });
      const auto keep = size_t(double(experts_->n_slots()) * options_.intent_share);
      if (scores_.size() > keep) scores_.resize(keep);
      request(scores_, true);
    }
    predictors_->lookahead(hidden.subspan(size_t(last * d), size_t(d)), per_layer, scores_);
    merged_.insert(merged_.end(), scores_.begin(), scores_.end());
  }
  request(merged_, false);
  const auto locked = experts_->cache().lock();
  predict_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void ExpertStreamer::begin_step() {
  experts_->begin_step();
  step_bytes_requested_ = 0;
  if (options_.mode != PrefetchMode::kLru) return;
  experts_->take_used(previous_token_);
  if (previous_token_.empty()) return;
  // The previous step's experts, kept and (if evicted) re-read for this one.
  scores_.clear();
  for (const ExpertKey& key : previous_token_) scores_.push_back(ExpertScore{key, 0, 1.0f});
  request(scores_, false);
}

StreamerStats ExpertStreamer::stats() const {
  const auto cache = experts_->cache().lock();
  StreamerStats out;
  static_cast<LookupStats&>(out) = experts_->stats_locked();
  out.predicted = predicted_;
  out.predictions_dropped = predictions_dropped_;
  out.predict_seconds = predict_seconds_;
  out.cache = cache->stats();
  out.prefetch = experts_->prefetcher().stats();
  return out;
}

}  // namespace chronos
