// The MoE block: router -> top-k -> grouped SwiGLU experts -> weighted sum (+ gated shared expert).
#include <algorithm>
#include <cmath>

#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "model/router.h"
#include "model/scratch.h"

namespace chronos {
namespace {

constexpr int64_t kRowChunk = 32;            // fewest rows of one expert matrix per pool task
constexpr int64_t kMaxChunksPerExpert = 64;  // bounds the work list (sized at load)
// Pool tasks per thread in one wave dispatch: enough that threads finishing early take more
// work, few enough that each task's row streams are long. One decode token's q4_k experts in
// tasks of 56 rows (four 14-row streams, 8 KiB each) decoded about 20% slower on the synthetic
// Mixtral than in tasks of 448-896 rows: each task's first blocks wait on memory before the
// prefetches run ahead.
constexpr int64_t kTasksPerThread = 8;
// At most this many row-token products per task: a task this long already streams its rows at
// full speed, and longer ones only balance worse. A 128-token prefill (about 32 tokens per expert)
// keeps its short chunks; decode gets the long ones.
constexpr int64_t kMaxTaskWork = 1024;

}  // namespace

void Model::moe(int64_t il, int64_t n, Scratch& s, ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[size_t(il)];
  const int64_t d = c.n_embd, n_exp = c.n_expert, n_ff = c.n_ff_expert;
  MoePlan& plan = s.plan;

  // Route: the layer's router kind from the logits to each row's experts, weights and scores.
  ops::matmul(s.router.data(), s.xn.data(), l.router, n, pool);  // [n, n_expert]
  route_rows(c.layers[size_t(il)].router, c, s.router.data(), s.top_ids.data(), s.top_w.data(), n);
  plan.route(il, n, s.top_ids.data(), s.top_w.data(), s.router.data(), s.hooks->route, s.row_seqs.data());
  trace(s, "router_probs", il, s.router.data(), n * n_exp);

  // Group: each row of ff_in is the input of one (token, expert) pair, rows in expert order.
  plan.group();
  const std::span<const int32_t> row_tokens = plan.row_tokens();
  for (int64_t row = 0; row < plan.n_rows(); ++row)
    std::copy_n(s.xn.data() + row_tokens[size_t(row)] * d, d, s.ff_in.data() + row * d);

  // Waves: within a wave, work items are (expert, chunk of rows): one pool dispatch computes gate
  // and up of every expert of the wave, a second computes down, so small and large experts both
  // spread over threads. A missing expert's rows are skipped.
  const auto xq_of = [&](int32_t e) {
    return reinterpret_cast<uint8_t*>(s.expert_xq.data()) + s.expert_xq_at[size_t(e)];
  };
  const auto compute = [&](std::span<const int32_t> ids, std::span<const FfnWeights* const> views) {
    // Row chunks sized by work (rows times the expert's tokens), about kTasksPerThread per thread
    // over the wave: an expert with more tokens gets shorter chunks. Any chunking gives the same
    // bits (each output row is one kernel call's, whoever computes it).
    const auto tokens_of = [&](int32_t e) { return plan.row_end(e) - plan.row_begin(e); };
    auto build_items = [&](int64_t rows_per_expert) {
      int64_t work = 0;
      for (size_t i = 0; i < ids.size(); ++i)
        if (views[i] != nullptr) work += rows_per_expert * tokens_of(ids[i]);
      const int64_t work_per_task = std::clamp<int64_t>(work / (kTasksPerThread * pool.size()), 1, kMaxTaskWork);
      const int64_t fewest = std::max(kRowChunk, (rows_per_expert + kMaxChunksPerExpert - 1) / kMaxChunksPerExpert);
      s.items.clear();
      for (size_t i = 0; i < ids.size(); ++i) {
        if (views[i] == nullptr) continue;
        const int64_t tokens = std::max<int64_t>(1, tokens_of(ids[i]));
        const int64_t chunk = std::max(fewest, (work_per_task / tokens + kRowChunk - 1) / kRowChunk * kRowChunk);
        for (int64_t r = 0; r < rows_per_expert; r += chunk)
          s.items.push_back({ids[i], int32_t(r), int32_t(std::min(r + chunk, rows_per_expert)), views[i]});
      }
    };
    // Each expert's input rows as the 8-bit activation blocks of its weights' integer path, made once
    // (one pool task per expert) instead of once by every row chunk: with a chunk of 32-56 rows,
    // requantizing per chunk took 8% of q4_k decode. Nothing is made for weights on the f32 path.
    const auto prepare = [&](const float* x, int64_t cols, const WeightView FfnWeights::*which) {
      int64_t total = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (views[i] == nullptr) continue;
        const int32_t e = ids[i];
        s.expert_xq_at[size_t(e)] = total;
        total += ops::prepared_activation_bytes(views[i]->*which, plan.row_end(e) - plan.row_begin(e));
      }
      if (total == 0) return;
      if (s.expert_xq.size() * 8 < size_t(total)) s.expert_xq.resize(size_t(total + 7) / 8);
      pool.run(std::ssize(ids), [&](int64_t i) {
        if (views[size_t(i)] == nullptr) return;
        const int32_t e = ids[size_t(i)];
        const int64_t r0 = plan.row_begin(e);
        ops::prepare_activations(xq_of(e), x + r0 * cols, views[size_t(i)]->*which, plan.row_end(e) - r0);
      });
    };
    prepare(s.ff_in.data(), d, &FfnWeights::gate);
    build_items(n_ff);
    pool.run(std::ssize(s.items), [&](int64_t i) {
      const auto item = s.items[size_t(i)];
      const int64_t r0 = plan.row_begin(item.expert), rows = plan.row_end(item.expert) - r0;
      const float* x = s.ff_in.data() + r0 * d;
      const WeightView &gate = item.weights->gate, &up = item.weights->up;
      ops::matmul_rows_prepared(s.ff_gate.data() + r0 * n_ff, x, xq_of(item.expert), gate, rows, item.row_begin,
                                item.row_end);
      if (ops::same_prepared_activations(up, gate))
        ops::matmul_rows_prepared(s.ff_up.data() + r0 * n_ff, x, xq_of(item.expert), up, rows, item.row_begin,
                                  item.row_end);
      else
        ops::matmul_rows(s.ff_up.data() + r0 * n_ff, x, up, rows, item.row_begin, item.row_end);
    });
    // The wave's rows are contiguous: experts are grouped in index order and ids is ascending.
    const int64_t row_begin = plan.row_begin(ids.front()), row_end = plan.row_end(ids.back());
    ops::silu_mul(s.ff_gate.data() + row_begin * n_ff, s.ff_gate.data() + row_begin * n_ff,
                  s.ff_up.data() + row_begin * n_ff, (row_end - row_begin) * n_ff);
    prepare(s.ff_gate.data(), n_ff, &FfnWeights::down);  // the gate/up inputs are no longer needed
    build_items(d);
    pool.run(std::ssize(s.items), [&](int64_t i) {
      const auto item = s.items[size_t(i)];
      const int64_t r0 = plan.row_begin(item.expert), rows = plan.row_end(item.expert) - r0;
      ops::matmul_rows_prepared(s.ff_down.data() + r0 * d, s.ff_gate.data() + r0 * n_ff, xq_of(item.expert),
                                item.weights->down, rows, item.row_begin, item.row_end);
    });
  };
  plan.waves(il, s.hooks->experts, l.experts, compute);
  plan.account(l.shared.present(), s.counters);

  // Combine: weighted sum per token in row order (experts ascending), so the reduction order is fixed.
  std::fill(s.ffn_out.begin(), s.ffn_out.begin() + n * d, 0.0f);
  const std::span<const float> row_weights = plan.row_weights();
  for (const int32_t e : plan.active()) {
    if (plan.expert_missing(e)) continue;
    for (int32_t row = plan.row_begin(e); row < plan.row_end(e); ++row)
      ops::axpy(s.ffn_out.data() + row_tokens[size_t(row)] * d, row_weights[size_t(row)],
                s.ff_down.data() + int64_t(row) * d, d);
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
      ops::axpy(s.ffn_out.data() + t * d, gate + plan.missing_mass(t), s.ff_in.data() + t * d, d);
    }
  } else if (plan.any_missing()) {
    // Without a shared expert: renormalize over the available experts, keeping the token's total
    // routing mass; with none available the block adds nothing (the residual carries on).
    for (int64_t t = 0; t < n; ++t) {
      const float missing = plan.missing_mass(t), total = plan.total_mass(t);
      if (missing == 0.0f || missing >= total) continue;  // nothing missing, or the row stays zero
      const float scale = total / (total - missing);
      for (int64_t i = 0; i < d; ++i) s.ffn_out[size_t(t * d + i)] *= scale;
    }
  }
}

}  // namespace chronos
