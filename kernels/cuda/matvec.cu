// matvec: y[t, :] = W x[t, :] for the small batches of decode. One warp per output row and up to
// kTokenGroup tokens per pass, so each weight row is read once per 8 tokens; f32 accumulation, a
// warp-shuffle reduction at the end. grid.y walks the groups of 8 tokens. Block-quantized rows are
// dequantized in registers as they are read (cuda_common.cuh, block_row_dot_partial).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // output rows per block

template <DType D>
__global__ void matvec_kernel(float* y, const float* x, const void* w, int64_t rows, int64_t cols, int64_t n_tokens,
                              bool vec) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp leaves; no block barrier follows
  for (int64_t t0 = int64_t(blockIdx.y) * kTokenGroup; t0 < n_tokens; t0 += int64_t(gridDim.y) * kTokenGroup) {
    const int n_rows = int(n_tokens - t0 < kTokenGroup ? n_tokens - t0 : kTokenGroup);
    float acc[kTokenGroup] = {};
    row_dot_partial<D>(acc, w, row, cols, x + t0 * cols, cols, n_rows, vec);
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0 && t < n_rows) y[(t0 + t) * rows + row] = sum;
    }
  }
}

}  // namespace

void matvec(float* y, const float* x, const WeightView& w, int64_t n_tokens, cudaStream_t stream) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  require_whole_blocks(w.dtype, w.cols, "matvec", "weight");
  const bool vec = can_vectorize(w.data, w.dtype, x, w.cols);
  const int64_t groups = (n_tokens + kTokenGroup - 1) / kTokenGroup;
  const dim3 grid(unsigned((w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(groups < 65535 ? groups : 65535));
  with_weight_dtype(w.dtype, "matvec", [&](auto dtype) {
    matvec_kernel<decltype(dtype)::value>
        <<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(y, x, w.data, w.rows, w.cols, n_tokens, vec);
  });
  CHRONOS_CUDA_CHECK_LAUNCH("matvec");
}

}  // namespace chronos::cuda
