// Engine: one model's ModelRunner and, for a pack folder, the ExpertStreamer its hooks come from,
// driven together. The step protocol is written here once for generate, perplexity, the benches
// and the server: a request begins per sequence (its prefill comes next) and a step begins before
// every forward call, of one sequence or of a batch of many.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "chronos/model_runner.h"

namespace chronos {

class ExpertStreamer;

class Engine {
 public:
  // Neither is owned: the streamer (if any) made the runner's hooks and outlives it.
  Engine(ModelRunner* runner = nullptr, ExpertStreamer* streamer = nullptr) : runner_(runner), streamer_(streamer) {}

  ModelRunner* runner() const { return runner_; }
  ExpertStreamer* streamer() const { return streamer_; }

  // A request of `sequence` begins: its prefill is the next forward of its rows.
  void begin_request(int32_t sequence = 0) const;
  // One step of sequence 0 (ModelRunner::forward): the streamer's step begins, then `before_step`
  // runs (when set), then the runner's forward.
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits = false,
               const std::function<void()>& before_step = {}) const;
  // One step of many sequences (ModelRunner::forward(batch)).
  void forward(const Batch& batch, float* logits) const;
  // A new sequence (the runner's free KV slot) whose request begins; and its end.
  int32_t add_sequence() const;
  // The free slot `sequence`, keeping its first `keep` positions (ModelRunner::add_sequence).
  int32_t add_sequence(int32_t sequence, int64_t keep) const;
  void remove_sequence(int32_t sequence) const;

 private:
  void begin_step() const;
  ModelRunner* runner_;
  ExpertStreamer* streamer_;
};

}  // namespace chronos
