// The group-limited routers of one token, the one formula of both devices: the CPU router
// (src/model/router.cpp) runs it per row, the CUDA kernel (kernels/cuda/router_group.cu) per
// thread. Host and device code alike. RouterKind::kSigmoidBias (DeepSeek-V3 / GLM-4.5 /
// MiniMax-M2) and RouterKind::kSoftmaxGroupMax (DeepSeek-V2's group_limited_greedy and greedy).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace chronos {

// The shape of a group-limited router: k of n_expert experts, chosen within the topk_group best of
// n_group equal groups (n_group 1: no groups), weights renormalized when `normalize`, then times
// `scale`. Sigmoid scores (a group's score: the sum of its two best biased scores), or with
// `softmax` softmax probabilities (a group's score: its best probability; no bias).
struct GroupRouter {
  int64_t n_expert, k, n_group, topk_group;
  bool normalize;
  float scale;
  bool softmax = false;
};

inline constexpr int64_t kMaxRouterGroups = 64;  // groups are a bit mask

CHRONOS_HD inline float router_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// scores: the token's router logits on entry, its sigmoid scores (softmax probabilities) on return.
// bias: the correction added to the scores for choosing (not for weighting), or null. Experts
// outside the chosen groups are never chosen (as transformers masks them). ids: most preferred
// first, ties to the lower index; a NaN never leaves a slot unwritten.
CHRONOS_HD inline void group_router_select(const GroupRouter& r, float* scores, const float* bias, int32_t* ids,
                                           float* weights) {
  if (r.softmax) {
    float max = -INFINITY, sum = 0.0f;
    for (int64_t e = 0; e < r.n_expert; ++e) max = scores[e] > max ? scores[e] : max;
    for (int64_t e = 0; e < r.n_expert; ++e) {
      scores[e] = router_exp(scores[e] - max);
      sum += scores[e];
    }
    for (int64_t e = 0; e < r.n_expert; ++e) scores[e] /= sum;
  } else {
    for (int64_t e = 0; e < r.n_expert; ++e) scores[e] = 1.0f / (1.0f + router_exp(-scores[e]));
  }
  const auto biased = [&](int64_t e) { return bias != nullptr ? scores[e] + bias[e] : scores[e]; };
  const int64_t group_size = r.n_expert / r.n_group;
  uint64_t allowed = r.n_group >= 64 ? ~uint64_t(0) : (uint64_t(1) << r.n_group) - 1;
  if (r.topk_group < r.n_group) {
    allowed = 0;
    for (int64_t pick = 0; pick < r.topk_group; ++pick) {
      int64_t best = -1;
      float best_score = 0.0f;
      for (int64_t g = 0; g < r.n_group; ++g) {
        if ((allowed >> g) & 1u) continue;
        float top1 = -INFINITY, top2 = -INFINITY;
        for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) {
          const float v = biased(e);
          if (v > top1) {
            top2 = top1;
            top1 = v;
          } else if (v > top2) {
            top2 = v;
          }
        }
        const float score = r.softmax ? top1 : top1 + top2;
        if (best < 0 || score > best_score) {
          best = g;
          best_score = score;
        }
      }
      allowed |= uint64_t(1) << best;
    }
  }
  const auto choice = [&](int64_t e) { return ((allowed >> (e / group_size)) & 1u) ? biased(e) : -INFINITY; };
  for (int64_t slot = 0; slot < r.k; ++slot) {
    int64_t best = -1;
    float best_choice = 0.0f;
    for (int64_t e = 0; e < r.n_expert; ++e) {
      bool taken = false;
      for (int64_t prev = 0; prev < slot; ++prev) taken |= ids[prev] == e;
      if (taken) continue;
      const float v = choice(e);
      if (best < 0 || v > best_choice) {
        best = e;
        best_choice = v;
      }
    }
    ids[slot] = int32_t(best);
    weights[slot] = scores[best];
  }
  if (r.normalize) {
    float sum = 0.0f;
    for (int64_t j = 0; j < r.k; ++j) sum += weights[j];
    for (int64_t j = 0; j < r.k; ++j) weights[j] /= sum + 1e-20f;
  }
  for (int64_t j = 0; j < r.k; ++j) weights[j] *= r.scale;
}

}  // namespace chronos
