// ops::rmsnorm, softmax, silu_mul, dot, axpy: thin wrappers over the active kernel table.
#include "chronos/error.h"
#include "chronos/ops.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chronos::ops {

void rmsnorm(float* y, const float* x, const float* weight, int64_t n, float eps) {
  CHRONOS_CHECK(n > 0);
  kernels::active_kernels().rmsnorm(y, x, weight, n, eps);
}

void softmax(float* x, int64_t n) {
  CHRONOS_CHECK(n >= 0);
  kernels::active_kernels().softmax(x, n);
}

void silu_mul(float* out, const float* gate, const float* up, int64_t n) {
  CHRONOS_CHECK(n >= 0);
  kernels::active_kernels().silu_mul(out, gate, up, n);
}

float dot(const float* a, const float* b, int64_t n) {
  CHRONOS_CHECK(n >= 0);
  return kernels::active_kernels().dot(a, b, n);
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  CHRONOS_CHECK(n >= 0);
  kernels::active_kernels().axpy(y, alpha, x, n);
}

}  // namespace chronos::ops
