// All-position logits of a fixed prompt from a model folder or file: a checkpoint or GGUF file with
// its experts resident, or a pack whose experts stream through a cache (wait mode), for the engine
// tests that compare packs with what they were made from.
#pragma once

#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "chronos/backend.h"
#include "chronos/expert_streamer.h"
#include "chronos/model_runner.h"
#include "chronos/thread_pool.h"

namespace chronos::testing {

// A pack's cache holds `budget_bytes` (0: every expert, all loaded before the forward). After the
// prompt, `decode_steps` greedy single-token steps append one row of logits each.
inline std::vector<float> prompt_logits(const std::filesystem::path& dir, int64_t n_tokens = 12,
                                        int64_t budget_bytes = 0, int64_t threads = 2, int64_t decode_steps = 0) {
  const auto model = Model::load(dir);
  const ModelConfig& c = model->config();
  ThreadPool pool(threads);
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertStreamer> streamer;
  ForwardHooks hooks;
  if (model->experts_streamed()) {
    backend = make_cpu_backend();
    StreamerOptions options;
    options.budget_bytes = budget_bytes > 0 ? budget_bytes : int64_t(1) << 30;
    streamer = std::make_unique<ExpertStreamer>(*model, dir, *backend, options);
    if (budget_bytes == 0) streamer->load_all();
    hooks = streamer->hooks();
  }
  auto runner = make_cpu_runner(*model, pool, 64, 8, hooks);
  std::vector<int32_t> prompt(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) prompt[size_t(i)] = int32_t((i * 53 + 7) % c.n_vocab);
  std::vector<float> out(size_t((n_tokens + decode_steps) * c.n_vocab));
  if (streamer) {  // as the generator does before a prefill
    streamer->begin_request();
    streamer->begin_step();
  }
  runner->forward(prompt, 0, out.data(), true);
  for (int64_t step = 0; step < decode_steps; ++step) {
    const float* last = out.data() + (n_tokens + step - 1) * c.n_vocab;
    const int32_t next = int32_t(std::max_element(last, last + c.n_vocab) - last);
    if (streamer) streamer->begin_step();
    runner->forward({&next, 1}, n_tokens + step, out.data() + (n_tokens + step) * c.n_vocab, false);
  }
  return out;
}

}  // namespace chronos::testing
