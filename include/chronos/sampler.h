// Sampler: repetition penalty, temperature, top-k, top-p, min-p over one logits vector, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace chronos {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax)
  int64_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; HF's rule over every id already seen
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// Checks the ranges and throws UsageError naming the flag.
void validate_sampling(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token. `logits` is modified in place (penalties, warpers); `history` holds
  // the prompt and generated ids (for the repetition penalty). Processing order follows
  // transformers: repetition penalty, temperature, top-k, top-p, min-p, then a draw.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // candidate ids, reused between calls
  std::vector<float> probs_;
  std::vector<uint8_t> seen_;  // ids already penalized in this call
};

}  // namespace chronos
