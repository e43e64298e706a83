// embed_rows: the embedding lookup, one block per token converting its table row to f32 (block
// types: each thread dequantizes 8 weights at a time, the values of dequantize_row bit for bit).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

template <DType D>
__global__ void embed_rows_kernel(float* out, const void* table, const int32_t* ids, int64_t n_embd) {
  const int64_t t = blockIdx.x;
  float* row_out = out + t * n_embd;  // [n_embd]
  if constexpr (dm::is_block_dtype(D)) {
    const uint8_t* row = dm::block_row<D>(table, ids[t], n_embd);
    for (int64_t i = int64_t(threadIdx.x) * dm::kBlockPiece; i < n_embd; i += int64_t(blockDim.x) * dm::kBlockPiece) {
      float w[dm::kBlockPiece];
      dm::row_weights8<D>(row, i, w);
      for (int j = 0; j < dm::kBlockPiece; ++j) row_out[i + j] = w[j];
    }
  } else {
    const int64_t base = int64_t(ids[t]) * n_embd;
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) row_out[i] = load_weight<D>(table, base + i);
  }
}

}  // namespace

void embed_rows(float* out, const WeightView& table, const int32_t* ids, int64_t n_tokens, cudaStream_t stream) {
  if (n_tokens <= 0 || table.cols <= 0) return;
  require_whole_blocks(table.dtype, table.cols, "embed_rows", "table");
  with_weight_dtype(table.dtype, "embed_rows", [&](auto dtype) {
    embed_rows_kernel<decltype(dtype)::value><<<unsigned(n_tokens), 256, 0, stream>>>(out, table.data, ids, table.cols);
  });
  CHRONOS_CUDA_CHECK_LAUNCH("embed_rows");
}

}  // namespace chronos::cuda
