// The CPU backend: page-aligned buffers, one worker thread per stream, condition-variable events.
#include <sys/mman.h>

#include <condition_variable>
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

Buffer alloc_aligned(size_t bytes) {
  if (bytes == 0) return {};
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw_system_error(fmt::format("allocating {} bytes", bytes));
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
