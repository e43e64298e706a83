// The CUDA ModelRunner: the one forward of src/model (forward.cpp) over the CUDA op table below,
// with the dense weights, the KV slots and every activation in VRAM, kernels from kernels/cuda
// queued on one compute stream, and routed experts either copied to VRAM at load (a checkpoint:
// the all-in-VRAM run) or taken from the model's ExpertProvider (a pack folder: an ExpertStreamer
// whose slots are VRAM, filled over the copy stream). This file is weight upload, memory and the
// ops; it has no layer loop of its own.
//
// Host synchronization points, and why they are the only ones: (1) after each MoE router, the
// host waits on an event for the top-k ids (pinned memory) because which expert slots to use is
// a host decision; (2) after block 0, when the predictors observe it, for its hidden state; (3) at
// the end of a forward call, for the logits the sampler reads; (4) with a trace hook only, for
// each traced tensor; (5) before a chunk rewrites the pinned rows of the one before. Each is an
// event wait on work the host needs, never a device- or stream-wide synchronize, and the copy
// stream keeps running through all of them. Copies into expert slots are waited for by the
// compute stream (on the slot's event), not by the host.
//
// A batch's rows are taken in runs of consecutive rows of one sequence: RoPE, the KV store and
// attention are launched once per run (one run for a single sequence), everything else once for
// all rows.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "backend/cuda/cuda_backend.h"
#include "chronos/error.h"
#include "chronos/model_runner.h"
#include "chronos/ops.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/device_ops.h"
#include "model/router.h"

namespace chronos {
namespace {

// Token counts up to this go through the matvec kernel (weights read once per 8 tokens); larger
// prefill chunks through cuBLAS.
constexpr int64_t kMatvecMaxTokens = 16;

class CudaOps final : public DeviceOps {
 public:
  CudaOps(const Model& model, CudaBackend& backend, int64_t n_ctx, int64_t batch, int64_t n_seq)
      : model_(model), cfg_(model.config()), backend_(backend), n_ctx_(n_ctx), batch_(batch) {
    backend_.make_current();
    compute_ = backend_.create_stream();
    stream_ = cuda_stream_of(*compute_);
    host_ready_ = backend_.create_event();
    typed_tasks_.reserve(size_t(std::max<int64_t>(cfg_.n_expert, 1)));
    runs_.reserve(size_t(batch));
    blas_ = std::make_unique<cuda::Blas>();
    upload_weights();
    allocate_workspace(n_seq);
  }

  ~CudaOps() override {
    try {
      backend_.make_current();
      compute_->synchronize();  // shutdown: nothing may still read what is freed below
    } catch (const Error& e) {
      spdlog::warn("{}: {}", backend_.name(), e.what());  // a destructor cannot throw; the memory is freed anyway
    }
    for (Buffer& b : device_buffers_) backend_.free_device(b);
    backend_.free_device(logits_buffer_);
    for (Buffer& b : pinned_) backend_.free_staging(b);
    backend_.free_staging(host_logits_buffer_);
  }

  KvStore& kv() { return *kv_; }
  Stream* compute_stream() { return compute_.get(); }
  const RunnerMemory& memory() const { return memory_; }

  // ---- the op table (device_ops.h) -------------------------------------------------------------

  const char* name() const override { return "CUDA"; }
  const ModelViews& weights() const override { return views_; }
  const Activations& activations() const override { return act_; }
  bool host_readable() const override { return false; }

  void set_rows(const Batch& batch, int64_t begin, int64_t n) override {
    // The previous chunk may still be uploading from the pinned arrays rewritten below.
    wait_for_host_copies();
    runs_.clear();
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = begin + t;
      host_ids_[t] = batch.token(row);
      const bool continues = !runs_.empty() && runs_.back().slot == batch.seq(row) &&
                             runs_.back().pos0 + runs_.back().count == batch.pos(row);
      if (continues)
        ++runs_.back().count;
      else
        runs_.push_back(Run{t, 1, batch.seq(row), batch.pos(row)});
    }
    to_device(ids_, host_ids_, n * int64_t(sizeof(int32_t)));
    n_ = n;
  }

  void embed(float* x, const WeightView& table) override { cuda::embed_rows(x, table, ids_, n_, stream_); }

  void rmsnorm(float* y, const float* x, const float* weight, int64_t rows, int64_t width, float eps) override {
    cuda::rmsnorm(y, x, weight, rows, width, width, eps, stream_);
  }

  void project(float* y, const float* x, const WeightView& w, int64_t rows) override {
    if (rows <= kMatvecMaxTokens)
      cuda::matvec(y, x, w, rows, stream_);
    else
      blas_->gemm(y, x, w, rows, converted_, weight_tile_, weight_tile_floats_, stream_);
  }

  void add_bias(float* y, const float* bias, int64_t rows, int64_t width) override {
    cuda::add_bias(y, bias, rows, width, stream_);
  }
  void clamp(float* x, int64_t count, float limit) override { cuda::clamp(x, count, limit, stream_); }
  void add(float* y, const float* x, int64_t count) override { cuda::add(y, x, count, stream_); }
  void silu_mul(float* out, const float* gate, const float* up, int64_t count) override {
    cuda::silu_mul(out, gate, up, count, stream_);
  }

  void rope(float* x, int64_t heads, int64_t row_stride) override {
    for (const Run& r : runs_)
      cuda::rope(x + r.begin * row_stride, rope_cos_, rope_sin_, r.count, heads, cfg_.head_dim, cfg_.n_rot, row_stride,
                 r.pos0, cfg_.rope_interleaved, stream_);
  }

  void attend(float* out, const float* q, const float* k, const float* v, int64_t layer, int64_t window,
              const float* sinks) override {
    const int64_t q_dim = cfg_.q_dim(), kv_dim = cfg_.kv_dim();
    for (const Run& r : runs_) {
      float* kc = kv_->k(r.slot, layer, 0);
      float* vc = kv_->v(r.slot, layer, 0);
      cuda::kv_store(kc, vc, k + r.begin * kv_dim, v + r.begin * kv_dim, r.count, kv_dim, r.pos0, stream_);
      cuda::attention(out + r.begin * q_dim, q + r.begin * q_dim, kc, vc, r.count, r.pos0, cfg_.n_head, cfg_.n_head_kv,
                      cfg_.head_dim, window, cfg_.softmax_scale(), stream_, sinks);
    }
  }

  void split_heads(float* a, float* b, const float* src, int64_t rows, int64_t heads, int64_t width) override {
    cuda::split_heads(a, b, src, rows, heads, width, stream_);
  }
  void sigmoid_mul(float* y, const float* gate, int64_t count) override { cuda::sigmoid_mul(y, gate, count, stream_); }

  // Each run of a sequence's consecutive rows continues that sequence's states in the KV store.
  void gated_delta_net(float* out, const float* qkv, const float* z, const float* b, const float* a,
                       int64_t layer) override {
    const ModelConfig& c = cfg_;
    const LayerViews& l = views_.layers[size_t(layer)];
    const DeltaNetLayout layout = delta_net_layout(c);
    const cuda::DeltaNetWeights weights{l.lin_conv, l.lin_a_log, l.lin_dt_bias, l.lin_norm};
    const int64_t conv_floats = (c.lin_conv_kernel - 1) * c.lin_conv_dim(), value_width = c.lin_value_width();
    for (const Run& r : runs_) {
      float* state = kv_->state(r.slot, layer);
      cuda::gated_delta_net(out + r.begin * value_width, conv_out_, qkv + r.begin * layout.qkv_row_width(),
                            z == nullptr ? nullptr : z + r.begin * value_width, b + r.begin * layout.ba_row_width(),
                            a == nullptr ? nullptr : a + r.begin * c.lin_v_heads, weights, state, state + conv_floats,
                            r.count, r.pos0, layout, c.lin_conv_kernel, c.rms_norm_eps, stream_);
    }
  }

  void attend_latent(float* out, const float* q, const float* latent, const float* k_rot, int64_t layer) override {
    const ModelConfig& c = cfg_;
    const LayerViews& l = views_.layers[size_t(layer)];
    const int64_t rank = c.kv_lora_rank, rope = c.qk_rope_dim, width = rank + rope;
    for (const Run& r : runs_) {
      cuda::latent_attention(out + r.begin * c.attn_out_dim(), q + r.begin * c.q_dim(), latent + r.begin * rank,
                             k_rot + r.begin * rope, kv_->k(r.slot, layer, 0), q_latent_ + r.begin * c.n_head * width,
                             o_latent_ + r.begin * c.n_head * rank, l.mla_uk, l.mla_uv, r.count, r.pos0, c.n_head, rank,
                             rope, c.qk_nope_dim, c.v_head_dim, c.softmax_scale(), stream_);
    }
  }

  RoutedRows route(RouterKind kind, const float* bias, int64_t n, bool want_scores) override {
    const int64_t n_exp = cfg_.n_expert, k = cfg_.n_expert_used, rows = n * k;
    switch (kind) {  // one kernel per router kind (model/router.h's contract)
      case RouterKind::kSoftmaxTopK:
        cuda::router_topk(top_ids_, top_w_, act_.router, act_.router, n, n_exp, k, cfg_.norm_topk_prob, stream_);
        break;
      case RouterKind::kSigmoidBias:
      case RouterKind::kSoftmaxGroupMax:
        cuda::router_group(top_ids_, top_w_, act_.router, bias, n, group_router(cfg_, kind), stream_);
        break;
    }
    to_host(host_top_ids_, top_ids_, rows * int64_t(sizeof(int32_t)));
    to_host(host_top_w_, top_w_, rows * int64_t(sizeof(float)));
    if (want_scores) to_host(host_probs_, act_.router, n * n_exp * int64_t(sizeof(float)));
    wait_for_host_copies();
    task_base_ = 0;  // the layer's waves start over in the task arrays (see expert_wave)
    return {host_top_ids_, host_top_w_, want_scores ? host_probs_ : nullptr};
  }

  void gather_rows(float* dst, const float* src, std::span<const int32_t> rows, int64_t width) override {
    std::copy(rows.begin(), rows.end(), host_gather_);
    to_device(gather_rows_, host_gather_, std::ssize(rows) * int64_t(sizeof(int32_t)));
    cuda::gather_rows(dst, src, gather_rows_, std::ssize(rows), width, stream_);
  }

  // Two launches per weight-type pair over all of the wave's present experts. Each wave of a layer
  // uses its own part of host_tasks_/tasks_, so a task list is not overwritten before its upload
  // has run; acquire queued the compute stream's waits on the slots' copies, release records after
  // the kernels.
  void expert_wave(int64_t layer, const MoePlan& plan, std::span<const int32_t> ids,
                   std::span<const FfnWeights* const> views) override {
    const int64_t d = cfg_.n_embd, n_ff = cfg_.n_ff_expert;
    const LayerViews& l = views_.layers[size_t(layer)];
    const auto bias_of = [](const float* biases, int32_t expert, int64_t width) {
      return biases != nullptr ? biases + int64_t(expert) * width : nullptr;
    };
    // Experts may mix types (a K type's 32-weight fallback on short rows; a GGUF file's Q4_K_M
    // with Q6_K down projections in some layers).
    typed_tasks_.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (views[i] == nullptr) continue;
      const FfnWeights& w = *views[i];
      if (w.gate.dtype != w.up.dtype)
        throw_error("layer {} expert {}: gate is {} and up is {}; the CUDA expert kernels take one type for both",
                    layer, ids[i], dtype_name(w.gate.dtype), dtype_name(w.up.dtype));
      typed_tasks_.push_back(
          {w.gate.dtype, w.down.dtype,
           cuda::ExpertTask{w.gate.data, w.up.data, w.down.data, plan.row_begin(ids[i]), plan.row_end(ids[i]),
                            bias_of(l.expert_gate_bias, ids[i], n_ff), bias_of(l.expert_up_bias, ids[i], n_ff),
                            bias_of(l.expert_down_bias, ids[i], d)}});
    }
    std::stable_sort(typed_tasks_.begin(), typed_tasks_.end(), [](const TypedTask& a, const TypedTask& b) {
      return std::pair(int(a.gate), int(a.down)) < std::pair(int(b.gate), int(b.down));
    });
    for (size_t i = 0; i < typed_tasks_.size(); ++i) host_tasks_[task_base_ + i] = typed_tasks_[i].task;
    for (size_t begin = 0; begin < typed_tasks_.size();) {
      size_t end = begin + 1;
      while (end < typed_tasks_.size() && typed_tasks_[end].gate == typed_tasks_[begin].gate &&
             typed_tasks_[end].down == typed_tasks_[begin].down)
        ++end;
      const int32_t n_tasks = int32_t(end - begin);
      cuda::ExpertTask* tasks = tasks_ + task_base_ + begin;
      to_device(tasks, host_tasks_ + task_base_ + begin, n_tasks * int64_t(sizeof(cuda::ExpertTask)));
      cuda::moe_gate_up(act_.ff_gate, act_.ff_in, tasks, n_tasks, typed_tasks_[begin].gate, d, n_ff, stream_,
                        cfg_.swiglu_limit, cfg_.swiglu_alpha);
      cuda::moe_down(act_.ff_down, act_.ff_gate, tasks, n_tasks, typed_tasks_[begin].down, d, n_ff, stream_);
      begin = end;
    }
    task_base_ += ids.size();
  }

  void combine(float* out, const MoePlan& plan, const float* shared, const float* shared_gate_logit,
               int64_t n) override {
    const int64_t rows = n * cfg_.n_expert_used;
    std::copy(plan.choice_rows().begin(), plan.choice_rows().end(), host_token_rows_);
    std::copy(plan.choice_missing().begin(), plan.choice_missing().end(), host_missing_);
    to_device(token_rows_, host_token_rows_, rows * int64_t(sizeof(int32_t)));
    to_device(missing_, host_missing_, rows);
    cuda::moe_combine(out, act_.ff_down, token_rows_, top_w_, missing_, shared, shared_gate_logit, n,
                      cfg_.n_expert_used, cfg_.n_embd, stream_);
  }

  std::span<const float> to_host(const float* values, int64_t count) override {
    CHRONOS_CHECK(count <= host_values_floats_);
    to_host(host_values_, values, count * int64_t(sizeof(float)));
    wait_for_host_copies();
    return {host_values_, size_t(count)};
  }

  void lm_head(float* host_logits, const float* x, const WeightView& output, int64_t rows) override {
    reserve_logit_rows(rows);
    project(logits_, x, output, rows);
    to_host(host_logits_, logits_, rows * cfg_.n_vocab * int64_t(sizeof(float)));
    wait_for_host_copies();
    std::memcpy(host_logits, host_logits_, size_t(rows * cfg_.n_vocab) * sizeof(float));
  }

 private:
  static double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

  // ---- memory ----------------------------------------------------------------------------------

  void* device_alloc(int64_t bytes, int64_t& account) {
    Buffer b = backend_.alloc_device(size_t(std::max<int64_t>(bytes, 1)));
    device_buffers_.push_back(b);
    account += bytes;
    return b.data;
  }
  template <typename T>
  T* device_array(int64_t count, int64_t& account) {
    return static_cast<T*>(device_alloc(count * int64_t(sizeof(T)), account));
  }
  template <typename T>
  T* pinned_array(int64_t count) {
    pinned_.push_back(backend_.alloc_staging(size_t(std::max<int64_t>(count, 1)) * sizeof(T)));
    memory_.pinned_bytes += count * int64_t(sizeof(T));
    return static_cast<T*>(pinned_.back().data);
  }
  // Load time only: a blocking copy is fine here.
  void upload(void* dst, const void* src, int64_t bytes) { cuda_upload(dst, src, size_t(bytes)); }
  WeightView upload_weight(const WeightView& w, int64_t& account) {
    if (w.data == nullptr) return {};
    const int64_t bytes = w.rows * dtype_row_bytes(w.dtype, w.cols);
    void* data = device_alloc(bytes, account);
    upload(data, w.data, bytes);
    return WeightView{data, w.dtype, w.rows, w.cols};
  }
  float* upload_floats(const std::vector<float>& v, int64_t& account) {
    if (v.empty()) return nullptr;
    float* data = device_array<float>(std::ssize(v), account);
    upload(data, v.data(), std::ssize(v) * int64_t(sizeof(float)));
    return data;
  }
  FfnWeights upload_ffn(const FfnWeights& f, int64_t& account) {
    return FfnWeights{upload_weight(f.gate, account), upload_weight(f.up, account), upload_weight(f.down, account)};
  }

  void upload_weights() {
    const ModelWeights& w = model_.weights();
    int64_t& dense = memory_.dense_weight_bytes;
    views_.tok_embd = upload_weight(w.tok_embd, dense);
    views_.output = w.output.data == w.tok_embd.data ? views_.tok_embd : upload_weight(w.output, dense);
    views_.output_norm = upload_floats(w.output_norm, dense);
    views_.layers.resize(w.layers.size());
    experts_.resize(w.layers.size());
    for (size_t il = 0; il < w.layers.size(); ++il) {
      const LayerWeights& h = w.layers[il];
      LayerViews& d = views_.layers[il];
      d.attn_norm = upload_floats(h.attn_norm, dense);
      d.ffn_norm = upload_floats(h.ffn_norm, dense);
      d.wq = upload_weight(h.wq, dense);
      d.wk = upload_weight(h.wk, dense);
      d.wv = upload_weight(h.wv, dense);
      d.wo = upload_weight(h.wo, dense);
      d.bq = upload_floats(h.bq, dense);
      d.bk = upload_floats(h.bk, dense);
      d.bv = upload_floats(h.bv, dense);
      d.bo = upload_floats(h.bo, dense);
      d.sinks = upload_floats(h.sinks, dense);
      d.q_norm = upload_floats(h.q_norm, dense);
      d.k_norm = upload_floats(h.k_norm, dense);
      d.wq_a = upload_weight(h.wq_a, dense);
      d.wq_b = upload_weight(h.wq_b, dense);
      d.wkv_a = upload_weight(h.wkv_a, dense);  // wkv_b is only read as mla_uk and mla_uv
      d.q_a_norm = upload_floats(h.q_a_norm, dense);
      d.kv_a_norm = upload_floats(h.kv_a_norm, dense);
      d.mla_uk = upload_floats(h.mla_uk, dense);
      d.mla_uv = upload_floats(h.mla_uv, dense);
      d.lin_qkv = upload_weight(h.lin_qkv, dense);
      d.lin_z = upload_weight(h.lin_z, dense);
      d.lin_b = upload_weight(h.lin_b, dense);
      d.lin_a = upload_weight(h.lin_a, dense);
      d.lin_conv = upload_floats(h.lin_conv, dense);
      d.lin_a_log = upload_floats(h.lin_a_log, dense);
      d.lin_dt_bias = upload_floats(h.lin_dt_bias, dense);
      d.lin_norm = upload_floats(h.lin_norm, dense);
      if (cfg_.is_moe_layer(int64_t(il))) {
        d.router = upload_weight(h.router, dense);
        d.router_bias = upload_floats(h.router_bias, dense);
        d.router_logit_bias = upload_floats(h.router_logit_bias, dense);
        d.expert_gate_bias = upload_floats(h.expert_gate_bias, dense);
        d.expert_up_bias = upload_floats(h.expert_up_bias, dense);
        d.expert_down_bias = upload_floats(h.expert_down_bias, dense);
        if (h.shared.present()) d.shared = upload_ffn(h.shared, dense);
        d.shared_gate = upload_weight(h.shared_gate, dense);
        if (!model_.experts_streamed())
          for (const FfnWeights& e : h.experts) experts_[il].push_back(upload_ffn(e, memory_.expert_weight_bytes));
        d.experts = experts_[il];
      } else {
        d.dense = upload_ffn(h.dense, dense);
      }
    }
  }

  void allocate_workspace(int64_t n_seq) {
    const ModelConfig& c = cfg_;
    const int64_t b = batch_, d = c.n_embd, k = std::max<int64_t>(c.n_expert_used, 1);
    const int64_t n_exp = std::max<int64_t>(c.n_expert, 1);
    const int64_t rows = b * k;
    const int64_t n_ff = std::max({c.n_ff_expert, c.n_ff_shared, c.n_ff_dense, int64_t(1)});
    int64_t& ws = memory_.workspace_bytes;
    act_.x = device_array<float>(b * d, ws);
    act_.xn = device_array<float>(b * d, ws);
    act_.q = device_array<float>(b * c.q_dim(), ws);
    act_.k = device_array<float>(b * std::max(c.kv_dim(), c.kv_lora_rank), ws);  // MLA: the latent
    act_.v = device_array<float>(b * std::max(c.kv_dim(), c.qk_rope_dim), ws);   // MLA: the rotary key
    act_.attn =
        device_array<float>(b * std::max({c.q_dim(), c.attn_out_dim(), c.q_lora_rank, c.lin_value_width()}), ws);
    // Gated attention's q_proj output and gates; a Gated DeltaNet's in-projections and convolution.
    const int64_t gated_q = c.attn_output_gate ? 2 * c.q_dim() : 0;
    const int64_t qkvz = c.has_recurrent_layers() ? 2 * c.lin_key_width() + 2 * c.lin_value_width() : 0;
    if (gated_q > 0 || qkvz > 0) {
      act_.mix = device_array<float>(b * std::max(gated_q, qkvz), ws);
      act_.gate = device_array<float>(b * std::max(c.attn_output_gate ? c.q_dim() : 0, c.lin_value_width()), ws);
    }
    if (c.has_recurrent_layers()) {
      act_.mix_ba = device_array<float>(b * 2 * c.lin_v_heads, ws);
      conv_out_ = device_array<float>(b * c.lin_conv_dim(), ws);
    }
    if (c.mla()) {
      q_latent_ = device_array<float>(b * c.n_head * (c.kv_lora_rank + c.qk_rope_dim), ws);
      o_latent_ = device_array<float>(b * c.n_head * c.kv_lora_rank, ws);
    }
    act_.ffn_out = device_array<float>(b * d, ws);
    act_.ff_gate = device_array<float>(rows * n_ff, ws);
    act_.ff_up = device_array<float>(b * n_ff, ws);
    act_.ff_in = device_array<float>(rows * d, ws);
    act_.ff_down = device_array<float>(rows * d, ws);
    act_.shared_out = device_array<float>(b * d, ws);
    act_.shared_logit = device_array<float>(b, ws);
    act_.router = device_array<float>(b * n_exp, ws);
    top_w_ = device_array<float>(rows, ws);
    top_ids_ = device_array<int32_t>(rows, ws);
    gather_rows_ = device_array<int32_t>(rows, ws);
    token_rows_ = device_array<int32_t>(rows, ws);
    missing_ = device_array<uint8_t>(rows, ws);
    tasks_ = device_array<cuda::ExpertTask>(n_exp, ws);
    ids_ = device_array<int32_t>(b, ws);
    // cuBLAS inputs split into hi + lo halves of the weight dtype (Blas::gemm): two 2-byte values
    // per element of the widest activation of any product.
    const int64_t widest =
        std::max({d, c.q_dim(), c.attn_out_dim(), c.q_lora_rank, c.kv_lora_rank, n_ff, c.lin_value_width()});
    converted_ = device_alloc(b * widest * 4, ws);
    allocate_weight_tile();
    std::vector<float> cos, sin;
    rope_tables(c, n_ctx_, cos, sin);
    rope_cos_ = upload_floats(cos, ws);
    rope_sin_ = upload_floats(sin, ws);
    const int64_t slot_positions = c.n_layer * n_ctx_;
    float* k_cache = device_array<float>(n_seq * slot_positions * c.kv_key_width(), memory_.kv_cache_bytes);
    float* v_cache = device_array<float>(n_seq * slot_positions * c.kv_value_width(), memory_.kv_cache_bytes);
    // The recurrent layers' states (Gated DeltaNet), beside the positions.
    const int64_t state_floats = KvStore::state_bytes_per_slot(c) / int64_t(sizeof(float));
    float* state = state_floats > 0 ? device_array<float>(n_seq * state_floats, memory_.kv_cache_bytes) : nullptr;
    kv_.emplace(c, n_ctx_, n_seq, k_cache, v_cache, state);
    host_ids_ = pinned_array<int32_t>(b);
    host_top_ids_ = pinned_array<int32_t>(rows);
    host_top_w_ = pinned_array<float>(rows);
    host_probs_ = pinned_array<float>(b * n_exp);
    host_gather_ = pinned_array<int32_t>(rows);
    host_token_rows_ = pinned_array<int32_t>(rows);
    host_missing_ = pinned_array<uint8_t>(rows);
    host_tasks_ = pinned_array<cuda::ExpertTask>(n_exp);
    host_values_floats_ = b * std::max({d, c.q_dim(), c.lin_value_width()});
    host_values_ = pinned_array<float>(host_values_floats_);
    reserve_logit_rows(1);
  }

  // Prefill's products of block-quantized dense matrices go through an f32 tile of dequantized
  // rows (Blas::gemm): sized here for the widest such matrix, at most kWeightTileFloats (whole
  // rows) or the whole matrix when it is smaller. None without block matrices, or when every chunk
  // fits the matvec path.
  void allocate_weight_tile() {
    constexpr int64_t kWeightTileFloats = int64_t(8) << 20;  // 32 MiB: thousands of rows per SGEMM
    if (batch_ <= kMatvecMaxTokens) return;
    int64_t floats = 0;
    auto need = [&](const WeightView& w) {
      if (w.data == nullptr || !dtype_is_block(w.dtype)) return;
      const int64_t rows = std::clamp<int64_t>(kWeightTileFloats / w.cols, 1, w.rows);
      floats = std::max(floats, rows * w.cols);
    };
    need(views_.output);
    for (const LayerViews& l : views_.layers) {
      for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router, &l.shared_gate}) need(*w);
      for (const FfnWeights* f : {&l.shared, &l.dense}) {
        need(f->gate);
        need(f->up);
        need(f->down);
      }
    }
    if (floats == 0) return;
    weight_tile_ = device_array<float>(floats, memory_.workspace_bytes);
    weight_tile_floats_ = floats;
  }

  // Logits for `rows` rows on the device and in pinned memory: one row unless a call asks for
  // more (a vocabulary of 152k is 0.6 MB a row). Called between chunks only.
  void reserve_logit_rows(int64_t rows) {
    if (rows <= logit_rows_) return;
    const int64_t bytes = rows * cfg_.n_vocab * int64_t(sizeof(float));
    if (logits_buffer_.data != nullptr) {
      wait_for_host_copies();  // nothing queued may still use the old buffers
      memory_.workspace_bytes -= int64_t(logits_buffer_.bytes);
      memory_.pinned_bytes -= int64_t(logits_buffer_.bytes);
      backend_.free_device(logits_buffer_);
      backend_.free_staging(host_logits_buffer_);
    }
    logits_buffer_ = backend_.alloc_device(size_t(bytes));
    logits_ = static_cast<float*>(logits_buffer_.data);
    host_logits_buffer_ = backend_.alloc_staging(size_t(bytes));
    host_logits_ = static_cast<float*>(host_logits_buffer_.data);
    memory_.workspace_bytes += bytes;
    memory_.pinned_bytes += bytes;
    logit_rows_ = rows;
  }

  // Waits for everything queued so far on the compute stream that the host must read.
  void wait_for_host_copies() {
    compute_->record(*host_ready_);
    host_ready_->wait();
  }
  void to_host(void* dst, const void* src, int64_t bytes) {
    cuda_copy_async(*compute_, dst, src, size_t(bytes), cudaMemcpyDeviceToHost);
  }
  void to_device(void* dst, const void* src, int64_t bytes) {
    cuda_copy_async(*compute_, dst, src, size_t(bytes), cudaMemcpyHostToDevice);
  }

  const Model& model_;
  const ModelConfig& cfg_;
  CudaBackend& backend_;
  int64_t n_ctx_, batch_;
  std::unique_ptr<Stream> compute_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Event> host_ready_;  // host fence on the compute stream
  std::unique_ptr<cuda::Blas> blas_;   // created once the device is current
  RunnerMemory memory_;
  std::vector<Buffer> device_buffers_;
  std::vector<Buffer> pinned_;  // page-locked host arrays (staging memory of the backend)
  Buffer host_logits_buffer_;

  ModelViews views_;                              // device views of the weights
  std::vector<std::vector<FfnWeights>> experts_;  // [n_layer] routed experts in VRAM (empty when streamed)
  Activations act_;
  std::optional<KvStore> kv_;  // the slots in VRAM

  // The chunk's rows in runs of consecutive positions of one sequence.
  struct Run {
    int64_t begin, count;
    int32_t slot;
    int64_t pos0;
  };
  std::vector<Run> runs_;
  int64_t n_ = 0;

  float* logits_ = nullptr;
  float* top_w_ = nullptr;  // [batch, k] the routed weights, which the combine reads on the device
  Buffer logits_buffer_;
  int64_t logit_rows_ = 0;
  int32_t *top_ids_ = nullptr, *gather_rows_ = nullptr, *token_rows_ = nullptr, *ids_ = nullptr;
  uint8_t* missing_ = nullptr;
  cuda::ExpertTask* tasks_ = nullptr;
  void* converted_ = nullptr;
  float* weight_tile_ = nullptr;  // [weight_tile_floats_] dequantized rows of a block matrix (prefill)
  int64_t weight_tile_floats_ = 0;
  struct TypedTask {
    DType gate, down;
    cuda::ExpertTask task;
  };
  std::vector<TypedTask> typed_tasks_;  // one wave's present experts, grouped by type before launch
  size_t task_base_ = 0;                // where the layer's next wave starts in host_tasks_/tasks_
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  float* conv_out_ = nullptr;                        // [batch, conv_dim] a Gated DeltaNet's convolved q, k, v
  float *q_latent_ = nullptr, *o_latent_ = nullptr;  // MLA's per-head queries and outputs in the latent

  int32_t *host_ids_ = nullptr, *host_top_ids_ = nullptr, *host_gather_ = nullptr, *host_token_rows_ = nullptr;
  float *host_top_w_ = nullptr, *host_probs_ = nullptr, *host_values_ = nullptr, *host_logits_ = nullptr;
  int64_t host_values_floats_ = 0;
  uint8_t* host_missing_ = nullptr;
  cuda::ExpertTask* host_tasks_ = nullptr;
};

class CudaRunner final : public ModelRunner {
 public:
  CudaRunner(const Model& model, CudaBackend& backend, int64_t n_ctx, int64_t batch, ForwardHooks hooks, int64_t n_seq)
      : model_(model),
        backend_(backend),
        hooks_(std::move(hooks)),
        ops_(model, backend, n_ctx, batch, n_seq),
        state_(model.config(), batch, n_ctx) {
    if (hooks_.experts != nullptr) hooks_.experts->set_compute_stream(ops_.compute_stream());
    const RunnerMemory& m = ops_.memory();
    const CudaDeviceInfo info = backend_.info();
    spdlog::info(
        "{}: dense weights {:.1f} MiB, experts {:.1f} MiB, KV cache {:.1f} MiB, workspace {:.1f} MiB in "
        "VRAM; {:.1f} GiB left free",
        device(), mib(m.dense_weight_bytes), mib(m.expert_weight_bytes), mib(m.kv_cache_bytes), mib(m.workspace_bytes),
        double(info.free_bytes) / (1 << 30));
  }
  ~CudaRunner() override {
    if (hooks_.experts != nullptr) hooks_.experts->set_compute_stream(nullptr);
  }

  std::string device() const override { return backend_.name(); }
  int64_t n_ctx() const override { return ops_.kv().n_ctx(); }
  RunnerMemory memory() const override { return ops_.memory(); }
  MoeCounters counters() const override { return state_.counters; }

  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) override {
    backend_.make_current();
    model_.forward(tokens, pos, ops_.kv(), ops_, state_, logits, all_logits, hooks_);
  }
  int32_t add_sequence() override { return ops_.kv().allocate(); }
  int32_t add_sequence(int32_t seq, int64_t keep) override { return ops_.kv().allocate(seq, keep); }
  void remove_sequence(int32_t seq) override { ops_.kv().free(seq); }
  void forward(const Batch& batch, float* logits) override {
    backend_.make_current();
    model_.forward(batch, ops_.kv(), ops_, state_, logits, hooks_);
  }

 private:
  static double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

  const Model& model_;
  CudaBackend& backend_;
  ForwardHooks hooks_;
  mutable CudaOps ops_;
  ForwardState state_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const Model& model, Backend& backend, int64_t n_ctx, int64_t batch,
                                              ForwardHooks hooks, int64_t n_seq) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) throw_error("the CUDA runner needs the CUDA backend (got {})", backend.name());
  CHRONOS_CHECK(n_ctx > 0 && batch > 0 && n_seq > 0);
  if (model.experts_streamed() && hooks.experts == nullptr)
    throw_error("a pack folder's experts need an expert streamer");
  return std::make_unique<CudaRunner>(model, *cuda, n_ctx, batch, std::move(hooks), n_seq);
}

}  // namespace chronos
