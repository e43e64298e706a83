// AsyncPrefetcher's I/O loop: planned reads -> IoRing (file-adjacent experts coalesced) into cache
// slots or staging buffers -> checksum -> (optional latency) -> copy -> ready, and the waiters told.
#include "chronos/prefetcher.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "chronos/error.h"
#include "expert/staging_pool.h"

namespace chronos {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct AsyncPrefetcher::Impl {
  struct InFlight {  // one expert
    ExpertKey key{};
    const PackedExpert* expert = nullptr;
    ExpertCache::Lookup slot{};
    int staging = -1;     // staging buffer the read lands in (separate tiers), else -1
    void* dst = nullptr;  // where the read lands: the staging buffer, or the slot itself
    Clock::time_point submitted;
    Clock::time_point ready_at;  // when the modelled latency has passed
    bool used = false;
  };
  // One IoRing request, experts adjacent in one file, in file order; or the requests of one
  // scattered expert's pieces (PackedExpert::pieces), one each, judged together once all are back.
  struct RunRead {
    std::array<size_t, ReadRequest::kMaxSegments> experts{};  // in_flight indices
    int n_experts = 0;
    int pieces_left = 0;  // scattered: requests not yet reaped
    int error = 0;        // scattered: the first error of a piece
    bool short_read = false;
    bool used = false;
  };
  // A request's user_data: the RunRead's index, and for a scattered expert the piece's.
  static uint64_t user_data_of(size_t read, size_t piece) { return uint64_t(read) | uint64_t(piece) << 32; }

  const PackManifest& manifest;
  std::filesystem::path pack_dir;
  SharedExpertCache& cache;
  Backend& backend;
  Options options;

  std::vector<DirectFile> files;  // by position in manifest.clusters
  std::unordered_map<int32_t, size_t> file_of_cluster;
  std::unique_ptr<IoRing> ring;
  std::unique_ptr<Stream> copy_stream;
  std::optional<StagingPool> staging;  // made after the files and the ring; empty on the CPU backend

  // The queue lock: taken after the cache lock, never before it (shared_expert_cache.h).
  mutable std::mutex queue_mutex;  // guards planner (except group_runs), stats, error, stopping
  std::condition_variable queue_cv;
  ReadPlanner planner;
  PrefetchStats stats;
  std::exception_ptr error;
  bool stopping = false;

  // I/O thread only from here on.
  std::vector<InFlight> in_flight;  // [queue_depth] experts being read or delayed
  std::vector<RunRead> reads;       // [queue_depth] indexed by ReadRequest::user_data
  std::vector<size_t> delayed;      // in_flight indices whose read finished, waiting for ready_at
  size_t n_busy = 0;                // in_flight entries in use
  size_t n_in_flight = 0;           // IoRing requests submitted, not yet reaped
  Clock::time_point busy_since;     // guarded by queue_mutex, with `busy`
  bool busy = false;                // reads in flight since busy_since
  std::thread thread;

  static ReadPlanner::Options planner_options(const Options& options) {
    ReadPlanner::Options out;
    out.max_run_experts = options.coalesce ? std::clamp(options.max_run_experts, 1, ReadRequest::kMaxSegments) : 1;
    out.max_run_bytes = options.max_run_bytes;
    return out;
  }

  Impl(const PackManifest& m, std::filesystem::path dir, SharedExpertCache& c, Backend& b, Options o)
      : manifest(m),
        pack_dir(std::move(dir)),
        cache(c),
        backend(b),
        options(std::move(o)),
        planner(manifest, planner_options(options)) {
    size_t pieces = 1;  // the most IoRing requests one expert needs
    for (const auto& [key, expert] : manifest.experts) pieces = std::max(pieces, expert.pieces.size());
    for (size_t i = 0; i < manifest.clusters.size(); ++i) {
      const PackCluster& cluster = manifest.clusters[i];
      files.push_back(DirectFile::open(pack_dir / cluster.file));
      file_of_cluster[cluster.id] = i;
      // What guards a file without checksums (a GGUF file streamed in place): it is the file the
      // model was loaded from, unchanged since.
      const DirectFile& file = files.back();
      if (file.size() != cluster.bytes || (cluster.identity && FileIdentity::of(file.fd()) != *cluster.identity))
        throw_error("{}: the file changed since the model was loaded ({} bytes, {} when loaded); load it again",
                    file.path().string(), file.size(), cluster.bytes);
    }
    IoRing::Options ring_options;
    ring_options.queue_depth = std::max(1u, options.queue_depth) * unsigned(pieces);
    ring_options.force_pread = options.force_pread;
    ring_options.fault_injector = options.fault_injector;
    ring = IoRing::create(ring_options);
    copy_stream = backend.create_stream();
    const unsigned experts_in_flight = std::max(1u, options.queue_depth);  // each with its pieces' requests
    staging.emplace(backend, cache.slot_bytes(), options.staging_bytes, experts_in_flight);
    stats.staging_buffers = std::ssize(*staging);
    in_flight.resize(experts_in_flight);
    reads.resize(experts_in_flight);
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(queue_mutex);
      stopping = true;
    }
    queue_cv.notify_all();
    thread.join();
    copy_stream->synchronize();  // before the staging buffers go
    cache.notify_loaded();       // nothing more will load
  }

  // Records the first error and wakes the cache's waiters: they rethrow it.
  void fail(const std::string& message) {
    {
      std::lock_guard lock(queue_mutex);
      if (!error) error = std::make_exception_ptr(Error(message));
    }
    cache.notify_loaded();
  }

  // Reserves a slot per picked expert and issues the reads, adjacent experts as one vectored
  // request; demand requests that found no free slot go back to the queue. Returns how many IoRing
  // requests were submitted.
  size_t issue(const std::vector<PlannedRead>& picked) {
    std::vector<size_t> started;  // in_flight indices, most urgent first
    std::vector<PlannedRead> retry;
    bool dropped = false;
    for (const PlannedRead& queued : picked) {
      const ExpertKey key = queued.key;
      const auto found = manifest.experts.find(key);
      if (found == manifest.experts.end()) {
        fail(fmt::format("{}: layer {} expert {} is not in the pack", kManifestFileName, key.layer, key.expert));
        continue;
      }
      const PackedExpert& expert = found->second;
      std::optional<ExpertCache::Lookup> slot;
      {
        auto locked = cache.lock();
        if (locked->find(key).state != SlotState::kEmpty) {
          std::lock_guard q(queue_mutex);
          ++stats.already_present;
          continue;
        }
        slot = locked->begin_load(key, queued.priority == FetchPriority::kDemand);
      }
      if (!slot) {
        if (queued.priority == FetchPriority::kDemand) {
          retry.push_back(queued);
        } else {
          std::lock_guard q(queue_mutex);
          ++stats.no_slot;
          dropped = true;
        }
        continue;
      }
      CHRONOS_CHECK_MSG(expert.bytes <= cache.slot_bytes(), "expert extent {} exceeds the slot size {}", expert.bytes,
                        cache.slot_bytes());
      const size_t index = free_index(in_flight);
      int staged = -1;
      void* dst = slot->data;
      if (!staging->empty()) {  // run() asked for no more experts than there are free staging buffers
        staged = staging->acquire();
        CHRONOS_CHECK(staged >= 0);
        dst = staging->data(staged);
      }
      in_flight[index] = InFlight{key, &expert, *slot, staged, dst, Clock::now(), {}, true};
      ++n_busy;
      started.push_back(index);
    }
    if (!retry.empty()) {
      std::lock_guard q(queue_mutex);
      for (const PlannedRead& queued : retry) planner.requeue(queued);
    }
    if (dropped) cache.notify_loaded();
    if (started.empty()) return 0;

    std::vector<const PackedExpert*> experts;  // of `started`
    for (const size_t index : started) experts.push_back(in_flight[index].expert);
    std::vector<ReadRequest> batch;
    for (const std::vector<size_t>& run : planner.group_runs(experts)) {
      const size_t read_index = free_index(reads);
      RunRead& read = reads[read_index];
      read.used = true;
      read.n_experts = int(run.size());
      read.pieces_left = 0;
      for (size_t i = 0; i < run.size(); ++i) read.experts[i] = started[run[i]];
      const PackedExpert& head = *in_flight[read.experts[0]].expert;
      const int fd = files[file_of_cluster.at(head.cluster)].fd();
      if (head.scattered()) {  // alone in its run (group_runs): one request per piece
        read.pieces_left = int(head.pieces.size());
        read.error = 0;
        read.short_read = false;
        auto* slot = static_cast<std::byte*>(in_flight[read.experts[0]].dst);
        for (size_t p = 0; p < head.pieces.size(); ++p) {
          const ExpertPiece& piece = head.pieces[p];
          batch.push_back(
              ReadRequest{fd, piece.offset, piece.bytes, slot + piece.slot_offset, user_data_of(read_index, p)});
        }
        continue;
      }
      ReadRequest request{fd, head.offset, 0, nullptr, user_data_of(read_index, 0)};
      if (run.size() == 1) {
        request.bytes = head.bytes;
        request.dst = in_flight[read.experts[0]].dst;
      } else {
        for (int i = 0; i < read.n_experts; ++i) {
          const InFlight& f = in_flight[read.experts[size_t(i)]];
          request.add_segment(f.dst, f.expert->bytes);
        }
      }
      batch.push_back(request);
    }
    if (n_in_flight == 0) {
      std::lock_guard q(queue_mutex);
      busy_since = Clock::now();
      busy = true;
    }
    n_in_flight += batch.size();
    ring->submit(batch);
    return batch.size();
  }

  template <typename T>
  static size_t free_index(const std::vector<T>& entries) {
    const auto free = std::find_if(entries.begin(), entries.end(), [](const T& e) { return !e.used; });
    CHRONOS_CHECK(free != entries.end());
    return size_t(free - entries.begin());
  }

  // The read is complete and checked. On the CPU backend it landed in the slot itself, so the
  // copy is a no-op and the event is recorded on the copy stream all the same. With separate tiers
  // the copy waits until no kernel reads the slot's previous expert, then the slot's event and the
  // staging buffer's event follow the copy.
  void make_ready(size_t index) {
    InFlight& f = in_flight[index];
    if (f.staging >= 0) {
      copy_stream->wait_event(*f.slot.consumed);
      backend.copy_to_device(*copy_stream, f.slot.data, staging->data(f.staging), size_t(f.expert->bytes));
      copy_stream->record(*f.slot.ready);
      copy_stream->record(staging->copied(f.staging));
      staging->release(f.staging);
      std::lock_guard q(queue_mutex);
      ++stats.copies;
    } else {
      backend.copy_to_device(*copy_stream, f.slot.data, f.slot.data, size_t(f.expert->bytes));
      copy_stream->record(*f.slot.ready);
    }
    cache.lock()->finish_load(f.key);
    {
      std::lock_guard q(queue_mutex);
      ++stats.reads;
      stats.bytes_read += f.expert->bytes;
      stats.read_latency_seconds += seconds_between(f.submitted, Clock::now());
    }
    f.used = false;
    --n_busy;
    cache.notify_loaded();
  }

  void abort(size_t index, const std::string& message) {
    InFlight& f = in_flight[index];
    if (f.staging >= 0) staging->release(f.staging);  // nothing to copy
    copy_stream->record(*f.slot.ready);               // wakes anyone waiting on the event
    cache.lock()->abort_load(f.key);
    f.used = false;
    --n_busy;
    fail(message);  // and the cache's waiters
  }

  // One IoRing request finished: each expert of its run is judged on the bytes that reached it.
  void complete(const ReadCompletion& done) {
    RunRead& read = reads[size_t(done.user_data & 0xffffffffu)];
    CHRONOS_CHECK(read.used);
    {
      std::lock_guard q(queue_mutex);
      ++stats.io_requests;
    }
    if (read.pieces_left > 0) {  // a scattered expert: every piece must arrive whole
      const size_t index = read.experts[0];
      const ExpertPiece& piece = in_flight[index].expert->pieces.at(size_t(done.user_data >> 32));
      if (read.error == 0) read.error = done.error;
      read.short_read = read.short_read || done.bytes < piece.bytes;
      if (--read.pieces_left > 0) return;
      complete_expert(index, read.error, read.short_read ? 0 : in_flight[index].expert->payload_bytes());
      read.used = false;
      return;
    }
    int64_t run_offset = 0;  // bytes of the run before this expert
    for (int i = 0; i < read.n_experts; ++i) {
      const size_t index = read.experts[size_t(i)];
      const int64_t extent = in_flight[index].expert->bytes;
      complete_expert(index, done.error, std::clamp(done.bytes - run_offset, int64_t(0), extent));
      run_offset += extent;
    }
    read.used = false;
  }

  // `landed`: bytes of this expert's extent that the read delivered.
  void complete_expert(size_t index, int error, int64_t landed) {
    InFlight& f = in_flight[index];
    const PackCluster& cluster = manifest.clusters[file_of_cluster.at(f.expert->cluster)];
    if (error != 0) {
      abort(index, fmt::format("{}: layer {} expert {}: read failed: {}", cluster.file, f.key.layer, f.key.expert,
                               std::strerror(error)));
      return;
    }
    if (landed < f.expert->payload_bytes()) {
      abort(index, fmt::format("{}: layer {} expert {}: short read ({} of {} bytes): the file is truncated",
                               cluster.file, f.key.layer, f.key.expert, landed, f.expert->bytes));
      return;
    }
    if (options.verify_checksums && !f.expert->scattered()) {
      try {
        verify_expert_bytes(*f.expert, cluster.file,
                            std::span<const std::byte>(static_cast<const std::byte*>(f.dst), size_t(f.expert->bytes)));
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
      std::vector<PlannedRead> picked;
      {
        std::unique_lock q(queue_mutex);
        if (n_in_flight == 0 && delayed.empty()) {
          queue_cv.wait(q, [&] { return stopping || !planner.empty(); });
        }
        if (stopping && n_in_flight == 0) break;
        size_t room = in_flight.size() - n_busy;
        if (!staging->empty()) {
          const size_t free_buffers = staging->n_free();
          if (free_buffers < room && !planner.empty()) ++stats.staging_full;
          room = std::min(room, free_buffers);
        }
        if (!stopping) picked = planner.take(room);
      }
      const size_t issued = issue(picked);
      if (issued == 0 && n_in_flight == 0 && delayed.empty() && (!picked.empty() || !staging->empty())) {
        // Only demand requests waiting for a slot (the compute side must release one first), or
        // every staging buffer waiting for its copy: poll again shortly.
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      // Wait briefly for completions so that new (demand) requests are picked up quickly.
      auto timeout = std::chrono::microseconds(n_in_flight > 0 ? 200 : 0);
      if (!delayed.empty()) {
        const auto next = std::min_element(delayed.begin(), delayed.end(), [&](size_t a, size_t b) {
          return in_flight[a].ready_at < in_flight[b].ready_at;
        });
        const auto until =
            std::chrono::duration_cast<std::chrono::microseconds>(in_flight[*next].ready_at - Clock::now());
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
        busy = false;
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

AsyncPrefetcher::AsyncPrefetcher(const PackManifest& manifest, const std::filesystem::path& pack_dir,
                                 SharedExpertCache& cache, Backend& backend, const Options& options)
    : impl_(std::make_unique<Impl>(manifest, pack_dir, cache, backend, options)) {}

AsyncPrefetcher::~AsyncPrefetcher() = default;

void AsyncPrefetcher::enqueue(std::span<const FetchRequest> requests) {
  {
    std::lock_guard q(impl_->queue_mutex);
    for (const FetchRequest& r : requests) impl_->planner.enqueue(r);
  }
  impl_->queue_cv.notify_all();
}

void AsyncPrefetcher::cancel_stale(int64_t step) {
  int64_t dropped;
  {
    std::lock_guard q(impl_->queue_mutex);
    dropped = impl_->planner.cancel_stale(step);
    impl_->stats.cancelled += dropped;
  }
  if (dropped > 0) impl_->cache.notify_loaded();
}

std::exception_ptr AsyncPrefetcher::error() const {
  std::lock_guard q(impl_->queue_mutex);
  return impl_->error;
}

PrefetchStats AsyncPrefetcher::stats() const {
  std::lock_guard q(impl_->queue_mutex);
  PrefetchStats out = impl_->stats;
  if (impl_->busy) out.busy_seconds += seconds_between(impl_->busy_since, Clock::now());  // the open interval
  return out;
}

const char* AsyncPrefetcher::io_backend() const { return impl_->ring->backend_name(); }

}  // namespace chronos
