// The MoE block on any device: router -> top-k -> grouped SwiGLU experts in waves -> weighted sum
// (+ gated shared expert), with the soft-gated fallback for missing experts (DESIGN.md §4).
#include "chronos/model.h"
#include "model/device_ops.h"

namespace chronos {

void Model::moe(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const {
  const ModelConfig& c = config_;
  const LayerViews& l = dev.weights().layers[size_t(il)];
  const Activations& a = dev.activations();
  MoePlan& plan = st.plan;

  // Route: the layer's router kind from the logits to each row's experts, weights and scores (on the
  // host: which experts to acquire is a host decision).
  dev.project(a.router, a.xn, l.router, n);  // [n, n_expert]
  if (l.router_logit_bias != nullptr) dev.add_bias(a.router, l.router_logit_bias, n, c.n_expert);
  const RoutedRows routed =
      dev.route(c.layers[size_t(il)].router, l.router_bias, n, st.hooks->route || st.hooks->trace);
  plan.route(il, n, routed.ids, routed.weights, routed.scores, st.hooks->route, st.row_seqs.data());
  if (st.hooks->trace)
    st.hooks->trace("router_probs", il, std::span<const float>(routed.scores, size_t(n * c.n_expert)));

  // Group: each row of ff_in is the input of one (row, expert) pair, rows in expert order.
  plan.group();
  dev.gather_rows(a.ff_in, a.xn, plan.row_tokens(), c.n_embd);

  // Waves of at most the provider's capacity: acquire, compute, release. A missing expert's rows
  // are skipped.
  plan.waves(il, st.hooks->experts, l.experts,
             [&](std::span<const int32_t> ids, std::span<const FfnWeights* const> views) {
               dev.expert_wave(il, plan, ids, views);
             });
  const bool has_shared = l.shared.present();
  plan.account(has_shared, st.counters);

  // Combine: the weighted sum, the shared expert taking the routing mass of missing experts.
  const float* shared = nullptr;
  const float* gate_logit = nullptr;
  if (has_shared) {
    dense_ffn(dev, l.shared, n, a.xn, a.shared_out);
    shared = a.shared_out;
    if (c.shared_expert_gated) {
      dev.project(a.shared_logit, a.xn, l.shared_gate, n);  // [n, 1]
      gate_logit = a.shared_logit;
    }
  }
  dev.combine(a.ffn_out, plan, shared, gate_logit, n);
}

}  // namespace chronos
