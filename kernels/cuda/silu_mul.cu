// silu_mul: out[i] = silu(gate[i]) * up[i] (the formula of device_math.h); out may alias gate.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void silu_mul_kernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = dm::silu_mul_value(gate[i], up[i]);
}

}  // namespace

void silu_mul(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  silu_mul_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, gate, up, n);
  CHRONOS_CUDA_CHECK_LAUNCH("silu_mul");
}

}  // namespace chronos::cuda
