// Backend, Stream, Event: the device abstraction the engine is written against (DESIGN.md §4).
// The CPU backend implements them with host memory, a worker thread per stream and
// condition-variable events; the CUDA backend maps them to cudaStream_t / cudaEvent_t.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace chronos {

// Signalled once the work recorded before it has finished (CPU: a read completed or a task
// ran; CUDA: cudaEventRecord on a stream). Reusable: record() re-arms it.
class Event {
 public:
  virtual ~Event() = default;
  virtual bool query() const = 0;  // true when signalled; never blocks
  virtual void wait() const = 0;   // blocks until signalled
};

// An in-order queue of work. The decode loop never synchronizes a whole stream; it waits on
// the events of the buffers it needs.
class Stream {
 public:
  virtual ~Stream() = default;
  // Queues a host task (CPU) or a host callback (CUDA) after everything already queued.
  virtual void enqueue(std::function<void()> task) = 0;
  // Re-arms `event` and signals it when everything queued so far has finished.
  virtual void record(Event& event) = 0;
  // Work queued after this call starts only once `event` is signalled.
  virtual void wait_event(const Event& event) = 0;
  // Blocks until the queue is empty (tests and shutdown only).
  virtual void synchronize() = 0;
};

// Memory in one tier: device memory on CUDA, page-aligned host memory on CPU.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // True when host staging memory is itself computable (CPU: the tiers merge and reads land in
  // the cache slots); false when a read lands in a staging buffer and is copied to the device
  // (CUDA, and the fake device of the tests).
  virtual bool staging_is_device() const = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;  // created signalled
  // Device-tier memory (VRAM on CUDA; on CPU the same as host staging). Throws Error on failure.
  virtual Buffer alloc_device(size_t bytes) = 0;
  virtual void free_device(Buffer& buffer) = 0;
  // Host staging memory for O_DIRECT reads: page-aligned (CPU) or page-locked (CUDA).
  virtual Buffer alloc_staging(size_t bytes) = 0;
  virtual void free_staging(Buffer& buffer) = 0;
  // Queues a copy from staging to device memory on `stream` (CPU: a memcpy task, or nothing
  // when both point to the same bytes, the tiers having merged).
  virtual void copy_to_device(Stream& stream, void* device_dst, const void* staging_src, size_t bytes) = 0;
  // Seconds spent in staging-to-device copies that have completed so far, timed on the device
  // (CUDA: an event pair around each copy on its stream); 0 where the tiers merge.
  virtual double copy_seconds() { return 0.0; }
};

std::unique_ptr<Backend> make_cpu_backend();

// `--device`: "cpu", or "cuda" / "cuda:N" (device N, default 0). Throws UsageError for another
// name, and Error naming the cause when CUDA is asked for and this build has no CUDA backend or
// the machine has no usable CUDA device.
std::unique_ptr<Backend> make_backend(const std::string& device);
// Whether this build includes the CUDA backend (nvcc was found at configure time).
bool cuda_built();
// The CUDA backend on device `ordinal`. Throws Error naming the cause when the build has no CUDA
// backend or the machine no usable device. make_backend, cuda_built, this and make_cuda_runner come
// from the device library an executable links (src/CMakeLists.txt: chronos_device).
std::unique_ptr<Backend> make_cuda_backend(int ordinal);

}  // namespace chronos
