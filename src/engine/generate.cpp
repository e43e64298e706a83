// Generator: prefill in batches, then one token at a time until a stop condition.
#include "chronos/generate.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/tokenizer.h"
#include "engine/stop_matcher.h"

namespace chronos {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void RequestOverrides::apply(GenerateOptions& options) const {
  if (max_tokens) options.max_new_tokens = *max_tokens;
  SamplingParams& p = options.sampling;
  if (temperature) p.temperature = *temperature;
  if (top_k) p.top_k = *top_k;
  if (top_p) p.top_p = *top_p;
  if (min_p) p.min_p = *min_p;
  if (repeat_penalty) p.repetition_penalty = *repeat_penalty;
  if (seed) p.seed = *seed;
  if (stop) options.stop_strings = *stop;
  if (ignore_eos) options.ignore_eos = *ignore_eos;
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kEos: return "eos";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kContextFull: return "context_full";
    case StopReason::kCallback: return "callback";
  }
  return "unknown";
}

double GenerateStats::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? double(prompt_tokens) / prefill_seconds : 0.0;
}
double GenerateStats::decode_tokens_per_second() const {
  return decode_seconds > 0 && generated_tokens > 1 ? double(generated_tokens - 1) / decode_seconds : 0.0;
}

Generator::Generator(const Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int64_t n_ctx, int64_t batch,
                     ForwardHooks hooks)
    : Generator(model, tokenizer, make_cpu_runner(model, pool, n_ctx, batch, std::move(hooks))) {}

Generator::Generator(const Model& model, const Tokenizer& tokenizer, std::unique_ptr<ModelRunner> runner)
    : model_(model),
      tokenizer_(tokenizer),
      runner_(std::move(runner)),
      engine_(runner_.get()),
      n_ctx_(runner_->n_ctx()),
      logits_(size_t(model.config().n_vocab)) {}

Generator::~Generator() = default;

GenerateStats Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                  const TextFn& on_text) {
  GenerateStats stats;
  stats.prompt_tokens = std::ssize(prompt);
  if (prompt.empty()) throw_error("the prompt is empty (no tokens to start from)");
  if (stats.prompt_tokens >= n_ctx_)
    throw_error("the prompt is {} tokens, but the context holds {} (raise --ctx-size, at most {})", stats.prompt_tokens,
                n_ctx_, model_.config().n_ctx_train);
  Sampler sampler(options.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  history.reserve(size_t(stats.prompt_tokens + options.max_new_tokens));
  TokenStreamDecoder decoder(tokenizer_, /*skip_special_tokens=*/false);
  StopMatcher matcher(options.stop_strings);

  const auto start = std::chrono::steady_clock::now();
  // options.on_step sees every forward step after the streamer begins it.
  const auto on_step = [&](int64_t pos) {
    return options.on_step ? std::function<void()>([&options, pos] { options.on_step(pos); }) : nullptr;
  };
  engine_.begin_request();
  engine_.forward(prompt, 0, logits_.data(), false, on_step(0));
  stats.prefill_seconds = seconds_since(start);
  auto decode_start = start;
  int64_t pos = stats.prompt_tokens;
  bool stopped = false;
  while (!stopped) {
    if (stats.generated_tokens >= options.max_new_tokens) {
      stats.stop_reason = StopReason::kMaxTokens;
      break;
    }
    const int32_t id = sampler.sample(logits_, history);
    if (stats.generated_tokens == 0) {
      stats.time_to_first_token_seconds = seconds_since(start);
      decode_start = std::chrono::steady_clock::now();
    }
    const bool is_eos = std::find(options.eos_ids.begin(), options.eos_ids.end(), id) != options.eos_ids.end();
    if (is_eos && !options.ignore_eos) {
      stats.stop_reason = StopReason::kEos;
      ++stats.generated_tokens;
      break;
    }
    history.push_back(id);
    stats.tokens.push_back(id);
    ++stats.generated_tokens;
    const std::string text = matcher.push(decoder.push(id), stopped);
    if (stopped) stats.stop_reason = StopReason::kStopString;
    if (!text.empty() && !on_text(text)) {
      stats.stop_reason = StopReason::kCallback;
      stopped = true;
    }
    if (stopped) break;
    if (pos + 1 >= n_ctx_) {
      stats.stop_reason = StopReason::kContextFull;
      break;
    }
    if (stats.generated_tokens >= options.max_new_tokens) {
      stats.stop_reason = StopReason::kMaxTokens;
      break;
    }
    engine_.forward(std::span<const int32_t>(&history.back(), 1), pos, logits_.data(), false, on_step(pos));
    ++pos;
  }
  if (stats.stop_reason != StopReason::kStopString && stats.stop_reason != StopReason::kCallback) {
    bool ignored = false;
    std::string rest = matcher.push(decoder.finish(), ignored);
    rest += matcher.flush();
    if (!rest.empty()) on_text(rest);
  }
  stats.decode_seconds = stats.generated_tokens > 0 ? seconds_since(decode_start) : 0.0;
  return stats;
}

}  // namespace chronos
