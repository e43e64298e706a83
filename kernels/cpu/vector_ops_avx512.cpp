// AVX-512 (F/BW/VL/DQ) vector ops (the algorithms are in vector_ops_simd.h).
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"  // first: see its note on GCC warnings
#include "kernels/cpu/vector_ops_simd.h"

namespace chronos::kernels {

void rmsnorm_avx512(float* y, const float* x, const float* weight, int64_t n, float eps) {
  rmsnorm_simd<Avx512>(y, x, weight, n, eps);
}
void softmax_avx512(float* x, int64_t n) { softmax_simd<Avx512>(x, n); }
void silu_mul_avx512(float* out, const float* gate, const float* up, int64_t n) {
  silu_mul_simd<Avx512>(out, gate, up, n);
}
float dot_avx512(const float* a, const float* b, int64_t n) { return dot_simd<Avx512>(a, b, n); }
void axpy_avx512(float* y, float alpha, const float* x, int64_t n) { axpy_simd<Avx512>(y, alpha, x, n); }

}  // namespace chronos::kernels
