// ModelRunner: where a model's forward pass runs and where its KV cache lives. The CPU runner is
// Model::forward over a host KV cache; the CUDA runner keeps the dense weights, the KV cache and
// every activation in VRAM and takes routed experts from the model's ExpertProvider (an
// ExpertStreamer on the CUDA backend: slots in VRAM, filled over the copy stream). A runner is
// given its hooks when it is made and keeps them for its life.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "chronos/model.h"

namespace chronos {

class Backend;
class ThreadPool;

// Bytes a runner holds, by kind (device memory on CUDA, host memory on CPU). Expert-cache slots
// are the ExpertStreamer's and are reported by it.
struct RunnerMemory {
  int64_t dense_weight_bytes = 0;   // weights copied to the device (0 on CPU: memory-mapped)
  int64_t expert_weight_bytes = 0;  // routed experts copied to the device (checkpoints only)
  int64_t kv_cache_bytes = 0;
  int64_t workspace_bytes = 0;  // activations, RoPE tables, routing buffers
  int64_t pinned_bytes = 0;     // page-locked host buffers of the runner itself
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual std::string device() const = 0;
  // Runs tokens at positions pos .. pos + n - 1 (appending to the KV cache) and writes host
  // logits: [n, n_vocab] when all_logits, else [1, n_vocab] for the last token.
  virtual void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) = 0;
  // Several sequences (a runner made with n_seq slots; the one-sequence forward above runs sequence
  // 0, taking its slot on its first call if it is free): add_sequence() takes a free slot and
  // returns its sequence, remove_sequence() frees it, and forward(batch) runs rows of any sequences
  // in one step, writing logits [batch.n_logits(), n_vocab]. Throw Error for a full store or for
  // bad rows.
  virtual int32_t add_sequence() = 0;
  // Takes the free KV slot `seq` keeping the first `keep` positions its last sequence left there
  // (KvStore::allocate(slot, keep)): a prompt that begins with those tokens continues from them.
  virtual int32_t add_sequence(int32_t seq, int64_t keep) = 0;
  virtual void remove_sequence(int32_t seq) = 0;
  virtual void forward(const Batch& batch, float* logits) = 0;
  virtual int64_t n_ctx() const = 0;
  virtual RunnerMemory memory() const = 0;
  virtual MoeCounters counters() const = 0;
};

// n_seq: KV slots of n_ctx positions each.
std::unique_ptr<ModelRunner> make_cpu_runner(const Model& model, ThreadPool& pool, int64_t n_ctx, int64_t batch,
                                             ForwardHooks hooks = {}, int64_t n_seq = 1);

// The CUDA runner on `backend` (a CUDA backend from make_backend). Copies the dense weights (and,
// for a checkpoint, every routed expert) to the device; a pack folder needs hooks.experts, which
// the runner makes wait on its compute stream for its life. Throws Error when this build has no
// CUDA backend or the device memory does not suffice.
std::unique_ptr<ModelRunner> make_cuda_runner(const Model& model, Backend& backend, int64_t n_ctx, int64_t batch,
                                              ForwardHooks hooks = {}, int64_t n_seq = 1);

}  // namespace chronos
