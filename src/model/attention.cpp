// Self-attention, grouped-query (AttentionKind::kGqa), on any device: q/k/v projections (+bias,
// +q/k norm, +clip), RoPE, KV store and causal attention (the device's attend), o_proj.
#include "chronos/model.h"
#include "model/device_ops.h"

namespace chronos {

void Model::attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const {
  const ModelConfig& c = config_;
  const LayerViews& l = dev.weights().layers[size_t(il)];
  const Activations& a = dev.activations();
  const int64_t hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  dev.project(a.q, a.xn, l.wq, n);  // [n, q_dim]
  dev.project(a.k, a.xn, l.wk, n);  // [n, kv_dim]
  dev.project(a.v, a.xn, l.wv, n);  // [n, kv_dim]
  if (l.bq != nullptr) {
    dev.add_bias(a.q, l.bq, n, q_dim);
    dev.add_bias(a.k, l.bk, n, kv_dim);
    dev.add_bias(a.v, l.bv, n, kv_dim);
  }
  if (c.qk_norm == QkNorm::kFullWidth) {
    dev.rmsnorm(a.q, a.q, l.q_norm, n, q_dim, c.rms_norm_eps);
    dev.rmsnorm(a.k, a.k, l.k_norm, n, kv_dim, c.rms_norm_eps);
  } else if (c.qk_norm == QkNorm::kPerHead) {
    dev.rmsnorm(a.q, a.q, l.q_norm, n * c.n_head, hd, c.rms_norm_eps);
    dev.rmsnorm(a.k, a.k, l.k_norm, n * c.n_head_kv, hd, c.rms_norm_eps);
  }
  if (c.clip_qkv) {
    dev.clamp(a.q, n * q_dim, *c.clip_qkv);
    dev.clamp(a.k, n * kv_dim, *c.clip_qkv);
    dev.clamp(a.v, n * kv_dim, *c.clip_qkv);
  }
  dev.rope(a.q, c.n_head, q_dim);
  dev.rope(a.k, c.n_head_kv, kv_dim);
  trace(dev, st, "q_rope", il, a.q, n * q_dim);
  // A row at position p sees its sequence's positions <= p (its batch's earlier rows included),
  // and with a sliding window W only the last W of them.
  dev.attend(a.attn, a.q, a.k, a.v, il, c.sliding_window.value_or(0));
  dev.project(a.ffn_out, a.attn, l.wo, n);  // [n, n_embd]
}

}  // namespace chronos
