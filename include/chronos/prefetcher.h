// AsyncPrefetcher: expert reads planned by a ReadPlanner and served by its own I/O thread through
// IoRing, completing into expert-cache slots and signalling each slot's Event (DESIGN.md §2, §4).
//
// With separate tiers (CUDA) one expert goes: O_DIRECT read into a page-locked staging buffer ->
// checksum -> the copy stream waits for the slot's `consumed` event (no kernel still reads the
// slot's previous expert) -> H2D copy into the slot -> the slot's `ready` event and the staging
// buffer's event are recorded after the copy. The compute side makes its stream wait on `ready`
// (or polls it, in fallback mode); nothing synchronizes a whole stream or device.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>

#include "chronos/io_ring.h"
#include "chronos/pack_format.h"
#include "chronos/read_planner.h"
#include "chronos/shared_expert_cache.h"

namespace chronos {

struct PrefetchStats {
  int64_t reads = 0;        // expert reads completed
  int64_t io_requests = 0;  // IoRing requests completed: one per expert, or one per run of
                            // file-adjacent experts read together (Options::coalesce)
  int64_t bytes_read = 0;
  int64_t cancelled = 0;              // stale requests dropped from the queue
  int64_t no_slot = 0;                // requests dropped because every slot was pinned, loading or protected
  int64_t already_present = 0;        // requests for experts already resident or loading
  int64_t copies = 0;                 // staging -> device copies queued (separate tiers only)
  int64_t staging_buffers = 0;        // page-locked staging buffers (separate tiers only)
  int64_t staging_full = 0;           // I/O-thread passes that held reads back: every staging buffer busy
  double busy_seconds = 0.0;          // wall time with at least one read in flight
  double read_latency_seconds = 0.0;  // sum over reads of submit -> usable
};

class AsyncPrefetcher {
 public:
  struct Options {
    unsigned queue_depth = 16;   // experts being read (or waiting out io_latency_ms) at once
    double io_latency_ms = 0.0;  // added to every read's completion (models a slower disk)
    bool force_pread = false;
    bool verify_checksums = true;  // xxh64 of every expert read
    // Tests: simulate read errors. With coalesce, one request may cover a run of experts.
    std::function<int(const ReadRequest&)> fault_injector;
    // Experts of one pick that lie back to back in their cluster file (B.offset == A.offset +
    // A.bytes) and each got a slot are read with one vectored request, each landing in its own
    // slot; a picked demand request also takes its queued file neighbours (any priority) along.
    // Each expert is still checksummed, made ready and reported on its own. The whole run becomes
    // ready at once, so a run is capped.
    bool coalesce = true;
    int max_run_experts = 8;                    // clamped to 1..ReadRequest::kMaxSegments
    int64_t max_run_bytes = int64_t(32) << 20;  // a run always holds at least one expert
    // Backends whose staging memory is not the device (CUDA): reads land in page-locked staging
    // buffers of one slot each, at most this many bytes of them (--pinned-budget; 0: one per
    // queue_depth), and each is copied into its slot on the copy stream. A staging buffer is
    // reused once its copy has completed (its own event). Ignored on the CPU backend, where reads
    // land in the slots themselves.
    int64_t staging_bytes = 0;
  };

  // The cache is shared with the compute side (its lock order and waking rules are in
  // shared_expert_cache.h): the cache is notified whenever an expert becomes ready, a load fails,
  // queued requests are dropped (cancelled, or no slot for them) and when the prefetcher stops.
  AsyncPrefetcher(const PackManifest& manifest, const std::filesystem::path& pack_dir, SharedExpertCache& cache,
                  Backend& backend, const Options& options);
  ~AsyncPrefetcher();
  AsyncPrefetcher(const AsyncPrefetcher&) = delete;
  AsyncPrefetcher& operator=(const AsyncPrefetcher&) = delete;

  // Thread-safe; may be called with the cache lock held. A key already queued keeps the more
  // urgent of its priorities.
  void enqueue(std::span<const FetchRequest> requests);
  // Drops queued (not yet issued) requests made before `step` whose priority is not kDemand.
  // Call it without the cache lock: it notifies the cache's waiters when it drops any.
  void cancel_stale(int64_t step);
  // The first read or checksum error of the I/O thread, or nullptr. Sticky. Like stats(), may be
  // called with the cache lock held.
  std::exception_ptr error() const;
  PrefetchStats stats() const;
  const char* io_backend() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chronos
