// The device op table. The forward pass is written once, in src/model (forward.cpp: the layer
// loop; attention.cpp; moe_block.cpp), against these operations, and each device implements them:
// the CPU over src/ops and the thread pool (cpu_ops.cpp), CUDA over kernels/cuda and the CUDA
// backend (cuda/cuda_runner.cpp). A new attention kind, router or FFN is one function in src/model
// plus the ops it needs on each device; the model code names no device type.
//
// Activation and weight pointers are the device's memory (host memory on the CPU, VRAM on CUDA):
// the forward only passes them between ops and offsets them by whole rows. What the host must read
// (routing decisions, traced tensors, the block hook's hidden states, logits) comes back through
// the ops that say so, each a copy and a fence on a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "chronos/model.h"
#include "kernels/delta_net_layout.h"
#include "model/moe_plan.h"

namespace chronos {

// One layer's weights where the device reads them.
struct LayerViews {
  const float* attn_norm = nullptr;  // [n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  WeightView wq, wk, wv, wo;
  const float* bq = nullptr;  // [q_dim], [kv_dim] x2; all null without biases
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* bo = nullptr;      // [n_embd] o_proj's bias, or null
  const float* sinks = nullptr;   // [n_head] attention sinks, or null
  const float* q_norm = nullptr;  // [head_dim] (per head) or [q_dim] / [kv_dim] (full width)
  const float* k_norm = nullptr;
  WeightView wq_a, wq_b, wkv_a, wkv_b;  // multi-head latent attention (LayerWeights)
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  const float* mla_uk = nullptr;             // [n_head, kv_lora_rank, qk_nope_dim]
  const float* mla_uv = nullptr;             // [n_head, v_head_dim, kv_lora_rank]
  WeightView lin_qkv, lin_z, lin_b, lin_a;   // Gated DeltaNet (LayerWeights)
  const float* lin_conv = nullptr;           // [conv_dim, kernel]
  const float* lin_a_log = nullptr;          // [v_heads]
  const float* lin_dt_bias = nullptr;        // [v_heads]
  const float* lin_norm = nullptr;           // [v_dim]
  WeightView router;                         // [n_expert, n_embd]
  const float* router_bias = nullptr;        // [n_expert] a sigmoid router's selection bias, or null
  const float* router_logit_bias = nullptr;  // [n_expert] added to the router's logits, or null
  std::span<const FfnWeights> experts;       // routed experts bound at load; empty when streamed
  // [n_expert, n_ff] x2, [n_expert, n_embd]: the experts' projection biases, or null.
  const float* expert_gate_bias = nullptr;
  const float* expert_up_bias = nullptr;
  const float* expert_down_bias = nullptr;
  FfnWeights shared;       // absent without a shared expert
  WeightView shared_gate;  // [1, n_embd]
  FfnWeights dense;        // the FFN of a dense layer
};

struct ModelViews {
  WeightView tok_embd, output;
  const float* output_norm = nullptr;
  std::vector<LayerViews> layers;
};

// Where a Gated DeltaNet layer's inputs sit in its in-projections (ModelConfig's lin_* layouts).
inline DeltaNetLayout delta_net_layout(const ModelConfig& c) {
  return {c.lin_k_heads, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim, c.lin_qkvz_grouped, c.lin_ba_grouped, c.lin_v_tiled};
}

// The weights as the CPU reads them: views of the loaded model, no copy.
ModelViews host_views(const ModelWeights& weights);

// The forward's activation buffers, on the device, for max_batch rows (k = max(n_expert_used, 1)).
struct Activations {
  float* x = nullptr;     // [max_batch, n_embd] residual stream
  float* xn = nullptr;    // [max_batch, n_embd] normed input of a sub-block
  float* q = nullptr;     // [max_batch, q_dim]
  float* k = nullptr;     // [max_batch, kv_dim]
  float* v = nullptr;     // [max_batch, kv_dim]
  float* attn = nullptr;  // [max_batch, q_dim] (Gated DeltaNet: [max_batch, its value width])
  // [max_batch, mix_width]: a gated attention's q_proj output (queries and gates), a Gated
  // DeltaNet's in_proj_qkvz (or in_proj_qkv) output; [max_batch, max(q_dim, value width)] the
  // gates (or in_proj_z's output); [max_batch, 2 * v_heads] in_proj_ba's (or in_proj_b's, then a's).
  float* mix = nullptr;
  float* gate = nullptr;
  float* mix_ba = nullptr;
  float* ffn_out = nullptr;       // [max_batch, n_embd] a sub-block's output
  float* ff_gate = nullptr;       // [max_batch * k, n_ff] (also a dense FFN's [max_batch, n_ff])
  float* ff_up = nullptr;         // [max_batch, n_ff] at least
  float* ff_in = nullptr;         // [max_batch * k, n_embd] rows grouped by expert
  float* ff_down = nullptr;       // [max_batch * k, n_embd] the experts' outputs
  float* shared_out = nullptr;    // [max_batch, n_embd] the shared expert's output
  float* shared_logit = nullptr;  // [max_batch] its gate's logit
  float* router = nullptr;        // [max_batch, n_expert] router logits, then scores
};

// The host side of a forward on any device, sized once for max_batch rows per step.
struct ForwardState {
  ForwardState() = default;
  ForwardState(const ModelConfig& config, int64_t max_batch, int64_t n_ctx);
  int64_t max_batch = 0;
  int64_t n_ctx = 0;
  const ForwardHooks* hooks = nullptr;  // the running call's (set for its duration)
  MoePlan plan;                         // the MoE block's host bookkeeping
  MoeCounters counters;
  std::span<const int32_t> row_seqs;  // the running chunk's sequence of each row
  std::vector<int32_t> logit_rows;    // capacity max_batch: the chunk's rows that want logits
  Batch one_sequence;                 // capacity max_batch: the rows of the one-sequence forward
};

// A router's decisions in host memory: ids and weights [n, k], scores [n, n_expert] (null when
// they were not asked for).
struct RoutedRows {
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  const float* scores = nullptr;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;
  virtual const ModelViews& weights() const = 0;
  virtual const Activations& activations() const = 0;
  // Whether activation pointers are host memory the forward may read directly (the CPU): then it
  // watches each layer's output for the first non-finite values.
  virtual bool host_readable() const = 0;

  // The rows of the next chunk, begin .. begin + n - 1 of `batch`: their tokens, sequences and
  // positions, which embed, rope and attend use.
  virtual void set_rows(const Batch& batch, int64_t begin, int64_t n) = 0;
  // x[r, :] = the row of `table` for row r's token, as f32.
  virtual void embed(float* x, const WeightView& table) = 0;
  // y[r, :] = rmsnorm(x[r, :]) * weight for `rows` rows of `width` (y may alias x).
  virtual void rmsnorm(float* y, const float* x, const float* weight, int64_t rows, int64_t width, float eps) = 0;
  // y[rows, w.rows] = x[rows, w.cols] W^T.
  virtual void project(float* y, const float* x, const WeightView& w, int64_t rows) = 0;
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t width) = 0;
  virtual void clamp(float* x, int64_t count, float limit) = 0;
  virtual void add(float* y, const float* x, int64_t count) = 0;                             // y += x
  virtual void silu_mul(float* out, const float* gate, const float* up, int64_t count) = 0;  // out may alias gate
  // Rotate-half RoPE on `heads` heads of each row, row r at its position; rows `row_stride` apart.
  virtual void rope(float* x, int64_t heads, int64_t row_stride) = 0;
  // Grouped-query attention of `layer`: stores k and v ([n, kv_dim]) at each row's position of its
  // sequence's slot, then out [n, q_dim] = each query head over its sequence's keys up to the row's
  // position (the last `window` of them when window > 0). sinks [n_head], when not null: head h's
  // softmax has one more logit, sinks[h], in its denominator and no value (gpt-oss).
  virtual void attend(float* out, const float* q, const float* k, const float* v, int64_t layer, int64_t window,
                      const float* sinks) = 0;
  // Multi-head latent attention of `layer`, absorbed: stores each row's latent [n, kv_lora_rank]
  // and rotary key [n, qk_rope_dim] at its position of its sequence's slot; then per head h,
  // q [n, n_head * head_dim] split into [q_nope | q_rot], the query [mla_uk,h q_nope | q_rot] scores
  // the cached [latent | k_rot] rows up to the row's position (scaled by softmax_scale), their
  // weights sum the cached latents, and out [n, n_head * v_head_dim] = mla_uv,h times that sum.
  virtual void attend_latent(float* out, const float* q, const float* latent, const float* k_rot, int64_t layer) = 0;
  // Each of `rows` rows of src holds `heads` heads of [a part (width), b part (width)]: a [rows,
  // heads * width] gets the a parts, b the b parts (a gated attention's queries and gates).
  virtual void split_heads(float* a, float* b, const float* src, int64_t rows, int64_t heads, int64_t width) = 0;
  virtual void sigmoid_mul(float* y, const float* gate, int64_t count) = 0;  // y *= sigmoid(gate)
  // Gated DeltaNet of `layer` over the chunk's rows, in row order, each continuing its sequence's
  // recurrent state in the KV store (zeroed at position 0). Its inputs (ModelConfig's layouts): the
  // rows of in_proj_qkvz in qkv with z null, or in_proj_qkv's [n, conv_dim] and in_proj_z's [n,
  // value width]; the rows of in_proj_ba in b with a null, or in_proj_b's and in_proj_a's [n,
  // v_heads]. The causal convolution and SiLU over q, k, v; q and k L2-normalized (q also by
  // 1/sqrt(k_dim)); per value head h (key head h / (v_heads / k_heads), or h % k_heads tiled) the state S
  // decayed by exp(g), g = -exp(A_log) * softplus(a + dt_bias), S += k (beta (v - S^T k))^T with
  // beta = sigmoid(b), o = S^T q; out [n, v_heads * v_dim] = each head's RMSNorm(o) * lin_norm *
  // silu(z).
  virtual void gated_delta_net(float* out, const float* qkv, const float* z, const float* b, const float* a,
                               int64_t layer) = 0;
  // The router of `kind` (model/router.h) over the logits in activations().router, n rows.
  virtual RoutedRows route(RouterKind kind, const float* bias, int64_t n, bool want_scores) = 0;
  // dst[r, :] = src[rows[r], :] (rows: host memory).
  virtual void gather_rows(float* dst, const float* src, std::span<const int32_t> rows, int64_t width) = 0;
  // One wave of routed experts (MoePlan::waves): for every expert ids[i] with views[i] set, its
  // grouped rows of ff_in through its SwiGLU into the same rows of ff_down. Missing experts
  // (views[i] null) are skipped: their rows are never written.
  virtual void expert_wave(int64_t layer, const MoePlan& plan, std::span<const int32_t> ids,
                           std::span<const FfnWeights* const> views) = 0;
  // out [n, n_embd] = kernels/moe_combine.h over ff_down, the routed weights and the plan's
  // missing experts, with the shared expert's rows and gate logits when not null.
  virtual void combine(float* out, const MoePlan& plan, const float* shared, const float* shared_gate_logit,
                       int64_t n) = 0;
  // `count` floats of device memory, readable on the host until the next op.
  virtual std::span<const float> to_host(const float* values, int64_t count) = 0;
  // host_logits [rows, n_vocab] = x [rows, n_embd] through the LM head.
  virtual void lm_head(float* host_logits, const float* x, const WeightView& output, int64_t rows) = 0;
};

}  // namespace chronos
