// MoePlan: the host side of one MoE block, written once for the CPU forward (moe_block.cpp) and
// the CUDA runner (cuda/cuda_runner.cpp). Each forward computes the router, the experts and the
// weighted sum its own way; the plan decides everything in between, as four named steps:
//
//   route   check the router's top-k and report it to the route observer;
//   group   order the (token, choice) pairs by expert: rows row_begin(e) .. row_end(e) of the
//           gathered expert inputs belong to expert e, in token order;
//   waves   take the step's distinct experts in waves of at most the provider's capacity:
//           acquire (or the experts bound at load), compute the wave, release;
//   account the routing mass of missing experts per token and the block's counters, which the
//           combine (soft-gated fallback, DESIGN.md §4) needs.
//
// Sized once for max_tokens (no allocation per step). The next weight type or miss rule changes
// the plan once, not both forwards.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "chronos/error.h"
#include "chronos/model.h"

namespace chronos {

class MoePlan {
 public:
  MoePlan() = default;
  MoePlan(const ModelConfig& config, int64_t max_tokens);

  // route: the top-k of n tokens, ids and weights [n, k], probs [n, n_expert] (may be null when
  // there is no observer), sequences [n] each token's sequence (null: all sequence 0). Throws Error
  // naming the layer for an id outside [0, n_expert), which only non-finite router logits produce.
  void route(int64_t layer, int64_t n, const int32_t* ids, const float* weights, const float* probs,
             const RouteFn& observer, const int32_t* sequences = nullptr);
  // group: after route.
  void group();

  int64_t n_tokens() const { return n_; }
  int64_t n_rows() const { return n_ * k_; }
  int32_t row_begin(int32_t expert) const { return expert_rows_[size_t(expert)]; }
  int32_t row_end(int32_t expert) const { return expert_rows_[size_t(expert + 1)]; }
  std::span<const int32_t> row_tokens() const { return {row_token_.data(), size_t(n_rows())}; }    // [rows]
  std::span<const float> row_weights() const { return {row_weight_.data(), size_t(n_rows())}; }    // [rows]
  std::span<const int32_t> choice_rows() const { return {choice_row_.data(), size_t(n_rows())}; }  // [n, k]
  std::span<const float> choice_weights() const { return {weights_, size_t(n_rows())}; }           // [n, k] as routed
  std::span<const int32_t> active() const { return active_; }  // distinct selected experts, ascending
  // active_weight()[i]: the largest routing weight a token gives active()[i].
  std::span<const float> active_weight() const { return {active_weight_.data(), active_.size()}; }

  // waves: calls compute(ids, views) once per wave, between the provider's acquire and release
  // (without a provider, `bound` holds every expert and a wave is the whole step). views[i] is
  // experts ids[i]'s weights, or nullptr when the provider could not supply it now (missing).
  // Returns whether any expert was missing.
  template <typename Compute>
  bool waves(int64_t layer, ExpertProvider* provider, std::span<const FfnWeights> bound, Compute&& compute);

  // account: after the waves. missing_mass(t) / total_mass(t) are token t's routing weight of
  // missing / all selected experts; choice_missing() [n, k] flags each choice. Adds the step's
  // pairs to `counters` (a token-layer with every choice missing and no shared expert to stand in
  // counts as a zero-output token).
  void account(bool has_shared_expert, MoeCounters& counters);
  bool expert_missing(int32_t expert) const { return missing_[size_t(expert)] != 0; }
  float missing_mass(int64_t token) const { return missing_mass_[size_t(token)]; }
  float total_mass(int64_t token) const { return total_mass_[size_t(token)]; }
  std::span<const uint8_t> choice_missing() const { return {choice_missing_.data(), size_t(n_rows())}; }
  bool any_missing() const { return any_missing_; }

 private:
  int64_t n_expert_ = 0, k_ = 0, max_tokens_ = 0;
  int64_t n_ = 0;
  const int32_t* ids_ = nullptr;                  // [n, k] of the last route()
  const float* weights_ = nullptr;                // [n, k]
  std::vector<int32_t> expert_rows_;              // [n_expert + 1]
  std::vector<int32_t> fill_;                     // [n_expert]
  std::vector<int32_t> row_token_;                // [max_tokens * k]
  std::vector<float> row_weight_;                 // [max_tokens * k]
  std::vector<int32_t> choice_row_;               // [max_tokens * k]
  std::vector<int32_t> active_;                   // capacity n_expert
  std::vector<float> active_weight_;              // [n_expert], parallel to active_
  std::vector<const FfnWeights*> views_;          // [n_expert]
  std::vector<uint8_t> missing_;                  // [n_expert]
  std::vector<uint8_t> choice_missing_;           // [max_tokens * k]
  std::vector<float> missing_mass_, total_mass_;  // [max_tokens]
  bool any_missing_ = false;
};

template <typename Compute>
bool MoePlan::waves(int64_t layer, ExpertProvider* provider, std::span<const FfnWeights> bound, Compute&& compute) {
  CHRONOS_CHECK_MSG(provider != nullptr || !bound.empty(), "routed experts are neither bound nor provided");
  const size_t wave = provider != nullptr ? std::max<size_t>(1, provider->max_experts_per_acquire()) : active_.size();
  any_missing_ = false;
  for (size_t first = 0; first < active_.size(); first += wave) {
    const size_t count = std::min(wave, active_.size() - first);
    const std::span<const int32_t> ids(active_.data() + first, count);
    const std::span<const FfnWeights*> views(views_.data() + first, count);
    if (provider != nullptr) {
      provider->acquire(layer, ids, std::span<const float>(active_weight_.data() + first, count), views);
    } else {
      for (size_t i = 0; i < count; ++i) views[i] = &bound[size_t(ids[i])];
    }
    for (size_t i = 0; i < count; ++i) {
      missing_[size_t(ids[i])] = views[i] == nullptr;
      any_missing_ |= views[i] == nullptr;
    }
    compute(ids, std::span<const FfnWeights* const>(views));
    if (provider != nullptr) provider->release(layer, ids);
  }
  return any_missing_;
}

}  // namespace chronos
