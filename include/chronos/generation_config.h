// Sampling defaults from a model's generation_config.json (transformers' rules: greedy unless do_sample).
#pragma once

#include <filesystem>

#include "chronos/sampler.h"

namespace chronos {

// Greedy unless the file says do_sample: true; then its temperature/top_k/top_p/min_p/
// repetition_penalty, with transformers' defaults for absent keys (1.0, 50, 1.0, 0, 1.0).
SamplingParams read_generation_defaults(const std::filesystem::path& model_dir);

}  // namespace chronos
