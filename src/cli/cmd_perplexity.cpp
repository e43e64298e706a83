// chronos perplexity: the teacher-forced quality meter (perplexity, and against a reference the
// perplexity change, mean KL and top-1 agreement) of a checkpoint or pack on held-out text.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/file_util.h"
#include "chronos/model_runner.h"
#include "chronos/perplexity.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "chronos/trace.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/open_tokenizer.h"
#include "cli/streaming_flags.h"

namespace chronos::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string reference;
  std::string text;
  int64_t ctx_size = 128;
  int64_t windows = 0;
  int threads = 0;
  std::string json;
  std::string save_logits;
  std::string kl_base;
  int64_t save_top_k = 128;
  bool save_top_k_given = false;
  StreamingFlags streaming;
};

void check_output_folder(const std::string& path, const char* flag) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw UsageError(fmt::format("{} {}: the folder {} does not exist", flag, path, parent.string()));
}

// The text to score: a plain text file, or a .jsonl of prompts (chronos trace's format), whose
// prompts are joined by blank lines.
std::string read_text(const std::filesystem::path& path) {
  if (path.extension() == ".jsonl") {
    std::string text;
    for (const PromptRecord& p : read_prompts_jsonl(path)) {
      if (!text.empty()) text += "\n\n";
      text += p.text;
    }
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open the text file", path.string());
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw_error("{}: cannot read the text file", path.string());
  return out.str();
}

// One model of the measurement with everything it needs alive: the model, the backend and the
// streamer of a pack (with the streaming flags), and its runner.
struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertStreamer> streamer;
  std::unique_ptr<ModelRunner> runner;
  Engine engine() const { return {runner.get(), streamer.get()}; }
};

Loaded load(const std::filesystem::path& dir, const StreamingFlags& streaming, bool use_flags, ThreadPool& pool,
            int64_t n_ctx, int64_t resident_elsewhere = 0) {
  Loaded l;
  l.model = Model::load(dir, use_flags ? model_load_options(streaming, dir) : ModelLoadOptions{});
  if (n_ctx > l.model->config().n_ctx_train)
    throw UsageError(fmt::format("--ctx-size {} exceeds {}'s max_position_embeddings {}", n_ctx, dir.string(),
                                 l.model->config().n_ctx_train));
  ForwardHooks hooks;
  if (l.model->experts_streamed()) {
    l.backend = make_backend("cpu");
    // The reference is the exact run: every expert resident, whatever the flags ask of the model.
    StreamingFlags flags = use_flags ? streaming : StreamingFlags{};
    // Resident beside the cache: the dense weights, the KV store and the reference model's weights.
    l.streamer = make_streamer(*l.model, dir, *l.backend, flags, n_ctx, resident_elsewhere);
    hooks = l.streamer->hooks();
  }
  l.runner = make_cpu_runner(*l.model, pool, n_ctx, 64, hooks);
  return l;
}

int run_perplexity(const PerplexityArgs& args) {
  if (args.ctx_size < 4) throw UsageError(fmt::format("--ctx-size must be at least 4 (got {})", args.ctx_size));
  if (args.windows < 0) throw UsageError(fmt::format("--windows must be 0 (all) or positive (got {})", args.windows));
  if (args.streaming.device != "cpu") throw UsageError("chronos perplexity runs on the CPU (--device cpu)");
  if (!args.kl_base.empty() && !args.reference.empty())
    throw UsageError("--ref and --kl-base are two ways to give the reference: give one");
  if (args.save_top_k_given && args.save_logits.empty()) throw UsageError("--save-top-k needs --save-logits");
  if (args.save_top_k < 1) throw UsageError(fmt::format("--save-top-k must be at least 1 (got {})", args.save_top_k));
  if (!args.save_logits.empty()) check_output_folder(args.save_logits, "--save-logits");
  if (!args.json.empty()) check_output_folder(args.json, "--json");
  const auto dir = resolve_model_dir(args.model);
  std::filesystem::path text_path = args.text;
  if (text_path.empty()) {
    text_path = dir / "prompts" / "test.jsonl";  // a pack or checkpoint of the demo model: its held-out prompts
    if (!std::filesystem::exists(text_path))
      throw UsageError("-f/--text is required (a text file or a prompts .jsonl)");
  }
  const std::string text = read_text(text_path);
  const Tokenizer tokenizer = open_tokenizer(dir);
  const std::vector<int32_t> tokens = tokenizer.encode(text, false);
  const uint64_t text_hash = hash_bytes(std::as_bytes(std::span(text)));
  const uint64_t tokens_hash = hash_bytes(std::as_bytes(std::span(tokens)));
  // A saved exact run: refused before anything loads when it was made from another text or tokenizer.
  SavedLogits base;
  if (!args.kl_base.empty()) {
    base = load_saved_logits(args.kl_base);
    if (base.text_hash != text_hash)
      throw_error("{}: saved from another text than {} (by {})", args.kl_base, text_path.string(), base.source);
    if (base.tokens_hash != tokens_hash)
      throw_error("{}: the same text, but tokenized otherwise than by {}'s tokenizer (saved by {})", args.kl_base,
                  dir.string(), base.source);
  }

  warn_if_oversubscribed(args.threads);
  ThreadPool pool(args.threads > 0 ? args.threads : available_cpus());
  // The reference first: what it holds resident is not the measured model's cache's (--expert-cache auto).
  Loaded reference;
  if (!args.reference.empty()) reference = load(args.reference, args.streaming, false, pool, args.ctx_size);
  const int64_t reference_bytes =
      reference.model ? reference.model->sizes().dense_bytes + reference.model->sizes().expert_bytes : 0;
  const Loaded model = load(dir, args.streaming, true, pool, args.ctx_size, reference_bytes);
  if (!model.model->experts_streamed() && args.streaming.asks_for_streaming()) throw UsageError(kNeedsStreamedModel);
  if (reference.model) {
    if (reference.model->config().n_vocab != model.model->config().n_vocab)
      throw UsageError(fmt::format("--ref {}: a vocabulary of {} tokens, the model's is {}", args.reference,
                                   reference.model->config().n_vocab, model.model->config().n_vocab));
  }

  PerplexityOptions options;
  options.n_ctx = args.ctx_size;
  options.max_windows = args.windows;
  options.n_vocab = model.model->config().n_vocab;
  SavedLogits saved;
  saved.text_hash = text_hash;
  saved.tokens_hash = tokens_hash;
  saved.source = dir.string();
  if (!args.save_logits.empty()) {
    options.save = &saved;
    options.save_top_k = args.save_top_k;
  }
  if (!args.kl_base.empty()) {
    base.source = args.kl_base;  // errors name the file
    options.base = &base;
  }
  const bool tty = isatty(fileno(stderr));
  const PerplexityResult r =
      measure_perplexity(tokens, options, model.engine(), reference.engine(), [&](int64_t done, int64_t total) {
        if (tty) fmt::print(stderr, "\rperplexity: window {}/{}", done, total);
      });
  if (tty) fmt::print(stderr, "\n");

  fmt::print("model {}: perplexity {:.4f} over {} tokens ({} windows of {}, second halves scored)\n", dir.string(),
             r.perplexity(), r.tokens, r.windows, args.ctx_size);
  const std::string reference_name =
      args.kl_base.empty()
          ? args.reference
          : fmt::format("{} (saved, KL over its top {} tokens and the rest)", args.kl_base, base.top_k);
  if (r.has_reference)
    fmt::print("reference {}: perplexity {:.4f}; change {:+.3f}%, mean KL {:.5f}, top-1 agreement {:.2f}%\n",
               reference_name, r.reference_perplexity(), 100.0 * r.perplexity_change(), r.mean_kl(),
               100.0 * r.top1_agreement());
  if (!args.save_logits.empty()) {
    save_logits(args.save_logits, saved);
    fmt::print("saved the top {} log-probabilities of {} positions to {}\n", saved.top_k, saved.positions(),
               args.save_logits);
  }
  if (model.streamer) {
    const StreamerStats s = model.streamer->stats();
    fmt::print("experts: {} lookups, {:.1f}% hits, {} low-bit, {} fallbacks, {} waits, stalled {:.1f} ms\n", s.lookups,
               100.0 * double(s.hits) / double(std::max<int64_t>(1, s.lookups)), s.lowbit, s.fallbacks, s.waits,
               s.stall_seconds * 1e3);
  }
  if (!args.json.empty()) {
    nlohmann::json j = {{"model", dir.string()}, {"text", text_path.string()}, {"ctx_size", args.ctx_size},
                        {"windows", r.windows},  {"tokens", r.tokens},         {"perplexity", r.perplexity()}};
    if (r.has_reference) {
      j["reference"] = args.kl_base.empty() ? args.reference : args.kl_base;
      if (!args.kl_base.empty()) j["kl_top_k"] = base.top_k;
      j["reference_perplexity"] = r.reference_perplexity();
      j["perplexity_change"] = r.perplexity_change();
      j["mean_kl"] = r.mean_kl();
      j["top1_agreement"] = r.top1_agreement();
    }
    if (model.streamer) {
      const StreamerStats s = model.streamer->stats();
      j["experts"] = streamer_stats_json(s, model.streamer->extent_bytes());
    }
    write_file_atomically(args.json, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

Command register_perplexity(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* sub = app.add_subcommand(
      "perplexity", "Teacher-forced quality: perplexity, and against --ref its change, mean KL and top-1 agreement");
  sub->add_option("-m,--model", args->model, "Checkpoint, pack folder or .gguf file to measure");
  sub->add_option("--ref", args->reference, "The exact model to compare with (all experts resident)");
  sub->add_option("-f,--text", args->text,
                  "Held-out text: a text file, or a prompts .jsonl (default: the model folder's prompts/test.jsonl)");
  sub->add_option("-c,--ctx-size", args->ctx_size, "Window of tokens; its second half is scored")
      ->capture_default_str();
  sub->add_option("--windows", args->windows, "Windows to score (0: all)")->capture_default_str();
  sub->add_option("-t,--threads", args->threads, "Threads (default: the CPUs this process may use)");
  sub->add_option("--json", args->json, "Write the figures as JSON to this file");
  sub->add_option("--save-logits", args->save_logits,
                  "Save this run's top log-probabilities per scored position (with the text's and windows' identity) "
                  "to FILE, the base for --kl-base");
  sub->add_option("--save-top-k", args->save_top_k, "Tokens saved per position by --save-logits")
      ->capture_default_str()
      ->each([args](const std::string&) { args->save_top_k_given = true; });
  sub->add_option("--kl-base", args->kl_base,
                  "Compare with a run saved by --save-logits (same text, tokenizer and windows) instead of --ref");
  add_streaming_flags(sub, args->streaming, false);
  return Command{sub, [args] { return run_perplexity(*args); }};
}

}  // namespace chronos::cli
