// Read throughput of IoRing over one file with O_DIRECT, per block size (compare with fio:
// scripts/bench_io_vs_fio.sh runs both side by side).
//   chronos_bench_io --file F [--block-size 128k,1M,4M,12M] [--queue-depth 32] [--pattern seq|rand]
//                    [--backend io_uring|pread] [--repeats 3] [--fixed-buffers] [--tsv]
// Each measurement reads floor(size / block) whole blocks once, keeping queue-depth reads in
// flight. O_DIRECT bypasses the page cache, so nothing needs dropping between runs (a file that
// the filesystem refuses O_DIRECT on is reported as "buffered" and then measures the cache).
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "chronos/error.h"
#include "chronos/io_ring.h"

namespace chronos {
namespace {

// "128k", "1M", "12M", "4096" -> bytes.
int64_t parse_size(const std::string& text) {
  size_t used = 0;
  const int64_t value = std::stoll(text, &used);
  const std::string suffix = text.substr(used);
  int64_t scale = 1;
  if (suffix == "k" || suffix == "K" || suffix == "KiB")
    scale = int64_t(1) << 10;
  else if (suffix == "m" || suffix == "M" || suffix == "MiB")
    scale = int64_t(1) << 20;
  else if (suffix == "g" || suffix == "G" || suffix == "GiB")
    scale = int64_t(1) << 30;
  else if (!suffix.empty())
    throw UsageError(fmt::format("--block-size: bad size \"{}\"", text));
  if (value <= 0) throw UsageError(fmt::format("--block-size: \"{}\" is not positive", text));
  return value * scale;
}

double cpu_seconds() {
  rusage usage{};
  CHRONOS_CHECK(::getrusage(RUSAGE_SELF, &usage) == 0);
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Result {
  double gb_per_s = 0.0;
  double cpu_per_gb = 0.0;  // CPU seconds (user + system, all threads) per GB read
};

// Reads blocks (in `order`) of `block` bytes, queue_depth at a time; every block's completion is
// checked. Returns the throughput of one pass.
Result read_once(IoRing& ring, const DirectFile& file, int64_t block, const std::vector<int64_t>& order,
                 std::vector<char*>& buffers) {
  const size_t depth = buffers.size();
  std::vector<ReadRequest> batch;
  std::vector<ReadCompletion> done;
  batch.reserve(depth);
  done.reserve(depth);
  std::vector<size_t> free_buffers(depth);
  for (size_t i = 0; i < depth; ++i) free_buffers[i] = i;

  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  size_t next = 0;
  int64_t bytes = 0;
  while (next < order.size() || ring.in_flight() > 0) {
    batch.clear();
    while (next < order.size() && !free_buffers.empty()) {
      const size_t buffer = free_buffers.back();
      free_buffers.pop_back();
      batch.push_back({file.fd(), order[next] * block, block, buffers[buffer], buffer});
      ++next;
    }
    if (!batch.empty()) ring.submit(batch);
    done.clear();
    ring.reap(done, 1);
    for (const ReadCompletion& c : done) {
      if (c.error != 0) throw_error("{}: read failed: {}", file.path().string(), std::strerror(c.error));
      if (c.bytes != block) throw_error("{}: short read ({} of {} bytes)", file.path().string(), c.bytes, block);
      bytes += c.bytes;
      free_buffers.push_back(size_t(c.user_data));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double gb = double(bytes) / 1e9;
  return {gb / seconds, (cpu_seconds() - cpu_start) / gb};
}

int run(int argc, char** argv) {
  CLI::App app{"IoRing read throughput (O_DIRECT) per block size"};
  std::string path;
  std::vector<std::string> block_sizes{"128k", "1M", "4M", "12M"};
  unsigned queue_depth = 32;
  std::string pattern = "seq";
  std::string backend = "io_uring";
  int repeats = 3;
  bool fixed_buffers = false;
  bool tsv = false;
  app.add_option("--file", path, "File to read (a multi-GB .safetensors)")->required()->check(CLI::ExistingFile);
  app.add_option("--block-size", block_sizes, "Block sizes (k, M suffixes)")->delimiter(',')->capture_default_str();
  app.add_option("--queue-depth", queue_depth, "Reads in flight")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--pattern", pattern, "seq: in file order; rand: every block once, shuffled")
      ->check(CLI::IsMember({"seq", "rand"}))
      ->capture_default_str();
  app.add_option("--backend", backend, "io_uring or pread")
      ->check(CLI::IsMember({"io_uring", "pread"}))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "Passes per block size; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_flag("--fixed-buffers", fixed_buffers, "Register the buffers (IORING_OP_READ_FIXED)");
  app.add_flag("--tsv", tsv, "One line per block size: block_bytes, queue_depth, GB/s, CPU s/GB");
  CLI11_PARSE(app, argc, argv);

  const DirectFile file = DirectFile::open(path);
  IoRing::Options options;
  options.queue_depth = queue_depth;
  options.force_pread = backend == "pread";
  const auto ring = IoRing::create(options);
  if (!tsv) {
    fmt::print("{}: {:.2f} GB, {}, backend {}, queue depth {}, {} order, median of {}\n", path,
               double(file.size()) / 1e9, file.direct() ? "O_DIRECT" : "buffered (no O_DIRECT here)",
               ring->backend_name(), queue_depth, pattern, repeats);
    fmt::print("{:>10} {:>8} {:>10} {:>12}\n", "block", "blocks", "GB/s", "CPU s/GB");
  }
  for (const std::string& text : block_sizes) {
    const int64_t block = parse_size(text);
    if (block % DirectFile::kAlignment != 0)
      throw UsageError(fmt::format("--block-size {}: not a multiple of 4096", text));
    const int64_t n_blocks = file.size() / block;
    if (n_blocks == 0) throw UsageError(fmt::format("--block-size {}: larger than the file", text));
    std::vector<int64_t> order(static_cast<size_t>(n_blocks));
    for (int64_t i = 0; i < n_blocks; ++i) order[size_t(i)] = i;
    if (pattern == "rand") std::shuffle(order.begin(), order.end(), std::mt19937_64(1));

    const int64_t staging_bytes = block * int64_t(queue_depth);
    std::unique_ptr<char, decltype(&std::free)> staging(
        static_cast<char*>(std::aligned_alloc(size_t(DirectFile::kAlignment), size_t(staging_bytes))), &std::free);
    if (!staging) throw_error("cannot allocate {} bytes of buffers", staging_bytes);
    std::memset(staging.get(), 0, size_t(staging_bytes));  // fault the pages in before timing
    std::vector<char*> buffers;
    for (unsigned i = 0; i < queue_depth; ++i) buffers.push_back(staging.get() + int64_t(i) * block);
    if (fixed_buffers) {
      const Buffer whole{staging.get(), size_t(staging_bytes)};
      if (!ring->register_buffers({&whole, 1})) fmt::print(stderr, "buffers not registered; plain reads\n");
    }

    std::vector<Result> results;
    for (int r = 0; r < repeats; ++r) results.push_back(read_once(*ring, file, block, order, buffers));
    std::sort(results.begin(), results.end(), [](const Result& a, const Result& b) { return a.gb_per_s < b.gb_per_s; });
    const Result median = results[results.size() / 2];
    if (fixed_buffers) ring->register_buffers({});
    if (tsv) {
      fmt::print("{}\t{}\t{:.4f}\t{:.4f}\n", block, queue_depth, median.gb_per_s, median.cpu_per_gb);
    } else {
      fmt::print("{:>10} {:>8} {:>10.3f} {:>12.4f}\n", text, n_blocks, median.gb_per_s, median.cpu_per_gb);
    }
  }
  return 0;
}

}  // namespace
}  // namespace chronos

int main(int argc, char** argv) {
  try {
    return chronos::run(argc, argv);
  } catch (const chronos::UsageError& e) {
    fmt::print(stderr, "chronos_bench_io: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "chronos_bench_io: {}\n", e.what());
    return 1;
  }
}
