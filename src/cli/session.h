// What generate and serve share: the flags that load a model and set its sampling, and the session
// they open (the model, its tokenizer, the thread pool, the backend and the expert streamer).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chronos/backend.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "cli/streaming_flags.h"

namespace chronos::cli {

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

// generate's and serve's shared flags: -m, -n, sampling, --stop, --ignore-eos, threads, context,
// batch, -v and the streaming group.
void add_session_flags(CLI::App* sub, GenerateArgs& args);

// --stop "\n\n" as a shell passes it: \n, \t, \r and \\ become the characters they name.
std::string unescape_stop(const std::string& text);

// Loads the model and its tokenizer and makes the streamer its flags ask for.
Session open_session(const GenerateArgs& args);
// A runner on the session's device with n_seq KV slots.
std::unique_ptr<ModelRunner> make_runner(const Session& s, const GenerateArgs& args, int64_t n_seq);
void log_session(const Session& s, const ModelRunner& runner, const std::string& what);
void print_streamer_summary(const Session& s);
// --stats-json's fields that do not depend on the prompts.
nlohmann::json session_json(const Session& s, const ModelRunner& runner);
void check_stats_json_folder(const GenerateArgs& args);
// A chat request's rendered prompt through the model's template (or template_override).
std::vector<int32_t> chat_prompt(const Tokenizer& tokenizer, const ChatRequest& request,
                                 const std::string& template_override, std::string& rendered);

}  // namespace chronos::cli
