// Eviction policies replayed on MoE routing: hit rate per trace, budget and policy, with demand
// loading only (no prefetch, no protection).
//
// Numbers, not pass/fail. The counter `hit_rate` is what matters; the time is the replay's.
// Synthetic traces: 16 MoE layers x 64 experts, top-4, 4000 tokens; experts drawn from a Zipf(s)
// popularity (a different order per layer), each of the previous token's experts kept with
// probability `keep`; "shift" re-draws every layer's popularity order every 500 tokens.
// Recorded traces: `chronos_bench_eviction --traces DIR` (the .ctrace files of `chronos trace`)
// adds BM_RecordedHitRate: every traced token in file order, prompts and generations (a prompt
// token by token, as decode would see it), its experts in layer order, at 5-50% of all experts.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>

#include <fmt/format.h>

#include "chronos/expert_cache.h"
#include "chronos/trace.h"

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

constexpr EvictionPolicy kPolicies[] = {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency, EvictionPolicy::kPerLayer,
                                        EvictionPolicy::kNextUse};
constexpr const char* kPolicyNames[] = {"lru", "lru-freq", "per-layer", "next-use"};

// Args: trace shape index, budget in percent of all experts, policy (index into kPolicies),
// half-life in multiples of n_slots (frequency-scored policies; 0 = default).
void BM_HitRate(benchmark::State& state) {
  const TraceShape& shape = kShapes[state.range(0)];
  const auto tokens = make_trace(shape, 1);
  const int64_t n_slots = int64_t(kLayers) * kExperts * state.range(1) / 100;
  const auto policy = kPolicies[state.range(2)];
  const double half_life = double(state.range(3) * n_slots);
  double hit_rate = 0;
  for (auto _ : state) {
    hit_rate = simulate_hit_rate(tokens, n_slots, policy, half_life);
    benchmark::DoNotOptimize(hit_rate);
  }
  state.counters["hit_rate"] = hit_rate;
  state.SetLabel(fmt::format("{}, zipf {} keep {} shift {}", kPolicyNames[state.range(2)], shape.zipf, shape.keep,
                             shape.shift_every));
}

void hit_rate_args(benchmark::internal::Benchmark* b) {
  for (int64_t shape = 0; shape < int64_t(std::size(kShapes)); ++shape) {
    for (const int64_t percent : {10, 25, 50}) {
      b->Args({shape, percent, 0, 0});
      for (const int64_t half_life : {0, 4, 16}) b->Args({shape, percent, 1, half_life});
      b->Args({shape, percent, 2, 0});
      b->Args({shape, percent, 3, 0});
    }
  }
  b->ArgNames({"trace", "budget_pct", "policy", "half_life_x"})->Iterations(1)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_HitRate)->Apply(hit_rate_args);

// Every token of the recorded traces in `dir`, its experts in layer order.
std::vector<std::vector<ExpertKey>> read_recorded(const std::string& dir, int64_t* n_experts) {
  std::vector<std::vector<ExpertKey>> tokens;
  for (const TraceReader& reader : open_traces(dir)) {
    const TraceHeader& h = reader.header();
    *n_experts = h.n_moe_layers() * h.n_expert;
    for (const TraceSequence& sequence : reader.read_all()) {
      for (const TraceToken& token : sequence.tokens) {
        std::vector<ExpertKey>& keys = tokens.emplace_back();
        for (int64_t i = 0; i < h.n_moe_layers(); ++i)
          for (int64_t j = 0; j < h.n_expert_used; ++j)
            keys.push_back({h.moe_layers[size_t(i)], token.top_ids[size_t(i * h.n_expert_used + j)]});
      }
    }
  }
  return tokens;
}

void register_recorded(const std::string& dir) {
  int64_t n_experts = 0;
  auto tokens = std::make_shared<std::vector<std::vector<ExpertKey>>>(read_recorded(dir, &n_experts));
  for (const int64_t percent : {5, 10, 25, 50}) {
    for (size_t p = 0; p < std::size(kPolicies); ++p) {
      const int64_t n_slots = std::max<int64_t>(1, n_experts * percent / 100);
      benchmark::RegisterBenchmark(fmt::format("BM_RecordedHitRate/budget_pct:{}/{}", percent, kPolicyNames[p]).c_str(),
                                   [tokens, n_slots, p](benchmark::State& state) {
                                     double hit_rate = 0;
                                     for (auto _ : state) {
                                       hit_rate = simulate_hit_rate(*tokens, n_slots, kPolicies[p]);
                                       benchmark::DoNotOptimize(hit_rate);
                                     }
                                     state.counters["hit_rate"] = hit_rate;
                                     state.counters["tokens"] = double(tokens->size());
                                   })
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace chronos

int main(int argc, char** argv) {
  // --traces DIR (ours) is taken out before Google Benchmark sees the flags.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--traces" && i + 1 < argc) {
      chronos::register_recorded(argv[++i]);
    } else if (arg.rfind("--traces=", 0) == 0) {
      chronos::register_recorded(arg.substr(9));
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
