// Evaluation of the predictors against their baselines: recall at a budget for the
// LookaheadRouter, activation coverage for the IntentClassifier; the table and the JSON.
#include "predict/evaluate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/ops.h"
#include "chronos/trace_file.h"
#include "predict/pack.h"

namespace chronos::predict {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Expert ids of scores[n] by decreasing score, ties to the lower id.
void rank(const float* scores, int64_t n, std::vector<int32_t>& order) {
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
}

// `first` (in its order), then the rest of `fill` that is not in it.
void rank_with_fill(std::span<const int32_t> first, const std::vector<int32_t>& fill, std::vector<int32_t>& order) {
  order.assign(first.begin(), first.end());
  for (int32_t e : fill)
    if (std::find(first.begin(), first.end(), e) == first.end()) order.push_back(e);
}

// Hits of the first B entries of `order` in `truth`, for every budget.
void add_recall(const std::vector<int32_t>& order, std::span<const int32_t> truth, const std::vector<int32_t>& budgets,
                std::vector<double>& sums) {
  for (size_t b = 0; b < budgets.size(); ++b) {
    int64_t hits = 0;
    for (int32_t e : truth)
      if (std::find(order.begin(), order.begin() + budgets[b], e) != order.begin() + budgets[b]) ++hits;
    sums[b] += double(hits) / double(truth.size());
  }
}

// One MoE layer's per-token compute: projections, router, k routed experts and the shared expert
// (the attention scores, which grow with the context, are left out).
double moe_layer_flops(const ModelConfig& c) {
  const double attention = double(c.n_embd) * double(2 * c.q_dim() + 2 * c.kv_dim());
  const double ffn = double(c.n_embd) * double(c.n_expert + 3 * c.n_expert_used * c.n_ff_expert + 3 * c.n_ff_shared);
  return 2.0 * (attention + ffn);
}

}  // namespace

PredictorEvaluation evaluate_on(Predictors& predictors, const TraceData& data, const Model* model,
                                const std::vector<float>& frequency) {
  const PredictorPack& pack = predictors.pack();
  const int64_t E = pack.shape.n_expert, k = pack.shape.n_expert_used, L = pack.shape.n_moe_layers();
  const int64_t d = pack.shape.n_embd, K = pack.horizon;
  PredictorEvaluation ev;
  ev.horizon = int32_t(K);
  ev.n_expert = int32_t(E);
  ev.n_expert_used = int32_t(k);
  ev.n_sequences = data.n_sequences();
  ev.n_tokens = data.n_tokens();
  ev.lookahead_flops = predictors.lookahead_flops();

  std::vector<float> freq = frequency;
  ev.frequency_source = "training traces";
  if (freq.empty()) {
    freq = expert_frequency(data);
    ev.frequency_source = "evaluation traces";
    ev.notes.push_back(
        "the predictors carry no training frequencies: the frequency baseline is measured on the "
        "evaluation traces themselves (optimistic for that baseline)");
  }
  std::vector<std::vector<int32_t>> freq_order(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) rank(freq.data() + l * E, E, freq_order[size_t(l)]);

  // Router matrices and post-attention norm weights of the MoE layers, for the gate baseline.
  std::vector<const LayerWeights*> layer_weights;
  if (model != nullptr) {
    const ModelConfig& c = model->config();
    if (c.n_embd != d || c.n_expert != E)
      throw_error("model: n_embd {} / {} experts does not match the predictors ({} / {})", c.n_embd, c.n_expert, d, E);
    for (int32_t layer : pack.shape.moe_layers) {
      if (layer >= c.n_layer || !c.is_moe_layer(layer))
        throw_error("model: layer {} is not an MoE layer, but the predictors have it as one", layer);
      layer_weights.push_back(&model->weights().layers[size_t(layer)]);
    }
    ev.layer_flops = moe_layer_flops(c);
    ev.notes.push_back(
        "gate baseline: layer l's router applied to h0 times layer l's post-attention RMSNorm weight "
        "(the RMS factor itself does not change the ranking); the residual updates between block 0 "
        "and layer l's router are skipped");
  } else {
    ev.notes.push_back("gate baseline not computed: no model with router weights was given");
  }
  ev.notes.push_back(
      "previous_token baseline: horizon 0 uses token t-1's experts at the same layer (token t's own "
      "later layers are what is predicted); horizon h >= 1 uses token t's experts, h tokens before "
      "the target, which the decoder only knows after token t has run all layers (favours the "
      "baseline); budgets beyond k are filled by global frequency");

  // LookaheadRouter.
  for (int32_t b : {k, 2 * k, 4 * k}) {
    const int32_t budget = int32_t(std::min<int64_t>(b, E));
    if (ev.lookahead_budgets.empty() || ev.lookahead_budgets.back() != budget) ev.lookahead_budgets.push_back(budget);
  }
  const std::vector<std::string> methods = {"lookahead", "previous_token", "frequency", "gate", "oracle"};
  const size_t n_budgets = ev.lookahead_budgets.size();
  std::vector<std::vector<std::vector<double>>> sums(
      methods.size(), std::vector<std::vector<double>>(size_t(K + 1), std::vector<double>(n_budgets, 0.0)));
  std::vector<int64_t> terms(size_t(K + 1), 0);
  ev.positions.assign(size_t(K + 1), 0);
  MlpWork<float> work;
  std::vector<int32_t> order;
  std::vector<float> scaled(static_cast<size_t>(d)), logits(static_cast<size_t>(E));
  const int64_t ids_stride = data.ids_stride();
  for (int64_t s = 0; s < data.n_sequences(); ++s) {
    const int64_t begin = data.seq_begin[size_t(s)], end = data.seq_begin[size_t(s) + 1];
    for (int64_t t = begin; t < end; ++t) {
      if (data.generated[size_t(t)] == 0) continue;  // the router runs at decode steps
      mlp_forward(pack.lookahead, data.h0.data() + t * d, 1, work);
      std::vector<bool> counted(size_t(K + 1), false);
      for (size_t slot = 0; slot < pack.slots.size(); ++slot) {
        const int64_t h = pack.slots[slot].horizon, l = pack.slots[slot].moe_index;
        const int64_t known = h == 0 ? t - 1 : t;  // the previous-token baseline's source token
        if (t + h >= end || known < begin) continue;
        if (!counted[size_t(h)]) {
          counted[size_t(h)] = true;
          ++ev.positions[size_t(h)];
        }
        ++terms[size_t(h)];
        const std::span<const int32_t> truth(data.top_ids.data() + (t + h) * ids_stride + l * k, size_t(k));
        rank(work.out.data() + int64_t(slot) * E, E, order);
        add_recall(order, truth, ev.lookahead_budgets, sums[0][size_t(h)]);
        rank_with_fill(std::span(data.top_ids.data() + known * ids_stride + l * k, size_t(k)), freq_order[size_t(l)],
                       order);
        add_recall(order, truth, ev.lookahead_budgets, sums[1][size_t(h)]);
        add_recall(freq_order[size_t(l)], truth, ev.lookahead_budgets, sums[2][size_t(h)]);
        if (h == 0 && !layer_weights.empty()) {
          const LayerWeights& w = *layer_weights[size_t(l)];
          for (int64_t j = 0; j < d; ++j) scaled[size_t(j)] = data.h0[size_t(t * d + j)] * w.ffn_norm[size_t(j)];
          ops::matmul_rows(logits.data(), scaled.data(), w.router, 1, 0, E);
          rank(logits.data(), E, order);
          add_recall(order, truth, ev.lookahead_budgets, sums[3][size_t(h)]);
        }
        rank_with_fill(truth, freq_order[size_t(l)], order);
        add_recall(order, truth, ev.lookahead_budgets, sums[4][size_t(h)]);
      }
    }
  }
  for (size_t m = 0; m < methods.size(); ++m)
    for (int64_t h = 0; h <= K; ++h) {
      if (methods[m] == "gate" && (h != 0 || layer_weights.empty())) continue;
      MethodScores row{methods[m], int32_t(h), {}};
      for (size_t b = 0; b < n_budgets; ++b)
        row.values.push_back(terms[size_t(h)] > 0 ? sums[m][size_t(h)][b] / double(terms[size_t(h)]) : kNaN);
      ev.lookahead.push_back(std::move(row));
    }

  // IntentClassifier.
  const IntentExamples ex = intent_examples(data);
  ev.intent_sequences = ex.size();
  for (int32_t percent : {25, 50})
    ev.intent_budgets.push_back(int32_t(std::max<int64_t>(1, std::llround(double(E * percent) / 100.0))));
  const std::vector<std::string> intent_methods = {"intent", "prompt_experts", "frequency", "oracle"};
  std::vector<std::vector<double>> cover(intent_methods.size(), std::vector<double>(ev.intent_budgets.size(), 0.0));
  std::vector<float> prompt_scores(static_cast<size_t>(E));
  for (int64_t i = 0; i < ex.size(); ++i) {
    mlp_forward(pack.intent, ex.features.data() + i * 2 * d, 1, work);
    for (int64_t l = 0; l < L; ++l) {
      const float* truth = ex.target.data() + (i * L + l) * E;
      const auto add = [&](size_t m, const std::vector<int32_t>& ranked) {
        for (size_t b = 0; b < ev.intent_budgets.size(); ++b) {
          double covered = 0;
          for (int32_t j = 0; j < ev.intent_budgets[b]; ++j) covered += truth[ranked[size_t(j)]];
          cover[m][b] += covered / double(L);
        }
      };
      rank(work.out.data() + l * E, E, order);
      add(0, order);
      // The prompt's own routing, ties (unused experts) broken by global frequency.
      for (int64_t e = 0; e < E; ++e)
        prompt_scores[size_t(e)] = ex.prompt_share[size_t((i * L + l) * E + e)] + 1e-6f * freq[size_t(l * E + e)];
      rank(prompt_scores.data(), E, order);
      add(1, order);
      add(2, freq_order[size_t(l)]);
      rank(truth, E, order);
      add(3, order);
    }
  }
  for (size_t m = 0; m < intent_methods.size(); ++m) {
    MethodScores row{intent_methods[m], kIntentHorizon, {}};
    for (double c : cover[m]) row.values.push_back(ex.size() > 0 ? c / double(ex.size()) : kNaN);
    ev.intent.push_back(std::move(row));
  }

  // Verdicts: the learned predictor against the best non-oracle baseline.
  const auto verdict = [&](const std::vector<MethodScores>& rows, const std::string& learned, int32_t horizon, size_t b,
                           int32_t budget, const std::string& what) {
    const MethodScores* mine = nullptr;
    const MethodScores* best = nullptr;
    for (const MethodScores& r : rows) {
      if (r.horizon != horizon || r.method == "oracle") continue;
      if (r.method == learned)
        mine = &r;
      else if (best == nullptr || r.values[b] > best->values[b])
        best = &r;
    }
    // At B = E every method names every expert: nothing to compare.
    if (mine == nullptr || best == nullptr || std::isnan(mine->values[b]) || budget >= E) return;
    const double gap = mine->values[b] - best->values[b];
    ev.verdicts.push_back(fmt::format("{} B={}: {} {:.3f} {} the best baseline, {} {:.3f} ({:+.3f})", what, budget,
                                      learned, mine->values[b], gap > 0 ? "beats" : "does NOT beat", best->method,
                                      best->values[b], gap));
  };
  for (int32_t h = 0; h <= K; ++h)
    for (size_t b = 0; b < n_budgets; ++b)
      verdict(ev.lookahead, "lookahead", h, b, ev.lookahead_budgets[b], fmt::format("horizon {}", h));
  for (size_t b = 0; b < ev.intent_budgets.size(); ++b)
    verdict(ev.intent, "intent", kIntentHorizon, b, ev.intent_budgets[b], "intent");
  return ev;
}

}  // namespace chronos::predict

namespace chronos {

PredictorEvaluation evaluate_predictors(Predictors& predictors, std::span<const TraceReader> traces,
                                        const Model* model) {
  const predict::PredictorPack& pack = predictors.pack();
  for (const TraceReader& reader : traces) {
    predict::check_trace_shape(pack.shape, reader.header(),
                               fmt::format("{}: trace header against the predictors", reader.path().string()));
    if (reader.header().fingerprint != pack.model_fingerprint)
      throw_error("{}: traced with model {}, but the predictors were trained on model {}", reader.path().string(),
                  reader.header().fingerprint, pack.model_fingerprint);
  }
  const predict::TraceData data = predict::load_trace_data(traces);
  return predict::evaluate_on(predictors, data, model, pack.frequency);
}

std::string format_evaluation(const PredictorEvaluation& ev) {
  const auto cell = [](double v) { return std::isnan(v) ? std::string("   n/a") : fmt::format("{:6.3f}", v); };
  std::string out = fmt::format(
      "LookaheadRouter: recall of the real top-{} when B experts per layer may be named "
      "({} sequences, {} tokens; decode positions)\n",
      ev.n_expert_used, ev.n_sequences, ev.n_tokens);
  out += fmt::format("{:>7} {:>9}  {:<15}", "horizon", "positions", "method");
  for (int32_t b : ev.lookahead_budgets) out += fmt::format("  {:>6}", fmt::format("B={}", b));
  out += "\n";
  for (int32_t h = 0; h <= ev.horizon; ++h) {
    bool first = true;
    for (const MethodScores& r : ev.lookahead) {
      if (r.horizon != h) continue;
      out += first ? fmt::format("{:>7} {:>9}  {:<15}", h, ev.positions[size_t(h)], r.method)
                   : fmt::format("{:>7} {:>9}  {:<15}", "", "", r.method);
      for (double v : r.values) out += "  " + cell(v);
      out += "\n";
      first = false;
    }
  }
  out += fmt::format(
      "\nIntentClassifier: share of the generation's expert activations covered by the top-B experts "
      "per layer ({} sequences)\n",
      ev.intent_sequences);
  out += fmt::format("{:<15}", "method");
  for (int32_t b : ev.intent_budgets) out += fmt::format("  {:>6}", fmt::format("B={}", b));
  out += "\n";
  for (const MethodScores& r : ev.intent) {
    out += fmt::format("{:<15}", r.method);
    for (double v : r.values) out += "  " + cell(v);
    out += "\n";
  }
  out += "\n";
  for (const std::string& v : ev.verdicts) out += v + "\n";
  out += fmt::format("frequency baseline from the {}\n", ev.frequency_source);
  if (ev.layer_flops > 0)
    out += fmt::format("cost: LookaheadRouter {:.3f} MFLOP/token, one MoE layer {:.3f} MFLOP/token ({:.1f}%)\n",
                       ev.lookahead_flops / 1e6, ev.layer_flops / 1e6, 100.0 * ev.lookahead_flops / ev.layer_flops);
  else
    out += fmt::format("cost: LookaheadRouter {:.3f} MFLOP/token\n", ev.lookahead_flops / 1e6);
  for (const std::string& n : ev.notes) out += "note: " + n + "\n";
  return out;
}

std::string evaluation_json(const PredictorEvaluation& ev) {
  using Json = nlohmann::json;
  const auto num = [](double v) { return std::isnan(v) ? Json() : Json(v); };
  const auto rows = [&](const std::vector<MethodScores>& list, const std::vector<int32_t>& budgets) {
    Json out = Json::array();
    for (const MethodScores& r : list) {
      Json values = Json::object();
      for (size_t b = 0; b < budgets.size(); ++b) values[std::to_string(budgets[b])] = num(r.values[b]);
      Json row = {{"method", r.method}, {"values", values}};
      if (r.horizon != kIntentHorizon) row["horizon"] = r.horizon;
      out.push_back(row);
    }
    return out;
  };
  Json root = {{"horizon", ev.horizon},
               {"n_expert", ev.n_expert},
               {"n_expert_used", ev.n_expert_used},
               {"sequences", ev.n_sequences},
               {"tokens", ev.n_tokens}};
  root["lookahead"] = {{"metric", "recall of the real top-k set of token t+h with B experts per layer"},
                       {"budgets", ev.lookahead_budgets},
                       {"positions", ev.positions},
                       {"rows", rows(ev.lookahead, ev.lookahead_budgets)}};
  root["intent"] = {
      {"metric", "share of the generated tokens' expert activations covered by the top-B experts per layer"},
      {"budgets", ev.intent_budgets},
      {"sequences", ev.intent_sequences},
      {"rows", rows(ev.intent, ev.intent_budgets)}};
  root["frequency_source"] = ev.frequency_source;
  root["cost"] = {{"lookahead_flops_per_token", ev.lookahead_flops},
                  {"moe_layer_flops_per_token", ev.layer_flops > 0 ? Json(ev.layer_flops) : Json()}};
  root["verdicts"] = ev.verdicts;
  root["notes"] = ev.notes;
  return root.dump(2);
}

}  // namespace chronos
