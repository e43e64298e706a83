// AsyncPrefetcher: queue -> IoRing reads into cache slots -> checksum -> (optional latency) -> ready.
#include "chronos/prefetcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>

#include "chronos/error.h"

namespace chronos {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct AsyncPrefetcher::Impl {
  struct Queued {
    FetchPriority priority;
    int64_t step;
    uint64_t sequence;  // FIFO among equal priorities
  };
  struct InFlight {
    ExpertKey key{};
    const PackedExpert* expert = nullptr;
    ExpertCache::Lookup slot{};
    Clock::time_point submitted;
    Clock::time_point ready_at;  // when the modelled latency has passed
    bool used = false;
  };

  const PackManifest& manifest;
  std::filesystem::path pack_dir;
  ExpertCache& cache;
  std::mutex& cache_mutex;
  std::condition_variable& loaded;
  Backend& backend;
  Options options;

  std::vector<DirectFile> files;                 // by position in manifest.clusters
  std::unordered_map<int32_t, size_t> file_of_cluster;
  std::unique_ptr<IoRing> ring;
  std::unique_ptr<Stream> copy_stream;

  mutable std::mutex queue_mutex;  // guards queue, stats, error, stopping
  std::condition_variable queue_cv;
  std::map<ExpertKey, Queued> queue;
  uint64_t next_sequence = 0;
  PrefetchStats stats;
  std::exception_ptr error;
  bool stopping = false;

  std::vector<InFlight> in_flight;  // indexed by ReadRequest::user_data; I/O thread only
  std::vector<size_t> delayed;      // in_flight indices whose read finished, waiting for ready_at
  size_t n_in_flight = 0;           // reads submitted, not yet reaped
  Clock::time_point busy_since;
  std::thread thread;

  Impl(const PackManifest& m, std::filesystem::path dir, ExpertCache& c, std::mutex& cm, std::condition_variable& cv,
       Backend& b, Options o)
      : manifest(m), pack_dir(std::move(dir)), cache(c), cache_mutex(cm), loaded(cv), backend(b), options(std::move(o)) {
    for (size_t i = 0; i < manifest.clusters.size(); ++i) {
      files.push_back(DirectFile::open(pack_dir / manifest.clusters[i].file));
      file_of_cluster[manifest.clusters[i].id] = i;
    }
    IoRing::Options ring_options;
    ring_options.queue_depth = std::max(1u, options.queue_depth);
    ring_options.force_pread = options.force_pread;
    ring_options.fault_injector = options.fault_injector;
    ring = IoRing::create(ring_options);
    copy_stream = backend.create_stream();
    in_flight.resize(ring_options.queue_depth);
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(queue_mutex);
      stopping = true;
    }
    queue_cv.notify_all();
    thread.join();
    copy_stream->synchronize();
  }

  // Picks up to `room` requests, most urgent first.
  std::vector<std::pair<ExpertKey, Queued>> take(size_t room) {
    std::vector<std::pair<ExpertKey, Queued>> picked;
    while (picked.size() < room && !queue.empty()) {
      auto best = queue.begin();
      for (auto it = queue.begin(); it != queue.end(); ++it) {
        if (std::tie(it->second.priority, it->second.sequence) < std::tie(best->second.priority, best->second.sequence))
          best = it;
      }
      picked.emplace_back(*best);
      queue.erase(best);
    }
    return picked;
  }

  void fail(const std::string& message) {
    std::lock_guard lock(queue_mutex);
    if (!error) error = std::make_exception_ptr(Error(message));
  }

  // Issues the picked requests; demand requests that found no free slot go back to the queue.
  // Returns how many reads were submitted.
  size_t issue(const std::vector<std::pair<ExpertKey, Queued>>& picked) {
    std::vector<ReadRequest> batch;
    std::vector<std::pair<ExpertKey, Queued>> retry;
    for (const auto& [key, queued] : picked) {
      const auto found = manifest.experts.find(key);
      if (found == manifest.experts.end()) {
        fail(fmt::format("{}: layer {} expert {} is not in the pack", kManifestFileName, key.layer, key.expert));
        continue;
      }
      const PackedExpert& expert = found->second;
      std::optional<ExpertCache::Lookup> slot;
      {
        std::lock_guard lock(cache_mutex);
        if (cache.find(key).state != SlotState::kEmpty) {
          std::lock_guard q(queue_mutex);
          ++stats.already_present;
          continue;
        }
        slot = cache.begin_load(key);
      }
      if (!slot) {
        if (queued.priority == FetchPriority::kDemand) {
          retry.emplace_back(key, queued);
        } else {
          std::lock_guard q(queue_mutex);
          ++stats.no_slot;
        }
        continue;
      }
      CHRONOS_CHECK_MSG(expert.bytes <= cache.slot_bytes(), "expert extent {} exceeds the slot size {}", expert.bytes,
                        cache.slot_bytes());
      const size_t index = size_t(std::find_if(in_flight.begin(), in_flight.end(), [](const InFlight& f) { return !f.used; }) -
                                  in_flight.begin());
      CHRONOS_CHECK(index < in_flight.size());
      const DirectFile& file = files[file_of_cluster.at(expert.cluster)];
      in_flight[index] = InFlight{key, &expert, *slot, Clock::now(), {}, true};
      batch.push_back(ReadRequest{file.fd(), expert.offset, expert.bytes, slot->data, uint64_t(index)});
    }
    if (!retry.empty()) {
      std::lock_guard q(queue_mutex);
      for (const auto& [key, queued] : retry) queue.emplace(key, queued);
    }
    if (batch.empty()) return 0;
    if (n_in_flight == 0) busy_since = Clock::now();
    n_in_flight += batch.size();
    ring->submit(batch);
    return batch.size();
  }

  // The slot's bytes are usable: on the CPU backend the read landed in the slot itself, so the
  // copy is a no-op; the event is recorded on the copy stream as the CUDA backend will do.
  void make_ready(size_t index) {
    InFlight& f = in_flight[index];
    backend.copy_to_device(*copy_stream, f.slot.data, f.slot.data, size_t(f.expert->bytes));
    copy_stream->record(*f.slot.ready);
    {
      std::lock_guard lock(cache_mutex);
      cache.finish_load(f.key);
    }
    {
      std::lock_guard q(queue_mutex);
      ++stats.reads;
      stats.bytes_read += f.expert->bytes;
      stats.read_latency_seconds += seconds_between(f.submitted, Clock::now());
    }
    f.used = false;
    loaded.notify_all();
  }

  void abort(size_t index, const std::string& message) {
    InFlight& f = in_flight[index];
    copy_stream->record(*f.slot.ready);  // wakes anyone waiting on the event
    {
      std::lock_guard lock(cache_mutex);
      cache.abort_load(f.key);
    }
    f.used = false;
    fail(message);
    loaded.notify_all();
  }

  void complete(const ReadCompletion& done) {
    const size_t index = size_t(done.user_data);
    InFlight& f = in_flight[index];
    const PackCluster& cluster = manifest.clusters[file_of_cluster.at(f.expert->cluster)];
    if (done.error != 0) {
      abort(index, fmt::format("{}: layer {} expert {}: read failed: {}", cluster.file, f.key.layer, f.key.expert,
                               std::strerror(done.error)));
      return;
    }
    if (done.bytes < f.expert->payload_bytes()) {
      abort(index, fmt::format("{}: layer {} expert {}: short read ({} of {} bytes): the file is truncated", cluster.file,
                               f.key.layer, f.key.expert, done.bytes, f.expert->bytes));
      return;
    }
    if (options.verify_checksums) {
      try {
        verify_expert_bytes(*f.expert, cluster.file,
                            std::span<const std::byte>(static_cast<const std::byte*>(f.slot.data), size_t(f.expert->bytes)));
      } catch (const Error& e) {
        abort(index, e.what());
        return;
      }
    }
    if (options.io_latency_ms > 0.0) {
      f.ready_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double, std::milli>(options.io_latency_ms));
      delayed.push_back(index);
    } else {
      make_ready(index);
    }
  }

  void release_delayed(bool all) {
    const auto now = Clock::now();
    for (size_t i = 0; i < delayed.size();) {
      if (all || in_flight[delayed[i]].ready_at <= now) {
        make_ready(delayed[i]);
        delayed[i] = delayed.back();
        delayed.pop_back();
      } else {
        ++i;
      }
    }
  }

  void run() {
    std::vector<ReadCompletion> done;
    for (;;) {
      std::vector<std::pair<ExpertKey, Queued>> picked;
      {
        std::unique_lock q(queue_mutex);
        if (n_in_flight == 0 && delayed.empty()) {
          queue_cv.wait(q, [&] { return stopping || !queue.empty(); });
        }
        if (stopping && n_in_flight == 0) break;
        if (!stopping) picked = take(in_flight.size() - n_in_flight - delayed.size());
      }
      if (issue(picked) == 0 && n_in_flight == 0 && delayed.empty() && !picked.empty()) {
        // Only demand requests waiting for a slot: the compute side must release one first.
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      // Wait briefly for completions so that new (demand) requests are picked up quickly.
      auto timeout = std::chrono::microseconds(n_in_flight > 0 ? 200 : 0);
      if (!delayed.empty()) {
        const auto next = std::min_element(delayed.begin(), delayed.end(), [&](size_t a, size_t b) {
          return in_flight[a].ready_at < in_flight[b].ready_at;
        });
        const auto until = std::chrono::duration_cast<std::chrono::microseconds>(in_flight[*next].ready_at - Clock::now());
        timeout = std::max(std::chrono::microseconds(0), std::min(until, std::chrono::microseconds(200)));
        if (n_in_flight == 0 && timeout.count() > 0) std::this_thread::sleep_for(timeout);
      }
      done.clear();
      if (n_in_flight > 0) ring->reap(done, 1, timeout);
      for (const ReadCompletion& c : done) {
        --n_in_flight;
        complete(c);
      }
      if (n_in_flight == 0 && !done.empty()) {
        std::lock_guard q(queue_mutex);
        stats.busy_seconds += seconds_between(busy_since, Clock::now());
      }
      release_delayed(false);
      bool stop_now;
      {
        std::lock_guard q(queue_mutex);
        stop_now = stopping;
      }
      if (stop_now) {  // drain: every read must land before the slots can go away
        while (n_in_flight > 0) {
          done.clear();
          ring->reap(done, 1);
          for (const ReadCompletion& c : done) {
            --n_in_flight;
            complete(c);
          }
        }
        release_delayed(true);
        break;
      }
    }
  }
};

AsyncPrefetcher::AsyncPrefetcher(const PackManifest& manifest, const std::filesystem::path& pack_dir, ExpertCache& cache,
                                 std::mutex& cache_mutex, std::condition_variable& loaded, Backend& backend,
                                 const Options& options)
    : impl_(std::make_unique<Impl>(manifest, pack_dir, cache, cache_mutex, loaded, backend, options)) {}

AsyncPrefetcher::~AsyncPrefetcher() = default;

void AsyncPrefetcher::enqueue(std::span<const FetchRequest> requests) {
  {
    std::lock_guard q(impl_->queue_mutex);
    for (const FetchRequest& r : requests) {
      auto [it, inserted] = impl_->queue.try_emplace(r.key, Impl::Queued{r.priority, r.step, impl_->next_sequence});
      if (inserted) {
        ++impl_->next_sequence;
      } else if (r.priority < it->second.priority) {
        it->second.priority = r.priority;
        it->second.step = r.step;
      }
    }
  }
  impl_->queue_cv.notify_all();
}

void AsyncPrefetcher::cancel_stale(int64_t step) {
  std::lock_guard q(impl_->queue_mutex);
  for (auto it = impl_->queue.begin(); it != impl_->queue.end();) {
    if (it->second.priority != FetchPriority::kDemand && it->second.step < step) {
      it = impl_->queue.erase(it);
      ++impl_->stats.cancelled;
    } else {
      ++it;
    }
  }
}

std::exception_ptr AsyncPrefetcher::error() const {
  std::lock_guard q(impl_->queue_mutex);
  return impl_->error;
}

PrefetchStats AsyncPrefetcher::stats() const {
  std::lock_guard q(impl_->queue_mutex);
  return impl_->stats;
}

const char* AsyncPrefetcher::io_backend() const { return impl_->ring->backend_name(); }

}  // namespace chronos
