// AVX2 kernels of the 8-bit-activation path for block-type weights (the algorithm is in matmul_int8_simd.h).
#include "kernels/cpu/matmul_int8_simd.h"
#include "kernels/cpu/quantize_activations_simd.h"

namespace chronos::kernels {

void quantize_activations_avx2(void* out, const float* x, DType weight_dtype, int64_t n_tokens, int64_t cols) {
  quantize_activations_simd(out, x, weight_dtype, n_tokens, cols);
}

void matmul_rows_int8_avx2(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                           int64_t row_end) {
  matmul_rows_int8_simd<Avx2Dot>(y, xq, w, n_tokens, row_begin, row_end);
}

}  // namespace chronos::kernels
