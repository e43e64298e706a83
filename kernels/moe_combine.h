// The MoE combine, the one formula of both devices: the CPU forward's combine op (src/model/
// cpu_ops.cpp) and the CUDA kernel (kernels/cuda/moe_combine.cu) take a token's factors from
// combine_plan and sum its k slots in order j = 0 .. k-1. Host and device code alike (nvcc builds it
// __host__ __device__), so the host test of it (tests/kernels/test_cuda_device_math.cpp) tests
// both. The soft-gated fallback it implements is DESIGN.md §4.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace chronos {

// Per-token factors of the combine: out = routed_scale * sum_j (available_j ? w_j * y_j : 0)
// + shared_coef * shared.
struct CombinePlan {
  float routed_scale;
  float shared_coef;
};

// weight, missing: the token's k slots. With a shared expert the missing mass moves to it (on top of
// its gate: sigmoid(*shared_gate_logit), or 1 when that is null); without one the available
// experts are rescaled to the token's full mass, and a token with every expert missing gets 0.
CHRONOS_HD inline CombinePlan combine_plan(const float* weight, const uint8_t* missing, int64_t k, bool has_shared,
                                           const float* shared_gate_logit) {
  float total = 0.0f, missing_mass = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    total += weight[j];
    if (missing[j]) missing_mass += weight[j];
  }
  if (has_shared) {
#if defined(__CUDA_ARCH__)
    const float gate = shared_gate_logit != nullptr ? 1.0f / (1.0f + expf(-*shared_gate_logit)) : 1.0f;
#else
    const float gate = shared_gate_logit != nullptr ? 1.0f / (1.0f + std::exp(-*shared_gate_logit)) : 1.0f;
#endif
    return {1.0f, gate + missing_mass};
  }
  if (missing_mass == 0.0f) return {1.0f, 0.0f};
  if (missing_mass >= total) return {0.0f, 0.0f};
  return {total / (total - missing_mass), 0.0f};
}

// Element i of one token's combined output. y: the grouped expert outputs [rows, n_embd]; row,
// weight, missing: the token's k slots; shared: the token's shared-expert row, or null. A missing
// slot's row is never read.
CHRONOS_HD inline float combine_value(const float* y, int64_t n_embd, const int32_t* row, const float* weight,
                                      const uint8_t* missing, int64_t k, CombinePlan plan, const float* shared,
                                      int64_t i) {
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j)
    if (!missing[j]) acc += weight[j] * y[int64_t(row[j]) * n_embd + i];
  acc *= plan.routed_scale;
  if (shared != nullptr) acc += plan.shared_coef * shared[i];
  return acc;
}

}  // namespace chronos
