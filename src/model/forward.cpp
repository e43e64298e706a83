// The decoder forward pass: embed -> [attention, FFN/MoE] per layer -> final norm -> logits.
#include <algorithm>
#include <cmath>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "model/scratch.h"

namespace chronos {
void rope_tables(const ModelConfig& c, int64_t n_ctx, std::vector<float>& cos, std::vector<float>& sin) {
  // In f32 the way transformers does: inv_freq = 1 / theta^(2i/d), angle = pos * inv_freq (f32),
  // then cos/sin of that f32 angle.
  const int64_t half = c.n_rot / 2;
  cos.resize(size_t(n_ctx * half));
  sin.resize(size_t(n_ctx * half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(c.n_rot);
    float inv_freq = 1.0f / std::pow(c.rope_theta, exponent);
    if (c.rope_type == RopeType::kLinear) inv_freq /= c.rope_factor;
    for (int64_t p = 0; p < n_ctx; ++p) {
      const float angle = float(p) * inv_freq;
      cos[size_t(p * half + i)] = float(std::cos(double(angle)));
      sin[size_t(p * half + i)] = float(std::sin(double(angle)));
    }
  }
}

void Model::ScratchDeleter::operator()(Scratch* scratch) const { delete scratch; }

Model::ScratchPtr Model::make_scratch(int64_t max_batch, int64_t n_ctx) const {
  const ModelConfig& c = config_;
  CHRONOS_CHECK(max_batch > 0 && n_ctx > 0);
  ScratchPtr s(new Scratch());
  s->max_batch = max_batch;
  s->n_ctx = n_ctx;
  const int64_t slots = max_batch * std::max<int64_t>(c.n_expert_used, 1);
  const int64_t n_ff = std::max({c.n_ff_expert, c.n_ff_shared, c.n_ff_dense});
  s->x.resize(size_t(max_batch * c.n_embd));
  s->xn.resize(size_t(max_batch * c.n_embd));
  s->q.resize(size_t(max_batch * c.q_dim()));
  s->k.resize(size_t(max_batch * c.kv_dim()));
  s->v.resize(size_t(max_batch * c.kv_dim()));
  s->attn.resize(size_t(max_batch * c.q_dim()));
  s->ffn_out.resize(size_t(max_batch * c.n_embd));
  s->ff_gate.resize(size_t(std::max(slots, max_batch) * n_ff));
  s->ff_up.resize(s->ff_gate.size());
  s->ff_in.resize(size_t(slots * c.n_embd));
  s->ff_down.resize(size_t(std::max(slots, max_batch) * c.n_embd));
  s->router.resize(size_t(max_batch * std::max<int64_t>(c.n_expert, 1)));
  s->top_ids.resize(size_t(slots));
  s->top_w.resize(size_t(slots));
  s->plan = MoePlan(c, max_batch);
  s->items.reserve(size_t(std::max<int64_t>(c.n_expert, 1) * 64));
  s->expert_xq_at.resize(size_t(std::max<int64_t>(c.n_expert, 1)));
  s->logits.resize(size_t(c.n_vocab));
  s->one_sequence.reserve(max_batch);

  rope_tables(c, n_ctx, s->rope_cos, s->rope_sin);
  return s;
}

MoeCounters& Model::counters(Scratch& scratch) { return scratch.counters; }

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

void Model::trace(const Scratch& s, const char* name, int64_t layer, const float* data, int64_t n) {
  if (s.hooks->trace) s.hooks->trace(name, layer, std::span<const float>(data, size_t(n)));
}

void Model::forward(std::span<const int32_t> tokens, int64_t pos, KvStore& kv, Scratch& s, ThreadPool& pool,
                    float* logits, bool all_logits, const ForwardHooks& hooks) const {
  const int64_t n = std::ssize(tokens);
  CHRONOS_CHECK(n > 0);
  if (pos + n > kv.n_ctx() || pos + n > s.n_ctx)
    throw_error("context is full: {} tokens do not fit in a context of {}", pos + n, std::min(kv.n_ctx(), s.n_ctx));
  // One sequence (slot 0) as batches of at most the scratch's rows, built in the scratch's batch.
  for (int64_t begin = 0; begin < n; begin += s.max_batch) {
    const int64_t count = std::min(s.max_batch, n - begin);
    const bool last = begin + count == n;
    s.one_sequence.clear();
    for (int64_t t = 0; t < count; ++t)
      s.one_sequence.add(0, pos + begin + t, tokens[size_t(begin + t)], all_logits || (last && t == count - 1));
    float* out = all_logits ? logits + begin * config_.n_vocab : (last ? logits : nullptr);
    forward(s.one_sequence, kv, s, pool, out, hooks);
  }
}

void Model::check_rows(const Batch& batch, KvStore& kv, const Scratch& s) const {
  const int64_t n_ctx = std::min(kv.n_ctx(), s.n_ctx);
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
    if (expected >= 0 && pos != expected)
      throw_error("batch row {}: the rows of sequence {} are not consecutive (position {} after {})", row, slot, pos,
                  expected - 1);
    expected = pos + 1;
  }
}

void Model::forward(const Batch& batch, KvStore& kv, Scratch& s, ThreadPool& pool, float* logits,
                    const ForwardHooks& hooks) const {
  const int64_t n = batch.size();
  CHRONOS_CHECK(n > 0);
  CHRONOS_CHECK_MSG(!experts_streamed_ || hooks.experts != nullptr, "streamed experts need an ExpertProvider");
  check_rows(batch, kv, s);
  // Each sequence's length is the position after its last row (a row before the end rewinds it).
  for (int64_t row = 0; row < n; ++row) kv.length_[size_t(batch.seq(row))] = batch.pos(row) + 1;
  s.hooks = &hooks;
  struct ClearHooks {
    Scratch& s;
    ~ClearHooks() { s.hooks = nullptr; }
  } clear{s};
  for (int64_t begin = 0; begin < n; begin += s.max_batch) {
    const int64_t count = std::min(s.max_batch, n - begin);
    forward_chunk(batch, begin, count, kv, s, pool, logits);
    if (logits != nullptr)
      for (int64_t row = begin; row < begin + count; ++row) logits += batch.logits(row) ? config_.n_vocab : 0;
  }
}

void Model::forward_chunk(const Batch& batch, int64_t begin, int64_t n, KvStore& kv, Scratch& s, ThreadPool& pool,
                          float* logits) const {
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd;
  for (int64_t t = 0; t < n; ++t)
    ops::weight_row_to_f32(s.x.data() + t * d, weights_.tok_embd, batch.token(begin + t));  // [n, n_embd]
  s.row_seqs = batch.seqs().subspan(size_t(begin), size_t(n));
  // Where non-finite values first appear, watched on the last row (n_embd floats per layer): a NaN
  // anywhere earlier in its sequence reaches that row through attention. Reported only when the
  // logits turn out non-finite.
  const float* last_row = s.x.data() + (n - 1) * d;
  int64_t first_bad = ops::all_finite(last_row, d) ? -2 : -1;  // -1: the embeddings; >= 0: a layer
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& layer = weights_.layers[size_t(il)];
    for (int64_t t = 0; t < n; ++t)
      ops::rmsnorm(s.xn.data() + t * d, s.x.data() + t * d, layer.attn_norm.data(), d, c.rms_norm_eps);
    switch (c.layers[size_t(il)].attention) {
      case AttentionKind::kGqa: attention(il, batch, begin, n, kv, s, pool); break;  // s.ffn_out <- [n, n_embd]
    }
    trace(s, "attn_out", il, s.ffn_out.data(), n * d);
    for (int64_t t = 0; t < n * d; ++t) s.x[size_t(t)] += s.ffn_out[size_t(t)];

    for (int64_t t = 0; t < n; ++t)
      ops::rmsnorm(s.xn.data() + t * d, s.x.data() + t * d, layer.ffn_norm.data(), d, c.rms_norm_eps);
    switch (c.layers[size_t(il)].ffn) {
      case FfnKind::kMoe: moe(il, n, s, pool); break;
      case FfnKind::kDense: dense_ffn(layer.dense, n, s.xn.data(), s.ffn_out.data(), s, pool); break;
    }
    trace(s, "ffn_out", il, s.ffn_out.data(), n * d);
    for (int64_t t = 0; t < n * d; ++t) s.x[size_t(t)] += s.ffn_out[size_t(t)];
    trace(s, "layer_out", il, s.x.data(), n * d);
    if (first_bad == -2 && !ops::all_finite(last_row, d)) first_bad = il;
    if (s.hooks->observes_block(il)) s.hooks->block(il, std::span<const float>(s.x.data(), size_t(n * d)), s.row_seqs);
  }
  if (logits == nullptr) return;
  // Only the rows whose logits are wanted go through the final norm and the LM head.
  int64_t rows = 0;
  for (int64_t t = 0; t < n; ++t)
    if (batch.logits(begin + t))
      ops::rmsnorm(s.xn.data() + rows++ * d, s.x.data() + t * d, weights_.output_norm.data(), d, c.rms_norm_eps);
  if (rows == 0) return;
  ops::matmul(logits, s.xn.data(), weights_.output, rows, pool);  // [rows, n_vocab]
  if (ops::all_finite(logits, rows * c.n_vocab)) return;
  if (first_bad == -1) throw_error("non-finite values (NaN or Inf) in the token embeddings (model.embed_tokens)");
  if (first_bad >= 0) throw_error("non-finite values (NaN or Inf) first appear in the output of layer {}", first_bad);
  throw_error("non-finite logits (NaN or Inf) from finite hidden states: the final norm or the LM head");
}

void Model::dense_ffn(const FfnWeights& ffn, int64_t n_tokens, const float* in, float* out, Scratch& s,
                      ThreadPool& pool) const {
  const int64_t n_ff = ffn.gate.rows;
  ops::matmul(s.ff_gate.data(), in, ffn.gate, n_tokens, pool);  // [n, n_ff]
  ops::matmul(s.ff_up.data(), in, ffn.up, n_tokens, pool);      // [n, n_ff]
  ops::silu_mul(s.ff_gate.data(), s.ff_gate.data(), s.ff_up.data(), n_tokens * n_ff);
  ops::matmul(out, s.ff_gate.data(), ffn.down, n_tokens, pool);  // [n, n_embd]
}

}  // namespace chronos
