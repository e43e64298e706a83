// The teacher-forced quality meter (chronos perplexity, DESIGN.md §4 "Miss policies"): a model
// (any weight type, resident or streamed under any miss policy) and a reference (the exact model)
// read the same held-out text; the meter reports the model's perplexity and, against the
// reference, the perplexity change, the mean KL divergence KL(reference || model) of the next-token
// distributions and the top-1 agreement.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "chronos/engine.h"
#include "chronos/model_runner.h"

namespace chronos {

struct PerplexityOptions {
  // Each window of n_ctx tokens starts from an empty context: its first half is a prefill that is
  // not scored, its second half is scored one decode step at a time (teacher-forced: the next
  // input is the text's token, whatever the model predicted), which is what a miss policy sees
  // while generating.
  int64_t n_ctx = 128;
  int64_t max_windows = 0;  // 0: every whole window of the text
  int64_t n_vocab = 0;      // of the model and the reference (their logits rows)
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

}  // namespace chronos
