// Louvain and Leiden modularity maximization, seeded and deterministic.
//
// Gains are in edge-weight units: moving node i (strength k_i) into community c changes
// modularity by (w(i, c) - resolution * k_i * tot_c / 2m) / m, where w(i, c) is the weight from
// i to c's members and tot_c their summed strength; the 1/m factor is dropped.
#include "community.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

#include "chronos/error.h"

namespace chronos::cluster {
namespace {

constexpr double kGainEpsilon = 1e-10;      // a move must gain more than this: termination
constexpr double kRefineRandomness = 0.01;  // Leiden's theta, in edge-weight units
constexpr int kMaxLevels = 64;

// std:: distributions differ between standard libraries; these draws do not.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }
  template <typename T>
  void shuffle(std::vector<T>& values) {
    for (size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[engine_() % i]);
  }

 private:
  std::mt19937_64 engine_;
};

std::vector<int32_t> shuffled_nodes(int32_t n, Rng& rng) {
  std::vector<int32_t> order(size_t(n), 0);
  for (int32_t i = 0; i < n; ++i) order[size_t(i)] = i;
  rng.shuffle(order);
  return order;
}

// Ids 0..C-1 by first appearance over node ids; returns C.
int32_t renumber(std::vector<int32_t>& community) {
  std::vector<int32_t> new_id(community.size(), -1);
  int32_t next = 0;
  for (int32_t& c : community) {
    if (new_id[size_t(c)] < 0) new_id[size_t(c)] = next++;
    c = new_id[size_t(c)];
  }
  return next;
}

// Weight from one node to each community among its neighbours, in first-touch order.
class NeighbourWeights {
 public:
  explicit NeighbourWeights(int32_t n) : weight_(size_t(n), 0.0), seen_(size_t(n), 0) {}

  template <typename Accept>
  void collect(const WeightedGraph& g, int32_t node, const std::vector<int32_t>& community, Accept accept) {
    clear();
    for (int64_t e = g.offsets[size_t(node)]; e < g.offsets[size_t(node) + 1]; ++e) {
      const int32_t target = g.targets[size_t(e)];
      if (target == node || !accept(target)) continue;
      const int32_t c = community[size_t(target)];
      if (!seen_[size_t(c)]) {
        seen_[size_t(c)] = 1;
        touched_.push_back(c);
      }
      weight_[size_t(c)] += g.weights[size_t(e)];
    }
  }
  void collect(const WeightedGraph& g, int32_t node, const std::vector<int32_t>& community) {
    collect(g, node, community, [](int32_t) { return true; });
  }
  double of(int32_t c) const { return weight_[size_t(c)]; }
  const std::vector<int32_t>& touched() const { return touched_; }

 private:
  void clear() {
    for (const int32_t c : touched_) {
      weight_[size_t(c)] = 0.0;
      seen_[size_t(c)] = 0;
    }
    touched_.clear();
  }
  std::vector<double> weight_;
  std::vector<uint8_t> seen_;
  std::vector<int32_t> touched_;
};

std::vector<double> community_totals(const WeightedGraph& g, const std::vector<int32_t>& community) {
  std::vector<double> tot(size_t(g.n_nodes), 0.0);
  for (int32_t i = 0; i < g.n_nodes; ++i) tot[size_t(community[size_t(i)])] += g.strength[size_t(i)];
  return tot;
}

// Louvain's phase 1: sweeps in a random order until no node moves.
void move_nodes_sweeping(const WeightedGraph& g, std::vector<int32_t>& community, double resolution, Rng& rng) {
  const double two_m = 2.0 * g.total_weight;
  std::vector<double> tot = community_totals(g, community);
  NeighbourWeights neighbours(g.n_nodes);
  const std::vector<int32_t> order = shuffled_nodes(g.n_nodes, rng);
  for (bool moved = true; moved;) {
    moved = false;
    for (const int32_t i : order) {
      const int32_t old = community[size_t(i)];
      const double k = g.strength[size_t(i)];
      neighbours.collect(g, i, community);
      tot[size_t(old)] -= k;
      int32_t best = old;
      double best_gain = neighbours.of(old) - resolution * k * tot[size_t(old)] / two_m;
      for (const int32_t c : neighbours.touched()) {
        const double gain = neighbours.of(c) - resolution * k * tot[size_t(c)] / two_m;
        if (gain > best_gain + kGainEpsilon) {
          best = c;
          best_gain = gain;
        }
      }
      tot[size_t(best)] += k;
      if (best != old) {
        community[size_t(i)] = best;
        moved = true;
      }
    }
  }
}

// Leiden's fast local moving: a queue of nodes; a node that moves re-queues the neighbours that
// are not in its new community. Communities may empty out and a node may take an empty one.
void move_nodes_queued(const WeightedGraph& g, std::vector<int32_t>& community, double resolution, Rng& rng) {
  const double two_m = 2.0 * g.total_weight;
  std::vector<double> tot = community_totals(g, community);
  std::vector<int32_t> size(size_t(g.n_nodes), 0);
  for (const int32_t c : community) ++size[size_t(c)];
  std::vector<int32_t> empty;
  for (int32_t c = g.n_nodes - 1; c >= 0; --c) {
    if (size[size_t(c)] == 0) empty.push_back(c);
  }
  const std::vector<int32_t> order = shuffled_nodes(g.n_nodes, rng);
  std::deque<int32_t> queue(order.begin(), order.end());
  std::vector<uint8_t> queued(size_t(g.n_nodes), 1);
  NeighbourWeights neighbours(g.n_nodes);
  while (!queue.empty()) {
    const int32_t i = queue.front();
    queue.pop_front();
    queued[size_t(i)] = 0;
    const int32_t old = community[size_t(i)];
    const double k = g.strength[size_t(i)];
    neighbours.collect(g, i, community);
    tot[size_t(old)] -= k;
    --size[size_t(old)];
    int32_t best = old;
    double best_gain = neighbours.of(old) - resolution * k * tot[size_t(old)] / two_m;
    for (const int32_t c : neighbours.touched()) {
      const double gain = neighbours.of(c) - resolution * k * tot[size_t(c)] / two_m;
      if (gain > best_gain + kGainEpsilon) {
        best = c;
        best_gain = gain;
      }
    }
    if (size[size_t(old)] > 0 && best_gain < -kGainEpsilon && !empty.empty()) {
      best = empty.back();  // alone beats every community on offer (gain 0)
      empty.pop_back();
    }
    tot[size_t(best)] += k;
    ++size[size_t(best)];
    if (best == old) continue;
    community[size_t(i)] = best;
    if (size[size_t(old)] == 0) empty.push_back(old);
    for (int64_t e = g.offsets[size_t(i)]; e < g.offsets[size_t(i) + 1]; ++e) {
      const int32_t j = g.targets[size_t(e)];
      if (!queued[size_t(j)] && community[size_t(j)] != best) {
        queued[size_t(j)] = 1;
        queue.push_back(j);
      }
    }
  }
}

// Leiden's refinement: within each community, singletons merge into well-connected
// sub-communities, chosen at random with probability ~ exp(gain / theta) among non-negative
// gains. Every refined community is a subset of one community of `community`.
std::vector<int32_t> refine(const WeightedGraph& g, const std::vector<int32_t>& community, int32_t n_communities,
                            double resolution, Rng& rng) {
  const double two_m = 2.0 * g.total_weight;
  const size_t n = size_t(g.n_nodes);
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(n_communities));
  for (int32_t i = 0; i < g.n_nodes; ++i) members[size_t(community[size_t(i)])].push_back(i);
  const std::vector<double> community_tot = community_totals(g, community);

  std::vector<int32_t> refined(n);
  std::vector<double> tot(n), external(n);  // per refined community: strength, weight to C - T
  std::vector<int32_t> size(n, 1);
  for (int32_t i = 0; i < g.n_nodes; ++i) {
    refined[size_t(i)] = i;
    tot[size_t(i)] = g.strength[size_t(i)];
    double w = 0;
    for (int64_t e = g.offsets[size_t(i)]; e < g.offsets[size_t(i) + 1]; ++e) {
      const int32_t j = g.targets[size_t(e)];
      if (j != i && community[size_t(j)] == community[size_t(i)]) w += g.weights[size_t(e)];
    }
    external[size_t(i)] = w;
  }
  NeighbourWeights neighbours(g.n_nodes);
  std::vector<int32_t> candidates;
  std::vector<double> gains;
  for (int32_t c = 0; c < n_communities; ++c) {
    std::vector<int32_t> nodes = members[size_t(c)];
    rng.shuffle(nodes);
    const double tot_c = community_tot[size_t(c)];
    for (const int32_t v : nodes) {
      const int32_t own = refined[size_t(v)];
      if (size[size_t(own)] != 1) continue;  // only singletons move
      const double k = g.strength[size_t(v)];
      if (external[size_t(own)] < resolution * k * (tot_c - k) / two_m) continue;
      neighbours.collect(g, v, refined, [&](int32_t j) { return community[size_t(j)] == c; });
      candidates.assign(1, own);
      gains.assign(1, 0.0);
      for (const int32_t t : neighbours.touched()) {
        const double tot_t = tot[size_t(t)];
        if (external[size_t(t)] < resolution * tot_t * (tot_c - tot_t) / two_m) continue;
        const double gain = neighbours.of(t) - resolution * k * tot_t / two_m;
        if (gain < 0) continue;
        candidates.push_back(t);
        gains.push_back(gain);
      }
      const double max_gain = *std::max_element(gains.begin(), gains.end());
      double sum = 0;
      for (double& gain : gains) sum += (gain = std::exp((gain - max_gain) / kRefineRandomness));
      double draw = rng.uniform() * sum;
      size_t pick = 0;
      while (pick + 1 < gains.size() && draw >= gains[pick]) draw -= gains[pick++];
      const int32_t target = candidates[pick];
      if (target == own) continue;
      refined[size_t(v)] = target;
      size[size_t(own)] = 0;
      ++size[size_t(target)];
      tot[size_t(own)] = 0;
      tot[size_t(target)] += k;
      external[size_t(target)] += external[size_t(own)] - 2.0 * neighbours.of(target);
    }
  }
  return refined;
}

WeightedGraph aggregate(const WeightedGraph& g, const std::vector<int32_t>& community, int32_t n_communities) {
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(n_communities));
  for (int32_t i = 0; i < g.n_nodes; ++i) members[size_t(community[size_t(i)])].push_back(i);
  std::vector<std::vector<std::pair<int32_t, double>>> rows(static_cast<size_t>(n_communities));
  std::vector<double> self_loop(size_t(n_communities), 0.0);
  std::vector<double> acc(size_t(n_communities), 0.0);
  std::vector<int32_t> touched;
  for (int32_t c = 0; c < n_communities; ++c) {
    double internal_twice = 0;  // each internal edge is seen from both ends
    for (const int32_t i : members[size_t(c)]) {
      self_loop[size_t(c)] += g.self_loop[size_t(i)];
      for (int64_t e = g.offsets[size_t(i)]; e < g.offsets[size_t(i) + 1]; ++e) {
        const int32_t d = community[size_t(g.targets[size_t(e)])];
        if (d == c) {
          internal_twice += g.weights[size_t(e)];
          continue;
        }
        if (acc[size_t(d)] == 0.0) touched.push_back(d);
        acc[size_t(d)] += g.weights[size_t(e)];
      }
    }
    self_loop[size_t(c)] += internal_twice / 2.0;
    for (const int32_t d : touched) {
      rows[size_t(c)].emplace_back(d, acc[size_t(d)]);
      acc[size_t(d)] = 0.0;
    }
    touched.clear();
  }
  return WeightedGraph::from_rows(rows, std::move(self_loop));
}

}  // namespace

WeightedGraph WeightedGraph::from_rows(const std::vector<std::vector<std::pair<int32_t, double>>>& rows,
                                       std::vector<double> self) {
  WeightedGraph g;
  g.n_nodes = int32_t(rows.size());
  CHRONOS_CHECK(self.size() == rows.size());
  g.offsets.assign(rows.size() + 1, 0);
  for (size_t i = 0; i < rows.size(); ++i) g.offsets[i + 1] = g.offsets[i] + int64_t(rows[i].size());
  g.targets.reserve(size_t(g.offsets.back()));
  g.weights.reserve(size_t(g.offsets.back()));
  g.strength.assign(rows.size(), 0.0);
  double twice_total = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    double s = 2.0 * self[i];
    for (const auto& [target, weight] : rows[i]) {
      CHRONOS_CHECK(target >= 0 && target < g.n_nodes && size_t(target) != i && weight > 0);
      g.targets.push_back(target);
      g.weights.push_back(weight);
      s += weight;
    }
    g.strength[i] = s;
    twice_total += s;
  }
  g.self_loop = std::move(self);
  g.total_weight = twice_total / 2.0;
  return g;
}

std::vector<int32_t> louvain(const WeightedGraph& graph, double resolution, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> membership(static_cast<size_t>(graph.n_nodes));  // original node -> node of `level`
  for (int32_t i = 0; i < graph.n_nodes; ++i) membership[size_t(i)] = i;
  if (graph.total_weight <= 0) return membership;
  WeightedGraph level_graph;
  const WeightedGraph* g = &graph;
  for (int level = 0; level < kMaxLevels; ++level) {
    std::vector<int32_t> community(static_cast<size_t>(g->n_nodes));
    for (int32_t i = 0; i < g->n_nodes; ++i) community[size_t(i)] = i;
    move_nodes_sweeping(*g, community, resolution, rng);
    const int32_t n_communities = renumber(community);
    for (int32_t& m : membership) m = community[size_t(m)];
    if (n_communities == g->n_nodes) break;
    level_graph = aggregate(*g, community, n_communities);
    g = &level_graph;
  }
  renumber(membership);
  return membership;
}

std::vector<int32_t> leiden(const WeightedGraph& graph, double resolution, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> membership(static_cast<size_t>(graph.n_nodes));  // original node -> node of `level`
  for (int32_t i = 0; i < graph.n_nodes; ++i) membership[size_t(i)] = i;
  if (graph.total_weight <= 0) return membership;
  WeightedGraph level_graph;
  const WeightedGraph* g = &graph;
  std::vector<int32_t> partition = membership;  // over the nodes of *g
  for (int level = 0; level < kMaxLevels; ++level) {
    move_nodes_queued(*g, partition, resolution, rng);
    const int32_t n_communities = renumber(partition);
    if (n_communities == g->n_nodes) break;
    std::vector<int32_t> refined = refine(*g, partition, n_communities, resolution, rng);
    int32_t n_refined = renumber(refined);
    if (n_refined == g->n_nodes) {  // nothing merged: aggregate the communities themselves
      refined = partition;
      n_refined = n_communities;
    }
    std::vector<int32_t> next_partition(static_cast<size_t>(n_refined));
    for (int32_t i = 0; i < g->n_nodes; ++i) {
      next_partition[size_t(refined[size_t(i)])] = partition[size_t(i)];
    }
    for (int32_t& m : membership) m = refined[size_t(m)];
    level_graph = aggregate(*g, refined, n_refined);
    g = &level_graph;
    partition = std::move(next_partition);
  }
  for (int32_t& m : membership) m = partition[size_t(m)];
  renumber(membership);
  return membership;
}

}  // namespace chronos::cluster
