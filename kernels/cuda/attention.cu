// attention: causal grouped-query attention, one block per (token, query head). Keys are visited in
// tiles of kKeyTile with an online softmax (running max and running sum in f32), the same
// recurrence as the CPU's attend_head, so no buffer grows with the context. Per tile:
//   1. each warp scores keys (q · k over the lanes, times 1/sqrt(head_dim));
//   2. warp 0 takes the tile max, turns scores into exp(s - new_max), rescales the running sum;
//   3. every thread rescales and accumulates its own output dimensions.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kKeyTile = 64;

__global__ void attention_kernel(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t pos0,
                                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t window, float scale) {
  extern __shared__ float shared_mem[];
  float* q_head = shared_mem;          // [head_dim]
  float* acc = shared_mem + head_dim;  // [head_dim], element d owned by thread d % blockDim.x
  __shared__ float tile_p[kKeyTile];   // scores, then exp(score - running max)
  __shared__ float running_max, running_sum, correction;

  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int n_warps = int(blockDim.x) / kWarpSize;
  const int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
  const int64_t q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
  const int64_t kv_offset = (h / (n_head / n_head_kv)) * head_dim;

  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    q_head[d] = q[t * q_dim + h * head_dim + d];
    acc[d] = 0.0f;
  }
  if (threadIdx.x == 0) {
    running_max = -INFINITY;
    running_sum = 0.0f;
  }
  __syncthreads();

  const dm::KeyRange keys = dm::attention_key_range(pos0, t, window);
  for (int64_t tile = keys.first; tile <= keys.last; tile += kKeyTile) {
    const int count = int(keys.last - tile + 1 < kKeyTile ? keys.last - tile + 1 : kKeyTile);
    for (int j = warp; j < count; j += n_warps) {
      const float* key = k_cache + (tile + j) * kv_dim + kv_offset;
      float partial = 0.0f;
      for (int64_t d = lane; d < head_dim; d += kWarpSize) partial += q_head[d] * key[d];
      const float score = warp_sum(partial) * scale;
      if (lane == 0) tile_p[j] = score;
    }
    __syncthreads();
    if (warp == 0) {
      const float old_max = running_max;  // read by every lane before lane 0 updates it below
      float tile_max = -INFINITY;
      for (int j = lane; j < count; j += kWarpSize) tile_max = fmaxf(tile_max, tile_p[j]);
      const float new_max = fmaxf(old_max, warp_max(tile_max));
      float tile_sum = 0.0f;
      for (int j = lane; j < count; j += kWarpSize) {
        tile_p[j] = dm::exp_f32(tile_p[j] - new_max);
        tile_sum += tile_p[j];
      }
      tile_sum = warp_sum(tile_sum);
      if (lane == 0) {
        correction = dm::exp_f32(old_max - new_max);  // 0 on the first tile
        running_sum = running_sum * correction + tile_sum;
        running_max = new_max;
      }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float value = acc[d] * correction;
      for (int j = 0; j < count; ++j) value += tile_p[j] * v_cache[(tile + j) * kv_dim + kv_offset + d];
      acc[d] = value;
    }
    __syncthreads();  // tile_p and correction are rewritten by the next tile
  }
  const float inv_sum = 1.0f / running_sum;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) out[t * q_dim + h * head_dim + d] = acc[d] * inv_sum;
}

}  // namespace

void attention(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n_tokens, int64_t pos0,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t window, cudaStream_t stream) {
  if (n_head_kv <= 0 || n_head % n_head_kv != 0)
    throw_cuda_error("CUDA attention: {} query heads do not group over {} kv heads", n_head, n_head_kv);
  if (n_tokens <= 0 || n_head <= 0 || head_dim <= 0) return;
  const float scale = 1.0f / std::sqrt(float(head_dim));  // as the CPU computes it
  const size_t shared_bytes = size_t(2 * head_dim) * sizeof(float);
  attention_kernel<<<unsigned(n_tokens * n_head), kThreads, shared_bytes, stream>>>(
      out, q, k_cache, v_cache, pos0, n_head, n_head_kv, head_dim, window, scale);
  CHRONOS_CUDA_CHECK_LAUNCH("attention");
}

}  // namespace chronos::cuda
