// The CUDA ModelRunner: the forward pass of src/model (forward.cpp, attention.cpp, moe_block.cpp)
// with the dense weights, the KV cache and every activation in VRAM, kernels from kernels/cuda
// queued on one compute stream, and routed experts either copied to VRAM at load (a checkpoint:
// the all-in-VRAM run) or taken from the model's ExpertProvider (a pack folder: an ExpertStreamer
// whose slots are VRAM, filled over the copy stream).
//
// Host synchronization points, and why they are the only ones: (1) after each MoE router, the
// host waits on an event for the top-k ids (pinned memory) because which expert slots to use is
// a host decision; (2) after block 0, when the predictors observe it, for its hidden state; (3) at
// the end of a forward call, for the logits the sampler reads; (4) with a trace hook only, for
// each traced tensor. Each is an event wait on work the host needs, never a device- or
// stream-wide synchronize, and the copy stream keeps running through all of them. Copies into
// expert slots are waited for by the compute stream (on the slot's event), not by the host.
//
// The MoE block's host side (grouping, waves, missing mass, counters) is the MoePlan the CPU
// forward uses; memory, copies and fences go through the CUDA backend. Traces carry the CPU
// forward's names, so a GPU run can be compared with the CPU tensor by tensor.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "chronos/error.h"
#include "chronos/model_runner.h"
#include "chronos/ops.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/moe_plan.h"

namespace chronos {
namespace {

// Token counts up to this go through the matvec kernel (weights read once per 8 tokens); larger
// prefill chunks through cuBLAS.
constexpr int64_t kMatvecMaxTokens = 16;

struct DeviceFfn {
  WeightView gate, up, down;
};

struct DeviceLayer {
  float* attn_norm = nullptr;
  float* ffn_norm = nullptr;
  WeightView wq, wk, wv, wo;
  float* bq = nullptr;
  float* bk = nullptr;
  float* bv = nullptr;
  float* q_norm = nullptr;
  float* k_norm = nullptr;
  WeightView router;
  std::vector<FfnWeights> experts;  // device views; empty when streamed
  DeviceFfn shared;
  bool has_shared = false;
  WeightView shared_gate;
  DeviceFfn dense;
};

class CudaRunner final : public ModelRunner {
 public:
  CudaRunner(const Model& model, Backend& backend, int64_t n_ctx, int64_t batch, ForwardHooks hooks)
      : model_(model),
        cfg_(model.config()),
        backend_(dynamic_cast<CudaBackend&>(backend)),
        hooks_(std::move(hooks)),
        n_ctx_(n_ctx),
        batch_(batch) {
    CHRONOS_CHECK(n_ctx > 0 && batch > 0);
    if (model.experts_streamed() && hooks_.experts == nullptr)
      throw_error("a pack folder's experts need an expert streamer");
    backend_.make_current();
    compute_ = backend_.create_stream();
    stream_ = cuda_stream_of(*compute_);
    host_ready_ = backend_.create_event();
    plan_ = MoePlan(cfg_, batch_);
    typed_tasks_.reserve(size_t(std::max<int64_t>(cfg_.n_expert, 1)));
    blas_ = std::make_unique<cuda::Blas>();
    upload_weights();
    allocate_workspace();
    if (hooks_.experts != nullptr) hooks_.experts->set_compute_stream(compute_.get());
    const CudaDeviceInfo info = backend_.info();
    spdlog::info(
        "{}: dense weights {:.1f} MiB, experts {:.1f} MiB, KV cache {:.1f} MiB, workspace {:.1f} MiB in "
        "VRAM; {:.1f} GiB left free",
        device(), mib(memory_.dense_weight_bytes), mib(memory_.expert_weight_bytes), mib(memory_.kv_cache_bytes),
        mib(memory_.workspace_bytes), double(info.free_bytes) / (1 << 30));
  }

  ~CudaRunner() override {
    if (hooks_.experts != nullptr) hooks_.experts->set_compute_stream(nullptr);
    try {
      backend_.make_current();
      compute_->synchronize();  // shutdown: nothing may still read what is freed below
    } catch (const Error& e) {
      spdlog::warn("{}: {}", device(), e.what());  // a destructor cannot throw; the memory is freed anyway
    }
    for (Buffer& b : device_buffers_) backend_.free_device(b);
    backend_.free_device(logits_buffer_);
    for (Buffer& b : pinned_) backend_.free_staging(b);
    backend_.free_staging(host_logits_buffer_);
  }

  std::string device() const override { return backend_.name(); }
  int64_t n_ctx() const override { return n_ctx_; }
  RunnerMemory memory() const override { return memory_; }
  MoeCounters counters() const override { return counters_; }

  using ModelRunner::forward;  // batches of several sequences: not yet on CUDA (the base refuses them)
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) override {
    const int64_t n = std::ssize(tokens);
    CHRONOS_CHECK(n > 0);
    if (pos + n > n_ctx_) throw_error("context is full: {} tokens do not fit in a context of {}", pos + n, n_ctx_);
    for (const int32_t id : tokens)
      if (id < 0 || id >= cfg_.n_vocab) throw_error("token id {} is outside the vocabulary [0, {})", id, cfg_.n_vocab);
    backend_.make_current();
    for (int64_t begin = 0; begin < n; begin += batch_) {
      const int64_t count = std::min(batch_, n - begin);
      const bool last = begin + count == n;
      float* out = all_logits ? logits + begin * cfg_.n_vocab : (last ? logits : nullptr);
      forward_chunk(tokens.subspan(size_t(begin), size_t(count)), pos + begin, out, all_logits);
    }
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
  DeviceFfn upload_ffn(const FfnWeights& f, int64_t& account) {
    return DeviceFfn{upload_weight(f.gate, account), upload_weight(f.up, account), upload_weight(f.down, account)};
  }

  void upload_weights() {
    const ModelWeights& w = model_.weights();
    int64_t& dense = memory_.dense_weight_bytes;
    tok_embd_ = upload_weight(w.tok_embd, dense);
    output_ = w.output.data == w.tok_embd.data ? tok_embd_ : upload_weight(w.output, dense);
    output_norm_ = upload_floats(w.output_norm, dense);
    layers_.resize(w.layers.size());
    for (size_t il = 0; il < w.layers.size(); ++il) {
      const LayerWeights& h = w.layers[il];
      DeviceLayer& d = layers_[il];
      d.attn_norm = upload_floats(h.attn_norm, dense);
      d.ffn_norm = upload_floats(h.ffn_norm, dense);
      d.wq = upload_weight(h.wq, dense);
      d.wk = upload_weight(h.wk, dense);
      d.wv = upload_weight(h.wv, dense);
      d.wo = upload_weight(h.wo, dense);
      d.bq = upload_floats(h.bq, dense);
      d.bk = upload_floats(h.bk, dense);
      d.bv = upload_floats(h.bv, dense);
      d.q_norm = upload_floats(h.q_norm, dense);
      d.k_norm = upload_floats(h.k_norm, dense);
      if (h.is_moe) {
        d.router = upload_weight(h.router, dense);
        d.has_shared = h.shared.present();
        if (d.has_shared) d.shared = upload_ffn(h.shared, dense);
        d.shared_gate = upload_weight(h.shared_gate, dense);
        if (!model_.experts_streamed()) {
          for (const FfnWeights& e : h.experts) {
            const DeviceFfn up = upload_ffn(e, memory_.expert_weight_bytes);
            d.experts.push_back(FfnWeights{up.gate, up.up, up.down});
          }
        }
      } else {
        d.dense = upload_ffn(h.dense, dense);
      }
    }
  }

  void allocate_workspace() {
    const ModelConfig& c = cfg_;
    const int64_t b = batch_, d = c.n_embd, k = std::max<int64_t>(c.n_expert_used, 1);
    const int64_t n_exp = std::max<int64_t>(c.n_expert, 1);
    const int64_t rows = b * k;
    const int64_t n_ff = std::max({c.n_ff_expert, c.n_ff_shared, c.n_ff_dense, int64_t(1)});
    int64_t& ws = memory_.workspace_bytes;
    x_ = device_array<float>(b * d, ws);
    xn_ = device_array<float>(b * d, ws);
    q_ = device_array<float>(b * c.q_dim(), ws);
    k_ = device_array<float>(b * c.kv_dim(), ws);
    v_ = device_array<float>(b * c.kv_dim(), ws);
    attn_ = device_array<float>(b * c.q_dim(), ws);
    ffn_out_ = device_array<float>(b * d, ws);
    ff_gate_ = device_array<float>(std::max(rows, b) * n_ff, ws);
    ff_up_ = device_array<float>(b * n_ff, ws);
    ff_in_ = device_array<float>(rows * d, ws);
    ff_down_ = device_array<float>(rows * d, ws);
    shared_out_ = device_array<float>(b * d, ws);
    shared_logit_ = device_array<float>(b, ws);
    router_ = device_array<float>(b * n_exp, ws);
    top_ids_ = device_array<int32_t>(rows, ws);
    top_w_ = device_array<float>(rows, ws);
    gather_rows_ = device_array<int32_t>(rows, ws);
    token_rows_ = device_array<int32_t>(rows, ws);
    missing_ = device_array<uint8_t>(rows, ws);
    tasks_ = device_array<cuda::ExpertTask>(n_exp, ws);
    ids_ = device_array<int32_t>(b, ws);
    // cuBLAS inputs split into hi + lo halves of the weight dtype (Blas::gemm): two 2-byte values
    // per element of the widest activation of any product.
    const int64_t widest = std::max({d, c.q_dim(), n_ff});
    converted_ = device_alloc(b * widest * 4, ws);
    allocate_weight_tile();
    std::vector<float> cos, sin;
    rope_tables(c, n_ctx_, cos, sin);
    rope_cos_ = upload_floats(cos, ws);
    rope_sin_ = upload_floats(sin, ws);
    const int64_t layer_kv = n_ctx_ * c.kv_dim();
    k_cache_ = device_array<float>(c.n_layer * layer_kv, memory_.kv_cache_bytes);
    v_cache_ = device_array<float>(c.n_layer * layer_kv, memory_.kv_cache_bytes);
    host_ids_ = pinned_array<int32_t>(b);
    host_top_ids_ = pinned_array<int32_t>(rows);
    host_top_w_ = pinned_array<float>(rows);
    host_probs_ = pinned_array<float>(b * n_exp);
    host_gather_ = pinned_array<int32_t>(rows);
    host_token_rows_ = pinned_array<int32_t>(rows);
    host_missing_ = pinned_array<uint8_t>(rows);
    host_tasks_ = pinned_array<cuda::ExpertTask>(n_exp);
    host_hidden_ = pinned_array<float>(b * d);
    sequence_zero_.assign(size_t(b), 0);
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
    need(output_);
    for (const DeviceLayer& l : layers_) {
      for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router, &l.shared_gate}) need(*w);
      for (const DeviceFfn* f : {&l.shared, &l.dense}) {
        need(f->gate);
        need(f->up);
        need(f->down);
      }
    }
    if (floats == 0) return;
    weight_tile_ = device_array<float>(floats, memory_.workspace_bytes);
    weight_tile_floats_ = floats;
  }

  // Logits for `rows` positions on the device and in pinned memory: one row unless all-logits
  // calls ask for more (a vocabulary of 152k is 0.6 MB a row). Called between chunks only.
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

  // ---- the forward pass ------------------------------------------------------------------------

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
  // The trace hook sees `count` floats of device memory under the CPU forward's name (a copy and
  // a wait per traced tensor, only when a trace hook is set).
  void trace(const char* name, int64_t layer, const float* device_values, int64_t count) {
    if (!hooks_.trace) return;
    trace_values_.resize(size_t(count));
    to_host(trace_values_.data(), device_values, count * int64_t(sizeof(float)));
    wait_for_host_copies();
    hooks_.trace(name, layer, trace_values_);
  }

  void project(float* y, const float* x, const WeightView& w, int64_t n) {
    if (n <= kMatvecMaxTokens)
      cuda::matvec(y, x, w, n, stream_);
    else
      blas_->gemm(y, x, w, n, converted_, weight_tile_, weight_tile_floats_, stream_);
  }

  void forward_chunk(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) {
    const ModelConfig& c = cfg_;
    const int64_t n = std::ssize(tokens), d = c.n_embd;
    // The previous chunk normally ended by waiting for its logits (or its last copy); after an
    // exception it may not have, so wait for its queued uploads before rewriting pinned memory.
    if (!chunk_completed_) wait_for_host_copies();
    chunk_completed_ = false;
    std::copy(tokens.begin(), tokens.end(), host_ids_);
    to_device(ids_, host_ids_, n * int64_t(sizeof(int32_t)));
    cuda::embed_rows(x_, tok_embd_, ids_, n, stream_);
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const DeviceLayer& l = layers_[size_t(il)];
      cuda::rmsnorm(xn_, x_, l.attn_norm, n, d, d, c.rms_norm_eps, stream_);
      attention(il, n, pos);  // ffn_out_ <- attention output
      trace("attn_out", il, ffn_out_, n * d);
      cuda::add(x_, ffn_out_, n * d, stream_);
      cuda::rmsnorm(xn_, x_, l.ffn_norm, n, d, d, c.rms_norm_eps, stream_);
      if (c.is_moe_layer(il))
        moe(il, n);
      else
        ffn(l.dense, n, xn_, ffn_out_);
      trace("ffn_out", il, ffn_out_, n * d);
      cuda::add(x_, ffn_out_, n * d, stream_);
      trace("layer_out", il, x_, n * d);
      if (hooks_.observes_block(il)) {
        to_host(host_hidden_, x_, n * d * int64_t(sizeof(float)));
        wait_for_host_copies();
        hooks_.block(il, std::span<const float>(host_hidden_, size_t(n * d)), {sequence_zero_.data(), size_t(n)});
      }
    }
    if (logits == nullptr) {
      // A prefill chunk before the last: the next chunk rewrites the pinned token ids.
      wait_for_host_copies();
      chunk_completed_ = true;
      return;
    }
    const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
    cuda::rmsnorm(xn_, x_ + first * d, output_norm_, rows, d, d, c.rms_norm_eps, stream_);
    reserve_logit_rows(rows);
    project(logits_, xn_, output_, rows);
    to_host(host_logits_, logits_, rows * c.n_vocab * int64_t(sizeof(float)));
    wait_for_host_copies();
    chunk_completed_ = true;
    std::memcpy(logits, host_logits_, size_t(rows * c.n_vocab) * sizeof(float));
    // The CPU forward names the layer where NaN or Inf first appear; here the logits say it.
    if (!ops::all_finite(logits, rows * c.n_vocab))
      throw_error("non-finite logits (NaN or Inf) from the CUDA forward at position {}", pos + n - 1);
  }

  void attention(int64_t il, int64_t n, int64_t pos) {
    const ModelConfig& c = cfg_;
    const DeviceLayer& l = layers_[size_t(il)];
    const int64_t hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
    project(q_, xn_, l.wq, n);
    project(k_, xn_, l.wk, n);
    project(v_, xn_, l.wv, n);
    if (l.bq != nullptr) {
      cuda::add_bias(q_, l.bq, n, q_dim, stream_);
      cuda::add_bias(k_, l.bk, n, kv_dim, stream_);
      cuda::add_bias(v_, l.bv, n, kv_dim, stream_);
    }
    if (c.qk_norm == QkNorm::kFullWidth) {
      cuda::rmsnorm(q_, q_, l.q_norm, n, q_dim, q_dim, c.rms_norm_eps, stream_);
      cuda::rmsnorm(k_, k_, l.k_norm, n, kv_dim, kv_dim, c.rms_norm_eps, stream_);
    } else if (c.qk_norm == QkNorm::kPerHead) {
      cuda::rmsnorm(q_, q_, l.q_norm, n * c.n_head, hd, hd, c.rms_norm_eps, stream_);
      cuda::rmsnorm(k_, k_, l.k_norm, n * c.n_head_kv, hd, hd, c.rms_norm_eps, stream_);
    }
    if (c.clip_qkv) {
      cuda::clamp(q_, n * q_dim, *c.clip_qkv, stream_);
      cuda::clamp(k_, n * kv_dim, *c.clip_qkv, stream_);
      cuda::clamp(v_, n * kv_dim, *c.clip_qkv, stream_);
    }
    cuda::rope(q_, rope_cos_, rope_sin_, n, c.n_head, hd, c.n_rot, q_dim, pos, stream_);
    cuda::rope(k_, rope_cos_, rope_sin_, n, c.n_head_kv, hd, c.n_rot, kv_dim, pos, stream_);
    trace("q_rope", il, q_, n * q_dim);
    float* kc = k_cache_ + il * n_ctx_ * kv_dim;
    float* vc = v_cache_ + il * n_ctx_ * kv_dim;
    cuda::kv_store(kc, vc, k_, v_, n, kv_dim, pos, stream_);
    cuda::attention(attn_, q_, kc, vc, n, pos, c.n_head, c.n_head_kv, hd, c.sliding_window.value_or(0), stream_);
    project(ffn_out_, attn_, l.wo, n);
  }

  // out = down(silu(gate(in)) * up(in)) for n rows.
  void ffn(const DeviceFfn& f, int64_t n, const float* in, float* out) {
    const int64_t n_ff = f.gate.rows;
    project(ff_gate_, in, f.gate, n);
    project(ff_up_, in, f.up, n);
    cuda::silu_mul(ff_gate_, ff_gate_, ff_up_, n * n_ff, stream_);
    project(out, ff_gate_, f.down, n);
  }

  void moe(int64_t il, int64_t n) {
    const ModelConfig& c = cfg_;
    const DeviceLayer& l = layers_[size_t(il)];
    const int64_t d = c.n_embd, n_exp = c.n_expert, k = c.n_expert_used, n_ff = c.n_ff_expert, rows = n * k;

    // Route on the device (one kernel per router kind, router.h's contract); the host needs the
    // selection to pick expert slots.
    project(router_, xn_, l.router, n);
    switch (c.layers[size_t(il)].router) {
      case RouterKind::kSoftmaxTopK:
        cuda::router_topk(top_ids_, top_w_, router_, router_, n, n_exp, k, c.norm_topk_prob, stream_);
        break;
    }
    to_host(host_top_ids_, top_ids_, rows * int64_t(sizeof(int32_t)));
    to_host(host_top_w_, top_w_, rows * int64_t(sizeof(float)));
    const bool want_probs = hooks_.route || hooks_.trace;
    if (want_probs) to_host(host_probs_, router_, n * n_exp * int64_t(sizeof(float)));
    wait_for_host_copies();
    plan_.route(il, n, host_top_ids_, host_top_w_, host_probs_, hooks_.route);
    if (hooks_.trace) hooks_.trace("router_probs", il, std::span<const float>(host_probs_, size_t(n * n_exp)));

    // Group: the plan's row order, gathered on the device.
    plan_.group();
    std::copy(plan_.row_tokens().begin(), plan_.row_tokens().end(), host_gather_);
    std::copy(plan_.choice_rows().begin(), plan_.choice_rows().end(), host_token_rows_);
    to_device(gather_rows_, host_gather_, rows * int64_t(sizeof(int32_t)));
    to_device(token_rows_, host_token_rows_, rows * int64_t(sizeof(int32_t)));
    cuda::gather_rows(ff_in_, xn_, gather_rows_, rows, d, stream_);

    // Waves: two launches over all of a wave's present experts. Each wave uses its own part of
    // host_tasks_/tasks_, so a task list is not overwritten before its upload has run; acquire
    // queued the compute stream's waits on the slots' copies, release records after the kernels.
    size_t task_base = 0;
    plan_.waves(
        il, hooks_.experts, l.experts, [&](std::span<const int32_t> ids, std::span<const FfnWeights* const> views) {
          // One launch pair per weight-type pair: experts may mix types (a K type's 32-weight fallback on
          // short rows; a GGUF file's Q4_K_M with Q6_K down projections in some layers).
          typed_tasks_.clear();
          for (size_t i = 0; i < ids.size(); ++i) {
            if (views[i] == nullptr) continue;
            const FfnWeights& w = *views[i];
            if (w.gate.dtype != w.up.dtype)
              throw_error("layer {} expert {}: gate is {} and up is {}; the CUDA expert kernels take one type for both",
                          il, ids[i], dtype_name(w.gate.dtype), dtype_name(w.up.dtype));
            typed_tasks_.push_back({w.gate.dtype, w.down.dtype,
                                    cuda::ExpertTask{w.gate.data, w.up.data, w.down.data, plan_.row_begin(ids[i]),
                                                     plan_.row_end(ids[i])}});
          }
          std::stable_sort(typed_tasks_.begin(), typed_tasks_.end(), [](const TypedTask& a, const TypedTask& b) {
            return std::pair(int(a.gate), int(a.down)) < std::pair(int(b.gate), int(b.down));
          });
          for (size_t i = 0; i < typed_tasks_.size(); ++i) host_tasks_[task_base + i] = typed_tasks_[i].task;
          for (size_t begin = 0; begin < typed_tasks_.size();) {
            size_t end = begin + 1;
            while (end < typed_tasks_.size() && typed_tasks_[end].gate == typed_tasks_[begin].gate &&
                   typed_tasks_[end].down == typed_tasks_[begin].down)
              ++end;
            const int32_t n_tasks = int32_t(end - begin);
            cuda::ExpertTask* tasks = tasks_ + task_base + begin;
            to_device(tasks, host_tasks_ + task_base + begin, n_tasks * int64_t(sizeof(cuda::ExpertTask)));
            cuda::moe_gate_up(ff_gate_, ff_in_, tasks, n_tasks, typed_tasks_[begin].gate, d, n_ff, stream_);
            cuda::moe_down(ff_down_, ff_gate_, tasks, n_tasks, typed_tasks_[begin].down, d, n_ff, stream_);
            begin = end;
          }
          task_base += ids.size();
        });

    // Combine: the weighted sum with the soft-gated fallback; a missing expert's rows are never read.
    plan_.account(l.has_shared, counters_);
    std::copy(plan_.choice_missing().begin(), plan_.choice_missing().end(), host_missing_);
    to_device(missing_, host_missing_, rows);
    const float* shared = nullptr;
    const float* gate_logit = nullptr;
    if (l.has_shared) {
      ffn(l.shared, n, xn_, shared_out_);
      shared = shared_out_;
      if (c.shared_expert_gated) {
        project(shared_logit_, xn_, l.shared_gate, n);
        gate_logit = shared_logit_;
      }
    }
    cuda::moe_combine(ffn_out_, ff_down_, token_rows_, top_w_, missing_, shared, gate_logit, n, k, d, stream_);
  }

  const Model& model_;
  const ModelConfig& cfg_;
  CudaBackend& backend_;
  ForwardHooks hooks_;
  int64_t n_ctx_, batch_;
  std::unique_ptr<Stream> compute_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Event> host_ready_;  // host fence on the compute stream
  std::unique_ptr<cuda::Blas> blas_;   // created once the device is current
  RunnerMemory memory_;
  MoeCounters counters_;
  std::vector<Buffer> device_buffers_;
  std::vector<Buffer> pinned_;  // page-locked host arrays (staging memory of the backend)
  Buffer host_logits_buffer_;

  WeightView tok_embd_, output_;
  float* output_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;

  float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *attn_ = nullptr;
  float *ffn_out_ = nullptr, *ff_gate_ = nullptr, *ff_up_ = nullptr, *ff_in_ = nullptr, *ff_down_ = nullptr;
  float *shared_out_ = nullptr, *shared_logit_ = nullptr, *router_ = nullptr, *top_w_ = nullptr, *logits_ = nullptr;
  Buffer logits_buffer_;
  int64_t logit_rows_ = 0;
  bool chunk_completed_ = true;
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
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr, *k_cache_ = nullptr, *v_cache_ = nullptr;

  int32_t *host_ids_ = nullptr, *host_top_ids_ = nullptr, *host_gather_ = nullptr, *host_token_rows_ = nullptr;
  float *host_top_w_ = nullptr, *host_probs_ = nullptr, *host_hidden_ = nullptr, *host_logits_ = nullptr;
  std::vector<int32_t> sequence_zero_;  // [batch] the one sequence of each row, for the block hook
  uint8_t* host_missing_ = nullptr;
  cuda::ExpertTask* host_tasks_ = nullptr;

  MoePlan plan_;
  std::vector<float> trace_values_;  // host copy of a traced tensor
};

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const Model& model, Backend& backend, int64_t n_ctx, int64_t batch,
                                              ForwardHooks hooks) {
  if (dynamic_cast<CudaBackend*>(&backend) == nullptr)
    throw_error("the CUDA runner needs the CUDA backend (got {})", backend.name());
  return std::make_unique<CudaRunner>(model, backend, n_ctx, batch, std::move(hooks));
}

}  // namespace chronos
