// ThreadPool: coverage of every index, parallel_for chunking, once per thread, exception
// propagation, reuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "chronos/error.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 10007}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run(n, [&](int64_t task) { hits[size_t(task)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " threads, task " << i;
    }
  }
}

TEST(ThreadPool, SingleThreadRunsInlineInOrder) {
  ThreadPool pool(1);
  std::vector<int64_t> order;
  const auto caller = std::this_thread::get_id();
  pool.run(5, [&](int64_t task) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(task);
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// Two tasks that each wait for the other can only finish if two threads run them at once: with
// ThreadPool(2) that means the caller took part. The wait is bounded so a bug fails, not hangs.
TEST(ThreadPool, CallerAndWorkersRunConcurrently) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::atomic<int> arrived{0};
    std::atomic<int> met{0};
    pool.run(threads, [&](int64_t) {
      arrived.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (arrived.load() < threads && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      if (arrived.load() == threads) met.fetch_add(1);
    });
    EXPECT_EQ(met.load(), threads) << threads << " threads";
  }
}

TEST(ThreadPool, ParallelForCoversRangeOnGrainBoundaries) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 15, 16, 17, 100, 1000, 1001}) {
      for (int64_t grain : {1, 16, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0};
        pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
          chunks.fetch_add(1);
          EXPECT_LT(begin, end);
          EXPECT_EQ(begin % grain, 0);
          EXPECT_TRUE(end == n || end % grain == 0);
          for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
        });
        EXPECT_LE(chunks.load(), threads);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << n << " " << grain << " " << i;
      }
    }
  }
}

TEST(ThreadPool, RunOnEachThreadVisitsEveryThreadOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 20; ++round) {
      std::mutex mutex;
      std::vector<std::thread::id> ids;
      pool.run_on_each_thread([&] {
        std::lock_guard lock(mutex);
        ids.push_back(std::this_thread::get_id());
      });
      ASSERT_EQ(std::ssize(ids), threads) << threads << " threads, round " << round;
      std::sort(ids.begin(), ids.end());
      EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "a thread ran twice";
      EXPECT_TRUE(std::binary_search(ids.begin(), ids.end(), std::this_thread::get_id())) << "the caller did not run";
    }
  }
}

TEST(ThreadPool, PropagatesTheExceptionAndStaysUsable) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    try {
      pool.run(1000, [&](int64_t task) {
        if (task == 37) throw std::runtime_error("task 37 failed");
      });
      FAIL() << "run() returned normally";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "task 37 failed");
    }
    // Many throwers: exactly one exception reaches the caller, one of theirs.
    try {
      pool.run(100, [&](int64_t task) { throw Error("task " + std::to_string(task)); });
      FAIL() << "run() returned normally";
    } catch (const Error& error) {
      EXPECT_EQ(std::string(error.what()).rfind("task ", 0), 0u);
    }
    std::atomic<int64_t> sum{0};
    pool.run(100, [&](int64_t task) { sum.fetch_add(task); });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, SurvivesManyBackToBackRuns) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  const int runs = 20000;
  for (int i = 0; i < runs; ++i) pool.run(4, [&](int64_t task) { sum.fetch_add(task + 1); });
  EXPECT_EQ(sum.load(), int64_t(runs) * 10);
  // After the workers have gone to sleep, a run still wakes them.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool.run(4, [&](int64_t task) { sum.fetch_add(task + 1); });
  EXPECT_EQ(sum.load(), int64_t(runs + 1) * 10);
}

TEST(ThreadPool, RejectsZeroThreadsAndReportsCpus) {
  EXPECT_THROW(ThreadPool(0), Error);
  EXPECT_GE(available_cpus(), 1);
}

}  // namespace
}  // namespace chronos
