// ExpertProvider and the soft-gated fallback of DESIGN.md §4, checked on the first MoE layer:
// shared-expert models give a missing expert's weight to the shared expert; others renormalize.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "chronos/model.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

// Serves bound experts, except those `hidden` (nullptr) or `zeroed` (all-zero weights).
class TestProvider : public ExpertProvider {
 public:
  TestProvider(const Model& model, std::function<bool(int64_t, int32_t)> hidden,
               std::function<bool(int64_t, int32_t)> zeroed)
      : model_(model), hidden_(std::move(hidden)), zeroed_(std::move(zeroed)) {
    const ModelConfig& c = model.config();
    zero_gate_.assign(size_t(c.n_ff_expert * c.n_embd), 0.0f);
    zero_down_.assign(size_t(c.n_ff_expert * c.n_embd), 0.0f);
    zero_.gate = WeightView{zero_gate_.data(), DType::kF32, c.n_ff_expert, c.n_embd};
    zero_.up = zero_.gate;
    zero_.down = WeightView{zero_down_.data(), DType::kF32, c.n_embd, c.n_ff_expert};
  }
  void acquire(int64_t layer, std::span<const int32_t> experts, std::span<const float>,
               std::span<const FfnWeights*> views) override {
    for (size_t i = 0; i < experts.size(); ++i) {
      views[i] = hidden_(layer, experts[i])   ? nullptr
                 : zeroed_(layer, experts[i]) ? &zero_
                                              : &model_.weights().layers[size_t(layer)].experts[size_t(experts[i])];
      ++acquired;
    }
  }
  void release(int64_t, std::span<const int32_t> experts) override { released += int64_t(experts.size()); }
  size_t max_experts_per_acquire() const override { return max_per_acquire; }
  int64_t acquired = 0, released = 0;
  size_t max_per_acquire = SIZE_MAX;

 private:
  const Model& model_;
  std::function<bool(int64_t, int32_t)> hidden_, zeroed_;
  std::vector<float> zero_gate_, zero_down_;
  FfnWeights zero_;
};

struct Capture {
  std::vector<float> ffn_out;               // first MoE layer, [n_tokens, n_embd]
  std::vector<std::vector<int32_t>> ids;    // per token
  std::vector<std::vector<float>> weights;  // per token
  std::vector<float> logits;
  MoeCounters counters;
};

int64_t first_moe_layer(const ModelConfig& c) {
  for (int64_t i = 0; i < c.n_layer; ++i)
    if (c.is_moe_layer(i)) return i;
  return -1;
}

Capture run(const Model& model, ExpertProvider* provider, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = model.config();
  const int64_t moe_layer = first_moe_layer(c);
  Capture cap;
  cap.ids.resize(tokens.size());
  cap.weights.resize(tokens.size());
  ForwardHooks hooks;
  hooks.experts = provider;
  hooks.trace = [&](const char* name, int64_t layer, std::span<const float> values) {
    if (layer == moe_layer && std::string(name) == "ffn_out") cap.ffn_out.assign(values.begin(), values.end());
  };
  hooks.route = [&](const RouteEvent& ev) {
    if (ev.layer != moe_layer) return;
    cap.ids[size_t(ev.token_index)].assign(ev.expert_ids.begin(), ev.expert_ids.end());
    cap.weights[size_t(ev.token_index)].assign(ev.weights.begin(), ev.weights.end());
  };
  ThreadPool pool(2);
  KvCache kv(c, 32);
  auto scratch = model.make_scratch(16, 32);
  cap.logits.resize(size_t(c.n_vocab));
  model.forward(tokens, 0, kv, *scratch, pool, cap.logits.data(), false, hooks);
  cap.counters = Model::counters(*scratch);
  return cap;
}

const std::vector<int32_t> kTokens = {7, 19, 33, 4, 101, 250, 12, 9};

std::unique_ptr<Model> load(const char* name) { return Model::load(fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name); }

TEST(Fallback, ProviderServingEverythingIsExact) {
  auto model = load("mixtral-f32");
  const Capture bound = run(*model, nullptr, kTokens);
  TestProvider all(
      *model, [](int64_t, int32_t) { return false; }, [](int64_t, int32_t) { return false; });
  const Capture served = run(*model, &all, kTokens);
  EXPECT_EQ(served.logits, bound.logits);  // bit for bit
  EXPECT_GT(all.acquired, 0);
  EXPECT_EQ(all.acquired, all.released);
  EXPECT_EQ(served.counters.fallback_pairs, 0);
  EXPECT_EQ(served.counters.routed_pairs, int64_t(kTokens.size()) * 2 * 3);  // top-2, 3 MoE layers

  all.max_per_acquire = 1;  // one expert at a time: same numbers
  const Capture one_by_one = run(*model, &all, kTokens);
  EXPECT_EQ(one_by_one.logits, bound.logits);
}

TEST(Fallback, WithoutSharedExpertRenormalizesOverAvailable) {
  auto model = load("mixtral-f32");
  const int64_t layer = first_moe_layer(model->config());
  const int32_t victim = run(*model, nullptr, kTokens).ids[0][0];  // an expert the prompt uses
  auto is_victim = [&](int64_t l, int32_t e) { return l == layer && e == victim; };
  auto never = [](int64_t, int32_t) { return false; };
  TestProvider zeroed(*model, never, is_victim), hidden(*model, is_victim, never);
  const Capture z = run(*model, &zeroed, kTokens);
  const Capture h = run(*model, &hidden, kTokens);
  const int64_t d = model->config().n_embd;
  int64_t affected = 0;
  for (size_t t = 0; t < kTokens.size(); ++t) {
    float total = 0, missing = 0;
    for (size_t j = 0; j < z.ids[t].size(); ++j) {
      total += z.weights[t][j];
      if (z.ids[t][j] == victim) missing += z.weights[t][j];
    }
    affected += missing > 0;
    const float scale = missing > 0 ? total / (total - missing) : 1.0f;
    for (int64_t i = 0; i < d; ++i)
      EXPECT_NEAR(h.ffn_out[t * size_t(d) + size_t(i)], z.ffn_out[t * size_t(d) + size_t(i)] * scale, 1e-5f) << t;
  }
  EXPECT_GT(affected, 0) << "pick a victim expert that the prompt routes to";
  EXPECT_EQ(h.counters.fallback_pairs, affected);
}

TEST(Fallback, WithoutSharedExpertNothingAvailableGivesZero) {
  auto model = load("olmoe-f32");
  const int64_t layer = first_moe_layer(model->config());
  TestProvider none(
      *model, [&](int64_t l, int32_t) { return l == layer; }, [](int64_t, int32_t) { return false; });
  const Capture h = run(*model, &none, kTokens);
  for (float v : h.ffn_out) ASSERT_EQ(v, 0.0f);
  EXPECT_EQ(h.counters.zero_output_tokens, int64_t(kTokens.size()));
}

TEST(Fallback, SharedExpertTakesTheMissingWeight) {
  auto model = load("qwen2_moe-f32");
  const int64_t layer = first_moe_layer(model->config());
  const int64_t d = model->config().n_embd;
  auto in_layer = [&](int64_t l, int32_t) { return l == layer; };
  auto never = [](int64_t, int32_t) { return false; };
  // S(x) from two runs: every expert zeroed gives gate*S(x); every expert missing gives
  // (gate + total weight)*S(x).
  TestProvider all_zero(*model, never, in_layer), all_missing(*model, in_layer, never);
  const Capture gated = run(*model, &all_zero, kTokens);
  const Capture replaced = run(*model, &all_missing, kTokens);
  std::vector<float> shared(gated.ffn_out.size());
  for (size_t t = 0; t < kTokens.size(); ++t) {
    float total = 0;
    for (float w : gated.weights[t]) total += w;
    ASSERT_GT(total, 0.0f);
    for (int64_t i = 0; i < d; ++i)
      shared[t * size_t(d) + size_t(i)] =
          (replaced.ffn_out[t * size_t(d) + size_t(i)] - gated.ffn_out[t * size_t(d) + size_t(i)]) / total;
  }
  EXPECT_EQ(replaced.counters.zero_output_tokens, 0);  // the shared expert always answers

  // One missing expert: y = y(zeroed) + w_missing * S(x).
  const int32_t victim = gated.ids[0][0];
  auto is_victim = [&](int64_t l, int32_t e) { return l == layer && e == victim; };
  TestProvider zeroed(*model, never, is_victim), hidden(*model, is_victim, never);
  const Capture z = run(*model, &zeroed, kTokens);
  const Capture h = run(*model, &hidden, kTokens);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    float missing = 0;
    for (size_t j = 0; j < z.ids[t].size(); ++j)
      if (z.ids[t][j] == victim) missing += z.weights[t][j];
    for (int64_t i = 0; i < d; ++i) {
      const size_t at = t * size_t(d) + size_t(i);
      EXPECT_NEAR(h.ffn_out[at], z.ffn_out[at] + missing * shared[at], 1e-4f) << t;
    }
  }
}

}  // namespace
}  // namespace chronos
