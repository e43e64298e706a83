// The router kinds on the CPU (router.h); the CUDA runner has one kernel per kind.
#include "model/router.h"

#include "chronos/ops.h"
#include "kernels/router_select.h"

namespace chronos {

SigmoidRouter sigmoid_router(const ModelConfig& c) {
  return {c.n_expert, c.n_expert_used, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling};
}

void route_rows(RouterKind kind, const ModelConfig& c, const float* bias, float* scores, int32_t* ids, float* weights,
                int64_t n) {
  const int64_t n_expert = c.n_expert, k = c.n_expert_used;
  switch (kind) {
    case RouterKind::kSoftmaxTopK:
      for (int64_t t = 0; t < n; ++t) {
        float* probs = scores + t * n_expert;
        ops::softmax(probs, n_expert);
        ops::top_k(ids + t * k, weights + t * k, probs, n_expert, k, c.norm_topk_prob);
      }
      return;
    case RouterKind::kSigmoidBias: {
      const SigmoidRouter r = sigmoid_router(c);
      for (int64_t t = 0; t < n; ++t)
        sigmoid_router_select(r, scores + t * n_expert, bias, ids + t * k, weights + t * k);
      return;
    }
  }
}

}  // namespace chronos
