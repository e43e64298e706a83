// Reading a whole pack through AsyncPrefetcher into a cache that holds all of it: coalesced runs of
// file-adjacent experts against one read per expert, io_uring against pread.
//   chronos_bench_prefetch -p PACK [--passes 3] [--queue-depth 16] [--max-run-mib 32]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_cache.h"
#include "chronos/pack_format.h"
#include "chronos/prefetcher.h"
#include "chronos/shared_expert_cache.h"

namespace chronos {
namespace {

using Clock = std::chrono::steady_clock;

struct PassResult {
  double seconds = 0.0;
  PrefetchStats stats;
  std::string backend;
};

// One pass: a fresh cache (every slot touched first, so page faults are not timed), every expert
// enqueued in file order at one priority, timed until the last one is ready.
PassResult read_pack(const PackManifest& manifest, const std::filesystem::path& pack_dir, Backend& backend,
                     const AsyncPrefetcher::Options& options) {
  int64_t slot_bytes = 0;
  for (const auto& [key, e] : manifest.experts) slot_bytes = std::max(slot_bytes, e.bytes);
  SharedExpertCache cache(backend, {slot_bytes * std::ssize(manifest.experts), slot_bytes});
  {
    auto locked = cache.lock();
    for (const auto& [key, e] : manifest.experts) {
      const auto slot = locked->begin_load(key);
      CHRONOS_CHECK(slot.has_value());
      std::memset(slot->data, 0, size_t(slot_bytes));
      locked->abort_load(key);
    }
  }
  std::vector<FetchRequest> requests;
  for (const PackCluster& cluster : manifest.clusters)
    for (const ExpertKey& key : cluster.experts) requests.push_back({key, FetchPriority::kLater, 0});

  AsyncPrefetcher prefetcher(manifest, pack_dir, cache, backend, options);
  const auto start = Clock::now();
  prefetcher.enqueue(requests);
  cache.lock().wait([&] { return prefetcher.stats().reads >= std::ssize(requests) || prefetcher.error(); });
  PassResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (prefetcher.error()) std::rethrow_exception(prefetcher.error());
  result.stats = prefetcher.stats();
  result.backend = prefetcher.io_backend();
  return result;
}

}  // namespace
}  // namespace chronos

int main(int argc, char** argv) {
  using namespace chronos;
  CLI::App app{"Whole-pack read throughput through the prefetcher: coalesced vs one read per expert"};
  std::string pack_dir;
  int passes = 3;
  unsigned queue_depth = 16;
  int64_t max_run_mib = 32;
  int max_run_experts = 8;
  bool verify = true;
  app.add_option("-p,--pack", pack_dir, "Pack folder (chronos pack output)")->required();
  app.add_option("--passes", passes, "Passes per configuration (the median is reported)")->capture_default_str();
  app.add_option("--queue-depth", queue_depth, "Experts in flight")->capture_default_str();
  app.add_option("--max-run-mib", max_run_mib, "Largest coalesced read, MiB")->capture_default_str();
  app.add_option("--max-run-experts", max_run_experts, "Most experts in one coalesced read")->capture_default_str();
  app.add_option("--verify", verify, "Checksum every expert (as the engine does)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const PackManifest manifest = PackManifest::load(pack_dir);
    const auto backend = make_cpu_backend();
    int64_t pack_bytes = 0;
    for (const auto& [key, e] : manifest.experts) pack_bytes += e.bytes;
    fmt::print(
        "pack {}: {} experts in {} cluster files, {:.1f} MiB; queue depth {}, runs <= {} experts / {} MiB, "
        "checksums {}\n",
        pack_dir, manifest.experts.size(), manifest.clusters.size(), double(pack_bytes) / double(1 << 20), queue_depth,
        max_run_experts, max_run_mib, verify ? "on" : "off");
    fmt::print("| {:<8} | {:<8} | {:>9} | {:>9} | {:>11} | {:>6} | {:>15} |\n", "backend", "coalesce", "GB/s (med)",
               "GB/s best", "io_requests", "reads", "mean latency ms");
    fmt::print("|----------|----------|-----------:|----------:|------------:|-------:|----------------:|\n");
    for (const bool force_pread : {false, true}) {
      for (const bool coalesce : {false, true}) {
        AsyncPrefetcher::Options options;
        options.queue_depth = queue_depth;
        options.force_pread = force_pread;
        options.coalesce = coalesce;
        options.max_run_bytes = max_run_mib << 20;
        options.max_run_experts = max_run_experts;
        options.verify_checksums = verify;
        std::vector<PassResult> results;
        for (int pass = 0; pass < passes; ++pass) results.push_back(read_pack(manifest, pack_dir, *backend, options));
        std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.seconds < b.seconds; });
        const PassResult& median = results[results.size() / 2];
        const auto gbps = [](const PassResult& r) { return double(r.stats.bytes_read) / r.seconds / 1e9; };
        fmt::print("| {:<8} | {:<8} | {:>10.2f} | {:>9.2f} | {:>11} | {:>6} | {:>15.2f} |\n", median.backend,
                   coalesce ? "on" : "off", gbps(median), gbps(results.front()), median.stats.io_requests,
                   median.stats.reads, 1e3 * median.stats.read_latency_seconds / double(median.stats.reads));
      }
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
