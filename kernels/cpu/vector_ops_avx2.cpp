// AVX2 + FMA + F16C vector ops (the algorithms are in vector_ops_simd.h).
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/vector_ops_simd.h"

namespace chronos::kernels {

void rmsnorm_avx2(float* y, const float* x, const float* weight, int64_t n, float eps) {
  rmsnorm_simd<Avx2>(y, x, weight, n, eps);
}
void softmax_avx2(float* x, int64_t n) { softmax_simd<Avx2>(x, n); }
void silu_mul_avx2(float* out, const float* gate, const float* up, int64_t n) { silu_mul_simd<Avx2>(out, gate, up, n); }
float dot_avx2(const float* a, const float* b, int64_t n) { return dot_simd<Avx2>(a, b, n); }
void axpy_avx2(float* y, float alpha, const float* x, int64_t n) { axpy_simd<Avx2>(y, alpha, x, n); }

}  // namespace chronos::kernels
