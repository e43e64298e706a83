// Self-attention: q/k/v projections (+bias, +q/k norm, +clip), RoPE, KV append, causal GQA, o_proj.
#include <algorithm>
#include <cmath>
#include <limits>

#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "model/scratch.h"

namespace chronos {
namespace {

// One query head over keys [first, last]: softmax(q·k * scale) · v, computed block by block with a
// running max so no score buffer larger than a block is needed (exact up to f32 rounding).
void attend_head(float* out, const float* q, KvStore& kv, int32_t slot, int64_t layer, int64_t kv_offset, int64_t first,
                 int64_t last, int64_t head_dim, float scale) {
  constexpr int64_t kBlock = 128;
  float scores[kBlock];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t block = first; block <= last; block += kBlock) {
    const int64_t count = std::min(kBlock, last - block + 1);
    float block_max = -std::numeric_limits<float>::infinity();
    ops::dot_rows(scores, q, kv.k(slot, layer, block) + kv_offset, kv.kv_dim(), count, head_dim, scale);
    for (int64_t j = 0; j < count; ++j) block_max = std::max(block_max, scores[j]);
    const float new_max = std::max(running_max, block_max);
    const float correction = std::exp(running_max - new_max);  // 0 on the first block
    if (correction != 1.0f) {
      for (int64_t i = 0; i < head_dim; ++i) out[i] *= correction;
      running_sum *= correction;
    }
    for (int64_t j = 0; j < count; ++j) {  // the scores become the weights of the values
      scores[j] = std::exp(scores[j] - new_max);
      running_sum += scores[j];
    }
    ops::axpy_rows(out, scores, kv.v(slot, layer, block) + kv_offset, kv.kv_dim(), count, head_dim);
    running_max = new_max;
  }
  const float inv = 1.0f / running_sum;
  for (int64_t i = 0; i < head_dim; ++i) out[i] *= inv;
}

}  // namespace

void Model::attention(int64_t il, const Batch& batch, int64_t begin, int64_t n, KvStore& kv, Scratch& s,
                      ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[size_t(il)];
  const int64_t hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  ops::matmul(s.q.data(), s.xn.data(), l.wq, n, pool);  // [n, q_dim]
  ops::matmul(s.k.data(), s.xn.data(), l.wk, n, pool);  // [n, kv_dim]
  ops::matmul(s.v.data(), s.xn.data(), l.wv, n, pool);  // [n, kv_dim]
  const int64_t half = c.n_rot / 2;
  for (int64_t t = 0; t < n; ++t) {
    float* q = s.q.data() + t * q_dim;
    float* k = s.k.data() + t * kv_dim;
    float* v = s.v.data() + t * kv_dim;
    if (!l.bq.empty()) {
      ops::axpy(q, 1.0f, l.bq.data(), q_dim);
      ops::axpy(k, 1.0f, l.bk.data(), kv_dim);
      ops::axpy(v, 1.0f, l.bv.data(), kv_dim);
    }
    if (c.qk_norm == QkNorm::kFullWidth) {
      ops::rmsnorm(q, q, l.q_norm.data(), q_dim, c.rms_norm_eps);
      ops::rmsnorm(k, k, l.k_norm.data(), kv_dim, c.rms_norm_eps);
    } else if (c.qk_norm == QkNorm::kPerHead) {
      for (int64_t h = 0; h < c.n_head; ++h) ops::rmsnorm(q + h * hd, q + h * hd, l.q_norm.data(), hd, c.rms_norm_eps);
      for (int64_t h = 0; h < c.n_head_kv; ++h)
        ops::rmsnorm(k + h * hd, k + h * hd, l.k_norm.data(), hd, c.rms_norm_eps);
    }
    if (c.clip_qkv) {
      const float clip = *c.clip_qkv;
      for (int64_t i = 0; i < q_dim; ++i) q[i] = std::clamp(q[i], -clip, clip);
      for (int64_t i = 0; i < kv_dim; ++i) k[i] = std::clamp(k[i], -clip, clip);
      for (int64_t i = 0; i < kv_dim; ++i) v[i] = std::clamp(v[i], -clip, clip);
    }
    const int32_t slot = batch.seq(begin + t);
    const int64_t pos = batch.pos(begin + t);
    const float* cos = s.rope_cos.data() + pos * half;
    const float* sin = s.rope_sin.data() + pos * half;
    for (int64_t h = 0; h < c.n_head; ++h) ops::rope_head(q + h * hd, cos, sin, c.n_rot);
    for (int64_t h = 0; h < c.n_head_kv; ++h) ops::rope_head(k + h * hd, cos, sin, c.n_rot);
    std::copy(k, k + kv_dim, kv.k(slot, il, pos));
    std::copy(v, v + kv_dim, kv.v(slot, il, pos));
  }
  trace(s, "q_rope", il, s.q.data(), n * q_dim);

  // Query head h reads kv head h / (n_head / n_head_kv). A row at position p sees its sequence's
  // positions <= p (its earlier rows' keys were stored above), and with a sliding window W only the
  // last W of them.
  const int64_t group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(float(hd));
  pool.run(n * c.n_head, [&](int64_t task) {
    const int64_t t = task / c.n_head, h = task % c.n_head;
    const int64_t last = batch.pos(begin + t);
    const int64_t first = c.sliding_window ? std::max<int64_t>(0, last - *c.sliding_window + 1) : 0;
    attend_head(s.attn.data() + t * q_dim + h * hd, s.q.data() + t * q_dim + h * hd, kv, batch.seq(begin + t), il,
                (h / group) * hd, first, last, hd, scale);
  });
  ops::matmul(s.ffn_out.data(), s.attn.data(), l.wo, n, pool);  // [n, n_embd]
}

}  // namespace chronos
