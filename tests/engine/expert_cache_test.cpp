// ExpertCache: slot budget, load states, pins, protections, both eviction orders, and the replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "chronos/error.h"
#include "chronos/expert_cache.h"

namespace chronos {
namespace {

constexpr int64_t kSlot = 4096;

ExpertKey key_of(int32_t i) { return {i / 8, i % 8}; }

// Loads `key` to kReady; the slot must be granted.
void load(ExpertCache& cache, ExpertKey key) {
  auto lookup = cache.begin_load(key);
  ASSERT_TRUE(lookup.has_value());
  cache.finish_load(key);
}

void touch(ExpertCache& cache, ExpertKey key) {
  ASSERT_NE(cache.acquire(key).state, SlotState::kEmpty);
  cache.release(key);
}

bool present(const ExpertCache& cache, ExpertKey key) { return cache.find(key).state != SlotState::kEmpty; }

TEST(ExpertCache, BudgetSmallerThanOneSlotIsAnError) {
  auto backend = make_cpu_backend();
  try {
    ExpertCache cache(*backend, {.budget_bytes = 1000, .slot_bytes = 4096});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "expert cache budget 1000 is smaller than one expert (4096 bytes)");
  }
}

// Every load is a demand or a prefetch; a prefetch is used once acquired, wasted when evicted first.
TEST(ExpertCache, PrefetchesAreCountedUsedOrWasted) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 2 * kSlot, .slot_bytes = kSlot, .policy = EvictionPolicy::kLru});
  auto prefetch = [&](ExpertKey key) {
    ASSERT_TRUE(cache.begin_load(key, /*evict_protected=*/false).has_value());
    cache.finish_load(key);
  };
  prefetch(key_of(0));
  prefetch(key_of(1));
  touch(cache, key_of(1));  // used
  touch(cache, key_of(1));  // used again: still one use of one prefetch
  ASSERT_TRUE(cache.begin_load(key_of(2), /*evict_protected=*/true).has_value());  // a demand evicts 0, never used
  cache.finish_load(key_of(2));
  EXPECT_FALSE(present(cache, key_of(0)));
  touch(cache, key_of(2));
  prefetch(key_of(3));  // evicts 1, which was used: not wasted
  EXPECT_FALSE(present(cache, key_of(1)));
  const CacheStats& s = cache.stats();
  EXPECT_EQ(s.prefetch_loads, 3);
  EXPECT_EQ(s.demand_loads, 1);
  EXPECT_EQ(s.prefetch_used, 1);
  EXPECT_EQ(s.prefetch_wasted, 1);
  EXPECT_EQ(s.loads, s.prefetch_loads + s.demand_loads);
}

TEST(ExpertCache, SlotsAreBudgetOverSlotBytesWithDistinctBuffers) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 5 * kSlot + 100, .slot_bytes = kSlot});
  EXPECT_EQ(cache.n_slots(), 5);
  EXPECT_EQ(cache.slot_bytes(), kSlot);
  EXPECT_EQ(cache.resident_bytes(), 0);
  std::set<void*> buffers;
  for (int i = 0; i < 5; ++i) {
    auto lookup = cache.begin_load(key_of(i));
    ASSERT_TRUE(lookup.has_value());
    ASSERT_NE(lookup->data, nullptr);
    ASSERT_NE(lookup->ready, nullptr);
    std::memset(lookup->data, i, size_t(kSlot));  // the whole slot is writable
    buffers.insert(lookup->data);
    cache.finish_load(key_of(i));
  }
  EXPECT_EQ(buffers.size(), 5u);
  EXPECT_EQ(cache.resident_bytes(), 5 * kSlot);
  for (int i = 0; i < 5; ++i) {
    const auto lookup = cache.find(key_of(i));
    EXPECT_EQ(static_cast<unsigned char*>(lookup.data)[kSlot - 1], i);
  }
}

TEST(ExpertCache, LoadLifecycleAndStats) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 2 * kSlot, .slot_bytes = kSlot});
  const ExpertKey a{3, 7};
  EXPECT_EQ(cache.acquire(a).state, SlotState::kEmpty);  // miss
  auto reserved = cache.begin_load(a);
  ASSERT_TRUE(reserved.has_value());
  EXPECT_EQ(reserved->state, SlotState::kLoading);
  EXPECT_FALSE(cache.begin_load(a).has_value());  // no double load
  EXPECT_EQ(cache.find(a).state, SlotState::kLoading);
  EXPECT_EQ(cache.acquire(a).state, SlotState::kLoading);  // hit on loading, pinned
  cache.finish_load(a);
  EXPECT_EQ(cache.find(a).state, SlotState::kReady);
  EXPECT_EQ(cache.find(a).slot, reserved->slot);
  cache.release(a);
  EXPECT_EQ(cache.acquire(a).state, SlotState::kReady);
  cache.release(a);
  const CacheStats& stats = cache.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits_loading, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.loads, 1);
  EXPECT_EQ(stats.evictions, 0);
  EXPECT_EQ(stats.peak_bytes, kSlot);
  EXPECT_EQ(cache.resident(), std::vector<ExpertKey>{a});

  const ExpertKey b{0, 1};
  ASSERT_TRUE(cache.begin_load(b).has_value());
  cache.abort_load(b);
  EXPECT_EQ(cache.find(b).state, SlotState::kEmpty);
  EXPECT_EQ(cache.resident_bytes(), kSlot);
}

TEST(ExpertCache, LruEvictsInExactRecencyOrder) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 4 * kSlot, .slot_bytes = kSlot, .policy = EvictionPolicy::kLru});
  for (int i = 0; i < 4; ++i) load(cache, key_of(i));
  touch(cache, key_of(2));
  touch(cache, key_of(0));
  // Recency, oldest first: 1, 3, 2, 0. Each new load evicts the oldest.
  const int expected_victims[] = {1, 3, 2, 0};
  for (int i = 0; i < 4; ++i) {
    load(cache, key_of(10 + i));
    EXPECT_FALSE(present(cache, key_of(expected_victims[i]))) << "load " << i;
    for (int j = i + 1; j < 4; ++j) EXPECT_TRUE(present(cache, key_of(expected_victims[j])));
  }
  EXPECT_EQ(cache.stats().evictions, 4);
}

TEST(ExpertCache, FrequencyKeepsAHotExpertThatLruWouldEvict) {
  auto backend = make_cpu_backend();
  for (const auto policy : {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency}) {
    ExpertCache cache(*backend, {.budget_bytes = 3 * kSlot, .slot_bytes = kSlot, .policy = policy});
    const ExpertKey hot{0, 0}, b{0, 1}, c{0, 2}, d{0, 3};
    load(cache, hot);
    for (int i = 0; i < 5; ++i) touch(cache, hot);
    load(cache, b);
    load(cache, c);
    load(cache, d);  // full: one of hot, b, c goes
    if (policy == EvictionPolicy::kLru) {
      EXPECT_FALSE(present(cache, hot));  // least recent
      EXPECT_TRUE(present(cache, b));
    } else {
      EXPECT_TRUE(present(cache, hot));  // five requests outweigh recency
      EXPECT_FALSE(present(cache, b));   // lowest score, then oldest of b and c
      EXPECT_TRUE(present(cache, c));
    }
  }
}

TEST(ExpertCache, FrequencyDecaysSoAnOldHotExpertEventuallyGoes) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 2 * kSlot,
                               .slot_bytes = kSlot,
                               .policy = EvictionPolicy::kLruFrequency,
                               .frequency_half_life = 2});
  const ExpertKey old_hot{1, 0}, recent{1, 1};
  load(cache, old_hot);
  for (int i = 0; i < 3; ++i) touch(cache, old_hot);  // score 1+2^0.5+2^1 (+load)
  load(cache, recent);
  for (int i = 0; i < 6; ++i) touch(cache, recent);  // each now weighs 2^(3/2) .. 2^(8/2)
  load(cache, {1, 2});
  EXPECT_FALSE(present(cache, old_hot));
  EXPECT_TRUE(present(cache, recent));
}

TEST(ExpertCache, PinnedAndLoadingSlotsAreNeverVictims) {
  auto backend = make_cpu_backend();
  for (const auto policy : {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency}) {
    ExpertCache cache(*backend, {.budget_bytes = 3 * kSlot, .slot_bytes = kSlot, .policy = policy});
    load(cache, key_of(0));
    load(cache, key_of(1));
    ASSERT_TRUE(cache.begin_load(key_of(2)).has_value());          // stays loading
    ASSERT_NE(cache.acquire(key_of(0)).state, SlotState::kEmpty);  // pinned
    // Only key 1 is evictable, although key 0 is older under LRU.
    load(cache, key_of(3));
    EXPECT_FALSE(present(cache, key_of(1)));
    EXPECT_TRUE(present(cache, key_of(0)));
    EXPECT_EQ(cache.find(key_of(2)).state, SlotState::kLoading);
    ASSERT_NE(cache.acquire(key_of(3)).state, SlotState::kEmpty);
    EXPECT_FALSE(cache.begin_load(key_of(4)).has_value());  // pinned, loading, pinned
    cache.release(key_of(0));
    auto granted = cache.begin_load(key_of(4));
    ASSERT_TRUE(granted.has_value());
    EXPECT_FALSE(present(cache, key_of(0)));
    cache.release(key_of(3));
  }
}

TEST(ExpertCache, ProtectionHoldsUntilItsStepAndCanBeExtended) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 2 * kSlot, .slot_bytes = kSlot, .policy = EvictionPolicy::kLru});
  const ExpertKey a{0, 0}, b{0, 1};
  cache.protect(a, 3);  // before it is resident
  load(cache, a);
  cache.protect(b, 2);
  load(cache, b);
  EXPECT_FALSE(cache.begin_load({0, 2}).has_value());  // both protected
  EXPECT_EQ(cache.stats().protected_skips, 1);
  cache.advance_step(2);  // b expires (until 2 is exclusive); a still protected
  EXPECT_TRUE(cache.is_protected(a));
  EXPECT_FALSE(cache.is_protected(b));
  load(cache, {0, 2});  // a is older but protected: b goes
  EXPECT_TRUE(present(cache, a));
  EXPECT_FALSE(present(cache, b));
  EXPECT_EQ(cache.stats().protected_skips, 2);
  cache.protect(a, 1);  // cannot shorten
  cache.protect(a, 5);  // extends
  cache.advance_step(4);
  load(cache, {0, 3});
  EXPECT_TRUE(present(cache, a));
  cache.advance_step(5);
  load(cache, {0, 4});
  EXPECT_FALSE(present(cache, a));
}

TEST(ExpertCache, AbortWhilePinnedKeepsTheSlotForTheSameKey) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 1 * kSlot, .slot_bytes = kSlot});
  const ExpertKey a{2, 3};
  auto first = cache.begin_load(a);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(cache.acquire(a).state, SlotState::kLoading);
  cache.abort_load(a);
  EXPECT_EQ(cache.find(a).state, SlotState::kEmpty);
  EXPECT_EQ(cache.resident_bytes(), 0);
  EXPECT_FALSE(cache.begin_load({2, 4}).has_value());  // the only slot is held by a waiter
  auto retry = cache.begin_load(a);
  ASSERT_TRUE(retry.has_value());
  EXPECT_EQ(retry->slot, first->slot);
  cache.finish_load(a);
  cache.release(a);  // the waiter's pin, taken before the abort
  load(cache, {2, 4});
  EXPECT_FALSE(present(cache, a));

  // Abort with nobody waiting frees the slot at once: the next load needs no eviction.
  ASSERT_TRUE(cache.begin_load({2, 5}).has_value());
  const int64_t evictions = cache.stats().evictions;
  cache.abort_load({2, 5});
  EXPECT_EQ(cache.resident_bytes(), 0);
  load(cache, {2, 6});
  EXPECT_EQ(cache.stats().evictions, evictions);
}

TEST(ExpertCacheDeathTest, ReleaseWithoutPinIsAnInvariantFailure) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = kSlot, .slot_bytes = kSlot});
  load(cache, {0, 0});
  EXPECT_DEATH(cache.release({0, 0}), "not pinned");
}

// Thousands of random calls against a shadow model; every invariant checked after every call.
// A short half-life makes the frequency scores rescale (and every slot re-rank) every few
// hundred acquires instead of every few thousand.
void run_random_operations(EvictionPolicy policy, uint64_t seed, double half_life = 0) {
  auto backend = make_cpu_backend();
  constexpr int64_t kSlots = 12;
  ExpertCache cache(
      *backend,
      {.budget_bytes = kSlots * kSlot + 7, .slot_bytes = kSlot, .policy = policy, .frequency_half_life = half_life});
  std::mt19937_64 rng(seed);
  std::map<ExpertKey, int> pins;  // the compute side's pins
  std::set<ExpertKey> loading;
  std::set<ExpertKey> orphaned;  // aborted while pinned
  std::map<ExpertKey, int64_t> protected_until;
  int64_t step = 0;
  auto random_key = [&] { return ExpertKey{int32_t(rng() % 4), int32_t(rng() % 10)}; };
  auto is_protected = [&](ExpertKey k) {
    auto it = protected_until.find(k);
    return it != protected_until.end() && it->second > step;
  };
  for (int op = 0; op < 20000; ++op) {
    const ExpertKey key = random_key();
    const int choice = int(rng() % 100);
    std::optional<ExpertKey> aborted;  // the one key this call may remove legitimately
    // Keys that no call may evict: pinned, loading, protected and resident.
    std::vector<ExpertKey> must_stay;
    for (const auto& [k, n] : pins) {
      if (!orphaned.count(k)) must_stay.push_back(k);  // aborted while pinned: not resident
    }
    for (const auto& k : loading) must_stay.push_back(k);
    for (const auto& k : cache.resident()) {
      if (is_protected(k)) must_stay.push_back(k);
    }
    if (choice < 30) {
      const auto lookup = cache.acquire(key);
      if (orphaned.count(key)) {
        ASSERT_EQ(lookup.state, SlotState::kEmpty);
      }
      if (lookup.state != SlotState::kEmpty) ++pins[key];
    } else if (choice < 55) {
      if (!pins.empty()) {
        auto it = pins.begin();
        std::advance(it, rng() % pins.size());
        const ExpertKey k = it->first;
        cache.release(k);
        if (--it->second == 0) {
          pins.erase(it);
          orphaned.erase(k);
        }
      }
    } else if (choice < 80) {
      const bool was_present = present(cache, key);
      const auto lookup = cache.begin_load(key);
      if (was_present) {
        ASSERT_FALSE(lookup.has_value());
      }
      if (lookup) {
        ASSERT_EQ(lookup->state, SlotState::kLoading);
        loading.insert(key);
        orphaned.erase(key);
      }
    } else if (choice < 92) {
      if (!loading.empty()) {
        auto it = loading.begin();
        std::advance(it, rng() % loading.size());
        const ExpertKey k = *it;
        loading.erase(it);
        if (rng() % 5 == 0) {
          cache.abort_load(k);
          aborted = k;
          // A waiter that pinned it keeps the pin until release, as the compute side would.
          if (pins.count(k)) orphaned.insert(k);
        } else {
          cache.finish_load(k);
        }
      }
    } else if (choice < 97) {
      const int64_t until = step + int64_t(rng() % 4);
      cache.protect(key, until);
      auto& u = protected_until[key];
      u = std::max(u, until);
    } else {
      step += int64_t(rng() % 2);
      cache.advance_step(step);
    }
    ASSERT_LE(cache.resident_bytes(), cache.budget_bytes());
    ASSERT_LE(cache.stats().peak_bytes, cache.budget_bytes());
    ASSERT_EQ(int64_t(cache.resident().size()) * kSlot, cache.resident_bytes());
    for (const ExpertKey k : must_stay) {
      if (aborted == k) continue;  // an abort is the one call that removes a loading key
      ASSERT_TRUE(present(cache, k)) << "op " << op << " evicted (" << k.layer << ", " << k.expert << ")";
    }
    for (const ExpertKey k : loading) ASSERT_EQ(cache.find(k).state, SlotState::kLoading);
  }
  const CacheStats& stats = cache.stats();
  EXPECT_GT(stats.evictions, 100);  // the budget was under pressure
  EXPECT_GT(stats.hits, 100);
  EXPECT_GT(stats.protected_skips, 0);
  EXPECT_EQ(stats.peak_bytes, cache.budget_bytes() / kSlot * kSlot);
}

TEST(ExpertCache, RandomOperationsKeepEveryInvariantLru) { run_random_operations(EvictionPolicy::kLru, 1); }
TEST(ExpertCache, RandomOperationsKeepEveryInvariantLruFrequency) {
  run_random_operations(EvictionPolicy::kLruFrequency, 2);
}
TEST(ExpertCache, RandomOperationsKeepEveryInvariantPerLayer) { run_random_operations(EvictionPolicy::kPerLayer, 9); }
TEST(ExpertCache, RandomOperationsKeepEveryInvariantNextUse) {
  run_random_operations(EvictionPolicy::kNextUse, 10);
  run_random_operations(EvictionPolicy::kNextUse, 11, 0.25);
}
TEST(ExpertCache, RandomOperationsKeepEveryInvariantLruFrequencyWithFrequentRescales) {
  for (uint64_t seed = 3; seed < 8; ++seed) run_random_operations(EvictionPolicy::kLruFrequency, seed, 0.25);
}

// The exact interleaving behind "release of expert that is not in the cache": the acquire that
// makes the frequency scores rescale re-ranked every unpinned ready slot, the slot being acquired
// included, before pinning it; the next load then chose that pinned slot as its victim.
TEST(ExpertCache, AcquireThatRescalesTheScoresKeepsItsSlotPinned) {
  auto backend = make_cpu_backend();
  // One slot, half-life of one acquire: the 256th acquire rescales (kRescaleExponent).
  ExpertCache cache(*backend, {.budget_bytes = kSlot, .slot_bytes = kSlot, .frequency_half_life = 1});
  const ExpertKey hot{0, 1};
  const ExpertKey other{0, 2};
  load(cache, hot);
  for (int i = 0; i < 255; ++i) touch(cache, hot);
  const auto lookup = cache.acquire(hot);  // request 256: the rescale happens inside this call
  ASSERT_EQ(lookup.state, SlotState::kReady);
  EXPECT_FALSE(cache.begin_load(other).has_value()) << "a pinned slot was handed to another expert";
  EXPECT_FALSE(cache.begin_load(other, /*evict_protected=*/true).has_value());
  EXPECT_EQ(cache.find(hot).slot, lookup.slot);
  cache.release(hot);
  EXPECT_TRUE(cache.begin_load(other).has_value());  // unpinned now: evictable again
  EXPECT_FALSE(present(cache, hot));
}

// Per-token sets shaped like MoE routing: for each of n_layers, k distinct experts. Each of the
// previous token's experts in that layer is kept with probability `keep` (consecutive tokens
// share experts); the rest are drawn from a Zipf(s) popularity over n_expert, a different
// popularity order per layer.
std::vector<std::vector<ExpertKey>> zipf_tokens(int n_tokens, int n_layers, int n_expert, int k, double s, double keep,
                                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return double(rng() >> 11) * 0x1.0p-53; };
  std::vector<double> cdf(static_cast<size_t>(n_expert));
  double total = 0;
  for (int r = 0; r < n_expert; ++r) cdf[size_t(r)] = (total += 1.0 / std::pow(r + 1, s));
  std::vector<std::vector<int32_t>> rank_to_expert(static_cast<size_t>(n_layers));
  for (auto& order : rank_to_expert) {
    order.resize(size_t(n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
  }
  std::vector<std::set<int32_t>> previous(static_cast<size_t>(n_layers));
  std::vector<std::vector<ExpertKey>> tokens(static_cast<size_t>(n_tokens));
  for (auto& token : tokens) {
    for (int layer = 0; layer < n_layers; ++layer) {
      std::set<int32_t> chosen;
      for (const int32_t e : previous[size_t(layer)]) {
        if (uniform() < keep) chosen.insert(e);
      }
      while (int(chosen.size()) < k) {
        const auto rank = std::lower_bound(cdf.begin(), cdf.end(), uniform() * total) - cdf.begin();
        chosen.insert(rank_to_expert[size_t(layer)][size_t(rank)]);
      }
      for (const int32_t e : chosen) token.push_back({layer, e});
      previous[size_t(layer)] = std::move(chosen);
    }
  }
  return tokens;
}

TEST(CacheSimulation, FrequencyAwareBeatsLruOnSkewedReuse) {
  // 8 layers x 64 experts, top-4, Zipf 1.0 drawn independently per token; the cache holds a
  // tenth of all experts.
  const auto tokens = zipf_tokens(3000, 8, 64, 4, 1.0, 0.0, 7);
  const double lru = simulate_hit_rate(tokens, 51, EvictionPolicy::kLru);
  const double lrfu = simulate_hit_rate(tokens, 51, EvictionPolicy::kLruFrequency);
  EXPECT_GT(lru, 0.1);  // a sane replay: skew gives LRU hits too
  EXPECT_GT(lrfu, lru + 0.05) << "lru " << lru << " lru-frequency " << lrfu;
  // A longer half-life approaches LFU, which is what independent draws reward.
  EXPECT_GT(simulate_hit_rate(tokens, 51, EvictionPolicy::kLruFrequency, 16 * 51), lrfu + 0.05);
}

TEST(CacheSimulation, FrequencyAwareHoldsUpWhenConsecutiveTokensShareExperts) {
  // Each expert of the previous token is kept with probability 0.4: recency matters, and the
  // default half-life must not fall below LRU (a 16x longer one does).
  const auto tokens = zipf_tokens(3000, 8, 64, 4, 0.8, 0.4, 8);
  const double lru = simulate_hit_rate(tokens, 51, EvictionPolicy::kLru);
  const double lrfu = simulate_hit_rate(tokens, 51, EvictionPolicy::kLruFrequency);
  EXPECT_GE(lrfu, lru - 0.005) << "lru " << lru << " lru-frequency " << lrfu;
  EXPECT_LT(simulate_hit_rate(tokens, 51, EvictionPolicy::kLruFrequency, 16 * 51), lru - 0.05);
}

TEST(CacheSimulation, CycleLongerThanTheCacheNeverHits) {
  // Ten tokens of 4 experts each, repeated: 40 keys through 32 slots. LRU always evicts the key
  // needed next; the decayed frequency ranks keys by recency on a strict cycle, so it does too.
  std::vector<std::vector<ExpertKey>> tokens;
  for (int round = 0; round < 20; ++round) {
    for (int t = 0; t < 10; ++t) {
      tokens.push_back({{t, 0}, {t, 1}, {t, 2}, {t, 3}});
    }
  }
  EXPECT_EQ(simulate_hit_rate(tokens, 32, EvictionPolicy::kLru), 0.0);
  EXPECT_EQ(simulate_hit_rate(tokens, 32, EvictionPolicy::kLruFrequency), 0.0);
  // The same cycle in a cache that holds it misses only on the first round.
  EXPECT_DOUBLE_EQ(simulate_hit_rate(tokens, 40, EvictionPolicy::kLru), 19.0 / 20.0);
  EXPECT_DOUBLE_EQ(simulate_hit_rate(tokens, 40, EvictionPolicy::kLruFrequency), 19.0 / 20.0);
}

// kNextUse on the cycle above: the layer just computed is needed again only a whole cycle later,
// so its experts go first, and most of the cycle stays resident (at most 32 of a round's 40 keys
// can be resident when it starts).
TEST(CacheSimulation, NextUseKeepsMostOfACycleLongerThanTheCache) {
  std::vector<std::vector<ExpertKey>> tokens;
  for (int round = 0; round < 20; ++round) {
    std::vector<ExpertKey> token;
    for (int layer = 0; layer < 10; ++layer)
      for (int e = 0; e < 4; ++e) token.push_back({layer, e});
    tokens.push_back(token);
  }
  EXPECT_EQ(simulate_hit_rate(tokens, 32, EvictionPolicy::kLru), 0.0);
  EXPECT_EQ(simulate_hit_rate(tokens, 32, EvictionPolicy::kLruFrequency), 0.0);
  const double next_use = simulate_hit_rate(tokens, 32, EvictionPolicy::kNextUse);
  EXPECT_GT(next_use, 0.6) << next_use;
  EXPECT_LE(next_use, 19.0 * 32.0 / (20.0 * 40.0));
}

// The layer that runs next keeps its expert; the one just used gives its slot up.
TEST(ExpertCache, NextUseEvictsTheLayerJustComputedNotTheNextOne) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 3 * kSlot, .slot_bytes = kSlot, .policy = EvictionPolicy::kNextUse});
  for (int round = 0; round < 3; ++round) {
    for (int32_t layer = 0; layer < 3; ++layer) {
      if (cache.acquire({layer, 0}).state == SlotState::kEmpty) {
        load(cache, {layer, 0});
      } else {
        cache.release({layer, 0});
      }
    }
  }
  // Layer 2 ran last: its expert is needed a cycle from now, layer 0's at the next step.
  ASSERT_EQ(cache.acquire({2, 1}).state, SlotState::kEmpty);
  load(cache, {2, 1});
  EXPECT_FALSE(present(cache, {2, 0}));
  EXPECT_TRUE(present(cache, {0, 0}));
  EXPECT_TRUE(present(cache, {1, 0}));
}

// Of two experts whose layer runs next, the one its layer rarely uses goes first.
TEST(ExpertCache, NextUseWeighsHowOftenALayerUsesAnExpert) {
  auto backend = make_cpu_backend();
  ExpertCache cache(*backend, {.budget_bytes = 3 * kSlot, .slot_bytes = kSlot, .policy = EvictionPolicy::kNextUse});
  const auto use = [&](ExpertKey key) {
    if (cache.acquire(key).state == SlotState::kEmpty) {
      load(cache, key);
    } else {
      cache.release(key);
    }
  };
  // Layer 0 uses expert 0 at every visit, expert 1 at the first only; layer 1 uses expert 0.
  for (int visit = 0; visit < 8; ++visit) {
    use({0, 0});
    if (visit == 0) use({0, 1});
    use({1, 0});
  }
  ASSERT_EQ(cache.acquire({1, 1}).state, SlotState::kEmpty);
  load(cache, {1, 1});
  EXPECT_FALSE(present(cache, {0, 1}));
  EXPECT_TRUE(present(cache, {0, 0}));
  EXPECT_TRUE(present(cache, {1, 0}));
}

// kPerLayer: a burst of new experts in one layer evicts within that layer once it holds its share
// of the budget; the other layer keeps its share.
TEST(ExpertCache, PerLayerSplitKeepsEachLayersShare) {
  auto backend = make_cpu_backend();
  // Two experts of each of two layers in four slots, then ten new experts of layer 0.
  const auto burst = [&](EvictionPolicy policy) {
    auto cache = std::make_unique<ExpertCache>(
        *backend, ExpertCache::Options{.budget_bytes = 4 * kSlot, .slot_bytes = kSlot, .policy = policy});
    std::vector<ExpertKey> keys = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    for (int32_t e = 2; e < 12; ++e) keys.push_back({0, e});
    for (const ExpertKey key : keys) {
      EXPECT_EQ(cache->acquire(key).state, SlotState::kEmpty);
      load(*cache, key);
    }
    return cache;
  };
  const auto split = burst(EvictionPolicy::kPerLayer);
  EXPECT_TRUE(present(*split, {1, 0}));
  EXPECT_TRUE(present(*split, {1, 1}));
  EXPECT_TRUE(present(*split, {0, 11}));
  EXPECT_TRUE(present(*split, {0, 10}));
  // Under LRFU the burst takes every slot.
  const auto shared = burst(EvictionPolicy::kLruFrequency);
  EXPECT_FALSE(present(*shared, {1, 0}));
  EXPECT_FALSE(present(*shared, {1, 1}));
}

// Every policy: a demand load gets a slot whenever one is evictable (protected or not), and the
// budget is never exceeded, on random operations.
TEST(ExpertCache, EveryPolicyGivesADemandLoadASlot) {
  auto backend = make_cpu_backend();
  for (const EvictionPolicy policy :
       {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency, EvictionPolicy::kPerLayer, EvictionPolicy::kNextUse}) {
    SCOPED_TRACE(testing::Message() << "policy " << int(policy));
    ExpertCache cache(*backend, {.budget_bytes = 6 * kSlot, .slot_bytes = kSlot, .policy = policy});
    std::mt19937 rng(3);
    for (int i = 0; i < 3000; ++i) {
      const ExpertKey key{int32_t(rng() % 4), int32_t(rng() % 8)};
      cache.advance_step(i / 16);
      if (rng() % 5 == 0) cache.protect(key, i / 16 + 2);
      if (cache.acquire(key).state != SlotState::kEmpty) {
        cache.release(key);
        continue;
      }
      const bool demand = rng() % 3 != 0;
      const auto slot = cache.begin_load(key, demand);
      if (demand) {
        ASSERT_TRUE(slot.has_value()) << "operation " << i;
      }
      if (slot) cache.finish_load(key);
      ASSERT_LE(cache.resident_bytes(), 6 * kSlot);
    }
  }
}

TEST(CacheSimulation, RepeatedKeysWithinATokenHit) {
  const std::vector<std::vector<ExpertKey>> tokens = {{{0, 0}, {0, 0}}, {{0, 1}}};
  EXPECT_DOUBLE_EQ(simulate_hit_rate(tokens, 1, EvictionPolicy::kLru), 1.0 / 3.0);
  EXPECT_THROW(simulate_hit_rate(tokens, 0, EvictionPolicy::kLru), Error);
}

}  // namespace
}  // namespace chronos
