// chronos pack: rewrite a checkpoint as a pack folder of co-activation clusters.
#include <unistd.h>

#include <cctype>
#include <optional>

#include "chronos/block_types.h"
#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/pack.h"
#include "cli/commands.h"

namespace chronos::cli {
namespace {

struct PackArgs {
  std::string model;
  std::string traces;
  std::string out;
  std::string cluster = "leiden";
  double max_cluster_mib = 256;
  uint64_t seed = 0;
  std::string expert_type;
  std::string dense_type;
  std::string lowbit_type;
  bool lowbit_only = false;
  int threads = 0;
};

// --expert-type / --dense-type: a float type or a block type, by name (case-insensitive).
std::optional<DType> parse_weight_type(const std::string& text, const char* flag) {
  if (text.empty()) return std::nullopt;
  std::string upper = text;
  for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  if (upper == "F32" || upper == "F16" || upper == "BF16") return dtype_from_name(upper);
  if (const auto block = block_dtype_from_name(text); block && find_block_type(*block)->quantizer) return block;
  if (const auto block = block_dtype_from_name(text))
    throw UsageError(
        fmt::format("{}: Chronos reads {} but does not quantize to it (it quantizes to f32, f16, bf16, {})", flag,
                    dtype_name(*block), block_type_names(true)));
  throw UsageError(
      fmt::format("{} must be f32, f16, bf16 or a block type: {} (got '{}')", flag, block_type_names(true), text));
}

int run_pack(const PackArgs& args) {
  PackOptions options;
  if (args.cluster == "leiden")
    options.method = ClusterMethod::kLeiden;
  else if (args.cluster == "louvain")
    options.method = ClusterMethod::kLouvain;
  else if (args.cluster == "none")
    options.method = ClusterMethod::kNone;
  else
    throw UsageError(fmt::format("--cluster must be leiden, louvain or none (got '{}')", args.cluster));
  if (!(args.max_cluster_mib > 0)) throw UsageError("--max-cluster-mib must be positive");
  options.max_cluster_bytes = int64_t(args.max_cluster_mib * 1024 * 1024);
  options.seed = args.seed;
  if (!args.traces.empty()) options.traces = args.traces;
  options.expert_type = parse_weight_type(args.expert_type, "--expert-type");
  options.dense_type = parse_weight_type(args.dense_type, "--dense-type");
  options.lowbit_type = parse_weight_type(args.lowbit_type, "--lowbit-type");
  options.lowbit_only = args.lowbit_only;
  if (args.lowbit_only && !options.lowbit_type) throw UsageError("--lowbit-only needs --lowbit-type");
  if (args.threads < 0) throw UsageError("--threads must be 0 (every hardware thread) or more");
  options.threads = args.threads;
  const auto dir = resolve_model_dir(args.model);
  // FP8 weights stay FP8 until each is converted (an FP8 checkpoint need not fit in memory as BF16).
  const auto model = Model::load(dir, ModelLoadOptions{.keep_fp8 = true});
  const bool tty = isatty(fileno(stderr));
  const PackSummary s = write_pack(*model, dir, args.out, options, [&](int64_t done, int64_t total) {
    if (tty) fmt::print(stderr, "\rpack: cluster {}/{}", done, total);
  });
  if (tty) fmt::print(stderr, "\n");
  if (args.lowbit_only) {
    fmt::print(stderr, "chronos: wrote the low-bit copies of {} into {}: {:.1f} MiB (use it with --lowbit {})\n",
               dir.string(), args.out, double(s.lowbit_bytes) / (1 << 20), args.out);
    return 0;
  }
  fmt::print(stderr,
             "chronos: packed {} into {}: {} clusters, {:.1f} MiB of experts, {:.1f} MiB dense; modularity {:.3f}, "
             "{:.1f}% of co-activation inside clusters ({} traced tokens){}\n",
             dir.string(), args.out, s.n_clusters, double(s.expert_bytes) / (1 << 20),
             double(s.dense_bytes) / (1 << 20), s.modularity, 100.0 * s.intra_cluster_weight_share, s.traced_tokens,
             s.lowbit_bytes > 0 ? fmt::format("; low-bit copies {:.1f} MiB", double(s.lowbit_bytes) / (1 << 20)) : "");
  return 0;
}

}  // namespace

Command register_pack(CLI::App& app) {
  auto args = std::make_shared<PackArgs>();
  CLI::App* sub =
      app.add_subcommand("pack", "Write a pack folder: dense.safetensors + routed experts in clustered .ctsr files");
  sub->add_option("-m,--model", args->model, "Hugging Face checkpoint folder");
  sub->add_option("--traces", args->traces, "Folder of routing traces (chronos trace) for the co-activation clusters");
  sub->add_option("-o,--out", args->out, "Pack folder to create")->required();
  sub->add_option("--cluster", args->cluster, "leiden, louvain or none")->capture_default_str();
  sub->add_option("--max-cluster-mib", args->max_cluster_mib, "Largest cluster file, MiB")->capture_default_str();
  sub->add_option("-s,--seed", args->seed, "Community-detection seed")->capture_default_str();
  sub->add_option(
      "--expert-type", args->expert_type,
      "Type of the routed experts: bf16, f16, f32, " + block_type_names(true) + " (default: the checkpoint's)");
  sub->add_option("--dense-type", args->dense_type,
                  "Type of the dense matrices (attention, shared expert, embeddings, LM head); norms and router "
                  "keep theirs (default: the checkpoint's)");
  sub->add_option("--lowbit-type", args->lowbit_type,
                  "Also write a low-bit copy of every routed expert in this type (" + block_type_names(true) +
                      ") for --on-miss lowbit");
  sub->add_flag("--lowbit-only", args->lowbit_only,
                "Write only the low-bit copies (lowbit.json + lowbit.ctsr), no pack: for a .gguf file streamed in "
                "place with --on-miss lowbit --lowbit DIR");
  sub->add_option("-t,--threads", args->threads, "Quantization threads (0: every hardware thread)")
      ->capture_default_str();
  return Command{sub, [args] { return run_pack(*args); }};
}

}  // namespace chronos::cli
