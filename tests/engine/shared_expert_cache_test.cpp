// SharedExpertCache and the waits built on it: a change made outside the cache lock before
// notify_loaded is never missed, a deadline ends a wait nothing answers, and a streamer blocked on
// a read (a demand miss in wait mode, or load_all) wakes on that read's error and rethrows it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/shared_expert_cache.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(SharedExpertCache, AWaitEndsAtItsDeadlineWhenNothingNotifies) {
  const auto backend = make_cpu_backend();
  SharedExpertCache cache(*backend, {.budget_bytes = 2 * 4096, .slot_bytes = 4096});
  EXPECT_EQ(cache.n_slots(), 2);
  EXPECT_EQ(cache.lock()->n_slots(), 2);
  const auto start = Clock::now();
  EXPECT_FALSE(cache.lock().wait_until(start + 50ms, [] { return false; }));
  EXPECT_GE(Clock::now() - start, 50ms);
}

// The prefetcher's counters and error live under its own lock, not the cache's. A waiter that
// checked them and is about to sleep must still get the notification that follows a change: each
// round the producer publishes under another mutex and notifies; a lost wake-up runs into the deadline.
TEST(SharedExpertCache, AChangeMadeUnderAnotherLockBeforeNotifyIsNeverMissed) {
  const auto backend = make_cpu_backend();
  SharedExpertCache cache(*backend, {.budget_bytes = 4096, .slot_bytes = 4096});
  std::mutex other;
  std::condition_variable acknowledged;
  int64_t published = 0;  // guarded by `other`
  int64_t seen = 0;       // guarded by `other`
  constexpr int64_t kRounds = 2000;
  std::jthread producer([&] {
    for (int64_t round = 1; round <= kRounds; ++round) {
      {
        std::unique_lock lock(other);
        // The consumer saw the previous round (or gave up): publish the next one.
        if (!acknowledged.wait_for(lock, 20s, [&] { return seen == round - 1; })) return;
        published = round;
      }
      cache.notify_loaded();
    }
  });
  for (int64_t round = 1; round <= kRounds; ++round) {
    const bool woke = cache.lock().wait_until(Clock::now() + 20s, [&] {
      std::lock_guard lock(other);
      return published >= round;
    });
    ASSERT_TRUE(woke) << "round " << round << ": the notification was lost";
    {
      std::lock_guard lock(other);
      seen = round;
    }
    acknowledged.notify_all();
  }
}

// Reads that wait at a gate, then fail with EIO.
struct FailingGate {
  std::mutex mutex;
  std::condition_variable changed;
  int entered = 0;
  bool open = false;

  int hold() {
    std::unique_lock lock(mutex);
    ++entered;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
    return EIO;
  }
  bool wait_entered() {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 20s, [&] { return entered > 0; });
  }
  void open_now() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
};

// A streamer over a packed fixture, every read failing once the gate opens.
class StreamerWakesOnError : public ::testing::Test {
 protected:
  // Everything the worker touches: left to it if it does not finish.
  struct Setup {
    std::shared_ptr<FailingGate> gate = std::make_shared<FailingGate>();
    std::unique_ptr<Backend> backend;
    std::shared_ptr<const Model> model;
    std::unique_ptr<ExpertStreamer> streamer;
    ~Setup() {
      gate->open_now();  // the prefetcher drains its reads before it goes
      streamer.reset();
    }
  };

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    work_ = fs::temp_directory_path() /
            (std::string("chronos_shared_cache_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
    const fs::path model_dir = fs::path(CHRONOS_TEST_DATA_DIR) / "models" / "mixtral-f32";
    PackOptions options;
    options.method = ClusterMethod::kNone;
    write_pack(*Model::load(model_dir), model_dir, work_ / "pack", options, [](int64_t, int64_t) {});
  }
  void TearDown() override { fs::remove_all(work_); }

  std::shared_ptr<Setup> make_setup() {
    auto setup = std::make_shared<Setup>();
    const PackManifest manifest = PackManifest::load(work_ / "pack");
    int64_t slot = 0;
    for (const auto& [key, e] : manifest.experts) slot = std::max(slot, e.bytes);
    StreamerOptions options;
    options.budget_bytes = slot * std::ssize(manifest.experts);
    options.on_miss = OnMiss::kWait;
    options.prefetch.fault_injector = [gate = setup->gate](const ReadRequest&) { return gate->hold(); };
    setup->backend = make_cpu_backend();
    setup->model = Model::load(work_ / "pack");
    setup->streamer = std::make_unique<ExpertStreamer>(*setup->model, work_ / "pack", *setup->backend, options);
    first_ = manifest.experts.begin()->first;
    return setup;
  }

  // Runs `body` on a worker blocked at the gate, opens the gate, and expects the worker to wake and
  // throw the read error within the deadline. A worker that does not wake is left detached.
  void expect_wakes_and_rethrows(const std::shared_ptr<Setup>& setup, std::function<void(ExpertStreamer&)> body) {
    std::packaged_task<void()> task([setup, body] { body(*setup->streamer); });
    std::future<void> result = task.get_future();
    std::thread worker(std::move(task));
    const bool entered = setup->gate->wait_entered();
    EXPECT_TRUE(entered) << "the read never reached the disk";
    if (entered) {
      EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout) << "returned before its read";
    }
    setup->gate->open_now();
    if (result.wait_for(20s) != std::future_status::ready) {
      worker.detach();
      ADD_FAILURE() << "the waiter did not wake on the read error (a lost notification); the worker is left detached";
      return;
    }
    worker.join();
    try {
      result.get();
      ADD_FAILURE() << "expected the read error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
    }
  }

  fs::path work_;
  ExpertKey first_{};
};

TEST_F(StreamerWakesOnError, ADemandWaitWakesOnItsReadErrorAndRethrowsIt) {
  const auto setup = make_setup();
  const ExpertKey key = first_;
  expect_wakes_and_rethrows(setup, [key](ExpertStreamer& streamer) {
    streamer.begin_step();
    const FfnWeights* view = nullptr;
    streamer.experts().acquire(key.layer, {&key.expert, 1}, {&view, 1});
  });
}

TEST_F(StreamerWakesOnError, LoadAllWakesOnAReadErrorAndRethrowsIt) {
  expect_wakes_and_rethrows(make_setup(), [](ExpertStreamer& streamer) { streamer.load_all(); });
}

}  // namespace
}  // namespace chronos
