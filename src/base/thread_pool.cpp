// ThreadPool: persistent workers woken by a generation counter (spin briefly, then sleep on a
// condition variable); the caller runs tasks too and rethrows the first task exception.
#include "chronos/thread_pool.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "chronos/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CHRONOS_CPU_RELAX() _mm_pause()
#else
#define CHRONOS_CPU_RELAX() std::this_thread::yield()
#endif

namespace chronos {
namespace {

// A decode step issues ~100 dispatches a few tens of microseconds apart: a worker that spins
// this long catches the next one without a futex wake-up, and one that finds nothing sleeps
// instead of burning a core another process may need.
constexpr auto kSpinTime = std::chrono::microseconds(50);
constexpr int kSpinsBetweenClockReads = 64;

}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> workers;

  // The job of the current generation; written by run() before the generation is published.
  const FunctionRef<void(int64_t)>* fn = nullptr;
  int64_t n_tasks = 0;
  std::atomic<int64_t> next_task{0};
  std::atomic<int> workers_busy{0};  // workers that have not finished the current generation
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;

  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stopping{false};
  std::atomic<int> sleepers{0};
  std::mutex wake_mutex;
  std::condition_variable wake;

  std::atomic<bool> in_run{false};

  void run_tasks() {
    for (;;) {
      const int64_t task = next_task.fetch_add(1, std::memory_order_relaxed);
      if (task >= n_tasks || failed.load(std::memory_order_relaxed)) return;
      try {
        (*fn)(task);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  }

  // Returns false when the pool is shutting down.
  bool wait_for_generation(uint64_t seen) {
    const auto spin_end = std::chrono::steady_clock::now() + kSpinTime;
    for (;;) {
      for (int i = 0; i < kSpinsBetweenClockReads; ++i) {
        if (generation.load(std::memory_order_acquire) != seen) return !stopping.load();
        CHRONOS_CPU_RELAX();
      }
      if (std::chrono::steady_clock::now() >= spin_end) break;
    }
    std::unique_lock lock(wake_mutex);
    sleepers.fetch_add(1);  // seq_cst, paired with publish(): one side sees the other
    wake.wait(lock, [&] { return generation.load() != seen; });
    sleepers.fetch_sub(1);
    return !stopping.load();
  }

  void publish() {
    generation.fetch_add(1);  // seq_cst
    if (sleepers.load() > 0) {
      // Taking the mutex orders this wake-up after any sleeper's predicate check.
      { std::lock_guard lock(wake_mutex); }
      wake.notify_all();
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    while (wait_for_generation(seen)) {
      seen = generation.load(std::memory_order_acquire);
      run_tasks();
      if (workers_busy.fetch_sub(1, std::memory_order_acq_rel) == 1) workers_busy.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  if (n_threads < 1) throw_error("ThreadPool: thread count must be at least 1, got {}", n_threads);
  impl_->workers.reserve(size_t(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  impl_->stopping.store(true);
  impl_->publish();
  for (auto& worker : impl_->workers) worker.join();
}

int ThreadPool::size() const { return int(impl_->workers.size()) + 1; }

void ThreadPool::run(int64_t n_tasks, FunctionRef<void(int64_t task)> fn) {
  Impl& s = *impl_;
  CHRONOS_CHECK_MSG(!s.in_run.exchange(true), "ThreadPool::run is not reentrant");
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag.store(false); }
  } release{s.in_run};
  if (n_tasks <= 0) return;
  if (s.workers.empty() || n_tasks == 1) {
    for (int64_t task = 0; task < n_tasks; ++task) fn(task);
    return;
  }

  s.fn = &fn;
  s.n_tasks = n_tasks;
  s.next_task.store(0, std::memory_order_relaxed);
  s.failed.store(false, std::memory_order_relaxed);
  s.first_error = nullptr;
  s.workers_busy.store(int(s.workers.size()), std::memory_order_relaxed);
  s.publish();

  s.run_tasks();

  // The other threads finish within about one task of the caller; spin for that, then sleep.
  for (int spin = 0; spin < 4096; ++spin) {
    if (s.workers_busy.load(std::memory_order_acquire) == 0) break;
    CHRONOS_CPU_RELAX();
  }
  for (int busy; (busy = s.workers_busy.load(std::memory_order_acquire)) != 0;)
    s.workers_busy.wait(busy, std::memory_order_acquire);

  if (s.first_error) std::rethrow_exception(s.first_error);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t begin, int64_t end)> fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t n_grains = (n + grain - 1) / grain;
  const int64_t n_chunks = n_grains < size() ? n_grains : size();
  run(n_chunks, [&](int64_t chunk) {
    // Grains are dealt out evenly; the first (n_grains % n_chunks) chunks get one more.
    const int64_t base = n_grains / n_chunks, extra = n_grains % n_chunks;
    const int64_t first = chunk * base + (chunk < extra ? chunk : extra);
    const int64_t count = base + (chunk < extra ? 1 : 0);
    const int64_t begin = first * grain;
    const int64_t end = (first + count) * grain < n ? (first + count) * grain : n;
    fn(begin, end);
  });
}

void ThreadPool::run_on_each_thread(FunctionRef<void()> fn) {
  // One task per thread: a thread that has taken its task waits until every task is taken, so
  // no thread can take two. The wait is short (the other threads are spinning or just woken).
  const int n_threads = size();
  std::atomic<int> taken{0};
  run(n_threads, [&](int64_t) {
    taken.fetch_add(1, std::memory_order_acq_rel);
    while (taken.load(std::memory_order_acquire) < n_threads) std::this_thread::yield();
    fn();
  });
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware > 0 ? int(hardware) : 1;
  }
  const int count = CPU_COUNT(&set);
  return count > 0 ? count : 1;
}

}  // namespace chronos
