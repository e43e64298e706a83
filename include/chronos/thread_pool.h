// ThreadPool: a fixed set of worker threads that run index ranges; passed to every op.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace chronos {

// A non-owning reference to a callable, valid for the duration of the call that receives it.
// Unlike std::function it never allocates, which keeps the forward pass allocation-free.
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& fn)  // NOLINT: implicit, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(fn)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

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
  void run(int64_t n_tasks, FunctionRef<void(int64_t task)> fn);

  // Splits [0, n) into at most size() contiguous chunks whose boundaries are multiples of
  // `grain` (except the end) and calls fn(begin, end) on each.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t begin, int64_t end)> fn);

  // Calls fn() once on each of the size() threads (the caller's included) and returns when all
  // have: for per-thread state, such as kernel buffers sized before a forward must not allocate.
  void run_on_each_thread(FunctionRef<void()> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hardware threads available to this process (sched_getaffinity), at least 1.
int available_cpus();

}  // namespace chronos
