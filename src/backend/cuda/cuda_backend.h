// The CUDA backend: Stream = cudaStream_t (non-blocking), Event = cudaEvent_t, device buffers from
// cudaMalloc, staging buffers page-locked (cudaHostAlloc), copies with cudaMemcpyAsync (DESIGN.md §3).
// Internal to the engine: the CUDA forward pass takes the raw stream handles from here.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "chronos/backend.h"
#include "kernels/cuda/cuda_check.h"

namespace chronos {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  size_t total_bytes = 0, free_bytes = 0;
};

class CudaBackend : public Backend {
 public:
  virtual int ordinal() const = 0;
  // Makes this backend's device current on the calling thread (every thread that issues CUDA calls).
  virtual void make_current() const = 0;
  virtual CudaDeviceInfo info() const = 0;  // free_bytes as of now
};

// The cudaStream_t / cudaEvent_t behind objects this backend created (CHRONOS_CHECKs the type).
cudaStream_t cuda_stream_of(Stream& stream);
cudaEvent_t cuda_event_of(const Event& event);

// The CUDA runner's own copies, untimed (Backend::copy_to_device times the expert copies): queued
// on `stream` (host memory page-locked for the copy to be asynchronous), or blocking at load time.
void cuda_copy_async(Stream& stream, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
void cuda_upload(void* device_dst, const void* host_src, size_t bytes);

// Throws Error when there is no usable device `ordinal` (no driver, no GPU, out of range).
std::unique_ptr<Backend> make_cuda_backend(int ordinal);

}  // namespace chronos
