// SharedExpertCache: the ExpertCache that the compute side and the prefetcher's I/O thread share,
// with the one mutex that guards it and the condition variable that its waiters sleep on.
//
// Lock order, written only here: the cache lock first, then the AsyncPrefetcher's own queue lock
// (taken inside enqueue, error and stats). Code holding the cache lock may call those three; the
// prefetcher never takes the cache lock while it holds its queue lock. Nothing waits on an Event,
// reads a file or runs a kernel with the cache lock held.
//
// Waking: whoever changes something a waiter may be waiting for (a load finished or failed, a
// read error recorded, queued requests dropped, the prefetcher stopping) calls notify_loaded()
// afterwards, so waiters sleep until notified instead of polling. notify_loaded takes the cache
// lock for a moment first: a waiter checks its condition and goes to sleep under that lock, so a
// change made before the call, under the cache lock or not (the prefetcher's error and counters
// live under its queue lock), is never missed between the check and the sleep.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "chronos/error.h"
#include "chronos/expert_cache.h"

namespace chronos {

class SharedExpertCache {
 public:
  using Clock = std::chrono::steady_clock;

  // The cache's access while its lock is held; the lock is released when the guard goes.
  template <typename Cache>
  class Guard {
   public:
    Cache* operator->() const {
      CHRONOS_CHECK(lock_.owns_lock());
      return cache_;
    }
    Cache& operator*() const { return *operator->(); }

    // Sleeps (the lock released) until the next notify_loaded. Wakeups may be spurious: the caller
    // re-checks its condition in a loop.
    void wait() { owner_->loaded_.wait(lock_); }
    // Sleeps (the lock released) until `done()`, checked under the lock, holds.
    template <typename Predicate>
    void wait(Predicate done) {
      owner_->loaded_.wait(lock_, done);
    }
    // The same with a deadline; returns done().
    template <typename Predicate>
    bool wait_until(Clock::time_point deadline, Predicate done) {
      return owner_->loaded_.wait_until(lock_, deadline, done);
    }
    // Around an Event wait or a call that must not hold the cache lock (notify_loaded).
    void unlock() { lock_.unlock(); }
    void relock() { lock_.lock(); }

   private:
    friend class SharedExpertCache;
    Guard(const SharedExpertCache& owner, Cache& cache) : lock_(owner.mutex_), owner_(&owner), cache_(&cache) {}

    std::unique_lock<std::mutex> lock_;
    const SharedExpertCache* owner_;
    Cache* cache_;
  };

  // Throws BudgetTooSmall as ExpertCache does.
  SharedExpertCache(Backend& backend, const ExpertCache::Options& options) : cache_(backend, options) {}
  SharedExpertCache(const SharedExpertCache&) = delete;
  SharedExpertCache& operator=(const SharedExpertCache&) = delete;

  Guard<ExpertCache> lock() { return Guard<ExpertCache>(*this, cache_); }
  Guard<const ExpertCache> lock() const { return Guard<const ExpertCache>(*this, cache_); }

  // Call without holding the lock, after the change (see the top of this file).
  void notify_loaded() {
    { const std::lock_guard order(mutex_); }
    loaded_.notify_all();
  }

  // Fixed at construction: read without the lock.
  int64_t n_slots() const { return cache_.n_slots(); }
  int64_t slot_bytes() const { return cache_.slot_bytes(); }
  int64_t budget_bytes() const { return cache_.budget_bytes(); }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable loaded_;
  ExpertCache cache_;
};

}  // namespace chronos
