// Evaluation of the predictors on traces already in memory (used by train-predictors for the
// held-out metrics and by evaluate_predictors).
#pragma once

#include "chronos/predictors.h"
#include "predict/dataset.h"

namespace chronos::predict {

// `frequency` [n_moe_layers * n_expert] ranks experts for the frequency baseline and fills
// previous-token budgets beyond k; when empty it is computed from `data` (and said so).
PredictorEvaluation evaluate_on(Predictors& predictors, const TraceData& data, const Model* model,
                                const std::vector<float>& frequency);

}  // namespace chronos::predict
