// embed_rows: the embedding lookup, one block per token converting its table row to f32.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

template <DType D>
__global__ void embed_rows_kernel(float* out, const void* table, const int32_t* ids, int64_t n_embd) {
  const int64_t t = blockIdx.x;
  const int64_t base = int64_t(ids[t]) * n_embd;
  for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) out[t * n_embd + i] = load_weight<D>(table, base + i);
}

}  // namespace

void embed_rows(float* out, const WeightView& table, const int32_t* ids, int64_t n_tokens, cudaStream_t stream) {
  if (n_tokens <= 0 || table.cols <= 0) return;
  with_weight_dtype(table.dtype, "embed_rows", [&](auto dtype) {
    embed_rows_kernel<decltype(dtype)::value><<<unsigned(n_tokens), 256, 0, stream>>>(out, table.data, ids, table.cols);
  });
  CHRONOS_CUDA_CHECK_LAUNCH("embed_rows");
}

}  // namespace chronos::cuda
