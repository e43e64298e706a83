// router_topk: one block per token. Softmax with block reductions (max, then sum of exp), then
// every expert's rank in the descending order (device_math.h: ties to the lower index) is computed
// by its own thread; ranks below k are the selected slots. Renormalization sums in slot order.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kThreads = 256;

// probs may alias logits: each element is read and written by the same thread, its read before
// the reductions' barriers and its write after them.
__global__ void router_topk_kernel(int32_t* ids, float* weights, float* probs, const float* logits, int64_t n_expert,
                                   int64_t k, bool norm_topk) {
  extern __shared__ float shared_mem[];
  float* p = shared_mem;              // [n_expert]
  float* slot_weight = p + n_expert;  // [k]
  __shared__ float scratch[kWarpSize];
  const int64_t t = blockIdx.x;
  const float* token_logits = logits + t * n_expert;

  float max_value = -INFINITY;
  for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    p[e] = token_logits[e];
    max_value = fmaxf(max_value, p[e]);
  }
  max_value = block_max(max_value, scratch);
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    p[e] = dm::exp_f32(p[e] - max_value);
    sum += p[e];
  }
  sum = block_sum(sum, scratch);
  const float inv_sum = 1.0f / sum;
  for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    p[e] *= inv_sum;
    probs[t * n_expert + e] = p[e];
  }
  __syncthreads();  // every probability is in shared memory before ranks compare them

  for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    const int64_t rank = dm::top_k_rank(p, n_expert, e);
    if (rank < k) {
      ids[t * k + rank] = int32_t(e);
      slot_weight[rank] = p[e];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (norm_topk) dm::renormalize_top_k(slot_weight, k);
    for (int64_t j = 0; j < k; ++j) weights[t * k + j] = slot_weight[j];
  }
}

}  // namespace

void router_topk(int32_t* ids, float* weights, float* probs, const float* logits, int64_t n_tokens, int64_t n_expert,
                 int64_t k, bool norm_topk, cudaStream_t stream) {
  if (k < 1 || k > n_expert) throw_cuda_error("CUDA router_topk: k = {} with {} experts", k, n_expert);
  if (n_tokens <= 0) return;
  const size_t shared_bytes = size_t(n_expert + k) * sizeof(float);
  router_topk_kernel<<<unsigned(n_tokens), kThreads, shared_bytes, stream>>>(ids, weights, probs, logits, n_expert, k,
                                                                             norm_topk);
  CHRONOS_CUDA_CHECK_LAUNCH("router_topk");
}

}  // namespace chronos::cuda
