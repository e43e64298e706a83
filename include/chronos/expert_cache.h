// ExpertCache: a fixed budget of device-tier expert slots with pin counts, load states and eviction.
//
// The cache only books slots; it never reads a file and never does math. The loader (the
// prefetcher, or the decode loop on a demand miss) calls begin_load, fills `data`, signals the
// slot's Event and calls finish_load. The compute side calls acquire, waits on `ready` when the
// state is kLoading, computes, and calls release.
//
// Not thread-safe: the prefetcher and the compute side share one through SharedExpertCache
// (shared_expert_cache.h), which holds it with its mutex. Event waits happen outside that mutex
// (the Event pointer stays valid while pinned).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_key.h"

namespace chronos {

// A budget that cannot hold one expert slot: the expert cache's, or the page-locked staging
// memory's. The caller knows which flag or setting gave it and says so.
class BudgetTooSmall : public Error {
 public:
  enum class Budget { kExpertCache, kStaging };
  BudgetTooSmall(Budget budget, const std::string& message) : Error(message), budget_(budget) {}
  Budget budget() const { return budget_; }

 private:
  Budget budget_;
};

// kLru: evict the least recently used slot (acquire or begin_load count as a use).
// kLruFrequency: evict the slot with the lowest exponentially decayed request count, the least
// recently used among equals (LRFU, Lee et al. 2001). Every acquire of a key, hit or miss,
// adds 2^(t / half_life) to that key's score, t counting acquires, so a request made one
// half-life ago weighs half as much as one made now. Scores are kept for every key ever
// requested, resident or not (at most n_layers * n_experts entries), so an expert that was
// evicted and comes back keeps its history. begin_load raises a key's score to at least one
// request made now, so a prefetched expert is not the first thing the next load evicts. On
// skewed (Zipf-like) reuse it keeps the hot experts that LRU lets a burst of cold ones flush.
// kPerLayer: the budget split evenly between the MoE layers (the layers seen so far): a load for
// a layer at its share evicts within that layer, one below it evicts from a layer above its
// share; within those, kLruFrequency's order. A demand load that finds nothing there takes any
// evictable slot.
// kNextUse: evict the expert whose next use is expected furthest away, in layer steps. Layers run
// in a cycle (the MoE layers in order, once per forward step), so an expert of layer l is next
// needed d layer steps from now (the cyclic distance from the layer last acquired, d = L for that
// layer itself) if its layer's next visit uses it, else a whole cycle later, and so on: with p the
// chance that a visit of its layer uses it (its decayed request count over its layer's decayed
// visit count, as kLruFrequency decays them), the expected distance is d + L (1/p - 1). Unlike
// recency, it does not evict the layer that comes next just because it ran longest ago.
enum class EvictionPolicy { kLru, kLruFrequency, kPerLayer, kNextUse };
enum class SlotState { kEmpty, kLoading, kReady };

struct CacheStats {
  int64_t hits = 0;             // acquire found the expert ready
  int64_t misses = 0;           // acquire found nothing
  int64_t loads = 0;            // begin_load reserved a slot
  int64_t evictions = 0;        // begin_load evicted a ready expert to do so
  int64_t protected_skips = 0;  // begin_load calls that passed over a protected expert the
                                // policy would have evicted first (or found only protected ones)
  int64_t peak_bytes = 0;       // highest resident_bytes() seen
  int64_t hits_loading = 0;     // acquire found the expert still loading (not in `hits`)
  // Where the loads went: a load for a demand (begin_load's evict_protected) or for a prediction
  // (a prefetch), and what became of the prefetches: acquired at least once while resident or
  // loading (used), or evicted before any acquire (wasted: their bytes bought nothing).
  int64_t demand_loads = 0;
  int64_t prefetch_loads = 0;
  int64_t prefetch_used = 0;
  int64_t prefetch_wasted = 0;
};

class ExpertCache {
 public:
  struct Options {
    int64_t budget_bytes;
    int64_t slot_bytes;
    EvictionPolicy policy = EvictionPolicy::kLruFrequency;
    // kLruFrequency's half-life in acquires; 0 means n_slots. On synthetic MoE-shaped traces a
    // longer one (4-16 x n_slots) gains on independent Zipf draws but loses to plain LRU once
    // consecutive tokens reuse experts; n_slots never fell below LRU there. Tune it on real
    // traces with simulate_hit_rate.
    double frequency_half_life = 0;
  };

  // Slots = budget / slot_bytes, each a device-tier buffer from backend.alloc_device(slot_bytes)
  // and an Event from backend.create_event(), all allocated here, once. Throws BudgetTooSmall
  // when the budget is smaller than one slot.
  ExpertCache(Backend& backend, const Options& options);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  int64_t n_slots() const { return int64_t(slots_.size()); }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  EvictionPolicy policy() const { return policy_; }

  struct Lookup {
    SlotState state;
    int32_t slot;  // -1 when kEmpty
    void* data;    // slot_bytes() bytes of device-tier memory; nullptr when kEmpty
    Event* ready;  // the slot's event; nullptr when kEmpty
    // Signalled once the compute side has finished reading the slot. A compute side that queues
    // work on a device stream (CUDA) records it there on release; the loader's copy into the slot
    // waits on it, so a slot is never overwritten under a kernel that still reads it. Stays
    // signalled when the compute side reads on the host (CPU), which is done at release.
    Event* consumed;
  };

  // Does not change recency, frequency or stats. kEmpty means not present.
  Lookup find(ExpertKey key) const;
  // Compute side: if present (loading or ready), pins it, counts a hit (or a hit on loading),
  // updates recency and frequency, and returns it; if absent counts a miss and returns kEmpty
  // (the request still counts towards the key's frequency). Every non-kEmpty result must be
  // matched by one release().
  Lookup acquire(ExpertKey key);
  // Unpins. CHRONOS_CHECKs that `key` is pinned.
  void release(ExpertKey key);

  // Loader: reserves a slot for `key` in state kLoading (an empty slot if any, else the policy's
  // victim among slots that are ready, unpinned and unprotected). nullopt when the key is already
  // present (no double load) or when every slot is pinned, loading or protected (the caller
  // retries later or drops the request).
  // With evict_protected (demand loads: the compute side is waiting), a protected expert is
  // evicted when nothing else can be, so predictions never block a demand read.
  std::optional<Lookup> begin_load(ExpertKey key, bool evict_protected = false);
  // kLoading -> kReady. The caller signals the slot's Event itself.
  void finish_load(ExpertKey key);
  // kLoading -> kEmpty (a failed or cancelled read). If the compute side holds pins on it, the
  // slot stays reserved for `key` until the last release (a begin_load of the same key reuses
  // it); the loader should still signal the Event so that waiters wake and see kEmpty in find().
  void abort_load(ExpertKey key);

  // Prediction hooks: a protected expert is not evicted while the current step is below
  // `until_step`. Protecting a key that is not resident yet covers it once it is loaded. A new
  // call can only extend a protection.
  void protect(ExpertKey key, int64_t until_step);
  // The current decode step (non-decreasing); expires protections with until_step <= step.
  void advance_step(int64_t step);
  int64_t current_step() const { return step_; }
  bool is_protected(ExpertKey key) const;

  // (ready + loading) * slot_bytes; never above the budget.
  int64_t resident_bytes() const { return n_resident_ * slot_bytes_; }
  const CacheStats& stats() const { return stats_; }
  // Ready and loading keys, sorted.
  std::vector<ExpertKey> resident() const;

 private:
  // Eviction rank: lowest first. kLru leaves the score at 0.
  using Rank = std::tuple<double, uint64_t, int32_t>;  // (score, last_use, slot)
  struct Slot {
    ExpertKey key{-1, -1};
    SlotState state = SlotState::kEmpty;
    bool orphaned = false;    // aborted while pinned: reserved for `key`, not resident
    bool prefetched = false;  // loaded for a prediction, not a demand
    bool used = false;        // acquired since it was loaded
    int32_t pins = 0;
    uint64_t last_use = 0;
    bool ranked = false;  // present in order_ under `rank`
    Rank rank{};
    Buffer buffer;
    std::unique_ptr<Event> event;
    std::unique_ptr<Event> consumed;
  };

  Lookup lookup_of(int32_t slot) const;
  bool uses_scores() const { return policy_ != EvictionPolicy::kLru; }
  double score_of(ExpertKey key) const;
  // The layer cycle (kPerLayer, kNextUse): every MoE layer seen, sorted, and visits of each.
  void note_layer(int32_t layer);
  double expected_next_use(ExpertKey key) const;
  // The eviction victim among ready, unpinned slots: the first unprotected one in the policy's
  // order, or with evict_protected the first protected one when there is no other; -1 if none.
  int32_t choose_victim(ExpertKey key, bool evict_protected);
  double weight_now() const;
  void add_request(ExpertKey key);
  void rescale_scores();
  bool evictable(const Slot& slot) const;
  // The eviction order holds each ready, unpinned slot under the rank it was inserted with;
  // rerank re-inserts it under its current rank (or leaves it out when not evictable).
  void unrank(int32_t slot);
  void rerank(int32_t slot);
  void free_slot(int32_t slot);
  void count_resident(ExpertKey key, int64_t delta);

  Backend& backend_;
  int64_t budget_bytes_;
  int64_t slot_bytes_;
  EvictionPolicy policy_;
  double half_life_;
  std::vector<Slot> slots_;
  std::unordered_map<ExpertKey, int32_t> index_;  // key -> slot, for loading, ready and orphaned
  std::set<int32_t> free_slots_;                  // empty slots; the lowest is used first
  std::set<Rank> order_;                          // ready, unpinned slots (protected included)
  std::unordered_map<ExpertKey, double> scores_;  // kLruFrequency history, every key requested
  std::unordered_map<ExpertKey, int64_t> protected_until_;
  std::vector<int32_t> layers_;                          // sorted MoE layers seen (kPerLayer, kNextUse)
  std::unordered_map<int32_t, double> layer_visits_;     // kNextUse: decayed visits of each layer
  std::unordered_map<int32_t, int64_t> layer_resident_;  // kPerLayer: loading + ready slots per layer
  int32_t current_layer_ = -1;                           // layer of the last acquire
  uint64_t tick_ = 0;                                    // one per acquire and begin_load: recency
  uint64_t requests_ = 0;                                // acquires since the last rescale: frequency decay clock
  int64_t step_ = 0;
  int64_t n_resident_ = 0;
  CacheStats stats_;
};

// Replays per-token expert sets through a cache of n_slots with demand loading (every miss is
// loaded at once, nothing is prefetched) and returns hits / requests. Used to choose the policy
// on recorded routing traces.
double simulate_hit_rate(const std::vector<std::vector<ExpertKey>>& tokens, int64_t n_slots, EvictionPolicy policy);
// The same with kLruFrequency's half-life in acquires (0: the cache's default, n_slots).
double simulate_hit_rate(const std::vector<std::vector<ExpertKey>>& tokens, int64_t n_slots, EvictionPolicy policy,
                         double frequency_half_life);

}  // namespace chronos
