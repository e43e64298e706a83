// Generator: prefill + decode loop with stop conditions, streaming text through a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/engine.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/sampler.h"

namespace chronos {

class Tokenizer;
class ThreadPool;

class ExpertStreamer;

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;  // generation ends before the first occurrence
  std::vector<int32_t> eos_ids;           // any of these ends generation (not emitted)
  bool ignore_eos = false;
  // Called before every forward step with the position of its first token (after the streamer's
  // own step, when one is attached).
  std::function<void(int64_t pos)> on_step;
};

// What one request of many (a --jsonl line, a server request) sets over the defaults' options.
struct RequestOverrides {
  std::optional<int64_t> max_tokens;
  std::optional<float> temperature, top_p, min_p, repeat_penalty;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<std::vector<std::string>> stop;
  std::optional<bool> ignore_eos;
  // The fields that are set, written over `options`.
  void apply(GenerateOptions& options) const;
};

enum class StopReason { kMaxTokens, kEos, kStopString, kContextFull, kCallback };
const char* stop_reason_name(StopReason reason);

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t reused_prompt_tokens = 0;  // of those, tokens whose KV an earlier sequence left (not run again)
  int64_t generated_tokens = 0;
  double prefill_seconds = 0.0;
  double time_to_first_token_seconds = 0.0;  // prefill + first sample
  double decode_seconds = 0.0;               // all tokens after the first
  StopReason stop_reason = StopReason::kMaxTokens;
  std::vector<int32_t> tokens;  // generated ids (without a stopping EOS)
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

// Called with each piece of generated text as soon as it is complete UTF-8 and cannot be part
// of a stop string. Returning false stops generation.
using TextFn = std::function<bool(std::string_view text)>;

class Generator {
 public:
  // On the CPU. n_ctx: positions of the KV cache; batch: tokens per prefill step.
  Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int64_t n_ctx, int64_t batch = 32,
            ForwardHooks hooks = {});
  // On any runner (make_cuda_runner for --device cuda).
  Generator(const Model& model, const Tokenizer& tokenizer, std::unique_ptr<ModelRunner> runner);
  ~Generator();

  // A pack folder's experts: the generator begins a request on `streamer` before the prompt and a
  // step before every forward (protections expire, stale prefetches are cancelled, the intent set
  // is taken from the prompt). The streamer must outlive the generator; nullptr detaches it.
  void stream_experts_with(ExpertStreamer* streamer) { engine_ = Engine(runner_.get(), streamer); }

  // Runs one request from an empty cache. Throws Error when the prompt does not fit the context.
  GenerateStats generate(std::span<const int32_t> prompt, const GenerateOptions& options, const TextFn& on_text);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_bytes() const { return runner_->memory().kv_cache_bytes; }
  const ModelRunner& runner() const { return *runner_; }

 private:
  const Model& model_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<ModelRunner> runner_;
  Engine engine_;  // the runner and the streamer (if any)
  int64_t n_ctx_;
  std::vector<float> logits_;
};

}  // namespace chronos
