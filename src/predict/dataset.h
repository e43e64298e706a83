// Routing traces in memory for the predictors: block-0 states, router probabilities and top-k ids
// per token, sequence bounds, the header checks, and the examples both predictors learn from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "chronos/trace_file.h"

namespace chronos::predict {

// The first this many prompt tokens of a sequence feed the IntentClassifier.
inline constexpr int64_t kMaxPromptTokens = 512;

// What every trace of a training or evaluation run must agree on.
struct TraceShape {
  int32_t n_embd = 0;
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  std::vector<int32_t> moe_layers;
  int64_t n_moe_layers() const { return std::ssize(moe_layers); }
};

// Throws Error naming `what` and the first field that differs.
void check_trace_shape(const TraceShape& expected, const TraceHeader& header, const std::string& what);

struct TraceData {
  TraceShape shape;
  std::string model_fingerprint;
  std::vector<float> h0;           // [n_tokens, n_embd]
  std::vector<float> probs;        // [n_tokens, n_moe_layers * n_expert], each layer renormalized to sum 1
  std::vector<int32_t> top_ids;    // [n_tokens, n_moe_layers * n_expert_used]
  std::vector<uint8_t> generated;  // [n_tokens]
  std::vector<int64_t> seq_begin;  // [n_sequences + 1]: token range of each sequence

  int64_t n_tokens() const { return std::ssize(generated); }
  int64_t n_sequences() const { return std::ssize(seq_begin) - 1; }
  int64_t probs_stride() const { return shape.n_moe_layers() * shape.n_expert; }
  int64_t ids_stride() const { return shape.n_moe_layers() * shape.n_expert_used; }
};

// Reads every sequence of `traces` (checksums verified), checking that all headers match the
// first one (n_embd, experts, k, MoE layers) with an Error naming the file otherwise.
TraceData load_trace_data(std::span<const TraceReader> traces);

// The sequences `indices` of `data`, in that order.
TraceData select_sequences(const TraceData& data, std::span<const int64_t> indices);

// xxh64 of the bytes of every trace file, in the given order (16 hex digits).
std::string trace_fingerprint(std::span<const TraceReader> traces);

// The (horizon, MoE layer index) pairs the LookaheadRouter predicts: horizon 0 covers the MoE
// layers after the first one when block 0 is MoE (its routing is known once h0 exists), all of
// them otherwise; horizons 1..K cover every MoE layer.
struct Slot {
  int32_t horizon;
  int32_t moe_index;  // position in moe_layers
};
std::vector<Slot> lookahead_slots(const TraceShape& shape, int32_t horizon);

// Mean over the first min(n_tokens, kMaxPromptTokens) rows, then their element-wise max:
// out[2 * n_embd]. Both halves matter: the mean says what the prompt is about, the max keeps
// features that only a few tokens carry.
void pool_prompt(const float* h0_rows, int64_t n_tokens, int64_t n_embd, float* out);

// One IntentClassifier example per sequence with at least one prompt and one generated token.
struct IntentExamples {
  std::vector<int64_t> sequence;    // [n] index in TraceData
  std::vector<float> features;      // [n, 2 * n_embd] pool_prompt of the prompt tokens
  std::vector<float> target;        // [n, n_moe_layers * n_expert] share of generated top-k picks
  std::vector<float> prompt_share;  // [n, n_moe_layers * n_expert] same over the prompt tokens
  int64_t size() const { return std::ssize(sequence); }
};
IntentExamples intent_examples(const TraceData& data);

// Selection counts of every (MoE layer, expert) over all tokens, normalized per layer:
// [n_moe_layers * n_expert].
std::vector<float> expert_frequency(const TraceData& data);

// Per-feature mean and 1/std over rows of x[n, dim]; the variance floor (1e-4 of the mean
// variance) keeps near-constant features from being blown up into noise.
void input_statistics(const float* x, int64_t n, int64_t dim, std::vector<float>& mean, std::vector<float>& scale);

}  // namespace chronos::predict
