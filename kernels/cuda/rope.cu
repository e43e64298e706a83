// rope: RoPE in place, one thread per rotated pair (token, head, pair), rotate-half or on adjacent
// channels; the index math and the rotations are device_math.h's, tested on the host against the
// CPU model's rope_head.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t n_pairs, int64_t n_heads,
                            int64_t head_dim, int64_t half, int64_t row_stride, int64_t pos0, bool interleaved) {
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < n_pairs;
       flat += int64_t(gridDim.x) * blockDim.x) {
    const dm::RopePair p = dm::rope_pair_index(flat, n_heads, half);
    const int64_t table_row = (pos0 + p.token) * half;
    float* head = x + p.token * row_stride + p.head * head_dim;
    if (interleaved)
      dm::rope_rotate_adjacent(head, cos + table_row, sin + table_row, p.pair);
    else
      dm::rope_rotate_pair(head, cos + table_row, sin + table_row, half, p.pair);
  }
}

}  // namespace

void rope(float* x, const float* cos, const float* sin, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          int64_t n_rot, int64_t row_stride, int64_t pos0, bool interleaved, cudaStream_t stream) {
  if (n_rot % 2 != 0 || n_rot > head_dim)
    throw_cuda_error("CUDA rope: n_rot {} must be even and at most head_dim {}", n_rot, head_dim);
  const int64_t half = n_rot / 2, n_pairs = n_tokens * n_heads * half;
  if (n_pairs <= 0) return;
  rope_kernel<<<grid_for(n_pairs, 256), 256, 0, stream>>>(x, cos, sin, n_pairs, n_heads, head_dim, half, row_stride,
                                                          pos0, interleaved);
  CHRONOS_CUDA_CHECK_LAUNCH("rope");
}

}  // namespace chronos::cuda
