// The CPU's op table (cpu_ops.h): the forward's operations over src/ops and the thread pool,
// keeping the tuned MoE waves (work-sized row chunks, activations prepared once per expert).
#include "model/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "chronos/thread_pool.h"
#include "kernels/moe_combine.h"
#include "model/router.h"

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

// One query over cached positions [first, last]: softmax(q·key * scale) · value, a position's key
// the `key_width` floats at keys + pos * stride and its value the `value_width` floats at values +
// pos * stride, computed block by block with a running max so no score buffer larger than a block
// is needed (exact up to f32 rounding). sink, when not null: one more logit in the denominator.
// ring > 0: position p is stored at p % ring (a sliding layer's ring, KvStore::ring); the range
// then spans at most one wrap.
void attend_rows(float* out, const float* q, const float* keys, const float* values, int64_t stride, int64_t first,
                 int64_t last, int64_t key_width, int64_t value_width, float scale, const float* sink = nullptr,
                 int64_t ring = 0) {
  constexpr int64_t kBlock = 128;
  float scores[kBlock];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + value_width, 0.0f);
  for (int64_t block = first, count = 0; block <= last; block += count) {
    const int64_t at = ring > 0 ? block % ring : block;
    count = std::min(kBlock, last - block + 1);
    if (ring > 0) count = std::min(count, ring - at);  // up to the ring's end
    float block_max = -std::numeric_limits<float>::infinity();
    ops::dot_rows(scores, q, keys + at * stride, stride, count, key_width, scale);
    for (int64_t j = 0; j < count; ++j) block_max = std::max(block_max, scores[j]);
    const float new_max = std::max(running_max, block_max);
    const float correction = std::exp(running_max - new_max);  // 0 on the first block
    if (correction != 1.0f) {
      for (int64_t i = 0; i < value_width; ++i) out[i] *= correction;
      running_sum *= correction;
    }
    for (int64_t j = 0; j < count; ++j) {  // the scores become the weights of the values
      scores[j] = std::exp(scores[j] - new_max);
      running_sum += scores[j];
    }
    ops::axpy_rows(out, scores, values + at * stride, stride, count, value_width);
    running_max = new_max;
  }
  // exp(sink - max) may overflow to infinity: the weights then go to 0, their limit.
  if (sink != nullptr) running_sum += std::exp(*sink - running_max);
  const float inv = 1.0f / running_sum;
  for (int64_t i = 0; i < value_width; ++i) out[i] *= inv;
}

// gpt-oss's expert activation: out = min(gate, limit) * sigmoid(alpha * min(gate, limit)) *
// (clamp(up, -limit, limit) + 1). out may alias gate.
void clamped_swiglu(float* out, const float* gate, const float* up, int64_t count, float limit, float alpha) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

}  // namespace

void CpuOps::set_rows(const Batch& batch, int64_t begin, int64_t n) {
  batch_ = &batch;
  begin_ = begin;
  n_ = n;
}

void CpuOps::embed(float* x, const WeightView& table) {
  for (int64_t t = 0; t < n_; ++t) ops::weight_row_to_f32(x + t * c_.n_embd, table, batch_->token(begin_ + t));
}

void CpuOps::rmsnorm(float* y, const float* x, const float* weight, int64_t rows, int64_t width, float eps) {
  for (int64_t r = 0; r < rows; ++r) ops::rmsnorm(y + r * width, x + r * width, weight, width, eps);
}

void CpuOps::project(float* y, const float* x, const WeightView& w, int64_t rows) { ops::matmul(y, x, w, rows, pool_); }

void CpuOps::add_bias(float* y, const float* bias, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) ops::axpy(y + r * width, 1.0f, bias, width);
}

void CpuOps::clamp(float* x, int64_t count, float limit) {
  for (int64_t i = 0; i < count; ++i) x[i] = std::clamp(x[i], -limit, limit);
}

void CpuOps::add(float* y, const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}

void CpuOps::silu_mul(float* out, const float* gate, const float* up, int64_t count) {
  ops::silu_mul(out, gate, up, count);
}

void CpuOps::rope(float* x, int64_t heads, int64_t row_stride) {
  const int64_t half = c_.n_rot / 2, hd = c_.head_dim;
  for (int64_t t = 0; t < n_; ++t) {
    const int64_t pos = batch_->pos(begin_ + t);
    const float* cos = s_.rope_cos.data() + pos * half;
    const float* sin = s_.rope_sin.data() + pos * half;
    for (int64_t h = 0; h < heads; ++h) {
      if (c_.rope_interleaved)
        ops::rope_head_interleaved(x + t * row_stride + h * hd, cos, sin, c_.n_rot);
      else
        ops::rope_head(x + t * row_stride + h * hd, cos, sin, c_.n_rot);
    }
  }
}

void CpuOps::attend(float* out, const float* q, const float* k, const float* v, int64_t layer, int64_t window,
                    const float* sinks) {
  const int64_t hd = c_.head_dim, q_dim = c_.q_dim(), kv_dim = c_.kv_dim();
  CHRONOS_CHECK(kv_.key_width() == kv_dim && kv_.value_width() == kv_dim);
  for (int64_t t = 0; t < n_; ++t) {
    const int32_t slot = batch_->seq(begin_ + t);
    const int64_t pos = batch_->pos(begin_ + t);
    std::copy(k + t * kv_dim, k + (t + 1) * kv_dim, kv_.k(slot, layer, pos));
    std::copy(v + t * kv_dim, v + (t + 1) * kv_dim, kv_.v(slot, layer, pos));
  }
  // Query head h reads kv head h / (n_head / n_head_kv).
  const int64_t group = c_.n_head / c_.n_head_kv;
  const float scale = c_.softmax_scale();
  // A ring keeps window + max_rows - 1 positions: a chunk's first row still finds its window.
  const int64_t ring = kv_.ring(layer) < kv_.n_ctx() ? kv_.ring(layer) : 0;
  CHRONOS_CHECK_MSG(ring == 0 || (window > 0 && n_ <= kv_.max_rows() && ring >= window + n_ - 1),
                    "layer {}: a chunk of {} rows does not fit the KV ring of {} positions", layer, n_, ring);
  pool_.run(n_ * c_.n_head, [&](int64_t task) {
    const int64_t t = task / c_.n_head, h = task % c_.n_head;
    const int32_t slot = batch_->seq(begin_ + t);
    const int64_t last = batch_->pos(begin_ + t);
    const int64_t first = window > 0 ? std::max<int64_t>(0, last - window + 1) : 0;
    const int64_t kv_head = (h / group) * hd;
    attend_rows(out + t * q_dim + h * hd, q + t * q_dim + h * hd, kv_.k(slot, layer, 0) + kv_head,
                kv_.v(slot, layer, 0) + kv_head, kv_dim, first, last, hd, hd, scale,
                sinks != nullptr ? sinks + h : nullptr, ring);
  });
}

void CpuOps::attend_latent(float* out, const float* q, const float* latent, const float* k_rot, int64_t layer) {
  const LayerViews& l = s_.views.layers[size_t(layer)];
  const int64_t rank = c_.kv_lora_rank, rope = c_.qk_rope_dim, nope = c_.qk_nope_dim, vd = c_.v_head_dim;
  const int64_t width = rank + rope, q_dim = c_.q_dim(), hd = c_.head_dim;
  CHRONOS_CHECK(kv_.key_width() == width && rank <= kMaxLatentRank && rope <= kMaxLatentRank);
  for (int64_t t = 0; t < n_; ++t) {
    float* row = kv_.k(batch_->seq(begin_ + t), layer, batch_->pos(begin_ + t));
    std::copy(latent + t * rank, latent + (t + 1) * rank, row);
    std::copy(k_rot + t * rope, k_rot + (t + 1) * rope, row + rank);
  }
  const float scale = c_.softmax_scale();
  pool_.run(n_ * c_.n_head, [&](int64_t task) {
    const int64_t t = task / c_.n_head, h = task % c_.n_head;
    const float* qh = q + t * q_dim + h * hd;  // [q_nope | q_rot]
    // The query in the latent's space: [W_uk,h^T q_nope | q_rot], against each cached [latent | k_rot].
    float q_latent[2 * kMaxLatentRank], o_latent[kMaxLatentRank];
    const float* uk = l.mla_uk + h * rank * nope;
    for (int64_t r = 0; r < rank; ++r) q_latent[r] = ops::dot(uk + r * nope, qh, nope);
    std::copy(qh + nope, qh + nope + rope, q_latent + rank);
    const float* keys = kv_.k(batch_->seq(begin_ + t), layer, 0);
    attend_rows(o_latent, q_latent, keys, keys, width, 0, batch_->pos(begin_ + t), width, rank, scale);
    const float* uv = l.mla_uv + h * vd * rank;
    float* oh = out + t * (c_.n_head * vd) + h * vd;
    for (int64_t j = 0; j < vd; ++j) oh[j] = ops::dot(uv + j * rank, o_latent, rank);
  });
}

void CpuOps::split_heads(float* a, float* b, const float* src, int64_t rows, int64_t heads, int64_t width) {
  for (int64_t head = 0; head < rows * heads; ++head) {
    const float* from = src + head * 2 * width;
    std::copy_n(from, width, a + head * width);
    std::copy_n(from + width, width, b + head * width);
  }
}

void CpuOps::sigmoid_mul(float* y, const float* gate, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

void CpuOps::gated_delta_net(float* out, const float* qkv, const float* z, const float* b, const float* a,
                             int64_t layer) {
  const LayerViews& l = s_.views.layers[size_t(layer)];
  const DeltaNetLayout layout = delta_net_layout(c_);
  const int64_t nv = c_.lin_v_heads, dk = c_.lin_k_dim, dv = c_.lin_v_dim;
  const int64_t kernel = c_.lin_conv_kernel, conv_dim = c_.lin_conv_dim(), key_width = c_.lin_key_width();
  const int64_t row_width = layout.qkv_row_width(), ba_width = layout.ba_row_width();
  CHRONOS_CHECK(dk <= 1024 && dv <= 1024 && (z == nullptr) == layout.qkvz_grouped &&
                (a == nullptr) == layout.ba_grouped);
  // The convolution, channel ranges in parallel, each row in order continuing its sequence: the
  // state holds a channel's last kernel - 1 inputs, oldest first.
  float* conv_out = s_.lin_conv_out.data();  // [n, conv_dim]: q, k, v after the convolution and SiLU
  const int64_t* columns = s_.lin_columns.data();
  pool_.parallel_for(conv_dim, 256, [&](int64_t begin, int64_t end) {
    for (int64_t t = 0; t < n_; ++t) {
      float* state = kv_.state(batch_->seq(begin_ + t), layer);  // [kernel - 1, conv_dim]
      if (batch_->pos(begin_ + t) == 0)
        for (int64_t j = 0; j + 1 < kernel; ++j)
          std::fill(state + j * conv_dim + begin, state + j * conv_dim + end, 0.0f);
      for (int64_t ch = begin; ch < end; ++ch) {
        const float* w = l.lin_conv + ch * kernel;
        const float x = qkv[t * row_width + columns[ch]];
        float sum = 0.0f;
        for (int64_t j = 0; j + 1 < kernel; ++j) sum += w[j] * state[j * conv_dim + ch];
        sum += w[kernel - 1] * x;
        for (int64_t j = 0; j + 2 < kernel; ++j) state[j * conv_dim + ch] = state[(j + 1) * conv_dim + ch];
        state[(kernel - 2) * conv_dim + ch] = x;
        conv_out[t * conv_dim + ch] = sum / (1.0f + std::exp(-sum));
      }
    }
  });
  // The delta rule, value heads in parallel, each row in order on its sequence's state.
  const float q_scale = 1.0f / std::sqrt(float(dk)), eps = c_.rms_norm_eps;
  const int64_t conv_floats = (kernel - 1) * conv_dim;
  pool_.run(nv, [&](int64_t h) {
    const int64_t g = layout.key_head(h);
    const float decay_scale = -std::exp(l.lin_a_log[h]);
    const float* a_rows = a != nullptr ? a : b;  // in_proj_a, or in_proj_ba's a columns
    float q[1024], k[1024], kv_mem[1024];
    for (int64_t t = 0; t < n_; ++t) {
      const float* row = conv_out + t * conv_dim;
      const auto l2_normalized = [&](float* dst, const float* src, float scale) {
        float sum = 0.0f;
        for (int64_t i = 0; i < dk; ++i) sum += src[i] * src[i];
        const float inv = scale / std::sqrt(sum + 1e-6f);
        for (int64_t i = 0; i < dk; ++i) dst[i] = src[i] * inv;
      };
      l2_normalized(q, row + g * dk, q_scale);
      l2_normalized(k, row + key_width + g * dk, 1.0f);
      const float* v = row + 2 * key_width + h * dv;
      const float b_h = b[t * ba_width + layout.b_column(h)];
      const float a_h = a_rows[t * ba_width + layout.a_column(h)] + l.lin_dt_bias[h];
      const float beta = 1.0f / (1.0f + std::exp(-b_h));
      const float softplus = a_h > 20.0f ? a_h : std::log1p(std::exp(a_h));  // torch's threshold
      const float decay = std::exp(decay_scale * softplus);
      float* state = kv_.state(batch_->seq(begin_ + t), layer) + conv_floats + h * dk * dv;  // [dk, dv]
      if (batch_->pos(begin_ + t) == 0) std::fill(state, state + dk * dv, 0.0f);
      std::fill(kv_mem, kv_mem + dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        float* s = state + i * dv;
        for (int64_t x = 0; x < dv; ++x) {
          s[x] *= decay;
          kv_mem[x] += s[x] * k[i];
        }
      }
      for (int64_t x = 0; x < dv; ++x) kv_mem[x] = (v[x] - kv_mem[x]) * beta;  // the delta
      float* o = out + t * nv * dv + h * dv;
      std::fill(o, o + dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        float* s = state + i * dv;
        for (int64_t x = 0; x < dv; ++x) {
          s[x] += k[i] * kv_mem[x];
          o[x] += s[x] * q[i];
        }
      }
      // The gated RMSNorm: each head's output normalized, scaled, and gated by silu(z).
      const float* gate = z == nullptr ? qkv + t * row_width + layout.z_column(h) : z + t * nv * dv + h * dv;
      float squares = 0.0f;
      for (int64_t x = 0; x < dv; ++x) squares += o[x] * o[x];
      const float inv = 1.0f / std::sqrt(squares / float(dv) + eps);
      for (int64_t x = 0; x < dv; ++x) o[x] = l.lin_norm[x] * (o[x] * inv) * (gate[x] / (1.0f + std::exp(-gate[x])));
    }
  });
}

RoutedRows CpuOps::route(RouterKind kind, const float* bias, int64_t n, bool) {
  route_rows(kind, c_, bias, s_.act.router, s_.top_ids.data(), s_.top_w.data(), n);
  return {s_.top_ids.data(), s_.top_w.data(), s_.act.router};
}

void CpuOps::gather_rows(float* dst, const float* src, std::span<const int32_t> rows, int64_t width) {
  for (size_t r = 0; r < rows.size(); ++r) std::copy_n(src + int64_t(rows[r]) * width, width, dst + int64_t(r) * width);
}

// Within a wave, work items are (expert, chunk of rows): one pool dispatch computes gate and up of
// every expert of the wave, a second computes down, so small and large experts both spread over
// threads.
void CpuOps::expert_wave(int64_t layer, const MoePlan& plan, std::span<const int32_t> ids,
                         std::span<const FfnWeights* const> views) {
  Model::Scratch& s = s_;
  const int64_t d = c_.n_embd, n_ff = c_.n_ff_expert;
  const LayerViews& l = s.views.layers[size_t(layer)];
  // Each computed expert's rows of `out` ([rows, width]) plus its row of `bias` ([n_expert, width]).
  const auto add_expert_bias = [&](float* out, const float* bias, int64_t width) {
    if (bias == nullptr) return;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (views[i] == nullptr) continue;
      const int32_t e = ids[i];
      for (int64_t r = plan.row_begin(e); r < plan.row_end(e); ++r)
        ops::axpy(out + r * width, 1.0f, bias + e * width, width);
    }
  };
  const auto xq_of = [&](int32_t e) {
    return reinterpret_cast<uint8_t*>(s.expert_xq.data()) + s.expert_xq_at[size_t(e)];
  };
  // Row chunks sized by work (rows times the expert's tokens), about kTasksPerThread per thread
  // over the wave: an expert with more tokens gets shorter chunks. Any chunking gives the same
  // bits (each output row is one kernel call's, whoever computes it).
  const auto tokens_of = [&](int32_t e) { return plan.row_end(e) - plan.row_begin(e); };
  auto build_items = [&](int64_t rows_per_expert) {
    int64_t work = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if (views[i] != nullptr) work += rows_per_expert * tokens_of(ids[i]);
    const int64_t work_per_task = std::clamp<int64_t>(work / (kTasksPerThread * pool_.size()), 1, kMaxTaskWork);
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
    pool_.run(std::ssize(ids), [&](int64_t i) {
      if (views[size_t(i)] == nullptr) return;
      const int32_t e = ids[size_t(i)];
      const int64_t r0 = plan.row_begin(e);
      ops::prepare_activations(xq_of(e), x + r0 * cols, views[size_t(i)]->*which, plan.row_end(e) - r0);
    });
  };
  float* const ff_in = s.act.ff_in;
  float* const ff_gate = s.act.ff_gate;
  float* const ff_up = s.act.ff_up;
  float* const ff_down = s.act.ff_down;
  prepare(ff_in, d, &FfnWeights::gate);
  build_items(n_ff);
  pool_.run(std::ssize(s.items), [&](int64_t i) {
    const auto item = s.items[size_t(i)];
    const int64_t r0 = plan.row_begin(item.expert), rows = plan.row_end(item.expert) - r0;
    const float* x = ff_in + r0 * d;
    const WeightView &gate = item.weights->gate, &up = item.weights->up;
    ops::matmul_rows_prepared(ff_gate + r0 * n_ff, x, xq_of(item.expert), gate, rows, item.row_begin, item.row_end);
    if (ops::same_prepared_activations(up, gate))
      ops::matmul_rows_prepared(ff_up + r0 * n_ff, x, xq_of(item.expert), up, rows, item.row_begin, item.row_end);
    else
      ops::matmul_rows(ff_up + r0 * n_ff, x, up, rows, item.row_begin, item.row_end);
  });
  add_expert_bias(ff_gate, l.expert_gate_bias, n_ff);
  add_expert_bias(ff_up, l.expert_up_bias, n_ff);
  // The wave's rows are contiguous: experts are grouped in index order and ids is ascending.
  const int64_t row_begin = plan.row_begin(ids.front()), row_end = plan.row_end(ids.back());
  if (c_.swiglu_limit > 0.0f)
    clamped_swiglu(ff_gate + row_begin * n_ff, ff_gate + row_begin * n_ff, ff_up + row_begin * n_ff,
                   (row_end - row_begin) * n_ff, c_.swiglu_limit, c_.swiglu_alpha);
  else
    ops::silu_mul(ff_gate + row_begin * n_ff, ff_gate + row_begin * n_ff, ff_up + row_begin * n_ff,
                  (row_end - row_begin) * n_ff);
  prepare(ff_gate, n_ff, &FfnWeights::down);  // the gate/up inputs are no longer needed
  build_items(d);
  pool_.run(std::ssize(s.items), [&](int64_t i) {
    const auto item = s.items[size_t(i)];
    const int64_t r0 = plan.row_begin(item.expert), rows = plan.row_end(item.expert) - r0;
    ops::matmul_rows_prepared(ff_down + r0 * d, ff_gate + r0 * n_ff, xq_of(item.expert), item.weights->down, rows,
                              item.row_begin, item.row_end);
  });
  add_expert_bias(ff_down, l.expert_down_bias, d);
}

// kernels/moe_combine.h's formula: each token's factors from combine_plan, its slots summed in
// order j = 0 .. k-1 (a row at a time, so the sum vectorizes), then the shared expert.
void CpuOps::combine(float* out, const MoePlan& plan, const float* shared, const float* shared_gate_logit, int64_t n) {
  const int64_t d = c_.n_embd, k = c_.n_expert_used;
  const float* y = s_.act.ff_down;
  const std::span<const int32_t> rows = plan.choice_rows();
  const std::span<const float> weights = plan.choice_weights();
  const std::span<const uint8_t> missing = plan.choice_missing();
  for (int64_t t = 0; t < n; ++t) {
    const float* w = weights.data() + t * k;
    const uint8_t* miss = missing.data() + t * k;
    const CombinePlan factors =
        combine_plan(w, miss, k, shared != nullptr, shared_gate_logit != nullptr ? shared_gate_logit + t : nullptr);
    float* o = out + t * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t j = 0; j < k; ++j)
      if (!miss[j]) ops::axpy(o, w[j], y + int64_t(rows[size_t(t * k + j)]) * d, d);
    if (factors.routed_scale != 1.0f)
      for (int64_t i = 0; i < d; ++i) o[i] *= factors.routed_scale;
    if (shared != nullptr) ops::axpy(o, factors.shared_coef, shared + t * d, d);
  }
}

void CpuOps::lm_head(float* host_logits, const float* x, const WeightView& output, int64_t rows) {
  ops::matmul(host_logits, x, output, rows, pool_);
}

}  // namespace chronos
