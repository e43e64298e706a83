// The streaming flag group and its parsers.
#include "cli/streaming_flags.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "chronos/budget.h"
#include "chronos/error.h"
#include "chronos/gguf.h"
#include "cli/flags.h"

namespace chronos::cli {

bool StreamingFlags::asks_for_streaming() const {
  const StreamingFlags defaults;
  return expert_cache != defaults.expert_cache || on_miss != defaults.on_miss || !wait_above.empty() ||
         prefetch != defaults.prefetch || !prefetch_min_score.empty() || !prefetch_cap.empty() ||
         !intent_share.empty() || eviction != defaults.eviction || io_latency_ms != defaults.io_latency_ms || pread ||
         !predictors.empty() || !lowbit.empty();
}

ModelLoadOptions model_load_options(const StreamingFlags& flags, const std::filesystem::path& path) {
  if (!is_gguf_path(path)) return {};
  if (flags.asks_for_streaming() || flags.expert_cache_given) return {.stream_gguf_experts = true};
  // No flag: the file's expert and dense bytes from its directory, before anything is mapped for use.
  const auto file = GgufFile::open(path);
  int64_t expert_bytes = 0, dense_bytes = 0;
  for (const GgufTensor& t : file->tensors()) (is_stacked_experts(t.name) ? expert_bytes : dense_bytes) += t.n_bytes;
  if (expert_bytes == 0) return {};
  try {
    const AutoBudget budget = default_expert_budget(available_memory(), expert_bytes, dense_bytes);
    return {.stream_gguf_experts = budget.bytes < expert_bytes};
  } catch (const Error& e) {
    spdlog::debug("the free memory is unknown ({}): {} is mapped whole", e.what(), path.string());
    return {};
  }
}

void add_streaming_flags(CLI::App* sub, StreamingFlags& f, bool sweep) {
  const char* list = sweep ? "Comma-separated " : "";
  sub->add_option("--expert-cache", f.expert_cache,
                  fmt::format("Streamed experts (a pack folder, or a .gguf file read in place): {}expert cache "
                              "budget{} (2GiB, 512MB, 25%, or auto: what the free "
                              "memory allows beside the resident weights; without the flag every expert, or auto "
                              "when they do not fit)",
                              list, sweep ? "s" : ""))
      ->capture_default_str()
      ->each([&f](const std::string&) { f.expert_cache_given = true; });
  sub->add_option(
         "--on-miss", f.on_miss,
         fmt::format(
             "Streamed experts: {}wait (exact), lowbit (the expert's resident low-bit copy; needs a pack "
             "made with --lowbit-type, or --lowbit DIR) or fallback (left out); lowbit and fallback never block",
             list))
      ->capture_default_str();
  sub->add_option(
      "--wait-above", f.wait_above,
      "Streamed experts, --on-miss lowbit or fallback: wait for a missing expert whose routing weight is at "
      "least this (0..1) instead");
  sub->add_option("--prefetch", f.prefetch,
                  fmt::format("Streamed experts: {}none, lru or predict (trained predictors)", list))
      ->capture_default_str();
  sub->add_option("--prefetch-min-score", f.prefetch_min_score,
                  "Streamed experts, --prefetch predict: read ahead only experts predicted with at least this "
                  "probability (0..1)");
  sub->add_option(
      "--prefetch-cap", f.prefetch_cap,
      "Streamed experts, --prefetch predict: at most this many bytes read ahead per token (64MiB, 2%; none: "
      "no cap), the nearest and most likely first (default: the bytes of half the top-k experts)");
  sub->add_option("--intent-share", f.intent_share,
                  "Streamed experts, --prefetch predict: share of the expert cache (0..1) the IntentClassifier's set "
                  "read at prefill may fill; 0 turns it off (default 0.5)");
  sub->add_option("--predictors", f.predictors,
                  "Streamed experts, --prefetch predict: the folder of predictors.safetensors (chronos "
                  "train-predictors -o DIR) when it is not the pack folder, as for a .gguf file; predictors trained "
                  "on another model are refused");
  sub->add_option("--lowbit", f.lowbit,
                  "Streamed experts, --on-miss lowbit: the folder of low-bit copies (chronos pack -m FILE.gguf "
                  "--lowbit-type q2_k --lowbit-only -o DIR) when they are not in the pack, as for a .gguf file");
  sub->add_option("--eviction", f.eviction,
                  fmt::format("Streamed experts: {}lru, lru-freq, per-layer or next-use", list))
      ->capture_default_str();
  sub->add_option("--io-latency-ms", f.io_latency_ms,
                  fmt::format("Streamed experts: {}milliseconds added to every expert read", list))
      ->capture_default_str();
  sub->add_flag("--pread", f.pread, "Streamed experts: read with pread threads instead of io_uring");
  sub->add_option("--pinned-budget", f.pinned_budget,
                  "CUDA + streamed experts: page-locked staging memory for expert reads (256MiB, 5%; default: one "
                  "slot per read in flight)");
  sub->add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
}

namespace {

// parse_budget's own message, prefixed with the flag that gave the text.
int64_t budget_of(const std::string& text, int64_t total_bytes, const char* flag) {
  try {
    return parse_budget(text, total_bytes);
  } catch (const Error& e) {
    throw UsageError(fmt::format("{}: {}", flag, e.what()));
  }
}

}  // namespace

int64_t parse_expert_cache(const std::string& text, int64_t expert_bytes) {
  return budget_of(text, expert_bytes, "--expert-cache");
}

int64_t parse_pinned_budget(const std::string& text, int64_t expert_bytes) {
  return budget_of(text, expert_bytes, "--pinned-budget");
}

OnMiss parse_on_miss(const std::string& text) {
  if (text == "wait") return OnMiss::kWait;
  if (text == "lowbit") return OnMiss::kLowbit;
  if (text == "fallback") return OnMiss::kFallback;
  throw UsageError(fmt::format("--on-miss: '{}' is not wait, lowbit or fallback", text));
}

std::optional<float> parse_wait_above(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (const std::string why = finite_in(0.0, 1.0)(text); !why.empty())
    throw UsageError(fmt::format("--wait-above: {}", why));
  return float(std::stod(text));
}

PrefetchMode parse_prefetch(const std::string& text) {
  if (text == "none") return PrefetchMode::kNone;
  if (text == "lru") return PrefetchMode::kLru;
  if (text == "predict") return PrefetchMode::kPredict;
  throw UsageError(fmt::format("--prefetch: '{}' is not none, lru or predict", text));
}

float parse_prefetch_min_score(const std::string& text) {
  if (text.empty()) return 0.0f;
  if (const std::string why = finite_in(0.0, 1.0)(text); !why.empty())
    throw UsageError(fmt::format("--prefetch-min-score: {}", why));
  return float(std::stod(text));
}

int64_t parse_prefetch_cap(const std::string& text, int64_t expert_bytes) {
  if (text.empty()) return StreamerOptions::kPrefetchCapHalfTopK;
  if (text == "none") return 0;
  return budget_of(text, expert_bytes, "--prefetch-cap");
}

double parse_intent_share(const std::string& text) {
  if (text.empty()) return StreamerOptions{}.intent_share;
  if (const std::string why = finite_in(0.0, 1.0)(text); !why.empty())
    throw UsageError(fmt::format("--intent-share: {}", why));
  return std::stod(text);
}

EvictionPolicy parse_eviction(const std::string& text) {
  if (text == "lru") return EvictionPolicy::kLru;
  if (text == "lru-freq") return EvictionPolicy::kLruFrequency;
  if (text == "per-layer") return EvictionPolicy::kPerLayer;
  if (text == "next-use") return EvictionPolicy::kNextUse;
  throw UsageError(fmt::format("--eviction: '{}' is not lru, lru-freq, per-layer or next-use", text));
}

double parse_io_latency_ms(const std::string& text) {
  std::string value = text;
  if (const std::string why = finite_in(0.0, kMaxIoLatencyMs)(value); !why.empty())
    throw UsageError(fmt::format("--io-latency-ms: {}", why));
  return std::stod(value);
}

std::vector<std::string> split_list(const std::string& text, const char* flag) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) parts.push_back(part);
  if (parts.empty()) throw UsageError(fmt::format("{}: no value given ('{}')", flag, text));
  return parts;
}

StreamerOptions streamer_options(const StreamingFlags& f, int64_t expert_bytes, int64_t resident_bytes) {
  StreamerOptions so;
  if (f.expert_cache == "auto") {
    so.budget_bytes = expert_bytes;  // a placeholder for the checks before the model loads
    if (resident_bytes >= 0) {
      const AutoBudget budget = auto_expert_budget(available_memory(), expert_bytes, resident_bytes);
      fmt::print(stderr, "chronos: --expert-cache auto: {}\n", budget.explanation);
      so.budget_bytes = budget.bytes;
    }
  } else if (!f.expert_cache_given && resident_bytes >= 0) {
    // No budget asked for: every expert, unless they do not fit here (or the memory cannot be read).
    so.budget_bytes = expert_bytes;
    try {
      const AutoBudget budget = default_expert_budget(available_memory(), expert_bytes, resident_bytes);
      if (!budget.explanation.empty()) fmt::print(stderr, "chronos: {}\n", budget.explanation);
      so.budget_bytes = budget.bytes;
    } catch (const Error& e) {
      spdlog::debug("the free memory is unknown ({}): every expert", e.what());
    }
  } else {
    so.budget_bytes = parse_expert_cache(f.expert_cache, expert_bytes);
  }
  so.on_miss = parse_on_miss(f.on_miss);
  so.wait_above = parse_wait_above(f.wait_above);
  if (so.wait_above && so.on_miss == OnMiss::kWait)
    throw UsageError("--wait-above applies to --on-miss lowbit or fallback (wait always waits)");
  so.mode = parse_prefetch(f.prefetch);
  so.prefetch_min_score = parse_prefetch_min_score(f.prefetch_min_score);
  so.prefetch_bytes_per_step = parse_prefetch_cap(f.prefetch_cap, expert_bytes);
  so.intent_share = parse_intent_share(f.intent_share);
  if ((!f.prefetch_min_score.empty() || !f.prefetch_cap.empty() || !f.intent_share.empty()) &&
      so.mode != PrefetchMode::kPredict)
    throw UsageError("--prefetch-min-score, --prefetch-cap and --intent-share apply to --prefetch predict");
  so.policy = parse_eviction(f.eviction);
  so.prefetch.io_latency_ms = parse_io_latency_ms(f.io_latency_ms);
  so.prefetch.force_pread = f.pread;
  if (!f.predictors.empty()) {
    if (so.mode != PrefetchMode::kPredict) throw UsageError("--predictors applies to --prefetch predict");
    if (!std::filesystem::is_directory(f.predictors))
      throw UsageError(
          fmt::format("--predictors {}: not a folder (chronos train-predictors -o makes one)", f.predictors));
    so.predictors_dir = f.predictors;
  }
  if (!f.lowbit.empty()) {
    if (so.on_miss != OnMiss::kLowbit) throw UsageError("--lowbit applies to --on-miss lowbit");
    if (!std::filesystem::is_directory(f.lowbit))
      throw UsageError(fmt::format("--lowbit {}: not a folder (chronos pack --lowbit-only -o makes one)", f.lowbit));
    so.lowbit_dir = f.lowbit;
  }
  if (!f.pinned_budget.empty()) so.prefetch.staging_bytes = parse_pinned_budget(f.pinned_budget, expert_bytes);
  return so;
}

std::unique_ptr<ExpertStreamer> make_streamer(const Model& model, const std::filesystem::path& pack_dir,
                                              Backend& backend, const StreamerOptions& options,
                                              const std::string& expert_cache, const std::string& pinned_budget) {
  try {
    return std::make_unique<ExpertStreamer>(model, pack_dir, backend, options);
  } catch (const BudgetTooSmall& e) {
    if (e.budget() == BudgetTooSmall::Budget::kStaging) throw_error("--pinned-budget {}: {}", pinned_budget, e.what());
    throw_error("--expert-cache {}: {}", expert_cache, e.what());
  }
}

std::unique_ptr<ExpertStreamer> make_streamer(const Model& model, const std::filesystem::path& dir, Backend& backend,
                                              const StreamingFlags& flags, int64_t n_ctx, int64_t resident_elsewhere) {
  const int64_t resident =
      model.sizes().dense_bytes + KvStore::bytes_per_slot(model.config(), n_ctx) + resident_elsewhere;
  return make_streamer(model, dir, backend, streamer_options(flags, model.sizes().expert_bytes, resident),
                       flags.expert_cache, flags.pinned_budget);
}

nlohmann::json streamer_stats_json(const StreamerStats& s, int64_t extent_bytes) {
  const auto ratio = [](double num, double den) {
    return den > 0 ? nlohmann::json(num / den) : nlohmann::json(nullptr);
  };
  const CacheStats& c = s.cache;
  const int64_t reads = c.demand_loads + c.prefetch_loads;
  return {{"lookups", s.lookups},
          {"hits", s.hits},
          {"hits_loading", s.hits_loading},
          {"misses", s.misses},
          {"waits", s.waits},
          {"lowbit", s.lowbit},
          {"fallbacks", s.fallbacks},
          {"stall_seconds", s.stall_seconds},
          {"byte_hit_rate", ratio(double(s.hit_bytes), double(s.lookup_bytes))},
          {"bytes_read", s.prefetch.bytes_read},
          {"demand_reads", c.demand_loads},
          {"prefetch_reads", c.prefetch_loads},
          {"prefetch_used", c.prefetch_used},
          {"prefetch_wasted", c.prefetch_wasted},
          {"wasted_prefetch_bytes", c.prefetch_wasted * extent_bytes},
          {"prefetch_precision", ratio(double(c.prefetch_used), double(c.prefetch_loads))},
          {"predictions_dropped", s.predictions_dropped},
          {"wasted_share_of_reads", ratio(double(c.prefetch_wasted), double(reads))},
          {"read_bandwidth_bytes_per_second", ratio(double(s.prefetch.bytes_read), s.prefetch.busy_seconds)}};
}

}  // namespace chronos::cli
