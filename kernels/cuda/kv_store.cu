// kv_store: the new tokens' k and v rows are contiguous in the caches (rows pos0 .. pos0 + n - 1),
// so the store is two device-to-device copies queued on the stream.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {

void kv_store(float* k_cache, float* v_cache, const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
              int64_t pos0, cudaStream_t stream) {
  if (n_tokens <= 0 || kv_dim <= 0) return;
  const size_t bytes = size_t(n_tokens * kv_dim) * sizeof(float);
  CHRONOS_CUDA_CHECK(cudaMemcpyAsync(k_cache + pos0 * kv_dim, k, bytes, cudaMemcpyDeviceToDevice, stream));
  CHRONOS_CUDA_CHECK(cudaMemcpyAsync(v_cache + pos0 * kv_dim, v, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace chronos::cuda
