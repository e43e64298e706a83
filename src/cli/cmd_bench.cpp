// chronos bench: many prompts through a pack under a sweep of expert-cache budgets, miss policies
// and prefetch modes, side by side with the all-resident run; table on stderr, JSON and SVG files.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chronos/backend.h"
#include "chronos/budget.h"
#include "chronos/engine.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/svg_chart.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "chronos/trace.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/open_tokenizer.h"
#include "cli/streaming_flags.h"

namespace chronos::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model, prompts, json, svg;
  int64_t n_predict = 32;
  int64_t limit = 8;
  StreamingFlags streaming;  // lists: every combination is one configuration
  int threads = 0;
  int64_t ctx_size = 1024;
  bool no_baseline = false;
};

struct Config {
  std::string label;
  StreamingFlags flags;  // one value each
  StreamerOptions options;
  bool resident = false;
};

struct Result {
  Config config;
  int64_t decode_steps = 0;
  double decode_seconds = 0, ttft_seconds = 0;
  std::vector<double> step_seconds;
  StreamerStats stats;
  int64_t budget_bytes = 0;
  int64_t agree = 0, compared = 0;  // greedy agreement with the exact run
  double copy_seconds = 0;          // staging -> VRAM copy time (CUDA), timed on the copy stream
  double kl_sum = 0;
  bool identical = true;     // free-running tokens equal the exact run's
  int64_t extent_bytes = 0;  // one expert extent of the pack
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::min<double>(double(v.size() - 1), std::floor(q * double(v.size()))))];
}

// KL(p || q) of two logit vectors, in nats.
double kl_divergence(const float* p_logits, const float* q_logits, int64_t n) {
  auto log_softmax = [n](const float* x, std::vector<double>& out) {
    const double mx = *std::max_element(x, x + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
    const double log_z = mx + std::log(sum);
    out.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - log_z;
  };
  std::vector<double> lp, lq;
  log_softmax(p_logits, lp);
  log_softmax(q_logits, lq);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
  return std::max(0.0, kl);
}

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int run_bench(const BenchArgs& args) {
  // Every combination of the lists, each checked before the model is loaded.
  const StreamingFlags& lists = args.streaming;
  const auto caches = split_list(lists.expert_cache, "--expert-cache");
  const auto misses = split_list(lists.on_miss, "--on-miss");
  const auto prefetches = split_list(lists.prefetch, "--prefetch");
  const auto latencies = split_list(lists.io_latency_ms, "--io-latency-ms");
  const auto evictions = split_list(lists.eviction, "--eviction");
  const bool sweeps_predict = std::find(prefetches.begin(), prefetches.end(), "predict") != prefetches.end();
  const bool sweeps_lowbit = std::find(misses.begin(), misses.end(), "lowbit") != misses.end();
  std::vector<StreamingFlags> combinations;
  for (const auto& cache : caches)
    for (const auto& miss : misses)
      for (const auto& prefetch : prefetches)
        for (const auto& latency : latencies)
          for (const auto& eviction : evictions) {
            StreamingFlags one = lists;
            one.expert_cache = cache;
            one.expert_cache_given = true;  // a sweep's budgets are what its labels say
            one.on_miss = miss;
            one.prefetch = prefetch;
            one.io_latency_ms = latency;
            one.eviction = eviction;
            if (prefetch != "predict" && sweeps_predict) {  // the prediction filters: for its predict runs
              one.prefetch_min_score.clear();
              one.prefetch_cap.clear();
              one.intent_share.clear();
            }
            // The copies' folder is for the sweep's lowbit runs; --wait-above for those that do not wait.
            if (miss != "lowbit" && sweeps_lowbit) one.lowbit.clear();
            if (miss == "wait" && misses.size() > 1) one.wait_above.clear();
            streamer_options(one, int64_t(1) << 40);
            combinations.push_back(one);
          }
  const auto dir = resolve_model_dir(args.model);
  const auto prompts_all = read_prompts_jsonl(args.prompts);
  auto model = Model::load(dir, ModelLoadOptions{.stream_gguf_experts = true});
  if (!model->experts_streamed())
    throw_error("{}: chronos bench needs a pack folder (chronos pack) or a .gguf file", dir.string());
  const Tokenizer tokenizer = open_tokenizer(*model, dir);
  const ModelConfig& c = model->config();
  const int64_t n_ctx = std::min(args.ctx_size, c.n_ctx_train);
  if (args.n_predict + 1 >= n_ctx)
    throw UsageError(fmt::format("-n {} does not fit in a context of {} (--ctx-size)", args.n_predict, n_ctx));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < prompts_all.size() && std::ssize(prompts) < args.limit; ++i) {
    auto ids = tokenizer.encode(prompts_all[i].text, true);
    if (ids.empty()) throw_error("{}: prompt '{}' has no tokens", args.prompts, prompts_all[i].id);
    if (std::ssize(ids) + args.n_predict >= n_ctx) {
      spdlog::warn("prompt '{}': {} tokens cut to its first {} to leave room for -n {} in a context of {}",
                   prompts_all[i].id, ids.size(), n_ctx - args.n_predict - 1, args.n_predict, n_ctx);
      ids.resize(size_t(n_ctx - args.n_predict - 1));
    }
    prompts.push_back(std::move(ids));
  }

  std::vector<Config> configs;
  const int64_t expert_bytes = model->sizes().expert_bytes;
  if (!args.no_baseline) {
    StreamingFlags flags;  // 100%, wait, none, no latency; the run's I/O and device settings
    flags.pread = lists.pread;
    flags.device = lists.device;
    flags.pinned_budget = lists.pinned_budget;
    configs.push_back({"all-resident", flags, streamer_options(flags, expert_bytes), true});
  }
  // Resident beside the cache: the dense weights and one sequence's KV store.
  const int64_t resident = model->sizes().dense_bytes + KvStore::bytes_per_slot(c, n_ctx);
  for (const StreamingFlags& one : combinations) {
    Config cfg{"", one, streamer_options(one, expert_bytes, resident), false};
    cfg.label = fmt::format("cache {} {}{} prefetch {}{}{}", one.expert_cache, one.on_miss,
                            one.wait_above.empty() ? "" : ">" + one.wait_above, one.prefetch,
                            cfg.options.prefetch.io_latency_ms > 0 ? fmt::format(" +{}ms", one.io_latency_ms) : "",
                            evictions.size() > 1 ? " " + one.eviction : "");
    configs.push_back(cfg);
  }

  int64_t resident_budget = 0;
  {
    const PackManifest manifest = model->gguf_experts() ? *model->gguf_experts() : PackManifest::load(dir);
    int64_t slot = 0;
    for (const auto& [key, e] : manifest.experts) slot = std::max(slot, e.bytes);
    resident_budget = slot * std::ssize(manifest.experts);
  }
  warn_if_oversubscribed(args.threads);
  ThreadPool pool(args.threads > 0 ? args.threads : available_cpus());
  const bool on_cuda = lists.device != "cpu";
  if (!lists.pinned_budget.empty() && !on_cuda) throw UsageError("--pinned-budget needs --device cuda");
  std::vector<float> logits(size_t(c.n_vocab));
  std::vector<std::vector<int32_t>> exact_tokens(prompts.size());
  std::vector<std::vector<float>> exact_logits(prompts.size());  // [n_predict * n_vocab] per prompt
  const bool need_exact = std::any_of(configs.begin(), configs.end(), [](const Config& x) { return !x.resident; });
  std::vector<Result> results;

  for (const Config& cfg : configs) {
    auto backend = make_backend(lists.device);
    StreamerOptions so = cfg.options;
    // The resident run gets room for every extent (slots are the largest extent each).
    if (cfg.resident) so.budget_bytes = resident_budget;
    const auto streamer_owner = make_streamer(*model, dir, *backend, so, cfg.flags.expert_cache, lists.pinned_budget);
    ExpertStreamer& streamer = *streamer_owner;
    if (cfg.resident) streamer.load_all();
    const auto runner = on_cuda ? make_cuda_runner(*model, *backend, n_ctx, 32, streamer.hooks())
                                : make_cpu_runner(*model, pool, n_ctx, 32, streamer.hooks());
    const Engine engine(runner.get(), &streamer);
    Result r;
    r.config = cfg;
    r.budget_bytes = cfg.resident ? streamer.n_slots() * streamer.cache().slot_bytes() : so.budget_bytes;
    const StreamerStats before = streamer.stats();
    const double copies_before = backend->copy_seconds();
    const bool teacher_forced = cfg.options.on_miss != OnMiss::kWait && !exact_tokens[0].empty();
    for (size_t p = 0; p < prompts.size(); ++p) {
      const auto& ids = prompts[p];
      const bool record_exact = cfg.resident && need_exact;
      if (record_exact) exact_logits[p].resize(size_t(args.n_predict * c.n_vocab));
      auto start = Clock::now();
      engine.begin_request();
      engine.forward(ids, 0, logits.data());
      int32_t token = argmax(logits);
      r.ttft_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<int32_t> produced = {token};
      for (int64_t i = 0; i < args.n_predict; ++i) {
        if (record_exact) std::copy(logits.begin(), logits.end(), exact_logits[p].begin() + i * c.n_vocab);
        if (!cfg.resident && !exact_tokens[p].empty() && i < std::ssize(exact_tokens[p])) {
          const int32_t expected = exact_tokens[p][size_t(i)];
          r.agree += token == expected;
          ++r.compared;
          if (teacher_forced) {
            r.kl_sum += kl_divergence(exact_logits[p].data() + i * c.n_vocab, logits.data(), c.n_vocab);
            token = expected;  // follow the exact run so every step compares the same context
          } else if (token != expected) {
            r.identical = false;
          }
        }
        if (i + 1 == args.n_predict) break;
        const auto step_start = Clock::now();
        const int64_t pos = std::ssize(ids) + i;
        engine.forward(std::span<const int32_t>(&token, 1), pos, logits.data());
        token = argmax(logits);
        produced.push_back(token);
        const double dt = std::chrono::duration<double>(Clock::now() - step_start).count();
        r.step_seconds.push_back(dt);
        r.decode_seconds += dt;
        ++r.decode_steps;
      }
      if (record_exact) exact_tokens[p] = produced;
    }
    r.stats = streamer.stats();
    r.copy_seconds = backend->copy_seconds() - copies_before;
    r.stats.stall_seconds -= before.stall_seconds;
    r.stats.prefetch.bytes_read -= before.prefetch.bytes_read;
    r.stats.prefetch.busy_seconds -= before.prefetch.busy_seconds;
    r.stats.predicted -= before.predicted;
    r.extent_bytes = streamer.extent_bytes();
    results.push_back(std::move(r));
  }

  // Table on stderr.
  fmt::print(stderr, "\nchronos bench: {} ({} prompts x {} tokens, {} threads, io {}, device {})\n", dir.string(),
             prompts.size(), args.n_predict, pool.size(), lists.pread ? "pread" : "io_uring", lists.device);
  fmt::print(stderr, "{:<40} {:>9} {:>8} {:>8} {:>8} {:>9} {:>7} {:>8} {:>9} {:>8} {:>7} {:>9}\n", "configuration",
             "decode/s", "ttft ms", "p50 ms", "p99 ms", "stall s", "hit %", "approx%", "read MiB", "read GB/s",
             "agree%", "mean KL");
  nlohmann::json out = nlohmann::json::array();
  std::vector<std::string> labels;
  BarSeries tps{"decode tokens/s", {}}, stall{"seconds the compute side waited on I/O", {}};
  ScatterPanel quality{"quality against speed, per budget",
                       "decode tokens/s",
                       "top-1 agreement with the exact run, teacher-forced (%)",
                       {}};
  for (const Result& r : results) {
    const double lookups = double(std::max<int64_t>(1, r.stats.lookups));
    const double decode_tps = r.decode_seconds > 0 ? double(r.decode_steps) / r.decode_seconds : 0;
    const double read_gbps = r.stats.prefetch.busy_seconds > 0
                                 ? double(r.stats.prefetch.bytes_read) / r.stats.prefetch.busy_seconds / 1e9
                                 : 0;
    // Quality figures need the exact run to compare with: without it (--no-baseline) there are none.
    // The all-resident row is the reference itself: it agrees with itself by definition.
    const bool compared = r.compared > 0 || r.config.resident;
    const double agree = r.compared > 0 ? 100.0 * double(r.agree) / double(r.compared) : compared ? 100.0 : 0.0;
    const bool approximate = r.config.options.on_miss != OnMiss::kWait;
    const bool has_kl = approximate && r.compared > 0;
    const double mean_kl = has_kl ? r.kl_sum / double(r.compared) : 0.0;
    fmt::print(stderr,
               "{:<40} {:>9.2f} {:>8.1f} {:>8.2f} {:>8.2f} {:>9.3f} {:>7.1f} {:>8.1f} {:>9.1f} {:>8.2f} {:>7} {:>9}\n",
               r.config.label, decode_tps, 1e3 * r.ttft_seconds / double(prompts.size()),
               1e3 * percentile(r.step_seconds, 0.5), 1e3 * percentile(r.step_seconds, 0.99), r.stats.stall_seconds,
               100.0 * double(r.stats.hits) / lookups, 100.0 * double(r.stats.fallbacks + r.stats.lowbit) / lookups,
               double(r.stats.prefetch.bytes_read) / (1 << 20), read_gbps,
               compared ? fmt::format("{:.1f}", agree) : "-", has_kl ? fmt::format("{:.4f}", mean_kl) : "-");
    labels.push_back(r.config.label);
    if (compared)
      quality.points.push_back(
          {r.config.resident ? "all resident" : fmt::format("{} {}", r.config.flags.on_miss, r.config.flags.prefetch),
           r.config.resident ? "all resident" : "cache " + r.config.flags.expert_cache, decode_tps, agree});
    tps.values.push_back(decode_tps);
    stall.values.push_back(r.stats.stall_seconds);
    out.push_back({{"configuration", r.config.label},
                   {"expert_cache", r.config.flags.expert_cache},
                   {"budget_bytes", r.budget_bytes},
                   {"on_miss", r.config.resident ? std::string("wait") : r.config.flags.on_miss},
                   {"wait_above", r.config.options.wait_above ? nlohmann::json(*r.config.options.wait_above)
                                                              : nlohmann::json(nullptr)},
                   {"prefetch", r.config.flags.prefetch},
                   {"io_latency_ms", r.config.options.prefetch.io_latency_ms},
                   {"eviction", r.config.flags.eviction},
                   {"all_resident", r.config.resident},
                   {"decode_tokens_per_second", decode_tps},
                   {"decode_seconds", r.decode_seconds},
                   {"decode_steps", r.decode_steps},
                   {"time_to_first_token_seconds", r.ttft_seconds / double(prompts.size())},
                   {"token_latency_p50_seconds", percentile(r.step_seconds, 0.5)},
                   {"token_latency_p99_seconds", percentile(r.step_seconds, 0.99)},
                   {"stall_seconds", r.stats.stall_seconds},
                   {"lookups", r.stats.lookups},
                   {"hits", r.stats.hits},
                   {"hits_loading", r.stats.hits_loading},
                   {"misses", r.stats.misses},
                   {"fallbacks", r.stats.fallbacks},
                   {"lowbit", r.stats.lowbit},
                   {"bytes_read", r.stats.prefetch.bytes_read},
                   {"prefetch_requests", r.stats.predicted},
                   {"predict_seconds", r.stats.predict_seconds},
                   {"cache_protected_skips", r.stats.cache.protected_skips},
                   {"read_bandwidth_bytes_per_second", read_gbps * 1e9},
                   {"peak_cache_bytes", r.stats.cache.peak_bytes},
                   {"greedy_agreement", compared ? nlohmann::json(agree / 100.0) : nlohmann::json(nullptr)},
                   {"mean_kl", has_kl ? nlohmann::json(mean_kl) : nlohmann::json(nullptr)},
                   {"device", lists.device},
                   {"device_waits", r.stats.device_waits},
                   {"copies", r.stats.prefetch.copies},
                   {"copy_seconds", r.copy_seconds},
                   {"tokens_identical_to_exact",
                    approximate || !compared ? nlohmann::json(nullptr) : nlohmann::json(r.identical)}});
    out.back()["bytes"] = streamer_stats_json(r.stats, r.extent_bytes);
    if (!approximate && !r.config.resident && compared && !r.identical)
      spdlog::error("{}: wait mode produced other tokens than the exact run", r.config.label);
  }
  if (!args.json.empty()) write_file_atomically(args.json, out.dump(2) + "\n");
  if (!args.svg.empty())
    write_file_atomically(args.svg, svg_bar_chart(fmt::format("chronos bench: {}", dir.filename().string()), labels,
                                                  {tps, stall}, quality));
  return 0;
}

}  // namespace

Command register_bench(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub =
      app.add_subcommand("bench", "Benchmark a pack over prompts and sweeps of cache budget, miss policy, prefetch");
  sub->add_option("-m,--model", args->model, "Pack folder or .gguf file");
  sub->add_option("--prompts", args->prompts, "Prompts (JSON lines with \"prompt\")")->required();
  sub->add_option("-n,--n-predict", args->n_predict, "Tokens per prompt")
      ->capture_default_str()
      ->check(count_in<int64_t>(1, kMaxNewTokens));
  sub->add_option("--limit", args->limit, "Prompts to run")
      ->capture_default_str()
      ->check(count_in<int64_t>(1, 1 << 20));
  add_streaming_flags(sub, args->streaming, /*sweep=*/true);
  sub->add_option("-t,--threads", args->threads, "Threads (default: all available CPUs)")
      ->check(count_in(1, kMaxThreads));
  sub->add_option("-c,--ctx-size", args->ctx_size, "Context length")
      ->capture_default_str()
      ->check(count_in<int64_t>(2, kMaxContext));
  sub->add_option("--json", args->json, "Write the results as JSON");
  sub->add_option("--svg", args->svg,
                  "Write a comparison plot (SVG): tokens/s, stall time, and quality against speed per budget");
  sub->add_flag("--no-baseline", args->no_baseline, "Skip the all-resident run (no quality columns then)");
  return Command{sub, [args] { return run_bench(*args); }};
}

}  // namespace chronos::cli
