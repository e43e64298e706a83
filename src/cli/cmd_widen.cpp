// chronos widen: a copy of a MoE checkpoint with its routed experts zero-padded to a larger FFN size.
#include <unistd.h>

#include <cstdio>

#include "chronos/error.h"
#include "chronos/widen.h"
#include "cli/commands.h"

namespace chronos::cli {
namespace {

struct WidenArgs {
  std::string model;
  int64_t expert_ffn = 0;
  std::string out;
  double max_shard_gb = 4.0;
};

int run_widen(const WidenArgs& args) {
  if (args.max_shard_gb <= 0.0) throw UsageError("--max-shard-gb must be positive");
  WidenOptions options;
  options.expert_ffn = args.expert_ffn;
  options.max_shard_bytes = int64_t(args.max_shard_gb * 1e9);
  const bool terminal = isatty(fileno(stderr)) != 0;
  if (terminal) {
    options.progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\rwiden: %5.1f%%", total > 0 ? 100.0 * double(done) / double(total) : 100.0);
      std::fflush(stderr);
    };
  }
  const WidenResult result = widen_model(resolve_model_dir(args.model), args.out, options);
  if (terminal) std::fputc('\n', stderr);
  const double megabytes = double(result.total_bytes) / 1e6;
  std::fprintf(
      stderr, "widen: wrote %s: expert FFN %lld -> %lld, %lld of %lld tensors widened, %.1f %s in %lld file%s\n",
      args.out.c_str(), (long long)result.old_expert_ffn, (long long)args.expert_ffn, (long long)result.n_widened,
      (long long)result.n_tensors, megabytes >= 1000 ? megabytes / 1000 : megabytes, megabytes >= 1000 ? "GB" : "MB",
      (long long)result.n_shards, result.n_shards == 1 ? "" : "s");
  return 0;
}

}  // namespace

Command register_widen(CLI::App& app) {
  auto args = std::make_shared<WidenArgs>();
  CLI::App* sub =
      app.add_subcommand("widen",
                         "Write a copy of a MoE checkpoint whose routed experts are zero-padded to a larger FFN size "
                         "(same outputs, bigger experts)");
  sub->add_option("-m,--model", args->model, "Hugging Face model folder");
  sub->add_option("--expert-ffn", args->expert_ffn, "New routed-expert FFN size (larger than the model's)")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("-o,--output", args->out, "Output folder (must not exist)")->required();
  sub->add_option("--max-shard-gb", args->max_shard_gb,
                  "Shard the output (model-0000i-of-0000n.safetensors + index) above this many GB")
      ->capture_default_str();
  return Command{sub, [args] { return run_widen(*args); }};
}

}  // namespace chronos::cli
