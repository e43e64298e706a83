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
#include "cli/session.h"
#include "cli/streaming_flags.h"

namespace chronos::cli {
namespace {

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
  RequestOverrides set;       // over the flags'
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
        if (l.set.max_tokens) fail("give one of \"max_tokens\" and \"n_predict\"");
        l.set.max_tokens = integer_of(key, 0, kMaxNewTokens);
      } else if (key == "temperature") {
        l.set.temperature = float(number_of(key, 0.0, 1e6));
      } else if (key == "top_p") {
        l.set.top_p = float(number_of(key, 0.0, 1.0));
      } else if (key == "min_p") {
        l.set.min_p = float(number_of(key, 0.0, 1.0));
      } else if (key == "repeat_penalty") {
        l.set.repeat_penalty = float(number_of(key, 1e-6, 1e6));
      } else if (key == "top_k") {
        l.set.top_k = integer_of(key, 0, int64_t(1) << 31);
      } else if (key == "seed") {
        if (!value.is_number_unsigned()) fail("\"seed\" must be a non-negative integer");
        l.set.seed = value.get<uint64_t>();
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
        l.set.stop = std::move(stops);
      } else if (key == "ignore_eos") {
        if (!value.is_boolean()) fail("\"ignore_eos\" must be true or false");
        l.set.ignore_eos = value.get<bool>();
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
    l.set.apply(r.options);
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
  add_session_flags(sub, *args);
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
  sub->add_flag("--chat", args->chat, "Wrap the prompt in the model's chat template");
  sub->add_option("--system", args->system, "System message for --chat");
  sub->add_flag("--show-reasoning", args->show_reasoning,
                "Print a thinking model's reasoning (<think> ... </think>) too; without it only the answer is printed");
  add_chat_flags(sub, args->chat_flags);
  sub->add_option("--stats-json", args->stats_json, "Write load/prefill/decode statistics as JSON to this file");
  return Command{sub, [args] { return run_generate(*args); }};
}

}  // namespace chronos::cli
