// The one CUDA status check of the project, for the kernels' launchers, the CUDA backend and the
// runner: a failed call throws Error naming the call, the file and the line, and CUDA's reason.
// A plain C++ header (nvcc's host pass and g++ both compile it); no synchronization is implied.
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "chronos/error.h"

namespace chronos::cuda {

// fmt's compile-time format check does not compile under nvcc: the format is checked at run time.
[[noreturn]] inline void cuda_failed(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format(fmt::runtime("CUDA: {} failed ({}:{}): {}"), call, file, line, cudaGetErrorString(status)));
}

}  // namespace chronos::cuda

// CHRONOS_CUDA_CHECK(cudaMemcpyAsync(...)): throws unless the call returned cudaSuccess.
#define CHRONOS_CUDA_CHECK(call)                                                     \
  do {                                                                               \
    const cudaError_t chronos_cuda_status_ = (call);                                 \
    if (chronos_cuda_status_ != cudaSuccess)                                         \
      ::chronos::cuda::cuda_failed(chronos_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: throws when the launch just queued failed (bad configuration, no device).
// Completion is not checked: that would need a synchronize, which the engine never does here.
#define CHRONOS_CUDA_CHECK_LAUNCH(op)                                             \
  do {                                                                            \
    const cudaError_t chronos_cuda_status_ = cudaGetLastError();                  \
    if (chronos_cuda_status_ != cudaSuccess)                                      \
      ::chronos::cuda::cuda_failed(chronos_cuda_status_, op, __FILE__, __LINE__); \
  } while (0)
