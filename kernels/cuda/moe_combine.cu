// moe_combine: one block per token; the soft-gated fallback factors and the per-element sum come
// from device_math.h (slots summed in order j = 0 .. k-1, so the result is deterministic).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

__global__ void moe_combine_kernel(float* out, const float* y, const int32_t* row, const float* weight,
                                   const uint8_t* missing, const float* shared, const float* shared_gate_logit,
                                   int64_t k, int64_t n_embd) {
  const int64_t t = blockIdx.x;
  const int32_t* token_row = row + t * k;
  const float* token_weight = weight + t * k;
  const uint8_t* token_missing = missing + t * k;
  // k <= 16 reads per thread: cheaper than a barrier to share the plan.
  const dm::CombinePlan plan = dm::combine_plan(token_weight, token_missing, k, shared != nullptr,
                                                shared_gate_logit != nullptr ? shared_gate_logit + t : nullptr);
  const float* token_shared = shared != nullptr ? shared + t * n_embd : nullptr;
  for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x)
    out[t * n_embd + i] =
        dm::combine_value(y, n_embd, token_row, token_weight, token_missing, k, plan, token_shared, i);
}

}  // namespace

void moe_combine(float* out, const float* y, const int32_t* row, const float* weight, const uint8_t* missing,
                 const float* shared, const float* shared_gate_logit, int64_t n_tokens, int64_t k, int64_t n_embd,
                 cudaStream_t stream) {
  if (n_tokens <= 0 || n_embd <= 0) return;
  moe_combine_kernel<<<unsigned(n_tokens), 256, 0, stream>>>(out, y, row, weight, missing, shared, shared_gate_logit, k,
                                                             n_embd);
  CHRONOS_CUDA_CHECK_LAUNCH("moe_combine");
}

}  // namespace chronos::cuda
