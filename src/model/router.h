// The router of a MoE layer, a contract every RouterKind keeps on every device: from the router
// logits of n rows it chooses each row's experts and their weights, and leaves the scores that the
// route observers (predictors, traces) record.
#pragma once

#include <cstdint>

#include "chronos/model_config.h"
#include "kernels/router_select.h"

namespace chronos {

// scores: [n, n_expert], the router logits on entry and the kind's scores on return (softmax top-k:
// and softmax group-limited: the probabilities; sigmoid + bias: the sigmoids, without the bias). bias: the layer's
// selection bias [n_expert] (sigmoid kinds), or null. ids: [n, k] each row's experts, distinct, most preferred first
// (ties to the lower index). weights: [n, k] what the combine multiplies each expert's output by.
void route_rows(RouterKind kind, const ModelConfig& config, const float* bias, float* scores, int32_t* ids,
                float* weights, int64_t n);

// The config's group-limited router of `kind` (kSigmoidBias or kSoftmaxGroupMax).
GroupRouter group_router(const ModelConfig& config, RouterKind kind);

}  // namespace chronos
