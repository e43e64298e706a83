// The CPU ModelRunner: Model::forward over a host KV cache and scratch; and the CUDA runner's
// stand-in when the build has no CUDA backend.
#include "chronos/model_runner.h"

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/thread_pool.h"
#include "model/scratch.h"

namespace chronos {
namespace {

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(const Model& model, ThreadPool& pool, int64_t n_ctx, int64_t batch, ForwardHooks hooks, int64_t n_seq)
      : model_(model),
        pool_(pool),
        hooks_(std::move(hooks)),
        kv_(model.config(), n_ctx, n_seq, batch),
        scratch_(model.make_scratch(batch, n_ctx)) {
    if (model.experts_streamed() && hooks_.experts == nullptr)
      throw_error("a pack folder's experts need an expert streamer");
  }
  std::string device() const override { return "cpu"; }
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) override {
    model_.forward(tokens, pos, kv_, *scratch_, pool_, logits, all_logits, hooks_);
  }
  int32_t add_sequence() override { return kv_.allocate(); }
  int32_t add_sequence(int32_t seq, int64_t keep) override { return kv_.allocate(seq, keep); }
  void remove_sequence(int32_t seq) override { kv_.free(seq); }
  void forward(const Batch& batch, float* logits) override {
    model_.forward(batch, kv_, *scratch_, pool_, logits, hooks_);
  }
  int64_t n_ctx() const override { return kv_.n_ctx(); }
  RunnerMemory memory() const override {
    RunnerMemory m;
    m.kv_cache_bytes = kv_.n_bytes();
    const Model::Scratch& s = *scratch_;
    int64_t floats = 0;
    for (const auto* v : {&s.x, &s.xn, &s.q, &s.k, &s.v, &s.attn, &s.ffn_out, &s.ff_gate, &s.ff_up, &s.ff_in,
                          &s.ff_down, &s.shared_out, &s.shared_logit, &s.router, &s.top_w, &s.rope_cos, &s.rope_sin})
      floats += std::ssize(*v);
    m.workspace_bytes = floats * int64_t(sizeof(float));
    return m;
  }
  MoeCounters counters() const override { return Model::counters(*scratch_); }

 private:
  const Model& model_;
  ThreadPool& pool_;
  ForwardHooks hooks_;
  KvStore kv_;
  Model::ScratchPtr scratch_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const Model& model, ThreadPool& pool, int64_t n_ctx, int64_t batch,
                                             ForwardHooks hooks, int64_t n_seq) {
  return std::make_unique<CpuRunner>(model, pool, n_ctx, batch, std::move(hooks), n_seq);
}

}  // namespace chronos
