// Engine (engine.h): the step protocol of a runner and its expert streamer.
#include "chronos/engine.h"

#include "chronos/error.h"
#include "chronos/expert_streamer.h"

namespace chronos {

void Engine::begin_request(int32_t sequence) const {
  if (streamer_ != nullptr) streamer_->begin_request(sequence);
}

void Engine::begin_step() const {
  CHRONOS_CHECK_MSG(runner_ != nullptr, "an engine without a runner");
  if (streamer_ != nullptr) streamer_->begin_step();
}

void Engine::forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits,
                     const std::function<void()>& before_step) const {
  begin_step();
  if (before_step) before_step();
  runner_->forward(tokens, pos, logits, all_logits);
}

void Engine::forward(const Batch& batch, float* logits) const {
  begin_step();
  runner_->forward(batch, logits);
}

int32_t Engine::add_sequence() const {
  CHRONOS_CHECK_MSG(runner_ != nullptr, "an engine without a runner");
  const int32_t sequence = runner_->add_sequence();
  begin_request(sequence);
  return sequence;
}

int32_t Engine::add_sequence(int32_t sequence, int64_t keep) const {
  CHRONOS_CHECK_MSG(runner_ != nullptr, "an engine without a runner");
  runner_->add_sequence(sequence, keep);
  begin_request(sequence);
  return sequence;
}

void Engine::remove_sequence(int32_t sequence) const { runner_->remove_sequence(sequence); }

}  // namespace chronos
