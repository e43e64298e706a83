// The router kinds on the CPU (router.h); the CUDA runner has one kernel per kind.
#include "model/router.h"

#include "chronos/ops.h"
#include "kernels/router_select.h"

namespace chronos {

GroupRouter group_router(const ModelConfig& c, RouterKind kind) {
  return {c.n_expert,
          c.n_expert_used,
          c.n_group,
          c.topk_group,
          c.norm_topk_prob,
          c.routed_scaling,
          kind == RouterKind::kSoftmaxGroupMax};
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
    case RouterKind::kSigmoidBias:
    case RouterKind::kSoftmaxGroupMax: {
      const GroupRouter r = group_router(c, kind);
      for (int64_t t = 0; t < n; ++t) group_router_select(r, scores + t * n_expert, bias, ids + t * k, weights + t * k);
      return;
    }
  }
}

}  // namespace chronos
