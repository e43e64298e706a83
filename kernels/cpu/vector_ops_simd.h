// Generic SIMD vector ops (rmsnorm, softmax, silu_mul, dot, axpy) over a traits type V
// (simd_avx2.h, simd_avx512.h). Included only by vector_ops_avx2.cpp / vector_ops_avx512.cpp.
#pragma once

#include <cstdint>

namespace chronos::kernels {
// Internal linkage, and builtins rather than <cmath>: no inline library function gets compiled
// here for the ISA and then shared with code that runs on any CPU.
namespace {

// Four independent accumulators hide the FMA latency; they are combined in a fixed order.
template <class V>
float dot_simd(const float* a, const float* b, int64_t n) {
  using Vec = typename V::Vec;
  constexpr int64_t kStep = 4 * V::kLanes;
  Vec acc0 = V::zero(), acc1 = V::zero(), acc2 = V::zero(), acc3 = V::zero();
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    acc0 = V::fmadd(V::load(a + i), V::load(b + i), acc0);
    acc1 = V::fmadd(V::load(a + i + V::kLanes), V::load(b + i + V::kLanes), acc1);
    acc2 = V::fmadd(V::load(a + i + 2 * V::kLanes), V::load(b + i + 2 * V::kLanes), acc2);
    acc3 = V::fmadd(V::load(a + i + 3 * V::kLanes), V::load(b + i + 3 * V::kLanes), acc3);
  }
  for (; i + V::kLanes <= n; i += V::kLanes) acc0 = V::fmadd(V::load(a + i), V::load(b + i), acc0);
  if (i < n) {
    const int rest = int(n - i);
    acc1 = V::fmadd(V::load_tail(a + i, rest), V::load_tail(b + i, rest), acc1);
  }
  return V::reduce_add(V::add(V::add(acc0, acc1), V::add(acc2, acc3)));
}

template <class V>
void axpy_simd(float* y, float alpha, const float* x, int64_t n) {
  const typename V::Vec a = V::set1(alpha);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(y + i, V::fmadd(a, V::load(x + i), V::load(y + i)));
  if (i < n) {
    const int rest = int(n - i);
    V::store_tail(y + i, V::fmadd(a, V::load_tail(x + i, rest), V::load_tail(y + i, rest)), rest);
  }
}

template <class V>
void rmsnorm_simd(float* y, const float* x, const float* weight, int64_t n, float eps) {
  const float sum_sq = dot_simd<V>(x, x, n);
  const typename V::Vec scale = V::set1(1.0f / __builtin_sqrtf(sum_sq / float(n) + eps));
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes)
    V::store(y + i, V::mul(V::mul(V::load(x + i), scale), V::load(weight + i)));
  if (i < n) {
    const int rest = int(n - i);
    V::store_tail(y + i, V::mul(V::mul(V::load_tail(x + i, rest), scale), V::load_tail(weight + i, rest)), rest);
  }
}

template <class V>
void softmax_simd(float* x, int64_t n) {
  using Vec = typename V::Vec;
  if (n <= 0) return;
  // Padding lanes of the tail must not win the max: fill them with x[0].
  Vec max_v = V::set1(x[0]);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) max_v = V::max(max_v, V::load(x + i));
  float max_value = V::reduce_max(max_v);
  for (; i < n; ++i) max_value = __builtin_fmaxf(max_value, x[i]);

  const Vec shift = V::set1(max_value);
  Vec sum_v = V::zero();
  for (i = 0; i + V::kLanes <= n; i += V::kLanes) {
    const Vec e = V::exp(V::sub(V::load(x + i), shift));
    V::store(x + i, e);
    sum_v = V::add(sum_v, e);
  }
  if (i < n) {
    const int rest = int(n - i);
    // Lanes past n load 0, and exp(0 - max) must not be summed: recompute them to zero.
    const Vec e = V::exp(V::sub(V::load_tail(x + i, rest), shift));
    V::store_tail(x + i, e, rest);
    sum_v = V::add(sum_v, V::load_tail(x + i, rest));
  }
  const Vec inv_sum = V::set1(1.0f / V::reduce_add(sum_v));
  for (i = 0; i + V::kLanes <= n; i += V::kLanes) V::store(x + i, V::mul(V::load(x + i), inv_sum));
  if (i < n) {
    const int rest = int(n - i);
    V::store_tail(x + i, V::mul(V::load_tail(x + i, rest), inv_sum), rest);
  }
}

template <class V>
void silu_mul_simd(float* out, const float* gate, const float* up, int64_t n) {
  using Vec = typename V::Vec;
  const Vec one = V::set1(1.0f);
  const auto silu_mul = [&](Vec g, Vec u) { return V::mul(V::div(g, V::add(one, V::exp(V::sub(V::zero(), g)))), u); };
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(out + i, silu_mul(V::load(gate + i), V::load(up + i)));
  if (i < n) {
    const int rest = int(n - i);
    V::store_tail(out + i, silu_mul(V::load_tail(gate + i, rest), V::load_tail(up + i, rest)), rest);
  }
}

}  // namespace
}  // namespace chronos::kernels
