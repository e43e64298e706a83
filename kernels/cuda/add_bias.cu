// add_bias: x[r, :] += bias over rows of `dim`, one thread per element (grid-stride).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void add_bias_kernel(float* x, const float* bias, int64_t n, int64_t dim) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += bias[i % dim];
}

}  // namespace

void add_bias(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  const int64_t n = rows * dim;
  if (n <= 0) return;
  add_bias_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, bias, n, dim);
  CHRONOS_CUDA_CHECK_LAUNCH("add_bias");
}

}  // namespace chronos::cuda
