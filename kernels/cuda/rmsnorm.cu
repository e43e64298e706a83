// rmsnorm: one block per row; the sum of squares is a block reduction in f32, then each element is
// x * scale * weight in the CPU op's order (kernels/cpu/vector_ops.cpp).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

// out and in may alias: every thread reads its elements before the reduction's barriers and writes
// only those same elements after them.
__global__ void rmsnorm_kernel(float* out, const float* in, const float* weight, int64_t dim, int64_t stride,
                               float eps) {
  __shared__ float scratch[kWarpSize];
  const float* x = in + int64_t(blockIdx.x) * stride;
  float* y = out + int64_t(blockIdx.x) * stride;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum_sq += x[i] * x[i];
  sum_sq = block_sum(sum_sq, scratch);
  const float scale = dm::rms_scale(sum_sq, dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[i] = dm::rmsnorm_value(x[i], scale, weight[i]);
}

}  // namespace

void rmsnorm(float* out, const float* in, const float* weight, int64_t rows, int64_t dim, int64_t stride, float eps,
             cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  // Per-head norms have dim = head_dim (64-256): a block no wider than the row, in whole warps.
  const int threads = dim >= 256 ? 256 : int((dim + kWarpSize - 1) / kWarpSize * kWarpSize);
  rmsnorm_kernel<<<unsigned(rows), threads, 0, stream>>>(out, in, weight, dim, stride, eps);
  CHRONOS_CUDA_CHECK_LAUNCH("rmsnorm");
}

}  // namespace chronos::cuda
