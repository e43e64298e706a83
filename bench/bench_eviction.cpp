// Eviction policies replayed on synthetic MoE-shaped routing: hit rate per trace, budget and policy.
//
// Numbers, not pass/fail. The counter `hit_rate` is what matters; the time is the replay's.
// Traces: 16 MoE layers x 64 experts, top-4, 4000 tokens; experts drawn from a Zipf(s)
// popularity (a different order per layer), each of the previous token's experts kept with
// probability `keep`; "shift" re-draws every layer's popularity order every 500 tokens.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include <fmt/format.h>

#include "chronos/expert_cache.h"

namespace chronos {
namespace {

constexpr int kLayers = 16, kExperts = 64, kTopK = 4, kTokens = 4000;

struct TraceShape {
  double zipf;
  double keep;
  int shift_every;
};
const TraceShape kShapes[] = {{0.8, 0.0, 0}, {1.0, 0.0, 0}, {1.2, 0.0, 0}, {0.8, 0.4, 0}, {1.0, 0.3, 500}};

std::vector<std::vector<ExpertKey>> make_trace(const TraceShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return double(rng() >> 11) * 0x1.0p-53; };
  std::vector<double> cdf(kExperts);
  double total = 0;
  for (int r = 0; r < kExperts; ++r) cdf[size_t(r)] = (total += 1.0 / std::pow(r + 1, shape.zipf));
  std::vector<std::vector<int32_t>> order(kLayers, std::vector<int32_t>(kExperts));
  auto reshuffle = [&] {
    for (auto& o : order) {
      std::iota(o.begin(), o.end(), 0);
      std::shuffle(o.begin(), o.end(), rng);
    }
  };
  reshuffle();
  std::vector<std::set<int32_t>> previous(kLayers);
  std::vector<std::vector<ExpertKey>> tokens(kTokens);
  for (int t = 0; t < kTokens; ++t) {
    if (shape.shift_every > 0 && t > 0 && t % shape.shift_every == 0) reshuffle();
    for (int layer = 0; layer < kLayers; ++layer) {
      std::set<int32_t> chosen;
      for (const int32_t e : previous[size_t(layer)]) {
        if (uniform() < shape.keep) chosen.insert(e);
      }
      while (int(chosen.size()) < kTopK) {
        const auto rank = std::lower_bound(cdf.begin(), cdf.end(), uniform() * total) - cdf.begin();
        chosen.insert(order[size_t(layer)][size_t(rank)]);
      }
      for (const int32_t e : chosen) tokens[size_t(t)].push_back({layer, e});
      previous[size_t(layer)] = std::move(chosen);
    }
  }
  return tokens;
}

// Args: trace shape index, budget in percent of all experts, policy (0 LRU, 1 LRU-frequency),
// half-life in multiples of n_slots (frequency policy only; 0 = default).
void BM_HitRate(benchmark::State& state) {
  const TraceShape& shape = kShapes[state.range(0)];
  const auto tokens = make_trace(shape, 1);
  const int64_t n_slots = int64_t(kLayers) * kExperts * state.range(1) / 100;
  const auto policy = state.range(2) == 0 ? EvictionPolicy::kLru : EvictionPolicy::kLruFrequency;
  const double half_life = double(state.range(3) * n_slots);
  double hit_rate = 0;
  for (auto _ : state) {
    hit_rate = simulate_hit_rate(tokens, n_slots, policy, half_life);
    benchmark::DoNotOptimize(hit_rate);
  }
  state.counters["hit_rate"] = hit_rate;
  state.SetLabel(fmt::format("zipf {} keep {} shift {}", shape.zipf, shape.keep, shape.shift_every));
}

void hit_rate_args(benchmark::internal::Benchmark* b) {
  for (int64_t shape = 0; shape < int64_t(std::size(kShapes)); ++shape) {
    for (const int64_t percent : {10, 25, 50}) {
      b->Args({shape, percent, 0, 0});
      for (const int64_t half_life : {0, 4, 16}) b->Args({shape, percent, 1, half_life});
    }
  }
  b->ArgNames({"trace", "budget_pct", "policy", "half_life_x"})->Iterations(1)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_HitRate)->Apply(hit_rate_args);

}  // namespace
}  // namespace chronos

BENCHMARK_MAIN();
