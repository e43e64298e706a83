// router_group: one thread per token runs kernels/router_select.h, the formula the CPU router runs
// per row (sigmoids or softmax, group-limited choice on the biased scores, unbiased weights,
// scaling).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void router_group_kernel(int32_t* ids, float* weights, float* scores, const float* bias, int64_t n_tokens,
                                    GroupRouter router) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n_tokens) return;
  group_router_select(router, scores + t * router.n_expert, bias, ids + t * router.k, weights + t * router.k);
}

}  // namespace

void router_group(int32_t* ids, float* weights, float* scores, const float* bias, int64_t n_tokens,
                  const GroupRouter& router, cudaStream_t stream) {
  if (router.k < 1 || router.k > router.n_expert)
    throw_cuda_error("CUDA router_group: k = {} with {} experts", router.k, router.n_expert);
  if (n_tokens <= 0) return;
  const auto blocks = unsigned((n_tokens + kThreads - 1) / kThreads);
  router_group_kernel<<<blocks, kThreads, 0, stream>>>(ids, weights, scores, bias, n_tokens, router);
  CHRONOS_CUDA_CHECK_LAUNCH("router_group");
}

}  // namespace chronos::cuda
