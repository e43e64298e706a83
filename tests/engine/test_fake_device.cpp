// The CUDA path's host-side logic on a fake device, so that it is tested on every machine: device
// memory apart from the page-locked staging tier, reached only through copies queued on a stream
// that take time, and events with CUDA's semantics (a stream wait covers the records made before
// it, not later ones). On it: reads land in staging buffers within --pinned-budget, every expert is
// copied into its slot, the compute stream (not the host) waits for the copies, a slot is never
// overwritten while queued compute still reads it, and fallback mode polls events without blocking.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

thread_local bool t_stream_worker = false;  // set on the fake streams' worker threads

// Recorded `recorded` times, completed through `completed`: signalled when they are equal.
class FakeEvent final : public Event {
 public:
  explicit FakeEvent(std::atomic<int64_t>& host_waits) : host_waits_(host_waits) {}
  bool query() const override {
    std::lock_guard lock(mutex_);
    return completed_ >= recorded_;
  }
  void wait() const override {
    if (!t_stream_worker) ++host_waits_;
    std::unique_lock lock(mutex_);
    const uint64_t target = recorded_;
    cv_.wait(lock, [&] { return completed_ >= target; });
  }
  uint64_t arm() {  // a new record: returns its number
    std::lock_guard lock(mutex_);
    return ++recorded_;
  }
  uint64_t last_recorded() const {
    std::lock_guard lock(mutex_);
    return recorded_;
  }
  void complete(uint64_t number) {
    {
      std::lock_guard lock(mutex_);
      completed_ = std::max(completed_, number);
    }
    cv_.notify_all();
  }
  void wait_for(uint64_t number) const {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return completed_ >= number; });
  }

 private:
  std::atomic<int64_t>& host_waits_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
};

// The CPU backend's in-order worker stream, with CUDA's event rules on top: a record completes the
// event's newest record number, and a wait covers only the records made before it.
class FakeStream final : public Stream {
 public:
  FakeStream() : inner_(cpu_backend().create_stream()) {
    inner_->enqueue([] { t_stream_worker = true; });
  }
  void enqueue(std::function<void()> task) override { inner_->enqueue(std::move(task)); }
  void record(Event& event) override {
    auto& fake = dynamic_cast<FakeEvent&>(event);
    const uint64_t number = fake.arm();
    enqueue([&fake, number] { fake.complete(number); });
  }
  void wait_event(const Event& event) override {
    const auto& fake = dynamic_cast<const FakeEvent&>(event);
    const uint64_t number = fake.last_recorded();  // later records do not extend this wait
    enqueue([&fake, number] { fake.wait_for(number); });
  }
  void synchronize() override { inner_->synchronize(); }

 private:
  static Backend& cpu_backend() {
    static const std::unique_ptr<Backend> backend = make_cpu_backend();
    return *backend;
  }
  std::unique_ptr<Stream> inner_;
};

class FakeDevice final : public Backend {
 public:
  explicit FakeDevice(std::chrono::microseconds copy_time) : copy_time_(copy_time) {}
  std::string name() const override { return "fake-device"; }
  bool staging_is_device() const override { return false; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<FakeStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<FakeEvent>(host_waits); }
  Buffer alloc_device(size_t bytes) override {
    Buffer b = alloc(bytes);
    std::memset(b.data, 0xCD, bytes);  // garbage until a copy lands
    std::lock_guard lock(mutex_);
    device_.insert(b.data);
    return b;
  }
  void free_device(Buffer& buffer) override { release(buffer); }
  Buffer alloc_staging(size_t bytes) override {
    Buffer b = alloc(bytes);
    std::lock_guard lock(mutex_);
    staging_.insert(b.data);
    staging_bytes += int64_t(bytes);
    return b;
  }
  void free_staging(Buffer& buffer) override { release(buffer); }
  void copy_to_device(Stream& stream, void* dst, const void* src, size_t bytes) override {
    {
      std::lock_guard lock(mutex_);
      // Only whole staging buffers go to the start of device buffers.
      if (!device_.contains(dst) || !staging_.contains(const_cast<void*>(src))) ++bad_copies;
    }
    ++copies;
    stream.enqueue([this, dst, src, bytes] {
      std::this_thread::sleep_for(copy_time_);
      std::memcpy(dst, src, bytes);
    });
  }

  std::atomic<int64_t> host_waits{0};  // Event::wait calls from threads other than stream workers
  std::atomic<int64_t> copies{0}, bad_copies{0};
  int64_t staging_bytes = 0;  // page-locked bytes ever allocated

 private:
  static Buffer alloc(size_t bytes) {
    void* data = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    CHRONOS_CHECK(data != nullptr);
    return Buffer{data, bytes};
  }
  void release(Buffer& buffer) {
    std::free(buffer.data);
    buffer = {};
  }
  std::chrono::microseconds copy_time_;
  std::mutex mutex_;
  std::set<void*> device_, staging_;
};

fs::path fixture(const char* name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }

class FakeDeviceStreaming : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / ("chronos_fake_device_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  fs::path pack(const char* name) {
    const fs::path out = work_ / name;
    if (!fs::exists(out)) {
      PackOptions options;
      options.method = ClusterMethod::kNone;
      write_pack(*Model::load(fixture(name)), fixture(name), out, options, [](int64_t, int64_t) {});
    }
    return out;
  }
  static int64_t slot_bytes(const PackManifest& m) {
    int64_t bytes = 0;
    for (const auto& [key, e] : m.experts) bytes = std::max(bytes, e.bytes);
    return bytes;
  }

  // Greedy tokens of a fixed prompt; through a streamer on `backend` when given.
  std::vector<int32_t> generate(const fs::path& dir, Backend* backend, const StreamerOptions& so,
                                StreamerStats* stats = nullptr) {
    auto model = Model::load(dir);
    const Tokenizer tokenizer = Tokenizer::load(dir);
    ThreadPool pool(2);
    std::unique_ptr<ExpertStreamer> streamer;
    GenerateOptions options;
    options.max_new_tokens = 16;
    options.ignore_eos = true;
    if (backend != nullptr) {
      streamer = std::make_unique<ExpertStreamer>(*model, dir, *backend, so);
    }
    Generator generator(*model, tokenizer, pool, 96, 8, streamer ? streamer->hooks() : ForwardHooks{});
    generator.stream_experts_with(streamer.get());
    const auto prompt = tokenizer.encode("The river keeps its own time, and the mill", true);
    const auto result = generator.generate(prompt, options, [](std::string_view) { return true; });
    if (stats != nullptr && streamer) *stats = streamer->stats();
    return result.tokens;
  }

  fs::path work_;
};

TEST_F(FakeDeviceStreaming, WaitModeThroughStagingAndCopiesIsTokenIdentical) {
  for (const char* name : {"qwen2_moe-f32", "mixtral-bf16"}) {
    const fs::path packed = pack(name);
    const auto resident = generate(fixture(name), nullptr, {});
    const PackManifest manifest = PackManifest::load(packed);
    const int64_t slot = slot_bytes(manifest), all = slot * std::ssize(manifest.experts);
    for (const int64_t budget : {all, all / 4, slot * 3}) {
      for (const int64_t pinned : {int64_t(0), slot, slot * 3 + slot / 2}) {
        FakeDevice device(std::chrono::microseconds(200));
        StreamerOptions so;
        so.budget_bytes = budget;
        so.prefetch.staging_bytes = pinned;
        StreamerStats stats;
        EXPECT_EQ(generate(packed, &device, so, &stats), resident)
            << name << " budget " << budget << " pinned " << pinned;
        EXPECT_EQ(stats.prefetch.copies, stats.prefetch.reads) << "every read reaches its slot by a copy";
        EXPECT_EQ(device.copies.load(), stats.prefetch.reads);
        EXPECT_EQ(device.bad_copies.load(), 0);
        const int64_t expected_buffers = pinned == 0 ? int64_t(so.prefetch.queue_depth) : pinned / slot;
        EXPECT_EQ(stats.prefetch.staging_buffers, expected_buffers);
        EXPECT_EQ(device.staging_bytes, expected_buffers * slot) << "the pinned budget holds";
        EXPECT_LE(stats.cache.peak_bytes, budget);
        EXPECT_EQ(stats.fallbacks, 0);
      }
    }
  }
}

// The compute side as the CUDA forward drives it: acquire, queue kernels on the compute stream,
// release, and go on without waiting. Each queued "kernel" checks the xxh64 of the expert it was
// given when it finally runs; a three-slot cache makes every slot change hands constantly, so an
// H2D copy that did not wait for the slot's `consumed` event would overwrite bytes under it.
TEST_F(FakeDeviceStreaming, ComputeStreamWaitsForCopiesAndSlotsAreNotOverwrittenUnderQueuedWork) {
  const fs::path packed = pack("qwen2_moe-f32");
  auto model = Model::load(packed);
  const ModelConfig& c = model->config();
  FakeDevice device(std::chrono::microseconds(100));
  StreamerOptions so;
  so.budget_bytes = 3 * slot_bytes(PackManifest::load(packed));
  so.prefetch.staging_bytes = so.budget_bytes;
  ExpertStreamer streamer(*model, packed, device, so);
  auto compute = device.create_stream();
  streamer.experts().set_compute_stream(compute.get());
  const PackManifest& manifest = streamer.manifest();

  std::atomic<int64_t> checked{0}, corrupt{0};
  std::mt19937 rng(7);
  std::vector<int32_t> all(size_t(c.n_expert));
  std::iota(all.begin(), all.end(), 0);
  for (int step = 0; step < 40; ++step) {
    streamer.begin_step();
    for (int64_t il = 0; il < c.n_layer; ++il) {
      if (!c.is_moe_layer(il)) continue;
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int32_t> ids(all.begin(), all.begin() + 2);
      std::sort(ids.begin(), ids.end());
      std::vector<const FfnWeights*> views(ids.size());
      streamer.experts().acquire(il, ids, views);
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_NE(views[i], nullptr);
        const PackedExpert& expert = manifest.experts.at(ExpertKey{int32_t(il), ids[i]});
        const auto* start = static_cast<const std::byte*>(views[i]->gate.data) - (expert.gate.offset - expert.offset);
        compute->enqueue([&, start, expert_ptr = &expert] {
          std::this_thread::sleep_for(std::chrono::microseconds(1000));  // a slow kernel
          try {
            verify_expert_bytes(*expert_ptr, "slot", {start, size_t(expert_ptr->bytes)});
          } catch (const Error&) {
            ++corrupt;
          }
          ++checked;
        });
      }
      streamer.experts().release(il, ids);
    }
  }
  compute->synchronize();
  const StreamerStats stats = streamer.stats();
  EXPECT_EQ(corrupt.load(), 0) << "a queued kernel saw bytes that were not its expert's";
  EXPECT_EQ(checked.load(), stats.lookups);
  EXPECT_EQ(device.host_waits.load(), 0) << "the host never blocks on a copy event";
  EXPECT_GT(stats.device_waits, 0) << "some copies were still running when their expert was used";
  EXPECT_GT(stats.prefetch.copies, 3) << "slots were reused";
}

TEST_F(FakeDeviceStreaming, FallbackPollsCopyEventsAndNeverBlocks) {
  const fs::path packed = pack("mixtral-bf16");
  auto model = Model::load(packed);
  FakeDevice device(std::chrono::milliseconds(20));  // copies far slower than compute
  StreamerOptions so;
  so.budget_bytes = int64_t(model->sizes().expert_bytes) * 2;
  so.on_miss = OnMiss::kFallback;
  ExpertStreamer streamer(*model, packed, device, so);
  auto compute = device.create_stream();
  streamer.experts().set_compute_stream(compute.get());
  const int64_t layer = 0;
  const std::vector<int32_t> ids = {0, 1, 2};
  std::vector<const FfnWeights*> views(ids.size());
  streamer.begin_step();
  streamer.experts().acquire(layer, ids, views);
  for (const auto* v : views) EXPECT_EQ(v, nullptr) << "nothing was resident: every expert falls back";
  streamer.experts().release(layer, ids);
  // The demand reads queued by those misses land and their copies complete; until then the
  // experts keep falling back, and acquire never waits.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int rounds = 0;
  for (;; ++rounds) {
    streamer.experts().acquire(layer, ids, views);
    const bool all_ready = std::all_of(views.begin(), views.end(), [](const FfnWeights* v) { return v != nullptr; });
    streamer.experts().release(layer, ids);
    if (all_ready || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(std::all_of(views.begin(), views.end(), [](const FfnWeights* v) { return v != nullptr; }));
  EXPECT_GT(rounds, 0) << "a 20 ms copy cannot have completed at once";
  const StreamerStats stats = streamer.stats();
  EXPECT_EQ(device.host_waits.load(), 0);
  EXPECT_EQ(stats.waits, 0);
  EXPECT_GE(stats.fallbacks, int64_t(ids.size()) * (rounds > 0 ? 2 : 1));
  compute->synchronize();
}

TEST_F(FakeDeviceStreaming, PinnedBudgetSmallerThanOneExpertIsRefused) {
  const fs::path packed = pack("qwen2_moe-f32");
  auto model = Model::load(packed);
  FakeDevice device(std::chrono::microseconds(0));
  StreamerOptions so;
  so.budget_bytes = model->sizes().expert_bytes;
  so.prefetch.staging_bytes = 1000;
  try {
    ExpertStreamer streamer(*model, packed, device, so);
    FAIL() << "a 1000-byte staging budget was accepted";
  } catch (const BudgetTooSmall& e) {  // the CLI adds the flag's name (--pinned-budget)
    EXPECT_EQ(e.budget(), BudgetTooSmall::Budget::kStaging);
    EXPECT_NE(std::string(e.what()).find("staging budget 1000 bytes is smaller than one expert slot"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace chronos
