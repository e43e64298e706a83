// ops::rmsnorm, softmax, silu_mul, dot, axpy, dot_rows, axpy_rows (and all_finite): thin wrappers over the active
// kernel table.
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

bool all_finite(const float* x, int64_t n) {
  // x * 0 is NaN exactly when x is NaN or Inf, so one sum answers for all; four partial sums
  // keep the loop from waiting on one addition chain.
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) sums[j] += x[i + j] * 0.0f;
  for (; i < n; ++i) sums[0] += x[i] * 0.0f;
  return sums[0] + sums[1] + sums[2] + sums[3] == 0.0f;
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  CHRONOS_CHECK(n >= 0);
  kernels::active_kernels().axpy(y, alpha, x, n);
}

void dot_rows(float* out, const float* q, const float* rows, int64_t stride, int64_t count, int64_t n, float scale) {
  CHRONOS_CHECK(n >= 0 && count >= 0);
  const auto dot = kernels::active_kernels().dot;
  for (int64_t j = 0; j < count; ++j) out[j] = dot(q, rows + j * stride, n) * scale;
}

void axpy_rows(float* y, const float* alpha, const float* rows, int64_t stride, int64_t count, int64_t n) {
  CHRONOS_CHECK(n >= 0 && count >= 0);
  const auto axpy = kernels::active_kernels().axpy;
  for (int64_t j = 0; j < count; ++j) axpy(y, alpha[j], rows + j * stride, n);
}

void top_k(int32_t* ids, float* weights, const float* probs, int64_t n, int64_t k, bool normalize) {
  for (int64_t slot = 0; slot < k; ++slot) {
    int32_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int64_t prev = 0; prev < slot; ++prev) taken |= ids[prev] == e;
      if (!taken && (best < 0 || probs[e] > probs[best])) best = int32_t(e);
    }
    ids[slot] = best;
    weights[slot] = probs[best];
  }
  if (normalize) {
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += weights[j];
    for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
  }
}

void rope_head(float* x, const float* cos, const float* sin, int64_t n_rot) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

void rope_head_interleaved(float* x, const float* cos, const float* sin, int64_t n_rot) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

}  // namespace chronos::ops
