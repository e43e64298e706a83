// The CPU's op table (device_ops.h): src/ops kernels on the thread pool, over a Model::Scratch
// and a host KvStore. Made for each forward call (it holds references only).
#pragma once

#include "chronos/model.h"
#include "model/device_ops.h"
#include "model/scratch.h"

namespace chronos {

class CpuOps final : public DeviceOps {
 public:
  CpuOps(const ModelConfig& config, Model::Scratch& scratch, ThreadPool& pool, KvStore& kv)
      : c_(config), s_(scratch), pool_(pool), kv_(kv) {}

  const char* name() const override { return "CPU"; }
  const ModelViews& weights() const override { return s_.views; }
  const Activations& activations() const override { return s_.act; }
  bool host_readable() const override { return true; }
  void set_rows(const Batch& batch, int64_t begin, int64_t n) override;
  void embed(float* x, const WeightView& table) override;
  void rmsnorm(float* y, const float* x, const float* weight, int64_t rows, int64_t width, float eps) override;
  void project(float* y, const float* x, const WeightView& w, int64_t rows) override;
  void add_bias(float* y, const float* bias, int64_t rows, int64_t width) override;
  void clamp(float* x, int64_t count, float limit) override;
  void add(float* y, const float* x, int64_t count) override;
  void silu_mul(float* out, const float* gate, const float* up, int64_t count) override;
  void rope(float* x, int64_t heads, int64_t row_stride) override;
  void attend(float* out, const float* q, const float* k, const float* v, int64_t layer, int64_t window,
              const float* sinks) override;
  void attend_latent(float* out, const float* q, const float* latent, const float* k_rot, int64_t layer) override;
  void split_heads(float* a, float* b, const float* src, int64_t rows, int64_t heads, int64_t width) override;
  void sigmoid_mul(float* y, const float* gate, int64_t count) override;
  void gated_delta_net(float* out, const float* qkv, const float* z, const float* b, const float* a,
                       int64_t layer) override;
  RoutedRows route(RouterKind kind, const float* bias, int64_t n, bool want_scores) override;
  void gather_rows(float* dst, const float* src, std::span<const int32_t> rows, int64_t width) override;
  void expert_wave(int64_t layer, const MoePlan& plan, std::span<const int32_t> ids,
                   std::span<const FfnWeights* const> views) override;
  void combine(float* out, const MoePlan& plan, const float* shared, const float* shared_gate_logit,
               int64_t n) override;
  std::span<const float> to_host(const float* values, int64_t count) override { return {values, size_t(count)}; }
  void lm_head(float* host_logits, const float* x, const WeightView& output, int64_t rows) override;

 private:
  const ModelConfig& c_;
  Model::Scratch& s_;
  ThreadPool& pool_;
  KvStore& kv_;
  const Batch* batch_ = nullptr;  // the chunk's rows
  int64_t begin_ = 0, n_ = 0;
};

}  // namespace chronos
