// The session generate and serve open (session.h).
#include "cli/session.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "chronos/budget.h"
#include "chronos/error.h"
#include "chronos/generation_config.h"
#include "cli/flags.h"
#include "cli/open_tokenizer.h"

namespace chronos::cli {

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

// Loads the model and its tokenizer and makes the streamer its flags ask for; n_seq sequences will
// share the streamer.
Session open_session(const GenerateArgs& args) {
  Session s;
  s.dir = resolve_model_dir(args.model);
  const auto load_start = std::chrono::steady_clock::now();
  const StreamingFlags& streaming = args.streaming;
  streamer_options(streaming, int64_t(1) << 40);  // every streaming flag checked before the model loads
  s.model = Model::load(s.dir, model_load_options(streaming, s.dir));
  s.tokenizer.emplace(open_tokenizer(*s.model, s.dir));
  s.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const ModelConfig& cfg = s.model->config();

  SamplingParams& sampling = s.options.sampling;
  sampling = read_generation_defaults(s.dir);
  if (args.temperature) sampling.temperature = *args.temperature;
  if (args.top_k) sampling.top_k = *args.top_k;
  if (args.top_p) sampling.top_p = *args.top_p;
  if (args.min_p) sampling.min_p = *args.min_p;
  if (args.repeat_penalty) sampling.repetition_penalty = *args.repeat_penalty;
  sampling.seed = args.seed;
  validate_sampling(sampling);

  s.options.max_new_tokens = args.n_predict;
  for (const std::string& stop : args.stop) {
    s.options.stop_strings.push_back(unescape_stop(stop));
    if (s.options.stop_strings.back().empty()) throw UsageError("--stop: the stop string is empty");
  }
  s.options.ignore_eos = args.ignore_eos;
  s.options.eos_ids = cfg.eos_token_ids;
  for (int32_t id : s.tokenizer->eos_ids())
    if (std::find(s.options.eos_ids.begin(), s.options.eos_ids.end(), id) == s.options.eos_ids.end())
      s.options.eos_ids.push_back(id);

  s.n_ctx = args.ctx_size > 0 ? args.ctx_size : std::min<int64_t>(cfg.n_ctx_train, 4096);
  if (s.n_ctx > cfg.n_ctx_train)
    throw UsageError(
        fmt::format("--ctx-size {} exceeds the model's max_position_embeddings {}", s.n_ctx, cfg.n_ctx_train));
  warn_if_oversubscribed(args.threads);
  s.pool = std::make_unique<ThreadPool>(args.threads > 0 ? args.threads : available_cpus());
  // The CPU backend is only needed for streamed experts; a CUDA device always.
  s.on_cuda = streaming.device != "cpu";
  if (s.on_cuda || s.model->experts_streamed()) s.backend = make_backend(streaming.device);
  if (!streaming.pinned_budget.empty() && !(s.on_cuda && s.model->experts_streamed()))
    throw UsageError(
        "--pinned-budget needs --device cuda and streamed experts (it bounds the page-locked staging tier)");
  // A pack folder, or a .gguf file read in place, streams its routed experts through a budgeted cache.
  if (s.model->experts_streamed()) {
    s.streamer = make_streamer(*s.model, s.dir, *s.backend, streaming, s.n_ctx);
  } else if (streaming.asks_for_streaming()) {
    throw UsageError(kNeedsStreamedModel);
  }
  return s;
}

// A runner on the session's device with n_seq KV slots.
std::unique_ptr<ModelRunner> make_runner(const Session& s, const GenerateArgs& args, int64_t n_seq) {
  const ForwardHooks hooks = s.streamer ? s.streamer->hooks() : ForwardHooks{};
  return s.on_cuda ? make_cuda_runner(*s.model, *s.backend, s.n_ctx, args.batch_size, hooks, n_seq)
                   : make_cpu_runner(*s.model, *s.pool, s.n_ctx, args.batch_size, hooks, n_seq);
}

void log_session(const Session& s, const ModelRunner& runner, const std::string& what) {
  const RunnerMemory memory = runner.memory();
  ExpertStreamer* streamer = s.streamer.get();
  if (s.on_cuda) {
    spdlog::info(
        "{}: VRAM: dense weights {} B, routed experts {} B (checkpoint) or {} B of cache slots (pack), "
        "KV cache {} B, workspace {} B; page-locked: runner {} B, staging {} B",
        runner.device(), memory.dense_weight_bytes, memory.expert_weight_bytes,
        streamer ? streamer->n_slots() * streamer->cache().slot_bytes() : 0, memory.kv_cache_bytes,
        memory.workspace_bytes, memory.pinned_bytes,
        streamer ? streamer->stats().prefetch.staging_buffers * streamer->cache().slot_bytes() : 0);
  }
  const ModelConfig& cfg = s.model->config();
  spdlog::info("{}: {} layers, {} experts (top-{}), {}, {} threads", s.dir.string(), cfg.n_layer, cfg.n_expert,
               cfg.n_expert_used, what, s.pool->size());
}

void print_streamer_summary(const Session& s) {
  if (!s.streamer) return;
  const StreamerStats ss = s.streamer->stats();
  fmt::print(stderr,
             "chronos: experts: {} lookups, {:.1f}% hits, {} misses, {} fallbacks, {} low-bit, stalled {:.1f} ms on "
             "I/O, read {:.1f} MiB in {} reads ({}), cache {} slots\n",
             ss.lookups, 100.0 * double(ss.hits) / double(std::max<int64_t>(1, ss.lookups)), ss.misses, ss.fallbacks,
             ss.lowbit, ss.stall_seconds * 1e3, double(ss.prefetch.bytes_read) / (1 << 20), ss.prefetch.reads,
             s.streamer->prefetcher().io_backend(), s.streamer->n_slots());
}

// --stats-json's fields that do not depend on the prompts.
nlohmann::json session_json(const Session& s, const ModelRunner& runner) {
  const ModelConfig& cfg = s.model->config();
  const RunnerMemory memory = runner.memory();
  nlohmann::json j = {
      {"model", s.dir.string()},
      {"architecture", cfg.arch_name()},
      {"threads", s.pool->size()},
      {"n_ctx", s.n_ctx},
      {"load_seconds", s.load_seconds},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"device", runner.device()},
      {"kv_cache_bytes", memory.kv_cache_bytes},
      {"device_dense_weight_bytes", memory.dense_weight_bytes},
      {"device_expert_weight_bytes", memory.expert_weight_bytes},
      {"workspace_bytes", memory.workspace_bytes},
      {"pinned_bytes", memory.pinned_bytes},
      {"dense_bytes", s.model->sizes().dense_bytes},
      {"expert_bytes", s.model->sizes().expert_bytes},
  };
  if (ExpertStreamer* streamer = s.streamer.get()) {
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
  return j;
}

void check_stats_json_folder(const GenerateArgs& args) {
  if (args.stats_json.empty()) return;
  const auto parent = std::filesystem::absolute(args.stats_json).parent_path();
  if (!std::filesystem::is_directory(parent))
    throw_error("{}: the folder for --stats-json does not exist", args.stats_json);
}

// A chat request's rendered prompt: messages with the flags' tools and kwargs, through the
// model's template (or --chat-template's).
std::vector<int32_t> chat_prompt(const Tokenizer& tokenizer, const ChatRequest& request,
                                 const std::string& template_override, std::string& rendered) {
  rendered = tokenizer.apply_chat_template(request, template_override);
  return tokenizer.encode(rendered, /*add_special_tokens=*/false);
}

void add_session_flags(CLI::App* sub, GenerateArgs& args) {
  sub->add_option("-m,--model", args.model,
                  "Model folder (Hugging Face checkpoint); default: $CHRONOS_MODEL or the bundled model");
  sub->add_option("-n,--n-predict", args.n_predict, "Tokens to generate at most")
      ->capture_default_str()
      ->check(count_in<int64_t>(0, kMaxNewTokens));
  sub->add_option("--temp", args.temperature, "Temperature; 0 = greedy (default: generation_config.json, else greedy)");
  sub->add_option("--top-k", args.top_k, "Keep the k most likely tokens; 0 = off");
  sub->add_option("--top-p", args.top_p, "Nucleus sampling mass; 1 = off");
  sub->add_option("--min-p", args.min_p, "Drop tokens below min-p times the top probability; 0 = off");
  sub->add_option("--repeat-penalty", args.repeat_penalty, "Repetition penalty (transformers' rule); 1 = off");
  sub->add_option("-s,--seed", args.seed, "Random seed (same seed, same output)")
      ->capture_default_str()
      ->check(decimal_u64());
  sub->add_option("--stop", args.stop, "Stop before this string (repeatable; \\n, \\t, \\r and \\\\ are escapes)");
  sub->add_flag("--ignore-eos", args.ignore_eos, "Do not stop at end-of-sequence tokens");
  sub->add_option("-t,--threads", args.threads, "Threads (default: all available CPUs)")
      ->check(count_in(1, kMaxThreads));
  sub->add_option("-c,--ctx-size", args.ctx_size, "Context length (default: min(max_position_embeddings, 4096))")
      ->check(count_in<int64_t>(1, kMaxContext));
  sub->add_option("-b,--batch-size", args.batch_size, "Prompt tokens per prefill step")
      ->capture_default_str()
      ->check(count_in<int64_t>(1, kMaxBatch));
  sub->add_flag("-v,--verbose", args.verbose, "Debug logging on stderr");
  add_streaming_flags(sub, args.streaming, /*sweep=*/false);
}

}  // namespace chronos::cli
