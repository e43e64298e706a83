// simulate_hit_rate: replays per-token expert sets through an ExpertCache with demand loading.
#include <memory>

#include "chronos/error.h"
#include "chronos/expert_cache.h"

namespace chronos {
namespace {

class NullEvent final : public Event {
 public:
  bool query() const override { return true; }
  void wait() const override {}
};

// Slots without memory: the replay only exercises the cache's bookkeeping.
class BookkeepingBackend final : public Backend {
 public:
  std::string name() const override { return "bookkeeping"; }
  bool staging_is_device() const override { return true; }
  std::unique_ptr<Stream> create_stream() override { unsupported(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<NullEvent>(); }
  Buffer alloc_device(size_t bytes) override { return Buffer{nullptr, bytes}; }
  void free_device(Buffer& buffer) override { buffer = {}; }
  Buffer alloc_staging(size_t) override { unsupported(); }
  void free_staging(Buffer&) override { unsupported(); }
  void copy_to_device(Stream&, void*, const void*, size_t) override { unsupported(); }

 private:
  [[noreturn]] static void unsupported() {
    check_failed("unsupported", __FILE__, __LINE__, "the bookkeeping backend only books slots");
  }
};

}  // namespace

double simulate_hit_rate(const std::vector<std::vector<ExpertKey>>& tokens, int64_t n_slots, EvictionPolicy policy) {
  return simulate_hit_rate(tokens, n_slots, policy, 0.0);
}

double simulate_hit_rate(const std::vector<std::vector<ExpertKey>>& tokens, int64_t n_slots, EvictionPolicy policy,
                         double frequency_half_life) {
  if (n_slots <= 0) throw_error("cache simulation: {} slots, expected at least one", n_slots);
  BookkeepingBackend backend;
  ExpertCache cache(
      backend,
      {.budget_bytes = n_slots, .slot_bytes = 1, .policy = policy, .frequency_half_life = frequency_half_life});
  int64_t step = 0;
  for (const auto& token : tokens) {
    cache.advance_step(step++);
    for (const ExpertKey key : token) {
      if (cache.acquire(key).state != SlotState::kEmpty) {
        cache.release(key);
        continue;
      }
      // Nothing is pinned or protected between requests, so a slot is always available.
      CHRONOS_CHECK(cache.begin_load(key).has_value());
      cache.finish_load(key);
    }
  }
  const CacheStats& stats = cache.stats();
  const int64_t requests = stats.hits + stats.misses;
  return requests == 0 ? 0.0 : double(stats.hits) / double(requests);
}

}  // namespace chronos
