// ExpertCache: slot bookkeeping, pin counts, protections and the eviction policies.
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
    throw BudgetTooSmall(
        BudgetTooSmall::Budget::kExpertCache,
        fmt::format("expert cache budget {} is smaller than one expert ({} bytes)", budget_bytes_, slot_bytes_));
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
  if (!uses_scores()) return 0.0;
  const auto it = scores_.find(key);
  return it == scores_.end() ? 0.0 : it->second;
}

void ExpertCache::add_request(ExpertKey key) {
  if (!uses_scores()) return;
  scores_[key] += weight_now();
  ++requests_;
  if (double(requests_) / half_life_ >= kRescaleExponent) rescale_scores();
}

// Multiplying every score by the same factor keeps their order; only the ranks' stored
// values change, so every ranked slot is re-inserted.
void ExpertCache::rescale_scores() {
  const double factor = 1.0 / weight_now();
  for (auto& [key, score] : scores_) score *= factor;
  for (auto& [layer, visits] : layer_visits_) visits *= factor;
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

void ExpertCache::count_resident(ExpertKey key, int64_t delta) {
  if (policy_ == EvictionPolicy::kPerLayer) layer_resident_[key.layer] += delta;
  n_resident_ += delta;
  CHRONOS_CHECK(n_resident_ >= 0 && n_resident_ <= n_slots());
  stats_.peak_bytes = std::max(stats_.peak_bytes, resident_bytes());
}

void ExpertCache::note_layer(int32_t layer) {
  if (policy_ != EvictionPolicy::kPerLayer && policy_ != EvictionPolicy::kNextUse) return;
  const auto at = std::lower_bound(layers_.begin(), layers_.end(), layer);
  if (at == layers_.end() || *at != layer) layers_.insert(at, layer);
}

double ExpertCache::expected_next_use(ExpertKey key) const {
  const auto position = [&](int32_t layer) {
    return double(std::lower_bound(layers_.begin(), layers_.end(), layer) - layers_.begin());
  };
  const double n_layers = double(layers_.size());
  double distance = n_layers;  // layer steps until its layer runs again
  if (current_layer_ >= 0) {
    distance = position(key.layer) - position(current_layer_);
    if (distance <= 0) distance += n_layers;
  }
  const auto it = layer_visits_.find(key.layer);
  const double visits = it == layer_visits_.end() ? 0.0 : it->second;
  // A layer not visited yet (a prefetch ahead of its first run) counts as certain to use it.
  const double p = visits > 0 ? std::min(1.0, score_of(key) / visits) : 1.0;
  return distance + n_layers * (1.0 / std::max(p, 1e-9) - 1.0);
}

int32_t ExpertCache::choose_victim(ExpertKey key, bool evict_protected) {
  const bool per_layer = policy_ == EvictionPolicy::kPerLayer;
  const int64_t share = std::max<int64_t>(1, n_slots() / std::max<int64_t>(1, std::ssize(layers_)));
  const auto resident_in = [&](int32_t layer) {
    const auto it = layer_resident_.find(layer);
    return it == layer_resident_.end() ? int64_t(0) : it->second;
  };
  const bool own_layer = resident_in(key.layer) >= share;
  const auto allowed = [&](const Slot& s) {
    if (!per_layer) return true;
    return own_layer ? s.key.layer == key.layer : resident_in(s.key.layer) > share;
  };
  int32_t victim = -1, first_protected = -1;
  double victim_distance = -1.0, protected_distance = -1.0;
  for (const Rank& rank : order_) {
    const int32_t candidate = std::get<2>(rank);
    const Slot& s = slots_[size_t(candidate)];
    if (!allowed(s)) continue;
    const bool guarded = is_protected(s.key);
    if (policy_ == EvictionPolicy::kNextUse) {  // the furthest expected use; ties: the first in LRFU order
      const double distance = expected_next_use(s.key);
      if (guarded && distance > protected_distance) {
        protected_distance = distance;
        first_protected = candidate;
      } else if (!guarded && distance > victim_distance) {
        victim_distance = distance;
        victim = candidate;
      }
      continue;
    }
    if (guarded) {
      if (first_protected < 0) first_protected = candidate;
      continue;
    }
    victim = candidate;
    break;
  }
  const bool skipped =
      policy_ == EvictionPolicy::kNextUse ? protected_distance > victim_distance : first_protected >= 0;
  if (skipped) ++stats_.protected_skips;
  if (victim < 0 && evict_protected) victim = first_protected;  // a demand load beats a prediction
  if (victim < 0 && per_layer && evict_protected) {             // no slot the split allows: a demand takes any
    for (const Rank& rank : order_) {
      const int32_t candidate = std::get<2>(rank);
      if (!is_protected(slots_[size_t(candidate)].key)) return candidate;
      if (victim < 0) victim = candidate;
    }
  }
  return victim;
}

ExpertCache::Lookup ExpertCache::acquire(ExpertKey key) {
  ++tick_;
  if (key.layer != current_layer_) {  // a visit of the layer: kNextUse's clock of uses per visit
    note_layer(key.layer);
    current_layer_ = key.layer;
    if (policy_ == EvictionPolicy::kNextUse) layer_visits_[key.layer] += weight_now();
  }
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
    note_layer(key.layer);
    slot = choose_victim(key, evict_protected);
    if (slot < 0) return std::nullopt;
    Slot& victim = slots_[size_t(slot)];
    CHRONOS_CHECK_MSG(evictable(victim), "eviction of expert ({}, {}) that is pinned or loading", victim.key.layer,
                      victim.key.expert);
    unrank(slot);
    index_.erase(victim.key);
    ++stats_.evictions;
    if (victim.prefetched && !victim.used) ++stats_.prefetch_wasted;
    count_resident(victim.key, -1);
  }
  Slot& s = slots_[size_t(slot)];
  s.key = key;
  s.state = SlotState::kLoading;
  s.last_use = ++tick_;
  s.prefetched = !evict_protected;
  s.used = false;
  ++(evict_protected ? stats_.demand_loads : stats_.prefetch_loads);
  index_[key] = slot;
  if (uses_scores()) {
    double& score = scores_[key];
    score = std::max(score, weight_now());
  }
  ++stats_.loads;
  count_resident(key, +1);
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
  count_resident(s.key, -1);
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
