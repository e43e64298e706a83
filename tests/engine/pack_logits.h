// All-position logits of a fixed prompt from a model folder or file: a checkpoint or GGUF file with
// its experts resident, or a pack whose experts stream through a cache (wait mode), for the engine
// tests that compare packs with what they were made from.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "chronos/backend.h"
#include "chronos/expert_streamer.h"
#include "chronos/model_runner.h"
#include "chronos/thread_pool.h"

namespace chronos::testing {

// The logits of the prompt (all positions; prompt_for(n_vocab) gives it), then of `n_decode`
// single-token steps, each token given by next_token(step, the previous row of logits). A pack's
// cache holds `budget_bytes` (0: every expert, all loaded before the forward).
inline std::vector<float> logits_of_steps(const std::filesystem::path& dir,
                                          const std::function<std::vector<int32_t>(int64_t)>& prompt_for,
                                          int64_t n_decode,
                                          const std::function<int32_t(int64_t, const float*)>& next_token,
                                          int64_t budget_bytes, int64_t threads) {
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
  const std::vector<int32_t> prompt = prompt_for(c.n_vocab);
  const int64_t n_tokens = std::ssize(prompt);
  std::vector<float> out(size_t((n_tokens + n_decode) * c.n_vocab));
  if (streamer) {  // as the generator does before a prefill
    streamer->begin_request();
    streamer->begin_step();
  }
  runner->forward(prompt, 0, out.data(), true);
  for (int64_t step = 0; step < n_decode; ++step) {
    const int32_t next = next_token(step, out.data() + (n_tokens + step - 1) * c.n_vocab);
    if (streamer) streamer->begin_step();
    runner->forward({&next, 1}, n_tokens + step, out.data() + (n_tokens + step) * c.n_vocab, false);
  }
  return out;
}

// A fixed prompt of n_tokens, then `decode_steps` greedy single-token steps.
inline std::vector<float> prompt_logits(const std::filesystem::path& dir, int64_t n_tokens = 12,
                                        int64_t budget_bytes = 0, int64_t threads = 2, int64_t decode_steps = 0) {
  int64_t n_vocab = 0;
  const auto prompt = [&](int64_t vocab) {
    n_vocab = vocab;
    std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
    for (int64_t i = 0; i < n_tokens; ++i) tokens[size_t(i)] = int32_t((i * 53 + 7) % n_vocab);
    return tokens;
  };
  const auto greedy = [&](int64_t, const float* last) {
    return int32_t(std::max_element(last, last + n_vocab) - last);
  };
  return logits_of_steps(dir, prompt, decode_steps, greedy, budget_bytes, threads);
}

// The prompt, then the `decode` tokens one step each, given rather than sampled: two models whose
// logits differ slightly still see the same tokens.
inline std::vector<float> forced_logits(const std::filesystem::path& dir, const std::vector<int32_t>& prompt,
                                        const std::vector<int32_t>& decode, int64_t budget_bytes = 0,
                                        int64_t threads = 2) {
  const auto given = [&decode](int64_t step, const float*) { return decode[size_t(step)]; };
  const auto given_prompt = [&prompt](int64_t) { return prompt; };
  return logits_of_steps(dir, given_prompt, std::ssize(decode), given, budget_bytes, threads);
}

}  // namespace chronos::testing
