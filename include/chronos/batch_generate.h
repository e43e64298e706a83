// BatchGenerator: many requests through one runner's KV slots, continuously batched. A request
// takes a free slot as soon as one frees, its prompt is prefilled in chunks beside the other
// sequences' decode rows, and every step is one forward over the rows of all live sequences, so
// the experts a step needs are acquired once for every sequence that routes to them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

// Where a running BatchGenerator takes its requests from: a list (generate --jsonl) or the server's
// queue, which requests join while others run. Every call is made on the generator's thread, at a
// step boundary.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  struct Next {
    size_t id;                    // the caller's name for it, passed to the callbacks
    const BatchRequest* request;  // valid until its DoneFn
  };
  // The next request to start, or nullopt when none waits; called while a slot is free.
  virtual std::optional<Next> next() = 0;
  // Nothing is live and next() had none: block until one may be there; false ends the run.
  virtual bool wait() = 0;
  // Whether the run goes on; false ends every live request at this step (kCallback) and the run.
  virtual bool open() { return true; }
  // Whether request `id` still wants its output; false ends it at this step (kCallback).
  virtual bool wanted(size_t id) {
    (void)id;
    return true;
  }
};

// One step of a run, reported after its forward.
struct StepReport {
  int64_t live = 0;         // sequences holding a slot
  int64_t decode_rows = 0;  // one per decoding sequence
  int64_t prompt_rows = 0;  // prompt chunks
  double seconds = 0.0;     // the forward's wall time
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

  // Prompt prefix reuse: a request takes the free slot whose last sequence's tokens share the
  // longest prefix with its prompt and runs only the rest (GenerateStats::reused_prompt_tokens);
  // without a shared prefix, the slot freed longest ago. A model with recurrent or sliding-window
  // layers reuses a slot only when the prompt continues all of it (such a slot cannot be rewound).
  // The KV slots are the budget: a finished sequence's tokens stay until another takes its slot.
  void reuse_prefixes(bool on) { reuse_prefixes_ = on; }

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

  using StepFn = std::function<void(const StepReport&)>;
  // Runs requests from `source` as they come, until it is closed or its wait() returns false. A
  // request's prompt must be non-empty and shorter than the context (Error naming its id).
  BatchTotals run(RequestSource& source, const TextFn& on_text, const DoneFn& on_done, const StepFn& on_step = {});

  int64_t n_ctx() const { return runner_->n_ctx(); }
  const ModelRunner& runner() const { return *runner_; }

 private:
  void check_prompt(size_t id, const BatchRequest& request) const;
  // The free slot to run `prompt` in and how many of its positions to keep.
  std::pair<int32_t, int64_t> choose_slot(std::span<const int32_t> prompt) const;
  // What each slot holds: the tokens whose KV is in it, and when its sequence ended.
  struct SlotHistory {
    bool live = false;
    std::vector<int32_t> tokens;
    int64_t released = 0;
  };
  std::vector<SlotHistory> slots_;
  int64_t releases_ = 0;
  bool reuse_prefixes_ = false;
  const Model& model_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<ModelRunner> runner_;
  Engine engine_;
  int64_t n_seq_;
  int64_t step_rows_;
};

}  // namespace chronos
