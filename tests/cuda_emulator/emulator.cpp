// The CPU emulation of the CUDA runtime, device built-ins and cuBLAS declared in cuda_runtime.h and
// cublas_v2.h of this folder.
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "chronos/dtype.h"
#include "cublas_v2.h"
#include "cuda_runtime.h"

uint3 threadIdx;  // plain globals: every fiber runs on the one launching thread
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

// The threads of a block are fibers on the launching thread: each runs until it reaches a
// barrier (__syncthreads, or a warp shuffle's exchange) or returns; the scheduler releases a
// barrier once every thread of its block (or warp) that has not returned is waiting at it, as the
// GPU does for threads that have exited. A fiber starts on its own stack with makecontext and
// then switches with _setjmp/_longjmp, which, unlike swapcontext, make no system call: a switch
// costs tens of nanoseconds, where OS threads on a barrier cost microseconds each.
namespace emu {
namespace {

enum class State { kReady, kAtBlock, kAtWarp, kDone };

struct Fiber {
  ucontext_t context;    // to start it
  jmp_buf resume_point;  // where it yielded
  bool started = false;
  std::vector<char> stack;
  State state = State::kReady;
  void* fake_stack = nullptr;  // AddressSanitizer's fake stack of this fiber
};

constexpr size_t kStackBytes = size_t(256) << 10;

struct Scheduler {
  ucontext_t main_context;      // only written by the first switch into a fiber
  jmp_buf main_point;           // where the scheduler resumed the running fiber
  std::vector<Fiber> fibers;    // [threads of the block]
  std::vector<float> exchange;  // [threads] values offered to warp shuffles
  const std::function<void()>* body = nullptr;
  unsigned current = 0;
  uint3 block{};
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
};

Scheduler g_sched;
std::vector<unsigned char> g_shared;

#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#else
void __sanitizer_start_switch_fiber(void**, const void*, size_t) {}
void __sanitizer_finish_switch_fiber(void*, const void**, size_t*) {}
#endif

// From the running fiber back to the scheduler, in `state`; returns when released.
void yield(State state) {
  Fiber& f = g_sched.fibers[g_sched.current];
  f.state = state;
  if (_setjmp(f.resume_point) == 0) {
    __sanitizer_start_switch_fiber(&f.fake_stack, g_sched.main_stack_bottom, g_sched.main_stack_size);
    _longjmp(g_sched.main_point, 1);
  }
  __sanitizer_finish_switch_fiber(f.fake_stack, &g_sched.main_stack_bottom, &g_sched.main_stack_size);
}

[[noreturn]] void fiber_main() {
  __sanitizer_finish_switch_fiber(nullptr, &g_sched.main_stack_bottom, &g_sched.main_stack_size);
  (*g_sched.body)();
  g_sched.fibers[g_sched.current].state = State::kDone;
  // Leaving for good: no fake stack to keep.
  __sanitizer_start_switch_fiber(nullptr, g_sched.main_stack_bottom, g_sched.main_stack_size);
  _longjmp(g_sched.main_point, 1);
}

void resume(unsigned t) {
  Fiber& f = g_sched.fibers[t];
  g_sched.current = t;
  threadIdx = uint3{t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
  blockIdx = g_sched.block;
  void* main_fake = nullptr;
  if (_setjmp(g_sched.main_point) == 0) {
    __sanitizer_start_switch_fiber(&main_fake, f.stack.data(), f.stack.size());
    if (!f.started) {
      f.started = true;
      swapcontext(&g_sched.main_context, &f.context);  // never returns here: the fiber longjmps back
    } else {
      _longjmp(f.resume_point, 1);
    }
  }
  __sanitizer_finish_switch_fiber(main_fake, nullptr, nullptr);
}

// Releases every barrier whose live threads all wait at it; false when none could be.
bool release_barriers(unsigned threads) {
  bool released = false;
  for (unsigned w = 0; w * 32 < threads; ++w) {
    const unsigned end = std::min(threads, (w + 1) * 32);
    bool all = true, any = false;
    for (unsigned t = w * 32; t < end; ++t) {
      const State st = g_sched.fibers[t].state;
      if (st == State::kDone) continue;
      any = true;
      all &= st == State::kAtWarp;
    }
    if (any && all) {
      for (unsigned t = w * 32; t < end; ++t)
        if (g_sched.fibers[t].state == State::kAtWarp) g_sched.fibers[t].state = State::kReady;
      released = true;
    }
  }
  if (released) return true;
  bool all = true, any = false;
  for (unsigned t = 0; t < threads; ++t) {
    const State st = g_sched.fibers[t].state;
    if (st == State::kDone) continue;
    any = true;
    all &= st == State::kAtBlock;
  }
  if (any && all) {
    for (unsigned t = 0; t < threads; ++t)
      if (g_sched.fibers[t].state == State::kAtBlock) g_sched.fibers[t].state = State::kReady;
    return true;
  }
  return false;
}

}  // namespace

void* dynamic_shared() { return g_shared.data(); }

void run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    throw std::runtime_error("emulated launch: invalid configuration");
  gridDim = grid;
  blockDim = block;
  // Uninitialized shared memory reads as NaN, so a kernel that relies on it shows.
  g_shared.assign(shared_bytes + 16, 0xff);
  g_sched.body = &body;
  g_sched.exchange.assign(threads, 0.0f);
  if (g_sched.fibers.size() < threads) g_sched.fibers.resize(threads);
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        g_sched.block = uint3{bx, by, bz};
        for (unsigned t = 0; t < threads; ++t) {
          Fiber& f = g_sched.fibers[t];
          if (f.stack.empty()) f.stack.resize(kStackBytes);
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = f.stack.data();
          f.context.uc_stack.ss_size = f.stack.size();
          f.context.uc_link = nullptr;  // fiber_main never returns
          makecontext(&f.context, fiber_main, 0);
          f.started = false;
          f.state = State::kReady;
        }
        for (;;) {
          bool ran = false, live = false;
          for (unsigned t = 0; t < threads; ++t) {
            if (g_sched.fibers[t].state == State::kReady) {
              resume(t);
              ran = true;
            }
            live |= g_sched.fibers[t].state != State::kDone;
          }
          if (!live) break;
          if (!ran && !release_barriers(threads))
            throw std::runtime_error("emulated kernel deadlock: threads wait at different barriers");
        }
      }
    }
  }
  g_sched.body = nullptr;
}

}  // namespace emu

void __syncthreads() { emu::yield(emu::State::kAtBlock); }

float __shfl_xor_sync(unsigned, float value, int lane_mask) {
  auto& s = emu::g_sched;
  const unsigned me = s.current;
  s.exchange[me] = value;
  emu::yield(emu::State::kAtWarp);
  const unsigned partner = (me / 32) * 32 + ((me % 32) ^ unsigned(lane_mask));
  const float out = partner < s.exchange.size() ? s.exchange[partner] : value;
  emu::yield(emu::State::kAtWarp);  // nobody overwrites exchange before all have read
  return out;
}

int __shfl_xor_sync(unsigned mask, int value, int lane_mask) {
  float as_float;
  std::memcpy(&as_float, &value, sizeof value);
  const float out = __shfl_xor_sync(mask, as_float, lane_mask);
  int result;
  std::memcpy(&result, &out, sizeof out);
  return result;
}

namespace {
thread_local cudaError_t g_last_error = cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotReady: return "device not ready";
    default: return "emulated CUDA error";
  }
}
cudaError_t cudaGetLastError() { return std::exchange(g_last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return g_last_error; }
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
  std::memset(prop, 0, sizeof *prop);
  std::strcpy(prop->name, "CPU emulation");
  prop->major = 9;
  prop->totalGlobalMem = size_t(1) << 34;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t(1) << 34;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) {
  *ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* ptr) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) { return cudaMemset(dst, value, bytes); }

struct CUstream_st {};
struct CUevent_st {};
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) { return cudaStreamCreate(stream); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  fn(data);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.0f;
  return cudaSuccess;
}

// ---- cuBLAS ----------------------------------------------------------------------------------------

struct cublasContext {};
cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}

namespace {
float element(const void* data, cudaDataType_t type, int64_t i) {
  switch (type) {
    case CUDA_R_32F: return static_cast<const float*>(data)[i];
    case CUDA_R_16F: return chronos::f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case CUDA_R_16BF: return chronos::bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
  }
  return NAN;
}
}  // namespace

// Column-major: C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C; op(X)[r, c] = X[r + c * ld]
// (N) or X[c + r * ld] (T).
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t, cublasGemmAlgo_t) {
  if (Ctype != CUDA_R_32F || Atype != Btype) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m < 0 || n < 0 || k < 0 || lda < (transa == CUBLAS_OP_N ? m : k) || ldb < (transb == CUBLAS_OP_N ? k : n) ||
      ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  const float a_scale = *static_cast<const float*>(alpha), c_scale = *static_cast<const float*>(beta);
  auto* c = static_cast<float*>(C);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float sum = 0.0f;
      for (int p = 0; p < k; ++p) {
        const int64_t ai = transa == CUBLAS_OP_N ? i + int64_t(p) * lda : p + int64_t(i) * lda;
        const int64_t bi = transb == CUBLAS_OP_N ? p + int64_t(j) * ldb : j + int64_t(p) * ldb;
        sum += element(A, Atype, ai) * element(B, Btype, bi);
      }
      float& out = c[i + int64_t(j) * ldc];
      out = a_scale * sum + (c_scale != 0.0f ? c_scale * out : 0.0f);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
