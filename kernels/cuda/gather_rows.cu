// gather_rows: dst[r, :] = src[rows[r], :], one block per destination row.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void gather_rows_kernel(float* dst, const float* src, const int32_t* rows, int64_t dim) {
  const int64_t r = blockIdx.x;
  const float* from = src + int64_t(rows[r]) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[r * dim + i] = from[i];
}

}  // namespace

void gather_rows(float* dst, const float* src, const int32_t* rows, int64_t n_rows, int64_t dim, cudaStream_t stream) {
  if (n_rows <= 0 || dim <= 0) return;
  gather_rows_kernel<<<unsigned(n_rows), 256, 0, stream>>>(dst, src, rows, dim);
  CHRONOS_CUDA_CHECK_LAUNCH("gather_rows");
}

}  // namespace chronos::cuda
