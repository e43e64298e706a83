// The decoder forward pass, written once for every device against its op table (device_ops.h):
// embed -> [attention, FFN/MoE] per layer -> final norm -> logits, over a batch of rows from any
// number of sequences.
#include <algorithm>
#include <cmath>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "model/cpu_ops.h"
#include "model/scratch.h"

namespace chronos {
void rope_tables(const ModelConfig& c, int64_t n_ctx, std::vector<float>& cos, std::vector<float>& sin) {
  // In f32 the way transformers does: inv_freq = 1 / theta^(2i/d), angle = pos * inv_freq (f32),
  // then cos/sin of that f32 angle (times YaRN's attention factor).
  const int64_t half = c.n_rot / 2;
  cos.resize(size_t(n_ctx * half));
  sin.resize(size_t(n_ctx * half));
  // YaRN: frequencies that turn fewer than beta_slow times over the trained context are
  // interpolated (divided by the factor), those that turn more than beta_fast times are kept, with a
  // linear ramp between (transformers' _compute_yarn_parameters, its ends rounded out to whole
  // dimensions unless the config says truncate: false).
  float ramp_low = 0.0f, ramp_high = 0.0f;
  if (c.rope_type == RopeType::kYarn) {
    const auto correction_dim = [&](float rotations) {  // in double, as Python computes it
      return float(double(c.n_rot) * std::log(double(c.yarn_original_ctx) / (double(rotations) * 2.0 * M_PI)) /
                   (2.0 * std::log(double(c.rope_theta))));
    };
    ramp_low = correction_dim(c.yarn_beta_fast);
    ramp_high = correction_dim(c.yarn_beta_slow);
    if (c.yarn_truncate) {
      ramp_low = std::floor(ramp_low);
      ramp_high = std::ceil(ramp_high);
    }
    ramp_low = std::max(ramp_low, 0.0f);
    ramp_high = std::min(ramp_high, float(c.n_rot - 1));
    if (ramp_low == ramp_high) ramp_high += 0.001f;
  }
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(c.n_rot);
    float inv_freq = 1.0f / std::pow(c.rope_theta, exponent);
    if (c.rope_type == RopeType::kLinear) inv_freq /= c.rope_factor;
    if (c.rope_type == RopeType::kYarn) {
      const float extrapolation = 1.0f - std::clamp((float(i) - ramp_low) / (ramp_high - ramp_low), 0.0f, 1.0f);
      inv_freq = inv_freq / c.rope_factor * (1.0f - extrapolation) + inv_freq * extrapolation;
    }
    for (int64_t p = 0; p < n_ctx; ++p) {
      const float angle = float(p) * inv_freq;
      cos[size_t(p * half + i)] = float(std::cos(double(angle))) * c.rope_attn_factor;
      sin[size_t(p * half + i)] = float(std::sin(double(angle))) * c.rope_attn_factor;
    }
  }
}

void Model::ScratchDeleter::operator()(Scratch* scratch) const { delete scratch; }

ForwardState::ForwardState(const ModelConfig& c, int64_t max_batch_rows, int64_t context)
    : max_batch(max_batch_rows), n_ctx(context), plan(c, max_batch_rows) {
  logit_rows.reserve(size_t(max_batch));
  one_sequence.reserve(max_batch);
}

ModelViews host_views(const ModelWeights& w) {
  const auto data = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  ModelViews views{w.tok_embd, w.output, data(w.output_norm), {}};
  views.layers.reserve(w.layers.size());
  for (const LayerWeights& l : w.layers) {
    views.layers.push_back(LayerViews{data(l.attn_norm),
                                      data(l.ffn_norm),
                                      l.wq,
                                      l.wk,
                                      l.wv,
                                      l.wo,
                                      data(l.bq),
                                      data(l.bk),
                                      data(l.bv),
                                      data(l.bo),
                                      data(l.sinks),
                                      data(l.q_norm),
                                      data(l.k_norm),
                                      l.wq_a,
                                      l.wq_b,
                                      l.wkv_a,
                                      l.wkv_b,
                                      data(l.q_a_norm),
                                      data(l.kv_a_norm),
                                      data(l.mla_uk),
                                      data(l.mla_uv),
                                      l.lin_qkv,
                                      l.lin_z,
                                      l.lin_b,
                                      l.lin_a,
                                      data(l.lin_conv),
                                      data(l.lin_a_log),
                                      data(l.lin_dt_bias),
                                      data(l.lin_norm),
                                      l.router,
                                      data(l.router_bias),
                                      data(l.router_logit_bias),
                                      l.experts,
                                      data(l.expert_gate_bias),
                                      data(l.expert_up_bias),
                                      data(l.expert_down_bias),
                                      l.shared,
                                      l.shared_gate,
                                      l.dense});
  }
  return views;
}

Model::ScratchPtr Model::make_scratch(int64_t max_batch, int64_t n_ctx) const {
  const ModelConfig& c = config_;
  CHRONOS_CHECK(max_batch > 0 && n_ctx > 0);
  ScratchPtr s(new Scratch());
  s->state = ForwardState(c, max_batch, n_ctx);
  s->views = host_views(weights_);
  const int64_t slots = max_batch * std::max<int64_t>(c.n_expert_used, 1);
  const int64_t n_ff = std::max({c.n_ff_expert, c.n_ff_shared, c.n_ff_dense});
  const auto sized = [](std::vector<float>& v, int64_t n) {
    v.resize(size_t(std::max<int64_t>(n, 1)));
    return v.data();
  };
  Activations& a = s->act;
  a.x = sized(s->x, max_batch * c.n_embd);
  a.xn = sized(s->xn, max_batch * c.n_embd);
  a.q = sized(s->q, max_batch * c.q_dim());
  a.k = sized(s->k, max_batch * std::max(c.kv_dim(), c.kv_lora_rank));  // MLA: the latent
  a.v = sized(s->v, max_batch * std::max(c.kv_dim(), c.qk_rope_dim));   // MLA: the rotary key
  a.attn = sized(s->attn, max_batch * std::max({c.q_dim(), c.attn_out_dim(), c.q_lora_rank, c.lin_value_width()}));
  const int64_t gated_q = c.attn_output_gate ? 2 * c.q_dim() : 0;
  const int64_t qkvz = c.has_recurrent_layers() ? 2 * c.lin_key_width() + 2 * c.lin_value_width() : 0;  // >= conv_dim
  a.mix = sized(s->mix, max_batch * std::max(gated_q, qkvz));
  a.gate = sized(s->gate, max_batch * std::max(c.attn_output_gate ? c.q_dim() : 0, c.lin_value_width()));
  a.mix_ba = sized(s->mix_ba, max_batch * 2 * c.lin_v_heads);
  if (c.has_recurrent_layers()) {
    s->lin_conv_out.resize(size_t(max_batch * c.lin_conv_dim()));
    const DeltaNetLayout layout = delta_net_layout(c);
    for (int64_t ch = 0; ch < c.lin_conv_dim(); ++ch) s->lin_columns.push_back(layout.qkv_column(ch));
  }
  a.ffn_out = sized(s->ffn_out, max_batch * c.n_embd);
  a.ff_gate = sized(s->ff_gate, std::max(slots, max_batch) * n_ff);
  a.ff_up = sized(s->ff_up, std::max(slots, max_batch) * n_ff);
  a.ff_in = sized(s->ff_in, std::max(slots, max_batch) * c.n_embd);
  a.ff_down = sized(s->ff_down, std::max(slots, max_batch) * c.n_embd);
  a.shared_out = sized(s->shared_out, c.n_ff_shared > 0 ? max_batch * c.n_embd : 0);
  a.shared_logit = sized(s->shared_logit, max_batch);
  a.router = sized(s->router, max_batch * std::max<int64_t>(c.n_expert, 1));
  s->top_ids.resize(size_t(slots));
  s->top_w.resize(size_t(slots));
  s->items.reserve(size_t(std::max<int64_t>(c.n_expert, 1) * 64));
  s->expert_xq_at.resize(size_t(std::max<int64_t>(c.n_expert, 1)));
  rope_tables(c, n_ctx, s->rope_cos, s->rope_sin);
  return s;
}

MoeCounters& Model::counters(Scratch& scratch) { return scratch.state.counters; }

ForwardHooks combine(const ForwardHooks& a, const ForwardHooks& b) {
  CHRONOS_CHECK_MSG(a.experts == nullptr || b.experts == nullptr, "two expert providers for one run");
  ForwardHooks out;
  out.experts = a.experts != nullptr ? a.experts : b.experts;
  if (a.trace && b.trace) {
    out.trace = [a = a.trace, b = b.trace](const char* name, int64_t layer, std::span<const float> values) {
      a(name, layer, values);
      b(name, layer, values);
    };
  } else {
    out.trace = a.trace ? a.trace : b.trace;
  }
  if (a.route && b.route) {
    out.route = [a = a.route, b = b.route](const RouteEvent& ev) {
      a(ev);
      b(ev);
    };
  } else {
    out.route = a.route ? a.route : b.route;
  }
  if (a.block && b.block) {
    out.block = [a, b](int64_t layer, std::span<const float> hidden, std::span<const int32_t> sequences) {
      if (a.observes_block(layer)) a.block(layer, hidden, sequences);
      if (b.observes_block(layer)) b.block(layer, hidden, sequences);
    };
    out.block_last_layer = std::max(a.block_last_layer, b.block_last_layer);
  } else {
    out.block = a.block ? a.block : b.block;
    out.block_last_layer = a.block ? a.block_last_layer : b.block_last_layer;
  }
  return out;
}

void Model::trace(DeviceOps& dev, const ForwardState& st, const char* name, int64_t layer, const float* values,
                  int64_t count) {
  if (st.hooks->trace) st.hooks->trace(name, layer, dev.to_host(values, count));
}

void Model::forward(std::span<const int32_t> tokens, int64_t pos, KvStore& kv, Scratch& s, ThreadPool& pool,
                    float* logits, bool all_logits, const ForwardHooks& hooks) const {
  CpuOps ops(config_, s, pool, kv);
  forward(tokens, pos, kv, ops, s.state, logits, all_logits, hooks);
}

void Model::forward(const Batch& batch, KvStore& kv, Scratch& s, ThreadPool& pool, float* logits,
                    const ForwardHooks& hooks) const {
  CpuOps ops(config_, s, pool, kv);
  forward(batch, kv, ops, s.state, logits, hooks);
}

void Model::forward(std::span<const int32_t> tokens, int64_t pos, KvStore& kv, DeviceOps& dev, ForwardState& st,
                    float* logits, bool all_logits, const ForwardHooks& hooks) const {
  const int64_t n = std::ssize(tokens);
  CHRONOS_CHECK(n > 0);
  if (pos + n > kv.n_ctx() || pos + n > st.n_ctx)
    throw_error("context is full: {} tokens do not fit in a context of {}", pos + n, std::min(kv.n_ctx(), st.n_ctx));
  // One sequence (slot 0, taken on the first call when it is free) as batches of at most the
  // state's rows, built in its one_sequence batch.
  if (!kv.in_use(0)) kv.allocate();
  for (int64_t begin = 0; begin < n; begin += st.max_batch) {
    const int64_t count = std::min(st.max_batch, n - begin);
    const bool last = begin + count == n;
    st.one_sequence.clear();
    for (int64_t t = 0; t < count; ++t)
      st.one_sequence.add(0, pos + begin + t, tokens[size_t(begin + t)], all_logits || (last && t == count - 1));
    float* out = all_logits ? logits + begin * config_.n_vocab : (last ? logits : nullptr);
    forward(st.one_sequence, kv, dev, st, out, hooks);
  }
}

void Model::check_rows(const Batch& batch, KvStore& kv, int64_t n_ctx_limit) const {
  const int64_t n_ctx = std::min(kv.n_ctx(), n_ctx_limit);
  // next_[slot]: the position the slot's next row must have (-1 before its first row). Reset for
  // the batch's slots on every exit, so a refused batch leaves the store as it was.
  std::vector<int64_t>& next = kv.next_;
  struct Reset {
    const Batch& batch;
    std::vector<int64_t>& next;
    ~Reset() {
      for (const int32_t slot : batch.seqs())
        if (slot >= 0 && size_t(slot) < next.size()) next[size_t(slot)] = -1;
    }
  } reset{batch, next};
  for (int64_t row = 0; row < batch.size(); ++row) {
    const int32_t slot = batch.seq(row), token = batch.token(row);
    const int64_t pos = batch.pos(row);
    if (!kv.in_use(slot))
      throw_error("batch row {}: sequence {} is not in use (allocate its slot first; the store has {})", row, slot,
                  kv.n_slots());
    if (token < 0 || token >= config_.n_vocab)
      throw_error("batch row {}: token id {} is outside the vocabulary [0, {})", row, token, config_.n_vocab);
    if (pos < 0 || pos >= n_ctx)
      throw_error("batch row {}: context is full: position {} does not fit in a context of {}", row, pos, n_ctx);
    int64_t& expected = next[size_t(slot)];
    if (expected < 0 && pos > kv.length(slot))
      throw_error("batch row {}: sequence {} has {} positions; a row at position {} would leave a gap", row, slot,
                  kv.length(slot), pos);
    if (expected < 0 && kv.recurrent() && pos != 0 && pos != kv.length(slot))
      throw_error(
          "batch row {}: sequence {} has {} positions and a recurrent state, which cannot be taken back to position "
          "{} (a sequence of this model continues at its length or starts again at 0)",
          row, slot, kv.length(slot), pos);
    if (expected >= 0 && pos != expected)
      throw_error("batch row {}: the rows of sequence {} are not consecutive (position {} after {})", row, slot, pos,
                  expected - 1);
    expected = pos + 1;
  }
}

void Model::forward(const Batch& batch, KvStore& kv, DeviceOps& dev, ForwardState& st, float* logits,
                    const ForwardHooks& hooks) const {
  const int64_t n = batch.size();
  CHRONOS_CHECK(n > 0);
  CHRONOS_CHECK_MSG(!experts_streamed_ || hooks.experts != nullptr, "streamed experts need an ExpertProvider");
  check_rows(batch, kv, st.n_ctx);
  // Each sequence's length is the position after its last row (a row before the end rewinds it).
  for (int64_t row = 0; row < n; ++row) kv.length_[size_t(batch.seq(row))] = batch.pos(row) + 1;
  st.hooks = &hooks;
  struct ClearHooks {
    ForwardState& st;
    ~ClearHooks() { st.hooks = nullptr; }
  } clear{st};
  for (int64_t begin = 0; begin < n; begin += st.max_batch) {
    const int64_t count = std::min(st.max_batch, n - begin);
    forward_chunk(dev, st, batch, begin, count, logits);
    if (logits != nullptr)
      for (int64_t row = begin; row < begin + count; ++row) logits += batch.logits(row) ? config_.n_vocab : 0;
  }
}

// The one layer loop.
void Model::forward_chunk(DeviceOps& dev, ForwardState& st, const Batch& batch, int64_t begin, int64_t n,
                          float* logits) const {
  const ModelConfig& c = config_;
  const ModelViews& w = dev.weights();
  const Activations& a = dev.activations();
  const int64_t d = c.n_embd;
  dev.set_rows(batch, begin, n);
  st.row_seqs = batch.seqs().subspan(size_t(begin), size_t(n));
  dev.embed(a.x, w.tok_embd);  // [n, n_embd]
  // Where host memory allows, where non-finite values first appear, watched on the last row
  // (n_embd floats per layer): a NaN anywhere earlier in its sequence reaches that row through
  // attention. Reported only when the logits turn out non-finite.
  const float* last_row = a.x + (n - 1) * d;
  const bool watch = dev.host_readable();
  int64_t first_bad = !watch || ops::all_finite(last_row, d) ? -2 : -1;  // -1: the embeddings; >= 0: a layer
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerViews& layer = w.layers[size_t(il)];
    dev.rmsnorm(a.xn, a.x, layer.attn_norm, n, d, c.rms_norm_eps);
    switch (c.layers[size_t(il)].attention) {
      case AttentionKind::kGqa: attention(dev, st, il, n); break;  // ffn_out <- [n, n_embd]
      case AttentionKind::kMla: latent_attention(dev, st, il, n); break;
      case AttentionKind::kGatedDeltaNet: linear_attention(dev, st, il, n); break;
    }
    trace(dev, st, "attn_out", il, a.ffn_out, n * d);
    dev.add(a.x, a.ffn_out, n * d);

    dev.rmsnorm(a.xn, a.x, layer.ffn_norm, n, d, c.rms_norm_eps);
    switch (c.layers[size_t(il)].ffn) {
      case FfnKind::kMoe: moe(dev, st, il, n); break;
      case FfnKind::kDense: dense_ffn(dev, layer.dense, n, a.xn, a.ffn_out); break;
    }
    trace(dev, st, "ffn_out", il, a.ffn_out, n * d);
    dev.add(a.x, a.ffn_out, n * d);
    trace(dev, st, "layer_out", il, a.x, n * d);
    if (watch && first_bad == -2 && !ops::all_finite(last_row, d)) first_bad = il;
    if (st.hooks->observes_block(il)) st.hooks->block(il, dev.to_host(a.x, n * d), st.row_seqs);
  }
  if (logits == nullptr) return;
  // Only the rows whose logits are wanted go through the final norm and the LM head: a contiguous
  // range in place, others gathered first.
  st.logit_rows.clear();
  for (int64_t t = 0; t < n; ++t)
    if (batch.logits(begin + t)) st.logit_rows.push_back(int32_t(t));
  const int64_t rows = std::ssize(st.logit_rows);
  if (rows == 0) return;
  const int64_t first = st.logit_rows.front();
  if (st.logit_rows.back() - first + 1 == rows) {
    dev.rmsnorm(a.xn, a.x + first * d, w.output_norm, rows, d, c.rms_norm_eps);
  } else {
    dev.gather_rows(a.ff_in, a.x, st.logit_rows, d);
    dev.rmsnorm(a.xn, a.ff_in, w.output_norm, rows, d, c.rms_norm_eps);
  }
  dev.lm_head(logits, a.xn, w.output, rows);  // [rows, n_vocab]
  if (ops::all_finite(logits, rows * c.n_vocab)) return;
  if (!watch)
    throw_error("non-finite logits (NaN or Inf) from the {} forward at position {}", dev.name(),
                batch.pos(begin + st.logit_rows.back()));
  if (first_bad == -1) throw_error("non-finite values (NaN or Inf) in the token embeddings (model.embed_tokens)");
  if (first_bad >= 0) throw_error("non-finite values (NaN or Inf) first appear in the output of layer {}", first_bad);
  throw_error("non-finite logits (NaN or Inf) from finite hidden states: the final norm or the LM head");
}

void Model::dense_ffn(DeviceOps& dev, const FfnWeights& ffn, int64_t n, const float* in, float* out) {
  const Activations& a = dev.activations();
  const int64_t n_ff = ffn.gate.rows;
  dev.project(a.ff_gate, in, ffn.gate, n);  // [n, n_ff]
  dev.project(a.ff_up, in, ffn.up, n);      // [n, n_ff]
  dev.silu_mul(a.ff_gate, a.ff_gate, a.ff_up, n * n_ff);
  dev.project(out, a.ff_gate, ffn.down, n);  // [n, n_embd]
}

}  // namespace chronos
