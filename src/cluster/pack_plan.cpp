// plan_clusters: communities of the co-activation graph, chained and cut to the byte cap.
#include <algorithm>
#include <numeric>

#include "chronos/cluster.h"
#include "chronos/error.h"
#include "community.h"

namespace chronos {
namespace {

cluster::WeightedGraph to_weighted_graph(const CoactivationGraph& graph) {
  const int32_t n = int32_t(graph.n_nodes());
  std::vector<std::vector<std::pair<int32_t, double>>> rows(static_cast<size_t>(n));
  for (int32_t a = 0; a < n; ++a) {
    for (int32_t b = 0; b < n; ++b) {
      const double w = graph.weight(a, b);
      if (w > 0) rows[size_t(a)].emplace_back(b, w);
    }
  }
  return cluster::WeightedGraph::from_rows(rows, std::vector<double>(size_t(n), 0.0));
}

// Greedy chain: start at the member with the heaviest weight to the rest, then repeatedly
// append the unplaced member with the heaviest edge to the last one (lowest id on ties).
std::vector<int32_t> chain(const CoactivationGraph& graph, std::vector<int32_t> members) {
  std::sort(members.begin(), members.end());
  const size_t n = members.size();
  if (n <= 2) return members;
  size_t start = 0;
  double best = -1;
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t j = 0; j < n; ++j) s += graph.weight(members[i], members[j]);
    if (s > best) {
      best = s;
      start = i;
    }
  }
  std::vector<int32_t> order{members[start]};
  std::vector<uint8_t> placed(n, 0);
  placed[start] = 1;
  for (size_t step = 1; step < n; ++step) {
    size_t next = n;
    double heaviest = -1;
    for (size_t j = 0; j < n; ++j) {
      if (placed[j]) continue;
      const double w = graph.weight(order.back(), members[j]);
      if (w > heaviest) {
        heaviest = w;
        next = j;
      }
    }
    placed[next] = 1;
    order.push_back(members[next]);
  }
  return order;
}

// Cuts `nodes` into the fewest pieces of at most `cap`, sizes differing by at most one.
void cut_balanced(const std::vector<int32_t>& nodes, int64_t cap, std::vector<std::vector<int32_t>>& out) {
  const int64_t n = int64_t(nodes.size());
  if (n == 0) return;
  const int64_t pieces = (n + cap - 1) / cap;
  int64_t begin = 0;
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t size = n / pieces + (p < n % pieces ? 1 : 0);
    out.emplace_back(nodes.begin() + begin, nodes.begin() + begin + size);
    begin += size;
  }
}

double internal_weight(const CoactivationGraph& graph, const std::vector<int32_t>& members) {
  double w = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    for (size_t j = i + 1; j < members.size(); ++j) w += graph.weight(members[i], members[j]);
  }
  return w;
}

}  // namespace

double modularity(const CoactivationGraph& graph, const std::vector<std::vector<int32_t>>& clusters,
                  double resolution) {
  const double m = graph.total_weight();
  if (m <= 0) return 0.0;
  const int32_t n = int32_t(graph.n_nodes());
  std::vector<double> strength(size_t(n), 0.0);
  for (int32_t a = 0; a < n; ++a) {
    for (int32_t b = a + 1; b < n; ++b) {
      const double w = graph.weight(a, b);
      strength[size_t(a)] += w;
      strength[size_t(b)] += w;
    }
  }
  std::vector<uint8_t> listed(size_t(n), 0);
  double q = 0;
  auto add_community = [&](double internal, double tot) {
    q += internal / m - resolution * (tot / (2 * m)) * (tot / (2 * m));
  };
  for (const auto& members : clusters) {
    double tot = 0;
    for (const int32_t node : members) {
      CHRONOS_CHECK(node >= 0 && node < n && !listed[size_t(node)]);
      listed[size_t(node)] = 1;
      tot += strength[size_t(node)];
    }
    add_community(internal_weight(graph, members), tot);
  }
  for (int32_t node = 0; node < n; ++node) {
    if (!listed[size_t(node)]) add_community(0.0, strength[size_t(node)]);
  }
  return q;
}

ClusterPlan plan_clusters(const CoactivationGraph& graph, const ClusterOptions& options) {
  if (options.bytes_per_expert <= 0) {
    throw_error("cluster plan: {} bytes per expert, expected a positive size", options.bytes_per_expert);
  }
  if (options.max_cluster_bytes < options.bytes_per_expert) {
    throw_error("cluster plan: cluster cap {} bytes is smaller than one expert ({} bytes)", options.max_cluster_bytes,
                options.bytes_per_expert);
  }
  if (!(options.resolution > 0)) {
    throw_error("cluster plan: resolution {} must be positive", options.resolution);
  }
  const int64_t cap = options.max_cluster_bytes / options.bytes_per_expert;
  const int32_t n = int32_t(graph.n_nodes());
  ClusterPlan plan{};

  if (options.method == ClusterMethod::kNone) {
    for (int32_t begin = 0; begin < n; begin += int32_t(cap)) {
      const int32_t end = int32_t(std::min<int64_t>(n, begin + cap));
      std::vector<int32_t> piece(static_cast<size_t>(end - begin));
      std::iota(piece.begin(), piece.end(), begin);
      plan.clusters.push_back(std::move(piece));
    }
  } else {
    const cluster::WeightedGraph weighted = to_weighted_graph(graph);
    const std::vector<int32_t> community = options.method == ClusterMethod::kLeiden
                                               ? cluster::leiden(weighted, options.resolution, options.seed)
                                               : cluster::louvain(weighted, options.resolution, options.seed);
    const int32_t n_communities = n == 0 ? 0 : *std::max_element(community.begin(), community.end()) + 1;
    const std::vector<int64_t> activations = graph.activation_counts();
    std::vector<std::vector<int32_t>> members(static_cast<size_t>(n_communities));
    std::vector<int32_t> isolated;
    for (int32_t node = 0; node < n; ++node) {
      if (weighted.strength[size_t(node)] > 0) {
        members[size_t(community[size_t(node)])].push_back(node);
      } else {
        isolated.push_back(node);  // a singleton community that no token ties to anything
      }
    }
    std::erase_if(members, [](const auto& m) { return m.empty(); });
    std::vector<int64_t> used(members.size(), 0);
    for (size_t c = 0; c < members.size(); ++c) {
      for (const int32_t node : members[c]) used[c] += activations[size_t(node)];
    }
    std::vector<size_t> order(members.size());
    std::iota(order.begin(), order.end(), size_t(0));
    // Members are sorted by node id, so front() breaks ties deterministically.
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (used[a] != used[b]) return used[a] > used[b];
      return members[a].front() < members[b].front();
    });
    for (const size_t c : order) cut_balanced(chain(graph, members[c]), cap, plan.clusters);
    cut_balanced(isolated, cap, plan.clusters);
  }

  plan.modularity = modularity(graph, plan.clusters, options.resolution);
  double intra = 0;
  for (const auto& members : plan.clusters) intra += internal_weight(graph, members);
  plan.intra_cluster_weight_share = graph.total_weight() > 0 ? intra / graph.total_weight() : 0.0;
  return plan;
}

}  // namespace chronos
