// Modularity community detection (Louvain, Leiden) on a weighted undirected graph in CSR form.
#pragma once

#include <cstdint>
#include <vector>

namespace chronos::cluster {

// Every undirected edge {i, j}, i != j, is stored in both rows; a self loop (the internal weight
// of an aggregated community) is kept apart. strength[i] = sum of row i + 2 * self_loop[i], so
// sum(strength) = 2m with m = total_weight.
struct WeightedGraph {
  int32_t n_nodes = 0;
  std::vector<int64_t> offsets;   // [n_nodes + 1]
  std::vector<int32_t> targets;   // [offsets.back()]
  std::vector<double> weights;    // [offsets.back()]
  std::vector<double> self_loop;  // [n_nodes]
  std::vector<double> strength;   // [n_nodes]
  double total_weight = 0;        // m

  // From rows of (target, weight) with both directions present; fills strength and total.
  static WeightedGraph from_rows(const std::vector<std::vector<std::pair<int32_t, double>>>& rows,
                                 std::vector<double> self_loop);
};

// Community id per node, ids 0..C-1 numbered by first appearance over node ids.
// Louvain: local moving to the best modularity gain, aggregate, repeat (Blondel et al. 2008).
std::vector<int32_t> louvain(const WeightedGraph& graph, double resolution, uint64_t seed);
// Leiden: queue-based local moving, refinement into well-connected sub-communities, aggregation
// of the refined partition (Traag, Waltman, van Eck 2019).
std::vector<int32_t> leiden(const WeightedGraph& graph, double resolution, uint64_t seed);

}  // namespace chronos::cluster
