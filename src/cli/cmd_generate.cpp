// chronos generate: prompt in (-p, -f or stdin), generated text streamed to stdout, stats on stderr.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "chronos/backend.h"
#include "chronos/budget.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/generation_config.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/reasoning.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/open_tokenizer.h"
#include "cli/streaming_flags.h"

namespace chronos::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;
  int64_t n_predict = 128;
  std::optional<float> temperature;
  std::optional<int64_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repeat_penalty;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool chat = false;
  bool show_reasoning = false;
  std::string system;
  ChatFlags chat_flags;
  int threads = 0;
  int64_t ctx_size = 0;
  int64_t batch_size =
      128;  // prefill: 128 beat 64 in 8 of 10 side-by-side runs, 64 beat 32 by 10-25% (docs/quantization.md)
  std::string stats_json;
  bool verbose = false;
  StreamingFlags streaming;
};

// --stop "\n\n" as a shell passes it (backslash, n): the usual escapes \n, \t, \r and \\ become
// the characters they name; any other backslash stays as it is.
std::string unescape_stop(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    switch (text[i + 1]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      default: out += text[i]; continue;
    }
    ++i;
  }
  return out;
}

std::string read_prompt(const GenerateArgs& args) {
  if (args.prompt) return *args.prompt;
  std::string text;
  if (args.prompt_file) {
    if (std::error_code ec; std::filesystem::is_directory(*args.prompt_file, ec))
      throw_error("{}: is a folder, not a prompt file", *args.prompt_file);
    std::ifstream in(*args.prompt_file, std::ios::binary);
    if (!in) throw_error("{}: cannot open prompt file", *args.prompt_file);
    text.assign(std::istreambuf_iterator<char>(in), {});
    if (in.bad()) throw_error("{}: read error", *args.prompt_file);
    return text;
  }
  text.assign(std::istreambuf_iterator<char>(std::cin), {});
  return text;
}

int run_generate(const GenerateArgs& args) {
  if (args.verbose) spdlog::set_level(spdlog::level::debug);
  if (!args.system.empty() && !args.chat) throw UsageError("--system needs --chat");
  const bool conversation = !args.chat_flags.messages_file.empty();
  if (args.show_reasoning && !args.chat && !conversation)
    throw UsageError("--show-reasoning needs --chat or --messages");
  if (conversation && (args.prompt || args.prompt_file || !args.system.empty())) {
    throw UsageError("--messages is the whole conversation: it takes no -p, -f or --system");
  }
  if (any_chat_flag(args.chat_flags) && !args.chat && !conversation) {
    throw UsageError("--tools, --chat-kwarg and --chat-template need --chat or --messages");
  }

  if (!args.stats_json.empty()) {
    const auto parent = std::filesystem::absolute(args.stats_json).parent_path();
    if (!std::filesystem::is_directory(parent))
      throw_error("{}: the folder for --stats-json does not exist", args.stats_json);
  }
  const auto dir = resolve_model_dir(args.model);
  // Before loading: fail fast on bad input.
  const std::string prompt_text = conversation ? std::string() : read_prompt(args);
  ChatRequest chat_request = read_chat_request(args.chat_flags);
  const std::string chat_template_override = read_chat_template_file(args.chat_flags);
  const auto load_start = std::chrono::steady_clock::now();
  const StreamingFlags& streaming = args.streaming;
  streamer_options(streaming, int64_t(1) << 40);  // every streaming flag checked before the model loads
  const auto model = Model::load(dir, model_load_options(streaming, dir));
  const Tokenizer tokenizer = open_tokenizer(*model, dir);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const ModelConfig& cfg = model->config();

  std::vector<int32_t> prompt;
  // A chat reply's reasoning (<think> ... </think>) is hidden unless --show-reasoning.
  std::optional<ReasoningSplitter> reasoning;
  if (args.chat || conversation) {
    if (!conversation) {
      if (!args.system.empty()) chat_request.messages.push_back({{"role", "system"}, {"content", args.system}});
      chat_request.messages.push_back({{"role", "user"}, {"content", prompt_text}});
    }
    const std::string rendered = tokenizer.apply_chat_template(chat_request, chat_template_override);
    prompt = tokenizer.encode(rendered, /*add_special_tokens=*/false);
    if (!args.show_reasoning) reasoning.emplace(prompt_opens_reasoning(rendered));
  } else {
    prompt = tokenizer.encode(prompt_text, /*add_special_tokens=*/true);
  }
  if (prompt.empty()) throw_error("the prompt is empty");

  SamplingParams sampling = read_generation_defaults(dir);
  if (args.temperature) sampling.temperature = *args.temperature;
  if (args.top_k) sampling.top_k = *args.top_k;
  if (args.top_p) sampling.top_p = *args.top_p;
  if (args.min_p) sampling.min_p = *args.min_p;
  if (args.repeat_penalty) sampling.repetition_penalty = *args.repeat_penalty;
  sampling.seed = args.seed;
  validate_sampling(sampling);

  GenerateOptions options;
  options.max_new_tokens = args.n_predict;
  options.sampling = sampling;
  for (const std::string& stop : args.stop) {
    options.stop_strings.push_back(unescape_stop(stop));
    if (options.stop_strings.back().empty()) throw UsageError("--stop: the stop string is empty");
  }
  options.ignore_eos = args.ignore_eos;
  options.eos_ids = cfg.eos_token_ids;
  for (int32_t id : tokenizer.eos_ids())
    if (std::find(options.eos_ids.begin(), options.eos_ids.end(), id) == options.eos_ids.end())
      options.eos_ids.push_back(id);

  const int64_t n_ctx = args.ctx_size > 0 ? args.ctx_size : std::min<int64_t>(cfg.n_ctx_train, 4096);
  if (n_ctx > cfg.n_ctx_train)
    throw UsageError(
        fmt::format("--ctx-size {} exceeds the model's max_position_embeddings {}", n_ctx, cfg.n_ctx_train));
  warn_if_oversubscribed(args.threads);
  ThreadPool pool(args.threads > 0 ? args.threads : available_cpus());
  // The CPU backend is only needed for streamed experts; a CUDA device always.
  const bool on_cuda = streaming.device != "cpu";
  std::unique_ptr<Backend> backend;
  if (on_cuda || model->experts_streamed()) backend = make_backend(streaming.device);
  if (!streaming.pinned_budget.empty() && !(on_cuda && model->experts_streamed()))
    throw UsageError(
        "--pinned-budget needs --device cuda and streamed experts (it bounds the page-locked staging tier)");
  // A pack folder, or a .gguf file read in place, streams its routed experts through a budgeted cache.
  std::unique_ptr<ExpertStreamer> streamer;
  if (model->experts_streamed()) {
    streamer = make_streamer(*model, dir, *backend, streaming, n_ctx);
  } else if (streaming.asks_for_streaming()) {
    throw UsageError(kNeedsStreamedModel);
  }
  const ForwardHooks hooks = streamer ? streamer->hooks() : ForwardHooks{};
  Generator generator =
      on_cuda ? Generator(*model, tokenizer, make_cuda_runner(*model, *backend, n_ctx, args.batch_size, hooks))
              : Generator(*model, tokenizer, pool, n_ctx, args.batch_size, hooks);
  generator.stream_experts_with(streamer.get());
  const RunnerMemory memory = generator.runner().memory();
  if (on_cuda) {
    spdlog::info(
        "{}: VRAM: dense weights {} B, routed experts {} B (checkpoint) or {} B of cache slots (pack), "
        "KV cache {} B, workspace {} B; page-locked: runner {} B, staging {} B",
        streaming.device, memory.dense_weight_bytes, memory.expert_weight_bytes,
        streamer ? streamer->n_slots() * streamer->cache().slot_bytes() : 0, memory.kv_cache_bytes,
        memory.workspace_bytes, memory.pinned_bytes,
        streamer ? streamer->stats().prefetch.staging_buffers * streamer->cache().slot_bytes() : 0);
  }
  spdlog::info("{}: {} layers, {} experts (top-{}), {} prompt tokens, {} threads", dir.string(), cfg.n_layer,
               cfg.n_expert, cfg.n_expert_used, prompt.size(), pool.size());

  // A closed pipe (`| head`) ends generation quietly; any other write error (a full disk,
  // /dev/full) is an error, or the output would be lost while the run reports success.
  int write_error = 0;
  size_t hidden_bytes = 0;
  const auto write_text = [&](std::string_view text) {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
      write_error = errno != 0 ? errno : EIO;
      return false;
    }
    return true;
  };
  const auto write_answer = [&](const ReasoningParts& parts) {
    hidden_bytes += parts.reasoning.size();
    return parts.content.empty() || write_text(parts.content);
  };
  const GenerateStats stats = generator.generate(prompt, options, [&](std::string_view text) {
    return reasoning ? write_answer(reasoning->push(text)) : write_text(text);
  });
  if (reasoning && write_error == 0) {
    write_answer(reasoning->finish());
    if (hidden_bytes > 0)
      fmt::print(stderr, "chronos: {} bytes of reasoning not shown (--show-reasoning prints them)\n", hidden_bytes);
  }
  if (write_error == 0 && isatty(fileno(stdout)) && (std::fputc('\n', stdout) == EOF || std::fflush(stdout) != 0))
    write_error = errno != 0 ? errno : EIO;
  if (write_error != 0 && write_error != EPIPE)
    throw_error("standard output: cannot write the generated text: {}", std::strerror(write_error));

  if (streamer) {
    const StreamerStats ss = streamer->stats();
    fmt::print(
        stderr,
        "chronos: experts: {} lookups, {:.1f}% hits, {} misses, {} fallbacks, {} low-bit, stalled {:.1f} ms on I/O, "
        "read {:.1f} MiB in {} reads ({}), cache {} slots\n",
        ss.lookups, 100.0 * double(ss.hits) / double(std::max<int64_t>(1, ss.lookups)), ss.misses, ss.fallbacks,
        ss.lowbit, ss.stall_seconds * 1e3, double(ss.prefetch.bytes_read) / (1 << 20), ss.prefetch.reads,
        streamer->prefetcher().io_backend(), streamer->n_slots());
  }
  fmt::print(stderr,
             "chronos: prompt {} tokens, prefill {:.1f} tok/s, first token {:.0f} ms, generated {} tokens, "
             "decode {:.2f} tok/s, stop: {}\n",
             stats.prompt_tokens, stats.prefill_tokens_per_second(), stats.time_to_first_token_seconds * 1e3,
             stats.generated_tokens, stats.decode_tokens_per_second(), stop_reason_name(stats.stop_reason));
  if (!args.stats_json.empty()) {
    nlohmann::json j = {
        {"model", dir.string()},
        {"architecture", cfg.arch_name()},
        {"threads", pool.size()},
        {"n_ctx", n_ctx},
        {"load_seconds", load_seconds},
        {"prompt_tokens", stats.prompt_tokens},
        {"generated_tokens", stats.generated_tokens},
        {"time_to_first_token_seconds", stats.time_to_first_token_seconds},
        {"prefill_seconds", stats.prefill_seconds},
        {"prefill_tokens_per_second", stats.prefill_tokens_per_second()},
        {"decode_seconds", stats.decode_seconds},
        {"decode_tokens_per_second", stats.decode_tokens_per_second()},
        {"stop_reason", stop_reason_name(stats.stop_reason)},
        {"peak_rss_bytes", peak_rss_bytes()},
        {"device", generator.runner().device()},
        {"kv_cache_bytes", memory.kv_cache_bytes},
        {"device_dense_weight_bytes", memory.dense_weight_bytes},
        {"device_expert_weight_bytes", memory.expert_weight_bytes},
        {"workspace_bytes", memory.workspace_bytes},
        {"pinned_bytes", memory.pinned_bytes},
        {"dense_bytes", model->sizes().dense_bytes},
        {"expert_bytes", model->sizes().expert_bytes},
    };
    if (streamer) {
      const StreamerStats ss = streamer->stats();
      j["experts"] = streamer_stats_json(ss, streamer->extent_bytes());
      j["experts"].update({{"reads", ss.prefetch.reads},
                           {"cache_slots", streamer->n_slots()},
                           {"peak_cache_bytes", ss.cache.peak_bytes},
                           {"budget_bytes", streamer->cache().budget_bytes()},
                           {"lowbit_bytes", streamer->lowbit_bytes()},
                           {"device_waits", ss.device_waits},
                           {"copies", ss.prefetch.copies},
                           {"staging_bytes", ss.prefetch.staging_buffers * streamer->cache().slot_bytes()}});
    }
    write_file_atomically(args.stats_json, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

Command register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt (-p, -f or stdin), streamed to stdout");
  sub->add_option("-m,--model", args->model,
                  "Model folder (Hugging Face checkpoint); default: $CHRONOS_MODEL or the bundled model");
  auto* p = sub->add_option("-p,--prompt", args->prompt, "Prompt text");
  sub->add_option("-f,--file", args->prompt_file, "Read the prompt from a file")->excludes(p);
  sub->add_option("-n,--n-predict", args->n_predict, "Tokens to generate at most")
      ->capture_default_str()
      ->check(count_in<int64_t>(0, kMaxNewTokens));
  sub->add_option("--temp", args->temperature,
                  "Temperature; 0 = greedy (default: generation_config.json, else greedy)");
  sub->add_option("--top-k", args->top_k, "Keep the k most likely tokens; 0 = off");
  sub->add_option("--top-p", args->top_p, "Nucleus sampling mass; 1 = off");
  sub->add_option("--min-p", args->min_p, "Drop tokens below min-p times the top probability; 0 = off");
  sub->add_option("--repeat-penalty", args->repeat_penalty, "Repetition penalty (transformers' rule); 1 = off");
  sub->add_option("-s,--seed", args->seed, "Random seed (same seed, same output)")
      ->capture_default_str()
      ->check(decimal_u64());
  sub->add_option("--stop", args->stop, "Stop before this string (repeatable; \\n, \\t, \\r and \\\\ are escapes)");
  sub->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at end-of-sequence tokens");
  sub->add_flag("--chat", args->chat, "Wrap the prompt in the model's chat template");
  sub->add_option("--system", args->system, "System message for --chat");
  sub->add_flag("--show-reasoning", args->show_reasoning,
                "Print a thinking model's reasoning (<think> ... </think>) too; without it only the answer is printed");
  add_chat_flags(sub, args->chat_flags);
  sub->add_option("-t,--threads", args->threads, "Threads (default: all available CPUs)")
      ->check(count_in(1, kMaxThreads));
  sub->add_option("-c,--ctx-size", args->ctx_size, "Context length (default: min(max_position_embeddings, 4096))")
      ->check(count_in<int64_t>(1, kMaxContext));
  sub->add_option("-b,--batch-size", args->batch_size, "Prompt tokens per prefill step")
      ->capture_default_str()
      ->check(count_in<int64_t>(1, kMaxBatch));
  sub->add_option("--stats-json", args->stats_json, "Write load/prefill/decode statistics as JSON to this file");
  sub->add_flag("-v,--verbose", args->verbose, "Debug logging on stderr");
  add_streaming_flags(sub, args->streaming, /*sweep=*/false);
  return Command{sub, [args] { return run_generate(*args); }};
}

}  // namespace chronos::cli
