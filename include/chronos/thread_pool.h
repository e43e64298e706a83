// ThreadPool: a fixed set of worker threads that run index ranges; passed to every op.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace chronos {

class ThreadPool {
 public:
  // n_threads counts the calling thread: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Calls fn(task) for every task in [0, n_tasks), spread over the threads (the caller takes
  // part), and returns when all have finished. Not reentrant: fn must not call run().
  void run(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

  // Splits [0, n) into at most size() contiguous chunks whose boundaries are multiples of
  // `grain` (except the end) and calls fn(begin, end) on each.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hardware threads available to this process (sched_getaffinity), at least 1.
int available_cpus();

}  // namespace chronos
