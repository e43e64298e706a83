// MoePlan (moe_plan.h): route, group and account; the waves are a template in the header.
#include "model/moe_plan.h"

#include <algorithm>

namespace chronos {

MoePlan::MoePlan(const ModelConfig& c, int64_t max_tokens)
    : n_expert_(std::max<int64_t>(c.n_expert, 1)), k_(std::max<int64_t>(c.n_expert_used, 1)), max_tokens_(max_tokens) {
  const size_t rows = size_t(max_tokens * k_);
  expert_rows_.resize(size_t(n_expert_ + 1));
  fill_.resize(size_t(n_expert_));
  row_token_.resize(rows);
  row_weight_.resize(rows);
  choice_row_.resize(rows);
  active_.reserve(size_t(n_expert_));
  active_weight_.resize(size_t(n_expert_));
  views_.resize(size_t(n_expert_));
  missing_.resize(size_t(n_expert_));
  choice_missing_.resize(rows);
  missing_mass_.resize(size_t(max_tokens));
  total_mass_.resize(size_t(max_tokens));
}

void MoePlan::route(int64_t layer, int64_t n, const int32_t* ids, const float* weights, const float* probs,
                    const RouteFn& observer, const int32_t* sequences) {
  CHRONOS_CHECK(n > 0 && n <= max_tokens_);
  n_ = n;
  ids_ = ids;
  weights_ = weights;
  for (int64_t i = 0; i < n * k_; ++i)
    if (ids[i] < 0 || ids[i] >= n_expert_)
      throw_error("layer {}: the router selected expert {} of {} (non-finite router logits?)", layer, ids[i],
                  n_expert_);
  if (!observer) return;
  for (int64_t t = 0; t < n; ++t)
    observer(RouteEvent{layer,
                        t,
                        sequences != nullptr ? sequences[t] : 0,
                        {ids + t * k_, size_t(k_)},
                        {weights + t * k_, size_t(k_)},
                        {probs + t * n_expert_, size_t(n_expert_)}});
}

void MoePlan::group() {
  const int64_t rows = n_rows();
  std::fill(fill_.begin(), fill_.end(), 0);
  for (int64_t i = 0; i < rows; ++i) ++fill_[size_t(ids_[i])];
  expert_rows_[0] = 0;
  for (int64_t e = 0; e < n_expert_; ++e) expert_rows_[size_t(e + 1)] = expert_rows_[size_t(e)] + fill_[size_t(e)];
  active_.clear();
  for (int64_t e = 0; e < n_expert_; ++e)
    if (fill_[size_t(e)] > 0) active_.push_back(int32_t(e));
  std::fill(fill_.begin(), fill_.end(), 0);
  for (int64_t t = 0; t < n_; ++t) {
    for (int64_t j = 0; j < k_; ++j) {
      const int32_t e = ids_[t * k_ + j];
      const int32_t row = expert_rows_[size_t(e)] + fill_[size_t(e)]++;
      row_token_[size_t(row)] = int32_t(t);
      row_weight_[size_t(row)] = weights_[t * k_ + j];
      choice_row_[size_t(t * k_ + j)] = row;
    }
  }
  for (size_t i = 0; i < active_.size(); ++i) {
    const int32_t e = active_[i];
    float heaviest = 0.0f;
    for (int32_t row = row_begin(e); row < row_end(e); ++row) heaviest = std::max(heaviest, row_weight_[size_t(row)]);
    active_weight_[i] = heaviest;
  }
  std::fill(missing_.begin(), missing_.end(), 0);
  any_missing_ = false;
}

void MoePlan::account(bool has_shared_expert, MoeCounters& counters) {
  const int64_t rows = n_rows();
  counters.routed_pairs += rows;
  // Masses are summed in row order (experts ascending), the order of the CPU's weighted sum.
  std::fill(missing_mass_.begin(), missing_mass_.begin() + n_, 0.0f);
  std::fill(total_mass_.begin(), total_mass_.begin() + n_, 0.0f);
  for (const int32_t e : active_) {
    const bool is_missing = missing_[size_t(e)] != 0;
    for (int32_t row = row_begin(e); row < row_end(e); ++row) {
      const int32_t t = row_token_[size_t(row)];
      total_mass_[size_t(t)] += row_weight_[size_t(row)];
      if (is_missing) missing_mass_[size_t(t)] += row_weight_[size_t(row)];
    }
    if (is_missing) counters.fallback_pairs += row_end(e) - row_begin(e);
  }
  for (int64_t i = 0; i < rows; ++i) choice_missing_[size_t(i)] = missing_[size_t(ids_[i])];
  if (has_shared_expert || !any_missing_) return;
  for (int64_t t = 0; t < n_; ++t)
    if (missing_mass_[size_t(t)] > 0.0f && missing_mass_[size_t(t)] >= total_mass_[size_t(t)])
      ++counters.zero_output_tokens;
}

}  // namespace chronos
