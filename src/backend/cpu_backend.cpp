// The CPU backend: page-aligned buffers, one worker thread per stream, condition-variable events.
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "chronos/backend.h"
#include "chronos/error.h"

namespace chronos {
namespace {

class CpuEvent final : public Event {
 public:
  bool query() const override {
    std::lock_guard lock(mutex_);
    return signalled_;
  }
  void wait() const override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return signalled_; });
  }
  void reset() {
    std::lock_guard lock(mutex_);
    signalled_ = false;
  }
  void signal() {
    {
      std::lock_guard lock(mutex_);
      signalled_ = true;
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool signalled_ = true;
};

class CpuStream final : public Stream {
 public:
  CpuStream() : worker_([this] { loop(); }) {}
  ~CpuStream() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void enqueue(std::function<void()> task) override {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  void record(Event& event) override {
    auto& cpu_event = dynamic_cast<CpuEvent&>(event);
    cpu_event.reset();
    enqueue([&cpu_event] { cpu_event.signal(); });
  }
  void wait_event(const Event& event) override {
    enqueue([&event] { event.wait(); });
  }
  void synchronize() override {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left to run
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after the members it uses
};

// Buffers of a huge page or more start on a huge-page boundary and are advised for transparent
// huge pages (where the kernel has them on madvise only, the common default): an expert's
// weights are streamed once per use, and with 4 KiB pages every 4 KiB of them is a TLB miss.
constexpr size_t kHugePage = size_t(2) << 20;

Buffer alloc_aligned(size_t bytes) {
  if (bytes == 0) return {};
  const auto fail = [&] { throw_system_error(fmt::format("allocating {} bytes", bytes)); };
  if (bytes < kHugePage) {
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) fail();
    return Buffer{data, bytes};
  }
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t length = (bytes + page - 1) / page * page, span = length + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) fail();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t begin = (start + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  if (begin > start) munmap(raw, begin - start);  // the slack before and after the aligned range
  if (const size_t tail = span - (begin - start) - length; tail > 0)
    munmap(reinterpret_cast<void*>(begin + length), tail);
  void* data = reinterpret_cast<void*>(begin);
  madvise(data, length, MADV_HUGEPAGE);  // advice: without transparent huge pages it is ignored
  return Buffer{data, bytes};
}

void free_aligned(Buffer& buffer) {
  if (buffer.data != nullptr) munmap(buffer.data, buffer.bytes);
  buffer = {};
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool staging_is_device() const override { return true; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  Buffer alloc_device(size_t bytes) override { return alloc_aligned(bytes); }
  void free_device(Buffer& buffer) override { free_aligned(buffer); }
  Buffer alloc_staging(size_t bytes) override { return alloc_aligned(bytes); }
  void free_staging(Buffer& buffer) override { free_aligned(buffer); }
  void copy_to_device(Stream& stream, void* dst, const void* src, size_t bytes) override {
    if (dst == src) return;
    stream.enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace chronos
