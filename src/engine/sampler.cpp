// Sampler: logits processors in transformers' order, then a seeded draw.
#include "chronos/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "chronos/error.h"

namespace chronos {

void validate_sampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw UsageError(fmt::format("--temp must be >= 0 (got {})", p.temperature));
  if (p.top_k < 0) throw UsageError(fmt::format("--top-k must be >= 0 (got {})", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw UsageError(fmt::format("--top-p must be in (0, 1] (got {})", p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    throw UsageError(fmt::format("--min-p must be in [0, 1] (got {})", p.min_p));
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    throw UsageError(fmt::format("--repeat-penalty must be > 0 (got {})", p.repetition_penalty));
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate_sampling(params); }

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const int64_t n = std::ssize(logits);
  CHRONOS_CHECK(n > 0);
  if (params_.repetition_penalty != 1.0f) {
    // Each distinct seen id once: positive logits divided, negative multiplied.
    seen_.assign(size_t(n), 0);
    for (const int32_t id : history) {
      if (id < 0 || id >= n || seen_[size_t(id)]) continue;
      seen_[size_t(id)] = 1;
      float& l = logits[size_t(id)];
      l = l < 0.0f ? l * params_.repetition_penalty : l / params_.repetition_penalty;
    }
  }
  if (params_.greedy()) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first max on ties
  }
  for (float& l : logits) l /= params_.temperature;

  // Candidates sorted by logit (stable: lower id first on ties), then truncated by each warper.
  order_.resize(size_t(n));
  std::iota(order_.begin(), order_.end(), 0);
  int64_t keep = n;
  if (params_.top_k > 0 && params_.top_k < n) {
    keep = params_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
  } else {
    std::stable_sort(order_.begin(), order_.end(),
                     [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  }
  probs_.resize(size_t(keep));
  const float max_logit = logits[size_t(order_[0])];
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) sum += probs_[size_t(i)] = std::exp(logits[size_t(order_[size_t(i)])] - max_logit);
  for (int64_t i = 0; i < keep; ++i) probs_[size_t(i)] = float(probs_[size_t(i)] / sum);
  if (params_.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (at least one token).
    double mass = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      mass += probs_[size_t(i)];
      if (mass >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * probs_[0];
    int64_t cut = 1;
    while (cut < keep && probs_[size_t(cut)] >= threshold) ++cut;
    keep = cut;
  }
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) total += probs_[size_t(i)];
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (int64_t i = 0; i < keep; ++i) {
    r -= probs_[size_t(i)];
    if (r < 0.0) return order_[size_t(i)];
  }
  return order_[size_t(keep - 1)];
}

}  // namespace chronos
