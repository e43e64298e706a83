// attention: causal grouped-query attention, one block per (token, query head); and MLA's absorbed
// attention over the latent cache with the same kernel (latent_attention). Keys are visited in
// tiles of kKeyTile with an online softmax (running max and running sum in f32), the same
// recurrence as the CPU's attend_head, so no buffer grows with the context. Per tile:
//   1. each warp scores keys (q · k over the lanes, times the scale);
//   2. warp 0 takes the tile max, turns scores into exp(s - new_max), rescales the running sum;
//   3. every thread rescales and accumulates its own output dimensions.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kKeyTile = 64;

// Where one block's query, keys, values and output live: grouped-query attention's heads, or MLA's
// latent rows (one kv "head" that every query head reads, values the keys' first value_width).
struct AttentionShape {
  int64_t n_head, group;              // query heads; query heads per kv head
  int64_t q_stride, q_head_stride;    // floats between rows' queries, between heads
  int64_t key_width, value_width;     // floats of a head's key (= its query) and of its value
  int64_t kv_stride, kv_head_stride;  // floats between cache rows, between kv heads in a row
  int64_t out_stride, out_head_stride;
};

__global__ void attention_kernel(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t pos0,
                                 AttentionShape s, int64_t window, float scale, const float* sinks) {
  extern __shared__ float shared_mem[];
  float* q_head = shared_mem;             // [key_width]
  float* acc = shared_mem + s.key_width;  // [value_width], element d owned by thread d % blockDim.x
  __shared__ float tile_p[kKeyTile];      // scores, then exp(score - running max)
  __shared__ float running_max, running_sum, correction;

  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int n_warps = int(blockDim.x) / kWarpSize;
  const int64_t t = blockIdx.x / s.n_head, h = blockIdx.x % s.n_head;
  const int64_t kv_offset = (h / s.group) * s.kv_head_stride;

  for (int64_t d = threadIdx.x; d < s.key_width; d += blockDim.x)
    q_head[d] = q[t * s.q_stride + h * s.q_head_stride + d];
  for (int64_t d = threadIdx.x; d < s.value_width; d += blockDim.x) acc[d] = 0.0f;
  if (threadIdx.x == 0) {
    running_max = -INFINITY;
    running_sum = 0.0f;
  }
  __syncthreads();

  const dm::KeyRange keys = dm::attention_key_range(pos0, t, window);
  for (int64_t tile = keys.first; tile <= keys.last; tile += kKeyTile) {
    const int count = int(keys.last - tile + 1 < kKeyTile ? keys.last - tile + 1 : kKeyTile);
    for (int j = warp; j < count; j += n_warps) {
      const float* key = k_cache + (tile + j) * s.kv_stride + kv_offset;
      float partial = 0.0f;
      for (int64_t d = lane; d < s.key_width; d += kWarpSize) partial += q_head[d] * key[d];
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
    for (int64_t d = threadIdx.x; d < s.value_width; d += blockDim.x) {
      float value = acc[d] * correction;
      for (int j = 0; j < count; ++j) value += tile_p[j] * v_cache[(tile + j) * s.kv_stride + kv_offset + d];
      acc[d] = value;
    }
    __syncthreads();  // tile_p and correction are rewritten by the next tile
  }
  // A sink: one more logit in the denominator (its exp may overflow: the weights go to 0).
  const float sum = sinks != nullptr ? running_sum + dm::exp_f32(sinks[h] - running_max) : running_sum;
  const float inv_sum = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < s.value_width; d += blockDim.x)
    out[t * s.out_stride + h * s.out_head_stride + d] = acc[d] * inv_sum;
}

void launch_attention(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n_tokens,
                      int64_t pos0, const AttentionShape& s, int64_t window, float scale, cudaStream_t stream,
                      const float* sinks = nullptr) {
  const size_t shared_bytes = size_t(s.key_width + s.value_width) * sizeof(float);
  attention_kernel<<<unsigned(n_tokens * s.n_head), kThreads, shared_bytes, stream>>>(out, q, k_cache, v_cache, pos0, s,
                                                                                      window, scale, sinks);
  CHRONOS_CUDA_CHECK_LAUNCH("attention");
}

// MLA's cache rows [latent | k_rot] of the new rows, one thread per value.
__global__ void latent_store_kernel(float* cache, const float* latent, const float* k_rot, int64_t n_tokens,
                                    int64_t rank, int64_t rope, int64_t pos0) {
  const int64_t width = rank + rope;
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < n_tokens * width;
       flat += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = flat / width, c = flat % width;
    cache[(pos0 + t) * width + c] = c < rank ? latent[t * rank + c] : k_rot[t * rope + (c - rank)];
  }
}

// One block per (row, head): q_latent[t, h] = [uk_h q_nope | q_rot].
__global__ void latent_query_kernel(float* q_latent, const float* q, const float* uk, int64_t n_head, int64_t rank,
                                    int64_t rope, int64_t nope) {
  const int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
  const float* qh = q + (t * n_head + h) * (nope + rope);
  float* out = q_latent + (t * n_head + h) * (rank + rope);
  for (int64_t r = threadIdx.x; r < rank + rope; r += blockDim.x) {
    if (r >= rank) {
      out[r] = qh[nope + (r - rank)];
      continue;
    }
    const float* row = uk + (h * rank + r) * nope;
    float sum = 0.0f;
    for (int64_t i = 0; i < nope; ++i) sum += row[i] * qh[i];
    out[r] = sum;
  }
}

// One block per (row, head): out[t, h * v_dim + j] = uv_h[j] · o_latent[t, h].
__global__ void latent_output_kernel(float* out, const float* o_latent, const float* uv, int64_t n_head, int64_t rank,
                                     int64_t v_dim) {
  const int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
  const float* o = o_latent + (t * n_head + h) * rank;
  for (int64_t j = threadIdx.x; j < v_dim; j += blockDim.x) {
    const float* row = uv + (h * v_dim + j) * rank;
    float sum = 0.0f;
    for (int64_t r = 0; r < rank; ++r) sum += row[r] * o[r];
    out[(t * n_head + h) * v_dim + j] = sum;
  }
}

}  // namespace

void attention(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n_tokens, int64_t pos0,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t window, float scale, cudaStream_t stream,
               const float* sinks) {
  if (n_head_kv <= 0 || n_head % n_head_kv != 0)
    throw_cuda_error("CUDA attention: {} query heads do not group over {} kv heads", n_head, n_head_kv);
  if (n_tokens <= 0 || n_head <= 0 || head_dim <= 0) return;
  const int64_t q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
  const AttentionShape s{n_head, n_head / n_head_kv, q_dim, head_dim, head_dim, head_dim,
                         kv_dim, head_dim,           q_dim, head_dim};
  launch_attention(out, q, k_cache, v_cache, n_tokens, pos0, s, window, scale, stream, sinks);
}

void latent_attention(float* out, const float* q, const float* latent, const float* k_rot, float* cache,
                      float* q_latent, float* o_latent, const float* uk, const float* uv, int64_t n_tokens,
                      int64_t pos0, int64_t n_head, int64_t rank, int64_t rope, int64_t nope, int64_t v_dim,
                      float scale, cudaStream_t stream) {
  if (n_tokens <= 0 || n_head <= 0) return;
  if (rank <= 0 || rope <= 0 || nope <= 0 || v_dim <= 0)
    throw_cuda_error("CUDA latent_attention: rank {}, rope {}, nope {}, v_dim {}", rank, rope, nope, v_dim);
  const int64_t width = rank + rope;
  latent_store_kernel<<<grid_for(n_tokens * width, 256), 256, 0, stream>>>(cache, latent, k_rot, n_tokens, rank, rope,
                                                                           pos0);
  CHRONOS_CUDA_CHECK_LAUNCH("latent_store");
  const auto blocks = unsigned(n_tokens * n_head);
  latent_query_kernel<<<blocks, kThreads, 0, stream>>>(q_latent, q, uk, n_head, rank, rope, nope);
  CHRONOS_CUDA_CHECK_LAUNCH("latent_query");
  // Every query head reads the one latent row per position: its key all of it, its value the latent.
  const AttentionShape s{n_head, n_head, n_head * width, width, width, rank, width, 0, n_head * rank, rank};
  launch_attention(o_latent, q_latent, cache, cache, n_tokens, pos0, s, 0, scale, stream);
  latent_output_kernel<<<blocks, kThreads, 0, stream>>>(out, o_latent, uv, n_head, rank, v_dim);
  CHRONOS_CUDA_CHECK_LAUNCH("latent_output");
}

}  // namespace chronos::cuda
