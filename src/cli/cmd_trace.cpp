// chronos trace: routing traces of a prompt set (top-k ids, router probabilities, block-0 states).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/generation_config.h"
#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "chronos/trace.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/open_tokenizer.h"
#include "cli/streaming_flags.h"

namespace chronos::cli {
namespace {

struct TraceArgs {
  std::string model;
  std::string prompts;
  std::string out;
  int64_t n_predict = 64;
  int64_t limit = 0;
  int64_t per_file = 16;
  std::optional<float> temperature;
  uint64_t seed = 0;
  int threads = 0;
  int64_t ctx_size = 2048;
  StreamingFlags streaming;
};

int run_trace(const TraceArgs& args) {
  if (args.per_file < 1) throw UsageError("--prompts-per-file must be >= 1");
  const auto dir = resolve_model_dir(args.model);
  auto prompts = read_prompts_jsonl(args.prompts);
  if (args.limit > 0 && args.limit < std::ssize(prompts)) prompts.resize(size_t(args.limit));
  if (args.streaming.device != "cpu") throw UsageError("chronos trace runs on the CPU (--device cpu)");
  if (args.streaming.on_miss != "wait")
    throw UsageError("chronos trace records the exact model: --on-miss wait (the default) only");
  const auto model = Model::load(dir, model_load_options(args.streaming, dir));
  if (!model->experts_streamed() && args.streaming.asks_for_streaming()) throw UsageError(kNeedsStreamedModel);
  const Tokenizer tokenizer = open_tokenizer(*model, dir);
  TraceOptions options;
  options.max_new_tokens = args.n_predict;
  options.sampling = read_generation_defaults(dir);
  if (args.temperature) options.sampling.temperature = *args.temperature;
  options.sampling.seed = args.seed;
  validate_sampling(options.sampling);
  options.prompts_per_file = args.per_file;
  options.n_ctx = std::min(args.ctx_size, model->config().n_ctx_train);
  warn_if_oversubscribed(args.threads);
  ThreadPool pool(args.threads > 0 ? args.threads : available_cpus());

  // A model that does not fit (a .gguf file read in place, or a pack) streams its experts, exactly.
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertStreamer> streamer;
  if (model->experts_streamed()) {
    backend = make_backend("cpu");
    streamer = make_streamer(*model, dir, *backend, args.streaming, options.n_ctx);
  }
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  const TraceProgress done = record_traces(
      *model, tokenizer, dir, prompts, args.out, options, pool,
      [&](const TraceProgress& p) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (tty) {
          const int width = 30, filled = int(width * p.prompts_done / std::max<int64_t>(1, p.prompts_total));
          fmt::print(stderr, "\rtrace [{:<{}}] {}/{} prompts, {} tokens, {:.0f} tok/s",
                     std::string(size_t(filled), '#'), width, p.prompts_done, p.prompts_total, p.tokens,
                     double(p.tokens) / std::max(seconds, 1e-9));
        } else if (p.prompts_done == p.prompts_total || p.prompts_done % args.per_file == 0) {
          fmt::print(stderr, "trace: {}/{} prompts, {} tokens\n", p.prompts_done, p.prompts_total, p.tokens);
        }
      },
      streamer.get());
  if (tty) fmt::print(stderr, "\n");
  fmt::print(stderr, "chronos: traced {} prompts ({} tokens; {} files already present) into {}\n", done.prompts_done,
             done.tokens, done.files_skipped, args.out);
  return 0;
}

}  // namespace

Command register_trace(CLI::App& app) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* sub = app.add_subcommand("trace", "Record routing traces of a prompt set (for pack and train-predictors)");
  sub->add_option("-m,--model", args->model, "Checkpoint folder, .gguf file or pack folder");
  sub->add_option("--prompts", args->prompts, "Prompts, one JSON object per line ({\"prompt\", \"id\", \"domain\"})")
      ->required();
  sub->add_option("-o,--out", args->out, "Output folder of .ctrace files (a rerun resumes)")->required();
  sub->add_option("-n,--n-predict", args->n_predict, "Tokens generated per prompt")
      ->capture_default_str()
      ->check(count_in<int64_t>(0, kMaxNewTokens));
  sub->add_option("--limit", args->limit, "Use only the first N prompts");
  sub->add_option("--prompts-per-file", args->per_file, "Prompts per trace file")->capture_default_str();
  sub->add_option("--temp", args->temperature, "Sampling temperature (default: generation_config.json, else greedy)");
  sub->add_option("-s,--seed", args->seed, "Seed (prompt i uses seed + i)")
      ->capture_default_str()
      ->check(decimal_u64());
  sub->add_option("-t,--threads", args->threads, "Threads (default: all available CPUs)")
      ->check(count_in(1, kMaxThreads));
  sub->add_option("-c,--ctx-size", args->ctx_size, "Context length")
      ->capture_default_str()
      ->check(count_in<int64_t>(16, kMaxContext));
  add_streaming_flags(sub, args->streaming, false);
  return Command{sub, [args] { return run_trace(*args); }};
}

}  // namespace chronos::cli
