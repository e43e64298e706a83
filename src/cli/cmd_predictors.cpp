// chronos train-predictors and chronos eval-predictors: the expert predictors from routing traces.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/predictors.h"
#include "chronos/thread_pool.h"
#include "chronos/trace.h"
#include "cli/commands.h"

namespace chronos::cli {
namespace {

struct TrainArgs {
  std::string traces;
  std::string out;
  PredictorTrainOptions options;
  int threads = 0;
};

std::string loss_text(double v) { return std::isnan(v) ? "n/a" : fmt::format("{:.4f}", v); }

int run_train(const TrainArgs& args) {
  if (args.threads < 0) throw UsageError("--threads must be >= 1");
  const std::vector<TraceReader> traces = open_traces(args.traces);
  ThreadPool pool(args.threads > 0 ? args.threads : available_cpus());
  const bool tty = isatty(fileno(stderr)) != 0;
  TrainCallbacks callbacks;
  if (tty)
    callbacks.on_step = [](const TrainStep& s) {
      const int width = 30, filled = int(width * s.step / std::max<int64_t>(1, s.steps));
      fmt::print(stderr, "\r{:<9} epoch {:>3}/{:<3} [{:<{}}] {}/{}", s.predictor, s.epoch, s.epochs,
                 std::string(size_t(filled), '#'), width, s.step, s.steps);
    };
  callbacks.on_epoch = [tty](const TrainEpoch& e) {
    fmt::print(stderr, "{}{:<9} epoch {:>3}: train loss {}  held-out loss {}{}\n", tty ? "\r\033[K" : "", e.predictor,
               e.epoch, loss_text(e.train_loss), loss_text(e.heldout_loss), e.best ? "  (best)" : "");
  };
  const auto start = std::chrono::steady_clock::now();
  const PredictorTrainSummary s = train_predictors(traces, args.out, args.options, pool, callbacks);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr,
             "chronos: trained on {} sequences ({} tokens), held out {} ({} tokens) in {:.1f} s; LookaheadRouter best "
             "epoch {}/{} (held-out loss {}), IntentClassifier best epoch {}/{} (held-out loss {})\n",
             s.train_sequences, s.train_tokens, s.heldout_sequences, s.heldout_tokens, seconds, s.lookahead_best_epoch,
             s.lookahead_epochs, loss_text(s.lookahead_heldout_loss), s.intent_best_epoch, s.intent_epochs,
             loss_text(s.intent_heldout_loss));
  if (!s.heldout_recall_at_k.empty()) {
    std::string recall;
    for (size_t h = 0; h < s.heldout_recall_at_k.size(); ++h)
      recall += fmt::format("{}h{} {:.3f}", h == 0 ? "" : ", ", h, s.heldout_recall_at_k[h]);
    fmt::print(stderr, "chronos: held-out recall at B=k: {}; intent coverage at 50% of experts {:.3f}\n", recall,
               s.heldout_intent_coverage_half);
  }
  fmt::print(stderr, "chronos: wrote {}/predictors.safetensors and predictors.json\n", args.out);
  return 0;
}

struct EvalArgs {
  std::string pack;
  std::string traces;
  std::string model;
  std::string json;
};

int run_eval(const EvalArgs& args) {
  const std::filesystem::path pack_dir = args.pack;
  const auto predictors = Predictors::load(pack_dir);
  if (predictors == nullptr)
    throw_error("{}: no predictors.safetensors (make them with chronos train-predictors)", pack_dir.string());
  const std::vector<TraceReader> traces = open_traces(args.traces);
  // The routers for the gate baseline: --model, else the pack folder itself when it holds a model.
  const std::filesystem::path model_dir = args.model.empty() ? pack_dir : std::filesystem::path(args.model);
  std::unique_ptr<Model> model;
  if (!args.model.empty() || std::filesystem::exists(model_dir / "config.json")) {
    model = Model::load(model_dir);
    const std::string fingerprint = model_fingerprint_of(*model, model_dir);
    if (fingerprint != traces.front().header().fingerprint)
      throw_error("{}: model fingerprint {} differs from the traces' {}", model_dir.string(), fingerprint,
                  traces.front().header().fingerprint);
  }
  const PredictorEvaluation ev = evaluate_predictors(*predictors, traces, model.get());
  fmt::print("{}", format_evaluation(ev));
  if (!args.json.empty()) write_file_atomically(args.json, evaluation_json(ev) + "\n");
  return 0;
}

}  // namespace

Command register_train_predictors(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  PredictorTrainOptions& o = args->options;
  CLI::App* sub =
      app.add_subcommand("train-predictors", "Train the LookaheadRouter and IntentClassifier on routing traces");
  sub->add_option("--traces", args->traces, "Folder of .ctrace files (chronos trace)")->required();
  sub->add_option("-o,--out", args->out, "Output folder (a pack folder): predictors.safetensors + predictors.json")
      ->required();
  sub->add_option("--epochs", o.epochs, "LookaheadRouter epochs at most (early stopping)")->capture_default_str();
  sub->add_option("--lr", o.lr, "Adam learning rate")->capture_default_str();
  sub->add_option("--batch", o.batch, "LookaheadRouter tokens per step")->capture_default_str();
  sub->add_option("--horizon", o.horizon, "K: tokens ahead to predict")->capture_default_str();
  sub->add_option("--rank", o.rank, "R: LookaheadRouter hidden width")->capture_default_str();
  sub->add_option("--patience", o.patience, "Epochs without a better held-out loss before stopping")
      ->capture_default_str();
  sub->add_option("--intent-hidden", o.intent_hidden, "IntentClassifier hidden width")->capture_default_str();
  sub->add_option("--intent-epochs", o.intent_epochs, "IntentClassifier epochs at most")->capture_default_str();
  sub->add_option("--holdout", o.holdout, "Share of sequences held out")->capture_default_str();
  sub->add_option("-s,--seed", o.seed, "Seed (split, initialization, batch order)")->capture_default_str();
  sub->add_option("-t,--threads", args->threads,
                  "Threads (default: all available CPUs; the result does not depend on it)");
  return Command{sub, [args] { return run_train(*args); }};
}

Command register_eval_predictors(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* sub =
      app.add_subcommand("eval-predictors", "Evaluate trained predictors on (held-out) traces against baselines");
  sub->add_option("-m,--model", args->pack, "Folder with predictors.safetensors (a pack folder)")->required();
  sub->add_option("--traces", args->traces, "Folder of .ctrace files to evaluate on")->required();
  sub->add_option("--router-model", args->model,
                  "Model whose routers give the gate baseline (default: the -m folder when it holds a model)");
  sub->add_option("--json", args->json, "Write every number as JSON to this file");
  return Command{sub, [args] { return run_eval(*args); }};
}

}  // namespace chronos::cli
