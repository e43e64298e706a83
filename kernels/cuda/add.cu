// add: the residual update x[i] += y[i].
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

}  // namespace

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, y, n);
  CHRONOS_CUDA_CHECK_LAUNCH("add");
}

}  // namespace chronos::cuda
