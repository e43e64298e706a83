// ExpertCache: slot bookkeeping, pin counts, protections and the two eviction policies.
#include "chronos/expert_cache.h"

#include <algorithm>
#include <cmath>

#include "chronos/error.h"

namespace chronos {
namespace {

// Scores grow as 2^(requests / half_life); they are rescaled before they could overflow.
constexpr double kRescaleExponent = 256.0;

}  // namespace

ExpertCache::ExpertCache(Backend& backend, const Options& options)
    : backend_(backend), budget_bytes_(options.budget_bytes), slot_bytes_(options.slot_bytes), policy_(options.policy) {
  if (slot_bytes_ <= 0) throw_error("expert cache slot size {} bytes must be positive", slot_bytes_);
  if (budget_bytes_ < slot_bytes_) {
    throw BudgetTooSmall(BudgetTooSmall::Budget::kExpertCache,
                         fmt::format("expert cache budget {} is smaller than one expert ({} bytes)", budget_bytes_,
                                     slot_bytes_));
  }
  if (!(options.frequency_half_life >= 0)) {
    throw_error("expert cache frequency half-life {} must be non-negative", options.frequency_half_life);
  }
  const int64_t n = budget_bytes_ / slot_bytes_;
  half_life_ = options.frequency_half_life > 0 ? options.frequency_half_life : double(n);
  slots_.resize(size_t(n));
  try {
    for (auto& slot : slots_) {
      slot.buffer = backend_.alloc_device(size_t(slot_bytes_));
      slot.event = backend_.create_event();
      slot.consumed = backend_.create_event();
    }
  } catch (...) {
    for (auto& slot : slots_) {
      if (slot.buffer.data != nullptr) backend_.free_device(slot.buffer);
    }
    throw;
  }
  for (int32_t i = 0; i < int32_t(n); ++i) free_slots_.insert(i);
  index_.reserve(size_t(n));
}

ExpertCache::~ExpertCache() {
  for (auto& slot : slots_) {
    if (slot.buffer.data != nullptr) backend_.free_device(slot.buffer);
  }
}

ExpertCache::Lookup ExpertCache::lookup_of(int32_t slot) const {
  const Slot& s = slots_[size_t(slot)];
  return {s.state, slot, s.buffer.data, s.event.get(), s.consumed.get()};
}

ExpertCache::Lookup ExpertCache::find(ExpertKey key) const {
  const auto it = index_.find(key);
  if (it == index_.end() || slots_[size_t(it->second)].orphaned) {
    return {SlotState::kEmpty, -1, nullptr, nullptr};
  }
  return lookup_of(it->second);
}

double ExpertCache::weight_now() const { return std::exp2(double(requests_) / half_life_); }

double ExpertCache::score_of(ExpertKey key) const {
  if (policy_ != EvictionPolicy::kLruFrequency) return 0.0;
  const auto it = scores_.find(key);
  return it == scores_.end() ? 0.0 : it->second;
}

void ExpertCache::add_request(ExpertKey key) {
  if (policy_ != EvictionPolicy::kLruFrequency) return;
  scores_[key] += weight_now();
  ++requests_;
  if (double(requests_) / half_life_ >= kRescaleExponent) rescale_scores();
}

// Multiplying every score by the same factor keeps their order; only the ranks' stored
// values change, so every ranked slot is re-inserted.
void ExpertCache::rescale_scores() {
  const double factor = 1.0 / weight_now();
  for (auto& [key, score] : scores_) score *= factor;
  requests_ = 0;
  for (int32_t i = 0; i < int32_t(slots_.size()); ++i) rerank(i);
}

bool ExpertCache::evictable(const Slot& slot) const {
  return slot.state == SlotState::kReady && slot.pins == 0 && !slot.orphaned;
}

void ExpertCache::unrank(int32_t slot) {
  Slot& s = slots_[size_t(slot)];
  if (!s.ranked) return;
  const size_t erased = order_.erase(s.rank);
  CHRONOS_CHECK(erased == 1);
  s.ranked = false;
}

void ExpertCache::rerank(int32_t slot) {
  unrank(slot);
  Slot& s = slots_[size_t(slot)];
  if (!evictable(s)) return;
  s.rank = Rank{score_of(s.key), s.last_use, slot};
  s.ranked = order_.insert(s.rank).second;
  CHRONOS_CHECK(s.ranked);
}

void ExpertCache::free_slot(int32_t slot) {
  Slot& s = slots_[size_t(slot)];
  CHRONOS_CHECK(s.pins == 0);
  unrank(slot);
  index_.erase(s.key);
  s.key = {-1, -1};
  s.state = SlotState::kEmpty;
  s.orphaned = false;
  free_slots_.insert(slot);
}

void ExpertCache::count_resident(int64_t delta) {
  n_resident_ += delta;
  CHRONOS_CHECK(n_resident_ >= 0 && n_resident_ <= n_slots());
  stats_.peak_bytes = std::max(stats_.peak_bytes, resident_bytes());
}

ExpertCache::Lookup ExpertCache::acquire(ExpertKey key) {
  ++tick_;
  const auto it = index_.find(key);
  if (it == index_.end() || slots_[size_t(it->second)].orphaned) {
    add_request(key);
    ++stats_.misses;
    return {SlotState::kEmpty, -1, nullptr, nullptr};
  }
  const int32_t slot = it->second;
  Slot& s = slots_[size_t(slot)];
  // Pin before anything else: add_request may rescale and re-rank every evictable slot, and a
  // slot still unpinned at that moment would go back into the eviction order while in use.
  ++s.pins;
  s.last_use = tick_;
  unrank(slot);
  add_request(key);
  if (!s.used) {
    s.used = true;
    if (s.prefetched) ++stats_.prefetch_used;
  }
  if (s.state == SlotState::kReady) {
    ++stats_.hits;
  } else {
    ++stats_.hits_loading;
  }
  return lookup_of(slot);
}

void ExpertCache::release(ExpertKey key) {
  const auto it = index_.find(key);
  CHRONOS_CHECK_MSG(it != index_.end(), "release of expert ({}, {}) that is not in the cache", key.layer, key.expert);
  const int32_t slot = it->second;
  Slot& s = slots_[size_t(slot)];
  CHRONOS_CHECK_MSG(s.pins > 0, "release of expert ({}, {}) that is not pinned", key.layer, key.expert);
  --s.pins;
  if (s.pins == 0 && s.orphaned) {
    free_slot(slot);
  } else {
    rerank(slot);
  }
}

std::optional<ExpertCache::Lookup> ExpertCache::begin_load(ExpertKey key, bool evict_protected) {
  int32_t slot = -1;
  if (const auto it = index_.find(key); it != index_.end()) {
    if (!slots_[size_t(it->second)].orphaned) return std::nullopt;  // loading or ready already
    slot = it->second;  // aborted while pinned: its waiters want exactly this key
    slots_[size_t(slot)].orphaned = false;
  } else if (!free_slots_.empty()) {
    slot = *free_slots_.begin();
    free_slots_.erase(free_slots_.begin());
  } else {
    bool skipped = false;
    int32_t first_protected = -1;
    for (const Rank& rank : order_) {
      const int32_t candidate = std::get<2>(rank);
      if (is_protected(slots_[size_t(candidate)].key)) {
        skipped = true;
        if (first_protected < 0) first_protected = candidate;
        continue;
      }
      slot = candidate;
      break;
    }
    if (skipped) ++stats_.protected_skips;
    if (slot < 0 && evict_protected) slot = first_protected;  // a demand load beats a prediction
    if (slot < 0) return std::nullopt;
    Slot& victim = slots_[size_t(slot)];
    CHRONOS_CHECK_MSG(evictable(victim), "eviction of expert ({}, {}) that is pinned or loading", victim.key.layer,
                      victim.key.expert);
    unrank(slot);
    index_.erase(victim.key);
    ++stats_.evictions;
    if (victim.prefetched && !victim.used) ++stats_.prefetch_wasted;
    count_resident(-1);
  }
  Slot& s = slots_[size_t(slot)];
  s.key = key;
  s.state = SlotState::kLoading;
  s.last_use = ++tick_;
  s.prefetched = !evict_protected;
  s.used = false;
  ++(evict_protected ? stats_.demand_loads : stats_.prefetch_loads);
  index_[key] = slot;
  if (policy_ == EvictionPolicy::kLruFrequency) {
    double& score = scores_[key];
    score = std::max(score, weight_now());
  }
  ++stats_.loads;
  count_resident(+1);
  return lookup_of(slot);
}

void ExpertCache::finish_load(ExpertKey key) {
  const auto it = index_.find(key);
  CHRONOS_CHECK_MSG(it != index_.end() && slots_[size_t(it->second)].state == SlotState::kLoading,
                    "finish_load of expert ({}, {}) that is not loading", key.layer, key.expert);
  slots_[size_t(it->second)].state = SlotState::kReady;
  rerank(it->second);
}

void ExpertCache::abort_load(ExpertKey key) {
  const auto it = index_.find(key);
  CHRONOS_CHECK_MSG(it != index_.end() && slots_[size_t(it->second)].state == SlotState::kLoading,
                    "abort_load of expert ({}, {}) that is not loading", key.layer, key.expert);
  const int32_t slot = it->second;
  Slot& s = slots_[size_t(slot)];
  count_resident(-1);
  if (s.pins == 0) {
    free_slot(slot);
  } else {
    s.state = SlotState::kEmpty;
    s.orphaned = true;
  }
}

void ExpertCache::protect(ExpertKey key, int64_t until_step) {
  auto [it, inserted] = protected_until_.try_emplace(key, until_step);
  if (!inserted) it->second = std::max(it->second, until_step);
}

void ExpertCache::advance_step(int64_t step) {
  CHRONOS_CHECK_MSG(step >= step_, "decode step went back from {} to {}", step_, step);
  step_ = step;
  std::erase_if(protected_until_, [step](const auto& entry) { return entry.second <= step; });
}

bool ExpertCache::is_protected(ExpertKey key) const {
  const auto it = protected_until_.find(key);
  return it != protected_until_.end() && it->second > step_;
}

std::vector<ExpertKey> ExpertCache::resident() const {
  std::vector<ExpertKey> keys;
  keys.reserve(size_t(n_resident_));
  for (const Slot& s : slots_) {
    if (s.state != SlotState::kEmpty) keys.push_back(s.key);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace chronos
