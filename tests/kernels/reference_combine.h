// The CPU forward's weighted sum of one token's experts with the soft-gated fallback
// (src/model/moe_block.cpp, DESIGN.md §4), slots in order j = 0..k-1: the reference of the CUDA
// combine in the host tests of device_math.h and in the GPU tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "chronos/ops.h"

namespace chronos::test {

inline std::vector<float> reference_combine(const std::vector<float>& y, int64_t n_embd, const int32_t* row,
                                            const float* weight, const uint8_t* missing, int64_t k, const float* shared,
                                            const float* gate_logit) {
  std::vector<float> out(size_t(n_embd), 0.0f);
  float total = 0.0f, missing_mass = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    total += weight[j];
    if (missing[j])
      missing_mass += weight[j];
    else
      ops::axpy(out.data(), weight[j], y.data() + row[j] * n_embd, n_embd);
  }
  if (shared != nullptr) {
    const float gate = gate_logit != nullptr ? 1.0f / (1.0f + std::exp(-*gate_logit)) : 1.0f;
    ops::axpy(out.data(), gate + missing_mass, shared, n_embd);
  } else if (missing_mass != 0.0f) {
    if (missing_mass >= total) return std::vector<float>(size_t(n_embd), 0.0f);
    const float scale = total / (total - missing_mass);
    for (auto& v : out) v *= scale;
  }
  return out;
}

}  // namespace chronos::test
