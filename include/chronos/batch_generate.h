// BatchGenerator: many requests through one runner's KV slots, continuously batched. A request
// takes a free slot as soon as one frees, its prompt is prefilled in chunks beside the other
// sequences' decode rows, and every step is one forward over the rows of all live sequences, so
// the experts a step needs are acquired once for every sequence that routes to them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "chronos/engine.h"
#include "chronos/generate.h"
#include "chronos/model_runner.h"

namespace chronos {

class ExpertStreamer;
class Model;
class Tokenizer;

struct BatchRequest {
  std::vector<int32_t> prompt;
  GenerateOptions options;  // options.on_step is not called
};

// What a run did as a whole.
struct BatchTotals {
  int64_t requests = 0;  // requests that ran (all, unless keep_going stopped the run)
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t steps = 0;     // forward calls
  int64_t rows = 0;      // rows over all steps
  int64_t max_live = 0;  // most sequences live in one step
  double seconds = 0.0;  // wall time of run()
  // Every generated token over the run's wall time (prefills included).
  double generated_tokens_per_second() const { return seconds > 0 ? double(generated_tokens) / seconds : 0.0; }
};

class BatchGenerator {
 public:
  // runner: made with n_seq KV slots (make_cpu_runner / make_cuda_runner); step_rows: the rows of
  // one step, decode rows first and prompt chunks in what is left (at least one prompt row a step).
  BatchGenerator(const Model& model, const Tokenizer& tokenizer, std::unique_ptr<ModelRunner> runner, int64_t n_seq,
                 int64_t step_rows);
  ~BatchGenerator();

  // As Generator::stream_experts_with: each sequence's request begins on the streamer when it
  // takes its slot, and a step begins before every forward.
  void stream_experts_with(ExpertStreamer* streamer) { engine_ = Engine(runner_.get(), streamer); }

  // Text of request i as it is final (the rules of Generator::generate); returning false ends it.
  using TextFn = std::function<bool(size_t request, std::string_view text)>;
  // Request i has ended, with its statistics (its tokens as they would be generated alone).
  using DoneFn = std::function<void(size_t request, const GenerateStats& stats)>;

  // Runs every request to its end, taking them in order as slots free. Throws Error naming the
  // request (its index) for an empty prompt or one that does not fit the context, before
  // anything runs. The callbacks are called on this thread. When `keep_going` is set and returns
  // false at a step boundary (the reader went away), the live requests end there (kCallback)
  // and the ones not started are dropped without a DoneFn call.
  BatchTotals run(std::span<const BatchRequest> requests, const TextFn& on_text, const DoneFn& on_done,
                  const std::function<bool()>& keep_going = {});

  int64_t n_ctx() const { return runner_->n_ctx(); }
  const ModelRunner& runner() const { return *runner_; }

 private:
  const Model& model_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<ModelRunner> runner_;
  Engine engine_;
  int64_t n_seq_;
  int64_t step_rows_;
};

}  // namespace chronos
