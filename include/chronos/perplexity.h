// The teacher-forced quality meter (chronos perplexity, DESIGN.md §4 "Miss policies"): a model
// (any weight type, resident or streamed under any miss policy) and a reference (the exact model)
// read the same held-out text; the meter reports the model's perplexity and, against the
// reference, the perplexity change, the mean KL divergence KL(reference || model) of the next-token
// distributions and the top-1 agreement.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "chronos/engine.h"
#include "chronos/model_runner.h"

namespace chronos {

// An exact run kept for later comparison (perplexity --save-logits, --kl-base), so that a model too
// large to hold beside its reference is still measured against it: per scored position, the run's
// top_k token ids with their log-probabilities (most likely first) and the log-probability of the
// text's next token. It is compared only with a run of the same text (text_hash: the text's bytes),
// the same tokens (tokens_hash: their ids, which another tokenizer changes) and the same windows.
struct SavedLogits {
  uint64_t text_hash = 0, tokens_hash = 0;
  int64_t n_ctx = 0, windows = 0, n_vocab = 0, top_k = 0;
  std::string source;              // for messages: the model that made it (saved), or the file it was read from
  std::vector<int32_t> top_ids;    // [positions, top_k]
  std::vector<float> top_logp;     // [positions, top_k]
  std::vector<float> target_logp;  // [positions]
  std::vector<float> rest_logp;    // [positions] log of the mass outside the top_k; -inf when none
  int64_t positions() const { return std::ssize(target_logp); }
};

// Writes `saved` to `path` atomically (a versioned binary file with an xxh64 of its contents), and
// reads it back, throwing Error naming the file when it is not one, is truncated or corrupt.
void save_logits(const std::filesystem::path& path, const SavedLogits& saved);
SavedLogits load_saved_logits(const std::filesystem::path& path);
uint64_t hash_bytes(std::span<const std::byte> bytes);

struct PerplexityOptions {
  // Each window of n_ctx tokens starts from an empty context: its first half is a prefill that is
  // not scored, its second half is scored one decode step at a time (teacher-forced: the next
  // input is the text's token, whatever the model predicted), which is what a miss policy sees
  // while generating.
  int64_t n_ctx = 128;
  int64_t max_windows = 0;  // 0: every whole window of the text
  int64_t n_vocab = 0;      // of the model and the reference (their logits rows)
  // The model's run saved (its top save_top_k per position) when set: the text hashes and source
  // are the caller's, the rest is filled in.
  SavedLogits* save = nullptr;
  int64_t save_top_k = 128;
  // A saved exact run to compare with instead of a reference model. Its KL divergence is over the
  // saved top_k tokens and one bucket for all the others, a lower bound of the full KL that equals
  // it when top_k is the vocabulary; its perplexity and top-1 are exact. The caller checks that it
  // was made from the same text; measure_perplexity checks the windows and the vocabulary.
  const SavedLogits* base = nullptr;
};

struct PerplexityResult {
  int64_t windows = 0;
  int64_t tokens = 0;        // scored tokens
  double nll_sum = 0.0;      // natural-log negative log-likelihood of the model
  double ref_nll_sum = 0.0;  // of the reference (when there is one)
  double kl_sum = 0.0;       // sum of KL(reference || model) over scored positions
  int64_t top1_agree = 0;    // positions where both argmaxes agree
  bool has_reference = false;

  double perplexity() const;
  double reference_perplexity() const;
  double perplexity_change() const;  // model / reference - 1 (0.01 = +1%)
  double mean_kl() const;
  double top1_agreement() const;
};

// Measures `model` (and `reference`, when its runner is set) on `text`. The runners' contexts must
// hold n_ctx tokens. `on_window(done, total)` reports progress. Throws Error when the text is
// shorter than one window or n_ctx < 4.
PerplexityResult measure_perplexity(std::span<const int32_t> text, const PerplexityOptions& options,
                                    const Engine& model, const Engine& reference,
                                    const std::function<void(int64_t, int64_t)>& on_window = {});

// log-softmax helpers, exposed for tests: -log p(target) under softmax(logits[n]); and
// KL(softmax(p_logits) || softmax(q_logits)), both in double precision.
double negative_log_likelihood(std::span<const float> logits, int32_t target);
double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits);
// KL(p || softmax(q_logits)) where p is known by its top tokens' log-probabilities (ids, logp) and
// the log of the rest of its mass (rest_logp, -inf for none) as one bucket, compared with q's mass
// outside those tokens.
double kl_divergence_top(std::span<const int32_t> ids, std::span<const float> logp, float rest_logp,
                         std::span<const float> q_logits);

}  // namespace chronos
