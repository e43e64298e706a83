// The router of a MoE layer, a contract every RouterKind keeps on every device: from the router
// logits of n rows it chooses each row's experts and their weights, and leaves the scores that the
// route observers (predictors, traces) record.
#pragma once

#include <cstdint>

#include "chronos/model_config.h"

namespace chronos {

// scores: [n, n_expert], the router logits on entry and the kind's scores on return (softmax top-k:
// the probabilities). ids: [n, k] each row's experts, distinct, most preferred first (ties to the
// lower index). weights: [n, k] what the combine multiplies each expert's output by.
void route_rows(RouterKind kind, const ModelConfig& config, float* scores, int32_t* ids, float* weights, int64_t n);

}  // namespace chronos
