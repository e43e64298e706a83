// The CUDA ModelRunner: the forward pass of src/model (forward.cpp, attention.cpp, moe_block.cpp)
// with the dense weights, the KV cache and every activation in VRAM, kernels from kernels/cuda
// queued on one compute stream, and routed experts either copied to VRAM at load (a checkpoint:
// the all-in-VRAM run) or taken from the model's ExpertProvider (a pack folder: an ExpertStreamer
// whose slots are VRAM, filled over the copy stream).
//
// Host synchronization points, and why they are the only ones: (1) after each MoE router, the
// host waits on an event for the top-k ids (pinned memory) because which expert slots to use is
// a host decision; (2) after block 0, when the predictors observe it, for its hidden state; (3) at
// the end of a forward call, for the logits the sampler reads. Each is an event wait on work the
// host needs, never a device- or stream-wide synchronize, and the copy stream keeps running
// through all of them. Copies into expert slots are waited for by the compute stream
// (cudaStreamWaitEvent on the slot's event), not by the host.
#include <cuda_runtime.h>
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
      : model_(model), cfg_(model.config()), backend_(dynamic_cast<CudaBackend&>(backend)), hooks_(std::move(hooks)),
        n_ctx_(n_ctx), batch_(batch) {
    CHRONOS_CHECK(n_ctx > 0 && batch > 0);
    if (model.experts_streamed() && hooks_.experts == nullptr)
      throw_error("a pack folder's experts need an expert streamer");
    backend_.make_current();
    compute_ = backend_.create_stream();
    stream_ = cuda_stream_of(*compute_);
    cuda_check(cudaEventCreateWithFlags(&host_ready_, cudaEventDisableTiming), "cudaEventCreate");
    blas_ = std::make_unique<cuda::Blas>();
    upload_weights();
    allocate_workspace();
    if (hooks_.experts != nullptr) hooks_.experts->set_compute_stream(compute_.get());
    const CudaDeviceInfo info = backend_.info();
    spdlog::info("{}: dense weights {:.1f} MiB, experts {:.1f} MiB, KV cache {:.1f} MiB, workspace {:.1f} MiB in "
                 "VRAM; {:.1f} GiB left free",
                 device(), mib(memory_.dense_weight_bytes), mib(memory_.expert_weight_bytes),
                 mib(memory_.kv_cache_bytes), mib(memory_.workspace_bytes), double(info.free_bytes) / (1 << 30));
  }

  ~CudaRunner() override {
    if (hooks_.experts != nullptr) hooks_.experts->set_compute_stream(nullptr);
    cudaSetDevice(backend_.ordinal());
    cudaStreamSynchronize(stream_);  // shutdown: nothing may still read what is freed below
    for (Buffer& b : device_buffers_) backend_.free_device(b);
    backend_.free_device(logits_buffer_);
    for (void* p : pinned_) cudaFreeHost(p);
    if (host_logits_ != nullptr) cudaFreeHost(host_logits_);
    cudaEventDestroy(host_ready_);
  }

  std::string device() const override { return backend_.name(); }
  int64_t n_ctx() const override { return n_ctx_; }
  RunnerMemory memory() const override { return memory_; }
  MoeCounters counters() const override { return counters_; }

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
    void* p = nullptr;
    cuda_check(cudaHostAlloc(&p, size_t(std::max<int64_t>(count, 1)) * sizeof(T), cudaHostAllocDefault),
               "cudaHostAlloc");
    pinned_.push_back(p);
    memory_.pinned_bytes += count * int64_t(sizeof(T));
    return static_cast<T*>(p);
  }
  // Load time only: a blocking copy is fine here.
  void upload(void* dst, const void* src, int64_t bytes) {
    cuda_check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  }
  WeightView upload_weight(const WeightView& w, int64_t& account) {
    if (w.data == nullptr) return {};
    const int64_t bytes = w.rows * w.cols * dtype_size(w.dtype);
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
    reserve_logit_rows(1);
    expert_rows_.resize(size_t(n_exp + 1));
    fill_.resize(size_t(n_exp));
    active_.reserve(size_t(n_exp));
    views_.resize(size_t(n_exp));
    expert_missing_.resize(size_t(n_exp));
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
      cudaFreeHost(host_logits_);
    }
    logits_buffer_ = backend_.alloc_device(size_t(bytes));
    logits_ = static_cast<float*>(logits_buffer_.data);
    void* pinned = nullptr;
    cuda_check(cudaHostAlloc(&pinned, size_t(bytes), cudaHostAllocDefault), "cudaHostAlloc");
    host_logits_ = static_cast<float*>(pinned);
    memory_.workspace_bytes += bytes;
    memory_.pinned_bytes += bytes;
    logit_rows_ = rows;
  }

  // ---- the forward pass ------------------------------------------------------------------------

  // Waits for everything queued so far on the compute stream that the host must read.
  void wait_for_host_copies() {
    cuda_check(cudaEventRecord(host_ready_, stream_), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(host_ready_), "cudaEventSynchronize");
  }
  void to_host(void* dst, const void* src, int64_t bytes) {
    cuda_check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (D2H)");
  }
  void to_device(void* dst, const void* src, int64_t bytes) {
    cuda_check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (H2D)");
  }

  void project(float* y, const float* x, const WeightView& w, int64_t n) {
    if (n <= kMatvecMaxTokens) cuda::matvec(y, x, w, n, stream_);
    else blas_->gemm(y, x, w, n, converted_, stream_);
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
      cuda::add(x_, ffn_out_, n * d, stream_);
      cuda::rmsnorm(xn_, x_, l.ffn_norm, n, d, d, c.rms_norm_eps, stream_);
      if (c.layer_is_moe[size_t(il)]) moe(il, n);
      else ffn(l.dense, n, xn_, ffn_out_);
      cuda::add(x_, ffn_out_, n * d, stream_);
      if (hooks_.observes_block(il)) {
        to_host(host_hidden_, x_, n * d * int64_t(sizeof(float)));
        wait_for_host_copies();
        hooks_.block(il, std::span<const float>(host_hidden_, size_t(n * d)), n);
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
    ExpertProvider* provider = hooks_.experts;

    // Router on the device; the host needs the selection to pick expert slots.
    project(router_, xn_, l.router, n);
    cuda::router_topk(top_ids_, top_w_, router_, router_, n, n_exp, k, c.norm_topk_prob, stream_);
    to_host(host_top_ids_, top_ids_, rows * int64_t(sizeof(int32_t)));
    to_host(host_top_w_, top_w_, rows * int64_t(sizeof(float)));
    const RouteFn& route = hooks_.route;
    if (route) to_host(host_probs_, router_, n * n_exp * int64_t(sizeof(float)));
    wait_for_host_copies();
    if (route) {
      for (int64_t t = 0; t < n; ++t)
        route(RouteEvent{il, t, {host_top_ids_ + t * k, size_t(k)}, {host_top_w_ + t * k, size_t(k)},
                         {host_probs_ + t * n_exp, size_t(n_exp)}});
    }

    // Group (token, choice) pairs by expert, as the CPU block does: rows expert_rows[e] ..
    // expert_rows[e + 1] of ff_in belong to expert e; token_rows[t * k + j] is the row of choice j.
    std::fill(fill_.begin(), fill_.end(), 0);
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t e = host_top_ids_[i];
      if (e < 0 || e >= n_exp)
        throw_error("layer {}: the router selected expert {} of {} (non-finite router logits?)", il, e, n_exp);
      ++fill_[size_t(e)];
    }
    expert_rows_[0] = 0;
    for (int64_t e = 0; e < n_exp; ++e) expert_rows_[size_t(e + 1)] = expert_rows_[size_t(e)] + fill_[size_t(e)];
    std::fill(fill_.begin(), fill_.end(), 0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = host_top_ids_[t * k + j];
        const int32_t row = expert_rows_[size_t(e)] + fill_[size_t(e)]++;
        host_gather_[row] = int32_t(t);
        host_token_rows_[t * k + j] = row;
      }
    }
    to_device(gather_rows_, host_gather_, rows * int64_t(sizeof(int32_t)));
    to_device(token_rows_, host_token_rows_, rows * int64_t(sizeof(int32_t)));
    cuda::gather_rows(ff_in_, xn_, gather_rows_, rows, d, stream_);
    active_.clear();
    for (int64_t e = 0; e < n_exp; ++e)
      if (fill_[size_t(e)] > 0) active_.push_back(int32_t(e));

    // Waves of at most the provider's capacity; each wave is two launches over all its experts.
    const size_t wave = provider != nullptr ? std::max<size_t>(1, provider->max_experts_per_acquire()) : active_.size();
    const DType expert_dtype = model_.sizes().expert_dtype;
    for (size_t first = 0; first < active_.size(); first += wave) {
      const size_t count = std::min(wave, active_.size() - first);
      const std::span<const int32_t> ids(active_.data() + first, count);
      const std::span<const FfnWeights*> views(views_.data() + first, count);
      if (provider != nullptr) {
        provider->acquire(il, ids, views);  // queues the compute stream's waits on the slots' copies
      } else {
        for (size_t i = 0; i < count; ++i) views[i] = &l.experts[size_t(ids[i])];
      }
      // Each wave uses its own part of host_tasks_/tasks_ (indexed from `first`), so a task list
      // is not overwritten before its upload has run.
      int32_t n_tasks = 0;
      for (size_t i = 0; i < count; ++i) {
        expert_missing_[size_t(ids[i])] = views[i] == nullptr;
        if (views[i] == nullptr) continue;
        CHRONOS_CHECK(views[i]->gate.dtype == expert_dtype && views[i]->up.dtype == expert_dtype &&
                      views[i]->down.dtype == expert_dtype);
        const int32_t e = ids[i];
        host_tasks_[first + size_t(n_tasks++)] = cuda::ExpertTask{views[i]->gate.data, views[i]->up.data,
                                                                   views[i]->down.data, expert_rows_[size_t(e)],
                                                                   expert_rows_[size_t(e + 1)]};
      }
      if (n_tasks > 0) {
        to_device(tasks_ + first, host_tasks_ + first, n_tasks * int64_t(sizeof(cuda::ExpertTask)));
        cuda::moe_gate_up(ff_gate_, ff_in_, tasks_ + first, n_tasks, expert_dtype, d, n_ff, stream_);
        cuda::moe_down(ff_down_, ff_gate_, tasks_ + first, n_tasks, expert_dtype, d, n_ff, stream_);
      }
      if (provider != nullptr) provider->release(il, ids);  // records on the compute stream after the kernels
    }

    // The weighted sum with the soft-gated fallback; a missing expert's rows are never read.
    int64_t fallback_pairs = 0;
    for (int64_t t = 0; t < n; ++t) {
      float missing_mass = 0.0f, total_mass = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const bool missing = expert_missing_[size_t(host_top_ids_[t * k + j])];
        host_missing_[t * k + j] = missing ? 1 : 0;
        fallback_pairs += missing;
        total_mass += host_top_w_[t * k + j];
        if (missing) missing_mass += host_top_w_[t * k + j];
      }
      if (!l.has_shared && missing_mass > 0.0f && missing_mass >= total_mass) ++counters_.zero_output_tokens;
    }
    counters_.routed_pairs += rows;
    counters_.fallback_pairs += fallback_pairs;
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
  cudaEvent_t host_ready_ = nullptr;
  std::unique_ptr<cuda::Blas> blas_;  // created once the device is current
  RunnerMemory memory_;
  MoeCounters counters_;
  std::vector<Buffer> device_buffers_;
  std::vector<void*> pinned_;

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
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr, *k_cache_ = nullptr, *v_cache_ = nullptr;

  int32_t *host_ids_ = nullptr, *host_top_ids_ = nullptr, *host_gather_ = nullptr, *host_token_rows_ = nullptr;
  float *host_top_w_ = nullptr, *host_probs_ = nullptr, *host_hidden_ = nullptr, *host_logits_ = nullptr;
  uint8_t* host_missing_ = nullptr;
  cuda::ExpertTask* host_tasks_ = nullptr;

  std::vector<int32_t> expert_rows_, fill_, active_;
  std::vector<const FfnWeights*> views_;
  std::vector<uint8_t> expert_missing_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const Model& model, Backend& backend, int64_t n_ctx, int64_t batch,
                                              ForwardHooks hooks) {
  if (dynamic_cast<CudaBackend*>(&backend) == nullptr)
    throw_error("the CUDA runner needs the CUDA backend (got {})", backend.name());
  return std::make_unique<CudaRunner>(model, backend, n_ctx, batch, std::move(hooks));
}

}  // namespace chronos
