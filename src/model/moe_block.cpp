// The MoE block: router -> top-k -> grouped SwiGLU experts -> weighted sum (+ gated shared expert).
#include <algorithm>
#include <cmath>

#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "model/scratch.h"

namespace chronos {
namespace {

// The expert whose group holds `row` of the grouped rows.
int32_t row_expert(const Model::Scratch& s, int64_t row, int64_t n_expert) {
  const auto begin = s.expert_rows.begin(), end = s.expert_rows.begin() + n_expert + 1;
  return int32_t(std::upper_bound(begin, end, int32_t(row)) - begin - 1);
}

constexpr int64_t kRowChunk = 32;            // fewest rows of one expert matrix per pool task
constexpr int64_t kMaxChunksPerExpert = 64;  // bounds the work list (sized at load)

}  // namespace

void Model::moe(int64_t il, int64_t n, Scratch& s, ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[size_t(il)];
  const int64_t d = c.n_embd, n_exp = c.n_expert, k = c.n_expert_used, n_ff = c.n_ff_expert;
  const RouteFn& route = s.hooks->route;
  ExpertProvider* provider = s.hooks->experts;

  // Router: probabilities over experts, top-k, optional renormalization.
  ops::matmul(s.router.data(), s.xn.data(), l.router, n, pool);  // [n, n_expert]
  std::fill(s.fill.begin(), s.fill.begin() + n_exp, 0);
  for (int64_t t = 0; t < n; ++t) {
    float* probs = s.router.data() + t * n_exp;
    ops::softmax(probs, n_exp);
    int32_t* ids = s.top_ids.data() + t * k;
    float* w = s.top_w.data() + t * k;
    ops::top_k(ids, w, probs, n_exp, k, c.norm_topk_prob);
    for (int64_t j = 0; j < k; ++j) ++s.fill[size_t(ids[j])];
    if (route) route(RouteEvent{il, t, {ids, size_t(k)}, {w, size_t(k)}, {probs, size_t(n_exp)}});
  }
  trace(s, "router_probs", il, s.router.data(), n * n_exp);

  // Group the (token, expert) pairs by expert: rows expert_rows[e] .. expert_rows[e+1] of ff_in.
  s.expert_rows[0] = 0;
  for (int64_t e = 0; e < n_exp; ++e) s.expert_rows[size_t(e + 1)] = s.expert_rows[size_t(e)] + s.fill[size_t(e)];
  std::fill(s.fill.begin(), s.fill.begin() + n_exp, 0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = s.top_ids[size_t(t * k + j)];
      const int64_t row = s.expert_rows[size_t(e)] + s.fill[size_t(e)]++;
      s.row_token[size_t(row)] = int32_t(t);
      s.row_weight[size_t(row)] = s.top_w[size_t(t * k + j)];
      std::copy_n(s.xn.data() + t * d, d, s.ff_in.data() + row * d);
    }
  }

  // The distinct selected experts, their weights (bound at load, or from the provider), and which
  // are missing. A missing expert's rows are skipped and its routing weight goes to the fallback.
  s.active.clear();
  for (int64_t e = 0; e < n_exp; ++e)
    if (s.expert_rows[size_t(e + 1)] > s.expert_rows[size_t(e)]) s.active.push_back(int32_t(e));
  const std::span<const FfnWeights*> views(s.views.data(), s.active.size());
  auto expert_view = [&](int32_t e) -> const FfnWeights& {
    const auto at = std::lower_bound(s.active.begin(), s.active.end(), e) - s.active.begin();
    return *views[size_t(at)];
  };
  const int64_t n_rows = n * k;

  // Experts are computed in waves of at most max_experts_per_acquire() (all at once without a
  // provider), so a provider with fewer slots than the step's distinct experts still works.
  // Within a wave, work items are (expert, chunk of rows): one pool dispatch computes gate and up of
  // every expert of the wave, a second computes down. Small and large experts both spread over threads.
  const size_t wave = provider != nullptr ? std::max<size_t>(1, provider->max_experts_per_acquire()) : s.active.size();
  bool any_missing = false;
  for (size_t first = 0; first < s.active.size(); first += wave) {
    const size_t count = std::min(wave, s.active.size() - first);
    const std::span<const int32_t> wave_ids(s.active.data() + first, count);
    const std::span<const FfnWeights*> wave_views = views.subspan(first, count);
    if (provider != nullptr) {
      provider->acquire(il, wave_ids, wave_views);
    } else {
      for (size_t i = 0; i < count; ++i) wave_views[i] = &l.experts[size_t(wave_ids[i])];
    }
    for (size_t i = 0; i < count; ++i) {
      s.missing[size_t(wave_ids[i])] = wave_views[i] == nullptr;
      any_missing |= wave_views[i] == nullptr;
    }
    auto build_items = [&](int64_t rows_per_expert) {
      const int64_t chunk = std::max(kRowChunk, (rows_per_expert + kMaxChunksPerExpert - 1) / kMaxChunksPerExpert);
      s.items.clear();
      for (const int32_t e : wave_ids) {
        if (s.missing[size_t(e)]) continue;
        for (int64_t r = 0; r < rows_per_expert; r += chunk)
          s.items.push_back({e, int32_t(r), int32_t(std::min(r + chunk, rows_per_expert))});
      }
    };
    build_items(n_ff);
    pool.run(std::ssize(s.items), [&](int64_t i) {
      const auto item = s.items[size_t(i)];
      const FfnWeights& ex = expert_view(item.expert);
      const int64_t r0 = s.expert_rows[size_t(item.expert)], rows = s.expert_rows[size_t(item.expert + 1)] - r0;
      ops::matmul_rows(s.ff_gate.data() + r0 * n_ff, s.ff_in.data() + r0 * d, ex.gate, rows, item.row_begin, item.row_end);
      ops::matmul_rows(s.ff_up.data() + r0 * n_ff, s.ff_in.data() + r0 * d, ex.up, rows, item.row_begin, item.row_end);
    });
    // The wave's rows are contiguous: experts are grouped in index order and wave_ids is sorted.
    const int64_t row_begin = s.expert_rows[size_t(wave_ids.front())];
    const int64_t row_end = s.expert_rows[size_t(wave_ids.back() + 1)];
    ops::silu_mul(s.ff_gate.data() + row_begin * n_ff, s.ff_gate.data() + row_begin * n_ff,
                  s.ff_up.data() + row_begin * n_ff, (row_end - row_begin) * n_ff);
    build_items(d);
    pool.run(std::ssize(s.items), [&](int64_t i) {
      const auto item = s.items[size_t(i)];
      const FfnWeights& ex = expert_view(item.expert);
      const int64_t r0 = s.expert_rows[size_t(item.expert)], rows = s.expert_rows[size_t(item.expert + 1)] - r0;
      ops::matmul_rows(s.ff_down.data() + r0 * d, s.ff_gate.data() + r0 * n_ff, ex.down, rows, item.row_begin, item.row_end);
    });
    if (provider != nullptr) provider->release(il, wave_ids);
  }

  // Weighted sum per token; rows are in expert order, so the reduction order is fixed.
  std::fill(s.ffn_out.begin(), s.ffn_out.begin() + n * d, 0.0f);
  std::fill(s.missing_mass.begin(), s.missing_mass.begin() + n, 0.0f);
  std::fill(s.total_mass.begin(), s.total_mass.begin() + n, 0.0f);
  for (int64_t row = 0; row < n_rows; ++row) {
    const int32_t t = s.row_token[size_t(row)];
    const float w = s.row_weight[size_t(row)];
    s.total_mass[size_t(t)] += w;
    if (s.missing[size_t(row_expert(s, row, n_exp))]) s.missing_mass[size_t(t)] += w;
    else ops::axpy(s.ffn_out.data() + t * d, w, s.ff_down.data() + row * d, d);
  }
  s.counters.routed_pairs += n_rows;
  if (any_missing) {
    for (int64_t row = 0; row < n_rows; ++row) s.counters.fallback_pairs += s.missing[size_t(row_expert(s, row, n_exp))];
  }

  if (l.shared.present()) {
    // y += sigmoid(x · w_sg) * S(x), plus the routing weight of missing experts times S(x) (the
    // soft-gated fallback: the shared expert stands in for them). ff_in is free again.
    dense_ffn(l.shared, n, s.xn.data(), s.ff_in.data(), s, pool);
    for (int64_t t = 0; t < n; ++t) {
      float gate = 1.0f;
      if (c.shared_expert_gated) {
        float logit = 0.0f;
        ops::matmul_rows(&logit, s.xn.data() + t * d, l.shared_gate, 1, 0, 1);
        gate = 1.0f / (1.0f + std::exp(-logit));
      }
      ops::axpy(s.ffn_out.data() + t * d, gate + s.missing_mass[size_t(t)], s.ff_in.data() + t * d, d);
    }
  } else if (any_missing) {
    // Without a shared expert: renormalize over the available experts, keeping the token's total
    // routing mass; with none available the block adds nothing (the residual carries on).
    for (int64_t t = 0; t < n; ++t) {
      const float missing = s.missing_mass[size_t(t)], total = s.total_mass[size_t(t)];
      if (missing == 0.0f) continue;
      if (missing >= total) {
        ++s.counters.zero_output_tokens;
        continue;  // ffn_out row is already zero
      }
      const float scale = total / (total - missing);
      for (int64_t i = 0; i < d; ++i) s.ffn_out[size_t(t * d + i)] *= scale;
    }
  }
}

}  // namespace chronos
