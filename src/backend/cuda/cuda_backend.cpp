// The CUDA backend (see cuda_backend.h). Every CUDA result is checked; nothing here synchronizes a
// device or a stream except Stream::synchronize (tests and shutdown) and Event::wait.
#include "backend/cuda/cuda_backend.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "chronos/error.h"

namespace chronos {

void cuda_copy_async(Stream& stream, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  CHRONOS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cuda_stream_of(stream)));
}

void cuda_upload(void* device_dst, const void* host_src, size_t bytes) {
  CHRONOS_CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

namespace {

class CudaEvent final : public Event {
 public:
  CudaEvent() { CHRONOS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  bool query() const override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    CHRONOS_CUDA_CHECK(status);
    return true;  // never recorded, or everything recorded before it has run
  }
  void wait() const override { CHRONOS_CUDA_CHECK(cudaEventSynchronize(event_)); }
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Host tasks run from the CUDA driver's callback thread once the stream reaches them; they must not
// call CUDA themselves (cudaLaunchHostFunc's rule).
void run_host_task(void* data) {
  std::unique_ptr<std::function<void()>> task(static_cast<std::function<void()>*>(data));
  (*task)();
}

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int ordinal) : ordinal_(ordinal) {
    CHRONOS_CUDA_CHECK(cudaSetDevice(ordinal_));
    CHRONOS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  void enqueue(std::function<void()> task) override {
    auto* heap = new std::function<void()>(std::move(task));
    const cudaError_t status = cudaLaunchHostFunc(stream_, run_host_task, heap);
    if (status != cudaSuccess) delete heap;
    CHRONOS_CUDA_CHECK(status);
  }
  void record(Event& event) override { CHRONOS_CUDA_CHECK(cudaEventRecord(cuda_event_of(event), stream_)); }
  void wait_event(const Event& event) override {
    CHRONOS_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda_event_of(event), 0));
  }
  void synchronize() override { CHRONOS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t handle() const { return stream_; }

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
};

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(int ordinal) : ordinal_(ordinal) {}
  std::string name() const override { return fmt::format("cuda:{}", ordinal_); }
  bool staging_is_device() const override { return false; }
  int ordinal() const override { return ordinal_; }
  void make_current() const override { CHRONOS_CUDA_CHECK(cudaSetDevice(ordinal_)); }
  CudaDeviceInfo info() const override {
    make_current();
    cudaDeviceProp prop{};
    CHRONOS_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    CudaDeviceInfo out;
    out.ordinal = ordinal_;
    out.name = prop.name;
    out.sm_major = prop.major;
    out.sm_minor = prop.minor;
    CHRONOS_CUDA_CHECK(cudaMemGetInfo(&out.free_bytes, &out.total_bytes));
    return out;
  }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(ordinal_); }
  std::unique_ptr<Event> create_event() override {
    make_current();
    return std::make_unique<CudaEvent>();
  }
  Buffer alloc_device(size_t bytes) override {
    if (bytes == 0) return {};
    make_current();
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw_error(
          "CUDA: out of device memory allocating {:.1f} MiB ({:.1f} of {:.1f} MiB free): lower --expert-cache "
          "or --ctx-size, or stream the experts from a pack folder (chronos pack)",
          double(bytes) / (1 << 20), double(free_bytes) / (1 << 20), double(total_bytes) / (1 << 20));
    }
    CHRONOS_CUDA_CHECK(status);
    return Buffer{data, bytes};
  }
  void free_device(Buffer& buffer) override {
    if (buffer.data != nullptr) cudaFree(buffer.data);
    buffer = {};
  }
  Buffer alloc_staging(size_t bytes) override {
    if (bytes == 0) return {};
    make_current();
    void* data = nullptr;
    const cudaError_t status = cudaHostAlloc(&data, bytes, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw_error("CUDA: cannot page-lock {:.1f} MiB of host memory for staging: lower --pinned-budget",
                  double(bytes) / (1 << 20));
    }
    CHRONOS_CUDA_CHECK(status);
    // O_DIRECT reads land here: page-locked allocations are page-aligned.
    CHRONOS_CHECK_MSG(reinterpret_cast<uintptr_t>(data) % 4096 == 0, "cudaHostAlloc returned unaligned memory");
    return Buffer{data, bytes};
  }
  void free_staging(Buffer& buffer) override {
    if (buffer.data != nullptr) cudaFreeHost(buffer.data);
    buffer = {};
  }
  ~CudaBackendImpl() override {
    for (const TimedCopy& c : free_) destroy(c);
    for (const TimedCopy& c : pending_) destroy(c);
  }
  void copy_to_device(Stream& stream, void* dst, const void* src, size_t bytes) override {
    make_current();  // the prefetcher's I/O thread calls this
    const cudaStream_t s = cuda_stream_of(stream);
    std::lock_guard lock(timing_mutex_);
    harvest();
    TimedCopy timed{};
    if (!free_.empty()) {
      timed = free_.back();
      free_.pop_back();
    } else {
      CHRONOS_CUDA_CHECK(cudaEventCreate(&timed.start));
      CHRONOS_CUDA_CHECK(cudaEventCreate(&timed.end));
    }
    CHRONOS_CUDA_CHECK(cudaEventRecord(timed.start, s));
    CHRONOS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    CHRONOS_CUDA_CHECK(cudaEventRecord(timed.end, s));
    pending_.push_back(timed);
  }
  double copy_seconds() override {
    std::lock_guard lock(timing_mutex_);
    harvest();
    return copy_seconds_;
  }

 private:
  struct TimedCopy {
    cudaEvent_t start, end;
  };
  static void destroy(const TimedCopy& c) {
    cudaEventDestroy(c.start);
    cudaEventDestroy(c.end);
  }
  // Adds the durations of completed copies (in order: one copy stream) and recycles their events.
  void harvest() {
    while (!pending_.empty()) {
      const TimedCopy& c = pending_.front();
      const cudaError_t status = cudaEventQuery(c.end);
      if (status == cudaErrorNotReady) break;
      CHRONOS_CUDA_CHECK(status);
      float ms = 0.0f;
      CHRONOS_CUDA_CHECK(cudaEventElapsedTime(&ms, c.start, c.end));
      copy_seconds_ += double(ms) / 1e3;
      free_.push_back(c);
      pending_.pop_front();
    }
  }

  int ordinal_;
  std::mutex timing_mutex_;
  std::deque<TimedCopy> pending_;
  std::vector<TimedCopy> free_;
  double copy_seconds_ = 0.0;
};

}  // namespace

cudaStream_t cuda_stream_of(Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  CHRONOS_CHECK_MSG(cuda != nullptr, "a stream of another backend was given to the CUDA backend");
  return cuda->handle();
}

cudaEvent_t cuda_event_of(const Event& event) {
  const auto* cuda = dynamic_cast<const CudaEvent*>(&event);
  CHRONOS_CHECK_MSG(cuda != nullptr, "an event of another backend was given to the CUDA backend");
  return cuda->handle();
}

std::unique_ptr<Backend> make_cuda_backend(int ordinal) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw_error("--device cuda: no usable CUDA device ({})",
                status != cudaSuccess ? cudaGetErrorString(status) : "no GPU found");
  }
  if (ordinal >= count) throw_error("--device cuda:{}: this machine has {} CUDA device(s)", ordinal, count);
  auto backend = std::make_unique<CudaBackendImpl>(ordinal);
  const CudaDeviceInfo info = backend->info();
  spdlog::info("CUDA device {}: {} (sm_{}{}), {:.1f} of {:.1f} GiB free", ordinal, info.name, info.sm_major,
               info.sm_minor, double(info.free_bytes) / (1 << 30), double(info.total_bytes) / (1 << 30));
  return backend;
}

}  // namespace chronos
