// The sigmoid + bias router of one token (kernels/router_select.h), which the CPU router and the
// CUDA kernel both run, against a written-out sort-based reading of transformers' DeepSeek-V3 /
// GLM-4.5 router (modeling_glm4_moe.py: Glm4MoeTopkRouter.forward); the models' parity tests
// check the same formula end to end against transformers itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kernels/router_select.h"

namespace chronos {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Stable descending order of values (ties to the lower index).
std::vector<int64_t> descending(const std::vector<float>& values) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return values[size_t(a)] > values[size_t(b)]; });
  return order;
}

Routed reference(const GroupRouter& r, const std::vector<float>& logits, const std::vector<float>& bias) {
  std::vector<float> scores(logits.size()), choice(logits.size());
  for (size_t e = 0; e < logits.size(); ++e) {
    scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = scores[e] + bias[e];
  }
  const int64_t size = r.n_expert / r.n_group;
  std::vector<float> group_score(size_t(r.n_group));
  for (int64_t g = 0; g < r.n_group; ++g) {
    std::vector<float> members(choice.begin() + g * size, choice.begin() + (g + 1) * size);
    std::sort(members.rbegin(), members.rend());
    group_score[size_t(g)] = members[0] + members[1];
  }
  const std::vector<int64_t> groups = descending(group_score);
  const std::set<int64_t> kept(groups.begin(), groups.begin() + r.topk_group);
  for (int64_t e = 0; e < r.n_expert; ++e)
    if (!kept.count(e / size)) choice[size_t(e)] = -std::numeric_limits<float>::infinity();
  const std::vector<int64_t> order = descending(choice);
  Routed out;
  float sum = 0.0f;
  for (int64_t j = 0; j < r.k; ++j) {
    out.ids.push_back(int32_t(order[size_t(j)]));
    out.weights.push_back(scores[size_t(order[size_t(j)])]);
    sum += out.weights.back();
  }
  for (float& w : out.weights) w = (r.normalize ? w / (sum + 1e-20f) : w) * r.scale;
  return out;
}

TEST(RouterSelect, SigmoidBiasMatchesTheSortedReadingOfTransformers) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  const GroupRouter shapes[] = {
      {16, 3, 4, 2, true, 2.5f},   // the GLM fixture's
      {64, 8, 8, 4, true, 2.5f},   // DeepSeek-V3's proportions
      {32, 4, 1, 1, false, 1.0f},  // MiniMax-M2: no groups
      {12, 2, 3, 1, true, 1.0f},   // one group of four holds both
  };
  for (const GroupRouter& r : shapes) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> logits(size_t(r.n_expert)), bias(size_t(r.n_expert));
      for (float& v : logits) v = normal(rng);
      for (float& v : bias) v = 0.3f * normal(rng);
      std::vector<float> scores = logits;
      std::vector<int32_t> ids(size_t(r.k));
      std::vector<float> weights(size_t(r.k));
      group_router_select(r, scores.data(), bias.data(), ids.data(), weights.data());
      const Routed want = reference(r, logits, bias);
      ASSERT_EQ(ids, want.ids) << "experts " << r.n_expert << ", groups " << r.n_group << ", trial " << trial;
      for (int64_t j = 0; j < r.k; ++j) EXPECT_FLOAT_EQ(weights[size_t(j)], want.weights[size_t(j)]);
      for (size_t e = 0; e < logits.size(); ++e) EXPECT_FLOAT_EQ(scores[e], 1.0f / (1.0f + std::exp(-logits[e])));
    }
  }
}

TEST(RouterSelect, TheBiasChoosesButDoesNotWeigh) {
  const GroupRouter r{4, 1, 1, 1, false, 1.0f};
  std::vector<float> scores = {2.0f, 0.0f, -1.0f, -2.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 5.0f};  // lifts the least likely expert first
  int32_t id = -1;
  float weight = 0.0f;
  group_router_select(r, scores.data(), bias.data(), &id, &weight);
  EXPECT_EQ(id, 3);
  EXPECT_FLOAT_EQ(weight, 1.0f / (1.0f + std::exp(2.0f)));  // its unbiased score
  std::vector<float> again = {2.0f, 0.0f, -1.0f, -2.0f};
  group_router_select(r, again.data(), nullptr, &id, &weight);  // no bias: the most likely
  EXPECT_EQ(id, 0);
}

TEST(RouterSelect, NanLogitsStillFillEverySlotWithDistinctExperts) {
  const GroupRouter r{16, 4, 4, 2, true, 2.5f};
  std::vector<float> scores(16, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> bias(16, 0.0f);
  std::vector<int32_t> ids(4, -1);
  std::vector<float> weights(4);
  group_router_select(r, scores.data(), bias.data(), ids.data(), weights.data());
  const std::set<int32_t> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), 4u);
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 16) << id;
}

}  // namespace
}  // namespace chronos
