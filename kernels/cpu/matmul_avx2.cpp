// AVX2 + FMA + F16C matmul kernel and weight-row conversion (the algorithm is in matmul_simd.h).
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/simd_avx2.h"

namespace chronos::kernels {

void matmul_rows_avx2(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                      int64_t row_end) {
  matmul_rows_simd<Avx2>(y, x, w, n_tokens, row_begin, row_end);
}

void row_to_f32_avx2(float* out, const void* row, DType dtype, int64_t n) { row_to_f32_simd<Avx2>(out, row, dtype, n); }

}  // namespace chronos::kernels
