// Sampler: greedy, transformers' repetition penalty, and the distributions of the warpers.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

#include "chronos/error.h"
#include "chronos/sampler.h"

namespace chronos {
namespace {

std::vector<float> log_probs(std::initializer_list<double> probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(float(std::log(p)));
  return out;
}

std::map<int32_t, int> histogram(const SamplingParams& params, const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> copy = logits;
    ++counts[sampler.sample(copy, {})];
  }
  return counts;
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  Sampler sampler(SamplingParams{});
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 1);
}

TEST(Sampler, RepetitionPenaltyFollowsTransformers) {
  // transformers: score < 0 ? score * penalty : score / penalty, once per distinct id.
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  Sampler sampler(params);
  std::vector<float> logits = {3.0f, 2.5f, -1.0f, 1.0f};
  const std::array<int32_t, 3> history = {0, 0, 2};
  EXPECT_EQ(sampler.sample(logits, history), 1);  // 3.0 -> 1.5 falls below 2.5
  EXPECT_FLOAT_EQ(logits[0], 1.5f);               // divided once, not twice
  EXPECT_FLOAT_EQ(logits[2], -2.0f);              // negative: multiplied
  EXPECT_FLOAT_EQ(logits[3], 1.0f);               // unseen: unchanged
}

TEST(Sampler, TemperatureOneFollowsTheSoftmax) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 7;
  const int draws = 40000;
  const auto counts = histogram(params, log_probs({0.5, 0.3, 0.2}), draws);
  EXPECT_NEAR(counts.at(0) / double(draws), 0.5, 0.01);
  EXPECT_NEAR(counts.at(1) / double(draws), 0.3, 0.01);
  EXPECT_NEAR(counts.at(2) / double(draws), 0.2, 0.01);
}

TEST(Sampler, LowTemperatureSharpens) {
  SamplingParams params;
  params.temperature = 0.25f;  // p ~ p^4: 0.0625 : 0.0081 : 0.0016
  params.seed = 3;
  const int draws = 20000;
  const auto counts = histogram(params, log_probs({0.5, 0.3, 0.2}), draws);
  const double z = 0.0625 + 0.0081 + 0.0016;
  EXPECT_NEAR(counts.at(0) / double(draws), 0.0625 / z, 0.01);
}

TEST(Sampler, TopKTopPMinPTruncate) {
  const auto logits = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplingParams top_k;
  top_k.temperature = 1.0f;
  top_k.top_k = 2;
  auto counts = histogram(top_k, logits, 5000);
  EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
  EXPECT_NEAR(counts.at(0) / 5000.0, 0.5 / 0.8, 0.03);

  SamplingParams top_p;
  top_p.temperature = 1.0f;
  top_p.top_p = 0.85f;  // 0.5 + 0.3 = 0.8 < 0.85, so the third token is kept, the fourth not
  counts = histogram(top_p, logits, 5000);
  EXPECT_GT(counts.count(2), 0u);
  EXPECT_EQ(counts.count(3), 0u);

  SamplingParams min_p;
  min_p.temperature = 1.0f;
  min_p.min_p = 0.5f;  // threshold 0.25: keeps 0.5 and 0.3
  counts = histogram(min_p, logits, 5000);
  EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
  EXPECT_GT(counts.count(1), 0u);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  const auto logits = log_probs({0.25, 0.25, 0.25, 0.25});
  Sampler a(params), b(params);
  params.seed = 43;
  Sampler c(params);
  int same_as_other_seed = 0;
  for (int i = 0; i < 200; ++i) {
    auto la = logits, lb = logits, lc = logits;
    const int32_t x = a.sample(la, {});
    EXPECT_EQ(x, b.sample(lb, {}));
    same_as_other_seed += x == c.sample(lc, {});
  }
  EXPECT_LT(same_as_other_seed, 120);  // independent streams agree about a quarter of the time
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.temperature = -1.0f;
  EXPECT_THROW(validate_sampling(p), UsageError);
  p = {};
  p.top_p = 0.0f;
  EXPECT_THROW(validate_sampling(p), UsageError);
  p = {};
  p.min_p = 1.5f;
  EXPECT_THROW(validate_sampling(p), UsageError);
  p = {};
  p.top_k = -2;
  EXPECT_THROW(validate_sampling(p), UsageError);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(validate_sampling(p), UsageError);
}

}  // namespace
}  // namespace chronos
