// The streaming flag group (--expert-cache, --on-miss, --wait-above, --prefetch, --prefetch-min-score,
// --prefetch-cap, --intent-share, --eviction, --io-latency-ms, --pread, --pinned-budget, --device), declared once for
// every subcommand that runs a model, with one parser per flag. Every error names its flag; the layers below never do.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chronos/expert_streamer.h"

namespace chronos::cli {

struct StreamingFlags {
  std::string expert_cache = "100%";  // or "auto": what the machine's free memory allows
  bool expert_cache_given = false;    // when not, a pack whose experts do not fit streams (default_expert_budget)
  std::string on_miss = "wait";
  std::string wait_above;  // empty: unset
  std::string prefetch = "none";
  std::string eviction = "next-use";
  std::string prefetch_min_score;  // empty: every prediction
  std::string prefetch_cap;        // empty: half the top-k experts' bytes per token at most; "none": no cap
  std::string intent_share;        // empty: StreamerOptions' default share of the cache for the prefill set
  std::string io_latency_ms = "0";
  bool pread = false;
  std::string pinned_budget;  // empty: the prefetcher's default (one staging slot per read in flight)
  std::string device = "cpu";
  std::string predictors;  // empty: the pack folder's own predictors
  std::string lowbit;      // empty: the pack folder's own low-bit copies

  // Any of the pack-only flags set to something else than its default.
  bool asks_for_streaming() const;
};

// Adds the group to `sub`. With `sweep` (bench), the first five take comma-separated lists and
// every combination is run.
void add_streaming_flags(CLI::App* sub, StreamingFlags& flags, bool sweep);

// One parser per flag; each throws UsageError naming its flag.
int64_t parse_expert_cache(const std::string& text, int64_t expert_bytes);
OnMiss parse_on_miss(const std::string& text);
// --wait-above: a routing weight in (0, 1]; nullopt for the empty text.
std::optional<float> parse_wait_above(const std::string& text);
PrefetchMode parse_prefetch(const std::string& text);
// --prefetch-min-score: a probability in [0, 1]; --prefetch-cap: bytes per token (64MiB, 2%), 0 for
// "none", StreamerOptions::kPrefetchCapHalfTopK for the empty text (the default).
float parse_prefetch_min_score(const std::string& text);
int64_t parse_prefetch_cap(const std::string& text, int64_t expert_bytes);
// --intent-share: the share of the cache, in [0, 1], the IntentClassifier's prefill set may fill.
double parse_intent_share(const std::string& text);
EvictionPolicy parse_eviction(const std::string& text);
double parse_io_latency_ms(const std::string& text);
int64_t parse_pinned_budget(const std::string& text, int64_t expert_bytes);
// A comma-separated list (bench's sweeps): at least one value, else UsageError naming `flag`.
std::vector<std::string> split_list(const std::string& text, const char* flag);

// How the model at `path` loads for a run with these flags: a .gguf file streams its routed
// experts in place when a streaming flag asks for it (--expert-cache included), or, with none, when
// they do not fit the memory here beside its dense weights (default_expert_budget); every other
// model loads as it is (a pack folder always streams, a checkpoint never).
ModelLoadOptions model_load_options(const StreamingFlags& flags, const std::filesystem::path& path);

// The words of a refusal for a model that cannot stream (a checkpoint folder).
inline constexpr const char* kNeedsStreamedModel =
    "--expert-cache, --on-miss, --prefetch, --predictors, --lowbit, --eviction, --io-latency-ms and --pread need a "
    "pack folder (chronos pack) or a .gguf file";

// StreamerOptions from single values (every list holds one element), checked. --expert-cache auto
// is resolved (auto_expert_budget, the line that explains it printed to stderr) when
// resident_bytes, what stays resident beside the cache, is given; a check before the model loads
// leaves it out.
StreamerOptions streamer_options(const StreamingFlags& flags, int64_t expert_bytes, int64_t resident_bytes = -1);

// An ExpertStreamer over `pack_dir`; a budget too small for one expert is reported with its flag.
std::unique_ptr<ExpertStreamer> make_streamer(const Model& model, const std::filesystem::path& pack_dir,
                                              Backend& backend, const StreamerOptions& options,
                                              const std::string& expert_cache, const std::string& pinned_budget);

// The streamer of a model whose experts stream, for one sequence of `n_ctx` positions: the flags'
// options, --expert-cache auto (or no --expert-cache) sized from what stays resident beside the cache
// (the dense weights, the KV store and `resident_elsewhere`, such as a reference model).
std::unique_ptr<ExpertStreamer> make_streamer(const Model& model, const std::filesystem::path& dir, Backend& backend,
                                              const StreamingFlags& flags, int64_t n_ctx,
                                              int64_t resident_elsewhere = 0);

// Where a streamed run's expert bytes went, as bench --json, generate --stats-json and perplexity
// --json report it: lookups and their outcomes, the byte hit rate (bytes of looked-up experts that
// were resident when asked), reads for demands and for predictions, prefetches used and wasted
// (evicted before any use), prefetch precision (used / prefetched) and the share of all bytes read
// that was wasted, read bandwidth while reads were in flight.
nlohmann::json streamer_stats_json(const StreamerStats& stats, int64_t extent_bytes);

}  // namespace chronos::cli
