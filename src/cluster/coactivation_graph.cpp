// CoactivationGraph: pair weights accumulated from per-token expert selections.
#include <algorithm>

#include "chronos/cluster.h"
#include "chronos/error.h"

namespace chronos {

CoactivationGraph::CoactivationGraph(int32_t n_moe_layers, int32_t n_expert)
    : n_moe_layers_(n_moe_layers), n_expert_(n_expert), n_nodes_(int64_t(n_moe_layers) * n_expert) {
  if (n_moe_layers <= 0 || n_expert <= 0) {
    throw_error("co-activation graph: {} MoE layers x {} experts, expected both positive", n_moe_layers, n_expert);
  }
  if (n_nodes_ > (int64_t(1) << 15)) {
    throw_error("co-activation graph: {} nodes is more than the dense graph supports (32768)", n_nodes_);
  }
  upper_.assign(size_t(n_nodes_ * (n_nodes_ - 1) / 2), 0.0);
  activations_.assign(size_t(n_nodes_), 0);
}

// Row a holds b = a+1 .. n-1; rows before it hold (n-1) + (n-2) + ... + (n-a) entries.
size_t CoactivationGraph::pair_index(int32_t a, int32_t b) const {
  const int64_t n = n_nodes_;
  return size_t(int64_t(a) * (2 * n - a - 1) / 2 + (b - a - 1));
}

void CoactivationGraph::add(int32_t a, int32_t b, double w) {
  if (a == b) return;
  if (a > b) std::swap(a, b);
  upper_[pair_index(a, b)] += w;
  total_weight_ += w;
}

double CoactivationGraph::weight(int32_t a, int32_t b) const {
  CHRONOS_CHECK(a >= 0 && a < n_nodes_ && b >= 0 && b < n_nodes_);
  if (a == b) return 0.0;
  if (a > b) std::swap(a, b);
  return upper_[pair_index(a, b)];
}

void CoactivationGraph::add_token(std::span<const int32_t> top_ids, int32_t k, float neighbour_weight) {
  if (k <= 0 || int64_t(top_ids.size()) != int64_t(n_moe_layers_) * k) {
    throw_error("co-activation graph: token with {} expert ids, expected {} MoE layers x k={}", top_ids.size(),
                n_moe_layers_, k);
  }
  current_.clear();
  for (int32_t layer = 0; layer < n_moe_layers_; ++layer) {
    for (int32_t j = 0; j < k; ++j) {
      const int32_t expert = top_ids[size_t(layer * k + j)];
      if (expert < 0 || expert >= n_expert_) {
        throw_error("co-activation graph: expert id {} in MoE layer {} out of range [0, {})", expert, layer, n_expert_);
      }
      current_.push_back(layer * n_expert_ + expert);
    }
  }
  // A router never picks one expert twice; a trace that does would double its weights.
  std::sort(current_.begin(), current_.end());
  current_.erase(std::unique(current_.begin(), current_.end()), current_.end());
  for (const int32_t node : current_) ++activations_[size_t(node)];
  for (size_t i = 0; i < current_.size(); ++i) {
    for (size_t j = i + 1; j < current_.size(); ++j) add(current_[i], current_[j], 1.0);
  }
  if (neighbour_weight != 0.0f) {
    for (const int32_t a : current_) {
      for (const int32_t b : previous_) add(a, b, double(neighbour_weight));
    }
  }
  previous_.swap(current_);
  ++n_tokens_;
}

void CoactivationGraph::begin_sequence() { previous_.clear(); }

}  // namespace chronos
