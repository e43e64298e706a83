// ReadPlanner: which expert reads the prefetcher issues next, and which of them share one request.
//
// Pure bookkeeping over a pack's manifest: pending requests keyed by ExpertKey, most urgent first
// (a binary heap with lazy deletion), stale ones cancelled, and neighbouring extents of one cluster
// file coalesced into runs. No threads, no files, no cache: the AsyncPrefetcher owns one behind its
// queue lock and asks it what to read.
#pragma once

#include <cstdint>
#include <queue>
#include <span>
#include <unordered_map>
#include <vector>

#include "chronos/expert_key.h"
#include "chronos/pack_format.h"

namespace chronos {

// Lower value = served first: a demand miss, then later layers of the current token, then the
// next tokens, then the prefill intent set.
enum class FetchPriority : uint8_t { kDemand = 0, kSameToken = 1, kNextToken = 2, kLater = 3, kIntent = 4 };

struct FetchRequest {
  ExpertKey key;
  FetchPriority priority = FetchPriority::kDemand;
  int64_t step = 0;  // decode step the request was made for (stale requests are cancelled)
};

// A pending request as the planner holds it: the most urgent priority the key was asked for, the
// step of that request, and the key's arrival order (first come, first served among equals).
struct PlannedRead {
  ExpertKey key{};
  FetchPriority priority = FetchPriority::kDemand;
  int64_t step = 0;
  uint64_t sequence = 0;
};

class ReadPlanner {
 public:
  struct Options {
    int max_run_experts = 1;                    // experts per coalesced run; 1: no coalescing
    int64_t max_run_bytes = int64_t(32) << 20;  // a run always holds at least one expert
  };

  // Keeps a reference to `manifest`, which must outlive the planner.
  ReadPlanner(const PackManifest& manifest, const Options& options);

  // A key already pending keeps its place in the arrival order and the more urgent of its
  // priorities (with that request's step). Returns whether the key was new.
  bool enqueue(const FetchRequest& request);
  // Puts back a taken read that could not start (no slot yet) with its old place in the order,
  // unless the key was asked for again meanwhile (that request stands).
  void requeue(const PlannedRead& read);
  // Drops pending requests made before `step` whose priority is not kDemand (the compute side
  // waits for those). Returns how many were dropped.
  int64_t cancel_stale(int64_t step);
  // Takes up to `room` requests, most urgent first. With coalescing, a demand request brings its
  // pending file neighbours (any priority) along, right after it: extending a demand read to the
  // experts next to it on disk costs one longer transfer instead of more requests later.
  std::vector<PlannedRead> take(size_t room);

  size_t size() const { return pending_.size(); }
  bool empty() const { return pending_.empty(); }
  bool contains(ExpertKey key) const { return pending_.contains(key); }

  // Splits experts that are about to be read (most urgent first) into runs that follow each other
  // in one cluster file (B.offset == A.offset + A.bytes), within the run caps. Each run lists
  // positions in `experts` in file order; runs come in the order of their most urgent member.
  // Without coalescing every expert is its own run, in the given order. Reads only what is fixed at
  // construction, so it may run on one thread while another enqueues.
  std::vector<std::vector<size_t>> group_runs(std::span<const PackedExpert* const> experts) const;

 private:
  struct FilePlace {
    size_t cluster;   // index into manifest.clusters
    size_t position;  // index into that cluster's experts (file order)
  };
  struct Pending {
    FetchPriority priority;
    int64_t step;
    uint64_t sequence;
  };
  struct HeapEntry {  // ordered by (priority, sequence); stale once its key's Pending differs
    FetchPriority priority;
    uint64_t sequence;
    ExpertKey key;
    bool operator<(const HeapEntry& other) const;  // "served after": std::priority_queue is a max-heap
  };

  bool live(const HeapEntry& entry) const;
  void push(ExpertKey key, const Pending& pending);
  void compact_if_sparse();
  void take_neighbours(ExpertKey key, size_t room, std::vector<PlannedRead>& picked);

  const PackManifest& manifest_;
  Options options_;
  std::unordered_map<ExpertKey, FilePlace> place_;     // every expert of the pack
  std::unordered_map<int32_t, size_t> cluster_index_;  // cluster id -> index into manifest.clusters
  std::unordered_map<ExpertKey, Pending> pending_;
  std::priority_queue<HeapEntry> heap_;  // every pending key once under its Pending, plus stale entries
  uint64_t next_sequence_ = 0;
};

}  // namespace chronos
