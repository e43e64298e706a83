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
#include "chronos/batch_generate.h"
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
  std::optional<std::string> jsonl;  // many prompts, one JSON object a line ("-": standard input)
  std::optional<int64_t> parallel;   // sequences generated at once with --jsonl (default 4)
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
  int64_t batch_size = kDefaultPrefillBatch;
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

// One line of --jsonl: its text or conversation, and what it overrides of the flags.
struct JsonlLine {
  int64_t line = 0;  // 1-based, for messages
  std::optional<std::string> prompt;
  std::optional<nlohmann::ordered_json> messages;
  nlohmann::ordered_json id;  // echoed in its output line when given
  std::optional<int64_t> max_tokens;
  std::optional<float> temperature, top_p, min_p, repeat_penalty;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<std::vector<std::string>> stop;
  std::optional<bool> ignore_eos;
};

// Parses --jsonl's text: each non-blank line one object with "prompt" (a string) or "messages" (a
// conversation for the model's chat template) and optional per-line settings. Throws Error naming
// the file, the line and the field.
std::vector<JsonlLine> parse_jsonl(const std::string& text, const std::string& source) {
  std::vector<JsonlLine> lines;
  size_t begin = 0;
  for (int64_t number = 1; begin < text.size(); ++number) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view raw(text.data() + begin, end - begin);
    begin = end + 1;
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const auto fail = [&](const std::string& what) -> void { throw_error("{}: line {}: {}", source, number, what); };
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(raw);
    } catch (const nlohmann::json::exception& e) {
      fail(fmt::format("not JSON: {}", e.what()));
    }
    if (!j.is_object()) fail("expected a JSON object with \"prompt\" or \"messages\"");
    JsonlLine l;
    l.line = number;
    const auto number_of = [&](const std::string& key, double lo, double hi) {
      const auto& v = j[key];
      if (!v.is_number()) fail(fmt::format("\"{}\" must be a number", key));
      const double x = v.get<double>();
      if (!(x >= lo && x <= hi)) fail(fmt::format("\"{}\" = {} is out of range [{}, {}]", key, x, lo, hi));
      return x;
    };
    const auto integer_of = [&](const std::string& key, int64_t lo, int64_t hi) {
      const auto& v = j[key];
      if (!v.is_number_integer()) fail(fmt::format("\"{}\" must be an integer", key));
      if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(hi) : (v.get<int64_t>() < lo || v.get<int64_t>() > hi))
        fail(fmt::format("\"{}\" = {} is out of range [{}, {}]", key, v.dump(), lo, hi));
      return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
    };
    for (const auto& [key, value] : j.items()) {
      if (key == "prompt") {
        if (!value.is_string()) fail("\"prompt\" must be a string");
        l.prompt = value.get<std::string>();
      } else if (key == "messages") {
        if (!value.is_array() || value.empty()) fail("\"messages\" must be a non-empty array of message objects");
        l.messages = value;
      } else if (key == "id") {
        l.id = value;
      } else if (key == "max_tokens" || key == "n_predict") {
        if (l.max_tokens) fail("give one of \"max_tokens\" and \"n_predict\"");
        l.max_tokens = integer_of(key, 0, kMaxNewTokens);
      } else if (key == "temperature") {
        l.temperature = float(number_of(key, 0.0, 1e6));
      } else if (key == "top_p") {
        l.top_p = float(number_of(key, 0.0, 1.0));
      } else if (key == "min_p") {
        l.min_p = float(number_of(key, 0.0, 1.0));
      } else if (key == "repeat_penalty") {
        l.repeat_penalty = float(number_of(key, 1e-6, 1e6));
      } else if (key == "top_k") {
        l.top_k = integer_of(key, 0, int64_t(1) << 31);
      } else if (key == "seed") {
        if (!value.is_number_unsigned()) fail("\"seed\" must be a non-negative integer");
        l.seed = value.get<uint64_t>();
      } else if (key == "stop") {
        std::vector<std::string> stops;
        if (value.is_string()) {
          stops.push_back(value.get<std::string>());
        } else if (value.is_array()) {
          for (const auto& stop : value) {
            if (!stop.is_string()) fail("\"stop\" must be a string or an array of strings");
            stops.push_back(stop.get<std::string>());
          }
        } else {
          fail("\"stop\" must be a string or an array of strings");
        }
        for (const std::string& stop : stops)
          if (stop.empty()) fail("\"stop\": a stop string is empty");
        l.stop = std::move(stops);
      } else if (key == "ignore_eos") {
        if (!value.is_boolean()) fail("\"ignore_eos\" must be true or false");
        l.ignore_eos = value.get<bool>();
      } else {
        fail(
            fmt::format("unknown field \"{}\" (known: prompt, messages, id, max_tokens, n_predict, temperature, "
                        "top_k, top_p, min_p, repeat_penalty, seed, stop, ignore_eos)",
                        key));
      }
    }
    if (l.prompt.has_value() == l.messages.has_value()) fail("give exactly one of \"prompt\" and \"messages\"");
    lines.push_back(std::move(l));
  }
  if (lines.empty()) throw_error("{}: no prompts (one JSON object a line)", source);
  return lines;
}

// What generate sets up before its first token, for one prompt or for --jsonl's many.
struct Session {
  std::filesystem::path dir;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  double load_seconds = 0.0;
  GenerateOptions options;  // the flags' limits, stops, EOS ids and sampling (over generation_config.json's)
  int64_t n_ctx = 0;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertStreamer> streamer;
  bool on_cuda = false;
};

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

// --jsonl: every line through one BatchGenerator, --parallel sequences at once; one JSON line out
// per line in, in input order, each written as soon as it and those before it are done.
int run_generate_jsonl(const GenerateArgs& args) {
  if (args.prompt || args.prompt_file || !args.chat_flags.messages_file.empty())
    throw UsageError("--jsonl holds the prompts: it takes no -p, -f or --messages");
  if (!args.system.empty() && !args.chat) throw UsageError("--system needs --chat");
  check_stats_json_folder(args);
  const std::string source = *args.jsonl == "-" ? std::string("standard input") : *args.jsonl;
  const std::vector<JsonlLine> lines = parse_jsonl(read_input_file(*args.jsonl, "--jsonl"), source);
  const ChatRequest chat_flags_request = read_chat_request(args.chat_flags);
  const std::string chat_template_override = read_chat_template_file(args.chat_flags);
  Session s = open_session(args);
  const Tokenizer& tokenizer = *s.tokenizer;

  std::vector<BatchRequest> requests(lines.size());
  std::vector<std::unique_ptr<ReplySplitter>> reasoning(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const JsonlLine& l = lines[i];
    const auto fail_line = [&](const std::string& what) { throw_error("{}: line {}: {}", source, l.line, what); };
    BatchRequest& r = requests[i];
    std::string rendered;
    try {
      if (l.messages || args.chat) {
        ChatRequest chat = chat_flags_request;
        if (l.messages) {
          chat.messages = *l.messages;
        } else {
          chat.messages = nlohmann::ordered_json::array();
          if (!args.system.empty()) chat.messages.push_back({{"role", "system"}, {"content", args.system}});
          chat.messages.push_back({{"role", "user"}, {"content", *l.prompt}});
        }
        r.prompt = chat_prompt(tokenizer, chat, chat_template_override, rendered);
        if (!args.show_reasoning) reasoning[i] = make_reply_splitter(rendered);
      } else {
        r.prompt = tokenizer.encode(*l.prompt, /*add_special_tokens=*/true);
      }
    } catch (const Error& e) {
      fail_line(e.what());
    }
    if (r.prompt.empty()) fail_line("the prompt is empty");
    if (std::ssize(r.prompt) >= s.n_ctx)
      fail_line(fmt::format("the prompt is {} tokens, but the context holds {} (raise --ctx-size, at most {})",
                            r.prompt.size(), s.n_ctx, s.model->config().n_ctx_train));
    r.options = s.options;
    if (l.max_tokens) r.options.max_new_tokens = *l.max_tokens;
    SamplingParams& p = r.options.sampling;
    if (l.temperature) p.temperature = *l.temperature;
    if (l.top_k) p.top_k = *l.top_k;
    if (l.top_p) p.top_p = *l.top_p;
    if (l.min_p) p.min_p = *l.min_p;
    if (l.repeat_penalty) p.repetition_penalty = *l.repeat_penalty;
    if (l.seed) p.seed = *l.seed;
    if (l.stop) r.options.stop_strings = *l.stop;
    if (l.ignore_eos) r.options.ignore_eos = *l.ignore_eos;
  }

  const int64_t n_seq = std::min<int64_t>(args.parallel.value_or(4), std::ssize(requests));
  BatchGenerator generator(*s.model, tokenizer, make_runner(s, args, n_seq), n_seq, args.batch_size);
  generator.stream_experts_with(s.streamer.get());
  log_session(s, generator.runner(), fmt::format("{} prompts, {} at once", requests.size(), n_seq));

  std::vector<ReasoningParts> replies(requests.size());
  std::vector<std::optional<std::string>> finished(requests.size());
  size_t written = 0;
  // A closed pipe (`| head -n 1`) ends the run at the next step, quietly (write_stdout throws for
  // any other write error).
  bool closed = false;
  const auto add = [&](size_t i, const ReasoningParts& parts) {
    replies[i].reasoning += parts.reasoning;
    replies[i].content += parts.content;
  };
  const auto on_text = [&](size_t i, std::string_view text) {
    if (reasoning[i])
      add(i, reasoning[i]->push(text));
    else
      replies[i].content += text;
    return true;
  };
  const auto on_done = [&](size_t i, const GenerateStats& stats) {
    if (reasoning[i]) add(i, reasoning[i]->finish());
    nlohmann::ordered_json out = {{"index", i}};
    if (!lines[i].id.is_null()) out["id"] = lines[i].id;
    out["text"] = replies[i].content;
    if (reasoning[i] && !replies[i].reasoning.empty()) out["reasoning"] = replies[i].reasoning;
    out["prompt_tokens"] = stats.prompt_tokens;
    out["generated_tokens"] = stats.generated_tokens;
    out["stop_reason"] = stop_reason_name(stats.stop_reason);
    out["time_to_first_token_seconds"] = stats.time_to_first_token_seconds;
    out["decode_seconds"] = stats.decode_seconds;
    finished[i] = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    replies[i] = {};
    for (; written < finished.size() && finished[written]; ++written) {
      if (!closed) closed = !write_stdout(*finished[written]);
      finished[written].reset();
    }
  };
  const BatchTotals totals = generator.run(requests, on_text, on_done, [&] { return !closed; });

  print_streamer_summary(s);
  fmt::print(stderr,
             "chronos: {} prompts, {} at once: {} prompt tokens, generated {} tokens in {:.2f} s ({:.2f} tok/s), "
             "{} steps of {:.1f} rows\n",
             totals.requests, n_seq, totals.prompt_tokens, totals.generated_tokens, totals.seconds,
             totals.generated_tokens_per_second(), totals.steps,
             double(totals.rows) / double(std::max<int64_t>(1, totals.steps)));
  if (!args.stats_json.empty()) {
    nlohmann::json j = session_json(s, generator.runner());
    j.update({{"requests", totals.requests},
              {"parallel", n_seq},
              {"prompt_tokens", totals.prompt_tokens},
              {"generated_tokens", totals.generated_tokens},
              {"seconds", totals.seconds},
              {"generated_tokens_per_second", totals.generated_tokens_per_second()},
              {"steps", totals.steps},
              {"rows", totals.rows}});
    write_file_atomically(args.stats_json, j.dump(2) + "\n");
  }
  return 0;
}

int run_generate(const GenerateArgs& args) {
  if (args.verbose) spdlog::set_level(spdlog::level::debug);
  if (args.jsonl) return run_generate_jsonl(args);
  if (args.parallel) throw UsageError("--parallel needs --jsonl (one prompt runs as one sequence)");
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
  check_stats_json_folder(args);
  // Before loading: fail fast on bad input.
  const std::string prompt_text = conversation ? std::string() : read_prompt(args);
  ChatRequest chat_request = read_chat_request(args.chat_flags);
  const std::string chat_template_override = read_chat_template_file(args.chat_flags);
  Session s = open_session(args);
  const Tokenizer& tokenizer = *s.tokenizer;

  std::vector<int32_t> prompt;
  // A chat reply's reasoning (<think> ... </think>, harmony's analysis channel) is hidden unless
  // --show-reasoning.
  std::unique_ptr<ReplySplitter> reasoning;
  if (args.chat || conversation) {
    if (!conversation) {
      if (!args.system.empty()) chat_request.messages.push_back({{"role", "system"}, {"content", args.system}});
      chat_request.messages.push_back({{"role", "user"}, {"content", prompt_text}});
    }
    std::string rendered;
    prompt = chat_prompt(tokenizer, chat_request, chat_template_override, rendered);
    if (!args.show_reasoning) reasoning = make_reply_splitter(rendered);
  } else {
    prompt = tokenizer.encode(prompt_text, /*add_special_tokens=*/true);
  }
  if (prompt.empty()) throw_error("the prompt is empty");

  Generator generator(*s.model, tokenizer, make_runner(s, args, 1));
  generator.stream_experts_with(s.streamer.get());
  log_session(s, generator.runner(), fmt::format("{} prompt tokens", prompt.size()));

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
  const GenerateStats stats = generator.generate(prompt, s.options, [&](std::string_view text) {
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

  print_streamer_summary(s);
  fmt::print(stderr,
             "chronos: prompt {} tokens, prefill {:.1f} tok/s, first token {:.0f} ms, generated {} tokens, "
             "decode {:.2f} tok/s, stop: {}\n",
             stats.prompt_tokens, stats.prefill_tokens_per_second(), stats.time_to_first_token_seconds * 1e3,
             stats.generated_tokens, stats.decode_tokens_per_second(), stop_reason_name(stats.stop_reason));
  if (!args.stats_json.empty()) {
    nlohmann::json j = session_json(s, generator.runner());
    j.update({
        {"prompt_tokens", stats.prompt_tokens},
        {"generated_tokens", stats.generated_tokens},
        {"time_to_first_token_seconds", stats.time_to_first_token_seconds},
        {"prefill_seconds", stats.prefill_seconds},
        {"prefill_tokens_per_second", stats.prefill_tokens_per_second()},
        {"decode_seconds", stats.decode_seconds},
        {"decode_tokens_per_second", stats.decode_tokens_per_second()},
        {"stop_reason", stop_reason_name(stats.stop_reason)},
    });
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
  auto* f = sub->add_option("-f,--file", args->prompt_file, "Read the prompt from a file")->excludes(p);
  sub->add_option("--jsonl", args->jsonl,
                  "Many prompts, one JSON object a line ({\"prompt\": ...} or {\"messages\": [...]}, with optional "
                  "max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, ignore_eos, id); "
                  "writes one JSON line per prompt, in order; - reads standard input")
      ->excludes(p)
      ->excludes(f);
  sub->add_option("--parallel", args->parallel, "Sequences generated at once with --jsonl (KV slots; default 4)")
      ->check(count_in<int64_t>(1, 256));
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
