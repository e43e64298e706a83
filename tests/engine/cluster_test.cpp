// Co-activation graph weights, Louvain/Leiden recovery of planted groups, and pack planning.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "chronos/cluster.h"
#include "chronos/error.h"

namespace chronos {
namespace {

// 2 MoE layers x 4 experts, k = 2, two tokens of one sequence (see the weights worked out below).
CoactivationGraph hand_graph() {
  CoactivationGraph graph(2, 4);
  const int32_t first[] = {0, 1, 2, 3};   // nodes 0, 1, 6, 7
  const int32_t second[] = {1, 2, 3, 0};  // nodes 1, 2, 7, 4
  graph.add_token(first, 2);
  graph.add_token(second, 2);
  return graph;
}

TEST(CoactivationGraph, WeightsCountSameTokenPairsAndHalfWeightNeighbourPairs) {
  const CoactivationGraph graph = hand_graph();
  EXPECT_EQ(graph.n_nodes(), 8);
  EXPECT_DOUBLE_EQ(graph.weight(1, 7), 1 + 1 + 0.5 + 0.5);  // both tokens, and 1->7, 7->1
  EXPECT_DOUBLE_EQ(graph.weight(7, 1), 3.0);
  EXPECT_DOUBLE_EQ(graph.weight(0, 1), 1 + 0.5);  // token 1; 1 (now) after 0 (before)
  EXPECT_DOUBLE_EQ(graph.weight(0, 6), 1.0);
  EXPECT_DOUBLE_EQ(graph.weight(2, 6), 0.5);  // neighbours only
  EXPECT_DOUBLE_EQ(graph.weight(3, 5), 0.0);
  EXPECT_DOUBLE_EQ(graph.weight(1, 1), 0.0);
  // 6 + 6 same-token pairs, 16 - 2 (nodes 1 and 7 repeat) neighbour pairs at 0.5.
  EXPECT_DOUBLE_EQ(graph.total_weight(), 6 + 6 + 14 * 0.5);
  EXPECT_EQ(graph.activation_counts(), (std::vector<int64_t>{1, 2, 1, 0, 1, 0, 1, 2}));
}

TEST(CoactivationGraph, BeginSequenceDropsNeighbourPairs) {
  CoactivationGraph graph(1, 4);
  const int32_t a[] = {0}, b[] = {1};
  graph.add_token(a, 1);
  graph.begin_sequence();
  graph.add_token(b, 1);
  EXPECT_DOUBLE_EQ(graph.weight(0, 1), 0.0);
  graph.add_token(a, 1, 2.0f);
  EXPECT_DOUBLE_EQ(graph.weight(0, 1), 2.0);
}

TEST(CoactivationGraph, BadTokensAreErrors) {
  CoactivationGraph graph(2, 4);
  const int32_t short_token[] = {0, 1, 2};
  const int32_t out_of_range[] = {0, 1, 2, 4};
  EXPECT_THROW(graph.add_token(short_token, 2), Error);
  EXPECT_THROW(graph.add_token(out_of_range, 2), Error);
  EXPECT_THROW(CoactivationGraph(0, 4), Error);
}

// 4 groups over 2 MoE layers x 16 experts: group g owns experts 4g..4g+3 of both layers. Each
// token picks a group and 2 of its experts per layer; sequences stay in one group for a while;
// 5% of tokens are uniform noise.
CoactivationGraph planted_graph(uint64_t seed) {
  CoactivationGraph graph(2, 16);
  std::mt19937_64 rng(seed);
  for (int sequence = 0; sequence < 40; ++sequence) {
    graph.begin_sequence();
    int32_t group = int32_t(rng() % 4);
    for (int t = 0; t < 25; ++t) {
      if (rng() % 10 == 0) group = int32_t(rng() % 4);
      const bool noise = rng() % 20 == 0;
      std::vector<int32_t> ids;
      for (int layer = 0; layer < 2; ++layer) {
        const int32_t base = noise ? 0 : 4 * group;
        const int32_t span = noise ? 16 : 4;
        const int32_t e0 = base + int32_t(rng() % span);
        int32_t e1 = base + int32_t(rng() % span);
        while (e1 == e0) e1 = base + int32_t(rng() % span);
        ids.push_back(e0);
        ids.push_back(e1);
      }
      graph.add_token(ids, 2);
    }
  }
  return graph;
}

std::set<std::set<int32_t>> as_sets(const std::vector<std::vector<int32_t>>& clusters) {
  std::set<std::set<int32_t>> sets;
  for (const auto& c : clusters) sets.insert(std::set<int32_t>(c.begin(), c.end()));
  return sets;
}

std::set<std::set<int32_t>> planted_groups() {
  std::set<std::set<int32_t>> groups;
  for (int32_t g = 0; g < 4; ++g) {
    std::set<int32_t> nodes;
    for (int32_t e = 4 * g; e < 4 * g + 4; ++e) {
      nodes.insert(e);       // layer 0
      nodes.insert(16 + e);  // layer 1
    }
    groups.insert(nodes);
  }
  return groups;
}

void expect_every_node_once(const ClusterPlan& plan, int64_t n_nodes) {
  std::vector<int> seen(size_t(n_nodes), 0);
  for (const auto& c : plan.clusters) {
    EXPECT_FALSE(c.empty());
    for (const int32_t node : c) {
      ASSERT_GE(node, 0);
      ASSERT_LT(node, n_nodes);
      ++seen[size_t(node)];
    }
  }
  for (int64_t i = 0; i < n_nodes; ++i) EXPECT_EQ(seen[size_t(i)], 1) << "node " << i;
}

TEST(PlanClusters, BothMethodsRecoverPlantedGroups) {
  const CoactivationGraph graph = planted_graph(3);
  for (const auto method : {ClusterMethod::kLeiden, ClusterMethod::kLouvain}) {
    for (const uint64_t seed : {0u, 1u, 2u}) {
      const ClusterPlan plan =
          plan_clusters(graph, {.method = method, .seed = seed, .max_cluster_bytes = 8 * 100, .bytes_per_expert = 100});
      expect_every_node_once(plan, graph.n_nodes());
      EXPECT_EQ(as_sets(plan.clusters), planted_groups()) << "method " << int(method);
      EXPECT_GT(plan.intra_cluster_weight_share, 0.8);
      EXPECT_GT(plan.modularity, 0.5);
    }
  }
}

TEST(PlanClusters, BothMethodsRecoverSixteenGroupsAcrossEightLayers) {
  // 8 MoE layers x 64 experts, 16 groups of 4 experts per layer (32 nodes each), top-2 per
  // layer: large enough that both methods aggregate over several levels.
  CoactivationGraph graph(8, 64);
  std::mt19937_64 rng(11);
  for (int t = 0; t < 3000; ++t) {
    if (t % 20 == 0) graph.begin_sequence();
    const int32_t group = int32_t(rng() % 16);
    std::vector<int32_t> ids;
    for (int layer = 0; layer < 8; ++layer) {
      const int32_t e0 = 4 * group + int32_t(rng() % 4);
      const int32_t e1 = 4 * group + (e0 - 4 * group + 1 + int32_t(rng() % 3)) % 4;
      ids.push_back(e0);
      ids.push_back(e1);
    }
    graph.add_token(ids, 2);
  }
  std::set<std::set<int32_t>> groups;
  for (int32_t g = 0; g < 16; ++g) {
    std::set<int32_t> nodes;
    for (int32_t layer = 0; layer < 8; ++layer) {
      for (int32_t e = 4 * g; e < 4 * g + 4; ++e) nodes.insert(layer * 64 + e);
    }
    groups.insert(nodes);
  }
  for (const auto method : {ClusterMethod::kLeiden, ClusterMethod::kLouvain}) {
    const ClusterPlan plan =
        plan_clusters(graph, {.method = method, .seed = 9, .max_cluster_bytes = 32, .bytes_per_expert = 1});
    expect_every_node_once(plan, graph.n_nodes());
    EXPECT_EQ(as_sets(plan.clusters), groups) << "method " << int(method);
  }
}

TEST(PlanClusters, ByteCapSplitsWithinCommunities) {
  const CoactivationGraph graph = planted_graph(4);
  const auto groups = planted_groups();
  for (const auto method : {ClusterMethod::kLeiden, ClusterMethod::kLouvain}) {
    // 3 experts of 4096 bytes fit in 12 KiB + change: each group of 8 becomes 3 + 3 + 2.
    const ClusterPlan plan =
        plan_clusters(graph, {.method = method, .max_cluster_bytes = 3 * 4096 + 100, .bytes_per_expert = 4096});
    expect_every_node_once(plan, graph.n_nodes());
    EXPECT_EQ(plan.clusters.size(), 12u);
    for (const auto& c : plan.clusters) {
      EXPECT_LE(c.size(), 3u);
      EXPECT_GE(c.size(), 2u);
      const bool inside_one_group = std::any_of(groups.begin(), groups.end(), [&](const auto& g) {
        return std::all_of(c.begin(), c.end(), [&](int32_t node) { return g.count(node) > 0; });
      });
      EXPECT_TRUE(inside_one_group);
    }
  }
}

TEST(PlanClusters, SameSeedSamePlan) {
  const CoactivationGraph graph = planted_graph(5);
  for (const auto method : {ClusterMethod::kLeiden, ClusterMethod::kLouvain}) {
    const ClusterOptions options{
        .method = method, .seed = 42, .resolution = 1.5, .max_cluster_bytes = 5, .bytes_per_expert = 1};
    const ClusterPlan a = plan_clusters(graph, options);
    const ClusterPlan b = plan_clusters(graph, options);
    EXPECT_EQ(a.clusters, b.clusters);
    EXPECT_EQ(a.modularity, b.modularity);
  }
}

TEST(PlanClusters, NoneKeepsLayerExpertOrderCutByBytes) {
  const CoactivationGraph graph(2, 5);
  const ClusterPlan plan =
      plan_clusters(graph, {.method = ClusterMethod::kNone, .max_cluster_bytes = 3 * 10 + 9, .bytes_per_expert = 10});
  const std::vector<std::vector<int32_t>> expected = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}};
  EXPECT_EQ(plan.clusters, expected);
  EXPECT_EQ(plan.intra_cluster_weight_share, 0.0);  // an empty graph
}

TEST(PlanClusters, IntraShareAndModularityOnTheHandGraph) {
  const CoactivationGraph graph = hand_graph();
  const ClusterPlan plan =
      plan_clusters(graph, {.method = ClusterMethod::kNone, .max_cluster_bytes = 4, .bytes_per_expert = 1});
  ASSERT_EQ(plan.clusters.size(), 2u);
  // {0,1,2,3}: w01 1.5 + w12 1.5 + w02 0.5; {4,5,6,7}: w67 1.5 + w47 1.5 + w46 0.5.
  EXPECT_DOUBLE_EQ(plan.intra_cluster_weight_share, 7.0 / 19.0);
  // Modularity from its definition, 1/2m sum_ij (A_ij - k_i k_j / 2m) [c_i == c_j].
  const int n = 8;
  std::vector<double> k(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) k[size_t(i)] += graph.weight(i, j);
  }
  const double two_m = 2 * graph.total_weight();
  double q = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i / 4 == j / 4) q += graph.weight(i, j) - k[size_t(i)] * k[size_t(j)] / two_m;
    }
  }
  EXPECT_NEAR(plan.modularity, q / two_m, 1e-12);
  EXPECT_NEAR(modularity(graph, {{0, 1, 2, 3, 4, 5, 6, 7}}), 0.0, 1e-12);
}

TEST(PlanClusters, ChainPutsStrongPairsNextToEachOther) {
  // One layer, 6 experts: every pair once, plus a heavy path 2-5-0-4-1-3. A low resolution
  // keeps all six in one community; the chain starts at 5 (strength 22), goes to 2 (w 10), then
  // to the lowest id among weight-1 ties (0), and follows the path: 4, 1, 3.
  CoactivationGraph graph(1, 6);
  auto pair = [&](int32_t a, int32_t b, int times) {
    const int32_t ids[] = {a, b};
    for (int i = 0; i < times; ++i) graph.add_token(ids, 2, 0.0f);
  };
  for (int32_t a = 0; a < 6; ++a) {
    for (int32_t b = a + 1; b < 6; ++b) pair(a, b, 1);
  }
  pair(2, 5, 9);
  pair(5, 0, 8);
  pair(0, 4, 7);
  pair(4, 1, 6);
  pair(1, 3, 5);
  for (const auto method : {ClusterMethod::kLeiden, ClusterMethod::kLouvain}) {
    const ClusterPlan plan =
        plan_clusters(graph, {.method = method, .resolution = 0.01, .max_cluster_bytes = 6, .bytes_per_expert = 1});
    ASSERT_EQ(plan.clusters.size(), 1u);
    EXPECT_EQ(plan.clusters[0], (std::vector<int32_t>{5, 2, 0, 4, 1, 3}));
    EXPECT_DOUBLE_EQ(plan.intra_cluster_weight_share, 1.0);
  }
}

TEST(PlanClusters, UnusedExpertsComeLastInIdOrder) {
  CoactivationGraph graph(1, 8);
  const int32_t ids[] = {5, 2};
  graph.add_token(ids, 2);
  const ClusterPlan plan = plan_clusters(graph, {.max_cluster_bytes = 4, .bytes_per_expert = 1});
  const std::vector<std::vector<int32_t>> expected = {{2, 5}, {0, 1, 3}, {4, 6, 7}};
  EXPECT_EQ(plan.clusters, expected);
}

TEST(PlanClusters, CapBelowOneExpertIsAnError) {
  const CoactivationGraph graph(1, 4);
  EXPECT_THROW(plan_clusters(graph, {.max_cluster_bytes = 10, .bytes_per_expert = 11}), Error);
}

}  // namespace
}  // namespace chronos
