// Self-attention on any device. Grouped-query (AttentionKind::kGqa): q/k/v projections (+bias,
// +q/k norm, +clip), RoPE, KV store and causal attention (the device's attend; the layer's window
// and sinks), the output gate, o_proj (+bias). Gated DeltaNet (AttentionKind::kGatedDeltaNet): the
// in-projections, the device's gated_delta_net over each sequence's state, out_proj. Multi-head
// latent (AttentionKind::kMla): the query (through its low-rank path), the latent and the rotary
// key, RoPE on the rotary parts, the absorbed attention over the latent cache (the device's
// attend_latent), o_proj.
#include "chronos/model.h"
#include "model/device_ops.h"

namespace chronos {

void Model::attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const {
  const ModelConfig& c = config_;
  const LayerViews& l = dev.weights().layers[size_t(il)];
  const Activations& a = dev.activations();
  const int64_t hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  if (c.attn_output_gate) {
    dev.project(a.mix, a.xn, l.wq, n);  // [n, n_head, 2, head_dim]: each head's query, then its gate
    dev.split_heads(a.q, a.gate, a.mix, n, c.n_head, hd);
  } else {
    dev.project(a.q, a.xn, l.wq, n);  // [n, q_dim]
  }
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
  dev.attend(a.attn, a.q, a.k, a.v, il, c.attention_window(il), l.sinks);
  if (c.attn_output_gate) dev.sigmoid_mul(a.attn, a.gate, n * q_dim);
  dev.project(a.ffn_out, a.attn, l.wo, n);  // [n, n_embd]
  if (l.bo != nullptr) dev.add_bias(a.ffn_out, l.bo, n, c.n_embd);
}

namespace {

// q_a_layernorm and kv_a_layernorm's epsilon: transformers builds them with RMSNorm's default, not
// the config's rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

// Row slice [begin, begin + count) of a matrix: rows are contiguous in every type.
WeightView weight_rows(const WeightView& w, int64_t begin, int64_t count) {
  return {static_cast<const uint8_t*>(w.data) + begin * dtype_row_bytes(w.dtype, w.cols), w.dtype, count, w.cols};
}

}  // namespace

void Model::latent_attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const {
  const ModelConfig& c = config_;
  const LayerViews& l = dev.weights().layers[size_t(il)];
  const Activations& a = dev.activations();
  const int64_t rank = c.kv_lora_rank, rope = c.qk_rope_dim;
  if (c.q_lora_rank > 0) {
    dev.project(a.attn, a.xn, l.wq_a, n);  // [n, q_lora_rank]
    dev.rmsnorm(a.attn, a.attn, l.q_a_norm, n, c.q_lora_rank, kLatentNormEps);
    dev.project(a.q, a.attn, l.wq_b, n);  // [n, n_head * head_dim]
  } else {
    dev.project(a.q, a.xn, l.wq, n);
  }
  dev.project(a.k, a.xn, weight_rows(l.wkv_a, 0, rank), n);  // the latent [n, rank]
  dev.rmsnorm(a.k, a.k, l.kv_a_norm, n, rank, kLatentNormEps);
  dev.project(a.v, a.xn, weight_rows(l.wkv_a, rank, rope), n);  // the rotary key [n, rope], one head
  dev.rope(a.q + c.qk_nope_dim, c.n_head, c.q_dim());           // each head's last qk_rope_dim
  dev.rope(a.v, 1, rope);
  trace(dev, st, "q_rope", il, a.q, n * c.q_dim());
  dev.attend_latent(a.attn, a.q, a.k, a.v, il);  // [n, n_head * v_head_dim]
  dev.project(a.ffn_out, a.attn, l.wo, n);       // [n, n_embd]
}

void Model::linear_attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const {
  const ModelConfig& c = config_;
  const LayerViews& l = dev.weights().layers[size_t(il)];
  const Activations& a = dev.activations();
  // In the layouts ModelConfig describes: z inside in_proj_qkvz or apart, a inside in_proj_ba or apart.
  dev.project(a.mix, a.xn, l.lin_qkv, n);  // [n, 2 * key width + 2 * value width] or [n, conv_dim]
  float* z = c.lin_qkvz_grouped ? nullptr : a.gate;
  if (z != nullptr) dev.project(z, a.xn, l.lin_z, n);  // [n, value width]
  dev.project(a.mix_ba, a.xn, l.lin_b, n);             // [n, 2 * v_heads] or [n, v_heads]
  float* decay_in = c.lin_ba_grouped ? nullptr : a.mix_ba + n * c.lin_v_heads;
  if (decay_in != nullptr) dev.project(decay_in, a.xn, l.lin_a, n);  // [n, v_heads]
  dev.gated_delta_net(a.attn, a.mix, z, a.mix_ba, decay_in, il);
  trace(dev, st, "linear_attn", il, a.attn, n * c.lin_value_width());
  dev.project(a.ffn_out, a.attn, l.wo, n);  // [n, n_embd]
}

}  // namespace chronos
