// A CPU emulation of the part of the CUDA runtime and device language that Chronos uses, so that
// the CUDA kernels, the CUDA backend and the CUDA runner run (slowly) on machines without a GPU:
// the GPU tests of tests/cuda are built a second time against this header, as
// chronos_test_cuda_emulated, in builds without nvcc (the ASan build among them, which then also
// checks every kernel's memory accesses).
//
// Semantics: a kernel launch runs at once, to completion, before the launch returns; its blocks
// run one after another, and the threads of a block run as real threads, so __syncthreads and
// warp shuffles are real barriers (a thread that returns leaves them, as on the GPU). Streams are
// therefore always idle and events always complete: races between streams are not emulated (the
// fake-device tests in tests/engine cover the event discipline). Device and page-locked memory
// are host allocations; cudaMemcpy* are memcpy.
//
// Kernel launches `k<<<grid, block, shared, stream>>>(args)` are rewritten at configure time to
// `k % ::emu::Cfg{grid, block, shared, stream}(args)` (tests/cuda_emulator/CMakeLists.txt).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct float4 {
  float x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};

extern uint3 threadIdx;  // set by the scheduler before it resumes each emulated thread
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

void __syncthreads();
float __shfl_xor_sync(unsigned mask, float value, int lane_mask);
int __shfl_xor_sync(unsigned mask, int value, int lane_mask);
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

// ---- runtime ---------------------------------------------------------------------------------------

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaHostFn_t = void (*)(void*);
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0;

struct cudaDeviceProp {
  char name[256];
  int major, minor;
  size_t totalGlobalMem;
  int multiProcessorCount;
};

const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- kernel launches -------------------------------------------------------------------------------

namespace emu {

// Runs `body` for every thread of every block of the grid (blocks in order, a block's threads
// concurrently), with `shared_bytes` of dynamic shared memory.
void run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body);
// The launch's dynamic shared memory (`extern __shared__ T name[]` is rewritten to use it).
void* dynamic_shared();

template <typename... Args>
struct Bound {
  dim3 grid, block;
  size_t shared;
  std::tuple<std::decay_t<Args>...> args;
};

struct Cfg {
  dim3 grid;
  dim3 block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
  template <typename... Args>
  Bound<Args...> operator()(Args&&... args) const {
    return Bound<Args...>{grid, block, shared, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)};
  }
};

template <typename... Params, typename... Args>
void operator%(void (*kernel)(Params...), Bound<Args...>&& bound) {
  const auto args = std::move(bound.args);
  run_grid(bound.grid, bound.block, bound.shared,
           [&] { std::apply([&](const auto&... a) { kernel(Params(a)...); }, args); });
}

}  // namespace emu

using emu::operator%;
