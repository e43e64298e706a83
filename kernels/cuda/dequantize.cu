// dequantize_rows: rows of a block-quantized matrix as f32, the weight tiles of Blas::gemm's block
// path. Each thread decodes 8 weights (block_decode.h), so the values are dequantize_row's bit for bit.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

template <DType D>
__global__ void dequantize_rows_kernel(float* out, const void* w, int64_t cols, int64_t row_begin, int64_t n_pieces) {
  const int64_t pieces_per_row = cols / dm::kBlockPiece;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n_pieces; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = p / pieces_per_row, c = (p % pieces_per_row) * dm::kBlockPiece;
    float v[dm::kBlockPiece];
    dm::row_weights8<D>(dm::block_row<D>(w, row_begin + r, cols), c, v);
    float* o = out + r * cols + c;  // [8]
    for (int j = 0; j < dm::kBlockPiece; ++j) o[j] = v[j];
  }
}

}  // namespace

void dequantize_rows(float* out, const WeightView& w, int64_t row_begin, int64_t n_rows, cudaStream_t stream) {
  if (is_block_type(w.dtype)) require_weight_dtype(w.dtype, "dequantize_rows");  // one without CUDA kernels
  if (!dm::is_block_dtype(w.dtype))
    throw_cuda_error("CUDA dequantize_rows: {} is not a block type", dtype_name(w.dtype));
  if (row_begin < 0 || n_rows < 0 || row_begin + n_rows > w.rows)
    throw_cuda_error("CUDA dequantize_rows: rows [{}, {}) outside the matrix's {}", row_begin, row_begin + n_rows,
                     w.rows);
  require_whole_blocks(w.dtype, w.cols, "dequantize_rows", "weight");
  if (n_rows == 0 || w.cols <= 0) return;
  const int64_t n_pieces = n_rows * (w.cols / dm::kBlockPiece);
  with_weight_dtype(w.dtype, "dequantize_rows", [&](auto dtype) {
    constexpr DType D = decltype(dtype)::value;
    if constexpr (dm::is_block_dtype(D))  // the float dtypes were refused above
      dequantize_rows_kernel<D><<<grid_for(n_pieces, 256), 256, 0, stream>>>(out, w.data, w.cols, row_begin, n_pieces);
  });
  CHRONOS_CUDA_CHECK_LAUNCH("dequantize_rows");
}

}  // namespace chronos::cuda
