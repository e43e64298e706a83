// clamp: x[i] = clamp(x[i], -limit, limit) with std::clamp's NaN behaviour (device_math.h).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void clamp_kernel(float* x, int64_t n, float limit) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = dm::clamp_value(x[i], limit);
}

}  // namespace

void clamp(float* x, int64_t n, float limit, cudaStream_t stream) {
  if (n <= 0) return;
  clamp_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, limit);
  CHRONOS_CUDA_CHECK_LAUNCH("clamp");
}

}  // namespace chronos::cuda
