// Co-activation graph over (layer, expert) nodes, community detection, and pack planning.
//
// `chronos pack` feeds routing traces into a CoactivationGraph and lays experts out on disk in
// the order of plan_clusters: experts that the same tokens use land in the same cluster file,
// next to each other, so one sequential read brings in what the coming tokens need.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace chronos {

// Weighted undirected graph over (moe_index, expert) nodes, node id = moe_index * n_expert +
// expert (moe_index counts MoE layers only, 0-based). Stored as a dense upper triangle of
// doubles: n_nodes^2 / 2 * 8 bytes (Mixtral 256 nodes: 0.3 MB; Qwen3-30B-A3B 6144 nodes: 150 MB),
// at most 32768 nodes.
class CoactivationGraph {
 public:
  CoactivationGraph(int32_t n_moe_layers, int32_t n_expert);

  // One token's selected experts, top_ids[moe_index * k + j]. Adds 1 to every pair of distinct
  // experts selected by this token (across layers), and `neighbour_weight` to every pair (a of
  // this token, b of the previous token of the same sequence) with a != b, so an expert pair
  // used by consecutive tokens in both orders gets it twice. Throws Error on an id out of range.
  void add_token(std::span<const int32_t> top_ids, int32_t k, float neighbour_weight = 0.5f);
  // The next token starts a new sequence: no neighbour pairs with the previous one.
  void begin_sequence();

  int32_t n_moe_layers() const { return n_moe_layers_; }
  int32_t n_expert() const { return n_expert_; }
  int64_t n_nodes() const { return n_nodes_; }
  int64_t n_tokens() const { return n_tokens_; }
  // 0 for a == b.
  double weight(int32_t a, int32_t b) const;
  // Sum over unordered pairs {a, b}.
  double total_weight() const { return total_weight_; }
  // Per node: how many tokens selected it.
  std::vector<int64_t> activation_counts() const { return activations_; }

 private:
  size_t pair_index(int32_t a, int32_t b) const;  // a < b
  void add(int32_t a, int32_t b, double w);

  int32_t n_moe_layers_;
  int32_t n_expert_;
  int64_t n_nodes_;
  std::vector<double> upper_;  // [n_nodes * (n_nodes - 1) / 2], row-major over a < b
  std::vector<int64_t> activations_;
  std::vector<int32_t> previous_;  // the previous token's nodes, empty after begin_sequence
  std::vector<int32_t> current_;
  int64_t n_tokens_ = 0;
  double total_weight_ = 0;
};

enum class ClusterMethod { kLeiden, kLouvain, kNone };

struct ClusterOptions {
  ClusterMethod method = ClusterMethod::kLeiden;
  uint64_t seed = 0;
  double resolution = 1.0;    // modularity resolution: higher gives smaller communities
  int64_t max_cluster_bytes;  // no cluster holds more experts than fit in this
  int64_t bytes_per_expert;   // one expert's extent on disk (4096-aligned in .ctsr)
};

struct ClusterPlan {
  // Node ids, each exactly once; within a cluster, strongly co-activated experts are adjacent.
  // Communities come most activated first; the pieces of one community stay in chain order.
  std::vector<std::vector<int32_t>> clusters;
  double modularity;                  // of `clusters` (after the byte split), at `resolution`
  double intra_cluster_weight_share;  // weight inside clusters / total_weight (0 when empty)
};

// Communities by Leiden (Traag et al. 2019) or Louvain (Blondel et al. 2008) maximizing
// modularity, then each community ordered as a greedy chain (start at its most strongly
// connected expert, repeatedly append the unplaced expert with the heaviest edge to the last
// one) and cut into balanced pieces that fit max_cluster_bytes. Experts without any edge (never
// activated) are gathered in (layer, expert) order into clusters of their own, last. kNone: all experts in
// (layer, expert) order, cut every max_cluster_bytes. Deterministic for a given graph and seed.
// Throws Error when one expert does not fit in max_cluster_bytes.
ClusterPlan plan_clusters(const CoactivationGraph& graph, const ClusterOptions& options);

// Modularity of a partition given as clusters of node ids (nodes not listed are singletons).
double modularity(const CoactivationGraph& graph, const std::vector<std::vector<int32_t>>& clusters,
                  double resolution = 1.0);

}  // namespace chronos
